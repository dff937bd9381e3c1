"""A buffer's parts written by worker processes: decoded and encoded in parallel, declared in lane order.

Each worker is a forked copy of this process (the opened BufferDecoder comes with it, nothing is reopened).
The parent hands out batches of consecutive parts (a batch reads one band of lanes, ``lanes.py``) as workers
free up, and yields every part's bytes in lane order. A part that adds no interned name and no overlap track
(most) is encoded by its worker at once: the parent declares its tracks (``PartWriter.plain_head``). Any other
part waits in its worker for the ``WriteState`` the parts before it left, is declared there and hands the
state back. So the bytes are those written in process, whatever the number of workers.

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
from typing import Iterator

from ..core.errors import KtraceError
from ..runtime.forked import (POLL_S, Watch, fork_context, not_started, starting_workers, to_the_end,
                              worker_ignores_interrupts)
from .events import PartOutput, PartWriter, WriteState

__all__ = ["parallel_parts", "batches", "fork_context"]

_SHM = "/dev/shm"  # parts go from a worker to the parent through files here (memory), else in the temp folder


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


def parallel_parts(dec, work: list[list], writer: PartWriter, state: WriteState, jobs: int,
                   stall_s: float | None = None) -> Iterator[PartOutput]:
    """Every part of ``work`` (batches of (k, lo, hi), k = 0, 1, ... in lane order) written by ``jobs`` worker
    processes, yielded in order. ``state`` is the WriteState before part 0; it is left as after the last part.
    stall_s: the runtime's bound on workers that make no progress (None: ``forked.STALL_S``).

    Its own processes and pipes, not the runtime's pool (``forked.fork_imap``): a part that declares tracks or
    names waits, in the worker that decoded it, for the state the parts before it left, and sends its own back
    (a two-way exchange in the middle of a task, which a ``concurrent.futures`` task cannot hold); handing such
    a part back to the parent instead would decode it twice, or send its decoded arrays through a pipe."""
    from multiprocessing.connection import wait

    ctx = fork_context()
    n_parts = sum(len(b) for b in work)
    conns, procs = [], []
    spool = tempfile.TemporaryDirectory(prefix="ktrace-parts-", dir=_SHM if os.path.isdir(_SHM) else None)
    base = state.wire()
    try:
        for _ in range(min(jobs, len(work))):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(theirs, dec, writer, base, spool.name, [*conns, mine]), daemon=True)
            conns.append(mine)
            procs.append(p)  # before it starts: a Ctrl-C raised as the hold below ends still stops and reaps it
            try:
                with starting_workers():
                    try:
                        p.start()
                    except OSError as e:  # fork refused: said as that, never as a worker lost
                        raise not_started(e) from None
            finally:
                theirs.close()
        owner: dict = {}  # part -> its worker's connection
        left: dict = {}  # connection -> parts of its batch not yet received
        queue = list(work)

        def assign(c) -> None:
            if queue:
                batch = queue.pop(0)
                _send(c, ("batch", batch))
                owner.update({k: c for k, _, _ in batch})
                left[c] = len(batch)

        for c in conns:
            assign(c)
        got: dict = {}  # part -> its messages so far
        nxt, asked = 0, -1
        live = list(conns)

        def pids() -> list[int]:
            return [p.pid for p in procs if p.pid and p.exitcode is None]

        watch = Watch(pids, stall_s)
        while nxt < n_parts:
            msgs = got.get(nxt, [])
            kinds = [m[0] for m in msgs]
            if "error" in kinds:
                raise msgs[kinds.index("error")][2]
            if "plain" in kinds:  # its bytes do not depend on the parts before it: declared here
                _, _, out, tracks, path, sizes = msgs[0]
                out.chunks = [writer.plain_head(tracks, state), *_read_part(path, sizes)]
            elif "part" in kinds:  # declared by its worker with the state it was sent
                final = WriteState.from_wire(msgs[kinds.index("declared")][2])
                state.names, state.tracks = final.names, final.tracks
                _, _, out, path, sizes = msgs[kinds.index("part")]
                out.chunks = _read_part(path, sizes)
            else:
                if "needs" in kinds and asked < nxt:  # it waits for the state the parts before it left
                    _send(owner[nxt], ("state", state.wire()))
                    asked = nxt
                ready = wait(live, timeout=POLL_S)
                if not ready:  # never a wait without a bound: workers that use no CPU for STALL_S are stuck
                    watch.check()
                    continue
                watch = Watch(pids, stall_s)
                for c in ready:
                    try:
                        msg = c.recv()
                    except (EOFError, OSError):  # its end closed, or reset: the worker is gone
                        raise _lost() from None
                    got.setdefault(msg[1], []).append(msg)
                    if msg[0] == "error":  # the worker exits: its later parts come after this error anyway
                        live.remove(c)
                    if msg[0] in ("plain", "part"):
                        left[c] -= 1
                        if not left[c]:
                            assign(c)
                continue
            del got[nxt]
            yield out
            nxt += 1
    except BaseException:  # an error, Ctrl-C, or the consumer stopped: the workers are stopped at once
        to_the_end(lambda: _stop(conns, procs, wait_s=0))
        raise
    finally:
        to_the_end(lambda: _stop(conns, procs), spool.cleanup)


def _lost() -> KtraceError:
    return KtraceError("a convert worker process ended unexpectedly (out of memory, or killed?); run again, or "
                       "with --jobs 1")


def _send(c, msg) -> None:
    """A message to a worker; one that has died is reported as such (never a BrokenPipeError, which the
    command takes for its reader having stopped)."""
    try:
        c.send(msg)
    except OSError:
        raise _lost() from None


def _read_part(path: str, sizes: list) -> list:
    """A part's byte strings from the file its worker wrote (then removed)."""
    with open(path, "rb", buffering=0) as f:
        out = [f.read(n) if n else b"" for n in sizes]
    os.unlink(path)
    return out


def _stop(conns, procs, wait_s: float = 0.5) -> None:
    """Closes the pipes (a worker waiting on its pipe sees EOF and exits), kills what is still running after
    ``wait_s`` and reaps every worker."""
    for c in conns:
        c.close()
    for p in procs:
        if p.pid is None:
            continue
        p.join(timeout=wait_s)
        if p.is_alive():
            p.kill()
        p.join()


def _worker(conn, dec, writer: PartWriter, base: tuple, spool: str, inherited) -> None:
    for c in inherited:  # the parent's ends of the pipes forked into this copy: EOF must reach their workers
        c.close()
    worker_ignores_interrupts()  # Ctrl-C goes to the whole process group: the parent stops us
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    _keep_freed_memory()
    base_state = WriteState.from_wire(base)
    try:
        while True:
            msg = conn.recv()
            if msg[0] != "batch":
                return
            for k, lo, hi in msg[1]:
                try:
                    _part(conn, dec, writer, base_state, spool, k, lo, hi)
                except (EOFError, BrokenPipeError):
                    raise
                except Exception as e:  # noqa: BLE001 - handed to the parent, which raises it in its place
                    conn.send(("error", k, _portable(e)))
                    return
    except (EOFError, OSError):  # the parent is gone, or stopped us
        return


def _keep_freed_memory() -> None:
    """glibc: keep freed memory for the next part instead of returning it to the system (in a forked worker,
    each part's arrays would otherwise come back as fresh pages: tens of MB of page faults a part)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD
    mallopt(-3, 1 << 28)  # M_MMAP_THRESHOLD: big arrays from the heap, reused


def _part(conn, dec, writer: PartWriter, base: WriteState, spool: str, k: int, lo: int, hi: int) -> None:
    """Decodes part k and encodes it: at once when its bytes do not depend on the parts before it (plain),
    else once the parent sent the state those parts left (and this part's is sent back)."""
    d = dec.part(lo, hi)
    plain = writer.prepare_plain(d, base)
    if plain is not None:
        tracks, prep = plain
        chunks = list(writer.body(d, prep))
    else:
        conn.send(("needs", k))
        msg = conn.recv()
        if msg[0] != "state":
            raise EOFError
        state = WriteState.from_wire(msg[1])
        head, prep = writer.declare(d, state)
        conn.send(("declared", k, state.wire()))
        chunks = [head, *writer.body(d, prep)]
    out = writer.output(d, [], first=k == 0)
    del d
    path = os.path.join(spool, f"part{k}")
    with open(path, "wb", buffering=0) as f:
        for chunk in chunks:
            f.write(chunk)
    sizes = [len(c) for c in chunks]
    conn.send(("plain", k, out, tracks, path, sizes) if plain is not None else ("part", k, out, path, sizes))


def _portable(e: Exception) -> Exception:
    """The exception as the parent can unpickle it; a bug keeps the worker's traceback as a note."""
    if not isinstance(e, KtraceError) and hasattr(e, "add_note"):
        e.add_note("in a convert worker process:\n" + "".join(traceback.format_exception(e)))
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(e).__name__}: {e}")
