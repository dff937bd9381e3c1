"""Several blocks resident per SM, in 3.25 waves of slots: the last wave fills a quarter of them.

    ktrace run samples/kernels/slots.py [--name slots_run2]

128 threads and 48 KiB of dynamic shared memory a block, so exactly 4 blocks fit on an SM (the occupancy API
is asked and its answer recorded, beside the figure computed from the shared-memory limits); 4 x SMs slots,
and a grid of 3.25 x slots (1716 blocks on an H200). Uniform work: one pass of 'load' then 'compute' on every
block, no barrier. Three full waves, then a last one of SMs blocks that leaves 3 slots in 4 idle while it
runs: the kernel takes about 4 block lengths for 3.25 block lengths' work.
"""

from __future__ import annotations

import math

import numpy as np

from ktrace.capture import BUFFER, CudaKernel, device, profile
from occupancy import max_concurrent_per_sm, occupancy_api, occupancy_from_limits, set_max_shared_carveout
from shapes_common import (HERE, THREADS, BlockClock, block_extents, clock_checks, clock_truth, decode_saved,
                           finish, parse_name)

BLOCKS_PER_SM, WAVES = 4, 3.25
SMEM = 48 * 1024  # dynamic shared memory a block: 4 fit in an H200 SM's 228 KiB, 5 do not
LOAD_BYTES = 16384  # per block, into the first 16 KiB of its shared memory
COMPUTE_FMAS = 20000  # dependent FMAs per thread in 'compute'
EVENTS = ["load", "compute"]


def main() -> None:
    import pycuda.gpuarray as gpuarray

    name = parse_name("slots")
    dev = device()
    sms = dev.multiprocessors
    kern = CudaKernel.from_file(HERE / "slots.cu", "slots", shared_bytes=SMEM)
    carveout = set_max_shared_carveout(kern)
    api = occupancy_api(kern, THREADS, SMEM)
    limits = occupancy_from_limits(kern.instrumented, THREADS, SMEM)
    bps = api["blocks_per_sm"] or limits["blocks_per_sm"]
    slots = sms * BLOCKS_PER_SM
    nb = int(round(WAVES * slots))
    full_waves = nb // slots
    last_wave_blocks = nb - full_waves * slots
    load_n4 = LOAD_BYTES // 16
    rng = np.random.default_rng(0)
    src = gpuarray.to_gpu(rng.random(nb * load_n4 * 4, dtype=np.float32))
    out = gpuarray.zeros(nb * THREADS, np.float32)
    clk = BlockClock(nb)
    capacity = 4 + 2
    cap = profile(kern, grid=(nb, 1, 1), block=(THREADS, 1, 1), shared_bytes=SMEM,
                  args=[BUFFER, src, out, *clk.args, np.int32(load_n4), np.int32(COMPUTE_FMAS)],
                  max_events_per_lane=capacity, event_names=EVENTS, name=name, before_capture=clk.reset)
    begin, end, smid = clk.read()
    dur = end - begin
    span = int(end.max() - begin.min())
    block_ns = float(np.median(dur))
    per_sm_max = max_concurrent_per_sm(begin, end, smid, sms)
    # the last wave: the blocks that began after every block of the full waves had begun
    order = np.argsort(begin, kind="stable")
    last_wave = np.sort(order[full_waves * slots:])
    last_wave_start = int(begin[order[full_waves * slots]]) if last_wave_blocks else None
    busy = float(dur.sum() / (slots * span))
    truth = clock_truth(begin, end, smid)
    truth.update(
        description=f"{nb} blocks x {THREADS} threads, {SMEM} B dynamic shared memory each: {BLOCKS_PER_SM} "
        f"blocks resident per SM (shared memory is the limit), {slots} slots on {sms} SMs, grid = {WAVES} waves "
        f"of slots. Uniform work: 'load' ({LOAD_BYTES} B global -> shared) then 'compute' ({COMPUTE_FMAS} "
        f"dependent FMAs), no barrier. {full_waves} full waves, then a last wave of {last_wave_blocks} blocks "
        f"that fills {last_wave_blocks / slots:.2f} of the slots: the kernel takes about "
        f"{math.ceil(WAVES)} block lengths for {WAVES} block lengths of work.",
        num_blocks=nb,
        blocks_per_sm_resident=BLOCKS_PER_SM,
        blocks_per_sm_by_occupancy_api=api["blocks_per_sm"],
        occupancy_api=api,
        shared_memory_carveout=carveout,
        blocks_per_sm_by_limits=limits["blocks_per_sm"],
        occupancy_limits=limits,
        slots=slots,
        waves_in_slots=nb / slots,
        waves_planned=WAVES,
        full_waves=full_waves,
        last_wave_blocks=last_wave_blocks,
        last_wave_slot_fill=last_wave_blocks / slots,
        last_wave_idle_slot_fraction=1 - last_wave_blocks / slots,
        expected_span_in_block_lengths=math.ceil(nb / slots),
        ideal_span_in_block_lengths=nb / slots,
        expected_partial_last_wave_cost_fraction_of_span=round(1 - (nb / slots) / math.ceil(nb / slots), 6),
        expected_partial_last_wave_cost_ns=round((math.ceil(nb / slots) - nb / slots) * block_ns),
        expected_slot_utilization=round((nb / slots) / math.ceil(nb / slots), 6),
        block_duration_ns_median_by_clock=round(block_ns),
        block_duration_ns_min_max_by_clock=[int(dur.min()), int(dur.max())],
        span_in_block_lengths_by_clock=round(span / block_ns, 4),
        slot_utilization_by_clock=round(busy, 4),
        last_wave_start_ns=last_wave_start,
        last_wave_ns_by_clock=int(end.max() - last_wave_start) if last_wave_start else 0,
        last_wave_blocks_by_clock=last_wave.tolist(),
        last_wave_blocks_per_sm_max_by_clock=int(np.bincount(smid[last_wave], minlength=sms).max()),
        max_blocks_concurrent_on_one_sm=int(per_sm_max.max()),
        max_blocks_concurrent_per_sm=per_sm_max.tolist(),
        blocks_per_sm_total=np.bincount(smid, minlength=sms).tolist(),
        blocks_per_sm_note="blocks_per_sm_observed_max counts every block an SM ran over the kernel; "
                           "max_blocks_concurrent_on_one_sm counts those running at once",
        work_equal_on_every_block=True,
        must_report=[
            f"{BLOCKS_PER_SM} blocks resident per SM: {slots} slots, {nb / slots} waves of them",
            f"a partial last wave: {last_wave_blocks} blocks in {slots} slots ({last_wave_blocks / slots:.0%} "
            f"filled); the kernel spans about {math.ceil(nb / slots)} block lengths for {nb / slots} of work, "
            f"{1 - (nb / slots) / math.ceil(nb / slots):.1%} of its span lost to the last wave",
        ],
        must_not_report=["a straggler, load imbalance or a slow block (the work is uniform)",
                         "late start of the later waves' blocks (they wait for a free slot, not for anything "
                         "of their own)"],
        phases_per_block=EVENTS,
        expected_record_sequence_per_lane="load B, load E, compute B, compute E",
    )
    cap.meta.update(block_smid=smid.tolist(), group_of_thread="0; write predicate threadIdx.x == 0",
                    ground_truth=truth)
    cap.save()
    d = decode_saved(cap)
    checks = clock_checks(cap, d, begin, end, smid, capacity)
    first, last = block_extents(d, nb)
    s = d.slices
    comp = s.dur_ns[s.event == EVENTS.index("compute")]
    checks.update(
        occupancy_api_answered=api["blocks_per_sm"] is not None,
        occupancy_api_equals_resident=api["blocks_per_sm"] in (None, BLOCKS_PER_SM),
        occupancy_limits_equal_resident=limits["blocks_per_sm"] == BLOCKS_PER_SM,
        max_concurrent_equals_resident=int(per_sm_max.max()) == BLOCKS_PER_SM,
        compute_dur_ns_min_median_max=[int(comp.min()), int(np.median(comp)), int(comp.max())],
        decoded_span_in_block_lengths=round(float(last.max() - first.min()) / block_ns, 4),
    )
    ok = (checks["all_blocks_within_clock"] and checks["decoded_sm_equals_block_smid"] and bps == BLOCKS_PER_SM
          and checks["occupancy_api_equals_resident"] and checks["max_concurrent_equals_resident"]
          and len(s) == 2 * nb and 3.6 < span / block_ns < 4.6 and comp.max() < 1.5 * np.median(comp))
    finish(cap, checks, ok, f"{nb} blocks, {slots} slots ({BLOCKS_PER_SM}/SM; occupancy API "
           f"{api['blocks_per_sm']}, limits {limits['blocks_per_sm']}); at most {per_sm_max.max()} at once on "
           f"an SM; span {span / block_ns:.2f} block lengths for {nb / slots} waves; slots busy {busy:.0%}")


if __name__ == "__main__":
    main()
