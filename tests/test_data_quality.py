"""Records the figures do not hold (lost, unpaired, overwritten, unreadable) are said before the findings, in
every format, with their counts; a buffer whose records barely match their layout is refused (exit 2)."""

import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from conftest import run_ktrace, sample


def _ktrace(*args):
    return subprocess.run(["ktrace", *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    d = tmp_path_factory.mktemp("damaged")
    words = np.fromfile(sample("imbalance_ktrace"), dtype="<u8")
    words[: len(words) // 2].tofile(d / "half.bin")
    rng = np.random.default_rng(1)
    noise = words.copy()
    noise[1:] = rng.integers(0, 2**63, len(words) - 1, dtype=np.uint64)
    noise.tofile(d / "noise.bin")
    return d


_WARNINGS = re.compile(r"^(?:no warnings|\d+ warnings?)\b", re.M)  # the short report's line above its warnings


def _quality(out: str) -> dict:
    return json.loads(out)["data_quality"]


@pytest.mark.slow
def test_an_overflowed_capture_warns_of_the_lost_records_in_every_format():
    buf = sample("overflow_ktrace")
    text = _ktrace("analyze", buf)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    warn = next(i for i, line in enumerate(lines) if "8 records lost" in line)
    assert warn < next(i for i, line in enumerate(lines) if _WARNINGS.match(line))
    md = _ktrace("analyze", buf, "--markdown").stdout
    assert "8 records lost" in md and md.index("8 records lost") < md.index("warnings")
    q = _quality(_ktrace("analyze", buf, "--json").stdout)
    assert q["lost_records"] == 8 and any("8 records lost" in w for w in q["warnings"])


@pytest.mark.slow
def test_a_buffer_cut_to_half_its_records_is_not_silent(damaged):
    r = _ktrace("analyze", damaged / "half.bin", "--no-sidecar")
    assert r.returncode == 0, r.stderr
    assert "data quality" in r.stdout and "66 unpaired records" in r.stdout and "132 lane(s) full" in r.stdout
    q = _quality(_ktrace("analyze", damaged / "half.bin", "--no-sidecar", "--json").stdout)
    assert q["unpaired_records"] == 66 and q["full_lanes"] == 132


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["numpy", "wasm"])
def test_a_valid_header_over_random_records_is_refused(damaged, engine):
    r = _ktrace("analyze", damaged / "noise.bin", "--no-sidecar", "--engine", engine)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "noise.bin: only <0.1% of its 6,997 records agree with their position" in r.stderr
    assert "--layout flashinfer" in r.stderr


@pytest.mark.slow
def test_a_named_layout_analyzes_random_records_with_the_warning_first(damaged):
    r = _ktrace("analyze", damaged / "noise.bin", "--no-sidecar", "--layout", "flashinfer")
    assert r.returncode == 0, r.stderr
    head = _WARNINGS.split(r.stdout)[0]
    assert "records agree with their position" in head and "6,996 of 6,997 records unreadable" in head


@pytest.mark.slow
def test_overwritten_flashinfer_instants_are_said():
    q = _quality(_ktrace("analyze", sample("instants_flashinfer"), "--json").stdout)
    assert q["overwritten_lanes"] == 4 and "overwritten" in q["warnings"][0]


@pytest.mark.slow
def test_a_clean_capture_has_no_warning_and_its_trace_says_the_same(tmp_path):
    buf = sample("warpgroups_ktrace")
    q = _quality(_ktrace("analyze", buf, "--json").stdout)
    assert q["warnings"] == [] and q["lost_records"] == 0 and q["known"]
    assert "data quality" not in _ktrace("analyze", buf).stdout
    trace = tmp_path / "o.perfetto-trace"
    assert _ktrace("convert", sample("overflow_ktrace"), "-o", trace).returncode == 0
    assert _quality(_ktrace("analyze", trace, "--json").stdout)["lost_records"] == 8


def test_a_buffer_without_a_sidecar_says_its_phases_are_unnamed(tmp_path):
    buf = tmp_path / "nosidecar.bin"
    shutil.copy(sample("imbalance"), buf)  # no nosidecar.json beside it
    rc, out, err = run_ktrace("analyze", buf)
    assert rc == 0, err
    text = " ".join(out.split())
    assert "data quality: the phases have no names" in text
    assert "the phases are named by event index (event_0, event_1, event_2)" in text and "--events" in text
    rc, out, _ = run_ktrace("analyze", buf, "--events", "load,compute,reduce")
    assert rc == 0 and "data quality" not in out and "compute" in out
    rc, out, _ = run_ktrace("analyze", sample("imbalance"))  # its sidecar names them
    assert rc == 0 and "data quality" not in out and "event_" not in out
