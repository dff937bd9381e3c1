"""Thread-block clusters of 2: one slow block, and only its cluster partner waits for it.

    ktrace run samples/kernels/cluster.py [--name cluster_run2]

SMs blocks (132 on an H200), one per SM, in clusters of 2 (the kernel's __cluster_dims__(2, 1, 1)),
persistent: 8 iterations of 'compute' then 'exchange' (read the partner's result through distributed shared
memory), a cluster barrier after each phase, outside the probes, and no grid barrier. Block 17 has 3x the compute in
every iteration: its partner (block 16) waits for it at the barrier after 'compute' each iteration; every
other cluster's two blocks finish together and do not wait, and run ahead of the pair (nothing holds them).
"""

from __future__ import annotations

import numpy as np

from ktrace.capture import BUFFER, CudaKernel, device, profile
from occupancy import max_concurrent_per_sm, occupancy_api, occupancy_from_limits
from sample_checks import last_finishers
from shapes_common import (HERE, THREADS, BlockClock, clock_checks, clock_truth, decode_saved, finish,
                           one_block_per_sm_smem, parse_name)

CLUSTER, ITERS = 2, 8
SLOW_BLOCK, SLOW_MULT = 17, 3
COMPUTE_FMAS = 8000  # dependent FMAs per thread in 'compute' (x SLOW_MULT on SLOW_BLOCK)
EVENTS = ["compute", "exchange"]


def main() -> None:
    import pycuda.gpuarray as gpuarray

    name = parse_name("cluster")
    dev = device()
    sms = dev.multiprocessors
    nb = sms - sms % CLUSTER
    smem = one_block_per_sm_smem()
    kern = CudaKernel.from_file(HERE / "cluster.cu", "cluster_pairs", shared_bytes=smem)
    api = occupancy_api(kern, THREADS, smem, cluster_grid=nb, carveout=None)
    limits = occupancy_from_limits(kern.instrumented, THREADS, smem)
    out = gpuarray.zeros(nb * ITERS * THREADS, np.float32)
    block_cluster = gpuarray.zeros(nb * 3, np.int32)
    sync_ns = gpuarray.zeros(nb * ITERS * 4, np.uint64)
    clk = BlockClock(nb)
    capacity = 4 * ITERS + 4

    def reset():
        clk.reset()
        block_cluster.fill(np.int32(-1))
        sync_ns.fill(np.uint64(0))

    cap = profile(kern, grid=(nb, 1, 1), block=(THREADS, 1, 1), shared_bytes=smem,
                  args=[BUFFER, out, *clk.args, block_cluster, sync_ns, np.int32(ITERS), np.int32(COMPUTE_FMAS),
                        np.int32(SLOW_BLOCK), np.int32(SLOW_MULT)],
                  max_events_per_lane=capacity, event_names=EVENTS, name=name, before_capture=reset)
    begin, end, smid = clk.read()
    bc = block_cluster.get().astype(np.int64).reshape(nb, 3)
    cid, rank, size = bc[:, 0], bc[:, 1], bc[:, 2]
    marks = sync_ns.get().astype(np.int64).reshape(nb, ITERS, 4)
    wait_c = marks[:, :, 1] - marks[:, :, 0]  # in the cluster barrier after 'compute'
    wait_x = marks[:, :, 3] - marks[:, :, 2]  # after 'exchange'
    # 'compute' by the clock: from the previous barrier's release (the block's start for iteration 0) to the
    # next barrier's arrival; probes included
    prev = np.concatenate([begin[:, None], marks[:, :-1, 3]], axis=1)
    compute_ns = marks[:, :, 0] - prev
    partner = int(np.flatnonzero((cid == cid[SLOW_BLOCK]) & (np.arange(nb) != SLOW_BLOCK))[0]) \
        if (cid == cid[SLOW_BLOCK]).sum() == CLUSTER else SLOW_BLOCK ^ 1
    others = np.ones(nb, bool)
    others[[SLOW_BLOCK, partner]] = False
    normal = float(np.median(compute_ns[others]))
    expected_wait = (SLOW_MULT - 1) * normal
    partner_waits = (wait_c[partner] > 0.5 * expected_wait).tolist()
    per_sm_max = max_concurrent_per_sm(begin, end, smid, sms)
    truth = clock_truth(begin, end, smid)
    truth.update(
        description=f"{nb} blocks x {THREADS} threads in clusters of {CLUSTER} (__cluster_dims__), one per SM "
        f"({smem} B dynamic shared memory), persistent: "
        f"{ITERS} iterations of 'compute' ({COMPUTE_FMAS} dependent FMAs; {SLOW_MULT}x on block {SLOW_BLOCK}) then "
        f"'exchange' (the partner's result read through distributed shared memory), a cluster barrier "
        f"(barrier.cluster) after each phase outside the probes, no grid barrier. Block {SLOW_BLOCK}'s partner "
        f"(block {partner}) waits for it at the barrier after 'compute' every iteration; the other clusters do "
        f"not wait.",
        num_blocks=nb,
        cluster_size=CLUSTER,
        num_clusters=nb // CLUSTER,
        all_blocks_resident_at_once_by_clock=bool(begin.max() < end.min()),
        cluster_size_by_gpu=sorted(set(size.tolist())),
        block_cluster_id=cid.tolist(),
        block_cluster_rank=rank.tolist(),
        slow_block=SLOW_BLOCK,
        slow_block_partner=partner,
        slow_cluster=int(cid[SLOW_BLOCK]),
        slow_compute_multiplier=SLOW_MULT,
        compute_fmas=COMPUTE_FMAS,
        iterations=ITERS,
        grid_barrier=False,
        barrier_wait_inside_probes=False,
        who_waits="the slow block's cluster partner, at the cluster barrier after 'compute', every iteration; no "
                  "other block waits (the slow block itself arrives last and goes through)",
        partner_waits_each_iteration=partner_waits,
        expected_partner_wait_ns_per_iteration=round(expected_wait),
        compute_ns_by_clock_median_others=round(normal),
        compute_ns_by_clock_slow_block=compute_ns[SLOW_BLOCK].tolist(),
        wait_after_compute_ns_by_clock=wait_c.tolist(),
        wait_after_exchange_ns_by_clock=wait_x.tolist(),
        partner_wait_after_compute_ns_by_clock=wait_c[partner].tolist(),
        others_wait_after_compute_ns_max_by_clock=int(wait_c[others].max()),
        must_report=[
            f"block {SLOW_BLOCK} is the last 'compute' finisher in every iteration (stable: fix its "
            "share of the work)",
            f"its cluster partner, block {partner}, waits for it after 'compute' every iteration, about "
            f"{SLOW_MULT - 1}x a normal 'compute'",
            "the wait is local to one cluster: the other blocks do not wait and run ahead (no grid barrier)",
        ],
        must_not_report=["a grid-wide synchronization wait on every block",
                         f"block {partner} as slow (its 'compute' is a normal one; it only waits)"],
        occupancy_api=api,
        max_active_clusters_by_occupancy_api=api.get("max_active_clusters"),
        occupancy_limits=limits,
        max_blocks_concurrent_on_one_sm=int(per_sm_max.max()),
        phases_per_iter=EVENTS,
        expected_record_sequence_per_lane=f"(compute B, compute E, exchange B, exchange E) x {ITERS}",
    )
    cap.meta.update(block_smid=smid.tolist(), group_of_thread="0; write predicate threadIdx.x == 0",
                    ground_truth=truth)
    cap.save()
    d = decode_saved(cap)
    checks = clock_checks(cap, d, begin, end, smid, capacity)
    s = d.slices
    lf = last_finishers(d, EVENTS.index("compute"), ITERS)
    # the decoded gap from each block's 'compute' end to its 'exchange' begin, instance by instance
    ce = s.event == EVENTS.index("compute")
    xe = s.event == EVENTS.index("exchange")
    c_end = np.zeros((nb, ITERS), np.int64)
    x_beg = np.zeros((nb, ITERS), np.int64)
    c_end[s.block[ce], s.k[ce]] = s.end_ns[ce]
    x_beg[s.block[xe], s.k[xe]] = s.begin_ns[xe]
    gap = x_beg - c_end
    checks.update(
        clusters_as_launched=bool((cid == np.arange(nb) // CLUSTER).all() and (rank == np.arange(nb) % CLUSTER).all()),
        cluster_size_by_gpu_ok=bool((size == CLUSTER).all()),
        compute_last_finisher_per_iter=lf,
        partner_gap_compute_to_exchange_ns=gap[partner].tolist(),
        others_gap_compute_to_exchange_ns_max=int(gap[others].max()),
        partner_gap_minus_clock_wait_ns_max=int(np.abs(gap[partner] - wait_c[partner]).max()),
    )
    ok = (checks["all_blocks_within_clock"] and checks["decoded_sm_equals_block_smid"]
          and checks["clusters_as_launched"] and checks["cluster_size_by_gpu_ok"] and all(partner_waits)
          and lf == [SLOW_BLOCK] * ITERS and int(wait_c[others].max()) < 0.25 * expected_wait
          and int(gap[partner].min()) > 0.5 * expected_wait and int(gap[others].max()) < 0.25 * expected_wait
          and len(s) == 2 * nb * ITERS)
    finish(cap, checks, ok, f"slow block {SLOW_BLOCK}, partner {partner}: the partner waited "
           f"{np.median(wait_c[partner]) / 1e3:.1f} us per iteration (expected {expected_wait / 1e3:.1f}), in "
           f"{sum(partner_waits)}/{ITERS} iterations; other blocks at most {wait_c[others].max() / 1e3:.2f} us; "
           f"last compute finisher {lf}")


if __name__ == "__main__":
    main()
