"""Timed waits in the replay: a lane's work cut at each wait nested in it (IKET's ``mma_wait`` around a consumer's
wait for a full stage, ``load_wait`` around a producer's wait for a free one; a phase whose name says it is a
wait, evidence/waits.py TIMED_WAIT), the piece after each wait released by the lane it waited for.

A wait is not the lane's busy time: the consumer waits for the producer's load, so when the producer gets faster
the wait shrinks. The piece after a wait waits for the latest end, at or before the wait's end, of another lane
of its block that never runs that wait's phase (the producer for a consumer, the consumers for a producer), where
that end came during the wait: a release of one row (``group``), its latency the measured time from that end to
the piece's begin (the load's flight, the barrier's signal). A wait that no such end came during was the lane's
own time (a stage already full): it stays as measured, and scales with the work before it (change.py).
"""

from __future__ import annotations

import numpy as np

from ..evidence.keyed import distinct
from ..evidence.waits import TopSlices

__all__ = ["pieces", "wait_releases"]


def pieces(s: TopSlices, waits):
    """The top-level slices cut at the timed waits nested in them: (the pieces as TopSlices, head: the first
    piece of its slice, piece_of: the slice's index in ``s``, the wait phase's code before each piece (-1: a
    head)). A slice [b, e) with waits [b1, e1), [b2, e2) ... is the pieces [b, b1), [e1, b2), ..., [en, e): its
    phase and instance each. A wait outside every slice of its lane, or inside an earlier wait, is left out."""
    n = len(s.lane)
    none = np.full(n, -1, np.int64)
    if waits is None or not n:
        return s, np.ones(n, bool), np.arange(n, dtype=np.int64), none
    m = len(waits.lane)
    # Tops and waits in one order by (lane, begin, tops first): each wait's slice is the last top before it.
    lane = np.r_[s.lane, waits.lane]
    bgn = np.r_[s.begin, waits.begin]
    is_w = np.r_[np.zeros(n, bool), np.ones(m, bool)]
    o = np.lexsort((is_w, bgn, lane))
    idx = np.r_[np.arange(n), np.arange(m)][o]
    top_pos = np.where(~is_w[o], np.arange(n + m), -1)
    last_top = np.maximum.accumulate(top_pos)
    wpos = np.flatnonzero(is_w[o])
    t = np.where(last_top[wpos] >= 0, idx[np.maximum(last_top[wpos], 0)], -1)
    w = idx[wpos]
    ok = (t >= 0)
    t0 = np.maximum(t, 0)
    ok &= (s.lane[t0] == waits.lane[w]) & (s.begin[t0] <= waits.begin[w]) & (waits.end[w] <= s.end[t0])
    t, w = t[ok], w[ok]
    # Waits in order within their slice; one inside an earlier one's span is left out.
    o = np.lexsort((waits.begin[w], t))
    t, w = t[o], w[o]
    if len(w):  # a wait that begins before an earlier wait of its slice ends lies inside it: left out
        new_t = np.r_[True, t[1:] != t[:-1]]
        seg = np.cumsum(new_t) - 1
        e = waits.end[w].astype(np.int64)
        lo = int(e.min())
        span = int(e.max()) - lo + 1
        run = np.maximum.accumulate((e - lo) + seg * span) - seg * span + lo  # the ends' maximum per slice
        before = np.r_[np.iinfo(np.int64).min, run[:-1]]
        keep = new_t | (waits.begin[w] >= before)
        t, w = t[keep], w[keep]
    # The pieces: a head per slice, one more after each wait.
    owner = np.r_[np.arange(n, dtype=np.int64), t]
    pb = np.r_[s.begin, waits.end[w]]  # a piece begins at its slice's begin or a wait's end
    pe = np.r_[waits.begin[w], s.end]  # ... and ends at the next wait's begin or its slice's end
    pe_owner = np.r_[t, np.arange(n, dtype=np.int64)]
    ob = np.lexsort((pb, owner))
    oe = np.lexsort((pe, pe_owner))
    owner, pb, pe = owner[ob], pb[ob], pe[oe]
    head = ob < n
    wc = np.full(len(owner), -1, np.int64)
    wc[~head] = waits.phase_index[w][ob[~head] - n]
    cut = TopSlices(s.lane[owner], s.block[owner], s.group[owner], s.phase_index[owner], s.k[owner], pb, pe)
    return cut, head, owner, wc


def wait_releases(lane, block, end, begin, head, wcode, release, rel_key, latency, gap) -> np.ndarray:
    """In place: each piece after a timed wait (not a head) waits for the release by another lane of its block,
    one that never runs that wait's phase (the producer a consumer waits for, the consumers a producer waits for
    to free a stage): the piece of those lanes with the latest end at or before the wait's end, where that end
    came during the wait (after it began): a release of one row, its latency the measured time from that end to
    the piece's begin, no gap of its own. A wait that no such end came during was the lane's own time: its gap
    stays as measured, and it is returned marked (own_wait)."""
    n = len(lane)
    own = np.zeros(n, bool)
    after = np.flatnonzero(~head)
    if not len(after):
        return own
    wb = end[after - 1]  # the wait began where the piece before it ended
    for code in distinct(wcode[after]).tolist():
        at = after[wcode[after] == code]
        waiting = distinct(lane[at])
        pool = np.flatnonzero(~np.isin(lane, waiting))
        j = np.full(len(at), -1, np.int64)
        if len(pool):  # the pool's last end at or before each begin, in the same block: by (block, end)
            e0 = int(end[pool].min())
            comp = (block[pool].astype(np.int64) << 42) + (end[pool] - e0)
            o = np.argsort(comp, kind="stable")
            comp, rows = comp[o], pool[o]
            p = np.searchsorted(comp, (block[at].astype(np.int64) << 42) + (begin[at] - e0), side="right") - 1
            good = p >= 0
            good[good] = block[rows[p[good]]] == block[at][good]
            j[good] = rows[p[good]]
        rel_end = np.where(j >= 0, end[np.maximum(j, 0)], np.iinfo(np.int64).min)
        hit = (j >= 0) & (rel_end > wb[np.searchsorted(after, at)]) & (rel_end <= begin[at])
        r = at[hit]
        release[r] = 4
        rel_key[r] = (j[hit] << 3) | 3
        latency[r] = begin[r] - rel_end[hit]
        gap[r] = 0
        own[at[~hit]] = True
    return own
