"""A numpy column filled a piece at a time without a list of pieces to concatenate at the end."""

from __future__ import annotations

import numpy as np

__all__ = ["Growing", "fits", "narrowest", "narrowest_type"]


def fits(dtype, lo: int, hi: int) -> bool:
    """Whether the integer type holds every value in [lo, hi]."""
    info = np.iinfo(dtype)
    return info.min <= lo and hi <= info.max


def narrowest_type(lo: int, hi: int) -> type:
    """The narrowest signed integer type that holds every value in [lo, hi]."""
    return next(t for t in (np.int8, np.int16, np.int32, np.int64) if fits(t, lo, hi))


def narrowest(a: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``a`` (values within [lo, hi]) in the narrowest signed integer type that holds them (itself if it is
    that type already)."""
    t = narrowest_type(lo, hi)
    return a if a.dtype == t else a.astype(t)


class Growing:
    """A column filled a part at a time, in the narrowest signed integer type its values need so far (widened,
    rarely, when a part needs more), in one allocation of the expected size (pages never written are never
    resident; grown by doubling when a part goes past it): no list of parts to concatenate at the end."""

    def __init__(self, capacity: int) -> None:
        self.a = np.empty(max(capacity, 1), np.int8)
        self.n = 0

    def append(self, v: np.ndarray, lo: int, hi: int) -> None:
        a = self.a
        if not fits(a.dtype, lo, hi):
            a = np.empty(len(a), narrowest_type(lo, hi))  # wider: the current type does not hold [lo, hi]
            a[:self.n] = self.a[:self.n]
        if self.n + len(v) > len(a):
            grown = np.empty(max(2 * len(a), self.n + len(v)), a.dtype)
            grown[:self.n] = a[:self.n]
            a = grown
        a[self.n:self.n + len(v)] = v
        self.a, self.n = a, self.n + len(v)

    def array(self) -> np.ndarray:
        return self.a[:self.n]
