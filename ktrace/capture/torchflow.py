"""Captures of kernels launched through torch (FlashInfer's own wrappers): time, then N runs of the same inputs.

    buf = torch.zeros(4 << 20, dtype=torch.uint64, device="cuda")     # generous: FlashInfer has no bounds check
    rec = record_runs(lambda: prof.run(q, kv, profiler_buffer=buf), lambda: ctrl.run(q, kv), buf,
                      event_names=["prefill", "decode", "reduction"], name="fi_batch_attention",
                      out_dir="captures", keep_entries=1 << 20, workload={...})
    rec.bins        # captures/fi_batch_attention_run1.bin ... _run5.bin, each with its NAME_runK.json sidecar

``record_runs`` times the profiled and the unprofiled callable interleaved (A B, B A, ...) with CUDA events after
a warm-up, a short busy kernel queued before each timed call so the host's launch overhead stays outside the
interval; then, ``runs`` times: zero the buffer, run the profiled callable once, synchronize, copy the first
``keep_entries`` words to the host, save ``NAME_runK.bin`` (``.bin.gz`` with ``compress=True``, gzip with mtime 0)
and its sidecar (docs/sidecar.md). The callables take no arguments (they close over the buffer and the inputs).

The sidecar keeps to the schema (proto/ktrace/launch.proto): ``timing`` holds each build's statistics,
``ground_truth`` the caller's ``ground_truth`` plus ``workload`` (the launch's inputs, e.g. every ``plan()``
argument), ``checks`` every timed repetition (``timing_reps_us``), the run's number and what the buffer showed.

torch is imported on first use; a missing torch or GPU is ``EnvironmentMissing`` (exit 3). The GPU work goes
through a backend object (``TorchBackend`` by default), so everything else runs without one (tests).
"""

from __future__ import annotations

import gzip
import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..decoding.layouts import LAYOUT_TEXT
from ..core.errors import EnvironmentMissing, InputError
from ..core.outputs import write_atomically
from ..core.sidecar import SCHEMA, write_sidecar
from .timing import Comparison, stats_of

__all__ = ["record_runs", "Recorded", "TorchBackend", "time_callables", "cached_timer"]

METHOD = ("CUDA events (torch) around one call of each callable, a {spin} us busy kernel (torch.cuda._sleep) queued "
          "before each so host overhead is hidden; profiled and unprofiled interleaved (A B, B A, ...) after "
          "{warmup} warm-up pairs; median of {reps}")


class TorchBackend:
    """The GPU work of ``record_runs`` done with torch on the buffer's device: events, a busy kernel, zeroing,
    copying words back, the device's facts."""

    def __init__(self, device=None):
        try:
            import torch
        except ImportError as e:
            raise EnvironmentMissing(f"capturing a torch-launched kernel needs torch ({e}); install torch with "
                                     "CUDA, or capture with ktrace run (PyCUDA)") from None
        if not torch.cuda.is_available():
            raise EnvironmentMissing("torch sees no CUDA GPU (torch.cuda.is_available() is False): capture on a "
                                     "machine with an NVIDIA GPU (decoding and analyzing need none)")
        self.torch = torch
        self.device = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
        self._cycles_per_us = None

    def synchronize(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def event(self):
        return self.torch.cuda.Event(enable_timing=True)

    @staticmethod
    def record(ev) -> None:
        ev.record()

    @staticmethod
    def elapsed_us(start, end) -> float:
        return float(start.elapsed_time(end)) * 1000.0

    def spin(self, us: float) -> None:
        """Queue about ``us`` microseconds of busy GPU time on the current stream."""
        if us <= 0:
            return
        if self._cycles_per_us is None:
            rate = getattr(self.torch.cuda.get_device_properties(self.device), "clock_rate", 0)  # kHz, if torch has it
            mhz = rate / 1000.0 if rate else 0.0
            self._cycles_per_us = mhz if 300.0 <= mhz <= 5000.0 else 2000.0  # an unlikely figure: assume 2 GHz
        self.torch.cuda._sleep(int(us * self._cycles_per_us))

    @staticmethod
    def length(buf) -> int:
        return int(buf.numel())

    @staticmethod
    def zero(buf) -> None:
        buf.zero_()

    def _as_int64(self, t):
        return t.view(self.torch.int64) if t.dtype != self.torch.int64 else t

    def to_host(self, buf, n: int) -> np.ndarray:
        """The first ``n`` words as little-endian uint64 on the host."""
        host = self._as_int64(buf[:n]).cpu().numpy()
        return host.view(np.uint64).astype("<u8", copy=False)

    def nonzero_after(self, buf, n: int) -> int:
        """Nonzero words past the first ``n`` (records the kept copy leaves out)."""
        if self.length(buf) <= n:
            return 0
        return int(self._as_int64(buf[n:]).ne(0).sum().item())

    def device_facts(self) -> dict:
        torch = self.torch
        p = torch.cuda.get_device_properties(self.device)
        out = {"index": int(self.device.index or 0), "name": str(p.name),
               "compute_capability": [int(p.major), int(p.minor)],
               "multiprocessors": int(p.multi_processor_count)}
        for key, attr in (("clock_rate_khz", "clock_rate"), ("memory_clock_khz", "memory_clock_rate")):
            if getattr(p, attr, 0):
                out[key] = int(getattr(p, attr))
        optin = getattr(p, "shared_memory_per_block_optin", 0)
        if optin:
            out["max_shared_per_block_optin"] = int(optin)
        if all(hasattr(p, k) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
            out["pci_bus_id"] = f"{p.pci_domain_id:04X}:{p.pci_bus_id:02X}:{p.pci_device_id:02X}.0"
        get_driver = getattr(torch._C, "_cuda_getDriverVersion", None)
        if get_driver is not None:
            try:
                out["driver_version"] = int(get_driver())
            except Exception:  # noqa: BLE001 - a private torch call: the sidecar does without it
                pass
        if torch.version.cuda:
            out["cuda_runtime_build_version"] = [int(x) for x in str(torch.version.cuda).split(".") if x.isdigit()]
        out["backend"] = f"torch {torch.__version__}"
        return out


def cached_timer(device: dict) -> dict | None:
    """The sidecar's ``timer`` from ``ktrace calibrate``'s cache for this device (name, PCI bus id and driver
    as ``device_facts`` gives them), or None when it was never calibrated here."""
    from .tick import Calibration, cache_file

    key = (str(device.get("name", "")), str(device.get("pci_bus_id", "")).upper(), device.get("driver_version"))
    if not key[1]:
        return None
    folder = cache_file(type("Dev", (), {"name": key[0], "pci_bus_id": key[1], "driver_version": key[2]})).parent
    for f in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        try:
            cal = Calibration.from_dict(json.loads(f.read_text()))
        except (OSError, ValueError, TypeError):
            continue
        if (cal.device, cal.pci_bus_id.upper(), cal.driver_version) != key or not cal.tick_ns:
            continue
        out = {"tick_ns": int(cal.tick_ns)}
        cost = cal.probe_cost_ns.get("flashinfer")
        if cost is not None:
            out["probe_cost_ns"] = round(float(cost), 3)
            out["probe_cost_cycles"] = round(float(cal.probe_cost_cycles.get("flashinfer", 0.0)), 2)
        if cal.sm_clock_mhz:
            out["sm_clock_mhz"] = round(float(cal.sm_clock_mhz), 1)
        out["calibration_unix_ns"] = int(cal.measured_unix_ns)
        out["source"] = "ktrace calibrate on this device"
        return out
    return None


def time_callables(profiled: Callable, control: Callable, *, reps: int = 50, warmup: int = 10,
                   spin_us: float = 200.0, backend=None) -> tuple[Comparison, dict]:
    """Time two no-argument callables interleaved (A B, B A, ...): their ``Comparison`` and every timed
    repetition in us (``{"with_profiler": [...], "without_profiler": [...]}``, in the order they ran)."""
    if reps <= 0 or warmup < 0:
        raise InputError(f"timing needs reps > 0 and warmup >= 0 (got {reps}, {warmup})")
    be = backend if backend is not None else TorchBackend()
    fns = (profiled, control)
    out: dict = {0: [], 1: []}
    ev = [be.event() for _ in range(4)]
    for i in range(warmup + reps):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for j, which in enumerate(order):
            be.spin(spin_us)
            be.record(ev[2 * j])
            fns[which]()
            be.record(ev[2 * j + 1])
        be.synchronize()
        if i >= warmup:
            for j, which in enumerate(order):
                out[which].append(be.elapsed_us(ev[2 * j], ev[2 * j + 1]))
    cmp = Comparison(stats_of(out[0], warmup), stats_of(out[1], warmup),
                     METHOD.format(spin=spin_us, warmup=warmup, reps=reps))
    return cmp, {"with_profiler": [round(x, 4) for x in out[0]], "without_profiler": [round(x, 4) for x in out[1]]}


@dataclass
class Recorded:
    """What ``record_runs`` saved: the buffers (``bins``) and sidecars in run order, the timing, and per run the
    header word's blocks and groups, the nonzero records kept and those past the kept words."""

    name: str
    bins: list = field(default_factory=list)
    sidecars: list = field(default_factory=list)
    timing: Comparison | None = None
    headers: list = field(default_factory=list)  # (num_blocks, num_groups) per run
    records: list = field(default_factory=list)
    records_past_kept: list = field(default_factory=list)


def _header(word: int) -> tuple[int, int]:
    return int(word) & 0xFFFFFFFF, int(word) >> 32


def _write_buffer(words: np.ndarray, path: Path, compress: bool) -> Path:
    raw = np.ascontiguousarray(words, dtype="<u8").tobytes()
    if compress:
        bio = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=bio, mtime=0, compresslevel=6) as gz:
            gz.write(raw)
        raw = bio.getvalue()
    return write_atomically(path, raw)


def record_runs(run_profiled: Callable, run_control: Callable | None, buffer, *, runs: int = 5, reps: int = 50,
                warmup: int = 10, event_names, group_names=(), name: str, out_dir, workload=None,
                ground_truth=None, keep_entries: int | None = None, kernel: str | None = None, grid=None,
                block=None, num_blocks: int | None = None, num_groups: int | None = None,
                group_of_thread: str | None = None, timer: dict | None = None, spin_us: float = 200.0,
                compress: bool = False, backend=None, work: dict | None = None) -> Recorded:
    """Time ``run_profiled`` against ``run_control`` (None: no timing), then save ``runs`` captures of
    ``run_profiled`` writing into ``buffer``, each from a zeroed buffer: ``out_dir/NAME_runK.bin`` (K = 1..runs;
    ``.bin.gz`` with ``compress``) and ``NAME_runK.json``.

    event_names, group_names: names of the kernel's event and warp-group indices, in enum order; keep_entries:
    the words kept (default all; a buffer allocated larger than the kernel can fill, kept in part);
    num_blocks, num_groups: what the header should say (checked: ``buffer.header_matches_launch``; default:
    what it says); kernel, grid, block, group_of_thread, timer: the sidecar's fields of those names (timer:
    default from ``ktrace calibrate``'s cache for this device when there is one, False for none);
    workload (the launch's inputs) and ground_truth (what the plan or the inputs make true): free-form JSON,
    kept under the sidecar's ``ground_truth``; backend: the GPU work (default ``TorchBackend()``); work: the
    sidecar's ``work`` (``{"bytes": N, "flops": N}``, what the kernel moves and computes: the roofline's).
    """
    if runs <= 0:
        raise InputError(f"record_runs needs runs > 0 (got {runs})")
    names = [str(x) for x in event_names]
    if not names:
        raise InputError("record_runs needs event_names (the kernel's events in enum order)")
    be = backend if backend is not None else TorchBackend()
    total = be.length(buffer)
    keep = total if keep_entries is None else int(keep_entries)
    if not 1 <= keep <= total:
        raise InputError(f"keep_entries={keep_entries}: between 1 and the buffer's {total:,} words")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rec = Recorded(name=name)
    reps_us = None
    if run_control is not None:
        rec.timing, reps_us = time_callables(run_profiled, run_control, reps=reps, warmup=warmup, spin_us=spin_us,
                                             backend=be)
    device = be.device_facts()
    if timer is None:
        timer = cached_timer(device)
    launch = dict(kernel=kernel, grid=grid, block=block, num_blocks=num_blocks, num_groups=num_groups,
                  group_of_thread=group_of_thread, timer=timer, work=work)
    for k in range(1, runs + 1):
        save_one(be, run_profiled, buffer, keep, out, f"{name}_run{k}", name, names, list(group_names), device,
                 rec.timing, reps_us, launch, workload, ground_truth, dict(run=k, runs=runs), compress, rec)
    return rec


def save_one(be, run_profiled, buffer, keep: int, out: Path, stem: str, name: str, names, group_names, device,
             timing, reps_us, launch: dict, workload, ground_truth, checks: dict, compress: bool,
             rec: Recorded) -> Path:
    """Zero the buffer, run the profiled callable once, save ``out/STEM.bin`` (``.bin.gz``) and its sidecar;
    appends both to ``rec``; returns the buffer's path."""
    be.synchronize()
    be.zero(buffer)
    be.synchronize()
    host_ns = time.time_ns()
    run_profiled()
    be.synchronize()
    words = be.to_host(buffer, keep)
    past = be.nonzero_after(buffer, keep)
    path = out / (stem + (".bin.gz" if compress else ".bin"))
    _write_buffer(words, path, compress)
    meta = _sidecar(words, path.name, stem, name, names, list(group_names), host_ns, device, timing, reps_us, launch,
                    workload, ground_truth, dict(checks, buffer_words_allocated=be.length(buffer),
                                                 records_past_kept_words=past))
    rec.sidecars.append(write_sidecar(out / f"{stem}.json", meta))
    rec.bins.append(path)
    rec.headers.append(_header(words[0]))
    rec.records.append(meta["buffer"]["records_written"])
    rec.records_past_kept.append(past)
    return path


def _sidecar(words, file_name, stem, name, event_names, group_names, host_ns, device, timing, reps_us, launch, workload,
             ground_truth, checks) -> dict:
    from .._version import __version__

    hb, hg = _header(words[0])
    nb = int(launch["num_blocks"]) if launch["num_blocks"] is not None else hb
    ng = int(launch["num_groups"]) if launch["num_groups"] is not None else hg
    meta: dict = {"schema": SCHEMA, "sample": stem, "kernel": launch["kernel"] or name, "producer": "flashinfer"}
    if launch["grid"] is not None:
        meta["grid"] = [int(x) for x in launch["grid"]]
    if launch["block"] is not None:
        meta["block"] = [int(x) for x in launch["block"]]
    meta.update(num_blocks=nb, num_groups=ng, event_names=list(event_names))
    if group_names:
        meta["group_names"] = list(group_names)
    if launch["group_of_thread"]:
        meta["group_of_thread"] = str(launch["group_of_thread"])
    meta["host_launch_unix_ns"] = int(host_ns)
    if launch["timer"]:
        meta["timer"] = dict(launch["timer"])
    meta["buffer"] = {
        "dtype": "uint64 little-endian", "entries": int(len(words)), "bytes": int(len(words)) * 8, "file": file_name,
        "records_written": int(np.count_nonzero(words[1:])), "trailer": False, "layout": LAYOUT_TEXT,
        "header_matches_launch": (hb, hg) == (nb, ng) and nb > 0 and ng > 0,
    }
    meta["device"] = dict(device)
    if launch.get("work"):
        meta["work"] = {k: int(v) for k, v in launch["work"].items() if v is not None}
    if timing is not None:
        meta["timing"] = timing.as_dict()
    gt = dict(ground_truth or {})
    if workload is not None:
        gt["workload"] = workload
    if gt:
        meta["ground_truth"] = gt
    chk = dict(checks)
    chk["header_word"] = f"0x{int(words[0]):016x}"
    if reps_us is not None:
        chk["timing_reps_us"] = reps_us
    meta["checks"] = chk
    meta["ktrace_version"] = __version__
    return meta
