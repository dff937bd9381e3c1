"""Unwrapping 32-bit ``%globaltimer_lo`` stamps into a 64-bit time axis.

Within a lane, records are in sequence order and each step from one record to the next is taken as the
signed 32-bit difference: a wrap (every 2^32 ns = 4.295 s) between two records comes out right as long as
consecutive records of a lane are less than 2.1 s apart. Across lanes, each lane's first record is placed
against one common reference the same way, so lanes that start on either side of a wrap line up: the
reference is the host clock (or the kernel's 64-bit timer read) when the capture recorded one, else the
first record of the lowest lane.
"""

from __future__ import annotations

import numpy as np

__all__ = ["signed32", "segment_starts", "unwrap_lanes", "backwards_mask"]

_WRAP = np.int64(1 << 32)
_HALF = np.int64(1 << 31)


def signed32(x: np.ndarray) -> np.ndarray:
    """x (int64) reduced mod 2^32 into [-2^31, 2^31)."""
    return ((x + _HALF) & (_WRAP - 1)) - _HALF


def segment_starts(lane: np.ndarray) -> np.ndarray:
    """Boolean mask: True where a new lane begins (lane sorted, contiguous)."""
    first = np.ones(len(lane), dtype=bool)
    if len(lane) > 1:
        np.not_equal(lane[1:], lane[:-1], out=first[1:])
    return first


def unwrap_lanes(lane: np.ndarray, ts_lo: np.ndarray, ref_lo: int) -> np.ndarray:
    """Unwrapped times (int64 ns) relative to the reference, records sorted by (lane, sequence)."""
    n = len(lane)
    if n == 0:
        return np.zeros(0, np.int64)
    ts = ts_lo.astype(np.int64)
    first = segment_starts(lane)
    d = np.empty(n, np.int64)
    d[0] = 0
    np.subtract(ts[1:], ts[:-1], out=d[1:])
    d = signed32(d)
    d[first] = signed32(ts[first] - np.int64(ref_lo))
    c = np.cumsum(d)
    # Segmented cumulative sum: subtract what the previous lanes contributed.
    starts = np.flatnonzero(first)
    c -= np.repeat((c - d)[starts], np.diff(np.append(starts, n)))
    return c


def backwards_mask(lane: np.ndarray, u: np.ndarray) -> np.ndarray:
    """True for records earlier than some earlier record of the same lane (sorted by lane, sequence).

    A running maximum per lane, computed on keys (lane rank, clipped time) so one maximum.accumulate covers
    all lanes; lanes are processed in chunks so the keys stay within int64.
    """
    n = len(lane)
    out = np.zeros(n, dtype=bool)
    if n < 2:
        return out
    first = segment_starts(lane)
    down = u[1:] < u[:-1]
    down &= ~first[1:]
    if not down.any():  # no lane ever steps back (the usual buffer): nothing is earlier than a record before it
        return out
    del down
    seg = np.cumsum(first) - 1
    firsts = np.flatnonzero(first)
    v = u - u[firsts][seg]
    lim = np.int64(1 << 40)
    v = np.clip(v, -lim, lim) + lim  # [0, 2^41]
    per_chunk = 1 << 20  # 2^20 lanes x 2^42 < 2^63
    starts = np.append(firsts, n)
    for c0 in range(0, len(firsts), per_chunk):
        lo, hi = starts[c0], starts[min(c0 + per_chunk, len(firsts))]
        key = (seg[lo:hi] - seg[lo]).astype(np.int64) * np.int64(1 << 42) + v[lo:hi]
        run = np.maximum.accumulate(key)
        prev = np.empty_like(run)
        prev[0] = -1
        prev[1:] = run[:-1]
        out[lo:hi] = key < prev
    return out
