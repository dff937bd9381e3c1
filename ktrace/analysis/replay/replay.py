"""The replay: the timeline as a graph of what each slice waited for, recomputed with a cause removed.

Each top-level slice ``s`` (docs/analysis-schema.md, "Cause model and replay") begins at

    begin(s) = max(end(previous slice on its lane) + own gap, release(s) + latency, start(s))

- the **lane edge**: the lane's previous top-level slice and the lane's own gap after it (the measured gap where
  nothing released the slice: the lane's own untimed work; 0 where a release did);
- the **release** the wait evidence (evidence.py) names for the boundary the slice begins after: ``grid`` (the
  latest end of the previous slice's phase instance over every lane), ``cluster`` (the same over the lane's
  subset of blocks), ``group`` (the other warp group's slice whose end handed off to it) or, for the first slice
  of a block of a later wave, ``slot`` (the end of the block that freed its SM slot); ``latency`` is the measured
  time from that release to the begin (the barrier's own cost, the hand-off's);
- ``start``: a lane's first slice that nothing released begins where it was measured (its launch).

A slice with timed waits nested in it (``mma_wait``) is cut at each: the piece after a wait is released by the
lane it waited for (timed_waits.py), so a wait shrinks when the work it waits for gets faster.

The slice lasts as long as it was measured (or as a change says). Replaying the unchanged timeline gives every
measured begin back, so the wall is the measured one; replaying it with one cause removed (``Change``) gives the
wall without it, and the difference is what removing the cause saves (whatif.py).

Vectorized: every round recomputes the releases from the ends of the round before (a max per release set), then
every lane at once (a running maximum over a cumulative sum: the lane recurrence ``x_j = max(x_{j-1} + a_j, b_j)``
in max-plus form). Rounds start from the lanes alone and rise to the fixed point; there are as many as releases
chained one after another (barriers in a row), not slices.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..evidence.keyed import distinct, key_then_who
from ..evidence.slots import slot_figures
from ..evidence.waits import TopSlices, is_timed_wait
from .timed_waits import pieces as _pieces, wait_releases as _wait_releases
from ..model.results import Figures
from ..figures.numpy.structure import blocks_before
from .order import ends_in_order, order_of
from ...core.records import frozen

__all__ = ["Timeline", "Replayed", "timeline", "timeline_of", "replay", "measured_starts", "critical_rows", "RELEASES"]

RELEASES = ("start", "lane", "grid", "cluster", "group", "slot")
_NEG = np.iinfo(np.int64).min // 4  # no release
_NEG2 = -(2 ** 62)  # no bound, in the whole-ns rounds: below every lifted value


@frozen(eq=False)
class Timeline:
    """The top-level slices in lane order (lane, begin, end) and what each waited for.

    names: phase code -> name; phase: each slice's code. gap: the lane edge's own gap (ns; 0 for a lane's first
    slice); release: index into RELEASES of what released it ('lane' when only its lane did, 'start' for a
    lane's first slice nothing released); rel_set: the release set it waited for (-1 none); latency: from the
    release to its begin (ns); start: the first slices' measured begins (the rest: no bound); members /
    starts: the release sets' slice rows, set by set."""

    lane: np.ndarray
    block: np.ndarray
    group: np.ndarray
    phase: np.ndarray
    k: np.ndarray
    begin: np.ndarray
    end: np.ndarray
    names: tuple
    first: np.ndarray
    gap: np.ndarray
    release: np.ndarray
    rel_set: np.ndarray
    latency: np.ndarray
    start: np.ndarray
    members: np.ndarray
    set_starts: np.ndarray
    later_wave: np.ndarray
    kernel_begin: int
    kernel_end: int
    tick_ns: float
    slots: tuple = (0, 0)  # (SMs, resident blocks per SM) as measured (evidence/slots.py): a resized grid's slots
    # Timed waits (a lane's work cut at each wait nested in it, ``_pieces``): head, whether the row is its
    # top-level slice's first piece (every row where nothing was cut); piece_of, the top-level slice each row is a
    # piece of (its rows' index into the slices); own_wait, whether the gap before the row is a timed wait that no
    # other lane's work ended during (the lane's own time: it scales with the work before it).
    head: np.ndarray | None = None
    piece_of: np.ndarray | None = None
    own_wait: np.ndarray | None = None
    waits_unread: bool = False  # a timed-wait phase the replay could not read as waits (top-level, or not given)

    def __len__(self) -> int:
        return len(self.lane)

    @property
    def dur(self) -> np.ndarray:
        return self.end - self.begin

    @property
    def wall_ns(self) -> int:
        return int(self.kernel_end - self.kernel_begin) if len(self.lane) else 0

    def phase_code(self, name: str) -> int:
        """The code of phase ``name``; ValueError naming the phases when there is none."""
        if name in self.names:
            return self.names.index(name)
        raise ValueError(f"no top-level phase {name!r}; the phases: {', '.join(self.names) or 'none'}")



@frozen(eq=False)
class Replayed:
    """A replay's result: each slice's begin and end (ns, the timeline's rows), what bound each begin (index
    into RELEASES), the wall, the rounds it took, and whether it settled (reached the times no further round
    changes) within its rounds: one that did not gives no prediction."""

    begin: np.ndarray
    end: np.ndarray
    bound: np.ndarray
    wall_ns: int
    rounds: int
    settled: bool = True



# -- building the graph ---------------------------------------------------------------------------------------

def timeline_of(d, fig: Figures, wait_phases=()) -> Timeline:
    """The Timeline of a Decoded ``d`` whose figures are ``fig`` (their wait causes and blocks); wait_phases:
    phases read as timed waits beside those whose names say so (is_timed_wait)."""
    from ..figures.numpy.structure import slice_depth

    sl = d.slices
    top = slice_depth(sl.lane, sl.begin_seq, sl.end_seq, sl.overlap) == 0
    names = list(fig.phases.phase.tolist())
    code_of = {}
    for e in distinct(sl.event[top]).tolist():
        nm = d.launch.event_name(int(e))
        if nm not in names:
            names.append(nm)
        code_of[e] = names.index(nm)
    ev = sl.event[top]
    lut = np.zeros(int(ev.max()) + 1 if len(ev) else 1, np.int64)
    for e, c in code_of.items():
        lut[e] = c
    # Each (phase, lane)'s k-th slice: the decoder counts k per event; two events of one name are one phase.
    s = TopSlices.of(sl.lane[top], sl.block[top], sl.group[top], lut[ev], sl.k[top], sl.begin_ns[top], sl.end_ns[top])
    waited = np.zeros(len(sl.lane), bool)
    for e in distinct(sl.event[~top]).tolist():
        nm = d.launch.event_name(int(e))
        if is_timed_wait(nm) or nm in wait_phases:
            waited |= ~top & (sl.event == e)
    waits = None
    if waited.any():
        wev = sl.event[waited]
        wlut = np.zeros(int(wev.max()) + 1, np.int64)
        for e in distinct(wev).tolist():
            nm = d.launch.event_name(int(e))
            if nm not in names:
                names.append(nm)
            wlut[e] = names.index(nm)
        waits = TopSlices.of(sl.lane[waited], sl.block[waited], sl.group[waited], wlut[wev], sl.k[waited],
                             sl.begin_ns[waited], sl.end_ns[waited])
    if len(set(code_of.values())) < len(code_of):  # renumber k per (lane, phase) in begin order
        o = np.lexsort((s.begin, s.phase_index, s.lane))
        key = s.lane[o] * (len(names) + 1) + s.phase_index[o]
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        kk = np.arange(len(o)) - np.repeat(starts, np.diff(np.r_[starts, len(o)]))
        k = np.empty_like(kk)
        k[o] = kk
        s = replace(s, k=k)
    return timeline(s, tuple(names), fig, waits=waits if waits is not None else False)


def timeline(s: TopSlices, names: tuple, fig: Figures, waits=None) -> Timeline:
    """The Timeline of the top-level slices ``s`` (phase_index: codes into ``names``) with the edges that
    ``fig``'s wait causes and blocks evidence. waits: the timed-wait slices nested in them (phase_index: codes
    into ``names``; None: ``fig.timed``'s, whose codes are its phases' indices; False: none): each cuts its
    lane's slice in two, and the piece after it waits for the release by another lane of the block (_pieces)."""
    given = waits
    waits = getattr(fig, "timed", None) if waits is None else (waits or None)
    if waits is not None and not len(waits.lane):
        waits = None
    # A timed wait the replay cannot read as one: a top-level slice of a wait phase (busy time as measured), or
    # a wait phase whose nested slices the figures did not keep (another engine's).
    unread = bool(len(s.lane)) and any(is_timed_wait(names[c]) for c in distinct(s.phase_index).tolist())
    unread |= given is None and waits is None and any(is_timed_wait(p) for p in fig.phases.phase.tolist())
    s, head, piece_of, wcode = _pieces(s, waits)
    keys = (s.lane, s.begin, s.end, s.phase_index, s.k)
    order = np.arange(len(s.lane)) if _in_order(keys) else np.lexsort(keys[::-1])  # the figures': in order
    lane, block, group = s.lane[order], s.block[order], s.group[order]
    ph, k, begin, end = s.phase_index[order], s.k[order], s.begin[order], s.end[order]
    head, piece_of, wcode = head[order], piece_of[order], wcode[order]
    n = len(lane)
    tick = float(fig.kernel.tick_ns or 1)
    first = np.r_[True, lane[1:] != lane[:-1]] if n else np.zeros(0, bool)
    prev = np.where(first, -1, np.arange(n) - 1)
    pp = np.maximum(prev, 0)
    gap = np.where(first, 0, begin - end[pp])
    release = np.where(first, 0, 1).astype(np.int8)
    rel_key = np.full(n, -1, np.int64)  # (set key << 3) | set type, compacted below
    latency = np.zeros(n, np.int64)
    kmax = int(k.max()) + 1 if n else 1
    nph = len(names)
    inst = ph * kmax + k  # each slice's phase instance
    nb = int(block.max()) + 1 if n else 1
    # Members of the release sets by type: 1 instance (grid), 2 cluster of size c, 3 single row (hand-off),
    # 4 block (slot).
    member_keys = [(inst << 3) | 1, (np.arange(n, dtype=np.int64) << 3) | 3, (block << 3) | 4]
    # The boundaries' causes, by (phase, next phase, group).
    wc = fig.wait_causes
    code = {nm: i for i, nm in enumerate(names)}
    cause_of = {}
    for r in wc.rows():
        p, q = code.get(r["phase"]), code.get(r["next_phase"])
        if p is not None and q is not None:
            cause_of[(p, q, int(r["group"]))] = r
    bkey = (ph[pp] * nph + ph) * (int(group.max()) + 1 if n else 1) + group
    gi = np.flatnonzero(~first & head)  # the boundaries between slices (a piece after a timed wait: below)
    sizes: set = set()
    by_group: dict = {}
    for (p, q, g), r in cause_of.items():
        c = r["cause"]
        if c not in ("grid", "cluster", "group"):
            continue
        rows = gi[bkey[gi] == (p * nph + q) * (int(group.max()) + 1) + g]
        if not len(rows):
            continue
        src = pp[rows]
        if c == "grid":
            key = (inst[src] << 3) | 1
            rel_end = _set_max(inst, end, inst[src])
            kind = 2
        elif c == "cluster":
            size = int(r["cluster_size"])
            ck = inst * (nb // size + 1) + block // size
            if size not in sizes:
                sizes.add(size)
                member_keys.append(((ck * 17 + size) << 3) | 2)
            key = ((ck[src] * 17 + size) << 3) | 2
            rel_end = _set_max(ck, end, ck[src])
            kind = 3
        else:
            h = r["handoff_group"]
            if h is None:
                continue
            key, rel_end = _handoff(block, group, end, int(h), rows, begin, tick, by_group)
            kind = 4
        lat = begin[rows] - rel_end
        ok = (key >= 0) & (rel_end <= begin[rows])
        rows, key, lat = rows[ok], key[ok], lat[ok]
        release[rows] = kind
        rel_key[rows] = key
        latency[rows] = lat
        gap[rows] = 0  # a released slice's lane edge: nothing of its own between its previous end and the release
    # A later wave's first slices wait for the block that freed their SM slot.
    bl = fig.blocks
    later = np.zeros(n, bool)
    if len(bl) and (bl.later_wave == 1).any():
        before = blocks_before(bl)
        brow = np.searchsorted(bl.block, block)
        brow = np.minimum(brow, len(bl) - 1)
        known = bl.block[brow] == block
        later = known & (bl.later_wave[brow] == 1)
        fr = np.flatnonzero(first & later & (before[brow] >= 0))
        if len(fr):
            freed = bl.block[before[brow[fr]]]
            rel_end = _set_max(block, end, freed)
            ok = rel_end <= begin[fr]
            fr, freed, rel_end = fr[ok], freed[ok], rel_end[ok]
            release[fr] = 5
            rel_key[fr] = (freed << 3) | 4
            latency[fr] = begin[fr] - rel_end
    _idle_before_barrier(lane, first, ph, inst, begin, end, first & (release == 0) & ~later, release, rel_key,
                         latency)
    own_wait = _wait_releases(lane, block, end, begin, head, wcode, release, rel_key, latency, gap)
    # Compact the referenced sets; their members.
    referenced = rel_key >= 0
    used, rel_inv = np.unique(rel_key[referenced], return_inverse=True)
    mset, mrow = _members(used, member_keys, n)
    o = np.lexsort((mrow, mset))
    mset, mrow = mset[o], mrow[o]
    set_starts = np.flatnonzero(np.r_[True, mset[1:] != mset[:-1]]) if len(mset) else np.zeros(0, np.int64)
    rel_set = np.full(n, -1, np.int64)
    rel_set[referenced] = rel_inv
    kb = int(fig.kernel.begin_ns) if fig.kernel.begin_ns is not None else (int(begin.min()) if n else 0)
    ke = int(fig.kernel.end_ns) if fig.kernel.end_ns is not None else (int(end.max()) if n else 0)
    start = np.where(first & (release == 0), begin, _NEG)  # a released first slice: its release bounds it
    s = slot_figures(bl, fig.kernel.begin_ns, fig.kernel.end_ns) if len(bl) else None
    return Timeline(lane, block, group, ph, k, begin, end, tuple(names), first, gap, release, rel_set, latency,
                    start, mrow, set_starts, later, kb, ke, tick,
                    (int(s["sms"]), int(s["resident_per_sm"])) if s else (0, 0), head, piece_of, own_wait, unread)


def _in_order(keys) -> bool:
    """Whether the rows are in the order of ``keys`` (the most significant first) already: each pair of
    neighbours in order (np.lexsort, stable, would give them back as they are)."""
    open_ = np.ones(max(len(keys[0]) - 1, 0), bool)  # neighbours the keys so far leave tied
    for key in keys:
        if (open_ & (key[1:] < key[:-1])).any():
            return False
        open_ &= key[1:] == key[:-1]
    return True


def _members(used: np.ndarray, member_keys: list, n: int):
    """(set, row) of each row whose key (member_keys: one per row, a list of kinds) is a set of ``used`` (sorted
    keys): a kind's keys looked up among the used keys of that kind only (a single row's key: its row)."""
    sets, rows = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    kind = used & 7
    for keys in member_keys:
        if not n:
            continue
        t = int(keys[0] & 7)  # a list's keys are of one kind
        at = np.flatnonzero(kind == t)
        if not len(at):
            continue
        if t == 3:  # a row's own key
            sets.append(at)
            rows.append(used[at] >> 3)
            continue
        u = used[at]
        pos = np.minimum(np.searchsorted(u, keys), len(u) - 1)
        hit = np.flatnonzero(u[pos] == keys)
        sets.append(at[pos[hit]])
        rows.append(hit)
    return np.concatenate(sets), np.concatenate(rows)


def _idle_before_barrier(lane, first, ph, inst, begin, end, cand, release, rel_key, latency) -> None:
    """(first: where a lane's rows begin.) A lane whose first slice begins after the end of a phase instance that half the lanes or more ran and it
    never did (a CTA with nothing to do before a grid barrier) was released by that instance's end: it was
    idle, not late. Marks those first slices as grid releases, in place."""
    fr = np.flatnonzero(cand)
    if not len(fr):
        return
    n = len(inst)
    small = int(inst.min()) >= 0 and int(inst.max()) < 4 * n + 1024  # the instances counted in place, not sorted
    if small:
        cnt = np.bincount(inst)
        ukey = np.flatnonzero(cnt)
        iend = np.full(len(cnt), np.iinfo(np.int64).min)
        np.maximum.at(iend, inst, end)
        iend, sizes = iend[ukey], cnt[ukey]
    else:
        ukey, inv = np.unique(inst, return_inverse=True)
        iend = np.full(len(ukey), np.iinfo(np.int64).min)
        np.maximum.at(iend, inv, end)
        sizes = np.bincount(inv)
    lanes = int(np.count_nonzero(first))
    big = np.flatnonzero(sizes * 2 >= lanes)
    big = big[np.argsort(iend[big], kind="stable")]
    pos = np.searchsorted(iend[big], begin[fr], side="right") - 1
    fr, pos = fr[pos >= 0], pos[pos >= 0]
    if not len(fr):
        return
    who = big[pos]  # the latest-ending such instance before the begin
    first_row = np.full(len(cnt) if small else len(ukey), -1, np.int64)
    first_row[(inst if small else inv)[::-1]] = np.arange(n)[::-1]  # a row of each instance: its phase
    first_row = first_row[ukey] if small else first_row
    nph = int(ph.max()) + 1
    if lanes * nph <= 8 * n + 1024:  # which phases each lane ran: a table
        lane_rank = np.cumsum(first) - 1
        ran = np.zeros((lanes, nph), bool)
        ran[lane_rank, ph] = True
        never = ~ran[lane_rank[fr], ph[first_row[who]]]
    else:
        never = ~np.isin(lane[fr] * nph + ph[first_row[who]], distinct(lane * nph + ph))
    fr, who = fr[never], who[never]
    release[fr] = 2
    rel_key[fr] = (ukey[who] << 3) | 1
    latency[fr] = begin[fr] - iend[who]


def _set_max(key: np.ndarray, end: np.ndarray, query: np.ndarray) -> np.ndarray:
    """The latest end of the slices with each ``query`` key."""
    o = np.argsort(key, kind="stable")
    ks = key[o]
    starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
    mx = np.maximum.reduceat(end[o], starts)
    return mx[np.searchsorted(ks[starts], query)]


def _handoff(block, group, end, h: int, rows, begin, tick, by_group: dict):
    """Per waiting row: (the row key of group h's slice of the same block with the latest end at or before the
    row's begin + 1 tick, or -1; that end). by_group: group h's slices sorted by (block, end), kept per h (each
    boundary a group hands off at asks again)."""
    if h not in by_group:
        mh = np.flatnonzero(group == h)
        bh, eh = block[mh], end[mh]
        e0 = int(eh.min() if len(eh) else 0)
        o = mh[key_then_who(bh, eh)]  # by (block, end), stable
        kb, ke = block[o], end[o]
        nb = int(block.max()) + 2 if len(block) and 0 <= int(block.min()) and int(block.max()) < 4 * len(block) else 0
        bounds = np.searchsorted(kb, np.arange(nb))  # each block's first position (block ids 0..max, few)
        by_group[h] = (o, kb, e0, (kb.astype(np.int64) << 42) + (ke - e0), bounds)
    o, kb, e0, comp, bounds = by_group[h]
    # Position of the last (block, end) <= (row's block, begin + tick).
    lim = begin[rows] + int(tick)
    b = block[rows]
    if len(bounds):
        lo, i = bounds[b], bounds[b + 1]  # the block's slices: [lo, i)
    else:
        i = np.searchsorted(kb, b, side="right")  # past the block's slices
        lo = np.searchsorted(kb, b, side="left")
    # within [lo, i): ends sorted ascending
    j = np.full(len(rows), -1, np.int64)
    q = (block[rows].astype(np.int64) << 42) + (lim - e0)
    p = np.searchsorted(comp, q, side="right") - 1
    good = (p >= lo) & (p < i) & (p >= 0)
    j[good] = o[p[good]]
    key = np.where(j >= 0, (j << 3) | 3, -1)
    rel_end = np.where(j >= 0, end[np.maximum(j, 0)], np.iinfo(np.int64).max)
    return key, rel_end



# -- the replay -----------------------------------------------------------------------------------------------

def replay(tl: Timeline, dur=None, start=None, latency=None, gap=None, *, max_rounds: int | None = None) -> Replayed:
    """Every slice's begin and end (None: as measured): dur, each slice's duration (ns); start, the first slices'
    bounds in ns after the kernel's begin (-inf: none); latency, from each release to the begin (ns); gap, the
    lane edge's own gap (ns). whatif.py turns a Change into these."""
    n = len(tl)
    if not n:
        return Replayed(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int8), 0, 0, True)
    dur = tl.dur.astype(np.float64) if dur is None else np.asarray(dur, np.float64)
    start = measured_starts(tl) if start is None else np.asarray(start, np.float64)
    lat = tl.latency.astype(np.float64) if latency is None else np.asarray(latency, np.float64)
    gap = tl.gap.astype(np.float64) if gap is None else np.asarray(gap, np.float64)
    # Whole ns: the lane scan is exact for integers only (a change's scaled durations would leave float noise
    # that never settles: a fixed point reached, to the ns, but no two rounds bit-equal).
    dur, lat, gap = np.rint(dur), np.rint(lat), np.rint(gap)
    start = np.where(np.isfinite(start), np.rint(start), start)
    has_rel = tl.rel_set >= 0
    rs = np.maximum(tl.rel_set, 0)
    limit = max_rounds or n + 2
    # Each round sets only the released slices' bounds (the rest stay -inf): their rows, sets and latencies once.
    released = np.flatnonzero(has_rel)
    got = _in_levels(tl, dur, start, lat, gap, released, rs[released], limit) if len(tl.members) else None
    if got is None and len(tl.members):
        got = _rounds_whole_ns(tl, dur, start, lat, gap, released, rs[released], limit)
    if got is None:
        got = _rounds(tl, dur, start, lat, gap, released, rs[released], limit)
    end, rel, rounds, settled = got
    begin = end - dur
    # What bound each begin: its release, its lane's previous end + gap, or its start.
    prev_end = np.r_[-np.inf, end[:-1]]
    via_lane = np.where(tl.first, -np.inf, prev_end + gap)
    bound = np.where(has_rel & (rel >= via_lane) & (rel >= start), tl.release,
                     np.where(tl.first | (start >= via_lane), 0, 1)).astype(np.int8)
    wall = int(round(float(end.max()) - min(float(begin.min()), 0.0)))
    base = tl.kernel_begin
    return Replayed(np.rint(begin).astype(np.int64) + base, np.rint(end).astype(np.int64) + base, bound, wall, rounds,
                    settled)


def _in_levels(tl: Timeline, dur, start, lat, gap, released, rel_sets, limit: int):
    """The rounds' fixed point with each slice computed once, a level of runs at a time (replay_order.py), as
    _rounds gives it: (ends, the released slices' bounds, rounds, settled); None where the timeline has no
    levels (a cycle), where its levels are more than the rounds allowed (the rounds then say they did not
    settle), or where a run's first slice has no bound."""
    od = order_of(tl)
    if od is None or od.levels + 1 > limit:  # the levels stand for the rounds they take
        return None
    A = np.cumsum(np.where(tl.first, 0.0, gap + dur))
    end = ends_in_order(od, tl, dur, start, lat, A)
    if end is None:
        return None
    rel = np.full(len(tl), -np.inf)
    rel[released] = _SetMax(tl.members, tl.set_starts).of(end)[rel_sets] + lat[released]
    return end, rel, od.levels + 1, True


def _rounds(tl: Timeline, dur, start, lat, gap, released, rel_sets, limit: int):
    """The rounds to the fixed point, in float64: (ends, the released slices' bounds (-inf: none), rounds, settled).
    Each round recomputes the releases from the ends of the round before, then every lane at once."""
    n = len(tl)
    a = np.where(tl.first, 0.0, gap + dur)
    A = np.cumsum(a)
    lane_rank = np.cumsum(tl.first) - 1
    mem = tl.members
    end = None
    rel = np.full(n, -np.inf)
    rel_lat = lat[released]
    latest = _SetMax(mem, tl.set_starts) if len(mem) else None
    y = np.empty(n)
    rounds = 0
    settled = True
    while True:
        rounds += 1
        np.maximum(start, rel, out=y)
        y += dur
        y -= A
        x = _lane_scan(y, lane_rank)
        x += A
        if end is not None and np.array_equal(x, end):
            break
        end = x
        if not len(mem):
            break
        if rounds >= limit:
            settled = False
            break
        rel[released] = latest.of(end)[rel_sets] + rel_lat
    return end, rel, rounds, settled


_WHOLE = 2 ** 50  # the whole-ns rounds' values stay below this (float64 holds every integer below 2**53)


def _rounds_whole_ns(tl: Timeline, dur, start, lat, gap, released, rel_sets, limit: int):
    """The rounds of _rounds, the same ends, bounds and rounds bit for bit, on int64 with the lanes lifted once
    (not every round), over the sources only (the rows a bound can begin): each round writes the released slices'
    bounds and runs one running maximum, by doubling (_running_max). None where a value is not a whole ns below
    2**50 (not finite, a start of +inf): then _rounds gives them.

    Where a lane's first slice has no bound yet (a release not reached in round 1), _rounds counts it at the
    round's lowest bound (``lo``): so does this."""
    n = len(tl)
    fin = np.isfinite(start)
    if not (np.isfinite(dur).all() and np.isfinite(lat).all() and np.isfinite(gap).all()) or \
            (~fin & (start != -np.inf)).any():
        return None
    a = np.where(tl.first, 0.0, gap + dur)
    top = max(float(np.abs(a).sum()), float(np.abs(dur).max()), float(np.abs(lat).max()),
              float(np.abs(start[fin]).max()) if fin.any() else 0.0)
    if top >= _WHOLE:
        return None
    D = dur.astype(np.int64)
    heads = np.flatnonzero(tl.first)
    lane_rank = np.cumsum(tl.first) - 1
    A = np.cumsum(a.astype(np.int64))
    a_head = A[heads][lane_rank]  # each lane's A at its first slice: each lane in its own frame (smaller values)
    c = D - (A - a_head)  # y = max(start, release) + c in the lane's frame; y - a_head in the global one
    ys = np.where(fin, start, 0.0).astype(np.int64) + c
    is_rel = np.zeros(n, bool)
    is_rel[released] = True
    rel_c, rel_head = c[released], a_head[released]
    rel_ys = np.where(fin[released], ys[released], _NEG2)
    rel_fin = bool(fin[released].any())
    # The bounds of the rows a release never moves (a start), and of every start (round 1: no release yet).
    stats = [_lo_hi(ys[m], (ys - a_head)[m]) for m in (fin & ~is_rel, fin)]
    unbound = heads[~fin[heads]]  # lanes' first slices without a start: bound by a release, or by lo
    # The sources: the rows a bound can begin (a start, a release, a lane's first slice); every other row ends at
    # its lane's running maximum over the sources before it (``at``: its last source), so the rounds run on these.
    src_mask = fin | is_rel | tl.first
    src = np.flatnonzero(src_mask)
    at = np.cumsum(src_mask) - 1
    al = A - a_head
    latest = _SetMax(tl.members, tl.set_starts).of_sets(rel_sets, at, al, lat[released].astype(np.int64))
    lanes = int(lane_rank[-1]) + 1
    steps = int(np.bincount(lane_rank[src]).max() - 1).bit_length()  # the doublings that span a lane's sources
    m, k = len(released), len(src)
    rel_at, unbound_at, free = at[released], at[unbound], ~is_rel[unbound]
    yr, yg, relv = np.empty(m, np.int64), np.empty(m, np.int64), np.empty(m, np.int64)
    z, xa, xb, ends = (np.empty(k, np.int64) for _ in range(4))
    span = 0
    off = off_src = rel_off = None
    prev = None
    rounds = 0
    settled = True
    while True:
        rounds += 1
        if rounds == 1:
            (lo, hi, glo), nb, nb_at = stats[1], unbound, unbound_at
        else:
            np.add(relv, rel_c, out=yr)
            if rel_fin:
                np.maximum(yr, rel_ys, out=yr)
            nb, nb_at = unbound[free], unbound_at[free]
            glo_r = int(np.subtract(yr, rel_head, out=yg).min()) if m and len(nb) else None  # only where asked
            lo, hi, glo = _merge(stats[0], (int(yr.min()), int(yr.max()), glo_r) if m else (None,) * 3)
        nb_y = None
        if len(nb):  # counted at the round's lowest bound, global frame
            nb_y = (glo if glo is not None else 0) + a_head[nb]
            lo, hi, _ = _merge((lo, hi, glo), (int(nb_y.min()), int(nb_y.max()), None))
        if lo is None:
            lo = hi = 0
        if max(abs(lo), abs(hi)) >= _WHOLE:
            return None
        if hi - lo >= span:  # (re)lift the lanes: each lane's values above every earlier lane's
            span = 2 * (hi - lo + 1)
            if span * (lanes + 1) >= 2 ** 61:
                return None
            off = lane_rank * span
            off_src = off[src]
            np.copyto(z, np.where(fin[src], ys[src] + off_src, _NEG2))
            rel_off = off[released]
        if rounds > 1:
            yr += rel_off
            z[rel_at] = yr
        if nb_y is not None:
            z[nb_at] = nb_y + off[nb]
        x = _running_max(z, steps, xa, xb)
        x -= off_src  # each source's running maximum, unlifted: the rounds compare these
        if prev is not None and np.array_equal(x, prev):
            break
        prev = np.copyto(ends, x) or ends  # the buffers are the next round's
        if rounds >= limit:
            settled = False
            break
        latest(prev, relv)
    rel = np.full(n, -np.inf)
    if rounds > 1:
        rel[released] = relv
    return (prev[at] + al).astype(np.float64), rel, rounds, settled


def _running_max(z: np.ndarray, steps: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The running maximum of z over windows of 2**steps values (a or b, the buffers; z unchanged): by doubling,
    a maximum of whole arrays per step, which numpy runs many times faster than np.maximum.accumulate's
    value-by-value loop."""
    if steps > 20:
        return np.maximum.accumulate(z, out=a)
    src, dst = z, a
    for i in range(steps):
        k = 1 << i
        np.maximum(src[k:], src[:-k], out=dst[k:])
        dst[:k] = src[:k]
        src, dst = dst, (b if dst is a else a)
    if src is z:
        np.copyto(a, z)
        return a
    return src


def _lo_hi(y: np.ndarray, y_global: np.ndarray):
    """(lowest, highest) of y and the lowest of y_global; None where empty."""
    if not len(y):
        return None, None, None
    return int(y.min()), int(y.max()), int(y_global.min())


def _merge(p, q):
    """Two (lo, hi, global lo) merged; None: none."""
    return tuple(a if b is None else b if a is None else f(a, b) for a, b, f in zip(p, q, (min, max, min)))


class _SetMax:
    """Each release set's latest member end: ``np.maximum.reduceat(end[members], set_starts)``, with the sets of one
    member (most of them: a slice released by one other) read directly, the rest reduced."""

    def __init__(self, members: np.ndarray, set_starts: np.ndarray) -> None:
        self.first = members[set_starts]
        sizes = np.diff(np.r_[set_starts, len(members)])
        self.several = np.flatnonzero(sizes > 1)
        self.rows = members[np.repeat(sizes > 1, sizes)]  # the members of the sets of several, set by set
        self.starts = np.cumsum(sizes[self.several]) - sizes[self.several]

    def of_sets(self, sets: np.ndarray, at: np.ndarray, base: np.ndarray, lat: np.ndarray):
        """A reader of ``of(end)[sets] + lat`` where each row's end is ``u[at[row]] + base[row]``: one gather (a
        set of one member: its row), the sets of several reduced. Call it with (u, out)."""
        which = np.full(len(self.first), -1, np.int64)
        which[self.several] = np.arange(len(self.several))
        direct, multi = self.first[sets], np.flatnonzero(which[sets] >= 0)
        multi_set = which[sets[multi]]
        direct_at, direct_add = at[direct], base[direct] + lat
        rows_at, rows_base, multi_lat = at[self.rows], base[self.rows], lat[multi]

        def read(u: np.ndarray, out: np.ndarray) -> np.ndarray:
            np.take(u, direct_at, out=out)
            out += direct_add
            if len(multi):
                out[multi] = np.maximum.reduceat(u[rows_at] + rows_base, self.starts)[multi_set] + multi_lat
            return out
        return read

    def of(self, end: np.ndarray) -> np.ndarray:
        out = end[self.first]
        if len(self.several):
            out[self.several] = np.maximum.reduceat(end[self.rows], self.starts)
        return out


def change_rounds(measured: Replayed) -> int:
    """The rounds a change's replay gets: a few times what the timeline as measured took (each round carries
    the releases one link further). A change that has not settled by then gives no prediction (a release chain
    it makes circular would otherwise take a round per slice: 18 s on a 30k-slice two-group capture)."""
    return max(256, 4 * measured.rounds)


def _lane_scan(y: np.ndarray, lane_rank: np.ndarray) -> np.ndarray:
    """The running maximum of y within each lane (lanes contiguous, lane_rank 0, 1, ... per lane)."""
    fin = np.isfinite(y)
    lo = float(np.where(fin, y, np.inf).min())  # inf: no finite value
    lo = lo if lo != np.inf else 0.0
    z = y - lo
    np.copyto(z, 0.0, where=np.logical_not(fin, out=fin))  # a value not finite (an unbounded begin) counts as lo
    span = float(z.max()) + 1.0
    # Each lane's values lifted above every earlier lane's: one running maximum serves every lane. Exact while
    # the lifted values stay below 2**53 (float64's integers); else lane by lane.
    if span * (int(lane_rank[-1]) + 1) < 2 ** 52:
        off = lane_rank * span
        z += off
        np.maximum.accumulate(z, out=z)
        z -= off
        z += lo
        return z
    out = np.empty_like(z)
    starts = np.flatnonzero(np.r_[True, lane_rank[1:] != lane_rank[:-1]])
    for s0, s1 in zip(starts.tolist(), np.r_[starts[1:], len(z)].tolist()):
        out[s0:s1] = np.maximum.accumulate(z[s0:s1])
    return out + lo




def measured_starts(tl: Timeline) -> np.ndarray:
    """The first slices' measured begins, ns after the kernel's begin (float64 holds integers exactly only below
    2**53: Unix-epoch times are beyond it); -inf for the rest."""
    start = (tl.start - tl.kernel_begin).astype(np.float64)
    start[tl.start == _NEG] = -np.inf
    return start


def critical_rows(tl: Timeline, r: Replayed) -> list[tuple[int, int]]:
    """The replayed critical path, backward from the slice that ends last: (row, what bound its begin)."""
    if not len(tl):
        return []
    prev_row = np.arange(len(tl)) - 1
    # The member with the latest end of each release set (ties: the lowest row).
    mem = tl.members
    ends = r.end[mem]
    arg = np.zeros(len(tl.set_starts), np.int64)
    if len(mem):
        mx = np.maximum.reduceat(ends, tl.set_starts)
        setid = np.repeat(np.arange(len(tl.set_starts)), np.diff(np.r_[tl.set_starts, len(mem)]))
        hit = ends == mx[setid]
        o = np.flatnonzero(hit)
        o = o[np.r_[True, setid[o][1:] != setid[o][:-1]]]  # members run by (set, row): the lowest row
        arg[setid[o]] = mem[o]
    cur = int(np.lexsort((tl.lane, -r.end))[0])
    out = []
    seen = 0
    while cur >= 0 and seen <= len(tl):
        seen += 1
        b = int(r.bound[cur])
        out.append((cur, b))
        if b == 0:
            break
        cur = int(arg[tl.rel_set[cur]]) if b >= 2 else int(prev_row[cur])
    return out
