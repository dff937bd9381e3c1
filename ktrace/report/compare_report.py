"""What ``ktrace diff`` and ``ktrace check`` show: rich text, Markdown, a PNG of each phase's wall, JUnit XML.

Nothing here computes a figure or decides a verdict; compare.py and rules.py do.
"""

from __future__ import annotations

import json
import math
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

from ..analysis.compare.diff import Change, Diff, PhaseChange
from ..analysis.gates.rules import Check
from ..core.errors import EnvironmentMissing
from .figure_file import save_figure
from .safe_text import json_text, md_cell, md_text, plot_text, printable, xml_safe

__all__ = ["DIFF_FIGURES", "diff_text", "diff_markdown", "beyond_rows", "plot_diff", "check_text", "check_markdown",
           "check_json", "junit_xml", "CHECK_SCHEMA"]

CHECK_SCHEMA = "ktrace.check/1"
# The figures the diff table shows by default (--all: every one); last-finisher stability gets one row.
DIFF_FIGURES = ("wall_us", "max_dur_us", "mean_dur_us", "imbalance", "excess_us", "start_skew_us", "end_skew_us",
                "wait_before_us", "wait_after_us", "last finisher", "critical_us", "critical_share")
_LAST = ("last_block", "last_block_stability", "distinct_last_blocks")
_STYLE = {"better": "green", "worse": "bold red", "no change": "dim", "not judged": "yellow",
          "pass": "green", "fail": "bold red", "skip": "dim"}
# The verdict cell: one of the four words (VERDICTS), and what lies behind it where the word alone misleads.
_MARK = {"info": "no change (information)", "moved": "not judged (information: moved)", "undefined": "not judged (one side)",
         "changed": "not judged (changed, no better direction)", "unjudged": "not judged"}
_STATUS = {"pass": "✅ pass", "fail": "❌ FAIL", "skip": "➖ skip"}
_JUDGED = ("runs", "reps", "assumed", "tied", "model")


def _nan(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _val(v, unit: str) -> str:
    if _nan(v):
        return "—"
    if unit == "x":
        return f"{v:.3f}x"
    if unit == "fraction":
        return f"{v:.1%}"
    if unit in ("count", "block", "ns"):
        return f"{v:,.0f}"
    return f"{v:,.2f}" if abs(v) < 1e5 else f"{v:,.0f}"


def _delta(c: Change) -> tuple[str, str]:
    if c.delta is None:
        return "—", ""
    d = "+" if c.delta > 0 else ""
    if c.unit == "fraction":
        absolute = f"{d}{c.delta * 100:.1f} pt"
    elif c.unit == "x":
        absolute = f"{d}{c.delta:.3f}x"
    else:
        absolute = f"{d}{_val(c.delta, c.unit)}"
    rel = "" if c.relative is None or c.unit in ("fraction", "block") else f"{c.relative:+.1%}"
    return absolute, rel


def _label(figure: str, unit: str) -> str:
    return figure  # the name a `ktrace check` rule uses: PHASE.FIGURE, kernel.FIGURE


def _last_cells(p: PhaseChange) -> list[str]:
    blk, stab, dist = (p.change(f) for f in _LAST)
    n = p.change("instances")

    def side(b, s, d, inst) -> str:
        if _nan(b):
            return "—"
        return f"block {b:.0f}: {round(s * inst)}/{inst:.0f} ({d:.0f} distinct)"

    before = side(blk.before, stab.before, dist.before, n.before or 0)
    after = side(blk.after, stab.after, dist.after, n.after or 0)
    moved = any(c.before != c.after for c in (blk, stab, dist))  # information, never a significant change
    detail = "undefined" if "—" in (before, after) else "moved" if moved else "info"
    return ["last finisher", before, after, "", "", detail]


def _phase_rows(p: PhaseChange, figures) -> list[list[str]]:
    rows = []
    for f in figures:
        if f == "last finisher":
            rows.append(_last_cells(p))
            continue
        c = p.change(f)
        absolute, rel = _delta(c)
        rows.append([_label(f, c.unit), _val(c.before, c.unit), _val(c.after, c.unit), absolute, rel, c.detail])
    return rows


def _word(detail: str) -> str:
    """The verdict word of a Change.detail."""
    return {"better": "better", "worse": "worse", "same": "no change", "info": "no change"}.get(detail, "not judged")


def _figures(all_figures: bool, p: PhaseChange) -> tuple[str, ...]:
    return tuple(c.figure for c in p.changes) if all_figures else DIFF_FIGURES


def _kernel_rows(d: Diff) -> list[list[str]]:
    rows = []
    for c in d.kernel:
        if c.figure in ("tick_ns",) or (c.figure != "wall_us" and c.figure not in ("profiled_us", "control_us",
                                                                                   "overhead_ratio")
                                        and not c.significant):
            continue
        absolute, rel = _delta(c)
        rows.append([_label(c.figure, c.unit), _val(c.before, c.unit), _val(c.after, c.unit), absolute, rel, c.detail])
    return rows


def _one(label: str, c: Change) -> str:
    rel = "" if c.relative is None else f", {c.relative:+.1%}"
    ch = "" if c.delta is None else f" ({c.delta:+,.2f} µs{rel}: {c.verdict})"
    return f"{label} {_val(c.before, 'µs')} µs -> {_val(c.after, 'µs')} µs{ch}"


def _headline(d: Diff) -> str:
    kernel = d.after_kernel if d.before_kernel == d.after_kernel else f"{d.before_kernel} -> {d.after_kernel}"
    k, w = d.verdict_change, d.kernel_change("wall_us")
    if k.figure == "control_us":
        return f"{kernel}: {_one('unprofiled control', k)}; {_one('profiled wall', w)}"
    return f"{kernel}: {_one('kernel wall', w)}"


def _judged_by(d: Diff) -> str:
    nb, na = d.runs
    if min(nb, na) >= 2 or max(nb, na) >= 3:
        return "judged by a t-test across the runs"
    if d.assumed_noise is not None:
        return f"judged by the assumed noise {d.assumed_noise:.1%}"
    if d.model:
        return f"judged against the largest change seen between {d.model}"
    return "not judged"


def _story(d: Diff) -> list[str]:
    before = ", ".join(d.before_sources or (d.before_source,))
    after = ", ".join(d.after_sources or (d.after_source,))
    out = [f"before: {before}   after: {after}",
           f"timer tick {d.tick_ns:.0f} ns; runs per side {d.runs[0]} / {d.runs[1]}; {_judged_by(d)}; "
           "'no change': within the noise or under the floors (2 ticks, 1% of the kernel wall); 'not judged': "
           "no estimate of the noise (docs/ci.md); figures are named as `ktrace check` rules name them "
           "(PHASE.FIGURE, kernel.FIGURE)"]
    out += [f"note: {n}" for n in d.notes]
    out.append(d.cost_message)
    if d.findings_resolved:
        out.append("resolved: " + "; ".join(d.findings_resolved))
    if d.findings_new:
        out.append("new: " + "; ".join(d.findings_new))
    if d.findings_gone:
        out.append(f"warnings before only, not judged ({d.why_unjudged}): " + "; ".join(d.findings_gone))
    if d.findings_appeared:
        out.append(f"warnings after only, not judged ({d.why_unjudged}): " + "; ".join(d.findings_appeared))
    return out


_HEAD = ["figure", "before", "after", "change", "relative", "verdict"]


def diff_text(d: Diff, all_figures: bool = False) -> list:
    """Rich renderables: headline, notes, the kernel table, then one table per phase."""
    from rich.table import Table
    from rich.text import Text

    def table(title: str, rows: list[list[str]]) -> Table:
        t = Table(title=Text(printable(title)), title_justify="left")
        for i, h in enumerate(_HEAD):
            t.add_column(h, justify="left" if i in (0, 5) else "right")
        for r in rows:
            word = _word(r[5])
            t.add_row(*map(Text, r[:5]), Text(_MARK.get(r[5], word), style=_STYLE.get(word, "")),
                      style="dim" if word == "no change" else None)
        return t

    out: list = [Text(printable(d.headline), style="bold"), Text(printable(_headline(d)), style="bold")]
    out += [Text(printable(s), style="dim" if s.startswith(("before:", "timer")) else "") for s in _story(d)]
    out.append(table("kernel", _kernel_rows(d)))
    for p in d.phases:
        title = p.phase if p.present == "both" else f"{p.phase} (only {p.present})"
        out.append(table(title, _phase_rows(p, _figures(all_figures, p))))
    return out


def _md_table(head, rows) -> str:
    cell = md_cell

    lines = ["| " + " | ".join(map(cell, head)) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(map(cell, r)) + " |" for r in rows]
    return "\n".join(lines)


def _md_rows(rows) -> list[list[str]]:
    return [r[:5] + [f"**{_word(r[5])}**" if r[5] in ("better", "worse") else _MARK.get(r[5], _word(r[5]))]
            for r in rows]


def beyond_rows(d: Diff) -> list[list[str]]:
    """Every change beyond the noise (and every one not judged), as PHASE.FIGURE rows with their evidence:
    what the views show first."""
    rows = []
    subjects = [("kernel", c) for c in d.kernel] + [(p.phase, c) for p in d.phases if p.present == "both"
                                                    for c in p.changes]
    for scope, c in subjects:
        if c.detail in ("better", "worse", "changed", "unjudged"):
            absolute, rel = _delta(c)
            rows.append([f"{scope}.{c.figure}", _val(c.before, c.unit), _val(c.after, c.unit), absolute, rel,
                         _MARK.get(c.detail, c.verdict), d.how_judged(c)])
    rows += [[f"{p.phase}", "—" if p.present == "after" else "present", "—" if p.present == "before" else "present",
              "", "", f"only {p.present}", ""] for p in d.phases if p.present != "both"]
    return rows


def diff_markdown(d: Diff, all_figures: bool = False) -> str:
    """The comparison as GitHub Markdown: the verdict, what changed beyond the noise and the cost that moved
    first; the notes and every phase's table folded (<details>)."""
    parts = [f"### ktrace diff: {md_text(d.headline)}", "", md_text(_headline(d)), "", f"- {md_text(d.cost_message)}"]
    if d.findings_resolved:
        parts.append(f"- resolved: {md_text('; '.join(d.findings_resolved))}")
    if d.findings_new:
        parts.append(f"- new: {md_text('; '.join(d.findings_new))}")
    beyond = beyond_rows(d)
    parts += ["", f"**Beyond the noise** ({len(beyond)})", ""]
    parts += [_md_table(_HEAD + ["evidence"], [r[:5] + [f"**{r[5]}**" if r[5] in ("better", "worse") else r[5], r[6]]
                                               for r in beyond]) if beyond else "nothing changed beyond the noise", ""]
    parts += ["<details><summary>every figure, the notes and how it was judged</summary>", ""]
    parts += [f"- {md_text(s)}" for s in _story(d) if s != d.cost_message and not s.startswith(("resolved:", "new:"))]
    parts += ["", "**kernel**", "", _md_table(_HEAD, _md_rows(_kernel_rows(d))), ""]
    for p in d.phases:
        parts += [f"**{md_text(p.phase)}**" + ("" if p.present == "both" else f" (only {p.present})"), "",
                  _md_table(_HEAD, _md_rows(_phase_rows(p, _figures(all_figures, p)))), ""]
    parts += ["</details>", ""]
    return printable("\n".join(parts), keep_newlines=True)


def plot_diff(d: Diff, out) -> Path:
    """A PNG: each phase's wall (summed over its instances) before and after, with the noise as error bars
    and the relative change; below, each phase's imbalance before and after. Returns the path."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
    except ImportError as e:
        raise EnvironmentMissing(f"--plot needs matplotlib ({e}): pip install matplotlib") from None
    out = Path(out)
    names = [plot_text(p.phase) for p in d.phases]
    x = np.arange(len(names))
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(max(6.0, 1.4 * len(names) + 3), 7.5),
                                  gridspec_kw={"height_ratios": [3, 2]})
    fig.suptitle(textwrap.fill(plot_text(_headline(d)), 110), fontsize=9)
    for axis, figure, label in ((ax, "total_wall_us", "phase wall, summed over instances (µs)"),
                                (ax2, "imbalance", "imbalance (slowest / mean)")):
        cs = [p.change(figure) for p in d.phases]
        b = [0 if _nan(c.before) else c.before for c in cs]
        a = [0 if _nan(c.after) else c.after for c in cs]
        err = [c.noise if c.test in _JUDGED else 0.0 for c in cs]  # a floor is not a noise: no bar
        axis.bar(x - 0.2, b, 0.4, yerr=err, label="before", color="#999999", capsize=3)
        bars = axis.bar(x + 0.2, a, 0.4, yerr=err, label="after", color="#1f77b4", capsize=3)
        for bar, c in zip(bars, cs):
            mark = "" if c.significant else " ?" if c.verdict == "not judged" else " ="
            text = "" if c.relative is None else f"{c.relative:+.0%}{mark}"
            color = {"better": "green", "worse": "red"}.get(c.verdict, "gray")
            axis.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                          va="bottom", fontsize=8, color=color, xytext=(0, 3), textcoords="offset points")
        axis.set_xticks(x, names)
        axis.set_ylabel(label, fontsize=9)
        axis.grid(axis="y", alpha=0.3)
        axis.legend(fontsize=8)
    ax2.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
    verdict = plot_text(d.headline.split(" (", 1)[0])  # the kernel verdict; how it was judged is in the text report
    ax.set_title(textwrap.fill(f"{verdict}. '=': no change (within the noise); '?': not judged (no estimate of "
                               "run-to-run noise); error bars: the threshold each judged change had to exceed", 100),
                 fontsize=8, loc="left")
    fig.tight_layout()
    return save_figure(fig, out)


# ------------------------------------------------------------------------------------------------ check
def _counts(checks) -> tuple[int, int, int]:
    rs = [r for c in checks for r in c.results]
    return (sum(r.status == "pass" for r in rs), sum(r.status == "fail" for r in rs),
            sum(r.status == "skip" for r in rs))


def _summary(checks) -> str:
    ok, bad, skip = _counts(checks)
    total = ok + bad + skip
    verdict = "FAILED" if bad else "passed"
    extra = f", {skip} skipped" if skip else ""
    return f"ktrace check {verdict}: {bad} of {total} check{'s' if total != 1 else ''} failed{extra} " \
           f"on {len(checks)} capture{'s' if len(checks) != 1 else ''}"


def _cval(v, unit: str) -> str:
    """A rule's measured value or limit, written as a rule would write it, with its unit."""
    if _nan(v):
        return "undefined"
    if unit == "x":
        return f"{v:.4g}x"
    if unit in ("count", "block", "rows"):
        return f"{v:,.0f}"
    if unit == "fraction":
        return f"{v:.4g}"
    return f"{v:,.6g} {unit}"


def _limit(r) -> str:
    if r.limit is None:
        return ""
    base = "" if r.baseline is None else f" (baseline {_cval(r.baseline, r.unit)})"
    return f"{r.op} {_cval(r.limit, r.unit)}{base}"


def _rule_cell(r) -> str:
    return r.rule if r.rule.startswith(r.subject) else f"{r.rule}  [{r.subject}]"


def _check_rows(c: Check) -> list[list[str]]:
    return [[r.status, _rule_cell(r), "—" if r.measured is None and r.status == "skip" else _cval(r.measured, r.unit),
             _limit(r), r.origin] for r in c.results]


def _title(c: Check) -> str:
    base = f", baseline {c.baseline}" if c.baseline else ""
    return f"{c.source} ({c.kernel}{base}): {'FAILED' if not c.passed else 'passed'}"


def check_text(checks) -> list:
    """Rich renderables: per capture, every rule with its measured value and limit; failures in red."""
    from rich.table import Table
    from rich.text import Text

    out: list = []
    for c in checks:
        t = Table(title=Text(printable(_title(c))), title_justify="left")
        for h in ("", "rule", "measured", "limit", "where"):
            t.add_column(h, justify="right" if h in ("measured", "limit") else "left")
        for row in _check_rows(c):
            t.add_row(Text(_STATUS[row[0]], style=_STYLE[row[0]]), *map(Text, row[1:]))
        out.append(t)
        out += [Text(printable(f"  note: {n}"), style="yellow") for n in c.notes]
        for r in c.failures:
            out.append(Text(printable(f"  FAIL {r.origin}: {r.message}"), style="red"))
            out += [Text(f"       {json.dumps(row, default=str)}", style="dim") for row in r.rows]
    _, bad, _ = _counts(checks)
    out.append(Text(_summary(checks), style="bold red" if bad else "bold green"))
    return out


def check_markdown(checks) -> str:
    """A summary for a CI job summary ($GITHUB_STEP_SUMMARY) or a PR comment."""
    _, bad, _ = _counts(checks)
    parts = [f"### {'❌' if bad else '✅'} {_summary(checks)}", ""]
    for c in checks:
        parts += [f"**{md_text(_title(c))}**", ""]
        rows = [[_STATUS[r[0]]] + r[1:] for r in _check_rows(c)]
        parts += [_md_table(["", "rule", "measured", "limit", "where"], rows), ""]
        parts += [f"- note: {md_cell(n)}" for n in c.notes] + ([""] if c.notes else [])
        for r in c.failures:
            if r.rows:
                body = "\n".join(json.dumps(x, default=str) for x in r.rows)
                summary = f"{md_cell(r.subject)}: {md_cell(r.message)}"
                parts += [f"<details><summary>{summary}</summary>", "", "```", body, "```", "",
                          "</details>", ""]
    return printable("\n".join(parts), keep_newlines=True)


def check_json(checks) -> str:
    """Schema ktrace.check/1: {"schema", "passed", "checks": [Check.to_dict()]}."""
    return json_text(json.dumps({"schema": CHECK_SCHEMA, "passed": all(c.passed for c in checks),
                                 "checks": [c.to_dict() for c in checks]}, indent=2, ensure_ascii=False, default=str))


def junit_xml(checks) -> str:
    """JUnit XML: a testsuite per capture, a testcase per rule result (failure / skipped)."""
    ok, bad, skip = _counts(checks)
    root = ET.Element("testsuites", name="ktrace check", tests=str(ok + bad + skip), failures=str(bad),
                      errors="0", skipped=str(skip))
    for c in checks:
        suite = ET.SubElement(root, "testsuite", name=f"{c.source} ({c.kernel})", tests=str(len(c.results)),
                              failures=str(len(c.failures)), errors="0",
                              skipped=str(sum(r.status == "skip" for r in c.results)))
        if c.baseline:
            props = ET.SubElement(suite, "properties")
            ET.SubElement(props, "property", name="baseline", value=c.baseline)
        for r in c.results:
            name = r.rule if r.subject == r.rule else f"{r.rule} [{r.subject}]"
            case = ET.SubElement(suite, "testcase", classname=f"ktrace.check.{c.kernel}", name=name)
            if r.status == "fail":
                fail = ET.SubElement(case, "failure", message=r.message, type="ktrace.rule")
                fail.text = "\n".join([f"{r.origin}: {r.message}"] + [json.dumps(x, default=str) for x in r.rows])
            elif r.status == "skip":
                ET.SubElement(case, "skipped", message=r.message)
    for el in root.iter():  # names come from captures and rules: keep to what XML 1.0 can hold
        el.attrib.update({k: xml_safe(v) for k, v in el.attrib.items()})
        if el.text:
            el.text = xml_safe(el.text)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
