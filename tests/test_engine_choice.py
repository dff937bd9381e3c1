"""analyze's engine choice: numpy computes a buffer's figures without the trace processor, the same figures,
findings and JSON as the SQL package; 'auto' takes numpy for every buffer (no trace processor to compile),
and the SQL package only where it is the product: a trace, --engine wasm/native, ktrace query, SQL rules."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import ktrace
from ktrace import api
from ktrace.core.errors import InputError

from conftest import run_ktrace, sample


def _same(a, b):
    da, db = a.to_dict(), b.to_dict()
    for d in (da, db):
        d.pop("engine")
        d.pop("source")
    return da == db


@pytest.mark.slow
@pytest.mark.parametrize("name", ["imbalance", "waves_ktrace", "worklist_flashinfer"])
def test_numpy_and_the_sql_package_give_the_same_analysis(name):
    by_numpy = ktrace.analyze(sample(name), engine="numpy")
    by_sql = ktrace.analyze(sample(name), engine="wasm")
    assert (by_numpy.engine, by_sql.engine) == ("numpy", "wasm")
    assert _same(by_numpy, by_sql)


def test_auto_takes_numpy_at_every_size():
    assert ktrace.analyze(sample("imbalance")).engine == "numpy"  # 4,225 slots: numpy too, no engine
    assert ktrace.analyze(sample("imbalance"), engine="wasm").engine == "wasm"  # the SQL package when asked


def test_numpy_needs_the_buffer(tmp_path):
    trace = tmp_path / "t.perfetto-trace"
    ktrace.convert(sample("imbalance"), trace)
    with pytest.raises(InputError, match="needs the profiler buffer"):
        ktrace.analyze(trace, engine="numpy")


@pytest.mark.slow
def test_cli_engine_numpy(tmp_path):
    rc, out, err = run_ktrace("analyze", sample("imbalance"), "--engine", "numpy", "--json")
    assert rc == 0, err
    assert json.loads(out)["engine"] == "numpy"
    trace = tmp_path / "t.perfetto-trace"
    ktrace.convert(sample("imbalance"), trace)
    rc, out, err = run_ktrace("analyze", trace, "--engine", "numpy")
    assert rc == 2 and "needs the profiler buffer" in err


def test_analyze_has_no_engine_choice_to_explain(monkeypatch):
    said = []
    for size in (api.NUMPY_MIN_RECORDS, 1000):  # below and above the size of several workers
        monkeypatch.setattr(api, "NUMPY_MIN_RECORDS", size)
        a = ktrace.analyze(sample("imbalance"), on_engine=lambda e, why: said.append((e, why)))
        assert a.engine == "numpy"
    assert said == []


@pytest.mark.slow
def test_cli_analyzes_a_large_buffer_with_numpy_and_says_nothing_of_it(tmp_path):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "bench_convert.py"
    spec = importlib.util.spec_from_file_location("_bench_convert", path)
    bc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bc)
    buf, _ = bc.buffer_path(str(tmp_path), api.NUMPY_MIN_RECORDS, 1, 1)
    rc, out, err = run_ktrace("analyze", buf, "--json")
    assert rc == 0, err
    assert json.loads(out)["engine"] == "numpy"
    assert "analyzing with numpy" not in err and "trace processor" not in err


def test_annotate_keeps_the_sql_package_below_the_size_switch(monkeypatch, tmp_path):
    """The annotated trace is the SQL package's product: 'auto' takes numpy for it only on a large buffer,
    and says so."""
    said = []
    w = ktrace.annotate(sample("imbalance"), tmp_path / "a.perfetto-trace", on_engine=lambda e, why: said.append(why))
    assert w.analysis.engine in ("wasm", "native") and said == []
    monkeypatch.setattr(api, "NUMPY_MIN_RECORDS", 1000)
    w = ktrace.annotate(sample("imbalance"), tmp_path / "b.perfetto-trace", on_engine=lambda e, why: said.append(why))
    assert w.analysis.engine == "numpy"
    assert len(said) == 1 and re.fullmatch(r"analyzing with numpy: [\d,]+ record slots >= 1,000; --engine wasm for "
                                           r"the SQL package", said[0])


@pytest.mark.parametrize("name", ["imbalance", "waves_ktrace", "worklist_flashinfer"])
def test_numpy_over_lane_ranges_equals_numpy_over_the_whole_buffer(name):
    from ktrace.analysis import numpy_figures
    from ktrace.decoding import BufferDecoder
    from ktrace.core.model import Summary

    dec = BufferDecoder(sample(name))
    whole = dec.decode()
    assert len(dec.part_ranges(500)) > 1  # several ranges
    lean, summary = dec.slices_and_summary(500)
    assert summary == Summary.of(whole)
    assert len(lean.slices) == len(whole.slices) and len(lean.instants) == len(lean.anomalies) == 0
    for f in ("lane", "event", "k", "begin_seq", "end_seq", "begin_ns", "end_ns", "overlap", "sm"):
        assert np.array_equal(getattr(lean.slices, f), getattr(whole.slices, f)), f
    assert numpy_figures(lean, summary).differences(numpy_figures(whole)) == []


@pytest.mark.slow
def test_decoding_options_apply_whichever_engine_analyzes_the_buffer():
    for engine in ("wasm", "numpy", "auto"):
        a = ktrace.analyze(sample("imbalance"), engine=engine, events="p0,p1,p2")
        assert a.figures.phases.phase.tolist() == ["p0", "p1", "p2"], engine


@pytest.mark.slow
def test_diff_and_check_captures_of_a_buffer_are_analyzed_with_numpy():
    cap = api.load_capture(sample("imbalance"))
    assert cap.analysis.engine == "numpy"
    assert _same(cap.analysis, ktrace.analyze(sample("imbalance"), engine="wasm"))
    assert api.load_capture(sample("imbalance"), engine="wasm").analysis.engine == "wasm"


def test_check_without_sql_rules_needs_no_trace_processor(monkeypatch):
    import ktrace.engine

    def no_engine(*args, **kwargs):
        raise AssertionError("the trace processor was opened")

    monkeypatch.setattr(ktrace.engine, "open_trace", no_engine)
    c = ktrace.check(sample("imbalance"), ["compute.imbalance <= 100"])
    assert c.passed and [r.status for r in c.results] == ["pass"]
    with pytest.raises(AssertionError, match="trace processor was opened"):  # a SQL rule still needs it
        ktrace.check(sample("imbalance"), api.rule_book(sql=["SELECT 1 WHERE 0"]))
