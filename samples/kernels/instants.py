"""Instant events between phases.

    ktrace run samples/kernels/instants.py                 # 4 blocks, room for every record
    ktrace run samples/kernels/instants.py --capacity 6 --name overflow    # ktrace's header: 2 dropped per lane

Each lane emits I(inst_first) B(phase) I(inst_mid) E(phase) B(phase) E(phase) I(inst_last_a) I(inst_last_b).
With FlashInfer's header an instant is overwritten by the next record: B E B E I(inst_last_b) land. With
ktrace's header all eight land; with a capacity below eight its guard drops the rest and counts them.
"""

import argparse
from pathlib import Path

import numpy as np

from ktrace.capture import BUFFER, CudaKernel, device, profile
from sample_checks import record_grid, sm_field_checks, summary_line

HERE = Path(__file__).resolve().parent
EVENTS = ["phase", "inst_first", "inst_mid", "inst_last_a", "inst_last_b"]
CALLS = ["I:inst_first", "B:phase", "I:inst_mid", "E:phase", "B:phase", "E:phase", "I:inst_last_a", "I:inst_last_b"]
BLOCKS, THREADS, WORK = 4, 64, 2000


def landed(words, capacity, lanes) -> list[list[str]]:
    rec = record_grid(words, capacity, lanes)
    out = []
    for lane in range(lanes):
        row = []
        for w in rec[:, lane].tolist():
            if w == 0:
                row.append("0")
                continue
            tag = w & 0xFFFFFFFF
            row.append(f"{'BEI?'[tag & 3]}:{EVENTS[(tag >> 2) & 0x3FF]}")
        out.append(row)
    return out


def main() -> None:
    import pycuda.gpuarray as gpuarray

    ap = argparse.ArgumentParser()
    ap.add_argument("--capacity", type=int, default=8, help="records per lane (default 8: room for all)")
    ap.add_argument("--name", default="instants")
    a = ap.parse_args()
    device()
    kern = CudaKernel.from_file(HERE / "instants.cu", "instant_events")
    if kern.producer != "ktrace" and a.capacity < 5:
        raise SystemExit("FlashInfer's header writes past a lane's end: keep --capacity >= 5 with it")
    out = gpuarray.zeros(BLOCKS * THREADS, np.float32)
    smid = gpuarray.zeros(BLOCKS, np.int32)
    cap = profile(kern, grid=(BLOCKS, 1, 1), block=(THREADS, 1, 1), args=[BUFFER, out, smid, np.int32(WORK)],
                  max_events_per_lane=a.capacity, event_names=EVENTS, name=a.name)
    if kern.producer == "ktrace":
        expect = CALLS[:a.capacity] + ["0"] * max(0, a.capacity - len(CALLS))
        dropped = max(0, len(CALLS) - a.capacity)
    else:
        expect = (["B:phase", "E:phase", "B:phase", "E:phase", "I:inst_last_b"] + ["0"] * a.capacity)[:a.capacity]
        dropped = None
    got = landed(cap.words, a.capacity, BLOCKS)
    block_smid = smid.get().tolist()
    cap.meta.update(
        block_smid=block_smid,
        group_of_thread="0; write predicate threadIdx.x == 0",
        ground_truth={
            "description": "Each lane executes: INSTANT(inst_first) START(phase) work INSTANT(inst_mid) work "
            "END(phase) START(phase) work END(phase) INSTANT(inst_last_a) INSTANT(inst_last_b). FlashInfer's "
            "header writes an instant at the write pointer without advancing it, so the next record overwrites "
            "it and only a trailing instant survives; ktrace's header advances, and drops and counts records "
            "past the lane's capacity.",
            "call_sequence": CALLS,
            "predicted_landed": expect,
            "predicted_overflow_per_lane": dropped,
            "work_fma_per_segment": WORK,
        },
    )
    checks = sm_field_checks(cap.words, a.capacity, BLOCKS, 1, block_smid)
    checks.update(landed_per_lane=got, landed_matches_prediction=all(g == expect for g in got))
    if cap.overflow is not None:
        checks["overflow_per_lane"] = cap.overflow.astype(np.int64).tolist()
        checks["overflow_matches_prediction"] = all(int(x) == dropped for x in cap.overflow)
    cap.meta["checks"] = checks
    cap.save()
    print(summary_line(cap))
    print(f"{a.name}: lane 0 holds {' '.join(got[0])}; as predicted on every lane: "
          f"{checks['landed_matches_prediction']}" +
          (f"; dropped per lane: {checks['overflow_per_lane']}" if cap.overflow is not None else ""))


if __name__ == "__main__":
    main()
