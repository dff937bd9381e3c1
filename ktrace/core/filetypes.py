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

__all__ = ["TRACE_SUFFIXES", "BUFFER_SUFFIXES", "PROTON_SUFFIXES", "is_proton", "is_iket", "is_iket_pftrace", "open_maybe_gzip", "is_trace", "is_gzip_buffer", "buffer_stem", "sibling",
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


_IKET_SNIFF = re.compile(rb'"(gridDimX|warpLocIdxs|warpLifetimes|rangeNameIdx|locationTable)"')


def is_iket(path) -> bool:
    """True for NVIDIA IKET's JSON trace (``iket_pid_<pid>.trace.json``, or gzip-compressed): a ``.json`` or
    ``.json.gz`` whose first 64 KiB hold two of IKET's own keys."""
    name = Path(str(path)).name.lower()
    if not name.endswith((".json", ".json.gz")) or not Path(str(path)).is_file():
        return False
    head = _head(path)
    if head is None:
        return False
    return len({m.group(1) for m in _IKET_SNIFF.finditer(head)}) >= 2


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
