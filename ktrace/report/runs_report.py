"""``ktrace analyze --runs``: the warnings that hold in every run, those that do not, and the figures with
their run-to-run spread (text for the terminal, Markdown for a PR comment)."""

from __future__ import annotations

from rich.text import Text

from ..analysis.findings.find import format_ns
from ..analysis.compare.runs import RunsAnalysis
from .analysis_report import Prose, rich_table
from .safe_text import md_cell, md_text, printable

__all__ = ["runs_text", "runs_markdown"]

_FIGS = (("mean_max_dur_ns", "slowest", True), ("mean_dur_ns", "mean", True), ("imbalance", "imbalance", False),
         ("mean_excess_ns", "excess", True), ("mean_start_skew_ns", "start skew", True))


def _headline(r: RunsAnalysis) -> str:
    mean, lo, hi = r.wall()
    kernel = r.analyses[0].launch.get("kernel", "kernel")
    spread = (hi - lo) / mean if mean else 0.0
    return (f"{kernel}: {len(r.analyses)} runs of the same inputs; wall {format_ns(mean)} on average "
            f"({format_ns(lo)} to {format_ns(hi)}, a {spread:.1%} spread)")


def _noise(r: RunsAnalysis) -> str:
    """These runs' largest same-input change per figure family, beside the noise model's (ktrace diff)."""
    fams = r.noise()
    if not fams:
        return "run-to-run noise: nothing moved beyond the floors (2 timer ticks, 1% of the kernel wall)"
    parts = [f"{fam} {mine:.1%}" + ("" if model is None else f" (model {model:.1%})") for fam, (mine, model) in
             fams.items()]
    wider = [fam for fam, (mine, model) in fams.items() if model is not None and mine > model]
    tail = (f"; beyond the model in {', '.join(wider)}: give these runs to `ktrace diff --before/--after` to widen it"
            if wider else "; within the noise model `ktrace diff` judges one run per side by")
    return "run-to-run noise, largest relative change between these runs: " + ", ".join(parts) + tail


def _blocks(f) -> str:
    if not f.blocks:
        return ""
    if f.block_holds:
        return f"; names block {next(iter(f.blocks))} in every run"
    named = ", ".join(f"block {b} in {n}" for b, n in f.blocks.items())
    return f"; the block it names changes ({named}): the block is noise, not the finding"


def _line(f) -> str:
    imp = (format_ns(f.max_impact_ns) if f.min_impact_ns == f.max_impact_ns else
           f"{format_ns(f.min_impact_ns)} to {format_ns(f.max_impact_ns)}")
    return f"in {f.runs} of {f.of} runs ({imp} at stake){_blocks(f)}: {f.message}"


def _phase_rows(r: RunsAnalysis):
    head = ["phase"] + [name for _, name, _ in _FIGS]
    rows = []
    for p in r.phases():
        row = [p]
        for col, _, is_ns in _FIGS:
            v = r.figure(p, col)
            if v is None:
                row.append("—")
                continue
            mean, lo, hi = v
            if is_ns:
                row.append(f"{format_ns(mean)} ({format_ns(lo)}..{format_ns(hi)})")
            else:
                row.append(f"{mean:.2f}x ({lo:.2f}..{hi:.2f})")
        rows.append(row)
    return head, rows


def runs_text(r: RunsAnalysis) -> list:
    """Rich renderables: the headline, the warnings that hold, those that do not, the phases' spread; each
    paragraph wrapped at the terminal's width under its own indent (Prose)."""
    out = [Prose(_headline(r), indent="  ", style="bold")]
    out.append(Text("warnings in every run", style="bold underline"))
    if not r.stable:
        out.append(Text("  none: no warning holds in every run", style="green"))
    for f in r.stable:
        out.append(Prose(_line(f), first="  ", indent="    "))
    if r.unstable:
        out.append(Prose("warnings in some runs only (noise: they change between runs of the same inputs)",
                         indent="  ", style="bold underline"))
        for f in r.unstable:
            out.append(Prose(_line(f), first="  ", indent="    ", style="dim"))
    out.append(rich_table("phases: mean over the runs (min..max)", *_phase_rows(r)))
    out.append(Prose(_noise(r), indent="  "))
    out.append(Prose("runs: " + ", ".join(r.sources), indent="  ", style="dim"))
    return out


def runs_markdown(r: RunsAnalysis) -> str:
    parts = [f"### ktrace analyze --runs: {md_text(_headline(r))}", "", "**Warnings in every run**", ""]
    parts += [f"- {md_text(_line(f))}" for f in r.stable] or ["- none: no warning holds in every run"]
    if r.unstable:
        parts += ["", "**Warnings in some runs only** (noise)", ""]
        parts += [f"- {md_text(_line(f))}" for f in r.unstable]
    head, rows = _phase_rows(r)
    parts += ["", "| " + " | ".join(map(md_cell, head)) + " |", "|" + "|".join("---" for _ in head) + "|"]
    parts += ["| " + " | ".join(map(md_cell, row)) + " |" for row in rows]
    parts += ["", md_text(_noise(r))]
    return printable("\n".join(parts) + "\n", keep_newlines=True)
