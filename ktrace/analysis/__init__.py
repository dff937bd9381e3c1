"""ktrace's analysis layer: the ``ktrace`` PerfettoSQL package, its numpy oracle, and the method's verdicts.

    from ktrace.analysis import analyze
    a = analyze("run.perfetto-trace")          # or a buffer path, a Decoded, an open engine Session
    for f in a.findings:
        print(f.severity, f.message)
    a.phases.imbalance                          # numpy columns, units in the names
    a.to_json()                                 # schema "ktrace.analysis/2" (docs/analysis-schema.md)

Figures come from the SQL package run by the trace processor (a trace, a buffer converted on the fly, or a
Session), or from the numpy oracle (a Decoded): the two are equal, figure for figure (tests check it).
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..model import Decoded
from .figures import sql_figures
from .findings import Finding, Thresholds, find, format_ns, tick_of
from .oracle import oracle_figures
from .results import (CriticalPath, CriticalShares, Figures, Kernel, PhaseInstances, PhaseLanes, Phases,
                      Waits)
from .sql_package import bundle_sql, register, sql_modules

__all__ = [
    "analyze",
    "Analysis",
    "ANALYSIS_SCHEMA",
    "TRACE_SUFFIXES",
    "Figures",
    "Finding",
    "Thresholds",
    "Kernel",
    "Phases",
    "PhaseInstances",
    "PhaseLanes",
    "Waits",
    "CriticalPath",
    "CriticalShares",
    "oracle_figures",
    "sql_figures",
    "sql_modules",
    "register",
    "bundle_sql",
    "is_trace_path",
    "temporary_trace",
    "format_ns",
]

ANALYSIS_SCHEMA = "ktrace.analysis/2"
TRACE_SUFFIXES = (".perfetto-trace", ".pftrace")


@dataclass(frozen=True)
class Analysis:
    """What ``analyze`` found: the figures, the findings, and how they were computed.

    source: the trace or buffer analyzed; engine: 'wasm' or 'native' (SQL in the trace processor) or
    'oracle' (numpy); tick_ns: the timer resolution the findings used.
    """

    source: str
    engine: str
    figures: Figures
    findings: tuple[Finding, ...]
    thresholds: Thresholds
    tick_ns: float

    @property
    def launch(self) -> dict:
        return self.figures.launch

    @property
    def kernel(self) -> Kernel:
        return self.figures.kernel

    @property
    def phases(self) -> Phases:
        return self.figures.phases

    @property
    def instances(self) -> PhaseInstances:
        return self.figures.instances

    @property
    def lanes(self) -> PhaseLanes:
        return self.figures.lanes

    @property
    def waits(self) -> Waits:
        return self.figures.waits

    @property
    def critical_path(self) -> CriticalPath:
        return self.figures.critical_path

    @property
    def critical_shares(self) -> CriticalShares:
        return self.figures.critical_shares

    @property
    def occupancy(self) -> dict | None:
        """The launch shape (docs/analysis-structure.md), or None without phase slices."""
        o = self.figures.occupancy
        return o.row(0) if len(o) else None

    def to_dict(self) -> dict:
        """Plain JSON-ready values, schema ``ktrace.analysis/2`` (docs/analysis-schema.md)."""
        f = self.figures
        return {
            "schema": ANALYSIS_SCHEMA,
            "source": self.source,
            "engine": self.engine,
            "launch": dict(f.launch),
            "kernel": f.kernel.to_dict(),
            "thresholds": self.thresholds.to_dict(),
            "tick_ns": self.tick_ns,
            "findings": [x.to_dict() for x in self.findings],
            "phases": f.phases.rows(),
            "instances": f.instances.rows(),
            "lanes": f.lanes.rows(),
            "waits": f.waits.rows(),
            "occupancy": f.occupancy.rows()[0] if len(f.occupancy) else None,
            "blocks": f.blocks.rows(),
            "lane_totals": f.lane_totals.rows(),
            "busy_sms": f.busy_sms.rows(),
            "critical_path": {"coverage": f.critical_shares.coverage(f.kernel.wall_ns),
                              "steps": f.critical_path.rows(), "shares": f.critical_shares.rows()},
        }

    def to_json(self, indent: int | None = 2) -> str:
        """``to_dict()`` as JSON text (NaN never appears: undefined figures are null)."""
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, allow_nan=False)


def is_trace_path(path) -> bool:
    """True for a Perfetto trace path (.perfetto-trace, .pftrace, optionally .gz); else it is a buffer."""
    name = str(path).lower()
    if name.endswith(".gz"):
        name = name[:-3]
    return name.endswith(TRACE_SUFFIXES)


def analyze(source, thresholds: Thresholds | None = None, *, engine: str = "auto", progress=None,
            **decode_options) -> Analysis:
    """Analyze a kernel capture: per-phase figures and the method's findings.

    source: a trace path (.perfetto-trace / .pftrace): figures from the SQL package in the trace processor;
    a profiler buffer path (anything else): decoded with ``decode_options`` (events, groups, layout,
    sidecar, num_blocks, num_groups), written to a temporary trace and analyzed the same way; an open
    engine Session: the SQL package is registered on it; a ``Decoded``: figures from the numpy oracle.
    engine: 'auto', 'wasm' or 'native' (see ktrace.engine.open_trace).

    Raises InputError for unreadable input, EnvironmentMissing when the engine cannot start.
    """
    th = thresholds or Thresholds()
    if isinstance(source, Decoded):
        return _finish(str(source.source), "oracle", oracle_figures(source), th)
    if hasattr(source, "query") and hasattr(source, "add_sql_package"):
        return _finish(source.trace_name, source.engine_name, sql_figures(source), th)
    if not isinstance(source, (str, os.PathLike)):
        raise InputError(f"analyze() takes a trace or buffer path, a Decoded or a Session, not "
                         f"{type(source).__name__}")
    if is_trace_path(source):
        if decode_options:
            raise InputError(f"{source}: decoding options ({', '.join(decode_options)}) apply to buffers, "
                             "not traces")
        return _from_trace(source, str(source), th, engine, progress)
    with temporary_trace(source, **decode_options) as trace:
        return _from_trace(trace, str(source), th, engine, progress)


@contextmanager
def temporary_trace(buffer, **decode_options):
    """A profiler buffer converted to a trace in a temporary directory (removed on exit): yields its path.

    Decoded a range of lanes at a time, as ``ktrace convert`` does; decode_options as for ``decode``.
    """
    from ..decoding import BufferDecoder
    from ..export.writer import write_trace

    decoder = BufferDecoder(buffer, **decode_options)
    with tempfile.TemporaryDirectory(prefix="ktrace-") as tmp:
        trace = Path(tmp) / (Path(str(buffer)).stem + ".perfetto-trace")
        write_trace(decoder, trace)
        yield trace


def _from_trace(trace, name: str, th: Thresholds, engine: str, progress) -> Analysis:
    from ..engine import open_trace

    with open_trace(trace, engine=engine, progress=progress) as session:
        return _finish(name, session.engine_name, sql_figures(session), th)


def _finish(source: str, engine: str, fig: Figures, th: Thresholds) -> Analysis:
    return Analysis(source=source, engine=engine, figures=fig, findings=find(fig, th), thresholds=th,
                    tick_ns=tick_of(fig, th))
