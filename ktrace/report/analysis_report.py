"""What ``ktrace analyze`` shows: text (rich renderables), Markdown (for PR comments) and a PNG plot.

The short report first: one line for the kernel and its launch shape, data quality, each warning as a headline
in plain words (analysis/headlines.py) with its stake, the one thing to do and its evidence (wrapped, never cut),
then one line saying what else there is. ``details`` adds each finding in full and the tables (phases, waits,
the critical path, instances per phase), each fitted to the terminal by dropping columns in a stated order.
Nothing here computes a figure; it only lays them out. The words are docs/glossary.md's. The plot is
analysis_plot.py's.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

import numpy as np

from ..analysis import Analysis
from ..analysis.findings.find import format_ns
from ..analysis.findings.headlines import Vocabulary, headline, roofline_line, stake_text as _stake, title_line
from .analysis_plot import plot_analysis  # noqa: F401  (ktrace analyze --plot)
from .safe_text import md_cell, md_code, md_text, printable

__all__ = ["analysis_text", "analysis_markdown", "plot_analysis", "quality_lines", "sampled_line", "MAX_INSTANCE_ROWS"]

MAX_INSTANCE_ROWS = 16  # per phase; longer tables show the first and last rows (the JSON has all)
_HEAD, _TAIL = 10, 4


def _ratio(x) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}x"


def _share(x) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.0%}"


def quality_lines(a: Analysis) -> list[str]:
    """The data-quality warnings (records lost, unpaired, overwritten, unreadable), each a sentence with its
    counts, then the phases' missing names; empty when every record is in the figures, under its name (or
    nothing is known of them)."""
    unnamed = unnamed_phases_line(a)
    return list(a.data_quality.warnings) + ([unnamed] if unnamed else [])


def _quality_title(a: Analysis) -> str:
    return "not every record is in the figures" if a.data_quality.warnings else "the phases have no names"


_DEFAULT_PHASE = re.compile(r"event_\d+")  # core.model's name of an event no sidecar or --events names


def unnamed_phases_line(a: Analysis) -> str | None:
    """Where no phase has a name (no launch sidecar beside the buffer, or one without event names, and no
    --events), one line that says so: the phases are then event_0, event_1, ... by index, which a reader would
    otherwise take for the kernel's own names. None where any phase is named."""
    names = [str(p) for p in a.phases.phase]
    if not names or not all(_DEFAULT_PHASE.fullmatch(n) for n in names):
        return None
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return (f"the phases are named by event index ({shown}): no launch sidecar with event names beside the "
            "capture (NAME.json beside NAME.bin, docs/sidecar.md) and no --events; give --events NAMES (in "
            "index order) or --sidecar JSON")


def _thresholds_line(a: Analysis) -> str:
    shown = {n: (f"{v:g}" if (n != "tick_ns" or v) else f"auto ({a.tick_ns:.0f})")
             for n, v in a.thresholds.to_dict().items()}
    return "thresholds: " + " ".join(f"{n}={v}" for n, v in shown.items()) + \
        " (change with --threshold NAME=VALUE)"


def _unit(values) -> tuple[float, str]:
    """(divisor, name) so that the largest of ``values`` (ns) reads well: ns, µs or ms."""
    finite = [abs(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    top = max(finite, default=0)
    return (1.0, "ns") if top < 1e4 else (1e3, "µs") if top < 1e7 else (1e6, "ms")


def _num(v, div: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return f"{v:,.0f}" if div == 1.0 else f"{v / div:,.2f}"


def _shares(a: Analysis) -> dict:
    c = a.critical_shares
    return {p: sh for p, sh, part in zip(c.phase.tolist(), c.share.tolist(), c.part.tolist()) if part == "phase"}


_PART_NAMES = {"lead_in": "(lead-in before the path's first slice)", "lane_gap": "(gaps on the path's lanes)",
               "block_switch": "(waiting for an SM slot: waves)"}


def _occupancy_line(a: Analysis) -> str | None:
    if not len(a.figures.occupancy):
        return None
    o = a.figures.occupancy.row(0)
    k = a.kernel
    if not o["sms"]:
        return f"launch shape: {o['blocks']} blocks, SM ids unknown; at most {o['max_resident']} blocks at once"
    tail = ""
    if o["tail_ns"] and k.wall_ns:
        tail = (f"; tail {format_ns(o['tail_ns'])} ({o['tail_ns'] / k.wall_ns:.0%} of wall) from "
                f"+{format_ns(o['tail_begin_ns'] - k.begin_ns)}")
    s = a.slots
    slots = (f"{s['resident_per_sm']} resident per SM ({s['slots']} slots), {s['waves']:.2f} waves in slots, slots busy "
             f"{s['slot_busy_fraction']:.0%} of the wall" if s else f"{o['waves']:.2f} waves")
    return (f"launch shape: {o['sms']} SMs, {o['blocks']} blocks, {slots}, SMs busy "
            f"{o['sm_busy_fraction']:.0%} of the wall{tail}; block {o['last_block']} ends the kernel "
            f"(began +{format_ns(o['last_block_begin_ns'] - k.begin_ns)}, ran {format_ns(o['last_block_dur_ns'])}, "
            f"median block {format_ns(o['median_block_dur_ns'])})")


def _accounted_line(a: Analysis) -> str:
    c = a.accounted
    return (f"the warnings account for {format_ns(c['warnings_ns'])} ({c['warnings_share']:.0%} of the wall; their "
            f"impacts are disjoint parts of the critical path); {format_ns(c['unexplained_ns'])} is not explained "
            "by a warning")


def _shown_findings(a: Analysis, show_all: bool):
    shown = [f for f in a.findings if show_all or f.severity == "warning"]
    return shown, len(a.findings) - len(shown)


def _impact_text(f) -> str:
    share = f" ({f.impact_share:.1%} of wall)" if f.impact_share is not None else ""
    return f"impact {format_ns(f.impact_ns)}{share}; evidence: {f.evidence}"


def _phase_summary_rows(a: Analysis) -> tuple[list[str], list[list[str]]]:
    rows_in = a.phases.rows()
    times = ("mean_max_dur_ns", "mean_dur_ns", "mean_excess_ns", "mean_start_skew_ns", "mean_end_skew_ns")
    div, u = _unit([p[c] for p in rows_in for c in times])
    head = ["phase", "groups", "inst.", f"slowest ({u})", f"mean ({u})", "imbalance", "worst inst.",
            f"excess ({u})", f"start skew ({u})", f"end skew ({u})", "last block: in n/inst. (distinct)",
            "crit. path"]
    shares = _shares(a)
    rows = []
    for p in rows_in:
        rows.append([p["phase"], p["groups"], str(p["instances"]), _num(p["mean_max_dur_ns"], div),
                     _num(p["mean_dur_ns"], div), _ratio(p["imbalance"]), _ratio(p["max_imbalance"]),
                     _num(p["mean_excess_ns"], div), _num(p["mean_start_skew_ns"], div),
                     _num(p["mean_end_skew_ns"], div),
                     f"{p['top_last_block']}: {p['top_last_count']}/{p['instances']} ({p['distinct_last_blocks']})",
                     _share(shares.get(p["phase"]))])
    return head, rows


def _instance_rows(a: Analysis, phase: str) -> tuple[list[str], list[list[str]], int]:
    t = a.instances
    idx = np.flatnonzero(t.phase == phase)
    times = ("min_dur_ns", "p50_dur_ns", "p90_dur_ns", "max_dur_ns", "mean_dur_ns", "wall_ns", "excess_ns",
             "start_skew_ns", "end_skew_ns")
    div, u = _unit([float(getattr(t, c)[idx].max()) for c in times if len(idx)])
    head = ["k", "lanes", f"min ({u})", f"p50 ({u})", f"p90 ({u})", f"max ({u})", f"mean ({u})", "imbalance",
            f"wall ({u})", f"excess ({u})", f"start skew ({u})", f"end skew ({u})", "last: block/group/SM", "tied"]
    shown = idx if len(idx) <= MAX_INSTANCE_ROWS else np.r_[idx[:_HEAD], -1, idx[-_TAIL:]]
    rows = []
    for i in shown.tolist():
        if i < 0:
            rows.append(["…"] * len(head))
            continue
        r = t.row(i)
        rows.append([str(r["k"]), str(r["lanes"])] + [_num(r[c], div) for c in times[:5]] +
                    [_ratio(r["imbalance"])] + [_num(r[c], div) for c in times[5:]] +
                    [f"{r['last_block']}/{r['last_group']}/{r['last_sm']}",
                     "" if r["tied_last_lanes"] <= 1 else str(r["tied_last_lanes"])])
    return head, rows, len(idx)


def _wait_rows(a: Analysis) -> tuple[list[str], list[list[str]]]:
    rows_in = a.waits.rows()
    div, u = _unit([w[c] for w in rows_in for c in ("mean_ns", "p90_ns", "max_ns")])
    head = ["boundary", "waits", f"mean ({u})", f"p50 ({u})", f"p90 ({u})", f"max ({u})", "longest at",
            f"total ({u})"]
    rows = [[f"{w['phase']} -> {w['next_phase']}", f"{w['count']:,}", _num(w["mean_ns"], div),
             _num(w["p50_ns"], div), _num(w["p90_ns"], div), _num(w["max_ns"], div),
             f"block {w['max_block']} group {w['max_group']} k={w['max_k']}", _num(w["sum_ns"], div)]
            for w in rows_in]
    return head, rows


def _critical_rows(a: Analysis) -> tuple[list[str], list[list[str]]]:
    rows_in = a.critical_shares.rows()
    div, u = _unit([c["total_ns"] for c in rows_in])
    head = ["part", "slices", f"slices ({u})", f"waits after them ({u})", f"total ({u})", "share of wall"]
    rows = [[c["phase"] if c["part"] == "phase" else _PART_NAMES.get(c["part"], c["part"]),
             str(c["instances"]) if c["part"] == "phase" else "", _num(c["dur_ns"], div),
             _num(c["wait_ns"], div), _num(c["total_ns"], div), _share(c["share"])] for c in rows_in]
    return head, rows


def _critical_title(a: Analysis) -> str:
    cov = a.critical_shares.coverage(a.kernel.wall_ns)
    cov = f"; coverage {cov:.0%}" if cov is not None else ""
    return ("critical path (backward from the kernel's end through what each slice waited for; the parts tile "
            f"the wall{cov})")


# ------------------------------------------------------------------------------------------ short report
MAX_SHORT_WARNINGS = 5  # the short report's warnings; more are counted on the last line (--details has all)


def _vocab(a: Analysis) -> Vocabulary:
    return Vocabulary.of(a)


def _warnings_line(a: Analysis, warnings) -> str:
    if not warnings:
        return "no warnings: nothing costs the kernel enough time to act on"
    c = a.accounted
    share = f" ({c['warnings_share']:.0%} of the wall)" if c["warnings_share"] is not None else ""
    n = len(warnings)
    return f"{n} warning{'' if n == 1 else 's'}, {format_ns(c['warnings_ns'])} at stake{share}:"


def sampled_line(a: Analysis) -> str | None:
    """Where the wait evidence read a sample of the blocks (beyond EVIDENCE_MAX_SLICES top-level slices, on
    either engine: evidence/in_parts.py), one line that says so; None where it read every slice."""
    from ..analysis.evidence.in_parts import EVIDENCE_MAX_SLICES

    w = a.figures.wait_causes
    tested, total = int(np.sum(w.tested_gaps)), int(np.sum(w.count))
    if tested >= total:
        return None
    return (f"wait evidence: a sample of the blocks ({tested:,} of {total:,} waits tested: over "
            f"{EVIDENCE_MAX_SLICES:,} top-level slices); the counts, sums and longest waits are of every slice; "
            "the stakes are the critical path's, not replayed")


def _more_line(a: Analysis, show_all: bool, details: bool, hidden_warnings: int, python: bool = False) -> str | None:
    infos = sum(f.severity != "warning" for f in a.findings)
    if python:  # print(a) in Python: what to read on the object, not the command's flags
        return _python_more_line(a, infos, hidden_warnings)
    more = []
    if hidden_warnings:
        more.append(f"--details for {hidden_warnings} more warning{'' if hidden_warnings == 1 else 's'}, the tables "
                    "and each finding in full")
    elif not details:
        more.append("--details for the tables and each finding in full")
    if infos and not show_all:
        more.append(f"--all for {infos} info finding{'' if infos == 1 else 's'}")
    return "more: " + ", ".join(more) if more else None


def _python_more_line(a: Analysis, infos: int, hidden_warnings: int) -> str:
    found = (f"a.findings for {hidden_warnings} more warning{'' if hidden_warnings == 1 else 's'} and each "
             "finding in full" if hidden_warnings else "a.findings for each finding in full")
    if infos:
        found += f" ({infos} info finding{'' if infos == 1 else 's'} too: severity 'info')"
    return f"more: {found}; a.phases, a.waits, a.critical_path and a.instances for the tables; ktrace.plot(a)"


_UNIT = re.compile(r"(\d) (ns|µs|us|ms|s|SMs|blocks|slots|of|x)\b")


class Prose:
    """A paragraph wrapped at the width it is drawn at, between words only (a number is never split across
    lines), never cut: the first line after ``first``, the others after ``indent``. Measured as its longest
    word, so a pipe's console keeps its text width."""

    def __init__(self, text: str, first: str = "", indent: str = "", style: str = "",
                 first_style: str | None = None) -> None:
        self.text, self.first, self.indent, self.style = printable(text), first, indent, style
        self.first_style = first_style

    def lines(self, width: int) -> list[str]:
        import textwrap

        width = max(width, len(self.indent) + 20)
        glued = _UNIT.sub("\\1\0\\2", self.text)  # a number keeps its unit on its line
        out = [line.replace("\0", " ") for line in textwrap.wrap(
            glued, width, initial_indent=self.first, subsequent_indent=self.indent, break_long_words=False,
            break_on_hyphens=False)] or [self.first.rstrip()]
        return out

    def __rich_console__(self, console, options):
        from rich.text import Text

        for i, line in enumerate(self.lines(options.max_width)):
            t = Text(line, style=self.style, no_wrap=False)
            if i == 0 and self.first_style:
                t.stylize(self.first_style, 0, len(self.first))
            yield t

    def widest(self) -> int:
        """Its longest word after the indent: the narrowest it can be drawn (a pipe's console measures it so)."""
        return len(self.indent) + max(map(len, self.text.split() or [""]))

    def __rich_measure__(self, console, options):
        from rich.measure import Measurement

        n = self.widest()
        return Measurement(n, n)


class _Line(NamedTuple):
    """One line of text and its style (a rich Text where rich draws it): the short report is built of these
    and Prose, so that a stream without colour gets it without importing rich (short_lines)."""

    text: str
    style: str = ""


def _short(a: Analysis, show_all: bool, details: bool, python: bool = False) -> list:
    """The short report as rich renderables (_short_items')."""
    from rich.text import Text

    return [Text(x.text, style=x.style) if isinstance(x, _Line) else x
            for x in _short_items(a, show_all, details, python)]


def short_lines(a: Analysis, show_all: bool, width: int | None, min_width: int) -> list[list[str]] | None:
    """The short report (no ``details``) as the lines a console without colour prints, item by item (a
    paragraph's lines together, as one ``print`` writes them): every line at ``width`` (None: a line at
    ``min_width``, a paragraph at least as wide as its longest word, as a pipe's console draws them). None where
    a line would be wider than that, or holds characters other than printable ASCII, µ and …: rich draws those
    (its wrapping, its character widths) through analysis_text."""
    out = []
    for x in _short_items(a, show_all, False):
        if isinstance(x, _Line):
            w, lines = width or min_width, [x.text]
        else:
            w = width or max(min_width, x.widest())
            lines = x.lines(w)
        if any(len(line) > w or not _PLAIN.fullmatch(line) for line in lines):
            return None
        out.append(lines)
    if not len(a.phases):
        out.append(["no phase slices in this trace"])
    return out


_PLAIN = re.compile("[ -~µ…]*")  # printable ASCII, µ and …


def _short_items(a: Analysis, show_all: bool, details: bool, python: bool = False) -> list:
    """The first screen: the kernel's line, data quality, each warning's headline with its stake, the one
    thing to do and its evidence (wrapped, never cut), then what else there is (``python``: as the Analysis'
    attributes, for print() in Python, instead of the command's flags): Prose and _Line."""
    v = _vocab(a)
    out: list = [Prose(title_line(a), style="bold", indent="  ")]
    if a.launch.get("producer") == "proton":
        out.append(Prose(f"clock: {a.launch.get('time_origin', '')}", indent="  "))
    if roofline_line(a):
        out.append(Prose(roofline_line(a), indent="  "))
    quality = quality_lines(a)
    if quality:
        out.append(_Line(f"data quality: {_quality_title(a)}", style="bold red"))
        out += [Prose(q, first="  ! ", indent="    ", style="yellow") for q in quality]
    warnings = [f for f in a.findings if f.severity == "warning"]
    shown = warnings if details else warnings[:MAX_SHORT_WARNINGS]
    out.append(_Line(_warnings_line(a, warnings), style="bold" if warnings else "green"))
    for i, f in enumerate(shown, 1):
        h = headline(f, v)
        num = f"{i:>2}. "
        out.append(Prose(h.text, first=num, indent="    ", style="bold yellow"))
        out.append(Prose(_stake(f) + (f"; do: {h.action}" if h.action else ""), first="    ", indent="    "))
        if h.evidence:
            out.append(Prose(f"evidence: {h.evidence}", first="    ", indent="    ", style="dim"))
    if show_all:
        infos = [f for f in a.findings if f.severity != "warning"]
        if infos:
            out.append(_Line(f"{len(infos)} info finding{'' if len(infos) == 1 else 's'} (not warnings, each "
                             "says why):", style="bold"))
        for f in infos:
            h = headline(f, v)
            out.append(Prose(f"{h.text} ({_stake(f)})", first="  - ", indent="    ", style="cyan"))
    sampled = sampled_line(a)
    if sampled:
        out.append(Prose(sampled, indent="  ", style="dim"))
    more = _more_line(a, show_all, details, len(warnings) - len(shown), python)
    if more:
        out.append(Prose(more, indent="  ", style="dim"))
    return out


# ------------------------------------------------------------------------------------------------ details
# Where the timer tick came from (Kernel.tick_source), in the glossary's words (docs/glossary.md, tick).
_TICK_SOURCES = {"launch": "the launch's timer",
                 "smallest step": "the smallest difference between slice durations or a lane's records",
                 "default": "the default: no finer difference in the trace"}


def _tick_line(a: Analysis) -> str:
    source = "--threshold tick_ns" if a.thresholds.tick_ns else _TICK_SOURCES.get(a.kernel.tick_source,
                                                                                   a.kernel.tick_source)
    return (f"timer tick {a.tick_ns:.0f} ns ({source}): differences under {a.thresholds.min_ticks:g} ticks are not "
            "findings")


def _details(a: Analysis, show_all: bool) -> list:
    from rich.text import Text

    out: list = [Text("details", style="bold underline")]
    shape = _occupancy_line(a)
    if shape:
        out.append(Prose(shape, indent="  "))
    out.append(Prose(_tick_line(a), indent="  ", style="dim"))
    out.append(Prose(_thresholds_line(a), indent="  ", style="dim"))
    out.append(Text("findings in full (by kernel time at stake)", style="bold"))
    for f in (a.findings if show_all else [f for f in a.findings if f.severity == "warning"]):
        out.append(Prose(f.message, first=f"  {f.severity:<8}", indent="    "))
        out.append(Prose(_impact_text(f), first="    ", indent="    ", style="dim"))
    if a.accounted["wall_ns"] and any(f.severity == "warning" for f in a.findings):
        out.append(Prose(_accounted_line(a), first="  ", indent="  ", style="dim"))
    if not len(a.phases):
        out.append(Text("no phase slices in this trace", style="yellow"))
        return out
    out.append(FittedTable("phases (means over instances)", *_phase_summary_rows(a), drop=_PHASE_DROP))
    if len(a.waits):
        out.append(FittedTable("waits (gap from a slice's end to the next slice on its lane)", *_wait_rows(a),
                               drop=_WAIT_DROP))
    out.append(FittedTable(_critical_title(a), *_critical_rows(a), drop=_CRITICAL_DROP))
    for phase in a.phases.phase.tolist():
        head, rows, n = _instance_rows(a, phase)
        caption = None if n <= MAX_INSTANCE_ROWS else f"{n} instances; --json has all of them"
        out.append(FittedTable(f"{phase}: instances", head, rows, caption, drop=_INSTANCE_DROP))
    return out


def analysis_text(a: Analysis, show_all: bool = False, details: bool = False, python: bool = False) -> list:
    """Rich renderables: the short report (the kernel's line, each warning's headline, stake, action and
    evidence, what else there is); ``details``: then the launch shape, thresholds, each finding in full and the
    tables (phases, waits, critical path, instances), each fitted to the width it is drawn at; ``show_all``:
    info findings too; ``python``: what else there is said as the Analysis' attributes (print(a)), not flags."""
    out = _short(a, show_all, details, python)
    if details:
        out += _details(a, show_all)
    elif not len(a.phases):
        from rich.text import Text

        out.append(Text("no phase slices in this trace", style="yellow"))
    return out


# ----------------------------------------------------------------------------------------------- tables
# The order in which a table too wide for the terminal drops its columns (by position), the least needed
# first; the first column (what the row is) and the figures a finding rests on stay longest.
_PHASE_DROP = (6, 9, 8, 1, 7, 2, 4, 10)      # worst inst., end skew, start skew, groups, excess, inst., mean, last
_INSTANCE_DROP = (13, 2, 3, 4, 10, 11, 1, 6, 9, 8, 12)  # tied, min, p50, p90, skews, lanes, mean, excess, wall, last
_WAIT_DROP = (3, 4, 6, 1, 7)                  # p50, p90, longest at, waits, total
_CRITICAL_DROP = (1, 3, 2)                    # slices, waits after them, slices' time


class FittedTable:
    """A table that fits the width it is drawn at: columns go in ``drop`` order (positions) until no cell has
    to split a word (a number is never split); the caption names what went (--details --json has all).
    Measured at its full width, so a pipe without $COLUMNS shows every column."""

    def __init__(self, title: str, head: list[str], rows: list[list[str]], caption: str | None = None,
                 drop: tuple = ()) -> None:
        self.title, self.head, self.rows, self.caption, self.drop = title, head, rows, caption, drop

    def table(self, keep: list[int] | None = None, widths: list[int] | None = None):
        keep = list(range(len(self.head))) if keep is None else keep
        gone = [self.head[i] for i in range(len(self.head)) if i not in keep]
        caption = self.caption
        if gone:
            note = "not shown for width: " + ", ".join(gone) + " (a wider terminal, or --json)"
            caption = f"{caption}; {note}" if caption else note
        t = rich_table(self.title, [self.head[i] for i in keep], [[r[i] for i in keep] for r in self.rows], caption)
        for c, w in zip(t.columns, widths or ()):
            c.width = w
        return t

    def _span(self, i: int) -> tuple[int, int]:
        """Column i's narrowest width that splits no word of its header or cells, and its full width."""
        cells = [self.head[i], *(printable(r[i]) for r in self.rows)]
        return (max(len(w) for c in cells for w in (c.split() or [""])), max(map(len, cells)))

    def _widths(self, keep: list[int], room: int) -> list[int] | None:
        """Column widths that fit ``room`` characters of cells: each column at most its full width, the widest
        narrowed first, none below its longest word; None when even that does not fit."""
        spans = [self._span(i) for i in keep]
        if sum(lo for lo, _ in spans) > room:
            return None
        lo_cap, hi_cap = 0, max(hi for _, hi in spans)
        while lo_cap < hi_cap:  # the largest cap whose widths fit
            cap = (lo_cap + hi_cap + 1) // 2
            if sum(max(lo, min(hi, cap)) for lo, hi in spans) <= room:
                lo_cap = cap
            else:
                hi_cap = cap - 1
        return [max(lo, min(hi, lo_cap)) for lo, hi in spans]

    def __rich_measure__(self, console, options):
        from rich.measure import Measurement

        return Measurement.get(console, options, self.table())

    def __rich_console__(self, console, options):
        from rich.measure import Measurement

        wide = options.update_width(1 << 16)
        keep = list(range(len(self.head)))
        for i in (None, *self.drop):
            if i is not None and i in keep:
                keep.remove(i)
            spans = [self._span(j) for j in keep]
            full = Measurement.get(console, wide, self.table(keep)).maximum
            widths = self._widths(keep, options.max_width - (full - sum(hi for _, hi in spans)))
            if widths is not None:
                break
        yield self.table(keep, widths)


# --------------------------------------------------------------------------------------------- markdown
def rich_table(title: str, head: list[str], rows: list[list[str]], caption: str | None = None):
    """A rich Table of text cells: the first column (and groups, boundary) left-aligned, the rest right; a narrow
    terminal folds a cell or a header, never cuts it ("imbala…")."""
    from rich import box
    from rich.table import Table

    t = Table(title=printable(title), title_justify="left", caption=caption, caption_justify="left",
              box=box.SIMPLE_HEAD, show_edge=False)
    for i, h in enumerate(head):
        t.add_column(h, justify="left" if i == 0 or h in ("groups", "boundary") else "right", overflow="fold")
    for r in rows:
        t.add_row(*map(printable, r))  # a name's line break never fakes a row
    return t


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    cell = md_cell

    lines = ["| " + " | ".join(map(cell, head)) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(map(cell, r)) + " |" for r in rows]
    return "\n".join(lines)


def analysis_markdown(a: Analysis, show_all: bool = False) -> str:
    """The report as GitHub Markdown, the short report's structure: the kernel's line, data quality, each
    warning's headline with its stake, action and evidence, info findings (``show_all``), then each finding in
    full and the tables (phases, waits, critical path, instances per phase) folded in ``<details>``."""
    v = _vocab(a)
    parts = [f"### ktrace analyze: {md_code(a.launch.get('kernel', 'kernel'))}", "", md_text(title_line(a)), ""]
    if a.launch.get("producer") == "proton":
        parts += [md_text(f"clock: {a.launch.get('time_origin', '')}"), ""]
    if roofline_line(a):
        parts += [md_text(roofline_line(a)), ""]
    quality = quality_lines(a)
    if quality:
        parts += ["> [!WARNING]", f"> **Data quality**: {_quality_title(a)}", ">"]
        parts += [f"> - {md_text(q)}" for q in quality]
        parts.append("")
    warnings = [f for f in a.findings if f.severity == "warning"]
    parts += [f"**{md_text(_warnings_line(a, warnings))}**", ""]
    for i, f in enumerate(warnings, 1):
        h = headline(f, v)
        do = f"; do: {md_text(h.action)}" if h.action else ""
        parts.append(f"{i}. **{md_text(h.text)}**  \n   {md_text(_stake(f))}{do}" +
                     (f"  \n   <sub>evidence: {md_text(h.evidence)}</sub>" if h.evidence else ""))
    infos = [f for f in a.findings if f.severity != "warning"]
    if show_all and infos:
        parts += ["", f"**{len(infos)} info finding{'' if len(infos) == 1 else 's'}** (not warnings, each with why)", ""]
        parts += [f"- {md_text(headline(f, v).text)} ({md_text(_stake(f))})" for f in infos]
    elif infos:
        parts += ["", f"<sub>{len(infos)} info finding{'' if len(infos) == 1 else 's'}, not warnings "
                  "(`--all` lists them)</sub>"]
    if sampled_line(a):
        parts += ["", f"<sub>{md_text(sampled_line(a))}</sub>"]
    parts.append("")
    full = [f for f in a.findings if show_all or f.severity == "warning"]
    if full:
        parts += ["<details><summary>Each finding in full</summary>", ""]
        parts += [f"- **{md_text(f.severity)}** ({md_text(f.kind)}): {md_text(f.message)}  \n  "
                  f"<sub>{md_text(_impact_text(f))}</sub>" for f in full]
        if warnings and a.accounted["wall_ns"]:
            parts.append(f"- <sub>{md_text(_accounted_line(a))}</sub>")
        parts += ["", "</details>", ""]
    if not len(a.phases):
        return printable("\n".join(parts + ["No phase slices in this trace.", ""]), keep_newlines=True)
    shape = _occupancy_line(a)
    parts += ["<details><summary>Phases, waits and the critical path</summary>", ""]
    if shape:
        parts += [md_text(shape), ""]
    parts += [f"<sub>{md_text(_tick_line(a))}; {md_text(_thresholds_line(a))}</sub>", ""]
    parts += ["**Phases** (means over instances)", "", _md_table(*_phase_summary_rows(a)), ""]
    if len(a.waits):
        parts += ["**Waits** (gap from a slice's end to the next slice on its lane)", "",
                  _md_table(*_wait_rows(a)), ""]
    parts += [f"**{md_text(_critical_title(a))}**", "", _md_table(*_critical_rows(a)), "", "</details>", ""]
    for phase in a.phases.phase.tolist():
        head, rows, n = _instance_rows(a, phase)
        parts += [f"<details><summary>{md_cell(phase)}: {n} instances</summary>", "", _md_table(head, rows), "",
                  "</details>", ""]
    return printable("\n".join(parts), keep_newlines=True)
