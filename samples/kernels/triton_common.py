"""Shared by the Triton drivers: the SM clock and each program's %globaltimer/%smid, read apart from Proton,
and one Proton capture written beside its ground truth.

    python3 samples/kernels/triton_imbalance.py --out samples/proton

Each driver launches its kernel once inside a Proton instrumentation session (``data="trace"``), so that
Proton writes ``NAME.chrome_trace``; the kernel also stores, for each program, the %globaltimer when it
starts and ends and its %smid (ground truth that does not come from Proton). ``NAME.json`` beside the trace
holds the launch, the SM clock measured before the session (%clock64 against %globaltimer over a ~20 ms
spin), the ground truth, and every warning Proton printed while it wrote the trace (its circular buffer's
drops among them).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import triton
import triton.language as tl
import triton.profiler as proton
import triton.profiler.language as pl

pl.enable_semantic("triton")


@triton.jit
def now_ns(dep):
    """%globaltimer (Unix ns); ``dep`` orders the read after a value is ready."""
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [dep], dtype=tl.int64, is_pure=False,
                                     pack=1)


@triton.jit
def clock64(dep):
    return tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l,r", [dep], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def smid(dep):
    return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [dep], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _clock_kernel(out_ptr, n_iter):
    pid = tl.program_id(0)
    c0 = clock64(pid)
    t0 = now_ns(pid)
    x = pid.to(tl.float32)
    for i in range(n_iter):
        x = x * 1.0000001 + 0.5
    c1 = clock64(x.to(tl.int32))
    t1 = now_ns(x.to(tl.int32))
    tl.store(out_ptr + pid * 5 + 0, c0)
    tl.store(out_ptr + pid * 5 + 1, c1)
    tl.store(out_ptr + pid * 5 + 2, t0)
    tl.store(out_ptr + pid * 5 + 3, t1)
    tl.store(out_ptr + pid * 5 + 4, x.to(tl.int64))


def sm_clock_mhz() -> dict:
    """SM cycles per microsecond over a ~20 ms spin on every SM (median of programs), and nvidia-smi's."""
    n = torch.cuda.get_device_properties(0).multi_processor_count
    out = torch.zeros(n * 5, dtype=torch.int64, device="cuda")
    _clock_kernel[(n,)](out, 1000, num_warps=1)
    torch.cuda.synchronize()
    _clock_kernel[(n,)](out, 400_000, num_warps=1)
    torch.cuda.synchronize()
    r = out.view(n, 5).cpu()
    mhz = ((r[:, 1] - r[:, 0]).double() / (r[:, 3] - r[:, 2]).double() * 1000).median().item()
    smi = None
    with contextlib.suppress(Exception):
        smi = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
    return {"measured_mhz": round(mhz, 1), "spin_ns": int((r[:, 3] - r[:, 2]).median()), "nvidia_smi": smi}


def arguments(doc: str, name: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--out", default="samples/proton", help="folder for NAME.chrome_trace and NAME.json")
    p.add_argument("--name", default=name)
    return p.parse_known_args()[0]


_DROP = re.compile(r"Warning \(cta(\d+), warp(\d+)\): first (\d+) events are dropped due to insufficient buffer "
                   r"size \((\d+)/(\d+)\)")


@contextlib.contextmanager
def _stderr_to(path: Path):
    """The process's fd 2 (Proton's C++ warnings go there) copied into ``path`` too."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "w+b") as f:
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
    sys.stderr.write(path.read_text(errors="replace"))


def capture(args, launch, *, kernel: str, grid, num_warps: int, ground_truth, facts: dict, mode=None) -> None:
    """Run ``launch()`` once under Proton's instrumentation backend and save the trace and its sidecar.
    ``ground_truth()`` (after the launch) returns the arrays the kernel stored apart from Proton."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.cuda.get_device_properties(0)
    clock = sm_clock_mhz()
    base = out / args.name
    log = Path(tempfile.mkdtemp()) / "proton_stderr.txt"
    with _stderr_to(log):
        kw = {"mode": mode} if mode is not None else {}
        proton.start(str(base), data="trace", backend="instrumentation", **kw)
        launch()
        torch.cuda.synchronize()
        proton.finalize()
    text = log.read_text(errors="replace")
    drops = [dict(zip(("cta", "warp", "dropped", "kept", "count"), map(int, m.groups()))) for m in _DROP.finditer(text)]
    trace = Path(str(base) + ".chrome_trace")
    truth = ground_truth()
    side = {
        "producer": "proton",
        "kernel": kernel,
        "grid": list(grid),
        "num_warps": num_warps,
        "device": dev.name,
        "num_sms": dev.multi_processor_count,
        "triton_version": triton.__version__,
        "sm_clock": clock,
        "sm_clock_mhz": clock["measured_mhz"],
        "proton_mode": str(mode) if mode is not None else "default",
        "proton_warnings": [ln for ln in text.splitlines() if ln.strip()][:200],
        "proton_dropped": drops,
        "ground_truth": truth,
        **facts,
    }
    Path(str(base) + ".json").write_text(json.dumps(side, indent=1) + "\n")
    size = trace.stat().st_size
    if size > 2 << 20:  # large traces are committed compressed
        with open(trace, "rb") as f, open(str(trace) + ".gz", "wb") as raw, \
                gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0, filename="") as g:
            g.write(f.read())
        trace.unlink()
        trace = Path(str(trace) + ".gz")
    print(f"{trace}: {size:,} bytes, {len(drops)} warps with drops, SM clock {clock['measured_mhz']} MHz")


def program_truth(t: torch.Tensor) -> dict:
    """Per program: begin/end %globaltimer (Unix ns) and %smid, from the (programs, 3) int64 tensor."""
    r = t.view(-1, 3).cpu().tolist()
    return {"program_begin_ns": [x[0] for x in r], "program_end_ns": [x[1] for x in r], "program_smid": [x[2] for x in r]}
