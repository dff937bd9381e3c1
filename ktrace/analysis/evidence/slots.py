"""Occupancy by slots: how many blocks an SM held at once (measured from the timeline), the slot time used over
the wall, waves counted in slots, and what a partial last wave costs (docs/analysis-structure.md, "Slots").

An SM's blocks are counted from each block's first and last record and its SM (the ``Blocks`` table): the
most blocks one SM ran at the same time is the launch's resident blocks per SM (the most common such maximum
over the SMs, so that one SM's overlap of a finishing and a starting block does not count). Slots = SMs x
resident blocks per SM.
"""

from __future__ import annotations

import math

import numpy as np

from ..model.results import Blocks
from .keyed import run_starts

__all__ = ["slot_figures", "UNIFORM_RATIO"]

UNIFORM_RATIO = 1.5  # blocks are uniform when the p90 block lasts at most this many times the median


def _per_sm_max(sm: np.ndarray, begin: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per SM (in sorted order): the most blocks it ran at once (an end at t frees the slot before a begin at t)."""
    if not len(sm):
        return np.zeros(0, np.int64)
    ts = np.r_[begin, end]
    delta = np.r_[np.ones(len(begin), np.int64), -np.ones(len(end), np.int64)]
    s = np.r_[sm, sm]
    order = np.lexsort((delta, ts, s))
    s, delta = s[order], delta[order]
    run = np.cumsum(delta)
    starts = run_starts(s)
    base = np.r_[0, run[starts[1:] - 1]]  # the running sum carried in from the SMs before
    level = run - np.repeat(base, np.diff(np.r_[starts, len(s)]))
    return np.maximum.reduceat(level, starts)


def slot_figures(bl: Blocks, kernel_begin, kernel_end) -> dict:
    """The slot figures of the launch (ns, fractions); {} without blocks of a known SM.

    The slots are measured on the blocks of a known SM; a block whose SM is unknown (sm = -1: an SM id the
    tag cannot tell, as FlashInfer's past block 4095) still ran in one of them, so it counts among the blocks,
    the waves and the busy slot time."""
    ran = bl.dur_ns > 0
    known = (bl.sm >= 0) & ran
    if not known.any() or kernel_begin is None or kernel_end is None or kernel_end <= kernel_begin:
        return {}
    sm, begin, end = bl.sm[known], bl.begin_ns[known], bl.end_ns[known]
    per_sm = _per_sm_max(sm, begin, end)
    values, counts = np.unique(per_sm, return_counts=True)
    resident = int(values[np.argmax(counts)]) if len(values) else 0
    resident = max(resident, 1)
    sms = len(per_sm)
    slots = sms * resident
    blocks = int(ran.sum())
    wall = int(kernel_end - kernel_begin)
    dur = (bl.end_ns[ran] - bl.begin_ns[ran]).astype(np.float64)
    busy = float(dur.sum())
    waves = blocks / slots
    full = math.floor(waves + 1e-9)
    fill = waves - full
    d = np.sort(dur)
    median = float(d[(len(d) - 1) // 2])
    p90 = float(d[int(0.9 * (len(d) - 1))])
    uniform = median > 0 and p90 <= UNIFORM_RATIO * median
    ideal = busy / slots
    # A partial last wave of uniform blocks: the wall holds ceil(waves) block times where waves would do.
    quant = 0.0
    if waves > 1.0 and 1e-9 < fill < 1.0 - 1e-9:
        quant = min(max(wall - ideal, 0.0), (math.ceil(waves) - waves) * median)
    return {"sms": sms, "resident_per_sm": resident, "resident_per_sm_max": int(per_sm.max()), "slots": slots,
            "blocks": blocks, "waves": waves, "full_waves": full, "last_wave_fill": fill if waves > 1 else 1.0,
            "slot_busy_ns": int(busy), "slot_busy_fraction": busy / (slots * wall), "ideal_wall_ns": ideal,
            "median_block_dur_ns": median, "p90_block_dur_ns": p90, "uniform_blocks": bool(uniform),
            "quantization_ns": quant}
