"""A non-persistent kernel over several waves, ending in a long tail.

    ktrace run samples/kernels/waves.py [--name waves_run2]

6 x SMs blocks (792 on an H200), one block per SM (more than half an SM's shared memory), each one pass of
load / compute / store, no grid barrier. The last 4 blocks by index do 4x the compute: they run in the last
wave and the kernel ends in a tail where only their 4 SMs are busy.
"""

from __future__ import annotations

import numpy as np

from ktrace.capture import BUFFER, CudaKernel, device, profile
from shapes_common import (HERE, THREADS, BlockClock, block_extents, clock_checks, clock_truth, decode_saved,
                           finish, one_block_per_sm_smem, parse_name)

WAVES, HEAVY, HEAVY_MULT = 6, 4, 4
COMPUTE_BASE = 6000  # dependent FMAs per thread in 'compute'
LOAD_BYTES = 65536  # per block
EVENTS = ["load", "compute", "store"]


def main() -> None:
    import pycuda.gpuarray as gpuarray

    name = parse_name("waves")
    dev = device()
    sms = dev.multiprocessors
    nb = WAVES * sms
    heavy_from = nb - HEAVY
    smem = one_block_per_sm_smem()
    load_n4 = LOAD_BYTES // 16
    kern = CudaKernel.from_file(HERE / "waves.cu", "waves", shared_bytes=smem)
    rng = np.random.default_rng(0)
    src = gpuarray.to_gpu(rng.random(nb * load_n4 * 4, dtype=np.float32))
    out = gpuarray.zeros(nb * THREADS, np.float32)
    clk = BlockClock(nb)
    capacity = 6 + 2
    cap = profile(kern, grid=(nb, 1, 1), block=(THREADS, 1, 1), shared_bytes=smem,
                  args=[BUFFER, src, out, *clk.args, np.int32(load_n4), np.int32(COMPUTE_BASE),
                        np.int32(heavy_from), np.int32(HEAVY_MULT)],
                  max_events_per_lane=capacity, event_names=EVENTS, name=name, before_capture=clk.reset)
    begin, end, smid = clk.read()
    heavy = list(range(heavy_from, nb))
    per_sm = np.bincount(smid, minlength=sms)
    light_end = end[:heavy_from].max()
    truth = clock_truth(begin, end, smid)
    truth.update(
        description=f"Non-persistent: {nb} blocks x {THREADS} threads = {WAVES} waves of one block per SM "
        f"({smem} B dynamic shared memory each, so 1 block/SM), each one pass of load ({LOAD_BYTES} B) / compute "
        f"({COMPUTE_BASE} dependent FMAs) / store, no grid barrier. Blocks {heavy_from}..{nb - 1} (the last "
        f"{HEAVY} by index) do {HEAVY_MULT}x the compute: they run in the last wave and the kernel ends in a "
        f"tail where only their SMs are busy.",
        num_blocks=nb,
        blocks_per_sm_by_occupancy=1,
        waves_planned=WAVES,
        heavy_blocks=heavy,
        compute_work_multiplier_heavy=HEAVY_MULT,
        compute_iters_base=COMPUTE_BASE,
        blocks_per_sm_observed=per_sm.tolist(),
        blocks_running_after_last_light_block_ended=int((end > light_end).sum()),
        tail_ns_by_clock=int(end.max() - light_end),
        phases_per_block=EVENTS,
        expected_record_sequence_per_lane="load B, load E, compute B, compute E, store B, store E",
    )
    cap.meta.update(block_smid=smid.tolist(), group_of_thread="0; write predicate threadIdx.x == 0",
                    ground_truth=truth)
    cap.save()
    d = decode_saved(cap)
    checks = clock_checks(cap, d, begin, end, smid, capacity)
    _, last = block_extents(d, nb)
    top = sorted(np.argsort(last)[-HEAVY:].tolist())
    checks.update(heavy_blocks_end_last_decoded=top == heavy,
                  heavy_blocks_end_last_by_clock=sorted(np.argsort(end)[-HEAVY:].tolist()) == heavy)
    ok = (checks["all_blocks_within_clock"] and checks["decoded_sm_equals_block_smid"]
          and truth["last_block_by_clock"] in heavy and checks["heavy_blocks_end_last_by_clock"]
          and checks["heavy_blocks_end_last_decoded"] and len(d.slices) == 3 * nb)
    finish(cap, checks, ok, f"{nb} blocks, max {per_sm.max()} per SM (min {per_sm.min()}); last block "
           f"{truth['last_block_by_clock']}; tail {truth['tail_ns_by_clock'] / 1e3:.1f} us with "
           f"{truth['blocks_running_after_last_light_block_ended']} blocks running")


if __name__ == "__main__":
    main()
