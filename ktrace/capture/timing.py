"""Timing the instrumented build against its control: CUDA events, interleaved, medians after a warm-up.

Each timed launch is preceded by a short busy kernel on the same stream, so the events and the launch are
queued while the GPU is busy and the host's launch overhead stays outside the measured interval. The two
builds alternate (A B, B A, A B, ...) so clock or thermal drift falls on both alike.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Callable

import numpy as np
from ..core.records import frozen

__all__ = ["Stats", "Comparison", "time_interleaved", "stats_of"]

METHOD = ("CUDA events around one launch on a stream, a {spin} us busy kernel queued before each so host launch "
          "overhead is hidden; builds interleaved (A B, B A, ...) after {warmup} warm-up pairs; median of {reps}")

_SPIN_SRC = r"""
extern "C" __global__ void ktrace_spin(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
"""
_spin: dict = {}


@frozen
class Stats:
    """Kernel times of one build over the timed runs, in microseconds."""

    median_us: float
    mean_us: float
    min_us: float
    max_us: float
    p10_us: float
    p90_us: float
    reps: int
    warmup: int

    def as_dict(self) -> dict:
        return asdict(self)


@frozen
class Comparison:
    """The instrumented build against its control. ``overhead_ratio`` = instrumented / control medians."""

    with_profiler: Stats
    without_profiler: Stats
    method: str

    @property
    def overhead_ratio(self) -> float:
        return self.with_profiler.median_us / self.without_profiler.median_us

    @property
    def overhead_us(self) -> float:
        return self.with_profiler.median_us - self.without_profiler.median_us

    def as_dict(self) -> dict:
        return {
            "with_profiler": self.with_profiler.as_dict(),
            "without_profiler": self.without_profiler.as_dict(),
            "overhead_ratio": self.overhead_ratio,
            "overhead_us": self.overhead_us,
            "method": self.method,
        }


def stats_of(times_us, warmup: int) -> Stats:
    t = np.asarray(times_us, dtype=np.float64)
    return Stats(float(np.median(t)), float(t.mean()), float(t.min()), float(t.max()),
                 float(np.percentile(t, 10)), float(np.percentile(t, 90)), len(t), warmup)


def _spin_function():
    if "f" not in _spin:
        from pycuda.compiler import SourceModule

        _spin["m"] = SourceModule(_SPIN_SRC, no_extern_c=True)
        _spin["f"] = _spin["m"].get_function("ktrace_spin")
    return _spin["f"]


def time_interleaved(instrumented: Callable, control: Callable, *, reps: int = 50, warmup: int = 5,
                     spin_us: int = 200) -> Comparison:
    """Time two launchers, each ``f(stream)`` launching one kernel on ``stream``; returns their Stats.

    reps timed pairs after warmup untimed pairs; spin_us: busy time queued before each timed launch.
    """
    from ._cuda import ensure_context

    cuda = ensure_context()
    spin = _spin_function()
    stream = cuda.Stream()
    ns = np.uint64(spin_us * 1000)
    ev = [cuda.Event() for _ in range(4)]
    out = {0: [], 1: []}
    fns = (instrumented, control)
    for i in range(warmup + reps):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for j, which in enumerate(order):
            spin(ns, grid=(1, 1, 1), block=(1, 1, 1), stream=stream)
            ev[2 * j].record(stream)
            fns[which](stream)
            ev[2 * j + 1].record(stream)
        ev[3].synchronize()
        if i >= warmup:
            for j, which in enumerate(order):
                out[which].append(ev[2 * j + 1].time_since(ev[2 * j]) * 1000.0)
    return Comparison(stats_of(out[0], warmup), stats_of(out[1], warmup),
                      METHOD.format(spin=spin_us, warmup=warmup, reps=reps))
