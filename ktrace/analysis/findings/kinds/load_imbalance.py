"""load_imbalance: the slowest lane of a phase takes longer than the mean (instances that line up), or the
lanes' totals over all phases are unequal (a work list)."""

from __future__ import annotations


import numpy as np

from ..phase_shape import dominant, lined_up
from ..verdict import Verdict, fmt as _fmt
from . import rotating_imbalance, stable_straggler, straggler_change
from .last_finisher_figures import LastFinisherFigures
from .base import Kind, KindFigures, claim_words, ok, one_instance, optional
from ....core.records import frozen
from ...evidence.keyed import distinct
from ...replay.change import Change

NAME = "load_imbalance"

# A busy block is named as a whole (not its busiest lane) when at least this share of its lanes, and 2 or more,
# stand out of their own warp groups as its busiest lane does (detect_lane_totals): "all or nearly all".
WHOLE_BLOCK_SHARE = 0.75


@frozen(kw_only=True)
class InstancesFigures(KindFigures):
    """Per instance of a phase whose instances line up across lanes."""

    basis: str = "instances"
    imbalance: float
    max_imbalance: float
    mean_max_dur_ns: float
    mean_dur_ns: float
    instances: int
    slowest_block: int | None
    slowest_group: int | None
    slowest_mean_dur_ns: float | None
    tick_ns: float
    mean_p50_dur_ns: float
    mean_p90_dur_ns: float
    outlier: bool
    lane_totals_even: bool = optional(False)


@frozen(kw_only=True)
class LaneTotalsFigures(KindFigures):
    """Each lane's busy time over all phases, on a work list."""

    basis: str = "lane_totals"
    group: int
    imbalance: float
    max_lane_total_ns: float
    mean_lane_total_ns: float
    busiest_block: int | None
    busiest_group: int
    kernel_end_block: int
    tick_ns: float
    # where the busy block is named as a whole: how many of its lanes stand out of their warp groups, of how
    # many it has in groups of 2 lanes or more, their mean total and the mean of those groups' mean totals
    block_lanes: int | None = optional(None)
    block_lanes_of: int | None = optional(None)
    block_lane_total_ns: float | None = optional(None)
    block_mean_lane_total_ns: float | None = optional(None)


def lead(v) -> float | None:
    # a work list's busiest lane: its totals are the cause, per-phase figures the consequences
    # just behind a stable straggler, as before serial_tail took rank 0
    return stable_straggler.KIND.rank + 0.5 if v.figures.get("basis") == "lane_totals" else None


def detect(ctx, scope):
    """Instances that line up (a phase): the slowest lane against the instance's mean; the lanes' totals over
    every phase on a work list (the launch)."""
    if scope.launch:
        v = detect_lane_totals(ctx)
    elif scope.phase is not None and scope.lined_up:
        v = detect_instances(ctx, scope.phase, scope.inst)
    else:
        v = None
    return [v] if v is not None else []


def link(ctx, scope, v, found) -> None:
    """A phase's imbalance with a straggler (stable, changing or rotating) is that straggler's; with none and
    blocks in waves, the heavy blocks'."""
    last = [o for o in found if isinstance(o.figures, LastFinisherFigures)]
    for o in last:
        if o.kind in (stable_straggler.NAME, straggler_change.NAME, rotating_imbalance.NAME):
            v.cause = o.cause
    if not last and scope.phase is not None and scope.phase["wave_instances"] and v.warn:
        v.cause = "heavy blocks"


def short(v) -> str:
    g = v.figures
    if g.get("basis") == "instances":
        return f"{v.phase}: load imbalance {g['imbalance']:.2f}x"
    return claim_words(v)


def headline(f, v):
    g = f.figures
    if g.get("basis") == "lane_totals":
        if g.get("busiest_block") is None:  # several lanes near the top, which differ from run to run
            sizes = f"({_fmt(g['max_lane_total_ns'])} vs {_fmt(g['mean_lane_total_ns'])})"
            text = (f"several blocks' {v.group(g['group'])} are busy up to {g['imbalance']:.1f}x the group's mean "
                    f"{sizes}" if v.several_groups else
                    f"several blocks are busy up to {g['imbalance']:.1f}x the mean block in all {sizes}, none alone")
            return text, "hand out work so the blocks' totals even out (heavy items first, or split them)"
        if g.get("block_lanes"):  # the block as a whole: its lanes' mean total against their groups' mean
            word = "warp" if v.warps else "warp group"
            n, of = g["block_lanes"], g["block_lanes_of"]
            some = ("both" if n == 2 else f"all {n}") if n == of else f"{n} of {of}"
            who = f"block {g['busiest_block']} ({some} traced {word}s)"
            top, mean = g["block_lane_total_ns"], g["block_mean_lane_total_ns"]
        else:
            who = v.who(g["busiest_block"], g.get("busiest_group"))
            top, mean = g["max_lane_total_ns"], g["mean_lane_total_ns"]
        return (f"{who} is busy {g['imbalance']:.1f}x the mean {v.unit} over the kernel "
                f"({_fmt(top)} vs {_fmt(mean)})",
                f"hand out work so the {v.unit}s' totals even out (heavy items first, or split them)")
    sizes = f"({_fmt(g['mean_max_dur_ns'])} vs {_fmt(g['mean_dur_ns'])})"
    if g.get("outlier") and ok(g.get("slowest_block")):
        who = v.who(g["slowest_block"], g.get("slowest_group"))
        text = f"{who} takes {g['imbalance']:.1f}x the mean time in {f.phase} {sizes}"
    else:
        text = (f"{f.phase}: the slowest {v.unit} takes {g['imbalance']:.1f}x the mean {sizes}, not always the "
                "same one")
    return text, f"even out the {f.phase} work per {v.unit}"


def span(f, fig, mine):
    """The phase's instance with the longest slice."""
    if f.figures.get("basis") != "instances":
        return None
    return one_instance(fig.instances, mine, fig.instances.max_dur_ns)


def roles(f, fig, mine, tick_ns):
    """The slowest block's slice in the instance with the longest slice."""
    g, inst = f.figures, fig.instances
    if g.get("basis") != "instances" or not mine.any() or g.get("slowest_block") is None:
        return []
    at = mine.nonzero()[0][int(inst.max_dur_ns[mine].argmax())]
    return [((inst.phase[at], int(g["slowest_block"]), int(g["slowest_group"]), int(inst.k[at])), "slowest")]


# -- what it detects ---------------------------------------------------------------------------------

def detect_instances(ctx, p, inst) -> Verdict | None:
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
    jb = _dominant_block(lanes.block, lanes.mean_dur_ns, ctx.eps)
    if jb is not None:
        mine = np.flatnonzero(lanes.block == jb)
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
    figs = dict(imbalance=imb, max_imbalance=p["max_imbalance"], mean_max_dur_ns=mean_max, mean_dur_ns=mean,
                instances=p["instances"], slowest_block=slow["block"] if slow else None,
                slowest_group=slow["group"] if slow else None,
                slowest_mean_dur_ns=slow["mean_dur_ns"] if slow else None, tick_ns=ctx.tick,
                mean_p50_dur_ns=p50, mean_p90_dur_ns=p90, outlier=bool(outlier))
    if not outlier:
        ev += f"; the slowest slice is within the lanes' own spread (p50 {_fmt(p50)}, p90 {_fmt(p90)}): noise"
    evened = _totals_even(ctx, p)
    if evened:
        ev += ("; but the lanes' totals over all phases even out (busiest lane " + f"{evened:.2f}x the mean) and no "
               "barrier follows the phase: the other phases make up for it")
        figs["lane_totals_even"] = True
    return Verdict(NAME, p["phase"], msg, ev, float(claims.sum()), bool(outlier) and not evened,
                   InstancesFigures(**figs), claims, cause)


def _totals_even(ctx, p) -> float | None:
    """The busiest lane's total / the mean, when every group's lanes' totals are within the imbalance threshold
    and no barrier (grid or cluster) follows the phase; else None."""
    wc = ctx.wc
    after = set(wc.cause[wc.phase == p["phase"]].tolist())
    if after & {"grid", "cluster"}:
        return None
    lt = ctx.fig.lane_totals
    worst = 0.0
    for g in distinct(lt.group).tolist():
        tot = lt.busy_ns[lt.group == g].astype(np.float64)
        if len(tot) < 2 or not tot.mean():
            continue
        worst = max(worst, float(tot.max() / tot.mean()))
    return worst if 0 < worst <= ctx.th.imbalance else None


def _work_list(ctx) -> bool:
    """Some top-level phase's instances do not line up across lanes (counts or times): a work list."""

    fig = ctx.fig
    for i in range(len(fig.phases)):
        p = fig.phases.row(i)
        if p["depth"] == 0 and not lined_up(ctx, p, ctx.instances(p["phase"])):
            return True
    return False


def detect_lane_totals(ctx) -> Verdict | None:
    """On a work list, balance is each lane's total busy time over all phases, within each warp group.

    The verdict: in some warp group the busiest lane's total / the group's mean > ``imbalance`` and max - mean
    >= eps (of the groups that show it, the one with the largest max - mean). Its block is named when it
    dominates that group (``dominant``); else the cause is "lanes". A named block's lanes are one cause, and
    which of them is the busiest is noise between runs: where the block stands out the same way (the verdict's
    test against the group's mean, and dominating the group) in 2 or more of its warp groups, and in at least
    ``WHOLE_BLOCK_SHARE`` of those it has lanes in (groups of 2 lanes or more), the block is named as a whole
    (``block_lanes`` of ``block_lanes_of``): ``imbalance`` is those lanes' mean total (``block_lane_total_ns``)
    over the mean of their groups' means (``block_mean_lane_total_ns``), and the time at stake their difference.
    Otherwise the busiest lane alone is named, against its group's mean (``max_lane_total_ns``,
    ``mean_lane_total_ns``, which keep the busiest lane's figures in both cases). The stake is the last
    (total - mean) of the wall.
    """
    fig, th = ctx.fig, ctx.th
    lt = fig.lane_totals
    k = fig.kernel
    if len(lt) < 2 or not k.wall_ns or not _work_list(ctx):
        return None
    best = None
    for g in distinct(lt.group).tolist():
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
    j = _dominant_block(lt.block[rows], tot, ctx.eps)
    busiest = lt.row(int(rows[int(np.argmax(tot))]))
    whole = _whole_block(ctx, busiest["block"]) if j is not None else None
    lanes = fig.lanes
    if whole is not None:
        named, n_of, mean = whole
        top = float(lt.busy_ns[named].astype(np.float64).mean())
        mine = np.isin(lanes.lane, lt.lane[named])
        by_phase: dict = {}
        for d, ph in zip(lanes.sum_dur_ns[mine].tolist(), lanes.phase[mine].tolist()):
            by_phase.setdefault(ph, []).append(float(d))
        parts = sorted(((sum(ds) / len(ds), ph) for ph, ds in by_phase.items()), key=lambda t: (-t[0], t[1]))
        share = ", ".join(f"{ph} {_fmt(d)}" for d, ph in parts[:4])
    else:
        mine = lanes.lane == busiest["lane"]
        parts = sorted(zip(lanes.sum_dur_ns[mine].tolist(), lanes.phase[mine].tolist()), reverse=True)
        share = ", ".join(f"{ph} {_fmt(float(d))} ({d / max(top, 1):.0%})" for d, ph in parts[:4])
    gain = top - mean
    claims = ctx.claim_last(gain)
    label = f" of group {g}" if ctx.several_groups else ""
    extra = {}
    if whole is not None:
        n = len(named)
        who = f"block {busiest['block']} " + (f"(all {n} of its lanes)" if n == n_of else f"({n} of its {n_of} lanes)")
        ends = ("and it ends the kernel" if ender["block"] == busiest["block"] else
                f"(the kernel's last lane is {ctx.who(ender['block'], ender['group'])}, busy "
                f"{_fmt(float(ender['busy_ns']))})")
        msg = (f"lane totals: the lanes take unequal work: {who} is busy {_fmt(top)} each on average over all "
               f"phases against a mean of {_fmt(mean)} ({top / mean:.2f}x) {ends}; their time, per lane that runs "
               f"the phase: {share}; hand out work so the lanes' totals even out (heavy items first, or split them)")
        cause = f"block {busiest['block']}"
        extra = dict(block_lanes=n, block_lanes_of=n_of, block_lane_total_ns=top, block_mean_lane_total_ns=mean)
    elif j is not None:
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
    if whole is not None:
        many = f"all {n_of}" if len(named) == n_of else f"{len(named)} of {n_of}"
        ev = (f"per-lane busy time (top-level slices, all phases): {many} of block {busiest['block']}'s lanes over "
              f"{th.imbalance:.2f}x their warp group's mean; the phases' instances do not line up across lanes "
              "(counts or times), so per-instance figures compare unrelated items")
    else:
        ev = (f"per-lane busy time (top-level slices, all phases) of {len(tot)} lanes; the phases' instances do not "
              "line up across lanes (counts or times), so per-instance figures compare unrelated items")
    if j is not None:
        for w in _cluster_waits_on(ctx, busiest["block"]):
            msg += (f"; the other blocks of its cluster of {w['cluster_size']} wait for it after {w['phase']} "
                    f"({w['waited_block_count']} gaps)")
            ev += f"; cluster waits evidenced at {w['phase']} -> {w['next_phase']}"
    return Verdict(NAME, None, msg, ev, float(claims.sum()), True, LaneTotalsFigures(
        group=g, imbalance=top / mean, max_lane_total_ns=float(best[1]), mean_lane_total_ns=float(best[2]),
        busiest_block=busiest["block"] if j is not None else None, busiest_group=busiest["group"],
        kernel_end_block=ender["block"], tick_ns=ctx.tick, **extra), claims, cause)


def _dominant_block(blocks: np.ndarray, values: np.ndarray, eps: float) -> int | None:
    """The block whose largest value stands out of the other blocks' largest (``dominant``), else None: the
    lanes of one block (its warps or warp groups) are one cause."""
    ub = distinct(blocks)
    per_block = np.full(len(ub), -np.inf)
    np.maximum.at(per_block, np.searchsorted(ub, blocks), values)
    j = dominant(per_block, eps)
    return None if j is None else int(ub[j])


def _whole_block(ctx, block: int) -> tuple[np.ndarray, int, float] | None:
    """``block``'s lanes that stand out of their own warp group as its busiest lane does of its group: busy past
    the verdict's test against the group's mean, and the block dominating the group (``dominant``); of its
    lanes in groups of 2 lanes or more. Returns (their rows, how many lanes it has there, the mean of their
    groups' means in ns) when they are 2 or more and at least WHOLE_BLOCK_SHARE of them; else None (one lane of
    the block stands out, not the block)."""
    lt = ctx.fig.lane_totals
    tot_all = lt.busy_ns.astype(np.float64)
    named, means, n_of = [], [], 0
    for g in distinct(lt.group).tolist():
        rows = np.flatnonzero(lt.group == g)
        if len(rows) < 2 or not (lt.block[rows] == block).any():
            continue
        n_of += int((lt.block[rows] == block).sum())
        tot = tot_all[rows]
        mean = float(tot.mean())
        if _dominant_block(lt.block[rows], tot, ctx.eps) != block or not mean:
            continue
        top = int(rows[np.argmax(np.where(lt.block[rows] == block, tot, -np.inf))])
        if tot_all[top] / mean > ctx.th.imbalance and tot_all[top] - mean >= ctx.eps:
            named.append(top)
            means.append(mean)
    if len(named) < 2 or len(named) < WHOLE_BLOCK_SHARE * n_of:
        return None
    return np.array(named, np.int64), n_of, float(np.mean(means))


def _cluster_waits_on(ctx, block: int) -> list[dict]:
    """The boundaries at which other blocks of ``block``'s cluster wait for it (WaitCauses rows)."""
    wc = ctx.wc
    rows = np.flatnonzero((wc.cause == "cluster") & (np.nan_to_num(wc.waited_block.astype(np.float64), nan=-1) == block))
    return [wc.row(i) for i in rows.tolist()]


def change(v):
    """Instances that line up: every lane gets the instance's mean; lane totals (a work list): the items handed
    out evenly, every lane of each warp group getting its group's mean total, no item cut (the warp groups of a
    block share its items: all of them are rebalanced)."""
    if v.figures.get("basis") == "lane_totals":
        return Change(balance_lanes=(None,))
    return Change(balance=(v.phase,)) if v.phase is not None else None


KIND = Kind(NAME, "a phase's slowest lane, or a lane's total over the phases, well over the mean",
            (InstancesFigures, LaneTotalsFigures), 7, lead, short, headline, span, roles, "imbalance", change=change,
            detect=detect, link=link)
