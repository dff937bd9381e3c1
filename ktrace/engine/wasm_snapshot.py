"""Loaded-trace snapshots for the embedded engine: a trace's engine memory, kept so the next open skips loading.

Loading a large trace costs seconds (a 1e6-record trace: ~5 s, mostly the engine sorting its packets), and
every command on the same trace paid it again. So, once a trace is loaded and finalized, and before any query
runs on it, the instance's linear memory is written to ``snapshots/`` in the compiled-module cache's folder
(``wasm_cache.usable_folder``), under a name derived from everything that shapes that memory: the trace bytes'
SHA-256, the wasm file's, wasmtime's and ktrace's versions, the heap plan and the request buffer's size. A
later open of the same bytes starts a fresh instance exactly as before, then copies the snapshot over its
memory (``WasmTraceProcessor.restore`` checks the rest of the state, which lives outside memory).

The file: ``MAGIC``, the header's length (4 bytes, little-endian) and the header (JSON: the key, the memory's
size, the engine state the restore checks), a bitmap of the memory's 64 KiB pages (bit set: stored), then the
stored pages in order. All-zero pages are not stored (about 40 % of a loaded trace's heap).

The cache is untrusted: an entry is read only through ``cache_files`` (a private folder, a regular file of
this user's, never through a symlink, no larger than the budget) and used only when its record beside it is
an HMAC-SHA256, under this user's snapshot secret, of the entry's SHA-256 and of the trace's figures (the
hashed bytes are the bytes restored), and its header (at most HEADER_MAX_BYTES, nested at most
HEADER_MAX_DEPTH deep) matches what this process expects in every field. The secret (``secret()``) is 32
random bytes in ``$XDG_CONFIG_HOME/ktrace`` (``~/.config/ktrace``), outside the cache folder, readable by this
user only: a cache folder copied, restored from a CI cache or rewritten by whoever cannot read that file never
carries a valid record, whatever SHA-256 it recomputes. The figures (``FIGURES_SQL``: counts and sums of the
slice table's ts and dur, and the counts of the tables around it) are what the engine answered on the trace
just loaded from its bytes; after a restore the engine is asked again, and the answers must be the same.
Anything else (and an engine that fails or crashes on the restored state) removes the entry and loads the
trace as before; the load writes a good entry in its place. Writes go to a temporary file renamed into
place, under the cache lock, once: several processes that loaded the same trace at once find it written by the
first and leave it. The folder holds at most $KTRACE_SNAPSHOT_GIB (default 2 GiB;
0: no snapshots), least recently used entries evicted first; traces under $KTRACE_SNAPSHOT_MIN_MIB (default
4 MiB), which load in well under a second, are never snapshotted. A snapshot that cannot be written costs a
full load next time, nothing more: it is never an error.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import struct
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from ktrace.engine.cache_files import (cache_lock, ensure_private_folder, read_checked_entry, read_private, record_path,
                                       remove_entry, write_entry_from)
from ktrace.engine.wasm_heap import env_number
from ktrace.core.errors import InputError
from ktrace.core.terminal import printable

__all__ = ["BUDGET_ENV", "MIN_TRACE_ENV", "PAGE_BYTES", "FIGURES_SQL", "Snapshot", "wanted", "folder", "entry_path",
           "read", "write", "touch", "discard", "secret", "secret_path"]

BUDGET_ENV = "KTRACE_SNAPSHOT_GIB"
MIN_TRACE_ENV = "KTRACE_SNAPSHOT_MIN_MIB"
DEFAULT_BUDGET_BYTES = 2 << 30
# Measured on 2 cores (instance start aside): a 0.8 MB trace loads in 0.33 s, a 1.7 MB one (1e5 records) in
# 0.5 s, a 17 MB one (1e6) in 5-7 s; restoring takes 0.11, 0.13 and 0.3-0.4 s, but even the smallest trace's
# snapshot is 22-36 MiB (the engine's own tables). From 4 MiB (a load of about 1.2 s) the disk is worth it.
DEFAULT_MIN_TRACE_BYTES = 4 << 20
PAGE_BYTES = 65536  # a wasm page
MAGIC = b"ktrace-snapshot-2\n"  # 2: records are HMACs with the trace's figures
SUFFIX = ".tpsnap"
_STALE_TMP_S = 3600.0  # a temporary file this old was left by a write that died
_LOCK_WAIT_S = 10.0  # a snapshot is worth less than waiting for another process's write
# What the header holds is a few fields two levels deep and the engine's last 50 log lines: 1 MiB and 16
# levels are far above any header ktrace writes, and far below what could exhaust the parser.
HEADER_MAX_BYTES = 1 << 20
HEADER_MAX_DEPTH = 16
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')  # linear: each character has one way to match
# The figures a restored trace must answer as its fresh load did: what a wrong or damaged heap would change
# first (the slices' count, times and durations; the tables around them). Sums modulo a prime stay exact
# integers (no overflow at any trace size, unlike sum(ts); total(ts), a float, would not see a change of a
# few ns) that any one changed value changes. The slices' two sums are most of its cost: 40 ms for 150,000
# slices (about 0.3 s for a million, where a load takes 5 s); more columns would cost as much each.
FIGURES_SQL = ("SELECT count(*), ifnull(sum(ts % 1000000007), 0), ifnull(sum(dur % 1000000007), 0), "
               "(SELECT count(*) FROM track), (SELECT count(*) FROM thread), (SELECT count(*) FROM process), "
               "(SELECT count(*) FROM args), (SELECT count(*) FROM counter), (SELECT count(*) FROM instant) "
               "FROM slice")
_RECORD_PREFIX = "hmac-sha256"
SECRET_NAME = "snapshot-secret"
_SECRET_BYTES = 32


def _env_number(name: str, default: float, unit: str, example: str) -> float:
    given = env_number(name)
    if given is None:
        return default
    text, value = given
    if not 0 <= value < 1e9:
        raise InputError(f"{name}={text!r}: give a size in {unit}, 0 or more (e.g. {name}={example})")
    return value


def budget_bytes() -> int:
    """The snapshot cache's size limit in bytes: $KTRACE_SNAPSHOT_GIB, else 2 GiB; 0 disables snapshots."""
    return int(_env_number(BUDGET_ENV, DEFAULT_BUDGET_BYTES / 2**30, "GiB", "2") * 2**30)


def wanted(trace_bytes: int | None) -> bool:
    """Whether a trace of ``trace_bytes`` is worth a snapshot (large enough, and snapshots enabled)."""
    smallest = int(_env_number(MIN_TRACE_ENV, DEFAULT_MIN_TRACE_BYTES / 2**20, "MiB", "4") * 2**20)
    budget = budget_bytes()  # read whatever the trace's size: a bad setting is an error on every trace
    return trace_bytes is not None and trace_bytes >= smallest and budget > 0


def folder() -> Path | None:
    """The private folder holding the snapshots (created if need be), or None when there is none."""
    from ktrace.engine.wasm_cache import usable_folder

    base, _ = usable_folder()
    if base is None:
        return None
    path = base / "snapshots"
    return None if ensure_private_folder(path) else path


def entry_path(where: Path, key: str) -> Path:
    return where / f"trace-{key[:32]}{SUFFIX}"


def secret_path() -> Path | None:
    """Where this user's snapshot secret is kept: ``$XDG_CONFIG_HOME/ktrace``, else ``~/.config/ktrace`` (outside
    the cache folder, so that a copy of the cache never holds it); None without a home folder."""
    base = os.environ.get("XDG_CONFIG_HOME")
    if not base:
        try:
            base = str(Path.home() / ".config")
        except (RuntimeError, KeyError, OSError):
            return None
    return Path(base) / "ktrace" / SECRET_NAME


def secret() -> bytes | None:
    """This user's snapshot secret (created on first use: 32 random bytes, mode 600, in a private folder), or
    None when it cannot be had; then no snapshot is read or written."""
    path = secret_path()
    if path is None or ensure_private_folder(path.parent):
        return None
    data, _ = read_private(path, _SECRET_BYTES)
    if data is None and not os.path.lexists(path):
        # Made whole under another name, then linked into place: a concurrent reader never sees it half
        # written, and of two processes creating it at once the first link wins and both read that one.
        tmp = path.with_name(f"{SECRET_NAME}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(_SECRET_BYTES))
            os.link(tmp, path)
        except OSError:
            pass
        finally:
            _remove(tmp)
    if data is None:  # made just now, here or by another process or thread between the read and the check
        data, _ = read_private(path, _SECRET_BYTES)
    if data is None or len(data) != _SECRET_BYTES or os.lstat(path).st_mode & 0o077:  # others may read it
        return None
    return data


def _record(key: bytes, sha256_hex: str, figures: tuple[int, ...]) -> str:
    text = ",".join(map(str, figures))
    mac = hmac.new(key, f"{sha256_hex} {text}".encode(), hashlib.sha256).hexdigest()
    return f"{_RECORD_PREFIX} {mac} {text}"


def _record_check(key: bytes, figures_out: list) -> Callable[[str, str], str]:
    def check(record: str, sha256_hex: str) -> str:
        m = re.fullmatch(rf"{_RECORD_PREFIX} ([0-9a-f]{{64}}) (-?[0-9]{{1,20}}(?:,-?[0-9]{{1,20}}){{0,31}})", record)
        if m is None:
            return "does not match its integrity record"
        figures = tuple(int(x) for x in m.group(2).split(","))
        if not hmac.compare_digest(_record(key, sha256_hex, figures), record):
            return "does not match its integrity record"
        figures_out.append(figures)
        return ""
    return check


class Snapshot:
    """A snapshot read back and checked: its header (a dict), which pages it holds, and their bytes."""

    def __init__(self, header: dict[str, Any], stored: np.ndarray, pages: np.ndarray,
                 figures: tuple[int, ...] = ()) -> None:
        self.header = header
        self.figures = figures  # what FIGURES_SQL answered on the trace loaded fresh
        self.stored = stored  # bool per page of memory
        self.pages = pages  # uint8, the stored pages one after another

    @property
    def memory_bytes(self) -> int:
        return int(self.header["memory_bytes"])

    def copy_into(self, memory: np.ndarray, fresh_bytes: int) -> None:
        """Makes ``memory`` (the instance's whole memory, already grown to memory_bytes from ``fresh_bytes``,
        past which it is all zeros) equal the snapshot: stored pages copied, the others zeroed where the
        fresh instance had written them."""
        if len(memory) != self.memory_bytes or fresh_bytes % PAGE_BYTES or fresh_bytes > len(memory):
            raise ValueError("the memory is not the snapshot's size")
        pages = memory.reshape(-1, PAGE_BYTES)
        written = np.zeros(len(pages), bool)
        written[:fresh_bytes // PAGE_BYTES] = pages[:fresh_bytes // PAGE_BYTES].view(np.uint64).any(axis=1)
        for start, stop in _runs(written & ~self.stored):
            pages[start:stop] = 0
        offset = 0
        for start, stop in _runs(self.stored):
            n = (stop - start) * PAGE_BYTES
            memory[start * PAGE_BYTES:stop * PAGE_BYTES] = self.pages[offset:offset + n]
            offset += n


_missed: dict[str, float] = {}  # key -> when read() found no entry for it (what _written goes by)


def read(key: str) -> tuple[Snapshot | None, str]:
    """The snapshot stored under ``key`` if it is intact and ktrace's, else ``(None, why)`` (why is "" when
    there is no entry, or no cache folder or secret). An entry found and refused is removed (with its record),
    so that no later run meets it again."""
    where = folder()
    if where is None:
        return None, ""
    entry = entry_path(where, key)
    if not os.path.lexists(entry):
        _missed[key] = time.time()
        return None, ""
    key_bytes = secret()
    if key_bytes is None:
        return None, ""
    figures: list = []
    data, _, problem = read_checked_entry(entry, _record_check(key_bytes, figures), max_bytes=budget_bytes())
    if data is None:
        if problem:
            remove_entry(entry)
            _missed[key] = time.time()
        return None, problem
    snapshot, problem = _parse(data, key)
    if snapshot is None:
        remove_entry(entry)
        _missed[key] = time.time()
        return None, f"{entry}: {problem}"
    snapshot.figures = figures[0]
    _missed.pop(key, None)  # found: a write after it replaces it (restore may not have used it)
    return snapshot, ""


def discard(key: str) -> None:
    """Removes the snapshot stored under ``key`` and its record (one that did not restore)."""
    where = folder()
    if where is not None:
        remove_entry(entry_path(where, key))


def _header_depth(text: bytes) -> int:
    """How deep the JSON ``text`` nests (its strings' brackets aside), in one vectorized pass."""
    bare = np.frombuffer(_JSON_STRING.sub(b'""', text), np.uint8)
    step = (np.isin(bare, (ord("["), ord("{"))).astype(np.int64)
            - np.isin(bare, (ord("]"), ord("}"))).astype(np.int64))
    return int(np.cumsum(step).max(initial=0))


def _parse(data: bytes, key: str) -> tuple[Snapshot | None, str]:
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 4:
        return None, "not a ktrace snapshot"
    (length,) = struct.unpack_from("<I", data, len(MAGIC))
    start = len(MAGIC) + 4
    if length > HEADER_MAX_BYTES:
        return None, f"its header is longer ({length:,} bytes) than any ktrace writes (at most {HEADER_MAX_BYTES:,})"
    if start + length > len(data):
        return None, "it is cut short"
    text = bytes(data[start:start + length])
    if _header_depth(text) > HEADER_MAX_DEPTH:
        return None, f"its header nests deeper than any ktrace writes (at most {HEADER_MAX_DEPTH} levels)"
    try:
        header = json.loads(text.decode())
        memory_bytes = int(header["memory_bytes"])
        stored_count = int(header["stored_pages"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError):
        return None, "its header is damaged"
    if header.get("key") != key:
        return None, "it was made for another trace or engine"
    host = header.get("host")
    if not (isinstance(host, dict) and isinstance(host.get("clock_ms"), (int, float))
            and isinstance(host.get("clocks_ns"), dict)
            and all(isinstance(host["clocks_ns"].get(str(c)), int) for c in (1, 2, 3))
            and isinstance(host.get("log"), list) and all(isinstance(line, str) for line in host["log"])
            and isinstance(host.get("partial_line"), str) and isinstance(header.get("engine"), dict)):
        return None, "its header is damaged"
    if memory_bytes <= 0 or memory_bytes % PAGE_BYTES or header.get("page_bytes") != PAGE_BYTES:
        return None, "its memory size is not a whole number of pages"
    n_pages = memory_bytes // PAGE_BYTES
    bitmap_at = start + length
    pages_at = bitmap_at + (n_pages + 7) // 8
    if len(data) != pages_at + stored_count * PAGE_BYTES:
        return None, "it is cut short or has bytes left over"
    bits = np.unpackbits(np.frombuffer(data, np.uint8, pages_at - bitmap_at, bitmap_at), bitorder="little")
    stored = bits[:n_pages].astype(bool)
    if bits[n_pages:].any() or int(stored.sum()) != stored_count:
        return None, "its page map does not match its pages"
    return Snapshot(header, stored, np.frombuffer(data, np.uint8, offset=pages_at)), ""


def write(key: str, header: dict[str, Any], memory: np.ndarray, figures: Callable[[], tuple[int, ...]]) -> str:
    """Stores ``memory`` (the instance's, as uint8) under ``key`` with ``header``, and in its record
    ``figures()`` (what FIGURES_SQL answers on it, asked once the memory is written); returns "" or why not.
    Evicts least recently used snapshots to stay within the budget; a snapshot over the budget is not
    written."""
    where = folder()
    if where is None:
        return "no private cache folder"
    key_bytes = secret()
    if key_bytes is None:
        return "no private place for the snapshot secret"
    pages = memory.reshape(-1, PAGE_BYTES)
    stored = pages.view(np.uint64).any(axis=1)
    head = json.dumps(dict(header, key=key, memory_bytes=len(memory), page_bytes=PAGE_BYTES,
                           stored_pages=int(stored.sum())), sort_keys=True).encode()
    bitmap = np.packbits(stored, bitorder="little").tobytes()
    size = len(MAGIC) + 4 + len(head) + len(bitmap) + int(stored.sum()) * PAGE_BYTES
    budget = budget_bytes()
    if size > budget:
        return f"the snapshot ({size >> 20} MiB) is larger than the cache's budget ({budget >> 20} MiB)"

    def pieces() -> Iterator[Any]:
        yield MAGIC + struct.pack("<I", len(head)) + head + bitmap
        for start, stop in _runs(stored):
            yield memoryview(pages[start:stop]).cast("B")

    with cache_lock(where, wait_s=_LOCK_WAIT_S, say=lambda line: None) as held:
        if not held:
            return "the cache is locked by another process"
        entry = entry_path(where, key)
        if _written(key, entry):  # another process opening the same trace wrote it while this one loaded
            touch(key)
            return ""
        _evict(where, budget - size, keep=entry)
        problem = write_entry_from(entry, pieces(), lambda sha256_hex: _record(key_bytes, sha256_hex, figures()))
    if not problem:
        announce(size, where)
    return problem


def _written(key: str, entry: Path) -> bool:
    """Whether another process wrote ``entry`` (with its record, written last under the lock: a write that died
    leaves none) since this one looked for it and found none: concurrent first opens of one trace write one
    snapshot, the first to take the lock. An entry this process found and did not use is replaced as before.
    Its contents are checked when it is read, as always."""
    missed = _missed.get(key)
    if missed is None:
        return False
    try:
        st, rec = os.lstat(entry), os.lstat(record_path(entry))
    except OSError:
        return False
    return (stat.S_ISREG(st.st_mode) and stat.S_ISREG(rec.st_mode) and rec.st_size > 0
            and max(st.st_mtime, st.st_ctime) >= missed)  # a rename sets the ctime


ANNOUNCE_BYTES = 100_000_000  # a snapshot this large is said once per process: disk space the user did not ask for
_announced: list = []


def announce(size: int, where: Path) -> None:
    """One line on stderr, once per process, when a snapshot of ``size`` bytes >= ANNOUNCE_BYTES was kept."""
    if size < ANNOUNCE_BYTES or _announced:
        return
    _announced.append(size)
    print(printable(f"ktrace: kept a {size / 1e6:,.0f} MB snapshot of the loaded trace in {where} (the next open "
                    f"of this trace skips loading); `ktrace cache` lists the cache, {BUDGET_ENV}=0 turns snapshots "
                    "off"), file=sys.stderr, flush=True)


def touch(key: str) -> None:
    """Marks the entry as just used (what eviction goes by)."""
    where = folder()
    if where is not None:
        try:
            os.utime(entry_path(where, key), follow_symlinks=False)
        except OSError:
            pass


def _evict(where: Path, room: int, keep: Path) -> None:
    """Removes the least recently used snapshots until those left take at most ``room`` bytes (``keep``, about
    to be replaced, counts for nothing), and temporary files that a dead write left."""
    now = time.time()
    entries = []
    try:
        names = os.listdir(where)
    except OSError:
        return
    for name in names:
        path = where / name
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        if name.endswith(".tmp") and SUFFIX in name and now - st.st_mtime > _STALE_TMP_S:
            _remove(path)
        elif name.endswith(SUFFIX) and path != keep:
            entries.append((st.st_mtime, st.st_size, path))
    entries.sort()
    total = sum(size for _, size, _ in entries)
    for _, size, path in entries:
        if total <= room:
            break
        _remove(path)
        _remove(record_path(path))
        total -= size


def _remove(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _runs(mask: np.ndarray) -> Iterator[tuple[int, int]]:
    """(start, stop) of each run of True in ``mask``."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
    return zip(edges[::2].tolist(), edges[1::2].tolist())


def key(parts: list[str]) -> str:
    """The snapshot key (hex SHA-256) of everything that makes a snapshot valid."""
    return hashlib.sha256("\n".join([MAGIC.decode().strip(), *parts]).encode()).hexdigest()


def note(problem: str) -> None:
    """One line on stderr about a snapshot found but not used, and removed (as the module cache says of its
    entries)."""
    print(printable(f"ktrace: not restoring the trace's snapshot ({problem}); removed it, loading the trace"),
          file=sys.stderr, flush=True)
