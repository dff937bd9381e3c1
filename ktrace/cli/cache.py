"""``ktrace cache``: what the cache holds (compiled trace processors, loaded-trace snapshots) and its size;
``ktrace cache clear`` empties it (ktrace.engine.cache_contents: only its own files, never through a link)."""

from __future__ import annotations

from ..report.safe_text import printable

__all__ = ["register", "HANDLERS", "megabytes"]


def register(sub) -> None:
    c = sub.add_parser(
        "cache", help="list what the cache holds (compiled trace processors, trace snapshots) and its size; "
        "'ktrace cache clear' empties it",
        description="The cache keeps the compiled trace processor (compiled once, ~15 s) and snapshots of large "
        "loaded traces (the next open of the same trace skips loading). Its folder: $KTRACE_CACHE_DIR, else "
        "$XDG_CACHE_HOME/ktrace, else ~/.cache/ktrace. KTRACE_SNAPSHOT_GIB caps the snapshots (default 2; 0: no "
        "snapshots). Exit codes: 0 ok, 2 a file could not be removed.")
    c.add_argument("action", nargs="?", choices=("list", "clear"), default="list",
                   help="list (default): each entry with its size, and the total; clear: remove them (only the "
                   "cache's own files; the next analysis compiles the trace processor again)")


def megabytes(n: int) -> str:
    """A size in MB (10^6 bytes), as ``du -h --si`` would round it."""
    return f"{n / 1e6:,.1f} MB"


def _cmd_cache(a) -> int:
    from ..engine.cache_contents import cache_entries, cache_folders, clear_cache

    for folder in cache_folders():
        if a.action == "clear":
            files, freed = clear_cache(folder)
            print(printable(f"ktrace cache clear: removed {files} file(s), {megabytes(freed)}, from {folder}"))
            continue
        entries = cache_entries(folder)
        print(printable(f"ktrace cache: {folder}" + ("" if entries else " (empty)")))
        for e in entries:
            print(printable(f"  {e.kind:<16} {megabytes(e.bytes):>12}  {e.path.relative_to(folder)}"))
        kinds = ", ".join(f"{sum(e.kind == k for e in entries)} {k}(s)" for k in ("compiled engine", "snapshot"))
        print(f"total: {kinds}, {megabytes(sum(e.bytes for e in entries))}")
    if a.action == "list":
        print("ktrace cache clear empties it; KTRACE_SNAPSHOT_GIB=0 turns snapshots off; KTRACE_CACHE_DIR moves it")
    return 0


HANDLERS = {"cache": _cmd_cache}
