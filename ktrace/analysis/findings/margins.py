"""Calibrated thresholds: a warning clears its threshold by more than its figure's run-to-run noise.

A finding that would warn is checked on the figures its rule compares with a threshold: its impact against the
impact floor (``min_impact`` of the wall, ``min_ticks``; a tail's against ``tail_share``), a load imbalance's
ratio against ``imbalance``, a wait's share of all lanes' time against ``wait_fraction``. Each must exceed its
threshold by more than the noise margin of its family (``model.thresholds.margin_of`` over the noise model that
``scripts/build_noise_model.py`` measured on the same-input runs in samples/, widened by the user's own runs
with ``--runs``). A finding that does not is info, marked ``figures.marginal`` (docs/analysis-schema.md,
"Calibrated thresholds"): a verdict a rerun could flip is not one to act on.
"""

from __future__ import annotations

from ..model.thresholds import margin_of, shipped_noise
from . import kinds

__all__ = ["marginal"]

_WAITS = (kinds.LARGE_WAIT, kinds.UNTIMED_WORK, kinds.PIPELINE)  # their stakes move as the waits do


def _checks(fig, kind: str, g: dict, phase, impact: float, th, tick: float, wall: float) -> list[tuple]:
    """(figure, value, threshold, family, ns per unit, kernel ns per unit) of what the finding's rule compares."""
    floor = max(th.min_impact * wall, th.min_ticks * tick)
    if kind == kinds.TAIL:
        floor = max(floor, th.tail_share * wall)
    # the stake moves as the kernel's wall does between runs; a wait's, as the waits do
    out = [("impact_ns", impact, floor, "wait" if kind in _WAITS else "kernel_wall", 1.0, 1.0)]
    imb = g.get("imbalance")
    if kind == kinds.LOAD_IMBALANCE and isinstance(imb, (int, float)):
        if g.get("basis") == "lane_totals":
            unit = float(g.get("mean_lane_total_ns") or 0)
            out.append(("imbalance", float(imb), th.imbalance, "imbalance", unit, unit))
        elif phase is not None:
            rows = [r for r in fig.phases.rows() if r["phase"] == phase]
            if rows and rows[0].get("mean_dur_ns"):
                unit = float(rows[0]["mean_dur_ns"])
                out.append(("imbalance", float(imb), th.imbalance, "imbalance", unit,
                            unit * float(g.get("instances") or rows[0].get("instances") or 1)))
    share = g.get("lane_time_fraction")
    if kind in _WAITS and isinstance(share, (int, float)) and share > 0 and g.get("sum_ns"):
        lane_time = float(g["sum_ns"]) / float(share)  # all lanes' time: the unit of the share
        out.append(("lane_time_fraction", float(share), th.wait_fraction, "wait", lane_time, wall))
    return out


def marginal(fig, kind: str, figures: dict, phase, impact: float, th, tick: float, noise: dict | None = None):
    """The first check a would-be warning fails by less than the noise, as ``{"figure", "value", "threshold",
    "margin", "basis"}``; None when it clears every one (or nothing is modelled)."""
    wall = float(fig.kernel.wall_ns or 0)
    if not wall:
        return None
    noise = shipped_noise() if noise is None else noise
    for name, value, threshold, family, unit, per in _checks(fig, kind, figures, phase, impact, th, tick, wall):
        bound = noise.get(family)
        if bound is None or not unit:
            continue
        margin, basis = margin_of(bound, value, tick, unit, per, wall)
        if value - threshold <= margin:
            return {"figure": name, "value": value, "threshold": threshold, "margin": margin, "basis": basis}
    return None
