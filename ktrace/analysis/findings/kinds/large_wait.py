"""large_wait: lanes wait between two phases, by what released them (a grid-wide barrier, their cluster, or
nothing the trace shows)."""

from __future__ import annotations

import numpy as np

from ..verdict import Verdict, fmt as _fmt, num as _num
from . import untimed_work
from ...replay.change import Change
from .base import Kind, fixed_rank, no_roles, ok, stake_checks
from .wait_figures import WaitFigures
from ...model.barrier import tight_release_ns

NAME = "large_wait"


def short(v) -> str:
    g = v.figures
    return f"{v.phase} -> {g['next_phase']}: the others wait {_fmt(g['mean_ns'])} on average"


def headline(f, v):
    g = f.figures
    share = g.get("lane_time_fraction")
    share = f", {share:.0%} of the {v.unit}s' time" if ok(share) else ""
    mean, block = _fmt(g["mean_ns"]), g.get("waited_block")
    if g.get("waited_for") == "grid":
        whom = f", for block {block}" if ok(block) else share
        fix = (f"; find why block {block} begins late (its {f.phase} work is a median block's)"
               if g.get("waited_block_late") else f"; shorten block {block}'s {f.phase} work")
        return (f"every {v.unit} waits {mean} on average at the grid-wide barrier after {f.phase}{whom}",
                "use fewer barriers, or a cheaper one" + (fix if ok(block) else ""))
    if g.get("waited_for") == "cluster":
        whom = f" (for block {block})" if ok(block) else ""
        return (f"blocks wait for their cluster of {g.get('cluster_size', '?')} after {f.phase}{whom}: {mean} on "
                f"average{share}", "even out the work within each cluster")
    return (f"{v.unit}s wait after {f.phase} ({mean} on average{share}) and the trace does not show for what",
            "add a probe where they wait to see what releases them")


def span(f, fig, mine):
    """The instance after which the longest wait began, to that wait's end."""
    g, inst = f.figures, fig.instances
    if g.get("max_k") is None:
        return None
    at = mine & (inst.k == g["max_k"])
    if not at.any():
        return None
    i = int(at.nonzero()[0][0])
    return int(inst.begin_ns[i]), int(inst.end_ns[i]) + int(g.get("max_ns") or 0)


# -- what it detects ---------------------------------------------------------------------------------

def _detect(ctx) -> list[Verdict]:
    fig, th, wc = ctx.fig, ctx.th, ctx.wc
    lane_time = ctx.lane_time()
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
            kind = untimed_work.NAME
            msg = (f"{where}: {_fmt(r['mean_ns'])} of untimed work inside each lane between the two phases "
                   f"({sizes}): no other lane's end releases these gaps, and they repeat on each lane within "
                   f"{_fmt(r['own_spread_ns'])}; it is work the probes do not cover (or a wait they do not show): "
                   "put a probe around it, or count it in the phase it belongs to")
            ev = (f"not a barrier (in {r['instances'] - r['synced_instances']} of {r['instances']} instances a lane "
                  f"began before the last one ended, or the begins follow each lane's own end: slope "
                  f"{_num(r['follow_slope'], float('nan')):.2f}); not another warp group; gaps regular per lane")
        elif r["cause"] == "grid":
            kind = NAME
            # The barrier's own cost is its release (the last end to the next begins: its median over the lanes)
            # beyond the tightest grid barrier's on this GPU (model/barrier.py): what a cheaper barrier can save;
            # a longer gap on the path is something else the lane did before it began.
            floor = tight_release_ns(getattr(fig, "launch", None)) or 0.0
            claims = np.maximum(np.minimum(claims, _num(r["release_p50_ns"], 0.0) + 2 * ctx.tick) - floor, 0.0)
            who = (f"{r['phase']}'s last finisher, block {block} in {r['waited_block_count']} of {r['waiting_gaps']} "
                   "waiting gaps" if stable else f"{r['phase']}'s last finisher, a different block from instance to instance")
            msg = (f"{where}: lanes wait at a grid-wide barrier ({sizes}); they wait for {who}; the barrier's own "
                   f"release (from the last lane's end to the next begins) costs {_fmt(float(claims.sum()))} on the "
                   "critical path: fewer barriers, or a cheaper one")
            ev = (f"grid-wide: in {r['synced_instances']} of {r['instances']} instances no lane began {r['next_phase']} "
                  f"before the last lane ended {r['phase']}, and the begins follow that last end, not each lane's own "
                  f"(slope {_num(r['follow_slope']):.2f})")
        elif r["cause"] == "cluster":
            kind = NAME
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
            kind = NAME
            msg = (f"{where}: lanes wait ({sizes}); no lane began {r['next_phase']} before the last lane ended "
                   f"{r['phase']} ({r['synced_instances']} of {r['instances']} instances), as after a grid-wide barrier, "
                   "but the begins follow each lane's own end as closely (the ends lie too few ticks apart, or every "
                   "gap is equal): a barrier or untimed work of the lanes, the trace cannot tell which")
            ev = "synchronized in most instances; the release cannot be told from each lane's own end"
        else:
            kind = NAME
            msg = (f"{where}: lanes wait ({sizes}) and nothing in the trace shows what released them: not a "
                   f"grid-wide barrier ({r['synced_instances']} of {r['instances']} instances), not a cluster, not "
                   "another warp group of the block, not regular enough for untimed work of the lane")
            ev = "no release evidenced (docs/analysis-schema.md, what a wait waited for)"
        figs["waited_block"] = block if stable else None
        if stable and r["cause"] == "grid" and not _long_work(fig, r["phase"], block, th.imbalance):
            figs["waited_block_late"] = True  # its work is a median lane's: it ends last because it began late
        # the instance after which the longest of these waits began (what the annotated trace draws)
        w = fig.waits
        at = np.flatnonzero((w.phase == r["phase"]) & (w.next_phase == r["next_phase"])) if len(w) else []
        figs["max_k"] = int(w.max_k[at[0]]) if len(at) and w.max_k[at[0]] is not None else None
        if r["cause"] == "grid":
            cause_key = "grid barrier"  # every barrier's release is one cost: the barrier's own
            figs["barrier_floor_ns"] = tight_release_ns(getattr(fig, "launch", None))
        out.append(Verdict(kind, r["phase"], msg, ev, float(claims.sum()), True, WaitFigures(**figs), claims,
                           cause_key))
        if len(out) >= th.top_waits:
            break
    return out


def _long_work(fig, phase: str, block: int, ratio: float) -> bool:
    """The block's mean slice of the phase is over ``ratio`` times the lanes' median: it ends last by its work."""
    pl = fig.lanes
    m = pl.phase == phase
    mine = m & (pl.block == block)
    if not mine.any() or not m.any():
        return True
    return float(pl.mean_dur_ns[mine].max()) > ratio * float(np.median(pl.mean_dur_ns[m]))


def _systematic(ctx, p: dict | None, block: int) -> bool:
    """The phase's last finisher is this block in most of at least 2 instances, ahead of the next lane by 2
    timer steps on average: a block the waits are on, not the one that happened to end last."""
    if p is None or p["top_last_block"] != block or p["instances"] < 2:
        return False
    return (p["top_last_count"] >= ctx.th.stable_fraction * p["instances"]
            and _num(p["mean_last_lead_ns"]) >= ctx.eps)


def change(v):
    """The grid barrier's own release cut to the tightest grid barrier's on this GPU (model/barrier.py; a GPU the
    table does not know: to nothing): each barrier instance's median release latency at most that (a lane that
    began later than the median keeps its excess: a late starter's wait is the starter's cost, not the barrier's)."""
    if v.cause != "grid barrier":
        return None
    return Change(barrier_cost_ns=float(v.figures.get("barrier_floor_ns") or 0.0), barrier_own_only=True)


def detect(ctx, scope):
    """The launch: the waits at each phase boundary by what they waited for (large_wait, and untimed_work from
    the same table)."""
    return _detect(ctx) if scope.launch else []


def waits_on(v):
    """The block the lanes wait for at this boundary, and the wait's figures, where it is one block."""
    g = v.figures
    if g.get("waited_block") is None:
        return None
    return g["waited_block"], {"phase": v.phase, "next_phase": g["next_phase"], "mean_ns": g["mean_ns"]}


KIND = Kind(NAME, "lanes wait between two phases (for a barrier, their cluster, or nothing shown)", (WaitFigures,),
            8, fixed_rank, short, headline, span, no_roles, "wait_after_us", change=change,
            checks=stake_checks("wait"),
            detect=detect, waits_on=waits_on)
