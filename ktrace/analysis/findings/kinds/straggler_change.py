"""straggler_change: the phase's last finisher is stable within segments of the run, a different block in each."""

from __future__ import annotations


from .base import Kind, claim_words, extent, fixed_rank, instance_keys
from . import last_finisher
from .last_finisher_figures import StragglerChangeFigures
from ...replay.change import Change

NAME = "straggler_change"


def headline(f, v):
    segs = f.figures["segments"]
    parts = [f"{v.who(s['block'], s.get('group'))} (k {s['first_k']}-{s['last_k']})" for s in segs[:2]]
    more = f" and {len(segs) - 2} more" if len(segs) > 2 else ""
    return (f"the {v.unit} that finishes {f.phase} last changes: " + ", then ".join(parts) + more,
            "even out each one's share of the work at those iterations")


def span(f, fig, mine):
    segs, inst = f.figures.get("segments"), fig.instances
    if not segs:
        return None
    return extent(inst, mine & (inst.k >= min(s["first_k"] for s in segs)) & (inst.k <= max(s["last_k"] for s in segs)))


def roles(f, fig, mine, tick_ns):
    inst, out = fig.instances, []
    for s in f.figures.get("segments") or ():
        out += instance_keys(inst, mine & (inst.last_block == s["block"]) & (inst.k >= s["first_k"]) &
                             (inst.k <= s["last_k"]), "straggler")
    return out


def change(v):
    """Every slice of the phase cut to its instance's median."""
    return Change(straggler_to_median=((v.phase, None),)) if v.phase is not None else None


def detect(ctx, scope):
    """The phase's last finisher, where it is this kind (kinds/last_finisher.py)."""
    return last_finisher.of_kind(ctx, scope, NAME, StragglerChangeFigures)


KIND = Kind(NAME, "the phase's stable straggler changes during the run", (StragglerChangeFigures,), 3, fixed_rank,
            claim_words, headline, span, roles, "end_skew_us", change=change,
            detect=detect)
