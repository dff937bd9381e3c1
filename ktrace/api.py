"""The library's front door: decode, convert and inspect, composed from the layers below."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .decoding import decode
from .export.writer import write_trace
from .model import Decoded
from .report.inspect import inspect_dict

__all__ = ["ConvertResult", "convert", "inspect", "default_output"]


@dataclass(frozen=True)
class ConvertResult:
    """What ``convert`` wrote: the trace's path and size (bytes), and the decoded buffer."""

    path: Path
    bytes: int
    decoded: Decoded


def default_output(source) -> Path:
    """``dir/name.perfetto-trace`` for ``dir/name.bin``."""
    if isinstance(source, (str, Path)):
        return Path(source).with_suffix(".perfetto-trace")
    return Path("ktrace.perfetto-trace")


def convert(source, out=None, *, tracks: str = "sm", progress=None, **decode_options) -> ConvertResult:
    """Decode a profiler buffer and write a Perfetto trace.

    source: a buffer path, bytes or array (see ``decode``); out: the trace path (default: the buffer's
    path with ``.perfetto-trace``); tracks: ``sm`` (launch > SM > block > group), ``block`` or ``flat``;
    decode_options: ``events``, ``groups``, ``layout``, ``sidecar``, ``num_blocks``, ``num_groups``.
    """
    d = source if isinstance(source, Decoded) else decode(source, **decode_options)
    path = Path(out) if out is not None else default_output(source)
    size = write_trace(d, path, tracks=tracks, progress=progress)
    return ConvertResult(path, size, d)


def inspect(source, **decode_options) -> dict:
    """The inspect report (schema ``ktrace.inspect/1``) for a buffer: layout, lanes, anomalies, notes."""
    d = source if isinstance(source, Decoded) else decode(source, **decode_options)
    return inspect_dict(d)
