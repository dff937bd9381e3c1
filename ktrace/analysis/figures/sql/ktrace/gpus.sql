-- ktrace.gpus: across GPUs, in a trace written by `ktrace merge` (a process per GPU, every GPU on the first
-- GPU's clock): each GPU's span of every phase instance, and per instance which GPU finished last and how far
-- apart the GPUs began and ended. The same figures as ktrace.analysis.multigpu computes from the buffers (the
-- tests compare them). A trace of one buffer has no GPU processes, so the tables are empty there.
--
-- Phase slices and their instance k are ktrace.lanes' (a lane is one lane track, so one GPU's); a phase is
-- an event name, instance k of it on a GPU spans that GPU's lanes' k-th slices of it.

INCLUDE PERFETTO MODULE ktrace.lanes;

-- The phase slices of the GPUs' processes (none in a trace of one buffer), and their instances.
CREATE PERFETTO TABLE _ktrace_gpu_slice AS
SELECT id, ts, dur, name, track_id, lane_track_id
FROM _ktrace_lane_slices!((SELECT * FROM slice WHERE +track_id IN (SELECT id FROM process_track)));

CREATE PERFETTO TABLE _ktrace_gpu_slice_k AS
SELECT id, k FROM _ktrace_instance_k!(_ktrace_gpu_slice)
ORDER BY id;

-- One row per (GPU, phase instance).
CREATE PERFETTO TABLE ktrace_gpu_phase_instance(
  -- Position of the GPU's buffer among the merged ones (its process's pid - 1).
  gpu LONG,
  -- The GPU's process name, e.g. 'GPU 1 (NVIDIA H200)'.
  gpu_name STRING,
  -- Phase (event name).
  phase STRING,
  -- Instance.
  k LONG,
  -- Lanes that ran it on this GPU.
  lanes LONG,
  -- The GPU's earliest begin and latest end of it, ns on the common axis.
  begin_ns LONG,
  end_ns LONG
) AS
SELECT
  p.pid - 1 AS gpu,
  substr(p.name, 1, 256) AS gpu_name,  -- a name, bounded (docs/security.md)
  s.phase,
  s.k,
  COUNT(*) AS lanes,
  MIN(s.ts) AS begin_ns,
  MAX(s.ts + s.dur) AS end_ns
FROM (
  SELECT s.name AS phase, s.ts, s.dur, s.track_id, i.k
  FROM _ktrace_gpu_slice AS s
  JOIN _ktrace_gpu_slice_k AS i USING (id)
) AS s
JOIN process_track AS t ON s.track_id = t.id
JOIN process AS p USING (upid)
GROUP BY p.upid, s.phase, s.k;

-- One row per phase instance over the GPUs that ran it.
CREATE PERFETTO TABLE ktrace_cross_gpu_instance(
  -- Phase (event name) and instance.
  phase STRING,
  k LONG,
  -- GPUs that ran it.
  gpus LONG,
  -- First begin and last end over all GPUs, ns.
  begin_ns LONG,
  end_ns LONG,
  -- Latest GPU begin - earliest GPU begin, and latest GPU end - earliest GPU end, ns.
  start_skew_ns LONG,
  end_skew_ns LONG,
  -- The GPU that began first, and the GPU that ended last (the lowest on a tie).
  first_gpu LONG,
  last_gpu LONG,
  -- GPUs whose end is the latest.
  tied_last_gpus LONG,
  -- The last GPU's end - the next latest GPU end, ns (NULL with one GPU).
  last_lead_ns LONG
) AS
WITH ranked AS (
  SELECT
    *,
    ROW_NUMBER() OVER (PARTITION BY phase, k ORDER BY end_ns DESC, gpu) AS end_rank,
    ROW_NUMBER() OVER (PARTITION BY phase, k ORDER BY begin_ns, gpu) AS begin_rank,
    MAX(end_ns) OVER (PARTITION BY phase, k) AS latest
  FROM ktrace_gpu_phase_instance
)
SELECT
  phase,
  k,
  COUNT(*) AS gpus,
  MIN(begin_ns) AS begin_ns,
  MAX(end_ns) AS end_ns,
  MAX(begin_ns) - MIN(begin_ns) AS start_skew_ns,
  MAX(end_ns) - MIN(end_ns) AS end_skew_ns,
  MAX(IIF(begin_rank = 1, gpu, NULL)) AS first_gpu,
  MAX(IIF(end_rank = 1, gpu, NULL)) AS last_gpu,
  SUM(IIF(end_ns = latest, 1, 0)) AS tied_last_gpus,
  MAX(end_ns) - MAX(IIF(end_rank = 2, end_ns, NULL)) AS last_lead_ns
FROM ranked
GROUP BY phase, k;
