"""rotating_imbalance: in most instances one lane is long, a different one each time."""

from __future__ import annotations


from ....core.units import format_ns as _t
from .base import Kind, claim_words, fixed_rank, no_roles, no_span
from . import last_finisher
from .last_finisher_figures import RotatingFigures
from ...replay.change import Change

NAME = "rotating_imbalance"


def headline(f, v):
    g = f.figures
    return (f"in {g['long_instances']} of {g['instances']} instances one {v.unit} runs {f.phase} "
            f"{_t(g['mean_work_excess_ns'])} long, a different one each time ({g['distinct_last_blocks']} blocks)",
            "balance the work of each iteration across the blocks")


def change(v):
    """Every slice of the phase cut to its instance's median."""
    return Change(straggler_to_median=((v.phase, None),)) if v.phase is not None else None


def detect(ctx, scope):
    """The phase's last finisher, where it is this kind (kinds/last_finisher.py)."""
    return last_finisher.of_kind(ctx, scope, NAME, RotatingFigures)


KIND = Kind(NAME, "one lane is long in most instances, a different one each time", (RotatingFigures,), 4, fixed_rank,
            claim_words, headline, no_span, no_roles, "end_skew_us", change=change,
            detect=detect)
