"""Protobuf wire encoding, vectorized over many messages at once (the trace writer's hot path).

A message is described as a list of fields; each field's value is a numpy column (one value per message)
with an optional presence mask. ``encode`` writes every message back to back into one uint8 array with
the exact bytes the protobuf library would produce for the same message (fields in field-number order,
minimal varints, negative int64 as 10-byte two's complement): tests compare against
``SerializeToString``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Varint", "Message", "encode", "varint_len"]

_VARINT, _LEN = 0, 2


def varint_len(v: np.ndarray) -> np.ndarray:
    """Bytes of the minimal varint of each uint64 value (1..10), as int64."""
    v = np.asarray(v, np.uint64)
    n = np.ones(len(v), np.int64)
    for b in range(1, 10):
        n += v >= np.uint64(1 << (7 * b))
    return n


@dataclass
class Varint:
    """A varint field: ``values`` (int64 or uint64 column, or a scalar for all), present where ``mask``."""

    number: int
    values: object
    mask: np.ndarray | None = None


@dataclass
class Message:
    """A length-delimited submessage field made of ``fields`` (in field-number order)."""

    number: int
    fields: list = field(default_factory=list)
    mask: np.ndarray | None = None


def _key(number: int, wire: int) -> bytes:
    k = (number << 3) | wire
    out = bytearray()
    while True:
        b = k & 0x7F
        k >>= 7
        if k:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _as_u64(values, n: int) -> tuple[np.ndarray | None, int | None]:
    if np.isscalar(values):
        return None, int(values) & 0xFFFFFFFFFFFFFFFF
    return np.asarray(values).astype(np.int64, copy=False).view(np.uint64), None


def _present(mask, n) -> np.ndarray | None:
    return None if mask is None else np.asarray(mask, bool)


def _scalar_varint(x: int) -> bytes:
    out = bytearray()
    while True:
        b = x & 0x7F
        x >>= 7
        if x:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _sizes(fields, n: int, cache: dict) -> np.ndarray:
    """Encoded size of each message's body; fills ``cache`` with per-field sizes for the writer."""
    total = np.zeros(n, np.int64)
    for f in fields:
        mask = _present(f.mask, n)
        if isinstance(f, Varint):
            col, const = _as_u64(f.values, n)
            klen = len(_key(f.number, _VARINT))
            if col is None:
                size = np.full(n, klen + len(_scalar_varint(const)), np.int64)
            else:
                vlen = varint_len(col)
                cache[id(f)] = (col, const, vlen)
                size = klen + vlen
            if col is None:
                cache[id(f)] = (None, const, None)
        else:
            body = _sizes(f.fields, n, cache)
            blen = varint_len(body.view(np.uint64))
            cache[id(f)] = (body, None, blen)
            size = len(_key(f.number, _LEN)) + blen + body
        if mask is not None:
            size = np.where(mask, size, 0)
        total += size
    return total


def _write_bytes(out: np.ndarray, cur: np.ndarray, data: bytes) -> None:
    for i, b in enumerate(data):
        out[cur + i] = b
    cur += len(data)


def _write_varint(out: np.ndarray, cur: np.ndarray, col: np.ndarray, vlen: np.ndarray) -> None:
    v = col
    idx = cur
    live = np.arange(len(cur))
    for i in range(10):
        more = vlen[live] > i + 1
        byte = (v & np.uint64(0x7F)).astype(np.uint8)
        byte[more] |= 0x80
        out[idx] = byte
        if not more.any():
            break
        live = live[more]
        v = v[more] >> np.uint64(7)
        idx = idx[more] + 1
    cur += vlen


def _write(out, cur, fields, cache, sel=None) -> None:
    """Write fields for the messages at ``cur`` (already restricted to ``sel`` rows of the columns)."""
    for f in fields:
        mask = _present(f.mask, None)
        rows = sel
        c = cur
        if mask is not None:
            m = mask if sel is None else mask[sel]
            if not m.any():
                continue
            rows = np.flatnonzero(m) if sel is None else sel[m]
            c = cur[m]
        if isinstance(f, Varint):
            col, const, vlen = cache[id(f)]
            _write_bytes(out, c, _key(f.number, _VARINT))
            if col is None:
                _write_bytes(out, c, _scalar_varint(const))
            else:
                _write_varint(out, c, col if rows is None else col[rows], vlen if rows is None else vlen[rows])
        else:
            body, _, blen = cache[id(f)]
            _write_bytes(out, c, _key(f.number, _LEN))
            _write_varint(out, c, (body if rows is None else body[rows]).view(np.uint64), blen if rows is None else blen[rows])
            _write(out, c, f.fields, cache, rows)
        if mask is not None:
            cur[m] = c
        # else: c is cur itself, advanced in place


def encode(fields: list, n: int) -> np.ndarray:
    """n messages of the given fields, back to back, as one uint8 array."""
    cache: dict = {}
    sizes = _sizes(fields, n, cache)
    starts = np.zeros(n, np.int64)
    if n:
        np.cumsum(sizes[:-1], out=starts[1:])
    out = np.zeros(int(sizes.sum()), np.uint8)
    _write(out, starts.copy(), fields, cache)
    return out
