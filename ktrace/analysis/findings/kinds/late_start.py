"""late_start: a block finishes last because something delayed its own begin (a phase's last finisher, or the
lane that ends the kernel), not because of its work."""

from __future__ import annotations


import numpy as np

from ..verdict import Verdict, fmt as _fmt
from .base import Kind, KindFigures, instance_keys, last_block_extent, optional
from . import last_finisher
from .last_finisher_figures import LateStartFigures
from ....core.records import frozen
from ...replay.change import Change

NAME = "late_start"


@frozen(kw_only=True)
class LateLaneFigures(KindFigures):
    """The lane that ends the kernel began late (per-lane first begin, last end and busy time)."""

    block: int
    group: int
    late_ns: float
    behind_ns: float
    busy_ns: int
    cause: str = "late_start"
    basis: str = "lane"
    tick_ns: float
    holds_from_start: bool = optional(False)  # it does not end the kernel: the critical path begins on it


def short(v) -> str:
    g = v.figures
    if g.get("basis") == "lane":
        return f"its first slice begins {_fmt(g['late_ns'])} after the median lane's"
    return f"{v.phase}: last in {g.get('top_last_count')} of {g.get('instances')} instances"


def headline(f, v):
    g = f.figures
    do = "find what delays its start (its launch, its SM, work before its first probe)"
    # the same words whether the lane (it ends the kernel) or a phase's instances showed it: runs of the same
    # inputs may show it either way
    late = g["late_ns"] if g.get("basis") == "lane" else g["mean_late_start_ns"]
    if g.get("block") is None:  # a different lane each instance
        return (f"a different {v.unit} finishes {f.phase} last each time, starting {_fmt(late)} late on average, not "
                "from its work", do)
    who = v.who(g.get("block"), g.get("group"))
    if g.get("holds_from_start"):
        return f"{who} starts {_fmt(late)} late and the kernel waits for it, not for its work", do
    return f"{who} finishes last because it starts {_fmt(late)} late, not because of its work", do


def roles(f, fig, mine, tick_ns):
    inst, b = fig.instances, f.figures.get("block")
    if b is not None:
        return instance_keys(inst, mine & (inst.last_block == b), NAME)
    return instance_keys(inst, mine & (inst.last_begin_ns - inst.p50_begin_ns >= 2 * tick_ns), NAME)


# -- what it detects ---------------------------------------------------------------------------------

def detect_lane(ctx) -> Verdict | None:
    """A lane that began late while its work is not long, and the kernel waits for it: the lane that ends the
    kernel (whatever its phases' instances did after it: they only carry the lag), or else the lane the critical
    path begins on (its lead-in: the other lanes wait for it at a barrier or a hand-off)."""
    fig = ctx.fig
    lt = fig.lane_totals
    k = fig.kernel
    if len(lt) < 2 or not k.wall_ns:
        return None
    ws = ctx.slots.get("waves", 1.0) if ctx.slots else 1.0
    if ws > 1.05:
        return None  # a block of a later wave begins late by design: the tail and waves findings speak
    end_row = int(np.lexsort((lt.lane, -lt.end_ns))[0])
    v = _late_lane(ctx, end_row, from_start=False)
    start_row = _path_start_row(ctx)
    if v is None and start_row is not None and start_row != end_row:
        v = _late_lane(ctx, start_row, from_start=True)
    return v


def _path_start_row(ctx) -> int | None:
    """The lane_totals row of the lane whose slice the critical path begins with after a lead-in of at least eps."""
    cp, lt = ctx.cp, ctx.fig.lane_totals
    if len(cp) < 2 or cp.kind[0] != "lead_in" or cp.dur_ns[0] < ctx.eps or cp.kind[1] != "slice":
        return None
    lane = cp.last_lane[1]
    if lane is None or (isinstance(lane, float) and np.isnan(lane)):
        return None
    rows = np.flatnonzero(lt.lane == int(lane))
    return int(rows[0]) if len(rows) else None


def _late_lane(ctx, row: int, from_start: bool) -> Verdict | None:
    fig, th, k = ctx.fig, ctx.th, ctx.fig.kernel
    lt = fig.lane_totals
    g = lt.group[row]
    m = lt.group == g
    late = float(lt.begin_ns[row] - np.median(lt.begin_ns[m]))
    behind = float(lt.end_ns[row] - np.median(lt.end_ns[m]))
    busy_ok = lt.busy_ns[row] <= th.imbalance * float(np.median(lt.busy_ns[m]))
    if late < ctx.eps or not busy_ok:
        return None
    if not from_start and (behind < ctx.eps or late * 2 < behind):
        return None
    if _idle_before_barrier(ctx, int(lt.lane[row]), float(lt.begin_ns[row])):
        return None  # nothing to do before a barrier: idle (the idle lanes finding), not late
    b = int(lt.block[row])
    claims = ctx.claim_window(float(k.begin_ns), float(k.begin_ns) + late)
    first = fig.lanes.phase[fig.lanes.lane == lt.lane[row]]
    phase = str(first[0]) if len(first) else None
    holds = ("the critical path begins on it: the other lanes wait for it" if from_start else
             f"it ends {_fmt(behind)} after the median lane")
    what = "the kernel waits for it" if from_start else "ends the kernel"
    msg = (f"{ctx.who(b, int(g))} {what} because it starts late: its first slice begins {_fmt(late)} after "
           f"the median lane's, while its work ({_fmt(float(lt.busy_ns[row]))} busy) is within "
           f"{th.imbalance:.2f}x of the median; {holds}; look at what delays its "
           "start (its launch, its SM, work before its first probe), not its work")
    ev = ("per-lane first begin, last end and busy time (all phases); the critical path's lead-in; one wave in slots"
          if from_start else "per-lane first begin, last end and busy time (all phases); one wave in slots")
    return Verdict(NAME, phase, msg, ev, float(claims.sum()), True, LateLaneFigures(
        block=b, group=int(g), late_ns=late, behind_ns=behind, busy_ns=int(lt.busy_ns[row]), tick_ns=ctx.tick,
        holds_from_start=from_start), claims, f"block {b}")


def _idle_before_barrier(ctx, lane: int, begin: float) -> bool:
    """The lane's first slice begins after the end of a phase instance that half the lanes or more ran and it
    never did: it waited at a barrier with nothing to do before it (replay.py releases it there)."""
    fig = ctx.fig
    ran = set(fig.lanes.phase[fig.lanes.lane == lane].tolist())
    inst = fig.instances
    other = np.array([p not in ran for p in inst.phase.tolist()], bool)
    big = inst.lanes * 2 >= (fig.kernel.lanes or 0)
    return bool((other & big & (inst.end_ns <= begin)).any())


def change(v):
    """No late start: the block's delay removed before its first slice and every later instance (of the phase, for
    a phase's last finisher; a different block each time: every block's)."""
    g = v.figures
    if g.get("basis") == "lane":
        return Change(start_on_time=((int(g["block"]), None),))
    return Change(start_on_time=((g.get("block"), v.phase),)) if v.phase is not None else None


def lead(v):
    """A late lane leads the phase findings of its cause (the late starts its lag shows in the instances)."""
    return LANE_RANK if v.figures.get("basis") == "lane" else None


LANE_RANK = 1.5


def joins(v, causes) -> str | None:
    """A phase's late last finisher joins the late lane of the same block where one was found (one late start seen
    at the launch and in the phase's instances); one of a different block each instance joins it only where that
    lane's delay is most of what the instances claim (one late block's lag, not a late start that moves)."""
    if v.figures.get("basis") == "lane":
        return None
    mine = v.figures.get("block")
    for key, members in causes.items():
        for m in members:
            if m.kind != NAME or m.figures.get("basis") != "lane":
                continue
            if mine == m.figures.get("block") or (mine is None and 2 * m.impact_ns >= v.impact_ns):
                return key
    return None


def detect(ctx, scope):
    """A phase's last finisher that starts late (kinds/last_finisher.py); the lane that ends the kernel begun late
    (the launch)."""
    if scope.launch:
        v = detect_lane(ctx)
        return [v] if v is not None else []
    return last_finisher.of_kind(ctx, scope, NAME, LateStartFigures)


KIND = Kind(NAME, "a block finishes last because its own begin was delayed", (LateStartFigures, LateLaneFigures), 2,
            lead, short, headline, last_block_extent, roles, "start_skew_us", change=change,
            detect=detect, joins=joins)
