"""Forked worker processes over shared, read-only state, results in the order given.

    for r in fork_imap(reduce_range, columns, ranges, jobs=2): ...   # == (reduce_range(columns, x) for x in ranges)

What the numpy engine uses to reduce ranges of a buffer side by side: the workers are forked copies of this
process, so the state (a decoder, the columns read so far) comes with them, shared page for page and never
pickled; only each item and its result cross a pipe. (``workers.run_in_workers`` spawns fresh interpreters
instead, for whole captures.)

Large results need not cross a pipe either: with ``window``, item i is handed out only after the caller has
taken result i - window, so a worker may write its arrays into slot ``i % window`` of a ``Slots`` ring made
before the fork (shared memory) and send only where they lie (``Slots.put`` / ``Slots.take``).
"""

from __future__ import annotations

import mmap
import os
import signal
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

__all__ = ["fork_imap", "fork_map", "fork_later", "available_cores", "fork_context", "Slots", "shared_array",
           "starting_workers", "worker_ignores_interrupts"]


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_SHARED: Any = None  # in a forked worker: the state fork_imap was given


@contextmanager
def starting_workers():
    """``with starting_workers(): start workers``: Python 3.12+'s warning about forking with threads (a
    progress bar's) kept quiet, and SIGINT held back in this thread while the workers start, so a Ctrl-C
    (which reaches the whole process group) cannot land in a new worker before it ignores SIGINT (as Python
    code between the fork and the worker's first line, which would print a traceback); the worker inherits
    the held mask and calls ``worker_ignores_interrupts``. This process still sees a Ctrl-C meanwhile: through
    another of its threads at once, else as the block ends. Where the platform cannot hold signals, or off
    the main thread, nothing is held."""
    import warnings

    hold = hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if hold else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        if hold:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def worker_ignores_interrupts() -> None:
    """A worker's first step: SIGINT ignored (Ctrl-C reaches the whole group: the parent stops the workers),
    then no longer held (a held one is dropped)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def fork_imap(fn: Callable[[Any, Any], Any], shared: Any, items: Sequence, jobs: int = 1,
              window: int | None = None) -> Iterator:
    """``fn(shared, x) for x in items``, in order, computed by up to ``jobs`` forked worker processes (in this
    process when jobs is 1, there is one item, or the platform cannot fork). ``fn`` is a module-level function
    (sent by name), ``shared`` is inherited by the fork (read it, never write it: a write stays in the worker).
    window: item i is handed out only once the caller is done with result i - window (has asked for the one
    after it), so that it may reuse what that result held (a ``Slots`` slot). An error in a worker is raised here;
    Ctrl-C stops the workers; none is left behind."""
    items = list(items)
    ctx = fork_context()
    jobs = max(1, min(int(jobs), len(items)))
    if jobs == 1 or ctx is None:
        for x in items:
            yield fn(shared, x)
        return
    pool = _new_pool(ctx, jobs, shared)
    free = threading.Semaphore(window) if window else None
    stop = threading.Event()

    def tasks():  # read by the pool's task thread: it waits here while the window is full
        for x in items:
            if free is not None:
                free.acquire()
            if stop.is_set():
                return
            yield fn, x

    try:
        for r in pool.imap(_fork_call, tasks(), _chunksize(len(items), jobs, window)):
            yield r
            if free is not None:
                free.release()
        pool.close()
    finally:
        stop.set()
        if free is not None:
            free.release(len(items) + 1)  # a task thread waiting for the window goes on, and stops
        pool.terminate()
        pool.join()


def _chunksize(n: int, jobs: int, window: int | None) -> int:
    """Items per message to a worker: about 16 messages per worker, each bringing its items' results back
    together. One item a message cost the parent's pool threads about 1 ms an item: at 1e8 records (765
    chunks a sweep on 2 workers) the instance sweeps took 6.8-7.0 s with 2.5 s of the parent's CPU, 6.0-6.4 s
    with 1.3 s in messages of 24. 1 with a window (a worker must not hold items past it)."""
    return 1 if window else max(1, n // (16 * jobs))


def fork_map(fn: Callable[[Any, Any], Any], shared: Any, items: Sequence, jobs: int = 1) -> list:
    """``list(fork_imap(fn, shared, items, jobs))``."""
    return list(fork_imap(fn, shared, items, jobs))


class fork_later:
    """``fn(shared, x)`` computed by one forked worker process while this process goes on (in this process, at
    once, when ``fork`` is false or the platform cannot fork): ``with fork_later(...) as later: ...;
    r = later.result()``. The worker is stopped on leaving the block, whatever happened in it."""

    def __init__(self, fn: Callable[[Any, Any], Any], shared: Any, x: Any, fork: bool = True) -> None:
        self._fn, self._shared, self._x, self._fork = fn, shared, x, fork
        self._pool = self._pending = None
        self._done = False
        self._value: Any = None

    def __enter__(self) -> "fork_later":
        ctx = fork_context() if self._fork else None
        if ctx is None:
            self._value, self._done = self._fn(self._shared, self._x), True
            return self
        self._pool = _new_pool(ctx, 1, self._shared)
        self._pending = self._pool.apply_async(_fork_call, ((self._fn, self._x),))
        return self

    def result(self) -> Any:
        """The worker's result (waiting for it); its error raised here."""
        if not self._done:
            self._value, self._done = self._pending.get(), True
        return self._value

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None


def fork_context():
    """multiprocessing's fork context, or None where the platform cannot fork."""
    import multiprocessing

    try:
        return multiprocessing.get_context("fork")
    except ValueError:
        return None


def _new_pool(ctx, jobs: int, shared: Any):
    """A pool of ``jobs`` forked workers that inherit ``shared`` (read by ``_fork_call``)."""
    global _SHARED

    _plain_dtypes()
    _SHARED = shared
    try:
        with starting_workers():
            return ctx.Pool(jobs, initializer=_fork_started)
    finally:
        _SHARED = None


def _plain_dtypes() -> None:
    """Results sent back by the workers name their arrays' numeric types by their type strings, so that they
    arrive with numpy's own type objects: numpy's pickling makes a new dtype object for every array, with which
    ufunc.at (np.maximum.at, ...) takes a generic path, 28x slower (0.11 s for 2^20 values, 0.004 s otherwise).
    Registering again is harmless (the pickler's table is a dict)."""
    import numpy as np
    from multiprocessing.reduction import ForkingPickler

    for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
              np.float32, np.float64):
        ForkingPickler.register(type(np.dtype(t)), _reduce_dtype)


def _reduce_dtype(d):
    import numpy as np

    if d.fields is None and d.subdtype is None and d.metadata is None:
        return np.dtype, (d.str,)
    return d.__reduce__()


def _fork_started() -> None:
    worker_ignores_interrupts()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _fork_call(job):
    fn, x = job
    return fn(_SHARED, x)


def shared_array(n: int, dtype):
    """A numpy array of n elements in anonymous shared memory: made before a fork, what a forked worker
    writes into it this process and workers forked later read (pages never written are never resident)."""
    import numpy as np

    dtype = np.dtype(dtype)
    return np.frombuffer(mmap.mmap(-1, max(int(n), 1) * dtype.itemsize), dtype, count=int(n))


class Slots:
    """A ring of ``count`` shared-memory slots of ``size`` bytes each, made before a fork: a worker writes a
    result's arrays into the slot of its item (``put``, in place of the arrays), the parent reads them out
    (``take``) before the slot's next item starts (``fork_imap``'s window). Pages never written are never
    resident."""

    ALIGN = 64

    def __init__(self, count: int, size: int) -> None:
        import numpy as np

        self.count = max(int(count), 1)
        self.size = -(-max(int(size), 1) // self.ALIGN) * self.ALIGN
        self._bytes = shared_array(self.count * self.size, np.uint8)

    def put(self, slot: int, arrays: dict) -> dict | None:
        """Writes the arrays into the slot; returns where they lie, or None when they do not all fit (or one
        holds Python objects): then they go by pipe, and what was written is never read."""
        import numpy as np

        where, at = {}, 0
        for name, a in arrays.items():
            a = np.ascontiguousarray(a)
            if a.dtype.hasobject or at + a.nbytes > self.size:
                return None
            base = (slot % self.count) * self.size + at
            self._bytes[base:base + a.nbytes] = a.view(np.uint8).reshape(-1)
            where[name] = (at, a.dtype.str, a.shape)
            at += -(-a.nbytes // self.ALIGN) * self.ALIGN
        return where

    def take(self, slot: int, where: dict) -> dict:
        """The arrays ``put`` wrote: views of the slot, valid until its next item starts (copy what is kept)."""
        import numpy as np

        out, base = {}, (slot % self.count) * self.size
        for name, (at, dtype, shape) in where.items():
            dt = np.dtype(dtype)
            n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
            out[name] = self._bytes[base + at:base + at + n].view(dt).reshape(shape)
        return out
