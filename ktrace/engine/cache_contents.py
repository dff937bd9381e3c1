"""What the cache folder holds, and emptying it: ``ktrace cache`` and ``ktrace cache clear``.

The cache (``wasm_cache.cache_dir``: $KTRACE_CACHE_DIR, $XDG_CACHE_HOME/ktrace or ~/.cache/ktrace; the private
fallback folder in the temporary directory when that one is not private) holds compiled trace processors
(``trace_processor-*.cwasm``, wasm_cache.py) and loaded-trace snapshots (``snapshots/trace-*.tpsnap``,
wasm_snapshot.py), each with its ``.sha256`` integrity record, and the temporary files of writes in progress.
Only those names are listed or removed: anything else in the folder is the user's. A symbolic link is never
followed nor removed (``lstat``; only regular files count), so clearing cannot reach outside the folder.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from ktrace.engine.cache_files import record_path
from ktrace.engine.wasm_cache import cache_dir
from ktrace.engine.wasm_snapshot import SUFFIX as SNAPSHOT_SUFFIX
from ..core.records import frozen

__all__ = ["CacheEntry", "cache_folders", "cache_entries", "clear_cache"]

ENGINE_PREFIX, ENGINE_SUFFIX = "trace_processor-", ".cwasm"
SNAPSHOT_PREFIX = "trace-"
SNAPSHOTS = "snapshots"


@frozen
class CacheEntry:
    """One thing the cache holds: its kind ('compiled engine', 'snapshot', 'unfinished write'), its file, its
    bytes (its integrity record's included) and when it was last used (seconds since the epoch)."""

    kind: str
    path: Path
    bytes: int
    used_s: float


def cache_folders() -> list[Path]:
    """The folders ktrace may have cached into: the configured one, and the private fallback when it exists."""
    out = [cache_dir()]
    if hasattr(os, "getuid"):
        fallback = Path(tempfile.gettempdir()) / f"ktrace-cache-{os.getuid()}"
        if fallback != out[0] and _is_folder(fallback):
            out.append(fallback)
    return out


def _is_folder(path: Path) -> bool:  # a real folder, not a link to one
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _regular(path: Path) -> os.stat_result | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def _kind(folder_name: str, name: str) -> str | None:
    """What a file called ``name`` in the cache (``folder_name``: '' or 'snapshots') is, or None: not ktrace's."""
    if name.endswith(".tmp") and (ENGINE_SUFFIX in name or SNAPSHOT_SUFFIX in name or ".sha256." in name):
        return "unfinished write"
    if folder_name == "" and name.startswith(ENGINE_PREFIX) and name.endswith(ENGINE_SUFFIX):
        return "compiled engine"
    if folder_name == SNAPSHOTS and name.startswith(SNAPSHOT_PREFIX) and name.endswith(SNAPSHOT_SUFFIX):
        return "snapshot"
    return None


def cache_entries(folder: Path) -> list[CacheEntry]:
    """What ``folder`` holds, largest first (then by name): each entry with its record's bytes counted in."""
    out = []
    for sub in ("", SNAPSHOTS):
        where = folder / sub if sub else folder
        if not _is_folder(where):
            continue
        try:
            names = sorted(os.listdir(where))
        except OSError:
            continue
        for name in names:
            kind = _kind(sub, name)
            st = _regular(where / name) if kind else None
            if st is None:
                continue
            record = _regular(record_path(where / name)) if kind != "unfinished write" else None
            out.append(CacheEntry(kind, where / name, st.st_size + (record.st_size if record else 0),
                                  max(st.st_mtime, st.st_atime)))
    return sorted(out, key=lambda e: (-e.bytes, str(e.path)))


def _records(folder: Path, sub: str) -> list[Path]:
    """Integrity records in the folder whose entry is gone (left by an interrupted removal or write)."""
    where = folder / sub if sub else folder
    try:
        names = os.listdir(where)
    except OSError:
        return []
    return [where / n for n in sorted(names) if n.endswith(".sha256") and _kind(sub, n[:-len(".sha256")])
            and _regular(where / n) is not None]


def clear_cache(folder: Path) -> tuple[int, int]:
    """Removes every cache entry of ``folder`` (and their records; the empty snapshots folder too), never
    following a link nor touching a file that is not ktrace's. Returns (files removed, bytes freed); OSError
    when a file cannot be removed."""
    files = freed = 0
    for e in cache_entries(folder):
        for path in (e.path, record_path(e.path)):
            st = _regular(path)
            if st is not None:
                os.unlink(path)
                files, freed = files + 1, freed + st.st_size
    for sub in ("", SNAPSHOTS):
        for path in _records(folder, sub):
            st = _regular(path)
            os.unlink(path)
            files, freed = files + 1, freed + (st.st_size if st else 0)
    snapshots = folder / SNAPSHOTS
    if _is_folder(snapshots):
        try:
            os.rmdir(snapshots)  # only when empty: the user's own files there stay, and so does it
        except OSError:
            pass
    return files, freed
