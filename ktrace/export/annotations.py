"""The analysis drawn on the timeline: the packets an annotated trace adds (docs/trace-format.md, "Annotations").

This module knows nothing of the analysis: it takes plain rows and arrays (``Annotations``, built by
``ktrace.report.trace_annotations`` from an Analysis) and writes them as TrackEvent packets on a packet
sequence of their own (``ANNOTATION_SEQ``, inline names, no interning), under the launch track:

- ``findings``: one track per finding, all named ``findings`` and merged by the UI into one (a shared
  ``sibling_merge_key``), each holding one slice over the time the finding concerns, ranked first;
- ``critical path``: one track holding the path's parts (slices and gaps) in time order;
- counter tracks (``TrackDescriptor.counter``): busy SMs over time, lanes running per phase;
- flows (``TrackEvent.flow_ids`` / ``terminating_flow_ids``) along the path's hops, and an arg
  ``ktrace.role`` on the slices a finding names (``SliceMarks``): both go on the lane slices themselves when
  the trace is written from the buffer (``writer.trace_chunks(..., marks=)``), else on the critical path
  track's parts.
"""

from __future__ import annotations

from dataclasses import field, replace
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from .packets import pb2 as _pb2, emit as _emit
from .packets import _rows, encode_events, varint_len
from .tracks import LAUNCH_UUID
from ..core.records import frozen
from ..core.terminal import visible_controls as _visible

__all__ = ["Span", "CounterSeries", "SliceMarks", "Annotations", "annotation_chunks", "marked_records",
           "encode_marked", "ANNOTATION_SEQ",
           "FINDINGS_TRACK", "PATH_TRACK", "FINDINGS_UUID", "PATH_UUID", "COUNTER_UUID", "FINDINGS_MERGE_KEY"]

ANNOTATION_SEQ = 100  # the annotations' trusted_packet_sequence_id (a merged trace's GPUs use 1..64)
FINDINGS_TRACK = "findings"
PATH_TRACK = "critical path"
FINDINGS_MERGE_KEY = "ktrace.findings"
_ANN_BASE = 1 << 41  # below BLOCK_BASE (1 << 42), above every lane and overlap track uuid
FINDINGS_UUID = _ANN_BASE  # + i for the i-th finding
PATH_UUID = _ANN_BASE + (1 << 20)
COUNTER_UUID = _ANN_BASE + (1 << 21)  # + i for the i-th counter
_RANK0 = -(1 << 20)  # sibling ranks: annotations before every SM or block track (ranks >= 0)


@frozen
class Span:
    """One slice: ``name`` over [begin_ns, end_ns] (trace ns), args (name, str | int | float) pairs."""

    name: str
    begin_ns: int
    end_ns: int
    args: tuple = ()


@frozen
class CounterSeries:
    """A counter track: from ``ts[i]`` on (trace ns) the value is ``values[i]``, counted in ``unit`` (the
    viewer's axis says "132 SMs", not "132 count")."""

    name: str
    ts: np.ndarray
    values: np.ndarray
    description: str = ""
    unit: str = ""


@frozen
class SliceMarks:
    """Phase slices to decorate, one row each, keyed by (phase name, block, group, k): ``role`` (an arg
    ``ktrace.role``; "" for none), ``flow_out`` (a flow id leaving the slice; 0 for none) and ``flow_in`` (a
    flow id ending at it; 0 for none)."""

    phase: tuple
    block: np.ndarray
    group: np.ndarray
    k: np.ndarray
    role: tuple
    flow_out: np.ndarray
    flow_in: np.ndarray

    def __len__(self) -> int:
        return len(self.phase)

    @staticmethod
    def empty() -> "SliceMarks":
        z = np.zeros(0, np.int64)
        return SliceMarks((), z, z, z, (), z.astype(np.uint64), z.astype(np.uint64))


@frozen
class Annotations:
    """What an annotated trace adds. findings: a Span per finding, in the findings' order; path: the
    critical path's parts in time order; path_flows: (from part index, to part index) per hop, used when the
    lane slices cannot carry them (``on_lanes`` False); counters: CounterSeries; marks: the lane slices'
    roles and flows (written by the trace writer when ``on_lanes``)."""

    findings: tuple = ()
    path: tuple = ()
    path_flows: tuple = ()
    counters: tuple = ()
    marks: SliceMarks = field(default_factory=SliceMarks.empty)
    description: str = ""


def shift_annotations(ann: Annotations, shift_ns: int) -> Annotations:
    """``ann`` with every time moved by ``shift_ns`` (a trace written from a decoder shifted by as much)."""
    def move(spans):
        return tuple(replace(s, begin_ns=int(s.begin_ns) + shift_ns, end_ns=int(s.end_ns) + shift_ns) for s in spans)

    return replace(ann, findings=move(ann.findings), path=move(ann.path),
                   counters=tuple(replace(c, ts=np.asarray(c.ts) + shift_ns) for c in ann.counters))


def set_arg(te, name: str, value) -> None:
    """A debug annotation with an inline name on TrackEvent ``te``."""
    a = te.debug_annotations.add(name=name)
    if isinstance(value, str):
        a.string_value = _visible(value)
    elif isinstance(value, (bool, np.bool_)):
        a.bool_value = bool(value)
    elif isinstance(value, (int, np.integer)):
        a.int_value = int(value)
    else:
        a.double_value = float(value)


def _track(uuid: int, name: str, rank: int, parent: int, description: str = "", counter: bool = False,
           merge_key: str | None = None, unit: str = "") -> bytes:
    pb = _pb2()
    p = pb.TracePacket()
    p.trusted_packet_sequence_id = ANNOTATION_SEQ
    td = p.track_descriptor
    td.uuid = uuid
    td.parent_uuid = parent
    td.name = _visible(name)
    td.sibling_order_rank = rank
    if description:
        td.description = _visible(description)
    if counter and unit:  # what is counted, by name: the viewer shows it beside every value
        td.counter.unit_name = unit
    elif counter:
        td.counter.unit = pb.CounterDescriptor.UNIT_COUNT
    if merge_key:
        td.sibling_merge_behavior = pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_BY_SIBLING_MERGE_KEY
        td.sibling_merge_key = merge_key
    return _emit(p)


def _slice(uuid: int, s: Span, flow_out: int = 0, flow_in: int = 0) -> bytes:
    pb = _pb2()
    begin, end = pb.TracePacket(), pb.TracePacket()
    for p in (begin, end):
        p.trusted_packet_sequence_id = ANNOTATION_SEQ
        p.track_event.track_uuid = uuid
    begin.timestamp, end.timestamp = int(s.begin_ns), int(s.end_ns)
    begin.track_event.type = pb.TrackEvent.TYPE_SLICE_BEGIN
    begin.track_event.name = _visible(s.name)
    for k, v in s.args:
        set_arg(begin.track_event, k, v)
    if flow_out:
        begin.track_event.flow_ids.append(flow_out)
    if flow_in:
        begin.track_event.terminating_flow_ids.append(flow_in)
    end.track_event.type = pb.TrackEvent.TYPE_SLICE_END
    return _emit(begin) + _emit(end)


def _varint(v: int) -> list:
    out = []
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return out


def _counter_values(uuid: int, c: CounterSeries) -> bytes:
    """The counter's TYPE_COUNTER packets, encoded for all points at once (as ``packets.encode_events`` does
    for the lane records): ``Trace.packet { timestamp, trusted_packet_sequence_id, track_event { type,
    track_uuid, counter_value } }``, exactly what the protobuf classes serialize (tests compare)."""
    ts = np.asarray(c.ts, np.int64).view(np.uint64)
    val = np.asarray(c.values, np.int64).view(np.uint64)
    n = len(ts)
    if n == 0:
        return b""
    u64 = {"ts": ts, "value": val}
    lens = {f: varint_len(u64[f]).astype(np.int64) for f in u64}
    key = lens["ts"] * 16 + lens["value"]
    shapes = np.unique(key).tolist()
    layouts = []
    for k in shapes:
        lt, lv = k // 16, k % 16
        te = [0x48, 4, 0x58] + _varint(uuid) + [0xF0, 0x01] + [("value", i, lv) for i in range(lv)]
        pkt = [0x40] + [("ts", i, lt) for i in range(lt)] + [0x50, ANNOTATION_SEQ, 0x5A, len(te)] + te
        layouts.append([0x0A, len(pkt)] + pkt)
    inv = np.searchsorted(shapes, key)
    widths = np.array([len(lay) for lay in layouts], np.int64)
    m = np.zeros((n, int(widths.max())), np.uint8)
    for j, lay in enumerate(layouts):  # a loop over shapes (a few), not points
        rows = np.flatnonzero(inv == j)
        m[rows, :len(lay)] = _rows(lay, u64, rows)
    return m[np.arange(m.shape[1]) < widths[inv][:, None]].tobytes()


def annotation_chunks(ann: Annotations, on_lanes: bool, uuid_offset: int = 0) -> Iterator[bytes]:
    """The annotation packets, as byte strings to append to a trace of the launch (after its own packets).

    on_lanes: the lane slices carry the path's flows (the trace was written with ``marks``); else the flows
    join the critical path track's parts (``ann.path_flows``)."""
    launch = LAUNCH_UUID + uuid_offset
    rank = _RANK0
    for i, s in enumerate(ann.findings):
        yield _track(FINDINGS_UUID + uuid_offset + i, FINDINGS_TRACK, rank + i, launch, ann.description,
                     merge_key=FINDINGS_MERGE_KEY)
        yield _slice(FINDINGS_UUID + uuid_offset + i, s)
    rank += max(len(ann.findings), 1)
    if ann.path:
        yield _track(PATH_UUID + uuid_offset, PATH_TRACK, rank, launch,
                     "the critical path: a backward walk from the kernel's last end through what each slice waited "
                     "for; its parts tile the wall time")
        out = {a: j + 1 for j, (a, _) in enumerate(ann.path_flows)} if not on_lanes else {}
        inn = {b: j + 1 for j, (_, b) in enumerate(ann.path_flows)} if not on_lanes else {}
        for i, s in enumerate(ann.path):
            yield _slice(PATH_UUID + uuid_offset, s, flow_id(out.get(i, 0), uuid_offset),
                         flow_id(inn.get(i, 0), uuid_offset))
    rank += 1
    for i, c in enumerate(ann.counters):
        uuid = COUNTER_UUID + uuid_offset + i
        yield _track(uuid, c.name, rank + i, launch, c.description, counter=True, unit=c.unit)
        yield _counter_values(uuid, c)


def flow_id(j: int, uuid_offset: int = 0) -> int:
    """The j-th hop's flow id (j >= 1; 0 means none): distinct per launch of a trace."""
    return 0 if not j else ((uuid_offset >> 48) << 32) + j


def mark_packet(ts: int, seq_id: int, uuid: int, name_iid: int, args: Iterable, role: str, flow_out: int,
                flow_in: int) -> bytes:
    """A phase slice's BEGIN packet as the writer's encoder makes it (interned names, SEQ_NEEDS), plus an arg
    ``ktrace.role`` and the flows: args are (name iid, int value) pairs."""
    pb = _pb2()
    p = pb.TracePacket()
    p.timestamp = int(ts)
    p.trusted_packet_sequence_id = seq_id
    te = p.track_event
    for iid, v in args:
        te.debug_annotations.add(name_iid=int(iid), int_value=int(v))
    if role:  # a dict arg: the trace processor names it debug.ktrace.role (a dotted name would become ktrace_role)
        te.debug_annotations.add(name="ktrace").dict_entries.add(name="role", string_value=role)
    te.type = pb.TrackEvent.TYPE_SLICE_BEGIN
    te.name_iid = int(name_iid)
    te.track_uuid = int(uuid)
    if flow_out:
        te.flow_ids.append(int(flow_out))
    if flow_in:
        te.terminating_flow_ids.append(int(flow_in))
    p.sequence_flags = 2  # SEQ_NEEDS_INCREMENTAL_STATE
    return _emit(p)


def append_to(trace: Path, chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The bytes of ``trace`` followed by ``chunks`` (a trace is a concatenation of packets)."""
    with open(trace, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            yield b
    yield from chunks


def marked_records(d, marks) -> tuple[np.ndarray, np.ndarray]:
    """(BEGIN record index, row of ``marks``) for each phase slice of this part that ``marks`` names,
    ordered by record."""
    L, s = d.launch, d.slices
    ng, ne = L.num_groups, len(L.event_names) + 2
    index = {L.event_name(i): i for i in range(len(L.event_names))}
    index.setdefault("finalize", -1)
    ev = np.array([index.get(p, -2) for p in marks.phase], np.int64)  # a loop over marks, not events
    kmax = int(max(s.k.max(initial=0), marks.k.max(initial=0))) + 1
    key_m = ((np.asarray(marks.block, np.int64) * ng + marks.group) * ne + ev + 1) * kmax + marks.k
    key_m[ev == -2] = -1
    key_s = (s.lane.astype(np.int64) * ne + s.event + 1) * kmax + s.k
    order = np.argsort(key_m, kind="stable")
    pos = np.searchsorted(key_m[order], key_s)
    pos = np.minimum(pos, max(len(order) - 1, 0))
    hit = np.flatnonzero(key_m[order][pos] == key_s) if len(order) else np.zeros(0, np.int64)
    recs, rows = s.begin_rec[hit].astype(np.int64), order[pos[hit]]
    by = np.argsort(recs, kind="stable")
    return recs[by], rows[by]


def encode_marked(cols: dict, c0: int, c1: int, marked, marks, seq_id: int):
    """Records c0..c1 encoded as ``encode_events`` does, except the marked BEGINs, written through the
    protobuf classes with their role and flows, each in its place (a loop over marked slices only)."""
    recs, rows = marked
    lo, hi = np.searchsorted(recs, [c0, c1])
    at = c0
    for rec, row in zip(recs[lo:hi].tolist(), rows[lo:hi].tolist()):
        if rec > at:
            yield encode_events({k: v[at:rec] for k, v in cols.items()}, seq_id).tobytes()
        args = [(1, cols["sm"][rec])] if cols["has_sm"][rec] else []  # events.ARG_NAMES: 1 sm
        yield mark_packet(cols["ts"][rec], seq_id, cols["uuid"][rec], cols["name"][rec], args, marks.role[row],
                          int(marks.flow_out[row]), int(marks.flow_in[row]))
        at = rec + 1
    if c1 > at:
        yield encode_events({k: v[at:c1] for k, v in cols.items()}, seq_id).tobytes()
