"""What ``ktrace analyze`` shows: text (rich renderables), Markdown (for PR comments) and a PNG plot.

Findings come first, then the figures: a summary per phase, a table of instances per phase, the waits at
each phase boundary and the critical path. Nothing here computes a figure; it only lays them out. The plot
is analysis_plot.py's.
"""

from __future__ import annotations

import math

import numpy as np

from ..analysis import Analysis
from ..analysis.findings import format_ns
from .analysis_plot import plot_analysis  # noqa: F401  (ktrace analyze --plot)
from .safe_text import md_cell, md_code, md_text, printable

__all__ = ["analysis_text", "analysis_markdown", "plot_analysis", "quality_lines", "MAX_INSTANCE_ROWS"]

MAX_INSTANCE_ROWS = 16  # per phase; longer tables show the first and last rows (the JSON has all)
_HEAD, _TAIL = 10, 4
_SEVERITY_STYLE = {"warning": "bold yellow", "info": "cyan"}


def _ratio(x) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}x"


def _share(x) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.0%}"


def _headline(a: Analysis) -> str:
    L, k = a.launch, a.kernel
    kernel = L.get("kernel", "kernel")
    blocks, groups = L.get("num_blocks", "?"), L.get("num_groups", "?")
    tick = f"{a.tick_ns:.0f} ns ({'--threshold tick_ns' if a.thresholds.tick_ns else k.tick_source})"
    return (f"{kernel}: {blocks} blocks x {groups} group(s), {k.phases} phase(s), {k.slices:,} phase slices, "
            f"wall {format_ns(k.wall_ns)}; timer tick {tick}: differences below it are not findings")


def quality_lines(a: Analysis) -> list[str]:
    """The data-quality warnings (records lost, unpaired, overwritten, unreadable), each a sentence with its
    counts; empty when every record is in the figures (or nothing is known of them)."""
    return list(a.data_quality.warnings)


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
    head = ["k", "lanes", f"min ({u})", "p50", "p90", "max", "mean", "imbalance", f"wall ({u})", "excess",
            "start skew", "end skew", "last: block/group/SM", "tied"]
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
    head = ["boundary", "waits", f"mean ({u})", "p50", "p90", "max", "longest at", f"total ({u})"]
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


# ------------------------------------------------------------------------------------------------- text
def analysis_text(a: Analysis, show_all: bool = False) -> list:
    """Rich renderables, findings first (warnings; info too with ``show_all``), then a table per phase."""
    from rich.text import Text

    table = rich_table

    out: list = [Text(printable(_headline(a)), style="bold")]
    if a.launch.get("producer") == "proton":
        out.append(Text(printable(f"clock: {a.launch.get('time_origin', '')}")))
    quality = quality_lines(a)
    if quality:
        out.append(Text("data quality: not every record is in the figures below", style="bold red"))
        out += [Text(f"  warning  {printable(q)}", style="yellow") for q in quality]
    shape = _occupancy_line(a)
    if shape:
        out.append(Text(printable(shape)))
    out.append(Text("findings (by kernel time at stake)", style="bold underline"))
    shown, hidden = _shown_findings(a, show_all)
    if not shown:
        out.append(Text("  no warnings: nothing costs the kernel enough time to act on", style="green"))
    for f in shown:
        line = Text("  ")
        line.append(f"{f.severity:<8}", style=_SEVERITY_STYLE.get(f.severity, ""))
        line.append(printable(f.message))
        out.append(line)
        out.append(Text("          " + printable(_impact_text(f)), style="dim"))
    if hidden:
        out.append(Text(f"  ({hidden} info finding(s) below the impact floor: --all shows them)", style="dim"))
    if shown and a.accounted["wall_ns"]:
        out.append(Text("  " + _accounted_line(a), style="dim"))
    out.append(Text(_thresholds_line(a), style="dim"))
    if not len(a.phases):
        out.append(Text("no phase slices in this trace", style="yellow"))
        return out
    out.append(table("phases (means over instances)", *_phase_summary_rows(a)))
    for phase in a.phases.phase.tolist():
        head, rows, n = _instance_rows(a, phase)
        caption = None if n <= MAX_INSTANCE_ROWS else f"{n} instances; --json has all of them"
        out.append(table(f"{phase}: instances", head, rows, caption))
    if len(a.waits):
        out.append(table("waits (gap from a slice's end to the next slice on its lane)", *_wait_rows(a)))
    out.append(table(_critical_title(a), *_critical_rows(a)))
    return out


# --------------------------------------------------------------------------------------------- markdown
def rich_table(title: str, head: list[str], rows: list[list[str]], caption: str | None = None):
    """A rich Table of text cells: the first column (and groups, boundary) left-aligned, the rest right; a narrow
    terminal folds a cell or a header, never cuts it ("imbala…")."""
    from rich.table import Table

    t = Table(title=printable(title), title_justify="left", caption=caption, caption_justify="left")
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
    """The report as GitHub Markdown: findings, per-phase summary, waits, critical path; instances folded."""
    parts = [f"### ktrace analyze: {md_code(a.launch.get('kernel', 'kernel'))}", "", md_text(_headline(a)), ""]
    if a.launch.get("producer") == "proton":
        parts += [md_text(f"clock: {a.launch.get('time_origin', '')}"), ""]
    quality = quality_lines(a)
    if quality:
        parts += ["> [!WARNING]", "> **Data quality**: not every record is in the figures below", ">"]
        parts += [f"> - {md_text(q)}" for q in quality]
        parts.append("")
    shape = _occupancy_line(a)
    if shape:
        parts += [md_text(shape), ""]
    parts += ["**Findings** (by kernel time at stake)", ""]
    shown, hidden = _shown_findings(a, show_all)
    if not shown:
        parts.append("- no warnings: nothing costs the kernel enough time to act on")
    for f in shown:
        parts.append(f"- **{md_text(f.severity)}** ({md_text(f.kind)}): {md_text(f.message)}  \n  "
                     f"<sub>{md_text(_impact_text(f))}</sub>")
    if hidden:
        parts.append(f"- <sub>{hidden} info finding(s) below the impact floor (`--all` shows them)</sub>")
    if shown and a.accounted["wall_ns"]:
        parts.append(f"- <sub>{md_text(_accounted_line(a))}</sub>")
    parts += ["", f"<sub>{md_text(_thresholds_line(a))}</sub>", ""]
    if not len(a.phases):
        return printable("\n".join(parts + ["No phase slices in this trace.", ""]), keep_newlines=True)
    parts += ["**Phases** (means over instances)", "", _md_table(*_phase_summary_rows(a)), ""]
    if len(a.waits):
        parts += ["**Waits** (gap from a slice's end to the next slice on its lane)", "",
                  _md_table(*_wait_rows(a)), ""]
    parts += [f"**{md_text(_critical_title(a))}**", "",
              _md_table(*_critical_rows(a)), ""]
    for phase in a.phases.phase.tolist():
        head, rows, n = _instance_rows(a, phase)
        parts += [f"<details><summary>{md_cell(phase)}: {n} instances</summary>", "", _md_table(head, rows), "",
                  "</details>", ""]
    return printable("\n".join(parts), keep_newlines=True)

