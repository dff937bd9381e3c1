"""A persistent grid-barrier kernel whose straggler changes halfway.

    ktrace run samples/kernels/straggler_change.py

persistent.cu's shape (one block per SM, load / compute / reduce, a software grid barrier after each phase,
its wait outside the probes), 16 iterations: block 17 has 3x the compute in iterations 0-7, block 90 in
iterations 8-15. Two straggler segments, each the last 'compute' finisher of its iterations.
"""

from __future__ import annotations

import numpy as np

from ktrace.capture import BUFFER, CudaKernel, device, profile
from sample_checks import duration_ratio
from shapes_common import (HERE, THREADS, BlockClock, clock_checks, clock_truth, decode_saved, finish,
                           last_finishers, one_block_per_sm_smem, parse_name)

ITERS = 16
SEGMENTS = [{"block": 17, "first_k": 0, "last_k": 7}, {"block": 90, "first_k": 8, "last_k": 15}]
COMPUTE_BASE, SLOW_MULT = 8000, 3
LOAD_BYTES = 65536
EVENTS = ["load", "compute", "reduce"]


def main() -> None:
    import pycuda.gpuarray as gpuarray

    name = parse_name("straggler_change")
    dev = device()
    nb = dev.multiprocessors
    smem = one_block_per_sm_smem()
    load_n4 = LOAD_BYTES // 16
    slow = [next(s["block"] for s in SEGMENTS if s["first_k"] <= k <= s["last_k"]) % nb for k in range(ITERS)]
    kern = CudaKernel.from_file(HERE / "straggler_change.cu", "persistent_table", shared_bytes=smem)
    rng = np.random.default_rng(0)
    bar = gpuarray.zeros(3, np.uint32)
    src = gpuarray.to_gpu(rng.random(nb * load_n4 * 4, dtype=np.float32))
    out = gpuarray.zeros(ITERS, np.float32)
    table = gpuarray.to_gpu(np.asarray(slow, np.int32))
    clk = BlockClock(nb)
    capacity = 6 * ITERS + 4

    def reset():
        bar.fill(np.uint32(0))
        clk.reset()

    cap = profile(kern, grid=(nb, 1, 1), block=(THREADS, 1, 1), shared_bytes=smem,
                  args=[BUFFER, bar, src, out, *clk.args, table, np.int32(ITERS), np.int32(load_n4),
                        np.int32(COMPUTE_BASE), np.int32(SLOW_MULT)],
                  max_events_per_lane=capacity, event_names=EVENTS, name=name, before_capture=reset)
    if int(bar.get()[2]):
        raise SystemExit(f"{name}: a block gave up waiting at the grid barrier: the {nb} blocks were not all "
                         "resident at once (is another kernel using the GPU?)")
    begin, end, smid = clk.read()
    truth = clock_truth(begin, end, smid)
    truth.update(
        description=f"Persistent grid, one block per SM ({smem} B dynamic shared memory), {THREADS} threads, "
        f"{ITERS} iterations of load/compute/reduce, each phase followed by a software grid barrier whose wait "
        f"is outside the probes. Block 17 has {SLOW_MULT}x the compute in iterations 0-7, block 90 in "
        f"iterations 8-15: the straggler changes halfway.",
        iterations=ITERS,
        phases_per_iter=EVENTS,
        straggler_segments=SEGMENTS,
        slow_block_per_iter=slow,
        compute_work_multiplier_slow=SLOW_MULT,
        compute_iters_base=COMPUTE_BASE,
        load_bytes_per_block=LOAD_BYTES,
        barrier_wait_inside_probes=False,
        expected_record_sequence_per_lane=f"(load B, load E, compute B, compute E, reduce B, reduce E) x {ITERS}",
    )
    cap.meta.update(block_smid=smid.tolist(), group_of_thread="0 (single group; write predicate threadIdx.x == 0)",
                    ground_truth=truth)
    cap.save()
    d = decode_saved(cap)
    checks = clock_checks(cap, d, begin, end, smid, capacity)
    last = last_finishers(d, EVENTS.index("compute"), ITERS)
    ratios = [duration_ratio(d, EVENTS.index("compute"), k, slow[k]) for k in range(ITERS)]
    checks.update(
        last_compute_finisher_per_iter=last,
        expected_last_compute_finisher_per_iter=slow,
        last_finisher_matches_ground_truth=last == slow,
        slow_block_compute_duration_over_median_others=[round(r, 4) for r in ratios],
    )
    ok = (checks["all_blocks_within_clock"] and checks["decoded_sm_equals_block_smid"] and last == slow
          and len(d.slices) == 3 * ITERS * nb)
    finish(cap, checks, ok, f"last 'compute' finisher per iteration {last}; slow/median "
           f"{np.nanmedian(ratios):.2f}x; last block by clock {truth['last_block_by_clock']}")


if __name__ == "__main__":
    main()
