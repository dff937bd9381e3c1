"""The analysis layer: the SQL package and the numpy engine agree exactly; both match the independent
figures in samples/expected/; synthetic buffers with known answers; findings; the analyze/query commands.

One engine Session per trace (module-scoped fixtures), so the suite stays fast.
"""

import csv
import io
import json

import numpy as np
import pytest

from ktrace import decode
from ktrace import analyze
from ktrace.analysis import Thresholds, bundle_sql, numpy_figures, sql_figures
from ktrace.analysis.findings.find import find
from ktrace.engine import open_trace
from ktrace.core.errors import EXIT_ENV, EXIT_INPUT, InputError
from ktrace.export.writer import write_trace
from ktrace.decoding.encode import phase_buffer

from conftest import SAMPLE_NAMES, SAMPLES, run_ktrace, sample

T0 = 10_000  # first timestamp: a record at t=0 on block 0 would be all zeros (an empty slot)
TICK = 32
LOAD, COMPUTE, REDUCE = 0, 1, 2
EVENTS = "load,compute,reduce"


# -- building synthetic kernels ----------------------------------------------------------------------

def barrier_kernel(dur, *, skew=None, release=None, barrier=320, num_groups=1):
    """begin/end (lanes, steps) for a grid-synchronized kernel: step j on every lane starts after the
    slowest lane's end of step j-1, plus `barrier`, plus the lane's `release` delay and `skew` (ns)."""
    dur = np.asarray(dur, np.int64)
    lanes, steps = dur.shape
    skew = np.zeros_like(dur) if skew is None else np.asarray(skew, np.int64)
    release = np.zeros_like(dur) if release is None else np.asarray(release, np.int64)
    begin = np.zeros_like(dur)
    end = np.zeros_like(dur)
    t = T0
    for j in range(steps):
        begin[:, j] = t + skew[:, j] + release[:, j]
        end[:, j] = begin[:, j] + dur[:, j]
        t = int(end[:, j].max()) + barrier
    return begin, end


def three_phase_durations(lanes, iters, base=(960, 1920, 320), jitter=True):
    """(lanes, 3*iters) durations of load/compute/reduce, whole ticks, a tick of jitter per lane."""
    d = np.tile(np.asarray(base, np.int64), (lanes, iters))
    if jitter:
        d += TICK * (np.arange(lanes) % 3)[:, None]
    return d


EVENT_ROW = np.tile([LOAD, COMPUTE, REDUCE], 4)


def synthetic_cases():
    lanes, iters = 8, 4
    cases = {}

    # 1. one block (5) does 3x the compute in every iteration.
    d = three_phase_durations(lanes, iters)
    d[5, 1::3] *= 3
    cases["imbalanced_block"] = (barrier_kernel(d), EVENT_ROW, 1)

    # 2. the slow block moves: block k is slow in iteration k.
    d = three_phase_durations(lanes, iters)
    for k in range(iters):
        d[k, 3 * k + 1] *= 2
    cases["moving_straggler"] = (barrier_kernel(d), EVENT_ROW, 1)

    # 3. equal durations, starts spread by 64 ns per block.
    d = three_phase_durations(lanes, iters, jitter=False)
    skew = np.repeat((64 * np.arange(lanes))[:, None], 3 * iters, axis=1)
    cases["skewed_starts"] = (barrier_kernel(d, skew=skew), EVENT_ROW, 1)

    # 4. slow release: after each barrier the lanes are let go one by one, 96 ns apart (reduce only).
    d = three_phase_durations(lanes, iters)
    release = np.zeros_like(d)
    release[:, 2::3] = (96 * np.arange(lanes))[:, None]
    cases["slow_release"] = (barrier_kernel(d, release=release), EVENT_ROW, 1)

    # 5. ties: block 3 is last alone in instances 0-1, tied with block 1 in 2 and with block 0 in 3.
    d = three_phase_durations(lanes, iters)
    d[3, 1::3] += 10 * TICK
    d[1, 1 + 3 * 2] = d[3, 1 + 3 * 2]
    d[0, 1 + 3 * 3] = d[3, 1 + 3 * 3]
    cases["ties"] = (barrier_kernel(d), EVENT_ROW, 1)

    # 6. two warp groups with their own phases: group 0 loads, group 1 computes; block 2's group 1 is slow.
    groups, blocks = 2, 4
    d = np.full((blocks * groups, 4), 640, np.int64) + TICK * (np.arange(blocks * groups) % 2)[:, None]
    d[2 * groups + 1] = 1280
    ev = np.where(np.arange(blocks * groups)[:, None] % 2 == 0, LOAD, COMPUTE) * np.ones((1, 4), np.int64)
    cases["two_groups"] = (barrier_kernel(d, num_groups=groups), ev, groups)
    return cases


CASES = synthetic_cases()


def build(case, tmp):
    (begin, end), event, groups = CASES[case]
    buf = phase_buffer(begin, end, event, num_groups=groups, sm=np.arange(begin.shape[0] // groups) + 10)
    d = decode(buf, events=EVENTS)
    assert d.accounted and len(d.anomalies) == 0
    path = tmp / f"{case}.perfetto-trace"
    write_trace(d, path)
    return d, path


# -- fixtures: one engine session per trace ------------------------------------------------------------

class _Lazy(dict):
    """A dict that computes an entry on first use (the quick lane asks for a few of them only)."""

    def __init__(self, make):
        super().__init__()
        self._make = make

    def __missing__(self, name):
        self[name] = value = self._make(name)
        return value


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """name -> (Decoded, trace path) for every sample and synthetic case, each made when first asked for."""
    tmp = tmp_path_factory.mktemp("analysis")

    def make(name):
        if name in CASES:
            return build(name, tmp)
        d = decode(sample(name))
        path = tmp / f"{name}.perfetto-trace"
        write_trace(d, path)
        return d, path

    return _Lazy(make)


@pytest.fixture(scope="module")
def figures(traces):
    """name -> (numpy Figures, SQL Figures), each made when first asked for."""

    def make(name):
        d, path = traces[name]
        with open_trace(path) as session:
            return numpy_figures(d), sql_figures(session)

    return _Lazy(make)


# Every capture and case in the full run; the quick lane (-m "not slow") keeps the synthetic cases and one
# capture per kind of kernel (one group, warp groups, instants, overflow).
_QUICK = {"imbalance", "warpgroups", "instants_ktrace", "overflow_ktrace"}
ALL = [n if n in _QUICK else pytest.param(n, marks=pytest.mark.slow) for n in SAMPLE_NAMES] + list(CASES)


# -- SQL == numpy --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ALL)
def test_sql_and_numpy_figures_are_equal(figures, name):
    numpy_fig, sql = figures[name]
    assert numpy_fig.differences(sql) == []
    assert len(sql.instances) > 0


@pytest.mark.parametrize("seed", range(12))
def test_sql_and_numpy_agree_on_random_nesting_ties_and_zero_durations(tmp_path, seed):
    from ktrace.decoding.encode import encode_tags, place_records

    rng = np.random.default_rng(seed)
    groups, blocks = int(rng.integers(1, 3)), int(rng.integers(1, 5))
    cols = {k: [] for k in ("b", "g", "s", "t", "e", "ts")}
    cap = 0
    for b in range(blocks):
        for g in range(groups):
            t, seq, open_ = T0 + 32 * int(rng.integers(0, 5)), 0, []
            for _ in range(int(rng.integers(2, 16))):
                if open_ and rng.random() < 0.5:
                    e, typ = open_.pop(int(rng.integers(len(open_)))), 1
                else:
                    free = [x for x in range(3) if x not in open_]
                    if not free:
                        continue
                    e, typ = int(rng.choice(free)), 0
                    open_.append(e)
                for k, v in zip(cols, (b, g, seq, typ, e, t)):
                    cols[k].append(v)
                seq, t = seq + 1, t + 32 * int(rng.integers(0, 3))
            while open_:
                for k, v in zip(cols, (b, g, seq, 1, open_.pop(), t)):
                    cols[k].append(v)
                seq, t = seq + 1, t + 32
            cap = max(cap, seq)
    tag = encode_tags("flashinfer", cols["t"], cols["e"], cols["b"], cols["g"], groups, sm=cols["b"])
    d = decode(place_records(blocks, groups, cols["b"], cols["g"], cols["s"], tag, cols["ts"], cap + 1),
               events=EVENTS)
    path = tmp_path / "random.perfetto-trace"
    write_trace(d, path)
    with open_trace(path) as session:
        assert numpy_figures(d).differences(sql_figures(session)) == []


# -- against the independent decoder's figures ------------------------------------------------------------

@pytest.mark.parametrize("name", [p.name.split(".")[0] for p in sorted((SAMPLES / "expected").glob("*.figures.json"))])
def test_numpy_engine_matches_expected_figures(figures, name):
    expected = json.loads((SAMPLES / "expected" / f"{name}.figures.json").read_text())
    inst = figures[name][0].instances
    got = {(r["phase"], r["k"]): r for r in inst.rows()}
    assert len(got) == len(expected)
    first = int(inst.begin_ns.min())
    phases = figures[name][0].phases
    top = dict(zip(phases.phase.tolist(), phases.top_last_block.tolist()))
    for e in expected:
        r = got[(e["phase"], e["k"])]
        for key in ("lanes", "max_dur_ns", "wall_ns", "excess_ns", "start_skew_ns", "end_skew_ns"):
            assert r[key] == e[key], (e["phase"], e["k"], key)
        # The independent decoder breaks a tie by the lowest block; ktrace by the phase's top last block
        # when it is among the tied lanes (one rule for both tables), else by the lowest block too.
        if r["tied_last_lanes"] == 1:
            assert (r["last_block"], r["last_group"]) == (e["last_block"], e["last_group"]), (e["phase"], e["k"])
        else:
            assert r["last_block"] in (e["last_block"], top[e["phase"]]), (e["phase"], e["k"])
        assert r["mean_dur_ns"] == pytest.approx(e["mean_dur_ns"], abs=5e-4)
        assert r["imbalance"] == pytest.approx(e["imbalance"], abs=5e-7)
        assert r["begin_ns"] - first == e["first_begin_ns"]


# -- known answers on synthetic kernels --------------------------------------------------------------------

def phase_row(fig, phase):
    return fig.phases.row(fig.phases.phase.tolist().index(phase))


def test_imbalanced_block(figures):
    fig = figures["imbalanced_block"][1]
    compute = fig.instances.where(fig.instances.phase == "compute")
    durs = (1920 + 32 * (np.arange(8) % 3)) * np.where(np.arange(8) == 5, 3, 1)
    assert compute.last_block.tolist() == [5] * 4
    assert compute.max_dur_ns.tolist() == [int(durs.max())] * 4
    assert compute.imbalance.tolist() == [durs.max() * 8 / durs.sum()] * 4
    assert compute.excess_ns.tolist() == [0] * 4  # every lane starts together
    p = phase_row(fig, "compute")
    assert (p["top_last_block"], p["top_last_count"], p["distinct_last_blocks"]) == (5, 4, 1)
    findings = find(fig)
    straggler = [f for f in findings if f.kind == "stable_straggler"]
    assert len(straggler) == 1 and straggler[0].phase == "compute" and straggler[0].severity == "warning"
    assert "block 5 is the last finisher in 4 of 4 instances" in straggler[0].message
    # One cause, one finding: the imbalance block 5 makes is listed in the straggler's finding.
    assert [c["kind"] for c in straggler[0].figures["consequences"]] == ["load_imbalance"]
    assert not [f for f in findings if f.kind == "load_imbalance" and f.phase == "compute"]
    # The others wait for block 5 at the following barrier: compute -> reduce waits up to 2 x compute.
    w = fig.waits.row(fig.waits.phase.tolist().index("compute"))
    assert w["next_phase"] == "reduce" and w["max_ns"] == int(durs.max() - durs.min()) + 320


def test_moving_straggler(figures):
    fig = figures["moving_straggler"][1]
    compute = fig.instances.where(fig.instances.phase == "compute")
    assert compute.last_block.tolist() == [0, 1, 2, 3]
    p = phase_row(fig, "compute")
    assert (p["top_last_count"], p["distinct_last_blocks"]) == (1, 4)
    # Each instance has one long lane, a different one each time: the cost is in the work assignment.
    rotating = [f for f in find(fig) if f.kind == "rotating_imbalance"]
    assert len(rotating) == 1 and "4 blocks" in rotating[0].message
    assert not any(f.kind == "moving_last_finisher" for f in find(fig))


def test_skewed_starts(figures):
    fig = figures["skewed_starts"][1]
    spread = 64 * 7
    assert fig.instances.start_skew_ns.tolist() == [spread] * len(fig.instances)
    assert fig.instances.excess_ns.tolist() == [spread] * len(fig.instances)  # equal durations
    assert fig.instances.imbalance.tolist() == [1.0] * len(fig.instances)
    assert fig.instances.last_block.tolist() == [7] * len(fig.instances)  # the latest starter ends last
    # The synthetic kernel's smallest step is 320 ns; judge it at the real 32 ns tick.
    found = find(fig, Thresholds(tick_ns=32))
    kinds = {(f.kind, f.phase) for f in found}
    # Block 7 is last because it starts last: one late-start finding, its lag in later phases its consequence.
    # Its stake is what starting it on time saves: block 6, launched 64 ns before it, then ends the kernel, so
    # 64 ns (replayed), under the impact floor: information, not a warning.
    late = [f for f in found if f.kind == "late_start"]
    assert len(late) == 1 and late[0].figures["block"] == 7 and late[0].severity == "info"
    assert late[0].impact_ns == late[0].figures["replayed_saving_ns"] == 64
    assert not any(k in ("load_imbalance", "stable_straggler") for k, _ in kinds)
    # Every lane's skew repeats after each barrier, so each begin follows the lane's own end exactly as closely
    # as the barrier's: the waits are not called a barrier's release, nor blamed on other lanes.
    assert set(fig.wait_causes.cause.tolist()) <= {"own", "unexplained"}
    assert not any("grid-wide" in f.message for f in found)


def test_slow_release(figures):
    fig = figures["slow_release"][1]
    reduce = fig.instances.where(fig.instances.phase == "reduce")
    assert reduce.start_skew_ns.tolist() == [96 * 7] * 4
    w = fig.waits.row(fig.waits.phase.tolist().index("compute"))
    # Lane l waits (max compute end - its end) + barrier + 96 * l before its reduce begins.
    comp = 1920 + 32 * (np.arange(8) % 3)
    gaps = np.sort(np.tile(comp.max() - comp + 320 + 96 * np.arange(8), 4))
    assert (w["count"], w["min_ns"], w["max_ns"], w["sum_ns"]) == (32, gaps[0], gaps[-1], gaps.sum())
    assert (w["p50_ns"], w["p90_ns"]) == (gaps[int(0.5 * 31)], gaps[int(0.9 * 31)])
    assert (w["max_block"], w["max_k"]) == (7, 0)
    # Lane 7 is released last after each barrier before reduce: it is late because of the release (the gap
    # before its slice is its own), not its work.
    found = find(fig)
    late = [f for f in found if f.kind == "late_start" and f.phase == "reduce"]
    assert late and late[0].figures["block"] == 7
    assert not any(f.kind in ("stable_straggler", "load_imbalance") and f.phase == "reduce" for f in found)


def test_a_tie_is_not_the_last_finisher_moving(figures):
    fig = figures["ties"][1]
    compute = fig.instances.where(fig.instances.phase == "compute")
    assert compute.last_block.tolist() == [3, 3, 3, 3]  # latest end; a tie goes to the phase's top block
    assert compute.tied_last_lanes.tolist() == [1, 1, 2, 2]
    assert compute.last_lead_ns[2:].tolist() == [0.0, 0.0]
    p = phase_row(fig, "compute")
    assert (p["top_last_block"], p["top_last_count"], p["distinct_last_blocks"], p["tied_instances"]) == (3, 4, 1, 2)


def test_two_groups_report_their_phases_separately(figures):
    fig = figures["two_groups"][1]
    # Both begin at once: phases are ordered by first begin, then name.
    assert list(zip(fig.phases.phase.tolist(), fig.phases.groups.tolist())) == [("compute", "1"), ("load", "0")]
    assert fig.instances.where(fig.instances.phase == "compute").last_group.tolist() == [1] * 4
    assert set(fig.lanes.where(fig.lanes.phase == "load").group.tolist()) == {0}


def test_critical_path_follows_the_last_finishers(figures):
    fig = figures["imbalanced_block"][1]
    cp = fig.critical_path
    sl = cp.kind == "slice"
    assert cp.phase[sl].tolist() == ["load", "compute", "reduce"] * 4
    assert cp.kind[~sl].tolist() == ["wait"] * 11  # every phase waits at the barrier for the last finisher
    assert cp.last_block[sl & (cp.phase == "compute")].tolist() == [5] * 4
    # After block 5 leaves compute, the barrier's 320 ns; the parts tile the kernel exactly.
    assert cp.dur_ns[(cp.kind == "wait") & (cp.phase == "compute")].tolist() == [320] * 4
    assert (cp.begin_ns[1:] == cp.end_ns[:-1]).all() and cp.begin_ns[0] == fig.kernel.begin_ns
    assert fig.critical_shares.total_ns.sum() == fig.kernel.wall_ns
    assert fig.critical_shares.coverage(fig.kernel.wall_ns) == 1.0


# -- findings on the real captures --------------------------------------------------------------------------

def test_imbalance_capture_names_block_17_as_the_stable_last_finisher_of_compute(figures):
    fig = figures["imbalance"][1]
    p = phase_row(fig, "compute")
    assert (p["top_last_block"], p["top_last_count"], p["instances"], p["distinct_last_blocks"]) == (17, 8, 8, 1)
    findings = find(fig)
    assert findings[0].severity == "warning"
    by_kind = {(f.kind, f.phase): f for f in findings}
    straggler = by_kind[("stable_straggler", "compute")]
    assert "block 17 is the last finisher in 8 of 8 instances" in straggler.message
    assert straggler.figures["top_last_block"] == 17
    # One cause, one finding: block 17's imbalance is the straggler's consequence, not a second warning.
    assert [c["kind"] for c in straggler.figures["consequences"]] == ["load_imbalance"]
    assert f"load imbalance {p['imbalance']:.2f}x" in straggler.message
    assert ("load_imbalance", "compute") not in by_kind
    assert p["imbalance"] == pytest.approx(2.9127, abs=1e-4)
    assert by_kind[("critical_path", "compute")].figures["share"] > 0.8
    # The others wait for it at a grid-wide barrier: that barrier's own release is a finding of its own.
    wait = by_kind[("large_wait", "compute")]
    assert "grid-wide barrier" in wait.message and "block 17" in wait.message
    assert wait.figures["waited_for"] == "grid" and wait.figures["waited_block"] == 17
    assert sum(f.impact_ns for f in findings if f.severity == "warning") <= fig.kernel.wall_ns
    # Reduce's last finisher ties in every instance; ties don't make it "move", and no straggler is claimed.
    assert not any(f.phase == "reduce" and "last" in f.kind for f in findings)
    assert not any(f.phase == "load" and f.kind == "load_imbalance" for f in findings)


def test_warpgroups_capture_reports_each_groups_phase_separately(figures):
    fig = figures["warpgroups"][1]
    assert list(zip(fig.phases.phase.tolist(), fig.phases.groups.tolist())) == [("load", "0"), ("mma", "1")]
    assert set(fig.instances.where(fig.instances.phase == "mma").last_group.tolist()) == {1}
    assert set(fig.instances.where(fig.instances.phase == "load").last_group.tolist()) == {0}
    messages = [f.message for f in find(fig)]
    assert any(m.startswith("load (group 0)") for m in messages)
    assert any(m.startswith("mma (group 1)") for m in messages)


def test_timer_tick_comes_from_the_capture_and_bounds_findings(figures):
    fig = figures["imbalance"][1]
    assert (fig.kernel.tick_ns, fig.kernel.tick_source) == (32, "smallest step")
    # With a coarse resolution the reduce skew (~470 ns) is no longer a finding.
    coarse = find(fig, Thresholds(tick_ns=1000))
    assert not any(f.kind == "start_skew" and f.phase == "reduce" for f in coarse)


def test_thresholds_parse_and_reject_unknown_names():
    th = Thresholds.parse(["imbalance=1.5", "top_waits=1"])
    assert (th.imbalance, th.top_waits) == (1.5, 1)
    for bad in ("nope=1", "imbalance", "imbalance=abc", "imbalance=-1"):
        with pytest.raises(InputError):
            Thresholds.parse([bad])


@pytest.mark.slow
def test_analyze_on_trace_buffer_and_decoded_agree(traces):
    d, path = traces["imbalance"]
    by_trace = analyze(path)
    by_buffer = analyze(sample("imbalance"))
    by_numpy = analyze(d)
    assert by_numpy.engine == "numpy" and by_trace.engine in ("wasm", "native")
    assert by_trace.figures.differences(by_buffer.figures) == []
    assert by_trace.figures.differences(by_numpy.figures) == []
    assert [f.message for f in by_trace.findings] == [f.message for f in by_numpy.findings]
    doc = json.loads(by_trace.to_json())
    assert doc["schema"] == "ktrace.analysis/2"
    assert doc["phases"][1]["top_last_block"] == 17
    assert {"kind", "phase", "severity", "message", "figures"} <= set(doc["findings"][0])


def test_bundle_runs_where_the_package_cannot_be_registered(traces):
    with open_trace(traces["imbalance"][1]) as session:
        session.query(bundle_sql())
        session.query(bundle_sql())  # pasted twice: CREATE OR REPLACE
        rows = session.query("SELECT phase, top_last_block FROM ktrace_phase ORDER BY phase_index").rows
    assert rows == [("load", 69), ("compute", 17), ("reduce", 106)]


# -- command line ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def imbalance_trace(traces):
    return traces["imbalance"][1]


@pytest.mark.slow
def test_cli_analyze_buffer_text_json_and_plot(tmp_path):
    png = tmp_path / "out.png"
    rc, out, err = run_ktrace("analyze", sample("imbalance"), "--json", "--plot", png)
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "ktrace.analysis/2" and doc["launch"]["kernel"] == "persistent_phases"
    assert any(f["kind"] == "stable_straggler" and f["figures"]["top_last_block"] == 17 for f in doc["findings"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000

    rc, out, err = run_ktrace("analyze", sample("imbalance"), "--details")
    assert rc == 0, err
    assert out.index("findings") < out.index("compute: instances")
    assert "block 17 is the last finisher in 8 of 8 instances" in out
    assert "thresholds: imbalance=1.1" in out


@pytest.mark.slow
def test_cli_analyze_trace_markdown_and_threshold(imbalance_trace):
    rc, out, err = run_ktrace("analyze", imbalance_trace, "--markdown", "--threshold", "imbalance=5")
    assert rc == 0, err
    assert out.startswith("### ktrace analyze: `persistent_phases`")
    assert "| phase | groups |" in out and "**warning** (stable_straggler)" in out
    assert "load_imbalance" not in out  # 2.91x is under 5


@pytest.mark.parametrize("args, code, words", [
    (("analyze", "missing.perfetto-trace"), EXIT_INPUT, "no such file"),
    (("analyze", "IMB", "--threshold", "bogus=1"), EXIT_INPUT, "threshold"),
    (("analyze", "TRACE", "--events", "a,b"), EXIT_INPUT, "apply to buffers"),
    (("query", "TRACE", "SELECT * FROM nope"), EXIT_INPUT, "query failed"),
    (("query", "TRACE", "SELECT * FROM ktrace_phase"), EXIT_INPUT, "INCLUDE PERFETTO MODULE"),
    (("analyze", "TRACE", "--engine", "native"), EXIT_ENV, "KTRACE_TP_SHELL"),
])
@pytest.mark.slow
def test_cli_errors_exit_with_the_documented_code(imbalance_trace, args, code, words):
    args = [{"IMB": sample("imbalance"), "TRACE": imbalance_trace}.get(a, a) for a in args]
    rc, out, err = run_ktrace(*args, env={"KTRACE_TP_SHELL": ""})
    assert rc == code, err
    assert words in err and "Traceback (most recent call last):\n  File \"/" not in err  # no Python traceback


@pytest.mark.slow
def test_cli_query_csv_json_and_file(imbalance_trace, tmp_path):
    sql = "INCLUDE PERFETTO MODULE ktrace.phases;\nSELECT phase, top_last_block, top_last_count FROM ktrace_phase ORDER BY phase_index"
    rc, out, err = run_ktrace("query", imbalance_trace, sql, "--csv")
    assert rc == 0, err
    assert list(csv.reader(io.StringIO(out))) == [["phase", "top_last_block", "top_last_count"],
                                                  ["load", "69", "8"], ["compute", "17", "8"],
                                                  ["reduce", "106", "7"]]
    f = tmp_path / "q.sql"
    f.write_text(sql)
    rc, out, err = run_ktrace("query", imbalance_trace, "-f", f, "--json")
    assert rc == 0, err
    assert json.loads(out)[1] == {"phase": "compute", "top_last_block": 17, "top_last_count": 8}
    rc, out, err = run_ktrace("query", sample("warpgroups"), "INCLUDE PERFETTO MODULE ktrace.phases; "
                              "SELECT phase, groups FROM ktrace_phase ORDER BY phase_index")
    assert rc == 0, err
    assert "load" in out and "mma" in out and "2 rows" in out


@pytest.mark.slow
def test_cli_query_prints_the_package(tmp_path):
    rc, out, err = run_ktrace("query", "--print-package")
    assert rc == 0, err
    assert "CREATE OR REPLACE PERFETTO TABLE ktrace_phase_instance" in out
    assert "INCLUDE PERFETTO MODULE ktrace" not in out


def test_a_trace_without_phase_slices_has_empty_figures_and_no_findings(tmp_path):
    from ktrace.report.analysis_report import analysis_markdown
    from ktrace.decoding.encode import encode_tags, place_records

    tag = encode_tags("flashinfer", [2, 2], [0, 0], [0, 1], [0, 0], 1, sm=[0, 1])  # two instants
    d = decode(place_records(2, 1, [0, 1], [0, 0], [0, 0], tag, [T0, T0 + TICK], 2), events="a")
    path = tmp_path / "instants.perfetto-trace"
    write_trace(d, path)
    with open_trace(path) as session:
        fig = sql_figures(session)
    assert numpy_figures(d).differences(fig) == []
    assert len(fig.phases) == len(fig.instances) == len(fig.critical_path) == 0
    assert (fig.kernel.slices, fig.kernel.tick_ns, fig.kernel.tick_source) == (0, 32, "default")
    assert find(fig) == ()
    assert "No phase slices" in analysis_markdown(analyze(d))
