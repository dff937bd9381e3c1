"""Calibrated thresholds (findings/margins.py): a warning clears its threshold by more than its figure's
run-to-run noise, else it is info marked marginal; runs of the same inputs keep the same warning set."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ktrace import analyze, analyze_runs, decode
from ktrace.analysis.compare.noise_model import noise_margin, noise_model
from ktrace.analysis.findings.find import find
from ktrace.analysis.model.thresholds import Thresholds, margin_of, shipped_noise

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"


def _sets() -> dict:
    spec = importlib.util.spec_from_file_location("build_noise_model", ROOT / "scripts" / "build_noise_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.same_input_sets(SAMPLES)


SETS = _sets()


def test_every_same_input_set_is_found():
    # FlashInfer's 5-run sets, samples/repeats, the _run2/_run3 sets and the A/B no-op pair
    assert {"fi_mla_decode", "fi_batch_attention_example", "cluster", "pipeline", "imbalance", "worklist",
            "ab_noop"} <= set(SETS)


@pytest.mark.parametrize("name", sorted(SETS))
def test_same_inputs_keep_the_same_warnings(name):
    runs = SETS[name]
    sets = []
    for r in runs:
        a = analyze(decode(r))
        sets.append(sorted((f.kind, f.phase or "") for f in a.findings if f.severity == "warning"))
    assert all(s == sets[0] for s in sets), {str(r.name): s for r, s in zip(runs, sets)}


def test_the_findings_read_the_noise_models_bounds():
    m = noise_model()
    assert shipped_noise() == {k: (b.relative, b.ticks, b.wall_share) for k, b in m.families.items()}
    got = margin_of(shipped_noise()["imbalance"], 1.3, 32.0, 20_000.0, 160_000.0, 500_000.0)[0]
    assert got == noise_margin("imbalance", 1.3, 32.0, unit_ns=20_000.0, kernel_ns_per_unit=160_000.0,
                               wall_ns=500_000.0)


def test_margins_apply_to_the_stake_not_to_a_side_figure():
    """A grid barrier whose waiters sleep between polls (samples/fixes/barrier, H100): its waits' share of all
    lanes' time is one side figure; the stake, the replayed release cut to a tight barrier's, is far over its floor
    and its noise, so it warns. The A/B no-op pair's barriers are tight already: their stake is within a tick or
    two of nothing, information in both runs, whatever their waits' share."""
    a = analyze(decode(SAMPLES / "fixes" / "barrier" / "before.bin"))
    waits = [f for f in a.findings if f.kind == "large_wait"]
    assert waits and waits[0].severity == "warning" and "marginal" not in waits[0].figures
    assert waits[0].impact_share > 0.3 and waits[0].impact_ns <= waits[0].figures["replayed_saving_ns"]
    for r in ("ab/noop_before.bin", "ab/noop_after.bin"):
        a = analyze(decode(SAMPLES / r))
        waits = [f for f in a.findings if f.kind == "large_wait"]
        assert waits and waits[0].severity == "info" and waits[0].impact_share < 0.01
        assert waits[0].figures["lane_time_fraction"] > 0.05  # the side figure over its threshold: not what decides


def test_a_warning_that_clears_its_noise_stays_a_warning():
    a = analyze(decode(SAMPLES / "imbalance_ktrace.bin"))
    top = [f for f in a.findings if f.severity == "warning"][0]
    assert top.kind == "stable_straggler" and "marginal" not in top.figures


def test_wider_noise_makes_a_warning_marginal():
    """The user's own runs widen the bounds (--runs): the same figures against wider noise give info."""
    d = decode(SAMPLES / "imbalance_ktrace.bin")
    a = analyze(d)
    wide = dict(shipped_noise(), kernel_wall=(0.99, 1e6, 0.99), wait=(0.99, 1e6, 0.99))
    found = find(a.figures, Thresholds(), wide)
    assert not [f for f in found if f.severity == "warning"]
    assert all("marginal" in f.figures for f in found if f.kind == "stable_straggler")


def test_runs_judge_against_their_own_noise():
    r = analyze_runs(sorted(SAMPLES.glob("fi_batch_attention_example_run*.bin.gz")))
    held = [f for f in r.findings if f.runs == f.of]
    some = [f for f in r.findings if f.runs != f.of]
    assert not some, [(f.kind, f.phase, f.runs) for f in some]
    assert all(f.kind != "large_wait" for f in held)  # 1.1-1.2% of the wall against a 1% floor: within the noise


def test_runs_group_a_warning_by_kind_and_phase_with_its_block_apart():
    """A late start of block 127 is one warning over the runs whichever of its warp groups is the late one
    (it was listed twice, 'in 1 of 2 runs ... names block 127 in every run'); a different block is that
    warning's block not holding, not another warning."""
    from dataclasses import replace

    from ktrace.analysis.compare.runs import runs_analysis
    from ktrace.analysis.findings.find import Finding

    base = analyze(decode(SAMPLES / "imbalance_ktrace.bin"))

    def run(group, block):
        f = Finding("late_start", None, "warning", "block starts late", "", 9000.0, 0.1,
                    {"basis": "lane", "block": block, "group": group, "late_ns": 9000.0})
        return replace(base, findings=(f,))

    r = runs_analysis(["a", "b"], [run(0, 127), run(1, 127)])
    assert [(f.kind, f.runs, f.of, f.blocks) for f in r.findings] == [("late_start", 2, 2, {127: 2})]
    r = runs_analysis(["a", "b"], [run(0, 127), run(0, 12)])
    assert [(f.runs, f.blocks) for f in r.findings] == [(2, {12: 1, 127: 1})]


def test_consequences_name_the_phases_of_one_idle_set_once():
    """MLA example: the same 8 idle lanes in several phases are one consequence naming the phases, not one
    per phase."""
    a = analyze(decode(SAMPLES / "fi_mla_example_run1.bin.gz"))
    idle = [f for f in a.findings if f.kind == "idle_lanes"][0]
    said = idle.message.split("the same cause shows as: ", 1)[1]
    assert said.count("8 of 264 lanes never ran") == 1 and said.count("4 of 132 lanes never ran") <= 1
    assert "..." not in said
