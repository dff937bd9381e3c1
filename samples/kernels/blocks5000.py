"""More than 4096 blocks (40 per SM: 5280 on an H200) in several waves.

    ktrace run samples/kernels/blocks5000.py

FlashInfer's tag keeps the block index in 12 bits without masking it, so for blocks >= 4096 bit 12 lands
in the SM byte: the SM field of those records is wrong where the true SM number is even. ktrace's header
masks the field (the true block is the record's position). Each block runs 'work' (1..8 x a base FMA loop,
by block % 8) then 'store'.
"""

from pathlib import Path

import numpy as np

from ktrace.capture import BUFFER, CudaKernel, device, profile
from sample_checks import decode_saved, records_per_lane, sm_field_checks, summary_line

HERE = Path(__file__).resolve().parent
PER_SM, THREADS, BASE = 40, 64, 200


def main() -> None:
    import pycuda.gpuarray as gpuarray

    dev = device()
    nb = PER_SM * dev.multiprocessors
    kern = CudaKernel.from_file(HERE / "blocks5000.cu", "many_blocks")
    out = gpuarray.zeros(nb * THREADS, np.float32)
    smid = gpuarray.zeros(nb, np.int32)
    capacity = 6
    cap = profile(kern, grid=(nb, 1, 1), block=(THREADS, 1, 1), args=[BUFFER, out, smid, np.int32(BASE)],
                  max_events_per_lane=capacity, event_names=["work", "store"], name="blocks5000")
    block_smid = np.asarray(smid.get())
    cap.meta.update(
        block_smid=block_smid.tolist(),
        group_of_thread="0; write predicate threadIdx.x == 0",
        ground_truth={
            "description": f"{nb} blocks x {THREADS} threads ({PER_SM} per SM), each: 'work' = "
            f"{BASE} x (1 + block % 8) dependent FMAs, then 'store'. Blocks >= 4096 exist: FlashInfer's tag "
            "ORs bit 12 of the block index into the SM byte; ktrace's masks it.",
            "num_blocks": nb,
            "records_per_lane": 4,
            "blocks_ge_4096": int(max(0, nb - 4096)),
            "blocks_ge_4096_on_even_sm": int(((np.arange(nb) >= 4096) & (block_smid % 2 == 0)).sum()),
        },
    )
    cap.save()
    d = decode_saved(cap)
    per_lane = records_per_lane(cap.words, capacity, nb)
    checks = sm_field_checks(cap.words, capacity, nb, 1, block_smid)
    checks.update(
        records_per_lane_min_max=[int(per_lane.min()), int(per_lane.max())],
        slices=len(d.slices),
        blocks_with_slices=int(len(np.unique(d.slices.block))),
    )
    cap.meta["checks"] = checks
    cap.save()
    print(summary_line(cap))
    print(f"blocks5000: {nb} blocks, {checks['blocks_with_slices']} decoded; tags whose SM byte differs from "
          f"the true SM: {checks['sm_field_differs']} (all in blocks >= 4096: "
          f"{checks['sm_field_differs'] == checks['sm_field_differs_blocks_ge_4096']})")


if __name__ == "__main__":
    main()
