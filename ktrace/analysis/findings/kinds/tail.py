"""tail: the end of the kernel runs with fewer than half the SMs busy."""

from __future__ import annotations


import numpy as np

from ..verdict import Verdict, fmt as _fmt, num as _num
from .base import Kind, KindFigures, no_change, stake_checks
from ....core.records import frozen

NAME = "tail"


@frozen(kw_only=True)
class TailFigures(KindFigures):
    last_block: int
    last_block_begin_ns: float  # after the kernel's begin
    last_block_dur_ns: float
    median_block_dur_ns: float
    tail_ns: float
    busy_sms_in_tail: float
    sms: int
    waves: float


def lead(v) -> float | None:
    return -1 if v.cause == "heavy blocks" else None  # heavy blocks at the end: the tail is what they cost


def short(v) -> str:
    g = v.figures
    return f"tail {_fmt(g['tail_ns'])} with {g['busy_sms_in_tail']:.1f} SMs busy"


def headline(f, v):
    g = f.figures
    share = f" ({g['tail_ns'] / v.wall_ns:.0%} of the wall)" if v.wall_ns else ""
    text = (f"the last {_fmt(g['tail_ns'])}{share} run with under half the SMs busy "
            f"({g['busy_sms_in_tail']:.0f} of {g['sms']})")
    waves = g.get("waves") or 1.0
    heavy = g["last_block_dur_ns"] > 1.5 * max(g["median_block_dur_ns"] or 0, 1)
    if waves > 1.05 and heavy:  # the cause first: evening the blocks out may save more than the tail itself
        text = (f"blocks of uneven length: the last {_fmt(g['tail_ns'])} run with under half the SMs busy "
                f"({g['busy_sms_in_tail']:.0f} of {g['sms']})")
        do = "schedule the heavy blocks first, split heavy blocks, or use a persistent scheduler"
    elif waves > 1.05:
        do = "make the grid fill the last wave (the waves finding)"
    else:
        do = f"shorten the blocks that finish last (block {g['last_block']} ends the kernel)"
    return text, do


def span(f, fig, mine):
    """From the occupancy's tail begin to the kernel's end."""
    if not len(fig.occupancy):
        return None
    o = fig.occupancy.row(0)
    return None if o["tail_begin_ns"] is None else (int(o["tail_begin_ns"]), int(fig.kernel.end_ns or 0))


def roles(f, fig, mine, tick_ns):
    """The block's slice that ends the kernel (tied last finishers included)."""
    g, inst = f.figures, fig.instances
    if g.get("last_block") is None:
        return []
    lt = fig.lane_totals
    lanes = (lt.block == g["last_block"]) & (lt.end_ns == (fig.kernel.end_ns or 0))
    ends = (inst.end_ns == (fig.kernel.end_ns or 0)).nonzero()[0]
    if not lanes.any() or not len(ends):
        return []
    i = int(ends[0])
    return [((inst.phase[i], int(g["last_block"]), int(lt.group[lanes.nonzero()[0][0]]), int(inst.k[i])),
             "ends_kernel")]


# -- what it detects ---------------------------------------------------------------------------------

def _detect(ctx) -> Verdict | None:
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
    return Verdict(NAME, None, msg, ev, impact, impact >= ctx.th.tail_share * wall, TailFigures(
        last_block=o["last_block"], last_block_begin_ns=rel, last_block_dur_ns=o["last_block_dur_ns"],
        median_block_dur_ns=o["median_block_dur_ns"], tail_ns=tail, busy_sms_in_tail=in_tail, sms=sms,
        waves=waves), claims, cause)


def _cluster_of(ctx, block: int) -> int | None:
    """The block that ``block``'s cluster waits for, when a cluster boundary evidences one."""
    wc = ctx.wc
    for i in np.flatnonzero(wc.cause == "cluster").tolist():
        r = wc.row(i)
        if r["waited_block"] is not None and r["cluster_size"] and \
                r["waited_block"] // r["cluster_size"] == block // r["cluster_size"]:
            return int(r["waited_block"])
    return None


def detect(ctx, scope):
    """The launch."""
    v = _detect(ctx) if scope.launch else None
    return [v] if v is not None else []


def joins(v, causes) -> str | None:
    """A one-wave tail left by a block with no finding of its own is the lanes' unequal totals, when they are one."""
    return "lanes" if (v.cause or "").startswith("block ") and "lanes" in causes else None


KIND = Kind(NAME, "the kernel's end runs with fewer than half the SMs busy", (TailFigures,), 10, lead, short,
            headline, span, roles, None, change=no_change,
            checks=stake_checks(share="tail_share"),
            detect=detect, joins=joins)
