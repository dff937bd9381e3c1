"""Uninstrumented work inside each lane, and one lane that starts late: neither is a wait.

    ktrace run samples/kernels/untimed.py [--name untimed_run2]

One block per SM, one pass of 'a' then 'b' (the same work on every block), and between them, on every block,
untimed work outside any probe: 1x to 4x a base amount by block % 4. No synchronization between blocks at
all, so no gap is a wait: the gap between a lane's 'a' and 'b' is that lane's own untimed work. Block 17 also
spins for 20 us (about the largest untimed chunk) before its first probe: a true late starter, last because
it started late; its phase work is everyone's.
"""

from __future__ import annotations

import numpy as np

from ktrace.capture import BUFFER, CudaKernel, device, profile
from sample_checks import duration_ratio
from shapes_common import (HERE, THREADS, BlockClock, block_extents, clock_checks, clock_truth, decode_saved,
                           finish, one_block_per_sm_smem, parse_name)

A_FMAS, B_FMAS = 3000, 3000
UNTIMED_BASE, UNTIMED_CLASSES = 2500, 4  # block b: UNTIMED_BASE x (1 + b % UNTIMED_CLASSES) dependent FMAs
LATE_BLOCK, SPIN_NS = 17, 20000
EVENTS = ["a", "b"]


def main() -> None:
    import pycuda.gpuarray as gpuarray

    name = parse_name("untimed")
    dev = device()
    nb = dev.multiprocessors
    smem = one_block_per_sm_smem()
    kern = CudaKernel.from_file(HERE / "untimed.cu", "untimed", shared_bytes=smem)
    mult = 1 + np.arange(nb) % UNTIMED_CLASSES
    untimed_fmas = (UNTIMED_BASE * mult).astype(np.int32)
    out = gpuarray.zeros(nb * THREADS, np.float32)
    marks = gpuarray.zeros(nb * 4, np.uint64)
    fmas = gpuarray.to_gpu(untimed_fmas)
    clk = BlockClock(nb)
    capacity = 4 + 2

    def reset():
        clk.reset()
        marks.fill(np.uint64(0))

    cap = profile(kern, grid=(nb, 1, 1), block=(THREADS, 1, 1), shared_bytes=smem,
                  args=[BUFFER, out, *clk.args, marks, fmas, np.int32(A_FMAS), np.int32(B_FMAS),
                        np.int32(LATE_BLOCK), np.uint32(SPIN_NS)],
                  max_events_per_lane=capacity, event_names=EVENTS, name=name, before_capture=reset)
    begin, end, smid = clk.read()
    m = marks.get().astype(np.int64).reshape(nb, 4)
    untimed_ns = m[:, 3] - m[:, 2]
    spin_ns = int(m[LATE_BLOCK, 1] - m[LATE_BLOCK, 0])
    others = np.arange(nb) != LATE_BLOCK
    truth = clock_truth(begin, end, smid)
    truth.update(
        description=f"{nb} blocks x {THREADS} threads, one per SM ({smem} B dynamic shared memory): 'a' "
        f"({A_FMAS} dependent FMAs), then untimed work outside any probe ({UNTIMED_BASE} x (1 + block % "
        f"{UNTIMED_CLASSES}) dependent FMAs), then 'b' ({B_FMAS} dependent FMAs); no synchronization between "
        f"blocks at all. Block {LATE_BLOCK} spins {SPIN_NS} ns (unprofiled) before its first probe: it starts "
        f"late, with the same work as its class.",
        num_blocks=nb,
        synchronization_between_blocks="none",
        all_blocks_resident_at_once_by_clock=bool(begin.max() < end.min()),
        a_fmas=A_FMAS,
        b_fmas=B_FMAS,
        untimed_where="on every lane, between the end of 'a' and the begin of 'b', outside any probe",
        untimed_fmas=untimed_fmas.tolist(),
        untimed_multiplier=mult.tolist(),
        untimed_ns_by_clock=untimed_ns.tolist(),
        untimed_ns_by_clock_median_per_multiplier={int(k): int(np.median(untimed_ns[mult == k]))
                                                   for k in range(1, UNTIMED_CLASSES + 1)},
        gap_a_to_b_cause="untimed work of the lane itself: no wait (the kernel has nothing to wait on)",
        expected_gap_a_to_b_ns=untimed_ns.tolist(),
        late_block=LATE_BLOCK,
        late_spin_ns=SPIN_NS,
        late_spin_ns_by_clock=spin_ns,
        late_spin_where="before the lane's first probe ('a'), after the block started (block_begin_ns)",
        late_block_untimed_multiplier=int(mult[LATE_BLOCK]),
        work_equal_on_every_block_of_a_class=True,
        waits_on_other_blocks=False,
        expected_last_block=LATE_BLOCK,
        last_block_cause="late start: the spin before its first probe, not longer work and not a wait",
        must_report=[
            "the gap between 'a' and 'b' on every lane is work of the lane itself outside the probes "
            f"(untimed), {UNTIMED_BASE} x (1 + block % {UNTIMED_CLASSES}) FMAs: 1x to 4x by block",
            f"block {LATE_BLOCK} starts late (its first probe about {SPIN_NS} ns after the others') and ends "
            "the kernel because of it",
        ],
        must_not_report=["the a->b gaps as waits on other blocks (nothing synchronizes the blocks)",
                         f"block {LATE_BLOCK} as a straggler or load imbalance (its phases are everyone's)",
                         "the blocks with more untimed work as late starters"],
        phases_per_block=EVENTS,
        expected_record_sequence_per_lane="a B, a E, b B, b E",
    )
    cap.meta.update(block_smid=smid.tolist(), group_of_thread="0; write predicate threadIdx.x == 0",
                    ground_truth=truth)
    cap.save()
    d = decode_saved(cap)
    checks = clock_checks(cap, d, begin, end, smid, capacity)
    s = d.slices
    a_end = np.zeros(nb, np.int64)
    b_begin = np.zeros(nb, np.int64)
    ia, ib = s.event == EVENTS.index("a"), s.event == EVENTS.index("b")
    a_end[s.block[ia]] = s.end_ns[ia]
    b_begin[s.block[ib]] = s.begin_ns[ib]
    gap = b_begin - a_end
    first, last = block_extents(d, nb)
    delay = int(first[LATE_BLOCK] - np.median(first[others]))
    base = float(np.median(gap[mult == 1]))
    class_ratio = [round(float(np.median(gap[mult == k])) / base, 3) for k in range(1, UNTIMED_CLASSES + 1)]
    a_ratio = duration_ratio(d, EVENTS.index("a"), 0, LATE_BLOCK)
    checks.update(
        gap_a_to_b_ns=gap.tolist(),
        gap_minus_untimed_ns_min_max=[int((gap - untimed_ns).min()), int((gap - untimed_ns).max())],
        gap_median_per_multiplier_over_1x=class_ratio,
        late_block_first_begin_after_median_others_ns=delay,
        late_block_start_by_clock_minus_median_others_ns=int(begin[LATE_BLOCK] - np.median(begin[others])),
        late_block_a_duration_over_median_others=round(a_ratio, 4),
    )
    ok = (checks["all_blocks_within_clock"] and checks["decoded_sm_equals_block_smid"] and len(s) == 2 * nb
          and int(np.abs(gap - untimed_ns).max()) < 1000
          and all(abs(r - k) < 0.15 * k for r, k in zip(class_ratio, range(1, UNTIMED_CLASSES + 1)))
          and 0.8 * SPIN_NS < delay and truth["last_block_by_clock"] == LATE_BLOCK
          and checks["last_block_decoded"] == LATE_BLOCK and 0.9 < a_ratio < 1.1)
    finish(cap, checks, ok, f"gaps a->b = the lane's untimed work (max |gap - clock| "
           f"{np.abs(gap - untimed_ns).max()} ns; per class {class_ratio}); late block {LATE_BLOCK} first probe "
           f"{delay / 1e3:.1f} us after the others', last by clock: {truth['last_block_by_clock']}")


if __name__ == "__main__":
    main()
