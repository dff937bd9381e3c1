"""The replay's order: the timeline's slices computed once each, a level at a time, in place of rounds over
every slice until nothing changes.

The top-level slices are cut into **runs**: a lane's slices from one that a release set released (or the lane's
first) up to the next. Only a run's first slice waits for a release; the rest follow their lane. A run depends
on its lane's run before it and on every member of its first slice's release set; the runs fall into
**levels**, each level's runs depending only on runs of the levels before it (Kahn's order, a level at a time).
The graph is the timeline's, the same whatever a change does to durations, starts, latencies and gaps, so the
levels are found once per timeline (``order_of``) and serve every replay of it (the stakes replay it once per
cause). A level is computed like one of the rounds (the releases from their members' ends, then the runs'
running maximum), so the ends are the rounds' fixed point bit for bit (the graph's longest paths, in whole ns),
in time that grows with the slices plus the levels, not with their product: a persistent kernel of 2,000
barrier steps took 2,000 rounds over every slice.

A release set with a member its own run waits for (a cycle: not a measured timeline's, but a change may read
one) has no levels: ``order_of`` gives None and the replay keeps its rounds.
"""

from __future__ import annotations

import weakref

import numpy as np
from ...core.records import frozen

__all__ = ["Order", "order_of", "ends_in_order"]

_EXACT = float(2 ** 52)  # lifted values stay integers of float64 below this


@frozen(eq=False)
class Order:
    """The levels of a timeline's runs, and for each level what computing it reads.

    Per level ``i``: rows[i], its slices' rows (its runs' rows, run by run, in lane order); run_len[i], its runs'
    lengths (None: every run one slice); head_at[i], each run's first position within rows[i]; released[i] and
    rel_set[i], the runs (positions among the level's runs) whose first slice a set released, and that set;
    rel_row[i], those first slices' rows; after[i] and prev[i], the runs with a run before them on their lane,
    and that run's last row; sets[i], the release sets whose members all end in the levels before (their latest
    end computed as level i begins), members[i] and member_starts[i] their members' rows, set by set."""

    rows: list
    run_len: list
    head_at: list
    released: list
    rel_set: list
    rel_row: list
    after: list
    prev: list
    sets: list
    members: list
    member_starts: list

    @property
    def levels(self) -> int:
        return len(self.rows)


_ORDERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def order_of(tl) -> Order | None:
    """The Order of Timeline ``tl`` (found once, then kept beside it while it lives); None when its graph has a
    cycle."""
    if tl in _ORDERS:
        return _ORDERS[tl]
    got = _levels(tl)
    _ORDERS[tl] = got
    return got


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The concatenation of arange(lo[i], hi[i]) over i."""
    lens = hi - lo
    total = int(lens.sum())
    if not total:
        return np.zeros(0, np.int64)
    return np.arange(total, dtype=np.int64) + np.repeat(lo - (np.cumsum(lens) - lens), lens)


def _levels(tl) -> Order | None:
    n = len(tl)
    if not n:
        return Order(*([] for _ in range(11)))
    has_rel = tl.rel_set >= 0
    head_mask = tl.first | has_rel
    heads = np.flatnonzero(head_mask)
    nruns = len(heads)
    run_of = np.cumsum(head_mask) - 1
    run_len = np.diff(np.r_[heads, n])
    lane_prev = ~tl.first[heads]  # run r waits for run r - 1
    mem, ss = tl.members.astype(np.int64), tl.set_starts.astype(np.int64)
    nsets = len(ss)
    set_size = np.diff(np.r_[ss, len(mem)]) if nsets else np.zeros(0, np.int64)
    # run -> the sets it has members in (one entry per member), grouped by run
    member_run = run_of[mem]
    o = np.argsort(member_run, kind="stable")
    edge_set = np.repeat(np.arange(nsets), set_size)[o]
    edge_start = np.searchsorted(member_run[o], np.arange(nruns + 1))
    # set -> the runs whose first slice it releases, grouped by set
    released = np.flatnonzero(has_rel[heads])
    rset = tl.rel_set[heads[released]].astype(np.int64)
    o = np.argsort(rset, kind="stable")
    set_runs = released[o]
    set_run_start = np.searchsorted(rset[o], np.arange(nsets + 1))

    waiting = lane_prev.astype(np.int64) + has_rel[heads]
    need = set_size.astype(np.int64).copy()
    frontier = np.flatnonzero(waiting == 0)
    level_runs, level_sets = [], []
    ready = np.zeros(0, np.int64)
    done = 0
    while len(frontier):
        level_runs.append(frontier)
        level_sets.append(ready)
        done += len(frontier)
        nxt = frontier + 1
        nxt = nxt[nxt < nruns]
        nxt = nxt[lane_prev[nxt]]
        waiting[nxt] -= 1
        hit = edge_set[_ranges(edge_start[frontier], edge_start[frontier + 1])]
        if len(hit):
            u, c = np.unique(hit, return_counts=True)
            need[u] -= c
            ready = u[need[u] == 0]
        else:
            ready = np.zeros(0, np.int64)
        freed = set_runs[_ranges(set_run_start[ready], set_run_start[ready + 1])]
        waiting[freed] -= 1  # each run waits for one set: no repeats
        cand = np.unique(np.r_[nxt, freed])
        frontier = cand[waiting[cand] == 0]
    if done < nruns:
        return None
    parts = [[] for _ in range(11)]
    for runs, st in zip(level_runs, level_sets):
        h, ln = heads[runs], run_len[runs]
        got = np.flatnonzero(has_rel[h])
        after = np.flatnonzero(lane_prev[runs])
        m = mem[_ranges(ss[st], ss[st] + set_size[st])]
        for part, v in zip(parts, (_ranges(h, h + ln), None if (ln == 1).all() else ln, np.cumsum(ln) - ln, got,
                                   tl.rel_set[h[got]].astype(np.int64), h[got], after, h[after] - 1, st, m,
                                   np.cumsum(set_size[st]) - set_size[st])):
            part.append(v)
    return Order(*parts)


def ends_in_order(od: Order, tl, dur, start, lat, A) -> np.ndarray | None:
    """Every slice's end (ns after the kernel's begin, float64 whole ns), computed a level at a time: the
    replay's rounds' fixed point. None where a run's first slice has no bound (no start, no release, no lane
    before it) or the values pass float64's integers: the rounds decide those."""
    end = np.empty(len(tl))
    latest = np.full(len(tl.set_starts), -np.inf)
    own = start + dur - A  # a slice's own bound, less the lane's sum before it
    via_release = lat + dur - A  # the same from its release set's latest end
    with np.errstate(invalid="ignore"):  # an unbounded run (-inf, inf - inf) is found once, at the end
        for i in range(od.levels):
            if len(od.sets[i]):
                latest[od.sets[i]] = np.maximum.reduceat(end[od.members[i]], od.member_starts[i])
            rows, run_len = od.rows[i], od.run_len[i]
            y = own[rows]
            y_head = y if run_len is None else y[od.head_at[i]]
            g = od.released[i]
            if len(g):  # the first slice of a run: its release
                y_head[g] = np.maximum(y_head[g], latest[od.rel_set[i]] + via_release[od.rel_row[i]])
            a = od.after[i]
            if len(a):  # and the lane before it: its end, carried as end - A
                p = od.prev[i]
                y_head[a] = np.maximum(y_head[a], end[p] - A[p])
            if run_len is not None:
                y[od.head_at[i]] = y_head
                hv = np.repeat(y_head, run_len)
                np.copyto(y, hv, where=~np.isfinite(y))
                lo = float(y.min())
                span = float(y.max()) - lo + 1.0
                if not span * len(run_len) < _EXACT:  # also: not finite
                    return None
                off = np.repeat(np.arange(len(run_len), dtype=np.float64) * span, run_len)
                y -= lo
                y += off
                np.maximum.accumulate(y, out=y)
                y -= off
                y += lo
            y += A[rows]
            end[rows] = y
    return end if np.isfinite(end).all() else None
