"""One block that is last because it started late, not because it worked longer.

    ktrace run samples/kernels/late_start.py

One block per SM, equal work on every block: one pass of 'compute' then 'store', no barrier. Block 17 spins
for 20 us (unprofiled, on %globaltimer) after it starts, before its first probe: its slices are as long as
everyone's, but they begin (and end) about 20 us later.
"""

from __future__ import annotations

import numpy as np

from ktrace.capture import BUFFER, CudaKernel, device, profile
from sample_checks import duration_ratio
from shapes_common import (HERE, THREADS, BlockClock, block_extents, clock_checks, clock_truth, decode_saved,
                           finish, one_block_per_sm_smem, parse_name)

LATE_BLOCK, SPIN_NS = 17, 20000
COMPUTE_FMAS = 15000
EVENTS = ["compute", "store"]


def main() -> None:
    import pycuda.gpuarray as gpuarray

    name = parse_name("late_start")
    dev = device()
    nb = dev.multiprocessors
    smem = one_block_per_sm_smem()
    kern = CudaKernel.from_file(HERE / "late_start.cu", "late_start", shared_bytes=smem)
    out = gpuarray.zeros(nb * THREADS, np.float32)
    clk = BlockClock(nb)
    capacity = 4 + 2
    cap = profile(kern, grid=(nb, 1, 1), block=(THREADS, 1, 1), shared_bytes=smem,
                  args=[BUFFER, out, *clk.args, np.int32(COMPUTE_FMAS), np.int32(LATE_BLOCK), np.uint32(SPIN_NS)],
                  max_events_per_lane=capacity, event_names=EVENTS, name=name, before_capture=clk.reset)
    begin, end, smid = clk.read()
    truth = clock_truth(begin, end, smid)
    truth.update(
        description=f"{nb} blocks x {THREADS} threads, one per SM ({smem} B dynamic shared memory), equal work: "
        f"'compute' ({COMPUTE_FMAS} dependent FMAs) then 'store', no barrier. Block {LATE_BLOCK} spins "
        f"{SPIN_NS} ns (unprofiled) after it starts, before its first probe: it ends last because it started "
        f"late, not because it worked longer.",
        late_block=LATE_BLOCK,
        late_spin_ns=SPIN_NS,
        work_equal_on_every_block=True,
        compute_fmas=COMPUTE_FMAS,
        phases_per_block=EVENTS,
        expected_record_sequence_per_lane="compute B, compute E, store B, store E",
    )
    cap.meta.update(block_smid=smid.tolist(), group_of_thread="0; write predicate threadIdx.x == 0",
                    ground_truth=truth)
    cap.save()
    d = decode_saved(cap)
    checks = clock_checks(cap, d, begin, end, smid, capacity)
    first, last = block_extents(d, nb)
    others = np.arange(nb) != LATE_BLOCK
    delay = int(first[LATE_BLOCK] - np.median(first[others]))
    ratio = duration_ratio(d, EVENTS.index("compute"), 0, LATE_BLOCK)
    checks.update(
        late_block_first_begin_after_median_others_ns=delay,
        late_block_compute_duration_over_median_others=round(ratio, 4),
        late_block_start_by_clock_minus_median_others_ns=int(begin[LATE_BLOCK] - np.median(begin[others])),
    )
    ok = (checks["all_blocks_within_clock"] and checks["decoded_sm_equals_block_smid"]
          and truth["last_block_by_clock"] == LATE_BLOCK and checks["last_block_decoded"] == LATE_BLOCK
          and 0.8 * SPIN_NS < delay and 0.9 < ratio < 1.1 and len(d.slices) == 2 * nb)
    finish(cap, checks, ok, f"last block by clock {truth['last_block_by_clock']} (late block {LATE_BLOCK}); its "
           f"first probe {delay / 1e3:.1f} us after the others'; its compute {ratio:.3f}x the median")


if __name__ == "__main__":
    main()
