"""gpc_imbalance: the blocks of one GPC run slower than the other GPCs' and that GPC finishes last.

A GPC (graphics processing cluster) is a group of SMs that share a clock domain, a path to the L2 and its
raster engines; a GPC whose SMs run slow (a lower clock, a busier L2 or memory partition, another kernel on it)
or that was handed heavier work slows every block on it. The capture must say each block's GPC: NVIDIA IKET's
locations do (the launch fact ``block_gpc``, -1 unknown); other producers do not, and the kind stays silent.

The rule (docs/analysis-schema.md, "Findings"): per GPC with at least ``MIN_BLOCKS`` blocks, the median block
duration (first record to last); the slowest GPC's median is > ``imbalance`` (1.10) x the median block of the
other GPCs and by at least eps, its excess over that median is at least ``DOMINANCE`` x the runner-up GPC's
excess over it (one GPC, not a spread of them), and its last block ends at least eps after every other GPC's.
The claim: the last (its last end - the others' last end) of the wall. The change that removes it (its stake,
replayed): every slice of that GPC's blocks as fast as the other GPCs' median block, i.e. scaled by their
median / its median. A GPC that is slow but does not finish last (blocks handed out by the hardware in waves
move to the faster GPCs) is not named.
"""

from __future__ import annotations

import numpy as np

from ..verdict import Verdict, fmt as _fmt
from .base import Kind, KindFigures, fixed_rank, no_roles
from ...replay.change import Change
from ....core.records import frozen

NAME = "gpc_imbalance"

MIN_BLOCKS = 2  # a GPC of one block is that block's finding (a straggler), not its GPC's
DOMINANCE = 2.0  # the slow GPC's excess over the others' median block, against the runner-up GPC's


@frozen(kw_only=True)
class GpcFigures(KindFigures):
    gpc: int  # the slow GPC
    gpcs: int  # GPCs with at least MIN_BLOCKS blocks
    blocks: int  # the slow GPC's blocks
    block_ids: tuple  # which they are (the change speeds these up)
    sms: int  # the slow GPC's SMs (of a known SM)
    median_block_dur_ns: float  # its median block, first record to last
    others_median_block_dur_ns: float  # the median block of the other GPCs
    ratio: float  # median_block_dur_ns / others_median_block_dur_ns
    slower_blocks: int  # its blocks longer than the others' median block x the imbalance threshold
    last_end_ns: float  # its last block's end, after the kernel's begin
    others_last_end_ns: float  # the other GPCs' last end, after the kernel's begin
    runner_up_gpc: int | None  # the next slowest GPC by median block, and its ratio to the others' median
    runner_up_ratio: float | None


def block_gpcs(launch: dict) -> np.ndarray | None:
    """Each block's GPC (-1 unknown) from the launch fact ``block_gpc`` (block order); None without it."""
    text = launch.get("block_gpc") if isinstance(launch, dict) else None
    if not isinstance(text, str) or not text:
        return None
    try:
        return np.array([int(x) for x in text.split(",")], np.int64)
    except ValueError:
        return None


def short(v) -> str:
    g = v.figures
    return f"GPC {g['gpc']}'s blocks run {g['ratio']:.2f}x the other GPCs'"


def headline(f, v):
    g = f.figures
    late = g["last_end_ns"] - g["others_last_end_ns"]
    return (f"GPC {g['gpc']}'s {g['blocks']} blocks run {g['ratio']:.2f}x as long as the other GPCs' and it finishes "
            f"{_fmt(late)} after them",
            f"even the work over the GPCs (hand it out from a queue), or find what slows GPC {g['gpc']}'s SMs")


def span(f, fig, mine):
    """From the other GPCs' last end to the kernel's end: the time the slow GPC runs alone."""
    g, k = f.figures, fig.kernel
    if k.begin_ns is None or k.end_ns is None:
        return None
    return int(k.begin_ns + g["others_last_end_ns"]), int(k.end_ns)


# -- what it detects ---------------------------------------------------------------------------------

def detect(ctx, scope) -> list:
    """The launch."""
    v = _detect(ctx) if scope.launch else None
    return [v] if v is not None else []


def change(v) -> Change | None:
    """Every slice of the slow GPC's blocks as fast as the other GPCs' median block: divided by the ratio."""
    g = v.figures
    if not g["block_ids"] or not g["ratio"] or g["ratio"] <= 1.0:
        return None
    return Change(block_speedup=tuple((int(b), float(g["ratio"])) for b in g["block_ids"]))


def _detect(ctx) -> Verdict | None:
    fig = ctx.fig
    gpc_of = block_gpcs(getattr(fig, "launch", None) or {})
    bl, k = fig.blocks, fig.kernel
    if gpc_of is None or not len(bl) or k.begin_ns is None or not k.wall_ns:
        return None
    inside = bl.block < len(gpc_of)
    gpc = np.full(len(bl), -1, np.int64)
    gpc[inside] = gpc_of[bl.block[inside]]
    known = gpc >= 0
    ids, counts = np.unique(gpc[known], return_counts=True)
    ids = ids[counts >= MIN_BLOCKS]
    if len(ids) < 2:
        return None
    dur = bl.dur_ns.astype(np.float64)
    medians = np.array([np.median(dur[gpc == i]) for i in ids.tolist()])  # a loop over GPCs (8 on an H100)
    order = np.argsort(-medians, kind="stable")
    slow = int(ids[order[0]])
    mine, others = gpc == slow, known & (gpc != slow)
    others_median = float(np.median(dur[others]))
    excess = medians[order[0]] - others_median
    if others_median <= 0 or excess < ctx.eps or medians[order[0]] <= ctx.th.imbalance * others_median:
        return None
    runner_up = int(ids[order[1]])
    if excess < DOMINANCE * max(float(medians[order[1]]) - others_median, 0.0):
        return None
    end = bl.end_ns.astype(np.float64) - float(k.begin_ns)
    last, others_last = float(end[mine].max()), float(end[others].max())
    late = last - others_last
    if late < ctx.eps:
        return None
    claims = ctx.claim_last(late)
    impact = float(claims.sum())
    if impact < ctx.eps:
        return None
    ratio = float(medians[order[0]] / others_median)
    slower = int((dur[mine] > ctx.th.imbalance * others_median).sum())
    sms = int(len(np.unique(bl.sm[mine & (bl.sm >= 0)])))
    wall = float(k.wall_ns)
    runner_ratio = float(medians[order[1]] / others_median)
    msg = (f"gpc imbalance: GPC {slow}'s {int(mine.sum())} blocks ({sms} SMs) run {ratio:.2f}x the other GPCs' "
           f"median block ({_fmt(medians[order[0]])} against {_fmt(others_median)}; {slower} of them over "
           f"{ctx.th.imbalance:.2f}x), and GPC {slow} finishes {_fmt(late)} after the others ({late / wall:.0%} of the "
           f"wall); the next slowest GPC, {runner_up}, runs {runner_ratio:.2f}x; even the work over the GPCs (hand "
           f"it out from a queue), or find what GPC {slow}'s SMs share: their clock, an L2 or memory partition, "
           f"another kernel running on them")
    ev = (f"each block's GPC (the capture's locations), its duration from its first record to its last and its "
          f"end: the median block per GPC, {len(ids)} GPCs")
    return Verdict(NAME, None, msg, ev, impact, True, GpcFigures(
        gpc=slow, gpcs=len(ids), blocks=int(mine.sum()), block_ids=tuple(int(b) for b in np.sort(bl.block[mine])),
        sms=sms, median_block_dur_ns=float(medians[order[0]]),
        others_median_block_dur_ns=others_median, ratio=ratio, slower_blocks=slower, last_end_ns=last,
        others_last_end_ns=others_last, runner_up_gpc=runner_up, runner_up_ratio=runner_ratio), claims,
        f"GPC {slow}")


KIND = Kind(NAME, "one GPC's blocks run slower than the other GPCs' and it finishes last", (GpcFigures,), 5.5,
            fixed_rank, short, headline, span, no_roles, None, change=change, detect=detect)
