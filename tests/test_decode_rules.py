"""The decoder's rules, each on a hand-built buffer whose right answer is known."""

import numpy as np
import pytest

from ktrace import InputError, decode
from ktrace.decoding.encode import encode_tags, phase_buffer, place_records

from conftest import write_buffer

WRAP = 1 << 32


def lanes_buffer(nb, ng, recs, capacity, layout="flashinfer", sm=None):
    """recs: list of (block, group, seq, type, event, ts_ns)."""
    r = np.array(recs, dtype=np.int64).reshape(-1, 6)
    b, g, s, t, e, ts = r.T
    smv = None if sm is None else np.asarray(sm)[b]
    tag = encode_tags(layout, t, e, b, g, ng, sm=smv)
    return place_records(nb, ng, b, g, s, tag, ts, capacity)


def test_every_record_accounted_and_positions_give_block_and_group():
    # Legacy-style tags (block*groups+group) written under the current layout would lie about the block;
    # here tags are honest and block/group must come from the position whatever the tag says.
    begin = np.arange(6 * 3).reshape(6, 3) * 1000 + 10_000
    buf = phase_buffer(begin, begin + 400, [0, 1, 2], num_groups=2, sm=[5, 6, 7], spare=2)
    d = decode(buf)
    assert d.accounted and len(d.slices) == 18 and len(d.anomalies) == 0
    s = d.slices
    assert sorted(set(zip(s.block.tolist(), s.group.tolist()))) == [(b, g) for b in range(3) for g in range(2)]
    assert (s.sm == np.array([5, 6, 7])[s.block]).all()
    assert (s.dur_ns == 400).all()


@pytest.mark.parametrize("layout,ng", [("flashinfer", 1), ("flashinfer", 2), ("flashinfer_legacy", 2),
                                       ("flashinfer_legacy", 1), ("mirage", 2)])
def test_layout_detected_and_forced(layout, ng):
    lanes = 8 * ng
    begin = np.arange(lanes * 4).reshape(lanes, 4) * 500 + 1000
    buf = phase_buffer(begin, begin + 200, [0, 1, 0, 1], num_groups=ng, layout=layout,
                       sm=np.arange(8) + 3 if layout == "flashinfer" else None)
    d = decode(buf)
    if layout == "flashinfer_legacy" and ng == 1:
        # With one group and no SM byte, legacy tags read the same under the current layout: either is right.
        assert d.layout.name in ("flashinfer", "flashinfer_legacy")
    else:
        assert d.layout.name == layout
    assert d.layout.score == 1.0 and d.accounted and len(d.slices) == lanes * 4
    forced = decode(buf, layout="mirage" if layout != "mirage" else "flashinfer")
    assert forced.layout.chosen_by == "forced" and forced.accounted
    assert len(forced.anomalies) > 0  # the wrong layout's fields disagree with the positions


def test_unwrap_within_and_across_lanes():
    # Lane 0 starts just before a wrap, lane 1 just after it; a phase in lane 0 crosses the wrap.
    t0 = 3 * WRAP - 3000
    recs = [(0, 0, 0, 0, 0, t0), (0, 0, 1, 1, 0, t0 + 5000), (0, 0, 2, 0, 1, t0 + 6000), (0, 0, 3, 1, 1, t0 + 9000),
            (1, 0, 0, 0, 0, t0 + 4000), (1, 0, 1, 1, 0, t0 + 4100)]
    d = decode(lanes_buffer(2, 1, recs, 4))
    s = d.slices
    assert s.dur_ns.tolist() == [5000, 3000, 100]
    assert s.begin_ns.tolist() == [0, 6000, 4000]  # relative to the first record, lanes aligned
    assert d.time_origin == "first record"


def test_kernel_running_across_several_wraps():
    # One lane, phases of 1.5 s each: the stamps wrap three times.
    steps = 8
    begin = (np.arange(steps) * 1_500_000_000 + 7).reshape(1, steps)
    d = decode(phase_buffer(begin, begin + 1_400_000_000, [0] * steps))
    assert (d.slices.dur_ns == 1_400_000_000).all()
    assert d.slices.begin_ns.tolist() == (np.arange(steps) * 1_500_000_000).tolist()


def test_anchor_to_unix_epoch_from_host_clock(tmp_path):
    launch = 1_764_000_000_123_456_789  # host clock at launch, Unix ns
    gpu = launch + 151_000  # the GPU's timer runs ~0.15 ms off the host's
    begin = np.array([[gpu, gpu + 10_000]])
    path = write_buffer(tmp_path, phase_buffer(begin, begin + 500, [0, 0]), meta={"host_launch_unix_ns": launch})
    d = decode(path)
    assert d.time_origin == "host clock at launch"
    assert d.slices.begin_ns.tolist() == [gpu, gpu + 10_000]


def test_nesting_of_different_events_pairs_by_event_not_lifo():
    # outer(0) [ inner(1) ] and then a partial overlap: A(2) begins, B(3) begins, A ends, B ends.
    recs = [(0, 0, 0, 0, 0, 100), (0, 0, 1, 0, 1, 110), (0, 0, 2, 1, 1, 120), (0, 0, 3, 1, 0, 130),
            (0, 0, 4, 0, 2, 200), (0, 0, 5, 0, 3, 210), (0, 0, 6, 1, 2, 220), (0, 0, 7, 1, 3, 230)]
    d = decode(lanes_buffer(1, 1, recs, 8), events="outer,inner,a,b")
    s = d.slices
    got = {int(e): (int(b), int(en), bool(o)) for e, b, en, o in zip(s.event, s.begin_ns, s.end_ns, s.overlap)}
    assert got == {0: (0, 30, False), 1: (10, 20, False), 2: (100, 120, True), 3: (110, 130, True)}
    assert d.notes["partial_overlap"] == 2 and d.accounted


def test_unpaired_records_are_reported_not_guessed():
    # END without BEGIN, then BEGIN BEGIN END of one event (first BEGIN unpaired), then BEGIN without END.
    recs = [(0, 0, 0, 1, 0, 100), (0, 0, 1, 0, 0, 200), (0, 0, 2, 0, 0, 300), (0, 0, 3, 1, 0, 400),
            (0, 0, 4, 0, 1, 500)]
    d = decode(lanes_buffer(1, 1, recs, 6))
    assert len(d.slices) == 1 and d.slices.begin_ns[0] == 200 and d.slices.end_ns[0] == 300
    assert d.anomalies.counts() == {"end_without_begin": 1, "begin_without_end": 2}
    assert d.accounted


def test_instance_index_counts_per_lane_and_event():
    begin = np.arange(2 * 6).reshape(2, 6) * 1000 + 1000  # a record of all zeros reads as empty
    d = decode(phase_buffer(begin, begin + 100, [0, 1, 2, 0, 1, 2]))
    s = d.slices
    assert sorted(zip(s.lane.tolist(), s.event.tolist(), s.k.tolist())) == [
        (ln, ev, k) for ln in range(2) for ev in range(3) for k in range(2)
    ]


def test_backwards_timestamp_is_an_anomaly_and_durations_stay_non_negative():
    recs = [(0, 0, 0, 0, 0, 1000), (0, 0, 1, 1, 0, 2000), (0, 0, 2, 0, 0, 1500), (0, 0, 3, 1, 0, 2500),
            (0, 0, 4, 0, 0, 3000), (0, 0, 5, 1, 0, 3100)]
    d = decode(lanes_buffer(1, 1, recs, 6))
    assert d.anomalies.counts().get("backwards") == 1
    assert (d.slices.dur_ns >= 0).all() and d.accounted


def test_type3_is_unknown_under_current_layout_and_finalize_under_legacy():
    recs = [(0, 0, 0, 0, 0, 100), (0, 0, 1, 1, 0, 200), (0, 0, 2, 3, 0, 300)]
    d = decode(lanes_buffer(1, 1, recs, 3), layout="flashinfer")
    assert d.anomalies.counts() == {"unknown_type": 1} and d.accounted
    # Left to detection, a type-3 record is what tells the older layout (which defines 'finalize') apart.
    assert decode(lanes_buffer(1, 1, recs, 3)).layout.name == "flashinfer_legacy"
    legacy = decode(lanes_buffer(2, 2, recs, 3, layout="flashinfer_legacy"), layout="flashinfer_legacy")
    assert len(legacy.instants) == 1 and legacy.instants.event[0] == -1 and legacy.accounted


def test_stale_records_in_slack_are_tag_mismatches():
    begin = np.arange(4 * 2).reshape(4, 2) * 1000 + 1000
    buf = phase_buffer(begin, begin + 100, [0, 1], spare=2)
    buf[-1] = np.uint64(0xDEADBEEF_12345678)  # garbage in the last slot of lane 3
    d = decode(buf)
    assert d.anomalies.counts() == {"tag_mismatch": 1}
    assert d.notes["lane_full"] == 1 and d.accounted


def test_full_lane_and_holes_are_noted():
    recs = [(0, 0, 0, 0, 0, 100), (0, 0, 1, 1, 0, 200), (1, 0, 0, 0, 0, 100), (1, 0, 2, 1, 0, 300)]
    d = decode(lanes_buffer(2, 1, recs, 3))
    assert d.notes == {"holes": 1, "lane_full": 1}
    assert d.note_examples["holes"] == [1]


def test_blocks_over_4095_alias_and_sm_repair(tmp_path):
    nb = 4100
    sm = np.zeros(nb, np.int64)
    sm[4096] = 74  # tagged 75: ambiguous (74 or 75)
    sm[4097] = 130  # 130 | 1 = 131 -> 130 or 131; with 131 SMs only 130 is possible
    recs = [(b, 0, s, s, 0, 1000 + 10 * s) for b in (0, 4096, 4097, 4099) for s in (0, 1)]
    path = write_buffer(tmp_path, lanes_buffer(nb, 1, recs, 2, sm=sm), meta={"device": {"multiprocessors": 131}})
    d = decode(path)
    assert d.accounted and len(d.slices) == 4 and d.layout.name == "flashinfer"
    by_block = dict(zip(d.slices.block.tolist(), d.slices.sm.tolist()))
    assert by_block == {0: 0, 4096: -1, 4097: 130, 4099: 0} or by_block[4099] == -1
    assert d.aliasing["blocks_over_4095"] == 3 and d.aliasing["sm_untrusted_blocks"] >= 1


def test_empty_buffer_is_reported_not_an_error():
    buf = np.zeros(1 + 4 * 3, np.uint64)
    buf[0] = 4 | (1 << 32)
    d = decode(buf)
    assert d.records == 0 and d.accounted and len(d.slices) == 0


def test_inputs_bin_npy_bytes_array_uint32(tmp_path):
    begin = np.arange(2 * 2).reshape(2, 2) * 1000 + 1000
    buf = phase_buffer(begin, begin + 100, [0, 1])
    np.save(tmp_path / "b.npy", buf)
    views = [buf, buf.tobytes(), buf.view(np.uint32), tmp_path / "b.npy", write_buffer(tmp_path, buf)]
    got = [decode(v).slices.dur_ns.tolist() for v in views]
    assert all(g == [100] * 4 for g in got)


def test_torch_tensor_input():
    torch = pytest.importorskip("torch")
    begin = np.arange(2 * 2).reshape(2, 2) * 1000 + 1000
    buf = phase_buffer(begin, begin + 100, [0, 1])
    t = torch.from_numpy(buf.view(np.int64).copy())
    assert len(decode(t).slices) == 4


@pytest.mark.parametrize("words,needle", [
    (np.zeros(0, np.uint64), "empty file"),
    (np.array([0, 1, 2], np.uint64), "impossible header"),
    (np.array([100 | (1 << 32), 1, 2], np.uint64), "only 2 record slots"),
])
def test_bad_headers(words, needle):
    with pytest.raises(InputError, match=needle):
        decode(words)


def test_names_list_shorter_than_indices_used():
    begin = np.arange(2 * 3).reshape(2, 3) * 1000 + 1000
    buf = phase_buffer(begin, begin + 100, [0, 1, 2])
    with pytest.raises(InputError, match="up to 2"):
        decode(buf, events="load,compute")
    d = decode(buf, events=["load", "compute", "reduce"])
    assert d.launch.event_name(2) == "reduce"


def test_sidecar_names_short_marks_unknown_events(tmp_path):
    begin = np.arange(2 * 3).reshape(2, 3) * 1000 + 1000
    path = write_buffer(tmp_path, phase_buffer(begin, begin + 100, [0, 1, 2]), meta={"event_names": ["a", "b"]})
    d = decode(path)
    assert d.anomalies.counts() == {"unknown_event": 4} and d.accounted


def test_ktrace_producer_trailer_overflow_and_anchor(tmp_path):
    # ktrace's header: masked block field (exact SM byte), a trailer of per-lane overflow counts and a
    # 64-bit timer anchor; instants advance the pointer, so a trailing instant is not a loss.
    nb, cap = 4097, 2
    anchor = 1_764_000_000_000_000_123
    lanes = nb
    recs = [(b, 0, s, t, 0, anchor + 1000 + 100 * s) for b in (0, 4096) for s, t in ((0, 0), (1, 1))]
    r = np.array(recs, dtype=np.int64)
    b, g, s, t, e, ts = r.T
    sm = np.where(b == 4096, 74, 3)
    tag = (sm << 24) | ((b & 0xFFF) << 12) | (e << 2) | t
    body = place_records(nb, 1, b, g, s, tag, ts, cap)
    over = np.zeros(lanes, np.uint64)
    over[4096] = 5
    words = np.concatenate([body, over, np.array([anchor], np.uint64)])
    meta = {"producer": "ktrace", "buffer": {"records_per_lane_capacity": cap, "trailer": True}}
    d = decode(write_buffer(tmp_path, words, meta=meta))
    assert d.accounted and len(d.slices) == 2
    assert dict(zip(d.slices.block.tolist(), d.slices.sm.tolist())) == {0: 3, 4096: 74}
    assert d.time_origin == "kernel timer anchor"
    assert d.slices.begin_ns.tolist() == [anchor + 1000] * 2
    assert d.notes["overflow"] == 1 and d.dropped_records == 5
    # The same words with a sidecar that gets the capacity wrong: a clear error, not a misread.
    bad = dict(meta, buffer={"records_per_lane_capacity": 3, "trailer": True})
    with pytest.raises(InputError, match="trailer"):
        decode(write_buffer(tmp_path, words, name="bad", meta=bad))


def test_huge_buffer_path_transposes_and_decodes_the_same(tmp_path, monkeypatch):
    # A buffer read from a file and decoded in several lane ranges through the lane-major copy gives the
    # same result as decoding it whole in memory.
    from ktrace.api import summarize
    from ktrace.decoding import BufferDecoder

    rng = np.random.default_rng(5)
    lanes, steps = 12, 40
    begin = np.cumsum(rng.integers(100, 5000, (lanes, steps)), axis=1) + (WRAP - 60_000)
    buf = phase_buffer(begin, begin + rng.integers(0, 90, (lanes, steps)), np.arange(steps) % 3, num_groups=2,
                       sm=np.arange(6), spare=3)
    buf = np.concatenate([buf, np.zeros(5, np.uint64)])  # a partial last row too
    path = write_buffer(tmp_path, buf)
    whole = decode(buf)
    from ktrace.decoding import source

    monkeypatch.setattr(source, "_MAP_MIN_BYTES", 0)
    monkeypatch.setattr(BufferDecoder, "TRANSPOSE_MIN_BYTES", 0)
    monkeypatch.setattr(BufferDecoder, "PART_RECORDS", 100)
    dec = BufferDecoder(path)
    assert dec._lane_major is not None and len(dec.part_ranges()) > 1
    parts = list(dec.parts())
    got = np.concatenate([p.slices.begin_ns for p in parts]), np.concatenate([p.slices.end_ns for p in parts])
    assert got[0].tolist() == whole.slices.begin_ns.tolist() and got[1].tolist() == whole.slices.end_ns.tolist()
    _, summary = summarize(path)
    assert summary.records == whole.records and summary.accounted and summary.slices == len(whole.slices)
    # Copied a few rows at a time by several threads: the same lane-major file.
    from ktrace.decoding import lanes as lane_io

    from ktrace.runtime import config

    monkeypatch.setattr(lane_io, "BLOCK_WORDS", 2 * lanes)
    monkeypatch.setattr(config, "available_cores", lambda: 4)
    for serial in ("transpose", ""):  # one thread, then 4
        monkeypatch.setenv("KTRACE_SERIAL", serial)
        copied = BufferDecoder(path)
        assert copied._lane_major.read_bytes() == dec._lane_major.read_bytes()
        assert [p.slices.begin_ns.tolist() for p in copied.parts()] == [p.slices.begin_ns.tolist() for p in parts]


def test_mapped_npy_and_bin_read_the_same(tmp_path, monkeypatch):
    from ktrace.decoding import source

    monkeypatch.setattr(source, "_MAP_MIN_BYTES", 0)  # map even small files
    begin = np.arange(3 * 4).reshape(3, 4) * 1000 + 1000
    buf = phase_buffer(begin, begin + 100, [0, 1, 0, 1], spare=1)
    np.save(tmp_path / "b.npy", buf)
    for p in (tmp_path / "b.npy", write_buffer(tmp_path, buf)):
        assert source.load_buffer(p).file_offset is not None
        assert decode(p).slices.begin_ns.tolist() == decode(buf).slices.begin_ns.tolist()
