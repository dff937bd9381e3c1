"""How ktrace spreads work over cores: one configuration object, built once per command, read at stage level.

    par = Parallelism.build(jobs=4)               # --jobs 4 (None: the cores available, 1 below min_cores);
                                                  # $KTRACE_SERIAL, $KTRACE_PARALLEL read
    sweeps = par.stage("sweeps", size=n_slices)   # this stage's workers (1: it runs in this process)
    for r in sweeps.imap(reduce_range, columns, ranges): ...

Every decision about parallel work lives here: how many worker processes a stage takes, from what size it
goes parallel, how many threads stand beside the workers, how long a silent worker may take before it counts
as stuck. The formulas (``analysis/``) never fork, share memory or tune themselves: a stage hands them its
``Stage`` (its worker count), and they split their work into ranges that the stage maps, in this process when
it has one worker. The one executor is ``concurrent.futures`` (``forked.py``: forked workers over shared
state; ``workers.py``: forked ones for whole captures).

Stages (``STAGES``), with what each measured on 2 and 16 cores (``docs/performance.md``):

- ``parts``: a buffer's ranges of lanes decoded and reduced by forked workers (analyze, numpy engine);
- ``sweeps``: the cross-lane sweeps (phase instances, their row order, predecessors, lanes, waits) and the
  evidence's pass over every slice, past ``sweep_min_slices`` slices;
- ``critical_path``: the critical path's backward walk in a worker of its own, beside the lanes and waits;
- ``evidence_tests``: the evidence's tests in a thread beside the sweeps, boundaries side by side in threads
  on the cores the workers leave;
- ``copy``: the parts' columns copied out in threads on the cores the workers leave;
- ``json``: the long tables of the JSON written by forked workers, from ``json_min_rows`` rows;
- ``transpose``: a buffer file's record area copied lane-major in threads before its parts are decoded (a
  file of ``BufferDecoder.TRANSPOSE_MIN_BYTES``, 256 MiB, or more: not reached at 1e7 records);
- ``convert``: ``ktrace convert``'s ranges of lanes decoded and encoded by forked workers;
- ``captures``: the captures of ``ktrace diff`` analyzed by forked workers, from ``captures_min_bytes``.

``$KTRACE_SERIAL`` (a comma-separated list of stages, or ``all``) keeps those stages in one process whatever
``--jobs`` says: the switch ``scripts/bench_stages.py`` measures each stage's gain with. ``HELD``'s stages,
which gained under 20% on 16 cores, are kept in one process unless ``$KTRACE_PARALLEL`` names them (``all``:
every one), as the bench does to measure them again. The outputs are the same bytes either way.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import field, replace
from typing import Any, Callable, Iterator, Sequence

from . import forked
from .forked import Slots
from ..core.records import frozen

__all__ = ["Parallelism", "Stage", "SERIAL", "STAGES", "SERIAL_ENV", "PARALLEL_ENV", "HELD", "parallelism",
           "available_cores", "thread_pool", "Slots"]

STAGES = ("parts", "sweeps", "critical_path", "evidence_tests", "copy", "json", "transpose", "convert", "captures")
SERIAL_ENV = "KTRACE_SERIAL"
PARALLEL_ENV = "KTRACE_PARALLEL"
# In one process by default: on 16 cores holding them there cost under 20% (copy 0.93-1.02x, critical_path
# 0.99-1.07x the time of all stages parallel, at 1e7 and 1e8 records; docs/performance.md)
HELD = ("copy", "critical_path")


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity)."""
    return forked.available_cores()


@frozen
class Stage:
    """How one stage's work is spread: ``jobs`` forked workers (1: in this process). What a formula is handed:
    it splits its work into items and maps them here; the results are the same for any number of workers."""

    name: str = "serial"
    jobs: int = 1
    stall_s: float | None = None  # None: forked.STALL_S

    @property
    def parallel(self) -> bool:
        return self.jobs > 1

    def imap(self, fn: Callable[[Any, Any], Any], shared: Any, items: Sequence, window: int | None = None) -> Iterator:
        """``fn(shared, x) for x in items`` in order (``forked.fork_imap``: bounded waits, Ctrl-C safe)."""
        return forked.fork_imap(fn, shared, items, self.jobs, window=window, stall_s=self.stall_s)

    def map(self, fn: Callable[[Any, Any], Any], shared: Any, items: Sequence) -> list:
        return list(self.imap(fn, shared, items))

    def later(self, fn: Callable[[Any, Any], Any], shared: Any, x: Any) -> "forked.fork_later":
        """``fn(shared, x)`` in a worker of its own while this process goes on (at once here when serial)."""
        return forked.fork_later(fn, shared, x, fork=self.parallel, stall_s=self.stall_s)

    def array(self, n: int, dtype):
        """An array the stage's workers may write into (shared memory when it has workers)."""
        import numpy as np

        return forked.shared_array(n, dtype) if self.parallel else np.empty(int(n), dtype)


SERIAL = Stage()


@frozen
class Parallelism:
    """The one configuration of parallel work, built once per command (``build``) and handed to its stages.

    jobs: worker processes a stage may take (``--jobs``); cores: those this process may run on. serial: stages
    held in one process (``build``: ``serial_stages``, HELD's with $KTRACE_SERIAL's and $KTRACE_PARALLEL's
    say). The thresholds below are where a stage starts to pay (see ``docs/performance.md`` for the
    measurements behind each)."""

    jobs: int = 1
    cores: int = 1
    serial: frozenset = field(default_factory=frozenset)
    sweep_min_slices: int = 1 << 20  # the sweeps go to workers only past this many slices (forking cost more
    # than it saved at 1e6 records)
    json_min_rows: int = 4096  # a JSON table this long is written by workers
    copy_threads: int = 4  # the most threads copying the parts' columns (on cores the workers leave)
    evidence_threads: int = 4  # the most threads testing the evidence's boundaries (on cores the workers leave)
    transpose_threads: int = 4  # the most threads copying a record area lane-major, before any worker starts
    # (a 1e8-record buffer, 763 MB, on 16 cores: 0.97-1.04 s in one thread, 0.45-0.49 s in 4, 0.50-0.55 s in 8;
    # each thread keeps its own malloc arena of freed blocks: 8 threads took the process tree's PSS 123 MiB higher)
    captures_min_bytes: int = 4 << 20  # diff: captures of fewer bytes in all are analyzed in this process
    default_jobs_max: int = 8  # the numpy engine's workers without --jobs: the cores, at most this many (more:
    # more memory, little speed; 1e8 records on 4/8/16 cores: 32/25/23 s, 3.5/3.6/4.3 GiB)
    min_cores: int = 3  # without --jobs, fewer cores than this: one process. On 2 cores the workers and the
    # parent (which merges, copies and tests beside them) contend: analyze's parallel stages took 1.2-1.7x the
    # time of one process at 1e6-1e7 records, convert 1.1-1.2x (docs/performance.md, scripts/bench_stages.py)
    stall_s: float | None = None  # a worker silent (no result, no CPU time) this long is stuck; None: forked.STALL_S

    @classmethod
    def build(cls, jobs: int | None = None, *, cap: int | None = None, env=None, **thresholds) -> "Parallelism":
        """The configuration of a command: ``jobs`` workers (None: the cores available, at most ``cap``, and
        one process below ``min_cores`` cores), never more than the cores; ``serial_stages`` held in one
        process."""
        cores = available_cores()
        want = cores if jobs is None else int(jobs)
        if jobs is None and cap is not None:
            want = min(want, cap)
        if jobs is None and cores < thresholds.get("min_cores", cls.min_cores):
            want = 1
        return cls(jobs=max(1, min(cores, want)), cores=cores, serial=serial_stages(env), **thresholds)

    def stage(self, name: str, size: int | None = None) -> Stage:
        """The named stage's workers: 1 when the command has one job, the stage is held serial, or (sweeps,
        json) ``size`` is under the stage's threshold."""
        if name not in STAGES:
            raise ValueError(f"unknown stage {name!r}: one of {', '.join(STAGES)}")
        jobs = self.jobs if name not in self.serial else 1
        if name == "sweeps" and size is not None and size <= self.sweep_min_slices:
            jobs = 1
        if name == "json" and size is not None and size < self.json_min_rows:
            jobs = 1
        return Stage(name, jobs, self.stall_s)

    def threads(self, name: str) -> int:
        """Threads a stage runs beside the workers (1: none): on the cores the workers leave, for ``copy`` and
        ``evidence_tests``; up to the cores for ``transpose``."""
        if name in self.serial:
            return 1
        if name == "copy":
            return max(1, min(self.copy_threads, self.cores - self.jobs)) if self.jobs > 1 else 1
        if name == "evidence_tests":
            return max(1, min(self.jobs, self.cores - self.jobs, self.evidence_threads)) if self.jobs > 1 else 1
        if name == "transpose":
            return max(1, min(self.transpose_threads, self.cores))
        raise ValueError(f"stage {name!r} runs no threads")

    def with_jobs(self, jobs: int) -> "Parallelism":
        return replace(self, jobs=max(1, int(jobs)))


def serial_stages(env=None) -> frozenset:
    """The stages held in one process: those $KTRACE_SERIAL names ("all": every one), and HELD's unless
    $KTRACE_PARALLEL names them ("all": none of them). An unknown name is an error (a measurement that silently
    measured nothing would mislead)."""
    env = os.environ if env is None else env
    serial, parallel = _named(env, SERIAL_ENV), _named(env, PARALLEL_ENV)
    return frozenset(serial | (set(HELD) - parallel))


def _named(env, var: str) -> set:
    text = env.get(var, "")
    names = {s.strip() for s in text.split(",") if s.strip()}
    if "all" in names:
        return set(STAGES)
    bad = sorted(names - set(STAGES))
    if bad:
        from ..core.errors import InputError

        raise InputError(f"{var}={text}: unknown stage {', '.join(bad)} (stages: all, {', '.join(STAGES)})")
    return names


def parallelism(jobs: "int | Parallelism | None") -> Parallelism:
    """A Parallelism as given, or built for ``jobs`` workers (an int, as library callers and tests pass)."""
    if isinstance(jobs, Parallelism):
        return jobs
    return Parallelism(jobs=max(1, int(jobs or 1)), cores=available_cores(), serial=serial_stages())


@contextmanager
def thread_pool(threads: int, name: str):
    """``threads`` threads beside this one (concurrent.futures' ``ThreadPoolExecutor``, its threads named
    ``name``), shut down on leaving the block; with 0, an executor that runs each call at once in this thread
    (``submit`` returns the call's outcome, ``result()`` gives it back; concurrent.futures is not imported, as
    the start of ``ktrace analyze`` would pay for it). Where the runtime's threads come from: numpy and file
    I/O let go of the GIL, so work on arrays runs side by side."""
    if threads <= 0:
        yield _InThisThread()
        return
    from concurrent.futures import ThreadPoolExecutor  # here: no import at start-up

    class Pool(ThreadPoolExecutor):
        def submit(self, fn, /, *args, **kwargs):  # map() submits through it too
            return _Awaited(super().submit(fn, *args, **kwargs))

    with Pool(threads, thread_name_prefix=name) as pool:
        yield pool


class _Awaited:
    """A thread pool's future whose ``result()`` waits by ``forked.pool_wait``: a Ctrl-C meanwhile is raised
    as a KeyboardInterrupt outside Python's threading code (inside, it may release a lock twice: the thread
    finishing the task then dies with a traceback). Anything else is the future's own."""

    __slots__ = ("_future",)

    def __init__(self, future) -> None:
        self._future = future

    def result(self, timeout=None):
        from .forked import POLL_S, pool_wait

        if not self._future.done():  # (done: nothing to wait for, at a future's own cost)
            while not pool_wait([self._future], POLL_S if timeout is None else timeout).done and timeout is None:
                pass
        return self._future.result(0 if timeout is not None else None)

    def __getattr__(self, name: str):
        return getattr(self._future, name)


class _Done:
    """A call already made: its value, or the exception it raised, given back by ``result()`` as a Future's."""

    __slots__ = ("_value", "_error")

    def __init__(self, value=None, error: BaseException | None = None):
        self._value, self._error = value, error

    def result(self, timeout=None):
        if self._error is not None:
            raise self._error
        return self._value


class _InThisThread:
    """The executor of ``thread_pool(0)``: each call made at once, in this thread."""

    def submit(self, fn, /, *args, **kwargs) -> _Done:
        try:
            return _Done(fn(*args, **kwargs))
        except Exception as e:  # noqa: BLE001 - raised by result(), as a pool's would be
            return _Done(error=e)

    def map(self, fn, *iterables):
        return map(fn, *iterables)


def import_beside(modules: Sequence[str]) -> None:
    """Import ``modules`` in a thread beside this one, now, while this thread waits on work that lets go of
    the GIL (``ktrace analyze`` of a .bin.gz: inflating it, ~20 ms, is when the analysis' modules load). An
    import this thread makes meanwhile waits for the other's to finish (the import system's module locks;
    the package's imports form no cycle, tests/test_architecture.py, so neither waits on the other). A module
    that fails to import here fails again, with its error, where it is needed."""
    import threading

    def load():
        import importlib

        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001, S110 - raised again by the import that needs it
                return

    threading.Thread(target=load, name="ktrace-import", daemon=True).start()
