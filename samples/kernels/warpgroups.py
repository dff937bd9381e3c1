"""Two warp groups per block: a producer (group 0, 'load') and a consumer (group 1, 'mma').

    ktrace run samples/kernels/warpgroups.py

Two blocks per SM x 256 threads; group 0 copies tile t+1 into shared memory while group 1 computes on tile
t (double buffered), so on each block load(t+1) overlaps mma(t). Each group is its own lane: the group is
known only from the record's position (FlashInfer's own exporter gets it wrong for num_groups > 1).
"""

from pathlib import Path

import numpy as np

from ktrace.capture import BUFFER, CudaKernel, device, profile
from sample_checks import decode_saved, records_per_lane, sm_field_checks, summary_line

HERE = Path(__file__).resolve().parent
TILES, MMA_REPS, TILE_BYTES = 4, 16, 16384


def main() -> None:
    import pycuda.gpuarray as gpuarray

    dev = device()
    nb = 2 * dev.multiprocessors
    kern = CudaKernel.from_file(HERE / "warpgroups.cu", "warpgroups")
    rng = np.random.default_rng(1)
    src = gpuarray.to_gpu(rng.random(nb * TILES * TILE_BYTES // 4, dtype=np.float32))
    out = gpuarray.zeros(nb, np.float32)
    smid = gpuarray.zeros(nb, np.int32)
    capacity = 2 * TILES + 4
    cap = profile(kern, grid=(nb, 1, 1), block=(256, 1, 1), groups=2,
                  args=[BUFFER, src, out, smid, np.int32(TILES), np.int32(MMA_REPS)],
                  max_events_per_lane=capacity, event_names=["load", "mma"], group_names=["load", "mma"],
                  name="warpgroups")
    block_smid = smid.get().tolist()
    cap.meta.update(
        block_smid=block_smid,
        group_of_thread="threadIdx.x / 128; write predicate threadIdx.x % 128 == 0",
        ground_truth={
            "description": "Grid of 2 blocks per SM x 256 threads; group 0 (warps 0-3) copies tiles of 16 KiB "
            "global->smem ('load'), group 1 (warps 4-7) runs an FMA loop over the tile ('mma'). Double "
            "buffered: load of tile t+1 runs while mma of tile t does; __syncthreads after each step. Group 0 "
            "records only 'load', group 1 only 'mma'.",
            "tiles": TILES,
            "tile_bytes": TILE_BYTES,
            "mma_reps": MMA_REPS,
            "lane_events": {"group0": ["load"] * TILES, "group1": ["mma"] * TILES},
            "overlap": "load(t+1) of group 0 overlaps mma(t) of group 1 for t=0..tiles-2",
        },
    )
    cap.save()
    d = decode_saved(cap)
    s = d.slices
    g0, g1 = s.group == 0, s.group == 1
    overlap = []
    for t in range(TILES - 1):
        ld = (g0 & (s.k == t + 1))
        mm = (g1 & (s.k == t))
        lb = np.full(nb, -1, np.int64); le = lb.copy(); mb = lb.copy(); me = lb.copy()
        lb[s.block[ld]], le[s.block[ld]] = s.begin_ns[ld], s.end_ns[ld]
        mb[s.block[mm]], me[s.block[mm]] = s.begin_ns[mm], s.end_ns[mm]
        ok = (lb >= 0) & (mb >= 0)
        overlap.append(float(np.mean((lb < me) & (mb < le) & ok)))
    per_lane = records_per_lane(cap.words, capacity, 2 * nb)
    checks = sm_field_checks(cap.words, capacity, nb, 2, block_smid)
    checks.update(
        group0_all_load=bool((s.event[g0] == 0).all()),
        group1_all_mma=bool((s.event[g1] == 1).all()),
        records_per_lane_min_max=[int(per_lane.min()), int(per_lane.max())],
        fraction_blocks_where_load_t1_overlaps_mma_t=overlap,
        load_dur_us_median=float(np.median(s.dur_ns[g0 & (s.event == 0)]) / 1000),
        mma_dur_us_median=float(np.median(s.dur_ns[g1 & (s.event == 1)]) / 1000),
    )
    cap.meta["checks"] = checks
    cap.save()
    print(summary_line(cap))
    print(f"warpgroups: load(t+1) overlaps mma(t) on {', '.join(f'{x:.0%}' for x in overlap)} of blocks "
          f"(t=0..{TILES - 2}); group 0 only 'load': {checks['group0_all_load']}, group 1 only 'mma': "
          f"{checks['group1_all_mma']}")


if __name__ == "__main__":
    main()
