"""scripts/fuzz_inputs.py in CI: sidecars, rules, clocks files, traces and command-line values, a fixed seed,
a few seconds, and no input that ends in anything but ktrace's own error (or a usage exit)."""

import json
import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.mark.slow
def test_the_input_fuzz_finds_no_crash_on_a_fixed_seed():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "fuzz_inputs.py"), "--cases", "150", "--seed", "3",
                        "--seconds", "20"], capture_output=True, text=True, timeout=300)
    summary = json.loads(p.stdout.splitlines()[-1])
    assert p.returncode == 0 and summary["crashes"] == 0, p.stderr[-4000:]
    for kind in ("sidecar", "rules", "clocks", "trace", "cli"):
        assert summary[kind]["cases"] >= 10, summary  # every kind ran within the budget
        assert "crashes" not in summary[kind]
    assert summary["cli"].get("exit_0", 0) > 0 and summary["cli"].get("exit_2", 0) > 0
