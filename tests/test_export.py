"""The trace parses with Perfetto's own protobuf classes into exactly the packets meant."""

import numpy as np
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from ktrace import decode
from ktrace.export.packets import encode_events
from ktrace.export.writer import ARG_NAMES, trace_bytes
from ktrace.decoding.encode import encode_tags, place_records

from conftest import SAMPLE_NAMES, sample, sample_meta


def parse(b: bytes):
    t = pb.Trace()
    t.ParseFromString(b)
    return list(t.packet)


def tracks_of(packets):
    return {p.track_descriptor.uuid: p.track_descriptor for p in packets if p.HasField("track_descriptor")}


def events_of(packets):
    return [p for p in packets if p.HasField("track_event")]


def interned(packets):
    names, args = {}, {}
    for p in packets:
        names.update({e.iid: e.name for e in p.interned_data.event_names})
        args.update({e.iid: e.name for e in p.interned_data.debug_annotation_names})
    return names, args


def lane_of_track(tracks, uuid):
    """(block, group) from the track names up the tree: 'group g (..)' under 'block b'."""
    block = group = None
    while uuid in tracks:
        name = tracks[uuid].name
        if name.startswith("group ") and group is None:
            group = int(name.split()[1])
        if name.startswith("block ") and block is None:
            block = int(name.split()[1])
        uuid = tracks[uuid].parent_uuid if tracks[uuid].HasField("parent_uuid") else None
    return block, group or 0


def test_packet_encoder_matches_protobuf_serialization():
    rng = np.random.default_rng(7)
    n = 2000
    cols = {
        "ts": rng.integers(0, 1 << 62, n) >> rng.integers(0, 62, n),
        "type": rng.integers(1, 4, n),
        "sm": rng.integers(-1, 300, n),
        "has_sm": rng.integers(0, 2, n),
        "last": rng.integers(0, 1 << 30, n) >> rng.integers(0, 30, n),
        "has_last": rng.integers(0, 2, n),
        "iid": rng.integers(2, 4, n),
        "name": rng.integers(1, 2000, n),
        "uuid": rng.integers(1, 1 << 40, n) >> rng.integers(0, 40, n),
    }
    ours = encode_events(cols).tobytes()
    ref = pb.Trace()
    for i in range(n):
        p = ref.packet.add()
        p.timestamp = int(cols["ts"][i])
        p.trusted_packet_sequence_id = 1
        te = p.track_event
        if cols["type"][i] != 2:
            if cols["has_sm"][i]:
                te.debug_annotations.add(name_iid=1, int_value=int(cols["sm"][i]))
            if cols["has_last"][i]:
                te.debug_annotations.add(name_iid=int(cols["iid"][i]), int_value=int(cols["last"][i]))
            te.name_iid = int(cols["name"][i])
            p.sequence_flags = 2
        te.type = int(cols["type"][i])
        te.track_uuid = int(cols["uuid"][i])
    assert ours == ref.SerializeToString()


def lane_facts(tracks, uuid):
    """(block, group, SM) a lane track's description says ('block B · group G · SM S'), from the track or,
    for an overlap track, its parent."""
    t = tracks[uuid]
    if not t.description.startswith("block "):
        t = tracks[t.parent_uuid]
    b, g, sm = t.description.split(" · ")
    return int(b.split()[1]), int(g.split()[1]), -1 if sm == "SM ?" else int(sm.split()[1])


# The quick lane (-m "not slow") checks one capture per kind of kernel; the full run checks every one.
_QUICK = {"imbalance", "warpgroups", "instants_ktrace", "overflow_ktrace"}


@pytest.mark.parametrize("name", [n if n in _QUICK else pytest.param(n, marks=pytest.mark.slow)
                                  for n in SAMPLE_NAMES])
def test_sample_trace_has_exactly_the_decoded_events_on_the_right_tracks(name):
    d = decode(sample(name))
    packets = parse(trace_bytes(d))
    tracks = tracks_of(packets)
    names, args = interned(packets)
    assert args == ARG_NAMES
    assert packets[0].sequence_flags == pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    assert all(p.trusted_packet_sequence_id == 1 for p in packets)
    # The launch slice and the SM/block "extent" slices are named inline; phase slices and instants interned.
    inline = {p.track_event.track_uuid for p in events_of(packets) if p.track_event.name}
    ev = [p for p in events_of(packets) if p.track_event.track_uuid not in inline]
    begins = [p for p in ev if p.track_event.type == pb.TrackEvent.TYPE_SLICE_BEGIN]
    ends = [p for p in ev if p.track_event.type == pb.TrackEvent.TYPE_SLICE_END]
    inst = [p for p in ev if p.track_event.type == pb.TrackEvent.TYPE_INSTANT]
    assert len(begins) == len(ends) == len(d.slices)
    assert len(inst) == len(d.instants) + len(d.anomalies)
    # Each BEGIN: on its lane's track (which says the block, group and SM), named; no arg but an SM of its own
    # where it differs from its block's; k is its rank among its lane's BEGINs of its event.
    got, seen = set(), {}
    for p in begins:
        a = {args[x.name_iid]: x.int_value for x in p.track_event.debug_annotations}
        assert set(a) <= {"sm"}
        b, g, sm = lane_facts(tracks, p.track_event.track_uuid)
        assert lane_of_track(tracks, p.track_event.track_uuid) == (b, g)
        assert a.get("sm", sm + 1) != sm  # an sm arg only where it says something the track does not
        phase = names[p.track_event.name_iid]
        k = seen[(b, g, phase)] = seen.get((b, g, phase), -1) + 1
        got.add((b, g, k, phase, p.timestamp, a.get("sm", sm)))
    # The SM recorded in the tag is the SM the block really ran on (read independently at capture time),
    # except where FlashInfer's header OR-ed block bits into it (blocks >= 4096): then it is flagged (-1).
    smid = sample_meta(name)["block_smid"]
    assert all(sm == smid[b] or (sm == -1 and b >= 4096 and d.launch.producer != "ktrace") for b, _, _, _, _, sm in got)


def test_warpgroups_both_groups_of_every_block_on_their_own_tracks():
    d = decode(sample("warpgroups"))
    packets = parse(trace_bytes(d))
    tracks = tracks_of(packets)
    names, args = interned(packets)
    per_track = {}
    for p in events_of(packets):
        te = p.track_event
        if te.type == pb.TrackEvent.TYPE_SLICE_BEGIN and te.name_iid:
            per_track.setdefault(te.track_uuid, set()).add(names[te.name_iid])
    lanes = {lane_of_track(tracks, u): ev for u, ev in per_track.items()}
    assert len(lanes) == 264 * 2
    assert all(lanes[(b, 0)] == {"load"} and lanes[(b, 1)] == {"mma"} for b in range(264))
    group_names = {t.name for t in tracks.values() if t.name.startswith("group")}
    assert group_names == {"group 0 (load)", "group 1 (mma)"}


def test_tracks_ordered_numerically_and_nested_sm_block_group():
    d = decode(sample("warpgroups"))
    tracks = tracks_of(parse(trace_bytes(d, tracks="sm")))
    blocks = [t for t in tracks.values() if t.name.startswith("block ")]
    assert all(t.sibling_order_rank == int(t.name.split()[1]) for t in blocks)
    assert all(tracks[t.parent_uuid].name.startswith("SM ") for t in blocks)
    parents = {t.parent_uuid for t in tracks.values() if t.HasField("parent_uuid")}
    assert all(tracks[p].child_ordering == pb.TrackDescriptor.EXPLICIT for p in parents)
    flat = tracks_of(parse(trace_bytes(d, tracks="flat")))
    # Without SM tracks, the block's name says its SM.
    sm10 = int(d.slices.sm[d.slices.block == 10][0])
    assert {t.name for t in flat.values() if t.HasField("parent_uuid")} >= {f"block 10 · SM {sm10} / group 1 (mma)"}
    by_block = tracks_of(parse(trace_bytes(d, tracks="block")))
    assert not any(t.name.startswith("SM ") for t in by_block.values())
    assert {t.name for t in by_block.values()} >= {f"block 10 · SM {sm10}", "group 1 (mma)"}


def test_launch_slice_carries_the_facts():
    d = decode(sample("imbalance"))
    packets = parse(trace_bytes(d))
    launch = [p for p in events_of(packets) if p.track_event.track_uuid == 1 << 44 and p.track_event.name][0]
    a = {x.name: (x.string_value or x.int_value) for x in launch.track_event.debug_annotations}
    assert a["kernel"] == "persistent_phases" and a["grid"] == "132x1x1" and a["device"] == "NVIDIA H200"
    assert a["block_dim"] == "128x1x1"
    assert a["layout"] == "flashinfer" and a["slices"] == 3168 and a["records"] == 6336


def test_overlapping_slices_go_to_child_tracks_and_every_track_nests():
    # One lane: a(0) begins, b(1) begins, a ends, b ends; then c(2) nests inside nothing.
    recs = [(0, 0, 0, 0), (1, 0, 1, 10), (2, 1, 0, 20), (3, 1, 1, 30), (4, 0, 2, 40), (5, 1, 2, 50)]
    seq, typ, ev, ts = np.array(recs).T
    z = np.zeros_like(seq)
    buf = place_records(1, 1, z, z, seq, encode_tags("flashinfer", typ, ev, z, z, 1), ts + 1000, 6)
    d = decode(buf)
    packets = parse(trace_bytes(d))
    tracks = tracks_of(packets)
    open_by_track = {}
    for p in events_of(packets):
        te = p.track_event
        stack = open_by_track.setdefault(te.track_uuid, [])
        if te.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            stack.append(p.timestamp)
        elif te.type == pb.TrackEvent.TYPE_SLICE_END:
            assert stack, "END with nothing open on its track"
            stack.pop()
    overlap_tracks = [t.name for t in tracks.values() if "overlapping" in t.name]
    assert len(overlap_tracks) == 2


def test_output_is_deterministic():
    assert trace_bytes(decode(sample("imbalance"))) == trace_bytes(decode(sample("imbalance")))


@pytest.mark.parametrize("name", ["imbalance", "warpgroups"])
def test_streamed_in_lane_ranges_gives_the_same_trace_events(name):
    from ktrace.decoding import BufferDecoder

    whole = parse(trace_bytes(decode(sample(name))))
    streamed = parse(trace_bytes(BufferDecoder(sample(name)), records_per_part=500))

    def key(packets):
        names, args = interned(packets)
        tracks = tracks_of(packets)
        out = []
        for p in events_of(packets):
            te = p.track_event
            a = tuple(sorted((args[x.name_iid], x.int_value) for x in te.debug_annotations if x.name_iid))
            out.append((p.timestamp, te.type, names.get(te.name_iid, te.name), tracks[te.track_uuid].name, a))
        return sorted(out), sorted((t.name, t.sibling_order_rank, t.description) for t in tracks.values())

    assert key(whole) == key(streamed)


def test_collapsed_sm_and_block_tracks_show_their_extent():
    # Each SM track (and each block track above warp-group tracks) carries one slice from the first BEGIN
    # to the last END under it, so a collapsed track is not blank; it has no args, so it is no phase slice.
    d = decode(sample("warpgroups"))
    packets = parse(trace_bytes(d))
    tracks = tracks_of(packets)
    inline = [p for p in events_of(packets) if p.track_event.name and p.track_event.track_uuid != 1 << 44]
    by_track = {}
    for p in inline:
        by_track.setdefault(tracks[p.track_event.track_uuid].name, []).append(p)
    assert all(not p.track_event.debug_annotations for p in inline)
    s = d.slices
    sms = sorted(set(s.sm.tolist()))
    assert {n for n in by_track if n.startswith("SM ")} == {f"SM {k}" for k in sms}
    assert len([n for n in by_track if n.startswith("block ")]) == 264
    m = s.block == 17
    (b17,) = by_track["block 17"]
    assert b17.timestamp == s.begin_ns[m].min() and b17.track_event.name == "running"
    m = s.sm == sms[0]
    (first_sm,) = by_track[f"SM {sms[0]}"]
    assert first_sm.timestamp == s.begin_ns[m].min()
    assert first_sm.track_event.name == f"{len(set(s.block[m].tolist()))} blocks"
