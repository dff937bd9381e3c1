"""Several GPUs' buffers: one trace with a process per GPU, aligned by the measured clock offsets, and the
figures across GPUs; on hand-built buffers whose GPU clocks disagree by 16.4 µs (as two H200s of one host do)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from ktrace import decode
from ktrace.analysis.figures.across_gpus import cross_gpu
from ktrace.decoding.align import align, open_decoders
from ktrace.core.errors import InputError
from ktrace.export.merge import merge_traces
from ktrace.export.tracks import GPU_UUID_STRIDE, PROCESS_UUID
from ktrace.export.writer import trace_bytes
from ktrace.decoding.encode import phase_buffer

from conftest import SAMPLES, run_ktrace

T0 = 1_795_976_275_621_000_000  # Unix ns, as %globaltimer reads
OFFSET = 16_400  # GPU 1's clock runs this far ahead of GPU 0's
SPREAD = 800
BLOCKS, STEPS = 4, 6  # load, compute, load, compute, ... : 3 instances of each phase
EVENTS = ["load", "compute"]
SYNC = {"id": "0000:00:06.0@1795976270000000000", "reference_pci_bus_id": "0000:00:06.0",
        "reference_device_index": 0}


def true_times(gpu: int):
    """(begin, end) on the common (GPU 0) axis, (blocks, steps): GPU 1 is slower in compute k=0 and 2 and
    starts later; block (gpu + 1) is its straggler."""
    rng = np.random.default_rng(10 + gpu)
    dur = rng.integers(400, 900, (BLOCKS, STEPS))
    dur[gpu + 1, 1::2] += 3000  # compute straggler
    if gpu == 1:
        dur[:, 1] += 2000
        dur[:, 5] += 2000
    begin = np.zeros((BLOCKS, STEPS), np.int64)
    end = np.zeros((BLOCKS, STEPS), np.int64)
    t = np.full(BLOCKS, T0 + 2000 + 700 * gpu) + rng.integers(0, 300, BLOCKS)
    for j in range(STEPS):  # a grid barrier after each step: the next starts after the slowest lane
        begin[:, j] = t
        end[:, j] = t + dur[:, j]
        t = end[:, j].max() + 200 + rng.integers(0, 300, BLOCKS)
    return begin, end


def write_gpu(tmp_path, gpu: int, *, offset=None, anchored=True, host=True, sync=True, producer="ktrace",
              name=None, sync_over=None):
    """One GPU's buffer and sidecar: its records are the true times plus its clock offset."""
    offset = OFFSET * gpu if offset is None else offset
    b, e = true_times(gpu)
    words = phase_buffer(b + offset, e + offset, [0, 1] * (STEPS // 2), sm=np.arange(BLOCKS) * 2, spare=2)
    cap = 2 * STEPS + 2
    if producer == "ktrace":
        trailer = np.zeros(BLOCKS + 1, np.uint64)
        trailer[-1] = T0 + offset if anchored else 0
        words = np.concatenate([words, trailer])
    name = name or f"run_gpu{gpu}"
    path = tmp_path / f"{name}.bin"
    words.astype("<u8").tofile(path)
    timer = {"tick_ns": 32}
    if anchored and producer == "ktrace":
        timer["anchor_ns"] = T0 + offset
    if sync:
        timer.update(offset_to_reference_ns=offset, offset_spread_ns=SPREAD, clock_sync={**SYNC, **(sync_over or {})})
    meta = {"schema": "ktrace.launch/1", "kernel": "persistent_phases", "producer": producer,
            "num_blocks": BLOCKS, "num_groups": 1, "event_names": EVENTS, "timer": timer,
            "buffer": {"records_per_lane_capacity": cap, "trailer": producer == "ktrace"},
            "device": {"index": gpu, "name": "NVIDIA H200", "pci_bus_id": f"0000:00:0{6 + gpu}.0",
                       "multiprocessors": 132}}
    if host:
        meta["host_launch_unix_ns"] = T0 + offset - 40_000  # host clock: within a ms of the GPU's
    (tmp_path / f"{name}.json").write_text(json.dumps(meta))
    return path


@pytest.fixture
def pair(tmp_path):
    return [write_gpu(tmp_path, 0), write_gpu(tmp_path, 1)]


def parse(path):
    t = pb.Trace()
    t.ParseFromString(path.read_bytes())
    return list(t.packet)


# -- the merged trace --------------------------------------------------------------------------------------

def test_merged_trace_has_a_process_per_gpu_holding_its_own_tracks(pair, tmp_path):
    res = merge_traces(pair, tmp_path / "m.perfetto-trace")
    packets = parse(res.path)
    tracks = {p.track_descriptor.uuid: p for p in packets if p.HasField("track_descriptor")}
    procs = {u: p.track_descriptor.process for u, p in tracks.items() if p.track_descriptor.HasField("process")}
    assert {(x.pid, x.process_name) for x in procs.values()} == {(1, "GPU 0 (NVIDIA H200)"), (2, "GPU 1 (NVIDIA H200)")}
    assert set(procs) == {PROCESS_UUID, PROCESS_UUID + GPU_UUID_STRIDE}
    # Each GPU on its own sequence, each sequence declaring its own interned names first.
    assert {p.trusted_packet_sequence_id for p in packets} == {1, 2}
    for seq in (1, 2):
        mine = [p for p in packets if p.trusted_packet_sequence_id == seq]
        assert mine[0].sequence_flags == pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        assert {e.name for p in mine for e in p.interned_data.event_names} == set(EVENTS)
    # Every track descends from the process of its sequence's GPU; no uuid is declared twice.
    assert len(tracks) == sum(p.HasField("track_descriptor") for p in packets)
    for u, p in tracks.items():
        top = u
        while tracks[top].track_descriptor.HasField("parent_uuid"):
            top = tracks[top].track_descriptor.parent_uuid
        assert top == PROCESS_UUID + (p.trusted_packet_sequence_id - 1) * GPU_UUID_STRIDE
    for p in packets:
        if p.HasField("track_event"):
            owner = tracks[p.track_event.track_uuid]
            assert owner.trusted_packet_sequence_id == p.trusted_packet_sequence_id


def test_merged_times_are_on_the_reference_gpus_axis(pair, tmp_path):
    res = merge_traces(pair, tmp_path / "m.perfetto-trace")
    assert [c.shift_ns for c in res.alignment.clocks] == [0, -OFFSET]
    packets = parse(res.path)
    names = {}
    for p in packets:
        names.update({(p.trusted_packet_sequence_id, e.iid): e.name for e in p.interned_data.event_names})
    # A slice's block is its lane track's (the description), its k its rank among its lane's slices of its phase.
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in packets if p.HasField("track_descriptor")}
    got, seen = set(), {}
    for p in packets:
        te = p.track_event
        if p.HasField("track_event") and te.type == pb.TrackEvent.TYPE_SLICE_BEGIN and te.name_iid:
            assert not te.debug_annotations
            block = int(tracks[te.track_uuid].description.split(" · ")[0].split()[1])
            phase = names[(p.trusted_packet_sequence_id, te.name_iid)]
            key = (te.track_uuid, phase)
            k = seen[key] = seen.get(key, -1) + 1
            got.add((p.trusted_packet_sequence_id - 1, block, phase, k, p.timestamp))
    want = set()
    for g in (0, 1):
        b, _ = true_times(g)
        for blk in range(BLOCKS):
            for j in range(STEPS):
                want.add((g, blk, EVENTS[j % 2], j // 2, int(b[blk, j])))
    assert got == want


def test_the_first_gpus_events_are_its_single_trace_events(pair, tmp_path):
    res = merge_traces(pair, tmp_path / "m.perfetto-trace")
    merged = [p.SerializeToString() for p in parse(res.path)
              if p.trusted_packet_sequence_id == 1 and p.HasField("track_event") and not p.track_event.name]
    t = pb.Trace()
    t.ParseFromString(trace_bytes(decode(pair[0])))
    single = [p.SerializeToString() for p in t.packet if p.HasField("track_event") and not p.track_event.name]
    assert merged == single  # same uuids, names, times: only the process above and the launch args differ


def test_launch_slice_and_process_carry_the_alignment(pair, tmp_path):
    packets = parse(merge_traces(pair, tmp_path / "m.perfetto-trace").path)
    launches = [p for p in packets if p.HasField("track_event") and p.track_event.name == "persistent_phases"]
    args = [{a.name: (a.string_value or a.int_value) for a in p.track_event.debug_annotations} for p in launches]
    assert [a["clock_shift_ns"] for a in args] == [0, -OFFSET]
    assert [a.get("clock_offset_to_reference_ns", 0) for a in args] == [0, OFFSET]
    assert [a["gpu"] for a in args] == ["GPU 0 (NVIDIA H200)", "GPU 1 (NVIDIA H200)"]
    desc = [p.track_descriptor.description for p in packets if p.track_descriptor.HasField("process")]
    assert "+16,400 ns" in desc[1] and "shifted by -16,400 ns" in desc[1]


# -- across GPUs ------------------------------------------------------------------------------------------

def expected_cross():
    """Per (phase, k): each GPU's first begin and last end from the true times, by plain loops."""
    out = {}
    for g in (0, 1):
        b, e = true_times(g)
        for j in range(STEPS):
            key = (EVENTS[j % 2], j // 2)
            last_block = min(blk for blk in range(BLOCKS) if e[blk, j] == e[:, j].max())
            out.setdefault(key, {})[g] = (int(b[:, j].min()), int(e[:, j].max()), last_block)
    return out


def test_cross_gpu_figures_are_exact(pair):
    x = cross_gpu(pair)
    want = expected_cross()
    assert len(x.instances) == len(want) == 6
    for r in x.instances.rows():
        per = want[(r["phase"], r["k"])]
        begins = [per[g][0] for g in (0, 1)]
        ends = [per[g][1] for g in (0, 1)]
        last = int(np.argmax(ends))
        assert r["gpus"] == 2
        assert r["begin_ns"] == min(begins) and r["end_ns"] == max(ends)
        assert r["start_skew_ns"] == max(begins) - min(begins)
        assert r["end_skew_ns"] == max(ends) - min(ends) == r["last_lead_ns"]
        assert r["last_gpu"] == last and r["first_gpu"] == int(np.argmin(begins)) and r["tied_last_gpus"] == 1
    for r in x.per_gpu.rows():
        b, e, blk = want[(r["phase"], r["k"])][r["gpu"]]
        assert (r["begin_ns"], r["end_ns"], r["last_block"], r["lanes"]) == (b, e, blk, BLOCKS)
    assert x.instances.phase.tolist()[:2] == ["load", "load"]  # phases in order of their first begin
    compute = x.phases.where(x.phases.phase == "compute").row(0)
    lasts = [int(np.argmax([want[("compute", k)][g][1] for g in (0, 1)])) for k in range(3)]
    assert compute["top_last_count"] == max(lasts.count(0), lasts.count(1))
    assert compute["distinct_last_gpus"] == len(set(lasts))
    skews = [abs(want[("compute", k)][1][1] - want[("compute", k)][0][1]) for k in range(3)]
    assert compute["max_end_skew_ns"] == max(skews) and compute["mean_end_skew_ns"] == pytest.approx(np.mean(skews))


def test_without_the_offset_the_skews_would_be_off_by_it(tmp_path):
    """The same buffers with no measured offset: raw clocks, GPU 1 late by exactly the offset, and a note."""
    paths = [write_gpu(tmp_path, g, sync=False) for g in (0, 1)]
    x = cross_gpu(paths)
    assert "no measured clock offsets" in x.alignment.notes[0]
    ref = cross_gpu([write_gpu(tmp_path, g, name=f"m{g}") for g in (0, 1)])
    g1 = x.per_gpu.where(x.per_gpu.gpu == 1)
    assert np.array_equal(g1.end_ns - OFFSET, ref.per_gpu.where(ref.per_gpu.gpu == 1).end_ns)


def test_parts_are_reduced_like_the_whole(pair):
    whole = cross_gpu([decode(p) for p in pair], alignment=align(open_decoders(pair)))
    small = open_decoders(pair)
    for d in small:
        d.PART_RECORDS = 8  # one block per part
    assert len(small[0].part_ranges()) == BLOCKS
    parts = cross_gpu(small)
    assert not whole.instances.differences(parts.instances) and not whole.per_gpu.differences(parts.per_gpu)


# -- alignment errors and modes -----------------------------------------------------------------------------

@pytest.mark.slow
def test_a_buffer_without_time_anchor_cannot_be_aligned(tmp_path):
    a = write_gpu(tmp_path, 0)
    b = write_gpu(tmp_path, 1, anchored=False, host=False, sync=False, producer="flashinfer")
    with pytest.raises(InputError, match="no absolute time anchor") as e:
        merge_traces([a, b], tmp_path / "m.perfetto-trace")
    assert "run_gpu1.bin" in str(e.value) and "--align start" in str(e.value)
    rc, _, err = run_ktrace("merge", a, b, "-o", tmp_path / "m.perfetto-trace")
    assert rc == 2 and "no absolute time anchor" in err and not (tmp_path / "m.perfetto-trace").exists()


@pytest.mark.slow
def test_align_start_lines_the_first_records_up(tmp_path):
    a = write_gpu(tmp_path, 0, sync=False)
    b = write_gpu(tmp_path, 1, anchored=False, host=False, sync=False, producer="flashinfer")
    rc, out, err = run_ktrace("merge", a, b, "-o", tmp_path / "m.perfetto-trace", "--align", "start")
    assert rc == 0, err
    assert "aligned by each buffer's first record" in out and "not known" in err
    x = cross_gpu([a, b], align_mode="start")
    first = x.instances.row(0)
    assert first["phase"] == "load" and first["k"] == 0 and first["start_skew_ns"] == 0


def test_buffers_of_different_runs_are_refused(tmp_path):
    a = write_gpu(tmp_path, 0)
    b = write_gpu(tmp_path, 1, sync=False)
    with pytest.raises(InputError, match="different runs"):
        align(open_decoders([a, b]))
    c = write_gpu(tmp_path, 1, name="other", sync_over={"reference_pci_bus_id": "0000:00:09.0"})
    with pytest.raises(InputError, match="different reference GPUs"):
        align(open_decoders([a, c]))
    d = write_gpu(tmp_path, 1, name="later", sync_over={"id": "0000:00:06.0@1"})
    assert "different measurements" in align(open_decoders([a, d])).notes[0]


def test_same_gpu_twice_gets_distinct_labels(tmp_path):
    a = write_gpu(tmp_path, 0)
    b = write_gpu(tmp_path, 0, name="again")
    labels = [c.label for c in align(open_decoders([a, b])).clocks]
    assert labels == ["GPU 0 (NVIDIA H200) run_gpu0.bin", "GPU 0 (NVIDIA H200) again.bin"]


# -- the command line ---------------------------------------------------------------------------------------

@pytest.mark.slow
def test_cli_merge_writes_the_trace_and_reports(pair, tmp_path):
    out = tmp_path / "both.perfetto-trace"
    rc, stdout, err = run_ktrace("merge", *pair, "-o", out, "--report")
    assert rc == 0, err
    assert out.exists() and f"{out}:" in stdout
    assert "GPU 1 (NVIDIA H200): " in stdout and "+16,400 ns" in stdout and "shifted -16,400 ns" in stdout
    assert "phases across GPUs" in stdout and "phase instances" in stdout
    rc, _, _ = run_ktrace("merge", *pair)
    assert rc == 0 and (tmp_path / "run_gpu0_merged.perfetto-trace").exists()


@pytest.mark.slow
def test_cli_merge_bad_input(pair, tmp_path):
    rc, _, err = run_ktrace("merge", *pair, "--sidecar", tmp_path / "run_gpu0.json")
    assert rc == 2 and "with several buffers" in err
    trace = tmp_path / "x.perfetto-trace"
    trace.write_bytes(b"")
    rc, _, err = run_ktrace("merge", pair[0], trace)
    assert rc == 2 and "not traces" in err
    rc, _, err = run_ktrace("merge", pair[0], tmp_path / "missing.bin")
    assert rc == 2 and "missing.bin" in err


@pytest.mark.slow
def test_cli_analyze_several_buffers(pair, tmp_path):
    rc, out, err = run_ktrace("analyze", *pair, "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "ktrace.analysis.multi/1"
    assert [g["label"] for g in doc["gpus"]] == ["GPU 0 (NVIDIA H200)", "GPU 1 (NVIDIA H200)"]
    assert all(g["schema"] == "ktrace.analysis/2" and g["kernel"]["slices"] == BLOCKS * STEPS for g in doc["gpus"])
    x = doc["cross_gpu"]
    assert x["schema"] == "ktrace.cross_gpu/1" and x["alignment"]["spread_ns"] == SPREAD
    want = expected_cross()
    assert [r["end_skew_ns"] for r in x["instances"]] == [
        abs(want[(r["phase"], r["k"])][1][1] - want[(r["phase"], r["k"])][0][1]) for r in x["instances"]]
    rc, out, err = run_ktrace("analyze", *pair, "--markdown")
    assert rc == 0 and "### across GPUs" in out and "## GPU 1 (NVIDIA H200)" in out
    rc, _, err = run_ktrace("analyze", *pair, "--plot", tmp_path / "p.png")
    assert rc == 2 and "--plot takes one buffer" in err


# -- the same figures in SQL, on the merged trace -------------------------------------------------------------

def sql_cross(trace):
    from ktrace.analysis import register
    from ktrace.engine import open_trace

    with open_trace(trace) as s:
        register(s)
        inst = s.query("INCLUDE PERFETTO MODULE ktrace.gpus; SELECT phase, k, gpus, begin_ns, end_ns, start_skew_ns, "
                       "end_skew_ns, first_gpu, last_gpu, tied_last_gpus, last_lead_ns FROM ktrace_cross_gpu_instance")
        per = s.query("SELECT phase, k, gpu, lanes, begin_ns, end_ns FROM ktrace_gpu_phase_instance")
    return sorted(inst.rows), sorted(per.rows)


def numpy_cross(x):
    inst = sorted((r["phase"], r["k"], r["gpus"], r["begin_ns"], r["end_ns"], r["start_skew_ns"], r["end_skew_ns"],
                   r["first_gpu"], r["last_gpu"], r["tied_last_gpus"],
                   None if r["last_lead_ns"] is None else int(r["last_lead_ns"])) for r in x.instances.rows())
    per = sorted((r["phase"], r["k"], r["gpu"], r["lanes"], r["begin_ns"], r["end_ns"]) for r in x.per_gpu.rows())
    return inst, per


def test_sql_on_the_merged_trace_equals_numpy_on_the_buffers(pair, tmp_path):
    res = merge_traces(pair, tmp_path / "m.perfetto-trace")
    assert sql_cross(res.path) == numpy_cross(cross_gpu(pair))


# -- the committed two-GPU capture (samples/multigpu_gpu*: imbalance.py on two H200s at once) ------------------

REAL = [SAMPLES / f"multigpu_gpu{i}.bin" for i in (0, 1)]


@pytest.mark.skipif(not all(p.exists() for p in REAL), reason="no committed two-GPU capture")
def test_the_real_two_gpu_capture(tmp_path):
    metas = [json.loads(p.with_suffix(".json").read_text()) for p in REAL]
    res = merge_traces(REAL, tmp_path / "m.perfetto-trace")
    offset = metas[1]["timer"]["offset_to_reference_ns"]
    assert [c.shift_ns for c in res.alignment.clocks] == [0, -offset] and offset != 0
    x = cross_gpu(REAL)
    # Block 17 is every compute instance's straggler on both GPUs.
    compute = x.per_gpu.where(x.per_gpu.phase == "compute")
    assert len(compute) == 16 and set(compute.last_block.tolist()) == {17}
    # The captured launches were held until both processes were ready: aligned, the GPUs start within a few
    # microseconds (raw, their clocks are 100 µs apart) and run every instance side by side.
    assert np.all(x.instances.gpus == 2) and len(x.instances) == 24
    assert int(x.instances.start_skew_ns.max()) < 5_000 < abs(offset)
    assert sql_cross(res.path) == numpy_cross(x)
