"""What a path holds, a Perfetto trace or a profiler buffer: one answer for every command.

By its name first (``.bin``/``.bin.gz``/``.npy`` are buffers, ``.chrome_trace`` (``.gz``) and a ``.json`` holding
Proton's CTA processes are Triton Proton traces, decoded like buffers; ``.perfetto-trace``, ``.pftrace``, ``.pb``, ``.trace``,
``.json`` and anything gzip-compressed are traces), else by its first byte: a protobuf trace starts with
field 1 (``Trace.packet``), length-delimited (0x0a). A file that cannot be read is taken for a buffer, so that
the buffer reader says what is wrong with it.
"""

from __future__ import annotations

import gzip
import os
import re
import stat
import zlib
from pathlib import Path

from .errors import InputError

__all__ = ["TRACE_SUFFIXES", "BUFFER_SUFFIXES", "PROTON_SUFFIXES", "is_proton", "is_iket", "json_keys", "json_found", "is_iket_pftrace", "open_maybe_gzip", "is_trace", "is_gzip_buffer", "buffer_stem", "sibling",
           "special_kind", "refuse_special_input"]

TRACE_SUFFIXES = (".perfetto-trace", ".pftrace")
_OTHER_TRACE_SUFFIXES = (".pb", ".trace", ".json", ".gz")
BUFFER_SUFFIXES = (".bin", ".npy", ".bin.gz")


PROTON_SUFFIXES = (".chrome_trace", ".chrome_trace.gz")
_SNIFF = re.compile(rb'"traceEvents"|\bCore\d+ CTA\d+"')


def is_trace(path) -> bool:
    """True for a Perfetto trace (loaded as it is), False for a profiler buffer or a Triton Proton trace
    (decoded first: ``ktrace.decoding.proton``)."""
    name = Path(str(path)).name.lower()
    if name.endswith(BUFFER_SUFFIXES + PROTON_SUFFIXES):
        return False
    if name.endswith((".json", ".gz")) and (is_proton(path) or is_iket(path)):
        return False
    if name.endswith(TRACE_SUFFIXES + _OTHER_TRACE_SUFFIXES):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(1) == b"\x0a"
    except OSError:
        return False


# IKET's own keys (no other format ktrace reads has them); two of them, anywhere in the document, make an IKET
# trace: a trace written back by json.dump(indent=1), with its keys in another order, or with a first range of
# a million warps holds them as surely as run-iket's own print, only further in.
_IKET_KEYS = (b"locationTable", b"stringTable", b"graphLaunches", b"gridDimX", b"warpLocIdxs", b"warpLifetimes",
              b"rangeNameIdx", b"markerNameIdx", b"ctaId")
_KEY_RUN = re.compile(rb'"([A-Za-z]{1,24})"[ \t\r\n]*:')
SNIFF_PIECE = 1 << 20
SNIFF_LIMIT = 256 << 20  # bytes (inflated) looked through at most: the largest IKET trace ktrace reads
_seen_keys: dict = {}


def json_keys(path, wanted=_IKET_KEYS, enough: int = 2, limit: int = SNIFF_LIMIT) -> frozenset:
    """Which of the ``wanted`` keys the JSON document at ``path`` (inflated when gzip-compressed) holds as keys
    (a quoted name, any spacing, then a colon), looking a MiB at a time through at most ``limit`` bytes and
    stopping once ``enough`` are found; empty for a file that cannot be read or does not start as JSON. The
    answer is kept for the file as it is (its size, time and inode), so that each command scans it once."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return frozenset()
    if not stat.S_ISREG(st.st_mode):
        return frozenset()
    memo = (str(path), st.st_size, st.st_mtime_ns, st.st_ino, wanted, enough, limit)
    if memo in _seen_keys:
        return _seen_keys[memo]
    want = set(wanted)
    found: set = set()
    try:
        with open_maybe_gzip(path) as f:
            tail, read, first = b"", 0, True
            while read < limit and len(found) < enough:
                piece = f.read(min(SNIFF_PIECE, limit - read))
                if not piece:
                    break
                read += len(piece)
                if first and not piece.strip():
                    continue  # whitespace before the document
                if first and piece.lstrip()[:1] not in (b"{", b"["):
                    break  # not JSON: no key of any kind
                first = False
                text = tail + piece
                for key in list(want - found):
                    at = text.find(b'"' + key + b'"')
                    while at >= 0:
                        if _KEY_RUN.match(text, at):
                            found.add(key)
                            break
                        at = text.find(b'"' + key + b'"', at + 1)
                tail = text[-64:]
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error):
        pass
    if len(_seen_keys) > 64:
        _seen_keys.clear()
    _seen_keys[memo] = frozenset(found)
    return _seen_keys[memo]


def is_iket(path) -> bool:
    """True for NVIDIA IKET's JSON trace (``iket_pid_<pid>.trace.json``, or gzip-compressed): a ``.json`` or
    ``.json.gz`` that holds two of IKET's own keys (``locationTable``, ``warpLocIdxs``, ...) anywhere, with any
    spacing or order (``json_keys``)."""
    name = Path(str(path)).name.lower()
    if not name.endswith((".json", ".json.gz")) or not Path(str(path)).is_file():
        return False
    return not is_proton(path) and len(json_keys(path)) >= 2


def json_found(path) -> tuple[str, str] | None:
    """(what, how to read it) for a file whose first bytes are JSON text (a ``{`` or ``[`` then printable
    text), None for anything else: what a buffer reader says instead of decoding JSON as records."""
    head = _head(path)
    if head is None or head.lstrip()[:1] not in (b"{", b"[") or not _is_text(head[:4096]):
        return None
    if len(json_keys(path)) >= 2:
        return ("NVIDIA IKET's JSON trace", "give it a .json name (e.g. NAME.trace.json): ktrace reads IKET's "
                "trace by that name")
    if b'"traceEvents"' in head:
        return ("a Chrome JSON trace (Triton Proton's, or another tool's)", "give Proton's trace a .chrome_trace "
                "name; open another tool's in the Perfetto UI as it is")
    if re.search(rb'"schema"\s*:\s*"ktrace\.launch/', head) or (
            re.search(rb'"kernel"\s*:', head) and re.search(rb'"(event_names|buffer|grid)"\s*:', head)):
        return ("a ktrace metadata sidecar", "give the buffer it describes (NAME.bin beside NAME.json)")
    keys = [k.decode() for k in re.findall(rb'"([A-Za-z_][A-Za-z0-9_]{0,31})"\s*:', head[:4096])[:3]]
    return (f"a JSON document{' (keys ' + ', '.join(keys) + ', ...)' if keys else ''}",
            "ktrace reads profiler buffers (.bin), IKET (.trace.json) and Proton (.chrome_trace) traces")


def _is_text(b: bytes) -> bool:
    try:
        text = b.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(b) - 4:  # a character cut at the end is still text
            return False
        text = b[:e.start].decode("utf-8")
    return all(c.isprintable() or c in "\t\r\n" for c in text)


def is_iket_pftrace(path) -> bool:
    """True for the Perfetto trace run-iket writes (``iket_pid_<pid>.pftrace``, or ``.pftrace.gz``): its first
    64 KiB name IKET's tracks (``StackedRanges`` or ``WarpLifeTime`` under ``CTA(x, y, z)``)."""
    if not Path(str(path)).is_file():
        return False
    head = _head(path)
    if head is None:
        return False
    return b"CTA(" in head and (b"StackedRanges" in head or b"WarpLifeTime" in head)


def _head(path) -> bytes | None:
    """The first 64 KiB of a regular file, inflated when gzip-compressed; None when it cannot be read: what the
    sniffs below look at."""
    try:
        with open_maybe_gzip(path) as f:
            return f.read(1 << 16)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error):
        return None


def open_maybe_gzip(path):
    """The file for reading, inflated when it is gzip-compressed (by its first two bytes)."""
    p = str(path)
    with open(p, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(p, "rb") if gz else open(p, "rb")


def is_proton(path) -> bool:
    """True for Proton's Chrome trace: ``.chrome_trace`` (or ``.chrome_trace.gz``) by name, or a ``.json``
    / ``.gz`` whose first 64 KiB hold ``traceEvents`` and a ``... CoreN CTAm`` process."""
    name = Path(str(path)).name.lower()
    if name.endswith((".chrome_trace", ".chrome_trace.gz")):
        return True
    if not name.endswith((".json", ".gz")) or name.endswith((".bin.gz", ".perfetto-trace.gz")):
        return False
    if not Path(str(path)).is_file():  # a FIFO or device is not sniffed (opening a FIFO waits for a writer)
        return False
    head = _head(path)
    if head is None:
        return False
    return len(set(m.group(0)[:3] for m in _SNIFF.finditer(head))) == 2


def is_gzip_buffer(path) -> bool:
    """True for a gzip-compressed raw buffer (``name.bin.gz``)."""
    return Path(str(path)).name.lower().endswith(".bin.gz")


def buffer_stem(path) -> str:
    """The name without its buffer suffix: ``run`` for ``run.bin``, ``run.bin.gz`` or ``run.npy``."""
    name = Path(str(path)).name
    if name.lower().endswith(".bin.gz"):
        return name[:-7]
    for suffix in PROTON_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[:-len(suffix)]
    return Path(name).stem


def sibling(path, suffix: str) -> Path:
    """``dir/name<suffix>`` for ``dir/name.bin`` (or ``.bin.gz``, ``.npy``): the sidecar, the default trace."""
    p = Path(str(path))
    return p.with_name(buffer_stem(p) + suffix)


_SPECIAL = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def special_kind(path) -> str | None:
    """What ``path`` is when it is no regular file nor folder ("a FIFO (named pipe)", "a character device", ...),
    else None (also when it does not exist). Found with ``os.stat``: nothing is opened, so a FIFO with no writer
    never blocks the caller."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return next((kind for test, kind in _SPECIAL if test(mode)), None)


def refuse_special_input(path, what: str = "input") -> None:
    """Raises InputError when ``path`` is a FIFO, a device or a socket: reading one could block forever or
    never end; ktrace reads regular files only."""
    kind = special_kind(path)
    if kind:
        raise InputError(f"{path}: the {what} is {kind}, not a regular file; ktrace reads regular files only "
                         "(a pipe or device could block or never end): save it to a file first and give that")
