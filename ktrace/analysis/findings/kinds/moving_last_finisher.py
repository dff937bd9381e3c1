"""moving_last_finisher: the last finisher moves and no lane is long or late: contention or synchronization."""

from __future__ import annotations


from .base import Kind, claim_words, first_clause, fixed_rank, no_roles, no_span
from . import last_finisher
from .last_finisher_figures import MovingFigures
from ...replay.change import Change

NAME = "moving_last_finisher"


def headline(f, v):
    return first_clause(f.message), ""


def change(v):
    """Every slice of the phase cut to its instance's median."""
    return Change(straggler_to_median=((v.phase, None),)) if v.phase is not None else None


def detect(ctx, scope):
    """The phase's last finisher, where it is this kind (kinds/last_finisher.py)."""
    return last_finisher.of_kind(ctx, scope, NAME, MovingFigures)


KIND = Kind(NAME, "the last finisher moves with no long or late lane", (MovingFigures,), 11, fixed_rank, claim_words,
            headline, no_span, no_roles, "end_skew_us", change=change,
            detect=detect)
