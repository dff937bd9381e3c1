"""Nested phases with a gap inside the outer one.

    ktrace run samples/kernels/nested.py

Persistent (one block per SM), 8 iterations; each iteration an 'outer' phase holding 'inner_a' (a load), then
unprofiled work, then 'inner_b' (compute), so 'outer' has a gap between its two inner slices; the software
grid barrier follows outside 'outer' (its wait outside every probe).
"""

from __future__ import annotations

import numpy as np

from ktrace.capture import BUFFER, CudaKernel, device, profile
from shapes_common import (HERE, THREADS, BlockClock, clock_checks, clock_truth, decode_saved, finish,
                           one_block_per_sm_smem, parse_name)

ITERS = 8
LOAD_BYTES = 65536
GAP_FMAS, COMPUTE_FMAS = 3000, 6000
EVENTS = ["outer", "inner_a", "inner_b"]


def main() -> None:
    import pycuda.gpuarray as gpuarray

    name = parse_name("nested")
    dev = device()
    nb = dev.multiprocessors
    smem = one_block_per_sm_smem()
    load_n4 = LOAD_BYTES // 16
    kern = CudaKernel.from_file(HERE / "nested.cu", "nested", shared_bytes=smem)
    rng = np.random.default_rng(0)
    bar = gpuarray.zeros(3, np.uint32)
    src = gpuarray.to_gpu(rng.random(nb * load_n4 * 4, dtype=np.float32))
    out = gpuarray.zeros(nb * THREADS, np.float32)
    clk = BlockClock(nb)
    capacity = 6 * ITERS + 4

    def reset():
        bar.fill(np.uint32(0))
        clk.reset()

    cap = profile(kern, grid=(nb, 1, 1), block=(THREADS, 1, 1), shared_bytes=smem,
                  args=[BUFFER, bar, src, out, *clk.args, np.int32(ITERS), np.int32(load_n4), np.int32(GAP_FMAS),
                        np.int32(COMPUTE_FMAS)],
                  max_events_per_lane=capacity, event_names=EVENTS, name=name, before_capture=reset)
    if int(bar.get()[2]):
        raise SystemExit(f"{name}: a block gave up waiting at the grid barrier: the {nb} blocks were not all "
                         "resident at once (is another kernel using the GPU?)")
    begin, end, smid = clk.read()
    truth = clock_truth(begin, end, smid)
    truth.update(
        description=f"Persistent grid, one block per SM ({smem} B dynamic shared memory), {THREADS} threads, "
        f"{ITERS} iterations of: 'outer' = ['inner_a' (load {LOAD_BYTES} B), unprofiled work ({GAP_FMAS} "
        f"dependent FMAs: a gap inside 'outer'), 'inner_b' ({COMPUTE_FMAS} dependent FMAs)], then a software "
        f"grid barrier outside 'outer' (its wait outside every probe). Equal work on every block.",
        iterations=ITERS,
        phases_per_iter=EVENTS,
        nesting={"outer": ["inner_a", "inner_b"]},
        gap_inside_outer="between inner_a's end and inner_b's begin",
        gap_fmas=GAP_FMAS,
        inner_b_fmas=COMPUTE_FMAS,
        barrier_wait_inside_probes=False,
        expected_record_sequence_per_lane=f"(outer B, inner_a B, inner_a E, inner_b B, inner_b E, outer E) x {ITERS}",
    )
    cap.meta.update(block_smid=smid.tolist(), group_of_thread="0 (single group; write predicate threadIdx.x == 0)",
                    ground_truth=truth)
    cap.save()
    d = decode_saved(cap)
    checks = clock_checks(cap, d, begin, end, smid, capacity)
    s = d.slices
    key = s.block * ITERS + s.k
    n = nb * ITERS

    def table(e, col):
        t = np.full(n, -1, np.int64)
        m = s.event == e
        t[key[m]] = col[m]
        return t

    ob, oe = table(0, s.begin_ns), table(0, s.end_ns)
    ab, ae = table(1, s.begin_ns), table(1, s.end_ns)
    bb, be = table(2, s.begin_ns), table(2, s.end_ns)
    contained = (ob <= ab) & (ae <= bb) & (be <= oe)
    gap = bb - ae
    checks.update(
        inner_slices_inside_outer=int(contained.sum()),
        instances=n,
        gap_inside_outer_ns_median=float(np.median(gap)),
        gap_inside_outer_ns_min=int(gap.min()),
        gap_over_outer_median=round(float(np.median(gap / np.maximum(oe - ob, 1))), 4),
    )
    ok = (checks["all_blocks_within_clock"] and checks["decoded_sm_equals_block_smid"] and bool(contained.all())
          and int(gap.min()) > 0 and len(s) == 3 * n)
    finish(cap, checks, ok, f"{int(contained.sum())}/{n} outer instances hold both inner slices; gap inside outer: "
           f"median {np.median(gap) / 1e3:.2f} us ({checks['gap_over_outer_median']:.0%} of outer)")


if __name__ == "__main__":
    main()
