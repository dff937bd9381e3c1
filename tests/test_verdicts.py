"""Verdicts on kernels of every shape, with known answers: multi-wave launches and their tail, a straggler
that changes mid-run, a late starter, a rotating imbalance, contention, skew carried over, nested phases, a
work list, idle lanes; the critical path tiles the wall; two runs with timer jitter give the same warnings.

Buffers are built record by record (ktrace.decoding.encode) and analyzed by the numpy engine; the SQL package is
held equal to it by tests/test_analysis.py, and the real H200 captures of these shapes are checked
in tests/test_shapes_verdicts.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from ktrace import decode
from ktrace import analyze
from ktrace.analysis import Thresholds
from ktrace.analysis.findings.find import find
from ktrace.decoding.encode import encode_tags, place_records

T0 = 100_000
B, E = 0, 1


def build(lanes: dict, events: list[str], sm_of_block: dict, num_groups: int = 1):
    """lanes: {(block, group): [(type, event, ts_ns), ...]} in record order -> analyzed by the numpy engine."""
    blocks = max(b for b, _ in lanes) + 1
    rows = [(b, g, i, t, e, ts) for (b, g), recs in lanes.items() for i, (t, e, ts) in enumerate(recs)]
    block, group, seq, rtype, event, ts = (np.array(c, np.int64) for c in zip(*rows))
    sm = np.array([sm_of_block[b] for b in block.tolist()], np.int64)
    tag = encode_tags("flashinfer", rtype, event, block, group, num_groups, sm=sm)
    cap = max(len(r) for r in lanes.values())
    buf = place_records(blocks, num_groups, block, group, seq, tag, ts, cap)
    d = decode(buf, events=",".join(events))
    assert d.accounted and len(d.anomalies) == 0
    return analyze(d)


def slices(steps):
    """[(event, begin, end), ...] -> records."""
    out = []
    for ev, b, e in steps:
        out += [(B, ev, b), (E, ev, e)]
    return out


def kinds(a, severity=None):
    return {(f.kind, f.phase) for f in a.findings if severity is None or f.severity == severity}


def one(a, kind, phase=None):
    found = [f for f in a.findings if f.kind == kind and (phase is None or f.phase == phase)]
    assert len(found) == 1, [(f.kind, f.phase) for f in a.findings]
    return found[0]


def assert_path_tiles_wall(a):
    cp = a.critical_path
    assert cp.begin_ns[0] == a.kernel.begin_ns and cp.end_ns[-1] == a.kernel.end_ns
    assert (cp.begin_ns[1:] == cp.end_ns[:-1]).all()
    assert int(cp.dur_ns.sum()) == a.kernel.wall_ns
    assert int(a.critical_shares.total_ns.sum()) == a.kernel.wall_ns
    assert a.to_dict()["critical_path"]["coverage"] == 1.0


# -- shapes ----------------------------------------------------------------------------------------------

def barrier(durs, release=None, gap=320):
    """(lanes, steps) durations -> per-lane [(event, b, e)] of a grid-synchronized loop over events 0,1,2."""
    lanes, steps = durs.shape
    release = np.zeros_like(durs) if release is None else release
    out = {l: [] for l in range(lanes)}
    t = T0
    for j in range(steps):
        ends = []
        for l in range(lanes):
            b = t + int(release[l, j])
            e = b + int(durs[l, j])
            out[l].append((j % 3, b, e))
            ends.append(e)
        t = max(ends) + gap
    return out


def test_multi_wave_launch_is_waves_and_a_tail_not_skew():
    # 32 blocks on 8 SMs, one resident per SM: 4 waves; blocks 29 and 30 (last wave) do 4x the compute.
    lanes, sm, t_sm = {}, {}, {s: T0 for s in range(8)}
    for blk in range(32):
        s = blk % 8
        b = t_sm[s] + 64
        comp = 4000 * (4 if blk in (29, 30) else 1) + 32 * (blk % 3)
        lanes[(blk, 0)] = slices([(0, b, b + 640), (1, b + 640, b + 640 + comp), (2, b + 640 + comp, b + 960 + comp)])
        sm[blk] = s
        t_sm[s] = b + 960 + comp
    a = build(lanes, ["load", "compute", "store"], sm)
    o = a.occupancy
    assert (o["sms"], o["blocks"], o["blocks_per_sm_max"], o["max_resident"], o["waves"]) == (8, 32, 1, 8, 4.0)
    assert o["last_block"] in (29, 30) and o["busy_sms_in_tail"] == pytest.approx(2.0, abs=0.01)
    tail = one(a, "tail")
    assert tail.severity == "warning" and tail.figures["last_block"] == o["last_block"]
    assert tail.impact_ns >= 0.05 * a.kernel.wall_ns
    # Begins spread over the whole kernel because of the waves: said so, and not a warning.
    for f in a.findings:
        if f.kind == "start_skew":
            assert f.figures["cause"] == "waves" and f.severity == "info"
    assert not kinds(a) & {("stable_straggler", "compute"), ("moving_last_finisher", "compute")}
    assert (a.figures.blocks.later_wave == (np.arange(32) >= 8)).all()
    assert_path_tiles_wall(a)
    assert set(a.critical_path.kind.tolist()) >= {"slice", "block_switch"}


def test_straggler_that_changes_mid_run_is_named_with_its_segments():
    d = np.full((8, 30), 1000, np.int64)
    d[:, 1::3] = 4000
    for k in range(10):
        d[2 if k < 5 else 6, 3 * k + 1] = 12000
    a = build({(l, 0): slices(s) for l, s in barrier(d).items()}, ["load", "compute", "reduce"],
              {b: b for b in range(8)})
    f = one(a, "straggler_change", "compute")
    assert f.severity == "warning"
    assert [(s["block"], s["first_k"], s["last_k"]) for s in f.figures["segments"]] == [(2, 0, 4), (6, 5, 9)]
    assert "block 2 for k 0-4, then block 6 for k 5-9" in f.message
    assert_path_tiles_wall(a)


def test_last_because_it_started_late_is_not_told_to_fix_its_work():
    # A loop without barrier: equal work; block 3 starts 6 us late and stays last.
    lanes = {}
    for blk in range(6):
        t = T0 + (6000 if blk == 3 else 0) + 32 * (blk % 2)
        steps = []
        for k in range(4):
            steps.append((0, t, t + 2000))
            t += 2000
        lanes[(blk, 0)] = slices(steps)
    a = build(lanes, ["compute"], {b: b for b in range(6)})
    f = one(a, "late_start", "compute")
    assert f.severity == "warning" and "starts late" in f.message and f.figures["block"] == 3
    assert not kinds(a) & {("stable_straggler", "compute"), ("load_imbalance", "compute")}
    assert_path_tiles_wall(a)


def test_a_late_start_that_moves_from_block_to_block_names_none():
    # A grid-synchronized loop: at each step another block is released 3 µs late, its work ordinary.
    rel = np.zeros((6, 12), np.int64)
    for j in range(12):
        rel[j % 6, j] = 3000
    lanes = barrier(np.full((6, 12), 2000), rel)
    a = build({(blk, 0): slices(v) for blk, v in lanes.items()}, ["a", "b", "c"], {b: b for b in range(6)})
    f = one(a, "late_start", "b")
    assert f.severity == "warning" and f.figures["block"] is None
    assert " 2. a different block finishes b last each time, starting 3 µs late on average, not from its work" \
        in str(a).splitlines()


def test_rotating_imbalance_is_the_work_assignment_not_contention():
    d = np.full((8, 24), 1000, np.int64)
    for k in range(8):
        d[k, 3 * k + 1] = 3000
    a = build({(l, 0): slices(s) for l, s in barrier(d).items()}, ["load", "compute", "reduce"],
              {b: b for b in range(8)})
    f = one(a, "rotating_imbalance", "compute")
    assert f.severity == "warning" and "work assignment" in f.message
    assert ("moving_last_finisher", "compute") not in kinds(a)


def test_contention_only_when_no_lane_is_long():
    rng = np.random.default_rng(3)
    d = np.full((8, 24), 1000, np.int64)
    d[:, 1::3] = 20000
    for k in range(8):  # a different lane ends last by 3-5 ticks: no lane is long (< 1.1x the mean)
        d[(3 * k) % 8, 3 * k + 1] += 32 * int(rng.integers(3, 6))
    a = build({(l, 0): slices(s) for l, s in barrier(d).items()}, ["load", "compute", "reduce"],
              {b: b for b in range(8)})
    f = one(a, "moving_last_finisher", "compute")
    assert "contention or synchronization" in f.message
    assert not kinds(a) & {("rotating_imbalance", "compute"), ("load_imbalance", "compute")}


def test_slow_release_after_a_synchronization():
    # The lanes end each phase at different times (a different amount of work per lane), a barrier lets them
    # all go at once, but before 'reduce' it lets them go one by one, 96 ns apart.
    work = np.array([3, 7, 0, 5, 1, 6, 2, 4])  # per lane, not in the order of the release
    d = np.full((8, 24), 2000, np.int64) + (40 * work)[:, None]
    release = np.zeros_like(d)
    release[:, 2::3] = (96 * np.arange(8))[:, None]
    a = build({(l, 0): slices(s) for l, s in barrier(d, release=release).items()}, ["load", "compute", "reduce"],
              {b: b for b in range(8)})
    assert set(a.figures.wait_causes.cause.tolist()) == {"grid"}  # every boundary a grid-wide barrier
    # One cause, one finding: the release's spread before 'reduce' is listed in the barrier's finding.
    barrier_f = [f for f in a.findings if f.kind == "large_wait" and "grid-wide barrier" in f.message]
    assert len(barrier_f) == 1 and barrier_f[0].severity == "warning"
    skews = [c for c in barrier_f[0].figures.get("consequences", []) if c["kind"] == "start_skew"]
    assert [c["phase"] for c in skews] == ["reduce"] and "slow release after the grid-wide barrier" in skews[0]["message"]


def test_equal_ends_cannot_tell_a_barrier_from_untimed_work():
    # Every lane ends together and begins 96 ns x lane later: a barrier's slow release, or each lane's own
    # untimed work; the trace cannot tell, and ktrace must not claim a release.
    d = np.full((8, 24), 2000, np.int64)
    release = np.zeros_like(d)
    release[:, 2::3] = (96 * np.arange(8))[:, None]
    a = build({(l, 0): slices(s) for l, s in barrier(d, release=release).items()}, ["load", "compute", "reduce"],
              {b: b for b in range(8)})
    wc = a.figures.wait_causes
    assert wc.cause[wc.next_phase == "reduce"].tolist() != ["grid"]
    skews = [f for f in a.findings if f.kind == "start_skew" and f.phase == "reduce"]
    skews += [c for f in a.findings for c in f.figures.get("consequences", [])
              if c["kind"] == "start_skew" and c["phase"] == "reduce"]
    assert not any("slow release" in (c["message"] if isinstance(c, dict) else c.message) for c in skews)


def test_skew_carried_over_from_the_previous_phase_is_blamed_upstream():
    # No barrier: lane l's 'load' takes 64*l longer, 'compute' starts right after it on every lane.
    lanes = {}
    for l in range(8):
        t = T0
        steps = []
        for k in range(4):
            steps += [(0, t, t + 1000 + 64 * l), (1, t + 1000 + 64 * l, t + 3000 + 64 * l)]
            t += 3000 + 64 * 8
        lanes[(l, 0)] = slices(steps)
    a = build(lanes, ["load", "compute"], {b: b for b in range(8)})
    f = one(a, "start_skew", "compute")
    assert f.figures["cause"] == "carried_over" and f.severity == "info"
    assert "carried over" in f.message


def test_nested_phases_time_inside_the_parent_is_not_a_wait():
    lanes = {}
    for l in range(4):
        t, recs = T0, []
        for k in range(3):
            recs += [(B, 0, t), (B, 1, t + 32), (E, 1, t + 1032), (B, 2, t + 3000), (E, 2, t + 4000), (E, 0, t + 4032)]
            t += 4032 + 2000
        lanes[(l, 0)] = recs
    a = build(lanes, ["outer", "inner_a", "inner_b"], {b: b for b in range(4)})
    pairs = {(w["phase"], w["next_phase"]) for w in a.waits.rows()}
    assert pairs == {("outer", "outer")}  # no "inner_a -> inner_b" wait at a synchronization
    assert dict(zip(a.phases.phase.tolist(), a.phases.depth.tolist())) == {"outer": 0, "inner_a": 1, "inner_b": 1}
    assert not any(f.kind == "large_wait" and f.phase != "outer" for f in a.findings)
    assert_path_tiles_wall(a)
    assert set(a.critical_path.phase.tolist()) - {None} == {"outer"}


def test_work_list_is_judged_on_lane_totals():
    # 4 CTAs pull tiles from a queue: CTA 0 gets two heavy tiles, the others many light ones.
    plan = {0: [9000, 9000], 1: [1000] * 6, 2: [1000] * 5, 3: [1000] * 4}
    lanes = {}
    for cta, tiles in plan.items():
        t, steps = T0, []
        for w in tiles:
            steps += [(0, t, t + 200), (1, t + 200, t + 200 + w)]
            t += 200 + w + 64
        lanes[(cta, 0)] = slices(steps)
    a = build(lanes, ["fetch", "compute"], {b: b for b in range(4)})
    p = a.phases.row(a.phases.phase.tolist().index("compute"))
    assert (p["min_lane_instances"], p["max_lane_instances"]) == (2, 6)
    f = one(a, "load_imbalance", None)  # a kernel-wide finding: the lanes' totals over all phases
    assert f.figures["basis"] == "lane_totals" and f.figures["busiest_block"] == 0
    for g in a.findings:
        if g.kind == "start_skew":
            assert g.figures["cause"] == "unaligned" and g.severity == "info"
    assert not any(g.kind in ("stable_straggler", "moving_last_finisher") for g in a.findings)
    assert_path_tiles_wall(a)


def _work_list_of_groups(heavy: set, groups: int = 4):
    """6 CTAs of ``groups`` warp groups pull light tiles from a queue (4 to 6 a lane: a work list); the lanes
    in ``heavy`` ((block, group) pairs) also get one heavy tile."""
    lanes = {}
    for cta in range(6):
        for g in range(groups):
            tiles = [1000] * (4 + (cta + g) % 3) + ([9000] if (cta, g) in heavy else [])
            t, steps = T0, []
            for w in tiles:
                steps += [(0, t, t + 200), (1, t + 200, t + 200 + w)]
                t += 200 + w + 64
            lanes[(cta, g)] = slices(steps)
    return build(lanes, ["fetch", "compute"], {b: b for b in range(6)}, num_groups=groups)


@pytest.mark.parametrize("heavy, who", [
    ({(2, 0), (2, 1), (2, 2), (2, 3)}, "block 2 (all 4 traced warp groups)"),
    ({(2, 0), (2, 1), (2, 2)}, "block 2 (3 of 4 traced warp groups)"),
    ({(2, 3)}, "block 2 group 3"),
    ({(2, 1), (2, 3)}, "block 2 group 3"),  # half the block's lanes: the busiest one is named, not the block
])
def test_a_work_lists_busy_block_is_named_as_a_whole_a_lone_busy_lane_as_itself(heavy, who):
    """The lanes of one busy block are one cause: all or nearly all of them busy names the block (which of its
    lanes is the busiest is noise), its figures the mean of those lanes against their groups' means; one lane
    alone busy is named as the lane."""
    from ktrace.analysis.findings.headlines import Vocabulary, headline
    a = _work_list_of_groups(heavy)
    f = one(a, "load_imbalance", None)
    g = f.figures
    assert f.severity == "warning" and g["basis"] == "lane_totals" and g["busiest_block"] == 2
    text = headline(f, Vocabulary.of(a)).text
    assert text.startswith(who + " is busy "), text
    lt = a.figures.lane_totals
    busy = lt.busy_ns[lt.block == 2].astype(float)
    if "traced" in who:
        n = len(heavy)
        assert (g["block_lanes"], g["block_lanes_of"]) == (n, 4)
        # the named lanes' mean total: the heavy lanes are the block's n busiest
        assert g["block_lane_total_ns"] == pytest.approx(np.sort(busy)[-n:].mean())
        assert g["imbalance"] == pytest.approx(g["block_lane_total_ns"] / g["block_mean_lane_total_ns"])
    else:
        assert "block_lanes" not in g and g["max_lane_total_ns"] == busy.max()
        assert g["imbalance"] == pytest.approx(g["max_lane_total_ns"] / g["mean_lane_total_ns"])


def test_idle_lanes_are_reported():
    lanes = {}
    for l in range(6):
        steps = [(0, T0, T0 + 1000)]
        if l != 4:
            steps.append((1, T0 + 1100, T0 + 5100))
        lanes[(l, 0)] = slices(steps)
    a = build(lanes, ["load", "compute"], {b: b for b in range(6)})
    f = one(a, "idle_lanes", "compute")
    assert f.figures["idle_lanes"] == 1 and f.figures["idle"] == [[4, 0]] and "block 4" in f.message


def test_same_inputs_twice_give_the_same_warnings():
    def run(seed):
        rng = np.random.default_rng(seed)
        d = np.full((16, 24), 1500, np.int64)
        d[:, 1::3] = 6000
        d[5, 1::3] = 15000
        d += 32 * rng.integers(-1, 2, size=d.shape)  # a tick of timer jitter
        return build({(l, 0): slices(s) for l, s in barrier(d).items()}, ["load", "compute", "reduce"],
                     {b: b for b in range(16)})
    a, b = run(1), run(2)
    assert kinds(a, "warning") == kinds(b, "warning")
    assert ("stable_straggler", "compute") in kinds(a, "warning")
    # Nothing rests on a one-tick difference: every warning's impact is at least 1% of the wall.
    assert all(f.impact_ns >= 0.01 * a.kernel.wall_ns for f in a.findings if f.severity == "warning")


def test_findings_are_sorted_by_impact_and_carry_evidence():
    d = np.full((8, 24), 1000, np.int64)
    d[:, 1::3] = 4000
    d[5, 1::3] = 12000
    a = build({(l, 0): slices(s) for l, s in barrier(d).items()}, ["load", "compute", "reduce"],
              {b: b for b in range(8)})
    warn = [f for f in a.findings if f.severity == "warning"]
    assert [f.impact_ns for f in warn] == sorted((f.impact_ns for f in warn), reverse=True)
    for f in a.findings:
        assert f.evidence and f.impact_share == pytest.approx(f.impact_ns / a.kernel.wall_ns)
    # Raising the floor turns the warnings into info.
    assert not [f for f in find(a.figures, Thresholds(min_impact=0.99)) if f.severity == "warning"]


def test_ties_resolve_to_the_same_block_in_both_tables():
    d = np.full((8, 12), 1000, np.int64)
    d[:, 1::3] = 4000
    d[3, 1::3] = 8000
    d[1, 1 + 3 * 2] = 8000  # block 1 ties with block 3 in instance 2
    a = build({(l, 0): slices(s) for l, s in barrier(d).items()}, ["load", "compute", "reduce"],
              {b: b for b in range(8)})
    inst = a.instances.where(a.instances.phase == "compute")
    p = a.phases.row(a.phases.phase.tolist().index("compute"))
    assert p["top_last_block"] == 3 and inst.last_block.tolist() == [3, 3, 3, 3]
    assert inst.tied_last_lanes.tolist()[2] == 2


def test_duplicate_event_names_are_refused():
    from ktrace.core.errors import InputError
    from ktrace.decoding.encode import phase_buffer

    buf = phase_buffer([[T0, T0 + 2000]], [[T0 + 1000, T0 + 3000]], [0, 1])
    with pytest.raises(InputError, match="'load' appear more than once"):
        decode(buf, events="load,load")


@pytest.mark.parametrize("seed", range(20))
def test_last_finisher_runs_are_the_long_runs_of_equal_values(seed):
    from ktrace.analysis.findings.kinds.last_finisher import _runs

    rng = np.random.default_rng(seed)
    seq = np.repeat(rng.integers(0, 4, 30), rng.integers(1, 6, 30))
    min_len = int(rng.integers(1, 6))
    every, a = [], 0
    for i in range(1, len(seq) + 1):  # the definition, one value at a time
        if i == len(seq) or seq[i] != seq[a]:
            every.append((int(seq[a]), a, i - 1))
            a = i
    assert _runs(seq, min_len) == [r for r in every if r[2] - r[1] + 1 >= min_len]
    assert _runs(seq[:0], min_len) == []
