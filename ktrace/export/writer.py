"""Writing decoded buffers as a Perfetto TrackEvent trace (docs/trace-format.md says what is in it).

The trace streams: the buffer is decoded a range of lanes at a time, and each range's tracks, new interned
names and packets are written before the next is decoded, so memory stays bounded by the range, not the
buffer. Tracks, interned names and the launch slice are few and go through the protobuf classes; the
per-record packets are many and go through the vectorized encoder in ``packets``, in (lane, sequence)
order: the trace processor sorts by timestamp itself, and this order keeps each track's events in the
producer's order (ties included). The launch slice, whose args count everything, comes last.

A ``TraceSpace`` places one buffer among several in one trace (``ktrace merge``): its own packet sequence
(and so its own interned names), its own track uuid range, and a process track above its launch track. The
default space writes exactly the single-buffer trace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Iterator

from ..decoding.decoder import BufferDecoder
from ..core.model import Decoded, Summary
from ..core.terminal import visible_controls as _visible
from .atomic import write_chunks
from .launch_args import launch_facts
from .events import ARG_NAMES, SEQ_ID, Names, PartOutput, PartWriter, SmHulls, WriteState, hull_packets, track_packets
from .packets import pb2 as _pb2, emit as _emit
from .tracks import LAUNCH_UUID, PROCESS_UUID, TRACK_MODES, TrackState, launch_track
from ..runtime.config import Parallelism, Stage, parallelism
from .workers import batches, fork_context, parallel_parts
from ..core.records import frozen

__all__ = ["write_trace", "write_chunks", "trace_bytes", "trace_chunks", "launch_facts", "ARG_NAMES", "TraceSpace"]


@frozen
class TraceSpace:
    """Where one buffer's packets go in a trace: seq_id (trusted_packet_sequence_id, 1..127), uuid_offset
    (added to every track uuid), process (pid, name): a process track above the launch track, with
    ``description``; launch_args: extra (name, value) args on the launch slice."""

    seq_id: int = SEQ_ID
    uuid_offset: int = 0
    process: tuple[int, str] | None = None
    description: str | None = None
    launch_args: tuple = ()


_DEFAULT_SPACE = TraceSpace()


def _process_packet(space: TraceSpace) -> bytes:
    """The process track a merged trace puts above one GPU's launch track."""
    p = _pb2().TracePacket()
    p.trusted_packet_sequence_id = space.seq_id
    td = p.track_descriptor
    td.uuid = PROCESS_UUID + space.uuid_offset
    td.process.pid, td.process.process_name = space.process[0], _visible(space.process[1])
    if space.description:
        td.description = _visible(space.description)
    return _emit(p)


def _launch_slice(d: Decoded, summary: Summary, space: TraceSpace = _DEFAULT_SPACE) -> bytes:
    pb = _pb2()
    t0 = summary.first_ns or 0
    t1 = summary.last_ns or 0
    begin, end = pb.TracePacket(), pb.TracePacket()
    begin.timestamp = t0
    begin.trusted_packet_sequence_id = space.seq_id
    te = begin.track_event
    te.type = pb.TrackEvent.TYPE_SLICE_BEGIN
    te.track_uuid = LAUNCH_UUID + space.uuid_offset
    te.name = _visible(d.launch.kernel)
    for k, v in [*launch_facts(d, summary).items(), *space.launch_args]:
        a = te.debug_annotations.add(name=k)
        if isinstance(v, str):
            a.string_value = _visible(v)
        elif isinstance(v, float):
            a.double_value = v
        else:
            a.int_value = v
    end.timestamp = t1
    end.trusted_packet_sequence_id = space.seq_id
    end.track_event.type = pb.TrackEvent.TYPE_SLICE_END
    end.track_event.track_uuid = LAUNCH_UUID + space.uuid_offset
    return _emit(begin) + _emit(end)


def _written_parts(source, records_per_part: int | None, writer: PartWriter, state: WriteState,
                   stage: Stage) -> Iterator[PartOutput]:
    """Each part written, in lane order: by worker processes (a BufferDecoder of several batches of ranges,
    the runtime's ``convert`` stage has workers, where processes can be forked), else in this process."""
    if isinstance(source, Decoded):
        return _local_parts([source], writer, state)
    if stage.parallel and isinstance(source, BufferDecoder) and fork_context() is not None:
        work = batches(source.part_ranges(records_per_part), source.capacity_per_lane, source.reader.BAND_BYTES)
        if len(work) > 1:
            return parallel_parts(source, work, writer, state, stage.jobs, stage.stall_s)
    return _local_parts(source.parts(records_per_part), writer, state)


def _local_parts(parts: Iterable[Decoded], writer: PartWriter, state: WriteState) -> Iterator[PartOutput]:
    for i, d in enumerate(parts):
        head, declared = writer.declare(d, state)
        yield writer.output(d, _chain([head], writer.body(d, declared)), first=i == 0)


def _chain(*its):
    for it in its:
        yield from it


def trace_chunks(source, tracks: str = "sm", progress: Callable[[int, int], None] | None = None,
                 summary_out: list | None = None, records_per_part: int | None = None,
                 space: TraceSpace = _DEFAULT_SPACE, marks=None, jobs: int | Parallelism | None = 1):
    """The trace as a sequence of byte strings.

    source: a Decoded, or a BufferDecoder (decoded and written a range of lanes at a time).
    progress(done_lanes, lanes) is called after each range of lanes. If ``summary_out`` is a list, the
    buffer's Summary is appended to it at the end. space: where the packets go in a trace of several
    buffers (TraceSpace; the default writes the single-buffer trace). marks: an ``annotations.SliceMarks``
    (an annotated trace, ``ktrace analyze --trace``): those phase slices' BEGIN packets also carry an arg
    ``ktrace.role`` and the critical path's flow ids; None (converting) writes every packet as usual.
    jobs: worker processes decoding and encoding ranges of lanes in parallel (``workers.py``; None: the cores
    available; 1: all in this process), or the command's ``runtime.Parallelism`` (its ``convert`` stage). The
    bytes are the same whatever the number.
    """
    if tracks not in TRACK_MODES:
        raise ValueError(f"tracks must be one of {TRACK_MODES}")
    if isinstance(jobs, int) and jobs < 1:
        raise ValueError(f"jobs {jobs}: 1 or more")
    stage = (Parallelism.build() if jobs is None else parallelism(jobs)).stage("convert")
    off = space.uuid_offset
    mode = tracks if (tracks != "sm" or source.layout.name == "flashinfer") else "block"  # no SM field
    state = WriteState(Names(space.seq_id), TrackState.new(source))
    for i in range(len(source.launch.event_names)):  # the launch's own names first, in index order
        state.names.get(source.launch.event_name(i))
    head = [state.names.flush(first=True)]
    parent = None
    if space.process is not None:
        head.append(_process_packet(space))
        parent = PROCESS_UUID + off
    head.append(track_packets([launch_track(source, off, parent)], set(), space=space))
    summary, sm_hulls, first = Summary(), SmHulls(), None
    total = getattr(source, "lanes", None)
    for part in _written_parts(source, records_per_part, PartWriter(mode, space, marks), state, stage):
        if first is None:
            first = part.bare
            yield from head
        yield from part.chunks
        if progress:
            progress(part.lane_hi if total else 1, total or 1)
        summary = summary.merge(part.summary)
        sm_hulls.add(part.sm_hulls)
    if first is not None:
        yield hull_packets(sm_hulls.hulls(), space)
        yield _launch_slice(first, summary, space)
    if summary_out is not None:
        summary_out.append(summary)


def trace_bytes(source, tracks: str = "sm", records_per_part: int | None = None) -> bytes:
    """The whole trace in memory (small buffers, tests)."""
    return b"".join(trace_chunks(source, tracks, records_per_part=records_per_part))


def write_trace(source, out: str | Path, tracks: str = "sm", progress=None, jobs: int | None = 1) -> tuple[int, Summary]:
    """Write the trace to ``out`` atomically (a temp file renamed into place).

    source: a Decoded or a BufferDecoder; jobs: worker processes (``trace_chunks``). Returns (bytes written,
    the buffer's Summary).
    """
    got: list = []
    size = write_chunks(out, trace_chunks(source, tracks, progress, summary_out=got, jobs=jobs))
    return size, got[0]
