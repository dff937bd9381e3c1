"""The engine cache shared by many runs: a read-only cache folder is said once and a private temporary cache
used instead (no compile on every run); concurrent first opens of one trace write one snapshot."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import ktrace
from ktrace.engine import wasm_cache, wasm_snapshot

from conftest import sample


def test_concurrent_first_opens_of_one_trace_write_one_snapshot(tmp_path, monkeypatch):
    """Four processes that loaded the same trace at once each came to write its snapshot (103 MB each, one
    after the other under the lock). The first writes it; the others find it whole and leave it."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("KTRACE_CACHE_DIR", str(cache))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv(wasm_snapshot.BUDGET_ENV, raising=False)
    memory = np.zeros(16 * wasm_snapshot.PAGE_BYTES, np.uint8)
    memory[::wasm_snapshot.PAGE_BYTES * 2] = 7  # every other page stored
    key = wasm_snapshot.key(["a trace", "this test"])
    header = {"engine": {}, "host": {"clock_ms": 0, "clocks_ns": {"1": 0, "2": 0, "3": 0}, "log": [],
                                     "partial_line": ""}}  # what the engine's restore checks
    writes, real = [], wasm_snapshot.write_entry_from

    def slow_write(entry, pieces, record=None):
        writes.append(entry)
        time.sleep(0.3)  # a 103 MB write takes a while: every other opener is at the lock by then
        return real(entry, pieces, record)

    monkeypatch.setattr(wasm_snapshot, "write_entry_from", slow_write)
    start, problems = threading.Barrier(4), []

    def opener():
        start.wait()
        assert wasm_snapshot.read(key) == (None, "")  # none yet: each loads the trace, then writes
        problems.append(wasm_snapshot.write(key, header, memory, lambda: (1, 2, 3)))

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entry = wasm_snapshot.entry_path(cache / "snapshots", key)
    assert problems == [""] * 4 and len(writes) == 1 and writes[0] == entry
    snapshot, problem = wasm_snapshot.read(key)
    assert problem == "" and snapshot is not None  # the one written is whole and trusted
    # found and not used (another heap size, say): replaced as before, as is one a write that died left
    assert wasm_snapshot.write(key, header, memory, lambda: (1, 2, 3)) == "" and len(writes) == 2
    wasm_snapshot.record_path(entry).unlink()
    snapshot, problem = wasm_snapshot.read(key)
    assert snapshot is None and "no integrity record" in problem
    assert wasm_snapshot.write(key, header, memory, lambda: (1, 2, 3)) == "" and len(writes) == 3


def _without_root_override() -> list[str]:
    """The command prefix that makes a read-only folder read-only for this user: root writes anywhere unless
    its DAC override is dropped."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        pytest.skip("root with no setpriv: a read-only folder is writable to root")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]


@pytest.mark.slow
def test_a_read_only_cache_folder_is_said_once_and_a_private_temporary_one_used(tmp_path):
    """Every `ktrace query` with a read-only KTRACE_CACHE_DIR compiled the engine again (25 s) and could not keep
    it. Now the first run says so once and compiles into a private temporary cache; the next one loads it."""
    ro, tmp, config = tmp_path / "ro-cache", tmp_path / "tmp", tmp_path / "config"
    ro.mkdir(mode=0o700)
    tmp.mkdir(mode=0o700)
    ro.chmod(0o500)
    trace = ktrace.convert(sample("warpgroups"), tmp_path / "w.perfetto-trace").path
    env = dict(os.environ, KTRACE_CACHE_DIR=str(ro), TMPDIR=str(tmp), XDG_CONFIG_HOME=str(config))
    env.pop("KTRACE_TP_SHELL", None)
    env.pop(wasm_cache._NOTED_ENV, None)
    ktrace_exe = shutil.which("ktrace")
    try:
        runs = []
        for _ in range(2):
            p = subprocess.run([*_without_root_override(), ktrace_exe, "query", str(trace),
                                "SELECT count(*) AS n FROM slice", "--csv"], env=env, capture_output=True,
                               text=True, timeout=300)
            runs.append(p)
            assert p.returncode == 0 and p.stdout.split()[0] == "n" and p.stdout == runs[0].stdout, p.stderr
        fallback = tmp / f"ktrace-cache-{os.getuid()}"
        for p in runs:
            said = [line for line in p.stderr.splitlines() if "not using the cache folder" in line]
            assert said == [f"ktrace: not using the cache folder {ro} (it is read-only: ktrace could not keep what "
                            f"it compiles there); using {fallback}"], p.stderr
            assert "could not cache" not in p.stderr and "not locking" not in p.stderr
        assert "compiling" not in runs[1].stderr  # the first run's compile was kept
        assert list(ro.iterdir()) == [] and any(fallback.glob("*.cwasm"))
    finally:
        ro.chmod(0o700)


def test_a_read_only_cache_still_gives_the_module_it_holds(tmp_path, monkeypatch, capsys):
    """A read-only cache that holds the compiled module (filled once, then shared read-only) is still read: no
    compile; what ktrace writes goes to the private temporary cache."""
    names = {wide: f"trace_processor-v52-{wasm_cache._cache_key(wasm_cache.wasm_path(wide).read_bytes())}.cwasm"
             for wide in (False, True)}
    held = {wide: name for wide, name in names.items() if (wasm_cache.cache_dir() / name).is_file()}
    if not held:
        pytest.skip("no compiled module in this user's cache to copy")
    compiled = [wasm_cache.cache_dir() / n for name in held.values() for n in (name, name + ".sha256")]
    ro, tmp = tmp_path / "ro-cache", tmp_path / "tmp"
    ro.mkdir(mode=0o700)
    tmp.mkdir(mode=0o700)
    for f in compiled:
        shutil.copyfile(f, ro / f.name)
        (ro / f.name).chmod(0o600)
    monkeypatch.setenv("KTRACE_CACHE_DIR", str(ro))
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    monkeypatch.delenv(wasm_cache._NOTED_ENV, raising=False)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == ro and mode & os.W_OK
                        else real_access(p, mode, **kw))  # read-only to this user (as a test run by root is not)
    monkeypatch.setattr(wasm_cache, "_compile", lambda *a: pytest.fail("compiled though the cache holds it"))
    before = {f.name for f in ro.iterdir()}
    for wide in held:
        wasm_cache.load_module(wide)
    for _ in range(3):
        assert wasm_cache.usable_folder()[0] == tmp / f"ktrace-cache-{os.getuid()}"
    err = capsys.readouterr().err
    assert err.count("not using the cache folder") == 1 and "compiling" not in err
    assert {f.name for f in ro.iterdir()} == before
    assert stat.S_IMODE(ro.stat().st_mode) == 0o700
