"""The noise model of ``ktrace diff`` (ktrace/analysis/noise.py): no verdict without an estimate of run-to-run
noise, the unprofiled control decides the kernel verdict, same-input runs change nothing, the real fix still
reads as the fix, the last finisher is information, several runs per side are tested across runs, the
outputs say what was not judged."""

import json
import re

import numpy as np
import pytest

from ktrace.analysis.compare.catalog import Capture, Timing
from ktrace.analysis.compare.diff import diff
from ktrace.analysis.compare.noise import ALPHA, MIN_TICKS, SESSION_NOISE, assumed, reps_test, runs_needed, runs_test, t_test
from ktrace.analysis.compare.noise_model import FAMILIES as FIGURE_FAMILIES, MODEL_PATH, Bound, NoiseModel, noise_margin, noise_model
from ktrace.api import load_capture
from ktrace.report.compare_report import diff_markdown, diff_text

from conftest import SAMPLES, run_ktrace
from test_compare import EV, numpy_capture

FAMILIES = ("imbalance", "waves", "worklist", "nested")
# Every same-input pair in samples/: a kernel's first, second and third runs (ktrace's header, H200s).
SAME_INPUT = [pair for f in FAMILIES for pair in ((f"{f}_ktrace", f"{f}_run2_ktrace"), (f"{f}_ktrace", f"{f}_run3_ktrace"),
                                                  (f"{f}_run2_ktrace", f"{f}_run3_ktrace"))]


def test_the_t_test():
    assert t_test(10.0, 1.0, 2, 10.0, 1.0, 2) == pytest.approx(1.0)
    # Student's t with 4 degrees of freedom: t = 2.776 is the two-sided 5% point
    assert t_test(0.0, 1.0, 3, 2.776 * (2 / 3) ** 0.5, 1.0, 3) == pytest.approx(0.05, abs=1e-3)
    assert t_test(1.0, 0.0, 1, 2.0, 0.0, 1) is None  # one value per side: no variance to test with
    rng = np.random.default_rng(1)
    p = [runs_test(rng.normal(size=3), rng.normal(size=3), []).p_value for _ in range(600)]
    assert np.mean(np.array(p) < ALPHA) < 0.03  # the same distribution: about ALPHA of the time, not more


def test_the_tests_need_their_floors():
    assert not runs_test([10.0, 10.1, 9.9], [10.05, 10.1], [0.064]).significant  # within the runs' spread
    assert runs_test([10.0, 10.1, 9.9], [20.0, 20.1], [0.064]).significant
    assert not runs_test([10.0, 10.001], [10.01, 10.011], [0.064]).significant  # under 2 ticks
    # the control: beyond its reps, but within what another session of the same inputs moves it
    within = reps_test(205.0, 0.5, 50, 207.8, 0.5, 30)
    assert within.p_value < ALPHA and not within.significant and within.noise == pytest.approx(SESSION_NOISE * 207.8)
    assert reps_test(542.6, 0.4, 50, 253.3, 0.3, 50).significant
    assert assumed(10.0, 10.5, 0.02, []).significant and not assumed(10.0, 10.1, 0.02, []).significant
    assert runs_needed(10.0, 1.0) == 2 and runs_needed(0.1, 1.0) is None and runs_needed(1.0, None) is None


@pytest.mark.slow
@pytest.mark.parametrize("pair", SAME_INPUT, ids=lambda p: f"{p[0]}-{p[1]}")
def test_two_runs_of_the_same_input_read_no_change(pair):
    d = diff(*(load_capture(SAMPLES / f"{n}.bin") for n in pair))
    assert d.significant == () and d.verdict == "no change"
    assert d.verdict_change.figure == "control_us" and d.verdict_change.test == "reps"
    assert d.headline.startswith("no change: unprofiled control")
    assert not d.findings_new and not d.findings_resolved and d.cost_shift is None and not d.findings_appeared
    assert "no cost moved" in d.cost_message
    doc = json.loads(d.to_json())
    assert doc["headline"] == d.headline and doc["verdict"]["verdict"] == "no change" and doc["cost"]["moved"] is False
    assert all(not c["significant"] for p in doc["phases"] for c in p["figures"])
    assert "no change: unprofiled control" in diff_markdown(d) and "no change" in str(diff_text(d)[0])


def _more_runs() -> list[list]:
    """Runs of the same inputs captured since: FlashInfer's own kernels (fi_NAME_runK, one timing session
    for all K) and the newer synthetic kernels (NAME_ktrace and samples/repeats/NAME_runK_ktrace)."""
    fams = {}
    for p in sorted(SAMPLES.glob("fi_*_run*.bin*")):
        fams.setdefault(p.name.split("_run")[0], []).append(p)
    for p in sorted((SAMPLES / "repeats").glob("*_run*_ktrace.bin")):
        fams.setdefault(p.name.split("_run")[0], [SAMPLES / f"{p.name.split('_run')[0]}_ktrace.bin"]).append(p)
    return [runs for runs in fams.values() if len(runs) >= 4]


@pytest.mark.slow
@pytest.mark.parametrize("runs", _more_runs(), ids=lambda r: r[0].name.split("_run")[0].split("_ktrace")[0])
def test_more_runs_of_the_same_inputs_read_no_change(runs):
    caps = [load_capture(p) for p in runs]
    for d in (diff(caps[0], caps[1]), diff(caps[0], caps[-1]), diff(caps[:2], caps[2:])):
        assert d.verdict in ("no change", "not judged") and d.significant == (), d.headline
        assert not d.findings_new and not d.findings_resolved and d.cost_shift is None


@pytest.mark.slow
def test_the_real_fix_is_judged_by_the_control():
    d = diff(load_capture(SAMPLES / "imbalance_ktrace.bin"), load_capture(SAMPLES / "balanced_ktrace.bin"))
    c = d.verdict_change
    assert c.figure == "control_us" and c.verdict == "better" and c.test == "reps" and c.p_value < ALPHA
    assert d.verdict == "better" and d.headline.startswith("better: unprofiled control -53.")
    assert "beside it: profiled wall -53." in d.headline and "probes' cost" in d.headline
    # one run per side: the timeline's figures are judged against the largest same-input change seen
    c = d.phase("compute")
    imb = c.change("imbalance")
    assert imb.verdict == "better" and imb.test == "model" and imb.after < 1.2 and imb.significant
    for fig in ("wall_us", "wait_after_us", "critical_us"):
        assert c.change(fig).verdict == "better" and c.change(fig).test == "model", fig
    assert d.phase("reduce").change("wait_before_us").verdict == "better"
    assert {x.detail for x in d.phase("load").changes} <= {"same", "moved", "info"}  # untouched: no change
    assert d.unjudged == () and "runs per side would settle" not in d.headline


def _timed(cap: Capture, profiled: float, control: float, reps: int = 30, spread: float = 1.0) -> Capture:
    return Capture(cap.analysis, Timing(profiled, spread, control, spread, "test", reps, reps))


def test_the_control_decides_and_the_profiled_wall_is_beside_it():
    before = numpy_capture([960, 1920, 320] * 4, EV)
    after = numpy_capture([960, 2880, 320] * 4, EV)  # the profiled timeline: compute 1 µs longer per instance
    d = diff(_timed(before, 20.0, 19.0), _timed(after, 21.0, 19.1))  # the control: +0.5%, within the noise
    assert d.verdict == "no change" and d.headline.startswith("no change: unprofiled control +0.5%")
    assert "beside it: profiled wall +" in d.headline and "probes' cost +4.5%" in d.headline
    assert d.kernel_change("wall_us").test == "model"  # beside the verdict, not the verdict
    worse = diff(_timed(before, 20.0, 19.0), _timed(after, 21.0, 20.5))
    assert worse.verdict == "worse" and worse.headline.startswith("worse: unprofiled control +7.9%")
    untested = diff(_timed(before, 20.0, 19.0, reps=0), _timed(after, 21.0, 20.5, reps=0))  # no reps in the sidecar
    # +7.9%: beyond the largest change between sessions of the same inputs (1.4%)
    assert untested.verdict == "worse" and untested.verdict_change.test == "model"
    assert any("without their repetitions" in n for n in untested.notes)
    small = diff(_timed(before, 20.0, 19.0, reps=0), _timed(after, 21.0, 19.2, reps=0))  # +1.05%: within it
    assert small.verdict == "no change" and small.verdict_change.test == "model"


def test_one_run_per_side_is_judged_by_the_model_whatever_its_instances_say():
    before = numpy_capture([960, 1920, 320] * 4, EV)
    after = numpy_capture([960, 2880, 320] * 4, EV)
    d = diff(before, after)
    c = d.phase("compute").change("wall_us")
    # +50%: within the largest change of a phase wall seen between same-input runs (58%), whatever the
    # instances (all alike here) say
    assert c.delta == pytest.approx(0.96) and c.test == "model" and c.verdict == "no change" and not c.significant
    m = noise_model().bound("wall")
    assert c.noise == pytest.approx(m.relative * 2.88, rel=1e-6)
    assert d.unjudged == ()
    # the user's assumption judges it
    a = diff(before, after, assume_noise_pct=5)
    assert a.phase("compute").change("wall_us").verdict == "worse" and a.verdict == "worse"
    assert a.headline.startswith("worse: kernel wall") and "assumed noise 5.0%" in a.headline
    assert diff(before, after, assume_noise_pct=90).phase("compute").change("wall_us").verdict == "no change"


def test_a_change_under_the_floors_is_no_change_even_unjudged():
    base = [960, 1920, 320] * 4
    d = diff(numpy_capture(base, EV), numpy_capture(base, EV))
    assert d.verdict == "no change" and d.significant == ()
    assert {c.verdict for p in d.phases for c in p.changes} == {"no change"}


def test_the_last_finisher_is_information_never_a_change():
    def kernel(slow_lane, extra):
        durs = np.tile(np.array([960, 1920, 320] * 4), (4, 1))
        durs[slow_lane, 1::3] += extra  # one lane's compute longer by `extra` in every instance
        return numpy_capture(durs, EV)

    for runs in ((kernel(0, 960),), (kernel(0, 960), kernel(0, 960))):
        d = diff(list(runs), [kernel(1, 960), kernel(1, 960)])  # a clear straggler that moved to another block
        c = d.phase("compute").change("last_block")
        assert (c.before, c.after) == (0, 1) and c.detail == "moved" and not c.significant
        assert not any(s.startswith("compute.last_block") or "distinct_last" in s for s in d.significant)


def test_a_figure_and_its_total_share_a_verdict():
    runs = [numpy_capture([960, 1920, 320] * 4, EV), numpy_capture([960, 1952, 320] * 4, EV)]
    slower = [numpy_capture([960, 2880, 320] * 4, EV), numpy_capture([960, 2912, 320] * 4, EV)]
    d = diff(runs, slower)
    c = d.phase("compute")
    assert c.change("wall_us").test == "runs"
    assert c.change("wall_us").verdict == c.change("total_wall_us").verdict == "worse"
    assert c.change("total_wall_us").test == "tied"
    assert c.change("critical_share").significant == c.change("critical_us").significant
    one = diff(runs[0], slower[0])
    assert one.phase("compute").change("total_wall_us").verdict == one.phase("compute").change("wall_us").verdict


def test_cost_rising_on_the_critical_path_is_named():
    runs = [numpy_capture([960, 1920, 320] * 4, EV), numpy_capture([960, 1952, 320] * 4, EV)]
    slower = [numpy_capture([960, 2880, 320] * 4, EV), numpy_capture([960, 2912, 320] * 4, EV)]
    d = diff(runs, slower)
    assert d.phase("compute").change("critical_us").verdict == "worse"
    assert d.cost_shift is None
    assert d.cost_message.startswith("no cost moved from other phases: compute rose on the critical path")
    assert "changed beyond the noise" not in d.cost_message
    fell = diff(slower, runs)
    assert fell.cost_message.startswith("no cost moved to other phases: compute fell on the critical path")


@pytest.mark.slow
def test_several_runs_per_side_are_tested_across_runs():
    runs = [load_capture(SAMPLES / f"imbalance{n}_ktrace.bin") for n in ("", "_run2", "_run3")]
    after = load_capture(SAMPLES / "balanced_ktrace.bin")
    same = diff(runs, list(reversed(runs)))
    assert same.verdict == "no change" and same.significant == ()
    d = diff(runs, [after])  # three runs before: their variance judges the one after
    doc = d.to_dict()
    assert doc["before"]["sources"] == [str(r.analysis.source) for r in runs] and doc["verdict"]["runs"] == [3, 1]
    assert d.verdict == "better" and d.verdict_change.test == "runs"
    imb = d.phase("compute").change("imbalance")
    assert imb.verdict == "better" and imb.test == "runs" and imb.p_value < ALPHA
    assert d.phase("load").change("wall_us").verdict == "no change"
    two = diff(runs[:2], [after])  # two runs and one: too few for a test across runs; the model judges
    assert two.verdict == "better" and two.verdict_change.test == "model"
    assert any("too few for a test across runs" in n for n in two.notes) and "of yours" in two.model
    assert two.phase("compute").change("imbalance").verdict == "better"


@pytest.mark.slow
def test_cli_diff_with_runs_per_side_and_globs(tmp_path):
    rc, out, err = run_ktrace("diff", "--before", str(SAMPLES / "imbalance*_ktrace.bin"), "--after",
                              SAMPLES / "imbalance_run2_ktrace.bin", SAMPLES / "imbalance_ktrace.bin", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    runs = sorted(SAMPLES.glob("imbalance*_ktrace.bin"))  # every run of the imbalance kernel, ktrace's header
    assert doc["verdict"]["verdict"] == "no change" and doc["before"]["sources"] == [str(r) for r in runs]
    rc, out, err = run_ktrace("diff", str(SAMPLES / "imbalance*_ktrace.bin"), SAMPLES / "balanced_ktrace.bin",
                              "--json")  # the positional form takes quoted globs too
    assert rc == 0, err
    doc = json.loads(out)
    assert len(doc["before"]["sources"]) == len(runs) and doc["verdict"]["verdict"] == "better"
    rc, _, err = run_ktrace("diff", str(tmp_path / "nothing*.bin"), SAMPLES / "balanced_ktrace.bin")
    assert rc == 2 and "nothing*.bin: no file matches this pattern" in err and "Traceback" not in err
    rc, _, err = run_ktrace("diff", SAMPLES / "imbalance_ktrace.bin")
    assert rc == 2 and "BEFORE and AFTER" in err
    rc, out, err = run_ktrace("diff", SAMPLES / "imbalance_ktrace.bin", SAMPLES / "balanced_ktrace.bin",
                              "--assume-noise", "3", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    comp = {f["figure"]: f for f in doc["phases"][1]["figures"]}
    assert comp["imbalance"]["verdict"] == "better" and comp["imbalance"]["test"] == "assumed"
    rc, _, err = run_ktrace("diff", SAMPLES / "imbalance_ktrace.bin", SAMPLES / "balanced_ktrace.bin",
                            "--assume-noise", "0")
    assert rc == 2 and "percentage" in err


def test_runs_that_share_one_timing_session_are_one_sample_of_the_control():
    # record_runs times the kernel once and saves N buffers: their sidecars carry the same timing
    base = [numpy_capture([960, 1920, 320] * 4, EV), numpy_capture([960, 1952, 320] * 4, EV)]
    shared = diff([_timed(c, 20.0, 19.0) for c in base], [_timed(c, 20.2, 19.2) for c in base])
    c = shared.kernel_change("control_us")
    # not two runs of zero spread (any change "significant"): one session per side, judged by its reps
    assert c.test == "reps" and c.verdict == "no change"  # +1.1%: within the 2% sessions may differ by
    assert shared.phase("compute").change("wall_us").test == "runs"  # the timelines are runs all the same
    own = diff([_timed(base[0], 20.0, 19.0), _timed(base[1], 20.1, 19.1)],
               [_timed(base[0], 20.2, 21.0), _timed(base[1], 20.3, 21.1)])
    assert own.kernel_change("control_us").test == "runs" and own.verdict == "worse"


# -- the measured noise model (noise_model.json, scripts/build_noise_model.py) -------------------------------

def _build_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_noise_model", SAMPLES.parent / "scripts" / "build_noise_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_shipped_model_covers_every_family_and_names_its_sources():
    m = noise_model()
    assert m.runs >= 60 and m.kernels >= 15
    for fam in set(FIGURE_FAMILIES.values()) | {"kernel_wall"}:
        b = m.bound(fam)
        assert b is not None and b.seen > 0 and 0 < b.relative <= 1 and b.ticks >= MIN_TICKS, fam
    assert {s[0] for s in m.sets} >= {"fi_mla_decode", "imbalance", "cluster", "ab_noop"}
    # the sets' runs are files of samples/
    assert all((SAMPLES / r).exists() for s in m.sets for r in s[1:])


def test_the_maxima_are_one_family_judged_by_the_largest_change_of_any_maximum():
    from ktrace.analysis.compare.noise_model import modelled

    maxima = sorted(f for f in FIGURE_FAMILIES if f.startswith("max_") and f != "max_dur_us")
    assert {FIGURE_FAMILIES[f] for f in maxima} == {"worst"} and len(maxima) == 5
    worst = noise_model().bound("worst")
    assert worst.seen >= 400 and worst.relative >= max(noise_model().bound(f).relative for f in ("skew", "wait"))
    # a longest wait of one run 1.89 -> 0.51 µs between runs of the same inputs (a 100 µs kernel, 32 ns tick):
    # within what maxima move, not "better"
    ctx = {"tick_us": 0.032, "wall_us": 100.0, "n": 8, "mean_dur_us": 10.0}
    assert not modelled("max_wait_us", 1.89, 0.51, [0.064, 1.0], ctx).significant
    assert modelled("wait_after_us", 1.89, 0.51, [0.064, 1.0], ctx).significant  # a mean's family is tighter


def test_noise_margin_is_the_relative_or_the_kernel_time_bound():
    m = NoiseModel({"wall": Bound(0.5, 10.0, 0.1, 1)}, 2, 1)
    assert noise_margin("wall", 1000.0, 32.0, model=m) == pytest.approx(500.0)  # no wall: 50% of the value
    # the kernel time it stands for: 8 instances against a 20 µs wall: 10% = 2 µs = 250 ns each, under 50%
    assert noise_margin("wall", 1000.0, 1.0, kernel_ns_per_unit=8, wall_ns=20000.0, model=m) == pytest.approx(250.0)
    # ... but never under 10 ticks (320 ns): on a short kernel a share is a few ticks
    assert noise_margin("wall", 1000.0, 32.0, kernel_ns_per_unit=8, wall_ns=20000.0, model=m) == pytest.approx(320.0)
    assert noise_margin("wall", 100.0, 32.0, kernel_ns_per_unit=8, wall_ns=20000.0, model=m) == pytest.approx(50.0)
    assert noise_margin("nothing", 1.0, 32.0, model=m) is None
    wider = m.refine([("wall", 0.8, 4.0, 0.05, "x.wall_us", "mine")])
    assert wider.bound("wall") == Bound(0.8, 10.0, 0.1, 2, "mine: x.wall_us") and wider.refined == 1


@pytest.mark.slow
def test_the_shipped_model_is_what_the_script_builds(tmp_path):
    out = tmp_path / "model.json"
    assert _build_script().main(["-o", str(out)]) == 0
    assert out.read_bytes() == MODEL_PATH.read_bytes()


def _same_input_sets():
    return list(_build_script().same_input_sets(SAMPLES).items())


@pytest.mark.slow
@pytest.mark.parametrize("name,runs", _same_input_sets(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_same_input_pair_reads_no_change_on_every_figure(name, runs):
    """One run per side, judged by the model: every pair of runs of the same inputs in samples/, both ways."""
    import itertools

    caps = [load_capture(p) for p in runs]
    for i, j in itertools.permutations(range(len(caps)), 2):
        d = diff(caps[i], caps[j])
        assert d.verdict == "no change" and d.significant == () and d.unjudged == (), (i, j, d.headline)
        # no p-value beside words it contradicts: none under ALPHA beside 'no change'
        assert d.headline.startswith("no change: ") and "p<" not in d.headline
        assert all(float(p) >= ALPHA for p in re.findall(r"p=([0-9.]+)", d.headline)), d.headline
        assert all(c.detail in ("same", "info", "moved", "undefined") for p in d.phases for c in p.changes)
        assert d.cost_shift is None and not d.findings_new and not d.findings_resolved


def test_the_first_line_of_every_diff_starts_with_one_of_four_words():
    from ktrace.analysis.compare.diff_result import VERDICTS

    base = numpy_capture([960, 1920, 320] * 4, EV)
    slower = numpy_capture([960, 5760, 320] * 4, EV)
    cases = [diff(base, base), diff(base, slower), diff(slower, base), diff(base, slower, assume_noise_pct=1),
             diff(_timed(base, 20.0, 19.0), _timed(slower, 21.0, 19.1)),
             diff(_timed(base, 20.0, 19.0, reps=0), _timed(slower, 21.0, 25.0, reps=0)),
             diff([base, base], [slower, slower]), diff(base, numpy_capture([960, 1920] * 4, [0, 1] * 4))]
    words = set()
    for d in cases:
        first = d.headline.split(": ", 1)[0]
        assert first in VERDICTS, d.headline
        assert diff_markdown(d).startswith(f"### ktrace diff: {first}: ")
        assert str(diff_text(d)[0]).startswith(f"{first}: ") and json.loads(d.to_json())["verdict"]["verdict"] == first
        words.add(first)
    assert words >= {"better", "worse", "no change"}


@pytest.mark.slow
def test_runs_of_the_same_inputs_are_compared_with_the_model():
    import ktrace
    from ktrace.report.runs_report import runs_markdown

    r = ktrace.analyze_runs(sorted(SAMPLES.glob("fi_mla_decode_run*.bin.gz")))
    noise = r.noise()
    assert {"imbalance", "wall", "critical"} <= set(noise)
    # the model was measured on these runs among others: it covers every family they moved
    assert all(model is not None and 0 < mine <= model for mine, model in noise.values())
    assert noise["wall"][0] == pytest.approx(0.5841, abs=1e-4)  # the model's wall bound came from these runs
    md = runs_markdown(r)
    assert "run-to-run noise, largest relative change between these runs: " in md
    assert "within the noise model" in md and json.loads(r.to_json())["noise"]["imbalance"]["model"] == 0.3442
