"""untimed_work: regular gaps inside each lane between two phases that no other lane's end releases: work
the probes do not cover."""

from __future__ import annotations

from ....core.units import format_ns as _t
from .base import Kind, no_detect, claim_words, fixed_rank, no_roles, no_span, ok, stake_checks
from .wait_figures import WaitFigures
from ...replay.change import Change

NAME = "untimed_work"


def headline(f, v):
    g = f.figures
    share = g.get("lane_time_fraction")
    share = f", {share:.0%} of the {v.unit}s' time" if ok(share) else ""
    return (f"{_t(g['mean_ns'])} of unprofiled work in each {v.unit} between {f.phase} and {g['next_phase']}{share}",
            "put a probe around it, or count it in the phase it belongs to")


def change(v):
    """The lanes' own gaps at the boundary removed: the untimed work counted in no phase."""
    return Change(no_gap=((v.phase, v.figures["next_phase"]),)) if v.phase is not None else None


KIND = Kind(NAME, "regular gaps of each lane's own between two phases: work the probes miss", (WaitFigures,), 9,
            fixed_rank, claim_words, headline, no_span, no_roles, None, change=change,
            checks=stake_checks("wait"),
            detect=no_detect)
