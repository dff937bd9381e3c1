"""start_skew: a phase's wall exceeds its slowest lane's time because its lanes begin apart; the cause names
why (a barrier's slow release, the launch, waves, carried over, nested, unexplained)."""

from __future__ import annotations


import numpy as np

from ..phase_shape import carried, incoming_causes
from ..verdict import Verdict, fmt as _fmt
from . import large_wait, late_start
from ...model.barrier import tight_release_ns
from .base import Kind, KindFigures, fixed_rank, no_roles, one_instance, optional
from ....core.records import frozen

NAME = "start_skew"


@frozen(kw_only=True)
class SkewFigures(KindFigures):
    mean_excess_ns: float
    mean_wall_ns: float
    excess_fraction: float
    mean_start_skew_ns: float
    mean_end_skew_ns: float
    max_excess_ns: float
    sync_instances: int
    wave_instances: int
    incoming_waits: list
    tick_ns: float
    cause: str  # 'waves', 'sync_release', 'carried_over', 'nested', 'launch' or 'unexplained'
    barrier_floor_ns: float | None = optional(None)  # the tightest grid barrier's release on this GPU


def short(v) -> str:
    g = v.figures
    return f"{v.phase}: begins {_fmt(g['mean_start_skew_ns'])} apart ({g.get('cause')})"


def headline(f, v):
    g = f.figures
    text = (f"{f.phase}: {v.unit}s begin up to {_fmt(g['mean_start_skew_ns'])} apart, so the phase takes "
            f"{_fmt(g['mean_excess_ns'])} longer than its slowest {v.unit}")
    cause = g.get("cause")
    if cause == "sync_release":  # the barrier's release staggers the begins: the barriers' cost, said as such
        phases = [f.phase] + [c["phase"] for c in g.get("consequences", []) if c["kind"] == NAME
                              and c["phase"] != f.phase]
        where = ", ".join(phases[:3]) + (f" and {len(phases) - 3} more" if len(phases) > 3 else "")
        return (f"the grid-wide barrier's release staggers the {v.unit}s' begins by up to "
                f"{_fmt(g['mean_start_skew_ns'])} (before {where})",
                f"use fewer barriers, or a cheaper one (one that releases every {v.unit} at once)")
    if cause == "launch":
        return text, f"find what delays some {v.unit}s' start (their launch, their SM, work before the first probe)"
    return text, ""


def span(f, fig, mine):
    """The instance with the most excess (wall - slowest slice)."""
    return one_instance(fig.instances, mine, fig.instances.excess_ns)


# -- what it detects ---------------------------------------------------------------------------------

def _detect(ctx, p, inst, on_path) -> Verdict | None:
    th, eps = ctx.th, ctx.eps
    n = p["instances"]
    mean_wall = p["sum_wall_ns"] / n if n else 0.0
    excess = p["mean_excess_ns"]
    if not mean_wall or excess < eps or excess / mean_wall <= th.excess_fraction:
        return None
    skew = p["mean_start_skew_ns"]
    late = np.minimum(inst.excess_ns, np.maximum(inst.last_begin_ns - inst.begin_ns, 0))
    claims = ctx.claim_before(p["phase"], inst.k, late)
    with_prev = inst.prev_lanes > 0
    spread = (inst.lead_in_max_ns - inst.lead_in_min_ns)[with_prev]
    incoming = incoming_causes(ctx, p["phase"])
    figs = dict(mean_excess_ns=excess, mean_wall_ns=mean_wall, excess_fraction=excess / mean_wall,
                mean_start_skew_ns=skew, mean_end_skew_ns=p["mean_end_skew_ns"], max_excess_ns=p["max_excess_ns"],
                sync_instances=p["sync_instances"], wave_instances=p["wave_instances"],
                incoming_waits=sorted(incoming), tick_ns=ctx.tick)
    label, warn = ctx.label(p), True
    head = f"{label}: wall time exceeds the slowest lane's time by {_fmt(excess)} per instance ({excess / mean_wall:.0%})"
    if p["wave_instances"]:
        cause, claims, warn = "waves", None, False
        msg = (f"{head}: its lanes ran in waves (blocks of later waves began after another block on their SM had "
               f"finished), so begins spread over {_fmt(skew)}; not a synchronization: see the tail finding")
        ev = f"{p['wave_instances']} of {n} instances hold blocks of a later wave"
    elif with_prev.any() and "grid" in incoming:
        cause = "sync_release"  # a release only where a grid-wide barrier is evidenced
        # only the release beyond the tightest grid barrier's on this GPU is a cheaper barrier's to save (large_wait)
        floor = tight_release_ns(getattr(ctx.fig, "launch", None)) or 0.0
        claims = np.minimum(claims, np.maximum(ctx.cp.dur_ns.astype(np.float64) - floor, 0.0))
        what = "grid-wide barrier"
        msg = (f"{head}: a slow release after the {what} before it: every lane waits for the previous phase's "
               f"last finisher, then begins up to {_fmt(skew)} apart")
        ev = (f"the waits into this phase are a {what} (docs: what a wait waited for); in {p['sync_instances']} of "
              f"{n} instances every lane began after the previous instance's last end")
    elif carried(ctx, p, inst):
        cause, claims, warn = "carried_over", None, False
        msg = (f"{head}: lanes begin right after their own previous slice, so the start skew ({_fmt(skew)}) is "
               "carried over from the previous phase's ends; its cause is upstream")
        ev = (f"no barrier evidenced before it; lead-in spread {_fmt(float(np.nan_to_num(spread).mean()))} <= half "
              f"the start skew {_fmt(skew)}")
    elif p["depth"] > 0:
        cause, claims, warn = "nested", None, False
        msg = (f"{head}: a nested phase: its begins follow its parent slices' ({_fmt(skew)} apart); judge the skew "
               "on the top-level phase")
        ev = f"depth {p['depth']}: inside another phase on every lane"
    elif not with_prev.any():
        cause = "launch"
        msg = f"{head}: the lanes' first phase begins spread over {_fmt(skew)}: blocks start at different times"
        ev = "no lane ran anything before this phase"
    else:
        cause, warn = "unexplained", False  # no cause evidenced: information, not a verdict to act on
        what = ", ".join(sorted(incoming)) or "none"
        msg = (f"{head}: begins spread over {_fmt(skew)} with no barrier evidenced and uneven gaps before the phase "
               f"(the gaps before it: {what}; see the wait findings)")
        ev = f"lead-in spread {_fmt(float(np.nan_to_num(spread).mean()))}"
    impact = float(claims.sum()) if claims is not None else 0.0
    key = "grid barrier" if cause == "sync_release" and "grid" in incoming else None
    if key is not None:
        figs["barrier_floor_ns"] = tight_release_ns(getattr(ctx.fig, "launch", None))
    return Verdict(NAME, p["phase"], msg, ev, impact, warn, SkewFigures(**figs, cause=cause), claims, key)


def detect(ctx, scope):
    """A phase whose instances line up: its lanes' begins apart."""
    if scope.phase is None or not scope.lined_up:
        return []
    v = _detect(ctx, scope.phase, scope.inst, scope.on_path)
    return [v] if v is not None else []


def link(ctx, scope, v, found) -> None:
    """A start skew whose late lane is the phase's late starter (after the launch, or unexplained) is the late
    start's."""
    if v.figures.get("cause") not in ("launch", "unexplained"):
        return
    for o in found:
        if o.kind == late_start.NAME:
            v.cause = o.cause


KIND = Kind(NAME, "a phase's lanes begin apart, so its wall exceeds its slowest lane", (SkewFigures,), 12, fixed_rank,
            short, headline, span, no_roles, "excess_us", change=large_wait.change,
            detect=detect, link=link)
