"""What removing a finding's cause would save, replayed on the timeline (replay.py): the bound on its stake.

A finding's impact is its disjoint share of the critical path (causes.py); where its cause is one the replay
can remove, the impact is at most what the replay without it saves, so no finding promises more than the change
it advises could recover (docs/analysis-schema.md, "Cause model and replay"):

- a late start (the kernel's last lane): that lane's first slice begins at its warp group's median first begin;
- a late start in a phase: the phase's slices (of the named block) begin after their instance's median own gap or
  release latency, the first slices at their instance's median begin;
- a stable straggler (work or both): the block's slices of the phase cut to their instance's median; a moving
  or rotating last finisher, a straggler that changes: every slice of the phase cut to its instance's median;
- a load imbalance by instances: every lane gets the instance's mean;
- the grid barrier: its own release removed (each barrier instance's median release latency; each lane keeps
  its own delay beyond that median: a late starter's wait is the starter's cost, not the barrier's);
- idle lanes, a serial tail: the phase spread over every lane of its warp groups;
- a pipeline: the bounding warp group's slices as fast as the waiting group's (median busy times);
- a slow GPC: its blocks' slices as fast as the other GPCs' median block (kinds/gpc_imbalance.py).

Where the work is known (analysis/model/roofline.py), no stake goes below the roofline: ``room`` is the wall less
the work's time at the device's peaks, and every impact is at most that.
"""

from __future__ import annotations

import numpy as np

from ..model.roofline import roofline_of
from . import kinds as K
from .kinds import gpc_imbalance
from .replay import Timeline, change_rounds, measured_starts, replay, timeline
from ..evidence.keyed import distinct

__all__ = ["Stakes", "timeline_of_figures"]


def timeline_of_figures(fig) -> Timeline | None:
    """The replay's Timeline of the figures' top-level slices; None where only a sample of them was read."""
    top = getattr(fig, "top", None)
    if top is None or len(top.lane) < 2:
        return None
    n = int(max(top.phase_index.max(), fig.phases.phase_index.max() if len(fig.phases) else 0)) + 1
    names = [str(i) for i in range(n)]
    for i, nm in zip(fig.phases.phase_index.tolist(), fig.phases.phase.tolist()):
        names[i] = nm
    return timeline(top, tuple(names), fig)


class Stakes:
    """The replayed saving of each finding's cause, for the figures ``fig``."""

    def __init__(self, fig) -> None:
        self.fig = fig
        self.tl = timeline_of_figures(fig)
        base = replay(self.tl) if self.tl is not None else None
        self.base = base.wall_ns if base is not None else None
        self._max_rounds = change_rounds(base) if base is not None else 0
        self._cache: dict = {}
        wall = float(fig.kernel.wall_ns or 0)
        self.roofline = roofline_of(getattr(fig, "launch", None) or {}, wall)
        floor = self.roofline.floor_ns if self.roofline is not None else None
        # the most any change can save: the wall down to the work at the device's peaks (None: no bound known)
        self.room = max(wall - floor, 0.0) if floor is not None else None

    def saving(self, v) -> float | None:
        """The ns removing the cause of verdict ``v`` saves; None where the replay has no change for it."""
        if self.tl is None or self.base is None:
            return None
        key = self._change_key(v)
        if key is None:
            return None
        if key not in self._cache:
            arrays = self._arrays(key)
            r = None if arrays is None else replay(self.tl, *arrays, max_rounds=self._max_rounds)
            # a change whose replay has not settled gives no bound: the stake stays as the critical path says
            self._cache[key] = None if r is None or not r.settled else float(max(self.base - r.wall_ns, 0))
        return self._cache[key]

    def _change_key(self, v):
        g, tl = v.figures, self.tl
        names = tl.names
        phase = v.phase if v.phase in names else None
        if v.kind == K.LATE_START and g.get("basis") == "lane":
            return ("late_lane", int(g["block"]), int(g["group"]))
        if v.kind == K.PIPELINE:  # named by the phase the hand-off follows: the groups are its cause, not the phase
            return ("bounding_group", int(g["bounding_group"]), int(g["waiting_group"]))
        if v.kind == K.GPC_IMBALANCE:
            return ("gpc", int(g["gpc"]), float(g["ratio"]))
        if phase is None:
            return None
        if v.kind == K.LATE_START:
            return ("late_phase", phase, g.get("block"))
        if v.kind == K.STABLE_STRAGGLER and g.get("cause") in ("work", "both"):
            return ("median", phase, int(g["block"]))
        if v.kind in (K.STRAGGLER_CHANGE, K.ROTATING_IMBALANCE, K.MOVING_LAST_FINISHER):
            return ("median", phase, None)
        if v.kind == K.LOAD_IMBALANCE and g.get("basis") == "instances":
            return ("balance", phase)
        if v.cause == "grid barrier" and v.kind in (K.LARGE_WAIT, K.START_SKEW):
            return ("barrier",)
        if v.kind == K.SERIAL_TAIL:
            return ("spread", (phase,))
        if v.kind == K.IDLE_LANES:
            extra = tuple(sorted({c["phase"] for c in g.get("consequences", []) if c["kind"] == K.IDLE_LANES
                                  and c["phase"] in names}))
            return ("spread", tuple(sorted({phase, *extra})))
        return None

    def _arrays(self, key):
        """(dur, start, latency, gap) of the replay without the cause."""
        tl = self.tl
        dur = tl.dur.astype(np.float64)
        start = measured_starts(tl)
        lat = tl.latency.astype(np.float64)
        gap = tl.gap.astype(np.float64)
        kind = key[0]
        if kind == "late_lane":
            _, b, g = key
            fr = np.flatnonzero(tl.first & (tl.release == 0) & (tl.group == g))
            mine = fr[tl.block[fr] == b]
            if not len(mine):
                return None
            start[mine] = np.minimum(start[mine], float(np.median(start[fr])))
        elif kind == "late_phase":
            _, phase, b = key
            rows = np.flatnonzero(tl.phase == tl.phase_code(phase))
            sel = rows if b is None else rows[tl.block[rows] == b]
            for arr, m in ((start, tl.first & (tl.release == 0)), (lat, tl.release >= 2), (gap, ~tl.first & (tl.release == 1))):
                on = rows[m[rows]]
                if not len(on):
                    continue
                med = _median_by(tl.k[on], arr[on])
                mine = np.isin(on, sel)
                arr[on[mine]] = np.minimum(arr[on[mine]], med[mine])
        elif kind == "median":
            _, phase, b = key
            rows = np.flatnonzero(tl.phase == tl.phase_code(phase))
            med = _median_by(tl.k[rows], dur[rows])
            new = np.minimum(dur[rows], med)
            dur[rows] = new if b is None else np.where(tl.block[rows] == b, new, dur[rows])
        elif kind == "balance":
            rows = np.flatnonzero(tl.phase == tl.phase_code(key[1]))
            dur[rows] = _mean_by(tl.k[rows], dur[rows])
        elif kind == "barrier":
            rel = np.flatnonzero((tl.release == 2) | (tl.release == 3))
            if not len(rel):
                return None
            # The barrier's own cost is each instance's median release; a lane that begins later than that keeps
            # its excess: its own delay (a late starter's), not the barrier's.
            med = _median_by(tl.rel_set[rel], lat[rel])
            lat[rel] = np.maximum(lat[rel] - med, 0.0)
        elif kind == "spread":
            for phase in key[1]:
                rows = np.flatnonzero(tl.phase == tl.phase_code(phase))
                for g in distinct(tl.group[rows]).tolist():
                    mine = rows[tl.group[rows] == g]
                    lanes_g = len(distinct(tl.lane[tl.group == g]))
                    dur[mine] *= len(distinct(tl.lane[mine])) / max(lanes_g, 1)
        elif kind == "gpc":  # the GPC's blocks as fast as the other GPCs' median block
            _, gpc, ratio = key
            dur = gpc_imbalance.even_out(tl, getattr(self.fig, "launch", None) or {}, gpc, ratio, dur)
            if dur is None:
                return None
        elif kind == "bounding_group":
            _, h, g = key
            bh, bg = _busy(tl, h), _busy(tl, g)
            if not bh or not bg or bh <= bg:
                return None
            dur[tl.group == h] *= bg / bh
        return dur, start, lat, gap


def _busy(tl: Timeline, g: int) -> float:
    """The median busy time of group g's lanes (ns)."""
    m = tl.group == g
    if not m.any():
        return 0.0
    lanes, inv = np.unique(tl.lane[m], return_inverse=True)
    return float(np.median(np.bincount(inv, weights=tl.dur[m].astype(np.float64))))


def _by(key: np.ndarray, x: np.ndarray):
    o = np.lexsort((x, key))
    ks, xs = key[o], x[o]
    starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
    n = np.diff(np.r_[starts, len(ks)])
    return o, xs, starts, n


def _median_by(key: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Each entry's key's median of x."""
    if not len(x):
        return x
    o, xs, starts, n = _by(key, x)
    med = (xs[starts + (n - 1) // 2] + xs[starts + n // 2]) / 2.0
    out = np.empty(len(x))
    out[o] = np.repeat(med, n)
    return out


def _mean_by(key: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Each entry's key's mean of x."""
    o, xs, starts, n = _by(key, x)
    out = np.empty(len(x))
    out[o] = np.repeat(np.add.reduceat(xs, starts) / n, n)
    return out
