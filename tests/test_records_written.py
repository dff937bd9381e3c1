"""A buffer that holds fewer (or more) records than its sidecar says the capture read back is said so by
analyze, inspect and check (a data-quality line; a gate refuses it unless accepted), not passed silently: its
lanes may all end early and pair cleanly, with no other sign that records are missing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


@pytest.fixture
def cut(tmp_path):
    """samples/balanced_ktrace with every lane's records after the 32nd zeroed: 4,224 of the 6,336 the
    sidecar says were written, all paired."""
    words = np.fromfile(SAMPLES / "balanced_ktrace.bin", "<u8").copy()
    meta = json.loads((SAMPLES / "balanced_ktrace.json").read_text())
    lanes = int(words[0] & 0xFFFFFFFF) * int(words[0] >> 32)
    cap = meta["buffer"]["records_per_lane_capacity"]
    words[1 + 32 * lanes:1 + cap * lanes] = 0
    p = tmp_path / "cut.bin"
    words.tofile(p)
    shutil.copy(SAMPLES / "balanced_ktrace.json", tmp_path / "cut.json")
    assert meta["buffer"]["records_written"] == 6336 and np.count_nonzero(words[1:1 + cap * lanes]) == 4224
    return p


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "ktrace", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


WORDS = "the sidecar says 6,336 records were written but the buffer holds 4,224: 2,112 missing"


def test_analyze_warns_first(cut):
    r = _cli("analyze", cut, "--engine", "numpy")
    assert r.returncode == 0, r.stderr
    assert WORDS in " ".join(r.stdout.split()), r.stdout
    r = _cli("analyze", cut, "--engine", "numpy", "--json")
    dq = json.loads(r.stdout)["data_quality"]
    assert dq["records_written"] == 6336 and any(WORDS in w for w in dq["warnings"])


def test_inspect_says_it(cut):
    r = _cli("inspect", cut)
    assert r.returncode == 0 and WORDS in " ".join(r.stdout.replace("│", " ").split()), r.stdout
    assert json.loads(_cli("inspect", cut, "--json").stdout)["records_written"] == 6336


def test_check_refuses_it_unless_accepted(cut):
    r = _cli("check", cut, "--rule", "kernel.wall_us <= 1e9")
    assert r.returncode == 2 and "4,224 records where the sidecar says 6,336 were written" in r.stderr, r.stderr
    assert "--allow-anomalies records_written" in r.stderr


def test_the_samples_hold_what_their_sidecars_say():
    from ktrace.api import analyze

    a = analyze(SAMPLES / "balanced_ktrace.bin", engine="numpy")
    assert a.data_quality.records_written == 6336 and a.data_quality.ok
