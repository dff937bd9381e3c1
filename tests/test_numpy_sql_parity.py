"""The main job's numpy figures equal the SQL package's on every sample (the package stays the reference for
``ktrace query``, SQL rules and the annotated trace), at every size (the wait evidence is read the same way
beyond EVIDENCE_MAX_SLICES top-level slices), and analyzing a buffer needs no trace processor."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ktrace
from ktrace.analysis.evidence import in_parts
from ktrace.decoding.encode import phase_buffer
from ktrace.inputs import open_input
from ktrace.report.analysis_report import sampled_line

from conftest import SAMPLES, quick_first, run_ktrace

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
    with open_input(path, engine="wasm") as inp:  # one load for the analysis and the SQL waits
        by_sql = ktrace.analyze(inp.session)
        _evidence_against_sql(inp.session, by_numpy, some=False)
    assert (by_numpy.engine, by_sql.engine) == ("numpy", "wasm")
    assert sampled_line(by_numpy) is None and sampled_line(by_sql) is None  # every slice read, and not said
    a, b = _comparable(by_numpy), _comparable(by_sql)
    differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    assert differ == [], differ


# The SQL package's own reading of the waits (ktrace.waits: every top-level slice's gap to the lane's next one),
# per boundary and warp group: what the evidence must take exactly from every slice, even from a sample.
_SQL_WAITS = ("INCLUDE PERFETTO MODULE ktrace.waits; SELECT phase, next_phase, grp, COUNT(*), SUM(gap_ns), "
              "MAX(gap_ns) FROM ktrace_lane_wait WHERE gap_ns >= 0 GROUP BY phase, next_phase, grp")


def _evidence_against_sql(source, by_numpy, some: bool = True, **options) -> None:
    """The numpy engine's wait evidence (count, sum and longest wait of each boundary and group) equals what the
    SQL package computes from the trace, in SQL: the two engines compared for real (both engines' evidence tests
    run the same numpy code, on the slices each read)."""
    w = by_numpy.figures.wait_causes
    ours = sorted(zip(map(str, w.phase), map(str, w.next_phase), map(int, w.group), map(int, w.count),
                      map(int, w.sum_ns), map(int, w.max_ns)))
    if isinstance(source, Path):
        rows = ktrace.query(source, _SQL_WAITS, engine="wasm", **options).rows
    else:  # a session the analysis registered the package on
        rows = source.query(_SQL_WAITS).rows
    theirs = sorted((str(p), str(n), int(g), int(c), int(s), int(m)) for p, n, g, c, s, m in rows)
    assert ours == theirs and (ours or not some)


def _differ(by_numpy, by_sql) -> list[str]:
    """What differs between the two analyses: every figure (Figures.differences: the lead-ins too) and every
    key of the JSON output but the engine's name."""
    a, b = _comparable(by_numpy), _comparable(by_sql)
    return by_numpy.figures.differences(by_sql.figures) + sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


@pytest.mark.parametrize("name", quick_first(["imbalance.bin", "cluster_ktrace.bin", "warpgroups_flashinfer.bin",
                                                  "nested_ktrace.bin", "slots_ktrace.bin", "pipeline_flashinfer.bin"], 1))
def test_a_sampled_evidence_is_the_same_sample_on_both_engines(name, monkeypatch):
    # Beyond EVIDENCE_MAX_SLICES top-level slices both engines read the same sample of whole blocks (64 here,
    # so that a sample is small): the wait causes, the lead-ins, the findings, and no replay on either side.
    monkeypatch.setattr(in_parts, "EVIDENCE_MAX_SLICES", 64)
    by_numpy, by_sql = ktrace.analyze(SAMPLES / name), ktrace.analyze(SAMPLES / name, engine="wasm")
    causes = by_numpy.figures.wait_causes
    assert (causes.tested_gaps < causes.count).any()  # a sample was read, and the JSON says so
    assert _differ(by_numpy, by_sql) == []
    _evidence_against_sql(SAMPLES / name, by_numpy)
    assert by_numpy.figures.top is None and by_sql.figures.top is None
    said = sampled_line(by_numpy)  # the report says the evidence was a sample, whichever engine read it
    assert said and said == sampled_line(by_sql) and "not replayed" in said, said


def _barrier_buffer(blocks: int, groups: int, steps: int, seed: int = 7) -> np.ndarray:
    """A persistent kernel of load/compute/reduce steps, each after a grid barrier (the last lane's end of the
    step before, plus 320 ns), with a tick of jitter, a random skew, and block 5 three times as slow in compute:
    waits at every boundary, released by the grid."""
    rng = np.random.default_rng(seed)
    lanes = blocks * groups
    event = np.arange(steps) % 3
    dur = np.asarray([960, 1920, 320])[event] + 32 * rng.integers(0, 4, (lanes, steps))
    dur[5 * groups:6 * groups, event == 1] *= 3
    skew = 32 * rng.integers(0, 8, (lanes, steps))
    span = (skew + dur).max(axis=0) + 320
    start = 10_000 + np.r_[0, np.cumsum(span[:-1])]
    begin = start + skew
    return phase_buffer(begin, begin + dur, event, num_groups=groups, sm=np.arange(blocks))


@pytest.mark.slow
def test_numpy_equals_the_sql_package_above_the_evidence_bound(tmp_path):
    # The smallest case that crosses the real bound (2^19 top-level slices): 64 blocks x 2 warp groups x 4,100
    # steps = 524,800 slices. The evidence is a sample on both engines; every figure and finding is equal.
    buf = _barrier_buffer(64, 2, 4100)
    path = tmp_path / "above_bound.bin"
    buf.astype("<u8").tofile(path)
    by_numpy = ktrace.analyze(path, events="load,compute,reduce")
    by_sql = ktrace.analyze(path, engine="wasm", events="load,compute,reduce")
    assert by_numpy.figures.kernel.slices > in_parts.EVIDENCE_MAX_SLICES
    causes = by_numpy.figures.wait_causes
    assert len(causes) >= 3 and (causes.tested_gaps < causes.count).all()  # sampled, and said so
    assert _differ(by_numpy, by_sql) == []
    _evidence_against_sql(path, by_numpy, events="load,compute,reduce")
    assert by_numpy.figures.top is None and by_sql.figures.top is None
    said = sampled_line(by_numpy)  # the report says the evidence was a sample, whichever engine read it
    assert said and said == sampled_line(by_sql) and "not replayed" in said, said


def test_analyze_on_a_new_machine_compiles_no_engine(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    env = {"KTRACE_CACHE_DIR": str(cache), "TMPDIR": str(tmp_path), "KTRACE_TP_SHELL": ""}
    rc, out, err = run_ktrace("analyze", SAMPLES / "imbalance.bin", env=env)
    assert rc == 0, err
    assert "compiling" not in err and "trace processor" not in err, err
    assert out.startswith("persistent_phases: 132 blocks") and "1 warning," in out
    left = [p.name for p in cache.rglob("*") if p.is_file()]
    assert not [n for n in left if n.endswith(".cwasm")], left
    # ktrace query still compiles the engine on its first use (as documented), into the same cache: it gets as
    # far as compiling (said on stderr, naming the cache), where a stand-in stops it (not 15 s of compiling)
    code = ("import sys\nfrom ktrace.engine import wasm_cache\n"
            "def _compile(*args):\n    sys.exit(42)\n"
            "wasm_cache._compile = _compile\nfrom ktrace.cli import main\nsys.exit(main(sys.argv[1:]))")
    p = subprocess.run([sys.executable, "-c", code, "query", str(SAMPLES / "imbalance.bin"), "SELECT 1 AS one"],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, **env))
    assert p.returncode == 42, p.stderr
    assert "compiling the trace processor" in p.stderr and str(cache) in p.stderr, p.stderr


@pytest.mark.parametrize("name", ["slow_load_run1", "straggler_run1"])
def test_both_engines_replay_the_timed_waits_alike(name):
    """IKET's waits nested in the lanes' work (mma_wait, load_wait) reach the replay from either engine: the
    same figures, the same warnings, each stake the same replayed saving."""
    path = SAMPLES / "iket" / f"{name}.trace.json.gz"
    by_numpy, by_sql = ktrace.analyze(path), ktrace.analyze(path, engine="wasm")
    assert by_numpy.figures.timed is not None and by_sql.figures.timed is not None
    assert len(by_numpy.figures.timed.lane) == len(by_sql.figures.timed.lane) > 0
    assert _differ(by_numpy, by_sql) == []
    warn = [f for f in by_sql.findings if f.severity == "warning"]
    assert warn and warn[0].figures["replayed_saving_ns"] is not None
