"""The Python API behaves as a Python user expects: print() gives the report, a notebook shows it short, a dict
of thresholds and a list of rules work, anything else is a KtraceError naming what is taken, a query result
becomes a DataFrame and the plot is one public call."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import ktrace

ROOT = Path(__file__).resolve().parent.parent
IMBALANCE = ROOT / "samples" / "imbalance.bin"


@pytest.fixture(scope="module")
def analysis():
    return ktrace.analyze(IMBALANCE)


def test_print_gives_the_text_report_not_the_dataclass(analysis):
    text = str(analysis)
    assert text.startswith("persistent_phases: 132 blocks")  # the report's headline, as `ktrace analyze` prints
    assert "block 17" in text and "Figures(" not in text and "array(" not in text
    assert "\x1b[" not in text  # plain text: no colour codes in a string
    r = repr(analysis)
    assert len(r.splitlines()) == 1 and "imbalance.bin" in r and "1 warning(s)" in r


def test_print_in_a_fresh_interpreter_prints_the_report():
    code = "import ktrace; print(ktrace.analyze('samples/imbalance.bin'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("persistent_phases: 132 blocks") and "block 17" in out.stdout
    assert len(out.stdout.splitlines()) < 400


def test_html_shows_the_warnings_and_folds_the_info_and_the_tables(analysis):
    h = analysis._repr_html_()
    warn = next(f for f in analysis.findings if f.severity == "warning")
    import html

    from ktrace.analysis.findings.headlines import Vocabulary, headline

    before_fold = h.split("<details>")[0]
    assert html.escape(headline(warn, Vocabulary.of(analysis)).text) in before_fold  # a warning's headline first
    assert html.escape(warn.message) not in before_fold  # its long sentence folded
    assert "<summary>phases (means over instances)</summary>" in h
    info = [f for f in analysis.findings if f.severity != "warning"]
    assert info and "info)</summary>" in h and html.escape(info[0].message) in h
    assert html.escape(info[0].message) not in before_fold


def test_thresholds_as_a_dict_or_strings_work_like_the_object(analysis):
    strict = ktrace.analyze(IMBALANCE, thresholds={"imbalance": 100.0, "min_impact": 0.9})
    assert strict.thresholds == ktrace.Thresholds(imbalance=100.0, min_impact=0.9)
    assert ktrace.analyze(IMBALANCE, thresholds=["imbalance=100", "min_impact=0.9"]).thresholds == strict.thresholds
    # the thresholds change the findings: none costs 90% of the wall
    assert not [f for f in strict.findings if f.severity == "warning"]
    assert [f for f in analysis.findings if f.severity == "warning"]


@pytest.mark.parametrize("bad,says", [
    (3, "got int"), ([1.2], "got list"), ({"imbalanse": 1.2}, "no threshold is called 'imbalanse'"),
    ({"imbalance": "1.2"}, "must be a number"), ({"imbalance": True}, "must be a number")])
def test_other_thresholds_raise_a_ktrace_error_naming_what_is_taken(bad, says):
    with pytest.raises(ktrace.KtraceError, match=says) as e:
        ktrace.analyze(IMBALANCE, thresholds=bad)
    assert "dict such as {'imbalance': 1.2}" in str(e.value) or "names are" in str(e.value) or "number" in str(e.value)


def test_check_takes_a_list_of_rule_strings():
    listed = ktrace.check(IMBALANCE, ["compute.imbalance <= 1.2", "kernel.wall_us <= 10000"])
    booked = ktrace.check(IMBALANCE, ktrace.rule_book(["compute.imbalance <= 1.2", "kernel.wall_us <= 10000"]))
    assert [(r.rule, r.status) for r in listed.results] == [(r.rule, r.status) for r in booked.results]
    assert not listed.passed and len(listed.results) == 2
    assert ktrace.check(IMBALANCE, "kernel.wall_us <= 10000").passed  # one rule as a string


def test_check_takes_a_rules_file(tmp_path):
    rules = tmp_path / "rules.toml"
    rules.write_text('rules = ["kernel.wall_us <= 10000"]\n')
    assert ktrace.check(IMBALANCE, rules).passed


@pytest.mark.parametrize("bad", [3, [], [1], {"compute.imbalance": 1.2}])
def test_other_rules_raise_a_ktrace_error_naming_what_is_taken(bad):
    with pytest.raises(ktrace.KtraceError, match=r"expected ktrace.rule_book\(...\), a list of rule strings"):
        ktrace.check(IMBALANCE, bad)


def test_a_query_result_becomes_a_dataframe():
    pd = pytest.importorskip("pandas")
    r = ktrace.query(IMBALANCE, "SELECT name, ts, dur FROM slice WHERE name = 'compute' ORDER BY ts, id LIMIT 5")
    df = r.to_pandas()
    assert isinstance(df, pd.DataFrame) and list(df.columns) == ["name", "ts", "dur"] and len(df) == 5
    assert df["dur"].tolist() == r.column("dur").tolist() and set(df["name"]) == {"compute"}
    assert r.as_pandas_dataframe().equals(df)


def test_without_pandas_the_query_error_names_the_pip_command(monkeypatch):
    r = ktrace.query(IMBALANCE, "SELECT 1 AS x")
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"pip install 'ktrace\[notebook\]'"):
        r.to_pandas()


def test_plot_is_public_and_writes_a_png(analysis, tmp_path):
    pytest.importorskip("matplotlib")
    assert "plot" in ktrace.__all__
    out = ktrace.plot(analysis, tmp_path / "a.png")
    assert out == tmp_path / "a.png" and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ktrace.KtraceError, match=r"plot: expected an Analysis, got str; e.g. ktrace.plot\(ktrace"):
        ktrace.plot(str(IMBALANCE), tmp_path / "b.png")
    assert not (tmp_path / "b.png").exists()


def test_print_of_a_diff_and_a_check_gives_what_the_commands_print():
    from conftest import run_ktrace

    before, after = ROOT / "samples" / "imbalance_ktrace.bin", ROOT / "samples" / "balanced_ktrace.bin"
    d = ktrace.diff(before, after)
    rc, out, _ = run_ktrace("diff", before, after, env={"COLUMNS": "100"})
    assert rc == 0 and str(d).splitlines()[0] == out.splitlines()[0] and "Diff(" not in str(d)
    c = ktrace.check(after, ["compute.imbalance <= 1.2"])
    assert "compute.imbalance <= 1.2" in str(c) and "ktrace check passed" in str(c) and "Check(" not in str(c)
