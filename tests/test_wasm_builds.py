"""The embedded trace processor's two builds: a trace small enough runs in the 32-bit one (no bounds check on
each memory access), a larger one, or one of unknown size, in the memory64 build; both give the same answers,
and the host reads the 32-bit build's structures and pointers (handed over as signed i32) as it means them."""

from __future__ import annotations

import ctypes
import gzip
import struct

import pytest

from ktrace import api
from ktrace.analysis import sql_figures
from ktrace.engine import open_trace
from ktrace.engine import session as session_module
from ktrace.engine.wasm_cache import NARROW_HEAP_MAX_BYTES
from ktrace.engine.wasm_heap import HEAP_ENV, needs_wide_build
from ktrace.engine.wasm_host import Host, WasmAbort

from conftest import sample


@pytest.fixture(autouse=True)
def embedded(monkeypatch):
    monkeypatch.delenv("KTRACE_TP_SHELL", raising=False)
    monkeypatch.delenv(HEAP_ENV, raising=False)


def test_the_build_is_chosen_by_the_heap_the_trace_may_need(monkeypatch):
    assert not needs_wide_build(1 << 20)
    assert not needs_wide_build(NARROW_HEAP_MAX_BYTES // 16)  # 16x the trace still fits in 4 GiB
    assert needs_wide_build(NARROW_HEAP_MAX_BYTES // 16 + 1)
    assert needs_wide_build(None)  # a compressed trace: its size is not known
    monkeypatch.setenv(HEAP_ENV, "8")  # a maximum past 4 GiB asked for: only the memory64 build has it
    assert needs_wide_build(1 << 20)
    monkeypatch.setenv(HEAP_ENV, "2")
    assert not needs_wide_build(1 << 20)


def test_a_small_trace_runs_in_the_32_bit_build_and_a_compressed_one_in_memory64(tmp_path):
    trace = tmp_path / "t.perfetto-trace"
    api.convert(sample("imbalance"), trace)
    packed = tmp_path / "t.perfetto-trace.gz"
    packed.write_bytes(gzip.compress(trace.read_bytes()))
    with open_trace(trace, engine="wasm") as narrow, open_trace(packed, engine="wasm") as wide:
        assert narrow._backend._ptr64 is False and wide._backend._ptr64 is True
        assert narrow._backend._host.heap_max_bytes <= NARROW_HEAP_MAX_BYTES
        sql = "SELECT count(*), sum(dur), max(ts) FROM slice"
        assert narrow.query(sql).rows == wide.query(sql).rows


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fi_mla_decode_run1", "fi_batch_attention_mixed_run1", "pipeline_flashinfer"])
def test_both_builds_give_the_same_figures(name, tmp_path):
    from ktrace.engine.wasm import WasmTraceProcessor

    src = sample(name)
    trace = tmp_path / "t.perfetto-trace"
    api.convert(src if src.exists() else src.with_suffix(".bin.gz"), trace)
    figures, rows = [], []
    for wide in (False, True):
        tp = WasmTraceProcessor(wide=wide)
        assert tp._ptr64 is wide
        session = session_module._load(tp, *session_module._walked_source(trace), None)
        try:
            figures.append(sql_figures(session))
            # SQLite's date functions call the host's time-zone imports (UTC, whatever the machine's zone).
            rows.append(session.query("SELECT datetime(1700000000, 'unixepoch', 'localtime') AS t, "
                                      "strftime('%s', '2023-11-14 22:13:20') AS s").rows)
        finally:
            session.close()
    assert figures[0].differences(figures[1]) == []
    assert rows[0] == rows[1] == [("2023-11-14 22:13:20", "1700000000")]


class _Memory:
    """A wasm memory stand-in: n bytes the host reads and writes."""

    def __init__(self, n: int) -> None:
        self.buf = (ctypes.c_uint8 * n)()

    def data_ptr(self, store):
        return ctypes.cast(self.buf, ctypes.POINTER(ctypes.c_uint8))

    def data_len(self, store) -> int:
        return len(self.buf)


def test_the_host_reads_the_32_bit_builds_iovecs_and_sizes():
    host = Host(NARROW_HEAP_MAX_BYTES, ptr64=False)
    host.bind(None, _Memory(4096))
    host.write(100, b"hello ")
    host.write(200, b"world\n")
    host.write(16, struct.pack("<4I", 100, 6, 200, 6))  # two iovecs: (pointer, size_t) of 4 bytes each
    assert host.functions()[("wasi_snapshot_preview1", "fd_write")](2, 16, 2, 64) == 0
    assert host.recent_log() == "hello world"
    assert struct.unpack("<I", host.read(64, 4)) == (12,)  # bytes written, as a 32-bit size_t
    assert host.functions()[("env", "emscripten_get_heap_max")]() == NARROW_HEAP_MAX_BYTES - (1 << 32)  # as i32


def test_a_32_bit_pointer_past_2_gib_is_read_unsigned():
    host = Host(NARROW_HEAP_MAX_BYTES, ptr64=False)
    host.bind(None, _Memory(4096))
    with pytest.raises(WasmAbort, match="0xfffffff8"):  # the i32 -8 is the address 4 GiB - 8, not -8
        host.read(-8, 4)
    wide = Host(1 << 34, ptr64=True)
    wide.bind(None, _Memory(4096))
    with pytest.raises(WasmAbort, match="-0x8"):
        wide.read(-8, 4)
