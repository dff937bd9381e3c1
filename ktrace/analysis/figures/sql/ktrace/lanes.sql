-- ktrace.lanes: the lane tracks of a trace written by `ktrace convert` and the phase slices on them.
-- Definitions: docs/analysis-schema.md; the trace's layout: docs/trace-format.md.
--
-- What belongs to a lane is written once, on its track, not on every slice: a lane track's description is
-- 'block B · group G · SM S' ('SM ?' when the SM id cannot be trusted), and a slice whose own SM differs (a
-- damaged tag) carries debug.sm. A slice's instance k is not written either: it is the slice's rank among
-- its lane's slices of its phase in begin order (on one lane the slices of one event never overlap, so begin
-- order is sequence order; the trace processor keeps the file's order between equal timestamps, so the
-- slice id breaks a tie as the sequence does).

-- The lane tracks, and each lane's child tracks for partially overlapping slices (their parent is a lane
-- track), with the lane's block, warp group and SM read from the lane track's description.
CREATE PERFETTO TABLE _ktrace_lane_track(
  -- A track holding the lane's slices.
  track_id LONG,
  -- The lane's own track (track_id, or its parent for an overlap track): one per lane, in every GPU.
  lane_track_id LONG,
  -- Block index.
  block LONG,
  -- Warp group index within the block.
  grp LONG,
  -- The block's SM id (-1 when it cannot be trusted).
  sm LONG
) AS
WITH described AS (
  SELECT id, d, instr(d, ' · group ') AS p1
  FROM (SELECT id, extract_arg(source_arg_set_id, 'description') AS d FROM track)
  WHERE d GLOB 'block [0-9]* · group [0-9]* · SM *'
),
split AS (
  SELECT id, substr(d, 7, p1 - 7) AS b, substr(r, 1, instr(r, ' · SM ') - 1) AS g,
    substr(r, instr(r, ' · SM ') + 6) AS s
  FROM (SELECT id, d, p1, substr(d, p1 + 9) AS r FROM described)
),
lane AS (
  SELECT id, CAST(b AS INT) AS block, CAST(g AS INT) AS grp, IIF(s = '?', -1, CAST(s AS INT)) AS sm
  FROM split
  -- Only what ktrace writes: whole numbers, nothing around them.
  WHERE CAST(CAST(b AS INT) AS TEXT) = b AND CAST(CAST(g AS INT) AS TEXT) = g
    AND (s = '?' OR CAST(CAST(s AS INT) AS TEXT) = s)
)
SELECT id AS track_id, id AS lane_track_id, block, grp, sm FROM lane
UNION ALL
SELECT t.id, l.id, l.block, l.grp, l.sm
FROM track t JOIN lane l ON t.parent_id = l.id
WHERE t.id NOT IN (SELECT id FROM lane)
ORDER BY track_id;

-- The phase slices among the slices of `src` (slice rows): a BEGIN/END pair of one event on one lane, i.e.
-- every slice on a lane track but instants and anomaly markers (instants that carry debug.instant or
-- debug.seq). Columns: the slice's id, ts, dur, name, track_id, depth, arg_set_id and its lane track's
-- lane_track_id, block, grp, sm. A name is cut to 256 characters (docs/security.md), as the readers of
-- buffers cut theirs: one longer name, in a trace ktrace did not write, would be carried on every row.
CREATE PERFETTO MACRO _ktrace_lane_slices(src TableOrSubquery)
RETURNS TableOrSubquery AS
(
  SELECT s.id, s.ts, s.dur, substr(s.name, 1, 256) AS name, s.track_id, s.depth, s.arg_set_id, l.lane_track_id, l.block, l.grp, l.sm
  FROM $src AS s
  JOIN _ktrace_lane_track AS l USING (track_id)
  WHERE s.dur > 0 OR s.arg_set_id IS NULL
    OR (extract_arg(s.arg_set_id, 'debug.instant') IS NULL AND extract_arg(s.arg_set_id, 'debug.seq') IS NULL)
);

-- Each phase slice's instance k, from `keys` (a table of the phase slices' id, lane_track_id and name): its
-- rank among its lane's slices of its phase. Slice ids are handed out in begin order (the engine parses
-- events in timestamp order, keeping the file's order between equal timestamps), so the rank by id is the
-- rank by begin, ties broken as the lane's sequence breaks them. The window runs over a narrow table of its
-- own: in the trace processor a window costs by the width and the joins of what it reads.
CREATE PERFETTO MACRO _ktrace_instance_k(keys TableOrSubquery)
RETURNS TableOrSubquery AS
(
  SELECT id, ROW_NUMBER() OVER (PARTITION BY lane_track_id, name ORDER BY id) - 1 AS k
  FROM $keys
);
