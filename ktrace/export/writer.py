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

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from ..model import Anomalies, Decoded, Summary
from .annotations import encode_marked, marked_records
from .atomic import write_chunks
from .packets import pb2 as _pb2, emit as _emit
from .packets import TYPE_BEGIN, TYPE_END, TYPE_INSTANT, encode_events
from .tracks import BLOCK_BASE, SM_BASE, LAUNCH_UUID, PROCESS_UUID, TRACK_MODES, TrackState, build_tracks, launch_track

__all__ = ["write_trace", "write_chunks", "trace_bytes", "trace_chunks", "launch_facts", "ARG_NAMES", "TraceSpace"]

SEQ_ID = 1
_SEQ_CLEARED, _SEQ_NEEDS = 1, 2
# Interned debug-annotation names: iid -> name.
ARG_NAMES = {1: "block", 2: "group", 3: "sm", 4: "k", 5: "instant", 6: "seq"}
_CHUNK = 1 << 20


@dataclass(frozen=True)
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


class _Names:
    """Interned event names: iids handed out in first-use order, declared before the packets using them."""

    def __init__(self, seq_id: int = SEQ_ID) -> None:
        self.iid: dict[str, int] = {}
        self.pending: list[str] = []
        self.seq_id = seq_id

    def get(self, name: str) -> int:
        if name not in self.iid:
            self.iid[name] = len(self.iid) + 1
            self.pending.append(name)
        return self.iid[name]

    def flush(self, first: bool = False) -> bytes:
        if not self.pending and not first:
            return b""
        p = _pb2().TracePacket()
        p.trusted_packet_sequence_id = self.seq_id
        p.sequence_flags = _SEQ_CLEARED if first else _SEQ_NEEDS
        for nm in self.pending:
            p.interned_data.event_names.add(iid=self.iid[nm], name=nm)
        if first:
            for iid, nm in ARG_NAMES.items():
                p.interned_data.debug_annotation_names.add(iid=iid, name=nm)
        self.pending = []
        return _emit(p)


def _track_packets(tracks: list, parents: set, description: str | None = None,
                   space: TraceSpace = _DEFAULT_SPACE) -> bytes:
    pb = _pb2()
    out = bytearray()
    launch_uuid = LAUNCH_UUID + space.uuid_offset
    for t in tracks:
        p = pb.TracePacket()
        p.trusted_packet_sequence_id = space.seq_id
        td = p.track_descriptor
        td.uuid = t.uuid
        td.name = t.name
        if t.parent is not None:
            td.parent_uuid = t.parent
        if t.rank is not None:
            td.sibling_order_rank = t.rank
        if t.uuid in parents or t.uuid == launch_uuid:
            td.child_ordering = pb.TrackDescriptor.EXPLICIT
        if description and t.uuid == launch_uuid:
            td.description = description
        out.extend(_emit(p))
    return bytes(out)


def _process_packet(space: TraceSpace) -> bytes:
    """The process track a merged trace puts above one GPU's launch track."""
    p = _pb2().TracePacket()
    p.trusted_packet_sequence_id = space.seq_id
    td = p.track_descriptor
    td.uuid = PROCESS_UUID + space.uuid_offset
    td.process.pid, td.process.process_name = space.process
    if space.description:
        td.description = space.description
    return _emit(p)


def launch_facts(d: Decoded, summary: Summary) -> dict:
    """The launch slice's args (name -> str or int): what the launch was and what its buffer held."""
    L = d.launch
    facts: dict = {"kernel": L.kernel}
    if L.grid:
        facts["grid"] = "x".join(map(str, L.grid))
    if L.block_dim:
        facts["block_dim"] = "x".join(map(str, L.block_dim))
    if L.device:
        facts["device"] = L.device
    if L.producer:
        facts["producer"] = L.producer
    facts["layout"] = d.layout.name
    facts["layout_match"] = round(d.layout.score, 6)
    facts["num_blocks"] = L.num_blocks
    facts["num_groups"] = L.num_groups
    if L.timer_tick_ns is not None:
        facts["timer_tick_ns"] = L.timer_tick_ns
    for key in ("probe_cost_ns", "profiled_median_us", "control_median_us"):
        if getattr(L, key) is not None:
            facts[key] = round(float(getattr(L, key)), 3)  # measured to a few ns: no float noise
    if summary.min_step_ns is not None:
        facts["min_step_ns"] = summary.min_step_ns
    facts["time_origin"] = d.time_origin
    facts["records"] = summary.records
    facts["slices"] = summary.slices
    facts["instants"] = summary.instants
    facts["anomalous_records"] = summary.anomalous_records
    for k, n in sorted(summary.anomalies.items()):
        facts[f"anomaly_{k}"] = n
    for k, n in sorted(summary.notes.items()):
        facts[f"note_{k}"] = n
    return facts


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
    te.name = d.launch.kernel
    for k, v in [*launch_facts(d, summary).items(), *space.launch_args]:
        a = te.debug_annotations.add(name=k)
        if isinstance(v, str):
            a.string_value = v
        elif isinstance(v, float):
            a.double_value = v
        else:
            a.int_value = v
    end.timestamp = t1
    end.trusted_packet_sequence_id = space.seq_id
    end.track_event.type = pb.TrackEvent.TYPE_SLICE_END
    end.track_event.track_uuid = LAUNCH_UUID + space.uuid_offset
    return _emit(begin) + _emit(end)


def _hull_packets(hulls, space: TraceSpace) -> bytes:
    """Slices that give collapsed SM and block tracks something to show: one per track, from the first
    BEGIN to the last END under it. Named inline, without args: they are not phase slices (no debug.k)."""
    pb = _pb2()
    out = bytearray()
    for uuid, t0, t1, name in hulls:
        for ts, typ in ((t0, pb.TrackEvent.TYPE_SLICE_BEGIN), (t1, pb.TrackEvent.TYPE_SLICE_END)):
            p = pb.TracePacket()
            p.timestamp = int(ts)
            p.trusted_packet_sequence_id = space.seq_id
            p.track_event.type = typ
            p.track_event.track_uuid = uuid + space.uuid_offset
            if typ == pb.TrackEvent.TYPE_SLICE_BEGIN:
                p.track_event.name = name
            out.extend(_emit(p))
    return bytes(out)


def _block_hulls(d: Decoded, mode: str) -> list:
    """(block track uuid, first BEGIN, last END, name) for blocks whose warp groups have their own tracks."""
    s = d.slices
    if d.launch.num_groups == 1 or mode == "flat" or len(s) == 0:
        return []
    starts = np.flatnonzero(np.r_[True, s.block[1:] != s.block[:-1]])  # slices are in lane, so block, order
    lo = np.minimum.reduceat(s.begin_ns, starts)
    hi = np.maximum.reduceat(s.end_ns, starts)
    return [(BLOCK_BASE + b, t0, t1, "running") for b, t0, t1 in zip(s.block[starts].tolist(), lo.tolist(), hi.tolist())]


class _SmHulls:
    """Per SM, across parts: the first BEGIN and last END of its blocks' slices, and how many blocks."""

    def __init__(self) -> None:
        self.lo: dict[int, int] = {}
        self.hi: dict[int, int] = {}
        self.blocks: dict[int, set] = {}

    def add(self, d: Decoded) -> None:
        s = d.slices
        if len(s) == 0:
            return
        order = np.lexsort((s.block, s.sm))
        sm, blk = s.sm[order], s.block[order]
        starts = np.flatnonzero(np.r_[True, sm[1:] != sm[:-1]])
        lo = np.minimum.reduceat(s.begin_ns[order], starts)
        hi = np.maximum.reduceat(s.end_ns[order], starts)
        for j, k in enumerate(sm[starts].tolist()):  # a loop over SMs
            self.lo[k] = min(self.lo.get(k, lo[j]), int(lo[j]))
            self.hi[k] = max(self.hi.get(k, hi[j]), int(hi[j]))
            end = starts[j + 1] if j + 1 < len(starts) else len(sm)
            self.blocks.setdefault(k, set()).update(np.unique(blk[starts[j]:end]).tolist())

    def hulls(self) -> list:
        return [(SM_BASE + k + 1, self.lo[k], self.hi[k],
                 f"{len(self.blocks[k])} block{'s' if len(self.blocks[k]) != 1 else ''}") for k in sorted(self.lo)]


def _name_iids(d: Decoded, names: _Names) -> tuple[Callable, Callable]:
    """Vectorized lookups: event index -> name iid, and (anomaly kind, event) -> marker name iid."""
    L = d.launch
    both = np.concatenate([d.slices.event, d.instants.event]) + 1  # 'finalize' is -1
    events = np.flatnonzero(np.bincount(both)) - 1 if len(both) else both
    ev_lut = _lut({ev: names.get("finalize" if ev < 0 else L.event_name(ev)) for ev in events.tolist()})
    a = d.anomalies
    table = {}
    if len(a):
        for kind, ev in np.unique(np.stack([a.kind.astype(np.int64), a.event]), axis=1).T.tolist():
            label = Anomalies.KINDS[kind].replace("_", " ")
            table[kind * (1 << 20) + ev + 1] = names.get(f"⚠ {label}: {'finalize' if ev < 0 else L.event_name(ev)}")
    an_lut = _lut(table)
    return ev_lut, lambda kind, ev: an_lut(kind.astype(np.int64) * (1 << 20) + ev + 1)


def _event_columns(d: Decoded, tree, luts) -> dict:
    """The packet columns of every record of a part, in (lane, sequence) order: each record is a slice's
    BEGIN or END, an instant, or an anomaly marker, and is scattered to its own row."""
    n = d.records
    s, ins, an = d.slices, d.instants, d.anomalies
    ev_lut, an_lut = luts
    cols = {c: np.zeros(n, np.int64) for c in ("ts", "type", "block", "group", "sm", "last", "iid", "name", "uuid")}
    uuid = tree.lane_uuid
    if s.overlap.any():
        lut = _lut({ln * 2048 + ev: u for (ln, ev), u in tree.overlap_uuid.items()})
        slice_uuid = uuid[s.lane].copy()
        slice_uuid[s.overlap] = lut(s.lane[s.overlap] * 2048 + s.event[s.overlap])
    else:
        slice_uuid = uuid[s.lane]
    parts = (
        (s.begin_rec, s, s.begin_ns, TYPE_BEGIN, s.k, 4, ev_lut(s.event), slice_uuid),
        (s.end_rec, s, s.end_ns, TYPE_END, s.k, 4, 0, slice_uuid),
        (ins.rec, ins, ins.ts_ns, TYPE_INSTANT, ins.k, 5, ev_lut(ins.event), uuid[ins.lane]),
        (an.rec, an, an.ts_ns, TYPE_INSTANT, an.seq, 6, an_lut(an.kind, an.event), uuid[an.lane]),
    )
    for rec, src, ts, typ, last, iid, name, u in parts:
        if len(rec) == 0:
            continue
        cols["ts"][rec] = ts
        cols["type"][rec] = typ
        cols["block"][rec] = src.block
        cols["group"][rec] = src.group
        cols["sm"][rec] = src.sm
        cols["last"][rec] = last
        cols["iid"][rec] = iid
        cols["name"][rec] = name
        cols["uuid"][rec] = u
    return cols


def _lut(mapping: dict) -> Callable[[np.ndarray], np.ndarray]:
    """Vectorized dict lookup for integer keys."""
    keys = np.array(sorted(mapping), dtype=np.int64)
    vals = np.array([mapping[k] for k in keys.tolist()], dtype=np.int64)

    def look(x: np.ndarray) -> np.ndarray:
        return vals[np.searchsorted(keys, x)] if len(keys) else np.zeros(len(x), np.int64)

    return look


def _parts(source, records_per_part: int | None) -> Iterable[Decoded]:
    if isinstance(source, Decoded):
        return [source]
    return source.parts(records_per_part)


def trace_chunks(source, tracks: str = "sm", progress: Callable[[int, int], None] | None = None,
                 summary_out: list | None = None, records_per_part: int | None = None,
                 space: TraceSpace = _DEFAULT_SPACE, marks=None):
    """The trace as a sequence of byte strings.

    source: a Decoded, or a BufferDecoder (decoded and written a range of lanes at a time).
    progress(done_lanes, lanes) is called after each range of lanes. If ``summary_out`` is a list, the
    buffer's Summary is appended to it at the end. space: where the packets go in a trace of several
    buffers (TraceSpace; the default writes the single-buffer trace). marks: an ``annotations.SliceMarks``
    (an annotated trace, ``ktrace analyze --trace``): those phase slices' BEGIN packets also carry an arg
    ``ktrace.role`` and the critical path's flow ids; None (converting) writes every packet as usual.
    """
    if tracks not in TRACK_MODES:
        raise ValueError(f"tracks must be one of {TRACK_MODES}")
    names = _Names(space.seq_id)
    off = space.uuid_offset
    state = None
    summary = Summary()
    first = None
    total = getattr(source, "lanes", None)
    for d in _parts(source, records_per_part):
        if first is None:
            first = d
            mode = tracks if (tracks != "sm" or d.layout.name == "flashinfer") else "block"  # no SM field
            for i in range(len(d.launch.event_names)):  # the launch's own names first, in index order
                names.get(d.launch.event_name(i))
            yield names.flush(first=True)
            parent = None
            if space.process is not None:
                yield _process_packet(space)
                parent = PROCESS_UUID + off
            yield _track_packets([launch_track(d, off, parent)], set(), space=space)
            state = TrackState.new(d)
            sm_hulls = _SmHulls()
        tree = build_tracks(d, mode, state, off)
        parents = {t.parent for t in tree.tracks}
        yield _track_packets(tree.tracks, parents, space=space)
        luts = _name_iids(d, names)
        yield names.flush()
        cols = _event_columns(d, tree, luts)
        marked = marked_records(d, marks) if marks is not None and len(marks) else None
        for c0 in range(0, d.records, _CHUNK):
            c1 = min(d.records, c0 + _CHUNK)
            if marked is None:
                yield encode_events({k: v[c0:c1] for k, v in cols.items()}, space.seq_id).tobytes()
            else:
                yield from encode_marked(cols, c0, c1, marked, marks, space.seq_id)
        if progress:
            progress(d.lane_range[1] if total else 1, total or 1)
        summary = summary.merge(Summary.of(d))
        yield _hull_packets(_block_hulls(d, mode), space)
        if mode == "sm":
            sm_hulls.add(d)
    if first is not None:
        yield _hull_packets(sm_hulls.hulls(), space)
        yield _launch_slice(first, summary, space)
    if summary_out is not None:
        summary_out.append(summary)


def trace_bytes(source, tracks: str = "sm", records_per_part: int | None = None) -> bytes:
    """The whole trace in memory (small buffers, tests)."""
    return b"".join(trace_chunks(source, tracks, records_per_part=records_per_part))


def write_trace(source, out: str | Path, tracks: str = "sm", progress=None) -> tuple[int, Summary]:
    """Write the trace to ``out`` atomically (a temp file renamed into place).

    source: a Decoded or a BufferDecoder. Returns (bytes written, the buffer's Summary).
    """
    got: list = []
    size = write_chunks(out, trace_chunks(source, tracks, progress, summary_out=got))
    return size, got[0]
