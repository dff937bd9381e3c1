"""The noise model of ``ktrace diff`` (ktrace/analysis/noise.py): same-input runs change nothing, the real
fix still reads as the fix, near-tied last finishers do not move, several runs per side, the outputs say
what did not happen."""

import json

import numpy as np
import pytest

from ktrace.analysis.compare import diff
from ktrace.analysis.noise import ALPHA, judge, rank_test
from ktrace.api import load_capture
from ktrace.report.compare_report import diff_markdown, diff_text

from conftest import SAMPLES, run_ktrace
from test_compare import EV, oracle

SAME_INPUT = [("waves_ktrace", "waves_run2_ktrace"), ("imbalance_ktrace", "imbalance_run2_ktrace"),
              ("imbalance_ktrace", "imbalance_run3_ktrace"), ("imbalance_run2_ktrace", "imbalance_run3_ktrace"),
              ("worklist_run2_ktrace", "worklist_run3_ktrace"), ("nested_run2_ktrace", "nested_run3_ktrace")]


def test_the_rank_test():
    assert rank_test([1.0] * 8, [1.0] * 8) == 1.0
    assert rank_test(range(8), range(100, 108)) < 0.001  # every after above every before
    rng = np.random.default_rng(1)
    p = [rank_test(rng.normal(size=8), rng.normal(size=8)) for _ in range(400)]
    assert np.mean(np.array(p) < ALPHA) < 0.03  # same distribution: about ALPHA of the time, not more


def test_judge_needs_every_floor_and_the_spread():
    assert not judge(10.0, 10.05, floors=[0.064], noise=[]).significant  # under 2 ticks
    assert judge(10.0, 11.0, floors=[0.064], noise=[0.5]).significant
    assert not judge(10.0, 11.0, floors=[0.064], noise=[2.0]).significant  # within the spread
    assert not judge(10.0, 11.0, floors=[5.0], noise=[]).significant  # under the impact floor
    j = judge(10.0, 20.0, floors=[0.1], noise=[], samples=((10.0,) * 6, (20.0,) * 6))
    assert j.significant and j.test == "rank" and j.p_value < ALPHA


@pytest.mark.slow
@pytest.mark.parametrize("pair", SAME_INPUT, ids=lambda p: f"{p[0]}-{p[1]}")
def test_two_runs_of_the_same_input_show_no_significant_change(pair):
    d = diff(*(load_capture(SAMPLES / f"{n}.bin") for n in pair))
    assert d.significant == () and d.headline == "no significant change"
    assert not d.findings_new and not d.findings_resolved and d.cost_shift is None
    assert "no cost moved to other phases" in d.cost_message
    doc = json.loads(d.to_json())
    assert doc["headline"] == "no significant change" and doc["cost"]["moved"] is False
    assert "no cost moved to other phases" in diff_markdown(d)
    assert "no significant change" in str(diff_text(d)[0])


@pytest.mark.slow
def test_several_runs_per_side_use_the_run_to_run_spread():
    runs = [load_capture(SAMPLES / f"{n}.bin") for n in SAME_INPUT[1]]
    after = load_capture(SAMPLES / "balanced_ktrace.bin")
    same = diff(runs, list(reversed(runs)))
    assert same.headline == "no significant change"
    d = diff(runs, [after])
    doc = d.to_dict()
    assert doc["before"]["sources"] == [str(r.analysis.source) for r in runs]
    imb = d.phase("compute").change("imbalance")
    assert imb.verdict == "better" and imb.test == "spread"  # two runs: too few to rank
    assert d.phase("load").change("wall_us").verdict == "same"


def test_a_last_finisher_moving_between_near_tied_lanes_is_not_a_change():
    def kernel(slow_lane, extra):
        durs = np.tile(np.array([960, 1920, 320] * 4), (4, 1))
        durs[slow_lane, 1::3] += extra  # one lane's compute longer by `extra` in every instance
        return oracle(durs, EV)

    tied = diff(kernel(0, 32), kernel(1, 32))  # one tick ahead: a tie within the noise
    c = tied.phase("compute").change("last_block")
    assert (c.before, c.after) == (0, 1) and c.verdict == "same"
    clear = diff(kernel(0, 960), kernel(1, 960))  # a straggler that moved to another block
    assert clear.phase("compute").change("last_block").verdict == "changed"


def test_a_figure_and_its_total_share_a_verdict():
    d = diff(oracle([960, 1920, 320] * 4, EV), oracle([960, 2880, 320] * 4, EV))
    c = d.phase("compute")
    assert c.change("wall_us").verdict == c.change("total_wall_us").verdict == "worse"
    assert c.change("total_wall_us").test == "tied"
    assert c.change("critical_share").significant == c.change("critical_us").significant


@pytest.mark.slow
def test_cli_diff_with_runs_per_side_and_globs():
    rc, out, err = run_ktrace("diff", "--before", str(SAMPLES / "imbalance*_ktrace.bin"), "--after",
                              SAMPLES / "imbalance_run2_ktrace.bin", SAMPLES / "imbalance_ktrace.bin", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    runs = sorted(SAMPLES.glob("imbalance*_ktrace.bin"))  # every run of the imbalance kernel, ktrace's header
    assert len(runs) >= 2
    assert doc["headline"] == "no significant change" and len(doc["before"]["sources"]) == len(runs)
    rc, _, err = run_ktrace("diff", SAMPLES / "imbalance_ktrace.bin")
    assert rc == 2 and "BEFORE and AFTER" in err
