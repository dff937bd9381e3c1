"""How far apart the GPUs' clocks are: ``%globaltimer`` read on every GPU at one instant.

Each GPU's ``%globaltimer`` is Unix-epoch ns, but the GPUs of one host disagree: by 16.4 us on one pair of
H200s, drifting half a microsecond per second; by 70 to 114 us on another (``scripts/capture_multigpu.sh``),
drifting 2.5 us per second. Captures taken on several GPUs at once therefore need a measured offset
per GPU before they share a time axis. The measurement: a one-thread kernel on every GPU says it is ready
and spins on a flag in pinned host memory mapped into all of them; the host sets the flag once, releasing
all of them at the same instant, and each reads ``%globaltimer``. The difference to the reference GPU (the
first one named) is one sample; the median of ``rounds`` samples is the offset and their range its spread.
Both GPUs see the flag after their own PCIe read latency, so an asymmetry between their links is a bias
this method cannot see (the spread bounds only the noise).

    sync = measure_clock_offsets([0, 1])       # ClockSync; sync.offset(1).offset_to_reference_ns: GPU 1 - GPU 0, ns
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ..core.errors import EnvironmentMissing, InputError
from ..core.records import frozen

__all__ = ["ClockOffset", "ClockSync", "measure_clock_offsets", "interpolate_offset", "METHOD", "sidecar_clock",
           "clock_keys", "ENV_SYNC"]

METHOD = ("one-thread kernel per GPU spinning on a flag in mapped pinned host memory, released for all at "
          "once by one host store; each reads %globaltimer; median and range over the rounds of (GPU - reference)")

_SRC = r"""
extern "C" __global__ void ktrace_clock_sync(const volatile unsigned* go, volatile unsigned* ready,
                                             unsigned long long* out, unsigned round, unsigned slot) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  ready[slot] = round;
  __threadfence_system();
  while (*go < round) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > 2000000000ull) { out[slot] = 0; return; }  // never released: give up after 2 s
  }
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  out[slot] = t;
  __threadfence_system();
}
"""


@frozen
class ClockOffset:
    """One GPU against the reference. offset_to_reference_ns: this GPU's %globaltimer minus the reference's
    at the same instant (subtract it from this GPU's times to put them on the reference's axis);
    spread_ns: max - min of the samples; gpu_minus_host_ns: median of this GPU's timer minus the host's
    time.time_ns() read just after the release (a rough figure: the host read lags the release)."""

    device_index: int
    name: str
    pci_bus_id: str
    offset_to_reference_ns: int
    spread_ns: int
    gpu_minus_host_ns: int
    samples_ns: tuple[int, ...] = ()


@frozen
class ClockSync:
    """One measurement over several GPUs: the reference is ``offsets[0]``; times are host Unix ns."""

    offsets: tuple[ClockOffset, ...]
    rounds: int
    measured_unix_ns: int  # the host clock at the middle of the measurement
    duration_ns: int
    method: str = METHOD

    @property
    def reference(self) -> ClockOffset:
        return self.offsets[0]

    @property
    def id(self) -> str:
        """Names this measurement: captures merged together should come from one ``ktrace run``."""
        return f"{self.reference.pci_bus_id}@{self.measured_unix_ns}"

    def offset(self, device_index: int | None = None, pci_bus_id: str | None = None) -> ClockOffset | None:
        """The entry of a device, by PCI bus id (stable under CUDA_VISIBLE_DEVICES) or index."""
        for o in self.offsets:
            if (pci_bus_id and o.pci_bus_id == pci_bus_id) or (not pci_bus_id and o.device_index == device_index):
                return o
        return None

    def as_dict(self) -> dict:
        d = asdict(self)
        d["id"] = self.id
        for o in d["offsets"]:
            o["samples_ns"] = list(o["samples_ns"])
        return d

    @staticmethod
    def from_dict(d: dict) -> "ClockSync":
        try:
            offs = tuple(ClockOffset(**{**o, "samples_ns": tuple(o.get("samples_ns", ()))}) for o in d["offsets"])
            return ClockSync(offs, int(d["rounds"]), int(d["measured_unix_ns"]), int(d["duration_ns"]),
                             str(d.get("method", METHOD)))
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"not a clock-sync record ({e})") from None


def interpolate_offset(before: ClockSync, after: ClockSync | None, pci_bus_id: str,
                       at_unix_ns: int | None) -> tuple[int, int] | None:
    """(offset ns, spread ns) of a device at ``at_unix_ns``: linear between a measurement before and one
    after (the clocks drift apart steadily), clamped to them; the before one alone when there is no after."""
    b = before.offset(pci_bus_id=pci_bus_id)
    if b is None:
        return None
    a = after.offset(pci_bus_id=pci_bus_id) if after is not None else None
    if a is None or at_unix_ns is None or after.measured_unix_ns <= before.measured_unix_ns:
        return b.offset_to_reference_ns, b.spread_ns
    frac = (at_unix_ns - before.measured_unix_ns) / (after.measured_unix_ns - before.measured_unix_ns)
    frac = min(1.0, max(0.0, frac))
    off = b.offset_to_reference_ns + frac * (a.offset_to_reference_ns - b.offset_to_reference_ns)
    return int(round(off)), max(b.spread_ns, a.spread_ns)


def measure_clock_offsets(devices, rounds: int = 50, timeout_s: float = 5.0) -> ClockSync:
    """Measure every device's %globaltimer against the first's (see the module's docstring).

    devices: CUDA device indices (at least one; the first is the reference); rounds: samples per device.
    Uses each device's primary context and releases it after. Raises EnvironmentMissing without PyCUDA or
    a device, KtraceError when a GPU never comes ready or never sees the flag.
    """
    from ._cuda import driver

    devices = [int(d) for d in devices]
    if not devices or len(set(devices)) != len(devices):
        raise InputError(f"devices {devices}: give distinct device indices, the reference first")
    if rounds <= 0:
        raise InputError("rounds must be > 0")
    cuda = driver()
    try:
        cuda.init()
    except cuda.Error as e:
        raise EnvironmentMissing(f"no usable CUDA GPU: cuInit failed ({e})") from None
    n = cuda.Device.count()
    bad = [d for d in devices if not 0 <= d < n]
    if bad:
        raise EnvironmentMissing(f"device(s) {bad} asked for, but this machine has {n} CUDA device(s)")
    gpus, mem, ctxs = [], [], []
    try:
        _load(cuda, devices, gpus, mem, ctxs)
        diffs, host, t_start, t_end = _rounds(gpus, mem, rounds, timeout_s, devices)
        offs = [ClockOffset(d, name, bus, int(np.median(diffs[:, i])), int(np.ptp(diffs[:, i])),
                            int(np.median(host[:, i])), tuple(int(x) for x in diffs[:, i]))
                for i, (d, name, bus) in enumerate((g[0], g[1].name(), g[1].pci_bus_id()) for g in gpus)]
        return ClockSync(tuple(offs), rounds, (t_start + t_end) // 2, t_end - t_start)
    finally:
        _release(gpus, mem, ctxs)


def _load(cuda, devices, gpus: list, mem: list, ctxs: list) -> None:
    """Retain each device's primary context, allocate the flags (pinned, mapped into every context) and
    load the sync kernel in each. Fills the lists given (so that ``_release`` can undo a partial load)."""
    from pycuda.compiler import SourceModule

    flags = cuda.host_alloc_flags.DEVICEMAP | cuda.host_alloc_flags.PORTABLE
    for d in devices:
        dev = cuda.Device(d)
        ctx = dev.retain_primary_context()
        ctxs.append(ctx)
        ctx.push()
        try:
            if not mem:  # go flag, ready flags, timer reads
                mem += [cuda.pagelocked_zeros(1, np.uint32, mem_flags=flags),
                        cuda.pagelocked_zeros(len(devices), np.uint32, mem_flags=flags),
                        cuda.pagelocked_zeros(len(devices), np.uint64, mem_flags=flags)]
            mod = SourceModule(_SRC, no_extern_c=True)
            ptrs = [np.uintp(m.base.get_device_pointer()) for m in mem]
            gpus.append((d, dev, ctx, mod, mod.get_function("ktrace_clock_sync"), ptrs))
        finally:
            ctx.pop()


def _rounds(gpus: list, mem: list, rounds: int, timeout_s: float, devices):
    """(GPU - reference samples, GPU - host samples) as (rounds, gpus) int64 arrays, and the host's start
    and end times."""
    from ..core.errors import KtraceError

    go, ready, out = mem
    diffs = np.zeros((rounds, len(gpus)), np.int64)
    host = np.zeros((rounds, len(gpus)), np.int64)
    t_start = time.time_ns()
    for r in range(1, rounds + 1):
        for slot, g in enumerate(gpus):
            g[2].push()
            try:
                g[4](*g[5], np.uint32(r), np.uint32(slot), grid=(1, 1, 1), block=(1, 1, 1))
            finally:
                g[2].pop()
        deadline = time.monotonic() + timeout_s
        while not (ready == r).all():  # every GPU is spinning on the flag
            if time.monotonic() > deadline:
                raise KtraceError(f"clock sync: GPU(s) {[devices[i] for i in np.flatnonzero(ready != r)]} "
                                  f"did not start the sync kernel within {timeout_s} s (busy GPU?)")
        go[0] = r  # the one store that releases every GPU
        t_host = time.time_ns()
        for g in gpus:
            g[2].push()
            try:
                g[2].synchronize()
            finally:
                g[2].pop()
        t = out.astype(np.int64)
        if (t == 0).any():
            raise KtraceError("clock sync: a GPU never saw the released flag (mapped host memory not visible to "
                              "it?)")
        diffs[r - 1] = t - t[0]
        host[r - 1] = t - t_host
    return diffs, host, t_start, time.time_ns()


def _release(gpus: list, mem: list, ctxs: list) -> None:
    """Free the pinned memory and unload the modules while their contexts still exist, then release them."""
    import gc

    for m in mem:
        m.base.free()
    mem.clear()
    gpus.clear()
    gc.collect()
    for ctx in ctxs:
        ctx.detach()


ENV_SYNC = "KTRACE_CLOCK_SYNC"  # the clock-sync JSON of a multi-GPU run (see multigpu.py)


def sidecar_clock(pci_bus_id: str, at_unix_ns: int | None) -> dict:
    """The sidecar's clock keys for this device, from the measurement in ``$KTRACE_CLOCK_SYNC``: {} when
    none was made (a single-GPU capture)."""
    path = os.environ.get(ENV_SYNC)
    if not path:
        return {}
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return clock_keys(record, pci_bus_id, at_unix_ns)


def clock_keys(record: dict, pci_bus_id: str, at_unix_ns: int | None) -> dict:
    """``timer`` keys from a clock-sync record {"before": ClockSync dict, "after": ... or absent}."""
    before = ClockSync.from_dict(record["before"])
    after = ClockSync.from_dict(record["after"]) if record.get("after") else None
    got = interpolate_offset(before, after, pci_bus_id, at_unix_ns)
    if got is None:
        return {}
    off, spread = got
    syncs = [s for s in (before, after) if s is not None]
    sync = {
        "id": before.id,
        "reference_device_index": before.reference.device_index,
        "reference_pci_bus_id": before.reference.pci_bus_id,
        "devices": [o.device_index for o in before.offsets],
        "rounds": before.rounds,
        "measured_unix_ns": [s.measured_unix_ns for s in syncs],
        "offset_ns": [s.offset(pci_bus_id=pci_bus_id).offset_to_reference_ns for s in syncs],
        "spread_ns": [s.offset(pci_bus_id=pci_bus_id).spread_ns for s in syncs],
        "method": before.method,
    }
    if after is not None and at_unix_ns is not None:
        sync["interpolated_at_unix_ns"] = int(at_unix_ns)
    return {"offset_to_reference_ns": off, "offset_spread_ns": spread, "clock_sync": sync}
