"""Writing a decoded buffer as a Perfetto TrackEvent trace (docs/trace-format.md says what is in it).

Tracks and the launch slice are few and go through the protobuf classes; the per-record packets are many
and go through the vectorized encoder in ``protowire``, in chunks, in (lane, sequence) order: the trace
processor sorts by timestamp itself, and this order keeps each track's events in the producer's order
(ties included).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np

from ..model import Anomalies, Decoded
from .packets import TYPE_BEGIN as _TYPE_BEGIN, TYPE_END as _TYPE_END, TYPE_INSTANT as _TYPE_INSTANT, encode_events
from .tracks import LAUNCH_UUID, TRACK_MODES, build_tracks

__all__ = ["write_trace", "trace_bytes", "ARG_NAMES", "event_name_table"]

SEQ_ID = 1
_SEQ_CLEARED, _SEQ_NEEDS = 1, 2
# Interned debug-annotation names: iid -> name.
ARG_NAMES = {1: "block", 2: "group", 3: "sm", 4: "k", 5: "instant", 6: "seq"}
_CHUNK = 1 << 20
_OBJ_BEGIN, _OBJ_END, _OBJ_INSTANT, _OBJ_ANOMALY = 0, 1, 2, 3


def _pb2():
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2

    return perfetto_trace_pb2


def event_name_table(d: Decoded) -> tuple[list[str], dict]:
    """Interned event names (iid = index + 1) and lookups: phase/instant event -> iid, (kind, event) -> iid."""
    names: list[str] = []
    by_event: dict[int, int] = {}
    events = np.unique(np.concatenate([d.slices.event, d.instants.event])).tolist()
    for ev in events:
        names.append("finalize" if ev < 0 else d.launch.event_name(ev))
        by_event[ev] = len(names)
    by_anomaly: dict[tuple[int, int], int] = {}
    a = d.anomalies
    if len(a):
        for kind, ev in np.unique(np.stack([a.kind.astype(np.int64), a.event]), axis=1).T.tolist():
            label = Anomalies.KINDS[kind].replace("_", " ")
            evname = "finalize" if ev < 0 else d.launch.event_name(ev)
            names.append(f"⚠ {label}: {evname}")
            by_anomaly[(kind, ev)] = len(names)
    return names, {"event": by_event, "anomaly": by_anomaly}


def _header_packets(d: Decoded, tree, names: list[str]) -> bytes:
    pb = _pb2()
    out = bytearray()

    def emit(pkt) -> None:
        t = pb.Trace()
        t.packet.append(pkt)
        out.extend(t.SerializeToString())

    p = pb.TracePacket()
    p.trusted_packet_sequence_id = SEQ_ID
    p.sequence_flags = _SEQ_CLEARED
    for i, nm in enumerate(names, 1):
        p.interned_data.event_names.add(iid=i, name=nm)
    for iid, nm in ARG_NAMES.items():
        p.interned_data.debug_annotation_names.add(iid=iid, name=nm)
    emit(p)
    parents = {t.parent for t in tree.tracks}
    for t in tree.tracks:
        p = pb.TracePacket()
        p.trusted_packet_sequence_id = SEQ_ID
        td = p.track_descriptor
        td.uuid = t.uuid
        td.name = t.name
        if t.parent is not None:
            td.parent_uuid = t.parent
        if t.rank is not None:
            td.sibling_order_rank = t.rank
        if t.uuid in parents:
            td.child_ordering = pb.TrackDescriptor.EXPLICIT
        if t.uuid == LAUNCH_UUID:
            td.description = _launch_description(d)
        emit(p)
    return bytes(out)


def launch_facts(d: Decoded) -> dict:
    """The launch slice's args: name -> str or int."""
    L = d.launch
    facts: dict = {"kernel": L.kernel}
    if L.grid:
        facts["grid"] = "x".join(map(str, L.grid))
    if L.block_dim:
        facts["block"] = "x".join(map(str, L.block_dim))
    if L.device:
        facts["device"] = L.device
    facts["layout"] = d.layout.name
    facts["layout_match"] = round(d.layout.score, 6)
    facts["num_blocks"] = L.num_blocks
    facts["num_groups"] = L.num_groups
    if L.timer_tick_ns is not None:
        facts["timer_tick_ns"] = L.timer_tick_ns
    if d.min_step_ns is not None:
        facts["min_step_ns"] = d.min_step_ns
    facts["time_origin"] = d.time_origin
    facts["records"] = d.records
    facts["slices"] = len(d.slices)
    facts["instants"] = len(d.instants)
    facts["anomalous_records"] = len(d.anomalies)
    for k, n in d.anomalies.counts().items():
        facts[f"anomaly.{k}"] = n
    for k, n in d.notes.items():
        facts[f"note.{k}"] = n
    return facts


def _launch_description(d: Decoded) -> str:
    return "; ".join(f"{k}={v}" for k, v in launch_facts(d).items())


def _launch_packets(d: Decoded) -> tuple[bytes, bytes]:
    pb = _pb2()
    ts = [a for a in (d.slices.begin_ns, d.slices.end_ns, d.instants.ts_ns) if len(a)]
    t0 = int(min(a.min() for a in ts)) if ts else 0
    t1 = int(max(a.max() for a in ts)) if ts else 0
    begin, end = pb.Trace(), pb.Trace()
    p = begin.packet.add()
    p.timestamp = t0
    p.trusted_packet_sequence_id = SEQ_ID
    te = p.track_event
    te.type = pb.TrackEvent.TYPE_SLICE_BEGIN
    te.track_uuid = LAUNCH_UUID
    te.name = d.launch.kernel
    for k, v in launch_facts(d).items():
        a = te.debug_annotations.add(name=k)
        if isinstance(v, str):
            a.string_value = v
        elif isinstance(v, float):
            a.double_value = v
        else:
            a.int_value = v
    q = end.packet.add()
    q.timestamp = t1
    q.trusted_packet_sequence_id = SEQ_ID
    q.track_event.type = pb.TrackEvent.TYPE_SLICE_END
    q.track_event.track_uuid = LAUNCH_UUID
    return begin.SerializeToString(), end.SerializeToString()


def _record_objects(d: Decoded) -> tuple[np.ndarray, np.ndarray]:
    """For each record in (lane, sequence) order: what it became (kind) and its row in that table."""
    n = d.records
    kind = np.empty(n, np.int8)
    row = np.empty(n, np.int64)
    s, i, a = d.slices, d.instants, d.anomalies
    for k, rec in ((_OBJ_BEGIN, s.begin_rec), (_OBJ_END, s.end_rec), (_OBJ_INSTANT, i.rec), (_OBJ_ANOMALY, a.rec)):
        kind[rec] = k
        row[rec] = np.arange(len(rec))
    return kind, row


def _event_chunk(d: Decoded, tree, lookups, kind: np.ndarray, row: np.ndarray) -> np.ndarray:
    """Encoded Trace.packet bytes for one chunk of records."""
    n = len(kind)
    s, ins, an = d.slices, d.instants, d.anomalies
    ts = np.zeros(n, np.int64)
    block = np.zeros(n, np.int64)
    group = np.zeros(n, np.int64)
    sm = np.zeros(n, np.int64)
    last_val = np.zeros(n, np.int64)
    last_iid = np.zeros(n, np.int64)
    name_iid = np.zeros(n, np.int64)
    typ = np.zeros(n, np.int64)
    uuid = np.zeros(n, np.int64)

    ev_lut = _lut(lookups["event"])
    for obj, src in ((_OBJ_BEGIN, s), (_OBJ_END, s), (_OBJ_INSTANT, ins), (_OBJ_ANOMALY, an)):
        m = kind == obj
        if not m.any():
            continue
        r = row[m]
        block[m] = src.block[r]
        group[m] = src.group[r]
        sm[m] = src.sm[r]
        if obj == _OBJ_BEGIN or obj == _OBJ_END:
            ts[m] = (s.begin_ns if obj == _OBJ_BEGIN else s.end_ns)[r]
            typ[m] = _TYPE_BEGIN if obj == _OBJ_BEGIN else _TYPE_END
            last_val[m], last_iid[m] = s.k[r], 4
            name_iid[m] = ev_lut(s.event[r]) if obj == _OBJ_BEGIN else 0
            uuid[m] = tree.lane_uuid[s.lane[r]]
            ov = s.overlap[r]
            if ov.any():
                idx = np.flatnonzero(m)[ov]
                uuid[idx] = [tree.overlap_uuid[(a, b)] for a, b in zip(s.lane[r][ov].tolist(), s.event[r][ov].tolist())]
        elif obj == _OBJ_INSTANT:
            ts[m] = ins.ts_ns[r]
            typ[m] = _TYPE_INSTANT
            last_val[m], last_iid[m] = ins.k[r], 5
            name_iid[m] = ev_lut(ins.event[r])
            uuid[m] = tree.lane_uuid[ins.lane[r]]
        else:
            ts[m] = an.ts_ns[r]
            typ[m] = _TYPE_INSTANT
            last_val[m], last_iid[m] = an.seq[r], 6
            keys = an.kind[r].astype(np.int64) * (1 << 20) + an.event[r] + 1
            table = {kk * (1 << 20) + ev + 1: iid for (kk, ev), iid in lookups["anomaly"].items()}
            name_iid[m] = _lut(table)(keys)
            uuid[m] = tree.lane_uuid[an.lane[r]]

    return encode_events(
        {"ts": ts, "type": typ, "block": block, "group": group, "sm": sm, "last": last_val, "iid": last_iid,
         "name": name_iid, "uuid": uuid}
    )


def _lut(mapping: dict) -> Callable[[np.ndarray], np.ndarray]:
    """Vectorized dict lookup for integer keys."""
    keys = np.array(sorted(mapping), dtype=np.int64)
    vals = np.array([mapping[k] for k in keys.tolist()], dtype=np.int64)

    def look(x: np.ndarray) -> np.ndarray:
        return vals[np.searchsorted(keys, x)]

    return look


def trace_chunks(d: Decoded, tracks: str = "sm", progress: Callable[[int, int], None] | None = None):
    """The trace as a sequence of byte strings (header, event chunks, launch end)."""
    if tracks not in TRACK_MODES:
        raise ValueError(tracks)
    if tracks == "sm" and not d.layout.name == "flashinfer":
        tracks = "block"  # layouts without an SM field: no SM level to show
    tree = build_tracks(d, tracks)
    names, lookups = event_name_table(d)
    yield _header_packets(d, tree, names)
    begin, end = _launch_packets(d)
    yield begin
    kind, row = _record_objects(d)
    n = len(kind)
    for c0 in range(0, n, _CHUNK):
        c1 = min(n, c0 + _CHUNK)
        yield _event_chunk(d, tree, lookups, kind[c0:c1], row[c0:c1]).tobytes()
        if progress:
            progress(c1, n)
    yield end


def trace_bytes(d: Decoded, tracks: str = "sm") -> bytes:
    """The whole trace in memory (small buffers, tests)."""
    return b"".join(trace_chunks(d, tracks))


def write_trace(d: Decoded, out: str | Path, tracks: str = "sm", progress=None) -> int:
    """Write the trace to ``out`` (atomically: a temp file renamed into place). Returns bytes written."""
    out = Path(out)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    size = 0
    try:
        with open(tmp, "wb") as f:
            for chunk in trace_chunks(d, tracks, progress):
                f.write(chunk)
                size += len(chunk)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return size
