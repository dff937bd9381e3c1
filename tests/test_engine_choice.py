"""analyze's engine choice: numpy computes a buffer's figures without the trace processor, the same figures,
findings and JSON as the SQL package; 'auto' takes numpy for large buffers."""

from __future__ import annotations

import json

import pytest

import ktrace
from ktrace import api
from ktrace.errors import InputError

from conftest import run_ktrace, sample


def _same(a, b):
    da, db = a.to_dict(), b.to_dict()
    for d in (da, db):
        d.pop("engine")
        d.pop("source")
    return da == db


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
