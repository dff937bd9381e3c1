"""Capture NVIDIA IKET traces of NVIDIA's Hopper persistent GEMM on an H200, with ground truth apart from IKET.

The kernel is CUTLASS's CuTe DSL example `examples/python/CuTeDSL/cute/hopper/kernel/dense_gemm/dense_gemm_persistent.py`
(a persistent, warp-specialized GEMM: one TMA producer warp and two WGMMA consumer warp groups per CTA). Its file is
not part of this project: pass its path with --example. This script copies it with a few lines added, each checked
to land exactly once:

- IKET ranges: `load` around each tile of the producer warp (a stack range, with a `tile` marker carrying the tile's
  M index as payload), `mma` (a stack range) and `epilogue` (a token range) around each tile of the consumer warps,
  and per K tile `load_wait` (the producer waiting for a free stage) and `mma_wait` (a consumer waiting for a full
  one);
- ground truth, recorded apart from IKET: per CTA a 64-bit `%globaltimer` at entry and after a CTA-wide barrier at
  exit, and `%smid`, written to a tensor of its own;
- for the `straggler` case, one CTA runs each tile's K loop 3 times (3x the work; its output tile is not checked);
- for the `slow_load` case, the producer warp spins 1.5 us on `%globaltimer` before each K tile's loads (the
  pipeline bound by its producer).

Run on the device, one call (the IKET wheels installed, see samples/iket/README.md):

    python scripts/capture_iket.py --example .iket/src/dense_gemm_persistent.py --out $OUT/iket

Each case runs under `run-iket ... profile --postprocess all` twice (two same-input runs), and once more without
IKET to time the unprofiled control with CUDA events. Written per case and run: the IKET JSON trace
(`<case>_run<N>.trace.json.gz`), its Perfetto trace (`.pftrace.gz`), and `<case>_run<N>.json`: the trace's sidecar
(device, SM count, versions) with the ground truth.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CASES = ("gemm", "straggler", "slow_load")
STRAGGLER_CTA = 17
SLOW_LOAD_NS = 1500
MNKL = (4096, 2048, 2048, 1)
TILE_MN = (128, 128)


def _replace_once(source: str, old: str, new: str) -> str:
    count = source.count(old)
    if count != 1:
        raise SystemExit(f"capture_iket: the example does not match this script: {old[:60]!r} occurs {count} times")
    return source.replace(old, new)


def _replace_nth(source: str, old: str, new: str, nth: int) -> str:
    parts = source.split(old)
    if len(parts) <= nth + 1:
        raise SystemExit(f"capture_iket: the example does not match this script: {old[:60]!r} occurrence {nth}")
    return old.join(parts[: nth + 1]) + new + old.join(parts[nth + 1 :])


def patched_source(source: str, straggler: int, slow_load_ns: int = 0) -> str:
    """The example with IKET ranges and the truth tensor; straggler >= 0 gives that CTA 3x the K loop;
    slow_load_ns > 0 makes the producer warp spin that long before each K tile's loads."""
    s = source
    s = _replace_once(
        s,
        "        c: cute.Tensor,\n        max_active_clusters: cutlass.Constexpr,\n",
        "        c: cute.Tensor,\n        truth: cute.Tensor,\n        max_active_clusters: cutlass.Constexpr,\n",
    )
    s = _replace_once(
        s,
        "            tile_sched_params,\n        ).launch(",
        "            tile_sched_params,\n            truth,\n        ).launch(",
    )
    s = _replace_once(
        s,
        "        tile_sched_params: utils.PersistentTileSchedulerParams,\n    ):",
        "        tile_sched_params: utils.PersistentTileSchedulerParams,\n        truth: cute.Tensor,\n    ):",
    )
    entry = (
        "        warp_idx = cute.arch.make_warp_uniform(warp_idx)\n"
        "        cta_x, cta_y, cta_z = cute.arch.block_idx()\n"
        "        grid_x, grid_y, _ = cute.arch.grid_dim()\n"
        "        truth_cta = cta_x + grid_x * (cta_y + grid_y * cta_z)\n"
        "        if tidx == 0:\n"
        "            truth[truth_cta, 0] = cute.arch.globaltimer()\n"
        "            truth[truth_cta, 2] = cutlass.Int64(cute.arch.smid())\n"
    )
    if straggler >= 0:
        entry += (
            "        k_repeat = cutlass.select_(truth_cta == %d, cutlass.Int32(3), cutlass.Int32(1))\n" % straggler
        )
    s = _replace_nth(s, "        warp_idx = cute.arch.make_warp_uniform(warp_idx)\n", entry, 0)
    # the producer warp: one `load` range per tile
    s = _replace_once(
        s,
        "                tAgA_mkl = tAgA[(None, tile_coord_mnl[0], None, tile_coord_mnl[2])]\n",
        "                cute.experimental.iket.range_push(\"load\")\n"
        "                cute.experimental.iket.mark(\"tile\", tile_coord_mnl[0])\n"
        "                tAgA_mkl = tAgA[(None, tile_coord_mnl[0], None, tile_coord_mnl[2])]\n",
    )
    s = _replace_nth(
        s,
        "                tile_sched.advance_to_next_work()\n",
        "                cute.experimental.iket.range_pop()\n                tile_sched.advance_to_next_work()\n",
        0,
    )
    # the consumer warp groups: `mma` then `epilogue` per tile
    s = _replace_once(
        s, "                # MAINLOOP\n", "                # MAINLOOP\n                cute.experimental.iket.range_push(\"mma\")\n"
    )
    s = _replace_once(
        s,
        "                # Epilogue\n",
        "                cute.experimental.iket.range_pop()\n"
        "                epilogue_token = cute.experimental.iket.range_start(\"epilogue\")\n                # Epilogue\n",
    )
    s = _replace_nth(
        s,
        "                tile_sched.advance_to_next_work()\n",
        "                cute.experimental.iket.range_end(epilogue_token)\n                tile_sched.advance_to_next_work()\n",
        1,
    )
    if straggler >= 0:
        s = _replace_once(s, "                for k_tile in range(k_tile_cnt):\n", "                for k_tile in range(k_tile_cnt * k_repeat):\n")
        s = _replace_once(
            s,
            "tAgA_k = tAgA_mkl[(None, mainloop_producer_state.count)]",
            "tAgA_k = tAgA_mkl[(None, mainloop_producer_state.count % k_tile_cnt)]",
        )
        s = _replace_once(
            s,
            "tBgB_k = tBgB_nkl[(None, mainloop_producer_state.count)]",
            "tBgB_k = tBgB_nkl[(None, mainloop_producer_state.count % k_tile_cnt)]",
        )
        s = _replace_once(
            s,
            "                for k_tile in range(prologue_mma_cnt, k_tile_cnt):\n",
            "                for k_tile in range(prologue_mma_cnt, k_tile_cnt * k_repeat):\n",
        )
    if slow_load_ns > 0:
        s = _replace_once(
            s,
            "                    # Conditionally wait for AB buffer empty\n",
            "                    spin_start = cute.arch.globaltimer()\n"
            "                    spin_now = spin_start\n"
            "                    while spin_now - spin_start < %d:\n"
            "                        spin_now = cute.arch.globaltimer()\n"
            "                    # Conditionally wait for AB buffer empty\n" % slow_load_ns,
        )
    # the pipeline's waits, per K tile: the producer for a free stage, the consumers for a full one
    s = _replace_once(
        s,
        "                    mainloop_pipeline.producer_acquire(mainloop_producer_state)\n",
        "                    cute.experimental.iket.range_push(\"load_wait\")\n"
        "                    mainloop_pipeline.producer_acquire(mainloop_producer_state)\n"
        "                    cute.experimental.iket.range_pop()\n",
    )
    wait = "                    mainloop_pipeline.consumer_wait(mainloop_consumer_read_state)\n"
    if s.count(wait) != 2:
        raise SystemExit("capture_iket: the example does not match this script: consumer_wait occurs "
                         f"{s.count(wait)} times, not 2")
    s = s.replace(wait, "                    cute.experimental.iket.range_push(\"mma_wait\")\n" + wait +
                  "                    cute.experimental.iket.range_pop()\n")
    # exit: after every warp of the CTA is done
    s = _replace_once(
        s,
        "            tma_store_pipeline.producer_tail()\n",
        "            tma_store_pipeline.producer_tail()\n"
        "        cute.arch.barrier()\n"
        "        if tidx == 0:\n"
        "            truth[truth_cta, 1] = cute.arch.globaltimer()\n",
    )
    return s


def load_example(path: Path, straggler: int, workdir: Path, slow_load_ns: int = 0):
    source = patched_source(path.read_text(), straggler, slow_load_ns)
    target = workdir / f"gemm_patched_{max(straggler, 0)}_{slow_load_ns}.py"
    target.write_text(source)
    spec = importlib.util.spec_from_file_location(target.stem, target)
    module = importlib.util.module_from_spec(spec)
    sys.modules[target.stem] = module
    spec.loader.exec_module(module)
    return module


def versions() -> dict:
    from importlib import metadata

    found = {}
    for name in ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-cu13", "torch"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def child(case: str, example: Path, truth_path: Path, repeats: int) -> None:
    """One process: compile the case and launch it (under run-iket: once; for the control: timed repeats)."""
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    import cutlass.torch as cutlass_torch
    import torch

    straggler = STRAGGLER_CTA if case == "straggler" else -1
    slow_load_ns = SLOW_LOAD_NS if case == "slow_load" else 0
    with tempfile.TemporaryDirectory() as tmp:
        module = load_example(example, straggler, Path(tmp), slow_load_ns)
        m, n, k, l = MNKL
        dtype = cutlass.Float16
        torch.manual_seed(0)
        a_cpu = cutlass_torch.matrix(l, m, k, False, dtype)
        b_cpu = cutlass_torch.matrix(l, n, k, False, dtype)
        c_cpu = cutlass_torch.matrix(l, m, n, False, dtype)
        a, _ = cutlass_torch.cute_tensor_like(a_cpu, dtype, is_dynamic_layout=True, assumed_align=16)
        b, _ = cutlass_torch.cute_tensor_like(b_cpu, dtype, is_dynamic_layout=True, assumed_align=16)
        c, c_gpu = cutlass_torch.cute_tensor_like(c_cpu, dtype, is_dynamic_layout=True, assumed_align=16)
        gemm = module.HopperWgmmaGemmPersistentKernel(cutlass.Float32, TILE_MN, (1, 1), 1, True)
        clusters = cutlass.utils.HardwareInfo().get_max_active_clusters(1)
        truth_gpu = torch.zeros((clusters, 4), dtype=torch.int64, device="cuda")
        truth = cutlass_torch.from_dlpack(truth_gpu) if hasattr(cutlass_torch, "from_dlpack") else None
        if truth is None:
            from cutlass.cute.runtime import from_dlpack

            truth = from_dlpack(truth_gpu)
        torch_stream = torch.cuda.Stream()
        stream = cuda.CUstream(torch_stream.cuda_stream)
        compiled = cute.compile(gemm, a, b, c, truth, clusters, stream)
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(torch_stream)
            compiled(a, b, c, truth, stream)
            end.record(torch_stream)
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1e6)
        rows = truth_gpu.cpu().tolist()
        checked = None
        if straggler < 0:
            ref = torch.einsum("mkl,nkl->mnl", a_cpu.float(), b_cpu.float())
            checked = bool(torch.allclose(c_gpu.cpu().float(), ref, atol=0.1, rtol=1e-3))
        record = {
            "device": torch.cuda.get_device_name(),
            "num_sms": torch.cuda.get_device_properties(0).multi_processor_count,
            "iket_version": versions().get("nvidia-cutlass-dsl"),
            # the GEMM's useful work, for the roofline: fp16 A, B and C once each, 2 M N K FLOPs
            "work": {"bytes": 2 * (m * k + n * k + m * n) * l, "flops": 2 * m * n * k * l},
            "case": case,
            "kernel": "HopperWgmmaGemmPersistentKernel (CUTLASS CuTe DSL example dense_gemm_persistent.py)",
            "mnkl": list(MNKL),
            "tile_mn": list(TILE_MN),
            "ctas": clusters,
            "straggler_cta": straggler if straggler >= 0 else None,
            "producer_spin_ns_per_k_tile": slow_load_ns or None,
            "result_checked": checked,
            "gpu": torch.cuda.get_device_name(),
            "versions": versions(),
            "kernel_ns": times,
            "truth_fields": ["globaltimer_entry_ns", "globaltimer_exit_ns", "smid"],
            "truth": [[int(r[0]), int(r[1]), int(r[2])] for r in rows],
        }
        truth_path.write_text(json.dumps(record, indent=1) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--example", type=Path, required=True, help="CUTLASS's dense_gemm_persistent.py")
    parser.add_argument("--out", type=Path, help="folder for the traces and truths")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--truth", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--check-patch", action="store_true", help="only check that the example takes the patch")
    args = parser.parse_args()
    if args.check_patch:
        for straggler, slow in ((-1, 0), (STRAGGLER_CTA, 0), (-1, SLOW_LOAD_NS)):
            patched_source(args.example.read_text(), straggler, slow)
        print("the example takes the patch")
        return 0
    if args.child:
        child(args.child, args.example, args.truth, args.repeats)
        return 0
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    run_iket = [shutil.which("run-iket")] if shutil.which("run-iket") else [sys.executable, "-m", "iket.cli.main"]
    for case in CASES:
        for run in range(1, args.runs + 1):
            work = out / f"_{case}_{run}"
            truth = out / f"{case}_run{run}.json"  # the trace's sidecar: device, SM count, versions, truth
            cmd = [
                *run_iket, "--output-dir", str(work), "--clobber", "profile", "--postprocess", "all", "--",
                sys.executable, __file__, "--example", str(args.example), "--child", case, "--truth", str(truth),
            ]
            print("+", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True, env=os.environ.copy())
            for found in sorted(glob.glob(str(work / "**" / "*.trace.json"), recursive=True)):
                with open(found, "rb") as src, gzip.GzipFile(out / f"{case}_run{run}.trace.json.gz", "wb", mtime=0) as dst:
                    shutil.copyfileobj(src, dst)
            for found in sorted(glob.glob(str(work / "**" / "*.pftrace.gz"), recursive=True)):
                shutil.copyfile(found, out / f"{case}_run{run}.pftrace.gz")
            shutil.rmtree(work)
        control = out / f"{case}_control.truth.json"
        cmd = [sys.executable, __file__, "--example", str(args.example), "--child", case, "--truth", str(control),
               "--repeats", "21"]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        times = json.loads(control.read_text())["kernel_ns"][1:]
        median_us = round(statistics.median(times) / 1000, 3)
        print(f"{case}: unprofiled control median {median_us:.1f} us", flush=True)
        for run in range(1, args.runs + 1):  # each run's sidecar says what the kernel takes without IKET
            side = out / f"{case}_run{run}.json"
            record = json.loads(side.read_text())
            record["control_median_us"] = median_us
            side.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
