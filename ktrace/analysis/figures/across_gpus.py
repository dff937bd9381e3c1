"""Across GPUs: for every phase instance, when each GPU's blocks began and ended it on the common time axis,
which GPU finished last, and how far apart the GPUs were (their start and end skews).

    x = cross_gpu(["run_gpu0.bin", "run_gpu1.bin"])
    x.instances.last_gpu, x.instances.end_skew_ns         # per (phase, k)
    x.phases.top_last_gpu                                  # the GPU that finished each phase last most often

Computed in numpy from the decoded buffers, shifted by ``ktrace.decoding.align`` (the same shifts
``ktrace merge`` writes), a range of lanes at a time. Phases are event names (as in the per-GPU analysis);
instance k of a phase on a GPU spans its blocks' k-th slices of it: from the earliest begin to the latest
end. Skews below the alignment's spread (``x.alignment.spread_ns``) are within the clock measurement's noise.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ...core import jsonfmt
from ...decoding.align import Alignment, Shifted, align, open_decoders
from ..model.results import Table
from ..model.table import table
from ...core.records import frozen

__all__ = ["CrossGpu", "GpuPhaseInstances", "CrossGpuInstances", "CrossGpuPhases", "MultiGpuAnalysis", "cross_gpu",
           "CROSS_GPU_SCHEMA", "MULTI_SCHEMA"]

CROSS_GPU_SCHEMA = "ktrace.cross_gpu/1"
MULTI_SCHEMA = "ktrace.analysis.multi/1"


@table
class GpuPhaseInstances(Table):
    """One row per (phase instance, GPU): the GPU's blocks' earliest begin and latest end of it (ns on the
    common axis), how many lanes ran it, and the block that ended last (lowest block on a tie)."""

    gpu: np.ndarray  # position among the buffers given

    KINDS: ClassVar[dict[str, str]] = dict(phase="text", phase_index="int", k="int", gpu="int", lanes="int",
                                           begin_ns="int", end_ns="int", wall_ns="int", last_block="int")


@table
class CrossGpuInstances(Table):
    """One row per phase instance over the GPUs that ran it: first begin and last end over all of them,
    start_skew_ns (latest GPU begin - earliest), end_skew_ns (latest GPU end - earliest), last_gpu (the GPU
    whose end is latest; lowest on a tie), tied_last_gpus, last_lead_ns (last GPU's end - the next latest;
    NaN with one GPU) and first_gpu (the GPU that began first)."""

    KINDS: ClassVar[dict[str, str]] = dict(
        phase="text", phase_index="int", k="int", gpus="int", begin_ns="int", end_ns="int", start_skew_ns="int",
        end_skew_ns="int", first_gpu="int", last_gpu="int", tied_last_gpus="int", last_lead_ns="real")


@table
class CrossGpuPhases(Table):
    """One row per phase: over its instances, the GPU that finished last most often (lowest on a tie) and
    how often, how many distinct GPUs finished last, and the mean and largest start and end skews."""

    KINDS: ClassVar[dict[str, str]] = dict(
        phase="text", phase_index="int", instances="int", top_last_gpu="int", top_last_count="int",
        distinct_last_gpus="int", mean_start_skew_ns="real", max_start_skew_ns="int", mean_end_skew_ns="real",
        max_end_skew_ns="int")


@frozen
class CrossGpu:
    """The cross-GPU figures and the alignment they rest on (``alignment.clocks[g]`` is GPU position g)."""

    alignment: Alignment
    per_gpu: GpuPhaseInstances
    instances: CrossGpuInstances
    phases: CrossGpuPhases

    def label(self, gpu: int) -> str:
        return self.alignment.clocks[gpu].label

    def to_dict(self) -> dict:
        """JSON-ready values, schema ``ktrace.cross_gpu/1``; times in ns on the common axis."""
        return {"schema": CROSS_GPU_SCHEMA, "alignment": self.alignment.to_dict(), "phases": self.phases.rows(),
                "instances": self.instances.rows(), "per_gpu": self.per_gpu.rows()}


@frozen
class MultiGpuAnalysis:
    """Several GPUs' captures: each one's Analysis (in the order given, ``labels[g]`` naming GPU g) and the
    cross-GPU figures over them."""

    sources: tuple[str, ...]
    per_gpu: tuple  # of Analysis
    cross_gpu: CrossGpu

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(c.label for c in self.cross_gpu.alignment.clocks)

    def to_dict(self) -> dict:
        """JSON-ready values, schema ``ktrace.analysis.multi/1``: each GPU's ``ktrace.analysis/2`` with its
        position and label, and the ``ktrace.cross_gpu/1`` figures."""
        return {"schema": MULTI_SCHEMA, "gpus": [{"gpu": i, "label": lab, **r.to_dict()} for i, (lab, r) in
                                                 enumerate(zip(self.labels, self.per_gpu))],
                "cross_gpu": self.cross_gpu.to_dict()}

    def to_json(self, indent: int | None = 2) -> str:
        return jsonfmt.dumps(self.to_dict(), indent=indent, ensure_ascii=False, allow_nan=False)


def cross_gpu(sources, *, align_mode: str = "offset", alignment: Alignment | None = None,
              **decode_options) -> CrossGpu:
    """The cross-GPU figures of several buffers (paths, BufferDecoders or Decodeds), one per GPU.

    align_mode: "offset" (measured clock offsets from the sidecars) or "start" (first records); or pass an
    ``alignment`` made by ``ktrace.decoding.align.align`` for these decoders. Raises InputError when the
    buffers cannot be aligned.
    """
    decoders = open_decoders(sources, **decode_options)
    alignment = alignment or align(decoders, align_mode)
    names: list[str] = []
    rows = [_gpu_instances(Shifted(dec, c.shift_ns), g, names) for g, (dec, c) in
            enumerate(zip(decoders, alignment.clocks))]
    cols = {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
    return _figures(alignment, cols, names)


def _gpu_instances(src, gpu: int, names: list[str]) -> dict:
    """Per (phase code, k) of one GPU: lanes, earliest begin, latest end, last block; reduced per part of
    the buffer, then over the parts."""
    acc = []
    for d in src.parts():
        s = d.slices
        if not len(s):
            continue
        ev = np.unique(s.event)
        codes = []
        for e in ev.tolist():  # a loop over event indices, not slices
            nm = d.launch.event_name(int(e))
            if nm not in names:
                names.append(nm)
            codes.append(names.index(nm))
        code = np.asarray(codes, np.int64)[np.searchsorted(ev, s.event)]
        acc.append(_reduce(code, s.k, np.ones(len(s), np.int64), s.begin_ns, s.end_ns, s.block))
    if not acc:
        z = np.zeros(0, np.int64)
        return {"code": z, "k": z, "gpu": z, "lanes": z, "begin_ns": z, "end_ns": z, "last_block": z}
    out = _reduce(*(np.concatenate([a[i] for a in acc]) for i in range(6)))
    return {"code": out[0], "k": out[1], "gpu": np.full(len(out[0]), gpu, np.int64), "lanes": out[2],
            "begin_ns": out[3], "end_ns": out[4], "last_block": out[5]}


def _reduce(code, k, lanes, begin, end, block):
    """Group rows by (code, k): sum lanes, min begin, max end, and the block of the max end (lowest block
    among ties). Returns the grouped columns in (code, k) order."""
    order = np.lexsort((block, -end, k, code))
    code, k, lanes, begin, end, block = (a[order] for a in (code, k, lanes, begin, end, block))
    first = np.flatnonzero(np.r_[True, (code[1:] != code[:-1]) | (k[1:] != k[:-1])])
    return (code[first], k[first], np.add.reduceat(lanes, first), np.minimum.reduceat(begin, first),
            end[first], block[first])


def _figures(alignment: Alignment, c: dict, names: list[str]) -> CrossGpu:
    n = len(c["code"])
    # Phase order: by the earliest begin of any of its instances on any GPU (then name), as per GPU.
    first_begin = np.full(len(names), np.iinfo(np.int64).max)
    np.minimum.at(first_begin, c["code"], c["begin_ns"])
    order = sorted(range(len(names)), key=lambda i: (int(first_begin[i]), names[i]))
    phase_index = np.empty(len(names), np.int64)
    phase_index[order] = np.arange(len(names))
    pidx = phase_index[c["code"]] if n else np.zeros(0, np.int64)
    by = np.lexsort((c["gpu"], c["k"], pidx))
    per = {key: v[by] for key, v in c.items()}
    pidx = pidx[by]
    per_gpu = GpuPhaseInstances.from_columns({
        "phase": [names[i] for i in per["code"].tolist()], "phase_index": pidx, "k": per["k"], "gpu": per["gpu"],
        "lanes": per["lanes"], "begin_ns": per["begin_ns"], "end_ns": per["end_ns"],
        "wall_ns": per["end_ns"] - per["begin_ns"], "last_block": per["last_block"]})
    instances = _instances(per, pidx, names)
    return CrossGpu(alignment, per_gpu, instances, _phases(instances))


def _instances(per: dict, pidx: np.ndarray, names: list[str]) -> CrossGpuInstances:
    n = len(pidx)
    if not n:
        return CrossGpuInstances.empty()
    key = pidx * (int(per["k"].max()) + 1) + per["k"]
    # Rows of one instance are contiguous (sorted by phase_index, k, gpu); within it, order by latest end.
    by_end = np.lexsort((per["gpu"], -per["end_ns"], key))
    starts = np.flatnonzero(np.r_[True, key[by_end][1:] != key[by_end][:-1]])
    count = np.diff(np.r_[starts, n])
    end_sorted = per["end_ns"][by_end]
    latest = end_sorted[starts]
    second = np.where(count > 1, starts + 1, starts)
    lead = (latest - end_sorted[second]).astype(np.float64)
    lead[count <= 1] = np.nan
    tied = np.add.reduceat((end_sorted == np.repeat(latest, count)).astype(np.int64), starts)
    begin_sorted = per["begin_ns"][by_end]
    by_begin = np.lexsort((per["gpu"], per["begin_ns"], key))
    first_gpu = per["gpu"][by_begin][starts]  # same instance boundaries: both sorts lead with key
    first = by_end[starts]
    return CrossGpuInstances.from_columns({
        "phase": [names[i] for i in per["code"][first].tolist()],
        "phase_index": pidx[first], "k": per["k"][first], "gpus": count,
        "begin_ns": np.minimum.reduceat(begin_sorted, starts), "end_ns": latest,
        "start_skew_ns": np.maximum.reduceat(begin_sorted, starts) - np.minimum.reduceat(begin_sorted, starts),
        "end_skew_ns": latest - np.minimum.reduceat(end_sorted, starts),
        "first_gpu": first_gpu, "last_gpu": per["gpu"][first], "tied_last_gpus": tied, "last_lead_ns": lead})


def _phases(t: CrossGpuInstances) -> CrossGpuPhases:
    if not len(t):
        return CrossGpuPhases.empty()
    starts = np.flatnonzero(np.r_[True, t.phase_index[1:] != t.phase_index[:-1]])
    count = np.diff(np.r_[starts, len(t)])
    top, top_n, distinct = [], [], []
    for a, b in zip(starts.tolist(), np.r_[starts[1:], len(t)].tolist()):  # a loop over phases
        votes = np.bincount(t.last_gpu[a:b])
        top.append(int(votes.argmax()))
        top_n.append(int(votes.max()))
        distinct.append(int(np.count_nonzero(votes)))
    return CrossGpuPhases.from_columns({
        "phase": t.phase[starts], "phase_index": t.phase_index[starts], "instances": count,
        "top_last_gpu": top, "top_last_count": top_n, "distinct_last_gpus": distinct,
        "mean_start_skew_ns": np.add.reduceat(t.start_skew_ns, starts) / count,
        "max_start_skew_ns": np.maximum.reduceat(t.start_skew_ns, starts),
        "mean_end_skew_ns": np.add.reduceat(t.end_skew_ns, starts) / count,
        "max_end_skew_ns": np.maximum.reduceat(t.end_skew_ns, starts)})


def cross_gpu_from_analyses(analyses, labels, launches) -> CrossGpu:
    """The cross-GPU figures from each GPU's analysis of a trace written by ``ktrace merge`` (every GPU
    already on the common axis): the same tables ``cross_gpu`` computes from the buffers. labels: each GPU's
    process name; launches: each GPU's launch facts (the clock shift and offset ``ktrace merge`` recorded)."""
    from ...decoding.align import GpuClock

    names: list[str] = []
    cols = {key: [] for key in ("code", "k", "gpu", "lanes", "begin_ns", "end_ns", "last_block")}
    clocks = []
    for gpu, (a, label, facts) in enumerate(zip(analyses, labels, launches)):
        t = a.instances
        for nm in t.phase.tolist():  # a loop over instances' names, once per phase instance
            if nm not in names:
                names.append(nm)
        cols["code"].append(np.array([names.index(nm) for nm in t.phase.tolist()], np.int64))
        cols["k"].append(t.k)
        cols["gpu"].append(np.full(len(t), gpu, np.int64))
        cols["lanes"].append(t.lanes)
        cols["begin_ns"].append(t.begin_ns)
        cols["end_ns"].append(t.end_ns)
        cols["last_block"].append(t.last_block)

        def fact(key):
            v = facts.get(key)
            return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

        clocks.append(GpuClock(gpu, f"{label} (merged trace)", label, None, facts.get("device"), None,
                               "merged", fact("clock_offset_to_reference_ns"), fact("clock_offset_spread_ns"),
                               None, None, fact("clock_shift_ns") or 0))
    c = {key: np.concatenate(v) if v else np.zeros(0, np.int64) for key, v in cols.items()}
    alignment = Alignment("merged", tuple(clocks), ("GPUs placed on one axis by ktrace merge; shifts as it recorded",))
    return _figures(alignment, c, names)
