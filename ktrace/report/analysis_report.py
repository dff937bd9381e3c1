"""What ``ktrace analyze`` shows: text (rich renderables), Markdown (for PR comments) and a PNG plot.

Findings come first, then the figures: a summary per phase, a table of instances per phase, the waits at
each phase boundary and the critical path. Nothing here computes a figure; it only lays them out.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..analysis import Analysis
from ..analysis.findings import format_ns
from .figure_file import pyplot, save_figure
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
    return (f"launch shape: {o['sms']} SMs, {o['blocks']} blocks, up to {o['blocks_per_sm_max']} per SM "
            f"({o['max_resident']} resident at most), {o['waves']:.2f} waves, SMs busy "
            f"{o['sm_busy_fraction']:.0%} of the wall{tail}; block {o['last_block']} ends the kernel "
            f"(began +{format_ns(o['last_block_begin_ns'] - k.begin_ns)}, ran {format_ns(o['last_block_dur_ns'])}, "
            f"median block {format_ns(o['median_block_dur_ns'])})")


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
    from rich.table import Table
    from rich.text import Text

    def table(title: str, head: list[str], rows: list[list[str]], caption: str | None = None) -> Table:
        t = Table(title=printable(title), title_justify="left", caption=caption, caption_justify="left")
        for i, h in enumerate(head):  # a narrow terminal folds a cell or a header, never cuts it ("imbala…")
            t.add_column(h, justify="left" if i == 0 or h in ("groups", "boundary") else "right", overflow="fold")
        for r in rows:
            t.add_row(*map(printable, r))  # a name's line break never fakes a row
        return t

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


# ------------------------------------------------------------------------------------------------- plot
def plot_analysis(a: Analysis, out) -> Path:
    """A PNG: per phase, each lane's slice duration against its block index (mean, with min-max band);
    below, the critical path as a timeline and each phase's share of wall time. Returns the path."""
    with pyplot() as plt:
        out = Path(out)
        phases = a.phases.phase.tolist()
        n = max(len(phases), 1)
        rows = 0.45 * max(len(phases), 1) + 0.5
        busy = len(a.figures.busy_sms) > 1
        fig, axes = plt.subplots(n + 2 + busy, 1, figsize=(11, 2.4 * n + 2 * rows + 1.6 + 2 * busy),
                                 gridspec_kw={"height_ratios": [3] * n + [rows + 0.4, rows] + [2] * busy})
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        color_of = {p: colors[i % len(colors)] for i, p in enumerate(phases)}
        kernel = a.launch.get("kernel", "kernel")
        fig.suptitle(f"{kernel}: per-block phase durations and critical path "
                     f"(timer tick {a.tick_ns:.0f} ns)", fontsize=12)
        for ax, phase in zip(axes[:n], phases):
            _plot_phase(a, ax, phase, color_of[phase])
        if not phases:
            axes[0].text(0.5, 0.5, "no phase slices", ha="center", va="center", transform=axes[0].transAxes)
        _plot_timeline(a, axes[n], color_of)
        _plot_shares(a, axes[n + 1], color_of)
        if busy:
            _plot_busy_sms(a, axes[n + 2])
        fig.tight_layout()
        return save_figure(fig, out)


def _plot_phase(a: Analysis, ax, phase: str, color) -> None:
    lanes = a.lanes
    m = lanes.phase == phase
    p = a.phases.row(a.phases.phase.tolist().index(phase))
    groups = np.unique(lanes.group[m])
    markers = "os^D"
    # Lanes that ran different numbers of instances (a work list): what differs is each lane's total.
    totals = p.get("min_lane_instances") != p.get("max_lane_instances")
    shown = lanes.sum_dur_ns if totals else lanes.mean_dur_ns
    for gi, g in enumerate(groups.tolist()):
        mg = m & (lanes.group == g)
        x = lanes.block[mg]
        us = 1e-3
        label = f"group {g}" if len(groups) > 1 else ("total per lane" if totals else "mean")
        if not totals:
            ax.fill_between(x, lanes.min_dur_ns[mg] * us, lanes.max_dur_ns[mg] * us, color=color, alpha=0.15,
                            step="mid", linewidth=0)
        ax.plot(x, shown[mg] * us, marker=markers[gi % len(markers)], markersize=2.5,
                linewidth=0.8, color=color if gi == 0 else None, label=label)
    top = p["top_last_block"]
    tm = m & (lanes.block == top)
    if tm.any():
        ax.plot(lanes.block[tm], shown[tm] * 1e-3, "o", markersize=8, markerfacecolor="none",
                markeredgecolor="red", label=f"block {top}: among the last in {p['top_last_count']}/{p['instances']}")
    if totals:
        ax.axhline(float(np.mean(shown[m])) * 1e-3, color="gray", linewidth=0.8, linestyle="--",
                   label="mean total per lane")
    else:
        ax.axhline(p["mean_dur_ns"] * 1e-3, color="gray", linewidth=0.8, linestyle="--", label="phase mean")
    ax.set_ylim(bottom=0)  # from zero: a few percent of spread never looks like a cliff
    word = "groups" if "," in (p["groups"] or "") else "group"
    what = ("each lane's total over its instances (lanes ran different numbers of them)" if totals else
            "band = min..max over instances")
    ax.set_title(f"{phase} ({word} {p['groups']}): imbalance {_ratio(p['imbalance'])}, "
                 f"{p['instances']} instances; {what}", fontsize=9, loc="left")
    ax.set_ylabel("time per lane (µs)" if totals else "duration (µs)")
    ax.set_xlabel("block index")
    ax.legend(fontsize=7, loc="upper right")
    ax.grid(alpha=0.3)


def _plot_timeline(a: Analysis, ax, color_of: dict) -> None:
    cp = a.critical_path
    ax.set_title("critical path: the path's slices (bars) and the waits and gaps after them (hatched), one row "
                 "per phase", fontsize=9, loc="left")
    phases = list(color_of)
    if not len(cp) or not phases:
        return
    ax.set_yticks(range(len(phases)), phases, fontsize=8)
    ax.set_ylim(len(phases) - 0.5, -0.5)
    t0 = a.kernel.begin_ns or 0
    for y, phase in enumerate(phases):
        col = color_of[phase]
        for solid in (True, False):
            m = (cp.phase == phase) & ((cp.kind == "slice") == solid)
            b = (cp.begin_ns[m] - t0) * 1e-3
            bars = list(zip(b.tolist(), (cp.dur_ns[m] * 1e-3).tolist()))
            if solid:
                ax.broken_barh(bars, (y - 0.35, 0.7), facecolors=col)
            else:
                ax.broken_barh(bars, (y - 0.35, 0.7), facecolors="none", edgecolors=col, hatch="///",
                               linewidth=0.3)
    ax.set_xlim(0, (a.kernel.wall_ns or 1) * 1e-3)
    ax.set_xlabel("time since the first phase begin (µs)")
    ax.grid(axis="x", alpha=0.3)


def _plot_busy_sms(a: Analysis, ax) -> None:
    """Busy SMs over the kernel's wall, the tail (fewer than half the SMs busy at the end) shaded."""
    b, t0 = a.figures.busy_sms, a.kernel.begin_ns or 0
    ax.step((b.ts - t0) * 1e-3, b.busy_sms, where="post", linewidth=0.9, color="black")
    o = a.occupancy
    sms = (o or {}).get("sms") or 0
    if sms:
        ax.axhline(sms, color="gray", linewidth=0.6, linestyle=":", label=f"{sms} SMs")
    if o and o.get("tail_ns") and o.get("tail_begin_ns") is not None:
        start = (o["tail_begin_ns"] - t0) * 1e-3
        ax.axvspan(start, start + o["tail_ns"] * 1e-3, color="red", alpha=0.12,
                   label=f"tail: {format_ns(o['tail_ns'])} with fewer than half the SMs busy")
    ax.set_ylim(bottom=0)
    ax.set_xlim(0, (a.kernel.wall_ns or 1) * 1e-3)
    ax.set_title(f"busy SMs over time ({o['waves']:.2f} waves)" if o and o.get("waves") is not None else
                 "busy SMs over time", fontsize=9, loc="left")
    ax.set_xlabel("time since the first phase begin (µs)")
    ax.set_ylabel("SMs running a block")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper right")
    ax.grid(alpha=0.3)


def _plot_shares(a: Analysis, ax, color_of: dict) -> None:
    c = a.critical_shares
    ax.set_title("share of kernel wall time on the critical path (slices solid, waits hatched); the parts and "
                 "the remainders (lead-in, gaps, SM slots) add up to 1", fontsize=9, loc="left")
    phases = list(color_of)
    if not phases:
        return
    ax.set_yticks(range(len(phases)), phases, fontsize=8)
    ax.set_ylim(len(phases) - 0.5, -0.5)
    wall = a.kernel.wall_ns or 0
    top = 1.0
    for r in c.rows():
        if not wall or r["phase"] not in color_of:
            continue
        y = phases.index(r["phase"])
        d, w = r["dur_ns"] / wall, r["wait_ns"] / wall
        col = color_of[r["phase"]]
        ax.barh(y, d, color=col, height=0.7)
        ax.barh(y, w, left=d, color="none", edgecolor=col, hatch="///", height=0.7)
        ax.text(d + w + 0.01, y, f"{r['share']:.0%}", va="center", fontsize=8)
        top = max(top, d + w + 0.08)
    ax.set_xlim(0, top)
    ax.set_xlabel("fraction of wall time")
    ax.grid(axis="x", alpha=0.3)
