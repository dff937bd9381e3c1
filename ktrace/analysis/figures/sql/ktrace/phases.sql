-- ktrace.phases: phase instances (the k-th slice of a phase on every lane that ran it), per-phase summaries
-- with last-finisher stability, and per-lane figures. Definitions: docs/analysis-schema.md.
--
-- Last finisher of an instance: the lane with the latest end; ties (same end timestamp, common with a
-- 32 ns timer) go to the lowest lane of the phase's top_last_block when that block is among the tied, else
-- to the lowest lane (docs/analysis-structure.md: "the one tie rule"), so the instance and the phase name
-- the same block. p50/p90 are the "lower" percentiles: the value at 0-based index floor(p * (n - 1)) of
-- the n sorted durations (SQLite's percentile_disc; numpy's method='lower').
--
-- Built from GROUP BYs rather than window functions over all slices: in the trace processor a window
-- over every slice costs about ten times a GROUP BY (the lane order and k come from sorted tables and row
-- positions: ktrace.slices). The aggregates that pick the last finisher read "bare" columns (id, block, ...)
-- next to a single MIN() or MAX(): SQLite takes them from the row that holds the minimum or maximum.
-- Joins on an instance are id lookups: the per-instance tables carry its key `inst` = phase_index * 2^32 + k
-- (a column of _ktrace_slice) in their `id` column (a join on (phase, k) costs a hundred times more).

INCLUDE PERFETTO MODULE ktrace.blocks;

-- Per instance: the duration and time figures.
CREATE PERFETTO TABLE _ktrace_instance_agg AS
SELECT a.id, a.id / 4294967296 AS phase_index,
  (SELECT o.phase FROM _ktrace_phase_order o WHERE o.phase_index = a.id / 4294967296) AS phase,
  a.id % 4294967296 AS k, a.lanes, a.min_dur_ns, a.p50_dur_ns, a.p90_dur_ns, a.max_dur_ns,
  a.sum_dur_ns, a.begin_ns, a.max_begin_ns, a.p50_begin_ns, a.first_end_ns, a.end_ns, a.depth
FROM (
  SELECT
    inst AS id,
    COUNT(*) AS lanes,
    MIN(dur) AS min_dur_ns,
    CAST(percentile_disc(dur, 0.5) AS INT) AS p50_dur_ns,
    CAST(percentile_disc(dur, 0.9) AS INT) AS p90_dur_ns,
    MAX(dur) AS max_dur_ns,
    SUM(dur) AS sum_dur_ns,
    MIN(ts) AS begin_ns,
    MAX(ts) AS max_begin_ns,
    -- percentile_disc works in doubles: take it of offsets from the kernel's begin, exact below 2^53 ns.
    CAST(percentile_disc(ts - (SELECT begin_ns FROM ktrace_kernel), 0.5) AS INT)
      + (SELECT begin_ns FROM ktrace_kernel) AS p50_begin_ns,
    MIN(end_ts) AS first_end_ns,
    MAX(end_ts) AS end_ns,
    MIN(depth) AS depth
  FROM _ktrace_slice
  GROUP BY inst
) a
ORDER BY a.id;

-- An instance's slices are a lookup of their key (`inst`), so the per-instance figures below that need the
-- instance's latest end read only its slices, once it is known.
CREATE PERFETTO INDEX _ktrace_slice_inst ON _ktrace_slice(inst);

-- Per instance (id = its key): the latest end, the lowest lane that ends then (slice_id: its slice, and its
-- block, group and SM: the "bare" columns next to MIN), how many lanes tie and their blocks (a JSON array).
CREATE PERFETTO TABLE _ktrace_latest AS
SELECT
  id, phase, k, end_ts,
  json_extract(t, '$[0]') AS lane,
  json_extract(t, '$[1]') AS slice_id,
  json_extract(t, '$[2]') AS block,
  json_extract(t, '$[3]') AS grp,
  json_extract(t, '$[4]') AS sm,
  json_extract(t, '$[5]') AS tied_lanes,
  json_extract(t, '$[6]') AS blocks
FROM (
  SELECT a.id, a.phase, a.k, a.end_ns AS end_ts,
    (SELECT json_array(MIN(s.lane), s.id, s.block, s.grp, s.sm, COUNT(*), json_group_array(s.block))
     FROM _ktrace_slice s WHERE s.inst = a.id AND s.end_ts = a.end_ns) AS t
  FROM _ktrace_instance_agg a
)
ORDER BY id;

-- Per instance: the latest end among the lanes that did not end last (none with a single end time).
CREATE PERFETTO TABLE _ktrace_runner_up AS
SELECT id, end_ts
FROM (
  SELECT a.id, (SELECT MAX(s.end_ts) FROM _ktrace_slice s WHERE s.inst = a.id AND +s.end_ts < a.end_ns) AS end_ts
  FROM _ktrace_instance_agg a
)
WHERE end_ts IS NOT NULL
ORDER BY id;

-- The blocks among each instance's tied last finisher(s) (one row per block; one block when no tie).
CREATE PERFETTO TABLE _ktrace_tied_last AS
SELECT DISTINCT l.phase, l.k, j.value AS block
FROM _ktrace_latest l, json_each(l.blocks) j;

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

-- Per instance (id = its key): the last finisher by the one tie rule (slice_id: its slice). The top block's
-- lowest lane at the latest end when the top block is among the tied, else the lowest tied lane.
CREATE PERFETTO TABLE _ktrace_last AS
WITH top_block_end AS MATERIALIZED (
  -- The top block's slices, per instance and end: the lowest lane (a bare column next to MIN).
  SELECT inst, end_ts, MIN(lane) AS lane, id, block, grp, sm
  FROM _ktrace_slice
  WHERE (inst / 4294967296, block) IN (
    SELECT o.phase_index, t.top_last_block FROM _ktrace_top_last t JOIN _ktrace_phase_order o USING (phase))
  GROUP BY inst, end_ts
),
chosen AS (
  SELECT
    l.id, l.phase, l.k, l.end_ts, l.tied_lanes,
    COALESCE(t.id, l.slice_id) AS slice_id,
    COALESCE(t.lane, l.lane) AS lane,
    COALESCE(t.block, l.block) AS block,
    COALESCE(t.grp, l.grp) AS grp,
    COALESCE(t.sm, l.sm) AS sm
  FROM _ktrace_latest l
  LEFT JOIN top_block_end t ON t.inst = l.id AND t.end_ts = l.end_ts
)
SELECT c.id, c.phase, c.k, c.end_ts, c.lane, c.slice_id, c.block, c.grp, c.sm, s.ts, s.dur, c.tied_lanes
FROM chosen c JOIN _ktrace_slice s ON s.id = c.slice_id
ORDER BY c.id;

-- Per instance: its top-level slices with a previous top-level slice on their lane; of those, the ones that
-- began at or after the latest end of the previous slice's instance (a synchronization); and the shortest
-- and longest gap from the previous slice's end (the lead-in). One row of _ktrace_top_pair per such slice.
CREATE PERFETTO TABLE _ktrace_instance_prev AS
SELECT
  q.inst AS id,
  COUNT(*) AS prev_lanes,
  SUM(q.ts >= i.end_ns) AS sync_lanes,
  MIN(q.gap_ns) AS lead_in_min_ns,
  MAX(q.gap_ns) AS lead_in_max_ns
-- CROSS JOIN keeps the planner from looping over the instances outside (a scan of every pair per instance).
FROM _ktrace_top_pair q
CROSS JOIN _ktrace_instance_agg i ON i.id = q.prev_inst
GROUP BY q.inst
ORDER BY q.inst;

-- Per instance: slices on blocks of a later wave.
CREATE PERFETTO TABLE _ktrace_instance_wave AS
SELECT inst AS id, COUNT(*) AS later_wave_lanes
FROM _ktrace_slice
WHERE +block IN (SELECT block FROM ktrace_block WHERE later_wave)
GROUP BY inst
ORDER BY inst;

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
  last_lead_ns LONG,
  -- The smallest depth among its slices (0: top-level on some lane).
  depth LONG,
  -- Lower median of the slices' begins, ns.
  p50_begin_ns LONG,
  -- The last finisher's slice begin and duration, ns.
  last_begin_ns LONG,
  last_dur_ns LONG,
  -- Top-level slices with a previous top-level slice on their lane, and of those the ones that began at or
  -- after the latest end of that slice's instance (they waited for every lane of it).
  prev_lanes LONG,
  sync_lanes LONG,
  -- Shortest and longest gap from the previous top-level slice's end to the begin, ns (NULL without
  -- prev_lanes).
  lead_in_min_ns LONG,
  lead_in_max_ns LONG,
  -- Slices on blocks of a later wave (ktrace_block.later_wave).
  later_wave_lanes LONG
) AS
SELECT
  a.phase,
  a.phase_index,
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
  a.max_begin_ns - a.begin_ns AS start_skew_ns,
  a.end_ns - a.first_end_ns AS end_skew_ns,
  l.block AS last_block,
  l.grp AS last_group,
  l.sm AS last_sm,
  l.lane AS last_lane,
  l.slice_id AS last_slice_id,
  l.tied_lanes AS tied_last_lanes,
  CASE WHEN l.tied_lanes > 1 THEN 0 ELSE l.end_ts - r.end_ts END AS last_lead_ns,
  a.depth,
  a.p50_begin_ns,
  l.ts AS last_begin_ns,
  l.dur AS last_dur_ns,
  COALESCE(p.prev_lanes, 0) AS prev_lanes,
  COALESCE(p.sync_lanes, 0) AS sync_lanes,
  p.lead_in_min_ns,
  p.lead_in_max_ns,
  COALESCE(w.later_wave_lanes, 0) AS later_wave_lanes
FROM _ktrace_instance_agg a
JOIN _ktrace_last l ON l.id = a.id
LEFT JOIN _ktrace_runner_up r ON r.id = a.id
LEFT JOIN _ktrace_instance_prev p ON p.id = a.id
LEFT JOIN _ktrace_instance_wave w ON w.id = a.id
ORDER BY a.id;

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
  tied_instances LONG,
  -- The smallest depth among its slices.
  depth LONG,
  -- Distinct lanes that ran it, and lanes of its groups (in ktrace_lane) that ran none of it.
  lanes LONG,
  idle_lanes LONG,
  -- Over the lanes that ran it: the fewest and most slices of it on one lane.
  min_lane_instances LONG,
  max_lane_instances LONG,
  -- Instances with lanes >= 2 whose every lane synchronized (sync_lanes = lanes), and instances with slices
  -- on blocks of a later wave.
  sync_instances LONG,
  wave_instances LONG
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
    SUM(tied_last_lanes > 1) AS tied_instances,
    MIN(depth) AS depth,
    SUM(lanes >= 2 AND sync_lanes = lanes) AS sync_instances,
    SUM(later_wave_lanes > 0) AS wave_instances
  FROM ktrace_phase_instance
  GROUP BY phase
),
-- Each instance's last block is the tie rule's, so a tie never counts as the last finisher moving.
stable AS (
  SELECT phase, COUNT(DISTINCT block) AS distinct_last_blocks FROM _ktrace_last GROUP BY phase
),
lane_counts AS (
  SELECT phase, COUNT(*) AS lanes, MIN(instances) AS min_lane_instances, MAX(instances) AS max_lane_instances
  FROM _ktrace_phase_lane_agg
  GROUP BY phase
),
group_phase AS MATERIALIZED (
  SELECT phase, grp FROM _ktrace_phase_lane_agg GROUP BY phase, grp ORDER BY phase, grp
),
group_lanes AS (
  SELECT grp, COUNT(*) AS n FROM ktrace_lane GROUP BY grp
),
phase_groups AS (
  SELECT phase, GROUP_CONCAT(grp, ',') AS groups, SUM(n) AS group_lanes
  FROM (SELECT g.phase, g.grp, l.n FROM group_phase g JOIN group_lanes l USING (grp) ORDER BY g.phase, g.grp)
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
  agg.tied_instances,
  agg.depth,
  lane_counts.lanes,
  phase_groups.group_lanes - lane_counts.lanes AS idle_lanes,
  lane_counts.min_lane_instances,
  lane_counts.max_lane_instances,
  agg.sync_instances,
  agg.wave_instances
FROM agg
JOIN _ktrace_top_last top USING (phase)
JOIN stable USING (phase)
JOIN phase_groups USING (phase)
JOIN lane_counts USING (phase);

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
  -- Instances in which this lane was the last finisher (the one tie rule above).
  last_count LONG
) AS
WITH last_counts AS (
  SELECT o.phase_index * 4294967296 + c.lane AS id, c.n
  FROM (SELECT phase, lane, COUNT(*) AS n FROM _ktrace_last GROUP BY phase, lane) c
  JOIN _ktrace_phase_order o USING (phase)
)
SELECT
  a.phase,
  a.phase_index,
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
FROM _ktrace_phase_lane_agg a
LEFT JOIN last_counts c ON c.id = a.id
ORDER BY a.id;
