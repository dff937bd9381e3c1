"""The verdicts on real H200 captures of every kernel shape, against the ground truth each capture recorded
on the GPU apart from the profiler (sidecar `ground_truth`: the 64-bit clock at every block's start and end,
the heavy, late or straggling blocks the kernel was built with). Both headers (FlashInfer's and ktrace's).

Analyzed by the numpy engine (fast); tests/test_analysis.py holds the SQL package equal to it on every capture.
"""

from __future__ import annotations

import json

import pytest

from ktrace import analyze, decode

from conftest import SAMPLES

HEADERS = ["ktrace", "flashinfer"]


def run(name):
    a = analyze(decode(SAMPLES / f"{name}.bin"))
    truth = json.loads((SAMPLES / f"{name}.json").read_text())["ground_truth"]
    return a, truth


def warnings(a):
    return {(f.kind, f.phase) for f in a.findings if f.severity == "warning"}


def only(a, kind, phase=None):
    got = [f for f in a.findings if f.kind == kind and (phase is None or f.phase == phase)]
    assert len(got) == 1, [(f.kind, f.phase, f.severity) for f in a.findings]
    return got[0]


@pytest.mark.parametrize("name", [f"waves_{h}" for h in HEADERS] + ["waves_run2_ktrace"])
def test_multi_wave_kernel_is_waves_and_a_tail_with_the_block_that_ends_it(name):
    a, truth = run(name)
    o = a.occupancy
    assert o["waves"] == pytest.approx(truth["waves_planned"]) and o["blocks_per_sm_max"] == 1
    assert o["last_block"] == truth["last_block_by_clock"] and o["last_block"] in truth["heavy_blocks"]
    tail = only(a, "tail")
    assert tail.severity == "warning" and tail.figures["last_block"] == truth["last_block_by_clock"]
    assert tail.figures["busy_sms_in_tail"] <= len(truth["heavy_blocks"]) + 2
    # The begins spread over the whole kernel because of the waves: not a synchronization, not a warning.
    skews = [f for f in a.findings if f.kind == "start_skew"]
    assert skews and all(f.figures["cause"] == "waves" and f.severity == "info" for f in skews)
    assert not any(f.kind in ("stable_straggler", "moving_last_finisher", "late_start") for f in a.findings)


@pytest.mark.parametrize("name", [f"straggler_change_{h}" for h in HEADERS])
def test_a_straggler_that_changes_is_named_with_its_segments(name):
    a, truth = run(name)
    f = only(a, "straggler_change", "compute")
    assert f.severity == "warning"
    got = [{k: s[k] for k in ("block", "first_k", "last_k")} for s in f.figures["segments"]]
    assert got == truth["straggler_segments"]


@pytest.mark.parametrize("name", [f"late_start_{h}" for h in HEADERS])
def test_last_because_it_started_late(name):
    a, truth = run(name)
    f = only(a, "late_start", "compute")
    assert f.severity == "warning" and f.figures["block"] == truth["late_block"]
    assert "fix its share" not in f.message
    assert not any(g.kind in ("stable_straggler", "load_imbalance") for g in a.findings)
    assert a.occupancy["last_block"] == truth["last_block_by_clock"] == truth["late_block"]


@pytest.mark.parametrize("name", [f"worklist_{h}" for h in HEADERS])
def test_work_list_is_judged_on_lane_totals(name):
    a, truth = run(name)
    tiles = truth["tiles_per_cta"]
    p = a.phases.row(a.phases.phase.tolist().index("compute"))
    assert (p["min_lane_instances"], p["max_lane_instances"]) == (min(tiles), max(tiles))
    f = only(a, "load_imbalance", None)  # a kernel-wide finding: the lanes' totals over all phases
    assert f.figures["basis"] == "lane_totals"
    assert all(g.figures["cause"] == "unaligned" for g in a.findings if g.kind == "start_skew")
    assert not any(g.kind in ("stable_straggler", "moving_last_finisher", "rotating_imbalance") for g in a.findings)
    assert a.occupancy["last_block"] == truth["last_block_by_clock"]


@pytest.mark.parametrize("name", [f"nested_{h}" for h in HEADERS])
def test_nested_phases_have_no_waits_inside_their_parent(name):
    a, _ = run(name)
    assert {(w["phase"], w["next_phase"]) for w in a.waits.rows()} == {("outer", "outer")}
    assert not [f for f in a.findings if f.severity == "warning" and f.phase in ("inner_a", "inner_b")]
    assert set(a.critical_path.phase.tolist()) - {None} == {"outer"}


@pytest.mark.parametrize("name", [f"moving_straggler_{h}" for h in HEADERS])
def test_rotating_imbalance_is_not_called_contention(name):
    a, _ = run(name)
    assert only(a, "rotating_imbalance", "compute").severity == "warning"
    assert not any(f.kind == "moving_last_finisher" for f in a.findings)


@pytest.mark.parametrize("pair", [("imbalance_ktrace", "imbalance_run2_ktrace"), ("waves_ktrace", "waves_run2_ktrace")])
def test_two_runs_of_the_same_inputs_give_the_same_warnings(pair):
    a, b = (run(n)[0] for n in pair)
    assert warnings(a) == warnings(b) and warnings(a)


@pytest.mark.parametrize("name", sorted(p.stem for p in SAMPLES.glob("*.bin") if not p.stem.startswith("multigpu")))
def test_the_critical_path_covers_the_wall_and_findings_are_sorted_by_impact(name):
    a, _ = run(name) if (SAMPLES / f"{name}.json").exists() and "ground_truth" in json.loads(
        (SAMPLES / f"{name}.json").read_text()) else (analyze(decode(SAMPLES / f"{name}.bin")), None)
    d = a.to_dict()
    if a.kernel.wall_ns:
        assert d["critical_path"]["coverage"] == 1.0
    warn = [f.impact_ns for f in a.findings if f.severity == "warning"]
    assert warn == sorted(warn, reverse=True)
    assert all(f.evidence for f in a.findings)
