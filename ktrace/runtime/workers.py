"""Run one function over several inputs in worker processes, results in the order given.

    results = run_in_workers(load, ["a.bin", "b.bin"], jobs=2)   # == [load("a.bin"), load("b.bin")]

What ``ktrace diff`` uses to analyze its captures side by side. The workers are forked copies of this process,
never fresh interpreters: a spawned one runs the caller's main script again to find ``fn`` (a plain script with
no ``if __name__ == "__main__"`` guard then calls ``diff`` again in every worker, which dies), and pays for
importing ktrace again. Where this process runs the embedded engine (a library caller that queried a trace
before), whose runtime a fork would copy half-way, or cannot fork, the inputs are analyzed here, one after the
other: the results are the same. ``fn`` and the inputs are pickled (a module-level function, paths). An error
in a worker is raised here as the serial loop would raise it: the first failing input in the order given, the
same exception with the same message. Ctrl-C (or SIGTERM) in the parent stops the workers (each unwinds,
removing its temporary files), waits for them, and re-raises: no process is left behind. The workers' temporary
folders (``outputs.temporary_folder``) are made in a folder the parent removes once they are gone, so none is
left behind either, even by a worker stopped half-way or killed.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, Callable, Sequence

from .config import Parallelism, available_cores
from .forked import (POLL_S, Watch, fork_context, lost_if_dead, lost_worker, not_started, pool_pids, pool_wait,
                     results_closed, starting_workers, to_the_end, worker_ignores_interrupts)
from ..core.outputs import temporary_folder, temporary_folders_in

__all__ = ["default_jobs", "run_in_workers", "in_worker"]

_STOP_WAIT_S = 10.0  # how long a stopped worker may take to unwind before it is killed
_busy = False  # in a worker: whether a call is running (SIGTERM then unwinds it, else exits at once)
_worker = False  # whether this process is a worker of run_in_workers


def default_jobs(items: Sequence, par: Parallelism | None = None) -> int:
    """The workers of the ``captures`` stage (``par``, default: built for the cores this process may run on),
    capped by the number of items; 1 when the items are files of fewer than ``par.captures_min_bytes`` in all
    (the workers cost more than they save on small captures: two of 140 KB took 0.44 s of CPU in two forked
    workers, 0.33 s in this process, on 2 cores)."""
    par = Parallelism.build(available_cores()) if par is None else par  # whole captures: no parent work beside
    if _total_bytes(items, par.captures_min_bytes) < par.captures_min_bytes:
        return 1
    return max(1, min(par.stage("captures").jobs, len(items)))


def _total_bytes(items: Sequence, enough: int) -> int:
    total = 0
    for x in items:
        try:
            total += os.stat(x).st_size
        except (TypeError, ValueError, OSError):
            return enough  # not a file, or not there: let the worker say so
    return total


def run_in_workers(fn: Callable[[Any], Any], items: Sequence, jobs: int | None = None,
                   on_done: Callable[[int, int], None] | None = None) -> list:
    """``[fn(x) for x in items]``, computed in up to ``jobs`` forked worker processes (default: ``default_jobs``);
    jobs 1, a single item, the embedded engine running in this process or a platform that cannot fork: in this
    process. on_done(done, total) after each result arrives. A worker that cannot be started raises WorkerLost
    saying so."""
    items = list(items)
    jobs = default_jobs(items) if jobs is None else max(1, min(int(jobs), len(items) or 1))
    ctx = _context() if jobs > 1 else None
    if ctx is None:
        out = []
        for x in items:
            out.append(fn(x))
            if on_done is not None:
                on_done(len(out), len(items))
        return out
    from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    # The workers' temporary files go in a folder of ours, removed once they are gone: a worker stopped
    # between making a temporary folder and taking charge of it (or killed) leaves nothing behind.
    try:
        scratch = temporary_folder("ktrace-workers-", ignore_cleanup_errors=True)
    except OSError:
        scratch = None  # no temporary folder here: each worker says so when it needs one
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_worker_started,
                               initargs=(scratch.name if scratch else None,))
    try:
        with starting_workers():  # the workers start in submit: none may see a Ctrl-C before it ignores it
            try:
                futures = [pool.submit(_call, fn, x) for x in items]
            except OSError as e:  # fork refused (a process limit, no memory for another): said as that
                raise not_started(e) from None
        pending, done = set(futures), 0
        watch = Watch(pool_pids(pool))
        while pending:  # never a wait without a bound: a dead worker, or one stuck, raises WorkerLost
            finished, pending = pool_wait(pending, POLL_S, FIRST_EXCEPTION)
            if not finished:
                lost_if_dead(pool)
                watch.check()
                continue
            watch = Watch(pool_pids(pool))
            done += len(finished)
            if on_done is not None:
                on_done(done, len(items))
            failed = [i for i, f in enumerate(futures) if f in finished and f.exception() is not None]
            if failed:  # raise what the serial loop would: the first failure in input order
                for f in futures[:failed[0]]:
                    while not pool_wait([f], POLL_S).done:  # an earlier input still running
                        lost_if_dead(pool)
                        watch.check()
                    if f.exception() is not None:
                        break
                first = next(f for f in futures if f.done() and f.exception() is not None)
                _stop(pool)  # the later inputs need not run on
                if isinstance(first.exception(), BrokenProcessPool):
                    raise lost_worker(pool) from None
                raise first.exception()
        return [f.result() for f in futures]
    except BaseException:  # Ctrl-C, or a worker lost: the others are stopped (killed past _STOP_WAIT_S)
        to_the_end(lambda: _stop(pool), lambda: results_closed(pool))
        raise
    finally:
        to_the_end(lambda: pool.shutdown(wait=True, cancel_futures=True),
                   scratch.cleanup if scratch is not None else lambda: None)


def _context():
    """multiprocessing's fork context, or None (the work then stays in this process) where the platform cannot
    fork or the embedded engine's runtime (wasmtime) is loaded here: its compiled code and its threads' state
    would be copied half-way into a worker that may open the engine itself."""
    if "wasmtime" in sys.modules:
        return None
    return fork_context()


def _stop(pool) -> None:
    """Ask every worker to unwind (SIGTERM), give it _STOP_WAIT_S, then kill what is left."""
    import time

    procs = list((getattr(pool, "_processes", None) or {}).values())
    for p in procs:
        if p.is_alive():
            try:
                os.kill(p.pid, signal.SIGTERM)
            except OSError:
                pass
    deadline = time.monotonic() + _STOP_WAIT_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(1.0)


def in_worker() -> bool:
    """Whether this process is a worker of ``run_in_workers`` (its work should not fork more workers: the
    captures analyzed side by side already use the cores)."""
    return _worker


def _worker_started(scratch: str | None = None) -> None:
    global _worker
    _worker = True
    temporary_folders_in(scratch)  # this worker's temporary folders in the one its parent removes
    # Ctrl-C in a terminal reaches every process of the group: the parent decides, and stops the workers
    # with SIGTERM, which unwinds a running call (temporary traces removed) and ends an idle worker at once.
    worker_ignores_interrupts()
    signal.signal(signal.SIGTERM, _on_term)
    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, _on_term)  # _stop_again's
    sys.unraisablehook = _unraisable


def _on_term(signum, frame) -> None:
    if not _busy:
        os._exit(128 + signal.SIGTERM)
    if _in_hook(frame):  # raised here, it would be lost (an error of the hook itself): raised again, later
        _stop_again()
        return
    raise KeyboardInterrupt


def _unraisable(u) -> None:
    """The stop raised inside a callback Python cannot raise from (a finalizer, an import lock's weakref
    callback) is swallowed there, with a traceback on stderr: say nothing, and stop again once out of it (a
    SIGALRM a moment later: by then the callback has returned; one that lands in this hook, or in another such
    callback, is put off again in the same way, so the stop is never lost)."""
    if isinstance(u.exc_value, KeyboardInterrupt) and _busy:
        _stop_again()
        return
    sys.__unraisablehook__(u)


def _stop_again() -> None:
    """SIGALRM (whose handler is _on_term's) in 10 ms: a timer of the kernel's, nothing to start or wait for
    here (a thread's start waits, and a stop could land in that wait)."""
    if hasattr(signal, "setitimer"):
        signal.setitimer(signal.ITIMER_REAL, 0.01)
    else:  # no interval timer (Windows): a thread sends SIGTERM
        import threading

        again = threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGTERM))
        again.daemon = True
        again.start()


def _in_hook(frame) -> bool:
    while frame is not None:
        if frame.f_code is _unraisable.__code__:
            return True
        frame = frame.f_back
    return False


def _call(fn, x):
    global _busy
    _busy = True
    try:
        return fn(x)
    except KeyboardInterrupt:
        sys.stderr.flush()
        os._exit(130)  # unwound (files removed); the parent is stopping: no result to send back
    finally:
        _busy = False
