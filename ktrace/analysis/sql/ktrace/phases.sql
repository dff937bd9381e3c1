-- ktrace.phases: phase instances (the k-th slice of a phase on every lane that ran it), per-phase summaries
-- with last-finisher stability, and per-lane figures. Definitions: docs/analysis-schema.md.
--
-- Last finisher of an instance: the lane with the latest end; ties (same end timestamp, common with a
-- 32 ns timer) go to the lowest block, then the lowest group, i.e. the lowest lane. p50/p90 are the
-- "lower" percentiles: the value at 0-based index floor(p * (n - 1)) of the n sorted durations
-- (SQLite's percentile_disc; numpy's method='lower').
--
-- Built from GROUP BYs rather than window functions over all slices: in the trace processor a window
-- over every slice costs about ten times a GROUP BY. The GROUP BYs that pick the last finisher read
-- "bare" columns (id, block, ...) next to a single MIN() or MAX(): SQLite takes them from the row that
-- holds the minimum or maximum.

INCLUDE PERFETTO MODULE ktrace.slices;

-- Phases in the order they first begin (then by name), numbered from 0.
CREATE PERFETTO TABLE _ktrace_phase_order AS
SELECT phase, ROW_NUMBER() OVER (ORDER BY first_ts, phase) - 1 AS phase_index
FROM (SELECT phase, MIN(ts) AS first_ts FROM ktrace_phase_slice GROUP BY phase);

-- Per instance and end timestamp: how many lanes end then, which blocks, and the lowest such lane.
CREATE PERFETTO TABLE _ktrace_end_group AS
SELECT
  phase, k, end_ts,
  MIN(lane) AS lane, id, block, grp, sm,
  COUNT(*) AS lanes,
  json_group_array(block) AS blocks
FROM ktrace_phase_slice
GROUP BY phase, k, end_ts;

-- Per instance: the last finisher (its slice id), how many lanes tie with it and their blocks.
CREATE PERFETTO TABLE _ktrace_last AS
SELECT phase, k, MAX(end_ts) AS end_ts, lane, id, block, grp, sm, lanes AS tied_lanes, blocks
FROM _ktrace_end_group
GROUP BY phase, k
ORDER BY id;

-- Per instance: the latest end among the lanes that did not end last (NULL with a single end time).
CREATE PERFETTO TABLE _ktrace_runner_up AS
SELECT phase, k, MAX(end_ts) AS end_ts
FROM _ktrace_end_group
WHERE +id NOT IN (SELECT id FROM _ktrace_last)
GROUP BY phase, k;

-- Per instance: the duration and time figures.
CREATE PERFETTO TABLE _ktrace_instance_agg AS
SELECT
  phase,
  k,
  COUNT(*) AS lanes,
  MIN(dur) AS min_dur_ns,
  CAST(percentile_disc(dur, 0.5) AS INT) AS p50_dur_ns,
  CAST(percentile_disc(dur, 0.9) AS INT) AS p90_dur_ns,
  MAX(dur) AS max_dur_ns,
  SUM(dur) AS sum_dur_ns,
  MIN(ts) AS begin_ns,
  MAX(ts) AS last_begin_ns,
  MIN(end_ts) AS first_end_ns,
  MAX(end_ts) AS end_ns
FROM ktrace_phase_slice
GROUP BY phase, k;

-- One row per phase instance.
CREATE PERFETTO TABLE ktrace_phase_instance(
  -- Phase name.
  phase STRING,
  -- Position of the phase in time order (by first begin), from 0.
  phase_index LONG,
  -- Instance: the k-th occurrence of the phase on each lane, from 0.
  k LONG,
  -- Lanes that ran this instance.
  lanes LONG,
  -- Shortest, median, 90th percentile (lower) and longest slice, ns.
  min_dur_ns LONG,
  p50_dur_ns LONG,
  p90_dur_ns LONG,
  max_dur_ns LONG,
  -- Sum and mean of the slices' durations, ns.
  sum_dur_ns LONG,
  mean_dur_ns DOUBLE,
  -- max_dur_ns / mean_dur_ns (computed as max * lanes / sum); NULL when every slice has dur 0.
  imbalance DOUBLE,
  -- Earliest begin and latest end, ns.
  begin_ns LONG,
  end_ns LONG,
  -- end_ns - begin_ns.
  wall_ns LONG,
  -- wall_ns - max_dur_ns: what start skew or a slow release costs.
  excess_ns LONG,
  -- Latest begin - earliest begin; latest end - earliest end.
  start_skew_ns LONG,
  end_skew_ns LONG,
  -- The last finisher (tie rule above) and its slice.
  last_block LONG,
  last_group LONG,
  last_sm LONG,
  last_lane LONG,
  last_slice_id LONG,
  -- Lanes whose end equals the latest end (1 = no tie).
  tied_last_lanes LONG,
  -- Latest end - the latest end of the other lanes (0 on a tie; NULL with one lane), ns.
  last_lead_ns LONG
) AS
SELECT
  a.phase,
  o.phase_index,
  a.k,
  a.lanes,
  a.min_dur_ns,
  a.p50_dur_ns,
  a.p90_dur_ns,
  a.max_dur_ns,
  a.sum_dur_ns,
  a.sum_dur_ns * 1.0 / a.lanes AS mean_dur_ns,
  CASE WHEN a.sum_dur_ns > 0 THEN a.max_dur_ns * a.lanes * 1.0 / a.sum_dur_ns END AS imbalance,
  a.begin_ns,
  a.end_ns,
  a.end_ns - a.begin_ns AS wall_ns,
  a.end_ns - a.begin_ns - a.max_dur_ns AS excess_ns,
  a.last_begin_ns - a.begin_ns AS start_skew_ns,
  a.end_ns - a.first_end_ns AS end_skew_ns,
  l.block AS last_block,
  l.grp AS last_group,
  l.sm AS last_sm,
  l.lane AS last_lane,
  l.id AS last_slice_id,
  l.tied_lanes AS tied_last_lanes,
  CASE WHEN l.tied_lanes > 1 THEN 0 ELSE l.end_ts - r.end_ts END AS last_lead_ns
FROM _ktrace_instance_agg a
JOIN _ktrace_phase_order o USING (phase)
JOIN _ktrace_last l USING (phase, k)
LEFT JOIN _ktrace_runner_up r USING (phase, k);

-- The blocks among each instance's tied last finisher(s) (one row per block; one block when no tie).
CREATE PERFETTO TABLE _ktrace_tied_last AS
SELECT DISTINCT l.phase, l.k, j.value AS block
FROM _ktrace_last l, json_each(l.blocks) j;

-- Per phase, the block that is among the last finishers in the most instances (then the lowest block).
CREATE PERFETTO TABLE _ktrace_top_last AS
SELECT phase, block AS top_last_block, n AS top_last_count
FROM (
  SELECT phase, block, COUNT(*) AS n,
    ROW_NUMBER() OVER (PARTITION BY phase ORDER BY COUNT(*) DESC, block) AS rn
  FROM _ktrace_tied_last
  GROUP BY phase, block
)
WHERE rn = 1;

-- Each instance's last block as stability counts it: the phase's top block when it is among the tied last
-- finishers, else the lowest tied block. So a tie never counts as the last finisher moving.
CREATE PERFETTO TABLE _ktrace_stable_last AS
SELECT
  t.phase,
  t.k,
  CASE WHEN MAX(t.block = top.top_last_block) THEN top.top_last_block ELSE MIN(t.block) END AS block
FROM _ktrace_tied_last t
JOIN _ktrace_top_last top USING (phase)
GROUP BY t.phase, t.k;

-- One row per phase: sums and means over its instances, and last-finisher stability.
CREATE PERFETTO TABLE ktrace_phase(
  -- Phase name.
  phase STRING,
  -- Position in time order (by first begin), from 0.
  phase_index LONG,
  -- Warp groups that ran the phase, ascending, comma-separated: '0', '1', '0,1'.
  groups STRING,
  -- Instances (k = 0 .. instances - 1 where every lane ran every instance) and slices.
  instances LONG,
  slices LONG,
  -- Sum over instances of the slowest slice, and its mean per instance, ns.
  sum_max_dur_ns LONG,
  mean_max_dur_ns DOUBLE,
  -- Sum of all slices' durations, and the mean slice duration, ns.
  sum_dur_ns LONG,
  mean_dur_ns DOUBLE,
  -- mean_max_dur_ns / mean_dur_ns: the phase's load imbalance over all its instances.
  imbalance DOUBLE,
  -- The largest instance imbalance.
  max_imbalance DOUBLE,
  -- Sums, means and maxima over instances of wall, excess, start skew and end skew, ns.
  sum_wall_ns LONG,
  sum_excess_ns LONG,
  mean_excess_ns DOUBLE,
  max_excess_ns LONG,
  mean_start_skew_ns DOUBLE,
  max_start_skew_ns LONG,
  mean_end_skew_ns DOUBLE,
  max_end_skew_ns LONG,
  -- Mean over instances (with more than one lane) of the last finisher's lead over the next, ns.
  mean_last_lead_ns DOUBLE,
  -- Last-finisher stability: the block among the last finishers in the most instances, in how many,
  -- how many distinct blocks were last (ties resolved towards the top block), and instances with a tie.
  top_last_block LONG,
  top_last_count LONG,
  distinct_last_blocks LONG,
  tied_instances LONG
) AS
WITH agg AS (
  SELECT
    phase,
    MIN(phase_index) AS phase_index,
    COUNT(*) AS instances,
    SUM(lanes) AS slices,
    SUM(max_dur_ns) AS sum_max_dur_ns,
    SUM(sum_dur_ns) AS sum_dur_ns,
    MAX(imbalance) AS max_imbalance,
    SUM(wall_ns) AS sum_wall_ns,
    SUM(excess_ns) AS sum_excess_ns,
    MAX(excess_ns) AS max_excess_ns,
    SUM(start_skew_ns) AS sum_start_skew_ns,
    MAX(start_skew_ns) AS max_start_skew_ns,
    SUM(end_skew_ns) AS sum_end_skew_ns,
    MAX(end_skew_ns) AS max_end_skew_ns,
    SUM(last_lead_ns) AS sum_last_lead_ns,
    COUNT(last_lead_ns) AS lead_instances,
    SUM(tied_last_lanes > 1) AS tied_instances
  FROM ktrace_phase_instance
  GROUP BY phase
),
stable AS (
  SELECT phase, COUNT(DISTINCT block) AS distinct_last_blocks FROM _ktrace_stable_last GROUP BY phase
),
phase_groups AS (
  SELECT phase, GROUP_CONCAT(grp, ',') AS groups
  FROM (SELECT phase, grp FROM ktrace_phase_slice GROUP BY phase, grp ORDER BY phase, grp)
  GROUP BY phase
)
SELECT
  agg.phase,
  agg.phase_index,
  phase_groups.groups,
  agg.instances,
  agg.slices,
  agg.sum_max_dur_ns,
  agg.sum_max_dur_ns * 1.0 / agg.instances AS mean_max_dur_ns,
  agg.sum_dur_ns,
  agg.sum_dur_ns * 1.0 / agg.slices AS mean_dur_ns,
  CASE WHEN agg.sum_dur_ns > 0
    THEN (agg.sum_max_dur_ns * 1.0 / agg.instances) / (agg.sum_dur_ns * 1.0 / agg.slices)
  END AS imbalance,
  agg.max_imbalance,
  agg.sum_wall_ns,
  agg.sum_excess_ns,
  agg.sum_excess_ns * 1.0 / agg.instances AS mean_excess_ns,
  agg.max_excess_ns,
  agg.sum_start_skew_ns * 1.0 / agg.instances AS mean_start_skew_ns,
  agg.max_start_skew_ns,
  agg.sum_end_skew_ns * 1.0 / agg.instances AS mean_end_skew_ns,
  agg.max_end_skew_ns,
  CASE WHEN agg.lead_instances > 0 THEN agg.sum_last_lead_ns * 1.0 / agg.lead_instances END
    AS mean_last_lead_ns,
  top.top_last_block,
  top.top_last_count,
  stable.distinct_last_blocks,
  agg.tied_instances
FROM agg
JOIN _ktrace_top_last top USING (phase)
JOIN stable USING (phase)
JOIN phase_groups USING (phase);

-- One row per (phase, lane): the lane's slices of that phase over all instances.
CREATE PERFETTO TABLE ktrace_phase_lane(
  phase STRING,
  phase_index LONG,
  block LONG,
  grp LONG,
  lane LONG,
  -- SM id of the lane's block (the largest seen; -1 when it cannot be trusted).
  sm LONG,
  -- Instances the lane ran, and its slices' shortest, mean, longest and total duration, ns.
  instances LONG,
  min_dur_ns LONG,
  mean_dur_ns DOUBLE,
  max_dur_ns LONG,
  sum_dur_ns LONG,
  -- Instances in which this lane was the last finisher (tie rule above).
  last_count LONG
) AS
WITH lane_agg AS (
  SELECT
    phase, block, grp, block * (SELECT n FROM _ktrace_groups) + grp AS lane, MAX(sm) AS sm,
    COUNT(*) AS instances, MIN(dur) AS min_dur_ns, MAX(dur) AS max_dur_ns, SUM(dur) AS sum_dur_ns
  FROM _ktrace_slice
  GROUP BY phase, block, grp
),
last_counts AS (
  SELECT phase, lane, COUNT(*) AS n FROM _ktrace_last GROUP BY phase, lane
)
SELECT
  a.phase,
  o.phase_index,
  a.block,
  a.grp,
  a.lane,
  a.sm,
  a.instances,
  a.min_dur_ns,
  a.sum_dur_ns * 1.0 / a.instances AS mean_dur_ns,
  a.max_dur_ns,
  a.sum_dur_ns,
  COALESCE(c.n, 0) AS last_count
FROM lane_agg a
JOIN _ktrace_phase_order o USING (phase)
LEFT JOIN last_counts c USING (phase, lane);
