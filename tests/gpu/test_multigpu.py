"""On a machine with two GPUs or more: the clock offset between two GPUs, and the imbalance kernel run on both
at once (``ktrace run --device 0,1``), merged into one trace with a process per GPU. Skipped with fewer."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from .conftest import KERNELS, ROOT, _capture_cli, sidecar


def _gpus() -> int:
    try:
        from ktrace.capture._cuda import driver

        cuda = driver()
        cuda.init()
        return cuda.Device.count()
    except Exception:  # noqa: BLE001 - no PyCUDA, no driver: no GPUs
        return 0


pytestmark = [pytest.mark.skipif(_gpus() < 2, reason="needs two CUDA GPUs"), pytest.mark.slow]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def _measure(devices: str) -> dict:
    code = ("import json; from ktrace.capture.clocksync import measure_clock_offsets as m; "
            f"print(json.dumps(m([{devices}]).as_dict()))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_the_offset_is_measured_the_same_from_either_side():
    a, b = _measure("0, 1"), _measure("1, 0")
    ab, ba = a["offsets"][1], b["offsets"][1]
    assert a["offsets"][0]["offset_to_reference_ns"] == 0 and len(ab["samples_ns"]) == a["rounds"] == 50
    assert abs(ab["offset_to_reference_ns"]) < 10_000_000  # both are Unix-epoch ns: far below 10 ms apart
    assert ab["spread_ns"] < 20_000
    # GPU 1 - GPU 0 measured one way is minus GPU 0 - GPU 1 the other way, to within the noise and drift.
    assert abs(ab["offset_to_reference_ns"] + ba["offset_to_reference_ns"]) < 2_000 + ab["spread_ns"] + ba["spread_ns"]


def test_the_imbalance_kernel_on_two_gpus_at_once(tmp_path):
    cmd = [*_capture_cli(), "run", "--device", "0,1", "--out", str(tmp_path), "--header", "ktrace", "--reps", "5",
           "--warmup", "2", str(KERNELS / "imbalance.py"), "--name", "mg"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=600)
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr}"
    metas = [sidecar(tmp_path, f"mg_gpu{i}") for i in (0, 1)]
    for i, m in enumerate(metas):
        assert m["device"]["index"] == i
        assert m["checks"]["last_compute_finisher_per_iter"] == [17] * 8
        t = m["timer"]
        assert t["anchor_ns"] > 0 and len(t["clock_sync"]["measured_unix_ns"]) == 2
        assert t["clock_sync"]["reference_device_index"] == 0 and t["clock_sync"]["id"] == metas[0]["timer"]["clock_sync"]["id"]
    assert metas[0]["timer"]["offset_to_reference_ns"] == 0
    assert abs(metas[1]["timer"]["offset_to_reference_ns"]) < 10_000_000
    assert (tmp_path / "clock_sync.json").exists()

    merged = tmp_path / "mg_merged.perfetto-trace"
    t = pb.Trace()
    t.ParseFromString(merged.read_bytes())
    procs = {k.track_descriptor.process.process_name for k in t.packet if k.track_descriptor.HasField("process")}
    assert procs == {f"GPU 0 ({metas[0]['device']['name']})", f"GPU 1 ({metas[1]['device']['name']})"}
    assert {k.trusted_packet_sequence_id for k in t.packet} == {1, 2}
    assert "across GPUs" in p.stdout

    from ktrace.analysis.figures.across_gpus import cross_gpu

    x = cross_gpu([tmp_path / "mg_gpu0.bin", tmp_path / "mg_gpu1.bin"])
    pg = x.per_gpu.where(x.per_gpu.phase == "compute")
    assert set(pg.last_block.tolist()) == {17} and len(pg) == 16
    # The launch barrier held both captured launches until both processes were ready: on the common axis the
    # GPUs start the first phase within a millisecond of each other.
    first = x.instances.where((x.instances.phase == "load") & (x.instances.k == 0))
    assert int(first.gpus[0]) == 2 and int(first.start_skew_ns[0]) < 1_000_000
    assert np.all(x.instances.gpus == 2)
