"""The embedded engine's heap sized from the trace: grown up front, its maximum from the trace's size within
the build's limit, and a trace that cannot fit refused before any loading, with what to use instead."""

import pytest

from ktrace.engine import open_trace
from ktrace.engine.wasm_cache import HEAP_MAX_BYTES
from ktrace.engine.wasm_heap import HEAP_ENV, HEAP_FLOOR_BYTES, heap_plan, machine_memory
from ktrace.core.errors import EXIT_INPUT, InputError

from conftest import run_ktrace, sample

GiB = 1 << 30


@pytest.fixture(autouse=True)
def no_override(monkeypatch):
    monkeypatch.delenv(HEAP_ENV, raising=False)
    monkeypatch.delenv("KTRACE_TP_SHELL", raising=False)


def test_a_small_trace_gets_the_floor_and_a_large_one_grows_with_it():
    initial, maximum, why = heap_plan("t", 60 << 20)
    assert initial == 240 << 20
    assert maximum == min(HEAP_FLOOR_BYTES, machine_memory() or HEAP_FLOOR_BYTES)
    initial, maximum, _ = heap_plan("t", 600 << 20, build_max=HEAP_MAX_BYTES)
    assert initial == 2400 << 20 and maximum == min(HEAP_MAX_BYTES, machine_memory() or HEAP_MAX_BYTES, 9600 << 20)


def test_a_compressed_trace_of_unknown_size_may_use_the_whole_heap():
    initial, maximum, why = heap_plan("t.gz", None)
    assert initial == 0 and maximum == min(HEAP_MAX_BYTES, machine_memory() or HEAP_MAX_BYTES)


def test_a_trace_that_cannot_fit_is_refused_with_the_alternatives():
    with pytest.raises(InputError) as info:
        heap_plan("huge.perfetto-trace", 5 * GiB)
    msg = str(info.value)
    assert msg.startswith("huge.perfetto-trace: a trace of 5.0 GiB needs at least 20.0 GiB")
    assert "--engine numpy" in msg and "KTRACE_TP_SHELL" in msg and info.value.exit_code == EXIT_INPUT


def test_the_maximum_can_be_set(monkeypatch):
    monkeypatch.setenv(HEAP_ENV, "8")
    assert heap_plan("t", 1 << 20)[1:] == (8 * GiB, f"${HEAP_ENV}")
    monkeypatch.setenv(HEAP_ENV, "100")
    with pytest.raises(InputError, match=f"{HEAP_ENV}='100'"):
        heap_plan("t", 1 << 20)


def test_open_trace_refuses_before_loading(monkeypatch, tmp_path):
    trace = tmp_path / "t.perfetto-trace"
    assert run_ktrace("convert", sample("imbalance"), "-o", trace)[0] == 0
    monkeypatch.setenv(HEAP_ENV, str(trace.stat().st_size * 2 / GiB))  # half what loading takes at least
    with pytest.raises(InputError, match="t.perfetto-trace: a trace of"):
        open_trace(trace, engine="wasm")
    monkeypatch.delenv(HEAP_ENV)
    with open_trace(trace, engine="wasm") as s:
        assert s._backend._host.heap_bytes() >= 4 * trace.stat().st_size
        assert s.query("SELECT count(*) AS n FROM slice").rows[0][0] > 0
