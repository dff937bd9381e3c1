"""The embedded engine's loaded-trace snapshots (engine/wasm_snapshot.py): a trace opened again is restored from
the heap kept after its first load, and gives exactly what a fresh load gives; a snapshot that is damaged,
truncated, planted, made for something else or reached through a link is never used (the trace loads as
before and a good entry replaces it); the cache stays within its budget, least recently used out first.

Traces are real captures from samples/, converted here; every test gets its own empty snapshot folder beside
one compiled module (copied from the user's cache when it holds one), and snapshots of any size
($KTRACE_SNAPSHOT_MIN_MIB=0: the samples are far below the default threshold).
"""

import hashlib
import os
import shutil
import time
from pathlib import Path

import pytest

import ktrace.api
from ktrace.analysis import register, sql_figures
from ktrace.engine import cache_files, open_trace, wasm_cache, wasm_snapshot
from ktrace.engine.wasm import WasmTraceProcessor

from conftest import run_ktrace, sample

SAMPLES = ["fi_batch_attention_decode_run1", "fi_batch_attention_example_run1", "blocks5000_ktrace", "nested_ktrace"]
QUERIES = [
    "SELECT count(*) AS n, sum(dur) AS dur, min(ts) AS first, max(ts + dur) AS last FROM slice",
    "SELECT * FROM slice ORDER BY id",
    "SELECT * FROM thread ORDER BY utid",
    "SELECT * FROM process ORDER BY upid",
    "SELECT * FROM track ORDER BY id",
    "SELECT * FROM args ORDER BY id",
    "SELECT name, str_value, int_value FROM metadata ORDER BY name",
    # Not parse_trace_duration_ns: the time the load took (a restored trace reports its first load's).
    "SELECT * FROM stats WHERE value != 0 AND name NOT LIKE '%_duration_ns' ORDER BY name, idx",
]


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory):
    """A cache folder holding the compiled module (copied in, so nothing is recompiled)."""
    cache = tmp_path_factory.mktemp("ktrace-cache")
    for compiled in wasm_cache.cache_dir().glob("*.cwasm*"):
        shutil.copyfile(compiled, cache / compiled.name)
    os.chmod(cache, 0o700)
    return cache


@pytest.fixture(autouse=True)
def snapshots(module_cache, monkeypatch, tmp_path_factory):
    """This test's snapshot folder, empty; snapshots on for traces of any size; the snapshot secret in a
    configuration folder of the test's own."""
    monkeypatch.delenv("KTRACE_TP_SHELL", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))
    monkeypatch.delenv(wasm_snapshot.BUDGET_ENV, raising=False)
    monkeypatch.setenv(wasm_snapshot.MIN_TRACE_ENV, "0")
    monkeypatch.setenv("KTRACE_CACHE_DIR", str(module_cache))
    folder = module_cache / "snapshots"
    if folder.is_symlink() or folder.is_file():
        folder.unlink()
    shutil.rmtree(folder, ignore_errors=True)
    yield folder
    if folder.is_dir():
        os.chmod(folder, 0o700)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    out = tmp_path_factory.mktemp("traces")
    paths = {}
    for name in SAMPLES:
        source = sample(name)
        if not source.exists():
            source = source.with_name(source.name + ".gz")
        paths[name] = ktrace.api.convert(source, out / f"{name}.perfetto-trace").path
    return paths


@pytest.fixture
def restores(monkeypatch):
    """What each WasmTraceProcessor.restore returned, in order."""
    seen = []
    real = WasmTraceProcessor.restore

    def spy(self, trace_sha256):
        seen.append(real(self, trace_sha256))
        return seen[-1]

    monkeypatch.setattr(WasmTraceProcessor, "restore", spy)
    return seen


def _results(trace, *, figures=True):
    with open_trace(trace, engine="wasm") as s:
        out = {sql: _rows(s.query(sql)) for sql in QUERIES}
        if figures:
            register(s)
            out["figures"] = sql_figures(s, register_package=False)
        return out


def _rows(result):
    return result.columns, result.rows


def _same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        if key == "figures":
            assert a[key].differences(b[key]) == []
        else:
            assert a[key] == b[key], key


def _entries(folder):
    return sorted(folder.glob(f"*{wasm_snapshot.SUFFIX}")) if folder.is_dir() else []


def _fresh(trace, monkeypatch, **kw):
    with monkeypatch.context() as m:
        m.setenv(wasm_snapshot.BUDGET_ENV, "0")
        return _results(trace, **kw)


# -- equivalence ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", SAMPLES)
@pytest.mark.slow
def test_a_restored_trace_gives_exactly_what_a_fresh_load_gives(name, traces, snapshots, restores, monkeypatch):
    fresh = _fresh(traces[name], monkeypatch)
    assert restores == [] and _entries(snapshots) == []
    _same(_results(traces[name]), fresh)  # the load that writes the snapshot
    assert restores == [False] and len(_entries(snapshots)) == 1
    _same(_results(traces[name]), fresh)
    _same(_results(traces[name]), fresh)  # a second restore from the same snapshot
    assert restores == [False, True, True]


@pytest.mark.slow
def test_queries_that_create_tables_work_after_a_restore(traces, restores):
    trace = traces["blocks5000_ktrace"]
    open_trace(trace, engine="wasm").close()
    for _ in range(2):  # and what the first restored session created is not in the snapshot
        with open_trace(trace, engine="wasm") as s:
            s.query("CREATE PERFETTO TABLE mine AS SELECT track_id, count(*) AS n FROM slice GROUP BY track_id")
            s.query("CREATE TABLE plain(x INT); INSERT INTO plain VALUES (1), (2)")
            assert s.query("SELECT sum(n) AS n FROM mine").rows == s.query("SELECT count(*) FROM slice").rows
            assert s.query("SELECT sum(x) FROM plain").rows == [(3,)]
    assert restores == [False, True, True]


def test_the_state_outside_memory_after_a_load_is_the_fresh_instances(traces, snapshots, restores):
    """What a snapshot cannot hold: the module's three mutable globals (stack pointer and bounds) and the
    table are, after a load, exactly as a fresh instance has them; the host's clock and log carry over."""
    with open_trace(traces["blocks5000_ktrace"], engine="wasm") as loaded:
        backend = loaded._backend
        fresh = WasmTraceProcessor(wide=backend._ptr64)  # the same build as the trace's
        try:
            assert backend._engine_state() == fresh._engine_state()
        finally:
            fresh.close()
        stack_pointer, stack_base, _ = backend._engine_state()["stack"]
        assert stack_pointer == stack_base  # between calls the stack is empty
    with open_trace(traces["blocks5000_ktrace"], engine="wasm") as restored:
        assert restores == [False, True]
        host = restored._backend._host
        snapshot = wasm_snapshot.read(_key(restored, traces["blocks5000_ktrace"]))[0]
        kept = snapshot.header["host"]
        assert host.state()["clock_ms"] >= kept["clock_ms"]  # the engine's clock never goes back
        assert list(host.log) == kept["log"] and host.state()["partial_line"] == kept["partial_line"]
        assert host.heap_bytes() == snapshot.memory_bytes
        assert restored._backend._engine_state() == snapshot.header["engine"]


def _key(session, trace):
    return session._backend._snapshot_key(hashlib.sha256(Path(trace).read_bytes()).hexdigest())


@pytest.mark.slow
def test_the_command_line_prints_the_same_with_and_without_a_snapshot(traces, snapshots):
    trace = traces["fi_batch_attention_decode_run1"]
    sql = "SELECT name, count(*) AS n, sum(dur) AS dur FROM slice GROUP BY name ORDER BY name"
    off = run_ktrace("query", trace, sql, env={wasm_snapshot.BUDGET_ENV: "0"})
    assert off[0] == 0 and _entries(snapshots) == []
    assert run_ktrace("query", trace, sql) == off and len(_entries(snapshots)) == 1
    assert run_ktrace("query", trace, sql) == off
    assert run_ktrace("analyze", trace, "--json", env={wasm_snapshot.BUDGET_ENV: "0"}) == \
        run_ktrace("analyze", trace, "--json")


@pytest.mark.slow
def test_a_bad_snapshot_setting_is_refused_on_a_trace_too_small_to_snapshot(traces, snapshots):
    trace = traces["fi_batch_attention_decode_run1"]  # under the 4 MiB a snapshot needs
    assert os.path.getsize(trace) < 4 << 20
    small_enough = {wasm_snapshot.MIN_TRACE_ENV: "1000"}  # snapshots from 1000 MiB: this trace gets none
    assert run_ktrace("query", trace, "SELECT 1 AS one", env=small_enough)[0] == 0
    for name, value in ((wasm_snapshot.BUDGET_ENV, "-1"), (wasm_snapshot.MIN_TRACE_ENV, "lots")):
        rc, out, err = run_ktrace("query", trace, "SELECT 1 AS one", env={**small_enough, name: value})
        assert rc == 2 and f"{name}={value!r}" in err and "Traceback" not in err, (name, err)


# -- an untrusted cache -----------------------------------------------------------------------------------

def _snapshot_of(trace, snapshots):
    open_trace(trace, engine="wasm").close()
    (entry,) = _entries(snapshots)
    return entry


def _rewrite(entry, data, *, record=True, figures=None):
    """Replaces the entry by ``data``; ``record``: with the record ktrace would write for it (an HMAC under this
    user's secret, of its SHA-256 and the figures of the record it had, or ``figures``): as if ktrace itself
    had written these bytes."""
    kept = _figures(entry)
    os.unlink(entry)
    entry.write_bytes(data)
    os.chmod(entry, 0o600)
    if record:
        text = wasm_snapshot._record(wasm_snapshot.secret(), hashlib.sha256(data).hexdigest(), figures or kept)
        cache_files.record_path(entry).write_text(text + "\n")


def _figures(entry):
    """The figures in the entry's record (what the trace's fresh load answered)."""
    return tuple(int(x) for x in cache_files.record_path(entry).read_text().split()[2].split(","))


def _loads_normally_and_replaces(trace, entry, restores, capsys, fresh, note=True):
    capsys.readouterr()
    _same(_results(trace, figures=False), fresh)
    assert restores[-1] is False
    err = capsys.readouterr().err
    assert ("ktrace: not restoring the trace's snapshot" in err) == note and err.count("\n") <= 1
    assert not entry.is_symlink() and wasm_snapshot._parse(entry.read_bytes(), _header_key(entry))[0] is not None
    _same(_results(trace, figures=False), fresh)
    assert restores[-1] is True


def _header_key(entry):
    data = entry.read_bytes()
    import json, struct
    (n,) = struct.unpack_from("<I", data, len(wasm_snapshot.MAGIC))
    return json.loads(data[len(wasm_snapshot.MAGIC) + 4:len(wasm_snapshot.MAGIC) + 4 + n])["key"]


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "truncated with a matching record",
                                    "no record", "bytes appended with a matching record"])
def test_a_damaged_snapshot_is_never_used(damage, traces, snapshots, restores, capsys, monkeypatch):
    trace = traces["nested_ktrace"]
    fresh = _fresh(trace, monkeypatch, figures=False)
    entry = _snapshot_of(trace, snapshots)
    data = bytearray(entry.read_bytes())
    if damage == "flipped byte":
        data[len(data) // 2] ^= 0x40
        _rewrite(entry, bytes(data), record=False)
    elif damage == "truncated":
        _rewrite(entry, bytes(data[:len(data) // 2]), record=False)
    elif damage == "truncated with a matching record":
        _rewrite(entry, bytes(data[:-wasm_snapshot.PAGE_BYTES]))
    elif damage == "no record":
        cache_files.record_path(entry).unlink()
    else:
        _rewrite(entry, bytes(data) + b"\0" * wasm_snapshot.PAGE_BYTES)
    _loads_normally_and_replaces(trace, entry, restores, capsys, fresh)


@pytest.mark.slow
def test_a_snapshot_of_another_trace_planted_under_this_name_is_not_used(traces, snapshots, restores, capsys,
                                                                         monkeypatch):
    trace, other = traces["nested_ktrace"], traces["blocks5000_ktrace"]
    fresh = _fresh(trace, monkeypatch, figures=False)
    entry = _snapshot_of(trace, snapshots)
    planted = _snapshot_of_other(other, snapshots, entry)
    _rewrite(entry, planted)  # with a record that matches it: only the header can tell
    _loads_normally_and_replaces(trace, entry, restores, capsys, fresh)


def _snapshot_of_other(other, snapshots, keep):
    open_trace(other, engine="wasm").close()
    (made,) = [e for e in _entries(snapshots) if e != keep]
    data = made.read_bytes()
    made.unlink()
    cache_files.record_path(made).unlink()
    return data


def _rewrite_at(entry, marker: bytes, replace, skip: bool = False) -> None:
    """Rewrites the entry where ``marker`` first is (or the byte after it, ``skip``), as ``replace(found)``
    gives it, keeping its length, with a valid record."""
    data = entry.read_bytes()
    at = data.index(marker) + (len(marker) if skip else 0)
    size = 1 if skip else len(marker)
    _rewrite(entry, data[:at] + replace(data[at:at + size]) + data[at + size:])


@pytest.mark.slow
def test_a_snapshot_with_a_malformed_header_is_not_used(traces, snapshots, restores, capsys, monkeypatch):
    trace = traces["nested_ktrace"]
    fresh = _fresh(trace, monkeypatch, figures=False)
    entry = _snapshot_of(trace, snapshots)
    _rewrite_at(entry, b'"clock_ms": ', lambda found: b'"clock_mz": ')
    _loads_normally_and_replaces(trace, entry, restores, capsys, fresh)


@pytest.mark.slow
def test_a_snapshot_whose_engine_state_differs_is_not_used(traces, snapshots, restores, capsys, monkeypatch):
    trace = traces["nested_ktrace"]
    fresh = _fresh(trace, monkeypatch, figures=False)
    entry = _snapshot_of(trace, snapshots)
    _rewrite_at(entry, b'"request_buffer": ', lambda digit: b"1" if digit != b"1" else b"2", skip=True)
    _loads_normally_and_replaces(trace, entry, restores, capsys, fresh)


@pytest.mark.slow
def test_a_snapshot_reached_through_a_symlink_is_not_used_nor_written_through(traces, snapshots, restores, capsys,
                                                                              monkeypatch, tmp_path):
    trace = traces["nested_ktrace"]
    fresh = _fresh(trace, monkeypatch, figures=False)
    entry = _snapshot_of(trace, snapshots)
    outside = tmp_path / "elsewhere.tpsnap"
    shutil.copyfile(entry, outside)
    os.chmod(outside, 0o600)
    kept = outside.read_bytes()
    entry.unlink()
    entry.symlink_to(outside)  # a valid snapshot, and its record: only the link is wrong
    _loads_normally_and_replaces(trace, entry, restores, capsys, fresh)
    assert outside.read_bytes() == kept and not entry.is_symlink()


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to give a file away")
def test_a_snapshot_owned_by_another_user_is_not_used(traces, snapshots, restores, capsys, monkeypatch):
    trace = traces["nested_ktrace"]
    fresh = _fresh(trace, monkeypatch, figures=False)
    entry = _snapshot_of(trace, snapshots)
    os.chown(entry, 4242, -1)
    _loads_normally_and_replaces(trace, entry, restores, capsys, fresh)


@pytest.mark.slow
def test_a_snapshot_writable_by_others_is_not_used(traces, snapshots, restores, capsys, monkeypatch):
    trace = traces["nested_ktrace"]
    fresh = _fresh(trace, monkeypatch, figures=False)
    entry = _snapshot_of(trace, snapshots)
    os.chmod(entry, 0o666)
    _loads_normally_and_replaces(trace, entry, restores, capsys, fresh)


def test_a_snapshot_folder_others_can_write_is_not_read_nor_written(traces, snapshots, restores, capsys):
    trace = traces["nested_ktrace"]
    _snapshot_of(trace, snapshots)
    os.chmod(snapshots, 0o777)
    before = {p.name: p.stat().st_mtime_ns for p in snapshots.iterdir()}
    _results(trace, figures=False)
    assert restores[-1] is False and capsys.readouterr().err == ""
    assert {p.name: p.stat().st_mtime_ns for p in snapshots.iterdir()} == before


# -- a cache that cannot be written, and its budget -------------------------------------------------------

@pytest.mark.slow
def test_a_cache_that_cannot_be_written_changes_nothing(traces, snapshots, module_cache):
    trace = traces["fi_batch_attention_decode_run1"]
    sql = "SELECT count(*) AS n FROM slice"
    want = run_ktrace("query", trace, sql, env={wasm_snapshot.BUDGET_ENV: "0"})
    snapshots.write_text("not a folder")  # as a full disk or a read-only cache would: nothing can be written
    try:
        assert run_ktrace("query", trace, sql) == want and want[0] == 0 and want[2] == ""
    finally:
        snapshots.unlink()


def test_a_full_disk_is_silent(traces, snapshots, restores, capsys, monkeypatch):
    def full(path, pieces):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache_files, "_write_atomically", full)
    trace = traces["nested_ktrace"]
    _results(trace, figures=False)
    assert capsys.readouterr().err == "" and _entries(snapshots) == []


@pytest.mark.slow
def test_the_budget_evicts_the_least_recently_used_snapshot(traces, snapshots, restores, monkeypatch):
    a, b, c = traces["nested_ktrace"], traces["blocks5000_ktrace"], traces["fi_batch_attention_example_run1"]
    sizes = {}
    for t in (a, b, c):
        open_trace(t, engine="wasm").close()
    for e in _entries(snapshots):
        sizes[e.name] = e.stat().st_size
    assert len(sizes) == 3
    shutil.rmtree(snapshots)
    restores.clear()
    room = sum(sizes.values()) - min(sizes.values()) / 2  # for any two of them, not for the three
    monkeypatch.setenv(wasm_snapshot.BUDGET_ENV, repr(room / 2**30))
    open_trace(a, engine="wasm").close()
    open_trace(b, engine="wasm").close()
    open_trace(a, engine="wasm").close()  # restored: now a is the more recently used
    assert restores == [False, False, True]
    open_trace(c, engine="wasm").close()  # b goes
    open_trace(a, engine="wasm").close()
    open_trace(b, engine="wasm").close()
    assert restores == [False, False, True, False, True, False]
    assert len(_entries(snapshots)) == 2
    assert len(list(snapshots.glob("*.sha256"))) == 2  # records go with their entries


def test_a_snapshot_over_the_budget_is_not_written_and_0_disables(traces, snapshots, restores, monkeypatch):
    trace = traces["nested_ktrace"]
    monkeypatch.setenv(wasm_snapshot.BUDGET_ENV, "0.001")
    open_trace(trace, engine="wasm").close()
    assert _entries(snapshots) == []
    monkeypatch.setenv(wasm_snapshot.BUDGET_ENV, "0")
    open_trace(trace, engine="wasm").close()
    assert restores == [False] and _entries(snapshots) == []  # 0: not even looked for


def test_small_traces_are_not_snapshotted_by_default(traces, snapshots, restores, monkeypatch):
    monkeypatch.delenv(wasm_snapshot.MIN_TRACE_ENV)
    assert os.path.getsize(traces["blocks5000_ktrace"]) < wasm_snapshot.DEFAULT_MIN_TRACE_BYTES
    open_trace(traces["blocks5000_ktrace"], engine="wasm").close()
    assert restores == [] and _entries(snapshots) == []


def test_a_bad_setting_says_what_to_give(monkeypatch, traces):
    from ktrace.core.errors import InputError

    monkeypatch.setenv(wasm_snapshot.BUDGET_ENV, "lots")
    with pytest.raises(InputError, match="KTRACE_SNAPSHOT_GIB='lots': give a size in GiB"):
        open_trace(traces["nested_ktrace"], engine="wasm")


def test_bytes_and_a_path_share_the_snapshot(traces, snapshots, restores, monkeypatch):
    trace = traces["nested_ktrace"]
    fresh = _fresh(trace, monkeypatch, figures=False)
    open_trace(trace, engine="wasm").close()
    with open_trace(Path(trace).read_bytes(), engine="wasm") as s:
        assert {sql: _rows(s.query(sql)) for sql in QUERIES} == fresh
    assert restores == [False, True]


def test_only_a_build_whose_mutable_globals_are_the_stacks_is_snapshotted(traces, snapshots, restores,
                                                                           monkeypatch):
    """The trace processor defines three mutable globals (the stack pointer and the stack's two bounds), the
    three the emscripten_stack_get_* exports read and the restore checks; another build is not snapshotted."""
    import wasmtime

    assert wasm_cache.module_facts()[1] == 3
    wat = ("(module (global (mut i64) (i64.const 11)) (global i32 (i32.const 11)) "
           "(global (mut i32) (i32.const -1)) (global (mut f64) (f64.const 1)) (func))")
    assert wasm_cache._mutable_globals(bytes(wasmtime.wat2wasm(wat))) == 3
    assert wasm_cache._mutable_globals(bytes(wasmtime.wat2wasm("(module (func))"))) == 0
    monkeypatch.setattr(wasm_cache, "_facts_of", lambda data: ("0" * 64, 4))
    monkeypatch.setattr(wasm_cache, "_facts", {})
    open_trace(traces["nested_ktrace"], engine="wasm").close()
    assert restores == [] and _entries(snapshots) == []


def test_the_hosts_steady_clocks_never_go_back_across_a_restore():
    from ktrace.engine.wasm_host import Host

    kept = Host(1 << 30).state()
    kept["clock_ms"] += 3.6e6  # as if the snapshot's process had run for an hour, on a machine since rebooted
    kept["clocks_ns"] = {k: v + 3600 * 10**9 for k, v in kept["clocks_ns"].items()}
    later = Host(1 << 30)
    later.resume(kept)
    assert later.state()["clock_ms"] >= kept["clock_ms"]
    assert all(later._clock_ns(int(c)) >= v for c, v in kept["clocks_ns"].items())
    assert abs(later._clock_ns(0) - time.time_ns()) < 10**9  # wall time is the wall's, never shifted


def test_a_snapshot_header_nested_200000_deep_is_damaged_not_a_traceback():
    import struct

    header = b"[" * 200_000 + b"]" * 200_000
    data = wasm_snapshot.MAGIC + struct.pack("<I", len(header)) + header
    assert wasm_snapshot._parse(data, "k") == (None, "its header nests deeper than any ktrace writes (at most 16 "
                                                     "levels)")


def test_a_snapshot_header_is_bounded_in_size_and_depth_before_it_is_parsed(monkeypatch):
    import struct

    def parse(header: bytes):
        return wasm_snapshot._parse(wasm_snapshot.MAGIC + struct.pack("<I", len(header)) + header, "k")

    def fail(*args, **kwargs):
        raise AssertionError("parsed")

    monkeypatch.setattr(wasm_snapshot.json, "loads", fail)  # refused before the parser sees it
    assert parse(b" " * (wasm_snapshot.HEADER_MAX_BYTES + 1))[1].startswith("its header is longer (1,048,577 bytes)")
    assert "nests deeper" in parse(b'{"a": ' + b"[" * 17 + b"]" * 17 + b"}")[1]
    # Brackets inside strings are text, not nesting: a log line full of them is fine.
    monkeypatch.setattr(wasm_snapshot.json, "loads", lambda text: {})
    assert parse(b'{"log": ["' + b"[{" * 1000 + b'\\\"]"]}')[1] == "its header is damaged"  # (no fields)
    assert wasm_snapshot._header_depth(b'{"a": "[[[[", "b": [{"c": "\\"}]}') == 3


# -- a snapshot that does not restore: removed, the trace loaded fresh in the same run ------------------------

def _garbage_pages(entry, fill):
    """The entry's bytes with its header and page map kept and its stored pages replaced by ``fill(n)``."""
    import struct

    data = entry.read_bytes()
    (n,) = struct.unpack_from("<I", data, len(wasm_snapshot.MAGIC))
    snapshot, _ = wasm_snapshot._parse(data, _header_key(entry))
    pages_at = len(data) - len(snapshot.pages)
    return data[:pages_at] + fill(len(snapshot.pages))


@pytest.mark.slow
@pytest.mark.parametrize("body", ["random bytes", "zeros", "half the pages swapped"])
def test_a_snapshot_whose_body_crashes_the_engine_is_removed_and_the_trace_loaded(body, traces, snapshots,
                                                                                   restores, capsys, monkeypatch):
    """A snapshot with a valid header and a valid record (as if ktrace had written a bad heap) whose pages make
    the engine trap or answer wrong: the same open loads the trace instead, with the right answers."""
    import numpy as np

    trace = traces["nested_ktrace"]
    fresh = _fresh(trace, monkeypatch, figures=False)
    entry = _snapshot_of(trace, snapshots)
    rng = np.random.default_rng(7)
    if body == "random bytes":
        data = _garbage_pages(entry, lambda n: rng.integers(0, 256, n, dtype=np.uint8).tobytes())
    elif body == "zeros":
        data = _garbage_pages(entry, lambda n: bytes(n))
    else:
        kept = entry.read_bytes()
        half = (len(kept) // 2) // wasm_snapshot.PAGE_BYTES * wasm_snapshot.PAGE_BYTES
        tail = len(kept) - half
        data = _garbage_pages(entry, lambda n: kept[-n:][n // 2:] + kept[-n:][:n // 2])
        assert len(data) == len(kept) and tail
    _rewrite(entry, data)
    capsys.readouterr()
    _same(_results(trace, figures=False), fresh)
    err = capsys.readouterr().err
    assert restores[-1] is False and "ktrace: not restoring the trace's snapshot" in err and "removed it" in err
    assert "Traceback" not in err and err.count("\n") == 1
    assert entry.read_bytes() != data  # replaced by the load's good one, which restores next time
    _same(_results(trace, figures=False), fresh)
    assert restores[-1] is True and capsys.readouterr().err == ""


@pytest.mark.slow
@pytest.mark.parametrize("body", ["zeros", "truncated"])
def test_a_snapshot_that_fails_is_removed_even_when_no_new_one_is_written(body, traces, snapshots, restores, capsys,
                                                                          monkeypatch):
    trace = traces["nested_ktrace"]
    fresh = _fresh(trace, monkeypatch, figures=False)
    entry = _snapshot_of(trace, snapshots)
    if body == "zeros":
        _rewrite(entry, _garbage_pages(entry, lambda n: bytes(n)))
    else:  # header and page map whole, the pages cut short: its record signs exactly these bytes
        _rewrite(entry, entry.read_bytes()[:-wasm_snapshot.PAGE_BYTES // 2])
    monkeypatch.setattr(wasm_snapshot, "write", lambda *a, **k: "not written")
    _same(_results(trace, figures=False), fresh)
    assert not entry.exists() and not cache_files.record_path(entry).exists()
    capsys.readouterr()
    _same(_results(trace, figures=False), fresh)  # nothing left to meet again
    assert capsys.readouterr().err == "" and restores[-1] is False and not entry.exists()


@pytest.mark.slow
def test_a_snapshot_whose_restore_raises_inside_the_engine_is_removed(traces, snapshots, restores, capsys,
                                                                      monkeypatch):
    from ktrace.engine.wasm_host import Host

    trace = traces["nested_ktrace"]
    fresh = _fresh(trace, monkeypatch, figures=False)
    entry = _snapshot_of(trace, snapshots)
    with monkeypatch.context() as m:
        def broken(self, state):
            raise OSError("the host failed")

        m.setattr(Host, "resume", broken)
        capsys.readouterr()
        _same(_results(trace, figures=False), fresh)
    assert restores[-1] is False and "the engine failed on it: the host failed" in capsys.readouterr().err
    _same(_results(trace, figures=False), fresh)
    assert restores[-1] is True


@pytest.mark.slow
def test_the_command_line_recovers_from_a_snapshot_that_crashes_the_engine(traces, snapshots):
    trace = traces["fi_batch_attention_decode_run1"]
    sql = "SELECT count(*) AS n, sum(dur) AS dur FROM slice"
    want = run_ktrace("query", trace, sql, env={wasm_snapshot.BUDGET_ENV: "0"})
    assert want[0] == 0 and run_ktrace("query", trace, sql) == want
    (entry,) = _entries(snapshots)
    _rewrite(entry, _garbage_pages(entry, lambda n: b"\xff" * n))
    rc, out, err = run_ktrace("query", trace, sql)
    assert (rc, out) == want[:2] and "not restoring the trace's snapshot" in err and "Traceback" not in err
    assert run_ktrace("query", trace, sql) == want  # and the next run is silent


# -- the restored state checked against the trace ---------------------------------------------------------

def _other_trace_under_this_key(trace, other, snapshots, monkeypatch):
    """This trace's snapshot entry, rewritten to hold another trace's heap under this trace's key (the header's
    key field rewritten): what someone who can write the cache can plant. Returns (entry, planted bytes)."""
    entry = _snapshot_of(trace, snapshots)
    key = _header_key(entry)
    data = _snapshot_of_other(other, snapshots, entry)
    import json, struct
    (n,) = struct.unpack_from("<I", data, len(wasm_snapshot.MAGIC))
    start = len(wasm_snapshot.MAGIC) + 4
    their_key = json.loads(data[start:start + n])["key"]
    return entry, data.replace(their_key.encode(), key.encode(), 1)


@pytest.mark.slow
def test_a_planted_heap_with_a_recomputed_sha256_record_gives_the_right_answer(traces, snapshots, restores, capsys,
                                                                              monkeypatch):
    """Another trace's heap under this trace's key with a plain SHA-256 record recomputed for it (what anyone who
    can rewrite the cache file can make) used to restore, and `sum(dur)` was the other trace's, exit 0."""
    trace, other = traces["nested_ktrace"], traces["blocks5000_ktrace"]
    sql = "SELECT count(*) AS n, sum(dur) AS dur FROM slice"
    want = run_ktrace("query", trace, sql, env={wasm_snapshot.BUDGET_ENV: "0"})
    wrong = run_ktrace("query", other, sql, env={wasm_snapshot.BUDGET_ENV: "0"})
    assert want[0] == 0 and want[1] != wrong[1]
    entry, planted = _other_trace_under_this_key(trace, other, snapshots, monkeypatch)
    _rewrite(entry, planted, record=False)
    cache_files.record_path(entry).write_text(f"sha256 {hashlib.sha256(planted).hexdigest()}\n")
    rc, out, err = run_ktrace("query", trace, sql)
    assert (rc, out) == want[:2] and "does not match its integrity record" in err
    assert run_ktrace("query", trace, sql) == want


@pytest.mark.slow
def test_a_record_made_with_another_secret_is_not_used(traces, snapshots, restores, capsys, monkeypatch):
    trace, other = traces["nested_ktrace"], traces["blocks5000_ktrace"]
    fresh = _fresh(trace, monkeypatch, figures=False)
    entry, planted = _other_trace_under_this_key(trace, other, snapshots, monkeypatch)
    figures = _figures(entry)
    _rewrite(entry, planted, record=False)
    forged = wasm_snapshot._record(b"\x00" * 32, hashlib.sha256(planted).hexdigest(), figures)
    cache_files.record_path(entry).write_text(forged + "\n")
    _loads_normally_and_replaces(trace, entry, restores, capsys, fresh)


@pytest.mark.slow
def test_a_restored_heap_that_does_not_answer_as_the_trace_did_is_not_used(traces, snapshots, restores, capsys,
                                                                           monkeypatch):
    """Even with a valid record (its figures those of this trace's fresh load), a heap that restores but does
    not answer the figures as the trace did (another trace's here) is removed, and the trace loaded."""
    trace, other = traces["nested_ktrace"], traces["blocks5000_ktrace"]
    fresh = _fresh(trace, monkeypatch, figures=False)
    entry, planted = _other_trace_under_this_key(trace, other, snapshots, monkeypatch)
    _rewrite(entry, planted)  # signed with this user's secret and this trace's figures
    capsys.readouterr()
    _same(_results(trace, figures=False), fresh)
    err = capsys.readouterr().err
    assert restores[-1] is False and "does not answer as the trace loaded from its bytes did" in err
    _same(_results(trace, figures=False), fresh)
    assert restores[-1] is True


@pytest.mark.slow
def test_a_header_nested_deeper_than_ktrace_writes_is_removed_and_the_trace_loaded(traces, snapshots, restores,
                                                                                   capsys, monkeypatch):
    import json, struct

    trace = traces["nested_ktrace"]
    fresh = _fresh(trace, monkeypatch, figures=False)
    entry = _snapshot_of(trace, snapshots)
    data = entry.read_bytes()
    (n,) = struct.unpack_from("<I", data, len(wasm_snapshot.MAGIC))
    start = len(wasm_snapshot.MAGIC) + 4
    header = json.loads(data[start:start + n])
    for depth in (40, 200_000):
        padded = dict(header, pad=json.loads("[" * 40 + "]" * 40)) if depth == 40 else None
        text = json.dumps(padded).encode() if padded else \
            json.dumps(header).encode()[:-1] + b', "pad": ' + b"[" * depth + b"]" * depth + b"}"
        _rewrite(entry, data[:len(wasm_snapshot.MAGIC)] + struct.pack("<I", len(text)) + text + data[start + n:])
        capsys.readouterr()
        _same(_results(trace, figures=False), fresh)
        err = capsys.readouterr().err
        assert restores[-1] is False and "nests deeper than any ktrace writes" in err and "Traceback" not in err
        data = entry.read_bytes()
        _same(_results(trace, figures=False), fresh)
        assert restores[-1] is True


def test_the_snapshot_secret_is_private_and_kept_outside_the_cache(snapshots, module_cache, traces):
    import stat

    key = wasm_snapshot.secret()
    path = wasm_snapshot.secret_path()
    assert key is not None and len(key) == 32 and wasm_snapshot.secret() == key  # made once, then read
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert module_cache not in path.parents
    os.chmod(path, 0o644)  # readable by others: no longer a secret, so no snapshot is read or written
    assert wasm_snapshot.secret() is None
    open_trace(traces["nested_ktrace"], engine="wasm").close()
    assert _entries(snapshots) == []


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX ownership")
def test_the_cache_folder_note_is_said_once_in_a_run_that_compiles_loads_and_snapshots(traces, module_cache,
                                                                                        tmp_path):
    """A cache folder others can write is not used: the module, the snapshot and its lookup each ask for the
    folder, and the run says so once."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    tmp = tmp_path / "tmp"
    fallback = tmp / f"ktrace-cache-{os.getuid()}"
    fallback.mkdir(parents=True, mode=0o700)
    for compiled in module_cache.glob("*.cwasm*"):  # so that the run does not compile (15 s)
        shutil.copyfile(compiled, fallback / compiled.name)
    env = {"KTRACE_CACHE_DIR": str(shared), "TMPDIR": str(tmp)}
    sql = "SELECT count(*) AS n FROM slice"
    for run in ("writes the snapshot", "restores it"):
        rc, out, err = run_ktrace("query", traces["nested_ktrace"], sql, env=env)
        assert rc == 0 and err.count("not using the cache folder") == 1, (run, err)
    assert _entries(fallback / "snapshots") and not (shared / "snapshots").exists()
