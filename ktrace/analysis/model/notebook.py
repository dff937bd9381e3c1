"""ktrace's results in a notebook: HTML for Jupyter's rich display (``_repr_html_``) and pandas DataFrames.

    a = ktrace.analyze("kernel.chrome_trace")
    a                         # in Jupyter: the headline, data quality, findings with evidence and impact, phases
    a.phases.to_pandas()      # any Table as a DataFrame (pip install 'ktrace[notebook]')

Every string is escaped (names in a capture are the user's data, never markup). Nothing here prints.
"""

from __future__ import annotations

import html

from ...core.terminal import printable

__all__ = ["diff_html", "check_html", "table_html", "to_pandas", "PANDAS_HINT"]

PANDAS_HINT = "pip install 'ktrace[notebook]'"
_MAX_ROWS = 200  # a notebook shows this many rows of a table; .to_pandas() has them all

STYLE = ("<style>.ktrace td,.ktrace th{padding:2px 8px;text-align:right}.ktrace td:first-child,"
          ".ktrace th:first-child{text-align:left}.ktrace .warning{color:#b35900}.ktrace .info{color:#555}"
          ".ktrace .fail{color:#c00}.ktrace .pass{color:#070}</style>")


def to_pandas(table):
    """The Table as a pandas DataFrame, one column per column (NULLs as NaN / None). ImportError naming the
    pip command when pandas is missing."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError(f"Table.to_pandas() needs pandas: {PANDAS_HINT} (or pip install pandas)") from None
    return pd.DataFrame({name: getattr(table, name) for name in table.columns()}, columns=list(table.columns()))


def escape(text) -> str:
    """``text`` as HTML: every control character (ESC, BEL), bidirectional override and line separator shown
    escaped (``\x1b``, ``\u202e``) as in every other output, then ``<``, ``&`` and quotes escaped."""
    return html.escape(printable(text, keep_newlines=True))


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if v != v else f"{v:,.3f}".rstrip("0").rstrip(".") if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return escape(str(v))


def html_table(head, rows, caption: str | None = None) -> str:
    out = ["<table>"]
    if caption:
        out.append(f"<caption style='text-align:left'>{escape(caption)}</caption>")
    out.append("<tr>" + "".join(f"<th>{escape(str(h))}</th>" for h in head) + "</tr>")
    out += ["<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in r) + "</tr>" for r in rows]
    out.append("</table>")
    return "".join(out)


def table_html(table) -> str:
    """A Table as an HTML table (its first _MAX_ROWS rows, the count said)."""
    rows = table.rows()
    cols = list(table.columns())
    more = len(rows) - _MAX_ROWS
    cap = f"{type(table).__name__}: {len(rows):,} rows" + (f" (first {_MAX_ROWS} shown; .to_pandas() has all)"
                                                          if more > 0 else "")
    return f"<div class='ktrace'>{STYLE}" + html_table(cols, [[r[c] for c in cols] for r in rows[:_MAX_ROWS]],
                                                        cap) + "</div>"


def ns_text(v) -> str:
    from ...core.units import format_ns

    return format_ns(v) if v is not None else "—"


def diff_html(d) -> str:
    """A Diff as HTML, as the text shows it: the verdict (its first line), the cost line, what changed beyond
    the noise with its evidence; every figure, the notes and the sources folded (<details>)."""
    def row(scope, c):
        return [f"{scope}.{c.figure}", c.before, c.after, c.delta, "" if c.relative is None else f"{c.relative:+.1%}",
                c.verdict, d.how_judged(c)]

    subjects = [("kernel", c) for c in d.kernel] + [(p.phase, c) for p in d.phases for c in p.changes]
    beyond = [row(scope, c) for scope, c in subjects if c.detail in ("better", "worse", "changed", "unjudged")]
    rows = [row(scope, c) for scope, c in subjects]
    found = [f"resolved: {'; '.join(d.findings_resolved)}"] if d.findings_resolved else []
    found += [f"new: {'; '.join(d.findings_new)}"] if d.findings_new else []
    head = ["figure", "before", "after", "change", "relative", "verdict", "evidence"]
    return (f"<div class='ktrace'>{STYLE}<p><b>{escape(d.headline)}</b></p>"
            f"<p>{escape(d.cost_message)}</p>" + "".join(f"<p>{escape(x)}</p>" for x in found)
            + (html_table(head, beyond, f"beyond the noise ({len(beyond)})") if beyond
               else "<p>nothing changed beyond the noise</p>")
            + f"<details><summary>every figure ({len(rows)}), the notes and the sources</summary>"
            + f"<p>before: {escape(str(d.before_source))} &nbsp; after: {escape(str(d.after_source))}</p>"
            + "".join(f"<p class='info'>note: {escape(n)}</p>" for n in d.notes)
            + html_table(head, rows) + "</details></div>")


def check_html(c) -> str:
    """A Check as HTML: passed or failed, and each rule's status, measured value and limit."""
    status = "passed" if c.passed else f"FAILED: {len(c.failures)} of {len(c.results)} rules"
    rows = "".join(f"<tr><td class='{escape(r.status)}'>{escape(r.status)}</td><td>{escape(r.rule)}</td>"
                   f"<td>{_cell(r.measured)}</td><td>{escape(str(r.op or ''))} {_cell(r.limit)}</td>"
                   f"<td style='text-align:left'>{escape(r.message)}</td></tr>" for r in c.results)
    return (f"<div class='ktrace'>{STYLE}<p><b>ktrace check {escape(status)}</b>: {escape(str(c.source))} "
            f"({escape(str(c.kernel))})</p>" + "".join(f"<p class='info'>note: {escape(n)}</p>" for n in c.notes)
            + "<table><tr><th>status</th><th>rule</th><th>measured</th><th>limit</th><th>message</th></tr>"
            + rows + "</table></div>")
