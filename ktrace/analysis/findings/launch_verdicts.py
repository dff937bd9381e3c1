"""The launch-level verdicts: waits by what they waited for (a barrier, a cluster, another warp group, the
lane's own untimed work), the pipeline between warp groups, the lanes' totals on a work list, the tail, a
partial last wave, and the critical path's largest part (rules: verdicts.py's docstring and
docs/analysis-schema.md)."""

from __future__ import annotations

import numpy as np

from .verdict import Verdict, fmt as _fmt, num as _num
from .phase_shape import dominant, lined_up
from .timed_waits import timed_wait_pipeline
from ..evidence.waits import HANDOFF_TICKS

__all__ = ["launch_verdicts"]


def launch_verdicts(ctx) -> list:
    """The launch-level verdicts for ``ctx`` (a verdicts.Context)."""
    out = _waits(ctx) + (_pipeline(ctx) or timed_wait_pipeline(ctx))
    out += [v for v in (_late_lane(ctx), _lane_totals(ctx), _quantization(ctx), _tail(ctx), _critical(ctx)) if v]
    return out


def _lane_time(ctx) -> float:
    k = ctx.fig.kernel
    return float((k.lanes or 0) * (k.wall_ns or 0))


def _waits(ctx) -> list[Verdict]:
    fig, th, wc = ctx.fig, ctx.th, ctx.wc
    lane_time = _lane_time(ctx)
    if not len(wc) or not lane_time:
        return []
    phases = {fig.phases.phase[i]: fig.phases.row(i) for i in range(len(fig.phases))}
    out = []
    for i in np.argsort(-wc.sum_ns, kind="stable").tolist():
        r = wc.row(i)
        frac = r["sum_ns"] / lane_time
        if r["cause"] in ("none", "group") or frac <= th.wait_fraction or r["mean_ns"] < ctx.eps:
            continue
        before = phases.get(r["phase"])
        label = ctx.label(before) if before else r["phase"]
        grp = f" (group {r['group']})" if ctx.several_groups else ""
        where = f"{label} -> {r['next_phase']}{grp}"
        claims = ctx.claim_gaps(r["phase"], r["next_phase"], r["group"])
        sizes = (f"{r['count']} gaps, {_fmt(r['mean_ns'])} on average (median {_fmt(r['p50_ns'])}, longest "
                 f"{_fmt(r['max_ns'])}), {frac:.0%} of all lanes' time")
        figs = {"next_phase": r["next_phase"], "group": r["group"], "count": r["count"], "sum_ns": r["sum_ns"],
                "mean_ns": r["mean_ns"], "p50_ns": r["p50_ns"], "max_ns": r["max_ns"], "waited_for": r["cause"],
                "synced_instances": r["synced_instances"], "tested_instances": r["instances"],
                "follow_slope": r["follow_slope"], "lane_time_fraction": frac, "tick_ns": ctx.tick}
        cause_key, block = None, r["waited_block"]
        stable = (block is not None and r["waiting_gaps"] and r["waited_block_count"] >= th.stable_fraction * r["waiting_gaps"]
                  and _systematic(ctx, before, block))
        if r["cause"] == "own":
            kind = "untimed_work"
            msg = (f"{where}: {_fmt(r['mean_ns'])} of untimed work inside each lane between the two phases "
                   f"({sizes}): no other lane's end releases these gaps, and they repeat on each lane within "
                   f"{_fmt(r['own_spread_ns'])}; it is work the probes do not cover (or a wait they do not show): "
                   "put a probe around it, or count it in the phase it belongs to")
            ev = (f"not a barrier (in {r['instances'] - r['synced_instances']} of {r['instances']} instances a lane "
                  f"began before the last one ended, or the begins follow each lane's own end: slope "
                  f"{_num(r['follow_slope'], float('nan')):.2f}); not another warp group; gaps regular per lane")
        elif r["cause"] == "grid":
            kind = "large_wait"
            # The barrier's own cost is its release (the last end to the next begins: its median over the lanes);
            # a longer gap on the path is something else the lane did before it began.
            claims = np.minimum(claims, _num(r["release_p50_ns"], 0.0) + 2 * ctx.tick)
            who = (f"{r['phase']}'s last finisher, block {block} in {r['waited_block_count']} of {r['waiting_gaps']} "
                   "waiting gaps" if stable else f"{r['phase']}'s last finisher, a different block from instance to instance")
            msg = (f"{where}: lanes wait at a grid-wide barrier ({sizes}); they wait for {who}; the barrier's own "
                   f"release (from the last lane's end to the next begins) costs {_fmt(float(claims.sum()))} on the "
                   "critical path: fewer barriers, or a cheaper one")
            ev = (f"grid-wide: in {r['synced_instances']} of {r['instances']} instances no lane began {r['next_phase']} "
                  f"before the last lane ended {r['phase']}, and the begins follow that last end, not each lane's own "
                  f"(slope {_num(r['follow_slope']):.2f})")
        elif r["cause"] == "cluster":
            kind = "large_wait"
            c = r["cluster_size"]
            who = f"block {block}" if stable else "a different block each time"
            msg = (f"{where}: lanes wait for the other blocks of their cluster of {c} ({sizes}); the blocks that "
                   f"waited waited for {who}; not a grid-wide barrier: other clusters go on")
            ev = (f"in {r['waited_gaps']} of {r['waiting_gaps']} gaps where another block of the {c}-block subset "
                  f"(blocks {c}i..{c}i+{c - 1}) ended later, the lane began only after it; no grid-wide barrier "
                  f"({r['synced_instances']} of {r['instances']} instances)")
            figs["cluster_size"] = c
            cause_key = f"block {block}" if stable else None
        elif r["ambiguous"]:
            kind = "large_wait"
            msg = (f"{where}: lanes wait ({sizes}); no lane began {r['next_phase']} before the last lane ended "
                   f"{r['phase']} ({r['synced_instances']} of {r['instances']} instances), as after a grid-wide barrier, "
                   "but the begins follow each lane's own end as closely (the ends lie too few ticks apart, or every "
                   "gap is equal): a barrier or untimed work of the lanes, the trace cannot tell which")
            ev = "synchronized in most instances; the release cannot be told from each lane's own end"
        else:
            kind = "large_wait"
            msg = (f"{where}: lanes wait ({sizes}) and nothing in the trace shows what released them: not a "
                   f"grid-wide barrier ({r['synced_instances']} of {r['instances']} instances), not a cluster, not "
                   "another warp group of the block, not regular enough for untimed work of the lane")
            ev = "no release evidenced (docs/analysis-schema.md, what a wait waited for)"
        figs["waited_block"] = block if stable else None
        # the instance after which the longest of these waits began (what the annotated trace draws)
        w = fig.waits
        at = np.flatnonzero((w.phase == r["phase"]) & (w.next_phase == r["next_phase"])) if len(w) else []
        figs["max_k"] = int(w.max_k[at[0]]) if len(at) and w.max_k[at[0]] is not None else None
        if r["cause"] == "grid":
            cause_key = "grid barrier"  # every barrier's release is one cost: the barrier's own
        out.append(Verdict(kind, r["phase"], msg, ev, float(claims.sum()), True, figs, claims, cause_key))
        if len(out) >= th.top_waits:
            break
    return out


def _systematic(ctx, p: dict | None, block: int) -> bool:
    """The phase's last finisher is this block in most of at least 2 instances, ahead of the next lane by 2
    timer steps on average: a block the waits are on, not the one that happened to end last."""
    if p is None or p["top_last_block"] != block or p["instances"] < 2:
        return False
    return (p["top_last_count"] >= ctx.th.stable_fraction * p["instances"]
            and _num(p["mean_last_lead_ns"]) >= ctx.eps)


def _pipeline(ctx) -> list[Verdict]:
    """Waits released by another warp group of the block: which group bounds the block and how long the other
    idles, per boundary."""
    fig, wc = ctx.fig, ctx.wc
    m = wc.cause == "group"
    if not m.any():
        return []
    lt = fig.lane_totals
    out = []
    for i in np.flatnonzero(m).tolist():
        r = wc.row(i)
        g, h = r["group"], r["handoff_group"]
        if h is None:
            continue
        busy_g = lt.busy_ns[lt.group == g].astype(np.float64)
        busy_h = lt.busy_ns[lt.group == h].astype(np.float64)
        span_g = (lt.end_ns - lt.begin_ns)[lt.group == g].astype(np.float64)
        if not len(busy_g) or not len(busy_h):
            continue
        idle_share = float(1 - busy_g.sum() / max(span_g.sum(), 1.0))
        lane_time = _lane_time(ctx)
        frac = r["sum_ns"] / lane_time if lane_time else 0.0
        if frac <= ctx.th.wait_fraction or r["mean_ns"] < ctx.eps:
            continue
        gain = max(float(np.median(busy_h)) - float(np.median(busy_g)), 0.0)
        claims = ctx.claim_last(gain)
        gname = _group_name(fig, g)
        hname = _group_name(fig, h)
        msg = (f"pipeline: {hname} bounds the blocks: {gname} waits for it after {r['phase']} "
               f"({r['count']} gaps, {_fmt(r['mean_ns'])} on average, {frac:.0%} of all lanes' time; {gname} idles "
               f"{idle_share:.0%} of its span); per block {hname} is busy {_fmt(float(np.median(busy_h)))} and "
               f"{gname} {_fmt(float(np.median(busy_g)))} (medians): speed up the work of {hname} (or give {gname} "
               f"more of it); speeding up {gname} alone gains nothing")
        ev = (f"{r['handoff_gaps']} of {r['tested_gaps']} gaps after {r['phase']} end within {HANDOFF_TICKS} ticks of a slice end in "
              f"{hname} of the same block ({r['handoff_expected']:.0f} expected by chance); no grid-wide barrier")
        out.append(Verdict("pipeline", r["phase"], msg, ev, float(claims.sum()), idle_share >= 0.1, {
            "waiting_group": g, "bounding_group": h, "next_phase": r["next_phase"], "count": r["count"],
            "mean_ns": r["mean_ns"], "handoff_gaps": r["handoff_gaps"], "handoff_expected": r["handoff_expected"],
            "idle_share": idle_share, "median_busy_bounding_ns": float(np.median(busy_h)),
            "median_busy_waiting_ns": float(np.median(busy_g)), "tick_ns": ctx.tick}, claims, f"pipeline {h}"))
    return out


def _group_name(fig, g) -> str:
    names = fig.launch.get("group_names")
    if isinstance(names, str) and names:
        parts = names.split(",")
        if 0 <= g < len(parts) and parts[g]:
            return f"group {g} ({parts[g]})"
    return f"group {g}"


def _work_list(ctx) -> bool:
    """Some top-level phase's instances do not line up across lanes (counts or times): a work list."""

    fig = ctx.fig
    for i in range(len(fig.phases)):
        p = fig.phases.row(i)
        if p["depth"] == 0 and not lined_up(ctx, p, ctx.instances(p["phase"])):
            return True
    return False


def _lane_totals(ctx) -> Verdict | None:
    """On a work list, balance is each lane's total busy time over all phases, within each warp group."""
    fig, th = ctx.fig, ctx.th
    lt = fig.lane_totals
    k = fig.kernel
    if len(lt) < 2 or not k.wall_ns or not _work_list(ctx):
        return None
    best = None
    for g in np.unique(lt.group).tolist():
        m = lt.group == g
        tot = lt.busy_ns[m].astype(np.float64)
        if len(tot) < 2:
            continue
        mean = float(tot.mean())
        j = int(np.argmax(tot))
        if mean and tot[j] / mean > th.imbalance and tot[j] - mean >= ctx.eps:
            if best is None or tot[j] - mean > best[1] - best[2]:
                best = (g, float(tot[j]), mean, np.flatnonzero(m), tot)
    if best is None:
        return None
    g, top, mean, rows, tot = best
    end_row = int(np.lexsort((lt.lane, -lt.end_ns))[0])
    ender = lt.row(end_row)
    # A block stands out, not a lane: the lanes of one busy block (its warps) are one cause.
    blocks = lt.block[rows]
    ub = np.unique(blocks)
    per_block = np.full(len(ub), -np.inf)
    np.maximum.at(per_block, np.searchsorted(ub, blocks), tot)
    j = dominant(per_block, ctx.eps)
    busiest = lt.row(int(rows[int(np.argmax(tot))]))
    lanes = fig.lanes
    mine = lanes.lane == busiest["lane"]
    parts = sorted(zip(lanes.sum_dur_ns[mine].tolist(), lanes.phase[mine].tolist()), reverse=True)
    share = ", ".join(f"{ph} {_fmt(float(d))} ({d / max(top, 1):.0%})" for d, ph in parts[:4])
    gain = top - mean
    claims = ctx.claim_last(gain)
    label = f" of group {g}" if ctx.several_groups else ""
    if j is not None:
        who = ctx.who(busiest["block"], busiest["group"])
        ends = ("and it ends the kernel" if ender["lane"] == busiest["lane"] else
                f"(the kernel's last lane is {ctx.who(ender['block'], ender['group'])}, busy "
                f"{_fmt(float(ender['busy_ns']))})")
        msg = (f"lane totals: the lanes{label} take unequal work: {who} is busy {_fmt(top)} over all phases against "
               f"a mean of {_fmt(mean)} ({top / mean:.2f}x) {ends}; its time: {share}; hand out work so the lanes' "
               "totals even out (heavy items first, or split them)")
        cause = f"block {busiest['block']}"
    else:
        cause = "lanes"
        order = np.argsort(-tot, kind="stable")[:4]
        names = ", ".join(f"{ctx.who(int(lt.block[rows[t]]), int(lt.group[rows[t]]))} {_fmt(float(tot[t]))}"
                          for t in order.tolist())
        msg = (f"lane totals: the lanes{label} take unequal work: the busiest lanes ({names}) against a mean of "
               f"{_fmt(mean)} ({top / mean:.2f}x); no single lane stands out; hand out work so the lanes' totals even "
               "out (heavy items first, or split them)")
    ev = (f"per-lane busy time (top-level slices, all phases) of {len(tot)} lanes; the phases' instances do not line "
          f"up across lanes (counts or times), so per-instance figures compare unrelated items")
    if j is not None:
        for w in _cluster_waits_on(ctx, busiest["block"]):
            msg += (f"; the other blocks of its cluster of {w['cluster_size']} wait for it after {w['phase']} "
                    f"({w['waited_block_count']} gaps)")
            ev += f"; cluster waits evidenced at {w['phase']} -> {w['next_phase']}"
    return Verdict("load_imbalance", None, msg, ev, float(claims.sum()), True, {
        "basis": "lane_totals", "group": g, "imbalance": top / mean, "max_lane_total_ns": top,
        "mean_lane_total_ns": mean, "busiest_block": busiest["block"] if j is not None else None,
        "busiest_group": busiest["group"], "kernel_end_block": ender["block"], "tick_ns": ctx.tick},
        claims, cause)


def _late_lane(ctx) -> Verdict | None:
    """The lane that ends the kernel began late and its work is not long: a late start, whatever its phases'
    instances did after it (they only carry the lag)."""
    fig, th = ctx.fig, ctx.th
    lt = fig.lane_totals
    k = fig.kernel
    if len(lt) < 2 or not k.wall_ns:
        return None
    row = int(np.lexsort((lt.lane, -lt.end_ns))[0])
    g = lt.group[row]
    m = lt.group == g
    late = float(lt.begin_ns[row] - np.median(lt.begin_ns[m]))
    behind = float(lt.end_ns[row] - np.median(lt.end_ns[m]))
    busy_ok = lt.busy_ns[row] <= th.imbalance * float(np.median(lt.busy_ns[m]))
    if late < ctx.eps or behind < ctx.eps or late * 2 < behind or not busy_ok:
        return None
    ws = ctx.slots.get("waves", 1.0) if ctx.slots else 1.0
    if ws > 1.05:
        return None  # a block of a later wave begins late by design: the tail and waves findings speak
    if _idle_before_barrier(ctx, int(lt.lane[row]), float(lt.begin_ns[row])):
        return None  # nothing to do before a barrier: idle (the idle lanes finding), not late
    b = int(lt.block[row])
    claims = ctx.claim_window(float(k.begin_ns), float(k.begin_ns) + late)
    first = fig.lanes.phase[fig.lanes.lane == lt.lane[row]]
    phase = str(first[0]) if len(first) else None
    msg = (f"{ctx.who(b, int(g))} ends the kernel because it starts late: its first slice begins {_fmt(late)} after "
           f"the median lane's, while its work ({_fmt(float(lt.busy_ns[row]))} busy) is within "
           f"{th.imbalance:.2f}x of the median; it ends {_fmt(behind)} after the median lane; look at what delays its "
           "start (its launch, its SM, work before its first probe), not its work")
    ev = "per-lane first begin, last end and busy time (all phases); one wave in slots"
    return Verdict("late_start", phase, msg, ev, float(claims.sum()), True, {
        "block": b, "group": int(g), "late_ns": late, "behind_ns": behind, "busy_ns": int(lt.busy_ns[row]),
        "cause": "late_start", "basis": "lane", "tick_ns": ctx.tick}, claims, f"block {b}")


def _idle_before_barrier(ctx, lane: int, begin: float) -> bool:
    """The lane's first slice begins after the end of a phase instance that half the lanes or more ran and it
    never did: it waited at a barrier with nothing to do before it (replay.py releases it there)."""
    fig = ctx.fig
    ran = set(fig.lanes.phase[fig.lanes.lane == lane].tolist())
    inst = fig.instances
    other = np.array([p not in ran for p in inst.phase.tolist()], bool)
    big = inst.lanes * 2 >= (fig.kernel.lanes or 0)
    return bool((other & big & (inst.end_ns <= begin)).any())


def _cluster_waits_on(ctx, block: int) -> list[dict]:
    """The boundaries at which other blocks of ``block``'s cluster wait for it (WaitCauses rows)."""
    wc = ctx.wc
    rows = np.flatnonzero((wc.cause == "cluster") & (np.nan_to_num(wc.waited_block.astype(np.float64), nan=-1) == block))
    return [wc.row(i) for i in rows.tolist()]


def _cluster_of(ctx, block: int) -> int | None:
    """The block that ``block``'s cluster waits for, when a cluster boundary evidences one."""
    wc = ctx.wc
    for i in np.flatnonzero(wc.cause == "cluster").tolist():
        r = wc.row(i)
        if r["waited_block"] is not None and r["cluster_size"] and \
                r["waited_block"] // r["cluster_size"] == block // r["cluster_size"]:
            return int(r["waited_block"])
    return None


def _quantization(ctx) -> Verdict | None:
    s = ctx.slots
    if not s or not s["uniform_blocks"] or s["quantization_ns"] < ctx.eps:
        return None
    q = s["quantization_ns"]
    claims = ctx.claim_last(q)
    wall = float(ctx.fig.kernel.wall_ns or 0)
    msg = (f"waves: {s['blocks']} blocks of about equal length fill {s['slots']} slots ({s['sms']} SMs x "
           f"{s['resident_per_sm']} resident per SM) {s['waves']:.2f} times: the last wave fills "
           f"{s['last_wave_fill']:.0%} of the slots, so the wall holds {int(np.ceil(s['waves']))} block times where "
           f"{s['waves']:.2f} would do ({_fmt(q)}, {q / wall:.0%} of the wall); make the grid a multiple of the "
           f"{s['slots']} slots, or use a persistent scheduler over the work")
    ev = (f"resident blocks per SM measured from the timeline (most blocks one SM ran at once: {s['resident_per_sm']} "
          f"on most SMs); median block {_fmt(s['median_block_dur_ns'])}, p90 {_fmt(s['p90_block_dur_ns'])}; slots busy "
          f"{s['slot_busy_fraction']:.0%} of the wall")
    return Verdict("wave_quantization", None, msg, ev, float(claims.sum()), True, dict(s), claims, "waves")


def _tail(ctx) -> Verdict | None:
    fig = ctx.fig
    if not len(fig.occupancy):
        return None
    o = fig.occupancy.row(0)
    sms, tail, wall = o["sms"], o["tail_ns"], fig.kernel.wall_ns or 0
    if not sms or not tail or not wall:
        return None
    in_tail = _num(o["busy_sms_in_tail"])
    share = 1.0 - in_tail / sms
    claims = ctx.claim_window(float(fig.kernel.end_ns) - tail, float(fig.kernel.end_ns), share)
    impact = float(claims.sum())
    if impact < ctx.eps:
        return None
    rel = o["last_block_begin_ns"] - fig.kernel.begin_ns
    s = ctx.slots
    waves = _num(s.get("waves") if s else o["waves"], 1.0)
    heavy = o["last_block_dur_ns"] > 1.5 * max(o["median_block_dur_ns"], 1)
    if waves > 1.05 and heavy:
        advice, cause = ("schedule the heavy blocks first, split heavy blocks, or use a persistent scheduler",
                         "heavy blocks")
    elif waves > 1.05:
        advice, cause = "a partial last wave of equal blocks: see the waves finding", "waves"
    else:
        advice, cause = "the blocks that finish last hold it: the phase findings say why", f"block {o['last_block']}"
        partner = _cluster_of(ctx, int(o["last_block"]))
        if partner is not None and partner != o["last_block"]:
            advice = f"it waits for block {partner} of its cluster: that block's finding says why"
            cause = f"block {partner}"
    msg = (f"tail: the last {_fmt(tail)} ({tail / wall:.0%} of the wall) run with fewer than half the SMs busy "
           f"({in_tail:.1f} of {sms} on average); {waves:.2f} waves in slots ({o['blocks']} blocks, "
           f"{s.get('slots', o['max_resident']) if s else o['max_resident']} slots, {s.get('resident_per_sm', o['blocks_per_sm_max']) if s else o['blocks_per_sm_max']} per SM); "
           f"block {o['last_block']} ends the kernel: it began at +{_fmt(rel)} and ran {_fmt(o['last_block_dur_ns'])} "
           f"against a median block of {_fmt(o['median_block_dur_ns'])}; {advice}")
    ev = "busy SMs over time from each block's first and last record and its SM"
    return Verdict("tail", None, msg, ev, impact, impact >= ctx.th.tail_share * wall, {
        "last_block": o["last_block"], "last_block_begin_ns": rel, "last_block_dur_ns": o["last_block_dur_ns"],
        "median_block_dur_ns": o["median_block_dur_ns"], "tail_ns": tail, "busy_sms_in_tail": in_tail, "sms": sms,
        "waves": waves}, claims, cause)


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
