"""The engine layer: load Perfetto traces into the trace processor (embedded wasm, or a native shell) and
run SQL. Traces are built with Perfetto's own protobuf classes, so what the engine reads is what was meant.

The first test that needs the engine compiles the WebAssembly module once (5-20 s) into a temporary cache
directory, unless the user's cache already holds it (then it is copied, not recompiled); every later session
in this run reuses it.
"""

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from ktrace.engine import QueryResult, open_trace
from ktrace.engine import session as session_module
from ktrace.engine import cache_files, wasm_cache
from ktrace.engine.backend import UnsupportedRequest
from ktrace.core.errors import EXIT_ENV, EXIT_INPUT, EnvironmentMissing, InputError, KtraceError

from conftest import KTRACE_SAYING_QUERIES, interruptible, read_until_querying

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def engine_cache(tmp_path_factory):
    """One compiled module for the whole run, in a temporary cache directory (not the user's). Modules the
    user's cache already compiled are copied in (read, never written), so a quick run does not recompile."""
    cache = tmp_path_factory.mktemp("ktrace-cache")
    for compiled in wasm_cache.cache_dir().glob("*.cwasm*"):  # the modules and their integrity records
        shutil.copyfile(compiled, cache / compiled.name)
    old = os.environ.get("KTRACE_CACHE_DIR")
    os.environ["KTRACE_CACHE_DIR"] = str(cache)
    yield cache
    if old is None:
        os.environ.pop("KTRACE_CACHE_DIR", None)
    else:
        os.environ["KTRACE_CACHE_DIR"] = old


@pytest.fixture
def wasm_only(monkeypatch):
    monkeypatch.delenv("KTRACE_TP_SHELL", raising=False)


# -- traces -------------------------------------------------------------------------------------------

def make_trace(lanes, *, with_k=True):
    """A ktrace-shaped trace: one launch track, one track per lane, slices with debug annotations.

    lanes: {block: [(name, ts_ns, dur_ns), ...]}, each lane's slices in time order and not overlapping.
    """
    trace = pb.Trace()
    first = trace.packet.add()
    first.trusted_packet_sequence_id = 1
    first.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    first.track_descriptor.uuid = 1
    first.track_descriptor.name = "kernel launch"
    for block in lanes:
        packet = trace.packet.add()
        packet.trusted_packet_sequence_id = 1
        packet.track_descriptor.uuid = 100 + block
        packet.track_descriptor.parent_uuid = 1
        packet.track_descriptor.name = f"block {block}"
    events = []
    for block, slices in lanes.items():
        counts = {}
        for name, ts, dur in slices:
            k = counts.get(name, 0)
            counts[name] = k + 1
            events.append((ts, 0, block, name, k))
            events.append((ts + dur, 1, block, name, k))
    for ts, is_end, block, name, k in sorted(events):
        packet = trace.packet.add()
        packet.trusted_packet_sequence_id = 1
        packet.timestamp = ts
        packet.track_event.track_uuid = 100 + block
        if is_end:
            packet.track_event.type = pb.TrackEvent.TYPE_SLICE_END
            continue
        packet.track_event.type = pb.TrackEvent.TYPE_SLICE_BEGIN
        packet.track_event.name = name
        args = [("block", block), ("group", 0)] + ([("k", k)] if with_k else [])
        for arg, value in args:
            annotation = packet.track_event.debug_annotations.add()
            annotation.name = arg
            annotation.int_value = value
    return trace.SerializeToString()


LANES = {
    0: [("load", 1_000, 300), ("mma", 1_400, 2_000), ("mma", 3_500, 1_000)],
    1: [("load", 1_010, 500), ("mma", 1_600, 2_500)],
    2: [("load", 990, 250)],
}


@pytest.fixture(scope="module")
def trace_bytes():
    return make_trace(LANES)


@pytest.fixture
def trace_file(tmp_path, trace_bytes):
    path = tmp_path / "run.perfetto-trace"
    path.write_bytes(trace_bytes)
    return path


# -- loading and querying -----------------------------------------------------------------------------

def test_slices_durations_and_args(trace_file, wasm_only):
    with open_trace(trace_file) as s:
        assert s.engine_name == "wasm"
        r = s.query("""
            SELECT name, ts, dur,
                   extract_arg(arg_set_id, 'debug.block') AS block,
                   extract_arg(arg_set_id, 'debug.k') AS k
            FROM slice ORDER BY block, ts""")
    expected = []
    for block, slices in LANES.items():
        seen = {}
        for name, ts, dur in slices:
            expected.append((name, ts, dur, block, seen.get(name, 0)))
            seen[name] = seen.get(name, 0) + 1
    assert sorted(r.rows) == sorted(expected)
    assert r.columns == ("name", "ts", "dur", "block", "k")
    assert r.column("dur").dtype == np.int64
    assert r.column("dur").sum() == sum(d for lane in LANES.values() for _, _, d in lane)
    assert list(r.column("block")) == sorted(b for b, lane in LANES.items() for _ in lane)


def test_tracks_nest_under_the_launch(trace_bytes, wasm_only):
    with open_trace(trace_bytes) as s:
        r = s.query("""
            SELECT t.name, p.name AS parent, count(s.id) AS n
            FROM track t JOIN track p ON t.parent_id = p.id LEFT JOIN slice s ON s.track_id = t.id
            GROUP BY t.id ORDER BY t.name""")
    assert r.rows == [(f"block {b}", "kernel launch", len(LANES[b])) for b in sorted(LANES)]


def test_query_result_is_frozen_and_typed(trace_bytes, wasm_only):
    with open_trace(trace_bytes) as s:
        r = s.query("""
            SELECT 7 AS i, 2.5 AS f, 'x' AS s, NULL AS n, x'00ff' AS b,
                   extract_arg(arg_set_id, 'debug.nope') AS missing, 9007199254740993 AS big
            FROM slice LIMIT 2""")
        empty = s.query("SELECT ts, dur FROM slice WHERE dur < 0")
    assert isinstance(r, QueryResult) and len(r) == 2
    assert r.rows[0] == (7, 2.5, "x", None, b"\x00\xff", None, 9007199254740993)
    assert r.to_dicts()[1]["s"] == "x"
    assert r.column("i").dtype == np.int64 and r.column("f").dtype == np.float64
    assert r.column("s").dtype == object and list(r.column("s")) == ["x", "x"]
    assert np.isnan(r.column("missing")).all()  # NULL numbers read as NaN in a column...
    assert r.column("big")[0] == 9007199254740993  # ...and big integers are never rounded
    with pytest.raises(Exception):
        r.columns = ("changed",)
    with pytest.raises(ValueError):
        r.column("i")[0] = 1  # read-only
    with pytest.raises(KeyError, match="no column 'nope'"):
        r.column("nope")
    assert empty.columns == ("ts", "dur") and len(empty) == 0 and empty.rows == []


def test_an_all_integer_result_reads_as_one_with_other_cells(wasm_only):
    # All-integer results take the short way (a cell's value is at its own position); a NULL and a string
    # column beside the same integers take the general one (each cell's rank among its type's values).
    with open_trace(make_trace({b: [("x", 1_000 + 100 * i + b, 5 + i) for i in range(40)] for b in range(7)})) as s:
        ints = s.query("SELECT id, ts, dur, depth FROM slice ORDER BY id")
        mixed = s.query("SELECT id, IIF(id % 3 = 0, NULL, 1) AS n, ts, name, dur, depth FROM slice ORDER BY id")
    assert len(ints) == len(mixed) == 280
    for c in ("id", "ts", "dur", "depth"):
        assert ints.column(c).dtype == np.int64 and ints.column(c).tolist() == mixed.column(c).tolist()
    assert ints.rows == [(r[0], r[2], r[4], r[5]) for r in mixed.rows]
    assert sorted(set(ints.column("dur").tolist())) == list(range(5, 45))


def test_bad_sql_raises_input_error_with_engine_message(trace_bytes, wasm_only):
    with open_trace(trace_bytes) as s:
        with pytest.raises(InputError, match="no such table: nowhere") as info:
            s.query("SELECT * FROM nowhere")
        assert info.value.exit_code == EXIT_INPUT
        assert s.query("SELECT count(*) FROM slice").rows == [(6,)]  # the session still works


def test_closed_session_refuses_queries(trace_bytes, wasm_only):
    with open_trace(trace_bytes) as s:
        pass
    with pytest.raises(KtraceError, match="closed"):
        s.query("SELECT 1")
    s.close()  # idempotent


def test_queries_from_two_threads_are_serialized(trace_bytes, wasm_only):
    results, errors = [], []
    with open_trace(trace_bytes) as s:
        def work():
            try:
                for _ in range(20):
                    results.append(s.query("SELECT count(*) FROM slice").rows[0][0])
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)
        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors and results == [6] * 40


def test_progress_reports_each_chunk_and_finalize(trace_bytes, monkeypatch, wasm_only):
    monkeypatch.setattr(session_module, "CHUNK_BYTES", 100)
    calls = []
    with open_trace(trace_bytes, progress=lambda done, total: calls.append((done, total))) as s:
        assert s.query("SELECT count(*) FROM slice").rows == [(6,)]
    total = len(trace_bytes)
    assert all(t == total for _, t in calls)
    assert [d for d, _ in calls[:-1]] == [min(total, 100 * i) for i in range(1, -(-total // 100) + 1)]
    assert calls[-1] == (total, total) and len(calls) == -(-total // 100) + 1


def test_gzipped_trace_loads(tmp_path, trace_bytes, wasm_only):
    path = tmp_path / "run.perfetto-trace.gz"
    path.write_bytes(gzip.compress(trace_bytes))
    with open_trace(path) as s:
        assert s.query("SELECT count(*) FROM slice").rows == [(6,)]


# -- SQL packages ---------------------------------------------------------------------------------------

PACKAGE = {
    "ktrace.phases": """
        INCLUDE PERFETTO MODULE ktrace.base;
        CREATE PERFETTO TABLE ktrace_phase_totals AS
        SELECT name, count(*) AS n, sum(dur) AS total_ns FROM ktrace_phase_slices GROUP BY name;
    """,
    "ktrace.base": """
        CREATE PERFETTO VIEW ktrace_phase_slices AS
        SELECT name, dur, extract_arg(arg_set_id, 'debug.block') AS block FROM slice
        WHERE extract_arg(arg_set_id, 'debug.k') IS NOT NULL;
    """,
}
TOTALS = [("load", 3, 1050), ("mma", 3, 5500)]


def test_sql_package_include(trace_bytes, wasm_only):
    with open_trace(trace_bytes) as s:
        s.add_sql_package("ktrace", PACKAGE)
        r = s.query("INCLUDE PERFETTO MODULE ktrace.phases;\n"
                    "SELECT name, n, total_ns FROM ktrace_phase_totals ORDER BY name")
        assert r.rows == TOTALS
        # Including again is a no-op, as for the stdlib.
        assert s.query("INCLUDE PERFETTO MODULE ktrace.phases; SELECT count(*) FROM ktrace_phase_totals"
                       ).rows == [(2,)]
        # Registering the package again replaces its modules.
        s.add_sql_package("ktrace", {"ktrace.v2": "CREATE PERFETTO TABLE ktrace_v2 AS SELECT 2 AS version;"})
        assert s.query("INCLUDE PERFETTO MODULE ktrace.v2; SELECT version FROM ktrace_v2").rows == [(2,)]


def test_sql_package_errors(trace_bytes, wasm_only):
    with open_trace(trace_bytes) as s:
        with pytest.raises(InputError, match="not inside package 'ktrace'"):
            s.add_sql_package("ktrace", {"other.phases": "SELECT 1;"})
        with pytest.raises(InputError, match="already registered"):
            s.add_sql_package("slices", {"slices.mine": "SELECT 1;"})  # never shadows the stdlib
        s.add_sql_package("ktrace", {"ktrace.broken": "CREATE PERFETTO TABLE t AS SELECT * FROM nowhere;"})
        with pytest.raises(InputError, match="nowhere"):
            s.query("INCLUDE PERFETTO MODULE ktrace.broken; SELECT 1")


def test_sql_package_fallback_when_engine_cannot_register(trace_bytes, wasm_only, monkeypatch):
    with open_trace(trace_bytes) as s:
        def unsupported(name, modules, replace):
            raise UnsupportedRequest("TPM_REGISTER_SQL_PACKAGE")
        monkeypatch.setattr(s._backend, "register_sql_package", unsupported)
        s.add_sql_package("ktrace", PACKAGE)
        r = s.query("INCLUDE PERFETTO MODULE ktrace.phases;\n"
                    "INCLUDE PERFETTO MODULE slices.with_context;\n"
                    "SELECT name, n, total_ns FROM ktrace_phase_totals ORDER BY name")
        assert r.rows == TOTALS


@pytest.mark.slow
def test_the_analysis_runs_on_an_engine_that_inlines_the_package(wasm_only, monkeypatch, tmp_path):
    # An engine without package registration gets the modules inlined and the INCLUDEs dropped (as the
    # Perfetto UI's pasted package does): every statement the analysis sends must still be SQL.
    from conftest import sample
    from ktrace.analysis import sql_figures
    from ktrace.export.writer import write_trace
    from ktrace.decoding import decode

    trace = tmp_path / "w.perfetto-trace"
    write_trace(decode(sample("warpgroups_ktrace")), trace)
    with open_trace(trace) as s:
        registered = sql_figures(s)
    with open_trace(trace) as s:
        def unsupported(name, modules, replace):
            raise UnsupportedRequest("TPM_REGISTER_SQL_PACKAGE")
        monkeypatch.setattr(s._backend, "register_sql_package", unsupported)
        inlined = sql_figures(s)
    assert inlined.differences(registered) == [] and len(inlined.phases) > 0 and len(inlined.wait_causes) > 0


# -- inputs that are not Perfetto traces ------------------------------------------------------------------

BAD_INPUTS = {
    "empty": (b"", "empty file"),
    "random": (bytes([0x99]) + np.random.default_rng(3).bytes(4000), "not a Perfetto protobuf trace"),
    "json": (json.dumps({"traceEvents": [{"name": "a", "ph": "X", "ts": 1, "dur": 2, "pid": 1,
                                          "tid": 1}]}).encode(), "looks like JSON"),
    "text": (b"block,phase,ts\n0,load,1000\n", "looks like text"),
    # Starts like a trace packet, so only the engine can tell: it reports a corrupt proto.
    "packet-shaped garbage": (b"\x0a\x05hello" * 20, "not a readable Perfetto trace"),
    "trace then garbage": (make_trace(LANES) + np.random.default_rng(5).bytes(100),
                           "not a readable Perfetto trace"),
}


@pytest.mark.parametrize("kind", list(BAD_INPUTS))
def test_not_a_trace_is_an_input_error_naming_the_file(tmp_path, kind, wasm_only):
    data, message = BAD_INPUTS[kind]
    path = tmp_path / "suspect.perfetto-trace"
    path.write_bytes(data)
    with pytest.raises(InputError, match=message) as info:
        open_trace(path)
    assert str(path) in str(info.value)
    assert info.value.exit_code == EXIT_INPUT


def test_missing_file_and_directory(tmp_path, wasm_only):
    with pytest.raises(InputError, match="no such file"):
        open_trace(tmp_path / "absent.perfetto-trace")
    with pytest.raises(InputError, match="not a file"):
        open_trace(tmp_path)
    with pytest.raises(InputError, match="path or bytes"):
        open_trace(12)


# -- the wasm runtime --------------------------------------------------------------------------------------

OOM_SQL = """
    CREATE PERFETTO TABLE big AS
    WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5000000)
    SELECT x, printf('%040d', x) AS s FROM c;
    SELECT count(*) FROM big"""


@pytest.mark.slow
def test_trap_kills_the_session_but_not_the_next(trace_bytes, wasm_only):
    from ktrace.engine.wasm import WasmTraceProcessor

    # A 64 MiB heap runs out quickly: malloc fails and the engine aborts (a trap).
    small = session_module._load(WasmTraceProcessor(heap_max_bytes=64 << 20),
                                 *session_module._walked_source(trace_bytes), None)
    with pytest.raises(KtraceError, match="ran out of memory"):
        small.query(OOM_SQL)
    with pytest.raises(KtraceError, match="cannot be used"):
        small.query("SELECT 1")  # never reused after a trap
    small.close()
    with open_trace(trace_bytes) as fresh:
        assert fresh.query("SELECT count(*), sum(dur) FROM slice").rows == [(6, 6550)]


def test_engine_selection(monkeypatch, tmp_path):
    monkeypatch.delenv("KTRACE_TP_SHELL", raising=False)
    with pytest.raises(EnvironmentMissing, match="KTRACE_TP_SHELL=/path/to/trace_processor_shell") as info:
        open_trace(make_trace(LANES), engine="native")
    assert info.value.exit_code == EXIT_ENV
    with pytest.raises(InputError, match="unknown engine"):
        open_trace(make_trace(LANES), engine="gpu")
    monkeypatch.setenv("KTRACE_TP_SHELL", str(tmp_path / "absent"))
    with pytest.raises(EnvironmentMissing, match="not an executable file"):
        open_trace(make_trace(LANES))  # auto picks native when the variable is set


def test_missing_wasmtime_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "wasmtime", None)
    with pytest.raises(EnvironmentMissing, match="pip install wasmtime"):
        wasm_cache.import_wasmtime()


WAT = '(module (func (export "answer") (result i32) i32.const 42))'


@pytest.fixture
def tiny_module(tmp_path, monkeypatch):
    """Point the cache at a tiny module (compiles instantly) and forget the process's loaded modules."""
    import wasmtime

    wasm = tmp_path / "tiny.wasm"
    wasm.write_bytes(wasmtime.wat2wasm(WAT))
    cache = tmp_path / "cache"
    monkeypatch.setenv("KTRACE_TP_WASM", str(wasm))
    monkeypatch.setenv("KTRACE_CACHE_DIR", str(cache))
    monkeypatch.setattr(wasm_cache, "_loaded", {})
    return cache


def _answer(engine, module):
    import wasmtime

    store = wasmtime.Store(engine)
    store.set_epoch_deadline(1)  # the engine is configured for epoch interruption (query timeouts)
    return wasmtime.Instance(store, module, []).exports(store)["answer"](store)


def test_module_cache_compiles_once_then_loads(tiny_module, capsys, monkeypatch):
    _answer(*wasm_cache.load_module())
    assert "compiling the trace processor once" in capsys.readouterr().err
    entries = sorted(p.name for p in tiny_module.iterdir() if p.name != ".lock")  # the lock file stays
    assert len(entries) == 2 and entries[0].endswith(".cwasm")  # no temporary file left behind
    assert entries[1] == entries[0] + ".sha256"
    monkeypatch.setattr(wasm_cache, "_loaded", {})
    engine, module = wasm_cache.load_module()
    assert capsys.readouterr().err == ""
    assert _answer(engine, module) == 42


def test_corrupt_cache_entry_is_recompiled(tiny_module, capsys, monkeypatch):
    wasm_cache.load_module()
    (entry,) = tiny_module.glob("*.cwasm")
    for damage in (b"garbage" * 100, entry.read_bytes()[: entry.stat().st_size // 2]):
        entry.write_bytes(damage)
        monkeypatch.setattr(wasm_cache, "_loaded", {})
        capsys.readouterr()
        assert _answer(*wasm_cache.load_module()) == 42
        assert "compiling" in capsys.readouterr().err
    monkeypatch.setattr(wasm_cache, "_loaded", {})
    assert _answer(*wasm_cache.load_module()) == 42
    assert capsys.readouterr().err == ""  # the rewritten entry is good


OTHER_WAT = '(module (func (export "answer") (result i32) i32.const 666))'


def _plant(entry, engine, wat=OTHER_WAT):
    """Writes a valid compiled module of another program at the cache entry's name, as an attacker would."""
    import wasmtime

    entry.write_bytes(wasmtime.Module(engine, wasmtime.wat2wasm(wat)).serialize())


def test_planted_module_without_a_record_never_runs(tiny_module, capsys, monkeypatch):
    engine, _ = wasm_cache.load_module()
    (entry,) = tiny_module.glob("*.cwasm")
    cache_files.record_path(entry).unlink()
    _plant(entry, engine)
    monkeypatch.setattr(wasm_cache, "_loaded", {})
    capsys.readouterr()
    assert _answer(*wasm_cache.load_module()) == 42  # the planted module (666) was not loaded
    assert "no integrity record" in capsys.readouterr().err
    monkeypatch.setattr(wasm_cache, "_loaded", {})
    assert _answer(*wasm_cache.load_module()) == 42
    assert capsys.readouterr().err == ""  # replaced by a good entry with its record


def test_planted_module_with_a_stale_record_never_runs(tiny_module, capsys, monkeypatch):
    engine, _ = wasm_cache.load_module()
    (entry,) = tiny_module.glob("*.cwasm")
    _plant(entry, engine)  # the record still holds the digest of the module ktrace wrote
    monkeypatch.setattr(wasm_cache, "_loaded", {})
    capsys.readouterr()
    assert _answer(*wasm_cache.load_module()) == 42
    assert "does not match its integrity record" in capsys.readouterr().err


def test_damaged_module_is_replaced_not_run(tiny_module, capsys, monkeypatch):
    """Bytes damaged in place (same length, so wasmtime's own header checks pass) are never deserialized."""
    wasm_cache.load_module()
    (entry,) = tiny_module.glob("*.cwasm")
    good = entry.read_bytes()
    damaged = bytearray(good)
    for i in range(len(damaged) // 2, len(damaged) - 8, 7):
        damaged[i] ^= 0xFF
    entry.write_bytes(bytes(damaged))
    monkeypatch.setattr(wasm_cache, "_loaded", {})
    capsys.readouterr()
    assert _answer(*wasm_cache.load_module()) == 42
    assert "does not match its integrity record (damaged or replaced)" in capsys.readouterr().err
    assert entry.read_bytes() == good


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX ownership")
def test_cache_folder_others_can_write_is_not_trusted(tiny_module, capsys, monkeypatch, tmp_path):
    engine, _ = wasm_cache.load_module()
    (entry,) = tiny_module.glob("*.cwasm")
    record = cache_files.record_path(entry)
    # An attacker who can write the folder writes both the module and a matching record.
    _plant(entry, engine)
    import hashlib
    record.write_text("sha256 " + hashlib.sha256(entry.read_bytes()).hexdigest() + "\n")
    tiny_module.chmod(0o777)
    monkeypatch.setattr(wasm_cache.tempfile, "tempdir", str(tmp_path / "private-tmp"))
    (tmp_path / "private-tmp").mkdir(mode=0o700)
    monkeypatch.setattr(wasm_cache, "_loaded", {})
    monkeypatch.setattr(wasm_cache, "_warned", {})
    capsys.readouterr()
    assert _answer(*wasm_cache.load_module()) == 42
    err = capsys.readouterr().err
    assert "can be written by other users" in err and "private-tmp" in err


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="needs root to chown")
def test_module_owned_by_another_user_is_not_trusted(tiny_module, capsys, monkeypatch):
    engine, _ = wasm_cache.load_module()
    (entry,) = tiny_module.glob("*.cwasm")
    os.chown(entry, 65534, 65534)
    monkeypatch.setattr(wasm_cache, "_loaded", {})
    capsys.readouterr()
    assert _answer(*wasm_cache.load_module()) == 42
    assert "belongs to user id 65534" in capsys.readouterr().err
    assert entry.stat().st_uid == os.getuid()  # replaced


def test_symlinked_module_is_not_followed(tiny_module, capsys, monkeypatch, tmp_path):
    engine, _ = wasm_cache.load_module()
    (entry,) = tiny_module.glob("*.cwasm")
    elsewhere = tmp_path / "elsewhere.cwasm"
    elsewhere.write_bytes(entry.read_bytes())
    entry.unlink()
    entry.symlink_to(elsewhere)
    monkeypatch.setattr(wasm_cache, "_loaded", {})
    capsys.readouterr()
    assert _answer(*wasm_cache.load_module()) == 42
    assert "symlink is never followed" in capsys.readouterr().err
    assert not entry.is_symlink()


def test_read_only_cache_does_not_claim_it_is_cached(tiny_module, capsys, monkeypatch):
    tiny_module.mkdir()
    tiny_module.chmod(0o500)
    try:
        if os.access(tiny_module, os.W_OK):
            pytest.skip("root can write a read-only folder")
        wasm_cache.load_module()
        assert "could not cache" in capsys.readouterr().err
    finally:
        tiny_module.chmod(0o700)


def test_unwritable_cache_is_not_fatal(tiny_module, monkeypatch):
    tiny_module.parent.joinpath("blocker").write_text("a file where the cache directory should be")
    monkeypatch.setenv("KTRACE_CACHE_DIR", str(tiny_module.parent / "blocker" / "cache"))
    assert _answer(*wasm_cache.load_module()) == 42


@pytest.mark.slow
def test_warm_start_is_fast_and_silent(trace_bytes, engine_cache, wasm_only):
    with open_trace(trace_bytes):
        pass  # makes sure the real module is compiled and cached in engine_cache
    # fast: the cached module is loaded, never compiled again (compiling is what takes seconds: it would fail)
    code = ("from ktrace.engine import wasm_cache\n"
            "def _compile(*args):\n    raise SystemExit('compiled again')\n"
            "wasm_cache._compile = _compile\nwasm_cache.load_module(wide=False)\nprint('loaded')")  # a small trace's build
    env = dict(os.environ, KTRACE_CACHE_DIR=str(engine_cache), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    assert out.stdout == "loaded\n"


# -- native engine -------------------------------------------------------------------------------------------

FAKE_SHELL = '''#!{python}
"""A stand-in for trace_processor_shell's HTTP server (/status, /parse, /notify_eof, /query, /rpc),
answering with the embedded engine, to exercise ktrace's native backend without the real binary."""
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
sys.path.insert(0, {root!r})
from ktrace.engine.backend import proto_fields
from ktrace.engine.wasm import WasmTraceProcessor

tp = WasmTraceProcessor()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == "/notify_eof":
            tp.finalize()
        self.reply(b"")

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/parse":
            return self.reply(b"" if not tp.append(body) else b"\\x12\\x05error")
        if self.path == "/query":
            stream = tp._request(3)
            stream.msg[0].query_args.ParseFromString(body)
            payloads = tp._call_raw(stream)
            return self.reply(b"".join(bytes(v) for p in payloads for f, v in proto_fields(p) if f == 203))
        if self.path == "/rpc":
            stream = tp._request(0)
            stream.ParseFromString(body)
            payloads = tp._call_raw(stream)
            return self.reply(b"".join(b"\\x0a" + _varint(len(p)) + bytes(p) for p in payloads))
        self.send_error(404)

    def reply(self, data):
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _varint(n):
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


port = int(sys.argv[sys.argv.index("--http-port") + 1])
HTTPServer(("localhost", port), Handler).serve_forever()
'''


@pytest.mark.slow
def test_native_backend_through_a_stand_in_shell(tmp_path, trace_bytes, monkeypatch):
    shell = tmp_path / "trace_processor_shell"
    shell.write_text(FAKE_SHELL.format(python=sys.executable, root=str(ROOT)))
    shell.chmod(0o755)
    monkeypatch.setenv("KTRACE_TP_SHELL", str(shell))
    with open_trace(trace_bytes) as s:
        assert s.engine_name == "native"
        assert s.query("SELECT count(*), sum(dur) FROM slice").rows == [(6, 6550)]
        with pytest.raises(InputError, match="no such table"):
            s.query("SELECT * FROM nowhere")
        s.add_sql_package("ktrace", PACKAGE)
        r = s.query("INCLUDE PERFETTO MODULE ktrace.phases; SELECT name, n, total_ns FROM ktrace_phase_totals "
                    "ORDER BY name")
        assert r.rows == TOTALS


@pytest.mark.skipif(not os.environ.get("KTRACE_TP_SHELL"),
                    reason="set KTRACE_TP_SHELL to a trace_processor_shell binary")
def test_native_and_wasm_agree(trace_bytes):
    sql = ("SELECT s.name, s.ts, s.dur, s.depth, t.name AS track, "
           "extract_arg(s.arg_set_id, 'debug.block') AS block, extract_arg(s.arg_set_id, 'debug.k') AS k "
           "FROM slice s JOIN track t ON s.track_id = t.id ORDER BY s.ts, s.id")
    with open_trace(trace_bytes, engine="native") as native, open_trace(trace_bytes, engine="wasm") as wasm:
        assert native.engine_name == "native" and wasm.engine_name == "wasm"
        assert native.query(sql).rows == wasm.query(sql).rows
        native.add_sql_package("ktrace", PACKAGE)
        wasm.add_sql_package("ktrace", PACKAGE)
        include = ("INCLUDE PERFETTO MODULE ktrace.phases; "
                   "SELECT * FROM ktrace_phase_totals ORDER BY name")
        assert native.query(include).rows == wasm.query(include).rows == TOTALS


# -- limits ---------------------------------------------------------------------------------------------------

ENDLESS = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r"


@pytest.mark.slow
def test_endless_query_is_stopped_by_the_timeout(trace_bytes, wasm_only, monkeypatch):
    monkeypatch.setenv("KTRACE_TIMEOUT", "1")
    with open_trace(trace_bytes) as s:
        with pytest.raises(InputError, match=r"stopped after 1 s .*--timeout"):
            s.query(ENDLESS)


def test_timeout_must_be_a_positive_number(trace_bytes, wasm_only, monkeypatch):
    monkeypatch.setenv("KTRACE_TIMEOUT", "nan")
    with pytest.raises(InputError, match="number of seconds"):
        with open_trace(trace_bytes) as s:
            s.query("select 1")


@pytest.mark.slow
def test_ctrl_c_stops_a_running_query(tmp_path, trace_bytes, wasm_only):
    trace = tmp_path / "t.perfetto-trace"
    trace.write_bytes(trace_bytes)
    p = subprocess.Popen([sys.executable, "-c", KTRACE_SAYING_QUERIES, "query", str(trace), ENDLESS],
                         env=dict(os.environ), preexec_fn=interruptible,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    read_until_querying(p, "WITH RECURSIVE")  # loaded and running the query
    assert p.poll() is None
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err


@pytest.mark.slow
def test_address_space_limit_is_named(trace_bytes, wasm_only, tmp_path):
    trace = tmp_path / "t.perfetto-trace"
    trace.write_bytes(trace_bytes)
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (8 << 30, resource.RLIM_INFINITY)); "
            "from ktrace.cli import main; sys.exit(main(sys.argv[1:]))")
    p = subprocess.run([sys.executable, "-c", code, "query", str(trace), "select 1"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 3, p.stderr
    assert "ulimit -v: 8.0 GiB" in p.stderr and "KTRACE_TP_SHELL" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX ownership")
def test_a_cache_folder_name_reaches_the_terminal_escaped(tiny_module, capsys, monkeypatch, tmp_path):
    # The folder comes from a setting (KTRACE_CACHE_DIR, HOME): its name may hold what a terminal acts on.
    bad = tmp_path / "cache\x1b]0;owned\x07\x1b[2J"
    bad.mkdir(mode=0o777)
    bad.chmod(0o777)  # others can write it: not used, and said so
    monkeypatch.setattr(wasm_cache, "cache_dir", lambda: bad)
    monkeypatch.setattr(wasm_cache.tempfile, "tempdir", str(tmp_path / "private-tmp"))
    (tmp_path / "private-tmp").mkdir(mode=0o700)
    monkeypatch.setattr(wasm_cache, "_warned", {})
    capsys.readouterr()
    folder, _ = wasm_cache.usable_folder()
    err = capsys.readouterr().err
    assert folder == tmp_path / "private-tmp" / f"ktrace-cache-{os.getuid()}"
    assert "not using the cache folder" in err and "\\x1b]0;owned\\x07\\x1b[2J" in err
    assert "\x1b" not in err and "\x07" not in err


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX ownership")
def test_the_cache_folder_note_is_said_once_per_run(tiny_module, capsys, monkeypatch, tmp_path):
    shared = tmp_path / "shared-cache"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setattr(wasm_cache, "cache_dir", lambda: shared)
    monkeypatch.setattr(wasm_cache.tempfile, "tempdir", str(tmp_path / "private-tmp"))
    (tmp_path / "private-tmp").mkdir(mode=0o700)
    monkeypatch.setattr(wasm_cache, "_warned", {})
    monkeypatch.delenv("KTRACE_CACHE_FOLDER_NOTED", raising=False)
    capsys.readouterr()
    for _ in range(3):  # the compile, the load, the snapshot each ask
        wasm_cache.usable_folder()
    assert capsys.readouterr().err.count("not using the cache folder") == 1
    monkeypatch.setattr(wasm_cache, "_warned", {})  # a worker process: its own module state, the run's environment
    wasm_cache.usable_folder()
    assert "not using the cache folder" not in capsys.readouterr().err


def test_every_chunk_is_walked_the_first_before_the_engine_starts_the_rest_as_they_load(trace_bytes, monkeypatch):
    bomb = b"\x0a" + bytes([0x80, 0x80, 0x80, 0x80, 0x08]) + bytes(64)  # a packet of 2^31 bytes
    with pytest.raises(InputError, match="larger than any trace packet"):
        open_trace(bomb)  # the first chunk walked before the engine starts
    monkeypatch.setattr(session_module, "CHUNK_BYTES", 100)
    with pytest.raises(InputError, match="larger than any trace packet"):
        open_trace(trace_bytes + bomb)  # in a later chunk, walked on its way to the engine
