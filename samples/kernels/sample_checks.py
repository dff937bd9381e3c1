"""Ground-truth checks shared by the sample drivers: what the buffer holds, read straight from its words
(independently of ktrace's decoder), and per-phase last finishers from the decoded slices."""

from __future__ import annotations

import numpy as np

import ktrace


def record_grid(words: np.ndarray, capacity: int, lanes: int) -> np.ndarray:
    """The record slots as [k, lane] (record k of each lane)."""
    return words[1:1 + capacity * lanes].reshape(capacity, lanes)


def sm_field_checks(words, capacity: int, num_blocks: int, num_groups: int, block_smid) -> dict:
    """How the tags' SM byte compares with each block's true SM (read by the kernel with %smid)."""
    rec = record_grid(words, capacity, num_blocks * num_groups)
    nz = rec != 0
    block = np.arange(num_blocks * num_groups) // num_groups
    true_sm = np.asarray(block_smid, dtype=np.int64)[block][None, :]
    sm = ((rec & np.uint64(0xFFFFFFFF)) >> np.uint64(24)).astype(np.int64)
    blk = ((rec >> np.uint64(12)) & np.uint64(0xFFF)).astype(np.int64)
    eq = nz & (sm == true_sm)
    high = np.broadcast_to(block[None, :] >= 4096, rec.shape)
    return {
        "nonzero_records": int(nz.sum()),
        "sm_field_equals_true_smid": int(eq.sum()),
        "sm_field_differs": int((nz & ~eq).sum()),
        "sm_field_differs_blocks_ge_4096": int((nz & ~eq & high).sum()),
        "blk_field_equals_block_idx_mod_4096": int((nz & (blk == (block[None, :] & 0xFFF))).sum()),
        "true_smid_distinct": int(len(np.unique(block_smid))),
    }


def records_per_lane(words, capacity: int, lanes: int) -> np.ndarray:
    return (record_grid(words, capacity, lanes) != 0).sum(axis=0)


def last_finishers(d, event: int, iterations: int) -> list[int]:
    """For each instance k of ``event``: the block whose slice ends last (ties: the lowest block)."""
    s = d.slices
    out = []
    for k in range(iterations):
        m = (s.event == event) & (s.k == k)
        if not m.any():
            out.append(-1)
            continue
        end, block = s.end_ns[m], s.block[m]
        out.append(int(block[end == end.max()].min()))
    return out


def duration_ratio(d, event: int, k: int, block: int) -> float:
    """The slice of ``block`` in instance k of ``event`` over the median of the other blocks' slices."""
    s = d.slices
    m = (s.event == event) & (s.k == k)
    dur, blk = s.dur_ns[m], s.block[m]
    others = dur[blk != block]
    mine = dur[blk == block]
    if not len(mine) or not len(others) or np.median(others) <= 0:
        return float("nan")
    return float(mine[0] / np.median(others))


def decode_saved(cap):
    """Decode the capture's saved buffer with its sidecar."""
    return ktrace.decode(cap.paths["bin"])


def summary_line(cap) -> str:
    t = cap.timing
    timing = ""
    if t is not None:
        timing = (f"; unprofiled {t.without_profiler.median_us:.2f} us, profiled {t.with_profiler.median_us:.2f} us "
                  f"(x{t.overhead_ratio:.4f})")
    return f"{cap.name} [{cap.producer} header]: {cap.records:,} records{timing}"
