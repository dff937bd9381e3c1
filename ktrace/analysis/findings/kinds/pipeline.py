"""pipeline: one warp group of each block waits for another: which group bounds the blocks.

Read two ways (``detect``): from the gaps the wait evidence says another group of the block released (the
hand-off), or, where none is, from timed waits: the kernel wraps each wait in a phase of its own (IKET's
``mma_wait`` around a consumer's wait for a full stage, ``load_wait`` around a producer's wait for a free one), so
the waits are slices, not gaps. A phase is a wait when its name says so: it is ``wait`` or ends in ``wait`` after
a separator (``mma_wait``, ``tma-wait``, ``barrier.wait``, ``Wait``). Per lane, its own work is its busy time
(top-level slices) less the time in wait phases. Within a block, the warp group (or warp) that spends most of its
busy time waiting waits for the one that hardly waits: the latter bounds the blocks. Speeding the bounding
group's own work up to the waiting group's own work is what the pipeline could gain; the stake is that, as the
last part of the wall.
"""

from __future__ import annotations

import re

import numpy as np

from ...evidence.waits import HANDOFF_TICKS
from ..verdict import Verdict, fmt as _fmt
from .base import Kind, KindFigures, claim_words, fixed_rank, no_roles, no_span, optional, stake_checks
from ....core.records import frozen
from ...evidence.keyed import distinct
from ...replay.change import TIMED_WAIT, Change

NAME = "pipeline"

WAIT_NAME = TIMED_WAIT  # a phase that times a wait (IKET's mma_wait): the replay reads it as a release (timed_waits.py)
WAITING_SHARE = 0.5  # from timed waits: a group waits when its wait phases are at least this share of its busy time
BOUNDING_SHARE = 0.1  # ... for a group that hardly waits, at most this


@frozen(kw_only=True)
class PipelineFigures(KindFigures):
    waiting_group: int
    bounding_group: int
    next_phase: str | None  # the phase after the hand-off (None from timed waits)
    count: int
    mean_ns: float
    handoff_gaps: int
    handoff_expected: float
    idle_share: float
    median_busy_bounding_ns: float
    median_busy_waiting_ns: float
    tick_ns: float
    wait_phase: str | None = optional(None)  # from timed waits: the wait phase the waiting group spends most in
    bounding_wait_share: float | None = optional(None)  # ... and the share of its busy time the bounding one waits


def headline(f, v):
    g = f.figures
    b, w = v.group(g["bounding_group"]), v.group(g["waiting_group"])
    return (f"{b} bounds each block; {w} is idle {g['idle_share']:.0%} of its time",
            f"speed up {b}'s work (speeding up {w} alone gains nothing)")


# -- what it detects ---------------------------------------------------------------------------------

def _detect(ctx) -> list[Verdict]:
    """The pipeline verdicts: from the hand-offs, else from timed waits."""
    return _handoffs(ctx) or _timed_waits(ctx)


def _handoffs(ctx) -> list[Verdict]:
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
        lane_time = ctx.lane_time()
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
        out.append(Verdict(NAME, r["phase"], msg, ev, float(claims.sum()), idle_share >= 0.1, PipelineFigures(
            waiting_group=g, bounding_group=h, next_phase=r["next_phase"], count=r["count"],
            mean_ns=r["mean_ns"], handoff_gaps=r["handoff_gaps"], handoff_expected=r["handoff_expected"],
            idle_share=idle_share, median_busy_bounding_ns=float(np.median(busy_h)),
            median_busy_waiting_ns=float(np.median(busy_g)), tick_ns=ctx.tick), claims, f"pipeline {h}"))
    return out


def _group_name(fig, g) -> str:
    names = fig.launch.get("group_names")
    if isinstance(names, str) and names:
        parts = names.split(",")
        if 0 <= g < len(parts) and parts[g]:
            return f"group {g} ({parts[g]})"
    return f"group {g}"


# -- from timed waits ----------------------------------------------------------------------------

def is_wait_phase(name: str) -> bool:
    """A phase that times a wait, by its name: ``wait``, ``mma_wait``, ``tma-wait``, ``barrier.Wait``."""
    return bool(WAIT_NAME.fullmatch(name or ""))


def _timed_waits(ctx) -> list[Verdict]:
    """The pipeline verdict from timed waits: which group bounds the blocks while another waits in its wait
    phases (figures as the hand-off's, with ``wait_phase`` and the bounding group's wait share)."""
    fig = ctx.fig
    pl, lt = fig.lanes, fig.lane_totals
    if not len(pl) or len(lt) < 2:
        return []
    waits = sorted({p for p in pl.phase.tolist() if is_wait_phase(p)})
    if not waits:
        return []
    lanes = lt.lane.astype(np.int64)
    busy = lt.busy_ns.astype(np.float64)
    groups = lt.group.astype(np.int64)
    wait = np.zeros(len(lanes))
    order = np.argsort(lanes, kind="stable")
    top_wait = {}
    for name in waits:  # a handful of phases; per phase, its lanes at once
        m = pl.phase == name
        at = np.searchsorted(lanes[order], pl.lane[m].astype(np.int64))
        at = np.minimum(at, len(lanes) - 1)
        found = lanes[order][at] == pl.lane[m]
        got = np.zeros(len(lanes))
        np.add.at(got, order[at[found]], pl.sum_dur_ns[m][found].astype(np.float64))
        wait += got
        top_wait[name] = got
    rows = []
    for g in distinct(groups).tolist():
        m = (groups == g) & (busy > 0)
        if not m.any():
            continue
        share = float(wait[m].sum() / busy[m].sum())
        own = float(np.median(busy[m] - np.minimum(wait[m], busy[m])))
        rows.append((g, share, own, m))
    waiting = [r for r in rows if r[1] >= WAITING_SHARE]
    bounding = [r for r in rows if r[1] <= BOUNDING_SHARE]
    if not waiting or not bounding:
        return []
    w = max(waiting, key=lambda r: (r[1], -r[0]))
    b = max(bounding, key=lambda r: (r[2], -r[0]))
    if b[2] <= w[2] + ctx.eps:
        return []  # the group that hardly waits does not do more work: nothing binds the waiting one here
    g_w, share_w, own_w, m_w = w
    g_b, share_b, own_b, _ = b
    phase = max(waits, key=lambda n: (top_wait[n][m_w].sum(), n))
    wall = float(fig.kernel.wall_ns or 0)
    gain = min(own_b - own_w, wall)
    claims = ctx.claim_last(gain)
    gname, bname = _name(fig, g_w), _name(fig, g_b)
    n_waits = int(pl.instances[(pl.phase == phase) & np.isin(pl.lane, lanes[m_w])].sum())
    mean_wait = float(top_wait[phase][m_w].sum() / max(n_waits, 1))
    msg = (f"pipeline: {bname} bounds the blocks: {gname} spends {share_w:.0%} of its busy time waiting in "
           f"{phase} ({n_waits:,} waits, {_fmt(mean_wait)} on average) while {bname} waits {share_b:.0%} of its; "
           f"per block {bname}'s own work is {_fmt(own_b)} and {gname}'s {_fmt(own_w)} (medians): speed up the "
           f"work of {bname}; speeding up {gname} alone gains nothing")
    ev = (f"timed waits: the phases named as waits ({', '.join(waits)}) against each lane's busy time "
          "(top-level slices); a group's own work is its busy time less its waits")
    return [Verdict(NAME, phase, msg, ev, float(claims.sum()), True, PipelineFigures(
        waiting_group=g_w, bounding_group=g_b, next_phase=None, count=n_waits, mean_ns=mean_wait,
        handoff_gaps=0, handoff_expected=0.0, idle_share=share_w,
        median_busy_bounding_ns=own_b, median_busy_waiting_ns=own_w, tick_ns=ctx.tick,
        wait_phase=phase, bounding_wait_share=share_b), claims, f"pipeline {g_b}")]


def _name(fig, g: int) -> str:
    names = fig.launch.get("group_names")
    parts = names.split(",") if isinstance(names, str) and names else []
    name = parts[g] if 0 <= g < len(parts) else ""
    if re.fullmatch(r"warps? [\d-]+", name):
        return name
    return f"group {g}" + (f" ({name})" if name else "")


def change(v):
    """The bounding warp group's work as fast as the waiting group's (their median busy times)."""
    g = v.figures
    bh, bg = float(g["median_busy_bounding_ns"] or 0), float(g["median_busy_waiting_ns"] or 0)
    if not bh or not bg or bh <= bg:
        return None
    return Change(group_speedup=((int(g["bounding_group"]), bh / bg),))


def detect(ctx, scope):
    """The launch: a warp group that waits for another of its block, which bounds the blocks."""
    return _detect(ctx) if scope.launch else []


KIND = Kind(NAME, "a warp group waits for another of its block, which bounds the blocks", (PipelineFigures,), 6,
            fixed_rank, claim_words, headline, no_span, no_roles, None, change=change,
            checks=stake_checks("wait"),
            detect=detect)
