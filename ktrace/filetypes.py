"""What a path holds, a Perfetto trace or a profiler buffer: one answer for every command.

By its name first (``.bin``/``.bin.gz``/``.npy`` are buffers; ``.perfetto-trace``, ``.pftrace``, ``.pb``, ``.trace``,
``.json`` and anything gzip-compressed are traces), else by its first byte: a protobuf trace starts with
field 1 (``Trace.packet``), length-delimited (0x0a). A file that cannot be read is taken for a buffer, so that
the buffer reader says what is wrong with it.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["TRACE_SUFFIXES", "BUFFER_SUFFIXES", "is_trace", "is_gzip_buffer", "buffer_stem", "sibling"]

TRACE_SUFFIXES = (".perfetto-trace", ".pftrace")
_OTHER_TRACE_SUFFIXES = (".pb", ".trace", ".json", ".gz")
BUFFER_SUFFIXES = (".bin", ".npy", ".bin.gz")


def is_trace(path) -> bool:
    """True for a Perfetto trace (loaded as it is), False for a profiler buffer (decoded first)."""
    name = Path(str(path)).name.lower()
    if name.endswith(BUFFER_SUFFIXES):
        return False
    if name.endswith(TRACE_SUFFIXES + _OTHER_TRACE_SUFFIXES):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(1) == b"\x0a"
    except OSError:
        return False


def is_gzip_buffer(path) -> bool:
    """True for a gzip-compressed raw buffer (``name.bin.gz``)."""
    return Path(str(path)).name.lower().endswith(".bin.gz")


def buffer_stem(path) -> str:
    """The name without its buffer suffix: ``run`` for ``run.bin``, ``run.bin.gz`` or ``run.npy``."""
    name = Path(str(path)).name
    if name.lower().endswith(".bin.gz"):
        return name[:-7]
    return Path(name).stem


def sibling(path, suffix: str) -> Path:
    """``dir/name<suffix>`` for ``dir/name.bin`` (or ``.bin.gz``, ``.npy``): the sidecar, the default trace."""
    p = Path(str(path))
    return p.with_name(buffer_stem(p) + suffix)
