"""NVIDIA IKET's JSON trace in: read into the model (CTAs as blocks, warps as lanes, ranges as phases, markers as
instants, warp lifetimes as each lane's start and exit instants), every record accounted, and bad input refused with the file,
the problem and the fix. Hand-built traces follow the shape NVIDIA documents and the 4.8.1 traces in
samples/iket/ show (those are tested in test_iket_samples.py)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from ktrace.core.errors import InputError
from ktrace.core.filetypes import is_iket, is_trace
from ktrace.decoding import open_source
from ktrace.decoding.iket import WARP_EXIT, WARP_START, read_iket

from conftest import run_ktrace

T0 = 1_796_442_611_252_500_000


def _loc(cta, warp, sm=0, gpc=0):
    return {"ctaId": list(cta), "gpcId": gpc, "smId": sm, "tpcId": sm // 2, "warpId": warp}


def _range(name, start, end, locs):
    return {"endTs": T0 + end, "internalEvents": [{"eventId": 1, "timestamp": T0 + start},
                                                  {"eventId": 31, "timestamp": T0 + end}],
            "rangeColor": 4294967295, "rangeId": 1, "rangeNameIdx": name, "rangeScope": 0, "rangeType": 2,
            "startTs": T0 + start, "warpLocIdxs": locs}


def trace(*, ranges=None, markers=None, lifetimes=None, grid=(2, 1, 1), block=(64, 1, 1), launches=1, **extra):
    """A two-CTA, two-warp launch: CTA 0 on SM 0 (GPC 0), CTA 1 on SM 1 (GPC 1); `load` then `mma` (with `wait`
    nested in it) on every warp; a `tile` marker with a payload on CTA 1 warp 0."""
    locs = [_loc((c, 0, 0), w, sm=c, gpc=c) for c in range(2) for w in range(2)]
    if ranges is None:
        ranges = []
        for i in range(4):
            late = 1000 if i >= 2 else 0  # CTA 1 runs 1 us later
            ranges += [_range(0, 100 + late, 400 + late, [i, i]), _range(1, 500 + late, 900 + late, [i, i]),
                       _range(2, 600 + late, 700 + late, [i, i])]
    if markers is None:
        markers = [{"color": 0, "locIdx": 2, "markerNameIdx": 3, "payloadType": 1, "payloadVal": 7,
                    "timestamp": T0 + 1100}]
    if lifetimes is None:
        lifetimes = [{"endTs": T0 + 1000 + (1000 if i >= 2 else 0), "locIdx": i,
                      "startTs": T0 + (1000 if i >= 2 else 0)} for i in range(4)]
    run = {"blockDimX": block[0], "blockDimY": block[1], "blockDimZ": block[2], "contextId": 1,
           "gridDimX": grid[0], "gridDimY": grid[1], "gridDimZ": grid[2], "gridId": 2, "kernelName": "my_kernel",
           "markers": markers, "ranges": ranges, "warpLifetimes": lifetimes}
    doc = {"graphLaunches": {}, "launches": [dict(run, gridId=2 + i) for i in range(launches)],
           "locationTable": locs, "meta": {"version": 1}, "stringTable": ["load", "mma", "wait", "tile"]}
    doc.update(extra)
    return doc


def write(tmp_path, doc, name="k.trace.json", gz=False):
    p = tmp_path / (name + (".gz" if gz else ""))
    raw = json.dumps(doc).encode()
    p.write_bytes(gzip.compress(raw) if gz else raw)
    return p


def test_a_trace_is_read_into_blocks_warps_phases_and_instants(tmp_path):
    d = read_iket(write(tmp_path, trace()))
    L = d.launch
    assert (L.num_blocks, L.num_groups, L.producer) == (2, 2, "iket")
    assert L.event_names == ("load", "mma", "wait", WARP_START, WARP_EXIT, "tile")
    assert L.grid == (2, 1, 1) and L.block_dim == (64, 1, 1)
    s, i = d.slices, d.instants
    assert len(s) == 4 * 3  # three ranges per warp
    assert sorted(set(s.block.tolist())) == [0, 1] and sorted(set(s.sm.tolist())) == [0, 1]
    # times from the launch's first stamp; CTA 1 runs 1 us after CTA 0
    start = i.event == L.event_names.index(WARP_START)
    assert sorted(i.ts_ns[start & (i.block == 0)].tolist()) == [0, 0]
    assert sorted(i.ts_ns[start & (i.block == 1)].tolist()) == [1000, 1000]
    assert s.begin_ns[(s.block == 1) & (s.event == 0)].tolist() == [1100, 1100]
    # the marker is an instant on CTA 1 warp 0
    tile = i.event == L.event_names.index("tile")
    assert tile.sum() == 1 and int(i.block[tile][0]) == 1 and int(i.ts_ns[tile][0]) == 1100
    assert len(i) == 1 + 2 * 4  # the marker, a start and an exit per warp
    assert d.accounted and d.records == 2 * len(s) + len(i)
    assert d.notes.get("iket_payloads") == 1


def test_records_are_numbered_once_in_lane_order_with_nesting_kept(tmp_path):
    d = read_iket(write(tmp_path, trace()))
    s, i = d.slices, d.instants
    recs = np.concatenate([s.begin_rec, s.end_rec, i.rec])
    assert sorted(recs.tolist()) == list(range(d.records))  # every record has one place
    names = d.launch.event_names
    for lane in set(s.lane.tolist()):
        on, ion = s.lane == lane, i.lane == lane
        ev, b, e = s.event[on], s.begin_seq[on], s.end_seq[on]
        # the warp's start comes first and its exit last; wait lies inside mma
        iseq, iev = i.seq[ion], i.event[ion]
        assert iseq[iev == names.index(WARP_START)][0] == 0
        assert iseq[iev == names.index(WARP_EXIT)][0] == max(e.max(), iseq.max())
        mma, wait = ev == 1, ev == 2
        assert b[mma][0] < b[wait][0] < e[wait][0] < e[mma][0]


def test_warp_groups_merge_their_warps(tmp_path):
    d = read_iket(write(tmp_path, trace()), lanes="warpgroup")
    assert d.launch.num_groups == 1 and d.launch.group_names == ("warps 0-1",)
    assert len(d.slices) == 2 * 3  # per CTA: load, mma, wait


def test_gzip_trace_and_the_resolver(tmp_path):
    p = write(tmp_path, trace(), gz=True)
    assert is_iket(p) and not is_trace(p)
    d = open_source(p)
    assert d.launch.producer == "iket" and len(d.slices) == 12


def test_a_sidecar_gives_device_versions_and_the_control(tmp_path):
    p = write(tmp_path, trace())
    (tmp_path / "k.json").write_text(json.dumps({"device": "NVIDIA H200", "num_sms": 132, "iket_version": "4.8.1",
                                                 "control_median_us": 210.4}))
    L = read_iket(p).launch
    assert (L.device, L.num_sms, L.control_median_us) == ("NVIDIA H200", 132, 210.4)
    assert "nvidia-cutlass-dsl 4.8.1" in L.producer_version and "JSON format 1" in L.producer_version
    assert read_iket(p, sidecar=False).launch.device is None


def test_several_launches_need_a_choice(tmp_path):
    p = write(tmp_path, trace(launches=3))
    with pytest.raises(InputError, match=r"holds 3 launches .*--launch N"):
        read_iket(p)
    assert read_iket(p, launch=2).launch.producer_version.endswith("launch 2 of 3, on 2 GPCs")
    with pytest.raises(InputError, match=r"--launch 3: .* 0 to 2"):
        read_iket(p, launch=3)


def test_a_range_that_ends_before_it_starts_is_two_anomalies(tmp_path):
    doc = trace()
    doc["launches"][0]["ranges"].append(_range(0, 800, 200, [0, 0]))
    d = read_iket(write(tmp_path, doc))
    assert len(d.anomalies) == 2 and d.accounted
    assert d.notes["iket_backwards"] == 1


@pytest.mark.parametrize("change, message", [
    (lambda d: d.pop("locationTable"), "no 'locationTable' list"),
    (lambda d: d["locationTable"][0].update(ctaId=[5, 0, 0]), "outside the launch's grid"),
    (lambda d: d["locationTable"][0].update(warpId=4000), "'warpId' is 4000"),
    (lambda d: d["locationTable"][0].update(ctaId=[2 ** 70, 0, 0]), "not three CTA indices"),
    (lambda d: d["launches"][0].update(gridDimX=2 ** 30, gridDimY=2 ** 10), "a grid of"),
    (lambda d: d["launches"][0]["ranges"][0].update(warpLocIdxs=[99]), "warpLocIdxs"),
    (lambda d: d["launches"][0]["ranges"][0].update(startTs="1"), "'startTs' is not an integer"),
    (lambda d: d["launches"][0]["ranges"][0].update(rangeNameIdx=9), "'rangeNameIdx' is 9"),
    (lambda d: d["launches"][0]["ranges"][0].update(endTs=T0 + 10 ** 13), "ns apart in one launch"),
    (lambda d: d["launches"][0].update(blockDimX=1 << 20), "a block of"),
    (lambda d: d.update(launches=[]), "holds no launch"),
])
def test_damaged_traces_are_refused_with_the_file_and_the_fix(tmp_path, change, message):
    doc = trace()
    change(doc)
    p = write(tmp_path, doc)
    with pytest.raises(InputError, match=message) as e:
        read_iket(p)
    assert str(p) in str(e.value)


def test_buffer_options_are_refused(tmp_path):
    with pytest.raises(InputError, match="--events applies to profiler buffers, not IKET traces"):
        read_iket(write(tmp_path, trace()), events=["a"])


def test_the_cli_reads_it_and_refuses_bad_input_with_exit_2(tmp_path):
    p = write(tmp_path, trace())
    rc, out, err = run_ktrace("inspect", str(p))
    assert rc == 0, err
    assert "NVIDIA IKET" in out and "accounted" in out
    bad = tmp_path / "bad.trace.json"
    bad.write_text('{"launches": [{"gridDimX": 1, "warpLifetimes": [}')
    rc, out, err = run_ktrace("analyze", str(bad))
    assert rc == 2 and "Traceback" not in err
    assert "bad.trace.json" in err and "not valid JSON" in err


def test_an_iket_perfetto_trace_points_to_its_json(tmp_path):
    """run-iket writes a .pftrace beside the JSON; ktrace reads the JSON, and says so rather than reading IKET's
    Perfetto trace as if it were its own (an empty analysis, exit 0)."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    t = pb.Trace()
    for uuid, name, parent in ((1, "Root", 0), (2, "Grid1", 1), (3, "CTA(0, 0, 4)", 2), (4, "Warp00", 3),
                               (5, "StackedRanges", 4)):
        td = t.packet.add().track_descriptor
        td.uuid, td.name = uuid, name
        if parent:
            td.parent_uuid = parent
    p = tmp_path / "iket_pid_0x1.pftrace"
    p.write_bytes(t.SerializeToString())
    for command in ("analyze", "inspect"):
        rc, out, err = run_ktrace(command, str(p))
        assert rc == 2, (command, out, err)
        assert "IKET's Perfetto trace" in err and ".trace.json" in err


def test_wait_phases_are_known_by_their_names():
    from ktrace.analysis.findings.kinds.pipeline import is_wait_phase

    assert all(map(is_wait_phase, ["wait", "mma_wait", "tma-wait", "barrier.Wait", "WAIT", "load wait"]))
    assert not any(map(is_wait_phase, ["await", "waiting", "wait_tma", "waits", "compute", ""]))
