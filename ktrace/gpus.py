"""Several GPUs' buffers, the library's side: one merged trace (a process per GPU), each GPU's analysis then
the cross-GPU figures, from the buffers or from a merged trace. ``ktrace.api`` exports these.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .core.errors import InputError
from .inputs import open_gpus
from .core.model import Summary
from .core.outputs import check_output

if TYPE_CHECKING:
    from .analysis import Thresholds
    from .analysis.figures.across_gpus import CrossGpu, MultiGpuAnalysis
    from .export.merge import MergeResult

__all__ = ["merge_output", "MergedTrace", "merge", "analyze_gpus", "merged_gpus", "analyze_merged"]


def _sidecar_given(decode_options: dict) -> list:
    return [s for s in [decode_options.get("sidecar")] if isinstance(s, (str, Path))]


def merge_output(sources) -> Path:
    """``dir/name_merged.perfetto-trace`` for the first buffer ``dir/name.bin``."""
    first = Path(str(list(sources)[0]))
    return first.with_name(first.stem + "_merged.perfetto-trace")


@dataclass(frozen=True)
class MergedTrace:
    """What ``merge`` wrote (``trace``: path, bytes, alignment, each buffer's Summary) and, when asked for,
    the cross-GPU figures of the same decoders."""

    trace: MergeResult
    cross_gpu: CrossGpu | None = None

    @property
    def path(self) -> Path:
        return self.trace.path

    @property
    def bytes(self) -> int:
        return self.trace.bytes

    @property
    def alignment(self):
        return self.trace.alignment

    @property
    def summaries(self) -> tuple[Summary, ...]:
        return self.trace.summaries


def merge(sources, out=None, *, align_mode: str = "offset", tracks: str = "sm", report: bool = False,
          offsets=None, clocks=None, **decode_options) -> MergedTrace:
    """Write one trace holding several GPUs' buffers, a process per GPU on one time axis (default path:
    ``merge_output``); with ``report``, the cross-GPU figures too, from the same decoders.

    align_mode: "offset" (clock offsets measured at capture) or "start" (first records); offsets
    (``["GPU=NS", ...]``) and clocks (a clocks file path) supply the offsets instead of the sidecars (see
    ``ktrace.decoding.clocks``). Raises InputError for traces among the sources or buffers that cannot be
    aligned."""
    path = Path(out) if out is not None else merge_output(sources)
    check_output(path, [*sources, *_sidecar_given(decode_options)], "merged trace")
    gpus = open_gpus(sources, align_mode=align_mode, offsets=offsets, clocks=clocks, **decode_options)
    from .export.merge import MAX_GPUS, MergeResult, merge_chunks
    from .export.writer import write_chunks

    if len(gpus.decoders) > MAX_GPUS:
        raise InputError(f"{len(gpus.decoders)} buffers: a merged trace holds at most {MAX_GPUS}")
    summaries: list = []
    size = write_chunks(path, merge_chunks(gpus.decoders, gpus.alignment, tracks, summaries))
    res = MergeResult(path, size, gpus.alignment, tuple(summaries))
    if not report:
        return MergedTrace(res)
    from .analysis.figures.across_gpus import cross_gpu

    return MergedTrace(res, cross_gpu(gpus.decoders, alignment=gpus.alignment))


def analyze_gpus(sources, thresholds: Thresholds | None = None, *, align_mode: str = "offset",
                 engine: str = "auto", offsets=None, clocks=None, **decode_options) -> MultiGpuAnalysis:
    """Several GPUs' buffers: each analyzed as ``analyze`` does, then the cross-GPU figures, every buffer
    opened once (schema ktrace.analysis.multi/1); offsets and clocks as for ``merge``. Raises InputError for
    traces or unalignable buffers (before any analysis runs)."""
    from .analysis.figures.across_gpus import MultiGpuAnalysis, cross_gpu
    from .api import _analyze  # one way to analyze a buffer, as ktrace.analyze does

    gpus = open_gpus(sources, align_mode=align_mode, offsets=offsets, clocks=clocks, **decode_options)
    per = tuple(_analyze(dec, thresholds, engine, None, name, {}) for dec, name in zip(gpus.decoders, gpus.sources))
    return MultiGpuAnalysis(gpus.sources, per, cross_gpu(gpus.decoders, alignment=gpus.alignment))


def merged_gpus(trace, *, engine: str = "auto") -> int:
    """How many GPUs a trace holds: more than 1 for a trace written by ``ktrace merge``, else 0 or 1."""
    from .analysis.figures.sql.reader import gpu_processes
    from .engine import open_trace

    with open_trace(trace, engine=engine) as session:
        return len(gpu_processes(session))


def analyze_merged(trace, thresholds: Thresholds | None = None, *, engine: str = "auto") -> MultiGpuAnalysis:
    """A trace written by ``ktrace merge``: each GPU analyzed on its own (its process's slices only), then the
    cross-GPU figures, as ``analyze_gpus`` gives for the buffers (schema ktrace.analysis.multi/1; times on the
    merged trace's common axis). Raises InputError for a trace of fewer than two GPUs."""
    from .analysis import analyze_opened
    from .analysis.figures.sql.reader import gpu_processes
    from .analysis.figures.across_gpus import MultiGpuAnalysis, cross_gpu_from_analyses
    from .engine import open_trace

    name = str(trace)
    with open_trace(trace, engine=engine) as session:
        gpus = gpu_processes(session)
    if len(gpus) < 2:
        raise InputError(f"{name}: not a trace of several GPUs (ktrace merge writes those); use analyze")
    per, labels, launches = [], [], []
    for upid, label in gpus:  # a session per GPU: the package reads only that GPU's process
        with open_trace(trace, engine=engine) as session:
            a = analyze_opened(session, thresholds, name=f"{name} [{label}]", upid=upid)
        per.append(a)
        labels.append(label)
        launches.append(dict(a.launch))
    return MultiGpuAnalysis(tuple(f"{name} [{lab}]" for lab in labels), tuple(per),
                            cross_gpu_from_analyses(per, labels, launches))
