"""What-if: the replay (replay.py) with one cause removed or one change made, against the replay of the timeline
as measured: the predicted wall, the saving and the critical path after the change (``ktrace whatif``;
docs/analysis-schema.md, "Cause model and replay")."""

from __future__ import annotations

from dataclasses import field

import numpy as np

from ...core.errors import InputError
from ..evidence.keyed import run_starts
from .replay import RELEASES, Replayed, Timeline, change_rounds, critical_rows, measured_starts, replay
from ...core.records import frozen

__all__ = ["Change", "WhatIf", "predict", "whatif", "change_dict", "path_parts"]


@frozen
class Change:
    """What a what-if removes or changes (each empty/None: not changed).

    balance: phases whose every lane gets the mean (a phase instance's mean slice where the lanes run the same
    instances, else each lane's slices scaled so its total of the phase is the lanes' mean);
    straggler_to_median: phases whose slices longer than their instance's median get the median (of block
    ``block`` only, when given); no_late_start: lanes whose first slice began after their group's median first
    begin begin at the median (of block ``block`` only, when given); barrier_cost_ns: every grid or cluster
    release's latency at most this; spread: phases run by some lanes of a warp group while the others are idle,
    spread over all of the group's lanes (each slice lasts its share: dur x lanes that ran it / the group's
    lanes); speedup: (phase, factor) pairs, the phase's slices last dur / factor; durations: explicit new
    durations per row (the findings' own changes)."""

    balance: tuple = ()
    straggler_to_median: tuple = ()
    no_late_start: bool = False
    block: int | None = None
    barrier_cost_ns: float | None = None
    spread: tuple = ()
    speedup: tuple = ()
    durations: object = None
    starts: object = None
    latencies: object = None

    def empty(self) -> bool:
        return not (self.balance or self.straggler_to_median or self.no_late_start or self.barrier_cost_ns is not None
                    or self.spread or self.speedup or self.durations is not None or self.starts is not None
                    or self.latencies is not None)



@frozen
class WhatIf:
    """measured_wall_ns: the kernel's wall; replayed_wall_ns: the unchanged timeline replayed (equal to it where
    the model holds); predicted_wall_ns: with the change; saving_ns = replayed - predicted; path: the critical
    path after the change, its parts' ns by phase ('phase' rows) and by what the path waited on ('wait'
    rows: grid, cluster, group, slot, lane, start); ends_on: the lane that ends the kernel after the change."""

    measured_wall_ns: int
    replayed_wall_ns: int
    predicted_wall_ns: int
    saving_ns: int
    change: dict
    path: list = field(default_factory=list)
    ends_on: dict = field(default_factory=dict)
    path_before: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"measured_wall_ns": self.measured_wall_ns, "replayed_wall_ns": self.replayed_wall_ns,
                "predicted_wall_ns": self.predicted_wall_ns, "saving_ns": self.saving_ns,
                "saving_share": self.saving_ns / self.replayed_wall_ns if self.replayed_wall_ns else None,
                "change": dict(self.change), "path": list(self.path), "path_before": list(self.path_before),
                "ends_on": dict(self.ends_on)}


# -- a change, as the replay's arrays -------------------------------------------------------------------------

def _durations(tl: Timeline, ch: Change) -> np.ndarray:
    dur = tl.dur.astype(np.float64)
    if ch.durations is not None:
        dur = np.asarray(ch.durations, np.float64).copy()
    for name in ch.balance:
        c = tl.phase_code(name)
        m = tl.phase == c
        dur[m] = _balanced(tl, m, dur)
    for name in ch.straggler_to_median:
        c = tl.phase_code(name)
        rows = np.flatnonzero(tl.phase == c)
        med = _by_key(tl.k[rows], dur[rows], np.median)
        new = np.minimum(dur[rows], med)
        if ch.block is not None:
            new = np.where(tl.block[rows] == ch.block, new, dur[rows])
        dur[rows] = new
    for name in ch.spread:
        c = tl.phase_code(name)
        rows = np.flatnonzero(tl.phase == c)
        groups = np.unique(tl.group[rows])
        for g in groups.tolist():
            lanes_g = len(np.unique(tl.lane[tl.group == g]))
            mine = rows[tl.group[rows] == g]
            ran = len(np.unique(tl.lane[mine]))
            dur[mine] = dur[mine] * ran / max(lanes_g, 1)
    for name, factor in ch.speedup:
        m = tl.phase == tl.phase_code(name)
        dur[m] = dur[m] / float(factor)
    return dur


def _balanced(tl: Timeline, m: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """The phase's slices (mask m) with every lane given the mean."""
    rows = np.flatnonzero(m)
    lanes, per_lane = np.unique(tl.lane[rows], return_counts=True)
    if len(np.unique(per_lane)) == 1:  # the lanes run the same instances: each instance's mean
        return _by_key(tl.k[rows], dur[rows], np.mean)
    tot = np.zeros(len(lanes))
    li = np.searchsorted(lanes, tl.lane[rows])
    np.add.at(tot, li, dur[rows])
    target = tot.mean()
    return dur[rows] * np.where(tot[li] > 0, target / np.maximum(tot[li], 1e-9), 1.0)


def _by_key(key: np.ndarray, x: np.ndarray, fn) -> np.ndarray:
    """fn(x) over the entries of each key, per entry (fn: np.mean or np.median)."""
    o = np.argsort(key, kind="stable")
    ks, xs = key[o], x[o]
    starts = run_starts(ks)
    bounds = np.r_[starts, len(ks)]
    if fn is np.mean:
        val = np.add.reduceat(xs, starts) / np.diff(bounds)
    else:  # a median per key: sort by (key, x) once
        o2 = np.lexsort((xs, ks))
        xs2 = xs[o2]
        nn = np.diff(bounds)
        val = (xs2[starts + (nn - 1) // 2] + xs2[starts + nn // 2]) / 2.0
    out = np.empty(len(x))
    out[o] = np.repeat(val, np.diff(bounds))
    return out


def _starts(tl: Timeline, ch: Change) -> np.ndarray:
    """The first slices' bounds, ns after the kernel's begin."""
    start = measured_starts(tl)
    if ch.starts is not None:
        start = np.asarray(ch.starts, np.float64) - tl.kernel_begin
    if ch.no_late_start:
        fr = np.flatnonzero(tl.first & (tl.release == 0))
        for g in np.unique(tl.group[fr]).tolist():
            mine = fr[tl.group[fr] == g]
            med = float(np.median(tl.begin[mine] - tl.kernel_begin))
            late = mine[tl.begin[mine] - tl.kernel_begin > med]
            if ch.block is not None:
                late = late[tl.block[late] == ch.block]
            start[late] = med
    return start


def _latencies(tl: Timeline, ch: Change) -> np.ndarray:
    lat = tl.latency.astype(np.float64)
    if ch.latencies is not None:
        lat = np.asarray(ch.latencies, np.float64).copy()
    if ch.barrier_cost_ns is not None:
        b = (tl.release == 2) | (tl.release == 3)
        lat[b] = np.minimum(lat[b], float(ch.barrier_cost_ns))
    return lat




def predict(tl: Timeline, change: "Change | None" = None, max_rounds: int | None = None) -> Replayed:
    """The replay with ``change`` applied (None: as measured), in at most ``max_rounds`` rounds."""
    ch = change or Change()
    return replay(tl, _durations(tl, ch), _starts(tl, ch), _latencies(tl, ch), max_rounds=max_rounds)


def whatif(tl: Timeline, change: Change, measured_wall_ns: int | None = None) -> WhatIf:
    """The wall with ``change`` applied against the timeline replayed unchanged, and the critical path after."""
    base = replay(tl)
    new = predict(tl, change, change_rounds(base))
    if not new.settled:
        raise InputError(f"the timeline with this change did not settle in {new.rounds:,} rounds of the replay (the "
                         "change makes a chain of releases circular): no prediction; try a smaller change")
    desc = change_dict(change)
    last = int(np.lexsort((tl.lane, -new.end))[0])
    ends_on = {"block": int(tl.block[last]), "group": int(tl.group[last]), "phase": tl.names[tl.phase[last]],
               "k": int(tl.k[last])}
    mw = int(measured_wall_ns if measured_wall_ns is not None else tl.wall_ns)
    return WhatIf(mw, base.wall_ns, new.wall_ns, base.wall_ns - new.wall_ns, desc, path_parts(tl, new), ends_on,
                  path_parts(tl, base))


def change_dict(change: Change) -> dict:
    """The change's set fields, JSON-ready (the explicit arrays left out)."""
    out: dict = {}
    for key in ("balance", "straggler_to_median", "spread"):
        if getattr(change, key):
            out[key] = list(getattr(change, key))
    if change.speedup:
        out["speedup"] = [[p, float(f)] for p, f in change.speedup]
    if change.no_late_start:
        out["no_late_start"] = True
    if change.block is not None:
        out["block"] = int(change.block)
    if change.barrier_cost_ns is not None:
        out["barrier_cost_ns"] = float(change.barrier_cost_ns)
    return out



def path_parts(tl: Timeline, r: Replayed) -> list[dict]:
    """The critical path's time by part: each phase's slices on it, then the gaps by what they waited on."""
    rows = critical_rows(tl, r)
    if not rows:
        return []
    by_phase: dict[str, int] = {}
    by_wait: dict[str, int] = {}
    t = int(r.end[rows[0][0]])
    for row, b in rows:
        bgn = min(int(r.begin[row]), t)
        nm = tl.names[tl.phase[row]]
        by_phase[nm] = by_phase.get(nm, 0) + (t - bgn)
        t = bgn
        if b == 0:
            break
        src_end = int(r.end[row - 1]) if b == 1 else None
        if src_end is None:  # the release: its set's latest end
            s0 = tl.set_starts[tl.rel_set[row]]
            s1 = tl.set_starts[tl.rel_set[row] + 1] if tl.rel_set[row] + 1 < len(tl.set_starts) else len(tl.members)
            src_end = int(r.end[tl.members[s0:s1]].max())
        g = max(t - min(src_end, t), 0)
        by_wait[RELEASES[b]] = by_wait.get(RELEASES[b], 0) + g
        t = min(src_end, t)
    lead = t - min(int(r.begin.min()), int(tl.kernel_begin))
    out = [{"part": "phase", "name": k, "ns": v} for k, v in sorted(by_phase.items(), key=lambda x: -x[1])]
    out += [{"part": "wait", "name": k, "ns": v} for k, v in sorted(by_wait.items(), key=lambda x: -x[1]) if v > 0]
    if lead > 0:
        out.append({"part": "lead_in", "name": "lead_in", "ns": lead})
    return out
