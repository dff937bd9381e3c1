"""``ktrace query --print-package`` pasted into the real Perfetto UI: the same figures as the embedded engine.

For each capture in samples/, ``ktrace view`` serves the annotated trace (its default) to Debian's chromium;
the bundled package (``ktrace.analysis.bundle_sql()``, what ``--print-package`` prints) runs unchanged in the
UI's own trace processor (the wasm engine in the page), once as the UI's query page runs it (the whole text
in one request) and once more (pasted twice: ``CREATE OR REPLACE``); then every figure ``sql_figures`` reads
(the kernel, the launch facts, ktrace_phase, ktrace_phase_instance, ktrace_phase_lane, ktrace_wait,
ktrace_critical_path, ktrace_critical_path_share, ktrace_block, ktrace_lane, ktrace_busy_sms,
ktrace_occupancy) is read through the UI and must equal, value for value, what the embedded engine computes
on the very bytes the UI loaded. One capture also goes through the query page itself, as a user pastes it.
Needs what tests/test_ui_browser.py needs.
"""

import os
import urllib.parse

import numpy as np
import pytest

from ktrace.analysis import bundle_sql, sql_figures
from ktrace.analysis.figures.sql.package import include_all, register
from ktrace.engine import open_trace
from ktrace.engine.package_registration import strip_includes

from conftest import SAMPLE_NAMES, run_ktrace, sample
from test_ui_browser import browser, opened  # noqa: F401 (fixtures)
from test_view import get, trace_path

pytestmark = pytest.mark.slow

# Rows of a query run by the UI's engine, exactly: a 64-bit integer comes back as its digits (trace times are
# beyond a double's exact integers).
_QUERY_EXACT_JS = """async (sql) => {
  const r = await window.app.trace.engine.query(sql);
  const cols = r.columns(), rows = [];
  for (const it = r.iter({}); it.valid(); it.next())
    rows.push(cols.map(c => { const v = it.get(c); return typeof v === 'bigint' ? {int: v.toString()} : v; }));
  return {cols, rows};
}"""


class _Rows:
    """A query result as ``ktrace.engine.QueryResult`` gives it (``columns``, ``rows``, ``column``)."""

    def __init__(self, columns, rows):
        self.columns, self.rows = tuple(columns), rows

    def column(self, name: str) -> np.ndarray:
        i = self.columns.index(name)
        return np.asarray([r[i] for r in self.rows], dtype=object)


class UISession:
    """The UI's own trace processor, queried as ktrace queries a Session on which the package was inlined:
    the ktrace INCLUDEs dropped (the pasted bundle already made the tables)."""

    def __init__(self, ui):
        self.ui, self.trace_name = ui, "the Perfetto UI"

    def query(self, sql: str) -> _Rows:
        r = self.ui.page.evaluate(_QUERY_EXACT_JS, strip_includes(sql, {"ktrace"}))
        rows = [tuple(int(v["int"]) if isinstance(v, dict) else v for v in row) for row in r["rows"]]
        return _Rows(r["cols"], rows)


def served_trace(ui) -> bytes:
    """The trace bytes ``ktrace view`` served to this page."""
    port = urllib.parse.urlsplit(ui.page.url).port
    status, _, body = get(port, trace_path(port))
    assert status == 200
    return body


# One capture of each kernel shape and header by default (the suite stays well under ten minutes); every
# capture in samples/ with KTRACE_UI_ALL_SAMPLES=1 (about ten more minutes: the blocks5000 pair alone is 1-2).
_SHAPES = ["imbalance", "warpgroups_ktrace", "waves_ktrace", "worklist_flashinfer", "nested_ktrace",
           "straggler_change_flashinfer", "late_start_ktrace", "instants_flashinfer", "multigpu_gpu1"]
UI_SAMPLES = SAMPLE_NAMES if os.environ.get("KTRACE_UI_ALL_SAMPLES") else [n for n in _SHAPES if n in SAMPLE_NAMES]


@pytest.mark.parametrize("name", UI_SAMPLES)
def test_printed_package_gives_the_same_figures_in_the_ui(opened, tmp_path, name):
    ui = opened(sample(name))  # the annotated trace: what a user opens with ktrace view
    trace = tmp_path / f"{name}.perfetto-trace"
    trace.write_bytes(served_trace(ui))
    with open_trace(trace) as session:
        embedded = sql_figures(session)

    ui_session = UISession(ui)
    ui_session.query(bundle_sql())  # as the query page runs a pasted script: one request
    ui_session.query(bundle_sql())  # pasted twice: CREATE OR REPLACE
    in_ui = sql_figures(ui_session, register_package=False)
    assert in_ui.differences(embedded) == []
    assert len(in_ui.phases) == len(embedded.phases) > 0
    assert ui.errors == []


# The docs' query, run after pasting the package (docs/viewer.md, "The analysis tables in the UI's query page").
README_QUERY = ("SELECT phase, top_last_block, top_last_count, imbalance, mean_excess_ns "
                "FROM ktrace_phase ORDER BY phase_index")


def test_printed_package_pasted_into_the_query_page(opened, browser, tmp_path):
    """As the README says: ``ktrace query --print-package``, copied, pasted into the query page, run; then
    the README's query shows the embedded engine's rows."""
    rc, printed, err = run_ktrace("query", "--print-package")
    assert rc == 0, err
    assert printed.strip() == bundle_sql().strip()
    ui = opened(sample("imbalance_ktrace"))
    trace = tmp_path / "imbalance.perfetto-trace"
    trace.write_bytes(served_trace(ui))
    with open_trace(trace) as session:
        register(session)
        expected = session.query(include_all() + README_QUERY).rows
    assert [r[0] for r in expected] == ["load", "compute", "reduce"]

    page = ui.page
    origin = urllib.parse.urlsplit(page.url)
    browser.grant_permissions(["clipboard-read", "clipboard-write"], origin=f"{origin.scheme}://{origin.netloc}")
    page.click("text=Query (SQL)")  # the sidebar's entry: the query page
    editor = page.locator(".pf-query-page .cm-content")
    editor.wait_for(timeout=20_000)
    editor.click()
    page.evaluate("(s) => navigator.clipboard.writeText(s)", printed)
    page.keyboard.press("Control+V")
    page.keyboard.press("Control+Enter")
    _wait_for_run(page, 1)
    assert "error" not in _result_text(page).lower()

    editor.fill(README_QUERY)
    page.get_by_role("button", name="Run Query").click()
    _wait_for_run(page, 2)
    text = _result_text(page)
    assert "error" not in text.lower() and f"1 - {len(expected)} of {len(expected)}" in text
    cells = text.split()
    for row in expected:
        for value in row:
            shown = str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)  # as JS
            assert shown in cells, (value, text)
    assert [cells.index(r[0]) for r in expected] == sorted(cells.index(r[0]) for r in expected)
    assert ui.errors == []


def _wait_for_run(page, n: int) -> None:
    """Until the query page has run its ``n``-th query and shows what came of it (the editor's blinking
    cursor keeps the UI's idle detector busy here: wait for the engine and the page instead)."""
    page.wait_for_function("""(n) => {
      const t = document.querySelector('.pf-query-page').innerText;
      return window.app.trace.engine.numRequestsPending === 0 && t.includes(`Query history (${n} quer`)
        && /\\d ms|error/i.test(t.split('Query history')[0]);
    }""", arg=n, timeout=60_000)


def _result_text(page) -> str:
    """What the query page shows between the editor and the query history: the result or the error."""
    text = page.locator(".pf-query-page").inner_text()
    return text.split("Query history")[0]
