"""idle_lanes: lanes of a phase's warp groups that never ran it while the others did."""

from __future__ import annotations


from ..verdict import Verdict
from .base import Kind, KindFigures, fixed_rank, no_roles, no_span
from ....core.records import frozen
from ...replay.change import Change

NAME = "idle_lanes"


@frozen(kw_only=True)
class IdleFigures(KindFigures):
    idle_lanes: int
    lanes: int
    idle: list  # [block, group] of the idle lanes, at most 64


def short(v) -> str:
    g = v.figures
    return f"{v.phase}: {g['idle_lanes']} of {g['idle_lanes'] + g['lanes']} lanes never ran it"


def headline(f, v):
    g = f.figures
    n = g["idle_lanes"]
    return (f"{n} of {n + g['lanes']} {v.unit}s never run {f.phase} while the others do",
            f"give them a share of the {f.phase} work")


# -- what it detects ---------------------------------------------------------------------------------

def _detect(ctx, p) -> Verdict | None:
    if not p["idle_lanes"]:
        return None
    fig = ctx.fig
    groups = [int(g) for g in (p["groups"] or "").split(",") if g]
    mine = set(fig.lanes.lane[fig.lanes.phase == p["phase"]].tolist())
    lt = fig.lane_totals
    idle = [(int(b), int(g)) for l, b, g in zip(lt.lane.tolist(), lt.block.tolist(), lt.group.tolist())
            if g in groups and l not in mine]
    total = p["lanes"] + p["idle_lanes"]
    claims = ctx.claim_phase(p["phase"], p["idle_lanes"] / total)
    names = ", ".join(ctx.who(b, g) for b, g in idle[:8])
    more = f" and {len(idle) - 8} more" if len(idle) > 8 else ""
    msg = (f"{ctx.label(p)}: {p['idle_lanes']} of {total} lanes never ran this phase ({names}{more}): capacity "
           "left idle while the others work; give them a share")
    ev = "lanes of the phase's warp groups with slices of other phases and none of this one"
    blocks = sorted({b for b, _ in idle})
    return Verdict(NAME, p["phase"], msg, ev, float(claims.sum()), True,
                   IdleFigures(idle_lanes=p["idle_lanes"], lanes=p["lanes"], idle=[list(x) for x in idle[:64]]), claims,
                   "idle blocks " + ",".join(map(str, blocks[:64])))  # the same idle blocks in every phase: one cause


def change(v):
    """The phase (and the phases the same lanes never ran, its consequences) spread over every lane of its warp
    groups."""
    if v.phase is None:
        return None
    extra = {c["phase"] for c in v.figures.get("consequences", []) if c["kind"] == NAME and c["phase"] is not None}
    return Change(spread=tuple(sorted({v.phase, *extra})))


def detect(ctx, scope):
    """A phase: lanes of its warp groups that never ran it."""
    v = _detect(ctx, scope.phase) if scope.phase is not None else None
    return [v] if v is not None else []


def grouped_short(v):
    """The same lanes idle in several phases: one consequence naming the phases."""
    g = v.figures
    n = (g.idle_lanes, g.idle_lanes + g.lanes)

    def render(phases) -> str:
        names = ", ".join(phases[:3]) + (f" and {len(phases) - 3} more" if len(phases) > 3 else "")
        return f"{names}: {n[0]} of {n[1]} lanes never ran {'them' if len(phases) > 1 else 'it'}"
    return (NAME, n), render


KIND = Kind(NAME, "lanes of the phase's warp groups never ran it", (IdleFigures,), 13, fixed_rank, short, headline,
            no_span, no_roles, None, change=change,
            detect=detect, grouped_short=grouped_short)
