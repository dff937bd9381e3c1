"""The rules behind each finding kind: what structure the figures must show before a cause is named, and
how much kernel time is at stake (``impact_ns``). docs/analysis-schema.md states each rule; findings.py
turns these verdicts into warnings and info by impact.

Impact rules, all on the critical path (the backward walk that tiles the wall, docs/analysis-structure.md):
- load_imbalance: sum over the phase's slices on the path of (slice - its instance's mean slice), >= 0;
  with unaligned instances (a work list): the busiest lane's total - the mean lane total, at most the
  phase's time on the path.
- stable_straggler, straggler_change, rotating_imbalance, late_start, moving_last_finisher: sum over the
  phase's instances on the path of the last finisher's lead over the next lane.
- start_skew: sum over the phase's instances on the path of how late the last finisher began after the first
  lane (at most the excess); 0 when the cause is waves or unaligned instances (the tail finding or the
  per-lane totals carry that cost).
- large_wait: the waits after the phase on the path (the release of its synchronization).
- idle_lanes: the phase's time on the path x the idle lanes' share of the phase's lanes.
- tail: tail x (1 - mean busy SMs in the tail / SMs).
- critical_path: the largest part's time on the path (info only).
"""

from __future__ import annotations

import math
import numpy as np

from ._verdict import Verdict, fmt as _fmt, num as _num
from .launch_verdicts import launch_verdicts
from .results import Figures

__all__ = ["Verdict", "all_verdicts"]


class Context:
    def __init__(self, fig: Figures, th, tick: float) -> None:
        self.fig, self.th, self.tick = fig, th, tick
        self.eps = th.min_ticks * tick  # the smallest difference a finding may rest on
        cp = fig.critical_path
        self.cp = cp
        groups = {g for gs in fig.phases.groups.tolist() for g in (gs or "").split(",") if g}
        self.several_groups = len(groups) > 1

    def label(self, p: dict) -> str:
        if not self.several_groups:
            return p["phase"]
        word = "groups" if "," in (p["groups"] or "") else "group"
        return f"{p['phase']} ({word} {p['groups']})"

    def path_slices(self, phase: str):
        cp = self.cp
        m = (cp.kind == "slice") & (cp.phase == phase)
        return cp.k[m].astype(np.int64), cp.dur_ns[m]

    def path_total(self, phase: str) -> float:
        cp = self.cp
        m = (cp.phase == phase) & ((cp.kind == "slice") | (cp.kind == "wait"))
        return float(cp.dur_ns[m].sum())

    def instances(self, phase: str):
        t = self.fig.instances
        return t.where(t.phase == phase)


def all_verdicts(fig: Figures, th, tick: float) -> list[Verdict]:
    ctx = Context(fig, th, tick)
    out: list[Verdict] = []
    for i in range(len(fig.phases)):
        p = fig.phases.row(i)
        inst = ctx.instances(p["phase"])
        path_k, path_dur = ctx.path_slices(p["phase"])
        on_path = np.isin(inst.k, path_k)
        out += [v for v in (_imbalance(ctx, p, inst, path_k, path_dur), _last_finisher(ctx, p, inst, on_path),
                            _skew(ctx, p, inst, on_path), _idle(ctx, p)) if v]
    out += launch_verdicts(ctx)
    return out


def _aligned(p: dict) -> bool:
    return p["min_lane_instances"] == p["max_lane_instances"]


def _imbalance(ctx, p, inst, path_k, path_dur) -> Verdict | None:
    th, fig = ctx.th, ctx.fig
    if not _aligned(p):
        return _lane_totals(ctx, p)
    imb, mean_max, mean = p["imbalance"], p["mean_max_dur_ns"], p["mean_dur_ns"]
    if imb is None or imb <= th.imbalance or mean_max - mean < ctx.eps:
        return None
    mean_of_k = dict(zip(inst.k.tolist(), inst.mean_dur_ns.tolist()))
    impact = float(sum(max(0.0, d - mean_of_k.get(k, d)) for k, d in zip(path_k.tolist(), path_dur.tolist())))
    lanes = fig.lanes.where(fig.lanes.phase == p["phase"])
    j = int(np.argmax(lanes.mean_dur_ns))
    slow = lanes.row(j)
    who = f"block {slow['block']}" + (f" group {slow['group']}" if ctx.several_groups else "")
    msg = (f"{ctx.label(p)}: load imbalance {imb:.2f}x: the slowest lane takes {_fmt(mean_max)} per instance "
           f"against a mean of {_fmt(mean)}; slowest on average: {who} ({_fmt(slow['mean_dur_ns'])}); even out "
           "the work per lane")
    ev = (f"slowest slice / mean slice over {p['instances']} instance(s) of {p['lanes']} lanes (worst instance "
          f"{p['max_imbalance']:.2f}x); {len(path_k)} of its instances are on the critical path")
    return Verdict("load_imbalance", p["phase"], msg, ev, impact, True, {
        "basis": "instances", "imbalance": imb, "max_imbalance": p["max_imbalance"], "mean_max_dur_ns": mean_max,
        "mean_dur_ns": mean, "instances": p["instances"], "slowest_block": slow["block"],
        "slowest_group": slow["group"], "slowest_mean_dur_ns": slow["mean_dur_ns"], "tick_ns": ctx.tick})


def _lane_totals(ctx, p) -> Verdict | None:
    fig, th = ctx.fig, ctx.th
    lanes = fig.lanes.where(fig.lanes.phase == p["phase"])
    if len(lanes) < 2:
        return None
    tot = lanes.sum_dur_ns.astype(np.float64)
    mean = float(tot.mean())
    j = int(np.argmax(tot))
    top = float(tot[j])
    if not mean or top / mean <= th.imbalance or top - mean < ctx.eps:
        return None
    impact = min(top - mean, ctx.path_total(p["phase"]))
    occ = fig.occupancy.row(0) if len(fig.occupancy) else {}
    msg = (f"{ctx.label(p)}: instances do not line up across lanes (lanes ran {p['min_lane_instances']} to "
           f"{p['max_lane_instances']} of them: a work list?), so balance is judged on per-lane totals: the busiest "
           f"lane, block {int(lanes.block[j])}, spends {_fmt(top)} in it against a mean of {_fmt(mean)} "
           f"({top / mean:.2f}x); hand out work so the totals even out (heavy items first)")
    ev = (f"per-lane totals of {len(lanes)} lanes; instance counts differ across lanes; the block that ends the "
          f"kernel is block {occ.get('last_block')}")
    return Verdict("load_imbalance", p["phase"], msg, ev, impact, True, {
        "basis": "lane_totals", "imbalance": top / mean, "max_lane_total_ns": top, "mean_lane_total_ns": mean,
        "busiest_block": int(lanes.block[j]), "busiest_group": int(lanes.group[j]),
        "min_lane_instances": p["min_lane_instances"], "max_lane_instances": p["max_lane_instances"],
        "tick_ns": ctx.tick})


def _runs(seq: np.ndarray):
    """Runs of equal values: (value, first index, last index)."""
    if not len(seq):
        return []
    cut = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1], True])
    return [(int(seq[a]), int(a), int(b) - 1) for a, b in zip(cut[:-1], cut[1:])]


def _carried(p, inst) -> bool:
    """The phase's start skew comes over from the phase before it on each lane: no synchronization, and the
    gaps before it (lead-ins) spread over at most half the start skew."""
    with_prev = inst.prev_lanes > 0
    if not with_prev.any() or p["sync_instances"] * 2 >= int(with_prev.sum()):
        return False
    spread = (inst.lead_in_max_ns - inst.lead_in_min_ns)[with_prev]
    return float(spread.mean()) * 2 <= p["mean_start_skew_ns"]


def _last_finisher(ctx, p, inst, on_path) -> Verdict | None:
    th, eps = ctx.th, ctx.eps
    n = len(inst)
    if n < 1 or not _aligned(p) or _num(p["mean_last_lead_ns"]) < eps or p["wave_instances"]:
        return None
    lead = np.nan_to_num(inst.last_lead_ns)
    impact = float(lead[on_path].sum())
    work = (inst.last_dur_ns - inst.p50_dur_ns).astype(np.float64)
    late = (inst.last_begin_ns - inst.p50_begin_ns).astype(np.float64)
    long_ = (work >= eps) & (inst.last_dur_ns > th.imbalance * inst.mean_dur_ns)
    late_ = (late >= eps) & (late > work)
    seq = inst.last_block
    base = {"instances": n, "top_last_block": p["top_last_block"], "top_last_count": p["top_last_count"],
            "distinct_last_blocks": p["distinct_last_blocks"], "tied_instances": p["tied_instances"],
            "mean_last_lead_ns": p["mean_last_lead_ns"], "mean_work_excess_ns": float(work.mean()),
            "mean_late_start_ns": float(late.mean()), "long_instances": int(long_.sum()),
            "late_instances": int(late_.sum()), "tick_ns": ctx.tick}
    label, top, count = ctx.label(p), p["top_last_block"], p["top_last_count"]
    lead_txt = f"ahead of the next lane by {_fmt(p['mean_last_lead_ns'])} on average"
    if late_.mean() >= 0.5 and p["phase_index"] > 0 and _carried(p, inst):
        return None  # it starts late because it ended the phase before late: that phase's finding says why
    if n == 1:  # one instance: only a late start can be told apart (no stability to judge)
        if not late_[0]:
            return None
        msg = (f"{label}: block {top} finishes last because it starts late: it begins {_fmt(float(late[0]))} after the "
               f"median lane while its slice is within {_fmt(max(float(work[0]), 0))} of the median; look at what "
               "delays its start, not its work")
        ev = f"last finisher's begin - median begin {_fmt(float(late[0]))} > its slice - median slice {_fmt(float(work[0]))}"
        return Verdict("late_start", p["phase"], msg, ev, impact, True, {**base, "block": top, "cause": "late_start"})
    if count / n >= th.stable_fraction:
        m = seq == top
        w, lt = float(work[m].mean()), float(late[m].mean())
        if late_[m].mean() > 0.5:
            msg = (f"{label}: block {top} is the last finisher in {count} of {n} instances because it starts late: "
                   f"it begins {_fmt(lt)} after the median lane while its slice is within {_fmt(max(w, 0))} of the "
                   f"median; look at what delays its start (the phase before it, its launch or its SM), not its work")
            ev = f"last finisher's begin - median begin {_fmt(lt)} > its slice - median slice {_fmt(w)}"
            return Verdict("late_start", p["phase"], msg, ev, impact, True, {**base, "block": top, "cause": "late_start"})
        cause = "work" if long_[m].mean() > 0.5 else ("both" if lt >= eps and w >= eps else "small")
        advice = ("fix its share of the work" if cause == "work" else
                  "it both starts late and works longer" if cause == "both" else
                  "neither its work nor its start stands out; the margin is small")
        msg = f"{label}: block {top} is the last finisher in {count} of {n} instances, {lead_txt}: a stable straggler; {advice}"
        ev = (f"same block last in {count}/{n} instances (ties count as that block); its slice exceeds the median by "
              f"{_fmt(w)} on average, its begin by {_fmt(lt)}")
        return Verdict("stable_straggler", p["phase"], msg, ev, impact, True, {**base, "block": top, "cause": cause})
    min_run = max(2, math.ceil(0.1 * n))
    runs = [r for r in _runs(seq) if r[2] - r[1] + 1 >= min_run]
    covered = sum(r[2] - r[1] + 1 for r in runs)
    if covered >= th.stable_fraction * n and len({r[0] for r in runs}) >= 2:
        segs = [{"block": b, "group": int(inst.last_group[a]), "first_k": int(inst.k[a]), "last_k": int(inst.k[z]),
                 "instances": z - a + 1} for b, a, z in runs]
        text = ", then ".join(f"block {s['block']} for k {s['first_k']}-{s['last_k']}" for s in segs[:4])
        more = f" (+{len(segs) - 4} more segments)" if len(segs) > 4 else ""
        msg = (f"{label}: the straggler changes during the run: {text}{more}; within each segment it is a stable "
               f"straggler ({int(long_.sum())} of {n} instances have a long last lane): fix each one's share of the "
               "work at those iterations")
        ev = f"runs of one last block of at least {min_run} instances cover {covered} of {n} instances"
        return Verdict("straggler_change", p["phase"], msg, ev, impact, True, {**base, "segments": segs})
    if long_.mean() >= th.stable_fraction:
        msg = (f"{label}: rotating imbalance: in {int(long_.sum())} of {n} instances one lane is long (the last "
               f"finisher's slice exceeds the median by {_fmt(float(work.mean()))} on average) and it is a "
               f"different lane each time ({p['distinct_last_blocks']} blocks); the cost is in the work assignment, "
               "not contention: balance the work of each iteration")
        ev = "last finisher's slice > imbalance threshold x the mean in most instances; no block is last for long"
        return Verdict("rotating_imbalance", p["phase"], msg, ev, impact, True, base)
    if late_.mean() >= 0.5:
        msg = (f"{label}: the last finisher moves ({p['distinct_last_blocks']} blocks in {n} instances) and it is "
               f"last because it starts late (begins {_fmt(float(late.mean()))} after the median lane on average): "
               "the skew comes from before this phase")
        ev = "last finisher's begin - median begin > its slice - median slice in most instances"
        return Verdict("late_start", p["phase"], msg, ev, impact, True, {**base, "cause": "late_start"})
    msg = (f"{label}: the last finisher moves ({p['distinct_last_blocks']} blocks in {n} instances; the most "
           f"frequent, block {top}, in {count}) and no lane is long (its slice is {_fmt(float(work.mean()))} over "
           f"the median on average) yet the ends spread over {_fmt(p['mean_end_skew_ns'])}: contention or "
           "synchronization")
    ev = "no long lane and no late start in most instances; the last block changes"
    return Verdict("moving_last_finisher", p["phase"], msg, ev, impact, True, base)


def _skew(ctx, p, inst, on_path) -> Verdict | None:
    th, eps = ctx.th, ctx.eps
    n = p["instances"]
    mean_wall = p["sum_wall_ns"] / n if n else 0.0
    excess = p["mean_excess_ns"]
    if not mean_wall or excess < eps or excess / mean_wall <= th.excess_fraction:
        return None
    skew = p["mean_start_skew_ns"]
    late = np.minimum(inst.excess_ns, np.maximum(inst.last_begin_ns - inst.begin_ns, 0))
    impact = float(late[on_path].sum())
    with_prev = inst.prev_lanes > 0
    spread = (inst.lead_in_max_ns - inst.lead_in_min_ns)[with_prev]
    figs = {"mean_excess_ns": excess, "mean_wall_ns": mean_wall, "excess_fraction": excess / mean_wall,
            "mean_start_skew_ns": skew, "mean_end_skew_ns": p["mean_end_skew_ns"], "max_excess_ns": p["max_excess_ns"],
            "sync_instances": p["sync_instances"], "wave_instances": p["wave_instances"], "tick_ns": ctx.tick}
    label, warn = ctx.label(p), True
    head = f"{label}: wall time exceeds the slowest lane's time by {_fmt(excess)} per instance ({excess / mean_wall:.0%})"
    if p["wave_instances"]:
        cause, impact, warn = "waves", 0.0, False
        msg = (f"{head}: its lanes ran in waves (blocks of later waves began after another block on their SM had "
               f"finished), so begins spread over {_fmt(skew)}; not a synchronization: see the tail finding")
        ev = f"{p['wave_instances']} of {n} instances hold blocks of a later wave"
    elif not _aligned(p):
        cause, impact, warn = "unaligned", 0.0, False
        msg = (f"{head}: instances do not line up across lanes (a work list?), so the skew compares unrelated "
               "work items; judge balance by per-lane totals")
        ev = f"lanes ran {p['min_lane_instances']} to {p['max_lane_instances']} instances"
    elif p["sync_instances"] * 2 >= max(int(with_prev.sum()), 1) and with_prev.any():
        cause = "sync_release"
        msg = (f"{head}: a slow release after the synchronization before it: every lane waits for the previous "
               f"phase's last finisher, then begins up to {_fmt(skew)} apart")
        ev = (f"in {p['sync_instances']} of {n} instances every lane began after the previous instance's last end; "
              f"lead-in spread {_fmt(float(spread.mean()) if len(spread) else 0)}")
    elif _carried(p, inst):  # the sync_release branch above has already been ruled out
        cause, impact, warn = "carried_over", 0.0, False
        msg = (f"{head}: lanes begin right after their own previous slice, so the start skew ({_fmt(skew)}) is "
               "carried over from the previous phase's ends; its cause is upstream")
        ev = (f"no synchronization evidenced; lead-in spread {_fmt(float(spread.mean()))} <= half the start skew "
              f"{_fmt(skew)}")
    elif p["depth"] > 0:
        cause, impact, warn = "nested", 0.0, False
        msg = (f"{head}: a nested phase: its begins follow its parent slices' ({_fmt(skew)} apart); judge the skew "
               "on the top-level phase")
        ev = f"depth {p['depth']}: inside another phase on every lane"
    elif not with_prev.any():
        cause = "launch"
        msg = f"{head}: the lanes' first phase begins spread over {_fmt(skew)}: blocks start at different times"
        ev = "no lane ran anything before this phase"
    else:
        cause = "unexplained"
        msg = (f"{head}: begins spread over {_fmt(skew)} with no synchronization evidenced and uneven gaps before "
               "the phase")
        ev = f"lead-in spread {_fmt(float(spread.mean()))}"
    figs["cause"] = cause
    return Verdict("start_skew", p["phase"], msg, ev, impact, warn, figs)


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
    impact = ctx.path_total(p["phase"]) * p["idle_lanes"] / total
    names = ", ".join(f"block {b}" + (f" group {g}" if ctx.several_groups else "") for b, g in idle[:8])
    more = f" and {len(idle) - 8} more" if len(idle) > 8 else ""
    msg = (f"{ctx.label(p)}: {p['idle_lanes']} of {total} lanes never ran this phase ({names}{more}): capacity "
           "left idle while the others work; give them a share")
    ev = "lanes of the phase's warp groups with slices of other phases and none of this one"
    return Verdict("idle_lanes", p["phase"], msg, ev, impact, True,
                   {"idle_lanes": p["idle_lanes"], "lanes": p["lanes"], "idle": [list(x) for x in idle[:64]]})
