"""serial_tail: a phase that a few lanes run while the other lanes of its warp groups are done (a split-K kernel
whose last block runs the final reduction alone). Its cost is the time those lanes run it alone; the replay's
stake is what spreading it over the idle lanes saves (stakes.py, ``spread``).

The phase's ``idle_lanes`` verdict says which lanes never ran it; ``detect`` turns it into the lead of one
finding, with the ``tail`` it leaves and the idle lanes as its consequences (one cause, causes.py), when the lanes
that ran it run it alone for at least ``tail_share`` of the wall.
"""

from __future__ import annotations


import numpy as np

from ..verdict import Verdict, fmt as _fmt
from . import idle_lanes
from .base import Kind, KindFigures, claim_words, fixed_rank, no_roles, no_span
from ....core.records import frozen
from ...evidence.keyed import distinct
from ...replay.change import Change

NAME = "serial_tail"


@frozen(kw_only=True)
class SerialTailFigures(KindFigures):
    serial_ns: float  # the longest time one lane runs the phase after the idle lanes are done
    block: int
    group: int
    lanes: int  # the lanes that ran the phase
    idle_lanes: int  # the lanes of its warp groups that never did
    idle: list  # [block, group] of the idle lanes, at most 64
    done_ns: float  # when the idle lanes are done, after the kernel's begin


def headline(f, v):
    g = f.figures
    return (f"{f.phase} runs on {g['lanes']} of {g['lanes'] + g['idle_lanes']} {v.unit}s for {_fmt(g['serial_ns'])} "
            f"after the others are done (a serial tail)",
            f"spread {f.phase} over the idle {v.unit}s (split its work)")


# -- what it detects ---------------------------------------------------------------------------------

def _detect(ctx, verdicts: list[Verdict]) -> list[Verdict]:
    """``verdicts`` with a serial-tail verdict for each phase that runs alone at the end (its idle-lanes verdict
    given the serial tail's cause); unchanged where none does or the top-level slices are not at hand."""
    fig, th, tick = ctx.fig, ctx.th, ctx.tick
    top = getattr(fig, "top", None)
    wall = float(fig.kernel.wall_ns or 0)
    if top is None or not len(top.lane) or not wall:
        return verdicts
    names = dict(zip(fig.phases.phase.tolist(), fig.phases.phase_index.tolist()))
    out = list(verdicts)
    for v in verdicts:
        if v.kind != idle_lanes.NAME or v.phase not in names:
            continue
        g = v.figures
        running, idle = int(g.get("lanes") or 0), int(g.get("idle_lanes") or 0)
        if not running or idle < running:  # most lanes never ran it: otherwise it is not serial
            continue
        mine = top.phase_index == names[v.phase]
        lanes_running = distinct(top.lane[mine])
        is_idle = np.isin(top.group, distinct(top.group[mine])) & ~np.isin(top.lane, lanes_running)
        if not is_idle.any():
            continue
        done = float(top.end[is_idle].max())  # when the lanes that never ran it are done
        alone = np.clip(top.end[mine] - np.maximum(top.begin[mine], done), 0, None)
        by_lane = np.bincount(np.searchsorted(lanes_running, top.lane[mine]), weights=alone.astype(np.float64))
        serial = float(by_lane.max()) if len(by_lane) else 0.0
        if serial < max(th.tail_share * wall, th.min_ticks * tick):
            continue
        who = int(lanes_running[int(np.argmax(by_lane))])
        sel = top.lane == who
        block, group = int(top.block[sel][0]), int(top.group[sel][0])
        key = f"block {block}"  # the tail it leaves ends with this block: the same cause
        msg = (f"serial tail: {v.phase} runs on {running} of {running + idle} lanes (block {block} group {group} the "
               f"longest) for {_fmt(serial)} ({serial / wall:.0%} of the wall) after the other {idle} are done: "
               f"spread it over the idle lanes (split its work, e.g. a parallel reduction)")
        ev = (f"the {idle} lanes that never ran {v.phase} end by +{_fmt(done - float(fig.kernel.begin_ns))}; "
              f"{v.phase} then runs {_fmt(serial)} on block {block}")
        figs = SerialTailFigures(serial_ns=serial, block=block, group=group, lanes=running, idle_lanes=idle,
                                 idle=g.get("idle", []), done_ns=done - float(fig.kernel.begin_ns))
        out.append(Verdict(NAME, v.phase, msg, ev, float(v.impact_ns), True, figs, v.claims, key))
        v.cause = key  # the idle lanes are the same cause
    return out


def change(v):
    """The phase spread over every lane of its warp groups."""
    return Change(spread=(v.phase,)) if v.phase is not None else None


def detect(ctx, scope):
    """The verdicts the others made: a phase's idle lanes, read again (does it run alone at the end?)."""
    if scope.verdicts is None:
        return []
    return _detect(ctx, list(scope.verdicts))[len(scope.verdicts):]


KIND = Kind(NAME, "a phase a few lanes run alone after the other lanes of its warp groups are done",
            (SerialTailFigures,), 0, fixed_rank, claim_words, headline, no_span, no_roles, None, change=change,
            detect=detect)
