-- ktrace.waits: on each lane, the gap from the end of a top-level slice to the begin of the lane's next
-- top-level slice (the synchronization the method keeps outside the phase it ends), per slice and per phase
-- boundary. Time inside an enclosing slice is not idle, so nested slices (depth > 0) have no waits.
-- Definitions: docs/analysis-schema.md, docs/analysis-structure.md.

INCLUDE PERFETTO MODULE ktrace.phases;

-- Every top-level phase slice (depth 0) with the lane's next top-level slice (by begin, then slice id: the
-- row after it in _ktrace_top_slice, ktrace.slices) and the gap to it, in slice id order. Join
-- ktrace_phase_slice USING (id) for the slice's other columns.
CREATE PERFETTO VIEW ktrace_lane_wait(
  -- Slice id, phase, instance, block and group of the slice.
  id LONG,
  phase STRING,
  k LONG,
  block LONG,
  grp LONG,
  -- Phase of the lane's next slice (NULL on the lane's last slice).
  next_phase STRING,
  -- Begin of the lane's next slice - this slice's end, ns: the wait when >= 0; negative when the next slice
  -- begins inside this one; NULL on the lane's last slice.
  gap_ns LONG
) AS
SELECT a.id, o.phase, a.inst % 4294967296 AS k, a.block, a.grp, p.phase AS next_phase, n.ts - a.end_ts AS gap_ns
FROM _ktrace_top_slice a
JOIN _ktrace_phase_order o ON o.phase_index = a.inst / 4294967296
LEFT JOIN _ktrace_top_slice n ON n._auto_id = a._auto_id + 1 AND n.lane = a.lane
LEFT JOIN _ktrace_phase_order p ON p.phase_index = n.inst / 4294967296
ORDER BY a.id;

-- Waits summarized per phase boundary ("compute -> reduce"): the gaps >= 0 from a slice of `phase` to the
-- next slice on the same lane, of `next_phase` (read from _ktrace_top_pair, ktrace.slices, which holds them
-- as columns that the table's filter can test).
CREATE PERFETTO TABLE ktrace_wait(
  phase STRING,
  next_phase STRING,
  phase_index LONG,
  next_phase_index LONG,
  -- Waits counted, and their sum, ns.
  count LONG,
  sum_ns LONG,
  -- Mean, shortest, median, 90th percentile (lower, as in ktrace.phases) and longest wait, ns.
  mean_ns DOUBLE,
  min_ns LONG,
  p50_ns LONG,
  p90_ns LONG,
  max_ns LONG,
  -- Where the longest wait was (longest, then lowest block, group and k).
  max_block LONG,
  max_group LONG,
  max_k LONG
) AS
WITH summary AS MATERIALIZED (
  SELECT
    phase_index, next_phase_index,
    COUNT(*) AS count,
    SUM(gap_ns) AS sum_ns,
    MIN(gap_ns) AS min_ns,
    CAST(percentile_disc(gap_ns, 0.5) AS INT) AS p50_ns,
    CAST(percentile_disc(gap_ns, 0.9) AS INT) AS p90_ns,
    MAX(gap_ns) AS max_ns
  FROM _ktrace_top_pair
  WHERE gap_ns >= 0
  GROUP BY phase_index, next_phase_index
),
-- Among the waits as long as the boundary's longest, the lowest (lane, k): lane order is block, group.
longest AS (
  SELECT m.phase_index, m.next_phase_index,
    MIN((w.block * (SELECT n FROM _ktrace_groups) + w.grp) * (SELECT MAX(k) + 1 FROM _ktrace_instance_agg)
      + w.prev_inst % 4294967296) AS place,
    w.block, w.grp, w.prev_inst % 4294967296 AS k
  -- Each boundary's longest waits found by the table's own filter (CROSS JOIN: the boundaries outside).
  FROM summary m
  CROSS JOIN _ktrace_top_pair w
    ON w.phase_index = m.phase_index AND w.next_phase_index = m.next_phase_index AND w.gap_ns = m.max_ns
  GROUP BY m.phase_index, m.next_phase_index
)
SELECT
  a.phase,
  b.phase AS next_phase,
  w.phase_index,
  w.next_phase_index,
  w.count,
  w.sum_ns,
  w.sum_ns * 1.0 / w.count AS mean_ns,
  w.min_ns,
  w.p50_ns,
  w.p90_ns,
  w.max_ns,
  l.block AS max_block,
  l.grp AS max_group,
  l.k AS max_k
FROM summary w
JOIN longest l USING (phase_index, next_phase_index)
JOIN _ktrace_phase_order a ON a.phase_index = w.phase_index
JOIN _ktrace_phase_order b ON b.phase_index = w.next_phase_index
ORDER BY w.phase_index, w.next_phase_index;
