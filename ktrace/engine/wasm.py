"""The embedded engine: Perfetto v52's trace processor, compiled to WebAssembly, run in-process by wasmtime.

One ``WasmTraceProcessor`` is one instance with its own linear memory (a 16 GiB reservation of address
space, of which only what the heap grows to is touched). It speaks the trace processor's RPC protocol:
serialized ``TraceProcessorRpcStream`` bytes go into the request buffer and
``trace_processor_on_rpc_request`` is called; the replies come back synchronously, inside that call,
through a host callback in the function table, as a stream of length-delimited ``TraceProcessorRpc``
messages.

After a trap (an out-of-memory abort ends in ``unreachable``) the instance's state is undefined: it is
marked dead and every later call raises. One instance must not be used from two threads at once (the
Session serializes calls).
"""

from __future__ import annotations

import importlib.metadata
import threading
from typing import Any, Callable, Iterable

from ktrace.engine.backend import (Backend, RawQueryResult, SnapshotRejected, UnsupportedRequest, proto_fields,
                                   register_sql_package_rpc, rpc_protos, split_rpc_stream, whole_payloads)
from ktrace._version import __version__
from ktrace.engine import wasm_snapshot
from ktrace.engine.wasm_cache import HEAP_MAX_BYTES, NARROW_HEAP_MAX_BYTES, import_wasmtime, load_module, module_facts
from ktrace.engine.wasm_heap import HEAP_ENV, env_number, heap_plan
from ktrace.engine.wasm_host import Host, WasmAbort
from ktrace.core.errors import EnvironmentMissing, InputError, KtraceError

__all__ = ["WasmTraceProcessor", "DEFAULT_TIMEOUT_S", "query_timeout_s"]

# How long one query may run before it is stopped (an endless recursive query would otherwise never end).
DEFAULT_TIMEOUT_S = 600.0


def query_timeout_s() -> float:
    """The query timeout in seconds: $KTRACE_TIMEOUT (set by ``--timeout``), else DEFAULT_TIMEOUT_S."""
    given = env_number("KTRACE_TIMEOUT")
    if given is None:
        return DEFAULT_TIMEOUT_S
    text, value = given
    if not 0 < value < 1e9:
        raise InputError(f"timeout {text!r}: give a number of seconds above 0, e.g. --timeout 600")
    return value

# How long the figures a restored snapshot is checked by may take (a fresh load answers them in well under a
# second at any size the heap allows): a damaged heap that sends the engine round in circles costs this, then
# a load.
_CHECK_TIMEOUT_S = 60.0
# Size of the request buffer inside the instance (the UI uses the same). Requests are split across it.
_REQUEST_BUFFER_BYTES = 32 << 20
# Field numbers in TraceProcessorRpc (protos/perfetto/trace_processor/trace_processor.proto).
_INVALID_REQUEST_FIELD = 4
_FATAL_ERROR_FIELD = 5
_QUERY_RESULT_FIELD = 203


class WasmTraceProcessor(Backend):
    """The trace processor as a WebAssembly instance: the memory64 build (``wide``; its heap capped at
    ``heap_max_bytes``, default 16 GiB) or the 32-bit one (4 GiB at most, faster)."""

    name = "wasm"

    def __init__(self, *, heap_max_bytes: int = HEAP_MAX_BYTES, wide: bool = True) -> None:
        wasmtime = import_wasmtime()
        self._wasmtime = wasmtime
        self._dead: str | None = None
        self._reply = bytearray()
        self._reply_limit: int | None = None  # a query's max_bytes: the reply's pieces past it are not kept
        self._reply_cut = False
        self._gave_up = False
        self._timeout_s: float | None = None  # instead of query_timeout_s(): the restored snapshot's check
        engine, module = load_module(wide)
        self._wasm_sha256, self._mutable_globals = module_facts(wide)
        self._engine = engine
        self._store = wasmtime.Store(engine)
        self._store.set_epoch_deadline(1)
        # Pointers are the memory's width: 64-bit in the memory64 build, 32-bit (passed as signed i32) otherwise.
        memory = next((e.type for e in module.exports if e.name == "memory"), None)
        self._ptr64 = bool(getattr(memory, "is_64", True))
        self._build_max = min(heap_max_bytes, HEAP_MAX_BYTES if self._ptr64 else NARROW_HEAP_MAX_BYTES)
        self._heap_why = "the build's limit"
        self._heap_initial = 0
        self._host = Host(self._build_max, self._ptr64)
        linker = wasmtime.Linker(engine)
        provided = self._host.functions()
        for imp in module.imports:
            ty = imp.type
            fn = provided.get((imp.module, imp.name))
            if fn is None:
                fn = self._host.stub(imp.module, imp.name, [str(p) for p in ty.params],
                                     [str(r) for r in ty.results])
            linker.define_func(imp.module, imp.name, ty, fn)
        try:
            instance = linker.instantiate(self._store, module)
            exports = instance.exports(self._store)
            self._host.bind(self._store, exports["memory"])
            exports["emscripten_stack_init"](self._store)
            exports["__wasm_call_ctors"](self._store)
            i64, i32 = wasmtime.ValType.i64(), wasmtime.ValType.i32()
            pointer = i64 if self._ptr64 else i32
            callback = wasmtime.Func(self._store, wasmtime.FuncType([pointer, i32], []), self._on_reply)
            table = exports["__indirect_function_table"]
            index = table.grow(self._store, 1, callback)
            self._request_buffer = exports["trace_processor_rpc_init"](self._store, index,
                                                                      _REQUEST_BUFFER_BYTES)
            self._on_rpc_request = exports["trace_processor_on_rpc_request"]
            self._table, self._callback_index = table, index
            self._stack = [exports[f"emscripten_stack_get_{n}"] for n in ("current", "base", "end")]
        except (wasmtime.WasmtimeError, wasmtime.Trap, WasmAbort, KeyError) as exc:
            limit = _address_space_limit()
            if limit is not None and limit < HEAP_MAX_BYTES + (1 << 30):
                raise EnvironmentMissing(
                    f"the embedded trace processor reserves {_size(HEAP_MAX_BYTES)} of address space up front (it "
                    f"touches only what the heap grows to), more than this process's limit allows (ulimit -v: "
                    f"{_size(limit)}); raise it (ulimit -v unlimited) or set KTRACE_TP_SHELL to a "
                    "trace_processor_shell binary") from exc
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise EnvironmentMissing(f"the embedded trace processor failed to start ({reason}); "
                                     "set KTRACE_TP_SHELL to a trace_processor_shell binary instead") from exc

    # -- Backend ----------------------------------------------------------------------------------------

    def expect(self, name: str, trace_bytes: int | None) -> None:
        """Sizes the heap from the trace (``wasm_heap``): its maximum, and the memory grown up front."""
        initial, self._host.heap_max_bytes, self._heap_why = heap_plan(name, trace_bytes, self._build_max)
        self._heap_initial = initial
        grow = initial - self._host.heap_bytes()
        if grow > 0:
            try:
                self._host.grow(grow)
            except Exception:  # the heap then grows as the engine asks, as it would have anyway
                pass

    def load(self, chunks: Iterable[bytes]) -> str:
        for chunk in chunks:
            error = self.append(chunk)
            if error:
                return error
        return self.finalize()

    def append(self, chunk: bytes) -> str:
        """Sends one TPM_APPEND_TRACE_DATA; returns the engine's parse error ("" if none)."""
        rpc = self._request(rpc_protos().TraceProcessorRpc.TPM_APPEND_TRACE_DATA)
        rpc.msg[0].append_trace_data = chunk
        (reply,) = self._call(rpc)
        return reply.append_result.error

    def finalize(self) -> str:
        """Sends TPM_FINALIZE_TRACE_DATA (sort and flush everything appended); returns its error."""
        rpc = self._request(rpc_protos().TraceProcessorRpc.TPM_FINALIZE_TRACE_DATA)
        (reply,) = self._call(rpc)
        return reply.finalize_data_result.error if reply.HasField("finalize_data_result") else ""

    def query(self, sql: str, max_bytes: int | None = None) -> RawQueryResult:
        rpc = self._request(rpc_protos().TraceProcessorRpc.TPM_QUERY_STREAMING)
        rpc.msg[0].query_args.sql_query = sql
        columns: list[str] = []
        errors: list[str] = []
        batches: list[bytes] = []
        # Decoded by hand: protobuf would build a Python object per cell of a large result.
        for payload in self._call_raw(rpc, max_bytes):
            for field, value in proto_fields(payload):
                if field != _QUERY_RESULT_FIELD:
                    continue
                for result_field, item in proto_fields(value):
                    if result_field == 1:
                        columns.append(bytes(item).decode())
                    elif result_field == 2:
                        errors.append(bytes(item).decode("utf-8", "replace"))
                    elif result_field == 3:
                        batches.append(bytes(item))
        return RawQueryResult(columns=tuple(columns), error="".join(errors), batches=batches,
                              cut_at_bytes=max_bytes if self._reply_cut else None)

    def register_sql_package(self, name: str, modules: dict[str, str], replace: bool) -> str:
        (reply,) = self._call(register_sql_package_rpc(name, modules, replace))
        return reply.register_sql_package_result.error

    # -- loaded-trace snapshots (wasm_snapshot) ----------------------------------------------------------

    def snapshot_wanted(self, trace_bytes: int | None) -> bool:
        # A snapshot restores linear memory and checks the three globals the stack exports read: a build
        # with any other mutable global (whose value a load might change) is never snapshotted.
        return self._mutable_globals == len(self._stack) and wasm_snapshot.wanted(trace_bytes)

    def restore(self, trace_sha256: str) -> bool:
        """Replaces this fresh instance's state by the snapshot of the trace whose bytes have that SHA-256,
        if there is a usable one. Called after ``expect`` and before anything is loaded or queried.

        What is not in linear memory is checked or carried over: the module's three mutable globals (the
        stack pointer and the stack's bounds, which the emscripten_stack_get_* exports read) and the table's
        size must equal the snapshot's, as must the request buffer and the reply callback's table slot that
        the restored memory points to; the host's clock and log are carried over.

        Then the engine is asked ``wasm_snapshot.FIGURES_SQL``, which must answer what the trace's fresh load
        answered (kept in the snapshot's HMAC'd record). When it does not, or the engine fails on it (a crash,
        a timeout of _CHECK_TIMEOUT_S), the snapshot is removed, this instance is spent and SnapshotRejected is
        raised: the caller loads the trace in a fresh one."""
        key = self._snapshot_key(trace_sha256)
        snapshot, problem = wasm_snapshot.read(key)
        if snapshot is not None and snapshot.header.get("engine") != self._engine_state():
            snapshot, problem = None, "it was made by an engine set up differently"
            wasm_snapshot.discard(key)
        if snapshot is None or not self._host.heap_bytes() <= snapshot.memory_bytes <= self._host.heap_max_bytes:
            if problem:
                wasm_snapshot.note(problem)
            return False
        fresh_bytes = self._host.heap_bytes()
        try:
            self._host.grow(snapshot.memory_bytes - fresh_bytes)
        except Exception:  # no room for it: load the trace, which grows only as far as it needs
            return False
        if self._host.heap_bytes() != snapshot.memory_bytes:
            return False
        try:
            snapshot.copy_into(self._host.memory(), fresh_bytes)
            self._host.resume(snapshot.header["host"])
            figures = self._figures(timeout_s=_CHECK_TIMEOUT_S)
            problem = "" if figures == snapshot.figures else \
                "the restored trace does not answer as the trace loaded from its bytes did"
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # a damaged heap: the engine traps, aborts, times out or answers an error
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            problem = f"the engine failed on it: {reason}"
        if problem:
            self._dead = "its snapshot did not restore"
            wasm_snapshot.discard(key)
            wasm_snapshot.note(problem)
            raise SnapshotRejected(problem)
        wasm_snapshot.touch(key)
        return True

    def _figures(self, timeout_s: float | None = None) -> tuple[int, ...]:
        """What ``wasm_snapshot.FIGURES_SQL`` answers on the loaded trace (its one row, as integers)."""
        from ktrace.engine.result import decode

        self._timeout_s = timeout_s
        try:
            raw = self.query(wasm_snapshot.FIGURES_SQL)
        finally:
            self._timeout_s = None
        if raw.error:
            raise KtraceError(raw.error.strip().splitlines()[0] if raw.error.strip() else "the query failed")
        rows = decode(raw).rows
        if len(rows) != 1 or not all(isinstance(v, int) and not isinstance(v, bool) for v in rows[0]):
            raise KtraceError(f"the figures came back as {len(rows)} row(s) of other than integers")
        return tuple(rows[0])

    def save_snapshot(self, trace_sha256: str) -> None:
        """Stores this instance's state, a trace just loaded and finalized with nothing queried yet, for
        ``restore``. Never fails: a snapshot not written costs a full load next time."""
        if self._dead:
            return
        try:
            # The figures are asked once the memory is written: their query leaves nothing in the snapshot. An
            # engine that crashes on them is found dead by the session's next query, which says so.
            wasm_snapshot.write(self._snapshot_key(trace_sha256),
                                {"engine": self._engine_state(), "host": self._host.state()}, self._host.memory(),
                                figures=self._figures)
        except Exception:  # a cache that cannot be written (or anything else) changes no result
            pass

    def _engine_state(self) -> dict[str, object]:
        self._store.set_epoch_deadline(1)  # another session's timeout may have moved the shared epoch on
        return {"request_buffer": self._request_buffer, "callback_index": self._callback_index,
                "table_size": self._table.size(self._store), "stack": [f(self._store) for f in self._stack]}

    def _snapshot_key(self, trace_sha256: str) -> str:
        return wasm_snapshot.key([
            f"trace {trace_sha256}", f"wasm {self._wasm_sha256}",
            f"wasmtime {importlib.metadata.version('wasmtime')}", f"ktrace {__version__}",
            f"heap {self._heap_initial} {self._host.heap_max_bytes} {self._build_max}",
            f"request buffer {_REQUEST_BUFFER_BYTES}"])

    def close(self) -> None:
        self._dead = self._dead or "it was closed"
        # Drop the references that keep the instance and its memory alive.
        self._store = None
        self._on_rpc_request = None
        self._host.bind(None, None)

    # -- RPC --------------------------------------------------------------------------------------------

    @staticmethod
    def _request(method: int) -> Any:
        stream = rpc_protos().TraceProcessorRpcStream()
        stream.msg.add().request = method
        return stream

    def _on_reply(self, ptr: int, length: int) -> None:
        length &= 0xFFFFFFFF
        if not self._ptr64:
            ptr &= 0xFFFFFFFF
        if ptr == 0 and length == 0:
            self._gave_up = True  # the engine's framing error: it closes the session
            return
        if self._reply_cut or (self._reply_limit is not None and len(self._reply) + length > self._reply_limit):
            self._reply_cut = True  # the engine still runs the query to its end; what it sends is not kept
            return
        self._reply += self._host.read(ptr, length)

    def _call(self, stream: Any) -> list[Any]:
        """Sends one request; returns the TraceProcessorRpc replies, parsed, in order."""
        parse = rpc_protos().TraceProcessorRpc.FromString
        return [parse(bytes(payload)) for payload in self._call_raw(stream)]

    def _call_raw(self, stream: Any, max_bytes: int | None = None) -> list[memoryview]:
        """Sends one request; returns the serialized TraceProcessorRpc replies, in order. ``max_bytes``: the
        replies kept are those of the reply's first ``max_bytes`` bytes (``_reply_cut`` then says so)."""
        if self._dead:
            raise KtraceError(f"the trace processor session cannot be used: {self._dead}; "
                              "open the trace again")
        data = stream.SerializeToString()
        self._reply = bytearray()
        self._reply_limit, self._reply_cut = max_bytes, False

        def send() -> None:
            for offset in range(0, len(data), _REQUEST_BUFFER_BYTES):
                piece = data[offset:offset + _REQUEST_BUFFER_BYTES]
                self._host.write(self._request_buffer, piece)
                self._on_rpc_request(self._store, len(piece))

        is_query = stream.msg[0].request == rpc_protos().TraceProcessorRpc.TPM_QUERY_STREAMING
        timeout_s = (self._timeout_s or query_timeout_s()) if is_query else None
        try:
            timed_out = self._guarded(send, timeout_s)
        except KeyboardInterrupt:
            self._dead = "it was interrupted in the middle of a call"
            raise
        except Exception as exc:  # a trap, an abort, or a host function that failed: all fatal
            self._dead = "it crashed earlier"
            raise KtraceError(self._crash_message(exc)) from exc
        if timed_out:
            self._dead = "a query ran past its timeout"
            raise InputError(f"the query was stopped after {timeout_s:g} s (the timeout); "
                             "simplify it, or allow longer with --timeout SECONDS")
        replies = whole_payloads(self._reply) if self._reply_cut else list(split_rpc_stream(self._reply))
        self._reply, self._reply_limit = bytearray(), None
        for reply in replies:
            for field, value in proto_fields(reply):
                if field == _FATAL_ERROR_FIELD:
                    self._fail(bytes(value).decode("utf-8", "replace"))
                if field == _INVALID_REQUEST_FIELD:
                    raise UnsupportedRequest(rpc_protos().TraceProcessorRpc.TraceProcessorMethod.Name(value))
        if self._gave_up or not (replies or self._reply_cut):
            self._fail("it closed the session without a reply")
        return replies

    def _guarded(self, send: Callable[[], None], timeout_s: float | None) -> bool:
        """Runs ``send`` (one call into the engine) on a worker thread, so that a timeout or Ctrl-C can stop
        it: both bump the engine's epoch, which traps the running code at its next loop or call. Returns
        whether it was stopped by the timeout; re-raises what ``send`` raised, or KeyboardInterrupt.
        The epoch is the engine's, shared by every session of this process: a query running at that moment in
        another thread's session is stopped too (and reports a crash), which a command line never does."""
        self._store.set_epoch_deadline(1)
        done = threading.Event()
        failure: list[BaseException] = []

        def work() -> None:
            try:
                send()
            except BaseException as exc:  # handed to the caller's thread
                failure.append(exc)
            finally:
                done.set()

        worker = threading.Thread(target=work, name="ktrace-engine", daemon=True)
        worker.start()
        try:
            finished = done.wait(timeout_s)
        except KeyboardInterrupt:
            self._engine.increment_epoch()
            done.wait(5.0)
            raise
        if not finished:
            self._engine.increment_epoch()
            done.wait()
            return True
        if failure:
            raise failure[0]
        return False

    def _fail(self, why: str) -> None:
        self._dead = f"it gave up earlier ({why})"
        raise KtraceError(f"the trace processor gave up: {why}; open the trace again")

    def _crash_message(self, exc: BaseException) -> str:
        log = self._host.recent_log()
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        out_of_memory = "grow the heap" in log or "out of memory" in log.lower()
        heap = self._host.heap_bytes()
        what = (f"ran out of memory (its heap had grown to {_size(heap)}; the limit is "
                f"{_size(self._host.heap_max_bytes)} ({self._heap_why}), or less if the machine has less free "
                "memory)" if out_of_memory else f"crashed ({reason})")
        message = f"the embedded trace processor {what}; this session is closed, open the trace again"
        if out_of_memory:
            message += (f" (a smaller trace, a larger limit with {HEAP_ENV}=GIB up to {_size(self._build_max)}, "
                        "or KTRACE_TP_SHELL with a native trace_processor_shell, may fit)")
        if log:
            message += "\nengine log:\n" + log
        return message


def _address_space_limit() -> int | None:
    """RLIMIT_AS in bytes (``ulimit -v``), or None when unlimited or unknown."""
    try:
        import resource
    except ImportError:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"
