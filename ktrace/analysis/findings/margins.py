"""Calibrated thresholds: a warning's stake clears its floor by more than its run-to-run noise.

A finding that would warn is checked on its stake (``impact_ns``): against the impact floor (``min_impact`` of
the wall, ``min_ticks``), or the floor its kind sets (``Kind.checks``: a tail's ``tail_share`` of the wall), by more
than the noise margin of the stake's family (the kind's: the kernel's wall, or the waits for a stake that moves
as the waits do; ``model.thresholds.margin_of`` over the noise model that ``scripts/build_noise_model.py``
measured on the same-input runs in samples/, widened by the user's own runs with ``--runs``). A finding that
does not is info, marked ``figures.marginal`` (docs/analysis-schema.md, "Calibrated thresholds"): a verdict a
rerun could flip is not one to act on. The margin applies to the stake the warning states, not to a side
figure its detector compared (a wait's share of the lanes' time, an imbalance ratio): those decide whether the
cause is there; the stake decides whether it is worth acting on.
"""

from __future__ import annotations

from ..model.thresholds import margin_of, shipped_noise
from . import kinds
from .kinds.base import stake_checks

__all__ = ["marginal"]


def _checks(kind: str, impact: float, th, tick: float, wall: float) -> list[tuple]:
    """(figure, value, threshold, family, ns per unit, kernel ns per unit) of the stake: its kind's checks."""
    k = kinds.get(kind)
    family, floor = (k.checks if k is not None else stake_checks())(th, tick, wall)
    return [("impact_ns", impact, floor, family, 1.0, 1.0)]


def marginal(fig, kind: str, figures: dict, phase, impact: float, th, tick: float, noise: dict | None = None):
    """The first check a would-be warning fails by less than the noise, as ``{"figure", "value", "threshold",
    "margin", "basis"}``; None when it clears every one (or nothing is modelled)."""
    wall = float(fig.kernel.wall_ns or 0)
    if not wall:
        return None
    noise = shipped_noise() if noise is None else noise
    for name, value, threshold, family, unit, per in _checks(kind, impact, th, tick, wall):
        bound = noise.get(family)
        if bound is None or not unit:
            continue
        margin, basis = margin_of(bound, value, tick, unit, per, wall)
        if value - threshold <= margin:
            return {"figure": name, "value": value, "threshold": threshold, "margin": margin, "basis": basis}
    return None
