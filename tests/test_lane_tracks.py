"""What belongs to a lane is on its track, not on every slice, and the SQL package reads it back exactly.

A lane track's description says its block, warp group and SM; a phase slice carries no arg (but ``sm`` where
its record's SM differs from its block's), and its instance k is derived in SQL (ktrace.lanes): the rank of
the slice among its lane's slices of its phase, in begin order. These tests hold the SQL's block, group, SM
and k to the decoder's on every real sample and on hand-built buffers made to trip the derivation.
"""

from pathlib import Path

import numpy as np
import pytest

from ktrace import decode
from ktrace.analysis import register
from ktrace.decoding.encode import encode_tags, place_records
from ktrace.engine import open_trace
from ktrace.export.writer import trace_bytes

from conftest import SAMPLES

_QUICK = {"imbalance", "warpgroups", "instants_ktrace", "overflow_ktrace", "fi_batch_attention_decode_run1"}
_ALL = sorted(p.name for p in SAMPLES.glob("*.bin")) + sorted(p.name for p in SAMPLES.glob("*.bin.gz"))


def _stem(name: str) -> str:
    return name.removesuffix(".gz").removesuffix(".bin")


def _decoded_slices(d) -> set:
    s, L = d.slices, d.launch
    return set(zip(s.block.tolist(), s.group.tolist(), s.sm.tolist(), [L.event_name(e) for e in s.event.tolist()],
                   s.k.tolist(), s.begin_ns.tolist(), s.end_ns.tolist()))


def _sql_slices(trace: bytes, tracks: str = "sm") -> tuple[set, list]:
    with open_trace(trace) as session:
        register(session)
        r = session.query("INCLUDE PERFETTO MODULE ktrace.slices;\n"
                          "SELECT block, grp, sm, phase, k, ts, end_ts FROM ktrace_phase_slice")
        got = set(zip(*(r.column(c).tolist() for c in r.columns)))
        keys = session.query("SELECT DISTINCT key FROM args WHERE key GLOB 'debug.*' AND arg_set_id IN "
                             "(SELECT arg_set_id FROM ktrace_phase_slice JOIN slice USING (id))").column("key")
        return got, sorted(keys.tolist())


@pytest.mark.parametrize("name", [n if _stem(n) in _QUICK else pytest.param(n, marks=pytest.mark.slow) for n in _ALL])
def test_sql_block_group_sm_and_k_equal_the_decoders_on_real_samples(name):
    d = decode(SAMPLES / name)
    got, keys = _sql_slices(trace_bytes(d))
    assert got == _decoded_slices(d)
    assert len(got) == len(d.slices)
    # No slice carries its lane: at most an SM of its own (a record whose SM is not its block's).
    assert set(keys) <= {"debug.sm", "debug.ktrace.role"}


def test_slices_carry_no_lane_args_and_the_lane_track_says_block_group_sm(tmp_path):
    d = decode(SAMPLES / "warpgroups.bin")
    with open_trace(trace_bytes(d)) as session:
        register(session)
        phase_args = session.query(
            "INCLUDE PERFETTO MODULE ktrace.slices;\n"
            "SELECT count(*) AS n FROM ktrace_phase_slice JOIN slice USING (id) WHERE arg_set_id IS NOT NULL")
        assert phase_args.rows[0][0] == 0
        r = session.query("SELECT t.name, extract_arg(t.source_arg_set_id, 'description') AS d "
                          "FROM track t WHERE t.id IN (SELECT track_id FROM _ktrace_lane_track)")
        lanes = dict(zip(r.column("d").tolist(), r.column("name").tolist()))
    s, L = d.slices, d.launch
    want = {f"block {b} · group {g} · SM {sm}": L.group_name(g)
            for b, g, sm in set(zip(s.block.tolist(), s.group.tolist(), s.sm.tolist()))}
    assert lanes == want and len(lanes) == 528


def _lane_buffer(records, num_blocks=2, num_groups=1, sm_of_block=(5, 9)):
    """records: (block, seq, rtype, event, ts_ns[, sm]) rows, FlashInfer layout."""
    rows = [r if len(r) == 6 else (*r, sm_of_block[r[0]]) for r in records]
    block, seq, typ, ev, ts, sm = (np.array(c, np.int64) for c in zip(*rows))
    z = np.zeros_like(block)
    tag = encode_tags("flashinfer", typ, ev, block, z, num_groups, sm=sm)
    return place_records(num_blocks, num_groups, block, z, seq, tag, ts + 1_000_000, int(seq.max()) + 2)


def test_k_is_exact_where_slices_of_one_phase_share_a_timestamp():
    # Block 0: zero-duration slices of event 0 back to back at one timestamp (the timer did not move), one
    # nesting an event-1 slice, and slices of event 1 that begin where event 0's end. Block 1: one slice.
    recs = [(0, 0, 0, 0, 100), (0, 1, 1, 0, 100), (0, 2, 0, 0, 100), (0, 3, 1, 0, 100),
            (0, 4, 0, 1, 100), (0, 5, 0, 0, 100), (0, 6, 1, 0, 100), (0, 7, 1, 1, 132),
            (0, 8, 0, 0, 132), (0, 9, 1, 0, 132), (0, 10, 0, 1, 132), (0, 11, 1, 1, 132),
            (1, 0, 0, 0, 100), (1, 1, 1, 0, 164)]
    d = decode(_lane_buffer(recs))
    assert len(d.slices) == 7 and len(d.anomalies) == 0
    got, _ = _sql_slices(trace_bytes(d))
    assert got == _decoded_slices(d)
    # The three event-0 slices at 100 differ only in k and depth (the third nests in the event-1 slice).
    with open_trace(trace_bytes(d)) as session:
        register(session)
        r = session.query("INCLUDE PERFETTO MODULE ktrace.slices;\n"
                          "SELECT block, phase, k, ts - (SELECT MIN(ts) FROM ktrace_phase_slice) AS ts, dur, depth "
                          "FROM ktrace_phase_slice "
                          "ORDER BY block, phase, k")
    assert r.rows == [(0, "event_0", 0, 0, 0, 0), (0, "event_0", 1, 0, 0, 0), (0, "event_0", 2, 0, 0, 1),
                      (0, "event_0", 3, 32, 0, 0), (0, "event_1", 0, 0, 32, 0), (0, "event_1", 1, 32, 0, 0),
                      (1, "event_0", 0, 0, 64, 0)]
    s = d.slices
    assert [(b, e, k, t) for b, e, k, t in zip(s.block.tolist(), s.event.tolist(), s.k.tolist(),
                                               (s.begin_ns - s.begin_ns.min()).tolist())] == [
        (0, 0, 0, 0), (0, 0, 1, 0), (0, 1, 0, 0), (0, 0, 2, 0), (0, 0, 3, 32), (0, 1, 1, 32), (1, 0, 0, 0)]


def test_a_record_whose_sm_is_not_its_blocks_carries_its_own():
    # Block 0 ran on SM 5, but one slice's tag says SM 7 (a damaged tag): that slice carries debug.sm, no other.
    recs = [(0, 0, 0, 0, 100), (0, 1, 1, 0, 200), (0, 2, 0, 0, 300, 7), (0, 3, 1, 0, 400, 7),
            (0, 4, 0, 0, 500), (0, 5, 1, 0, 600), (1, 0, 0, 0, 100), (1, 1, 1, 0, 250)]
    d = decode(_lane_buffer(recs))
    assert d.slices.sm.tolist() == [5, 7, 5, 9]
    got, keys = _sql_slices(trace_bytes(d))
    assert got == _decoded_slices(d)
    assert keys == ["debug.sm"]


@pytest.mark.parametrize("tracks", ["block", "flat"])
def test_the_other_track_modes_read_back_the_same(tracks):
    d = decode(SAMPLES / "warpgroups.bin")
    got, _ = _sql_slices(trace_bytes(d, tracks=tracks))
    assert got == _decoded_slices(d)


def test_a_description_that_is_not_ktraces_is_no_lane(tmp_path):
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    t = pb.Trace()
    p = t.packet.add()
    p.trusted_packet_sequence_id, p.sequence_flags = 1, 1
    for uuid, desc in ((5, "block 3 · group 1 · SM x"), (6, "block 03 · group 1 · SM 2"), (7, "block 3 · group 1 · SM 2")):
        p = t.packet.add()
        p.trusted_packet_sequence_id = 1
        p.track_descriptor.uuid, p.track_descriptor.name, p.track_descriptor.description = uuid, "t", desc
        for ts, typ in ((10, 1), (20, 2)):
            p = t.packet.add()
            p.trusted_packet_sequence_id, p.timestamp = 1, ts
            p.track_event.type, p.track_event.track_uuid = typ, uuid
            if typ == 1:
                p.track_event.name = "x"
    with open_trace(t.SerializeToString()) as session:
        register(session)
        r = session.query("INCLUDE PERFETTO MODULE ktrace.slices;\nSELECT block, grp, sm, k FROM ktrace_phase_slice")
        assert r.rows == [(3, 1, 2, 0)]


def _top_blocks_and_groups(session) -> tuple[list, list]:
    from ktrace.analysis.figures.sql.reader import _top_slices

    top = _top_slices(session)
    r = session.query("SELECT t.block, l.grp FROM _ktrace_top_slice t JOIN _ktrace_lane_track l ON l.track_id = "
                      "(SELECT track_id FROM slice WHERE id = t.id) ORDER BY t._auto_id")
    assert top.block.tolist() == r.column("block").tolist()
    return top.group.tolist(), r.column("grp").tolist()


def test_the_evidence_reads_each_top_slices_block_and_group_from_its_track():
    # The wait evidence takes a slice's block and group from its lane (block * num_groups + group); where a
    # trace's tracks name a group the launch's num_groups does not hold (here the package is told one group
    # per block, as a trace not written by ktrace could say), the lanes do not divide: the blocks are read.
    from ktrace.analysis.figures.sql.package import sql_modules

    d = decode(SAMPLES / "warpgroups.bin")
    with open_trace(trace_bytes(d)) as session:
        register(session)
        session.query("INCLUDE PERFETTO MODULE ktrace.slices;\nSELECT 1")
        got, want = _top_blocks_and_groups(session)
        assert got == want and set(want) == {0, 1}
    modules = sql_modules()
    groups = "CREATE PERFETTO TABLE _ktrace_groups AS\nSELECT COALESCE("
    assert groups in modules["ktrace.slices"]
    modules["ktrace.slices"] = modules["ktrace.slices"].replace(groups, "CREATE PERFETTO TABLE _ktrace_groups AS\n"
                                                                "SELECT 1 AS n, COALESCE(").replace("1) AS n;", "1) AS m;", 1)
    with open_trace(trace_bytes(d)) as session:
        session.add_sql_package("ktrace", modules)
        session.query("INCLUDE PERFETTO MODULE ktrace.slices;\nSELECT 1")
        assert session.query("SELECT n FROM _ktrace_groups").rows == [(1,)]
        got, want = _top_blocks_and_groups(session)
        # Lane = block + group there: its quotient by one group would be the block plus the group.
        assert got == want and set(want) == {0, 1}
