"""On a GPU: `ktrace run --ab` on a change of about 1% (more_work.py with 2% more compute per block) and on a
no-op (the same driver twice), then `ktrace diff` of each session's two captures."""

from __future__ import annotations

import json
import os
import subprocess

from .conftest import KERNELS, ROOT, _capture_cli


def _ab(tmp_path, before: str, after: str, pairs: int = 100):
    cmd = [*_capture_cli(), "run", "--out", str(tmp_path), "--header", "ktrace", "--reps", "10", "--warmup", "3",
           "--pairs", str(pairs), "--no-report", "--ab", before, after]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert p.returncode == 0, f"{cmd} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    return p.stdout


def _diff(tmp_path, before: str, after: str) -> dict:
    cmd = [*_capture_cli(), "diff", "--json", str(tmp_path / before), str(tmp_path / after)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_ab_sees_a_one_percent_change(tmp_path):
    w = str(KERNELS / "more_work.py")
    out = _ab(tmp_path, w, f"{w} --extra-work 2 --name more")
    rec = json.loads((tmp_path / "more_work_vs_more.ab.json").read_text())
    v = rec["verdict"]
    assert v["change"] == "slower", out
    assert 0.003 < v["relative"] < 0.03 and v["relative_ci"][0] > 0
    assert rec["timing"]["pairs"] == 100 and rec["timing"]["order"][:2] in (["AB", "BA"], ["BA", "AB"])
    assert "verdict: SLOWER" in out
    d = _diff(tmp_path, "more_work_before.bin", "more_after.bin")
    assert d["verdict"]["verdict"] == "worse" and d["verdict"]["test"] == "paired"
    assert d["headline"].startswith("SLOWER: unprofiled")


def test_ab_of_the_same_driver_twice_says_no_change(tmp_path):
    w = str(KERNELS / "more_work.py")
    _ab(tmp_path, f"{w} --name same", f"{w} --name same")
    rec = json.loads((tmp_path / "same_vs_same.ab.json").read_text())
    assert rec["verdict"]["change"] == "no change", rec["verdict"]["text"]
    d = _diff(tmp_path, "same_before.bin", "same_after.bin")
    assert d["verdict"]["verdict"] == "no change" and d["headline"].startswith("no change: unprofiled")
