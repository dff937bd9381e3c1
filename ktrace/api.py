"""The library's front door: every command's work, composed from the layers below, each returning a result.

    import ktrace
    d = ktrace.decode("run.bin")                              # a Decoded: slices, instants, anomalies
    ktrace.convert("run.bin")                                 # -> run.perfetto-trace (ConvertResult)
    ktrace.inspect("run.bin")                                 # the inspect report (dict, ktrace.inspect/1)
    a = ktrace.analyze("run.bin")                             # Analysis (ktrace.analysis/2)
    ktrace.query("run.bin", "SELECT ...")                     # QueryResult, ktrace tables registered
    ktrace.diff("before.bin", "after.bin")                    # Diff (ktrace.diff/1)
    ktrace.check("run.bin", ktrace.rule_book(["compute.imbalance <= 1.2"]))   # Check
    ktrace.merge(["a_gpu0.bin", "a_gpu1.bin"])                # MergedTrace (one trace, a process per GPU)
    ktrace.analyze_gpus(["a_gpu0.bin", "a_gpu1.bin"])         # MultiGpuAnalysis (ktrace.analysis.multi/1)
    ktrace.annotate("run.bin", "run.analyzed.perfetto-trace")  # AnnotatedTrace: the trace with the analysis drawn

Every input goes through ``ktrace.inputs`` (one resolver: checks decoding options once, decodes once, holds
the temporary trace). The command line only parses, calls these and prints.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from functools import partial
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING

from .decoding import BufferDecoder, decode, open_source
from .decoding.options import decode_options as _check_options
from .core.errors import InputError
from .core.filetypes import is_gzip_buffer, sibling
from .inputs import buffer_options, is_session, is_trace, open_gpus, open_input
from .core.model import Decoded, Summary
from .core.outputs import check_output
from .core.progress import stage
from .runtime.config import Parallelism, import_beside
from .runtime.workers import in_worker, run_in_workers
from .replays import whatif  # noqa: F401
from .core.records import frozen

if TYPE_CHECKING:
    from .analysis import Analysis, Thresholds
    from .analysis.compare.catalog import Capture
    from .analysis.compare.diff import Diff
    from .analysis.gates.rules import Check, RuleBook
    from .analysis.figures.across_gpus import CrossGpu, MultiGpuAnalysis
    from .export.merge import MergeResult

# convert and inspect need no analysis (nor the engine): what analyzes is imported by the functions that do,
# so that ``ktrace convert`` and ``ktrace inspect`` start without it (tests/test_startup.py).

__all__ = ["ConvertResult", "MergedTrace", "decode", "convert", "inspect", "analyze", "analyze_gpus", "analyze_merged", "merged_gpus", "query",
           "load_capture", "diff", "check", "rule_book", "merge", "default_output", "merge_output", "summarize",
           "annotate", "AnnotatedTrace", "annotated_output", "whatif"]


@frozen
class ConvertResult:
    """What ``convert`` wrote: the trace's path and size (bytes), the buffer's facts and counts."""

    path: Path
    bytes: int
    decoder: BufferDecoder | None
    summary: Summary


def __getattr__(name: str):  # rule_book, from the analysis layer when first asked for (PEP 562)
    if name == "rule_book":
        from .analysis.gates.rules import rule_book

        return rule_book
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def default_output(source) -> Path:
    """``dir/name.perfetto-trace`` for ``dir/name.bin``."""
    if isinstance(source, (str, Path)):
        return sibling(source, ".perfetto-trace")
    return Path("ktrace.perfetto-trace")


def _open(source, options, where: str) -> BufferDecoder | Decoded:
    options = _check_options(options, where=where)
    if isinstance(source, (Decoded, BufferDecoder)):
        return source
    return open_source(source, **options)


def _sidecar_given(decode_options: dict) -> list:
    return [s for s in [decode_options.get("sidecar")] if isinstance(s, (str, Path))]


def convert(source, out=None, *, tracks: str = "sm", progress=None, jobs=None, **decode_options) -> ConvertResult:
    """Decode a profiler buffer and write a Perfetto trace, streaming a range of lanes at a time.

    source: a buffer path, bytes, an array or a torch.Tensor (see ``decode``), a BufferDecoder or a Decoded; out: the trace
    path (default: the buffer's path with ``.perfetto-trace``); tracks: ``sm`` (launch > SM > block >
    group), ``block`` or ``flat``; decode_options: ``events``, ``groups``, ``layout``, ``sidecar``,
    ``num_blocks``, ``num_groups``. progress(done, total) is called as records are written. jobs: worker
    processes (None: the cores available, on 3 cores or more; 1: none), the same bytes whatever the number."""
    path = Path(out) if out is not None else default_output(source)
    src = _open(source, decode_options, "convert")  # unknown options first: a usage error says so
    check_output(path, [source, *_sidecar_given(decode_options)], "trace")
    from .export.writer import write_trace  # here: inspect writes nothing

    size, summary = write_trace(src, path, tracks=tracks, progress=progress, jobs=jobs)
    return ConvertResult(path, size, src if isinstance(src, BufferDecoder) else None, summary)


def summarize(source, progress=None, **decode_options) -> tuple[Decoded, Summary]:
    """(the first decoded part, the whole buffer's Summary), decoding a range of lanes at a time so that
    memory stays bounded by the range, not the buffer. progress(done_lanes, lanes) after each range."""
    src = _open(source, decode_options, "summarize")
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
    from .report.inspect import inspect_dict

    first, summary = summarize(source, progress=progress, **decode_options)
    return inspect_dict(first, summary)


def analyze(source, thresholds: Thresholds | dict | None = None, *, engine: str = "auto", progress=None,
            on_engine=None, jobs: int | None = None, **decode_options) -> Analysis:
    """Analyze a kernel capture: per-phase figures and the method's findings.

    source: a trace path: figures from the SQL package in the trace processor; a profiler buffer (a path,
    bytes, an array, a CPU or CUDA torch.Tensor, or a BufferDecoder): decoded with ``decode_options``
    (events or event_names, groups or group_names, layout, sidecar, num_blocks, num_groups), written to a
    temporary trace and analyzed the same way; an open engine Session: the SQL package is registered on it; a
    ``Decoded``: figures from numpy. thresholds: ``Thresholds``, a dict ``{"imbalance": 1.2}`` or a list
    ``["imbalance=1.2"]``. engine: 'wasm' or 'native' (ktrace.engine.open_trace), 'numpy' (a buffer's figures
    computed with numpy, no trace processor), or 'auto' (a buffer's figures from numpy at every size, a trace's
    from the trace processor); progress(done_bytes, total_bytes) while the trace loads;
    on_engine(engine, why): kept for ``annotate``'s signature (analyze's choice needs no explaining: it
    depends on the kind of input, not its size); jobs: worker processes of the numpy engine (default: the
    cores available on 3 cores or more, for a buffer holding NUMPY_MIN_RECORDS records or more; the figures
    are the same for any number). ``print()`` it for the report. InputError for bad input or thresholds,
    EnvironmentMissing when the engine cannot start."""
    from .analysis import Thresholds, analyze_opened
    thresholds = Thresholds.of(thresholds)  # a wrong kind fails now, not after the decoding
    if isinstance(source, Decoded) or is_session(source):
        return analyze_opened(source, thresholds)
    buffer_options([source], decode_options)
    return _analyze(source, thresholds, engine, progress, None, decode_options, on_engine, jobs=jobs)


def analyze_runs(sources, thresholds: Thresholds | None = None, *, engine: str = "auto", progress=None,
                 **decode_options):
    """Several runs of one kernel on the same inputs (paths): each analyzed as ``analyze`` does, then which
    warnings hold in every run and the figures' run-to-run spread (``ktrace.analysis.compare.runs.RunsAnalysis``).
    progress(done_runs, runs) after each."""
    from .analysis.compare.runs import runs_analysis

    sources = list(sources)
    out = []
    for i, s in enumerate(sources):
        out.append(analyze(s, thresholds, engine=engine, **decode_options))
        if progress is not None:
            progress(i + 1, len(sources))
    return runs_analysis(sources, out)


# Several GPUs' buffers: one merged trace (a process per GPU), each GPU's analysis then the cross-GPU figures,
# from the buffers or from a merged trace.

def merge_output(sources) -> Path:
    """``dir/name_merged.perfetto-trace`` for the first buffer ``dir/name.bin``."""
    first = Path(str(list(sources)[0]))
    return first.with_name(first.stem + "_merged.perfetto-trace")


@frozen
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

    gpus = open_gpus(sources, align_mode=align_mode, offsets=offsets, clocks=clocks, **decode_options)
    per = tuple(_analyze(dec, thresholds, engine, progress=None, name=name, decode_options={})  # as analyze does
                for dec, name in zip(gpus.decoders, gpus.sources))
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


# engine='auto' analyzes every buffer with numpy (the SQL package's figures, tested equal on every sample): no
# trace processor to compile or load. A buffer holding this many records or more gets several numpy workers;
# `annotate` (the trace drawn for the viewer, which the SQL package writes) takes numpy only from this size.
NUMPY_MIN_RECORDS = 250_000
COUNT_MAX_SLOTS = 1 << 24  # a buffer's records are counted (to choose its workers) up to this many slots (128 MB)


def _numpy_path(engine: str, dec) -> bool:
    """Whether ``analyze`` (and diff, check and the several-GPU analysis, which share it) computes a buffer's
    figures (dec: its BufferDecoder; None: already decoded) with numpy: always, unless a trace processor is
    named (--engine wasm or native)."""
    return dec is None or engine in ("numpy", "auto")


def _annotate_numpy_path(engine: str, dec, on_engine) -> bool:
    """Whether ``annotate`` computes a buffer's figures with numpy: asked for, or 'auto' on a buffer of
    NUMPY_MIN_RECORDS record slots or more (then on_engine("numpy", why) first); else the SQL package that
    writes the annotated trace."""
    if engine == "numpy" or dec is None:
        return True
    if engine != "auto" or dec.body.size < NUMPY_MIN_RECORDS:
        return False
    if on_engine is not None:
        on_engine("numpy", f"analyzing with numpy: {int(dec.body.size):,} record slots >= {NUMPY_MIN_RECORDS:,}; "
                  "--engine wasm for the SQL package")
    return True


def _analyze(source, thresholds, engine, progress, name, decode_options, on_engine=None, capture=False, jobs=None):
    """The Analysis of a path or buffer (a Capture with its sidecar's control timings when ``capture``)."""
    from .analysis import analyze_opened, analyze_parts

    buffer = engine in ("numpy", "auto") and not _is_trace_source(source)
    if engine == "numpy" and not buffer:
        raise InputError(f"{source}: --engine numpy needs the profiler buffer; a trace is analyzed by the trace "
                         "processor (--engine wasm or native)")
    if buffer and isinstance(source, (str, Path)) and is_gzip_buffer(source):
        import_beside(_ANALYSIS_MODULES)  # while the .bin.gz inflates
    with open_input(source, need="decoder" if buffer else "session", engine=engine, progress=progress,
                    **decode_options) as inp:
        name, dec = name or inp.name, inp.decoder if buffer else None
        if not buffer:
            a = analyze_opened(inp.session, thresholds, name=name, progress=progress)
        elif not _numpy_path(engine, dec):  # the decoder, already opened, goes to the SQL package
            with open_input(dec, engine="auto", progress=progress) as sql:
                a = analyze_opened(sql.session, thresholds, name=name, progress=progress)
        elif dec is None:
            a = analyze_opened(inp.decoded, thresholds, name=name)
        else:  # a range of lanes at a time, a few narrow columns per slice: bounded memory
            a = analyze_parts(dec, thresholds, name=name, progress=progress, jobs=_numpy_parallelism(jobs, dec))
        _refuse_unreadable(a, source, decode_options)
        if not capture:
            return a
        from .analysis.compare.catalog import Capture  # diff's and the runs' (its noise model): not analyze's

        return Capture(a, _timing(inp, decode_options))


# What analyzing a buffer imports after reading it (analysis.analyze_parts, _finish), and numpy.ma, which
# numpy imports at the first median or quantile of floats (~6 ms).
_ANALYSIS_MODULES = ("ktrace.analysis.figures.numpy.stream", "ktrace.analysis.findings.find", "numpy.ma")


def _numpy_parallelism(jobs: int | None, dec) -> Parallelism:
    """The numpy engine's runtime configuration: ``jobs`` workers as asked (at most the cores available), else
    ``numpy_parallelism`` for a buffer holding NUMPY_MIN_RECORDS records or more (1 in a worker process of
    several captures analyzed side by side: those already use the cores)."""
    if jobs is None and (in_worker() or _records_held(dec) < NUMPY_MIN_RECORDS):
        return Parallelism.build(1)
    return numpy_parallelism(jobs)


def _records_held(dec) -> int:
    """The records a buffer holds (its non-empty slots): what the numpy engine's work grows with. A buffer is
    sized for the most a launch may write: fi_mla_decode_run1 has 1,048,575 slots for 30k records, where
    starting workers cost more than they save. Counted up to COUNT_MAX_SLOTS slots (a few ms); a larger
    buffer counts as full (reading it twice would cost more than the count could save)."""
    slots = int(dec.body.size)
    if slots < NUMPY_MIN_RECORDS or slots > COUNT_MAX_SLOTS:
        return slots
    import numpy as np

    return int(np.count_nonzero(dec.body))


def numpy_parallelism(jobs: int | None) -> Parallelism:
    """The numpy engine's runtime configuration: --jobs N (more than the cores cannot help), else the cores up
    to ``Parallelism.default_jobs_max``."""
    return Parallelism.build(jobs, cap=Parallelism.default_jobs_max)


def _refuse_unreadable(a: Analysis, source, decode_options) -> None:
    """InputError for a buffer whose records barely match its layout (docs/analysis-schema.md, "Data
    quality"), unless the layout was named (--layout): then it is analyzed with the warning first."""
    from .analysis.model.data_quality import refusal

    if _is_trace_source(source) or decode_options.get("layout"):
        return
    if isinstance(source, BufferDecoder) and source.match.chosen_by == "forced":
        return
    why = refusal(a.data_quality, a.source)
    if why:
        raise InputError(why)


def _is_trace_source(source) -> bool:
    return isinstance(source, (str, Path)) and is_trace(source)


def query(source, sql: str, *, engine: str = "auto", progress=None, max_result_bytes: int | None = None,
          **decode_options):
    """Run PerfettoSQL on a capture (trace, buffer, Decoded or Session) with the ktrace package registered;
    returns the QueryResult (``.to_pandas()``: a DataFrame). A missing ktrace table gets a hint in the InputError.
    progress(done_bytes, total_bytes) while the trace loads (and its stages, ``ktrace.core.progress``).
    max_result_bytes: read at most that many bytes of the result (its first rows; ``cut_at_bytes`` set)."""
    buffer_options([source], decode_options)
    from .analysis import register

    with open_input(source, engine=engine, progress=progress, **decode_options) as inp:
        register(inp.session)
        stage(progress, "running the query")
        try:
            return inp.session.query(sql, max_result_bytes)
        except InputError as e:
            msg = str(e)
            if inp.name and inp.session.trace_name != inp.name:  # a buffer's temporary trace: name the buffer
                msg = msg.replace(inp.session.trace_name, str(inp.name), 1)
            if "no such table: ktrace_" in msg and "INCLUDE PERFETTO MODULE" not in sql.upper():
                msg += "\nhint: start the query with INCLUDE PERFETTO MODULE ktrace.critical_path; (brings in every ktrace table)"
            raise InputError(msg) from None


def _timing(inp, decode_options):  # the sidecar's control timings (a trace's beside it: no decoding options)
    from .analysis.compare.catalog import read_timing

    return read_timing(inp.source, None if inp.kind == "trace" else decode_options.get("sidecar"))


def load_capture(source, *, engine: str = "auto", **decode_options) -> Capture:
    """A capture for ``diff`` and ``check``: its Analysis and, from its sidecar, its control timings.
    An Analysis or Capture passes through; decode_options apply to a buffer (a trace ignores them)."""
    from .analysis import Analysis
    from .analysis.compare.catalog import Capture

    if isinstance(source, Capture):
        return source
    if isinstance(source, Analysis):
        return Capture(source)
    return _analyze(source, None, engine, None, None, decode_options, capture=True)


def diff(before, after, *, engine: str = "auto", jobs: int | None = None, on_done=None,
         assume_noise_pct: float | None = None, **decode_options) -> Diff:
    """Compare two captures (paths, Captures or Analyses) phase by phase (schema ktrace.diff/1); a list on
    either side is several runs of it, tested across runs. assume_noise_pct: the run-to-run noise (% of
    each figure) to judge by where there is no estimate of it (one run per side). decode_options apply to
    the buffers among them; refused when every one is a trace. jobs: worker processes analyzing the paths
    among them (default: the cores available, capped by their number; in this process when the files are
    small; 1: one after the other, in this process); the result is the same either way. on_done(done, total) as each capture is analyzed."""
    from .core.abrecord import find_record
    from .analysis.compare.ab_diff import with_record
    from .analysis.compare.diff import diff as _diff

    def runs(x) -> list:
        return list(x) if isinstance(x, (list, tuple)) else [x]

    sources = runs(before) + runs(after)
    buffer_options(sources, decode_options)
    load = partial(load_capture, engine=engine, **decode_options)
    paths = [i for i, s in enumerate(sources) if isinstance(s, (str, os.PathLike))]  # what a worker can open
    caps = dict(zip(paths, run_in_workers(load, [sources[i] for i in paths], jobs, on_done)))
    caps = [caps[i] if i in caps else load(s) for i, s in enumerate(sources)]
    b, a = caps[:len(runs(before))], caps[len(runs(before)):]
    result = _diff(b if isinstance(before, (list, tuple)) else b[0], a if isinstance(after, (list, tuple)) else a[0],
                   assume_noise_pct=assume_noise_pct)
    found = find_record(before, after)  # the two captures of an A/B session: its paired timing is the verdict
    return with_record(result, found) if found is not None else result


def check(source, book: RuleBook | list | str, *, baselines=(), engine: str = "auto", verify_sections: bool = True,
          allow_anomalies=frozenset(), **decode_options) -> Check:
    """Apply ``book``'s rules for the capture's kernel to ``source`` (a trace or a buffer, decoded with
    ``decode_options``), SQL rules on the same open trace (a buffer checked without SQL rules is analyzed
    as ``analyze`` does it: numpy, no trace processor). baselines: Captures (or paths) for ``baseline``
    rules, matched by kernel name. book: a RuleBook, a list of rule strings (``["compute.imbalance <= 1.2"]``)
    or a rules file path. InputError when no rule applies or a rule cannot be evaluated."""
    from .analysis import analyze_opened
    from .analysis.compare.catalog import Capture
    from .analysis.gates.checks import check_capture
    from .analysis.gates.rules import rule_book_of

    book = rule_book_of(book)
    buffer_options([source, *baselines], decode_options)
    baselines = [load_capture(b, engine=engine, **decode_options) for b in baselines]
    if not book.uses_sql and (engine == "numpy" or (engine == "auto" and not _is_trace_source(source))):
        cap = load_capture(source, engine=engine, **decode_options)  # figures only: a buffer's from numpy
        return check_capture(cap, book, baselines=baselines, source=cap.analysis.source,
                             verify_sections=verify_sections, allow_anomalies=allow_anomalies)
    with open_input(source, engine=engine, **decode_options) as inp:
        cap = Capture(analyze_opened(inp.session, name=inp.name), _timing(inp, decode_options))
        _refuse_unreadable(cap.analysis, source, decode_options)
        return check_capture(cap, book, baselines=baselines, session=inp.session, source=inp.name,
                             verify_sections=verify_sections, allow_anomalies=allow_anomalies)


def annotated_output(source) -> Path:
    """``dir/name.analyzed.perfetto-trace`` for ``dir/name.bin`` or ``dir/name.perfetto-trace``."""
    if isinstance(source, (str, Path)):
        p = Path(source)
        return p.with_name(p.name.split(".")[0] + ".analyzed.perfetto-trace")
    return Path("ktrace.analyzed.perfetto-trace")


@frozen
class AnnotatedTrace:
    """What ``annotate`` wrote: the trace (path, bytes; ``written`` False when the source already was an
    annotated trace, served as it is), the Analysis drawn in it, and ``focus``: [begin_ns, end_ns] of the top
    finding (the kernel when there is none), where a viewer should open."""

    path: Path
    bytes: int
    analysis: Analysis
    focus: tuple[int, int]
    written: bool = True
    summary: Summary | None = None  # the buffer's counts, when written from a buffer


_ANNOTATED_SQL = "SELECT COUNT(*) AS n FROM track WHERE name IN ('findings', 'critical path')"
_PHASE_SLICES_SQL = "SELECT phase, ts, end_ts FROM ktrace_phase_slice ORDER BY id"


def annotate(source, out=None, thresholds: Thresholds | dict | None = None, *, engine: str = "auto", tracks: str = "sm",
             progress=None, on_engine=None, shift_ns: int = 0, **decode_options) -> AnnotatedTrace:
    """Analyze ``source`` and write the trace with the analysis drawn on its timeline (docs/trace-format.md,
    "Annotations"): findings, the critical path, counters and the slices the findings name marked.

    source: a buffer (path, bytes, array, BufferDecoder; decoded with ``decode_options``, written in ``tracks``
    mode, flows and roles on the lane slices), a trace (copied, the annotations appended; an annotated trace is
    not written again) or a Decoded. out: default ``annotated_output(source)``. shift_ns: a buffer's trace is
    written with its times moved by as much (the Analysis and ``focus`` keep the buffer's). InputError as
    ``analyze``."""
    from .analysis import analyze_opened
    from .analysis.figures.sql.package import include_all
    from .decoding.align import shifted
    from .export.annotations import annotation_chunks, append_to, shift_annotations
    from .export.writer import trace_chunks, write_chunks
    from .report.trace_annotations import annotations_of

    buffer_options([source], decode_options)
    path = Path(out) if out is not None else annotated_output(source)
    check_output(path, [source, *_sidecar_given(decode_options)], "annotated trace", "--trace")
    if engine == "numpy" and _is_trace_source(source):
        raise InputError(f"{source}: --engine numpy needs the profiler buffer; a trace is analyzed by the trace "
                         "processor (--engine wasm or native)")
    with ExitStack() as stack:
        inp = stack.enter_context(open_input(source, need="decoder", **decode_options))
        dec = inp.decoder
        numpy_path = inp.kind == "decoded" or engine == "numpy" or (
            engine == "auto" and dec is not None and _annotate_numpy_path(engine, dec, on_engine))
        if numpy_path:  # figures from numpy (as analyze does for this input and engine)
            d = inp.decoded if inp.kind == "decoded" else dec.decode()
            a = analyze_opened(d, thresholds, name=inp.name)
            names = [d.launch.event_name(e) if e >= 0 else "finalize" for e in d.slices.event.tolist()]
            slices = {"phase": names, "ts": d.slices.begin_ns, "end_ts": d.slices.end_ns}
        else:
            name = inp.name
            inp = stack.enter_context(open_input(dec if dec is not None else source, engine=engine,
                                                 progress=progress, tracks=tracks))
            a = analyze_opened(inp.session, thresholds, name=name, progress=progress)
            if inp.kind == "trace" and int(inp.session.query(_ANNOTATED_SQL).rows[0][0] or 0):
                return AnnotatedTrace(Path(inp.trace), Path(inp.trace).stat().st_size, a, _focus(a), written=False)
            r = inp.session.query(include_all() + _PHASE_SLICES_SQL)
            slices = {c: r.column(c) for c in ("phase", "ts", "end_ts")}
        _refuse_unreadable(a, source, decode_options)
        shift_ns = 0 if inp.kind == "trace" else int(shift_ns)  # a trace's own slices stay: so do the annotations
        ann, got = shift_annotations(annotations_of(a, slices), shift_ns), []
        if inp.kind == "trace":
            chunks = append_to(inp.trace, annotation_chunks(ann, on_lanes=False))
        else:
            src = shifted(inp.decoded if inp.kind == "decoded" else dec, shift_ns)
            chunks = chain(trace_chunks(src, tracks, summary_out=got, marks=ann.marks),
                            annotation_chunks(ann, on_lanes=True))
        size = write_chunks(path, chunks)
    return AnnotatedTrace(path, size, a, _focus(a), summary=got[0] if got else None)


def _focus(a: Analysis) -> tuple[int, int]:
    from .report.trace_annotations import finding_span

    k = a.figures.kernel
    if a.findings:
        return finding_span(a.findings[0], a.figures)
    return int(k.begin_ns or 0), int(k.end_ns or 0)
