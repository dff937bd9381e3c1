-- ktrace.slices: the phase slices of a trace written by `ktrace convert`, the launch and its facts, and the
-- kernel's extent and timer resolution. Definitions: docs/analysis-schema.md.
--
-- A lane's block, group and SM are on its track and a slice's instance k is derived (ktrace.lanes).
-- Args are read with extract_arg(arg_set_id, ...): joining the args table is far slower. A `+column IN
-- (subquery)` (the + keeps the engine from pushing the IN into the table scan) is a fast semi-join.

-- The slices the package reads: every slice of the trace. For one GPU of a trace written by `ktrace merge`,
-- ktrace registers the package with this view narrowed to that GPU's process (sql_package.register).
INCLUDE PERFETTO MODULE ktrace.lanes;

CREATE PERFETTO VIEW _ktrace_source_slice AS
SELECT * FROM slice;

-- The launch slice: the one slice whose args carry the launch facts (debug.layout is only on it).
CREATE PERFETTO TABLE ktrace_launch(
  -- Slice id of the launch slice.
  id LONG,
  -- First record of the capture, ns.
  ts LONG,
  -- Span of the capture, ns.
  dur LONG,
  -- Kernel name.
  kernel STRING,
  -- Arg set with the launch facts (debug.*).
  arg_set_id LONG,
  -- Blocks in the launch.
  num_blocks LONG,
  -- Warp groups (writers) per block.
  num_groups LONG,
  -- Timer tick measured by the capture, ns (NULL when not measured).
  timer_tick_ns LONG,
  -- Smallest nonzero step between consecutive records of a lane, ns.
  min_step_ns LONG
) AS
SELECT
  id,
  ts,
  dur,
  name AS kernel,
  arg_set_id,
  extract_arg(arg_set_id, 'debug.num_blocks') AS num_blocks,
  extract_arg(arg_set_id, 'debug.num_groups') AS num_groups,
  extract_arg(arg_set_id, 'debug.timer_tick_ns') AS timer_tick_ns,
  extract_arg(arg_set_id, 'debug.min_step_ns') AS min_step_ns
-- The launch track is the root of ktrace's track tree; its slice is the launch slice.
FROM _ktrace_source_slice
WHERE +track_id IN (SELECT id FROM track WHERE parent_id IS NULL)
  AND depth = 0
  AND extract_arg(arg_set_id, 'debug.layout') IS NOT NULL;

-- The launch facts, one row per arg of the launch slice, in the order they were written.
CREATE PERFETTO VIEW ktrace_launch_arg(
  -- Fact name without the 'debug.' prefix: kernel, grid, num_blocks, anomaly_<kind>, ...
  key STRING,
  -- 'int', 'real' or 'string'.
  value_type STRING,
  int_value LONG,
  real_value DOUBLE,
  string_value STRING
) AS
SELECT substr(key, 7) AS key, value_type, int_value, real_value, string_value
FROM args
WHERE arg_set_id = (SELECT MIN(arg_set_id) FROM ktrace_launch)
ORDER BY id;

-- Warp groups per block: the launch's num_groups (else one more than the largest group seen).
CREATE PERFETTO TABLE _ktrace_groups AS
SELECT COALESCE(
  (SELECT MAX(num_groups) FROM ktrace_launch),
  (SELECT MAX(grp) + 1 FROM _ktrace_lane_track),
  1) AS n;

-- The phase slices, read once (the slice table and debug.sm are not read again), in slice id order: the
-- columns that differ from slice to slice. The lane's block, group and SM are the same for a lane track's
-- slices, so they are read once per run below. sm_arg: the slice's own SM (debug.sm), where it has one.
CREATE PERFETTO TABLE _ktrace_slice_key AS
SELECT
  id, ts, dur, name, track_id, depth, lane_track_id,
  IIF(arg_set_id IS NULL, NULL, extract_arg(arg_set_id, 'debug.sm')) AS sm_arg
FROM _ktrace_lane_slices!(_ktrace_source_slice);

-- The same rows in (lane track, name, id) order, so that each lane track's slices of one phase are one run
-- of rows in instance order. `_auto_id` is a row's position in a PERFETTO TABLE, so a slice's k is its
-- position minus that of the run's first row: a sort of one table (done by the engine, not by SQLite: it
-- reads a single table) instead of a ROW_NUMBER window, which costs several times more.
CREATE PERFETTO TABLE _ktrace_slice_rank AS
SELECT id, ts, dur, name, track_id, depth, lane_track_id, sm_arg
FROM _ktrace_slice_key
ORDER BY lane_track_id, name, id;

-- The last row of the run of _ktrace_slice_rank that row `f` begins: the largest position with its lane track
-- and name (a NULL name is a run of its own too, as in a GROUP BY).
CREATE PERFETTO MACRO _ktrace_run_last(f Expr)
RETURNS Expr AS
COALESCE(
  (SELECT MAX(r._auto_id) FROM _ktrace_slice_rank r WHERE r.lane_track_id = $f.lane_track_id AND r.name = $f.name),
  (SELECT MAX(r._auto_id) FROM _ktrace_slice_rank r WHERE r.lane_track_id = $f.lane_track_id AND r.name IS NULL));

-- The runs of _ktrace_slice_rank (a lane track's slices of one phase), one after the other: a run's first
-- row follows the last one's, and its last row is the largest position with its lane track and name (a
-- filtered MAX(_auto_id), which the engine answers without SQLite reading the rows: a GROUP BY over every
-- slice costs twenty times more). With each run's earliest begin (an aggregate over a range of positions).
CREATE PERFETTO TABLE _ktrace_slice_run AS
WITH RECURSIVE run(first, last) AS (
  SELECT f._auto_id, _ktrace_run_last!(f) FROM _ktrace_slice_rank f WHERE f._auto_id = 0
  UNION ALL
  SELECT f._auto_id, _ktrace_run_last!(f)
  FROM run p
  JOIN _ktrace_slice_rank f ON f._auto_id = p.last + 1
)
SELECT
  run.first, run.last, f.lane_track_id, f.name,
  (SELECT MIN(r.ts) FROM _ktrace_slice_rank r WHERE r._auto_id BETWEEN run.first AND run.last) AS first_ts
FROM run
JOIN _ktrace_slice_rank f ON f._auto_id = run.first;

-- Phases in the order they first begin (then by name), numbered from 0.
CREATE PERFETTO TABLE _ktrace_phase_order AS
SELECT phase, ROW_NUMBER() OVER (ORDER BY first_ts, phase) - 1 AS phase_index
FROM (SELECT name AS phase, MIN(first_ts) AS first_ts FROM _ktrace_slice_run GROUP BY name);

-- The runs in row order, with the phase's index and the lane's block, group, SM and lane.
CREATE PERFETTO TABLE _ktrace_slice_group AS
SELECT g.first, g.last, o.phase_index, l.block, l.grp, l.sm, l.block * (SELECT n FROM _ktrace_groups) + l.grp AS lane
FROM _ktrace_slice_run g
JOIN _ktrace_phase_order o ON o.phase = g.name
JOIN _ktrace_lane_track l ON l.track_id = g.lane_track_id
ORDER BY g.first;

-- The phase slices with their lane's columns and their instance (`inst` = phase_index * 2^32 + k: the
-- per-instance tables of ktrace.phases are keyed by it in their `id` column, so that joins on an instance
-- are id lookups), in _ktrace_slice_rank's order: each run is read as one range of rows (a lookup per run,
-- not per slice). The index makes a slice id a lookup. Only `inst` is kept of the instance: phase_index and
-- k are its halves (inst / 2^32, inst % 2^32; each column of a table this size costs its build about 0.05 s
-- at 1e6 records). The phase's name and the track stay: ktrace_phase_slice reads them (a lookup per row
-- would cost a query of that view three times more).
CREATE PERFETTO TABLE _ktrace_slice AS
SELECT
  s.id,
  s.ts,
  s.dur,
  s.ts + s.dur AS end_ts,
  s.name AS phase,
  g.block,
  g.grp,
  COALESCE(s.sm_arg, g.sm) AS sm,
  g.lane,
  s.track_id,
  s.depth,
  g.phase_index * 4294967296 + s._auto_id - g.first AS inst
FROM _ktrace_slice_group AS g
CROSS JOIN _ktrace_slice_rank AS s ON s._auto_id BETWEEN g.first AND g.last;

CREATE PERFETTO INDEX _ktrace_slice_id ON _ktrace_slice(id);

-- The top-level slices (depth 0) in lane order (by begin, then slice id): the row before a slice is the
-- lane's previous top-level slice when it is on the same lane, the row after it the next one (a self-join
-- on the position `_auto_id` instead of a LAG window). The index makes a slice id a lookup. No phase name,
-- index or k: they are `inst`'s (phase_index = inst / 2^32, k = inst % 2^32), and each column of a table
-- this size costs its build about 0.05 s at 1e6 records (a column of names twice that).
CREATE PERFETTO TABLE _ktrace_top_slice AS
SELECT id, ts, end_ts, inst, block, grp, lane
FROM _ktrace_slice
WHERE depth = 0
ORDER BY lane, ts, id;

CREATE PERFETTO INDEX _ktrace_top_slice_id ON _ktrace_top_slice(id);

-- Each top-level slice with a next one on its lane (the row after it in lane order), as the pair: the
-- slice's instance (prev_inst), the next one's instance and begin, the lane's block and group, and the gap
-- from the slice's end to the next one's begin, ns (the wait when >= 0, ktrace.waits; the next slice's
-- lead-in, ktrace.phases), with both phases' indices: integers only, and columns to group by (a GROUP BY of
-- columns is sorted by the engine, one of expressions by SQLite, several times slower).
CREATE PERFETTO TABLE _ktrace_top_pair AS
SELECT
  a.inst AS prev_inst, a.block, a.grp, n.inst, n.ts, n.ts - a.end_ts AS gap_ns,
  a.inst / 4294967296 AS phase_index, n.inst / 4294967296 AS next_phase_index
FROM _ktrace_top_slice AS a
CROSS JOIN _ktrace_top_slice AS n ON n._auto_id = a._auto_id + 1
WHERE n.lane = a.lane;

-- Phase slices: a BEGIN/END pair of one event on one lane: the slices on lane tracks but instants. In slice
-- id order.
CREATE PERFETTO VIEW ktrace_phase_slice(
  -- Slice id.
  id LONG,
  -- Begin, ns.
  ts LONG,
  -- Duration, ns.
  dur LONG,
  -- End (ts + dur), ns.
  end_ts LONG,
  -- Phase: the event's name.
  phase STRING,
  -- Block index.
  block LONG,
  -- Warp group index within the block.
  grp LONG,
  -- SM id (-1 when it cannot be trusted).
  sm LONG,
  -- Instance: this is the k-th slice of this phase on this lane, from 0.
  k LONG,
  -- Lane: block * num_groups + grp.
  lane LONG,
  -- Track the slice is drawn on.
  track_id LONG,
  -- Nesting depth on that track (slice.depth): 0 = not inside another slice of the lane (a top-level slice).
  depth LONG
) AS
SELECT id, ts, dur, end_ts, phase, block, grp, sm, inst % 4294967296 AS k, lane, track_id, depth
FROM _ktrace_slice
ORDER BY id;

-- Per run (a lane track's slices of one phase: rows first .. last of _ktrace_slice), their figures as a JSON
-- array: an aggregate over a range of row positions, which costs a fraction of a GROUP BY over every slice
-- (that sorts them all).
CREATE PERFETTO TABLE _ktrace_run_agg AS
SELECT
  g.phase_index, s.phase, s.block, s.grp, s.lane, g.last - g.first + 1 AS instances,
  (SELECT json_array(MAX(sm), MIN(dur), MAX(dur), SUM(dur), SUM(depth = 0), SUM(IIF(depth = 0, dur, 0)),
     MIN(ts), MAX(end_ts))
   FROM _ktrace_slice r WHERE r._auto_id BETWEEN g.first AND g.last) AS a
FROM _ktrace_slice_group g
CROSS JOIN _ktrace_slice s ON s._auto_id = g.first;

-- Per (phase, lane): the lane's slices of that phase over all instances (id = phase_index * 2^32 + lane),
-- from its runs (one, but for lanes of several lane tracks: the GPUs of a merged trace): the per-lane,
-- per-block and kernel extents add these up instead of reading every slice again.
CREATE PERFETTO TABLE _ktrace_phase_lane_agg AS
SELECT
  phase_index * 4294967296 + lane AS id, phase_index, phase, block, grp, lane,
  MAX(json_extract(a, '$[0]')) AS sm,
  SUM(instances) AS instances,
  MIN(json_extract(a, '$[1]')) AS min_dur_ns,
  MAX(json_extract(a, '$[2]')) AS max_dur_ns,
  SUM(json_extract(a, '$[3]')) AS sum_dur_ns,
  -- Top-level slices (depth 0) and their durations' sum, ns.
  SUM(json_extract(a, '$[4]')) AS top_slices,
  SUM(json_extract(a, '$[5]')) AS busy_ns,
  MIN(json_extract(a, '$[6]')) AS begin_ns,
  MAX(json_extract(a, '$[7]')) AS end_ns
FROM _ktrace_run_agg
GROUP BY phase_index, block, grp
ORDER BY id;

-- The kernel: extent of its phase slices, and the timer resolution every figure carries.
CREATE PERFETTO TABLE ktrace_kernel(
  -- Earliest phase begin, ns.
  begin_ns LONG,
  -- Latest phase end, ns.
  end_ns LONG,
  -- end_ns - begin_ns.
  wall_ns LONG,
  -- Phase slices.
  slices LONG,
  -- Lanes with phase slices.
  lanes LONG,
  -- Distinct phases.
  phases LONG,
  -- The smallest timer step seen, ns: the smaller of the smallest positive difference between two distinct
  -- phase slice durations and the launch's min_step_ns (smallest step between consecutive records of a
  -- lane). Both are whole timer ticks, so this is the tick or a multiple of it. NULL when neither exists.
  smallest_step_ns LONG,
  -- Timer resolution: the launch's timer_tick_ns, else smallest_step_ns, else 32 (an H200's tick).
  tick_ns LONG,
  -- 'launch', 'smallest step' or 'default'.
  tick_source STRING
) AS
WITH durations AS (
  SELECT dur FROM _ktrace_slice GROUP BY dur
),
duration_step AS (
  SELECT MIN(step) AS step
  FROM (SELECT dur - LAG(dur) OVER (ORDER BY dur) AS step FROM durations)
  WHERE step > 0
),
record_step AS (
  SELECT (SELECT MIN(min_step_ns) FROM ktrace_launch WHERE min_step_ns > 0) AS step
),
smallest AS (
  SELECT CASE
    WHEN d.step IS NULL THEN r.step
    WHEN r.step IS NULL OR d.step <= r.step THEN d.step
    ELSE r.step
  END AS step
  FROM duration_step d, record_step r
),
launch_tick AS (
  SELECT (SELECT MAX(timer_tick_ns) FROM ktrace_launch WHERE timer_tick_ns > 0) AS tick
),
extent AS (
  SELECT MIN(begin_ns) AS begin_ns, MAX(end_ns) AS end_ns, COALESCE(SUM(instances), 0) AS slices,
    COUNT(DISTINCT lane) AS lanes, COUNT(DISTINCT phase) AS phases
  FROM _ktrace_phase_lane_agg
)
SELECT
  extent.begin_ns,
  extent.end_ns,
  extent.end_ns - extent.begin_ns AS wall_ns,
  extent.slices,
  extent.lanes,
  extent.phases,
  smallest.step AS smallest_step_ns,
  COALESCE(launch_tick.tick, smallest.step, 32) AS tick_ns,
  CASE
    WHEN launch_tick.tick IS NOT NULL THEN 'launch'
    WHEN smallest.step IS NOT NULL THEN 'smallest step'
    ELSE 'default'
  END AS tick_source
FROM extent, smallest, launch_tick;
