"""Arrays grouped or searched by sorted keys, for the wait evidence (evidence.py): runs of equal keys, each
key's spread and maximum, and lookups of many queries in sorted keys."""

from __future__ import annotations

import numpy as np

from ...decoding.unwrap import segment_starts as _new_run  # True where a run of equal values begins

__all__ = ["run_starts", "distinct", "groups", "spread_by", "key_then_who", "run_max", "who_at_max", "positions",
           "lookup"]


def run_starts(sorted_keys: np.ndarray) -> np.ndarray:
    """Indices where a run of equal keys begins."""
    if not len(sorted_keys):
        return np.zeros(0, np.int64)
    return np.flatnonzero(_new_run(sorted_keys))


def distinct(a) -> np.ndarray:
    """np.unique(a) (sorted distinct values) of integers, by a sort: for small arrays several times faster than
    np.unique, which also imports numpy.ma (~10 ms) on its first call without return_* options."""
    a = np.sort(np.asarray(a).ravel())
    return a[_new_run(a)] if len(a) else a


def groups(keys: np.ndarray):
    """Sort order and run starts of equal keys (keys of 16 bits or fewer sorted as such: a radix sort)."""
    small = len(keys) and int(keys.min()) >= 0 and int(keys.max()) < 1 << 16
    order = np.argsort(keys.astype(np.uint16) if small else keys, kind="stable")
    return order, run_starts(keys[order])


def spread_by(key: np.ndarray, x: np.ndarray, grouped=None) -> tuple[np.ndarray, np.ndarray]:
    """Per distinct key: max(x) - min(x), and how many entries; grouped: ``groups(key)``, where known."""
    order, starts = groups(key) if grouped is None else grouped
    xs = x[order]
    hi = np.maximum.reduceat(xs, starts) if len(xs) else xs
    lo = np.minimum.reduceat(xs, starts) if len(xs) else xs
    n = np.diff(np.r_[starts, len(xs)])
    return hi - lo, n


def key_then_who(key: np.ndarray, who: np.ndarray) -> np.ndarray:
    """The order that sorts by key, then who (stable): a sort by key alone where who is already ascending (one
    radix pass for keys of 16 bits), else by one combined key where it fits int64, else a lexsort."""
    n = len(key)
    if n < 2:
        return np.arange(n)
    if (who[1:] >= who[:-1]).all():
        return groups(key)[0]
    klo, khi, wlo, whi = int(key.min()), int(key.max()), int(who.min()), int(who.max())
    if (khi - klo + 1) * (whi - wlo + 1) < 1 << 62:
        return np.argsort((key - klo) * (whi - wlo + 1) + (who - wlo), kind="stable")
    return np.lexsort((who, key))


def run_max(keys: np.ndarray, x: np.ndarray):
    """For sorted keys (at least one): the runs of equal keys' starts, each row's run, and each run's max of x."""
    flags = _new_run(keys)
    starts = np.flatnonzero(flags)
    return starts, np.cumsum(flags) - 1, np.maximum.reduceat(x, starts)


def who_at_max(x: np.ndarray, who: np.ndarray, starts: np.ndarray, run: np.ndarray, mx: np.ndarray) -> np.ndarray:
    """Per run (``run_max``'s) of rows sorted by (key, who): the first ``who`` where x is the run's max."""
    hit = x == mx[run]
    at = np.flatnonzero(hit)  # every run holds its max: its first hit is the run's count of hits before it
    before = np.cumsum(hit)[starts] - hit[starts]
    return who[at[before]]


def positions(keys: np.ndarray, query: np.ndarray) -> np.ndarray:
    """np.searchsorted(keys, query) for sorted keys; where the keys span fewer values than there are queries,
    every value's position is found once and read per query."""
    span = int(keys[-1]) + 1 if len(keys) else 0
    if len(keys) and keys[0] >= 0 and span <= len(query) and int(query.min()) >= 0 and int(query.max()) < span:
        return np.searchsorted(keys, np.arange(span))[query]
    return np.searchsorted(keys, query)


def lookup(keys: np.ndarray, query: np.ndarray, *values: np.ndarray) -> tuple:
    """Each of ``values`` at the position of each query in the sorted keys (searched once for all)."""
    i = np.minimum(positions(keys, query), len(keys) - 1)
    return tuple(v[i] for v in values)
