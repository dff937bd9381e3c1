"""On a GPU: each sample kernel compiled with each available header, launched, decoded, and checked
against the ground truth it was built to show; calibrate; the Capture context object."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ktrace

from .conftest import headers, run_capture, sidecar

HEADERS = headers()


def _run(tmp_path, driver, header, *args):
    rc, out, err = run_capture(tmp_path, driver, header, *args)
    assert rc == 0, f"ktrace run {driver} --header {header} failed ({rc}):\n{out}\n{err}"
    return out


def _decoded_ok(path, producer):
    d = ktrace.decode(path)
    assert d.accounted
    assert d.launch.producer == producer
    return d


@pytest.mark.parametrize("header", HEADERS)
@pytest.mark.parametrize("driver,name", [("imbalance.py", "imbalance"), ("moving_straggler.py", "moving_straggler")])
def test_persistent_last_finisher(tmp_path, header, driver, name):
    out = _run(tmp_path, driver, header)
    meta = sidecar(tmp_path, f"{name}_{header}")
    c, gt = meta["checks"], meta["ground_truth"]
    assert meta["producer"] == header
    assert c["last_compute_finisher_per_iter"] == gt["slow_block_per_iter"]
    assert min(c["slow_block_compute_duration_over_median_others"]) > 2.5
    assert c["sm_field_differs"] == 0  # fewer than 4096 blocks: both headers' SM bytes are exact
    assert meta["timing"]["without_profiler"]["median_us"] > 0
    d = _decoded_ok(tmp_path / f"{name}_{header}.bin", header)
    assert len(d.slices) == meta["num_blocks"] * 3 * gt["iterations"]
    assert not d.anomalies.counts()
    assert "finished 'compute' last in 8/8" in out
    if header == "ktrace":
        assert meta["buffer"]["overflow_records"] == 0
        assert meta["timer"]["anchor_ns"] > 0
        assert abs(meta["timer"]["anchor_ns"] - meta["host_launch_unix_ns"]) < 1_000_000_000


@pytest.mark.parametrize("header", HEADERS)
def test_warpgroups_overlap(tmp_path, header):
    _run(tmp_path, "warpgroups.py", header)
    meta = sidecar(tmp_path, f"warpgroups_{header}")
    c = meta["checks"]
    assert c["group0_all_load"] and c["group1_all_mma"]
    assert min(c["fraction_blocks_where_load_t1_overlaps_mma_t"]) > 0.9
    d = _decoded_ok(tmp_path / f"warpgroups_{header}.bin", header)
    assert set(np.unique(d.slices.group).tolist()) == {0, 1}
    assert len(d.slices) == meta["num_blocks"] * 2 * 4


@pytest.mark.parametrize("header", HEADERS)
def test_instants(tmp_path, header):
    _run(tmp_path, "instants.py", header)
    meta = sidecar(tmp_path, f"instants_{header}")
    assert meta["checks"]["landed_matches_prediction"], meta["checks"]["landed_per_lane"]
    d = _decoded_ok(tmp_path / f"instants_{header}.bin", header)
    per_lane = 4 if header == "ktrace" else 1  # FlashInfer's header keeps only the trailing instant
    assert len(d.instants) == per_lane * meta["num_blocks"]
    assert len(d.slices) == 2 * meta["num_blocks"]


def test_overflow_guard(tmp_path):
    _run(tmp_path, "instants.py", "ktrace", "--capacity", "6", "--name", "overflow")
    meta = sidecar(tmp_path, "overflow_ktrace")
    assert meta["checks"]["overflow_per_lane"] == [2] * meta["num_blocks"]
    assert meta["buffer"]["overflow_records"] == 2 * meta["num_blocks"]
    d = _decoded_ok(tmp_path / "overflow_ktrace.bin", "ktrace")
    assert d.records == 6 * meta["num_blocks"]
    assert d.notes.get("overflow") == meta["num_blocks"]


@pytest.mark.parametrize("header", HEADERS)
def test_blocks_over_4096(tmp_path, header):
    _run(tmp_path, "blocks5000.py", header)
    meta = sidecar(tmp_path, f"blocks5000_{header}")
    c, nb = meta["checks"], meta["num_blocks"]
    assert nb > 5000
    assert c["records_per_lane_min_max"] == [4, 4]
    smid = np.asarray(meta["block_smid"])
    if header == "ktrace":
        assert c["sm_field_differs"] == 0
    else:  # bit 12 of the block index lands in the SM byte: wrong where the true SM is even
        assert c["sm_field_differs"] == c["sm_field_differs_blocks_ge_4096"]
        assert c["sm_field_differs"] == 4 * int(((np.arange(nb) >= 4096) & (smid % 2 == 0)).sum())
    d = _decoded_ok(tmp_path / f"blocks5000_{header}.bin", header)
    assert len(d.slices) == 2 * nb
    assert np.array_equal(np.unique(d.slices.block), np.arange(nb))


@pytest.mark.slow
def test_calibrate(tmp_path):
    from .conftest import _capture_cli
    import os
    import subprocess

    env = dict(os.environ, KTRACE_CACHE_DIR=str(tmp_path))
    p = subprocess.run([*_capture_cli(), "calibrate", "--json", "--reps", "10", "--probes", "256"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    cal = json.loads(p.stdout)
    assert cal["tick_ns"] and 0 < cal["tick_ns"] <= 1000
    assert all(v > 0 for v in cal["probe_cost_ns"].values())
    assert list((tmp_path / "calibration").glob("*.json"))


SRC = r"""
#include <stdint.h>
using namespace flashinfer;
struct ProfilerClosure { PROFILER_CLOSURE_PARAMS_DECL };
struct ProfilerParams { uint64_t* profiler_buffer; };
extern "C" __global__ void two_phases(uint64_t* profiler_buffer, float* out) {
  [[maybe_unused]] ProfilerParams params{profiler_buffer};
  [[maybe_unused]] ProfilerClosure closure;
  PROFILER_INIT(params, nullptr, closure, 0, 1, threadIdx.x == 0);
  float x = threadIdx.x;
  PROFILER_EVENT_START(closure, 0);
  for (int i = 0; i < 1000; ++i) x = fmaf(x, 0.999f, 0.5f);
  PROFILER_EVENT_END(closure, 0);
  PROFILER_EVENT_INSTANT(closure, 1);
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}
"""


@pytest.mark.parametrize("header", HEADERS)
def test_capture_context_object(tmp_path, header):
    import pycuda.gpuarray as gpuarray

    from ktrace.capture import CudaKernel, LaunchCapture

    kern = CudaKernel(SRC, "two_phases", header=header)
    out = gpuarray.zeros(8 * 32, np.float32)
    with LaunchCapture(blocks=8, max_events_per_lane=4, kernel=kern, name="ctx", event_names=["work", "mark"],
                       block=(32, 1, 1)) as cap:
        kern.instrumented(cap.pointer, out, grid=(8, 1, 1), block=(32, 1, 1))
    assert cap.header_ok and cap.records == 8 * 3
    path = cap.save(tmp_path / "ctx")
    assert path.exists() and path.with_suffix(".json").exists()
    trace = ktrace.convert(path).path
    assert trace.exists() and trace.stat().st_size > 0
    d = ktrace.decode(path)
    assert len(d.slices) == 8 and len(d.instants) == 8
    assert (d.slices.dur_ns > 0).all()
