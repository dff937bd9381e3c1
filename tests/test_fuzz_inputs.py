"""scripts/fuzz_inputs.py in CI: sidecars, rules, clocks files, traces, command-line values, Triton Proton
traces, NVIDIA IKET traces, .bin.gz buffers and FIFOs, at fixed seeds, a few seconds each, and no input that ends in anything but
ktrace's own error (or a usage exit), a hang or a traceback."""

import json
import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.mark.slow
def test_the_input_fuzz_finds_no_crash_on_a_fixed_seed():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "fuzz_inputs.py"), "--cases", "150", "--seed", "3",
                        "--seconds", "20", "--kinds", "sidecar,rules,clocks,trace,cli"], capture_output=True, text=True, timeout=300)
    summary = json.loads(p.stdout.splitlines()[-1])
    assert p.returncode == 0 and summary["crashes"] == 0, p.stderr[-4000:]
    for kind in ("sidecar", "rules", "clocks", "trace", "cli"):
        assert summary[kind]["cases"] >= 10, summary  # every kind ran within the budget
        assert "crashes" not in summary[kind]
    assert summary["cli"].get("exit_0", 0) > 0 and summary["cli"].get("exit_2", 0) > 0


@pytest.mark.slow
def test_hostile_proton_traces_gzip_buffers_and_fifos_end_in_a_report_or_exit_2():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "fuzz_inputs.py"), "--cases", "300", "--seed", "5",
                        "--kinds", "proton,gzbuf,fifo", "--seconds", "150"], capture_output=True, text=True,
                       timeout=600)
    summary = json.loads(p.stdout.splitlines()[-1])
    assert p.returncode == 0 and summary["crashes"] == 0, p.stderr[-4000:]
    for kind in ("proton", "gzbuf", "fifo"):
        assert summary[kind]["cases"] >= 50 and "crashes" not in summary[kind], summary
    # hostile inputs both read (what can be, with the rest counted) and refused, never all one way
    assert summary["proton"]["ok"] > 0 and summary["proton"]["refused"] > 0
    assert summary["gzbuf"]["ok"] > 0 and summary["gzbuf"]["refused"] > 0
    assert summary["fifo"] == {"cases": summary["fifo"]["cases"], "exit_2": summary["fifo"]["cases"]}
    assert summary["peak_rss_mb"] < 1024  # the bombs stop at their limits


@pytest.mark.slow
def test_hostile_iket_traces_end_in_a_report_or_exit_2():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "fuzz_inputs.py"), "--cases", "300", "--seed", "7",
                        "--kinds", "iket", "--seconds", "60"], capture_output=True, text=True, timeout=600)
    summary = json.loads(p.stdout.splitlines()[-1])
    assert p.returncode == 0 and summary["crashes"] == 0, p.stderr[-4000:]
    assert summary["iket"]["cases"] >= 50 and summary["iket"]["ok"] > 0 and summary["iket"]["refused"] > 0, summary
    assert summary["peak_rss_mb"] < 1024


@pytest.mark.slow
def test_sparse_claims_one_lane_gzips_and_long_names_end_in_a_report_or_exit_2_in_bounded_memory():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "fuzz_inputs.py"), "--cases", "40", "--seed", "11",
                        "--kinds", "sparse,iket,proton", "--seconds", "60"], capture_output=True, text=True,
                       timeout=600)
    summary = json.loads(p.stdout.splitlines()[-1])
    assert p.returncode == 0 and summary["crashes"] == 0, p.stderr[-4000:]
    assert summary["sparse"]["cases"] >= 5 and summary["sparse"].get("refused", 0) > 0, summary
    assert summary["peak_rss_mb"] < 1000  # every case, the fuzzer's own bound too
