"""The compiled-module cache's files, checked before anything in them runs.

A compiled module is native code: loading one that someone else wrote runs their code in this process. So a
cache entry is read only from a folder this user owns and nobody else can write, only from a regular file
(never through a symlink) this user owns and nobody else can write, and only when its SHA-256 matches the
record ktrace wrote beside it (``NAME.sha256``, checked the same way). The bytes that were hashed are the
bytes handed to wasmtime, so the file cannot change between the check and the load.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ktrace.core.terminal import printable

__all__ = ["ensure_private_folder", "read_entry", "read_checked_entry", "write_entry", "write_entry_from", "cache_lock",
           "record_path", "remove_entry", "read_private"]

_RECORD_PREFIX = "sha256 "
RECORD_MAX_BYTES = 4096  # a record is one short line: a larger file is not ktrace's (and is never read whole)


def _owner_problem(st: os.stat_result, what: str) -> str:
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"{what} belongs to user id {st.st_uid}, not to you"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{what} can be written by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return ""


def ensure_private_folder(folder: Path) -> str:
    """Creates ``folder`` (mode 700) if missing; returns "" if it is this user's and nobody else can write
    it, else why not."""
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = os.stat(folder)
    except OSError as exc:
        return f"{folder}: {exc.strerror or exc}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{folder} is not a folder"
    return _owner_problem(st, f"the folder {folder}")


def record_path(entry: Path) -> Path:
    """Where the SHA-256 record of ``entry`` is kept."""
    return entry.with_name(entry.name + ".sha256")


def read_private(path: Path, max_bytes: int | None = None) -> tuple[bytes | None, str]:
    """The file's bytes if it is a regular file of this user's that nobody else can write (never through a
    symlink) of at most ``max_bytes``, else ``(None, why)`` (``why`` is "" when it does not exist)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc} (a symlink is never followed)"
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None, f"{path} is not a regular file"
        problem = _owner_problem(st, str(path))
        if problem:
            return None, problem
        if max_bytes is not None and st.st_size > max_bytes:
            return None, f"{path} is larger ({st.st_size:,} bytes) than ktrace writes (at most {max_bytes:,})"
        return f.read(st.st_size + 1 if max_bytes is not None else -1), ""  # no more than it held when checked


def read_entry(entry: Path) -> tuple[bytes | None, str]:
    """The entry's bytes if they are the ones ktrace recorded, else ``(None, why)`` (``why`` is "" when
    there is simply no entry yet)."""
    def plain(record: str, sha256_hex: str) -> str:
        return "" if record == _RECORD_PREFIX + sha256_hex else "does not match its integrity record"

    data, _, problem = read_checked_entry(entry, plain)
    return data, problem


def read_checked_entry(entry: Path, check: Callable[[str, str], str],
                       max_bytes: int | None = None) -> tuple[bytes | None, str, str]:
    """``(bytes, record, "")`` when ``check(record, sha256_hex)`` (the record's text, stripped, and the
    entry's SHA-256) finds nothing wrong, else ``(None, "", why)`` (``why`` is "" when there is simply no
    entry yet). ``max_bytes``: a larger entry is refused unread."""
    data, problem = read_private(entry, max_bytes)
    if data is None:
        return None, "", problem
    record, problem = read_private(record_path(entry), RECORD_MAX_BYTES)
    if record is None:
        return None, "", problem or f"{entry} has no integrity record beside it"
    text = record.decode("ascii", "replace").strip()
    problem = check(text, hashlib.sha256(data).hexdigest())
    if problem:
        return None, "", f"{entry} {problem} (damaged or replaced)"
    return data, text, ""


def remove_entry(entry: Path) -> None:
    """Removes the entry and its record (a link is removed, never followed); what cannot be removed stays."""
    for path in (entry, record_path(entry)):
        with contextlib.suppress(OSError):
            os.unlink(path)


def _write_atomically(path: Path, pieces: Iterable[bytes | bytearray | memoryview]) -> str:
    """Writes the pieces to ``path``; returns their SHA-256 (hex)."""
    # mkstemp creates the file exclusively (O_EXCL, mode 600): a planted name or symlink is never written
    # through, and the rename replaces whatever was there.
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as tmp:
            for piece in pieces:
                digest.update(piece)
                tmp.write(piece)
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    return digest.hexdigest()


def write_entry(entry: Path, data: bytes | bytearray) -> str:
    """Writes the entry, then its record; returns "" or why it could not (a cache that cannot be written
    costs a recompile next time, nothing more)."""
    return write_entry_from(entry, [data])


def write_entry_from(entry: Path, pieces: Iterable[bytes | bytearray | memoryview],
                     record: Callable[[str], str] | None = None) -> str:
    """``write_entry`` of the pieces joined, without joining them (a heap snapshot is written straight from
    the engine's memory); the record is the digest of exactly the bytes written, or ``record(sha256_hex)``
    of it (one line, what ``read_checked_entry``'s check then reads)."""
    try:
        digest = _write_atomically(entry, pieces)
    except OSError as exc:
        return f"{entry.parent}: {exc.strerror or exc}"
    try:
        text = record(digest) if record is not None else f"{_RECORD_PREFIX}{digest}"
        _write_atomically(record_path(entry), [f"{text}\n".encode()])
    except BaseException as exc:
        with contextlib.suppress(OSError):  # an entry without its record is never read: do not leave it
            os.unlink(entry)
        if isinstance(exc, OSError):
            return f"{entry.parent}: {exc.strerror or exc}"
        raise
    return ""


LOCK_NAME = ".lock"
LOCK_WAIT_S = 120.0  # then compile without the lock (entries are written atomically: only time is lost)


@contextlib.contextmanager
def cache_lock(folder: Path, wait_s: float | None = None, say=None) -> Iterator[bool]:
    """Holds an exclusive lock while a module is compiled and written: on ``folder/.lock``, a file only this
    user can open (mode 600, never through a symlink), so another user who can read the folder cannot hold
    it. Waits at most ``wait_s`` (default LOCK_WAIT_S), saying so once after a second; then goes on without
    it. Nothing if the platform cannot lock. Yields whether the lock is held."""
    import time

    wait_s = LOCK_WAIT_S if wait_s is None else wait_s
    say = say or (lambda line: print(printable(line), file=sys.stderr, flush=True))
    try:
        import fcntl
    except ImportError:
        yield False
        return
    path = folder / LOCK_NAME
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        say(f"ktrace: not locking the cache ({path}: {exc.strerror or exc}); compiling without the lock")
        yield False
        return
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or _owner_problem(st, str(path)) or st.st_mode & 0o077:
            say(f"ktrace: not locking the cache: {_owner_problem(st, str(path)) or f'{path} is not private'}; "
                "compiling without the lock")
            yield False
            return
        start, told, held = time.monotonic(), False, False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
                break
            except BlockingIOError:
                waited = time.monotonic() - start
                if waited >= wait_s:
                    say(f"ktrace: {path} stayed locked for {wait_s:.0f} s (another ktrace compiling the trace "
                        "processor?); compiling without waiting longer")
                    break
                if waited >= 1 and not told:
                    say(f"ktrace: waiting for another ktrace to finish compiling the trace processor ({path}; at "
                        f"most {wait_s:.0f} s)")
                    told = True
                time.sleep(0.1)
            except OSError:
                break
        yield held
    finally:
        os.close(fd)
