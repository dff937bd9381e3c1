"""The per-record TrackEvent packets, encoded for many records at once (the writer's hot path).

Every packet has the same fields; only the widths of their varints differ. Records are grouped by
"shape" (record kind and the byte length of each varint), each shape's byte layout is computed once, and
every byte position of that layout is written for all records of the shape with one numpy assignment.
The bytes are exactly what the protobuf library serializes for the same message (fields in field-number
order, minimal varints, negative int64 as ten bytes): tests compare with ``SerializeToString``.

Packet (as ``Trace.packet``, field 1)::

    TracePacket { timestamp(8)=ts  trusted_packet_sequence_id(10)=seq_id (1 unless merging several GPUs)
                  track_event(11) { debug_annotations(4) {name_iid(1) int_value(4)}: sm (has_sm),
                                      then instant or seq (has_last); none on END
                                    type(9)  name_iid(10) (not on END)  track_uuid(11) }
                  sequence_flags(13)=SEQ_NEEDS_INCREMENTAL_STATE (not on END) }
"""

from __future__ import annotations

import numpy as np

__all__ = ["encode_events", "scatter_rows", "varint_len", "TYPE_BEGIN", "TYPE_END", "TYPE_INSTANT"]

TYPE_BEGIN, TYPE_END, TYPE_INSTANT = 1, 2, 3
_THRESH = np.array([1 << (7 * b) for b in range(1, 10)], dtype=np.uint64)
_FIELDS = ("ts", "sm", "last", "name", "uuid")
_SM_IID = 1  # events.ARG_NAMES: 1 sm (2 instant and 3 seq come in the ``iid`` column)


def varint_len(v: np.ndarray) -> np.ndarray:
    """Length in bytes (1..10) of the minimal varint of each uint64 value."""
    v = np.asarray(v, np.uint64)
    n = np.ones(len(v), np.int8)
    if len(v) == 0:
        return n
    top = v.max()
    for t in _THRESH:  # only as many passes as the largest value needs
        if top < t:
            break
        n += v >= t
    return n


def _layout(flags: int, lens: dict, seq_id: int = 1) -> list:
    """Byte layout of one shape: items (const byte) or (field, byte index, varint length). flags: bit 0 the
    record is not an END (it has a name), bit 1 an ``sm`` arg, bit 2 a ``last`` arg (its name in ``iid``)."""
    named, has_sm, has_last = flags & 1, flags & 2, flags & 4
    te: list = []
    for on, iid, val in ((has_sm, _SM_IID, "sm"), (has_last, ("iid", 0, 1), "last")):
        if on:
            body = [0x08, iid, 0x20] + [(val, i, lens[val]) for i in range(lens[val])]
            te += [0x22, len(body)] + body
    te += [0x48, ("type", 0, 1)]
    if named:
        te += [0x50] + [("name", i, lens["name"]) for i in range(lens["name"])]
    te += [0x58] + [("uuid", i, lens["uuid"]) for i in range(lens["uuid"])]
    pkt = [0x40] + [("ts", i, lens["ts"]) for i in range(lens["ts"])] + [0x50, seq_id, 0x5A, len(te)] + te
    if named:
        pkt += [0x68, 0x02]
    assert len(te) < 128 and len(pkt) < 128  # one-byte length prefixes: true for every shape
    return [0x0A, len(pkt)] + pkt


def encode_events(cols: dict, seq_id: int = 1) -> np.ndarray:
    """Encoded ``Trace.packet`` bytes, one packet per row, rows in the given order.

    seq_id: the packets' trusted_packet_sequence_id, 1 to 127 (one varint byte).
    cols: int64 arrays ``ts``, ``type`` (1 begin, 2 end, 3 instant), ``sm`` and ``has_sm`` (an ``sm`` arg when
    nonzero), ``last``, ``has_last`` and ``iid`` (a second arg, value and interned name, when ``has_last``),
    ``name`` (event name iid), ``uuid``. Arg and name columns are ignored on END rows.
    """
    if not 1 <= seq_id < 128:
        raise ValueError(f"seq_id {seq_id}: 1 to 127")
    typ = np.asarray(cols["type"], np.int64)
    n = len(typ)
    if n == 0:
        return np.zeros(0, np.uint8)
    u64 = {f: np.asarray(cols[f], np.int64).view(np.uint64) for f in _FIELDS}
    u64["type"] = typ.view(np.uint64)
    u64["iid"] = np.asarray(cols["iid"], np.int64).view(np.uint64)
    named = typ != TYPE_END
    on = {"ts": None, "uuid": None, "name": named,
          "sm": named & (np.asarray(cols["has_sm"]) != 0), "last": named & (np.asarray(cols["has_last"]) != 0)}
    lens = {f: varint_len(u64[f]) for f in _FIELDS}
    # Shape key: the flags and each varint's length (0 where the field is not written), in mixed radix (each
    # field's radix is its largest length + 1), so distinct shapes come from a bincount, not a sort.
    dense = named.astype(np.int32) + 2 * on["sm"] + 4 * on["last"]
    radix = []
    for f in _FIELDS:
        ln = lens[f] if on[f] is None else lens[f] * on[f]
        radix.append(int(ln.max()) + 1)
        dense = dense * np.int32(radix[-1]) + ln
    if dense.max() < 1 << 22:
        count = np.bincount(dense)
        shapes = np.flatnonzero(count)
        remap = np.zeros(len(count), np.int32)
        remap[shapes] = np.arange(len(shapes), dtype=np.int32)
        inv = remap[dense]
        count = count[shapes]
    else:
        shapes, inv, count = np.unique(dense, return_inverse=True, return_counts=True)
    layouts = []
    for s in shapes.tolist():
        fl = {}
        for f, r in zip(reversed(_FIELDS), reversed(radix)):
            s, fl[f] = divmod(s, r)
        layouts.append(_layout(s, fl, seq_id))
    if len(layouts) == 1:
        return _rows(layouts[0], u64, None).reshape(-1)
    widths = np.array([len(lay) for lay in layouts], np.int64)[inv]
    ends = np.cumsum(widths)
    out = np.empty(int(ends[-1]), np.uint8)
    starts = ends - widths
    # Each shape's rows as a (rows, width) byte matrix, then copied whole into place: no padded matrix.
    narrow = np.int8 if len(layouts) < 1 << 7 else np.int16 if len(layouts) < 1 << 15 else np.int64
    order = np.argsort(inv.astype(narrow), kind="stable")  # a radix sort for int8/int16: each shape's rows in order
    bounds = np.concatenate([[0], np.cumsum(count)])
    for j, lay in enumerate(layouts):
        rows = order[bounds[j]:bounds[j + 1]]
        scatter_rows(out, starts[rows], _rows(lay, u64, rows))
    return out


def scatter_rows(out: np.ndarray, at: np.ndarray, m: np.ndarray) -> None:
    """Copies each row of the byte matrix ``m`` (rows, width) into ``out`` at the byte offset ``at`` of that
    row: one numpy assignment whose elements are whole rows (an unaligned view of ``out`` as width-byte items)."""
    w = m.shape[1]
    item = np.dtype((np.void, w))
    view = np.ndarray((len(out) - w + 1,), item, buffer=out, strides=(1,))
    view[at] = np.ascontiguousarray(m).view(item).reshape(-1)


def _rows(lay: list, u64: dict, rows: np.ndarray | None) -> np.ndarray:
    """The (rows, width) byte matrix of one shape: the constant template, then each varint's bytes.
    rows: which rows of the ``u64`` columns (None: all)."""
    m = np.empty((len(u64["ts"]) if rows is None else len(rows), len(lay)), np.uint8)
    m[:] = np.array([b if isinstance(b, int) else 0 for b in lay], np.uint8)
    p = 0
    while p < len(lay):
        item = lay[p]
        if isinstance(item, int):
            p += 1
            continue
        f, _, ln = item
        v = u64[f] if rows is None else u64[f][rows]
        if ln <= 4:  # fits in 28 bits: narrower arithmetic
            v = v.astype(np.uint32)
        for i in range(ln):
            byte = v & v.dtype.type(0x7F)
            if i < ln - 1:
                byte |= v.dtype.type(0x80)
                v = v >> v.dtype.type(7)
            m[:, p + i] = byte
        p += ln
    return m


def pb2():
    """Perfetto's generated protobuf module (imported on first use)."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2

    return perfetto_trace_pb2


def emit(pkt) -> bytes:
    """One TracePacket as the bytes of a Trace holding it (protobuf's own serialization)."""
    t = pb2().Trace()
    t.packet.append(pkt)
    return t.SerializeToString()
