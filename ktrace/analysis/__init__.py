"""ktrace's analysis layer: the ``ktrace`` PerfettoSQL package, the numpy engine, and the method's verdicts.

    import ktrace
    a = ktrace.analyze("run.perfetto-trace")   # or a buffer path, a Decoded, an open engine Session
    for f in a.findings:
        print(f.severity, f.message)
    a.phases.imbalance                          # numpy columns, units in the names
    a.to_json()                                 # schema "ktrace.analysis/2" (docs/analysis-schema.md)

Figures come from the SQL package run by the trace processor (a trace, a buffer converted on the fly, or a
Session), or from the numpy engine (a buffer or a Decoded): the two are equal, figure for figure (tests
check it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core import jsonfmt
from ..core.lazy import lazy_names
from ..core.filetypes import TRACE_SUFFIXES
from ..core.progress import stage
from .model.thresholds import Thresholds
from ..core.records import frozen

if TYPE_CHECKING:
    from .model.data_quality import DataQuality
    from .findings.find import Finding
    from .model.results import CriticalPath, CriticalShares, Figures, Kernel, PhaseInstances, PhaseLanes, Phases, Waits

__all__ = [
    "analyze_opened",
    "Analysis",
    "ANALYSIS_SCHEMA",
    "TRACE_SUFFIXES",
    "Figures",
    "DataQuality",
    "Finding",
    "Thresholds",
    "Kernel",
    "Phases",
    "PhaseInstances",
    "PhaseLanes",
    "Waits",
    "CriticalPath",
    "CriticalShares",
    "numpy_figures",
    "stream_figures",
    "decoder_figures",
    "analyze_parts",
    "sql_figures",
    "sql_modules",
    "register",
    "bundle_sql",
    "format_ns",
]

# The names this package gives, each imported from its module on first use (PEP 562): importing
# ktrace.analysis.model.thresholds or .sql_package (what ``ktrace analyze --help`` lists) then costs no numpy.
_LAZY = {
    "DataQuality": "model.data_quality", "sql_figures": "figures.sql.reader",
    "Finding": "findings.find", "find": "findings.find", "format_ns": "findings.find", "tick_of": "findings.find",
    "numpy_figures": "figures.numpy.stream", "stream_figures": "figures.numpy.stream", "decoder_figures": "figures.numpy.stream", "bundle_sql": "figures.sql.package", "register": "figures.sql.package",
    "sql_modules": "figures.sql.package",
    **{name: "model.results" for name in ("CriticalPath", "CriticalShares", "Figures", "Kernel", "PhaseInstances",
                                    "PhaseLanes", "Phases", "Waits")},
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, lambda: __all__, globals())


ANALYSIS_SCHEMA = "ktrace.analysis/2"


@frozen(repr=False)
class Analysis:
    """What ``analyze`` found: the figures, the findings, and how they were computed. ``print(a)`` prints the
    report ``ktrace analyze`` prints; in Jupyter, ``a`` shows it as HTML.

    source: the trace or buffer analyzed; engine: 'wasm' or 'native' (SQL in the trace processor) or
    'numpy' (the numpy engine); tick_ns: the timer resolution the findings used.
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
    def accounted(self) -> dict:
        """How much of the wall the warnings account for (their impacts are disjoint parts of it, ns) and what
        remains unexplained."""
        wall = float(self.figures.kernel.wall_ns or 0)
        warned = float(sum(f.impact_ns for f in self.findings if f.severity == "warning"))
        return {"wall_ns": wall, "warnings_ns": warned, "unexplained_ns": max(wall - warned, 0.0),
                "warnings_share": warned / wall if wall else None}

    @property
    def slots(self) -> dict:
        """Occupancy by slots (analysis/slots.py): resident blocks per SM measured from the timeline, slots,
        waves in slots, slot time busy; {} without blocks of a known SM."""
        from .evidence.slots import slot_figures

        k = self.figures.kernel
        return slot_figures(self.figures.blocks, k.begin_ns, k.end_ns)

    @property
    def data_quality(self) -> DataQuality:
        """What the figures are missing (records lost, unpaired, overwritten, unreadable), from the launch facts,
        and the blocks of an unknown SM among blocks of known SMs, from the occupancy."""
        from .model.data_quality import data_quality

        o = self.figures.occupancy
        wall = float(self.figures.kernel.wall_ns or 0)
        if not len(o) or not o.row(0)["sms"]:
            return data_quality(self.figures.launch, wall)
        r = o.row(0)
        return data_quality(self.figures.launch, wall, int(r["unknown_sm_blocks"] or 0), int(r["blocks"]))

    @property
    def roofline(self):
        """The work against the device's peaks (analysis/model/roofline.py), or None when the launch facts give
        no work."""
        from .model.roofline import roofline_of

        return roofline_of(self.figures.launch, float(self.figures.kernel.wall_ns or 0))

    @property
    def occupancy(self) -> dict | None:
        """The launch shape (docs/analysis-structure.md), or None without phase slices."""
        o = self.figures.occupancy
        return o.row(0) if len(o) else None

    def to_dict(self) -> dict:
        """Plain JSON-ready values, schema ``ktrace.analysis/2`` (docs/analysis-schema.md)."""
        return self._dict(lambda t: t.rows())

    def _dict(self, rows) -> dict:
        """to_dict(), each table's rows as ``rows(table)`` gives them."""
        f = self.figures
        return {
            "schema": ANALYSIS_SCHEMA,
            "source": self.source,
            "engine": self.engine,
            "launch": dict(f.launch),
            "kernel": f.kernel.to_dict(),
            "thresholds": self.thresholds.to_dict(),
            "tick_ns": self.tick_ns,
            "data_quality": self.data_quality.to_dict(),
            "slots": self.slots or None,
            "roofline": self.roofline.to_dict() if self.roofline is not None else None,
            "accounted": self.accounted,
            "wait_causes": rows(f.wait_causes),
            "findings": [x.to_dict() for x in self.findings],
            "phases": rows(f.phases),
            "instances": rows(f.instances),
            "lanes": rows(f.lanes),
            "waits": rows(f.waits),
            "occupancy": f.occupancy.rows()[0] if len(f.occupancy) else None,
            "blocks": rows(f.blocks),
            "lane_totals": rows(f.lane_totals),
            "busy_sms": rows(f.busy_sms),
            "critical_path": {"coverage": f.critical_shares.coverage(f.kernel.wall_ns),
                              "steps": rows(f.critical_path), "shares": rows(f.critical_shares)},
        }

    def to_json(self, indent: int | None = 2, jobs=1) -> str:
        """``to_dict()`` as JSON text (NaN never appears: undefined figures are null). jobs: worker processes
        that write the long tables side by side, or the command's ``runtime.Parallelism`` (the same text for
        any number)."""
        if indent is None:
            return jsonfmt.dumps(self.to_dict(), indent=None, ensure_ascii=False, allow_nan=False)
        # The same text, each table's rows written a column at a time (Table.json_rows).
        tables: list = []
        self._dict(tables.append)
        from .model.table import json_rows_of

        written = dict(zip(map(id, tables), json_rows_of(tables, jobs)))
        return jsonfmt.dumps(self._dict(lambda t: written[id(t)]), indent=indent, ensure_ascii=False,
                             allow_nan=False)

    def __str__(self) -> str:
        """The text report, as ``ktrace analyze`` prints it (the facade registers it: ktrace/__init__.py)."""
        from ..core.lazy import text_of

        return text_of(self)

    def __repr__(self) -> str:
        warn = sum(f.severity == "warning" for f in self.findings)
        return (f"<Analysis of {self.source!r} ({self.engine}): {self.figures.kernel.phases} phase(s), "
                f"{warn} warning(s), {len(self.findings) - warn} info; print() it for the report>")

    def _repr_html_(self) -> str:
        """Jupyter's rich display: the headline, the warnings with evidence and impact; the info findings and the
        phase table folded."""
        from .findings.headlines import analysis_html

        return analysis_html(self)


def analyze_opened(source, thresholds: Thresholds | None = None, *, name: str | None = None,
                   upid: int | None = None, summary=None, progress=None) -> Analysis:
    """The Analysis of an opened input: a ``Decoded`` (figures from the numpy engine) or an open engine
    Session (figures from the SQL package, registered on it; upid: only that process's slices, one GPU of a
    merged trace). name: the source the result names (default: the Decoded's source, the Session's trace);
    summary: the buffer's Summary when the Decoded holds only its slices (``numpy_figures``); progress: told
    of each SQL module as it runs (``ktrace.core.progress``).
    Any other input goes through ``ktrace.analyze``."""
    from ..core.model import Decoded

    th = Thresholds.of(thresholds)
    if isinstance(source, Decoded):
        from .figures.numpy.stream import numpy_figures

        return _finish(name or str(source.source), "numpy", numpy_figures(source, summary), th)
    from .figures.sql.reader import sql_figures

    return _finish(name or source.trace_name, source.engine_name, sql_figures(source, upid=upid, progress=progress), th)


def analyze_parts(dec, thresholds: Thresholds | None = None, *, name: str, progress=None, jobs=1) -> Analysis:
    """The Analysis of a buffer from its decoded parts (dec: a BufferDecoder, decoded a range of lanes at a
    time), in memory bounded by a few narrow columns per slice (``stream_figures``: the figures equal
    ``numpy_figures``' of the whole buffer). jobs: worker processes decoding and reducing ranges of lanes
    side by side, or the command's ``runtime.Parallelism`` (the figures are the same for any number).
    progress(done_lanes, lanes) after each range."""
    th = Thresholds.of(thresholds)
    stage(progress, "decoding the buffer", dec.lanes, "lanes")
    on_part = None if progress is None else (lambda lanes: progress(lanes[1], dec.lanes))
    from .figures.numpy.stream import decoder_figures

    fig = decoder_figures(dec, jobs=jobs, progress=progress, on_part=on_part)
    return _finish(name, "numpy", fig, th)


def _finish(source: str, engine: str, fig: Figures, th: Thresholds) -> Analysis:
    from .findings.find import find, tick_of

    return Analysis(source=source, engine=engine, figures=fig, findings=find(fig, th), thresholds=th,
                    tick_ns=tick_of(fig, th))
