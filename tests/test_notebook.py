"""ktrace in a notebook: HTML for Jupyter (analysis, diff, check), Tables as pandas DataFrames (pandas optional,
the error naming the pip command), and examples/notebooks/triton_proton.ipynb executed top to bottom."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from html import escape

import ktrace

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples" / "proton"
NOTEBOOK = ROOT / "examples" / "notebooks" / "triton_proton.ipynb"


@pytest.fixture(scope="module")
def analysis():
    return ktrace.analyze(SAMPLES / "triton_imbalance.chrome_trace")


def test_analysis_html_has_the_headline_findings_with_evidence_and_impact_and_the_phases(analysis):
    h = analysis._repr_html_()
    assert "imbalance_kernel: 132 blocks x 4 warps" in h and "1980 MHz" in h  # a Proton lane is a warp
    f = next(f for f in analysis.findings if f.kind == "load_imbalance")
    import html

    from ktrace.analysis.findings.headlines import Vocabulary, headline

    # the short report's structure: the warning's headline and evidence first, the full message folded
    short = html.escape(headline(f, Vocabulary.of(analysis)).text)
    assert short in h and h.index(short) < h.index("<details>") < h.index(html.escape(f.message))
    assert html.escape(f.evidence) in h and "of wall)" in h
    assert "phases (means over instances)" in h and "<td>compute</td>" in h


def test_names_are_escaped(tmp_path):
    import json

    ev = [{"ph": "X", "pid": "k<script> Core0 CTA0", "tid": "warp 0 (line 0)", "name": "<b>x</b>", "ts": 0, "dur": 1}]
    p = tmp_path / "t.chrome_trace"
    p.write_text(json.dumps({"traceEvents": ev}))
    h = ktrace.analyze(p)._repr_html_()
    assert "<script>" not in h and "&lt;script&gt;" in h and "<b>x</b>" not in h


def test_diff_and_check_render():
    d = ktrace.diff(SAMPLES / "triton_imbalance.chrome_trace", SAMPLES / "triton_balanced.chrome_trace")
    assert d.headline.split(":")[0] in d._repr_html_() and "kernel.wall_us" in d._repr_html_()
    h = d._repr_html_()
    # what the text shows first: the verdict, the cost line, the changes beyond the noise; the rest folded
    first, folded = h.split("<details>", 1)
    assert escape(d.headline) in first and escape(d.cost_message) in first
    beyond = [f"{p.phase}.{c.figure}" for p in d.phases for c in p.changes if c.significant]
    assert beyond and all(f"<td>{escape(b)}</td>" in first for b in beyond)
    assert "<td>compute.mean_dur_us</td>" not in first and "<td>compute.mean_dur_us</td>" in folded
    c = ktrace.check(SAMPLES / "triton_imbalance.chrome_trace", ktrace.rule_book(["compute.imbalance <= 1.2"]))
    assert "FAILED: 1 of 1 rules" in c._repr_html_()


def test_every_table_converts_to_pandas(analysis):
    pd = pytest.importorskip("pandas")
    from ktrace.analysis.model.table import Table

    f = analysis.figures
    tables = [getattr(f, n) for n in vars(f) if isinstance(getattr(f, n), Table)]
    assert len(tables) >= 8
    for t in tables:
        df = t.to_pandas()
        assert isinstance(df, pd.DataFrame) and list(df.columns) == list(t.columns()) and len(df) == len(t)
        assert t._repr_html_().startswith("<div class='ktrace'>")


def test_without_pandas_the_error_names_the_pip_command(analysis, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"pip install 'ktrace\[notebook\]'"):
        analysis.phases.to_pandas()


@pytest.mark.slow
def test_example_notebook_runs_top_to_bottom():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("pandas")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    html = [o["data"]["text/html"] for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if "text/html" in o.get("data", {})]
    assert any("imbalance_kernel" in h for h in html)  # the analysis rendered
    assert any("ktrace check passed" in h for h in html)
    assert any("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
