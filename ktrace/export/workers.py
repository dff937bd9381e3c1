"""A buffer's parts written by worker processes: decoded and encoded in parallel, declared in lane order.

Each worker is a forked copy of this process (the opened BufferDecoder comes with it, nothing is reopened).
The parent hands out batches of consecutive parts (a batch reads one band of lanes, ``lanes.py``) as workers
free up. A worker decodes its batch, waits for the ``WriteState`` the parts before it left (the parent
forwards it from the worker that declared them), declares its parts (tracks, interned names), hands the state
on, then encodes; the parent yields every part's bytes in lane order. So the bytes are those written in
process, whatever the number of workers.

A worker ignores SIGINT (the parent stops it, and every worker is stopped and reaped before the parent
returns or raises), exits when the parent's end of its pipe closes, and sends an error back instead of
raising it: the parent raises the error of the first part that failed, as writing in process would.
"""

from __future__ import annotations

import os
import pickle
import signal
import tempfile
import traceback
import warnings
from typing import Iterator

from ..errors import KtraceError
from .events import PartOutput, PartWriter, WriteState

__all__ = ["parallel_parts", "available_cores", "batches", "fork_context"]

_SHM = "/dev/shm"  # parts go from a worker to the parent through files here (memory), else in the temp folder


def available_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def batches(ranges: list, capacity_per_lane: int, band_bytes: int) -> list[list]:
    """Consecutive parts grouped into batches of about ``band_bytes`` of record slots: [(k, lo, hi), ...]."""
    out, cur = [], []
    for k, (lo, hi) in enumerate(ranges):
        cur.append((k, lo, hi))
        if (hi - cur[0][1]) * capacity_per_lane * 8 >= band_bytes:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def fork_context():
    """multiprocessing's fork context, or None where there is none (the parts are then written in process)."""
    import multiprocessing

    try:
        return multiprocessing.get_context("fork")
    except ValueError:
        return None


def parallel_parts(dec, work: list[list], writer: PartWriter, state: WriteState, jobs: int) -> Iterator[PartOutput]:
    """Every part of ``work`` (batches of (k, lo, hi), k = 0, 1, ... in lane order) written by ``jobs`` worker
    processes, yielded in order. ``state`` is the WriteState before part 0; it is left as after the last part."""
    from multiprocessing.connection import wait

    ctx = fork_context()
    n_parts = sum(len(b) for b in work)
    conns, procs = [], []
    spool = tempfile.TemporaryDirectory(prefix="ktrace-parts-", dir=_SHM if os.path.isdir(_SHM) else None)
    try:
        for _ in range(min(jobs, len(work))):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(theirs, dec, writer, spool.name, [*conns, mine]), daemon=True)
            with warnings.catch_warnings():  # Python 3.12+ warns about forking with threads (a progress bar's)
                warnings.simplefilter("ignore", DeprecationWarning)
                p.start()
            theirs.close()
            conns.append(mine)
            procs.append(p)
        owner: dict = {}  # first part of a batch -> the worker's connection
        states = {0: state.wire()}  # state before part k, not yet sent
        left: dict = {}  # connection -> parts of its batch not yet received
        queue = list(work)

        def assign(c) -> None:
            if not queue:
                return
            batch = queue.pop(0)
            c.send(("batch", batch))
            owner[batch[0][0]] = c
            left[c] = len(batch)
            k0 = batch[0][0]
            if k0 in states:
                c.send(("state", states.pop(k0)))

        for c in conns:
            assign(c)
        done: dict = {}
        errors: dict = {}
        nxt = 0
        live = list(conns)
        while nxt < n_parts:
            if nxt in errors:
                raise errors[nxt]
            if nxt in done:
                yield done.pop(nxt)
                nxt += 1
                continue
            for c in wait(live):
                try:
                    msg = c.recv()
                except EOFError:
                    raise KtraceError("a convert worker process ended unexpectedly (out of memory, or killed?); "
                                      "run again, or with --jobs 1") from None
                if msg[0] == "declared":  # state after part k: to the worker holding part k + 1
                    k, wire = msg[1], msg[2]
                    if k + 1 in owner:
                        owner[k + 1].send(("state", wire))
                    elif k + 1 < n_parts:
                        states[k + 1] = wire
                    else:
                        final = WriteState.from_wire(wire)
                        state.names, state.tracks = final.names, final.tracks
                elif msg[0] == "part":
                    out: PartOutput = msg[2]
                    out.chunks = _read_part(msg[3], msg[4])
                    done[msg[1]] = out
                    left[c] -= 1
                    if not left[c]:
                        assign(c)
                else:  # an error in part k: raised when every part before it is out
                    errors[msg[1]] = msg[2]
                    live.remove(c)
    finally:
        _stop(conns, procs)
        spool.cleanup()


def _read_part(path: str, sizes: list) -> list:
    """A part's byte strings from the file its worker wrote (then removed)."""
    with open(path, "rb", buffering=0) as f:
        out = [f.read(n) if n else b"" for n in sizes]
    os.unlink(path)
    return out


def _stop(conns, procs) -> None:
    for c in conns:
        try:
            c.close()  # a worker reading its pipe sees EOF and exits
        except OSError:
            pass
    for p in procs:
        p.join(timeout=0.5)
        if p.is_alive():
            p.kill()
            p.join()


def _worker(conn, dec, writer: PartWriter, spool: str, inherited) -> None:
    for c in inherited:  # the parent's ends of the pipes forked into this copy: EOF must reach their workers
        c.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the whole process group: the parent stops us
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    try:
        while True:
            msg = conn.recv()
            if msg[0] != "batch" or not _batch(conn, dec, writer, spool, msg[1]):
                return
    except (EOFError, OSError):  # the parent is gone, or stopped us
        return


def _batch(conn, dec, writer: PartWriter, spool: str, batch: list) -> bool:
    """Decodes, declares and encodes one batch; False once it sent an error (the worker then exits). A part
    that fails stops the batch there: the parts before it are still sent, then the error."""
    parts, failed = [], None
    for k, lo, hi in batch:
        try:
            parts.append((k, dec.part(lo, hi)))
        except Exception as e:  # noqa: BLE001 - handed to the parent, which raises it in its place
            failed = (k, e)
            break
    if parts:
        msg = conn.recv()
        if msg[0] != "state":
            return False
        state = WriteState.from_wire(msg[1])
        declared = []
        for k, d in parts:
            try:
                declared.append((k, d, *writer.declare(d, state)))
            except Exception as e:  # noqa: BLE001
                failed = (k, e)
                break
        if failed is None:
            conn.send(("declared", parts[-1][0], state.wire()))
        for k, d, head, prep in declared:
            try:
                chunks = [head, *writer.body(d, prep)]
                out = writer.output(d, [], first=k == 0)
            except Exception as e:  # noqa: BLE001
                failed = (k, e)
                break
            path = os.path.join(spool, f"part{k}")
            with open(path, "wb", buffering=0) as f:
                for chunk in chunks:
                    f.write(chunk)
            conn.send(("part", k, out, path, [len(c) for c in chunks]))
    if failed is not None:
        conn.send(("error", failed[0], _portable(failed[1])))
        return False
    return True


def _portable(e: Exception) -> Exception:
    """The exception as the parent can unpickle it; a bug keeps the worker's traceback as a note."""
    if not isinstance(e, KtraceError) and hasattr(e, "add_note"):
        e.add_note("in a convert worker process:\n" + "".join(traceback.format_exception(e)))
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(e).__name__}: {e}")
