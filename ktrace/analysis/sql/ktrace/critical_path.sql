-- ktrace.critical_path: for each phase instance in time order, the last finisher's slice plus the wait that
-- follows it on its lane; and each phase's share of the kernel's wall time. Definitions:
-- docs/analysis-schema.md.
--
-- Shares add up to about 1 for a kernel whose phases follow each other; they can add up to more when phases
-- run at the same time on different warp groups (each instance's chain is counted in full).

INCLUDE PERFETTO MODULE ktrace.waits;

-- One row per phase instance, ordered by step (its last finisher's end, then phase order, then k).
CREATE PERFETTO TABLE ktrace_critical_path(
  -- Position in time order, from 0.
  step LONG,
  phase STRING,
  phase_index LONG,
  k LONG,
  -- The instance's last finisher.
  last_block LONG,
  last_group LONG,
  last_lane LONG,
  -- Its slice, ns.
  begin_ns LONG,
  end_ns LONG,
  dur_ns LONG,
  -- The wait after it on its lane (0 when its lane has no later slice or the next one overlaps), ns.
  wait_ns LONG,
  -- Phase of the lane's next slice (NULL when none).
  next_phase STRING
) AS
WITH last_wait AS MATERIALIZED (
  SELECT id, next_phase, gap_ns FROM ktrace_lane_wait
  WHERE +id IN (SELECT last_slice_id FROM ktrace_phase_instance)
)
SELECT
  ROW_NUMBER() OVER (ORDER BY i.end_ns, i.phase_index, i.k) - 1 AS step,
  i.phase,
  i.phase_index,
  i.k,
  i.last_block,
  i.last_group,
  i.last_lane,
  s.ts AS begin_ns,
  i.end_ns,
  i.end_ns - s.ts AS dur_ns,
  CASE WHEN w.gap_ns >= 0 THEN w.gap_ns ELSE 0 END AS wait_ns,
  w.next_phase
FROM ktrace_phase_instance i
JOIN last_wait w ON w.id = i.last_slice_id
JOIN _ktrace_slice s ON s.id = i.last_slice_id;

-- Each phase's part of the critical path and its share of the kernel's wall time.
CREATE PERFETTO TABLE ktrace_critical_path_share(
  phase STRING,
  phase_index LONG,
  -- Instances on the path.
  instances LONG,
  -- Sum of the last finishers' slices, of the waits after them, and of both, ns.
  dur_ns LONG,
  wait_ns LONG,
  total_ns LONG,
  -- total_ns / the kernel's wall time (ktrace_kernel.wall_ns); NULL when that is 0.
  share DOUBLE
) AS
SELECT
  c.phase,
  c.phase_index,
  COUNT(*) AS instances,
  SUM(c.dur_ns) AS dur_ns,
  SUM(c.wait_ns) AS wait_ns,
  SUM(c.dur_ns + c.wait_ns) AS total_ns,
  CASE WHEN kernel.wall_ns > 0 THEN SUM(c.dur_ns + c.wait_ns) * 1.0 / kernel.wall_ns END AS share
FROM ktrace_critical_path c, ktrace_kernel kernel
GROUP BY c.phase;
