-- ktrace.critical_path: a backward walk from the kernel's end that tiles its wall time with the slices it
-- waited for and the gaps between them, and each phase's (and each remainder's) share of the wall.
-- Definitions: docs/analysis-structure.md.
--
-- Each top-level slice has a predecessor (what it waited for): the last finisher of its lane's previous
-- slice's instance when it began after that instance's latest end ('wait'), else that previous slice
-- ('lane_gap'); a lane's first slice on a block of a later wave waits for the block that freed its SM
-- ('block_switch'). The walk is a WITH RECURSIVE whose every step is an id lookup.

INCLUDE PERFETTO MODULE ktrace.waits;

-- Per later-wave block: the block before it on its SM (among the others with end_ns <= its begin_ns, the
-- latest end, then the lowest block). A running MAX over the SM's ends in time order, ends before begins.
CREATE PERFETTO TABLE _ktrace_block_before AS
WITH events AS (
  SELECT sm, end_ns AS ts, 0 AS is_begin, block, end_ns, 0 AS dur_ns FROM ktrace_block WHERE sm >= 0
  UNION ALL
  SELECT sm, begin_ns AS ts, 1 AS is_begin, block, NULL AS end_ns, dur_ns FROM ktrace_block WHERE later_wave
),
running AS MATERIALIZED (
  SELECT sm, block, dur_ns, ts AS begin_ns, is_begin,
    MAX(end_ns) OVER (PARTITION BY sm ORDER BY ts, is_begin ROWS UNBOUNDED PRECEDING) AS before_end
  FROM events
),
-- A block of length 0 has its own end among those before its begin: look for the others' only.
wave AS MATERIALIZED (
  SELECT sm, block, CASE WHEN dur_ns > 0 THEN before_end ELSE (
    SELECT MAX(b.end_ns) FROM ktrace_block b
    WHERE b.sm = r.sm AND b.end_ns <= r.begin_ns AND b.block != r.block) END AS before_end
  FROM running r
  WHERE is_begin
)
SELECT w.block, MIN(b.block) AS before_block
FROM wave w
JOIN ktrace_block b ON b.sm = w.sm AND b.end_ns = w.before_end AND b.block != w.block
GROUP BY w.block;

-- Per block that is some block's predecessor: its top-level slice with the latest end (then the lowest lane,
-- then the lowest id).
CREATE PERFETTO TABLE _ktrace_block_last_top AS
WITH latest AS MATERIALIZED (
  SELECT block, MAX(end_ts) AS end_ts
  FROM _ktrace_top_slice
  WHERE +block IN (SELECT before_block FROM _ktrace_block_before)
  GROUP BY block
),
pick AS (
  SELECT t.block, MIN(t.lane * 4294967296 + t.id) AS key
  FROM _ktrace_top_slice t JOIN latest l ON l.block = t.block AND l.end_ts = t.end_ts
  GROUP BY t.block
)
SELECT block, key % 4294967296 AS id FROM pick;

-- Every top-level slice with its predecessor (NULL: none) and the gap kind. Nested slices have none.
CREATE PERFETTO TABLE _ktrace_pred AS
WITH linked AS (
  SELECT
    t.id,
    CASE
      WHEN p.sync THEN l.id
      WHEN p.id IS NOT NULL THEN p.prev_id
      ELSE bt.id
    END AS pred_id,
    CASE
      WHEN p.sync THEN 'wait'
      WHEN p.id IS NOT NULL THEN 'lane_gap'
      WHEN bt.id IS NOT NULL THEN 'block_switch'
    END AS kind
  FROM _ktrace_top_slice t
  LEFT JOIN _ktrace_top_prev p ON p.id = t.id
  LEFT JOIN _ktrace_last l ON l.phase = p.prev_phase AND l.k = p.prev_k
  LEFT JOIN _ktrace_block_before bb ON p.id IS NULL AND bb.block = t.block
  LEFT JOIN _ktrace_block_last_top bt ON bt.block = bb.before_block
)
SELECT linked.id, linked.pred_id, q.end_ts AS pred_end, linked.kind
FROM linked
LEFT JOIN _ktrace_slice q ON q.id = linked.pred_id
ORDER BY linked.id;

-- The walk: one row per slice on the path, from the kernel's end backwards (n = 0 at the end), with the
-- cursor t when it was reached. A chain longer than the top-level slices would repeat one: it stops there.
CREATE PERFETTO TABLE _ktrace_walk AS
WITH RECURSIVE walk(n, id, t) AS (
  SELECT 0, (SELECT id FROM _ktrace_top_slice ORDER BY end_ts DESC, lane, id LIMIT 1), kernel.end_ns
  FROM ktrace_kernel kernel
  WHERE EXISTS (SELECT 1 FROM _ktrace_top_slice)
  UNION ALL
  SELECT w.n + 1, p.pred_id, MIN(p.pred_end, MIN(s.ts, w.t))
  FROM walk w
  JOIN _ktrace_pred p ON p.id = w.id
  JOIN _ktrace_slice s ON s.id = w.id
  WHERE p.pred_id IS NOT NULL AND w.n < (SELECT COUNT(*) FROM _ktrace_top_slice)
)
SELECT n, id, t FROM walk;

-- One row per part of the path, in time order: a slice, or a gap before it.
CREATE PERFETTO TABLE ktrace_critical_path(
  -- Position in time order, from 0 at the kernel's begin.
  step LONG,
  -- 'slice', 'wait', 'lane_gap', 'block_switch' or 'lead_in'.
  kind STRING,
  -- The slice's phase and instance (for a gap: the predecessor's, the slice the time is spent after; NULL for
  -- lead_in).
  phase STRING,
  phase_index LONG,
  k LONG,
  -- Its block, group and lane.
  last_block LONG,
  last_group LONG,
  last_lane LONG,
  -- The part, ns.
  begin_ns LONG,
  end_ns LONG,
  dur_ns LONG,
  -- For a gap: the phase of the slice that waited; NULL otherwise.
  next_phase STRING
) AS
WITH visit AS MATERIALIZED (
  SELECT w.n, w.id, w.t, MIN(s.ts, w.t) AS slice_begin, p.pred_id, p.pred_end, p.kind, s.phase
  FROM _ktrace_walk w
  JOIN _ktrace_slice s ON s.id = w.id
  -- A nested slice (a last finisher inside another slice) has no predecessor: the walk stops there.
  LEFT JOIN _ktrace_pred p ON p.id = w.id
),
parts AS (
  -- The slices.
  SELECT n, 0 AS sub, 'slice' AS kind, id AS slice_id, slice_begin AS begin_ns, t AS end_ns, NULL AS next_phase
  FROM visit
  UNION ALL
  -- The gaps before them.
  SELECT n, 1 AS sub, kind, pred_id, MIN(pred_end, slice_begin), slice_begin, phase
  FROM visit
  WHERE pred_id IS NOT NULL AND pred_end < slice_begin
  UNION ALL
  -- The time before the first slice.
  SELECT v.n, 1 AS sub, 'lead_in', NULL, kernel.begin_ns, v.slice_begin, NULL
  FROM visit v, ktrace_kernel kernel
  WHERE v.pred_id IS NULL AND v.slice_begin > kernel.begin_ns
)
SELECT
  ROW_NUMBER() OVER (ORDER BY parts.n DESC, parts.sub DESC) - 1 AS step,
  parts.kind,
  s.phase,
  o.phase_index,
  s.k,
  s.block AS last_block,
  s.grp AS last_group,
  s.lane AS last_lane,
  parts.begin_ns,
  parts.end_ns,
  parts.end_ns - parts.begin_ns AS dur_ns,
  parts.next_phase
FROM parts
LEFT JOIN _ktrace_slice s ON s.id = parts.slice_id
LEFT JOIN _ktrace_phase_order o ON o.phase = s.phase
ORDER BY step;

-- The wall time's parts on the critical path: each phase on it (its slices, and the waits after it), then
-- the remainders that are not zero ('lead_in', 'lane_gap', 'block_switch'). total_ns adds up to the wall.
CREATE PERFETTO TABLE ktrace_critical_path_share(
  -- 'phase', or the remainder: 'lead_in', 'lane_gap', 'block_switch'.
  part STRING,
  -- The phase (NULL for a remainder).
  phase STRING,
  phase_index LONG,
  -- Slice parts of the phase (0 for a remainder), and their sum, ns (for a remainder: the sum of its parts).
  instances LONG,
  dur_ns LONG,
  -- 'wait' parts after the phase, ns (0 for a remainder).
  wait_ns LONG,
  -- dur_ns + wait_ns, ns.
  total_ns LONG,
  -- total_ns / the kernel's wall time (ktrace_kernel.wall_ns); NULL when that is 0.
  share DOUBLE,
  -- Row order: phases by phase_index, then the remainders.
  sort_key LONG
) AS
WITH per_phase AS (
  SELECT
    phase,
    MIN(phase_index) AS phase_index,
    SUM(kind = 'slice') AS instances,
    SUM(IIF(kind = 'slice', dur_ns, 0)) AS dur_ns,
    SUM(IIF(kind = 'wait', dur_ns, 0)) AS wait_ns
  FROM ktrace_critical_path
  WHERE kind IN ('slice', 'wait')
  GROUP BY phase
),
remainder AS (
  SELECT kind, 0 AS instances, SUM(dur_ns) AS dur_ns,
    CASE kind WHEN 'lead_in' THEN 0 WHEN 'lane_gap' THEN 1 ELSE 2 END AS position
  FROM ktrace_critical_path
  WHERE kind IN ('lead_in', 'lane_gap', 'block_switch')
  GROUP BY kind
  HAVING SUM(dur_ns) > 0
),
parts AS (
  SELECT 'phase' AS part, phase, phase_index, instances, dur_ns, wait_ns, phase_index AS sort_key
  FROM per_phase
  UNION ALL
  SELECT kind, NULL, NULL, instances, dur_ns, 0, (SELECT phases FROM ktrace_kernel) + position
  FROM remainder
)
SELECT
  parts.part,
  parts.phase,
  parts.phase_index,
  parts.instances,
  parts.dur_ns,
  parts.wait_ns,
  parts.dur_ns + parts.wait_ns AS total_ns,
  CASE WHEN kernel.wall_ns > 0 THEN (parts.dur_ns + parts.wait_ns) * 1.0 / kernel.wall_ns END AS share,
  parts.sort_key
FROM parts, ktrace_kernel kernel
ORDER BY parts.sort_key;
