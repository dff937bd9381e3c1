"""A producer-bound warp-specialized pipeline: the consumer waits on the producer every tile.

    ktrace run samples/kernels/pipeline.py [--name pipeline_run2]

One block per SM, 2 warp groups: group 0 'produce' (an FMA chain on its input, written into one of 2
shared-memory slots), group 1 'consume' (a 4x shorter chain on the slot, stored to global memory), 8 tiles,
handed over through named barriers (FULL / EMPTY per slot, bar.arrive by the signalling group, bar.sync by
the waiting one, outside the probes). Each group is its own lane (write predicate: its first thread). The
producer never waits; the consumer idles about produce - consume before each tile: the producer bounds the
block.
"""

from __future__ import annotations

import numpy as np

from ktrace.capture import BUFFER, CudaKernel, device, profile
from sample_checks import sm_field_checks
from shapes_common import (HERE, BlockClock, clock_checks, clock_truth, decode_saved, finish, one_block_per_sm_smem,
                           parse_name)

GROUPS, GROUP_THREADS, TILES, SLOTS = 2, 128, 8, 2
PRODUCE_FMAS, CONSUME_FMAS = 6000, 1500
EVENTS = ["produce", "consume"]


def main() -> None:
    import pycuda.gpuarray as gpuarray

    name = parse_name("pipeline")
    dev = device()
    nb = dev.multiprocessors
    smem = one_block_per_sm_smem()
    threads = GROUPS * GROUP_THREADS
    kern = CudaKernel.from_file(HERE / "pipeline.cu", "pipeline", shared_bytes=smem)
    rng = np.random.default_rng(0)
    src = gpuarray.to_gpu(rng.random(nb * TILES * GROUP_THREADS, dtype=np.float32))
    out = gpuarray.zeros(nb * TILES * GROUP_THREADS, np.float32)
    work_ns = gpuarray.zeros(nb * GROUPS * TILES * 2, np.uint64)
    wait_ns = gpuarray.zeros(nb * GROUPS * TILES * 2, np.uint64)
    clk = BlockClock(nb)
    capacity = 2 * TILES + 4

    def reset():
        clk.reset()
        work_ns.fill(np.uint64(0))
        wait_ns.fill(np.uint64(0))

    cap = profile(kern, grid=(nb, 1, 1), block=(threads, 1, 1), shared_bytes=smem, groups=GROUPS,
                  args=[BUFFER, src, out, *clk.args, work_ns, wait_ns, np.int32(TILES), np.int32(PRODUCE_FMAS),
                        np.int32(CONSUME_FMAS)],
                  max_events_per_lane=capacity, event_names=EVENTS, group_names=EVENTS, name=name,
                  before_capture=reset)
    begin, end, smid = clk.read()
    work = work_ns.get().astype(np.int64).reshape(nb, GROUPS, TILES, 2)
    wait = wait_ns.get().astype(np.int64).reshape(nb, GROUPS, TILES, 2)
    dur = work[..., 1] - work[..., 0]  # [block, group, tile]: the phase's work, just inside its probes
    waited = wait[..., 1] - wait[..., 0]  # in the group's bar.sync before the tile
    prod, cons = dur[:, 0], dur[:, 1]
    # the consumer's idle before tile t: from its previous tile's end (its block's start for tile 0)
    cons_prev_end = np.concatenate([begin[:, None], work[:, 1, :-1, 1]], axis=1)
    cons_idle = work[:, 1, :, 0] - cons_prev_end
    span = end - begin
    busy = dur.sum(axis=2) / span[:, None]  # [block, group]
    expected_idle = float(np.median(prod) - np.median(cons))
    truth = clock_truth(begin, end, smid)
    truth.update(
        description=f"{nb} blocks x {threads} threads, one per SM ({smem} B dynamic shared memory), 2 warp "
        f"groups: group 0 'produce' ({PRODUCE_FMAS} dependent FMAs on its input, written into one of {SLOTS} "
        f"shared-memory slots), group 1 'consume' ({CONSUME_FMAS} dependent FMAs on the slot, stored to global "
        f"memory), {TILES} tiles, handed over through named barriers FULL[s] / EMPTY[s] (256 threads; "
        f"bar.arrive by the signalling group, bar.sync by the waiting one, outside the probes). Producer-bound: "
        f"the consumer waits at FULL before every tile, the producer never waits at EMPTY.",
        num_blocks=nb,
        groups=GROUPS,
        all_blocks_resident_at_once_by_clock=bool(begin.max() < end.min()),
        group_names=EVENTS,
        tiles=TILES,
        slots=SLOTS,
        produce_fmas=PRODUCE_FMAS,
        consume_fmas=CONSUME_FMAS,
        handoff="named barriers: FULL[s] = id 1 + s, EMPTY[s] = id 3 + s, s = tile % 2, 256 threads each",
        bounding_group=0,
        bounding_group_name="produce",
        produce_ns_by_clock=prod.tolist(),
        consume_ns_by_clock=cons.tolist(),
        produce_ns_median_by_clock=int(np.median(prod)),
        consume_ns_median_by_clock=int(np.median(cons)),
        producer_wait_ns_by_clock=waited[:, 0].tolist(),
        consumer_wait_ns_by_clock=waited[:, 1].tolist(),
        consumer_idle_before_tile_ns_by_clock=cons_idle.tolist(),
        expected_consumer_idle_per_tile_ns=round(expected_idle),
        expected_consumer_idle_first_tile="about one 'produce' (the consumer has nothing before tile 0 is made)",
        producer_busy_fraction_median=round(float(np.median(busy[:, 0])), 4),
        consumer_busy_fraction_median=round(float(np.median(busy[:, 1])), 4),
        must_report=[
            "the producer group (group 0, 'produce') bounds every block: its lane is busy nearly all the time",
            f"the consumer group (group 1, 'consume') idles about produce - consume "
            f"({expected_idle / 1e3:.1f} us) before every tile: it waits on the producer",
        ],
        must_not_report=["the consumer as the bottleneck", "the producer waiting on the consumer",
                         "the consumer's idle as load imbalance between blocks"],
        lane_events={"group0": ["produce"] * TILES, "group1": ["consume"] * TILES},
        expected_record_sequence_per_lane={"group0": f"(produce B, produce E) x {TILES}",
                                           "group1": f"(consume B, consume E) x {TILES}"},
    )
    cap.meta.update(block_smid=smid.tolist(),
                    group_of_thread="threadIdx.x / 128; write predicate threadIdx.x % 128 == 0",
                    ground_truth=truth)
    cap.save()
    d = decode_saved(cap)
    checks = clock_checks(cap, d, begin, end, smid, capacity)
    checks.update(sm_field_checks(cap.words, capacity, nb, GROUPS, smid))  # the lanes are (block, group)
    s = d.slices
    g0, g1 = s.group == 0, s.group == 1
    c_beg = np.zeros((nb, TILES), np.int64)
    c_end = np.zeros((nb, TILES), np.int64)
    c_beg[s.block[g1], s.k[g1]] = s.begin_ns[g1]
    c_end[s.block[g1], s.k[g1]] = s.end_ns[g1]
    dec_idle = c_beg[:, 1:] - c_end[:, :-1]  # the consumer lane's gap before tiles 1..
    p_beg = np.zeros((nb, TILES), np.int64)
    p_end = np.zeros((nb, TILES), np.int64)
    p_beg[s.block[g0], s.k[g0]] = s.begin_ns[g0]
    p_end[s.block[g0], s.k[g0]] = s.end_ns[g0]
    prod_gap = p_beg[:, 1:] - p_end[:, :-1]
    checks.update(
        group0_all_produce=bool((s.event[g0] == 0).all()) and int(g0.sum()) == nb * TILES,
        group1_all_consume=bool((s.event[g1] == 1).all()) and int(g1.sum()) == nb * TILES,
        consumer_idle_decoded_ns_median=int(np.median(dec_idle)),
        consumer_idle_decoded_minus_clock_ns_max=int(np.abs(dec_idle - cons_idle[:, 1:]).max()),
        producer_gap_decoded_ns_max=int(prod_gap.max()),
        produce_over_consume=round(float(np.median(prod) / np.median(cons)), 3),
        producer_wait_ns_max_by_clock=int(waited[:, 0].max()),
    )
    ok = (checks["all_blocks_within_clock"] and checks["decoded_sm_equals_block_smid"]
          and checks["group0_all_produce"] and checks["group1_all_consume"]
          and np.median(prod) > 2.5 * np.median(cons) and int(waited[:, 0].max()) < 0.1 * np.median(prod)
          and int(np.abs(dec_idle - cons_idle[:, 1:]).max()) < 1000
          and abs(np.median(dec_idle) - expected_idle) < 0.2 * expected_idle
          and int(prod_gap.max()) < 0.1 * np.median(prod))
    finish(cap, checks, ok, f"produce {np.median(prod) / 1e3:.1f} us, consume {np.median(cons) / 1e3:.1f} us a "
           f"tile; consumer idle {np.median(dec_idle) / 1e3:.1f} us a tile (expected {expected_idle / 1e3:.1f}); "
           f"producer waited at most {waited[:, 0].max()} ns: producer-bound")


if __name__ == "__main__":
    main()
