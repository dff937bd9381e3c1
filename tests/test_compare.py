"""ktrace diff: every phase before and after, noise-aware verdicts, cost moved between phases, reports, CLI.

The real before is samples/imbalance.bin (block 17 does 3x the compute); the after is a synthetic capture
(tests/data/imbalance_balanced_synthetic.bin, written by ``balanced_words`` below) where block 17's extra
compute is spread evenly over all 132 blocks, every other duration, offset and barrier release as captured.
"""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from ktrace import decode
from ktrace import analyze
from ktrace.analysis import Thresholds
from ktrace.analysis.compare.diff import (DIFF_SCHEMA, PHASE_FIGURES, Capture, Timing, diff, kernel_values,
                                     phase_values, read_timing)
from ktrace.api import load_capture
from ktrace.report.compare_report import diff_markdown, diff_text, plot_diff
from ktrace.decoding.encode import phase_buffer

from conftest import ROOT, SAMPLES, run_ktrace, sample, write_buffer

DATA = ROOT / "tests" / "data"
AFTER = DATA / "imbalance_balanced_synthetic.bin"
BEFORE = sample("imbalance")
# A real 'after' capture (the slow block's work spread evenly), when one has been captured into samples/.
REAL_AFTER = sorted(p for p in SAMPLES.glob("*balanced*.bin") if not p.stem.startswith("imbalance"))
SYNTH_META = {
    "kernel": "persistent_phases",
    "event_names": ["load", "compute", "reduce"],
    "ground_truth": {"description": "synthetic 'after' for samples/imbalance.bin (tests/test_compare.py "
                     "balanced_words): block 17's extra compute spread evenly over all 132 blocks; every other "
                     "duration, start offset and barrier release as captured"},
}
T0, TICK = 10_000, 32


def balanced_words(before=BEFORE, slow_block=17, compute=1, tick=TICK, t0=T0, add=None):
    """The 'after' buffer: the slow block's extra compute (over the median block) spread over every block in
    whole ticks; each lane keeps its start offset within an instance and each barrier its release time.
    add: {event: ns}, every slice of those events that much longer (whole ticks)."""
    d = decode(before)
    s = d.slices
    lanes = d.launch.num_blocks * d.launch.num_groups
    o = np.lexsort((s.begin_ns, s.lane))
    b, e = s.begin_ns[o].reshape(lanes, -1), s.end_ns[o].reshape(lanes, -1)
    ev = s.event[o].reshape(lanes, -1)[0]
    dur = e - b
    for j in np.flatnonzero(ev == compute):
        extra = int(dur[slow_block, j] - np.median(np.delete(dur[:, j], slow_block)))
        dur[slow_block, j] -= extra
        dur[:, j] += tick * round(extra / lanes / tick)
    for event, ns in (add or {}).items():
        dur[:, ev == event] += tick * round(ns / tick)
    offset = b - b.min(axis=0)
    release = b.min(axis=0)[1:] - e.max(axis=0)[:-1]
    nb, ne = np.zeros_like(b), np.zeros_like(e)
    t = t0
    for j in range(b.shape[1]):
        nb[:, j] = t + offset[:, j]
        ne[:, j] = nb[:, j] + dur[:, j]
        if j + 1 < b.shape[1]:
            t = int(ne[:, j].max()) + int(release[j])
    smid = json.loads(Path(before).with_suffix(".json").read_text())["block_smid"]
    # one spare slot per lane: a buffer with room left, as a capture has (a full lane is a warning)
    return phase_buffer(nb, ne, np.broadcast_to(ev, b.shape), sm=smid, spare=1)


def steps_kernel(durs, events, lanes, barrier=320):
    """(begin, end) for lanes running the same steps back to back with a grid barrier between steps.
    durs: (steps,) or (lanes, steps) ns."""
    d = np.broadcast_to(np.asarray(durs, np.int64), (lanes, len(events))).copy()
    b, e = np.zeros_like(d), np.zeros_like(d)
    t = T0
    for j in range(d.shape[1]):
        b[:, j] = t
        e[:, j] = t + d[:, j]
        t = int(e[:, j].max()) + barrier
    return b, e


def numpy_capture(durs, events, lanes=4, names="load,compute,reduce") -> Capture:
    b, e = steps_kernel(durs, events, lanes)
    # Whole-tick synthetic durations would make the "smallest step" tick coarse: say it is 32 ns.
    return Capture(analyze(decode(phase_buffer(b, e, events), events=names), Thresholds(tick_ns=TICK)))


# -- fixtures --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pair():
    return load_capture(BEFORE), load_capture(AFTER)


@pytest.fixture(scope="module")
def d(pair):
    """One run per side, as captured: the figures side by side, not judged."""
    return diff(*pair)


@pytest.fixture(scope="module")
def judged(pair):
    """The same pair judged by an assumed run-to-run noise of 2% (--assume-noise 2)."""
    return diff(*pair, assume_noise_pct=2.0)


# -- the synthetic after ---------------------------------------------------------------------------------

def test_the_committed_synthetic_after_is_what_the_generator_writes():
    words = np.fromfile(AFTER, dtype="<u8")
    assert np.array_equal(words, balanced_words())
    assert json.loads(AFTER.with_suffix(".json").read_text()) == SYNTH_META
    assert AFTER.stat().st_size < 100_000


# -- the real-ish pair -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_compute_imbalance_and_wall_fall_beyond_the_noise(d, judged):
    # one run per side: judged against the largest change seen between same-input runs
    assert d.phase("compute").change("imbalance").verdict == "better"
    assert d.phase("compute").change("imbalance").test == "model"
    assert d.verdict == "better" and d.kernel_change("wall_us").relative == pytest.approx(-0.557, abs=1e-3)
    c = judged.phase("compute")
    imb = c.change("imbalance")
    assert imb.before == pytest.approx(2.9127, abs=1e-4) and imb.after == pytest.approx(1.0038, abs=1e-4)
    assert imb.significant and imb.verdict == "better" and imb.relative == pytest.approx(-0.655, abs=1e-3)
    wall = c.change("wall_us")
    assert wall.before == pytest.approx(64.38) and wall.after == pytest.approx(22.48)
    assert wall.verdict == "better"
    assert c.change("end_skew_us").verdict == "better"
    # The work did not shrink, it was spread: the mean slice is the same within the noise.
    assert c.change("mean_dur_us").verdict == "no change"
    assert abs(c.change("mean_dur_us").delta) < c.change("mean_dur_us").noise


@pytest.mark.slow
def test_the_wait_moves_off_the_barrier_and_the_last_finisher_starts_moving(d, judged):
    assert d.phase("compute").change("wait_after_us").before == pytest.approx(43.627, abs=1e-3)
    assert d.phase("compute").change("wait_after_us").after == pytest.approx(1.728, abs=1e-3)
    reduce_wait = judged.phase("reduce").change("wait_before_us")
    assert reduce_wait.verdict == "better" and reduce_wait.after < 2.0
    c = d.phase("compute")
    assert c.change("last_block").before == 17 and c.change("last_block").after != 17
    # which block is last is information, never a significant change
    assert c.change("last_block").detail == "moved" and c.change("last_block").delta is None
    assert not judged.phase("compute").change("last_block").significant
    assert c.change("last_block_stability").before == 1.0 and c.change("last_block_stability").after < 1.0
    assert c.change("distinct_last_blocks").after > 1


def test_untouched_phases_are_the_same_and_shares_follow_the_wall(judged):
    d = judged
    for phase in ("load", "reduce"):
        p = d.phase(phase)
        for fig in ("wall_us", "max_dur_us", "mean_dur_us", "imbalance", "start_skew_us", "critical_us"):
            assert p.change(fig).verdict == "no change", (phase, fig)
        # same time on the path, shorter kernel: the share follows its total's verdict, not the wall's
        assert p.change("critical_share").verdict == "no change" and p.change("critical_share").test == "tied"
    assert d.cost_shift is None  # nothing rose: no cost moved to another phase


def test_kernel_wall_findings_and_notes(d, judged):
    assert d.kernel_change("wall_us").verdict == "better" and d.kernel_change("wall_us").test == "model"
    w = judged.kernel_change("wall_us")
    assert w.before == pytest.approx(602.208) and w.after == pytest.approx(267.008) and w.verdict == "better"
    # one cause, one finding: block 17's imbalance is listed in its straggler finding
    assert "stable_straggler: compute" in judged.findings_resolved
    # one run per side, judged by the model: the wait after compute fell beyond the noise; the straggler's
    # lead over the next lane is a skew, which moves by up to all of itself between same-input runs (no change
    # of it is beyond that noise): its direction, with its stake's fall, says it went away. Every warning that
    # went away is listed. (The barrier after compute waits for block 17; its own release is a tight barrier's,
    # so it was no warning of its own.)
    assert d.findings_resolved == ("stable_straggler: compute",) and not d.findings_gone
    assert any("only the before capture" in n for n in d.notes)  # the synthetic after has no timings
    assert all(c.figure not in ("control_us", "profiled_us") for c in d.kernel)


def test_json_has_every_phase_and_figure_and_no_nan(d):
    doc = json.loads(d.to_json())
    assert doc["schema"] == DIFF_SCHEMA
    assert [p["phase"] for p in doc["phases"]] == ["load", "compute", "reduce"]
    assert [f["figure"] for f in doc["phases"][1]["figures"]] == list(PHASE_FIGURES)
    f = {x["figure"]: x for x in doc["phases"][1]["figures"]}["imbalance"]
    assert set(f) == {"figure", "unit", "before", "after", "change", "relative", "noise", "significant", "verdict",
                      "detail", "test", "p_value", "confidence", "evidence"}
    assert f["verdict"] in ("better", "worse", "no change", "not judged") and f["evidence"]
    assert "NaN" not in d.to_json()


def test_a_capture_against_itself_changes_nothing(pair):
    same = diff(pair[0], pair[0])
    assert {c.verdict for p in same.phases for c in p.changes} == {"no change"}
    assert same.cost_shift is None and not same.findings_new and not same.findings_resolved


# -- noise -----------------------------------------------------------------------------------------------

EV = [0, 1, 2] * 4


def test_a_change_below_the_timer_tick_is_not_significant():
    base = [960, 1920, 320] * 4
    after = list(base)
    after[1] += TICK  # one instance's compute one tick longer: the mean over 4 instances moves 8 ns
    d = diff(numpy_capture(base, EV), numpy_capture(after, EV))
    c = d.phase("compute").change("max_dur_us")
    assert c.delta == pytest.approx(0.008) and c.noise >= 0.064  # 2 ticks at least
    assert not c.significant and c.verdict == "no change"


def test_the_spread_across_instances_is_not_run_to_run_noise():
    spread = [960, 1000, 320, 960, 3000, 320] * 2  # compute alternates 1 and 3 µs: p10-p90 2 µs
    for extra in (320, 3200):  # one run per side: judged by the model, whatever the instances' spread
        after = numpy_capture([x + extra if i % 3 == 1 else x for i, x in enumerate(spread)], EV)
        c = diff(numpy_capture(spread, EV), after).phase("compute").change("wall_us")
        assert c.delta == pytest.approx(extra / 1e3) and c.test == "model"
        assert c.noise >= 0.5841 * (2.0 + extra / 1e3) - 1e-9 or c.noise > 2.0  # the model's bound, not 2 µs
    assert c.verdict == "worse" and diff(numpy_capture(spread, EV), numpy_capture(
        [x + 320 if i % 3 == 1 else x for i, x in enumerate(spread)], EV)).phase("compute").change("wall_us").verdict == "no change"
    assert diff(numpy_capture(spread, EV), after, assume_noise_pct=10).phase("compute").change("wall_us").verdict == "worse"


def test_cost_that_moved_from_one_phase_to_another_is_called_out():
    before, after = numpy_capture([960, 1920, 320] * 4, EV), numpy_capture([960, 960, 1280] * 4, EV)
    d = diff(before, after)  # one run per side: 3.84 µs of a 16 µs kernel is within what same-input runs move
    assert d.cost_shift is None and d.phase("compute").change("critical_us").verdict == "no change"
    assert d.cost_message.startswith("no cost moved")
    j = diff(before, after, assume_noise_pct=5)
    s = j.cost_shift
    assert s is not None and set(s.fell_us) == {"compute"} and set(s.rose_us) == {"reduce"}
    assert s.fell_us["compute"] == pytest.approx(-3.84) and s.rose_us["reduce"] == pytest.approx(3.84)
    assert "compute" in s.message and "reduce" in s.message and "100%" in s.message
    assert j.phase("compute").change("wall_us").verdict == "better"
    assert j.phase("reduce").change("wall_us").verdict == "worse"


def test_phases_present_on_one_side_only():
    d = diff(numpy_capture([960, 1920, 320] * 4, EV), numpy_capture([960, 1920] * 4, [0, 1] * 4))
    r = d.phase("reduce")
    assert r.present == "before" and r.change("wall_us").after is None and r.change("wall_us").detail == "undefined"
    assert r.change("wall_us").verdict == "not judged"
    assert d.phase("load").present == "both"
    text = diff_markdown(d)
    assert "**reduce** (only before)" in text


# -- control timings -------------------------------------------------------------------------------------

def _timed(tmp_path, name, src, median_profiled, median_control, spread=2.0):
    meta = json.loads(Path(src).with_suffix(".json").read_text())
    meta["timing"] = {k: {"median_us": m, "p10_us": m - spread / 2, "p90_us": m + spread / 2, "reps": 30}
                      for k, m in (("with_profiler", median_profiled), ("without_profiler", median_control))}
    return write_buffer(tmp_path, np.fromfile(src, "<u8"), name, meta)


def test_control_timings_compared_when_both_captures_carry_them(tmp_path, pair):
    b = Capture(pair[0].analysis, read_timing(_timed(tmp_path, "b", BEFORE, 607.3, 601.5)))
    a = Capture(pair[1].analysis, read_timing(_timed(tmp_path, "a", AFTER, 272.0, 266.1)))
    d = diff(b, a)
    control = d.kernel_change("control_us")
    # a t-test on the 30 reps of each, and beyond the 2% another session of the same inputs may differ by
    assert control.before == 601.5 and control.after == 266.1 and control.noise == pytest.approx(0.02 * 601.5)
    assert control.verdict == "better" and control.test == "reps" and d.verdict == "better"
    assert d.kernel_change("overhead_ratio").before == pytest.approx(607.3 / 601.5)
    same = diff(b, Capture(pair[1].analysis, Timing(610.0, 2.0, 604.5, 2.0, "x", 30, 30)))
    assert same.kernel_change("control_us").verdict == "no change"  # 3 µs: beyond the reps' 2 µs, under 2%
    assert same.verdict == "no change" and same.headline.startswith("no change: unprofiled control +0.5%")
    untimed = diff(b, Capture(pair[1].analysis, Timing(630.0, 2.0, 620.5, 2.0, "x")))  # no reps: the model
    assert untimed.kernel_change("control_us").verdict == "worse" and untimed.verdict == "worse"
    assert untimed.verdict_change.test == "model"  # +3.2%: beyond the 1.4% sessions of the same inputs moved
    assert "profiled_us" in markdown_rows(diff_markdown(d))


def markdown_rows(md: str) -> str:
    return "\n".join(line for line in md.splitlines() if line.startswith("|"))


def test_read_timing_finds_the_sidecar_beside_a_buffer_or_a_trace(tmp_path):
    assert read_timing(BEFORE).control_median_us == pytest.approx(601.472, abs=1e-3)
    assert read_timing(BEFORE, sidecar=False) is None
    assert read_timing(AFTER) is None  # its sidecar has no timing
    (tmp_path / "run.json").write_text((SAMPLES / "imbalance.json").read_text())
    assert read_timing(tmp_path / "run.perfetto-trace").profiled_median_us == pytest.approx(607.344, abs=1e-3)
    (tmp_path / "junk.json").write_text("{not json")
    assert read_timing(tmp_path / "junk.perfetto-trace") is None  # not a sidecar: ignored beside a trace
    assert read_timing(tmp_path / "none.perfetto-trace") is None


def test_kernel_and_phase_values_come_with_units_and_noise(pair):
    k = kernel_values(pair[0])
    t = read_timing(BEFORE)  # one launch's wall varies as the timed repetitions do
    assert k["wall_us"].value == pytest.approx(602.208) and k["wall_us"].noise == pytest.approx(t.profiled_spread_us)
    assert k["control_us"].value == pytest.approx(601.472, abs=1e-3)
    assert k["control_us"].noise == pytest.approx(601.5743851661682 - 601.1488020420074)
    p = phase_values(pair[0].analysis)["compute"]
    # block 17's eight compute slices (513.41 µs) + the barrier waits after them (13.76 µs) of a 602.21 µs wall
    assert p["critical_share"].value == pytest.approx((513_408 + 13_760) / 602_208)
    assert p["last_block"].value == 17 and p["last_block_stability"].value == 1.0
    assert all(not (isinstance(v.value, float) and math.isnan(v.value)) for v in p.values())


# -- reports ---------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_text_markdown_and_plot(d, tmp_path):
    from rich.console import Console

    con = Console(width=160, record=True)
    for r in diff_text(d):
        con.print(r)
    out = con.export_text()
    assert "kernel wall 602.21 µs -> 267.01 µs" in out and "imbalance" in out and "block 17: 8/8" in out
    assert "better" in out and "not judged (information: moved)" in out and "WORSE" not in out
    md = diff_markdown(d, all_figures=True)
    assert md.startswith("### ktrace diff") and "| figure | before | after |" in md and "max_start_skew_us" in md
    png = plot_diff(d, tmp_path / "diff.png")
    assert png.read_bytes()[:4] == b"\x89PNG"


# -- the command line ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_cli_diff_json_markdown_plot(tmp_path):
    rc, out, err = run_ktrace("diff", BEFORE, AFTER, "--json", "--plot", tmp_path / "d.png")
    assert rc == 0, err
    doc = json.loads(out)
    comp = {f["figure"]: f for f in doc["phases"][1]["figures"]}
    assert comp["imbalance"]["verdict"] == "better" and comp["imbalance"]["test"] == "model"
    assert (tmp_path / "d.png").exists()
    assert doc["verdict"]["verdict"] == "better" and doc["verdict"]["judged"] is True
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    rc, out, err = run_ktrace("diff", BEFORE, AFTER, "--markdown", summary)
    assert rc == 0, err
    assert summary.read_text().startswith("earlier step\n### ktrace diff")  # appended, like $GITHUB_STEP_SUMMARY
    assert "compute" in out and "kernel wall" in out  # the table still printed


@pytest.mark.slow
def test_cli_diff_bad_input(tmp_path):
    rc, _, err = run_ktrace("diff", BEFORE, tmp_path / "missing.bin")
    assert rc == 2 and "missing.bin" in err
    trace = tmp_path / "t.perfetto-trace"
    assert run_ktrace("convert", BEFORE, "-o", trace)[0] == 0
    rc, _, err = run_ktrace("diff", trace, trace, "--events", "a,b,c")
    assert rc == 2 and "apply to buffers" in err


def real_before(after: Path) -> Path:
    """The before of the same header: balanced_ktrace.bin -> imbalance_ktrace.bin, else imbalance.bin."""
    suffix = after.stem.split("balanced", 1)[1]
    p = SAMPLES / f"imbalance{suffix}.bin"
    return p if p.exists() else BEFORE


@pytest.mark.skipif(not REAL_AFTER, reason="no real balanced capture in samples/ yet")
@pytest.mark.parametrize("after", REAL_AFTER, ids=lambda p: p.stem)
@pytest.mark.slow
def test_the_real_before_after_pair(after):
    d = diff(load_capture(real_before(after)), load_capture(after))
    # judged by the unprofiled control; the timeline's figures, one run per side, by the noise model
    assert d.verdict == "better" and d.verdict_change.figure == "control_us"
    assert d.headline.startswith("better: unprofiled control -5")
    c = d.phase("compute")
    assert c.change("imbalance").verdict == "better" and c.change("imbalance").after < 1.2
    assert c.change("wall_us").verdict == "better" and c.change("wait_after_us").verdict == "better"
    assert c.change("last_block").after != 17 or c.change("last_block_stability").after < 1.0
    assert d.cost_shift is None and d.cost_message.startswith("no cost moved to other phases: compute fell")
    assert "large_wait: load" not in d.findings_new  # the same wait, a larger share of a shorter kernel
    assert not d.findings_new and "stable_straggler: compute" in d.findings_resolved


# -- cost that moved -------------------------------------------------------------------------------------

def moved_capture(tmp_path, control_factor=1.004, reduce_ns=36_000):
    """samples/imbalance_ktrace.bin with block 17's extra compute spread over every block (as balanced_words)
    and every reduce slice ``reduce_ns`` longer: the cost moves from compute to reduce on the critical path;
    the sidecar's timings are the before's x ``control_factor`` (the kernel did not change)."""
    src = SAMPLES / "imbalance_ktrace.bin"
    timing = json.loads(src.with_suffix(".json").read_text())["timing"]
    for build in ("with_profiler", "without_profiler"):
        for key in ("median_us", "mean_us", "min_us", "max_us", "p10_us", "p90_us"):
            timing[build][key] *= control_factor
    meta = {**SYNTH_META, "timing": timing}
    return load_capture(write_buffer(tmp_path, balanced_words(src, add={2: reduce_ns}), "moved", meta))


@pytest.mark.slow
def test_cost_that_moved_with_the_kernel_unchanged_leads_the_report(tmp_path):
    d = diff(load_capture(SAMPLES / "imbalance_ktrace.bin"), moved_capture(tmp_path))
    assert d.cost_shift is not None
    assert set(d.cost_shift.fell_us) == {"compute"} and set(d.cost_shift.rose_us) == {"reduce"}
    assert d.cost_shift.fell_us["compute"] == pytest.approx(-284.5, abs=1) and d.cost_shift.rose_us["reduce"] == 288.0
    assert d.verdict == "no change"  # the control: +0.4%, within what sessions of the same inputs move it
    assert d.headline.startswith("no change: cost moved: compute -284.51 µs, reduce +288.00 µs on the critical path; "
                                 "the kernel did not change: unprofiled control +0.4% (within the 2% ")
    assert "p<" not in d.headline.split("beside it")[0]  # the reps' p-value would contradict 'no change'
    con_lines = [str(r) for r in diff_text(d)]
    assert con_lines[0].startswith("no change: cost moved:")
    md = diff_markdown(d)
    assert md.startswith("### ktrace diff: no change: cost moved: compute -284.51 µs, reduce +288.00 µs")
    doc = json.loads(d.to_json())
    assert doc["cost"]["moved"] is True and doc["headline"].startswith("no change: cost moved:")
    # the same move with no change on the critical path: nothing moved, the first line says what it is
    same = diff(load_capture(SAMPLES / "imbalance_ktrace.bin"), moved_capture(tmp_path, reduce_ns=0))
    assert same.cost_shift is None and same.headline.startswith("no change: unprofiled control +0.4%")
