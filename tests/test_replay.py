"""The replay (ktrace/analysis/replay.py): the timeline as a graph of what each slice waited for.

Replaying a capture unchanged gives every measured begin back, on every committed capture; a change gives the
wall a kernel built that way has: on hand-built timelines exactly, and on the H200 captures of a fix within 10%
of the fix's measured wall (imbalance -> balanced: the same work, spread over the blocks).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import quick_first
from ktrace import decode
from ktrace.analysis.replay.replay import replay, timeline_of
from ktrace.analysis.replay.whatif import Change, predict, whatif
from ktrace.analysis.figures.numpy.stream import numpy_figures
from ktrace.decoding.encode import encode_tags, place_records

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
ALL = sorted(str(p.relative_to(SAMPLES)) for p in SAMPLES.rglob("*.bin*") if "proton" not in p.parts
             and p.name.endswith((".bin", ".bin.gz")))
T0 = 1_000_000


def timeline_of_path(path):
    d = decode(path)
    fig = numpy_figures(d)
    return timeline_of(d, fig), fig


def build(lanes: dict, events: list[str], sm_of_block: dict | None = None):
    """{(block, group): [(event, begin, end), ...]} -> (Timeline, Figures) of the decoded buffer."""
    rows = []
    for (b, g), steps in lanes.items():
        recs = [r for ev, t0, t1 in steps for r in ((0, ev, t0), (1, ev, t1))]
        rows += [(b, g, i, t, e, ts) for i, (t, e, ts) in enumerate(recs)]
    block, group, seq, rtype, event, ts = (np.array(c, np.int64) for c in zip(*rows))
    sm_of_block = sm_of_block or {b: b for b, _ in lanes}
    sm = np.array([sm_of_block[b] for b in block.tolist()], np.int64)
    groups = max(g for _, g in lanes) + 1
    tag = encode_tags("flashinfer", rtype, event, block, group, groups, sm=sm)
    cap = max(2 * len(s) for s in lanes.values())
    buf = place_records(max(b for b, _ in lanes) + 1, groups, block, group, seq, tag, ts, cap)
    d = decode(buf, events=",".join(events))
    fig = numpy_figures(d)
    return timeline_of(d, fig), fig


def barrier_loop(compute: np.ndarray, latency: np.ndarray, load: int = 2000):
    """Lanes x iterations of `load` then `compute`, a grid barrier after each phase: every lane begins the next
    phase ``latency[lane]`` after the instance's last end."""
    lanes, iters = compute.shape
    out = {(l, 0): [] for l in range(lanes)}
    t = T0
    for it in range(iters):
        ends = []
        for l in range(lanes):
            b = t + int(latency[l]) if it else T0 + 64 * l  # the first begins: each block's launch
            e = b + load + 320 * ((l + it) % 4)  # ends spread apart: the begins follow the common end
            out[(l, 0)].append((0, b, e))
            ends.append(e)
        t = max(ends)
        ends = []
        for l in range(lanes):
            b = t + int(latency[l])
            out[(l, 0)].append((1, b, b + int(compute[l, it])))
            ends.append(b + int(compute[l, it]))
        t = max(ends)
    return out


@pytest.mark.parametrize("name", quick_first(ALL, 4))
def test_replay_of_the_unchanged_timeline_gives_every_measured_begin_back(name):
    tl, fig = timeline_of_path(SAMPLES / name)
    r = replay(tl)
    assert r.wall_ns == fig.kernel.wall_ns
    np.testing.assert_array_equal(r.begin, tl.begin)
    np.testing.assert_array_equal(r.end, tl.end)


# The MLA decode capture first: two warp groups handing off (67 rounds), the first screen's sample.
ROUNDS = ["fi_mla_decode_run1.bin.gz"] + [n for n in ALL if n != "fi_mla_decode_run1.bin.gz"]


@pytest.mark.parametrize("name", quick_first(ROUNDS, 3))
def test_the_whole_ns_rounds_give_the_float_rounds_bit_for_bit(name):
    """The rounds every replay runs (on int64, lanes lifted once, a running maximum by doubling) end where the
    float64 rounds end, bit for bit, with the same bounds and rounds: unchanged, with changed durations,
    latencies and gaps, and cut short before they settle."""
    from ktrace.analysis.replay.replay import _rounds, _rounds_whole_ns, measured_starts

    tl, _ = timeline_of_path(SAMPLES / name)
    if not len(tl.members):
        pytest.skip("no release sets: one round, the lanes alone")
    rng = np.random.default_rng(7)
    dur, lat, gap, start = (tl.dur.astype(float), tl.latency.astype(float), tl.gap.astype(float),
                            measured_starts(tl))
    cut = np.rint(dur * np.where(rng.random(len(tl)) < 0.3, 0.6, 1.0))
    late = start.copy()
    late[np.isfinite(late)] += np.rint(rng.random(int(np.isfinite(late).sum())) * 5000)
    released = np.flatnonzero(tl.rel_set >= 0)
    cases = [(dur, start, lat, gap, len(tl) + 2), (cut, start, lat, gap, 10 ** 6),
             (dur, late, np.rint(lat * 0.5), np.rint(gap * 1.5), 10 ** 6), (np.rint(dur * 1.37), start, lat, gap, 3)]
    for d, s, la, g, limit in cases:
        fast = _rounds_whole_ns(tl, d, s, la, g, released, tl.rel_set[released], limit)
        assert fast is not None
        ref = _rounds(tl, d, s, la, g, released, tl.rel_set[released], limit)
        assert fast[2:] == ref[2:]  # rounds, settled
        np.testing.assert_array_equal(fast[0], ref[0])  # ends
        np.testing.assert_array_equal(fast[1], ref[1])  # the released slices' bounds


def test_the_timeline_of_slices_in_any_order_is_the_same():
    """The figures' top-level slices come in lane order (the timeline then skips its sort); the same slices
    shuffled give the same timeline, field by field."""
    from ktrace import analyze
    from ktrace.analysis.replay.replay import timeline
    from ktrace.analysis.findings.stakes import timeline_of_figures
    from ktrace.analysis.model.wait_tables import TopSlices

    fig = analyze(SAMPLES / "fi_mla_decode_run1.bin.gz").figures
    tl = timeline_of_figures(fig)
    top = fig.top
    perm = np.random.default_rng(3).permutation(len(top.lane))
    shuffled = TopSlices(*(getattr(top, f)[perm] for f in ("lane", "block", "group", "phase_index", "k", "begin",
                                                           "end")))
    again = timeline(shuffled, tl.names, fig)
    for f in ("lane", "block", "group", "phase", "k", "begin", "end", "first", "gap", "release", "rel_set", "latency",
              "start", "members", "set_starts", "later_wave"):
        np.testing.assert_array_equal(getattr(again, f), getattr(tl, f), err_msg=f)


def test_a_replay_of_values_beyond_whole_ns_takes_the_float_rounds():
    """A duration of 2**51 ns (beyond what the int64 rounds take: their values stay below 2**50) is replayed by
    the float rounds, and settles with that slice lasting what it was given."""
    from ktrace.analysis.replay.replay import _rounds_whole_ns, measured_starts

    tl, _ = timeline_of_path(SAMPLES / "imbalance_ktrace.bin")
    dur = tl.dur.astype(float)
    last = int(np.argmax(tl.end))
    dur[last] = 2.0 ** 51
    released = np.flatnonzero(tl.rel_set >= 0)
    assert _rounds_whole_ns(tl, dur, measured_starts(tl), tl.latency * 1.0, tl.gap * 1.0, released,
                            tl.rel_set[released], 10) is None
    r = replay(tl, dur)
    assert r.settled and r.end[last] == r.begin[last] + 2 ** 51


def test_balancing_a_straggler_gives_the_wall_of_the_balanced_kernel_exactly():
    lanes, iters = 8, 4
    latency = 320 + 64 * (np.arange(lanes) % 4)  # each lane's release after the barrier's last arrival
    compute = np.full((lanes, iters), 3000)
    compute[5] = 3000 + 7 * 1600  # lane 5: 4x the work; the total spread evenly gives everyone 4400
    tl, fig = build(barrier_loop(compute, latency), ["load", "compute"])
    assert set(fig.wait_causes.cause.tolist()) == {"grid"}  # the evidence sees the barriers the replay follows
    assert replay(tl).wall_ns == fig.kernel.wall_ns
    _, balanced = build(barrier_loop(np.full((lanes, iters), 4400), latency), ["load", "compute"])
    w = whatif(tl, Change(balance=("compute",)))
    assert w.predicted_wall_ns == balanced.kernel.wall_ns
    assert w.saving_ns == fig.kernel.wall_ns - balanced.kernel.wall_ns > 0
    # The straggler cut to the median (3000) saves more: the others keep their work.
    _, median = build(barrier_loop(np.full((lanes, iters), 3000), latency), ["load", "compute"])
    assert whatif(tl, Change(straggler_to_median=("compute",))).predicted_wall_ns == median.kernel.wall_ns
    # A barrier release of 0 ns: every lane begins at the last arrival.
    _, free = build(barrier_loop(compute, np.zeros(lanes, np.int64)), ["load", "compute"])
    assert whatif(tl, Change(barrier_cost_ns=0)).predicted_wall_ns == free.kernel.wall_ns


def test_a_late_starter_without_a_barrier_costs_its_delay_and_no_more():
    # 6 lanes of `a` then `b` on their own (no barrier); lane 4 starts 9 us late; lane 2's work is 1 us longer.
    lanes = {}
    for l in range(6):
        b0 = T0 + (9000 if l == 4 else 0)
        a = 5000 + (1000 if l == 2 else 0)
        lanes[(l, 0)] = [(0, b0, b0 + a), (1, b0 + a + 200, b0 + a + 200 + 4000)]
    tl, fig = build(lanes, ["a", "b"])
    w = whatif(tl, Change(no_late_start=True))
    # Without the delay lane 2 ends last: 1 us after the others; the saving is the delay less that.
    assert w.predicted_wall_ns == 5000 + 1000 + 200 + 4000
    assert w.saving_ns == 9000 - 1000
    assert w.ends_on["block"] == 2
    assert whatif(tl, Change(no_late_start=True, block=2)).saving_ns == 0  # lane 2 was not late


def test_a_hand_off_between_warp_groups_is_followed():
    # Group 0 produces tiles, group 1 consumes each one after its production ends (+64 ns): producer-bound.
    lanes = {}
    for blk in range(4):
        prod, cons = [], []
        t = T0
        for i in range(6):
            prod.append((0, t, t + 3000))
            c0 = t + 3000 + 64
            cons.append((1, c0, c0 + 1000))
            t += 3000 + 32 * (blk % 2)
        lanes[(blk, 0)], lanes[(blk, 1)] = prod, cons
    tl, fig = build(lanes, ["produce", "consume"])
    assert "group" in set(fig.wait_causes.cause.tolist())
    assert replay(tl).wall_ns == fig.kernel.wall_ns
    # Twice as fast a producer: the consumer follows it, the wall nearly halves (6 x 1500 + the last consume).
    w = whatif(tl, Change(speedup=(("produce", 2.0),)))
    assert w.predicted_wall_ns == pytest.approx(6 * 1500 + 32 * 5 + 64 + 1000, abs=32 * 6)
    # Speeding up the consumer gains nothing: it waits for the producer.
    assert whatif(tl, Change(speedup=(("consume", 2.0),))).saving_ns == pytest.approx(500, abs=1)


@pytest.mark.parametrize("before,after", [("imbalance_ktrace.bin", "balanced_ktrace.bin"),
                                          ("imbalance_flashinfer.bin", "balanced_flashinfer.bin"),
                                          ("ab/imbalance_before.bin", "ab/balanced_after.bin")])
def test_the_balanced_kernel_is_predicted_within_ten_percent_of_its_measured_wall(before, after):
    # balanced.py spreads block 17's extra compute evenly over all blocks: every lane gets the mean.
    tl, fig = timeline_of_path(SAMPLES / before)
    _, fig_after = timeline_of_path(SAMPLES / after)
    w = whatif(tl, Change(balance=("compute",)))
    measured = fig_after.kernel.wall_ns
    assert abs(w.predicted_wall_ns - measured) <= 0.10 * measured
    assert w.saving_ns > 0.5 * fig.kernel.wall_ns  # and the fix is most of the wall, as measured


def test_an_unknown_phase_is_refused_with_the_phases_named():
    tl, _ = timeline_of_path(SAMPLES / "late_start_ktrace.bin")
    with pytest.raises(ValueError, match="no top-level phase 'nope'; the phases: compute, store"):
        predict(tl, Change(balance=("nope",)))


@pytest.mark.parametrize("session,change", [("imbalance_vs_balanced", Change(balance=("compute",))),
                                            ("more_work_vs_more_work_plus2", Change(speedup=(("compute", 1 / 1.02),)))])
def test_the_predicted_change_matches_the_paired_unprofiled_measurement(session, change):
    # The A/B sessions timed both builds unprofiled, 200 pairs: the relative change of the wall they measured.
    import json

    ab = json.loads((SAMPLES / "ab" / f"{session}.ab.json").read_text())
    measured = ab["verdict"]["relative"]
    tl, _ = timeline_of_path(SAMPLES / "ab" / ab["before"]["capture"])
    w = whatif(tl, change)
    predicted = -w.saving_ns / w.replayed_wall_ns
    assert abs(predicted - measured) <= 0.10 * abs(measured), (predicted, measured)


def _ktrace(*args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "ktrace", *args], capture_output=True, text=True, timeout=120)


def test_whatif_command_prints_the_measured_and_predicted_wall_and_the_path_after():
    p = _ktrace("whatif", str(SAMPLES / "late_start_ktrace.bin"), "--no-late-start")
    assert p.returncode == 0, p.stderr
    text = " ".join(p.stdout.split())  # a line wraps at the width (100 columns into a pipe)
    assert text.split(" measured wall")[0].endswith(
        "what if no late start (late lanes begin at their group's median first begin)")
    lines = p.stdout.splitlines()
    assert ["measured", "wall", "53.8", "µs"] in [x.split() for x in lines]
    assert ["predicted", "wall", "34.2", "µs"] in [x.split() for x in lines]
    before, after = text.split("critical path before:")[1].split("critical path after:")
    assert "lead-in before the path's first slice 20 µs" in before  # block 17's 20 us spin before its probes
    assert "compute 34 µs (99%)" in after
    j = _ktrace("whatif", str(SAMPLES / "imbalance_ktrace.bin"), "--balance", "compute", "--json")
    import json

    d = json.loads(j.stdout)
    assert d["measured_wall_ns"] == d["replayed_wall_ns"] == 525728
    assert d["change"] == {"balance": ["compute"]}
    assert d["saving_ns"] == d["replayed_wall_ns"] - d["predicted_wall_ns"] > 0


@pytest.mark.parametrize("args,message", [
    ((), "whatif: give a change: --fix N (a warning of ktrace analyze), --balance PHASE"),
    (("--balance", "nope"), "no top-level phase 'nope'; the phases: compute, store"),
    (("--speedup", "compute=0"), "'compute=0': give PHASE=FACTOR with a factor above 0"),
    (("--barrier-cost", "-1"), "give a finite number of ns, 0 or more"),
    (("--block", "3"), "--block limits --straggler-to-median or --no-late-start"),
    (("--block-speedup", "3=0"), "'3=0': give BLOCK=FACTOR with a factor above 0"),
    (("--block-speedup", "x=2"), "'x=2': give BLOCK=FACTOR with a block's index"),
    (("--block-speedup", "100000=2"), "--block-speedup 100000=...: "),
    (("--wait-phases", "a,,b", "--speedup", "compute=2"), "give phase names separated by commas"),
    (("--wait-phases", "nope", "--speedup", "compute=2"), "--wait-phases 'nope': "),
])
def test_whatif_command_refuses_a_question_it_cannot_answer(args, message):
    p = _ktrace("whatif", str(SAMPLES / "late_start_ktrace.bin"), *args)
    assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize("name", ["late_start_ktrace", "late_start_flashinfer", "untimed_ktrace", "untimed_flashinfer",
                                  "repeats/untimed_run2_ktrace"])
def test_no_late_start_saves_what_the_clock_says_the_late_blocks_spin_costs(name):
    # Block 17 spins before its first probe; the kernel recorded every block's begin and end by %globaltimer,
    # apart from the profiler, and the spin's length: the wall without the spin is the clock's, less it.
    import json

    gt = json.loads((SAMPLES / f"{name}.json").read_text())["ground_truth"]
    begin, end = gt["block_begin_ns"], list(gt["block_end_ns"])
    late = gt["late_block"]
    spin = gt.get("late_spin_ns_by_clock", gt["late_spin_ns"])
    truth = max(end) - min(begin)
    end[late] -= spin
    truth -= max(end) - min(begin)
    tl, _ = timeline_of_path(SAMPLES / f"{name}.bin")
    w = whatif(tl, Change(no_late_start=True, block=late))
    assert abs(w.saving_ns - truth) <= 0.15 * truth, (w.saving_ns, truth)
    # Every lane begun at the median saves at most a few ticks more: the one late block is nearly all of it.
    assert 0 <= whatif(tl, Change(no_late_start=True)).saving_ns - w.saving_ns <= 4 * tl.tick_ns


def test_a_change_whose_replay_does_not_settle_gives_no_prediction(monkeypatch):
    """A replay that has not reached its fixed point in its rounds says so (``settled``), and whatif refuses
    to predict from it rather than print a wall it did not reach."""
    from ktrace.analysis.replay import whatif as whatif_module
    from ktrace.core.errors import InputError

    tl, _ = timeline_of_path(SAMPLES / "imbalance_ktrace.bin")
    measured = replay(tl)
    assert measured.settled and measured.rounds > 1  # the grid barriers take more than one round
    short = predict(tl, Change(balance=("compute",)), max_rounds=1)
    assert not short.settled
    assert predict(tl, Change(balance=("compute",))).settled
    monkeypatch.setattr(whatif_module, "change_rounds", lambda measured: 1)
    with pytest.raises(InputError, match="did not settle"):
        whatif(tl, Change(balance=("compute",)))


@pytest.mark.parametrize("name", ["imbalance_ktrace.bin", "fi_mla_decode_run1.bin.gz", "worklist_ktrace.bin",
                                  "waves_ktrace.bin", "pipeline_flashinfer.bin"])
def test_the_replay_a_level_at_a_time_gives_the_rounds_ends_bit_for_bit(name, monkeypatch):
    """replay_order.py computes each slice once, a level of runs at a time; the rounds over every slice until
    nothing changes must give the same begins, ends, bounds and wall, as measured and with changed durations,
    latencies, starts and gaps."""
    from ktrace.analysis.replay import replay as replay_module
    from ktrace.analysis.replay.order import order_of

    tl, _ = timeline_of_path(SAMPLES / name)
    assert order_of(tl) is not None  # a measured timeline has levels
    rng = np.random.default_rng(5)
    starts = replay_module.measured_starts(tl)
    cases = [(None, None, None, None)] + [
        (tl.dur * rng.uniform(0.2, 3.0, len(tl)), np.where(np.isfinite(starts), starts * rng.uniform(0, 1, len(tl)),
                                                           starts),
         tl.latency * rng.uniform(0, 3, len(tl)), tl.gap * rng.uniform(0, 2, len(tl))) for _ in range(3)]
    for dur, start, lat, gap in cases:
        in_order = replay(tl, dur, start, lat, gap, max_rounds=10 ** 6)
        with monkeypatch.context() as m:
            m.setattr(replay_module, "order_of", lambda tl: None)
            by_rounds = replay(tl, dur, start, lat, gap, max_rounds=10 ** 6)
        assert in_order.settled and by_rounds.settled
        assert np.array_equal(in_order.begin, by_rounds.begin) and np.array_equal(in_order.end, by_rounds.end)
        assert np.array_equal(in_order.bound, by_rounds.bound) and in_order.wall_ns == by_rounds.wall_ns
        assert by_rounds.rounds <= in_order.rounds  # the levels stand for at least the rounds they replace


def test_a_release_set_waiting_on_its_own_lane_has_no_order_and_the_rounds_decide():
    from dataclasses import replace as with_

    from ktrace.analysis.replay.order import order_of

    tl, _ = timeline_of_path(SAMPLES / "imbalance_ktrace.bin")
    # a released slice whose set gets, as its first member, the slice after it on its own lane: a cycle
    i = next(int(i) for i in np.flatnonzero(tl.rel_set >= 0) if i + 1 < len(tl) and tl.lane[i + 1] == tl.lane[i])
    members = tl.members.copy()
    members[tl.set_starts[tl.rel_set[i]]] = i + 1
    cyclic = with_(tl, members=members)
    assert order_of(cyclic) is None
    r = replay(cyclic, max_rounds=64)  # the rounds, as before: a slice waiting for its own lane's later end
    assert not r.settled and r.rounds == 64  # grows every round, never settles: no prediction


def _pipeline_with_timed_waits(blocks: int = 2, tiles: int = 3, k_tiles: int = 8, spin: int = 1000,
                               mma: int = 100, flight: int = 200):
    """A producer (group 0) and a consumer (group 1) per block, each tile one ``load`` and one ``mma`` slice with
    a timed wait per K tile nested in it: the producer works ``spin`` ns a K tile then waits 40 ns in
    ``load_wait`` (a stage is always free: its own time, as fast as its work); the consumer waits in ``mma_wait`` until the K tile's
    load lands (``flight`` ns after the producer's work ends), then works ``mma`` ns. Returns the records per lane
    and the wall of the same pipeline with the producer ``speed`` times as fast (a function)."""
    def run(speed: float):
        lanes = {}
        wall = 0
        for b in range(blocks):
            prod, cons = [], []
            t = T0 + 32 * b
            c = t + 64
            for tile in range(tiles):
                prod.append((0, 0, t))
                cons.append((0, 1, c))
                for j in range(k_tiles):
                    t += int(round(spin / speed))
                    ready = t + flight
                    check = int(round(40 / speed))  # the free stage's check: the producer's own time
                    prod += [(0, 2, t), (1, 2, t + check)]
                    t += check
                    if ready > c:
                        cons += [(0, 3, c), (1, 3, ready)]
                        c = ready
                    c += mma
                prod.append((1, 0, t))
                cons.append((1, 1, c))
                t += 32
                c += 32
            lanes[(b, 0)], lanes[(b, 1)] = prod, cons
            wall = max(wall, t - 32, c - 32)
        return lanes, wall - T0
    return run


def _build_records(lanes: dict, events: list[str]):
    """{(block, group): [(type 0 begin / 1 end, event, ns), ...]} -> (Timeline, Figures, Decoded)."""
    rows = [(b, g, i, t, e, ts) for (b, g), recs in lanes.items() for i, (t, e, ts) in enumerate(recs)]
    block, group, seq, rtype, event, ts = (np.array(c, np.int64) for c in zip(*rows))
    groups = max(g for _, g in lanes) + 1
    tag = encode_tags("flashinfer", rtype, event, block, group, groups, sm=block.copy())
    buf = place_records(max(b for b, _ in lanes) + 1, groups, block, group, seq, tag, ts,
                        max(len(s) for s in lanes.values()) + 2)
    d = decode(buf, events=",".join(events))
    fig = numpy_figures(d)
    return timeline_of(d, fig), fig, d


def test_a_timed_wait_is_a_release_by_the_lane_it_waits_for_not_busy_time():
    """A consumer whose mma slices are mostly mma_wait for a slow producer: the waits are releases by the
    producer's work, so a faster producer shortens them (the wall of the same pipeline built with the faster
    producer, to the ns), and a faster consumer gains only its own work."""
    run = _pipeline_with_timed_waits()
    lanes, wall = run(1.0)
    tl, fig, _ = _build_records(lanes, ["load", "mma", "load_wait", "mma_wait"])
    assert not tl.waits_unread and not tl.head.all()  # the waits cut the slices
    assert replay(tl).wall_ns == fig.kernel.wall_ns
    for speed in (2.0, 4.0):
        w = whatif(tl, Change(speedup=(("load", speed),)))
        assert abs(w.predicted_wall_ns - run(speed)[1]) <= 64, (speed, w.predicted_wall_ns, run(speed)[1])
    # The consumer's own work is 100 ns a K tile of 1040: twice as fast, it saves at most its last pieces.
    assert whatif(tl, Change(speedup=(("mma", 2.0),))).saving_ns <= 2 * 100


def test_a_pipelines_stake_is_the_replay_of_its_change_on_timed_waits():
    """The pipeline warning read from the timed waits: its stake is the replayed saving of its change (the
    producer as fast as the consumer's own work), and ``whatif --fix 1`` replays the same (the stake is at most
    that: here its claim, the producer's own work less the consumer's)."""
    import ktrace

    lanes, wall = _pipeline_with_timed_waits(blocks=4)(1.0)
    _, fig, d = _build_records(lanes, ["load", "mma", "load_wait", "mma_wait"])
    a = ktrace.analyze(d)
    warn = [f for f in a.findings if f.severity == "warning"]
    assert warn and warn[0].kind == "pipeline" and warn[0].figures["bounding_group"] == 0, a.findings
    w = ktrace.whatif(d, fix=1)
    told = w.fix["warnings"][0]
    assert told["replayed_saving_ns"] == w.saving_ns > 0.5 * wall
    assert warn[0].impact_ns <= w.saving_ns  # its claim on the critical path, the producer's excess, is less
    assert told["cut"] is None if warn[0].impact_ns >= w.saving_ns - 1 else told["cut"] == "claims"


def test_block_speedup_is_typed_by_hand_as_the_gpc_kinds_change():
    """``--block-speedup BLOCK=FACTOR`` (repeatable): the blocks' every slice FACTOR times as fast, the change a
    slow GPC's finding replays; CTA 17 of the IKET straggler 3x as fast saves what balancing it saves."""
    import json

    src = str(SAMPLES / "iket" / "straggler_run1.trace.json.gz")
    p = _ktrace("whatif", src, "--block-speedup", "17=3", "--block-speedup", "5=1.5", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["change"] == {"block_speedup": [[17, 3.0], [5, 1.5]]}
    balanced = json.loads(_ktrace("whatif", src, "--fix", "1", "--json").stdout)
    assert abs(d["saving_ns"] - balanced["saving_ns"]) <= 0.05 * balanced["saving_ns"]
    said = _ktrace("whatif", src, "--block-speedup", "17=3", "--block-speedup", "5=1.5").stdout
    assert "block 17 3x as fast; block 5 1.5x as fast" in " ".join(said.split())


def test_wait_phases_names_the_timed_waits_of_a_capture_that_names_them_otherwise():
    """The same pipeline with its waits named ``stage_free`` and ``data_ready`` (not ``*_wait``): read as busy
    time, a faster producer saves nothing; with ``--wait-phases`` they are releases, and the prediction is the
    faster producer's wall. A name the capture lacks, or a phase that is not nested, is refused."""
    import ktrace
    from ktrace import InputError

    run = _pipeline_with_timed_waits()
    lanes, _ = run(1.0)
    _, _, d = _build_records(lanes, ["load", "mma", "stage_free", "data_ready"])
    change = Change(speedup=(("load", 2.0),))
    assert ktrace.whatif(d, change).saving_ns < 500  # the consumer's slices, waits and all, as measured
    w = ktrace.whatif(d, change, wait_phases=("stage_free", "data_ready"))
    assert abs(w.predicted_wall_ns - run(2.0)[1]) <= 64, (w.predicted_wall_ns, run(2.0)[1])
    with pytest.raises(InputError, match="no phase of that name"):
        ktrace.whatif(d, change, wait_phases=("nope",))
    with pytest.raises(InputError, match="no slice of it lies inside a lane's work"):
        ktrace.whatif(d, change, wait_phases=("load",))
    with pytest.raises(InputError, match="--wait-phases is for a change of your own"):
        ktrace.whatif(d, fix=1, wait_phases=("stage_free",))
