"""A fast slice of scripts/fuzz_decode.py, and every crashing input it ever found, replayed."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ktrace import KtraceError, decode
from ktrace.export.writer import trace_bytes

ROOT = Path(__file__).resolve().parent.parent
REGRESSIONS = sorted((ROOT / "tests" / "fuzz_regressions").glob("*.bin"))


@pytest.mark.slow
def test_fuzz_slice_has_no_crash_or_hang(tmp_path):
    # In its own process: the fuzzer caps its address space and sets alarms.
    out = tmp_path / "summary.json"
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "fuzz_decode.py"), "--cases", "600", "--seed", "3",
                        "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(out.read_text())
    assert summary["crashes"] == 0 and summary["hangs"] == 0
    assert {"tag_mismatch", "backwards", "end_without_begin", "begin_without_end"} <= set(summary["anomaly_kinds_seen"])


@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.name for p in REGRESSIONS])
@pytest.mark.parametrize("with_sidecar", [False, True])
def test_regression_inputs(path, with_sidecar):
    data = path.read_bytes()
    side = ROOT / "samples" / (path.name.split("-")[0] + ".json")
    try:
        d = decode(data, sidecar=str(side) if with_sidecar and side.exists() else False)
    except KtraceError as e:
        assert str(e)
        return
    assert d.accounted
    assert (d.slices.begin_ns >= 0).all() and (d.anomalies.ts_ns >= 0).all()
    trace_bytes(d)
