-- ktrace.critical_path: a backward walk from the kernel's end that tiles its wall time with the slices it
-- waited for and the gaps between them, and each phase's (and each remainder's) share of the wall.
-- Definitions: docs/analysis-structure.md.
--
-- Each top-level slice has a predecessor (what it waited for): the last finisher of its lane's previous
-- slice's instance when it began at or after that instance's latest end ('wait'), else that previous slice
-- ('lane_gap'); a lane's first slice on a block of a later wave waits for the block that freed its SM
-- ('block_switch'). The walk is a WITH RECURSIVE whose every step is a few id lookups.

INCLUDE PERFETTO MODULE ktrace.waits;

-- Per later-wave block (id = the block): the block before it on its SM (among the others with end_ns <= its
-- begin_ns, the latest end, then the lowest block). A running MAX over the SM's ends in time order, ends
-- before begins.
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
SELECT w.block AS id, MIN(b.block) AS before_block
FROM wave w
JOIN ktrace_block b ON b.sm = w.sm AND b.end_ns = w.before_end AND b.block != w.block
GROUP BY w.block
ORDER BY w.block;

-- Per block that is some block's predecessor (id = the block): its top-level slice with the latest end
-- (then the lowest lane, then the lowest id).
CREATE PERFETTO TABLE _ktrace_block_last_top AS
WITH latest AS MATERIALIZED (
  SELECT block, MAX(end_ts) AS end_ts
  FROM _ktrace_top_slice
  -- The EXISTS is evaluated once: a launch without a later wave (a persistent kernel) reads no slice.
  WHERE EXISTS (SELECT 1 FROM _ktrace_block_before)
    AND +block IN (SELECT before_block FROM _ktrace_block_before)
  GROUP BY block
),
pick AS (
  SELECT t.block, MIN(t.lane * 4294967296 + t.id) AS key
  FROM _ktrace_top_slice t JOIN latest l ON l.block = t.block AND l.end_ts = t.end_ts
  WHERE EXISTS (SELECT 1 FROM _ktrace_block_before)
  GROUP BY t.block
)
SELECT block AS id, key % 4294967296 AS slice_id FROM pick ORDER BY block;

-- The walk: one row per slice on the path, from the kernel's end backwards (n = 0 at the end): the cursor t
-- when it was reached, and the gap after it (up to gap_end, of gap_kind, before a slice of next_phase).
-- Each step finds the slice's predecessor with id lookups:
--   the lane's previous top-level slice p (the row before it in _ktrace_top_slice, on the same lane), when
--     the slice began at or after the latest end of p's instance: that instance's last finisher ('wait');
--     else p ('lane_gap');
--   without p, on a block of a later wave: the latest-ending top-level slice of the block before it on its
--     SM ('block_switch');
--   else (and for a nested slice, a last finisher inside another slice) none: the walk ends.
-- `later` counts the parts after the row's gap (so that the parts are numbered without a window). A chain
-- longer than the top-level slices would repeat one: it stops there.
CREATE PERFETTO TABLE _ktrace_walk AS
WITH RECURSIVE walk(n, id, t, gap_end, gap_kind, next_phase, later) AS (
  SELECT 0, (SELECT id FROM _ktrace_top_slice ORDER BY end_ts DESC, lane, id LIMIT 1), kernel.end_ns,
    NULL, NULL, NULL, 0
  FROM ktrace_kernel kernel
  WHERE EXISTS (SELECT 1 FROM _ktrace_top_slice)
  UNION ALL
  SELECT w.n + 1, x.pred_id, MIN(q.end_ts, x.ts, w.t), MIN(x.ts, w.t), x.kind, x.phase,
    w.later + IIF(w.gap_end > w.t, 1, 0) + 1
  FROM walk w
  JOIN (
    SELECT
      t.id, t.ts, (SELECT phase FROM _ktrace_phase_order WHERE phase_index = t.inst / 4294967296) AS phase,
      CASE
        WHEN p.id IS NULL THEN bt.slice_id
        WHEN t.ts >= i.end_ns THEN l.slice_id
        ELSE p.id
      END AS pred_id,
      CASE
        WHEN p.id IS NULL THEN 'block_switch'
        WHEN t.ts >= i.end_ns THEN 'wait'
        ELSE 'lane_gap'
      END AS kind
    FROM _ktrace_top_slice t
    LEFT JOIN _ktrace_top_slice p ON p._auto_id = t._auto_id - 1 AND p.lane = t.lane
    LEFT JOIN _ktrace_instance_agg i ON i.id = p.inst
    LEFT JOIN _ktrace_last l ON l.id = p.inst
    LEFT JOIN _ktrace_block_before bb ON bb.id = t.block
    LEFT JOIN _ktrace_block_last_top bt ON bt.id = bb.before_block
  ) x ON x.id = w.id
  JOIN _ktrace_slice q ON q.id = x.pred_id
  WHERE w.n < (SELECT COUNT(*) FROM _ktrace_top_slice)
)
SELECT n, id, t, gap_end, gap_kind, next_phase, later FROM walk;

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
  SELECT w.n, w.t, w.gap_end, w.gap_kind, w.next_phase, w.later, MIN(s.ts, w.t) AS slice_begin, o.phase,
    o.phase_index, s.inst % 4294967296 AS k, s.block, s.grp, s.lane
  FROM _ktrace_walk w
  JOIN _ktrace_slice s ON s.id = w.id
  JOIN _ktrace_phase_order o ON o.phase_index = s.inst / 4294967296
),
-- Parts counted from the end: `rev` = 0 for the latest.
parts AS (
  -- The slices.
  SELECT later + IIF(gap_end > t, 1, 0) AS rev, 'slice' AS kind, phase, phase_index, k, block, grp, lane,
    slice_begin AS begin_ns, t AS end_ns, NULL AS next_phase
  FROM visit
  UNION ALL
  -- The gaps after them (omitted when empty).
  SELECT later, gap_kind, phase, phase_index, k, block, grp, lane, t, gap_end, next_phase
  FROM visit
  WHERE gap_end > t
  UNION ALL
  -- The time before the first slice.
  SELECT later + IIF(gap_end > t, 1, 0) + 1, 'lead_in', NULL, NULL, NULL, NULL, NULL, NULL, kernel.begin_ns,
    slice_begin, NULL
  FROM visit, ktrace_kernel kernel
  WHERE n = (SELECT MAX(n) FROM _ktrace_walk) AND slice_begin > kernel.begin_ns
)
SELECT
  (SELECT MAX(rev) FROM parts) - rev AS step,
  kind,
  phase,
  phase_index,
  k,
  block AS last_block,
  grp AS last_group,
  lane AS last_lane,
  begin_ns,
  end_ns,
  end_ns - begin_ns AS dur_ns,
  next_phase
FROM parts
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
