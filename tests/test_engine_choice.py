"""analyze's engine choice: numpy computes a buffer's figures without the trace processor, the same figures,
findings and JSON as the SQL package; 'auto' takes numpy for large buffers."""

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


def test_auto_takes_numpy_for_a_large_buffer(monkeypatch):
    assert ktrace.analyze(sample("imbalance")).engine in ("wasm", "native")  # 4,225 slots: the SQL package
    monkeypatch.setattr(api, "NUMPY_MIN_RECORDS", 1000)
    assert ktrace.analyze(sample("imbalance")).engine == "numpy"


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


def test_auto_says_why_it_takes_numpy(monkeypatch):
    said = []
    ktrace.analyze(sample("imbalance"), on_engine=lambda e, why: said.append((e, why)))
    assert said == []  # below the switch: the SQL package, nothing to say
    monkeypatch.setattr(api, "NUMPY_MIN_RECORDS", 1000)
    a = ktrace.analyze(sample("imbalance"), on_engine=lambda e, why: said.append((e, why)))
    assert a.engine == "numpy"
    assert len(said) == 1 and said[0][0] == "numpy"
    assert re.fullmatch(r"analyzing with numpy: [\d,]+ record slots >= 1,000; --engine wasm for the SQL package",
                        said[0][1])
    said.clear()
    ktrace.analyze(sample("imbalance"), engine="numpy", on_engine=lambda e, why: said.append((e, why)))
    assert said == []  # asked for: not a choice to explain


@pytest.mark.slow
def test_cli_prints_the_engine_auto_chose(tmp_path):
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
    assert "analyzing with numpy:" in err and ">= 250,000; --engine wasm for the SQL package" in err
    rc, out, err = run_ktrace("analyze", buf, "--engine", "numpy", "--json")
    assert rc == 0 and "analyzing with numpy" not in err


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
def test_diff_and_check_captures_of_a_large_buffer_are_analyzed_with_numpy(monkeypatch):
    assert api.load_capture(sample("imbalance")).analysis.engine in ("wasm", "native")
    monkeypatch.setattr(api, "NUMPY_MIN_RECORDS", 1000)
    cap = api.load_capture(sample("imbalance"))
    assert cap.analysis.engine == "numpy"
    assert _same(cap.analysis, ktrace.analyze(sample("imbalance"), engine="wasm"))
