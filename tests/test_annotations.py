"""The analysis drawn in the trace (``ktrace analyze --trace``, ``ktrace view``), read back packet by packet with
Perfetto's own protobuf classes: the findings track first with one slice per finding, the busy-SM counter equal
to the figures, one flow per hop of the critical path, the named slices marked; converting stays as it was."""

import json

import numpy as np
import pytest

import ktrace
from ktrace.export.annotations import ANNOTATION_SEQ, FINDINGS_TRACK, PATH_TRACK
from ktrace.export.tracks import LAUNCH_UUID
from ktrace.export.writer import trace_bytes
from ktrace.report.trace_annotations import finding_label, finding_span

from conftest import SAMPLE_NAMES, run_ktrace, sample
from test_export import events_of, parse, tracks_of

_QUICK = {"waves_ktrace", "imbalance_ktrace"}
EVERY = [n if n in _QUICK else pytest.param(n, marks=pytest.mark.slow) for n in SAMPLE_NAMES]


def launch_children(packets) -> list:
    """The launch track's children in the order the UI draws them (sibling_order_rank, then uuid)."""
    kids = [t for t in tracks_of(packets).values() if t.parent_uuid == LAUNCH_UUID]
    return sorted(kids, key=lambda t: (t.sibling_order_rank, t.uuid))


def slices_on(packets, uuid) -> list:
    """(name, begin ts, end ts, {arg: value}, flow_ids, terminating_flow_ids) of the slices on one track."""
    out, open_ = [], []
    for p in events_of(packets):
        te = p.track_event
        if te.track_uuid != uuid:
            continue
        if te.type == te.TYPE_SLICE_BEGIN:
            args = {a.name: getattr(a, a.WhichOneof("value")) for a in te.debug_annotations}
            open_.append([te.name, p.timestamp, None, args, list(te.flow_ids), list(te.terminating_flow_ids)])
        elif te.type == te.TYPE_SLICE_END:
            s = open_.pop()
            s[2] = p.timestamp
            out.append(tuple(s))
    return out


def counter_on(packets, uuid) -> tuple[list, list]:
    ev = [p for p in events_of(packets) if p.track_event.track_uuid == uuid]
    return [p.timestamp for p in ev], [p.track_event.counter_value for p in ev]


def flows(packets) -> tuple[list, list]:
    out, inn = [], []
    for p in events_of(packets):
        out += list(p.track_event.flow_ids)
        inn += list(p.track_event.terminating_flow_ids)
    return out, inn


def _check_span(f, a, b, e) -> None:
    """The span drawn for a finding, from the tables themselves (docs/trace-format.md): a phase's finding lies
    within that phase's instances; a wait's runs from the instance with the longest wait to that wait's end."""
    inst = a.figures.instances
    if f.phase is None or f.kind in ("tail", "critical_path"):
        return
    mine = inst.phase == f.phase
    assert inst.begin_ns[mine].min() <= b and (f.kind == "large_wait" or e <= inst.end_ns[mine].max()), f.kind
    if f.kind == "large_wait" and f.figures.get("next_phase") is not None:
        w = a.figures.waits
        (i,) = np.flatnonzero((w.phase == f.phase) & (w.next_phase == f.figures["next_phase"]))
        (j,) = np.flatnonzero(mine & (inst.k == w.max_k[i]))
        assert (b, e) == (inst.begin_ns[j], min(inst.end_ns[j] + f.figures["max_ns"], a.kernel.end_ns))


def check_annotated(packets, a, on_lanes: bool) -> None:
    """What a user sees in the annotated trace, against the Analysis drawn in it."""
    kids = launch_children(packets)
    n = len(a.findings)
    # The findings track first: one track per finding (the UI merges them into one row), one slice each, in order.
    assert [t.name for t in kids[:n]] == [FINDINGS_TRACK] * n
    assert FINDINGS_TRACK not in [t.name for t in kids[n:]]
    for t, f in zip(kids[:n], a.findings):
        (name, b, e, args, _, _), = slices_on(packets, t.uuid)
        assert name == finding_label(f) and (b, e) == finding_span(f, a.figures)
        assert a.kernel.begin_ns <= b <= e <= a.kernel.end_ns
        _check_span(f, a, b, e)
        assert args["severity"] == f.severity and args["evidence"] == f.evidence
        assert args["impact_ns"] == pytest.approx(f.impact_ns) and args["impact_share"] == pytest.approx(
            f.impact_share or 0.0)
    # The critical path track: its parts tile the wall, in time order.
    cp = a.critical_path
    path = [t for t in kids if t.name == PATH_TRACK]
    slice_parts = int((cp.kind == "slice").sum())
    if len(cp):
        parts = slices_on(packets, path[0].uuid)
        assert [(b, e) for _, b, e, *_ in parts] == list(zip(cp.begin_ns.tolist(), cp.end_ns.tolist()))
        assert parts[0][1] == a.kernel.begin_ns and parts[-1][2] == a.kernel.end_ns
    # Busy SMs: the counter's series is the figure's, point for point.
    busy = [t for t in kids if t.name == "busy SMs"]
    if len(a.figures.busy_sms):
        assert busy[0].HasField("counter")
        ts, v = counter_on(packets, busy[0].uuid)
        assert ts == a.figures.busy_sms.ts.tolist() and v == a.figures.busy_sms.busy_sms.tolist()
    running = [t for t in kids if t.name.startswith("lanes running: ")]
    assert [t.name[len("lanes running: "):] for t in running] == sorted(
        set(a.phases.phase.tolist()), key=a.phases.phase.tolist().index)
    # One flow per hop of the path: each id leaves one slice and ends at the next slice of the path.
    out, inn = flows(packets)
    assert len(out) == len(set(out)) == max(slice_parts - 1, 0) and sorted(out) == sorted(inn)
    on_lane_tracks = [p for p in events_of(packets) if p.track_event.flow_ids and
                      p.trusted_packet_sequence_id != ANNOTATION_SEQ]
    assert len(on_lane_tracks) == (len(out) if on_lanes else 0)


@pytest.mark.slow
@pytest.mark.parametrize("name", EVERY)
def test_annotated_trace_of_every_sample(name, tmp_path):
    done = ktrace.annotate(sample(name), tmp_path / "a.perfetto-trace")
    packets = parse(done.path.read_bytes())
    check_annotated(packets, done.analysis, on_lanes=True)
    # The lane slices the findings name carry an arg ktrace.role; apart from that and the flows, the trace
    # is packet for packet the one ktrace convert writes.
    plain = parse(trace_bytes(ktrace.decode(sample(name))))
    mine = [p for p in packets if p.trusted_packet_sequence_id != ANNOTATION_SEQ]
    roles = []
    for p in mine:
        if not p.HasField("track_event"):
            continue
        te = p.track_event
        keep = [a for a in te.debug_annotations if a.name != "ktrace"]
        roles += [e.string_value for a in te.debug_annotations if a.name == "ktrace" for e in a.dict_entries]
        if len(keep) != len(te.debug_annotations):
            del te.debug_annotations[:]
            te.debug_annotations.extend(keep)
        del te.flow_ids[:]
        del te.terminating_flow_ids[:]
    assert mine == plain
    kinds = {f.kind for f in done.analysis.findings}
    if "stable_straggler" in kinds or "straggler_change" in kinds:
        assert any("straggler" in r for r in roles)
    if "tail" in kinds:
        assert any("ends_kernel" in r for r in roles)


@pytest.mark.slow
def test_from_a_trace_the_flows_join_the_critical_path_track(tmp_path):
    trace = ktrace.convert(sample("waves_ktrace"), tmp_path / "w.perfetto-trace").path
    done = ktrace.annotate(trace, tmp_path / "a.perfetto-trace")
    body = done.path.read_bytes()
    assert body.startswith(trace.read_bytes())  # the trace as it was, the annotations appended
    check_annotated(parse(body), done.analysis, on_lanes=False)
    # An annotated trace is not annotated twice.
    again = ktrace.annotate(done.path, tmp_path / "b.perfetto-trace")
    assert not again.written and again.path == done.path and not (tmp_path / "b.perfetto-trace").exists()


def test_a_decoded_buffer_is_annotated_from_numpy(tmp_path):
    d = ktrace.decode(sample("imbalance_ktrace"))
    done = ktrace.annotate(d, tmp_path / "a.perfetto-trace")
    assert done.analysis.engine == "numpy"
    check_annotated(parse(done.path.read_bytes()), done.analysis, on_lanes=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["waves_ktrace", "imbalance_ktrace"])
def test_the_annotated_trace_analyzes_as_the_buffer_does(name, tmp_path):
    out = tmp_path / "a.perfetto-trace"
    rc, text, err = run_ktrace("analyze", sample(name), "--json", "--trace", out)
    assert rc == 0 and f"trace: {out}" in err
    js = json.loads(text)
    rc, again, _ = run_ktrace("analyze", out, "--json")
    assert rc == 0
    drop = lambda d: {k: v for k, v in d.items() if k != "source"}  # noqa: E731
    assert drop(json.loads(again)) == drop(js)  # the annotations change no figure and no finding
    packets = parse(out.read_bytes())
    kids = launch_children(packets)
    names = [slices_on(packets, t.uuid)[0][0] for t in kids[:len(js["findings"])]]
    assert [t.name for t in kids[:len(js["findings"])]] == ["findings"] * len(js["findings"])
    assert len(names) == len(js["findings"]) and all(
        n.split(" · ")[0].lstrip("⚠ ") == f["kind"].replace("_", " ") for n, f in zip(names, js["findings"]))


def test_lanes_running_counts_slices_over_time():
    from ktrace.report.trace_annotations import lanes_running

    c, = lanes_running(["a", "a", "a"], [0, 5, 10], [10, 10, 20])
    assert c.name == "lanes running: a"
    assert c.ts.tolist() == [0, 5, 10, 20] and c.values.tolist() == [1, 2, 1, 0]
    assert np.all(np.diff(c.ts) > 0)


def test_counter_packets_are_what_protobuf_serializes():
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    from ktrace.export.annotations import CounterSeries, _counter_values

    rng = np.random.default_rng(3)
    ts = np.cumsum(rng.integers(1, 1 << 40, 500)) >> rng.integers(0, 3, 500).cumsum().clip(0, 20)
    vals = rng.integers(0, 1 << 20, 500) >> rng.integers(0, 20, 500)
    t = pb.Trace()
    for x, v in zip(ts.tolist(), vals.tolist()):
        p = t.packet.add()
        p.timestamp = x
        p.trusted_packet_sequence_id = ANNOTATION_SEQ
        p.track_event.type = pb.TrackEvent.TYPE_COUNTER
        p.track_event.track_uuid = (1 << 41) + (1 << 21) + 3
        p.track_event.counter_value = v
    got = _counter_values((1 << 41) + (1 << 21) + 3, CounterSeries("c", ts, vals))
    assert got == t.SerializeToString()


def test_trace_takes_one_capture(tmp_path, capsys):
    from ktrace.cli import main

    out = tmp_path / "a.perfetto-trace"
    assert main(["analyze", str(sample("multigpu_gpu0")), str(sample("multigpu_gpu1")), "--trace", str(out)]) == 2
    assert "--trace takes one buffer" in capsys.readouterr().err and not out.exists()
