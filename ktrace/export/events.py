"""One range of lanes as trace packets: its tracks, its new interned names, its records' packets, its hulls.

A part is written in two steps. ``PartWriter.declare`` needs what the parts before it declared (``WriteState``:
the interned names, the SM tracks and the overlap tracks' next uuid) and updates it; ``PartWriter.body``
then encodes the part's records on its own. Parts are declared in lane order, in this process or, one after
another, in worker processes (``workers.py``) that then encode in parallel: the bytes are the same.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterator

import numpy as np

from ..core.model import Anomalies, Decoded, Summary
from ..core.terminal import visible_controls as _visible
from .annotations import encode_marked, marked_records
from .packets import pb2 as _pb2, emit as _emit
from .packets import TYPE_BEGIN, TYPE_END, TYPE_INSTANT, encode_events
from .tracks import BLOCK_BASE, LAUNCH_UUID, SM_BASE, TrackState, build_tracks

__all__ = ["ARG_NAMES", "SEQ_ID", "Names", "WriteState", "PartOutput", "PartWriter", "SmHulls", "track_packets",
           "hull_packets"]

SEQ_ID = 1
_SEQ_CLEARED, _SEQ_NEEDS = 1, 2
# Interned debug-annotation names: iid -> name. A lane's block, group and SM are on its track (tracks.py), a
# slice's instance k is its rank among its lane's slices of its phase (the SQL package derives it): a phase
# slice carries no arg but ``sm`` where its record's SM differs from its block's.
ARG_NAMES = {1: "sm", 2: "instant", 3: "seq"}
_CHUNK = 1 << 20  # records encoded at a time


class Names:
    """Interned event names: iids handed out in first-use order, declared before the packets using them."""

    def __init__(self, seq_id: int = SEQ_ID, iid: dict | None = None) -> None:
        self.iid: dict[str, int] = dict(iid or {})
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
            p.interned_data.event_names.add(iid=self.iid[nm], name=_visible(nm))
        if first:
            for iid, nm in ARG_NAMES.items():
                p.interned_data.debug_annotation_names.add(iid=iid, name=nm)
        self.pending = []
        return _emit(p)


@dataclass
class WriteState:
    """What the parts written so far declared: interned names (none pending) and tracks."""

    names: Names
    tracks: TrackState

    def wire(self) -> tuple:
        """A small picklable copy (sent to the worker that declares the next part)."""
        return self.names.seq_id, dict(self.names.iid), set(self.tracks.sms), self.tracks.next_uuid

    @staticmethod
    def from_wire(w: tuple) -> "WriteState":
        seq_id, iid, sms, next_uuid = w
        return WriteState(Names(seq_id, iid), TrackState(set(sms), next_uuid))


@dataclass
class PartOutput:
    """One part written: its byte strings in order, its Summary, its SM hulls (sm -> (first BEGIN, last END,
    blocks)), the lane it ends at, and the part without its rows (its launch facts) when it is the first."""

    chunks: list
    summary: Summary
    sm_hulls: dict
    lane_hi: int
    bare: Decoded | None = None


@dataclass
class PartWriter:
    """How parts are written: track mode, TraceSpace (seq_id, uuid_offset) and the annotation marks (or None)."""

    mode: str
    space: object
    marks: object = None

    def declare(self, d: Decoded, state: WriteState) -> tuple[bytes, tuple]:
        """(the part's track packets and new interned names, what ``body`` needs); updates ``state``."""
        tree = build_tracks(d, self.mode, state.tracks, self.space.uuid_offset)
        parents = {t.parent for t in tree.tracks}
        head = track_packets(tree.tracks, parents, space=self.space)
        luts = _name_iids(d, state.names)
        return head + state.names.flush(), (tree, luts)

    def prepare_plain(self, d: Decoded, base: WriteState) -> tuple | None:
        """For a part that adds no interned name and no overlap track (whose record bytes do not depend on the
        parts before it): (all its tracks, what ``body`` needs), from ``base``, the state before the first
        part; else None. ``plain_head`` then gives, once the state before it is known, what ``declare`` gives."""
        names = Names(base.names.seq_id, base.names.iid)
        tree = build_tracks(d, self.mode, TrackState(set(), base.tracks.next_uuid), self.space.uuid_offset)
        if tree.overlap_uuid:
            return None
        luts = _name_iids(d, names)
        return None if names.pending else (tree.tracks, (tree, luts))

    def plain_head(self, tracks: list, state: WriteState) -> bytes:
        """``declare``'s bytes for a plain part: its tracks less the SM tracks already declared; updates ``state``."""
        lo = SM_BASE + self.space.uuid_offset
        keep = []
        for t in tracks:
            if lo <= t.uuid < LAUNCH_UUID + self.space.uuid_offset:  # an SM track: SM_BASE + sm + 1
                sm = t.uuid - lo - 1
                if sm in state.tracks.sms:
                    continue
                state.tracks.sms.add(sm)
            keep.append(t)
        return track_packets(keep, {t.parent for t in keep}, space=self.space)

    def body(self, d: Decoded, declared: tuple) -> Iterator[bytes]:
        """The part's record packets in (lane, sequence) order, then its block hulls."""
        tree, luts = declared
        cols = _event_columns(d, tree, luts)
        marks = self.marks
        marked = marked_records(d, marks) if marks is not None and len(marks) else None
        for c0 in range(0, d.records, _CHUNK):
            c1 = min(d.records, c0 + _CHUNK)
            if marked is None:
                yield encode_events({k: v[c0:c1] for k, v in cols.items()}, self.space.seq_id).tobytes()
            else:
                yield from encode_marked(cols, c0, c1, marked, marks, self.space.seq_id)
        yield hull_packets(_block_hulls(d, self.mode), self.space)

    def output(self, d: Decoded, chunks: list, first: bool) -> PartOutput:
        hulls = sm_hull_part(d) if self.mode == "sm" else {}
        return PartOutput(chunks, Summary.of(d), hulls, d.lane_range[1], _bare(d) if first else None)


def _bare(d: Decoded) -> Decoded:
    """The part's launch facts without its rows."""
    def empty(t):
        return replace(t, **{f: getattr(t, f)[:0] for f in t.__dataclass_fields__})

    return replace(d, slices=empty(d.slices), instants=empty(d.instants), anomalies=empty(d.anomalies))


def track_packets(tracks: list, parents: set, description: str | None = None, space=None) -> bytes:
    pb = _pb2()
    out = bytearray()
    launch_uuid = LAUNCH_UUID + space.uuid_offset
    for t in tracks:
        p = pb.TracePacket()
        p.trusted_packet_sequence_id = space.seq_id
        td = p.track_descriptor
        td.uuid = t.uuid
        td.name = _visible(t.name)
        if t.description:
            td.description = _visible(t.description)
        if t.parent is not None:
            td.parent_uuid = t.parent
        if t.rank is not None:
            td.sibling_order_rank = t.rank
        if t.uuid in parents or t.uuid == launch_uuid:
            td.child_ordering = pb.TrackDescriptor.EXPLICIT
        if description and t.uuid == launch_uuid:
            td.description = _visible(description)
        out.extend(_emit(p))
    return bytes(out)


def hull_packets(hulls, space) -> bytes:
    """Slices that give collapsed SM and block tracks something to show: one per track, from the first
    BEGIN to the last END under it. Named inline, without args: they are on no lane track, so no phase slices."""
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
                p.track_event.name = _visible(name)
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


def sm_hull_part(d: Decoded) -> dict:
    """Per SM of one part: (first BEGIN, last END, set of blocks) of its slices."""
    s = d.slices
    if len(s) == 0:
        return {}
    # Slices are in lane (so block) order: runs of one (block, SM), then a loop over runs (about one a block).
    starts = np.flatnonzero(np.r_[True, (s.block[1:] != s.block[:-1]) | (s.sm[1:] != s.sm[:-1])])
    lo = np.minimum.reduceat(s.begin_ns, starts).tolist()
    hi = np.maximum.reduceat(s.end_ns, starts).tolist()
    out: dict = {}
    for sm, b, t0, t1 in zip(s.sm[starts].tolist(), s.block[starts].tolist(), lo, hi):
        if sm in out:
            o = out[sm]
            out[sm] = (min(o[0], t0), max(o[1], t1), o[2] | {b})
        else:
            out[sm] = (t0, t1, {b})
    return out


class SmHulls:
    """Per SM, across parts: the first BEGIN and last END of its blocks' slices, and how many blocks."""

    def __init__(self) -> None:
        self.parts: dict = {}

    def add(self, part: dict) -> None:
        for sm, (t0, t1, blocks) in part.items():
            o = self.parts.get(sm)
            self.parts[sm] = (t0, t1, set(blocks)) if o is None else (min(o[0], t0), max(o[1], t1), o[2] | blocks)

    def hulls(self) -> list:
        return [(SM_BASE + k + 1, lo, hi, f"{len(b)} block{'s' if len(b) != 1 else ''}")
                for k, (lo, hi, b) in sorted(self.parts.items())]


def _name_iids(d: Decoded, names: Names) -> tuple[Callable, Callable]:
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
    BEGIN or END, an instant, or an anomaly marker, and is scattered to its own row. ``has_sm``: the record's
    SM differs from the one its lane track says (its own ``sm`` arg); ``has_last``: an instant's index or an
    anomaly's sequence number (arg ``instant`` or ``seq``)."""
    n = d.records
    s, ins, an = d.slices, d.instants, d.anomalies
    ev_lut, an_lut = luts
    whole = 2 * len(s) + len(ins) + len(an) == n  # every record is written below (always, in a decoded part)
    new = np.empty if whole else np.zeros
    cols = {c: new(n, np.int64) for c in ("ts", "type", "sm", "has_sm", "last", "has_last", "iid", "name", "uuid")}
    uuid = tree.lane_uuid
    if s.overlap.any():
        lut = _lut({ln * 2048 + ev: u for (ln, ev), u in tree.overlap_uuid.items()})
        slice_uuid = uuid[s.lane].copy()
        slice_uuid[s.overlap] = lut(s.lane[s.overlap] * 2048 + s.event[s.overlap])
    else:
        slice_uuid = uuid[s.lane]
    parts = (
        (s.begin_rec, s, s.begin_ns, TYPE_BEGIN, 0, 0, ev_lut(s.event), slice_uuid),
        (s.end_rec, s, s.end_ns, TYPE_END, 0, 0, 0, slice_uuid),
        (ins.rec, ins, ins.ts_ns, TYPE_INSTANT, ins.k, 2, ev_lut(ins.event), uuid[ins.lane]),
        (an.rec, an, an.ts_ns, TYPE_INSTANT, an.seq, 3, an_lut(an.kind, an.event), uuid[an.lane]),
    )
    for rec, src, ts, typ, last, iid, name, u in parts:
        if len(rec) == 0:
            continue
        cols["ts"][rec] = ts
        cols["type"][rec] = typ
        cols["sm"][rec] = src.sm
        cols["has_sm"][rec] = (src.sm != tree.block_sm[src.block]) & (typ != TYPE_END)
        cols["last"][rec] = last
        cols["has_last"][rec] = iid != 0
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
