"""What a decoded part reports beside its events: per-lane notes (full lanes, holes, trailing instants,
partial overlaps, overflow), SM aliasing of blocks past 4095, and the smallest time step."""

from __future__ import annotations

import numpy as np

from ..core.model import Slices
from .unwrap import segment_starts

__all__ = ["EXAMPLES", "lane_notes", "overflow_notes", "aliasing", "min_step"]

EXAMPLES = 3  # lanes (or blocks) named as examples of each note


def lane_notes(launch, lane, seq, rtype, keep, rows: int, rem: int, slices: Slices) -> tuple[dict, dict]:
    """(notes, examples): how many lanes each note applies to, and the first few of them."""
    notes: dict[str, int] = {}
    examples: dict[str, list] = {}
    if len(lane) == 0:
        return notes, examples
    last = np.ones(len(lane), dtype=bool)
    last[:-1] = lane[1:] != lane[:-1]
    cap = rows + (lane[last] < rem)
    full = lane[last][seq[last] == cap - 1]
    # A hole: a lane's records do not fill its first slots contiguously.
    count = np.diff(np.append(np.flatnonzero(segment_starts(lane)), len(lane)))
    holes = lane[last][seq[last] + 1 != count]
    trailing = lane[last][(rtype[last] == 2) & keep[last]] if not launch.instants_advance else lane[:0]
    for key, arr in (("lane_full", full), ("holes", holes), ("trailing_instant", trailing)):
        if len(arr):
            notes[key] = int(len(arr))
            examples[key] = arr[:EXAMPLES].tolist()
    overlap = slices.overlap
    if overlap.any():
        notes["partial_overlap"] = int(np.count_nonzero(overlap))
        examples["partial_overlap"] = slices.lane[overlap][:EXAMPLES].tolist()
    return notes, examples


def overflow_notes(overflow: np.ndarray | None, lo: int, hi: int, notes: dict, examples: dict) -> int:
    """Adds the 'overflow' note for lanes [lo, hi) from the trailer's counts (when the buffer has one);
    returns the records they dropped."""
    if overflow is None:
        return 0
    over = overflow[lo:hi]
    lanes_over = np.flatnonzero(over) + lo
    if not len(lanes_over):
        return 0
    notes["overflow"] = int(len(lanes_over))
    examples["overflow"] = lanes_over[:EXAMPLES].tolist()
    return int(over.sum())


def aliasing(lay, block, sm, keep, nb) -> dict:
    """For the current FlashInfer layout past 4096 blocks: blocks whose SM byte was repaired or is untrusted."""
    if lay.name != "flashinfer" or nb <= 4096:
        return {}
    al = keep & (block >= 4096)
    blocks = np.unique(block[al])
    bad = np.unique(block[al & (sm < 0)])
    return {
        "blocks_over_4095": int(len(blocks)),
        "sm_repaired_blocks": int(len(blocks) - len(bad)),
        "sm_untrusted_blocks": int(len(bad)),
        "untrusted_examples": bad[:EXAMPLES].tolist(),
    }  # counts add up across parts: a block's lanes are never split between parts


def min_step(lane: np.ndarray, t: np.ndarray) -> int | None:
    """The smallest positive step (ns) between consecutive records of one lane; None without one."""
    if len(t) < 2:
        return None
    d = np.diff(t)
    top = np.iinfo(d.dtype).max
    d[(d <= 0) | (lane[1:] != lane[:-1])] = top  # steps across lanes, and none, do not count
    m = int(d.min())
    return None if m == top else m
