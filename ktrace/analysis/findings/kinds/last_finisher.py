"""Who finishes each phase instance last, and why: a stable straggler (by its work, or behind by lag it
carries), a straggler that changes, a rotating imbalance, a late start (a delay of the lane's own begin), or a
last finisher that moves with no long lane (contention): one detector whose outcome is one of five kinds (its
figures' class says which; each kind's ``detect`` takes its own through ``of_kind``). Rules: verdicts.py's
docstring and docs/analysis-schema.md."""

from __future__ import annotations

import math

import numpy as np

from ...evidence.keyed import run_starts
from ..verdict import Verdict, fmt as _fmt, signed, num as _num
from .last_finisher_figures import (LateStartFigures, MovingFigures, RotatingFigures, StragglerChangeFigures,
                                    StragglerFigures)
from ..phase_shape import carried

__all__ = ["last_finisher", "of_kind"]


def of_kind(ctx, scope, name: str, figures: type) -> list[Verdict]:
    """The phase's last-finisher verdict where it is of kind ``name`` (its figures a ``figures``): one detector for
    five kinds, run once per phase (``ctx.memo``), each kind's ``detect`` taking its own outcome. Its cause: the
    block it names, else the phase's long lanes."""
    if scope.phase is None or not scope.lined_up:
        return []
    key = ("last_finisher", scope.phase["phase"])
    if key not in ctx.memo:
        v = last_finisher(ctx, scope.phase, scope.inst, scope.on_path)
        if v is not None:
            v.cause = v.cause or f"long lanes of {scope.phase['phase']}"
        ctx.memo[key] = v
    v = ctx.memo[key]
    if v is None or type(v.figures) is not figures:
        return []
    v.kind = name
    return [v]


def _runs(seq: np.ndarray, min_len: int = 1):
    """Runs of equal values at least min_len long: (value, first index, last index). The short ones are left
    out before any becomes a tuple (an instance a run at 1e8 records: 0.24 s of Python)."""
    if not len(seq):
        return []
    cut = np.r_[run_starts(seq), len(seq)]
    first, end = cut[:-1], cut[1:]
    keep = end - first >= min_len
    first, end = first[keep], end[keep]
    return list(zip(seq[first].tolist(), first.tolist(), (end - 1).tolist()))


def _own_delay(ctx, p, late: np.ndarray) -> np.ndarray:
    """Per instance: the last finisher's late begin is its own (the gap before it on its lane is longer than
    the lanes' median gap by most of the lateness, or nothing ran before it on its lane), not lag carried from
    its own earlier slices."""
    li = ctx.fig.lead_ins.where(ctx.fig.instances.phase == p["phase"])
    last, med = li.last_lead_in_ns, np.nan_to_num(li.median_lead_in_ns)
    own = last - med
    return np.isnan(last) | ((own >= ctx.eps) & (own * 2 >= late))


def last_finisher(ctx, p, inst, on_path) -> Verdict | None:
    th, eps = ctx.th, ctx.eps
    n = len(inst)
    if n < 1 or _num(p["mean_last_lead_ns"]) < eps or p["wave_instances"]:
        return None
    lead = np.nan_to_num(inst.last_lead_ns)
    claims = ctx.claim_slices(p["phase"], inst.k, lead)
    impact = float(claims.sum())
    work = (inst.last_dur_ns - inst.p50_dur_ns).astype(np.float64)
    late = (inst.last_begin_ns - inst.p50_begin_ns).astype(np.float64)
    long_ = (work >= eps) & (inst.last_dur_ns > th.imbalance * inst.mean_dur_ns)
    behind = (late >= eps) & (late > work)
    own = _own_delay(ctx, p, late)
    late_ = behind & own  # late because something delayed its own begin
    lag_ = behind & ~own  # behind because of its own earlier slices (carried lag)
    seq = inst.last_block
    base = {"instances": n, "top_last_block": p["top_last_block"], "top_last_count": p["top_last_count"],
            "distinct_last_blocks": p["distinct_last_blocks"], "tied_instances": p["tied_instances"],
            "mean_last_lead_ns": p["mean_last_lead_ns"], "mean_work_excess_ns": float(work.mean()),
            "mean_late_start_ns": float(late.mean()), "long_instances": int(long_.sum()),
            "late_instances": int(late_.sum()), "lagging_instances": int(lag_.sum()), "tick_ns": ctx.tick}
    label, top, count = ctx.label(p), p["top_last_block"], p["top_last_count"]
    lead_txt = f"ahead of the next lane by {_fmt(p['mean_last_lead_ns'])} on average"

    def late_verdict(msg, ev, block):
        # What a late start costs is the gap before its slice on the path (up to how late it began), not its
        # lead at the end, which it only carries.
        c = ctx.claim_before(p["phase"], inst.k, np.maximum(late, 0))
        return Verdict("", p["phase"], msg, ev, float(c.sum()), True, LateStartFigures(**base, block=block), c,
                       f"block {block}" if block is not None else None)


    if behind.mean() >= 0.5 and lag_.sum() >= late_.sum() and p["phase_index"] > 0 and carried(ctx, p, inst) \
            and not long_.mean() >= 0.5:
        return None  # behind because its earlier slices ended late: that phase's finding says why
    if n == 1:  # one instance: only a late start can be told apart (no stability to judge)
        if not late_[0]:
            return None
        msg = (f"{label}: block {top} finishes last because it starts late: it begins {_fmt(float(late[0]))} after the "
               f"median lane while its slice is {_near(float(work[0]))}; look at what delays its start, not its "
               "work")
        ev = (f"the last finisher begins {_fmt(float(late[0]))} after the median begin, more than its slice's "
              f"{signed(float(work[0]), 'over', 'under')} the median slice; nothing ran before it on its lane, or the "
              "gap before it is its own")
        return late_verdict(msg, ev, top)
    if count / n >= th.stable_fraction:
        m = seq == top
        w, lt = float(work[m].mean()), float(late[m].mean())
        if late_[m].mean() > 0.5:
            msg = (f"{label}: block {top} is the last finisher in {count} of {n} instances because it starts late: "
                   f"it begins {_fmt(lt)} after the median lane while its slice is {_near(w)}; look at what delays its "
                   f"start (the gap before it on its own lane), not its work")
            ev = (f"the last finisher begins {_fmt(lt)} after the median begin, more than its slice's "
                  f"{signed(w, 'over', 'under')} the median slice, and the gap before it on its lane exceeds the lanes' "
                  "median gap by most of that")
            return late_verdict(msg, ev, top)
        if lag_[m].mean() > 0.5:
            cause = "lag"
            advice = ("it is behind by its own earlier slices, not a late start: fix its share of the work "
                      "(its slices of the other phases too)")
        else:
            cause = ("work" if long_[m].mean() > 0.5 else "both" if lt >= eps and w >= eps else
                     "work" if w >= eps else "small")
            advice = ("fix its share of the work" if cause == "work" else
                      "it both starts late and works longer" if cause == "both" else
                      "neither its work nor its start stands out; the margin is small")
        msg = f"{label}: block {top} is the last finisher in {count} of {n} instances, {lead_txt}: a stable straggler; {advice}"
        ev = (f"same block last in {count}/{n} instances (ties count as that block); on average its slice is "
              f"{signed(w, 'longer', 'shorter')} than the median and it begins {signed(lt, 'after', 'before')} the "
              "median begin")
        return Verdict("", p["phase"], msg, ev, impact, cause != "small",
                       StragglerFigures(**base, block=top, cause=cause), claims, f"block {top}")
    min_run = max(2, math.ceil(0.1 * n))
    runs = _runs(seq, min_run)
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
        return Verdict("", p["phase"], msg, ev, impact, True, StragglerChangeFigures(**base, segments=segs),
                       claims)
    if long_.mean() >= th.stable_fraction:
        msg = (f"{label}: rotating imbalance: in {int(long_.sum())} of {n} instances one lane is long (the last "
               f"finisher's slice exceeds the median by {_fmt(float(work.mean()))} on average) and it is a "
               f"different lane each time ({p['distinct_last_blocks']} blocks); the cost is in the work assignment, "
               "not contention: balance the work of each iteration")
        ev = "last finisher's slice > imbalance threshold x the mean in most instances; no block is last for long"
        return Verdict("", p["phase"], msg, ev, impact, True, RotatingFigures(**base), claims)
    if late_.mean() >= 0.5:
        msg = (f"{label}: the last finisher moves ({p['distinct_last_blocks']} blocks in {n} instances) and it is "
               f"last because it starts late (begins {_fmt(float(late.mean()))} after the median lane on average, "
               "after a gap of its own on its lane)")
        ev = "last finisher's begin - median begin > its slice - median slice in most instances, by its own gap"
        return late_verdict(msg, ev, None)
    msg = (f"{label}: the last finisher moves ({p['distinct_last_blocks']} blocks in {n} instances; the most "
           f"frequent, block {top}, in {count}) and no lane is long (its slice is "
           f"{signed(float(work.mean()), 'over', 'under')} the median on average) yet the ends spread over {_fmt(p['mean_end_skew_ns'])}: contention or "
           "synchronization")
    ev = "no long lane and no late start in most instances; the last block changes"
    return Verdict("", p["phase"], msg, ev, impact, True, MovingFigures(**base), claims)




def _near(work_ns: float) -> str:
    """How the late starter's slice compares with the median slice: 'no longer than the median' or 'within X of it'."""
    return "no longer than the median" if work_ns <= 0 else f"within {_fmt(work_ns)} of the median"
