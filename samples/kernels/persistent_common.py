"""The persistent kernel's driver, shared by imbalance.py (one slow block), moving_straggler.py (the slow
block moves each iteration) and balanced.py (the slow block's extra compute spread over all blocks).

Every driver takes ``--name NAME`` (the captures' stem; ``ktrace run --device 0,1`` adds ``_gpu<i>``)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from ktrace.capture import BUFFER, CudaKernel, device, profile
from sample_checks import decode_saved, duration_ratio, last_finishers, sm_field_checks, summary_line

HERE = Path(__file__).resolve().parent
ITERS = 8
COMPUTE_BASE = 8000  # dependent FMAs per thread in 'compute'
SLOW_MULT = 3
LOAD_BYTES = 65536  # per block per iteration
THREADS = 128
EVENTS = ["load", "compute", "reduce"]


def max_over_mean(d, event: int, iterations: int) -> list[float]:
    """For each instance k of ``event``: the longest slice over the mean slice (1.0: perfectly balanced)."""
    s = d.slices
    out = []
    for k in range(iterations):
        dur = s.dur_ns[(s.event == event) & (s.k == k)]
        out.append(float(dur.max() / dur.mean()) if len(dur) and dur.mean() > 0 else float("nan"))
    return out


def _args(default: str, extra_work: bool) -> tuple[str, float]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default=default, help=f"the captures' stem (default {default})")
    if extra_work:
        ap.add_argument("--extra-work", type=float, default=0.0, metavar="PCT",
                        help="PCT percent more compute per block (default 0)")
    a = ap.parse_args()
    return a.name, getattr(a, "extra_work", 0.0)


def run_persistent(name: str, slow_block: int, slow_step: int, description: str, *, spread: bool = False,
                   extra_work: bool = False) -> None:
    """Capture the persistent kernel. slow_block, slow_step: block (slow_block + it * slow_step) % blocks gets
    SLOW_MULT times the compute in iteration it; spread: instead, that extra work ((SLOW_MULT - 1) *
    COMPUTE_BASE FMAs per iteration) is shared evenly by all blocks (same total, to within blocks - 1 FMAs
    per thread), so no block stands out; extra_work: the driver takes --extra-work PCT, every block's compute
    PCT percent more (more_work.py)."""
    import pycuda.gpuarray as gpuarray

    name, extra_pct = _args(name, extra_work)
    dev = device()
    nb = dev.multiprocessors
    base, mult = COMPUTE_BASE, SLOW_MULT
    if spread:
        base, mult = COMPUTE_BASE + round((SLOW_MULT - 1) * COMPUTE_BASE / nb), 1
    base = round(base * (1 + extra_pct / 100))
    # More than half an SM's shared memory: one block per SM, so all blocks are resident for the barrier.
    smem = min(153600, dev.max_shared_per_block_optin)
    load_n4 = LOAD_BYTES // 16
    kern = CudaKernel.from_file(HERE / "persistent.cu", "persistent_phases", shared_bytes=smem)
    rng = np.random.default_rng(0)
    bar = gpuarray.zeros(3, np.uint32)
    src = gpuarray.to_gpu(rng.random(nb * load_n4 * 4, dtype=np.float32))
    out = gpuarray.zeros(ITERS, np.float32)
    smid = gpuarray.zeros(nb, np.int32)
    args = [BUFFER, bar, src, out, smid, np.int32(ITERS), np.int32(load_n4), np.int32(base),
            np.int32(mult), np.int32(slow_block), np.int32(slow_step)]
    capacity = 6 * ITERS + 4  # a few spare slots per lane

    def reset():
        bar.fill(np.uint32(0))

    cap = profile(kern, grid=(nb, 1, 1), block=(THREADS, 1, 1), args=args, shared_bytes=smem,
                  max_events_per_lane=capacity, event_names=EVENTS, name=name, before_capture=reset)
    if int(bar.get()[2]):
        raise SystemExit(f"{name}: a block gave up waiting at the grid barrier: the {nb} blocks were not all "
                         "resident at once (is another kernel using the GPU?)")
    slow = [] if spread else [(slow_block + it * slow_step) % nb for it in range(ITERS)]
    block_smid = smid.get().tolist()
    cap.meta.update(
        block_smid=block_smid,
        group_of_thread="0 (single group; write predicate threadIdx.x == 0)",
        ground_truth={
            "description": description,
            "iterations": ITERS,
            "phases_per_iter": EVENTS,
            "slow_block_per_iter": slow,
            "compute_work_multiplier_slow": mult,
            "compute_iters_base": base,
            "compute_extra_work_pct": extra_pct,
            "compute_iters_total_per_iter": base * (nb - 1 + mult),
            "load_bytes_per_block": LOAD_BYTES,
            "barrier_wait_inside_probes": False,
            "expected_record_sequence_per_lane": "(load B, load E, compute B, compute E, reduce B, reduce E) x 8",
        },
    )
    cap.save()
    d = decode_saved(cap)
    last = last_finishers(d, EVENTS.index("compute"), ITERS)
    checks = sm_field_checks(cap.words, capacity, nb, 1, block_smid)
    checks.update(
        last_compute_finisher_per_iter=last,
        compute_max_over_mean_per_iter=[round(r, 4) for r in max_over_mean(d, EVENTS.index("compute"), ITERS)],
        slices=len(d.slices),
        overflow_records=int(cap.overflow.sum()) if cap.overflow is not None else None,
    )
    if spread:
        cap.meta["checks"] = checks
        cap.save()
        print(summary_line(cap))
        print(f"{name}: no slow block; 'compute' max/mean duration per iteration: "
              f"{', '.join(f'{r:.3f}' for r in checks['compute_max_over_mean_per_iter'])}")
        return
    ratios = [duration_ratio(d, EVENTS.index("compute"), k, slow[k]) for k in range(ITERS)]
    checks.update(
        expected_last_compute_finisher_per_iter=slow,
        last_finisher_matches_ground_truth=last == slow,
        slow_block_compute_duration_over_median_others=[round(r, 4) for r in ratios],
    )
    cap.meta["checks"] = checks
    cap.save()
    print(summary_line(cap))
    hits = sum(a == b for a, b in zip(last, slow))
    moving = len(set(slow)) > 1
    who = f"the slow block (moving: {slow})" if moving else f"slow block {slow[0]}"
    print(f"{name}: {who} finished 'compute' last in {hits}/{ITERS} iterations; its compute took "
          f"{np.nanmedian(ratios):.2f}x the median of the other blocks")
