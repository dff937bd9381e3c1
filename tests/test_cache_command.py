"""``ktrace cache`` lists what the cache holds and ``ktrace cache clear`` empties it (only its own files, never
through a link); a large snapshot is announced once; a large trace analyzed beside its buffer says the buffer is
faster."""

from __future__ import annotations

import os

import numpy as np
import pytest

import ktrace
from ktrace.cli import main
from ktrace.engine import wasm_snapshot

from conftest import run_ktrace, sample


@pytest.fixture
def cache(tmp_path):
    """A cache folder as ktrace leaves it: a compiled engine and two snapshots, each with its record; a user's
    own file and a link to a file outside beside them."""
    c = tmp_path / "cache"
    (c / "snapshots").mkdir(parents=True, mode=0o700)
    c.chmod(0o700)
    (c / "trace_processor-v52-abc.cwasm").write_bytes(b"x" * 3_000_000)
    (c / "trace_processor-v52-abc.cwasm.sha256").write_text("sha256 " + "0" * 64 + "\n")
    (c / "snapshots" / "trace-1111.tpsnap").write_bytes(b"s" * 2_000_000)
    (c / "snapshots" / "trace-1111.tpsnap.sha256").write_text("sha256 " + "1" * 64 + "\n")
    (c / "snapshots" / "trace-2222.tpsnap").write_bytes(b"s" * 500_000)
    (c / "notes.txt").write_text("mine")
    outside = tmp_path / "precious.cwasm"
    outside.write_bytes(b"p" * 1000)
    (c / "trace_processor-v52-link.cwasm").symlink_to(outside)
    (c / "snapshots" / "trace-link.tpsnap").symlink_to(outside)
    return c


def _env(cache) -> dict:
    """The cache folder, and a temporary folder of the test's own: no fallback cache of this machine's is listed."""
    return {"KTRACE_CACHE_DIR": str(cache), "TMPDIR": str(cache.parent)}


def test_cache_lists_each_entry_with_its_size_and_the_total(cache):
    rc, out, err = run_ktrace("cache", env=_env(cache))
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == f"ktrace cache: {cache}"
    assert any(line.split() == ["compiled", "engine", "3.0", "MB", "trace_processor-v52-abc.cwasm"] for line in lines)
    assert any(line.split() == ["snapshot", "2.0", "MB", "snapshots/trace-1111.tpsnap"] for line in lines)
    assert any(line.split() == ["snapshot", "0.5", "MB", "snapshots/trace-2222.tpsnap"] for line in lines)
    assert "total: 1 compiled engine(s), 2 snapshot(s), 5.5 MB" in out
    assert "notes.txt" not in out and "link" not in out  # not the cache's: neither listed nor counted
    assert "KTRACE_SNAPSHOT_GIB=0" in out


def test_cache_clear_removes_only_its_own_files_and_never_follows_a_link(cache, tmp_path):
    rc, out, err = run_ktrace("cache", "clear", env=_env(cache))
    assert rc == 0, err
    assert out.splitlines()[0] == f"ktrace cache clear: removed 5 file(s), 5.5 MB, from {cache}"
    left = sorted(str(p.relative_to(cache)) for p in cache.rglob("*"))
    assert left == ["notes.txt", "snapshots", "snapshots/trace-link.tpsnap", "trace_processor-v52-link.cwasm"]
    assert (tmp_path / "precious.cwasm").read_bytes() == b"p" * 1000
    rc, out, _ = run_ktrace("cache", env=_env(cache))
    assert rc == 0 and "total: 0 compiled engine(s), 0 snapshot(s), 0.0 MB" in out


def test_an_empty_or_missing_cache_is_not_an_error(tmp_path):
    env = _env(tmp_path / "none")
    assert run_ktrace("cache", env=env)[:2] == (0, f"ktrace cache: {tmp_path / 'none'} (empty)\n"
                                                "total: 0 compiled engine(s), 0 snapshot(s), 0.0 MB\n"
                                                "ktrace cache clear empties it; KTRACE_SNAPSHOT_GIB=0 turns "
                                                "snapshots off; KTRACE_CACHE_DIR moves it\n")
    assert run_ktrace("cache", "clear", env=env)[0] == 0
    rc, _, err = run_ktrace("cache", "wipe", env=env)
    assert rc == 2 and "invalid choice: 'wipe'" in err


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() == 0, reason="root removes any file")
def test_a_file_that_cannot_be_removed_exits_2_with_its_name(cache):
    (cache / "snapshots").chmod(0o500)
    try:
        rc, _, err = run_ktrace("cache", "clear", env=_env(cache))
    finally:
        (cache / "snapshots").chmod(0o700)
    assert rc == 2 and "trace-1111.tpsnap" in err and "Traceback" not in err


def test_a_file_that_cannot_be_removed_exits_2_naming_it(cache, monkeypatch, capsys):
    from ktrace.engine import cache_contents

    def refused(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setenv("KTRACE_CACHE_DIR", str(cache))
    monkeypatch.setattr(cache_contents.tempfile, "tempdir", str(cache.parent))  # no fallback cache of the machine's
    monkeypatch.setattr(cache_contents.os, "unlink", refused)
    assert main(["cache", "clear"]) == 2
    err = capsys.readouterr().err
    assert "trace_processor-v52-abc.cwasm: Permission denied" in err and "Traceback" not in err


def test_a_large_snapshot_is_announced_once_with_how_to_turn_snapshots_off(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KTRACE_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv(wasm_snapshot.BUDGET_ENV, raising=False)
    monkeypatch.setattr(wasm_snapshot, "_announced", [])
    figures = lambda: (1, 2, 3)  # noqa: E731 (what the engine would answer)
    memory = np.ones(4 * wasm_snapshot.PAGE_BYTES, np.uint8)
    assert wasm_snapshot.write("a" * 64, {}, memory, figures) == ""
    assert capsys.readouterr().err == ""  # 262 KB: under the 100 MB it is said from
    monkeypatch.setattr(wasm_snapshot, "ANNOUNCE_BYTES", 100_000)
    assert wasm_snapshot.write("b" * 64, {}, memory, figures) == ""
    assert wasm_snapshot.write("c" * 64, {}, memory, figures) == ""
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("ktrace: kept a 0 MB snapshot of the loaded trace in ")
    assert "KTRACE_SNAPSHOT_GIB=0 turns snapshots off" in err[0] and "`ktrace cache`" in err[0]


def test_a_large_trace_with_its_buffer_beside_it_says_the_buffer_is_faster(tmp_path, monkeypatch, capsys):
    import shutil

    from ktrace.cli import analysis as cli_analysis

    buf = tmp_path / "run.bin"
    shutil.copy(sample("imbalance"), buf)
    shutil.copy(sample("imbalance").with_suffix(".json"), tmp_path / "run.json")
    trace = ktrace.convert(buf).path
    assert main(["analyze", str(trace)]) == 0
    assert "lies beside" not in capsys.readouterr().err  # a small trace loads in well under a second
    monkeypatch.setattr(cli_analysis, "_PROGRESS_MIN_BYTES", 1000)
    assert main(["analyze", str(trace)]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "lies beside" in line]
    assert err == [f"ktrace: {buf} lies beside this trace: `ktrace analyze {buf}` gives the same figures faster "
                   "(the buffer is analyzed without loading a trace)"]
    buf.unlink()
    assert main(["analyze", str(trace)]) == 0
    assert "lies beside" not in capsys.readouterr().err
