"""An output never replaces another capture, a sidecar or a trace that is not its own kind of output, wherever it
lies (recognized by content), unless --force; and --json=/dev/stdout prints."""

from __future__ import annotations

import errno
import gzip
import json
import shutil
import subprocess

import pytest

from ktrace.cli import main
from ktrace.core.outputs import captured_kind, cannot_write

from conftest import ROOT, SAMPLES, run_ktrace, sample


@pytest.fixture
def folder(tmp_path):
    """imbalance.bin and its sidecar, and a trace of another capture beside them (cap.perfetto-trace)."""
    for name in ("imbalance.bin", "imbalance.json"):
        shutil.copy(SAMPLES / name, tmp_path / name)
    assert main(["convert", str(sample("warpgroups")), "-o", str(tmp_path / "cap.perfetto-trace")]) == 0
    return tmp_path


def _files(d):
    return {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}


def test_a_report_never_replaces_another_captures_sidecar_and_force_lets_it(folder):
    before = _files(folder)
    for args in (["analyze", "cap.perfetto-trace", "--json=imbalance.json"],
                 ["query", "cap.perfetto-trace", "SELECT 1 AS x", "--json=imbalance.json"]):
        rc, out, err = run_ktrace(*args, cwd=folder)
        assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith("ktrace: error: imbalance.json: holds a launch sidecar (of imbalance.bin)")
        assert "choose another --json, or add --force" in err
    assert _files(folder) == before
    rc, out, _ = run_ktrace("analyze", "imbalance.bin", "--json", cwd=folder)  # the capture still reads
    assert rc == 0 and json.loads(out)["schema"].startswith("ktrace.analysis/")
    rc, _, err = run_ktrace("analyze", "cap.perfetto-trace", "--json=imbalance.json", "--force", cwd=folder)
    assert rc == 0, err
    assert json.loads((folder / "imbalance.json").read_text())["source"] == "cap.perfetto-trace"


def test_an_output_run_again_replaces_its_own_kind(folder, capsys):
    trace, report = folder / "cap.perfetto-trace", folder / "report.json"
    for _ in range(2):  # a trace replaces a trace; a report a report
        assert main(["convert", str(folder / "imbalance.bin"), "-o", str(trace)]) == 0
        assert main(["analyze", str(folder / "imbalance.bin"), f"--json={report}", f"--markdown={folder / 'r.md'}",
                     "--plot", str(folder / "r.png")]) == 0
    assert captured_kind(trace) == "a Perfetto trace" and captured_kind(report) is None


@pytest.mark.parametrize("kind,make", [
    ("a profiler buffer", lambda d: shutil.copy(sample("warpgroups"), d / "old.bin")),
    ("a profiler buffer", lambda d: shutil.copy(SAMPLES / "fi_mla_decode_run1.bin.gz", d / "old.bin.gz")),
    ("a profiler buffer", lambda d: shutil.copy(sample("warpgroups"), d / "capture.dat")),  # by content alone
    ("a launch sidecar", lambda d: shutil.copy(SAMPLES / "warpgroups.json", d / "elsewhere.json")),  # no capture beside
    ("a launch sidecar", lambda d: shutil.copy(SAMPLES / "proton" / "triton_balanced.json", d / "p.json")),
    ("a Triton Proton trace", lambda d: shutil.copy(SAMPLES / "proton" / "triton_balanced.chrome_trace",
                                                    d / "proton.json")),
    ("an NVIDIA IKET trace", lambda d: shutil.copy(SAMPLES / "iket" / "gemm_run1.trace.json.gz",
                                                   d / "g.trace.json.gz")),
    ("an NVIDIA IKET trace", lambda d: (d / "i.json").write_bytes(
        gzip.decompress((SAMPLES / "iket" / "gemm_run1.trace.json.gz").read_bytes()))),
    ("a Perfetto trace", lambda d: shutil.copy(d / "cap.perfetto-trace", d / "notes.md")),  # by content, not name
])
def test_each_kind_is_recognized_by_content_and_kept(folder, capsys, kind, make):
    make(folder)
    before = _files(folder)
    (target,) = set(before) - {"imbalance.bin", "imbalance.json", "cap.perfetto-trace"}
    assert captured_kind(folder / target) == kind
    option = "--json" if target.endswith(".json") else "--markdown"
    if target.endswith((".bin", ".bin.gz", ".dat")):
        argv = ["convert", str(folder / "imbalance.bin"), "-o", str(folder / target)]  # a trace over a buffer
    else:
        argv = ["analyze", str(folder / "imbalance.bin"), f"{option}={folder / target}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"holds {kind}" in err and "--force" in err and "Traceback" not in err
    assert _files(folder) == before


def test_ktrace_reports_and_other_files_are_not_taken_for_captures(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"schema": "ktrace.analysis/2", "kernel": {}, "grid": [1]}))
    (tmp_path / "q.json").write_text(json.dumps([{"kernel": "k", "grid": 1}]))  # a query's rows
    (tmp_path / "cal.json").write_text(json.dumps({"device": "H200", "tick_ns": 32, "pci_bus_id": "0"}))
    (tmp_path / "notes.md").write_text("\n\n# notes\n")  # starts with newlines, as a trace starts with 0x0a
    (tmp_path / "empty.bin").write_bytes(b"")
    (tmp_path / "plot.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(4088))
    (tmp_path / "words.dat").write_bytes((7 | 5000 << 32).to_bytes(8, "little") + bytes(8 * 70))  # 5,000 groups
    for name in ("a.json", "q.json", "cal.json", "notes.md", "empty.bin", "missing.json", "plot.png", "words.dat"):
        assert captured_kind(tmp_path / name) is None, name


def test_json_to_this_process_stdout_prints_it(tmp_path):
    src = sample("imbalance")
    for target in ("/proc/self/fd/1", "/dev/stdout"):
        p = subprocess.run(f"ktrace analyze {src} --json={target} | cat", shell=True, capture_output=True, text=True,
                           cwd=ROOT, timeout=120)
        assert p.returncode == 0 and json.loads(p.stdout)["schema"].startswith("ktrace.analysis/"), p.stderr
    out = tmp_path / "out.json"
    with open(out, "w") as f:  # stdout a file: /proc/self/fd/1 is that file, and the JSON is printed there
        p = subprocess.run(["ktrace", "analyze", str(src), "--json=/proc/self/fd/1"], stdout=f, stderr=subprocess.PIPE,
                           text=True, timeout=120)
    assert p.returncode == 0 and json.loads(out.read_text())["schema"].startswith("ktrace.analysis/")
    rc, out_text, err = run_ktrace("analyze", src, "--json=/dev/stderr")
    assert rc == 0 and '"schema": "ktrace.analysis/' in err and "persistent_phases" in out_text


def test_a_write_that_fails_names_no_option_it_was_not_given(tmp_path):
    e = OSError(errno.ENOENT, "No such file or directory")
    msg = str(cannot_write(tmp_path / "x.json", e, "JSON file"))
    assert "another -o" not in msg and "write the JSON file elsewhere" in msg
