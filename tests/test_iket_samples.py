"""The NVIDIA IKET captures in samples/iket/ (CUTLASS's Hopper persistent GEMM traced by run-iket on an H200, with a
ground truth recorded apart from IKET in each sidecar): read right, and the verdicts say what the truth says."""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pytest

import ktrace
from ktrace.decoding.iket import WARP_EXIT, WARP_START, read_iket

from conftest import ROOT, run_ktrace

IKET = ROOT / "samples" / "iket"
CASES = ("gemm", "straggler", "slow_load")
RUNS = [f"{c}_run{r}" for c in CASES for r in (1, 2)]


def _truth(name):
    return json.loads((IKET / f"{name}.json").read_text())


def _warnings(name):
    a = ktrace.analyze(IKET / f"{name}.trace.json.gz")
    return a, [f for f in a.findings if f.severity == "warning"]


@pytest.mark.parametrize("name", RUNS)
def test_every_record_is_accounted_and_the_blocks_match_the_truth(name):
    """IKET's stamps are %globaltimer ns, the truth's too: each CTA's last warp exit lies within 4 timer steps of
    the exit the CTA wrote after its closing barrier, and every block's SM is the %smid it read."""
    d = read_iket(IKET / f"{name}.trace.json.gz")
    t = _truth(name)
    truth = np.array(t["truth"], dtype=np.int64)
    assert d.accounted and d.launch.producer == "iket" and len(d.anomalies) == 0
    assert "nvidia-cutlass-dsl 4.8.1" in d.launch.producer_version and d.launch.device == "NVIDIA H200"
    assert d.launch.num_blocks == len(truth) == t["ctas"] == 132
    raw = json.loads(gzip.open(IKET / f"{name}.trace.json.gz").read())["launches"][0]
    origin = min(min(r["startTs"] for r in raw["ranges"]), min(w["startTs"] for w in raw["warpLifetimes"]))
    i = d.instants
    exits = i.event == d.launch.event_names.index(WARP_EXIT)
    last = np.full(d.launch.num_blocks, -1, np.int64)
    np.maximum.at(last, i.block[exits], i.ts_ns[exits])
    assert np.abs(truth[:, 1] - origin - last).max() <= 4 * 32
    starts = i.event == d.launch.event_names.index(WARP_START)
    first = np.full(d.launch.num_blocks, 1 << 62, np.int64)
    np.minimum.at(first, i.block[starts], i.ts_ns[starts])
    assert ((truth[:, 0] - origin - first) >= 0).all()  # the truth's entry stamp comes after the warps start
    sm = np.full(d.launch.num_blocks, -1, np.int64)
    sm[d.slices.block] = d.slices.sm
    assert (sm == truth[:, 2]).all()


@pytest.mark.parametrize("run", (1, 2))
def test_the_straggler_is_named_with_what_removing_it_saves(run):
    """CTA 17 runs each tile's K loop 3 times. Removing its excess ends the kernel when the next CTA ends: the
    truth's wall minus the second-latest CTA exit. The top warning names block 17 with that stake (within 15%)."""
    name = f"straggler_run{run}"
    t = _truth(name)
    truth = np.array(t["truth"], dtype=np.int64)
    ends = np.sort(truth[:, 1])
    recoverable = float(ends[-1] - ends[-2])
    assert t["straggler_cta"] == 17 and int(np.argmax(truth[:, 1])) == 17
    a, warn = _warnings(name)
    assert warn, a.findings
    top = warn[0]
    headline = next(line for line in str(a).splitlines() if line.startswith(" 1. "))
    assert "block 17" in headline, headline
    assert abs(top.impact_ns - recoverable) <= 0.15 * recoverable, (top.impact_ns, recoverable)


def test_the_straggler_is_named_as_its_block_in_the_same_words_in_both_runs():
    """Every warp of CTA 17 does the extra work (the truth): which of its warps is the busiest is noise, the block
    is the cause. Both runs' first warning names block 17 as a whole, in the same words apart from the figures,
    and its stake is what the unprofiled kernel without the straggler (the gemm's control) saves, within 5%."""
    def control_us(case):
        return float(np.median(json.loads((IKET / f"{case}_control.truth.json").read_text())["kernel_ns"])) / 1e3

    saved_us = control_us("straggler") - control_us("gemm")  # 77.7 µs
    figures = re.compile(r"\d+(\.\d+)?(x| µs| ns| ms|%)")
    heads = []
    for run in (1, 2):
        a, warn = _warnings(f"straggler_run{run}")
        head = next(line for line in str(a).splitlines() if line.startswith(" 1. "))
        assert head.startswith(" 1. block 17 (all 5 traced warps) is busy "), head
        heads.append(figures.sub("#", head))
        g = warn[0].figures
        assert g["busiest_block"] == 17 and (g["block_lanes"], g["block_lanes_of"]) == (5, 5)
        assert abs(warn[0].impact_ns / 1e3 - saved_us) <= 0.05 * saved_us, (warn[0].impact_ns, saved_us)
    assert heads[0] == heads[1], heads


@pytest.mark.parametrize("run", (1, 2))
def test_the_example_gemm_gets_no_warning(run):
    """The example as NVIDIA wrote it (IKET ranges added): 512 tiles on 132 CTAs, 3.88 waves; the 16 CTAs with 3
    tiles end a tile early (the truth), and spreading the work perfectly would save at most the latest exit minus
    the mean one: under 5% of the wall. Nothing to act on; the tail is at most info."""
    truth = np.array(_truth(f"gemm_run{run}")["truth"], dtype=np.int64)
    wall = truth[:, 1].max() - truth[:, 0].min()
    assert truth[:, 1].max() - truth[:, 1].mean() < 0.05 * wall
    a, warn = _warnings(f"gemm_run{run}")
    assert warn == [], [f.message for f in warn]


@pytest.mark.parametrize("run", (1, 2))
def test_the_slow_producer_is_read_as_a_pipeline_bound_by_it(run):
    """The producer warp spins 1.5 us before each K tile: the consumers wait for full stages in mma_wait, the
    producer never waits for a free one (load_wait). The top warning: a pipeline bound by the producer (warp 0),
    its stake within 15% of what removing the spin saves: this wall less the example's (the truth's clocks)."""
    a, warn = _warnings(f"slow_load_run{run}")
    mean = dict(zip(a.phases.phase.tolist(), a.phases.mean_dur_ns.tolist()))
    assert mean["mma_wait"] > 15 * mean["load_wait"]
    assert mean["mma_wait"] * 32 > 0.8 * mean["mma"]  # 32 K tiles a tile: most of mma is waiting
    def wall(name):
        t = np.array(_truth(name)["truth"], dtype=np.int64)
        return float(t[:, 1].max() - t[:, 0].min())
    saved = wall(f"slow_load_run{run}") - wall(f"gemm_run{run}")
    top = warn[0]
    assert top.kind == "pipeline" and top.figures["bounding_group"] == 0 and top.figures["waiting_group"] >= 4
    assert top.phase == "mma_wait"
    assert abs(top.impact_ns - saved) <= 0.15 * saved, (top.impact_ns, saved)
    assert not any("block" in f.message.split(":")[0] for f in warn)  # no block is blamed: they are all alike


@pytest.mark.parametrize("case", CASES)
def test_same_input_runs_give_the_same_warnings(case):
    def kinds(run):
        _, warn = _warnings(f"{case}_run{run}")
        return [(f.kind, f.phase) for f in warn]

    assert kinds(1) == kinds(2)


def test_the_commands_run_on_a_sample():
    path = IKET / "straggler_run1.trace.json.gz"
    rc, out, err = run_ktrace("inspect", path)
    assert rc == 0, err
    assert "NVIDIA IKET" in out and "nvidia-cutlass-dsl 4.8.1" in out and "accounted" in out and "yes" in out
    rc, out, err = run_ktrace("analyze", path)
    assert rc == 0, err
    words = " ".join(out.split())
    assert "132 blocks x 8 warps" in words and "block 17" in words
    rc, out, err = run_ktrace("check", path, "--rule", "kernel.wall_us <= 100")
    assert rc == 1, (out, err)


def test_inspect_says_which_gpc_finishes_last():
    """IKET's locations give each CTA's GPC: the straggler's GPC ends last, with block 17, and every block is in
    one GPC."""
    from ktrace.api import inspect as inspect_capture

    info = inspect_capture(IKET / "straggler_run1.trace.json.gz")
    raw = json.loads(gzip.open(IKET / "straggler_run1.trace.json.gz").read())
    gpc17 = next(loc["gpcId"] for loc in raw["locationTable"] if loc["ctaId"] == [0, 0, 17])
    rows = info["gpcs"]
    assert rows[0]["gpc"] == gpc17 and rows[0]["last_block"] == 17
    assert sum(r["blocks"] for r in rows) == 132 and len(rows) == len({loc["gpcId"] for loc in raw["locationTable"]})
    rc, out, err = run_ktrace("inspect", IKET / "straggler_run1.trace.json.gz")
    assert "GPCs (by last end" in out


def test_whatif_predicts_the_gemm_from_the_straggler():
    """Balancing the straggler's work (load and mma) predicts the wall of the same kernel without it, measured."""
    from ktrace.analysis.replay.whatif import Change
    from ktrace.api import whatif

    r = whatif(IKET / "straggler_run1.trace.json.gz", Change(balance=("mma", "load")))
    measured = ktrace.analyze(IKET / "gemm_run1.trace.json.gz").kernel.wall_ns
    assert abs(r.predicted_wall_ns - measured) <= 0.05 * measured, (r.predicted_wall_ns, measured)


def test_the_trace_carries_each_blocks_gpc(tmp_path):
    """The converted trace's launch slice says each block's GPC, so SQL can group by it."""
    out = tmp_path / "s.perfetto-trace"
    rc, _, err = run_ktrace("convert", IKET / "straggler_run1.trace.json.gz", "-o", out)
    assert rc == 0, err
    r = ktrace.query(out, "select extract_arg(arg_set_id, 'debug.block_gpc') as g, "
                          "extract_arg(arg_set_id, 'debug.producer') as p from slice where depth = 0 and "
                          "extract_arg(arg_set_id, 'debug.block_gpc') is not null")
    gpcs, producer = r.rows[0]
    raw = json.loads(gzip.open(IKET / "straggler_run1.trace.json.gz").read())
    expect = {loc["ctaId"][2]: loc["gpcId"] for loc in raw["locationTable"]}
    assert producer == "iket"
    assert [int(g) for g in gpcs.split(",")] == [expect[b] for b in range(132)]


def test_the_roofline_reads_the_gemms_work_from_the_sidecar():
    """The sidecar's work (the GEMM's bytes and FLOPs) puts the example at 79% of the H200's FP16 peak, and caps the
    slow producer's stake at the wall the roofline allows."""
    a = ktrace.analyze(IKET / "gemm_run1.trace.json.gz")
    text = " ".join(str(a).split())
    assert "34.4 GFLOP" in text and "79% of the H200's peak 989 TFLOP/s" in text
    _, warn = _warnings("slow_load_run1")
    wall = ktrace.analyze(IKET / "slow_load_run1.trace.json.gz").kernel.wall_ns
    least = 2 * 4096 * 2048 * 2048 / 989e12 * 1e9  # the FLOPs at the peak, ns
    assert warn[0].impact_ns <= wall - least + 1


@pytest.mark.parametrize("case", ("straggler", "slow_load"))
def test_the_warnings_stake_is_a_replay_of_its_fix_through_the_timed_waits(case):
    """The waits IKET times (mma_wait, load_wait) are releases by the lane they wait for, not busy time, so a
    warning's change replays: ``whatif --fix 1`` saves what removing the cause saves by the truth's clocks (the
    straggler: the gemm's control is 77.7 µs faster; the slow producer: this wall less the gemm's, 165 µs): the
    stake within 10% of it, the replayed saving itself or, where that is past the roofline, its room."""
    from ktrace.api import whatif

    for run in (1, 2):
        name = f"{case}_run{run}"
        _, warn = _warnings(name)
        w = whatif(IKET / f"{name}.trace.json.gz", fix=1)
        told = w.fix["warnings"][0]
        assert told["replayed_saving_ns"] == w.saving_ns == warn[0].figures["replayed_saving_ns"]
        if case == "straggler":
            ctl = {c: float(np.median(json.loads((IKET / f"{c}_control.truth.json").read_text())["kernel_ns"]))
                   for c in ("straggler", "gemm")}
            saved = ctl["straggler"] - ctl["gemm"]
            assert told["cut"] is None and warn[0].impact_ns == w.saving_ns
        else:
            t = {n: np.array(_truth(n)["truth"], dtype=np.int64) for n in (name, f"gemm_run{run}")}
            saved = float(np.subtract(*[t[n][:, 1].max() - t[n][:, 0].min() for n in (name, f"gemm_run{run}")]))
            # The consumers' MMA ran during their waits, so the replay of the faster producer overshoots (the
            # consumers' own work between waits is less than their MMA's); the roofline caps the stake.
            assert told["cut"] == "roofline" and saved <= warn[0].impact_ns < w.saving_ns
        assert abs(warn[0].impact_ns - saved) <= 0.10 * saved, (name, warn[0].impact_ns, w.saving_ns, saved)
