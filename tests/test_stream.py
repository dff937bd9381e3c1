"""The numpy engine (``stream_figures``: a range of lanes at a time, narrow columns, chunked cross-lane
sweeps) gives the same figures however the buffer is cut (one part and one chunk, ``numpy_figures``, or many
of each), and those are the SQL package's: on every real capture, on random buffers of every shape cut into
many parts and chunks, and on the benchmark's synthetic buffer at the size where 'auto' switches to it."""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import interruptible, wait_until
from ktrace import api, decode
from ktrace.analysis import decoder_figures, numpy_figures, sql_figures, stream_figures
from ktrace.decoding import BufferDecoder
from ktrace.decoding.encode import encode_tags, place_records

from conftest import SAMPLES, quick_first

CAPTURES = sorted(Path(p).stem for p in glob.glob(os.path.join(SAMPLES, "*.bin")))


def _stream(dec: BufferDecoder, blocks_per_part: int | None, chunk_rows: int):
    rpp = None if blocks_per_part is None else blocks_per_part * dec.capacity_per_lane * dec.launch.num_groups
    return stream_figures(dec.parts(rpp), chunk_rows=chunk_rows)


@pytest.mark.parametrize("name", CAPTURES)
def test_parts_and_chunks_equal_one_part_on_every_capture(name):
    dec = BufferDecoder(os.path.join(SAMPLES, f"{name}.bin"))
    ref = numpy_figures(dec.decode())
    assert _stream(dec, None, 1 << 21).differences(ref) == []
    # Small parts (one block each, or at most ~64 parts) and chunks of a few slices: every merge across
    # parts and chunks is exercised.
    blocks = -(-dec.launch.num_blocks // 64)
    assert len(dec.part_ranges(blocks * dec.capacity_per_lane * dec.launch.num_groups)) > 1
    assert _stream(dec, blocks, 7).differences(ref) == []


def _random_buffer(seed: int):
    """A buffer of random shape: 1-30 blocks on fewer SMs (waves), 1-3 groups, 1-4 events, nested and
    back-to-back slices, a coarse tick with many equal times (ties, zero-length slices), gaps and overlaps
    between lanes."""
    rng = np.random.default_rng(seed)
    blocks, groups, events = int(rng.integers(1, 31)), int(rng.integers(1, 4)), int(rng.integers(1, 5))
    sms = int(rng.integers(1, blocks + 1))
    tick = int(rng.choice([32, 1000]))
    rows = []  # (block, group, seq, type, event, ts)
    for b in range(blocks):
        start = int(rng.integers(0, 50)) * tick + (b // sms) * 40 * tick
        for g in range(groups):
            t, seq = start, 0
            for _ in range(int(rng.integers(0, 12))):
                e = int(rng.integers(0, events))
                nest = events > 1 and rng.random() < 0.3
                recs = [(0, e)]
                if nest:
                    inner = (e + 1) % events
                    recs += [(0, inner), (1, inner)]
                recs.append((1, e))
                for typ, ev in recs:
                    t += int(rng.integers(0, 3)) * tick
                    rows.append((b, g, seq, typ, ev, t))
                    seq += 1
    if not rows:
        rows.append((0, 0, 0, 0, 0, 0))
        rows.append((0, 0, 1, 1, 0, tick))
    block, group, seq, rtype, event, ts = (np.array(c, np.int64) for c in zip(*rows))
    sm = block % sms
    tag = encode_tags("flashinfer", rtype, event, block, group, groups, sm=sm)
    cap = int(np.bincount(block * groups + group).max())
    words = place_records(blocks, groups, block, group, seq, tag, ts + 10**9, cap)
    return words, ",".join(f"ev{i}" for i in range(events))


@pytest.mark.parametrize("seed", quick_first(range(40), 10))
def test_parts_and_chunks_equal_one_part_on_random_shapes(seed):
    words, names = _random_buffer(seed)
    ref = numpy_figures(decode(words, events=names))
    dec = BufferDecoder(words, events=names)
    rng = np.random.default_rng(seed + 1000)
    for blocks_per_part, chunk in ((None, 1 << 21), (1, 1), (2, int(rng.integers(2, 40)))):
        assert _stream(dec, blocks_per_part, chunk).differences(ref) == [], (blocks_per_part, chunk)


def _bench_convert():
    path = Path(__file__).resolve().parents[1] / "scripts" / "bench_convert.py"
    spec = importlib.util.spec_from_file_location("_bench_convert", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_stream_equals_the_sql_package_at_the_switch_size(tmp_path):
    from ktrace.engine import open_trace

    buf, _ = _bench_convert().buffer_path(str(tmp_path), api.NUMPY_MIN_RECORDS, 2, 1)
    dec = BufferDecoder(buf)
    assert dec.body.size >= api.NUMPY_MIN_RECORDS
    fig = _stream(dec, 4, 20_000)
    trace = tmp_path / "t.perfetto-trace"
    api.convert(buf, trace)
    with open_trace(trace) as session:
        assert fig.differences(sql_figures(session)) == []
    assert fig.kernel.slices > 100_000


def test_stream_grows_its_columns_when_the_size_hint_is_short():
    dec = BufferDecoder(os.path.join(SAMPLES, "waves_ktrace.bin"))
    ref = numpy_figures(dec.decode())
    # A hint of one slice: every column grows by doubling (and widens from int8) as the parts come.
    fig = stream_figures(dec.parts(dec.capacity_per_lane * dec.launch.num_groups * 4), chunk_rows=1000,
                         max_slices=1)
    assert fig.differences(ref) == []


@pytest.mark.parametrize("what", ["no records", "instants only"])
def test_parts_of_a_buffer_without_slices_equal_one_part(what):
    blocks, groups = 3, 2
    if what == "no records":
        words = place_records(blocks, groups, [], [], [], np.zeros(0, np.uint32), [], 4)
    else:
        block = np.array([0, 1, 2]); group = np.array([0, 1, 0]); seq = np.zeros(3, np.int64)
        tag = encode_tags("flashinfer", np.full(3, 2), np.zeros(3, np.int64), block, group, groups, sm=block)
        words = place_records(blocks, groups, block, group, seq, tag, np.array([10, 20, 30]) + 10**9, 4)
    ref = numpy_figures(decode(words, events="ev0"))
    fig = stream_figures(BufferDecoder(words, events="ev0").parts(), chunk_rows=3)
    assert fig.kernel.slices == 0
    assert fig.differences(ref) == []


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 3, 7, 11, 34])  # 34: one zero-length slice, no busy SM at any time
def test_the_numpy_engine_equals_the_sql_package_on_random_shapes(seed, tmp_path):
    from ktrace.engine import open_trace

    words, names = _random_buffer(seed)
    trace = tmp_path / "t.perfetto-trace"
    api.convert(words, trace, events=names)
    with open_trace(trace) as session:
        assert numpy_figures(decode(words, events=names)).differences(sql_figures(session)) == []


@pytest.mark.parametrize("name", quick_first(["waves_ktrace", "cluster_ktrace", "pipeline_flashinfer"], 1))
def test_worker_processes_give_the_figures_of_one_process(name, monkeypatch):
    from ktrace.analysis.evidence import in_parts as evidence_stream

    # Few slices per evidence reading: the sampled evidence's passes run in the workers too.
    monkeypatch.setattr(evidence_stream, "EVIDENCE_MAX_SLICES", 64)
    from ktrace.analysis.figures.numpy import stream

    from ktrace.runtime.config import Parallelism

    # The sweeps' chunks go to the workers however few the slices.
    two_workers = Parallelism(jobs=2, cores=2, sweep_min_slices=0)
    dec = BufferDecoder(os.path.join(SAMPLES, f"{name}.bin"))
    per_part = max(1, dec.launch.num_blocks // 8) * dec.capacity_per_lane * dec.launch.num_groups
    one = decoder_figures(dec, jobs=1, chunk_rows=50, records_per_part=per_part)
    two = decoder_figures(dec, jobs=two_workers, chunk_rows=50, records_per_part=per_part)
    assert len(dec.part_ranges(per_part)) > 2 and one.kernel.slices > 100
    assert two.differences(one) == []
    assert two.wait_causes.rows() == one.wait_causes.rows() and two.lead_ins.rows() == one.lead_ins.rows()
    # The parts' columns come back by pipe where their shared-memory slots would be too large: the same.
    monkeypatch.setattr(stream, "SLOTS_MAX_BYTES", 0)
    assert decoder_figures(dec, jobs=two_workers, chunk_rows=50, records_per_part=per_part).differences(one) == []
    # Where the workers leave cores, each part's columns are copied out by threads side by side: the same.
    import threading

    from ktrace.analysis.figures.numpy import growing

    monkeypatch.setattr(stream, "SLOTS_MAX_BYTES", 1 << 30)
    monkeypatch.setattr(stream, "COPY_ROWS", 1)
    copied_by, append = set(), growing.Growing.append

    def spy(self, *a):
        copied_by.add(threading.current_thread().name.split("_")[0])
        return append(self, *a)

    monkeypatch.setattr(growing.Growing, "append", spy)
    on_8_cores = Parallelism(jobs=2, cores=8, sweep_min_slices=0)
    assert decoder_figures(dec, jobs=on_8_cores, chunk_rows=50, records_per_part=per_part).differences(one) == []
    assert copied_by == {"ktrace-copy"}


@pytest.mark.parametrize("n,chunk_rows,jobs", [(5_000_000, 1 << 20, 2), (5_000_000, 1 << 20, 16),
                                             (50_000_000, 1 << 20, 16), (500_000, 1 << 20, 2), (7, 3, 4), (1, 50, 2),
                                             (101, 50, 2)])
def test_sweep_chunks_are_balanced_over_the_workers(n, chunk_rows, jobs):
    from ktrace.analysis.figures.numpy.stream import balanced_chunk_rows

    rows = balanced_chunk_rows(n, chunk_rows, jobs)
    chunks = -(-n // rows)
    assert 1 <= rows <= chunk_rows
    if n <= chunk_rows:  # what fits one chunk stays one (no workers forked for it)
        assert rows == chunk_rows
    else:  # every worker gets as many chunks: none left a chunk behind, none idle
        assert chunks % jobs == 0 and chunks >= jobs
    assert balanced_chunk_rows(n, chunk_rows, 1) == chunk_rows


@pytest.mark.slow
def test_analyze_with_workers_writes_the_same_json(tmp_path):
    from ktrace.cli import main

    buf = os.path.join(SAMPLES, "blocks5000_ktrace.bin")
    outs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"j{jobs}.json"
        with open(out, "w") as f, contextlib.redirect_stdout(f):
            assert main(["analyze", buf, "--engine", "numpy", "--json", "--jobs", jobs]) == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] and b'"engine": "numpy"' in outs[0]


@pytest.mark.slow
@pytest.mark.parametrize("cores,asked,expected", [(32, None, 8), (32, "12", 12), (4, None, 4), (4, "12", 4),
                                                    (2, None, 1), (2, "2", 2)])
def test_numpy_workers_default_to_the_cores_up_to_eight(cores, asked, expected, monkeypatch, capsys):
    import ktrace.analysis as analysis
    from ktrace.runtime import forked
    from ktrace.cli import main

    seen = []
    real = analysis.analyze_parts

    def spy(dec, thresholds=None, *, name, progress=None, jobs=1):
        seen.append(jobs.jobs)  # the command's runtime configuration
        return real(dec, thresholds, name=name, progress=progress, jobs=min(jobs.jobs, 2))

    monkeypatch.setattr(forked, "available_cores", lambda: cores)
    monkeypatch.setattr(analysis, "analyze_parts", spy)
    monkeypatch.setattr(api, "NUMPY_MIN_RECORDS", 1)  # the sample analyzed as a large buffer is
    buf = os.path.join(SAMPLES, "blocks5000_ktrace.bin")
    assert main(["analyze", buf, "--json", *(["--jobs", asked] if asked else [])]) == 0
    assert seen == [expected] and '"engine": "numpy"' in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc") or __import__("shutil").which("pgrep") is None,
                    reason="needs /proc and pgrep to see the workers")
def test_ctrl_c_stops_the_workers_of_an_analysis(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    buf, _ = _bench_convert().buffer_path(str(tmp_path), 4_000_000, 2, 1)
    # interruptible: SIGINT as in a terminal even when the tests run in the background (``pytest &``, where the
    # child would inherit SIGINT ignored, finish its analysis and exit 0)
    p = subprocess.Popen([sys.executable, "-m", "ktrace", "analyze", buf, "--json", "--jobs", "2"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                         preexec_fn=interruptible)
    kids: list[str] = []
    deadline = time.monotonic() + 60
    while not kids and p.poll() is None and time.monotonic() < deadline:  # the workers are running
        kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
        time.sleep(0.05)
    assert kids, "no worker process seen"
    os.killpg(p.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group
    assert p.wait(timeout=30) == 130
    assert p.stderr.read().decode().strip().splitlines()[-1] == "ktrace: interrupted"
    wait_until(lambda: not [k for k in kids if os.path.exists(f"/proc/{k}")], "every worker gone (one left behind?)")


@pytest.mark.parametrize("rows, ks, chunks, piece", [(0, 5, 2, 4), (1, 3, 2, 4), (1000, 50, 7, 64),
                                                     (100_000, 300, 48, 4096), (5000, 10, 3, 10**6),
                                                     (70_000, 400, 300, 1000)])
def test_the_sweeps_rows_by_chunk_are_a_stable_sort_of_their_chunks(rows, ks, chunks, piece):
    # chunk_order sorts a piece of rows at a time into one array; numpy's stable argsort of the whole column
    # is the definition (each chunk's rows in row order), whatever the pieces and however many chunks.
    from ktrace.analysis.figures.numpy.instance_math import chunk_order

    rng = np.random.default_rng(rows + chunks)
    k = rng.integers(0, ks, rows).astype(np.int16)
    edges = np.r_[0, np.sort(rng.choice(np.arange(1, ks), chunks - 1, replace=False)), ks]
    lut = np.zeros(ks, np.uint8 if chunks <= 256 else np.uint16)
    for i in range(chunks):
        lut[edges[i]:edges[i + 1]] = i
    cum = np.r_[0, np.cumsum(np.bincount(k, minlength=ks))]
    got = chunk_order(lut, k, [int(cum[e]) for e in edges[:-1]] + [rows], piece)
    assert got.tolist() == np.argsort(lut[k], kind="stable").tolist()
    assert got.dtype.itemsize <= 4


@pytest.mark.parametrize("lanes, steps, chunks, piece", [(264, 400, 7, 1000), (3, 5000, 40, 64), (1, 5000, 3, 1 << 20),
                                                        (5, 30000, 300, 777)])
def test_rows_by_chunk_from_lanes_runs_are_the_stable_sort(lanes, steps, chunks, piece):
    # Lanes whose instance numbers ascend (every lane of a regular buffer) hold each chunk's rows as one run:
    # the runs sorted by chunk are the stable argsort of the whole column, written in pieces of any size.
    from ktrace.analysis.figures.numpy.instance_math import _by_runs, chunk_order

    rng = np.random.default_rng(lanes * steps)
    k = np.concatenate([np.sort(rng.integers(0, steps, int(rng.integers(steps // 2, 2 * steps))))
                        for _ in range(lanes)]).astype(np.int32)
    edges = np.r_[0, np.sort(rng.choice(np.arange(1, steps), chunks - 1, replace=False)), steps]
    lut = np.zeros(steps, np.uint8 if chunks <= 256 else np.uint16)
    for i in range(chunks):
        lut[edges[i]:edges[i + 1]] = i
    cum = np.r_[0, np.cumsum(np.bincount(k, minlength=steps))]
    want = np.argsort(lut[k], kind="stable")
    assert _by_runs(lut[k], np.empty(len(k), np.int64), piece)  # the runs' way is the one taken
    got = chunk_order(lut, k, [int(cum[e]) for e in edges[:-1]] + [len(k)], piece)
    assert got.tolist() == want.tolist() and got.dtype.itemsize <= 4


@pytest.mark.parametrize("runs", [False, True])
@pytest.mark.parametrize("jobs, piece", [(2, 1000), (3, 777), (2, 1 << 20)])
def test_rows_by_chunk_sorted_by_workers_are_the_stable_sort(runs, jobs, piece, monkeypatch):
    # With workers, ranges of rows are counted, then sorted side by side, each writing its rows of every chunk
    # into shared memory after those of the ranges before it: the stable argsort of the whole column, for
    # rows in short runs (random) and in lanes' long runs, in ranges of any size.
    from ktrace.analysis.figures.numpy import instance_math
    from ktrace.runtime.forked import shared_array

    monkeypatch.setattr(instance_math, "PIECE_ROWS", piece)
    rng = np.random.default_rng(jobs * piece + runs)
    steps, chunks = 3000, 40
    if runs:
        k = np.concatenate([np.sort(rng.integers(0, steps, int(rng.integers(steps // 2, 2 * steps))))
                            for _ in range(7)]).astype(np.int32)
    else:
        k = rng.integers(0, steps, 20_000).astype(np.int16)
    edges = np.r_[0, np.sort(rng.choice(np.arange(1, steps), chunks - 1, replace=False)), steps]
    lut = np.zeros(steps, np.uint8)
    for i in range(chunks):
        lut[edges[i]:edges[i + 1]] = i
    cum = np.r_[0, np.cumsum(np.bincount(k, minlength=steps))]
    out = shared_array(len(k), np.int32)
    from ktrace.runtime.config import Stage

    got = instance_math.chunk_order_forked(lut, k, [int(cum[e]) for e in edges[:-1]] + [len(k)], out,
                                           Stage("sweeps", jobs))
    assert got is out and out.tolist() == np.argsort(lut[k], kind="stable").tolist()


@pytest.mark.parametrize("name", ["nested_ktrace", "pipeline_flashinfer", "cluster_ktrace"])
def test_sampled_evidence_read_in_small_pieces_equals_whole_ranges(name, monkeypatch):
    # The sampled evidence reads each range in pieces of top-level slices, each piece one slice longer for
    # the gap after its end: pieces of 5 slices (nested slices leave gaps in the rows) give what one piece
    # per range gives.
    from ktrace.analysis.evidence import in_parts as evidence_stream

    monkeypatch.setattr(evidence_stream, "EVIDENCE_MAX_SLICES", 64)
    dec = BufferDecoder(os.path.join(SAMPLES, f"{name}.bin"))
    whole = decoder_figures(dec, chunk_rows=50)
    monkeypatch.setattr(evidence_stream, "PIECE_ROWS", 5)
    pieces = decoder_figures(dec, chunk_rows=50)
    assert whole.kernel.slices > 100 and (whole.wait_causes.tested_gaps < whole.wait_causes.count).any()
    assert pieces.wait_causes.rows() == whole.wait_causes.rows()
    assert pieces.lead_ins.rows() == whole.lead_ins.rows()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cluster_ktrace", "warpgroups_flashinfer", "fi_mla_decode_run1"])
def test_evidence_boundaries_tested_side_by_side_give_the_rows_of_one_thread(name, monkeypatch):
    # With cores the workers leave, the evidence's boundaries are tested in threads and the lead-ins beside
    # them: the same tables as one thread gives.
    from ktrace.analysis.evidence import in_parts as evidence_stream
    from ktrace.analysis.figures.numpy import stream

    calls = []
    finish = evidence_stream.finish_evidence
    monkeypatch.setattr(stream, "finish_evidence", lambda read, threads=1: calls.append(threads) or finish(read, threads))
    from ktrace.runtime.config import Parallelism

    path = os.path.join(SAMPLES, f"{name}.bin" + (".gz" if name.startswith("fi_") else ""))
    one = decoder_figures(BufferDecoder(path), jobs=1, chunk_rows=50)
    on_16_cores = Parallelism(jobs=3, cores=16, sweep_min_slices=0)  # 13 cores left: 3 threads (at most 4)
    three = decoder_figures(BufferDecoder(path), jobs=on_16_cores, chunk_rows=50)
    assert calls == [1, 3] and len(one.wait_causes) >= 2
    assert three.wait_causes.rows() == one.wait_causes.rows() and three.lead_ins.rows() == one.lead_ins.rows()
