"""The one vocabulary of changes the replay makes (``Change``), and each edit's one implementation (``arrays``):
what ``ktrace whatif`` replays from its options, and what a finding's kind says removing its cause means (its
``change``; the stake is that change's replayed saving, so ``ktrace whatif --fix N`` replays the same edit).

Each edit works on the timeline's rows (replay.py): durations, the first slices' starts, the release latencies
and the lanes' own gaps; everything a change does not name stays as measured (docs/analysis-schema.md, "Cause
model and replay").
"""

from __future__ import annotations

import numpy as np

from ..evidence.keyed import distinct
from ..evidence.waits import TIMED_WAIT  # noqa: F401 (re-exported: a phase that times a wait)
from .replay import Timeline, measured_starts
from ...core.records import frozen

__all__ = ["Change", "arrays", "combine", "change_dict", "resized_wall", "TIMED_WAIT", "timed_waits"]

def timed_waits(tl: Timeline) -> bool:
    """Whether the timeline has timed waits the replay could not read as waits (a top-level slice of a wait phase,
    TIMED_WAIT, or nested waits the figures did not keep): its replayed changes give no bound (such a wait would
    not shrink with the work it waits for)."""
    return bool(tl.waits_unread)


@frozen
class Change:
    """What a what-if removes or changes (each empty/None: not changed).

    balance: phases whose every lane gets the mean (a phase instance's mean slice where the lanes run the same
    instances, else each lane's slices scaled so its total of the phase is the lanes' mean);
    straggler_to_median: phases (or (phase, block) pairs) whose slices longer than their instance's median get
    the median (of that block only, or of ``block`` for a plain phase, when given);
    no_late_start: no lane starts late: a lane's first slice begins no later than its group's median first
    begin; with ``block``, that block only, and before every later instance too: its release latency and its own
    gap at most the instance's median (the lane's delay before each instance, not only its first);
    start_on_time: (block or None, phase or None) pairs, the same edit limited to a block and to one phase's slices;
    barrier_cost_ns: every grid or cluster release's latency at most this (``barrier_own_only``: only the
    barrier's own part, each release set's median latency, is cut; a lane that began later than that median keeps
    its excess: its own delay, not the barrier's);
    spread: phases run by some lanes of a warp group while the others are idle, spread over all of the group's
    lanes (each slice lasts its share: dur x lanes that ran it / the group's lanes);
    speedup: (phase, factor) pairs, the phase's slices last dur / factor; group_speedup: (group, factor) pairs,
    every slice of the warp group lasts dur / factor; block_speedup: (block, factor) pairs, every slice of the
    block lasts dur / factor (a slow GPC's blocks as fast as the others');
    balance_lanes: warp groups (None: every one) whose lanes each get the group's mean total over every phase (a
    work list handed out evenly; a lane keeps at least its own longest slice: an item is not cut), each lane's
    slices scaled;
    no_gap: (phase, next phase) pairs, the lanes' own gaps between them (untimed work) removed;
    blocks: the same total work (each block's first begin to last end, summed) in this many equal blocks,
    scheduled into the measured slots (SMs x ``per_sm`` resident blocks, default the measured residency), each slot
    free from its measured first begin: a resized grid (alone: no other edit with it);
    durations, starts, latencies: explicit arrays per row (a library user's own edit)."""

    balance: tuple = ()
    straggler_to_median: tuple = ()
    no_late_start: bool = False
    block: int | None = None
    start_on_time: tuple = ()
    barrier_cost_ns: float | None = None
    barrier_own_only: bool = False
    spread: tuple = ()
    speedup: tuple = ()
    group_speedup: tuple = ()
    block_speedup: tuple = ()
    balance_lanes: tuple = ()
    no_gap: tuple = ()
    blocks: int | None = None
    per_sm: int | None = None
    durations: object = None
    starts: object = None
    latencies: object = None

    def empty(self) -> bool:
        return not (self.balance or self.straggler_to_median or self.no_late_start or self.start_on_time
                    or self.barrier_cost_ns is not None or self.spread or self.speedup or self.group_speedup
                    or self.block_speedup or self.balance_lanes or self.no_gap or self.blocks is not None
                    or self.durations is not None or self.starts is not None or self.latencies is not None)

    def to_median(self) -> tuple:
        """(phase, block or None) of each straggler-to-median edit."""
        return tuple((p, self.block) if isinstance(p, str) else (p[0], None if p[1] is None else int(p[1]))
                     for p in self.straggler_to_median)

    def on_time(self) -> tuple:
        """(block or None, phase or None) of each no-late-start edit (no_late_start and start_on_time)."""
        own = ((self.block, None),) if self.no_late_start else ()
        return own + tuple((None if b is None else int(b), p) for b, p in self.start_on_time)

    def phases(self) -> set:
        """The phases the change names (each must be one of the timeline's)."""
        return ({*self.balance, *self.spread} | {p for p, _ in self.to_median()} | {p for p, _ in self.speedup}
                | {p for _, p in self.on_time() if p is not None} | {p for pq in self.no_gap for p in pq})


def combine(changes) -> Change:
    """One change making every change of ``changes`` (the explicit arrays left out; a resized grid, which takes no
    other edit, left out too): ``ktrace whatif --fix all``."""
    changes = [c for c in changes if c is not None and c.blocks is None]
    costs = [c.barrier_cost_ns for c in changes if c.barrier_cost_ns is not None]
    return Change(balance=_once(p for c in changes for p in c.balance),
                  straggler_to_median=_once(p for c in changes for p in c.to_median()),
                  start_on_time=_once(p for c in changes for p in c.on_time()),
                  barrier_cost_ns=min(costs) if costs else None,
                  barrier_own_only=bool(costs) and all(c.barrier_own_only for c in changes
                                                       if c.barrier_cost_ns is not None),
                  spread=_once(p for c in changes for p in c.spread),
                  speedup=_once(p for c in changes for p in c.speedup),
                  group_speedup=_once(p for c in changes for p in c.group_speedup),
                  block_speedup=_once(p for c in changes for p in c.block_speedup),
                  balance_lanes=_once(p for c in changes for p in c.balance_lanes),
                  no_gap=_once(p for c in changes for p in c.no_gap))


def _once(items) -> tuple:
    out: list = []
    for x in items:
        if x not in out:
            out.append(x)
    return tuple(out)


def change_dict(change: Change) -> dict:
    """The change's set fields, JSON-ready (the explicit arrays left out)."""
    out: dict = {}
    for key in ("balance", "spread"):
        if getattr(change, key):
            out[key] = list(getattr(change, key))
    if change.straggler_to_median:
        plain = all(isinstance(p, str) for p in change.straggler_to_median)
        out["straggler_to_median"] = (list(change.straggler_to_median) if plain
                                      else [[p, b] for p, b in change.to_median()])
    if change.speedup:
        out["speedup"] = [[p, float(f)] for p, f in change.speedup]
    if change.group_speedup:
        out["group_speedup"] = [[int(g), float(f)] for g, f in change.group_speedup]
    if change.block_speedup:
        out["block_speedup"] = [[int(b), float(f)] for b, f in change.block_speedup]
    if change.blocks is not None:
        out["blocks"] = int(change.blocks)
        if change.per_sm is not None:
            out["per_sm"] = int(change.per_sm)
    if change.balance_lanes:
        out["balance_lanes"] = [None if g is None else int(g) for g in change.balance_lanes]
    if change.no_gap:
        out["no_gap"] = [list(pq) for pq in change.no_gap]
    if change.no_late_start:
        out["no_late_start"] = True
    if change.start_on_time:
        out["start_on_time"] = [[b, p] for b, p in change.start_on_time]
    if change.block is not None:
        out["block"] = int(change.block)
    if change.barrier_cost_ns is not None:
        out["barrier_cost_ns"] = float(change.barrier_cost_ns)
        if change.barrier_own_only:
            out["barrier_own_only"] = True
    return out


# -- a change, as the replay's arrays -------------------------------------------------------------------------

def arrays(tl: Timeline, ch: Change):
    """(dur, start, latency, gap) of the replay with ``ch`` applied: float64 ns per row (start: after the
    kernel's begin, -inf where nothing but a release bounds the slice). ValueError naming the phases for a phase
    the timeline lacks."""
    for name in sorted(ch.phases()):
        tl.phase_code(name)
    dur = _durations(tl, ch)
    gap = tl.gap.astype(np.float64)
    if tl.own_wait is not None and tl.own_wait.any():  # a lane's own wait scales with the work before it
        w = np.flatnonzero(tl.own_wait)
        before = tl.dur[w - 1].astype(np.float64)
        gap[w] *= np.where(before > 0, dur[w - 1] / np.maximum(before, 1e-9), 1.0)
    start = measured_starts(tl)
    if ch.starts is not None:
        start = np.asarray(ch.starts, np.float64) - tl.kernel_begin
    lat = tl.latency.astype(np.float64) if ch.latencies is None else np.asarray(ch.latencies, np.float64).copy()
    for p, q in ch.no_gap:
        own = ~tl.first & _heads(tl) & (tl.release == 1) & (tl.phase == tl.phase_code(q))
        own[1:] &= tl.phase[:-1] == tl.phase_code(p)
        gap[own] = 0.0
    for block, phase in ch.on_time():
        _no_late_start(tl, block, phase, start, lat, gap)
    if ch.barrier_cost_ns is not None:
        _barrier(tl, float(ch.barrier_cost_ns), ch.barrier_own_only, lat)
    return dur, start, lat, gap


def _heads(tl: Timeline) -> np.ndarray:
    """Each row whether it is its slice's first piece (every row where no timed wait cut a slice)."""
    return np.ones(len(tl), bool) if tl.head is None else tl.head


def _durations(tl: Timeline, ch: Change) -> np.ndarray:
    """Each row's duration with the change's edits. Where timed waits cut the slices into pieces, the edits
    work on the slices (a piece's slice: its instance), each slice's work its pieces and the lane's own waits
    between them, and its pieces scaled by what the edit made of it."""
    dur = tl.dur.astype(np.float64) if ch.durations is None else np.asarray(ch.durations, np.float64).copy()
    if tl.head is None or tl.head.all():
        return _edited(tl, ch, dur)
    of = tl.piece_of
    ids, inv = np.unique(of, return_inverse=True)
    own = np.where(tl.own_wait, tl.gap, 0).astype(np.float64) if tl.own_wait is not None else 0.0
    tot = np.bincount(inv, weights=dur + own, minlength=len(ids))
    at = np.flatnonzero(tl.head)  # each slice's first piece stands for it
    at = at[np.argsort(inv[at], kind="stable")]
    sub = _Rows(tl, at, tot)
    new = _edited(sub, ch, tot.copy())
    return dur * np.where(tot > 0, new / np.maximum(tot, 1e-9), 1.0)[inv]


class _Rows:
    """The slices of a timeline cut at timed waits, as rows of their own for the edits (_edited): each slice's
    lane, block, group, phase and instance, its work its duration."""

    def __init__(self, tl: Timeline, at: np.ndarray, dur: np.ndarray) -> None:
        self.lane, self.block, self.group = tl.lane[at], tl.block[at], tl.group[at]
        self.phase, self.k, self.names = tl.phase[at], tl.k[at], tl.names
        self.dur = dur
        self.phase_code = tl.phase_code


def _edited(tl, ch: Change, dur: np.ndarray) -> np.ndarray:
    for name in ch.balance:
        m = tl.phase == tl.phase_code(name)
        dur[m] = _balanced(tl, m, dur)
    for name, block in ch.to_median():
        rows = np.flatnonzero(tl.phase == tl.phase_code(name))
        new = np.minimum(dur[rows], median_by(tl.k[rows], dur[rows]))
        dur[rows] = new if block is None else np.where(tl.block[rows] == block, new, dur[rows])
    for name in ch.spread:
        rows = np.flatnonzero(tl.phase == tl.phase_code(name))
        for g in distinct(tl.group[rows]).tolist():
            mine = rows[tl.group[rows] == g]
            lanes_g = len(distinct(tl.lane[tl.group == g]))
            dur[mine] *= len(distinct(tl.lane[mine])) / max(lanes_g, 1)
    for name, factor in ch.speedup:
        m = tl.phase == tl.phase_code(name)
        dur[m] /= float(factor)
    for g, factor in ch.group_speedup:
        dur[tl.group == int(g)] /= float(factor)
    if ch.block_speedup:
        blocks = np.array([int(b) for b, _ in ch.block_speedup], np.int64)
        factors = np.array([float(f) for _, f in ch.block_speedup])
        o = np.argsort(blocks, kind="stable")
        blocks, factors = blocks[o], factors[o]
        at = np.minimum(np.searchsorted(blocks, tl.block), len(blocks) - 1)
        hit = blocks[at] == tl.block
        dur[hit] /= factors[at[hit]]
    groups = distinct(tl.group).tolist() if None in ch.balance_lanes else ch.balance_lanes
    for g in groups:
        rows = np.flatnonzero(tl.group == int(g))
        if not len(rows):
            continue
        lanes, li = np.unique(tl.lane[rows], return_inverse=True)
        tot = np.bincount(li, weights=dur[rows], minlength=len(lanes))
        big = np.zeros(len(lanes))
        np.maximum.at(big, li, dur[rows])
        target = np.maximum(tot.mean(), big)  # an item stays whole: the lane that holds it runs it all
        dur[rows] *= np.where(tot[li] > 0, target[li] / np.maximum(tot[li], 1e-9), 1.0)
    return dur


def _balanced(tl: Timeline, m: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """The phase's slices (mask m) with every lane given the mean."""
    rows = np.flatnonzero(m)
    lanes, per_lane = np.unique(tl.lane[rows], return_counts=True)
    if len(np.unique(per_lane)) == 1:  # the lanes run the same instances: each instance's mean
        return mean_by(tl.k[rows], dur[rows])
    tot = np.zeros(len(lanes))
    li = np.searchsorted(lanes, tl.lane[rows])
    np.add.at(tot, li, dur[rows])
    target = tot.mean()
    return dur[rows] * np.where(tot[li] > 0, target / np.maximum(tot[li], 1e-9), 1.0)


def _no_late_start(tl: Timeline, block, phase, start, lat, gap) -> None:
    """In place: in scope (block ``block``'s rows of phase ``phase``; None: every one), a lane's first slice
    begins no later than its group's median first begin (over the scope's phase), and, where a block or a phase
    is named, every later slice waits no longer after its release, nor after its lane's previous end, than its
    instance's median (by group)."""
    scope = np.ones(len(tl), bool) if phase is None else tl.phase == tl.phase_code(phase)
    mine = scope if block is None else scope & (tl.block == block)
    fr = np.flatnonzero(scope & tl.first & (tl.release == 0))
    if len(fr):
        med = median_by(tl.group[fr], start[fr])
        on = mine[fr]
        start[fr[on]] = np.minimum(start[fr[on]], med[on])
    if block is None and phase is None:  # no lane starts late: their first slices (later waits have other causes)
        return
    kmax = int(tl.k.max()) + 1 if len(tl) else 1
    inst = (tl.group.astype(np.int64) * (len(tl.names) + 1) + tl.phase) * kmax + tl.k
    for arr, m in ((lat, _heads(tl) & (tl.release >= 2)), (gap, ~tl.first & _heads(tl) & (tl.release == 1))):
        on = np.flatnonzero(scope & m)
        if not len(on):
            continue
        med = median_by(inst[on], arr[on])
        at = mine[on]
        arr[on[at]] = np.minimum(arr[on[at]], med[at])


def _barrier(tl: Timeline, cost: float, own_only: bool, lat: np.ndarray) -> None:
    """In place: each grid or cluster release's latency at most ``cost``; own_only: only up to each release
    set's median latency (a lane beyond it keeps its excess)."""
    rel = np.flatnonzero((tl.release == 2) | (tl.release == 3))
    if not len(rel):
        return
    if not own_only:
        lat[rel] = np.minimum(lat[rel], cost)
        return
    med = median_by(tl.rel_set[rel], lat[rel])
    lat[rel] = np.minimum(np.minimum(lat[rel], med), cost) + np.maximum(lat[rel] - med, 0.0)


def _by(key: np.ndarray, x: np.ndarray):
    o = np.lexsort((x, key))
    ks, xs = key[o], x[o]
    starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
    n = np.diff(np.r_[starts, len(ks)])
    return o, xs, starts, n


def median_by(key: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Each entry's key's median of x."""
    if not len(x):
        return np.asarray(x, np.float64)
    o, xs, starts, n = _by(key, x)
    med = (xs[starts + (n - 1) // 2] + xs[starts + n // 2]) / 2.0
    out = np.empty(len(x))
    out[o] = np.repeat(med, n)
    return out


def mean_by(key: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Each entry's key's mean of x."""
    if not len(x):
        return np.asarray(x, np.float64)
    o, xs, starts, n = _by(key, x)
    out = np.empty(len(x))
    out[o] = np.repeat(np.add.reduceat(xs, starts) / n, n)
    return out


MAX_DISPATCH_WAVES = 4096  # past this many waves of a resized grid, its blocks are dealt to the slots round-robin


def resized_wall(tl: Timeline, blocks: int, per_sm: int | None = None) -> int:
    """The wall (ns) of the same total work in ``blocks`` blocks, scheduled into the measured slots (SMs x
    ``per_sm`` resident blocks, default the measured residency), each slot free from its measured first begin
    (the earliest block begins, one per slot), a wave of blocks at a time to the slots that free first. The new
    blocks keep the measured blocks' spread: new block j lasts measured block (j mod n)'s time (first begin to
    last end, in block order) times the ratio that keeps the total work, so uneven blocks still leave their tail.
    ValueError where the timeline has no SM ids to count the slots by, or ``blocks``/``per_sm`` is below 1."""
    sms, resident = tl.slots
    if not sms:
        raise ValueError("the capture has no SM ids to count the slots by: no resized grid can be scheduled")
    if blocks < 1 or (per_sm is not None and per_sm < 1):
        raise ValueError("give 1 block or more, and 1 resident block per SM or more")
    slots = sms * int(per_sm or resident)
    ids, inv = np.unique(tl.block, return_inverse=True)
    first = np.full(len(ids), np.inf)
    last = np.full(len(ids), -np.inf)
    np.minimum.at(first, inv, tl.begin.astype(np.float64))
    np.maximum.at(last, inv, tl.end.astype(np.float64))
    measured = last - first
    each = measured[np.arange(blocks) % len(measured)]
    if each.sum() > 0:
        each = each * (float(measured.sum()) / float(each.sum()))
    free = np.sort(first - tl.kernel_begin)[:slots]
    if len(free) < slots:  # more slots than the measured blocks filled: the rest free at the last measured begin
        free = np.r_[free, np.full(slots - len(free), free[-1] if len(free) else 0.0)]
    start = min(float(free.min()), 0.0)
    waves = -(-blocks // slots)
    if waves > MAX_DISPATCH_WAVES:  # round-robin: slot i runs blocks i, i + slots, ...
        used = min(slots, blocks)
        end = free[:used] + np.bincount(np.arange(blocks) % slots, weights=each, minlength=used)[:used]
        return int(round(float(end.max()) - start))
    # in block order, a wave at a time: the wave's blocks go to the slots that free first (as the GPU hands a
    # block to the first slot that frees), so uneven blocks even out over the waves as they do on the GPU
    free, used = free.copy(), np.zeros(slots, bool)
    for w in range(waves):  # a loop over waves, each vectorized over its slots
        chunk = each[w * slots:(w + 1) * slots]
        take = np.argsort(free, kind="stable")[:len(chunk)]
        free[take] += chunk
        used[take] = True
    return int(round(float(free[used].max()) - start))
