"""A persistent work list: CTAs pull tiles from a global atomic counter until none are left.

    ktrace run samples/kernels/worklist.py

One CTA per SM (132 on an H200), no grid barrier; each tile is 'fetch' (16 KiB into shared memory) then
'compute'; every 7th tile (t % 7 == 0) costs 8x the compute. 600 tiles: CTAs take different numbers of tiles
(the GPU records which CTA took each). A CTA takes at most MAX_TILES tiles; the buffer holds that many per lane.
"""

from __future__ import annotations

import numpy as np

from ktrace.capture import BUFFER, CudaKernel, device, profile
from shapes_common import (HERE, THREADS, BlockClock, clock_checks, clock_truth, decode_saved, finish,
                           one_block_per_sm_smem, parse_name)

NTILES, MAX_TILES = 600, 32
HEAVY_EVERY, HEAVY_MULT = 7, 8
COMPUTE_BASE = 2000  # dependent FMAs per thread in a light tile's 'compute'
TILE_BYTES = 16384
EVENTS = ["fetch", "compute"]


def main() -> None:
    import pycuda.gpuarray as gpuarray

    name = parse_name("worklist")
    dev = device()
    nb = dev.multiprocessors
    smem = one_block_per_sm_smem()
    tile_n4 = TILE_BYTES // 16
    kern = CudaKernel.from_file(HERE / "worklist.cu", "worklist", shared_bytes=smem)
    rng = np.random.default_rng(0)
    ctr = gpuarray.zeros(2, np.uint32)
    src = gpuarray.to_gpu(rng.random(NTILES * tile_n4 * 4, dtype=np.float32))
    out = gpuarray.zeros(nb * THREADS, np.float32)
    per_cta = gpuarray.zeros(nb, np.int32)
    tile_cta = gpuarray.zeros(NTILES, np.int32)
    clk = BlockClock(nb)
    capacity = 4 * MAX_TILES + 4

    def reset():
        ctr.fill(np.uint32(0))
        per_cta.fill(np.int32(-1))
        tile_cta.fill(np.int32(-1))
        clk.reset()

    cap = profile(kern, grid=(nb, 1, 1), block=(THREADS, 1, 1), shared_bytes=smem,
                  args=[BUFFER, ctr, src, out, *clk.args, per_cta, tile_cta, np.int32(NTILES), np.int32(MAX_TILES),
                        np.int32(tile_n4), np.int32(COMPUTE_BASE), np.int32(HEAVY_EVERY), np.int32(HEAVY_MULT)],
                  max_events_per_lane=capacity, event_names=EVENTS, name=name, before_capture=reset)
    begin, end, smid = clk.read()
    tiles_per_cta = per_cta.get().astype(np.int64)
    tc = tile_cta.get().astype(np.int64)
    heavy_tiles = np.arange(0, NTILES, HEAVY_EVERY)
    heavy_per_cta = np.bincount(tc[heavy_tiles][tc[heavy_tiles] >= 0], minlength=nb)
    truth = clock_truth(begin, end, smid)
    truth.update(
        description=f"Persistent work list: {nb} CTAs x {THREADS} threads (one per SM, {smem} B dynamic shared "
        f"memory) take tile indices from a global atomic counter (outside the probes) until {NTILES} tiles are "
        f"done, no grid barrier; per tile 'fetch' ({TILE_BYTES} B into shared memory) then 'compute' "
        f"({COMPUTE_BASE} dependent FMAs, {HEAVY_MULT}x for every tile t with t % {HEAVY_EVERY} == 0). A CTA "
        f"takes at most {MAX_TILES} tiles (the buffer holds 4 x {MAX_TILES} records per lane).",
        num_tiles=NTILES,
        max_tiles_per_cta=MAX_TILES,
        heavy_tile_every=HEAVY_EVERY,
        heavy_tile_compute_multiplier=HEAVY_MULT,
        compute_iters_base=COMPUTE_BASE,
        tile_bytes=TILE_BYTES,
        tiles_per_cta=tiles_per_cta.tolist(),
        tile_cta=tc.tolist(),
        heavy_tiles_per_cta=heavy_per_cta.tolist(),
        phases_per_tile=EVENTS,
        expected_record_sequence_per_lane="(fetch B, fetch E, compute B, compute E) x tiles_per_cta[block]",
    )
    cap.meta.update(block_smid=smid.tolist(), group_of_thread="0; write predicate threadIdx.x == 0",
                    ground_truth=truth)
    cap.save()
    d = decode_saved(cap)
    checks = clock_checks(cap, d, begin, end, smid, capacity)
    s = d.slices
    inst = [np.bincount(s.block[s.event == e], minlength=nb) for e in range(len(EVENTS))]
    checks.update(
        fetch_instances_equal_tiles_per_cta=bool((inst[0] == tiles_per_cta).all()),
        compute_instances_equal_tiles_per_cta=bool((inst[1] == tiles_per_cta).all()),
        tiles_done=int(tiles_per_cta.sum()),
        every_tile_done_once=bool((tc >= 0).all() and np.array_equal(np.bincount(tc, minlength=nb), tiles_per_cta)),
        tiles_per_cta_min_max=[int(tiles_per_cta.min()), int(tiles_per_cta.max())],
    )
    ok = (checks["all_blocks_within_clock"] and checks["decoded_sm_equals_block_smid"]
          and checks["fetch_instances_equal_tiles_per_cta"] and checks["compute_instances_equal_tiles_per_cta"]
          and checks["every_tile_done_once"] and checks["tiles_done"] == NTILES
          and int(tiles_per_cta.max()) < MAX_TILES)
    finish(cap, checks, ok, f"{NTILES} tiles over {nb} CTAs: {tiles_per_cta.min()}..{tiles_per_cta.max()} per CTA; "
           f"last CTA by clock {truth['last_block_by_clock']}")


if __name__ == "__main__":
    main()
