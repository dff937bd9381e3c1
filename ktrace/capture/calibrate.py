"""``ktrace calibrate``: the timer's tick and one probe's cost, measured on the current GPU.

- Tick: one thread reads the 64-bit ``%globaltimer`` back to back; the smallest nonzero step between
  consecutive reads is the tick (32 ns on an H200; other GPUs differ, and attaching a profiler can change it).
  The same kernel reads ``clock64()`` at both ends, which gives the SM clock while it ran.
- Probe cost: a grid of one block per SM runs a loop of ``n`` START/END pairs around one dependent FMA,
  built with and without ``-DFLASHINFER_ENABLE_PROFILER``; (instrumented - control) / (2 n) is one probe's
  cost in kernel time (CUDA events, interleaved medians) and, from ``clock64`` in the writing thread, in
  SM cycles. Measured for each header available: ktrace's always, FlashInfer's when found.

Results are cached per device (``$KTRACE_CACHE_DIR``, else ``~/.cache/ktrace``, ``calibration/``), so a
capture's sidecar and trace carry them without measuring again.
"""

from __future__ import annotations

import json
import time

import numpy as np

from .tick import Calibration, _memo, cache_file, cached, measure_tick

__all__ = ["Calibration", "calibrate", "cached", "measure_tick", "measure_probe_cost"]

PROBE_SRC = r"""
#include <stdint.h>
using namespace flashinfer;
struct ProfilerClosure { PROFILER_CLOSURE_PARAMS_DECL };
struct ProfilerParams { uint64_t* profiler_buffer; };

extern "C" __global__ void ktrace_probe_loop(uint64_t* profiler_buffer, float* out, long long* cycles, int n) {
  [[maybe_unused]] ProfilerParams params{profiler_buffer};
  [[maybe_unused]] ProfilerClosure closure;
  PROFILER_INIT(params, nullptr, closure, 0, 1, threadIdx.x == 0);
  float x = (float)threadIdx.x;
  long long c0 = clock64();
#pragma unroll 1
  for (int i = 0; i < n; ++i) {
    PROFILER_EVENT_START(closure, 0);
    x = fmaf(x, 0.9999999f, 0.5f);
    PROFILER_EVENT_END(closure, 0);
  }
  long long c1 = clock64();
  if (threadIdx.x == 0) cycles[blockIdx.x] = c1 - c0;
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}
"""


def measure_probe_cost(header: str, *, n: int = 1024, reps: int = 30, warmup: int = 5,
                       flashinfer_include=None) -> dict:
    """One probe's cost with ``header`` ("ktrace" or "flashinfer"): ns of kernel time and SM cycles."""
    from ._cuda import device_info, ensure_context
    from .build import CudaKernel
    from .recording import BUFFER, profile
    from . import settings

    cuda = ensure_context()
    dev = device_info()
    kern = CudaKernel(PROBE_SRC, "ktrace_probe_loop", header=header, flashinfer_include=flashinfer_include,
                  filename="probe_loop.cu")
    blocks, threads = dev.multiprocessors, 128
    out = cuda.mem_alloc(blocks * threads * 4)
    cyc = cuda.mem_alloc(blocks * 8)
    old = settings.current()
    settings.configure(timing=True)
    try:
        cap = profile(kern, grid=(blocks, 1, 1), block=(threads, 1, 1), args=[BUFFER, out, cyc, np.int32(n)],
                      max_events_per_lane=2 * n, name=f"probe_loop_{header}", reps=reps, warmup=warmup)
        cycles = {}
        for which, fn in (("with", kern.instrumented), ("without", kern.control)):
            with _scratch(cuda, cap.nwords) as buf:
                kern.set_capacity(2 * n)
                fn(np.uintp(int(buf)), out, cyc, np.int32(n), grid=(blocks, 1, 1), block=(threads, 1, 1))
                cuda.Context.synchronize()
                c = np.empty(blocks, dtype=np.int64)
                cuda.memcpy_dtoh(c, cyc)
                cycles[which] = float(np.median(c))
    finally:
        settings.configure(**{k: getattr(old, k) for k in ("timing",)})
        out.free()
        cyc.free()
    t = cap.timing
    probes = 2 * n
    return {
        "ns_per_probe": (t.with_profiler.median_us - t.without_profiler.median_us) * 1000.0 / probes,
        "cycles_per_probe": (cycles["with"] - cycles["without"]) / probes,
        "probes_per_lane": probes,
        "blocks": blocks,
        "threads": threads,
        "header": kern.spec.choice.describe(),
        "records_written": cap.records,
        "timing": t.as_dict(),
        "loop_cycles_median": cycles,
    }


class _scratch:
    def __init__(self, cuda, nwords: int):
        self.cuda, self.n = cuda, nwords

    def __enter__(self):
        self.a = self.cuda.mem_alloc(self.n * 8)
        self.cuda.memset_d8(self.a, 0, self.n * 8)
        return self.a

    def __exit__(self, *exc):
        self.a.free()
        return False


def calibrate(*, headers=None, flashinfer_include=None, reads: int = 100_000, n: int = 1024, reps: int = 30,
              save: bool = True) -> Calibration:
    """Measure the tick and each header's probe cost on the current device; cache and return them.

    headers: which headers' probes to measure (default: ktrace's, and FlashInfer's when it is found).
    """
    from ._cuda import device_info
    from .build import find_flashinfer_include

    dev = device_info()
    tick, hist, mhz = measure_tick(reads)
    if headers is None:
        headers = ["ktrace"] + (["flashinfer"] if find_flashinfer_include(flashinfer_include)[0] else [])
    cost_ns, cost_cyc, loops = {}, {}, {}
    for h in headers:
        r = measure_probe_cost(h, n=n, reps=reps, flashinfer_include=flashinfer_include)
        cost_ns[h], cost_cyc[h], loops[h] = r["ns_per_probe"], r["cycles_per_probe"], r
    cal = Calibration(dev.name, dev.pci_bus_id, dev.driver_version, tick, hist, reads, mhz, cost_ns, cost_cyc,
                      loops, time.time_ns())
    _memo["cal"] = cal
    if save:
        f = cache_file(dev)
        try:
            from ..core.outputs import write_atomically

            f.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(f, json.dumps(cal.as_dict(), indent=1).encode())
        except OSError:
            pass  # a read-only cache only costs a re-measurement next time
    return cal
