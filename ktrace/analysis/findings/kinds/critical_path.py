"""critical_path: the largest part of the critical path (a phase, or the gaps of one kind); information."""

from __future__ import annotations


import numpy as np

from ..verdict import Verdict, fmt as _fmt
from .base import Kind, KindFigures, claim_words, fixed_rank, no_roles, no_span, no_change
from ....core.records import frozen

NAME = "critical_path"


@frozen(kw_only=True)
class CriticalFigures(KindFigures):
    share: float
    part: str
    dur_ns: float
    wait_ns: float
    total_ns: float
    wall_ns: float
    coverage: float | None



# what a part of the path other than a phase is called
_PART_NAMES = {"lead_in": "the lead-in before the path's first slice", "lane_gap": "gaps on the path's lanes",
               "block_switch": "waiting for an SM slot"}


def _name(phase, part: str) -> str:
    return phase if part == "phase" else _PART_NAMES[part]


def headline(f, v):
    verb = "are" if f.figures["part"] == "lane_gap" else "is"
    return f"{_name(f.phase, f.figures['part'])} {verb} {f.figures['share']:.0%} of the critical path", ""


# -- what it detects ---------------------------------------------------------------------------------

def _detect(ctx) -> Verdict | None:
    fig = ctx.fig
    c = fig.critical_shares
    if not len(c) or not fig.kernel.wall_ns:
        return None
    i = int(np.argmax(c.total_ns))
    r = c.row(i)
    name = _name(r["phase"], r["part"])
    verb = "dominates" if r["share"] >= ctx.th.dominant_share else "is the largest part of"
    parts = ", ".join(f"{(x['phase'] or x['part'])} {x['share']:.0%}" for x in c.rows())
    msg = (f"{name} {verb} the critical path: {r['share']:.0%} of the kernel's wall time {_fmt(fig.kernel.wall_ns)} "
           f"(parts: {parts})")
    ev = "a backward walk from the kernel's last end through what each slice waited for; parts tile the wall"
    return Verdict(NAME, r["phase"], msg, ev, float(r["total_ns"]), False, CriticalFigures(
        share=r["share"], part=r["part"], dur_ns=r["dur_ns"], wait_ns=r["wait_ns"], total_ns=r["total_ns"],
        wall_ns=fig.kernel.wall_ns, coverage=c.coverage(fig.kernel.wall_ns)))


def detect(ctx, scope):
    """The launch."""
    v = _detect(ctx) if scope.launch else None
    return [v] if v is not None else []


KIND = Kind(NAME, "the largest part of the critical path", (CriticalFigures,), 14, fixed_rank, claim_words, headline,
            no_span, no_roles, None, change=no_change,
            detect=detect)
