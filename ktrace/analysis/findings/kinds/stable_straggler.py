"""stable_straggler: one block finishes a phase last in most of its instances (by its work, or behind by lag
it carries)."""

from __future__ import annotations


from ....core.units import format_ns as _t
from . import late_start
from .base import Kind, instance_keys, last_block_extent
from . import last_finisher
from .last_finisher_figures import StragglerFigures
from ...replay.change import Change

NAME = "stable_straggler"


def lead(v) -> float | None:
    if v.figures.get("cause") == "lag":
        return late_start.KIND.rank + 0.5  # behind by lag it carries: a late start leads, if there is one
    return None


def short(v) -> str:
    g = v.figures
    return f"{v.phase}: last in {g.get('top_last_count')} of {g.get('instances')} instances"


def headline(f, v):
    g = f.figures
    who = v.who(g.get("block", g.get("top_last_block")), g.get("group"))
    text = (f"{who} finishes {f.phase} last in {g['top_last_count']} of {g['instances']} instances "
            f"({_t(g['mean_work_excess_ns'])} over the median)")
    if g.get("waited_at"):
        text += "; the others wait"
    return text, f"give {who} less of the {f.phase} work, or split its items"


def roles(f, fig, mine, tick_ns):
    b = f.figures.get("block")
    inst = fig.instances
    return [] if b is None else instance_keys(inst, mine & (inst.last_block == b), "straggler")


def change(v):
    """The block's slices of the phase cut to their instance's median (a straggler by its work)."""
    g = v.figures
    if v.phase is None or g.get("cause") not in ("work", "both"):
        return None
    return Change(straggler_to_median=((v.phase, int(g["block"])),))


def detect(ctx, scope):
    """The phase's last finisher, where it is this kind (kinds/last_finisher.py)."""
    return last_finisher.of_kind(ctx, scope, NAME, StragglerFigures)


KIND = Kind(NAME, "one block finishes the phase last in most instances", (StragglerFigures,), 1, lead, short,
            headline, last_block_extent, roles, "last_lead_us", change=change,
            detect=detect)
