"""The PNG of ``ktrace analyze --plot``: per phase, each lane's slice duration (or its total) against its block
index; below, the critical path as a timeline, each phase's share of wall time, and busy SMs over time.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..analysis import Analysis
from ..analysis.findings.find import format_ns
from ..core.errors import InputError
from ..core.filetypes import sibling
from ..core.outputs import check_output
from .figure_file import pyplot, save_figure

__all__ = ["plot", "plot_analysis"]


def _ratio(x) -> str:
    import math

    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}x"


def plot(analysis: Analysis, out=None) -> Path:
    """``ktrace.plot``: write the analysis plot (a PNG: per phase, each block's slice durations; the critical
    path as a timeline and each phase's share of the wall) and return its path. analysis: what ``ktrace.analyze``
    returned; out: the PNG (default: the capture's path with ``.png``). Needs matplotlib
    (``pip install 'ktrace[notebook]'``)."""
    if not isinstance(analysis, Analysis):
        raise InputError(f"plot: expected an Analysis, got {type(analysis).__name__}; "
                         "e.g. ktrace.plot(ktrace.analyze('run.bin'), 'run.png')")
    out = Path(out) if out is not None else sibling(analysis.source, ".png")
    return plot_analysis(analysis, check_output(out, [analysis.source], "plot", "out"))


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
