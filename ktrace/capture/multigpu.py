"""Capturing on several GPUs at once: one process per GPU, clocks measured against each other around them.

``ktrace run --device 0,1 DRIVER.py`` (``run_on_devices``) measures the GPUs' clock offsets
(``clocksync``), starts the driver once per GPU in its own process (``KTRACE_DEVICE=i``, files with a
``_gpu<i>`` suffix), holds each captured launch until every process is ready to launch (``launch_barrier``),
measures the offsets again when they are done, and writes into each capture's sidecar its GPU's offset
interpolated to the capture's own time anchor (``timer.offset_to_reference_ns``, docs/sidecar.md).

The processes learn their part from the environment:

- ``KTRACE_DEVICE``: the GPU (``_cuda.ensure_context``);
- ``KTRACE_CLOCK_SYNC``: the clock-sync JSON written before they started (sidecars carry it at once);
- ``KTRACE_LAUNCH_BARRIER`` = ``DIR`` and ``KTRACE_LAUNCH_PARTIES`` = N: the launch barrier;
- ``KTRACE_RUN_MANIFEST``: where ``ktrace run`` lists the captures it saved.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..core.errors import InputError
from ..core.outputs import write_atomically
from ._cuda import device_index
from .clocksync import ENV_SYNC, ClockSync, clock_keys, measure_clock_offsets, sidecar_clock
from ..core.records import frozen

__all__ = ["parse_devices", "device_index", "launch_barrier", "sidecar_clock", "write_manifest",
           "run_on_devices", "DeviceRun", "MultiRun", "apply_clock_sync"]

ENV_BARRIER, ENV_PARTIES, ENV_MANIFEST = ("KTRACE_LAUNCH_BARRIER", "KTRACE_LAUNCH_PARTIES", "KTRACE_RUN_MANIFEST")
BARRIER_LEAD_NS = 50_000_000  # every process launches this long after the last one arrived
BARRIER_TIMEOUT_S = 600.0


def parse_devices(text: str) -> list[int]:
    """``"0,1"`` -> [0, 1]; ``"0-3"`` -> [0, 1, 2, 3]. Distinct, in the order given (the first is the
    clock reference)."""
    out: list[int] = []
    try:
        for part in str(text).split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                out += list(range(lo, hi + 1))
            elif part:
                out.append(int(part))
    except ValueError:
        raise InputError(f"--device {text!r}: give device indices such as 0 or 0,1 or 0-3") from None
    if not out or len(set(out)) != len(out) or min(out) < 0:
        raise InputError(f"--device {text!r}: give distinct device indices >= 0, such as 0,1")
    return out


_barrier = {"generation": 0}


def launch_barrier() -> None:
    """Wait until every process of a multi-GPU run reaches its next captured launch, then return at one
    common host time (50 ms after the last arrival), so the GPUs run their captured launches together.
    No-op outside ``ktrace run --device A,B``. Called by ``profile`` before its captured launch; call it
    yourself before a launch made with ``LaunchCapture``."""
    root = os.environ.get(ENV_BARRIER)
    if not root:
        return
    parties = int(os.environ.get(ENV_PARTIES, "1"))
    me = os.environ.get("KTRACE_DEVICE", "0")
    gen = _barrier["generation"]
    _barrier["generation"] = gen + 1
    d = Path(root)
    tmp = d / f"tmp.{gen}.{me}"
    tmp.write_text(str(time.time_ns()))
    os.replace(tmp, d / f"ready.{gen}.{me}")  # others never see a half-written file
    deadline = time.monotonic() + BARRIER_TIMEOUT_S
    while True:
        arrived = [n for n in os.listdir(d) if n.startswith(f"ready.{gen}.")]
        if len(arrived) >= parties:
            break
        if time.monotonic() > deadline:
            print(f"ktrace: launch barrier {gen}: only {len(arrived)} of {parties} processes arrived in "
                  f"{BARRIER_TIMEOUT_S:.0f} s; launching anyway", file=sys.stderr)
            return
        time.sleep(0.0002)
    # Every process computes the same release time from the same files, so no one has to announce it.
    last = max(int((d / n).read_text()) for n in os.listdir(d) if n.startswith(f"ready.{gen}."))
    release = last + BARRIER_LEAD_NS
    while time.time_ns() < release:
        pass


def write_manifest(paths) -> None:
    """List the saved buffers for the parent of a multi-GPU run (no-op otherwise)."""
    target = os.environ.get(ENV_MANIFEST)
    if target:
        Path(target).write_text(json.dumps([str(p) for p in paths]))


@frozen
class DeviceRun:
    """One GPU's process: its exit status, output, and the buffers it saved."""

    device: int
    returncode: int
    stdout: str
    stderr: str
    saved: tuple[Path, ...]


@frozen
class MultiRun:
    """A run over several GPUs: the clock measurements around it, and each GPU's process."""

    before: ClockSync
    after: ClockSync | None
    runs: tuple[DeviceRun, ...]
    sync_file: Path


def run_on_devices(devices, command_for, out_dir, *, rounds: int = 50, env=None) -> MultiRun:
    """Measure the clocks, run ``command_for(device)`` (an argv) once per device at the same time, measure
    again, and put each GPU's interpolated offset into the sidecars its process saved.

    Writes ``out_dir/clock_sync.json`` (both measurements). Returns the MultiRun; a process that failed is
    reported in it, not raised.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sync_file = out_dir / "clock_sync.json"
    before = measure_clock_offsets(devices, rounds)
    write_atomically(sync_file, (json.dumps({"before": before.as_dict()}, indent=1) + "\n").encode())
    with tempfile.TemporaryDirectory(prefix="ktrace-run-") as tmp:
        barrier = Path(tmp) / "barrier"
        barrier.mkdir()
        procs = []
        for d in devices:
            manifest = Path(tmp) / f"manifest.{d}.json"
            e = dict(os.environ if env is None else env)
            e.update({"KTRACE_DEVICE": str(d), ENV_SYNC: str(sync_file.resolve()), ENV_BARRIER: str(barrier),
                      ENV_PARTIES: str(len(devices)), ENV_MANIFEST: str(manifest), "PYTHONUNBUFFERED": "1"})
            o, r = open(Path(tmp) / f"out.{d}", "w+"), open(Path(tmp) / f"err.{d}", "w+")
            procs.append((d, subprocess.Popen(command_for(d), env=e, stdout=o, stderr=r), o, r, manifest))
        runs = []
        for d, p, o, r, manifest in procs:
            rc = p.wait()
            o.seek(0)
            r.seek(0)
            saved = tuple(Path(x) for x in json.loads(manifest.read_text())) if manifest.exists() else ()
            runs.append(DeviceRun(d, rc, o.read(), r.read(), saved))
            o.close()
            r.close()
    after = measure_clock_offsets(devices, rounds)
    record = {"before": before.as_dict(), "after": after.as_dict()}
    write_atomically(sync_file, (json.dumps(record, indent=1) + "\n").encode())
    for run in runs:
        for b in run.saved:
            apply_clock_sync(b.with_suffix(".json"), record)
    return MultiRun(before, after, tuple(runs), sync_file)


def apply_clock_sync(sidecar_path, record: dict) -> dict:
    """Rewrite a sidecar's clock keys from a clock-sync record (interpolated at its time anchor); returns
    the new ``timer``."""
    from ..core.sidecar import write_sidecar

    p = Path(sidecar_path)
    meta = json.loads(p.read_text())
    timer = dict(meta.get("timer") or {})
    at = timer.get("anchor_ns") or meta.get("host_launch_unix_ns")
    bus = (meta.get("device") or {}).get("pci_bus_id", "")
    timer.update(clock_keys(record, bus, at))
    meta["timer"] = timer
    write_sidecar(p, meta)
    return timer
