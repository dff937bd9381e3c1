"""The persistent kernel's driver, shared by imbalance.py (one slow block) and moving_straggler.py (the slow
block moves each iteration)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ktrace.capture import BUFFER, Kernel, device, profile
from sample_checks import decode_saved, duration_ratio, last_finishers, sm_field_checks, summary_line

HERE = Path(__file__).resolve().parent
ITERS = 8
COMPUTE_BASE = 8000  # dependent FMAs per thread in 'compute'
SLOW_MULT = 3
LOAD_BYTES = 65536  # per block per iteration
THREADS = 128
EVENTS = ["load", "compute", "reduce"]


def run_persistent(name: str, slow_block: int, slow_step: int, description: str) -> None:
    import pycuda.gpuarray as gpuarray

    dev = device()
    nb = dev.multiprocessors
    # More than half an SM's shared memory: one block per SM, so all blocks are resident for the barrier.
    smem = min(153600, dev.max_shared_per_block_optin)
    load_n4 = LOAD_BYTES // 16
    kern = Kernel.from_file(HERE / "persistent.cu", "persistent_phases", shared_bytes=smem)
    rng = np.random.default_rng(0)
    bar = gpuarray.zeros(3, np.uint32)
    src = gpuarray.to_gpu(rng.random(nb * load_n4 * 4, dtype=np.float32))
    out = gpuarray.zeros(ITERS, np.float32)
    smid = gpuarray.zeros(nb, np.int32)
    args = [BUFFER, bar, src, out, smid, np.int32(ITERS), np.int32(load_n4), np.int32(COMPUTE_BASE),
            np.int32(SLOW_MULT), np.int32(slow_block), np.int32(slow_step)]
    capacity = 6 * ITERS + 4  # a few spare slots per lane

    def reset():
        bar.fill(np.uint32(0))

    cap = profile(kern, grid=(nb, 1, 1), block=(THREADS, 1, 1), args=args, shared_bytes=smem,
                  max_events_per_lane=capacity, event_names=EVENTS, name=name, before_capture=reset)
    if int(bar.get()[2]):
        raise SystemExit(f"{name}: a block gave up waiting at the grid barrier: the {nb} blocks were not all "
                         "resident at once (is another kernel using the GPU?)")
    slow = [(slow_block + it * slow_step) % nb for it in range(ITERS)]
    block_smid = smid.get().tolist()
    cap.meta.update(
        block_smid=block_smid,
        group_of_thread="0 (single group; write predicate threadIdx.x == 0)",
        ground_truth={
            "description": description,
            "iterations": ITERS,
            "phases_per_iter": EVENTS,
            "slow_block_per_iter": slow,
            "compute_work_multiplier_slow": SLOW_MULT,
            "compute_iters_base": COMPUTE_BASE,
            "load_bytes_per_block": LOAD_BYTES,
            "barrier_wait_inside_probes": False,
            "expected_record_sequence_per_lane": "(load B, load E, compute B, compute E, reduce B, reduce E) x 8",
        },
    )
    cap.save()
    d = decode_saved(cap)
    last = last_finishers(d, EVENTS.index("compute"), ITERS)
    ratios = [duration_ratio(d, EVENTS.index("compute"), k, slow[k]) for k in range(ITERS)]
    checks = sm_field_checks(cap.words, capacity, nb, 1, block_smid)
    checks.update(
        last_compute_finisher_per_iter=last,
        expected_last_compute_finisher_per_iter=slow,
        last_finisher_matches_ground_truth=last == slow,
        slow_block_compute_duration_over_median_others=[round(r, 4) for r in ratios],
        slices=len(d.slices),
        overflow_records=int(cap.overflow.sum()) if cap.overflow is not None else None,
    )
    cap.meta["checks"] = checks
    cap.save()
    print(summary_line(cap))
    hits = sum(a == b for a, b in zip(last, slow))
    moving = len(set(slow)) > 1
    who = f"the slow block (moving: {slow})" if moving else f"slow block {slow[0]}"
    print(f"{name}: {who} finished 'compute' last in {hits}/{ITERS} iterations; its compute took "
          f"{np.nanmedian(ratios):.2f}x the median of the other blocks")
