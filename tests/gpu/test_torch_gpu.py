"""On a GPU with torch: FlashInfer's flow, the profiler buffer a zeroed int64 CUDA tensor that the kernel
writes, decoded straight from the tensor (one copy to the host). ktrace's header, so the guard is exercised
on the device too: a lane given room for half its records keeps the first half and counts the rest."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import ktrace

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs torch with a CUDA GPU", allow_module_level=True)


def _probe_loop():
    from ktrace.capture.build import CudaKernel
    from ktrace.capture.calibrate import PROBE_SRC

    return CudaKernel(PROBE_SRC, "ktrace_probe_loop", header="ktrace", filename="probe_loop.cu")


@pytest.mark.parametrize("pairs,capacity", [(8, 16), (8, 8)])
def test_cuda_tensor_buffer_decodes(tmp_path, pairs, capacity):
    from ktrace.capture._cuda import device_info

    kern = _probe_loop()
    blocks, threads = device_info().multiprocessors, 64
    lanes = blocks
    buf = torch.zeros(1 + capacity * lanes + lanes + 1, dtype=torch.int64, device="cuda")
    out = torch.zeros(blocks * threads, dtype=torch.float32, device="cuda")
    cyc = torch.zeros(blocks, dtype=torch.int64, device="cuda")
    kern.set_capacity(capacity)
    t0 = time.time_ns()
    kern.instrumented(np.uintp(buf.data_ptr()), np.uintp(out.data_ptr()), np.uintp(cyc.data_ptr()), np.int32(pairs),
                      grid=(blocks, 1, 1), block=(threads, 1, 1))
    torch.cuda.synchronize()
    side = tmp_path / "probe.json"
    side.write_text(json.dumps({"producer": "ktrace", "buffer": {"records_per_lane_capacity": capacity, "trailer": True}}))

    d = ktrace.decode(buf, sidecar=side, event_names=["probe"])
    kept = min(2 * pairs, capacity) // 2
    assert len(d.slices) == blocks * kept
    assert d.dropped_records == blocks * (2 * pairs - capacity) if capacity < 2 * pairs else d.dropped_records == 0
    assert abs(d.launch.timer_anchor_ns - t0) < 60e9  # the 64-bit anchor, in Unix ns
    assert (d.slices.sm >= 0).all() and (d.slices.sm < blocks).all()
    host = ktrace.decode(buf.cpu().numpy(), sidecar=side, event_names=["probe"])
    assert np.array_equal(host.slices.begin_ns, d.slices.begin_ns)
