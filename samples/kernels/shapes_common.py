"""What the shape drivers (waves.py, straggler_change.py, worklist.py, nested.py, late_start.py) share: the
ground-truth arrays each kernel fills apart from the profiler (every block's %smid and its 64-bit
%globaltimer when thread 0 starts and ends the block), their sidecar entries, and the checks that the decoded
capture agrees with them.

Every driver takes ``--name NAME`` (the captures' stem), like the persistent drivers."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from ktrace.capture import device
from sample_checks import decode_saved, sm_field_checks

HERE = Path(__file__).resolve().parent
THREADS = 128
WRAP = 1 << 32


def parse_name(default: str) -> str:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default=default, help=f"the captures' stem (default {default})")
    return ap.parse_args().name


def one_block_per_sm_smem() -> int:
    """Dynamic shared memory above half an SM's: one block per SM."""
    return min(153600, device().max_shared_per_block_optin)


class BlockClock:
    """The device arrays a shape kernel fills: begin_ns, end_ns (uint64 %globaltimer, thread 0, before the
    block's first probe and after its last) and smid (int32 %smid), one entry per block."""

    def __init__(self, blocks: int):
        import pycuda.gpuarray as gpuarray

        self.blocks = blocks
        self.begin = gpuarray.zeros(blocks, np.uint64)
        self.end = gpuarray.zeros(blocks, np.uint64)
        self.smid = gpuarray.zeros(blocks, np.int32)

    @property
    def args(self) -> list:
        return [self.begin, self.end, self.smid]

    def reset(self) -> None:
        self.begin.fill(np.uint64(0))
        self.end.fill(np.uint64(0))
        self.smid.fill(np.int32(-1))

    def read(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (self.begin.get().astype(np.int64), self.end.get().astype(np.int64),
                self.smid.get().astype(np.int64))


def clock_truth(begin: np.ndarray, end: np.ndarray, smid: np.ndarray) -> dict:
    """The ground-truth entries every shape's sidecar carries, from the 64-bit clock (absolute ns)."""
    per_sm = np.bincount(smid, minlength=int(smid.max()) + 1)
    return {
        "block_begin_ns": begin.tolist(),
        "block_end_ns": end.tolist(),
        "clock": "%globaltimer (64-bit, Unix-epoch ns), read by thread 0 into its own device arrays: at block "
                 "start before the first probe, at block end after the last",
        "first_block_by_clock": int(np.argmin(begin)),
        "last_block_by_clock": int(np.argmax(end)),
        "kernel_span_ns_by_clock": int(end.max() - begin.min()),
        "blocks_per_sm_observed_max": int(per_sm.max()),
        "sms_used": int((per_sm > 0).sum()),
    }


def block_extents(d, blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """Each block's first decoded begin and last decoded end (trace axis); -1 where it has no slice."""
    s = d.slices
    first = np.full(blocks, np.iinfo(np.int64).max)
    last = np.full(blocks, np.iinfo(np.int64).min)
    np.minimum.at(first, s.block, s.begin_ns)
    np.maximum.at(last, s.block, s.end_ns)
    none = np.bincount(s.block, minlength=blocks) == 0
    first[none] = -1
    last[none] = -1
    return first, last


def axis_shift(d, begin: np.ndarray) -> int:
    """What to subtract from the decoded times to put them on the 64-bit clock: 0 when the decoder placed
    them in Unix time (a kernel anchor, or a host clock within 2 s of %globaltimer), else the whole number of
    2^32 ns wraps (or, with no anchor at all, the first record's time) between the two axes."""
    first, _ = block_extents(d, len(begin))
    ok = first >= 0
    if d.time_origin == "first record":
        return int(np.min(first[ok]) - np.min(begin[ok]))  # approximate: the test allows for it
    k = np.round(np.median(first[ok] - begin[ok]) / WRAP)
    return int(k) * WRAP


def clock_checks(cap, d, begin, end, smid, capacity: int) -> dict:
    """The decoded capture against the 64-bit clock and %smid: every block's slices lie within its
    [begin, end], every slice's SM is its block's."""
    nb = len(begin)
    shift = axis_shift(d, begin)
    first, last = block_extents(d, nb)
    has = first >= 0
    first, last = first - shift, last - shift
    inside = has & (first >= begin) & (last <= end)
    s = d.slices
    checks = sm_field_checks(cap.words, capacity, nb, 1, smid)
    checks.update(
        time_origin=d.time_origin,
        decoded_axis_minus_clock_ns=shift,
        blocks_with_slices=int(has.sum()),
        blocks_within_clock=int(inside.sum()),
        all_blocks_within_clock=bool(inside.all()),
        max_first_begin_after_block_begin_ns=int((first - begin)[has].max()) if has.any() else None,
        max_block_end_after_last_end_ns=int((end - last)[has].max()) if has.any() else None,
        decoded_sm_equals_block_smid=bool((s.sm == smid[s.block]).all()),
        last_block_decoded=int(np.argmax(np.where(has, last, np.iinfo(np.int64).min))),
        slices=len(s),
        overflow_records=int(cap.overflow.sum()) if cap.overflow is not None else None,
        anomalies=d.anomalies.counts() if hasattr(d.anomalies, "counts") else None,
    )
    return checks


def last_finishers(d, event: int, iterations: int) -> list[int]:
    from sample_checks import last_finishers as lf

    return lf(d, event, iterations)


def finish(cap, checks: dict, ok: bool, line: str) -> None:
    """Store the checks, save, print one line; a failed check fails the driver (exit status 1) after the
    capture is saved, so it can still be looked at."""
    checks["ground_truth_holds"] = bool(ok)
    cap.meta["checks"] = checks
    cap.save()
    from sample_checks import summary_line

    print(summary_line(cap))
    print(f"{cap.name}: {line}  [{'ok' if ok else 'GROUND TRUTH NOT MET'}]")
    if not ok:
        raise SystemExit(f"{cap.name}: the capture does not show what the kernel was built to show (see checks)")


__all__ = ["HERE", "THREADS", "BlockClock", "block_extents", "clock_checks", "clock_truth", "decode_saved",
           "finish", "last_finishers", "one_block_per_sm_smem", "parse_name"]
