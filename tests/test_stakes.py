"""Findings read right on the committed captures and on hand-built timelines with known truth: no negative
duration in any message, consequence lists short, whole and said once, the warnings' impacts within the wall,
waits between overlapping slices never a negative wait, equal gaps on every lane the lanes' own work, and the
stakes that the replay (ktrace/analysis/replay.py) bounds."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from conftest import quick_first
from ktrace import analyze, decode
from ktrace.decoding.encode import encode_tags, place_records

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
CAPTURES = sorted(str(p.relative_to(SAMPLES)) for p in SAMPLES.rglob("*.bin*") if "proton" not in p.parts
                  and p.name.endswith((".bin", ".bin.gz")))
NEGATIVE = re.compile(r"(?<![\w.+-])-\d[\d.,]*\s?(ns|µs|ms|s)\b")
T0 = 1_000_000


def analyzed(path):
    return analyze(decode(path))


def build(lanes: dict, events: list[str]):
    """{(block, group): [(event, begin, end), ...]} -> the numpy engine's Analysis of the buffer."""
    rows = []
    for (b, g), steps in lanes.items():
        recs = [r for ev, t0, t1 in steps for r in ((0, ev, t0), (1, ev, t1))]
        rows += [(b, g, i, t, e, ts) for i, (t, e, ts) in enumerate(recs)]
    block, group, seq, rtype, event, ts = (np.array(c, np.int64) for c in zip(*rows))
    groups = max(g for _, g in lanes) + 1
    tag = encode_tags("flashinfer", rtype, event, block, group, groups, sm=block.copy())
    cap = max(2 * len(s) for s in lanes.values())
    buf = place_records(max(b for b, _ in lanes) + 1, groups, block, group, seq, tag, ts, cap)
    return analyze(decode(buf, events=",".join(events)))


@pytest.mark.parametrize("name", quick_first(CAPTURES, 6))
def test_findings_say_no_negative_duration_and_list_each_consequence_once(name):
    a = analyzed(SAMPLES / name)
    for f in a.findings:
        for text in (f.message, f.evidence):
            assert not NEGATIVE.search(text), text
        if "the same cause shows as: " in f.message:
            listed = f.message.split("the same cause shows as: ", 1)[1].split("; ")
            assert len(listed) == len(set(listed)) and len(listed) <= 5, listed
            assert all(not x.endswith("...") or x[-4] != " " for x in listed)
    warned = sum(f.impact_ns for f in a.findings if f.severity == "warning")
    assert warned <= a.kernel.wall_ns
    for r in a.to_dict()["wait_causes"]:
        assert r["mean_ns"] >= 0 and r["p50_ns"] >= 0, r


def _top(rows):
    """TopSlices of [(lane, phase, k, begin, end)] (one group, a block per lane)."""
    from ktrace.analysis.evidence.waits import TopSlices

    lane, ph, k, b, e = (np.array(c, np.int64) for c in zip(*rows))
    return TopSlices.of(lane, lane, np.zeros_like(lane), ph, k, b, e)


def test_overlapping_top_level_slices_are_no_wait_and_equal_gaps_are_the_lanes_own_work():
    from ktrace.analysis.evidence.waits import wait_causes

    rows = []
    for lane in range(16):
        t = T0 + 4 * (lane % 2)  # the lanes end within a tick of each other: too close for the slope
        rows += [(lane, 0, 0, t, t + 5000), (lane, 1, 0, t + 4500, t + 8000),  # b overlaps a's last 500 ns
                 (lane, 2, 0, t + 8000 + 4576, t + 8000 + 4576 + 2000)]  # 4576 ns of untimed work on every lane
    wc = wait_causes(_top(rows), 32.0, {0: "a", 1: "b", 2: "c"})
    got = {(r["phase"], r["next_phase"]): r for r in wc.rows()}
    assert ("a", "b") not in got  # every a -> b "gap" is an overlap: no wait, not a negative one
    assert got[("b", "c")]["cause"] == "own" and got[("b", "c")]["mean_ns"] == 4576


def test_a_cta_with_nothing_to_do_before_a_grid_barrier_is_idle_not_late():
    # 12 CTAs: 11 run `attn` (5-6 us), then a grid barrier, then every CTA runs `merge`. CTA 11 has no attention
    # work: its first slice is `merge`, after the barrier. It ends 64 ns after the next lane: no more is at stake.
    lanes, ends = {}, []
    for c in range(11):
        e = T0 + 5000 + 96 * c
        lanes[(c, 0)] = [(0, T0, e)]
        ends.append(e)
    release = max(ends)
    for c in range(12):
        b = release + 640 + 32 * (c % 3)
        lanes.setdefault((c, 0), []).append((1, b, b + 800 + (64 if c == 11 else 0)))
    a = build(lanes, ["attn", "merge"])
    assert not [f for f in a.findings if f.kind == "late_start"], [f.message for f in a.findings]
    idle = [f for f in a.findings if f.kind == "idle_lanes"]
    assert idle and idle[0].figures["idle"] == [[11, 0]]
    assert all(f.impact_ns <= 64 + 64 for f in a.findings if f.severity == "warning" and "block 11" in f.message)


def test_pipeline_stake_is_the_replayed_saving():
    """MLA decode (batch 132): group 1 bounds the blocks. Its stake is what the replay saves when group 1's work
    is as fast as group 0's: group 0's own work then binds, so far less than the busy-time difference."""
    from ktrace.analysis.replay.replay import replay
    from ktrace.analysis.findings.stakes import timeline_of_figures

    a = analyzed(SAMPLES / "fi_mla_decode_run1.bin.gz")
    pipe = [f for f in a.findings if f.kind == "pipeline" and f.severity == "warning"]
    assert len(pipe) == 1
    f = pipe[0]
    g = f.figures
    busy_gap = g["median_busy_bounding_ns"] - g["median_busy_waiting_ns"]
    tl = timeline_of_figures(a.figures)
    dur = tl.dur.astype(float)
    dur[tl.group == g["bounding_group"]] *= g["median_busy_waiting_ns"] / g["median_busy_bounding_ns"]
    faster = replay(tl, dur)
    assert faster.settled
    saving = replay(tl).wall_ns - faster.wall_ns
    assert f.impact_ns == pytest.approx(saving, abs=1)
    assert g["replayed_saving_ns"] == pytest.approx(saving, abs=1)
    assert f.impact_ns < 0.7 * busy_gap  # 15.8 µs against a 29.1 µs busy-time difference


def test_a_phase_run_alone_at_the_end_is_a_serial_tail_with_its_stake():
    """Split-K: 264 blocks compute ~50 µs, then block 263 alone runs `final` for 40 µs (44% of the wall). The top
    warning names the serial phase, its block and the time at stake: spreading `final` over the 264 lanes
    leaves 40 µs / 264 of it, so 40 µs x 263/264 is recoverable."""
    lanes = {(b, 0): [(0, T0, T0 + 50_000 + (b % 7) * 64)] for b in range(264)}
    lanes[(263, 0)].append((1, T0 + 50_500, T0 + 90_500))
    a = build(lanes, ["compute", "final"])
    warn = [f for f in a.findings if f.severity == "warning"]
    assert warn[0].kind == "serial_tail" and warn[0].phase == "final" and warn[0].figures["block"] == 263
    truth = 40_000 * 263 / 264
    assert abs(warn[0].impact_ns - truth) <= 0.15 * truth
    assert "serial tail" in str(a) and "final" in str(a)
    # the tail it leaves and the idle lanes are the same cause: said once, not counted again
    assert not [f for f in warn[1:] if f.kind in ("tail", "idle_lanes")]
    assert sum(f.impact_ns for f in warn) <= a.kernel.wall_ns
