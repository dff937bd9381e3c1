"""Pairing BEGIN and END records into slices, per lane and event index, and finding partial overlaps.

Pairing is by event index, not by a stack over all events: on one lane, a BEGIN of event e is closed by the
next record of event e if that is an END. So phases of different events may nest or even partially overlap
(a producer/consumer pattern on one writer) and still pair correctly. A second BEGIN of the same event
before its END leaves the first one unpaired (BEGIN without END); an END with no BEGIN before it is
unpaired too. Both are reported, never guessed.
"""

from __future__ import annotations

import numpy as np

from .unwrap import segment_starts

__all__ = ["pair_records", "instance_index", "partial_overlaps", "alternating", "alternating_k"]


def instance_index(keys_sorted_change: np.ndarray) -> np.ndarray:
    """k = 0, 1, 2... within runs; ``keys_sorted_change`` is True where a new run starts."""
    n = len(keys_sorted_change)
    idx = np.arange(n, dtype=np.int64)
    start = np.maximum.accumulate(np.where(keys_sorted_change, idx, 0)) if n else idx
    return idx - start


def pair_records(lane: np.ndarray, event: np.ndarray, seq: np.ndarray, rtype: np.ndarray):
    """Pair BEGIN (type 0) and END (type 1) records.

    Inputs are one row per record, in (lane, sequence) order. Returns (begin_idx, end_idx, k,
    unpaired_begin_idx, unpaired_end_idx): indices into the inputs; k is the instance number of each slice
    within its (lane, event).
    """
    if len(lane) == 0:
        z = np.zeros(0, np.int64)
        return z, z, z, z, z
    present = _present(event)
    if len(present) <= 16 and alternating(lane, event, rtype):
        # Every END right after its BEGIN (the usual buffer): the pairs are the record pairs, in order.
        bi = np.arange(0, len(lane), 2)
        z = np.zeros(0, np.int64)
        return bi, bi + 1, alternating_k(lane[::2], event[::2], present), z, z
    if len(present) > 16:
        # Many events: one sort by (lane, event, seq) instead of a pass per event.
        return _pair_sorted(np.lexsort((seq, event, lane)), lane, event, rtype)
    # Few events: taking each event's records in (lane, sequence) order needs no sort at all.
    parts = [_pair_sorted(np.flatnonzero(event == e), lane, event, rtype) for e in present.tolist()]
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(5))


def _present(event: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.bincount(event)) if event.min() >= 0 else np.unique(event)


def alternating(lane, event, rtype) -> bool:
    """Records BEGIN, END, BEGIN, END...: each END right after its BEGIN, on the same lane and event."""
    if len(lane) % 2:
        return False
    return bool((rtype[::2] == 0).all() and (rtype[1::2] == 1).all() and (lane[::2] == lane[1::2]).all()
                and (event[::2] == event[1::2]).all())


def alternating_k(pl: np.ndarray, pe: np.ndarray, present: np.ndarray | None = None) -> np.ndarray:
    """The instance number of each pair of an ``alternating`` buffer (pl, pe: each pair's lane and event, in
    order) within its (lane, event)."""
    present = _present(pe) if present is None else present
    k = _periodic_k(pl, pe, len(present))
    if k is not None:
        return k
    k = np.empty(len(pl), np.int64)
    if not len(pl):
        return k
    l0, e0 = int(pl.min()), int(pe.min())
    span_e = int(pe.max()) - e0 + 1
    if (int(pl.max()) - l0 + 1) * span_e <= 1 << 16:  # (lane, event) in 16 bits: one radix sort of both
        key = ((pl - l0) * span_e + (pe - e0)).astype(np.uint16)
        order = np.argsort(key, kind="stable")
        k[order] = instance_index(segment_starts(key[order]))
        return k
    if len(present) > 16:  # many events: one stable sort by (lane, event) instead of a pass per event
        order = np.lexsort((pe, pl))
        change = np.ones(len(order), dtype=bool)
        change[1:] = (pl[order[1:]] != pl[order[:-1]]) | (pe[order[1:]] != pe[order[:-1]])
        k[order] = instance_index(change)
        return k
    for e in present.tolist():
        at = np.flatnonzero(pe == e)
        change = np.ones(len(at), dtype=bool)
        np.not_equal(pl[at[1:]], pl[at[:-1]], out=change[1:])
        k[at] = instance_index(change)
    return k


def _periodic_k(pl: np.ndarray, pe: np.ndarray, p: int) -> np.ndarray | None:
    """k where every lane's events repeat with period p, each of the first p of a lane distinct (load,
    compute, store, load, ...): the k-th of an event on its lane is then its pair's place on the lane // p.
    None when they do not."""
    n = len(pl)
    if n == 0 or p == 0:
        return None
    starts = np.flatnonzero(segment_starts(pl))
    counts = np.diff(np.r_[starts, n])
    place = np.arange(n) - np.repeat(starts, counts)
    if n > p and not ((pe[p:] == pe[:-p]) | (place[p:] < p)).all():
        return None
    head = place < p  # each lane's first p pairs: distinct events (sorted (lane, event) keys, none twice)
    runs = np.repeat(np.arange(len(starts)), counts)[head]
    key = np.sort(runs * (int(pe.max()) - int(pe.min()) + 1) + (pe[head] - int(pe.min())))
    if (key[1:] == key[:-1]).any():
        return None
    return place // p


def _pair_sorted(order: np.ndarray, lane, event, rtype):
    """Pairing over records taken in ``order``, which lists each (lane, event)'s records contiguously in
    sequence order: a BEGIN pairs with the very next record of its (lane, event) if that is an END."""
    t = rtype[order]
    ln, ev = lane[order], event[order]
    m = len(order)
    is_begin = np.zeros(m, dtype=bool)
    if m > 1:
        is_begin[:-1] = (t[:-1] == 0) & (t[1:] == 1) & (ln[1:] == ln[:-1]) & (ev[1:] == ev[:-1])
    is_end = np.zeros(m, dtype=bool)
    is_end[1:] = is_begin[:-1]
    bpos = np.flatnonzero(is_begin)
    # A new (lane, event) run among the pairs restarts the instance count.
    change = np.ones(len(bpos), dtype=bool)
    if len(bpos) > 1:
        change[1:] = (ln[bpos[1:]] != ln[bpos[:-1]]) | (ev[bpos[1:]] != ev[bpos[:-1]])
    unpaired = ~(is_begin | is_end)
    return (order[bpos], order[bpos + 1], instance_index(change), order[unpaired & (t == 0)],
            order[unpaired & (t == 1)])


def partial_overlaps(b: np.ndarray, e: np.ndarray, max_rounds: int = 64) -> np.ndarray:
    """True for slices that partially overlap another one, so that the rest nest properly.

    b, e: each slice's BEGIN and END positions on one global axis where every lane's records are contiguous
    and in sequence order (positions unique). The slices that survive are exactly those the last-in,
    first-out matching of the remaining BEGIN/END records also pairs together; that matching never
    crosses, so what remains nests. Repeated until nothing changes (usually one round).
    """
    n = len(b)
    out = np.zeros(n, dtype=bool)
    if n == 0:
        return out
    # Fast path: if slices never stack more than one deep, nothing can cross.
    lo = min(int(b.min()), int(e.min()))
    step = np.zeros(max(int(b.max()), int(e.max())) - lo + 1, np.int8)
    step[b - lo] = 1
    step[e - lo] = -1
    if np.cumsum(step, dtype=np.int32).max() <= 1:
        return out
    for _ in range(max_rounds):
        ids = np.flatnonzero(~out)
        if len(ids) == 0:
            break
        pos = np.concatenate([b[ids], e[ids]])
        step = np.concatenate([np.ones(len(ids), np.int64), -np.ones(len(ids), np.int64)])
        who = np.concatenate([ids, ids])
        o = np.argsort(pos, kind="stable")
        pos, step, who = pos[o], step[o], who[o]
        depth = np.cumsum(step)
        level = np.where(step > 0, depth, depth + 1)
        o2 = np.lexsort((pos, level))
        w2, s2 = who[o2], step[o2]
        # In LIFO order within a level, each BEGIN is followed by the END it matches.
        bad_begin = np.zeros(len(o2), dtype=bool)
        bad_begin[:-1] = (s2[:-1] > 0) & (w2[1:] != w2[:-1])
        if len(o2):
            bad_begin[-1] = s2[-1] > 0
        bad = w2[bad_begin]
        if len(bad) == 0:
            break
        out[bad] = True
        # The END a wrong BEGIN took belongs to a slice that crosses too.
        nxt = np.flatnonzero(bad_begin)
        nxt = nxt[nxt + 1 < len(w2)] + 1
        out[w2[nxt]] = True
    else:
        out[:] = True  # give up: every slice on its own event track still nests
    return out
