"""The main job's numpy figures equal the SQL package's on every sample (the package stays the reference for
``ktrace query``, SQL rules and the annotated trace), and analyzing a buffer needs no trace processor."""

from __future__ import annotations

import pytest

import ktrace

from conftest import SAMPLES, run_ktrace

_SAMPLES = sorted([*SAMPLES.glob("*.bin"), *SAMPLES.glob("*.bin.gz"),
                   *SAMPLES.glob("repeats/*.bin")])


def _comparable(a) -> dict:
    d = a.to_dict()
    d.pop("engine")
    d.pop("source")
    return d


def test_every_sample_is_listed():
    assert len(_SAMPLES) >= 60  # the generated buffers, the FlashInfer captures, the repeats


@pytest.mark.slow
@pytest.mark.parametrize("path", _SAMPLES, ids=lambda p: p.name)
def test_numpy_equals_the_sql_package_on_every_sample(path):
    by_numpy = ktrace.analyze(path)  # the default: numpy
    by_sql = ktrace.analyze(path, engine="wasm")
    assert (by_numpy.engine, by_sql.engine) == ("numpy", "wasm")
    a, b = _comparable(by_numpy), _comparable(by_sql)
    differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    assert differ == [], differ


def test_analyze_on_a_new_machine_compiles_no_engine(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    env = {"KTRACE_CACHE_DIR": str(cache), "TMPDIR": str(tmp_path), "KTRACE_TP_SHELL": ""}
    rc, out, err = run_ktrace("analyze", SAMPLES / "imbalance.bin", env=env)
    assert rc == 0, err
    assert "compiling" not in err and "trace processor" not in err, err
    assert out.startswith("persistent_phases: 132 blocks") and "2 warnings" in out
    left = [p.name for p in cache.rglob("*") if p.is_file()]
    assert not [n for n in left if n.endswith(".cwasm")], left
    # ktrace query still compiles the engine on its first use (as documented), into the same cache
    rc, out, err = run_ktrace("query", SAMPLES / "imbalance.bin", "SELECT 1 AS one", env=env)
    assert rc == 0, err
    assert [p.name for p in cache.rglob("*.cwasm")], "ktrace query left no compiled engine"
