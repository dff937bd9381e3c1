"""fork_imap's window and the shared-memory Slots: what the numpy engine's parts come back through."""

import os
import signal
import time

import numpy as np
import pytest

from ktrace.runtime.forked import Slots, fork_context, fork_imap, fork_map, starting_workers, worker_ignores_interrupts

pytestmark = pytest.mark.skipif(fork_context() is None, reason="the platform cannot fork")


def _write(state, item):
    slots, log = state
    slot, i = item
    with open(log, "a") as f:
        f.write(f"start {i} {time.monotonic_ns()}\n")
    arrays = {"a": np.arange(i, i + 1000, dtype=np.int64), "b": np.full(7, i, np.int8),
              "c": np.arange(12, dtype=np.float64).reshape(3, 4) * i}
    return i, slots.put(slot, arrays), os.getpid()


def test_workers_write_their_arrays_into_slots_the_parent_reads(tmp_path):
    window, log = 3, tmp_path / "log"
    slots = Slots(window, 64 * 1024)
    seen, pids = [], set()
    for i, where, pid in fork_imap(_write, (slots, log), [(j % window, j) for j in range(12)], jobs=2,
                                   window=window):
        assert where is not None
        got = slots.take(i % window, where)
        assert got["a"].tolist() == list(range(i, i + 1000))
        assert got["b"].dtype == np.int8 and got["b"].tolist() == [i] * 7
        assert got["c"].shape == (3, 4) and got["c"][2, 3] == 11 * i
        seen.append(i)
        pids.add(pid)
        with open(log, "a") as f:
            f.write(f"taken {i} {time.monotonic_ns()}\n")
    assert seen == list(range(12))
    assert os.getpid() not in pids  # written by the workers, read here
    # Item i starts only after result i - window was taken: its slot is free then.
    when = {}
    for line in log.read_text().split("\n"):
        if line:
            what, i, t = line.split()
            when[(what, int(i))] = int(t)
    for i in range(window, 12):
        assert when[("start", i)] > when[("taken", i - window)]


def test_arrays_that_do_not_fit_are_not_written():
    slots = Slots(2, 256)
    assert slots.put(1, {"a": np.zeros(100, np.int64)}) is None  # 800 bytes > 256: they go by pipe instead
    where = slots.put(1, {"a": np.arange(4, dtype=np.int16), "b": np.arange(3, dtype=np.int64)})
    got = slots.take(1, where)
    assert got["a"].tolist() == [0, 1, 2, 3] and got["b"].tolist() == [0, 1, 2]
    assert slots.put(0, {"o": np.array([None, 1], dtype=object)}) is None  # objects never go into memory


def _fail(state, item):
    if item == 3:
        raise ValueError("part 3 is damaged")
    return item


def test_an_error_with_a_full_window_is_raised_and_leaves_no_worker():
    with pytest.raises(ValueError, match="part 3 is damaged"):
        for _ in fork_imap(_fail, None, range(20), jobs=2, window=2):
            pass


def test_stopping_early_with_a_full_window_returns():
    got = []
    for x in fork_imap(_fail, None, [0, 1, 2], jobs=2, window=1):
        got.append(x)
        break
    assert got == [0]


def _square_in_worker(state, x):
    return x * x, os.getpid()


def test_fork_later_computes_in_a_worker_while_this_process_goes_on():
    from ktrace.runtime.forked import fork_later

    with fork_later(_square_in_worker, None, 7) as later:
        mine = sum(range(1000))  # this process goes on meanwhile
        value, pid = later.result()
    assert (value, mine) == (49, 499500) and pid != os.getpid()
    with fork_later(_square_in_worker, None, 3, fork=False) as later:
        assert later.result() == (9, os.getpid())  # in this process, as one process computes it


def test_fork_later_raises_the_workers_error_and_stops_it():
    from ktrace.runtime.forked import fork_later

    with pytest.raises(ValueError, match="part 3 is damaged"):
        with fork_later(_fail, None, 3) as later:
            later.result()
    with fork_later(_fail, None, 3) as later:  # never asked for: the worker is stopped on leaving
        pass
    assert later._pool is None


def _arrays(_, n):
    return {"ends": np.arange(n, dtype=np.int64), "flags": (np.zeros(n, bool), [np.ones(n, np.float32)]),
            "words": np.arange(n).astype(">u8")}


def test_arrays_from_workers_come_with_numpys_own_types():
    # numpy's pickling gives each array a new dtype object, with which ufunc.at takes a generic path many
    # times slower; the workers' results arrive with numpy's own, and the same values.
    got = list(fork_imap(_arrays, None, [3, 4], jobs=2))
    for n, r in zip([3, 4], got):
        assert r["ends"].dtype is np.dtype(np.int64) and r["ends"].tolist() == list(range(n))
        assert r["flags"][0].dtype is np.dtype(bool) and r["flags"][1][0].dtype is np.dtype(np.float32)
        assert r["words"].dtype.kind == "u" and r["words"].tolist() == list(range(n))  # byte order: numpy's own


def test_many_items_go_several_a_message_and_come_back_in_order():
    from ktrace.runtime.forked import _chunksize

    assert _chunksize(1000, 2, None) > 1 and _chunksize(1000, 2, 4) == 1 and _chunksize(5, 2, None) == 1
    got = list(fork_imap(_square_in_worker, None, range(1000), jobs=2))
    assert [r for r, _ in got] == [x * x for x in range(1000)]
    assert os.getpid() not in {pid for _, pid in got}  # computed by the workers


def test_an_error_in_a_message_of_several_items_is_raised():
    with pytest.raises(ValueError, match="part 3 is damaged"):
        list(fork_imap(_fail, None, range(200), jobs=2))


def _signal_state(_shared, _x):
    import signal as s

    return signal.SIGINT in s.pthread_sigmask(s.SIG_BLOCK, []), s.getsignal(s.SIGINT) == s.SIG_IGN


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="needs signal masks")
def test_a_ctrl_c_landing_in_a_worker_before_it_ignores_sigint_is_dropped():
    # A Ctrl-C reaches the whole group: one landing in a new worker before its first line printed a traceback
    from_parent, to_child = os.pipe()
    from_child, to_parent = os.pipe()
    with starting_workers():
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.read(from_parent, 1)  # the parent has sent SIGINT by now: it waits, held
                held = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
                worker_ignores_interrupts()  # ... and is dropped here
                os.write(to_parent, b"held" if held else b"free")
                code = 0
            finally:
                os._exit(code)
    os.kill(pid, signal.SIGINT)
    os.write(to_child, b"x")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert os.read(from_child, 4) == b"held"
    for fd in (to_child, from_parent, from_child, to_parent):
        os.close(fd)
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # this thread's mask is as it was
    # the pool's workers ignore SIGINT and no longer hold it
    assert fork_map(_signal_state, None, [0, 1], jobs=2) == [(False, True), (False, True)]
