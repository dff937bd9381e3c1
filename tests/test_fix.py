"""One cause model: a warning's stake is the replayed saving of the change its kind names (analysis/replay/), and
``ktrace whatif --fix N`` replays that same change, so it predicts the stake to the ns or names what cut the stake
below the saving (the roofline, the time the warnings above it take first, its claims on the critical path).
Checked on every capture under samples/ and on hand-built timelines with known truth."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import quick_first, run_ktrace, write_buffer
from ktrace import analyze, decode
from ktrace.decoding.encode import encode_tags, place_records

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
CAPTURES = sorted(str(p.relative_to(SAMPLES)) for p in SAMPLES.rglob("*.bin*") if "proton" not in p.parts
                  and p.name.endswith((".bin", ".bin.gz")))
CAPTURES += sorted(str(p.relative_to(SAMPLES)) for p in (SAMPLES / "iket").glob("*_run*.trace.json.gz"))  # timed waits
T0 = 1_000_000


def _words(lanes: dict, sms: int | None = None) -> np.ndarray:
    """{(block, group): [(event, begin, end), ...]} -> a FlashInfer-layout buffer (block b on SM b, or b % sms)."""
    rows = []
    for (b, g), steps in lanes.items():
        recs = [r for ev, t0, t1 in steps for r in ((0, ev, t0), (1, ev, t1))]
        rows += [(b, g, i, t, e, ts) for i, (t, e, ts) in enumerate(recs)]
    block, group, seq, rtype, event, ts = (np.array(c, np.int64) for c in zip(*rows))
    groups = max(g for _, g in lanes) + 1
    tag = encode_tags("flashinfer", rtype, event, block, group, groups, sm=block % sms if sms else block.copy())
    cap = max(2 * len(s) for s in lanes.values()) + 2  # room left: no lane is full
    return place_records(max(b for b, _ in lanes) + 1, groups, block, group, seq, tag, ts, cap)


@pytest.mark.parametrize("name", quick_first(CAPTURES, 8))
def test_each_warnings_fix_replays_its_stake_or_names_the_cut(name):
    from ktrace.analysis.figures.numpy.stream import numpy_figures
    from ktrace.analysis.findings.find import find
    from ktrace.analysis.replay.replay import timeline_of
    from ktrace.analysis.replay.whatif import CUTS, fix_told, whatif

    from ktrace.decoding.iket import read_iket

    d = read_iket(SAMPLES / name) if name.endswith(".trace.json.gz") else decode(SAMPLES / name)
    if not len(d.slices):
        pytest.skip("no slices to replay")
    fig = numpy_figures(d)
    tl = timeline_of(d, fig)
    warnings = [f for f in find(fig) if f.severity == "warning"]
    for n, f in enumerate(warnings, 1):
        if f.change is None:
            told = fix_told([(n, f)], 0, fig.kernel.wall_ns)["warnings"][0]
            assert told["cut"] == "none", (n, f.kind)
            continue
        w = whatif(tl, f.change)
        assert f.figures["replayed_saving_ns"] == w.saving_ns, (n, f.kind)  # the stake's replay is whatif's
        assert f.impact_ns <= w.saving_ns, (n, f.kind)  # never more than the change saves
        told = fix_told([(n, f)], w.saving_ns, fig.kernel.wall_ns)["warnings"][0]
        if f.impact_ns < w.saving_ns - 1:  # below the saving: the report names why
            assert told["cut"] in CUTS and told["cut"] != "none", (n, f.kind, f.impact_ns, w.saving_ns)
        else:
            assert told["cut"] is None


def test_whatif_fix_on_the_command_line_is_analyzes_stake(tmp_path):
    src = SAMPLES / "late_start_ktrace.bin"
    rc, out, err = run_ktrace("analyze", src, "--json")
    assert rc == 0, err
    warnings = [f for f in json.loads(out)["findings"] if f["severity"] == "warning"]
    rc, out, err = run_ktrace("whatif", src, "--fix", "1", "--json")
    assert rc == 0, err
    w = json.loads(out)
    assert w["saving_ns"] == warnings[0]["impact_ns"]
    assert w["fix"]["warnings"][0]["kind"] == warnings[0]["kind"] and w["fix"]["warnings"][0]["cut"] is None
    rc, out, err = run_ktrace("whatif", src, "--fix", "1")
    assert rc == 0 and "fixes warning 1 (late_start" in out and "the saving of its change" in out
    rc, out, err = run_ktrace("whatif", src, "--fix", str(len(warnings) + 1))
    assert rc == 2 and f"has {len(warnings)} warning" in err and "Traceback" not in err
    rc, out, err = run_ktrace("whatif", src, "--fix", "1", "--balance", "compute")
    assert rc == 2 and "alone" in err


def _late_before_every_barrier(nb=132, iters=8, comp=22_000, late=8_000, release=600, seed=1):
    """Block 57 begins each of 8 computes 8 µs late after a grid barrier (64 µs of ~250 µs); its compute is a
    median block's."""
    rng = np.random.default_rng(seed)
    lanes = {(b, 0): [] for b in range(nb)}
    t = T0
    for _ in range(iters):
        ends = []
        for b in range(nb):
            s = t + (late if b == 57 else 0) + int(rng.integers(0, 6)) * 32
            e = s + comp + int(rng.integers(0, 60)) * 32
            lanes[(b, 0)].append((0, s, e))
            ends.append(e)
        t = max(ends) + release
    return _words(lanes)


def test_a_late_starter_before_every_barrier_leads_with_its_whole_delay(tmp_path):
    import ktrace

    path = write_buffer(tmp_path, _late_before_every_barrier(), "late57")
    a = analyze(decode(path, events="compute"))
    warn = [f for f in a.findings if f.severity == "warning"]
    top = warn[0]
    assert top.kind == "late_start" and top.figures["block"] == 57, [f.message for f in warn]
    assert abs(top.impact_ns - 64_000) <= 0.15 * 64_000, top.impact_ns
    w = ktrace.whatif(path, fix=1, events="compute")
    assert w.saving_ns == top.impact_ns and w.fix["warnings"][0]["cut"] is None
    # the barrier keeps only its own release (~600 ns after each of 7 barriers), not the late starter's wait
    barrier = [f for f in a.findings if f.kind == "large_wait"]
    assert all(f.impact_ns <= 7 * (600 + 6 * 32) for f in barrier), [f.impact_ns for f in barrier]
    # --no-late-start --block 57 is the same change in the user's words: every instance's delay, not the first's
    same = ktrace.whatif(path, ktrace.Change(no_late_start=True, block=57), events="compute")
    assert same.saving_ns == top.impact_ns


def test_fix_all_replays_every_warnings_change_together(tmp_path):
    import ktrace

    path = write_buffer(tmp_path, _late_before_every_barrier(), "late57")
    a = analyze(decode(path, events="compute"))
    warn = [f for f in a.findings if f.severity == "warning"]
    w = ktrace.whatif(path, fix="all", events="compute")
    assert [r["number"] for r in w.fix["warnings"]] == list(range(1, len(warn) + 1))
    assert w.saving_ns >= max(f.impact_ns for f in warn)
    with pytest.raises(ktrace.InputError, match="warning"):
        ktrace.whatif(path, fix=len(warn) + 1, events="compute")


def test_a_straggler_that_changes_block_is_cut_in_every_instance(tmp_path):
    """Block 101 is 3x slow in the first half of the instances, block 5 in the second: cutting every slice to its
    instance's median saves what the two stragglers cost (the truth), and the stake is that saving."""
    import ktrace

    nb, iters, comp = 132, 8, 10_000
    lanes = {(b, 0): [] for b in range(nb)}
    t, truth = T0, 0
    for i in range(iters):
        slow = 101 if i < iters // 2 else 5
        ends = []
        for b in range(nb):
            s = t + (b % 4) * 32
            e = s + (3 * comp if b == slow else comp + (b % 9) * 32)
            lanes[(b, 0)].append((0, s, e))
            ends.append(e)
        truth += 2 * comp
        t = max(ends) + 500
    path = write_buffer(tmp_path, _words(lanes), "change")
    a = analyze(decode(path, events="compute"))
    top = [f for f in a.findings if f.severity == "warning"][0]
    assert abs(top.impact_ns - truth) <= 0.15 * truth, (top.kind, top.impact_ns, truth)
    w = ktrace.whatif(path, fix=1, events="compute")
    assert w.saving_ns == pytest.approx(top.impact_ns, abs=1) or w.fix["warnings"][0]["cut"] is not None
    assert abs(w.saving_ns - truth) <= 0.15 * truth


@pytest.mark.parametrize("before, after", [("imbalance_ktrace.bin", "balanced_ktrace.bin"),
                                           ("imbalance_flashinfer.bin", "balanced_flashinfer.bin"),
                                           ("ab/imbalance_before.bin", "ab/balanced_after.bin")])
def test_the_top_warnings_fix_predicts_the_measured_fix(before, after):
    """H200 captures of a kernel whose block 17 has 3x the compute, and of the same kernel balanced: the top
    warning's change (block 17's compute cut to the median) predicts the balanced kernel's wall within 10%."""
    import ktrace

    w = ktrace.whatif(SAMPLES / before, fix=1)
    measured = ktrace.analyze(SAMPLES / after).kernel.wall_ns
    assert w.fix["warnings"][0]["kind"] == "stable_straggler"
    assert abs(w.predicted_wall_ns - measured) <= 0.1 * measured, (w.predicted_wall_ns, measured)


def test_a_resized_grid_is_the_same_work_in_whole_waves(tmp_path):
    """429 equal blocks of 10 µs on 132 SMs (one resident each): 3.25 waves, 4 block times of wall. The same work
    in 396 blocks (3 whole waves of 10.83 µs blocks) takes 32.5 µs: --blocks predicts it, and the waves finding's
    fix is that change."""
    import ktrace

    lanes = {}
    for b in range(429):
        t = T0 + (b // 132) * 10_200 + (b % 3) * 32
        lanes[(b, 0)] = [(0, t, t + 10_000 + (b % 5) * 32)]
    path = write_buffer(tmp_path, _words(lanes, sms=132), "waves")
    w = ktrace.whatif(path, ktrace.Change(blocks=396), events="compute")
    truth = 429 * 10_064 / 396 * 3
    assert abs(w.predicted_wall_ns - truth) <= 0.1 * truth, (w.predicted_wall_ns, truth)
    a = analyze(decode(path, events="compute"))
    waves = [f for f in a.findings if f.kind == "wave_quantization"]
    assert waves and waves[0].change == ktrace.Change(blocks=396)
    fixed = ktrace.whatif(path, fix=1, events="compute")
    assert fixed.fix["warnings"][0]["kind"] == "wave_quantization"
    assert fixed.saving_ns == w.saving_ns and fixed.fix["warnings"][0]["stake_ns"] <= fixed.saving_ns


def test_the_schema_states_each_registered_kinds_change():
    """docs/analysis-schema.md's table of each kind's change names every kind of the registry (a kind added
    without its change stated fails here), and the change vocabulary's table names block_speedup's option."""
    import re

    from ktrace.analysis.findings import kinds

    text = (SAMPLES.parent / "docs" / "analysis-schema.md").read_text()
    table = text[text.index("**Each kind's change**"):]
    table = table[:table.index("\n\n", table.index("| kind | change |"))]
    named = {n for row in table.splitlines() if row.startswith("| `")
             for n in re.findall(r"`([a-z_]+)`", row.split("|")[1])}
    assert set(kinds.names()) <= named, sorted(set(kinds.names()) - named)
    assert "`--block-speedup BLOCK=FACTOR`" in text
