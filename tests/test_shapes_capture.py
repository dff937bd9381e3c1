"""The kernel-shape captures (samples/kernels/{waves,straggler_change,worklist,nested,late_start}.py, and the
second runs waves_run2_ktrace / imbalance_run2_ktrace), decoded on the CPU and held against the ground truth
their kernels recorded on the GPU apart from the profiler: each block's %smid and its 64-bit %globaltimer at
block start and end (``block_begin_ns`` / ``block_end_ns``), the tiles each worklist CTA took, and the facts
each shape was built to show."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import ktrace

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
KERNELS = SAMPLES / "kernels"
WRAP = 1 << 32
SHAPES = ("waves", "straggler_change", "worklist", "nested", "late_start")
SOURCES = {"waves.cu": "waves", "straggler_change.cu": "persistent_table", "worklist.cu": "worklist",
           "nested.cu": "nested", "late_start.cu": "late_start"}


def _captures(*stems: str) -> list[str]:
    out = []
    for stem in stems:
        out += sorted(p.stem for p in SAMPLES.glob(f"{stem}_*.bin") if p.stem.removeprefix(stem + "_")
                      in ("ktrace", "flashinfer", "run2_ktrace"))
    return out


ALL = _captures(*SHAPES)


def _load(name):
    meta = json.loads((SAMPLES / f"{name}.json").read_text())
    return meta, ktrace.decode(SAMPLES / f"{name}.bin")


def _extents(d, nb):
    """Each block's first decoded begin and last decoded end."""
    s = d.slices
    first = np.full(nb, np.iinfo(np.int64).max)
    last = np.full(nb, np.iinfo(np.int64).min)
    np.minimum.at(first, s.block, s.begin_ns)
    np.maximum.at(last, s.block, s.end_ns)
    return first, last


def _on_clock(d, first, last, begin):
    """The decoded times on the 64-bit clock's axis: they are Unix ns already when the decoder had an anchor
    (ktrace's kernel anchor; FlashInfer's buffers: the host clock at launch fixes the high bits), up to whole
    2^32 ns wraps if the host clock were off by more than 2 s."""
    assert d.time_origin in ("kernel timer anchor", "host clock at launch")
    shift = int(np.round(np.median(first - begin) / WRAP)) * WRAP
    return first - shift, last - shift


def test_every_shape_was_captured_with_both_headers():
    for stem in SHAPES:
        assert (SAMPLES / f"{stem}_ktrace.bin").exists() and (SAMPLES / f"{stem}_flashinfer.bin").exists(), stem
    for stem in ("waves_run2_ktrace", "imbalance_run2_ktrace"):
        assert (SAMPLES / f"{stem}.bin").exists(), stem


@pytest.mark.parametrize("name", ALL)
def test_shape_capture_matches_the_clock_and_smid(name):
    meta, d = _load(name)
    gt = meta["ground_truth"]
    nb = meta["num_blocks"]
    begin, end = np.asarray(gt["block_begin_ns"], np.int64), np.asarray(gt["block_end_ns"], np.int64)
    assert len(begin) == len(end) == nb and (begin > 0).all() and (end > begin).all()
    assert d.accounted and not d.anomalies.counts()
    assert (SAMPLES / f"{name}.bin").stat().st_size < 2 << 20
    assert meta["checks"]["ground_truth_holds"] is True
    # every block's slices lie within its own [start, end] on the 64-bit clock
    first, last = _on_clock(d, *_extents(d, nb), begin)
    assert np.array_equal(np.unique(d.slices.block), np.arange(nb))
    assert (first >= begin).all() and (last <= end).all()
    # and the slices' SMs are the blocks' true SMs
    smid = np.asarray(meta["block_smid"])
    assert (d.slices.sm == smid[d.slices.block]).all()
    assert gt["last_block_by_clock"] == int(np.argmax(end))
    if meta["producer"] == "ktrace":
        assert d.launch.timer_anchor_ns == meta["timer"]["anchor_ns"]
        assert begin.min() <= meta["timer"]["anchor_ns"] <= end.max()


def _slices_of(d, event):
    s = d.slices
    m = s.event == event
    return s.block[m], s.k[m], s.begin_ns[m], s.end_ns[m]


@pytest.mark.parametrize("name", _captures("waves"))
def test_waves_end_in_a_tail_of_the_heavy_blocks(name):
    meta, d = _load(name)
    gt = meta["ground_truth"]
    nb, heavy = meta["num_blocks"], gt["heavy_blocks"]
    sms = meta["device"]["multiprocessors"]
    assert nb == gt["waves_planned"] * sms and heavy == list(range(nb - len(heavy), nb))
    per_sm = np.bincount(np.asarray(meta["block_smid"]), minlength=sms)
    assert per_sm.tolist() == gt["blocks_per_sm_observed"] and per_sm.sum() == nb
    assert len(d.slices) == 3 * nb
    end = np.asarray(gt["block_end_ns"])
    _, last = _extents(d, nb)
    assert sorted(np.argsort(last)[-len(heavy):].tolist()) == heavy
    assert sorted(np.argsort(end)[-len(heavy):].tolist()) == heavy
    assert gt["last_block_by_clock"] in heavy
    # in the tail only the heavy blocks run: every other block had ended
    assert gt["blocks_running_after_last_light_block_ended"] == len(heavy)
    # one block per SM at a time: a block starts on its SM after the one before it there ended
    begin = np.asarray(gt["block_begin_ns"])
    smid = np.asarray(meta["block_smid"])
    for sm in range(sms):
        on = np.flatnonzero(smid == sm)
        o = on[np.argsort(begin[on])]
        assert (begin[o][1:] >= end[o][:-1]).all(), sm
    # the heavy blocks' compute is about HEAVY_MULT times the others'
    blk, _, b, e = _slices_of(d, 1)
    dur = e - b
    ratio = np.median(dur[np.isin(blk, heavy)]) / np.median(dur[~np.isin(blk, heavy)])
    assert 0.8 * gt["compute_work_multiplier_heavy"] < ratio < 1.2 * gt["compute_work_multiplier_heavy"]


def _last_finishers(d, event, n):
    blk, k, _, e = _slices_of(d, event)
    out = []
    for i in range(n):
        m = k == i
        out.append(int(blk[m][e[m] == e[m].max()].min()))
    return out


@pytest.mark.parametrize("name", _captures("straggler_change"))
def test_straggler_changes_halfway(name):
    meta, d = _load(name)
    gt = meta["ground_truth"]
    iters = gt["iterations"]
    segs = gt["straggler_segments"]
    assert segs == [{"block": 17, "first_k": 0, "last_k": 7}, {"block": 90, "first_k": 8, "last_k": 15}]
    expected = [next(s["block"] for s in segs if s["first_k"] <= k <= s["last_k"]) for k in range(iters)]
    assert gt["slow_block_per_iter"] == expected
    assert _last_finishers(d, 1, iters) == expected
    assert len(d.slices) == meta["num_blocks"] * 3 * iters
    blk, k, b, e = _slices_of(d, 1)
    for it in range(iters):
        m = k == it
        slow = e[m][blk[m] == expected[it]][0] - b[m][blk[m] == expected[it]][0]
        assert slow > 2 * np.median((e - b)[m][blk[m] != expected[it]])


@pytest.mark.parametrize("name", _captures("worklist"))
def test_worklist_instances_are_the_tiles_each_cta_took(name):
    meta, d = _load(name)
    gt = meta["ground_truth"]
    nb = meta["num_blocks"]
    tiles = np.asarray(gt["tiles_per_cta"])
    tile_cta = np.asarray(gt["tile_cta"])
    assert tiles.sum() == gt["num_tiles"] == len(tile_cta)
    assert np.array_equal(np.bincount(tile_cta, minlength=nb), tiles)
    assert tiles.max() <= gt["max_tiles_per_cta"] and tiles.min() < tiles.max()  # uneven
    s = d.slices
    for e in (0, 1):
        assert np.array_equal(np.bincount(s.block[s.event == e], minlength=nb), tiles)
    # a CTA's instance k is its k-th tile: heavy tiles (t % every == 0) have the long compute slices
    every = gt["heavy_tile_every"]
    order = [np.flatnonzero(tile_cta == b) for b in range(nb)]  # tiles of each CTA, ascending = taken order
    blk, k, b, e = _slices_of(d, 1)
    heavy = np.array([order[x][i] % every == 0 for x, i in zip(blk, k)])
    assert heavy.sum() == len(range(0, gt["num_tiles"], every))
    dur = e - b
    assert dur[heavy].min() > dur[~heavy].max()


@pytest.mark.parametrize("name", _captures("nested"))
def test_nested_outer_holds_both_inner_slices_with_a_gap(name):
    meta, d = _load(name)
    gt = meta["ground_truth"]
    nb, iters = meta["num_blocks"], gt["iterations"]
    assert meta["event_names"] == ["outer", "inner_a", "inner_b"]
    t = {}
    for e in range(3):
        blk, k, b, en = _slices_of(d, e)
        assert len(blk) == nb * iters
        key = blk * iters + k
        bb, ee = np.empty(nb * iters, np.int64), np.empty(nb * iters, np.int64)
        bb[key], ee[key] = b, en
        t[e] = (bb, ee)
    (ob, oe), (ab, ae), (bb, be) = t[0], t[1], t[2]
    assert ((ob <= ab) & (ae < bb) & (be <= oe)).all()
    assert not d.slices.overlap.any()  # nested, never partially overlapping
    gap = bb - ae
    assert np.median(gap) > 0.1 * np.median(oe - ob)


@pytest.mark.parametrize("name", _captures("late_start"))
def test_late_start_block_is_last_because_it_started_late(name):
    meta, d = _load(name)
    gt = meta["ground_truth"]
    nb, late = meta["num_blocks"], gt["late_block"]
    assert gt["last_block_by_clock"] == late
    first, last = _extents(d, nb)
    assert int(np.argmax(last)) == late
    others = np.arange(nb) != late
    assert first[late] - np.median(first[others]) > 0.8 * gt["late_spin_ns"]
    blk, _, b, e = _slices_of(d, 0)
    dur = e - b
    assert 0.9 < dur[blk == late][0] / np.median(dur[blk != late]) < 1.1  # the same work as everyone's
    # the 64-bit clock: it started with the others; its first probe came after the spin
    begin = np.asarray(gt["block_begin_ns"])
    assert begin[late] - np.median(begin[others]) < 0.25 * gt["late_spin_ns"]
    first_c, _ = _on_clock(d, first, last, begin)
    assert first_c[late] - begin[late] >= gt["late_spin_ns"]


@pytest.mark.parametrize("stem", ["waves", "imbalance"])
def test_second_runs_are_the_same_kernel_on_the_same_inputs(stem):
    a = json.loads((SAMPLES / f"{stem}_ktrace.json").read_text())
    b = json.loads((SAMPLES / f"{stem}_run2_ktrace.json").read_text())
    for key in ("kernel", "grid", "block", "dynamic_smem_bytes", "event_names", "num_blocks"):
        assert a[key] == b[key], key
    ga, gb = a["ground_truth"], b["ground_truth"]
    assert ga["description"] == gb["description"]
    da, db = ktrace.decode(SAMPLES / f"{stem}_ktrace.bin"), ktrace.decode(SAMPLES / f"{stem}_run2_ktrace.bin")
    assert len(da.slices) == len(db.slices)
    # two runs differ by noise only: the median slice of each phase within 10%
    for e in range(len(a["event_names"])):
        ma = np.median(da.slices.dur_ns[da.slices.event == e])
        mb = np.median(db.slices.dur_ns[db.slices.event == e])
        assert abs(ma - mb) <= 0.1 * max(ma, mb) + 200, (e, ma, mb)


nvcc = shutil.which("nvcc")


@pytest.mark.skipif(nvcc is None, reason="nvcc is not installed")
@pytest.mark.slow
def test_shape_kernels_compile_against_each_header(tmp_path):
    from ktrace.capture import BuildSpec, find_flashinfer_include, resolve_header

    choices = [resolve_header("ktrace")]
    if find_flashinfer_include()[0] is not None:
        choices.append(resolve_header("flashinfer"))
    failed = []
    for choice in choices:
        for fname, fn in SOURCES.items():
            spec = BuildSpec((KERNELS / fname).read_text(), fn, choice, fname, (str(KERNELS),))
            for instrumented in (True, False):
                src = tmp_path / f"{choice.producer}_{fname}_{int(instrumented)}.cu"
                src.write_text(spec.text())
                r = subprocess.run([nvcc, "--cubin", "-arch=sm_90a", *spec.nvcc_options(instrumented),
                                    *[f"-I{d}" for d in spec.all_include_dirs()], str(src), "-o",
                                    str(src.with_suffix(".cubin"))], capture_output=True, text=True, timeout=120)
                if r.returncode or "warning" in r.stderr:
                    failed.append(f"{choice.producer} {fname} instrumented={instrumented}:\n{r.stderr}")
    assert not failed, "\n".join(failed)
