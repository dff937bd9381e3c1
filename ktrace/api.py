"""The library's front door: decode, convert and inspect, composed from the layers below."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .decoding import BufferDecoder
from .export.writer import write_trace
from .model import Decoded, Summary
from .report.inspect import inspect_dict

__all__ = ["ConvertResult", "convert", "inspect", "default_output", "summarize"]


@dataclass(frozen=True)
class ConvertResult:
    """What ``convert`` wrote: the trace's path and size (bytes), the buffer's facts and counts."""

    path: Path
    bytes: int
    decoder: BufferDecoder | None
    summary: Summary


def default_output(source) -> Path:
    """``dir/name.perfetto-trace`` for ``dir/name.bin``."""
    if isinstance(source, (str, Path)):
        return Path(source).with_suffix(".perfetto-trace")
    return Path("ktrace.perfetto-trace")


def _open(source, decode_options) -> BufferDecoder | Decoded:
    if isinstance(source, (Decoded, BufferDecoder)):
        return source
    return BufferDecoder(source, **decode_options)


def convert(source, out=None, *, tracks: str = "sm", progress=None, **decode_options) -> ConvertResult:
    """Decode a profiler buffer and write a Perfetto trace, streaming a range of lanes at a time.

    source: a buffer path, bytes or array (see ``decode``), a BufferDecoder or a Decoded; out: the trace
    path (default: the buffer's path with ``.perfetto-trace``); tracks: ``sm`` (launch > SM > block >
    group), ``block`` or ``flat``; decode_options: ``events``, ``groups``, ``layout``, ``sidecar``,
    ``num_blocks``, ``num_groups``. progress(done, total) is called as records are written.
    """
    src = _open(source, decode_options)
    path = Path(out) if out is not None else default_output(source)
    size, summary = write_trace(src, path, tracks=tracks, progress=progress)
    return ConvertResult(path, size, src if isinstance(src, BufferDecoder) else None, summary)


def summarize(source, progress=None, **decode_options) -> tuple[Decoded, Summary]:
    """(the first decoded part, the whole buffer's Summary), decoding a range of lanes at a time so that
    memory stays bounded by the range, not the buffer. progress(done_lanes, lanes) after each range."""
    src = _open(source, decode_options)
    parts = [src] if isinstance(src, Decoded) else src.parts()
    first, total = None, Summary()
    for d in parts:
        first = first or d
        total = total.merge(Summary.of(d))
        if progress and isinstance(src, BufferDecoder):
            progress(d.lane_range[1], src.lanes)
    return first, total


def inspect(source, progress=None, **decode_options) -> dict:
    """The inspect report (schema ``ktrace.inspect/1``) for a buffer: layout, lanes, anomalies, notes."""
    first, summary = summarize(source, progress=progress, **decode_options)
    return inspect_dict(first, summary)
