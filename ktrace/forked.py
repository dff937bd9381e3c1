"""Forked worker processes over shared, read-only state, results in the order given.

    for r in fork_imap(reduce_range, columns, ranges, jobs=2): ...   # == (reduce_range(columns, x) for x in ranges)

What the numpy engine uses to reduce ranges of a buffer side by side: the workers are forked copies of this
process, so the state (a decoder, the columns read so far) comes with them, shared page for page and never
pickled; only each item and its result cross a pipe. (``workers.run_in_workers`` spawns fresh interpreters
instead, for whole captures.)
"""

from __future__ import annotations

import os
import signal
from typing import Any, Callable, Iterator, Sequence

__all__ = ["fork_imap", "fork_map", "available_cores", "fork_context"]


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_SHARED: Any = None  # in a forked worker: the state fork_imap was given


def fork_imap(fn: Callable[[Any, Any], Any], shared: Any, items: Sequence, jobs: int = 1) -> Iterator:
    """``fn(shared, x) for x in items``, in order, computed by up to ``jobs`` forked worker processes (in this
    process when jobs is 1, there is one item, or the platform cannot fork). ``fn`` is a module-level function
    (sent by name), ``shared`` is inherited by the fork (read it, never write it: a write stays in the worker).
    An error in a worker is raised here; Ctrl-C stops the workers; none is left behind."""
    global _SHARED
    items = list(items)
    ctx = fork_context()
    jobs = max(1, min(int(jobs), len(items)))
    if jobs == 1 or ctx is None:
        for x in items:
            yield fn(shared, x)
        return
    import warnings

    _SHARED = shared
    try:
        with warnings.catch_warnings():  # Python 3.12+ warns about forking with threads (a progress bar's)
            warnings.simplefilter("ignore", DeprecationWarning)
            pool = ctx.Pool(jobs, initializer=_fork_started)
    finally:
        _SHARED = None
    try:
        yield from pool.imap(_fork_call, [(fn, x) for x in items])
        pool.close()
    finally:
        pool.terminate()
        pool.join()


def fork_map(fn: Callable[[Any, Any], Any], shared: Any, items: Sequence, jobs: int = 1) -> list:
    """``list(fork_imap(fn, shared, items, jobs))``."""
    return list(fork_imap(fn, shared, items, jobs))


def fork_context():
    """multiprocessing's fork context, or None where the platform cannot fork."""
    import multiprocessing

    try:
        return multiprocessing.get_context("fork")
    except ValueError:
        return None


def _fork_started() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent stops us
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _fork_call(job):
    fn, x = job
    return fn(_SHARED, x)
