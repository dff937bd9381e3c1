"""The timer's tick, measured on the current GPU, and the per-device calibration cache that ``ktrace calibrate``
fills (``$KTRACE_CACHE_DIR``, else ``~/.cache/ktrace``, ``calibration/``): what a capture's sidecar reads.
Measuring a probe's cost (which needs a capture) is calibrate.py's."""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, field
from pathlib import Path

import numpy as np
from ..core.records import frozen

__all__ = ["Calibration", "cached", "measure_tick", "cache_file"]

_TICK_SRC = r"""
extern "C" __global__ void ktrace_read_timer(unsigned long long* out, long long* clk, int n) {
  long long c0 = clock64();
  unsigned long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (int i = 0; i < n; ++i) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    out[i] = t;
  }
  unsigned long long t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  long long c1 = clock64();
  clk[0] = c1 - c0;
  clk[1] = (long long)(t1 - t0);
}
"""

@frozen
class Calibration:
    """What ``ktrace calibrate`` measured on one device. Times in ns, clocks in MHz."""

    device: str
    pci_bus_id: str
    driver_version: int
    tick_ns: int | None
    tick_steps: dict  # step (ns) -> how often it was seen between consecutive reads
    timer_reads: int
    sm_clock_mhz: float | None  # clock64 cycles over %globaltimer ns while the timer kernel ran
    probe_cost_ns: dict = field(default_factory=dict)  # header -> ns of kernel time per probe
    probe_cost_cycles: dict = field(default_factory=dict)  # header -> SM cycles per probe (writing thread)
    probe_loop: dict = field(default_factory=dict)  # header -> the timings behind the numbers
    measured_unix_ns: int = 0

    def as_dict(self) -> dict:
        d = asdict(self)
        d["tick_steps"] = {str(k): v for k, v in self.tick_steps.items()}
        return d

    @staticmethod
    def from_dict(d: dict) -> "Calibration":
        d = dict(d)
        d["tick_steps"] = {int(k): int(v) for k, v in d.get("tick_steps", {}).items()}
        names = Calibration.__dataclass_fields__
        return Calibration(**{k: v for k, v in d.items() if k in names})


def cache_file(dev) -> Path:
    root = os.environ.get("KTRACE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ktrace")
    key = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{dev.name}-{dev.pci_bus_id}-{dev.driver_version}")
    return Path(root) / "calibration" / f"{key}.json"


_memo: dict = {}


def cached() -> Calibration | None:
    """The current device's calibration from this process or the on-disk cache, else None."""
    from ._cuda import device_info

    dev = device_info()
    if "cal" in _memo:
        return _memo["cal"]
    f = cache_file(dev)
    try:
        cal = Calibration.from_dict(json.loads(f.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    _memo["cal"] = cal
    return cal


def measure_tick(reads: int = 100_000) -> tuple[int | None, dict, float | None]:
    """(tick ns, {step ns: count}, SM clock MHz) from ``reads`` back-to-back %globaltimer reads."""
    from pycuda.compiler import SourceModule

    from ._cuda import ensure_context

    cuda = ensure_context()
    mod = SourceModule(_TICK_SRC, no_extern_c=True)
    fn = mod.get_function("ktrace_read_timer")
    out = np.zeros(reads, dtype=np.uint64)
    clk = np.zeros(2, dtype=np.int64)
    fn(cuda.Out(out), cuda.Out(clk), np.int32(reads), grid=(1, 1, 1), block=(1, 1, 1))  # warm-up
    fn(cuda.Out(out), cuda.Out(clk), np.int32(reads), grid=(1, 1, 1), block=(1, 1, 1))
    steps = np.diff(out.astype(np.int64))
    vals, counts = np.unique(steps, return_counts=True)
    hist = {int(v): int(c) for v, c in zip(vals.tolist(), counts.tolist())}
    nonzero = vals[vals > 0]
    tick = int(nonzero.min()) if len(nonzero) else None
    mhz = float(clk[0]) / float(clk[1]) * 1000.0 if clk[1] > 0 else None
    return tick, hist, mhz

