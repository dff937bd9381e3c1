"""What each wait waited for, from evidence in the slices: one row per phase boundary and warp group.

A wait is the gap on one lane from the end of a top-level slice of phase ``P`` (instance ``k``) to the begin of
the lane's next top-level slice (phase ``Q``). For every boundary ``P -> Q`` of every warp group, the gaps are
tested against what could have released them, in this order (docs/analysis-schema.md, "What a wait waited
for"):

- ``group``: another warp group of the same block (a producer/consumer hand-off): the gap ends within
  ``HANDOFF_TICKS`` ticks after a slice end in another group of its block, in at least a quarter of the gaps
  and at least ``HANDOFF_LIFT`` times as often as the other group's ends would line up by chance (their
  count in the block x the window / the block's span), by at least 5 standard deviations of that count.
- ``grid``: every lane (a grid-wide barrier): in at least ``SYNC_FRACTION`` of the instances (with 2 lanes or
  more) no lane begins ``Q`` before the last lane ended ``P``'s instance, and the begins follow that common end,
  not each lane's own end (most gaps must fall in instances that 2 lanes or more reached at this boundary, at
  least 4 gaps, and 2 instances or more): the pooled within-instance slope of begin on own end (``follow_slope``) is at most
  0.8 (0 to 0.6 for a barrier on an H200, about 1 for lanes that go on by themselves after work of their own).
- ``cluster``: a subset of consecutive blocks (a thread-block cluster of ``cluster_size``, 2 to 16, the largest
  that passes): of the gaps where the subset's last end came long after the lane's own end (by 4 ticks and
  twice the boundary's median gap; at least 3 such gaps), nine in ten began after that end and within
  4 ticks + twice the median gap of it. A lane that goes on by itself would have begun long before.
- ``own``: nothing released it: the gaps are at least 2 ticks and as regular as work (their spread within a
  lane is at most half their median; where no lane crosses the boundary twice, the begins follow the lanes'
  own ends: slope at least 0.5): untimed work of the lane itself.
- ``unexplained``: gaps of 2 ticks or more that none of the above evidences (``ambiguous`` = 1: no lane
  began before the last one ended, as after a barrier, but the ends lie too close together to tell a barrier
  from the lanes' own work).
- ``none``: the p90 gap is under 2 ticks: nothing to explain.

Computed with numpy from the top-level slices, in the same way for every engine (the slices are equal), so the
table is equal whichever engine produced the other figures.
"""

from __future__ import annotations

import re

import numpy as np

from .keyed import (distinct as _distinct, groups as _groups, key_then_who as _key_then_who, lookup as _lookup,
                    positions as _positions, run_max as _run_max, run_starts as _run_starts, who_at_max as _who_at_max,
                    spread_by as _spread_by)
from ..model.wait_tables import LeadIns, TopSlices, WaitCauses  # noqa: F401 (TopSlices: read here and re-exported)

__all__ = ["TopSlices", "WaitCauses", "wait_causes", "LeadIns", "lead_ins", "CAUSES", "HANDOFF_TICKS", "SYNC_FRACTION",
           "TIMED_WAIT", "is_timed_wait"]

CAUSES = ("group", "grid", "cluster", "own", "unexplained", "none")
# A phase that times a wait (IKET's ``mma_wait`` around a consumer's wait for a full stage): ``wait``, or a name
# ending in ``wait`` after a separator. The replay reads such slices nested in a lane's work as the lane waiting
# for a release by another lane of its block (replay.py), not as its busy time.
TIMED_WAIT = re.compile(r"(?:^|.*[_\-. ])wait$", re.IGNORECASE)


def is_timed_wait(name) -> bool:
    """Whether phase ``name`` times a wait (TIMED_WAIT): ``wait``, ``mma_wait``, ``tma-wait``, ``barrier.Wait``."""
    return bool(TIMED_WAIT.fullmatch(str(name or "")))


HANDOFF_TICKS = 4  # a gap ending this many ticks (or less) after another group's slice end was released by it
HANDOFF_LIFT = 1.5  # ... this many times more often than chance, and by 5 standard deviations of a Poisson count
SYNC_FRACTION = 0.75  # instances in which no lane began before the last one ended, for a barrier
CLUSTER_SIZES = (16, 8, 4, 2)  # the largest subset that passes is reported
MIN_GAP_TICKS = 2
SPREAD_TICKS = 2  # the ends must spread over this many ticks (std) for the slope to be evidence
FOLLOW_SLOPE = 0.8  # begins follow a common release (0) rather than their own end (1) below this slope


def wait_causes(s: TopSlices, tick: float, phase_names: dict[int, str], num_blocks: int | None = None, *,
                grid=None, totals=None, max_cluster: int = CLUSTER_SIZES[0], threads: int = 1) -> WaitCauses:
    """The WaitCauses table of the top-level slices ``s``; tick: the timer resolution (ns); phase_names:
    phase_index -> name. For a sample of whole blocks of a larger buffer (evidence_stream.py): grid, the
    instances' latest ends over every slice ((keys, ends, blocks) by phase_index * kmax + k, kmax = grid[3]);
    totals, every gap's count, sum and max per boundary ({(phase_index, next_phase_index, group): (n, sum,
    max)}), which replace the sample's; max_cluster: the largest subset of blocks the sample holds whole;
    threads: boundaries tested side by side (numpy lets go of the GIL; the same rows for any number)."""
    n = len(s.lane)
    if n < 2:
        return WaitCauses.empty()
    tick = _resolution(s, float(tick))
    order = _lane_order(s)
    if order is None:  # already in lane order: no copies
        lane, block, group, ph, k, begin, end = s.lane, s.block, s.group, s.phase_index, s.k, s.begin, s.end
    else:
        lane, block, group = s.lane[order], s.block[order], s.group[order]
        ph, k, begin, end = s.phase_index[order], s.k[order], s.begin[order], s.end[order]
    same = lane[1:] == lane[:-1]
    same[same] = begin[1:][same] >= end[:-1][same]  # an overlap is no wait (the Waits table's gaps are >= 0)
    g = np.flatnonzero(same)
    if not len(g):
        return WaitCauses.empty()
    nxt = g + 1
    gap = begin[nxt] - end[g]
    gp, gq, gg, gk, gb = ph[g], ph[nxt], group[g], k[g], block[g]
    t_next, own_end = begin[nxt], end[g]
    kmax = int(k.max()) + 1 if grid is None else int(grid[3])
    nph = int(ph.max()) + 1
    # The latest end of each phase instance over all lanes, and per subset of consecutive blocks.
    inst_key = ph * kmax + k
    # One sort by (instance, block) serves the instances' latest ends and every cluster size's (a subset's key
    # is monotone in it, and the lowest block comes first among equal ends).
    by_inst = _ByInstance(inst_key, block, end, g)
    gkey = gp * kmax + gk
    grid_end, grid_who = by_inst.at_gaps(None) if grid is None else _lookup(grid[0], gkey, grid[1], grid[2])
    nb = int(num_blocks or (int(block.max()) + 1))
    cluster_end = _LazyClusters(nb, by_inst, max_cluster)
    # Hand-offs: the latest end of another group's slice in the same block at or before the gap's end (+1 tick).
    groups = np.flatnonzero(np.bincount(group)) if int(group.min()) >= 0 else _distinct(group)
    handoff = np.zeros(len(g), bool)
    handoff_from = np.full(len(g), -1, np.int64)
    expected = np.zeros(len(g), np.float64)
    if len(groups) > 1:
        t0 = int(begin.min())
        span_lo, span_hi = _block_span(block, begin, end, nb)
        span = np.maximum(span_hi - span_lo, 1)  # per block id (read only for blocks with slices)
        q = (gb << 41) + (t_next + int(tick) - t0)
        for h in groups.tolist():
            mh = group == h
            key_h = (block[mh] << 41) + (end[mh] - t0)
            if not (key_h[1:] >= key_h[:-1]).all():  # in lane order one lane a block often has them sorted
                key_h.sort()
            cnt = np.bincount(block[mh], minlength=nb + 1)
            other = gg != h
            oi = np.flatnonzero(other)  # only another group's gaps are searched for
            i = np.searchsorted(key_h, q[oi], side="right") - 1
            cand = key_h[np.maximum(i, 0)]
            resid = t_next[oi] - ((cand & ((1 << 41) - 1)) + t0)
            hit = np.zeros(len(g), bool)
            hit[oi] = (i >= 0) & ((cand >> 41) == gb[oi]) & (resid <= HANDOFF_TICKS * tick)
            handoff_from = np.where(hit & ~handoff, h, handoff_from)
            handoff |= hit
            per_block = np.minimum(1.0, cnt * (HANDOFF_TICKS + 1) * tick / span)  # computed per block, read per gap
            expected += np.where(other, per_block[gb], 0.0)
    rows = []
    bkey = (gp * nph + gq) * (int(group.max()) + 1) + gg
    border, bstarts = _groups(bkey)
    bends = np.r_[bstarts[1:], len(border)]
    lane_g = lane[g]

    def test(span):
        idx = border[span[0]:span[1]]
        return _boundary(idx, gap, gk, lane_g, t_next, own_end, (grid_end, grid_who), cluster_end, handoff,
                         handoff_from, expected, gb, tick, int(gp[idx[0]]), int(gq[idx[0]]), int(gg[idx[0]]),
                         phase_names)

    spans = list(zip(bstarts.tolist(), bends.tolist()))
    if threads > 1 and len(spans) > 1:
        from ...runtime.config import thread_pool

        with thread_pool(min(threads, len(spans)), "ktrace-boundary") as pool:
            tested = list(pool.map(test, spans))
    else:
        tested = [test(span) for span in spans]
    for row in tested:
        row["tested_gaps"] = row["count"]
        if totals is not None:
            n_all, sum_all, max_all = totals.get((row["phase_index"], row["next_phase_index"], row["group"]),
                                                 (row["count"], row["sum_ns"], row["max_ns"]))
            row.update(count=int(n_all), sum_ns=int(sum_all), max_ns=int(max_all), mean_ns=float(sum_all) / n_all)
        rows.append(row)
    cols = {c: [r[c] for r in rows] for c in WaitCauses.columns()}
    return WaitCauses.from_columns(cols)


class _ByInstance:
    """The slices sorted once by (instance key, block): per instance, or per subset of ``c`` consecutive blocks
    of an instance, the latest end and the lowest block that ended then (by ``keyed.key_then_who`` and ``run_max``), read for
    each gap at its own slice's place in that order (no search). The sort is made on first use (a sample's grid
    comes from elsewhere, and most boundaries skip the cluster test)."""

    def __init__(self, inst_key, block, end, gap_rows):
        self._args = (inst_key, block, end, gap_rows)
        self._sorted = None

    def at_gaps(self, c: int | None, nb: int = 0):
        """(latest end, its block) of each gap's instance (c None) or subset of c blocks of it."""
        if self._sorted is None:
            inst_key, block, end, rows = self._args
            order = _key_then_who(inst_key, block)
            place = np.empty(len(order), np.int64)
            place[order] = np.arange(len(order))
            self._sorted = inst_key[order], block[order], end[order], place[rows]
        ik, bk, ek, at = self._sorted
        key = ik if c is None else ik * (nb // c + 1) + bk // c  # monotone in (instance, block)
        starts, run, mx = _run_max(key, ek)
        r = run[at]
        # The block is read for few boundaries (those a barrier or cluster releases): found on first use.
        return mx[r], _Deferred(lambda: _who_at_max(ek, bk, starts, run, mx)[r])


class _Deferred:
    """An array computed on its first indexing."""

    def __init__(self, make):
        self._make, self._value = make, None

    def __getitem__(self, i):
        if self._value is None:
            self._value = self._make()
        return self._value[i]


class _LazyClusters(dict):
    """Per cluster size: (the subset's last end, its block) for each gap; computed on first use (most
    boundaries are decided before the cluster test)."""

    def __init__(self, nb, by_inst, max_cluster):
        super().__init__()
        self._args = (nb, by_inst)
        self._max = max_cluster

    def items(self):
        nb = self._args[0]
        for c in CLUSTER_SIZES:
            if nb >= 2 * c and c <= self._max:
                yield c, self[c]

    def __missing__(self, c):  # boundaries tested side by side may ask at once: each computes the same value
        nb, by_inst = self._args
        self[c] = value = by_inst.at_gaps(c, nb)
        return value


def _lane_order(s: TopSlices) -> np.ndarray:
    """The order that puts the slices in (lane, begin, end, phase, k) order; None when they are in it already
    (the engines' own order, checked in one pass)."""
    n = len(s.lane)
    if n > 1:
        dl = np.diff(s.lane)
        if (dl >= 0).all():
            same = dl == 0
            db = np.diff(s.begin)[same]
            if (db >= 0).all() and not ((db == 0) & (np.diff(s.end)[same] <= 0)).any():
                return None
    return np.lexsort((s.k, s.phase_index, s.end, s.begin, s.lane))


def _resolution(s: TopSlices, tick: float) -> float:
    """The timer resolution the evidence uses: the figures' tick, or the smallest step between distinct slice
    ends when that is finer (a tick estimated from one lane's steps can be coarser than the ends across lanes)."""
    ends = s.end[: 1 << 18]  # a bounded sample: the finest step shows within it
    lo = int(ends.min()) if len(ends) else 0
    span = int(ends.max()) - lo + 1 if len(ends) else 0
    if span <= 8 * len(ends):  # ends within a few times their count: the distinct ones marked, no sort
        seen = np.zeros(span, bool)
        seen[ends - lo] = True
        steps = np.diff(np.flatnonzero(seen))
    else:
        steps = np.diff(np.sort(ends))
        steps = steps[steps > 0]  # between distinct ends (a sort: np.unique's hashing took 6x as long here)
    step = float(steps.min()) if len(steps) else tick
    return max(min(tick, step), 1.0) if tick > 0 else max(step, 1.0)


def _block_span(block, begin, end, nb):
    """Each block id's first begin and last end (of nb + 1 ids). Blocks in ascending order (lane order) are
    reduced run by run: ufunc.at took 0.3 s a column on a sample of 3.8M slices."""
    lo = np.full(nb + 1, np.iinfo(np.int64).max)
    hi = np.full(nb + 1, np.iinfo(np.int64).min)
    if len(block) and (block[1:] >= block[:-1]).all():
        starts = _run_starts(block)
        ids = block[starts]
        lo[ids], hi[ids] = np.minimum.reduceat(begin, starts), np.maximum.reduceat(end, starts)
        return lo, hi
    np.minimum.at(lo, block, begin)
    np.maximum.at(hi, block, end)
    return lo, hi


def _slope(key: np.ndarray, x: np.ndarray, y: np.ndarray, tick: float, grouped=None) -> float:
    """The pooled within-group slope of y on x (sum of covariances / sum of variances over the groups of
    ``key``): about 1 when each lane's begin follows its own end, about 0 when it follows a common release.
    NaN when x varies within the groups by less than ``SPREAD_TICKS`` ticks (standard deviation)."""
    order, starts = _groups(key) if grouped is None else grouped
    if not len(order):
        return float("nan")
    xs, ys = x[order].astype(np.float64), y[order].astype(np.float64)
    n = np.diff(np.r_[starts, len(xs)])
    mx = np.repeat(np.add.reduceat(xs, starts) / n, n)
    my = np.repeat(np.add.reduceat(ys, starts) / n, n)
    sxx = float(((xs - mx) ** 2).sum())
    sxy = float(((xs - mx) * (ys - my)).sum())
    # Too little spread of the ends (a few ticks) and the timer's steps decide the slope: no evidence.
    if sxx <= 0 or sxx / len(xs) < (SPREAD_TICKS * tick) ** 2:
        return float("nan")
    return sxy / sxx


def _kth(x: np.ndarray, j: int) -> int:
    """``int(np.sort(x)[j])`` by a selection (np.partition: the same value, without sorting every gap)."""
    return int(np.partition(x, j)[j])


def _median(x) -> float:
    """np.median(x) of integers, from a sort (np.median's own overhead dominates for a boundary's few values)."""
    return _median_sorted(np.sort(x))


def _median_sorted(s: np.ndarray) -> float:
    """np.median of sorted integers: the middle value, or the mean of the two middle values (as np.mean adds
    them: in float64)."""
    n = len(s)
    if not n:
        return 0.0
    if n % 2:
        return float(s[n // 2])
    return (float(s[n // 2 - 1]) + float(s[n // 2])) / 2.0


def _boundary(idx, gap, gk, glane, t_next, own_end, grid_end, cluster_end, handoff, handoff_from, expected, gb,
              tick, p, q, grp, names) -> dict:
    gp_ = gap[idx]
    sg = np.sort(gp_)  # the boundary's gaps sorted once: its quantiles and median read from it
    eps = MIN_GAP_TICKS * tick
    total = gp_.sum()
    row = {"phase": names.get(p, str(p)), "next_phase": names.get(q, str(q)), "phase_index": p,
           "next_phase_index": q, "group": grp, "count": len(idx), "sum_ns": int(total),
           "mean_ns": float(total) / len(idx), "p50_ns": int(sg[(len(idx) - 1) // 2]),
           "max_ns": int(sg[-1]), "cluster_size": 0, "instances": 0, "synced_instances": 0,
           "release_spread_ns": 0.0, "gap_spread_ns": 0.0, "handoff_gaps": int(handoff[idx].sum()),
           "handoff_expected": float(expected[idx].sum()), "handoff_group": None, "waiting_gaps": 0,
           "waited_gaps": 0, "waited_block": None, "waited_block_count": 0, "own_spread_ns": 0.0,
           "follow_slope": float("nan"), "release_p50_ns": float("nan"), "ambiguous": 0}
    # Regularity of the gaps within each lane (untimed work repeats; waits follow other lanes).
    lane_spread, lane_n = _spread_by(glane[idx], gp_)
    row["own_spread_ns"] = _median(lane_spread[lane_n >= 2]) if (lane_n >= 2).any() else 0.0
    if sg[int(0.9 * (len(idx) - 1))] < eps:  # the p90 gap under 2 ticks: nothing to explain
        row["cause"] = "none"
        return row
    # A hand-off from another group of the block.
    hits, exp = row["handoff_gaps"], row["handoff_expected"]
    if hits * 4 >= len(idx) and hits >= HANDOFF_LIFT * exp and hits - exp >= 5 * np.sqrt(max(exp, 1.0)):
        src = handoff_from[idx][handoff[idx]]
        row["handoff_group"] = int(np.bincount(src).argmax())
        row["cause"] = "group"
        return row
    # A grid-wide barrier: per instance, every lane began after the instance's last end, and the begins line up
    # on that end (their spread from it is at most half the spread of the gaps).
    ks = gk[idx]
    grid_end, grid_who = grid_end
    resid = t_next[idx] - grid_end[idx]
    ok = resid >= -tick
    by_k = _groups(ks)  # one grouping by instance for the spreads, the synced instances and the slope
    rel_spread, cnt = _spread_by(ks, resid, by_k)
    gap_spread, _ = _spread_by(ks, gp_, by_k)
    inst_ok = np.minimum.reduceat(ok[by_k[0]], by_k[1]) if len(ks) else ok
    multi = cnt >= 2
    row["instances"] = int(multi.sum())
    row["synced_instances"] = int((inst_ok & multi).sum())
    row["release_spread_ns"] = _median(rel_spread[multi])
    row["gap_spread_ns"] = _median(gap_spread[multi])
    slope = _slope(ks, own_end[idx], t_next[idx], tick, by_k)
    row["follow_slope"] = slope
    # Enough to tell: most gaps fall in instances that several lanes reached at this boundary.
    covered = int(cnt[multi].sum())
    enough = covered * 2 >= len(idx) and covered >= 4 and row["instances"] >= 2
    if (enough and row["instances"] and row["synced_instances"] >= SYNC_FRACTION * row["instances"]
            and slope <= FOLLOW_SLOPE):
        waiting = grid_end[idx] - own_end[idx] >= eps
        row["release_p50_ns"] = float(_kth(np.maximum(resid, 0), (len(resid) - 1) // 2))
        row.update(cause="grid", waiting_gaps=int(waiting.sum()), waited_gaps=int((ok & waiting).sum()))
        _waited(row, grid_who[idx][waiting])
        return row
    # A subset of consecutive blocks (a cluster): the gaps where the subset's last end came long after the lane's
    # own end (by twice the boundary's median gap and 4 ticks) began only after it, and soon after it.
    median_gap = _median_sorted(sg)
    long_wait = max(4 * tick, 2 * median_gap)
    for c, (cend, cwho) in cluster_end.items():
        ce = cend[idx]
        waiting = ce - own_end[idx] >= long_wait
        if waiting.sum() < 3:
            continue
        r = (t_next[idx] - ce)[waiting]
        released = (r >= -tick) & (r <= 4 * tick + 2 * median_gap)
        if released.mean() >= 0.9:
            row.update(cause="cluster", cluster_size=c, waiting_gaps=int(waiting.sum()),
                       waited_gaps=int(released.sum()))
            _waited(row, cwho[idx][waiting])
            return row
    # Gaps of one length on every lane (to 2 ticks or a tenth) are the lanes' own work, not a release.
    equal = int(sg[int(0.9 * (len(idx) - 1))]) - int(sg[int(0.1 * (len(idx) - 1))]) <= max(eps, 0.1 * median_gap)
    if equal and len(idx) >= 2:
        row["cause"] = "own"
        return row
    if enough and row["instances"] and row["synced_instances"] >= SYNC_FRACTION * row["instances"] and np.isnan(slope):
        row["cause"], row["ambiguous"] = "unexplained", 1  # synchronized, but the ends lie too close to tell why
        return row
    if (lane_n >= 2).any():
        regular = row["own_spread_ns"] * 2 <= median_gap
    else:  # no lane crosses the boundary twice: the begins must follow the lanes' own ends instead
        regular = slope >= 0.5
    row["cause"] = "own" if regular else "unexplained"
    return row


def _waited(row: dict, who: np.ndarray) -> None:
    """The block most waited for (ties: the lowest) and how many gaps waited for it."""
    if len(who):
        counts = np.bincount(who - who.min())
        row["waited_block"] = int(counts.argmax() + who.min())
        row["waited_block_count"] = int(counts.max())


def lead_ins(s: TopSlices, phase_index: np.ndarray, k: np.ndarray, last_lane: np.ndarray, *,
             last_gaps=None) -> LeadIns:
    """LeadIns for the instances (phase_index, k, last_lane: the instance table's columns, row for row).
    last_gaps: the last finishers' gaps computed over every slice (evidence_stream.py) when ``s`` is a sample."""
    m = len(phase_index)
    last = np.full(m, np.nan)
    med = np.full(m, np.nan)
    with_prev = np.zeros(m, np.int64)
    if len(s.lane) and m:
        order = _lane_order(s)
        if order is None:
            lane, ph, kk, begin, end = s.lane, s.phase_index, s.k, s.begin, s.end
        else:
            lane, ph, kk = s.lane[order], s.phase_index[order], s.k[order]
            begin, end = s.begin[order], s.end[order]
        has = np.r_[False, lane[1:] == lane[:-1]]
        gap = np.where(has, begin - np.r_[0, end[:-1]], -1)
        kmax = int(max(kk.max(), np.max(k))) + 1
        qi = np.asarray(phase_index, np.int64) * kmax + np.asarray(k, np.int64)
        qo = np.argsort(qi, kind="stable")
        sq = qi[qo]
        # Each slice's instance row (the instance table holds every (phase, k) of the top-level slices).
        ik = ph * kmax + kk
        j = np.minimum(_positions(sq, ik), m - 1)
        found = sq[j] == ik
        row = qo[j]
        mine = found & (lane == np.asarray(last_lane, np.int64)[row]) & (gap >= 0)
        last[row[mine]] = gap[mine]
        # The median gap before the instance's slices (lanes with a previous slice only): one sort of
        # (instance, gap) packed in one integer.
        hp = found & (gap >= 0)
        r, g2 = row[hp], np.minimum(gap[hp], (1 << 40) - 1)
        if len(r):
            span = int(g2.max()) + 1
            if m * span < 1 << 31:  # sorted as int32 where the pairs fit: about twice as fast
                packed = (r.astype(np.int64) * span + g2).astype(np.int32)
                packed.sort()
                rs, gs = np.divmod(packed.astype(np.int64), span)
            else:
                packed = np.sort((r.astype(np.int64) << 40) | g2)
                rs, gs = packed >> 40, packed & ((1 << 40) - 1)
            starts = _run_starts(rs)
            n = np.diff(np.r_[starts, len(rs)])
            rows = rs[starts]
            med[rows] = (gs[starts + (n - 1) // 2] + gs[starts + n // 2]) / 2.0
            with_prev[rows] = n
    if last_gaps is not None:
        last = np.asarray(last_gaps, np.float64)
    return LeadIns.from_columns({"phase_index": phase_index, "k": k, "last_lead_in_ns": last,
                                 "median_lead_in_ns": med, "lanes_with_prev": with_prev})
