"""Pairing BEGIN and END records into slices, per lane and event index, and finding partial overlaps.

Pairing is by event index, not by a stack over all events: on one lane, a BEGIN of event e is closed by the
next record of event e if that is an END. So phases of different events may nest or even partially overlap
(a producer/consumer pattern on one writer) and still pair correctly. A second BEGIN of the same event
before its END leaves the first one unpaired (BEGIN without END); an END with no BEGIN before it is
unpaired too. Both are reported, never guessed.
"""

from __future__ import annotations

import numpy as np

__all__ = ["pair_records", "instance_index", "partial_overlaps"]


def instance_index(keys_sorted_change: np.ndarray) -> np.ndarray:
    """k = 0, 1, 2... within runs; ``keys_sorted_change`` is True where a new run starts."""
    n = len(keys_sorted_change)
    idx = np.arange(n, dtype=np.int64)
    start = np.maximum.accumulate(np.where(keys_sorted_change, idx, 0)) if n else idx
    return idx - start


def pair_records(lane: np.ndarray, event: np.ndarray, seq: np.ndarray, rtype: np.ndarray):
    """Pair BEGIN (type 0) and END (type 1) records.

    Inputs are one row per record (any order). Returns (begin_idx, end_idx, k, unpaired_begin_idx,
    unpaired_end_idx): indices into the inputs; slices ordered by (lane, event, begin seq); k is the
    instance number of each slice within its (lane, event).
    """
    order = _lane_event_order(lane, event, seq)
    t = rtype[order]
    ln, ev = lane[order], event[order]
    same_next = np.zeros(len(order), dtype=bool)
    if len(order) > 1:
        same_next[:-1] = (ln[1:] == ln[:-1]) & (ev[1:] == ev[:-1])
    is_begin = np.zeros(len(order), dtype=bool)
    if len(order) > 1:
        is_begin[:-1] = (t[:-1] == 0) & (t[1:] == 1) & same_next[:-1]
    is_end = np.zeros(len(order), dtype=bool)
    is_end[1:] = is_begin[:-1]
    bpos = np.flatnonzero(is_begin)
    begin_idx = order[bpos]
    end_idx = order[bpos + 1]
    # New (lane, event) run among the pairs.
    change = np.ones(len(bpos), dtype=bool)
    if len(bpos) > 1:
        change[1:] = (ln[bpos[1:]] != ln[bpos[:-1]]) | (ev[bpos[1:]] != ev[bpos[:-1]])
    k = instance_index(change)
    unpaired = ~(is_begin | is_end)
    unpaired_begin = order[unpaired & (t == 0)]
    unpaired_end = order[unpaired & (t == 1)]
    return begin_idx, end_idx, k, unpaired_begin, unpaired_end


def _lane_event_order(lane: np.ndarray, event: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """Indices sorting records by (lane, event, seq). Inputs in (lane, seq) order stay so within an event,
    so for a few distinct events one stable pass per event is cheaper than a three-key sort."""
    events = np.unique(event) if len(event) else event
    presorted = len(lane) < 2 or bool(np.all((lane[1:] > lane[:-1]) | ((lane[1:] == lane[:-1]) & (seq[1:] > seq[:-1]))))
    if not presorted or len(events) > 16:
        return np.lexsort((seq, event, lane))
    if len(events) == 1:
        return np.arange(len(lane))
    # Rank each record within its lane's event group: key = lane * E + event_rank, stable sort by key.
    rank = np.searchsorted(events, event)
    key = lane.astype(np.int64) * len(events) + rank
    return np.argsort(key, kind="stable")


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
