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
from ..evidence.keyed import distinct

__all__ = ["Order", "order_of", "ends_in_order"]

_EXACT = float(2 ** 52)  # lifted values stay integers of float64 below this


@frozen(eq=False)
class Order:
    """The levels of a timeline's runs, and what computing each level reads.

    A run's slices end at its first slice's bound plus the lane's sum since (every slice after a run's first has
    no bound of its own: no release, no start), so a replay keeps one value per run, ``H`` (the first slice's
    end less the lane's sum before it, ``end - A``), in a buffer ``[H (runs) | shared sets' latest ends | 0]``.
    A run's H is the largest of its candidates, each a buffer value plus a replay's addend: its own start (the
    0 slot plus ``start + dur - A``), its lane's run before it (that run's H), and its release: a set that several
    runs wait for and has several members is computed once (``shared``), at the level where its last member
    ends; any other set's members are read by the run directly (a member's H plus its A, plus the release's
    latency, dur and -A of the run's first slice).

    levels: the count; steps: per level (its runs, their candidates' buffer positions, their local starts or
    None (one candidate each), the candidates' span in the addends, the shared sets it computes or None: (their
    buffer positions, their members' runs, local starts, the members' span)); own_row, a_row, vr_row: per
    candidate, the rows whose ``start + dur - A``, ``A`` and ``lat + dur - A`` its addend sums (n: none);
    shared_rows: the shared sets' members' rows; run_of, each row's run; heads, each run's first row; level_runs,
    the runs level by level and level_start their bounds; multi, the levels with a run of several slices;
    nshared, the shared sets; set_level, each release set's level. ``legacy`` keeps the per-level arrays of ``ends_by_slice`` (built when first
    asked)."""

    levels: int
    steps: list
    own_row: np.ndarray
    a_row: np.ndarray
    vr_row: np.ndarray
    shared_rows: np.ndarray
    run_of: np.ndarray
    heads: np.ndarray
    level_runs: np.ndarray
    level_start: np.ndarray
    multi: np.ndarray
    nshared: int
    set_level: np.ndarray
    legacy: dict


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


_BIG = 2 ** 62  # a count that never reaches 0: the dummy run and set the tables pad with
_PAD = 16  # a run's release sets in a padded table up to this many (a gather per level); beyond, by ranges


def _lane_next(lane_prev: np.ndarray) -> np.ndarray:
    """Each run's next run on its lane; len(lane_prev) (the dummy): none."""
    nruns = len(lane_prev)
    nxt = np.full(nruns, nruns, np.int64)
    nxt[:-1][lane_prev[1:]] = np.flatnonzero(lane_prev[1:]) + 1
    return nxt


def _table(src: np.ndarray, dst: np.ndarray, rows: int, pad: int, first: np.ndarray | None = None):
    """Each row's ``dst`` (the edges src -> dst), and ``first``'s entry ahead of them: a table padded with
    ``pad`` (a row's values ``table[rows].ravel()``, one gather) where no row has more than _PAD; else a
    function of the rows giving theirs (by ranges)."""
    o = np.argsort(src, kind="stable")
    src, dst = src[o], dst[o]
    count = np.bincount(src, minlength=rows)
    start = np.cumsum(count) - count
    lead = 0 if first is None else 1
    width = (int(count.max()) if rows and len(src) else 0) + lead
    if width <= _PAD:
        tab = np.full((rows, max(width, 1)), pad, np.int64)
        if first is not None:
            tab[:, 0] = first
        tab[src, np.arange(len(src)) - start[src] + lead] = dst
        return tab

    def of(r: np.ndarray) -> np.ndarray:
        got = dst[_ranges(start[r], start[r] + count[r])]
        return got if first is None else np.concatenate((first[r], got))
    return of


def _levels(tl) -> Order | None:
    n = len(tl)
    z = np.zeros(0, np.int64)
    if not n:
        return Order(0, [], z, z, z, z, z, z, z, np.zeros(1, np.int64), np.zeros(0, bool), 0, z, {})
    has_rel = tl.rel_set >= 0
    head_mask = tl.first | has_rel
    heads = np.flatnonzero(head_mask)
    nruns = len(heads)
    run_of = np.cumsum(head_mask) - 1
    lane_prev = ~tl.first[heads]  # run r waits for run r - 1
    mem, ss = tl.members.astype(np.int64), tl.set_starts.astype(np.int64)
    nsets = len(ss)
    set_size = np.diff(np.r_[ss, len(mem)]) if nsets else z
    mrun = run_of[mem]
    rel_runs = np.flatnonzero(has_rel[heads])
    rset = tl.rel_set[heads[rel_runs]].astype(np.int64)
    # A set whose members are all of one run is done with that run: an edge from it to each run the set
    # releases, like the lane's. The rest are counted: done when each of their runs is.
    one_run = np.minimum.reduceat(mrun, ss) == np.maximum.reduceat(mrun, ss) if nsets else np.zeros(0, bool)
    direct = one_run[rset] if nsets else np.zeros(0, bool)
    src = mrun[ss[rset[direct]]] if nsets else z
    succ = _table(src, rel_runs[direct], nruns, nruns, first=_lane_next(lane_prev))
    counted = np.flatnonzero(~one_run)
    m_table = m_set_runs = m_start = None
    need = np.zeros(nsets + 1, np.int64)
    if len(counted):
        size_c = set_size[counted]
        pair = distinct(mrun[_ranges(ss[counted], ss[counted] + size_c)] * nsets + np.repeat(counted, size_c))
        e_run, e_set = pair // nsets, pair % nsets
        need[:nsets] = np.bincount(e_set, minlength=nsets)
        m_table = _table(e_run, e_set, nruns, nsets)
        wait_c = rel_runs[~direct]
        o = np.argsort(rset[~direct], kind="stable")
        m_set_runs = wait_c[o]
        m_start = np.searchsorted(rset[~direct][o], np.arange(nsets + 1))
    need[nsets] = _BIG
    waiting = np.r_[lane_prev.astype(np.int64) + has_rel[heads], _BIG]
    run_level = np.full(nruns, -1, np.int64)
    set_level = np.zeros(nsets, np.int64)
    frontier = np.flatnonzero(waiting[:nruns] == 0)
    t = 0
    while len(frontier):  # Kahn's order, a level at a time
        run_level[frontier] = t
        t += 1
        nxt = succ[frontier].ravel() if isinstance(succ, np.ndarray) else succ(frontier)
        np.subtract.at(waiting, nxt, 1)
        if m_table is not None:
            hit = m_table[frontier].ravel() if isinstance(m_table, np.ndarray) else m_table(frontier)
            np.subtract.at(need, hit, 1)
            ready = hit[need[hit] == 0]  # a set done: repeated as often as it has runs here
            if len(ready):
                ready = distinct(ready)
                set_level[ready] = t
                freed = m_set_runs[_ranges(m_start[ready], m_start[ready + 1])]
                waiting[freed] -= 1  # each run waits for one set
                nxt = np.concatenate((nxt, freed))
        nxt = nxt[waiting[nxt] == 0]
        frontier = distinct(nxt) if len(nxt) > 1 else nxt
    del succ, m_table, m_set_runs, m_start, need, waiting  # the walk's tables: not held while the steps are built
    if (run_level < 0).any():
        return None
    levels = t
    if nsets:
        set_level[one_run] = run_level[mrun[ss[one_run]]] + 1
    order = np.argsort(run_level, kind="stable")  # the runs level by level, in order within each
    level_start = np.searchsorted(run_level[order], np.arange(levels + 1))
    # the sets read once for all their runs: several members, several runs waiting; in level order
    readers = np.bincount(rset, minlength=nsets)
    sh = np.flatnonzero((set_size > 1) & (readers > 1))
    sh = sh[np.argsort(set_level[sh], kind="stable")]
    slot = np.full(nsets, -1, np.int64)
    slot[sh] = nruns + np.arange(len(sh))
    zero = nruns + len(sh)  # the buffer's 0 slot
    # each run's candidates, in its place level by level: its own start, the run before it on its lane, its
    # release (a shared set, or the members of its set)
    shared_rel = slot[rset] >= 0 if nsets else np.zeros(0, bool)
    r1, r2, s2 = rel_runs[shared_rel], rel_runs[~shared_rel], rset[~shared_rel]
    sizes = set_size[s2]
    count = 1 + lane_prev.astype(np.int64)
    count[r1] += 1
    count[r2] += sizes
    counts = count[order]
    c_start = np.cumsum(counts) - counts
    at = np.empty(nruns, np.int64)
    at[order] = c_start  # each run's first candidate
    total = int(counts.sum())
    # kept beside the timeline for its replays, a few per candidate: as narrow as the rows allow
    idx = np.int32 if max(n, zero) < 2 ** 31 - 1 else np.int64
    c_idx = np.full(total, zero, idx)
    own_row, a_row, vr_row = (np.full(total, n, idx) for _ in range(3))
    own_row[at] = heads
    lp = np.flatnonzero(lane_prev)
    c_idx[at[lp] + 1] = lp - 1
    rel_at = at[rel_runs] + 1 + lane_prev[rel_runs]  # a released run's release candidates
    at1 = rel_at[shared_rel]
    c_idx[at1] = slot[rset[shared_rel]]
    vr_row[at1] = heads[r1]
    at2 = rel_at[~shared_rel]
    put = _ranges(at2, at2 + sizes)
    mrows = mem[_ranges(ss[s2], ss[s2] + sizes)]
    c_idx[put] = run_of[mrows]
    a_row[put] = mrows
    vr_row[put] = np.repeat(heads[r2], sizes)
    cb = np.r_[c_start[level_start[:-1]], total]
    single = np.maximum.reduceat(counts, level_start[:-1]) == 1
    run_len = np.diff(np.r_[heads, n])
    multi = np.maximum.reduceat(run_len[order], level_start[:-1]) > 1
    # the shared sets' members, set by set, level by level
    sh_size = set_size[sh]
    sh_rows = mem[_ranges(ss[sh], ss[sh] + sh_size)]
    sh_idx = run_of[sh_rows]
    sh_start = np.cumsum(sh_size) - sh_size
    sl = np.searchsorted(set_level[sh], np.arange(levels + 1))
    mb = np.r_[sh_start, len(sh_rows)][sl]
    steps = []
    for i in range(levels):
        a, b = int(level_start[i]), int(level_start[i + 1])
        c0, c1 = int(cb[i]), int(cb[i + 1])
        shared = None
        if sl[i + 1] > sl[i]:
            m0, m1 = int(mb[i]), int(mb[i + 1])
            shared = (slot[sh[sl[i]:sl[i + 1]]], sh_idx[m0:m1], sh_start[sl[i]:sl[i + 1]] - m0, slice(m0, m1))
        steps.append((order[a:b], c_idx[c0:c1], None if single[i] else c_start[a:b] - c0, slice(c0, c1), shared))
    return Order(levels, steps, own_row, a_row, vr_row, sh_rows, run_of, heads, order, level_start, multi,
                 len(sh), set_level, {"nonhead": np.flatnonzero(~head_mask)})


def _legacy(od: Order, tl) -> list:
    """The per-level arrays of ``_ends_by_slice`` (its rows, run_len, head_at, released, rel_set, rel_row, after,
    prev, sets, members, member_starts), built once."""
    if "parts" in od.legacy:
        return od.legacy["parts"]
    has_rel = tl.rel_set >= 0
    heads = od.heads
    run_len = np.diff(np.r_[heads, len(tl)])
    lane_prev = ~tl.first[heads]
    mem, ss = tl.members.astype(np.int64), tl.set_starts.astype(np.int64)
    set_size = np.diff(np.r_[ss, len(mem)]) if len(ss) else np.zeros(0, np.int64)
    set_order = np.argsort(od.set_level, kind="stable")
    set_start = np.searchsorted(od.set_level[set_order], np.arange(od.levels + 1))
    parts = [[] for _ in range(11)]
    for i in range(od.levels):
        runs = od.level_runs[od.level_start[i]:od.level_start[i + 1]]
        st = set_order[set_start[i]:set_start[i + 1]] if i else np.zeros(0, np.int64)
        h, ln = heads[runs], run_len[runs]
        got = np.flatnonzero(has_rel[h])
        after = np.flatnonzero(lane_prev[runs])
        m = mem[_ranges(ss[st], ss[st] + set_size[st])]
        for part, v in zip(parts, (_ranges(h, h + ln), None if (ln == 1).all() else ln, np.cumsum(ln) - ln, got,
                                   tl.rel_set[h[got]].astype(np.int64), h[got], after, h[after] - 1, st, m,
                                   np.cumsum(set_size[st]) - set_size[st])):
            part.append(v)
    od.legacy["parts"] = parts
    return parts


_SLOW = object()  # a replay whose values the runs' shortcut does not hold exactly: the slices' order decides
_EXACT_RUNS = float(2 ** 47)  # every input and run value below this: each sum of a few stays an integer of float64


def ends_in_order(od: Order, tl, dur, start, lat, A) -> np.ndarray | None:
    """Every slice's end (ns after the kernel's begin, float64 whole ns), computed a level at a time: the
    replay's rounds' fixed point. None where a run's first slice has no bound (no start, no release, no lane
    before it) or the values pass float64's integers: the rounds decide those."""
    with np.errstate(invalid="ignore"):  # an unbounded run (-inf, inf - inf) is found once, at the end
        end = _ends_by_run(od, dur, start, lat, A)
        if end is _SLOW:
            end = _ends_by_slice(od, tl, dur, start, lat, A)
    return end


def _ends_by_run(od: Order, dur, start, lat, A):
    """ends_in_order one value per run (Order): where every input is finite but the starts, no slice after a
    run's first has a start, and every value stays well within float64's integers; else _SLOW."""
    if not od.levels:
        return np.empty(0)
    if not (np.isfinite(dur).all() and np.isfinite(lat).all() and np.isfinite(A).all()) or \
            np.isfinite(start[od.legacy["nonhead"]]).any():
        return _SLOW
    own = start + dur - A  # a slice's own bound, less the lane's sum before it
    vr = lat + dur - A  # the same from its release set's latest end
    add = np.r_[own, 0.0][od.own_row]
    add += np.r_[A, 0.0][od.a_row]
    add += np.r_[vr, 0.0][od.vr_row]
    shared_add = A[od.shared_rows]
    nruns = len(od.heads)
    buf = np.empty(nruns + od.nshared + 1)
    buf[-1] = 0.0
    for runs, cand, at, span, shared in od.steps:
        if shared is not None:
            slots, idx, m_at, m_span = shared
            v = buf[idx]
            v += shared_add[m_span]
            buf[slots] = np.maximum.reduceat(v, m_at)
        v = buf[cand]
        v += add[span]
        buf[runs] = v if at is None else np.maximum.reduceat(v, at)
    h = buf[:nruns]
    end = h[od.run_of]
    end += A
    if not np.isfinite(end).all():
        return None
    fin = np.isfinite(start)
    top = max(float(np.abs(h).max()), float(np.abs(A).max()), float(np.abs(dur).max()), float(np.abs(lat).max()),
              float(np.abs(start[fin]).max()) if fin.any() else 0.0)
    if not top < _EXACT_RUNS:
        return _SLOW
    if od.multi.any():  # a level with a run of several slices: the slices' order lifts its lanes (_ends_by_slice)
        hl = h[od.level_runs]
        starts = od.level_start[:-1]
        span = np.maximum.reduceat(hl, starts) - np.minimum.reduceat(hl, starts) + 1.0
        if not (span * np.diff(od.level_start) < _EXACT)[od.multi].all():
            return None
    return end


def _ends_by_slice(od: Order, tl, dur, start, lat, A) -> np.ndarray | None:
    """ends_in_order a slice at a time within each level's runs (a running maximum over the lanes lifted)."""
    rows_, run_len_, head_at_, released_, rel_set_, rel_row_, after_, prev_, sets_, members_, member_starts_ = \
        _legacy(od, tl)
    end = np.empty(len(tl))
    latest = np.full(len(tl.set_starts), -np.inf)
    own = start + dur - A  # a slice's own bound, less the lane's sum before it
    via_release = lat + dur - A  # the same from its release set's latest end
    for i in range(od.levels):
        if len(sets_[i]):
            latest[sets_[i]] = np.maximum.reduceat(end[members_[i]], member_starts_[i])
        rows, run_len = rows_[i], run_len_[i]
        y = own[rows]
        y_head = y if run_len is None else y[head_at_[i]]
        g = released_[i]
        if len(g):  # the first slice of a run: its release
            y_head[g] = np.maximum(y_head[g], latest[rel_set_[i]] + via_release[rel_row_[i]])
        a = after_[i]
        if len(a):  # and the lane before it: its end, carried as end - A
            p = prev_[i]
            y_head[a] = np.maximum(y_head[a], end[p] - A[p])
        if run_len is not None:
            y[head_at_[i]] = y_head
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
