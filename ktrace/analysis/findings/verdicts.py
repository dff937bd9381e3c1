"""The verdicts of a kernel: each phase's and the launch's, from the detectors of the finding kinds (one module
per kind in kinds/, the last finisher's five kinds in last_finisher.py). Each detector holds its kind's rule:
what structure the figures must show before a cause is named, and how much kernel time is at stake.
docs/analysis-schema.md states each rule; causes.py makes findings of one cause into one finding and their
impacts disjoint parts of the wall; find.py sorts them into warnings and info.

Every verdict claims, per step of the critical path (the backward walk that tiles the wall), the time it
accounts for (``claims``); its impact is what it keeps of those claims once the findings ahead of it took theirs:
- load_imbalance (instances that line up): per slice of the phase on the path, slice - its instance's mean.
- stable_straggler, straggler_change, rotating_imbalance, late_start, moving_last_finisher: per instance of the
  phase on the path, the last finisher's lead over the next lane.
- start_skew: the gap on the path before each of the phase's slices, up to how late that slice began.
- large_wait, untimed_work: the path's gaps at that boundary.
- idle_lanes: the phase's time on the path x the idle lanes' share.
- serial_tail: its idle-lanes verdict's claims (the phase run alone at the end; kinds/serial_tail.py).
- tail, wave_quantization, load_imbalance by lane totals, pipeline: the end of the wall, as long as the time
  at stake (kinds/tail.py, wave_quantization.py, load_imbalance.py, pipeline.py).

Structure first: instances are compared across lanes only where they line up (the same count on every lane
and, in most instances, begins spread over no more than the slowest slice); elsewhere the lanes' totals speak
(kinds/load_imbalance.py). A block is named only when it dominates: its figure exceeds the median by at least
``DOMINANCE`` times the runner-up's excess, and by 2 ticks.
"""

from __future__ import annotations

import numpy as np

from .verdict import Verdict, num as _num
from . import kinds as K
from .kinds import (critical_path, idle_lanes, large_wait, late_start, load_imbalance, pipeline, serial_tail,
                    start_skew, tail, wave_quantization)
from .kinds import gpc_imbalance
from .phase_shape import DOMINANCE, carried, dominant, incoming_causes, lined_up
from .last_finisher import last_finisher
from ..model.results import Figures
from ..evidence.slots import slot_figures

__all__ = ["Verdict", "all_verdicts", "Context", "DOMINANCE", "MIN_PHASE_TICKS", "lined_up", "dominant", "carried",
           "incoming_causes"]

MIN_PHASE_TICKS = 4  # a phase whose slowest slice is shorter than this many ticks makes no warnings


class Context:
    def __init__(self, fig: Figures, th, tick: float) -> None:
        self.fig, self.th, self.tick = fig, th, tick
        self.eps = th.min_ticks * tick  # the smallest difference a finding may rest on
        cp = fig.critical_path
        self.cp = cp
        self.steps = len(cp)
        groups = {g for gs in fig.phases.groups.tolist() for g in (gs or "").split(",") if g}
        self.several_groups = len(groups) > 1
        k = fig.kernel
        self.slots = slot_figures(fig.blocks, k.begin_ns, k.end_ns)
        self.wc = fig.wait_causes

    def label(self, p: dict) -> str:
        if not self.several_groups:
            return p["phase"]
        word = "groups" if "," in (p["groups"] or "") else "group"
        return f"{p['phase']} ({word} {p['groups']})"

    def who(self, block, group=None) -> str:
        return f"block {block}" + (f" group {group}" if self.several_groups and group is not None else "")

    def path_slices(self, phase: str):
        cp = self.cp
        m = (cp.kind == "slice") & (cp.phase == phase)
        return cp.k[m].astype(np.int64), cp.dur_ns[m]

    def instances(self, phase: str):
        t = self.fig.instances
        return t.where(t.phase == phase)

    def lane_time(self) -> float:
        """All lanes' time over the wall (ns)."""
        k = self.fig.kernel
        return float((k.lanes or 0) * (k.wall_ns or 0))

    # Claims on the critical path's steps (ns per step).
    def zeros(self) -> np.ndarray:
        return np.zeros(self.steps, np.float64)

    def _per_k(self, m: np.ndarray, ks, values) -> np.ndarray:
        """values[ks == step's k] for the steps in m (0 where the step's instance is not in ks)."""
        ks = np.asarray(ks, np.int64)
        values = np.asarray(values, np.float64)
        out = np.zeros(len(m))
        if not len(ks) or not len(m):
            return out
        sk = self.cp.k[m].astype(np.float64)
        ok = ~np.isnan(sk)
        o = np.argsort(ks, kind="stable")
        q = np.where(ok, sk, -1).astype(np.int64)
        j = np.minimum(np.searchsorted(ks[o], q), len(ks) - 1)
        hit = ok & (ks[o][j] == q)
        out[hit] = values[o][j][hit]
        return out

    def claim_slices(self, phase: str, ks, values) -> np.ndarray:
        """Per slice step of ``phase`` at instance k: values[k] ns, within the step."""
        cp, c = self.cp, self.zeros()
        m = np.flatnonzero((cp.kind == "slice") & (cp.phase == phase))
        c[m] = np.clip(self._per_k(m, ks, values), 0.0, cp.dur_ns[m].astype(np.float64))
        return c

    def claim_before(self, phase: str, ks, values) -> np.ndarray:
        """The gap step just before each slice step of ``phase`` (instance k), up to values[k] ns."""
        cp, c = self.cp, self.zeros()
        m = np.flatnonzero((cp.kind == "slice") & (cp.phase == phase))
        m = m[m > 0]
        want = self._per_k(m, ks, values)
        gap = cp.kind[m - 1] != "slice"
        m, want = m[gap] - 1, want[gap]
        c[m] = np.clip(want, 0.0, cp.dur_ns[m].astype(np.float64))
        return c

    def claim_gaps(self, phase: str, next_phase: str, group: int | None = None) -> np.ndarray:
        """The path's gaps after ``phase`` before ``next_phase`` (of ``group``'s lanes, when given)."""
        cp = self.cp
        m = ((cp.kind == "wait") | (cp.kind == "lane_gap")) & (cp.phase == phase) & (cp.next_phase == next_phase)
        if group is not None and self.several_groups:
            m &= np.nan_to_num(cp.last_group.astype(np.float64), nan=-1) == group
        c = self.zeros()
        c[m] = cp.dur_ns[m]
        return c

    def claim_phase(self, phase: str, share: float) -> np.ndarray:
        cp = self.cp
        m = (cp.phase == phase) & ((cp.kind == "slice") | (cp.kind == "wait"))
        c = self.zeros()
        c[m] = cp.dur_ns[m] * share
        return c

    def claim_window(self, begin_ns: float, end_ns: float, share: float = 1.0) -> np.ndarray:
        """The part of each step inside [begin_ns, end_ns], times share."""
        cp = self.cp
        lo = np.maximum(cp.begin_ns.astype(np.float64), begin_ns)
        hi = np.minimum(cp.end_ns.astype(np.float64), end_ns)
        return np.maximum(hi - lo, 0.0) * share

    def claim_last(self, ns: float) -> np.ndarray:
        """The last ``ns`` of the wall: what a kernel that ended that much earlier would not spend."""
        end = float(self.fig.kernel.end_ns or 0)
        return self.claim_window(end - max(ns, 0.0), end)


def all_verdicts(fig: Figures, th, tick: float) -> list[Verdict]:
    ctx = Context(fig, th, tick)
    out: list[Verdict] = []
    for i in range(len(fig.phases)):
        p = fig.phases.row(i)
        inst = ctx.instances(p["phase"])
        path_k, path_dur = ctx.path_slices(p["phase"])
        on_path = np.isin(inst.k, path_k)
        tiny = _num(p["mean_max_dur_ns"]) < MIN_PHASE_TICKS * tick
        found = []
        if lined_up(ctx, p, inst):
            imb = load_imbalance.detect_instances(ctx, p, inst)
            last, skew = last_finisher(ctx, p, inst, on_path), start_skew.detect(ctx, p, inst, on_path)
            _link(p, imb, last, skew)
            found = [imb, last, skew]
        found.append(idle_lanes.detect(ctx, p))
        for v in found:
            if v is None:
                continue
            if tiny:
                v.warn = False
                v.figures = v.figures.with_(tiny_phase=True)
            out.append(v)
    out += launch_verdicts(ctx)
    return serial_tail.detect(ctx, out)  # a phase's idle lanes, read again: does it run alone at the end?


def launch_verdicts(ctx) -> list[Verdict]:
    """The launch-level verdicts: the waits by what they waited for, the pipeline between warp groups, the lane
    that ends the kernel starting late, the lanes' totals on a work list, a partial last wave, a slow GPC, the tail
    and the critical path's largest part."""
    out = large_wait.detect(ctx) + pipeline.detect(ctx)
    out += [v for v in (late_start.detect_lane(ctx), load_imbalance.detect_lane_totals(ctx),
                        wave_quantization.detect(ctx), gpc_imbalance.detect(ctx), tail.detect(ctx),
                        critical_path.detect(ctx)) if v]
    return out


def _link(p, imb, last, skew) -> None:
    """One cause per phase: the imbalance of a phase with a straggler (stable, changing or rotating) is that
    straggler's; a start skew whose late lane is the late starter is the late start's."""
    if last is not None:
        key = last.cause or f"long lanes of {p['phase']}"
        last.cause = key
        if imb is not None and last.kind in (K.STABLE_STRAGGLER, K.STRAGGLER_CHANGE, K.ROTATING_IMBALANCE):
            imb.cause = key
        if skew is not None and last.kind == K.LATE_START and skew.figures.get("cause") in ("launch", "unexplained"):
            skew.cause = key
    if imb is not None and p["wave_instances"] and imb.warn:
        imb.cause = imb.cause if last is not None else "heavy blocks"


