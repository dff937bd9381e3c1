"""The rules behind each finding kind: what structure the figures must show before a cause is named, and
how much kernel time is at stake. docs/analysis-schema.md states each rule; causes.py makes findings of one
cause into one finding and their impacts disjoint parts of the wall; findings.py sorts them into warnings
and info.

Every verdict claims, per step of the critical path (the backward walk that tiles the wall), the time it
accounts for (``claims``); its impact is what it keeps of those claims once the findings ahead of it took theirs:
- load_imbalance (instances that line up): per slice of the phase on the path, slice - its instance's mean.
- stable_straggler, straggler_change, rotating_imbalance, late_start, moving_last_finisher: per instance of the
  phase on the path, the last finisher's lead over the next lane.
- start_skew: the gap on the path before each of the phase's slices, up to how late that slice began.
- large_wait, untimed_work: the path's gaps at that boundary.
- idle_lanes: the phase's time on the path x the idle lanes' share.
- tail, wave_quantization, load_imbalance by lane totals, pipeline: the end of the wall, as long as the time
  at stake (launch_verdicts.py).

Structure first: instances are compared across lanes only where they line up (the same count on every lane
and, in most instances, begins spread over no more than the slowest slice); elsewhere the lanes' totals speak
(launch_verdicts.py). A block is named only when it dominates: its figure exceeds the median by at least
``DOMINANCE`` times the runner-up's excess, and by 2 ticks.
"""

from __future__ import annotations

import numpy as np

from .verdict import Verdict, fmt as _fmt, num as _num
from .phase_shape import DOMINANCE, carried, dominant, incoming_causes, lined_up
from .last_finisher import last_finisher
from .launch_verdicts import launch_verdicts
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
            imb, last, skew = _imbalance(ctx, p, inst), last_finisher(ctx, p, inst, on_path), _skew(ctx, p, inst, on_path)
            _link(p, imb, last, skew)
            found = [imb, last, skew]
        found.append(_idle(ctx, p))
        for v in found:
            if v is None:
                continue
            if tiny:
                v.warn = False
                v.figures["tiny_phase"] = True
            out.append(v)
    out += launch_verdicts(ctx)
    return out


def _link(p, imb, last, skew) -> None:
    """One cause per phase: the imbalance of a phase with a straggler (stable, changing or rotating) is that
    straggler's; a start skew whose late lane is the late starter is the late start's."""
    if last is not None:
        key = last.cause or f"long lanes of {p['phase']}"
        last.cause = key
        if imb is not None and last.kind in ("stable_straggler", "straggler_change", "rotating_imbalance"):
            imb.cause = key
        if skew is not None and last.kind == "late_start" and skew.figures.get("cause") in ("launch", "unexplained"):
            skew.cause = key
    if imb is not None and p["wave_instances"] and imb.warn:
        imb.cause = imb.cause if last is not None else "heavy blocks"


def _imbalance(ctx, p, inst) -> Verdict | None:
    th, fig = ctx.th, ctx.fig
    imb, mean_max, mean = p["imbalance"], p["mean_max_dur_ns"], p["mean_dur_ns"]
    if imb is None or imb <= th.imbalance or mean_max - mean < ctx.eps:
        return None
    # The slowest lanes stand out of the noise: the slowest slice is beyond the p50..p90 spread (doubled), or
    # the p90 lane itself is slow (a broad imbalance); else the max of many lanes is the noise's own tail.
    p50, p90 = float(inst.p50_dur_ns.mean()), float(inst.p90_dur_ns.mean())
    outlier = mean_max - p50 >= 2 * (p90 - p50) or (p50 > 0 and p90 / p50 > th.imbalance)
    cp = ctx.cp
    claims = ctx.zeros()
    m = np.flatnonzero((cp.kind == "slice") & (cp.phase == p["phase"]))
    mean_k = ctx._per_k(m, inst.k, inst.mean_dur_ns)
    claims[m] = np.maximum(cp.dur_ns[m] - mean_k, 0.0)
    lanes = fig.lanes.where(fig.lanes.phase == p["phase"])
    # A block stands out, not a lane: the warps or warp groups of one slow block are one cause.
    blocks, first = np.unique(lanes.block, return_index=True)
    per_block = np.full(len(blocks), -np.inf)
    np.maximum.at(per_block, np.searchsorted(blocks, lanes.block), lanes.mean_dur_ns)
    jb = dominant(per_block, ctx.eps)
    if jb is not None:
        mine = np.flatnonzero(lanes.block == blocks[jb])
        slow = lanes.row(int(mine[np.argmax(lanes.mean_dur_ns[mine])]))
        who = ctx.who(slow["block"], slow["group"])
        named = f"slowest on average: {who} ({_fmt(slow['mean_dur_ns'])}), well ahead of the next block"
        cause = f"block {slow['block']}"
    else:
        top = np.argsort(-lanes.mean_dur_ns, kind="stable")[:3].tolist()
        named = ("no block stands out on average (the slowest lanes: " +
                 ", ".join(f"{ctx.who(int(lanes.block[t]), int(lanes.group[t]))} {_fmt(float(lanes.mean_dur_ns[t]))}"
                           for t in top) + "): the long slices fall on different blocks")
        slow, cause = None, None
    msg = (f"{ctx.label(p)}: load imbalance {imb:.2f}x: the slowest lane takes {_fmt(mean_max)} per instance "
           f"against a mean of {_fmt(mean)}; {named}; even out the work per lane")
    ev = (f"slowest slice / mean slice over {p['instances']} instance(s) of {p['lanes']} lanes (worst instance "
          f"{p['max_imbalance']:.2f}x); {int((claims > 0).sum())} of its slices on the critical path run over "
          "their instance's mean")
    figs = {"basis": "instances", "imbalance": imb, "max_imbalance": p["max_imbalance"],
            "mean_max_dur_ns": mean_max, "mean_dur_ns": mean, "instances": p["instances"],
            "slowest_block": slow["block"] if slow else None, "slowest_group": slow["group"] if slow else None,
            "slowest_mean_dur_ns": slow["mean_dur_ns"] if slow else None, "tick_ns": ctx.tick}
    figs.update(mean_p50_dur_ns=p50, mean_p90_dur_ns=p90, outlier=bool(outlier))
    if not outlier:
        ev += f"; the slowest slice is within the lanes' own spread (p50 {_fmt(p50)}, p90 {_fmt(p90)}): noise"
    evened = _totals_even(ctx, p)
    if evened:
        ev += ("; but the lanes' totals over all phases even out (busiest lane " + f"{evened:.2f}x the mean) and no "
               "barrier follows the phase: the other phases make up for it")
        figs["lane_totals_even"] = True
    return Verdict("load_imbalance", p["phase"], msg, ev, float(claims.sum()), bool(outlier) and not evened, figs,
                   claims, cause)


def _totals_even(ctx, p) -> float | None:
    """The busiest lane's total / the mean, when every group's lanes' totals are within the imbalance threshold
    and no barrier (grid or cluster) follows the phase; else None."""
    wc = ctx.wc
    after = set(wc.cause[wc.phase == p["phase"]].tolist())
    if after & {"grid", "cluster"}:
        return None
    lt = ctx.fig.lane_totals
    worst = 0.0
    for g in np.unique(lt.group).tolist():
        tot = lt.busy_ns[lt.group == g].astype(np.float64)
        if len(tot) < 2 or not tot.mean():
            continue
        worst = max(worst, float(tot.max() / tot.mean()))
    return worst if 0 < worst <= ctx.th.imbalance else None


def _skew(ctx, p, inst, on_path) -> Verdict | None:
    th, eps = ctx.th, ctx.eps
    n = p["instances"]
    mean_wall = p["sum_wall_ns"] / n if n else 0.0
    excess = p["mean_excess_ns"]
    if not mean_wall or excess < eps or excess / mean_wall <= th.excess_fraction:
        return None
    skew = p["mean_start_skew_ns"]
    late = np.minimum(inst.excess_ns, np.maximum(inst.last_begin_ns - inst.begin_ns, 0))
    claims = ctx.claim_before(p["phase"], inst.k, late)
    with_prev = inst.prev_lanes > 0
    spread = (inst.lead_in_max_ns - inst.lead_in_min_ns)[with_prev]
    incoming = incoming_causes(ctx, p["phase"])
    figs = {"mean_excess_ns": excess, "mean_wall_ns": mean_wall, "excess_fraction": excess / mean_wall,
            "mean_start_skew_ns": skew, "mean_end_skew_ns": p["mean_end_skew_ns"], "max_excess_ns": p["max_excess_ns"],
            "sync_instances": p["sync_instances"], "wave_instances": p["wave_instances"],
            "incoming_waits": sorted(incoming), "tick_ns": ctx.tick}
    label, warn = ctx.label(p), True
    head = f"{label}: wall time exceeds the slowest lane's time by {_fmt(excess)} per instance ({excess / mean_wall:.0%})"
    if p["wave_instances"]:
        cause, claims, warn = "waves", None, False
        msg = (f"{head}: its lanes ran in waves (blocks of later waves began after another block on their SM had "
               f"finished), so begins spread over {_fmt(skew)}; not a synchronization: see the tail finding")
        ev = f"{p['wave_instances']} of {n} instances hold blocks of a later wave"
    elif with_prev.any() and "grid" in incoming:
        cause = "sync_release"  # a release only where a grid-wide barrier is evidenced
        what = "grid-wide barrier"
        msg = (f"{head}: a slow release after the {what} before it: every lane waits for the previous phase's "
               f"last finisher, then begins up to {_fmt(skew)} apart")
        ev = (f"the waits into this phase are a {what} (docs: what a wait waited for); in {p['sync_instances']} of "
              f"{n} instances every lane began after the previous instance's last end")
    elif carried(ctx, p, inst):
        cause, claims, warn = "carried_over", None, False
        msg = (f"{head}: lanes begin right after their own previous slice, so the start skew ({_fmt(skew)}) is "
               "carried over from the previous phase's ends; its cause is upstream")
        ev = (f"no barrier evidenced before it; lead-in spread {_fmt(float(np.nan_to_num(spread).mean()))} <= half "
              f"the start skew {_fmt(skew)}")
    elif p["depth"] > 0:
        cause, claims, warn = "nested", None, False
        msg = (f"{head}: a nested phase: its begins follow its parent slices' ({_fmt(skew)} apart); judge the skew "
               "on the top-level phase")
        ev = f"depth {p['depth']}: inside another phase on every lane"
    elif not with_prev.any():
        cause = "launch"
        msg = f"{head}: the lanes' first phase begins spread over {_fmt(skew)}: blocks start at different times"
        ev = "no lane ran anything before this phase"
    else:
        cause, warn = "unexplained", False  # no cause evidenced: information, not a verdict to act on
        what = ", ".join(sorted(incoming)) or "none"
        msg = (f"{head}: begins spread over {_fmt(skew)} with no barrier evidenced and uneven gaps before the phase "
               f"(the gaps before it: {what}; see the wait findings)")
        ev = f"lead-in spread {_fmt(float(np.nan_to_num(spread).mean()))}"
    figs["cause"] = cause
    impact = float(claims.sum()) if claims is not None else 0.0
    key = "grid barrier" if cause == "sync_release" and "grid" in incoming else None
    return Verdict("start_skew", p["phase"], msg, ev, impact, warn, figs, claims, key)


def _idle(ctx, p) -> Verdict | None:
    if not p["idle_lanes"]:
        return None
    fig = ctx.fig
    groups = [int(g) for g in (p["groups"] or "").split(",") if g]
    mine = set(fig.lanes.lane[fig.lanes.phase == p["phase"]].tolist())
    lt = fig.lane_totals
    idle = [(int(b), int(g)) for l, b, g in zip(lt.lane.tolist(), lt.block.tolist(), lt.group.tolist())
            if g in groups and l not in mine]
    total = p["lanes"] + p["idle_lanes"]
    claims = ctx.claim_phase(p["phase"], p["idle_lanes"] / total)
    names = ", ".join(ctx.who(b, g) for b, g in idle[:8])
    more = f" and {len(idle) - 8} more" if len(idle) > 8 else ""
    msg = (f"{ctx.label(p)}: {p['idle_lanes']} of {total} lanes never ran this phase ({names}{more}): capacity "
           "left idle while the others work; give them a share")
    ev = "lanes of the phase's warp groups with slices of other phases and none of this one"
    blocks = sorted({b for b, _ in idle})
    return Verdict("idle_lanes", p["phase"], msg, ev, float(claims.sum()), True,
                   {"idle_lanes": p["idle_lanes"], "lanes": p["lanes"], "idle": [list(x) for x in idle[:64]]}, claims,
                   "idle blocks " + ",".join(map(str, blocks[:64])))  # the same idle blocks in every phase: one cause
