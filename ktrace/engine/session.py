"""Open a Perfetto trace in a trace processor and run SQL on it: ``open_trace`` and ``Session``."""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import threading
import zlib
from pathlib import Path
from typing import Callable, Iterator, Union

from ktrace.core.choices import ENGINES
from ktrace.engine.backend import Backend, SnapshotRejected, UnsupportedRequest
from ktrace.engine.framing import Framing
from ktrace.engine.result import QueryResult, decode
from ktrace.engine.package_registration import check_package, dependency_order, strip_includes
from ktrace.core.errors import InputError, KtraceError
from ktrace.core.progress import stage

__all__ = ["Session", "open_trace", "ENGINES", "result_limit_bytes", "RESULT_LIMIT_MIB"]

RESULT_LIMIT_MIB = 32  # what `ktrace query` and SQL rules read of a result at most, unless --max-result-mb says


def result_limit_bytes() -> int:
    """The most bytes of a query's result that ``ktrace query`` and SQL rules read: $KTRACE_MAX_RESULT_MB (set
    by ``--max-result-mb``), else RESULT_LIMIT_MIB MiB."""
    text = os.environ.get("KTRACE_MAX_RESULT_MB", "")
    if not text:
        return RESULT_LIMIT_MIB << 20
    try:
        mib = float(text)
    except ValueError:
        mib = float("nan")
    if not 0 < mib <= 1 << 30:
        raise InputError(f"result size limit {text!r}: give a number of MiB above 0, e.g. --max-result-mb 256")
    return int(mib * 2**20)

CHUNK_BYTES = 32 << 20
_PACKET_TAG = 0x0A  # Trace.packet: field 1, length-delimited. Every protobuf trace starts with it.
_GZIP_MAGIC = b"\x1f\x8b"

Progress = Callable[[int, int], None]
TraceInput = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]


class Session:
    """One trace loaded in one trace processor. Close it (or use ``with``) to free the engine.

    Calls are serialized: a session may be shared between threads but runs one call at a time.
    """

    def __init__(self, backend: Backend, trace_name: str) -> None:
        self._backend = backend
        self._trace_name = trace_name
        self._lock = threading.Lock()
        self._closed = False
        self._inlined_packages: set[str] = set()
        self._registered_packages: set[str] = set()

    @property
    def engine_name(self) -> str:
        """``"wasm"`` (embedded WebAssembly engine) or ``"native"`` (trace_processor_shell)."""
        return self._backend.name

    @property
    def trace_name(self) -> str:
        """The trace's file path, or ``"<bytes>"``."""
        return self._trace_name

    def query(self, sql: str, max_bytes: int | None = None) -> QueryResult:
        """Runs PerfettoSQL (one or more statements) and returns the last statement's rows.

        ``max_bytes``: at most that many bytes of the engine's reply are read (its first whole batches of
        rows; ``QueryResult.cut_at_bytes`` then says the result was cut); a reply whose first rows alone are
        longer raises InputError. Raises InputError with the engine's message when the SQL is wrong.
        """
        if self._inlined_packages:
            sql = strip_includes(sql, self._inlined_packages)
        with self._lock:
            self._check_open()
            raw = self._backend.query(sql, max_bytes) if max_bytes is not None else self._backend.query(sql)
        if raw.error:
            raise InputError(f"{self._trace_name}: query failed: {engine_error(raw.error)}")
        if raw.cut_at_bytes is not None and not raw.batches:
            raise InputError(f"{self._trace_name}: the query's first rows alone are over {_mib(raw.cut_at_bytes)} "
                             "(the result size limit); select less (LIMIT, fewer columns, substr() of long "
                             "values) or raise the limit with --max-result-mb MB")
        return decode(raw)

    def add_sql_package(self, name: str, modules: dict[str, str]) -> None:
        """Registers a PerfettoSQL package: ``modules`` maps module names (``"ktrace.phases"``, inside
        package ``name``) to their SQL. Afterwards ``INCLUDE PERFETTO MODULE ktrace.phases;`` works in
        ``query``. Registering the same package again replaces its modules; a name the engine already
        has (a stdlib package such as ``slices``) is refused with InputError.
        """
        check_package(name, modules)
        with self._lock:
            self._check_open()
            try:
                replace = name in self._registered_packages
                error = self._backend.register_sql_package(name, dict(modules), replace)
            except UnsupportedRequest:
                error = ""
                self._run_modules(name, modules)
        if error:
            raise InputError(f"SQL package {name!r}: {error.strip()}")
        self._registered_packages.add(name)

    def close(self) -> None:
        """Frees the engine (its memory or its subprocess). Idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._backend.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<ktrace Session {self._trace_name!r} engine={self.engine_name} {state}>"

    def _check_open(self) -> None:
        if self._closed:
            raise KtraceError(f"{self._trace_name}: the session is closed; open the trace again")

    def _run_modules(self, name: str, modules: dict[str, str]) -> None:
        # Fallback for an engine that cannot register packages: run each module now, dependencies
        # first, and strip INCLUDEs of this package from later queries.
        for module in dependency_order(modules):
            raw = self._backend.query(strip_includes(modules[module], {name}))
            if raw.error:
                raise InputError(f"SQL module {module!r}: {raw.error.strip()}")
        self._inlined_packages.add(name)


def engine_error(text: str) -> str:
    """The engine's SQL error as a person reads it: the problem first, then where (the engine words it as a
    Python traceback: 'Traceback (most recent call last): File "stdin" line 1 col 10 ...')."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip() != "Traceback (most recent call last):"]
    if not lines:
        return text.strip()
    lines = [re.sub(r'^(\s*)File "stdin" line (\d+) col (\d+)', r"\1at line \2, column \3:", ln) for ln in lines]
    problem, where = lines[-1].strip(), lines[:-1]
    return problem + ("\n" + "\n".join(where) if where else "")


def open_trace(trace: TraceInput, *, engine: str = "auto",
               progress: Progress | None = None) -> Session:
    """Loads a Perfetto protobuf trace (a path, or the trace's bytes; gzip-compressed is fine) into a
    trace processor and returns the open Session.

    ``engine``: ``"auto"`` (default: native when $KTRACE_TP_SHELL is set, else wasm), ``"wasm"`` (the
    embedded engine) or ``"native"`` (the trace_processor_shell named by $KTRACE_TP_SHELL).
    ``progress(done_bytes, total_bytes)`` is called after each appended chunk (32 MiB) and once more
    when the trace is finalized (sorting, which takes longer than appending for large traces); a progress
    with a ``stage`` method (``ktrace.core.progress``) is told of "parsing the trace" and "finalizing the trace".

    Raises InputError for a missing file or one that is not a Perfetto trace (empty, JSON, text, random
    or corrupt bytes), EnvironmentMissing when the engine cannot start. A file cut short in the middle
    of its last packet is not detected: the engine drops that packet silently.
    """
    name, total, framing, chunks = _walked_source(trace)
    size = None if _is_gzip(trace) else total

    def started() -> Backend:
        backend = _start_engine(engine, size)
        try:
            backend.expect(name, size)
        except BaseException:
            backend.close()
            raise
        return backend

    backend = started()
    try:
        digest = _sha256(trace) if backend.snapshot_wanted(total) else None
    except BaseException:
        backend.close()
        raise
    return _load(backend, name, total, framing, chunks, progress, digest, started)


def _sha256(trace: TraceInput) -> str | None:
    """The trace's bytes' SHA-256 (hex): what its snapshot is found by. None if it cannot be read."""
    if isinstance(trace, (bytes, bytearray, memoryview)):
        return hashlib.sha256(trace).hexdigest()
    digest = hashlib.sha256()
    try:
        for chunk in _read_chunks(Path(trace)):
            digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def _is_gzip(trace: TraceInput) -> bool:
    if isinstance(trace, (bytes, bytearray, memoryview)):
        return bytes(trace[:2]) == _GZIP_MAGIC
    with Path(trace).open("rb") as f:
        return f.read(2) == _GZIP_MAGIC


def _start_engine(engine: str, trace_bytes: int | None = None) -> Backend:
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}: use one of {', '.join(ENGINES)}")
    from ktrace.engine.native import SHELL_ENV

    if engine == "native" or (engine == "auto" and os.environ.get(SHELL_ENV)):
        from ktrace.engine.native import NativeTraceProcessor

        return NativeTraceProcessor()
    from ktrace.engine.wasm import WasmTraceProcessor
    from ktrace.engine.wasm_heap import needs_wide_build

    return WasmTraceProcessor(wide=needs_wide_build(trace_bytes))


def _load(backend: Backend, name: str, total: int, framing: Framing, chunks: Iterator[bytes],
          progress: Progress | None, digest: str | None = None,
          restart: Callable[[], Backend] | None = None) -> Session:
    """Loads the chunks (``_walked_source``: each walked by ``framing`` on its way) or restores their snapshot;
    a snapshot that fails its checks after the restore has been removed, and the chunks load in a fresh
    backend (``restart()``)."""
    try:
        try:
            restored = digest is not None and backend.restore(digest)
        except SnapshotRejected:
            if restart is None:
                raise
            backend.close()
            backend = restart()
            restored = False
        if restored:
            # The snapshot was kept after a load of these very bytes passed every check below.
            stage(progress, "restoring the loaded trace from its snapshot")
            if progress is not None:
                progress(total, total)
            session = Session(backend, name)
            _check_trace_type(session)
            return session
        # The snapshot is kept under the digest of the bytes loaded (the file may have changed since `digest`).
        loaded = hashlib.sha256() if digest is not None else None

        def counted() -> Iterator[bytes]:
            done = 0
            stage(progress, "parsing the trace", total, "bytes")
            for chunk in chunks:
                if loaded is not None:
                    loaded.update(chunk)
                yield chunk
                done += len(chunk)
                if progress is not None:
                    progress(done, total)
            stage(progress, "finalizing the trace (sorting)")  # asked for the next chunk: the engine finalizes

        error = backend.load(counted())
        if error:
            raise InputError(f"{name}: not a readable Perfetto trace: {error.strip()}")
        framing.finish()  # a cut trace is refused: the engine silently drops a last packet cut short
        if loaded is not None:
            backend.save_snapshot(loaded.hexdigest())  # before any query, so none leaves a trace in it
        if progress is not None:
            progress(total, total)
        session = Session(backend, name)
        _check_trace_type(session)
        return session
    except BaseException:
        backend.close()
        raise


def _check_trace_type(session: Session) -> None:
    # The engine also reads JSON, systrace and other formats; ktrace's analysis needs a protobuf trace.
    kind = session.query("SELECT str_value FROM metadata WHERE name = 'trace_type'").rows
    if kind and kind[0][0] not in ("proto", "gzip"):
        raise InputError(f"{session.trace_name}: the engine read it as a {kind[0][0]} trace, not a "
                         "Perfetto protobuf trace")


def _walked_source(trace: TraceInput) -> tuple[str, int, Framing, Iterator[bytes]]:
    """``_trace_source`` with each chunk walked by the Framing returned before it is yielded, the first one here,
    before the engine starts: a file that is no trace from its first bytes (a bomb, a packet larger than any)
    is refused at once, not after the engine's start (a compile on first use, ~15 s)."""
    name, total, chunks = _trace_source(trace)
    framing = Framing(name)

    def walked() -> Iterator[bytes]:
        for chunk in chunks:
            framing.feed(chunk)
            yield chunk

    rest = walked()
    first = next(rest, None)
    return name, total, framing, rest if first is None else itertools.chain((first,), rest)


def _trace_source(trace: TraceInput) -> tuple[str, int, Iterator[bytes]]:
    """(name for messages, size in bytes, chunks of at most CHUNK_BYTES); checks the first bytes."""
    if isinstance(trace, (bytes, bytearray, memoryview)):
        data = bytes(trace)
        name = "<bytes>"
        _sniff(name, data[:4096])
        return name, len(data), (data[i:i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES))
    if not isinstance(trace, (str, os.PathLike)):
        raise InputError(f"open_trace() takes a path or bytes, not {type(trace).__name__}")
    path = Path(trace)
    name = str(path)
    if not path.exists():
        raise InputError(f"{name}: no such file")
    if not path.is_file():
        raise InputError(f"{name}: not a file")
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError as exc:
        raise InputError(f"{name}: cannot read it: {exc.strerror or exc}") from exc
    _sniff(name, head)
    return name, size, _read_chunks(path)


def _read_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            yield chunk


def _sniff(name: str, head: bytes) -> None:
    """Raises InputError unless ``head`` (the first bytes) can start a Perfetto protobuf trace."""
    if not head:
        raise InputError(f"{name}: empty file, not a Perfetto trace")
    first = head
    if head.startswith(_GZIP_MAGIC):
        try:
            first = zlib.decompressobj(wbits=31).decompress(head, 64)
        except zlib.error:
            raise InputError(f"{name}: a damaged gzip file, not a Perfetto trace") from None
        if not first:
            return  # a gzip header longer than the head read: let the engine judge
    if first[0] == _PACKET_TAG:
        return
    stripped = first.lstrip()
    if stripped[:1] in (b"{", b"["):
        what = "it looks like JSON"
    elif all(32 <= b < 127 or b in b"\t\r\n" for b in first[:256]):
        what = "it looks like text"
    else:
        what = f"it starts with the bytes {first[:8].hex(' ')}"
    raise InputError(f"{name}: not a Perfetto protobuf trace ({what}); ktrace reads the .perfetto-trace "
                     "files that `ktrace convert` writes")


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB" if n >= 2**20 else f"{n:,} bytes"
