-- ktrace.blocks: the launch's structure: blocks and lanes with their extents, busy SMs over time and the
-- launch shape (occupancy). Definitions: docs/analysis-structure.md.
--
-- Intervals are [begin, end): a block ending at t and one beginning at t do not run at once. Counts of
-- running blocks come from +1/-1 events summed per timestamp (so a block that ends at t and one that begins
-- at t cancel out, and a zero-length block counts for nothing), then a running sum.

INCLUDE PERFETTO MODULE ktrace.slices;

-- One row per block with phase slices.
CREATE PERFETTO TABLE ktrace_block(
  -- Block index.
  block LONG,
  -- SM id (the largest among its slices; -1 unknown).
  sm LONG,
  -- Distinct lanes (warp groups) and slices (all depths).
  lanes LONG,
  slices LONG,
  -- Earliest slice begin, latest slice end, and end - begin, ns.
  begin_ns LONG,
  end_ns LONG,
  dur_ns LONG,
  -- 1 when it began after another block on its SM had ended (sm >= 0): a later wave; else 0.
  later_wave LONG
) AS
WITH extent AS MATERIALIZED (
  SELECT block, MAX(sm) AS sm, COUNT(DISTINCT grp) AS lanes, SUM(instances) AS slices, MIN(begin_ns) AS begin_ns,
    MAX(end_ns) AS end_ns
  FROM _ktrace_phase_lane_agg
  GROUP BY block
),
-- Per SM, the block that ends first (a bare column next to MIN) and the earliest end among the others.
first_end AS MATERIALIZED (
  SELECT sm, MIN(end_ns) AS end_ns, block FROM extent WHERE sm >= 0 GROUP BY sm
),
second_end AS MATERIALIZED (
  SELECT e.sm, MIN(e.end_ns) AS end_ns
  FROM extent e JOIN first_end f ON f.sm = e.sm AND e.block != f.block
  GROUP BY e.sm
)
SELECT
  e.block,
  e.sm,
  e.lanes,
  e.slices,
  e.begin_ns,
  e.end_ns,
  e.end_ns - e.begin_ns AS dur_ns,
  CASE
    WHEN e.sm < 0 THEN 0
    WHEN e.block != f.block THEN f.end_ns <= e.begin_ns
    ELSE COALESCE(s.end_ns <= e.begin_ns, 0)
  END AS later_wave
FROM extent e
LEFT JOIN first_end f ON f.sm = e.sm
LEFT JOIN second_end s ON s.sm = e.sm
ORDER BY e.block;

-- One row per lane with phase slices.
CREATE PERFETTO TABLE ktrace_lane(
  -- Lane (block * num_groups + grp), block, warp group.
  lane LONG,
  block LONG,
  grp LONG,
  -- SM id (the largest among its slices; -1 unknown).
  sm LONG,
  -- Slices (all depths) and top-level slices (depth 0).
  slices LONG,
  top_slices LONG,
  -- Sum of the top-level slices' durations, ns: the time the lane is inside a phase.
  busy_ns LONG,
  -- Earliest begin and latest end over all its slices, ns.
  begin_ns LONG,
  end_ns LONG
) AS
SELECT
  block * (SELECT n FROM _ktrace_groups) + grp AS lane,
  block,
  grp,
  MAX(sm) AS sm,
  SUM(instances) AS slices,
  SUM(top_slices) AS top_slices,
  SUM(busy_ns) AS busy_ns,
  MIN(begin_ns) AS begin_ns,
  MAX(end_ns) AS end_ns
FROM _ktrace_phase_lane_agg
GROUP BY block, grp
ORDER BY lane;

-- Per SM (>= 0) and timestamp: blocks beginning minus blocks ending then, and the SM's running blocks from
-- then on (`level`) and just before (`level - delta`).
CREATE PERFETTO TABLE _ktrace_sm_level AS
SELECT sm, ts, delta, SUM(delta) OVER (PARTITION BY sm ORDER BY ts) AS level
FROM (
  SELECT sm, ts, SUM(delta) AS delta
  FROM (
    SELECT sm, begin_ns AS ts, 1 AS delta FROM ktrace_block WHERE sm >= 0
    UNION ALL
    SELECT sm, end_ns AS ts, -1 AS delta FROM ktrace_block WHERE sm >= 0
  )
  GROUP BY sm, ts
);

-- The times an SM becomes busy (+1) or idle (-1).
CREATE PERFETTO TABLE _ktrace_sm_switch AS
SELECT sm, ts, IIF(level > 0, 1, -1) AS change
FROM _ktrace_sm_level
WHERE (level > 0) != (level - delta > 0);

-- Busy SMs over time: from ts on (until the next row), busy_sms SMs run a block. The last row has 0. A block
-- of an unknown SM (sm = -1) ran on some SM: while it runs it counts as one more busy SM, up to the SMs seen,
-- so that no SM is called idle that may have run it.
CREATE PERFETTO TABLE ktrace_busy_sms(
  -- Time the count changes, ns.
  ts LONG,
  -- SMs running at least one block from ts on.
  busy_sms LONG
) AS
WITH sms AS (
  SELECT COUNT(DISTINCT sm) AS n FROM ktrace_block WHERE sm >= 0
),
changes AS (
  SELECT ts, SUM(known) AS known, SUM(unknown) AS unknown
  FROM (
    SELECT ts, change AS known, 0 AS unknown FROM _ktrace_sm_switch
    UNION ALL
    SELECT begin_ns AS ts, 0 AS known, 1 AS unknown FROM ktrace_block WHERE sm < 0 AND dur_ns > 0
    UNION ALL
    SELECT end_ns AS ts, 0 AS known, -1 AS unknown FROM ktrace_block WHERE sm < 0 AND dur_ns > 0
  )
  GROUP BY ts
),
levels AS (
  SELECT ts, MIN(SUM(known) OVER (ORDER BY ts) + SUM(unknown) OVER (ORDER BY ts), (SELECT n FROM sms)) AS busy_sms
  FROM changes
  WHERE (SELECT n FROM sms) > 0
)
SELECT ts, busy_sms
FROM (SELECT ts, busy_sms, LAG(busy_sms) OVER (ORDER BY ts) AS prev FROM levels)
WHERE prev IS NULL OR busy_sms != prev
ORDER BY ts;

-- The launch shape, one row (none without phase slices).
CREATE PERFETTO TABLE ktrace_occupancy(
  -- Distinct SMs (>= 0) among blocks.
  sms LONG,
  -- Blocks with phase slices, and those with sm = -1.
  blocks LONG,
  unknown_sm_blocks LONG,
  -- The most blocks running at once on one SM (NULL without SMs).
  blocks_per_sm_max LONG,
  -- The most blocks running at once over the launch (unknown SMs too).
  max_resident LONG,
  -- blocks / max_resident (1.0 for a persistent kernel).
  waves DOUBLE,
  -- Sum over SMs of the time the SM runs a block, ns (NULL without SMs), and its fraction of sms * wall.
  sm_busy_ns LONG,
  sm_busy_fraction DOUBLE,
  -- The tail: from the time busy SMs last fall below sms / 2 (the kernel's begin when they never reach
  -- it) to the kernel's end, ns (NULL without SMs).
  tail_begin_ns LONG,
  tail_ns LONG,
  -- Mean busy SMs over the tail, time-weighted (NULL when tail_ns is 0 or NULL).
  busy_sms_in_tail DOUBLE,
  -- The block that ends the kernel (latest end, then lowest block), its begin and duration, ns.
  last_block LONG,
  last_block_begin_ns LONG,
  last_block_dur_ns LONG,
  -- Lower median of the blocks' durations, ns.
  median_block_dur_ns LONG
) AS
WITH counts AS (
  SELECT
    COUNT(DISTINCT IIF(sm >= 0, sm, NULL)) AS sms,
    COUNT(*) AS blocks,
    SUM(sm < 0) AS unknown_sm_blocks,
    CAST(percentile_disc(dur_ns, 0.5) AS INT) AS median_block_dur_ns
  FROM ktrace_block
),
last AS (
  SELECT MAX(end_ns) AS end_ns, MIN(block) AS block
  FROM ktrace_block
  WHERE end_ns = (SELECT MAX(end_ns) FROM ktrace_block)
),
resident AS (
  SELECT MAX(level) AS max_resident
  FROM (
    SELECT SUM(delta) OVER (ORDER BY ts) AS level
    FROM (
      SELECT ts, SUM(delta) AS delta
      FROM (
        SELECT begin_ns AS ts, 1 AS delta FROM ktrace_block
        UNION ALL
        SELECT end_ns AS ts, -1 AS delta FROM ktrace_block
      )
      GROUP BY ts
    )
  )
),
sm_figures AS (
  SELECT MAX(level) AS blocks_per_sm_max FROM _ktrace_sm_level
),
-- Busy SM rows with the time to the next row.
steps AS (
  SELECT ts, busy_sms, LEAD(ts) OVER (ORDER BY ts) - ts AS dur FROM ktrace_busy_sms
),
busy AS (
  SELECT SUM(busy_sms * dur) AS sm_busy_ns FROM steps WHERE dur IS NOT NULL
),
tail AS (
  SELECT
    CASE
      WHEN counts.sms = 0 THEN NULL
      ELSE COALESCE(
        (SELECT MIN(ts) FROM ktrace_busy_sms
         WHERE ts > (SELECT MAX(ts) FROM ktrace_busy_sms WHERE busy_sms * 2 >= counts.sms)),
        kernel.begin_ns)
    END AS begin_ns
  FROM counts, ktrace_kernel kernel
),
in_tail AS (
  SELECT SUM(busy_sms * dur) AS sm_ns FROM steps, tail WHERE steps.ts >= tail.begin_ns AND dur IS NOT NULL
)
SELECT
  counts.sms,
  counts.blocks,
  counts.unknown_sm_blocks,
  IIF(counts.sms > 0, sm_figures.blocks_per_sm_max, NULL) AS blocks_per_sm_max,
  resident.max_resident,
  counts.blocks * 1.0 / resident.max_resident AS waves,
  IIF(counts.sms > 0, COALESCE(busy.sm_busy_ns, 0), NULL) AS sm_busy_ns,
  IIF(counts.sms > 0, COALESCE(busy.sm_busy_ns, 0), NULL) * 1.0 / (counts.sms * kernel.wall_ns)
    AS sm_busy_fraction,
  tail.begin_ns AS tail_begin_ns,
  kernel.end_ns - tail.begin_ns AS tail_ns,
  CASE WHEN kernel.end_ns - tail.begin_ns > 0
    THEN COALESCE(in_tail.sm_ns, 0) * 1.0 / (kernel.end_ns - tail.begin_ns)
  END AS busy_sms_in_tail,
  last.block AS last_block,
  b.begin_ns AS last_block_begin_ns,
  b.dur_ns AS last_block_dur_ns,
  counts.median_block_dur_ns
FROM counts, last, resident, sm_figures, busy, tail, in_tail, ktrace_kernel kernel
JOIN ktrace_block b ON b.block = last.block
WHERE counts.blocks > 0;
