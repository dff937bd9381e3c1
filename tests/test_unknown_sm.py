"""Blocks whose SM id is untrusted ("SM unknown": FlashInfer's tag ORs the block index's bit 12 and up into the SM
byte, so past block 4095 two SM ids fit): never idle SMs, never in an SM's slots, but among the blocks and waves,
and counted in analyze's data-quality lines.

The hand-made capture: 5000 blocks of ~7.06 µs on 132 SMs x 8 resident blocks (1056 slots), each block taking
the slot freed first, as the hardware hands them out. Truth: 5000 / 1056 = 4.73 waves, the last wave 73% full,
so the wall holds 5 block times where 4.73 would do (0.265 x 7.06 µs = 1.87 µs); every SM runs blocks of the last
wave to within a few ticks of the end (the true tail is under 0.1 µs). Blocks 4096-4999 (904) are SM unknown.
"""

from __future__ import annotations

import heapq
import json

import numpy as np
import pytest

from conftest import SAMPLES, run_ktrace, write_buffer
from ktrace import analyze
from ktrace.decoding.encode import phase_buffer

BLOCKS, SMS, PER_SM, DUR_NS, STORE_NS = 5000, 132, 8, 7000, 200


def _capture():
    """(buffer words, block begin ns, block end ns, true SM per block)."""
    slots = [(1_000_000, s) for s in range(SMS * PER_SM)]  # slot s is on SM s % SMS
    heapq.heapify(slots)
    begin, end, sm = (np.zeros(BLOCKS, np.int64) for _ in range(3))
    for b in range(BLOCKS):  # a loop over blocks to build the truth: each takes the slot freed first
        t, s = heapq.heappop(slots)
        begin[b], sm[b] = t + 64, s % SMS
        end[b] = begin[b] + DUR_NS + (b * 37 % 5) * 32
        heapq.heappush(slots, (int(end[b]), s))
    words = phase_buffer(np.stack([begin, end - STORE_NS], 1), np.stack([end - STORE_NS, end], 1), [0, 1], sm=sm,
                         spare=1)
    return words, begin, end, sm


@pytest.fixture(scope="module")
def unknown_sm(tmp_path_factory):
    d = tmp_path_factory.mktemp("unknown_sm")
    words, begin, end, sm = _capture()
    meta = {"event_names": ["work", "store"], "device": {"name": "NVIDIA H200", "multiprocessors": SMS}}
    return write_buffer(d, words, "blocks5000", meta=meta), begin, end


def _truth(begin, end):
    waves = BLOCKS / (SMS * PER_SM)
    median = float(np.sort(end - begin)[(BLOCKS - 1) // 2])
    return waves, (np.ceil(waves) - waves) * median


def test_the_blocks_past_4095_are_sm_unknown(unknown_sm):
    path, _, _ = unknown_sm
    a = analyze(path)
    o = a.occupancy
    assert o["unknown_sm_blocks"] == BLOCKS - 4096 and o["sms"] == SMS and o["blocks"] == BLOCKS


def test_unknown_sm_blocks_are_never_idle_sms(unknown_sm):
    """The last wave runs on blocks past 4095 only: the busy SMs stay at 132 until the last few ticks."""
    path, begin, end = unknown_sm
    a = analyze(path)
    o = a.occupancy
    true_tail = int(end.max() - np.sort(end)[-SMS // 2])  # from when fewer than half the SMs still run a block
    assert o["tail_ns"] <= max(true_tail, 0) + 64
    assert o["sm_busy_fraction"] > 0.95
    assert not [f for f in a.findings if f.kind == "tail" and f.severity == "warning"]


def test_waves_count_every_block_and_the_stake_is_the_partial_wave(unknown_sm):
    path, begin, end = unknown_sm
    a = analyze(path)
    s = a.slots
    waves, partial_ns = _truth(begin, end)
    assert s["slots"] == SMS * PER_SM and s["blocks"] == BLOCKS
    assert s["waves"] == pytest.approx(waves)
    top = [f for f in a.findings if f.severity == "warning"][0]
    assert top.kind == "wave_quantization"
    assert top.impact_ns == pytest.approx(partial_ns, rel=0.05)  # 1.87 µs, not a wave's worth of "tail"


def test_analyze_says_how_many_blocks_have_an_unknown_sm(unknown_sm, tmp_path):
    path, _, _ = unknown_sm
    rc, out, err = run_ktrace("analyze", path)
    assert rc == 0, err
    assert "904 of 5,000 blocks have no SM in the figures" in out
    assert "5000 blocks fill the 1056 slots 4.73 times" in out
    rc, out, err = run_ktrace("analyze", path, "--all")
    # the path's largest part here is its lead-in (the last block's SM is unknown): named, never "None"
    assert "the lead-in before the path's first slice is" in out and "None" not in out
    rc, out, err = run_ktrace("analyze", path, "--json")
    q = json.loads(out)["data_quality"]
    assert q["unknown_sm_blocks"] == 904 and any("904 of 5,000 blocks" in w for w in q["warnings"])


def test_the_trace_says_the_same(unknown_sm, tmp_path):
    """The SQL package's busy SMs and occupancy equal numpy's on the same capture."""
    path, _, _ = unknown_sm
    trace = tmp_path / "t.perfetto-trace"
    rc, _, err = run_ktrace("convert", path, "-o", trace)
    assert rc == 0, err
    a, b = analyze(path), analyze(trace)
    assert a.occupancy == b.occupancy
    assert a.figures.busy_sms.ts.tolist() == b.figures.busy_sms.ts.tolist()
    assert a.figures.busy_sms.busy_sms.tolist() == b.figures.busy_sms.busy_sms.tolist()
    assert b.data_quality.unknown_sm_blocks == 904


def test_known_sms_are_unchanged():
    """A capture with every SM known: no data-quality line, and busy SMs never above the SMs."""

    a = analyze(SAMPLES / "waves_ktrace.bin")
    assert a.data_quality.unknown_sm_blocks == 0 and not any("no SM" in w for w in a.data_quality.warnings)
    assert int(a.figures.busy_sms.busy_sms.max()) <= a.occupancy["sms"]


def test_the_line_names_flashinfers_tag_only_for_its_layout():
    from ktrace.analysis.model.data_quality import data_quality

    fi = data_quality({"records": 10, "layout": "flashinfer"}, None, 3, 10)
    other = data_quality({"records": 10, "layout": "iket"}, None, 3, 10)
    assert fi.unknown_sm_blocks == 3 and "block 4095" in fi.warnings[0]
    assert other.warnings == ("3 of 10 blocks have no SM in the figures: the capture does not say which SM ran "
                              "them. They count as busy SMs while they run, never idle ones, and in no SM's slots",)
    assert data_quality({"records": 10, "layout": "flashinfer"}).warnings == ()
