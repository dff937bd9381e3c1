"""The launch-level verdicts: large waits at phase boundaries, the tail, and the critical path's largest part
(impact rules: verdicts.py's docstring and docs/analysis-schema.md)."""

from __future__ import annotations

import numpy as np

from ._verdict import Verdict, fmt as _fmt, num as _num

__all__ = ["launch_verdicts"]


def launch_verdicts(ctx) -> list:
    """The wait, tail and critical-path verdicts for ``ctx`` (a verdicts.Context)."""
    return _waits(ctx) + [v for v in (_tail(ctx), _critical(ctx)) if v]


def _waits(ctx) -> list[Verdict]:
    fig, th = ctx.fig, ctx.th
    w, k = fig.waits, fig.kernel
    lane_time = (k.lanes or 0) * (k.wall_ns or 0)
    if not len(w) or not lane_time:
        return []
    phases = {fig.phases.phase[i]: fig.phases.row(i) for i in range(len(fig.phases))}
    cp = ctx.cp
    out = []
    for i in np.argsort(-w.sum_ns, kind="stable").tolist():
        r = w.row(i)
        frac = r["sum_ns"] / lane_time
        if frac <= th.wait_fraction or r["mean_ns"] < ctx.eps:
            continue
        m = (cp.kind == "wait") & (cp.phase == r["phase"]) & (cp.next_phase == r["next_phase"])
        impact = float(cp.dur_ns[m].sum())
        before = phases.get(r["phase"])
        waits_for = ""
        if before and before["top_last_count"] / max(before["instances"], 1) >= th.stable_fraction:
            waits_for = f"; they wait for {r['phase']}'s last finisher, block {before['top_last_block']}"
        label = ctx.label(before) if before else r["phase"]
        msg = (f"{label} -> {r['next_phase']}: lanes wait {_fmt(r['mean_ns'])} on average (p90 {_fmt(r['p90_ns'])}, "
               f"longest {_fmt(r['max_ns'])} on block {r['max_block']} at k={r['max_k']}), {frac:.0%} of all lanes' "
               f"time{waits_for}; the release itself costs {_fmt(impact)} on the critical path")
        ev = f"{r['count']} gaps between top-level slices at this boundary; {int(m.sum())} on the critical path"
        out.append(Verdict("large_wait", r["phase"], msg, ev, impact, True, {
            "next_phase": r["next_phase"], "count": r["count"], "sum_ns": r["sum_ns"], "mean_ns": r["mean_ns"],
            "p90_ns": r["p90_ns"], "max_ns": r["max_ns"], "max_block": r["max_block"], "max_group": r["max_group"],
            "max_k": r["max_k"], "lane_time_fraction": frac, "tick_ns": ctx.tick}))
        if len(out) >= th.top_waits:
            break
    return out


def _tail(ctx) -> Verdict | None:
    fig = ctx.fig
    if not len(fig.occupancy):
        return None
    o = fig.occupancy.row(0)
    sms, tail, wall = o["sms"], o["tail_ns"], fig.kernel.wall_ns or 0
    if not sms or not tail or not wall:
        return None
    in_tail = _num(o["busy_sms_in_tail"])
    impact = tail * (1.0 - in_tail / sms)
    if impact < ctx.eps:
        return None
    rel = o["last_block_begin_ns"] - fig.kernel.begin_ns
    waves = _num(o["waves"], 1.0)
    if waves > 1.05:
        advice = "schedule the heavy blocks first, split heavy blocks, or use a persistent scheduler"
    else:
        advice = "the blocks that finish last hold it: the phase findings say why"
    msg = (f"tail: the last {_fmt(tail)} ({tail / wall:.0%} of the wall) run with fewer than half the SMs busy "
           f"({in_tail:.1f} of {sms} on average); {waves:.2f} waves ({o['blocks']} blocks, at most "
           f"{o['max_resident']} resident, up to {o['blocks_per_sm_max']} per SM); block {o['last_block']} ends the "
           f"kernel: it began at +{_fmt(rel)} and ran {_fmt(o['last_block_dur_ns'])} against a median block of "
           f"{_fmt(o['median_block_dur_ns'])}; {advice}")
    ev = "busy SMs over time from each block's first and last record and its SM"
    return Verdict("tail", None, msg, ev, impact, impact >= ctx.th.tail_share * wall, {
        "last_block": o["last_block"], "last_block_begin_ns": rel, "last_block_dur_ns": o["last_block_dur_ns"],
        "median_block_dur_ns": o["median_block_dur_ns"], "tail_ns": tail, "busy_sms_in_tail": in_tail, "sms": sms,
        "waves": waves})


def _critical(ctx) -> Verdict | None:
    fig = ctx.fig
    c = fig.critical_shares
    if not len(c) or not fig.kernel.wall_ns:
        return None
    i = int(np.argmax(c.total_ns))
    r = c.row(i)
    name = r["phase"] if r["part"] == "phase" else {"lead_in": "the lead-in before the path's first slice",
                                                    "lane_gap": "gaps on the path's lanes",
                                                    "block_switch": "waiting for an SM slot"}[r["part"]]
    verb = "dominates" if r["share"] >= ctx.th.dominant_share else "is the largest part of"
    parts = ", ".join(f"{(x['phase'] or x['part'])} {x['share']:.0%}" for x in c.rows())
    msg = (f"{name} {verb} the critical path: {r['share']:.0%} of the kernel's wall time {_fmt(fig.kernel.wall_ns)} "
           f"(parts: {parts})")
    ev = "a backward walk from the kernel's last end through what each slice waited for; parts tile the wall"
    return Verdict("critical_path", r["phase"], msg, ev, float(r["total_ns"]), False, {
        "share": r["share"], "part": r["part"], "dur_ns": r["dur_ns"], "wait_ns": r["wait_ns"],
        "total_ns": r["total_ns"], "wall_ns": fig.kernel.wall_ns,
        "coverage": c.coverage(fig.kernel.wall_ns)})
