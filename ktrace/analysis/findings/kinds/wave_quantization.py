"""wave_quantization: blocks of about equal length fill the slots in a partial last wave."""

from __future__ import annotations


import numpy as np

from ..verdict import Verdict, fmt as _fmt
from .base import Kind, KindFigures, claim_words, fixed_rank, no_roles, no_span
from ...replay.change import Change
from ....core.records import frozen

NAME = "wave_quantization"


@frozen(kw_only=True)
class WavesFigures(KindFigures):
    """The launch's slot figures (evidence/slots.py: slot_figures)."""

    sms: int
    resident_per_sm: int
    resident_per_sm_max: int
    slots: int
    blocks: int
    waves: float
    full_waves: int
    last_wave_fill: float
    slot_busy_ns: int
    slot_busy_fraction: float
    ideal_wall_ns: float
    median_block_dur_ns: float
    p90_block_dur_ns: float
    uniform_blocks: bool
    quantization_ns: float


def headline(f, v):
    g = f.figures
    return (f"{g['blocks']} blocks fill the {g['slots']} slots {g['waves']:.2f} times: the last wave is "
            f"{g['last_wave_fill']:.0%} full",
            f"make the grid a multiple of {g['slots']} blocks, or use a persistent scheduler")


# -- what it detects ---------------------------------------------------------------------------------

def _detect(ctx) -> Verdict | None:
    s = ctx.slots
    if not s or not s["uniform_blocks"] or s["quantization_ns"] < ctx.eps:
        return None
    q = s["quantization_ns"]
    claims = ctx.claim_last(q)
    wall = float(ctx.fig.kernel.wall_ns or 0)
    msg = (f"waves: {s['blocks']} blocks of about equal length fill {s['slots']} slots ({s['sms']} SMs x "
           f"{s['resident_per_sm']} resident per SM) {s['waves']:.2f} times: the last wave fills "
           f"{s['last_wave_fill']:.0%} of the slots, so the wall holds {int(np.ceil(s['waves']))} block times where "
           f"{s['waves']:.2f} would do ({_fmt(q)}, {q / wall:.0%} of the wall); make the grid a multiple of the "
           f"{s['slots']} slots, or use a persistent scheduler over the work")
    ev = (f"resident blocks per SM measured from the timeline (most blocks one SM ran at once: {s['resident_per_sm']} "
          f"on most SMs); median block {_fmt(s['median_block_dur_ns'])}, p90 {_fmt(s['p90_block_dur_ns'])}; slots busy "
          f"{s['slot_busy_fraction']:.0%} of the wall")
    return Verdict(NAME, None, msg, ev, float(claims.sum()), True, WavesFigures(**s), claims, "waves")


def change(v):
    """The same total work in whole waves: the nearest whole number of waves' blocks (at least one)."""
    g = v.figures
    return Change(blocks=max(int(round(g["waves"])), 1) * int(g["slots"]))


def detect(ctx, scope):
    """The launch."""
    v = _detect(ctx) if scope.launch else None
    return [v] if v is not None else []


KIND = Kind(NAME, "equal blocks fill the slots in a partial last wave", (WavesFigures,), 5, fixed_rank, claim_words,
            headline, no_span, no_roles, None, change=change,
            detect=detect)
