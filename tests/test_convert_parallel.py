"""``ktrace convert --jobs N``: worker processes write the very bytes one process writes, errors and Ctrl-C included."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from ktrace import convert
from ktrace.decoding import BufferDecoder
from ktrace.decoding.encode import phase_buffer
from ktrace.core.errors import InputError
from ktrace.export.workers import fork_context
from ktrace.export.writer import trace_chunks

from conftest import SAMPLE_NAMES, interruptible, run_ktrace, sample, write_buffer

pytestmark = pytest.mark.skipif(fork_context() is None, reason="no fork: parts are written in process")


def _small_parts(source, records: int, **options) -> BufferDecoder:
    """A decoder whose parts are ``records`` slots and whose batches (a worker's unit) one part or so."""
    dec = BufferDecoder(source, **options)
    dec.PART_RECORDS = records
    dec.reader.BAND_BYTES = 8 * records
    return dec


def _bytes(dec, jobs: int, tracks: str = "sm") -> bytes:
    return b"".join(trace_chunks(dec, tracks, jobs=jobs))


def _damaged_buffer(blocks: int = 24, groups: int = 2, steps: int = 30) -> np.ndarray:
    """Phases on every lane, then damage that needs what earlier parts declared: a tag that disagrees with
    its position, and partially overlapping slices (an overlap track each), in lanes of later parts only, so
    their interned names and track uuids depend on the parts before them."""
    lanes = blocks * groups
    rng = np.random.default_rng(3)
    begin = np.cumsum(rng.integers(500, 900, (lanes, steps)), axis=1) + (7 << 32) - 40_000
    end = begin + rng.integers(100, 300, (lanes, steps))
    ev = np.arange(steps) % 3
    overlapping = [lanes * 3 // 8, lanes * 5 // 8, lanes * 7 // 8]
    end[overlapping, 0] = begin[overlapping, 1] + 50  # step 0 ends after step 1 began
    buf = phase_buffer(begin, end, ev, num_groups=groups, sm=np.arange(blocks) % 7, spare=2)
    for lane in overlapping:  # records B0 B1 E0 E1, in time order
        at = 1 + np.array([1, 2]) * lanes + lane
        buf[at] = buf[at[::-1]]
    for lane in (lanes // 2 + 1, lanes - 4):  # a block field that disagrees with the lane's position: an anomaly marker
        buf[1 + 5 * lanes + lane] ^= np.uint64(1 << 13)
    return buf


@pytest.mark.parametrize("jobs", [2, 3])
def test_workers_write_the_bytes_one_process_writes(tmp_path, jobs):
    path = write_buffer(tmp_path, _damaged_buffer())
    one = _bytes(_small_parts(path, 300), 1)
    dec = _small_parts(path, 300)
    assert len(dec.part_ranges()) >= 8
    got = _bytes(dec, jobs)
    assert got == one
    # what the damage is there to test: overlap tracks and anomaly markers
    assert b"overlapping" in one and "tag mismatch".encode() in one


@pytest.mark.parametrize("tracks", ["sm", "block", "flat"])
def test_workers_match_on_every_track_mode(tmp_path, tracks):
    path = write_buffer(tmp_path, _damaged_buffer(blocks=12, steps=20))
    assert _bytes(_small_parts(path, 200), 2, tracks) == _bytes(_small_parts(path, 200), 1, tracks)


@pytest.mark.slow
@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_workers_match_on_every_sample(name):
    one = _bytes(_small_parts(sample(name), 4096), 1)
    assert _bytes(_small_parts(sample(name), 4096), 2) == one


def test_workers_match_on_samples_with_anomalies_and_instants():
    for name in ("nested_ktrace", "instants_flashinfer", "overflow_ktrace"):
        dec = _small_parts(sample(name), 2048)
        assert _bytes(dec, 2) == _bytes(_small_parts(sample(name), 2048), 1), name


def test_convert_jobs_gives_the_same_file_and_summary(tmp_path):
    path = write_buffer(tmp_path, _damaged_buffer())
    a = convert(_small_parts(path, 300), tmp_path / "a.perfetto-trace", jobs=1)
    b = convert(_small_parts(path, 300), tmp_path / "b.perfetto-trace", jobs=3)
    assert a.path.read_bytes() == b.path.read_bytes()
    assert a.summary == b.summary


def test_an_error_in_a_worker_is_the_error_in_process(tmp_path):
    # Names for events 0 and 1 only: event 2 first appears past the first part, and its part says so.
    lanes, steps = 16, 12
    begin = np.cumsum(np.full((lanes, steps), 700), axis=1) + 1_000
    ev = np.where(np.arange(lanes)[:, None] < 12, np.arange(steps) % 2, np.arange(steps) % 3)
    path = write_buffer(tmp_path, phase_buffer(begin, begin + 200, ev, spare=1))
    errors = []
    for jobs in (1, 2):
        with pytest.raises(InputError) as e:
            convert(_small_parts(path, 64, events="a,b"), tmp_path / f"j{jobs}.perfetto-trace", jobs=jobs)
        errors.append(str(e.value))
        assert not (tmp_path / f"j{jobs}.perfetto-trace").exists()
    assert errors[0] == errors[1] and "event names given" in errors[0]
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".part")]


def test_jobs_option_is_checked():
    code, _, err = run_ktrace("convert", sample("imbalance_ktrace"), "--jobs", "0")
    assert code == 2 and "--jobs" in err and "1 or more" in err


@pytest.mark.slow
def test_cli_jobs_writes_the_same_trace(tmp_path):
    outs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"j{jobs}.perfetto-trace"
        code, _, err = run_ktrace("convert", sample("nested_ktrace"), "-o", out, "--jobs", jobs)
        assert code == 0, err
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


def _big_buffer(tmp_path, records: int = 3_000_000, events: str | None = None):
    """A buffer of a few batches at the default part and band sizes (so the command line uses workers)."""
    blocks, groups = 66, 2
    steps = records // (2 * blocks * groups)
    begin = np.cumsum(np.full((blocks * groups, steps), 900, np.int64), axis=1) + 5_000
    ev = np.broadcast_to(np.arange(steps) % 3, (blocks * groups, steps)).copy()
    ev[-4:, steps // 2] = 3  # an event only the last lanes use
    return write_buffer(tmp_path, phase_buffer(begin, begin + 300, ev, num_groups=groups, spare=2))


@pytest.mark.slow
def test_cli_error_in_a_worker_exits_2_as_in_process(tmp_path):
    path = _big_buffer(tmp_path)
    got = []
    for jobs in ("1", "2"):
        got.append(run_ktrace("convert", path, "-o", tmp_path / "t.perfetto-trace", "--jobs", jobs,
                              "--events", "a,b,c"))
    assert got[0][0] == got[1][0] == 2
    assert got[0][2] == got[1][2] and "event names given" in got[1][2]
    assert not (tmp_path / "t.perfetto-trace").exists()


@pytest.mark.slow
def test_ctrl_c_stops_the_workers_too(tmp_path):
    path = _big_buffer(tmp_path, 12_000_000)
    code = "import sys; from ktrace.cli import main; sys.exit(main(sys.argv[1:]))"
    p = subprocess.Popen([sys.executable, "-c", code, "convert", str(path), "-o", str(tmp_path / "t.perfetto-trace"),
                          "--jobs", "2"], preexec_fn=lambda: (os.setpgrp(), interruptible()),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    workers = []
    deadline = time.monotonic() + 60
    while not workers and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.05)
        workers = _children(p.pid)
    assert workers, "no worker process started"
    os.killpg(p.pid, signal.SIGINT)  # as a terminal does: the whole foreground group
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    gone = time.monotonic() + 10  # a stopped worker is reaped before the parent exits; a loaded machine is slow
    while time.monotonic() < gone:
        try:
            os.killpg(p.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    with pytest.raises(ProcessLookupError):
        os.killpg(p.pid, 0)  # nothing of the group is left
    assert not (tmp_path / "t.perfetto-trace").exists()
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".part")]


def _children(pid: int) -> list:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out
