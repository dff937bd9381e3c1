"""ktrace diff with its captures analyzed in worker processes: the same report as one after the other, errors
from a worker reported as in process (file named, exit code), Ctrl-C stopping every worker."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from ktrace.decoding.encode import phase_buffer
from ktrace.core.outputs import temporary_folder, temporary_root
from ktrace.runtime.config import Parallelism
from ktrace.runtime.workers import default_jobs, run_in_workers

from conftest import ROOT, interruptible, run_ktrace, sample, wait_until

BEFORE = sample("imbalance")
AFTER = ROOT / "tests" / "data" / "imbalance_balanced_synthetic.bin"
RUNS_BEFORE = [sample("imbalance_ktrace"), sample("imbalance_run2_ktrace"), sample("imbalance_run3_ktrace")]
RUNS_AFTER = [sample("balanced_ktrace")]


def test_results_come_back_in_input_order():
    assert run_in_workers(int, ["3", "1", "2"], jobs=2) == [3, 1, 2]
    assert run_in_workers(int, ["3", "1"], jobs=1) == [3, 1]


def test_the_first_failure_in_input_order_is_raised():
    with pytest.raises(ValueError, match="'x'"):
        run_in_workers(int, ["1", "x", "y"], jobs=2)


def _leave_a_temporary_folder(suffix: str) -> str:
    return tempfile.mkdtemp(suffix=suffix, dir=temporary_root())  # made, and never removed, by the worker


@pytest.mark.slow
def test_what_the_workers_leave_in_the_temporary_folder_is_removed(tmp_path, monkeypatch):
    # A worker stopped between making a temporary folder and taking charge of it left the folder behind
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delitem(sys.modules, "wasmtime", raising=False)  # workers, even where an earlier test loaded it
    made = run_in_workers(_leave_a_temporary_folder, ["-a", "-b"], jobs=2)
    assert [Path(m).name[-2:] for m in made] == ["-a", "-b"]
    assert all(Path(m).parent.parent == tmp_path for m in made)  # in the parent's folder for the workers...
    assert not any(Path(m).exists() for m in made) and list(tmp_path.iterdir()) == []  # ...removed with it
    with temporary_folder() as mine:  # this process's own: in the system's temporary folder
        assert Path(mine).parent == tmp_path


def test_small_files_stay_in_this_process(tmp_path):
    small = tmp_path / "a.bin"
    small.write_bytes(b"\0" * 64)
    assert default_jobs([small, small]) == 1
    big = tmp_path / "b.bin"
    big.write_bytes(b"\0" * Parallelism.captures_min_bytes)
    assert 1 <= default_jobs([big, big, big]) <= min(3, len(os.sched_getaffinity(0)))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["--json", "--all"])
def test_parallel_diff_is_the_serial_diff(fmt):
    serial = run_ktrace("diff", BEFORE, AFTER, fmt, "--jobs", "1")
    parallel = run_ktrace("diff", BEFORE, AFTER, fmt, "--jobs", "2")
    assert serial[0] == parallel[0] == 0, serial[2] + parallel[2]
    assert parallel[1] == serial[1] and "compute" in serial[1]


@pytest.mark.slow
def test_parallel_diff_of_several_runs_is_the_serial_diff():
    args = ["diff", "--before", *RUNS_BEFORE, "--after", *RUNS_AFTER, "--json"]
    serial = run_ktrace(*args, "--jobs", "1")
    parallel = run_ktrace(*args, "--jobs", "3")
    assert serial[0] == parallel[0] == 0, serial[2] + parallel[2]
    assert parallel[1] == serial[1]


@pytest.mark.slow
def test_a_bad_capture_in_a_worker_is_named_with_exit_2(tmp_path):
    bad = tmp_path / "cut.bin"
    bad.write_bytes(b"\1" * 13)
    rc, out, err = run_ktrace("diff", BEFORE, bad, "--jobs", "2")
    assert rc == 2 and "cut.bin" in err and "Traceback" not in err and out == ""


@pytest.mark.slow
def test_a_missing_engine_in_a_worker_exits_3(tmp_path):
    # a buffer's figures come from numpy, which needs no engine: the SQL package is asked for by name here
    env = {"KTRACE_TP_WASM": str(tmp_path / "none.wasm"), "KTRACE_TP_SHELL": ""}
    rc, _, err = run_ktrace("diff", BEFORE, AFTER, "--jobs", "2", "--engine", "wasm", env=env)
    assert rc == 3 and "none.wasm" in err and "Traceback" not in err
    rc, out, err = run_ktrace("diff", BEFORE, AFTER, "--jobs", "2", env=env)  # the default: no engine needed
    assert rc == 0 and out, err


def _big_buffer(path: Path, seed: int, steps: int = 1900) -> Path:
    """About 1e6 records: long enough that a worker is still analyzing when the test presses Ctrl-C."""
    rng = np.random.default_rng(seed)
    lanes = 264
    dur = rng.integers(1000, 3000, (lanes, steps))
    begin = 10_000 + np.arange(steps) * 4000 + np.zeros((lanes, 1), np.int64)
    phase_buffer(begin, begin + dur, np.arange(steps) % 3, num_groups=2).astype("<u8").tofile(path)
    return path


def _children(pid: int) -> set[int]:
    out = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        out |= {int(c) for c in (task / "children").read_text().split()}
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads child processes from /proc")
def test_ctrl_c_stops_every_worker_and_removes_their_files(tmp_path):
    a, b = _big_buffer(tmp_path / "a.bin", 1), _big_buffer(tmp_path / "b.bin", 2)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = "import sys; from ktrace.cli import main; sys.exit(main(sys.argv[1:]))"
    p = subprocess.Popen([sys.executable, "-c", code, "diff", str(a), str(b), "--jobs", "2",
                          "--engine", "wasm"],  # the SQL path: each worker writes a temporary trace
                         env=dict(os.environ, TMPDIR=str(tmp)), preexec_fn=interruptible, start_new_session=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    # both workers writing their traces (in the folder the parent made for its workers)
    while time.monotonic() < deadline and len(list(tmp.glob("ktrace-workers-*/*"))) < 2:
        time.sleep(0.2)
    workers = _children(p.pid)
    assert p.poll() is None and len(workers) >= 2
    os.killpg(p.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    wait_until(lambda: not [w for w in workers if _alive(w)], "every worker gone")
    assert list(tmp.iterdir()) == []


def test_a_stop_that_lands_in_a_finalizer_still_stops_the_worker_without_a_traceback():
    # SIGTERM unwinds a worker's call by raising KeyboardInterrupt; raised inside a finalizer or an import
    # lock's callback, Python swallows it and prints a traceback. The worker raises it again, silently.
    code = """
import time
from ktrace.runtime import workers
workers._worker_started()
workers._busy = True

class Finalized:
    def __del__(self):
        raise KeyboardInterrupt

try:
    Finalized()
    time.sleep(5)
    print("not stopped")
except KeyboardInterrupt:
    print("stopped")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "stopped" and "Traceback" not in r.stderr and "ignored" not in r.stderr, r.stderr
