"""A/B sessions: the before and the after variant of a kernel timed against each other in one process.

    ktrace run --ab BEFORE.py AFTER.py          # or --ab "work.py" "work.py --extra-work 2 --name more"

Each driver runs as ``ktrace run`` runs it (its own build compiled with and without the profiler, the two
timed interleaved: that side's profiler overhead, one profiled launch captured and saved, suffixed
``_before`` / ``_after``), while ``profile`` keeps each captured launch's unprofiled launcher. Then the two
unprofiled builds are timed interleaved on the same stream: pairs in alternating order (A B, B A, A B, ...),
after warm-up pairs, a busy kernel queued before each launch so the host's launch overhead stays outside the
events; and the comparison record (``ktrace.core.abrecord``) is written beside the two captures.

``time_pairs`` does the interleaving through a backend object (CUDA events here, torch's for
``record_ab``, a fake one in the tests), so everything but the GPU work runs without a GPU.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np

from ..core import abrecord
from ..core.errors import InputError
from ..core.paired import DEFAULT_THRESHOLD_PCT, MIN_PAIRS
from . import settings as _settings
from ..core.records import frozen

__all__ = ["PairedTimes", "time_pairs", "CudaEvents", "DriverCall", "ABSession", "run_ab", "METHOD"]

METHOD = ("{events} around one launch of each variant's unprofiled build on one stream, a {spin:g} us busy "
          "kernel queued before each so host launch overhead is hidden; the variants in alternating order "
          "(A B, B A, ...) after {warmup} warm-up pairs; {pairs} pairs, one process, one GPU")


@frozen
class PairedTimes:
    """Kernel times of each pair (µs), in the order the pairs ran; ``order[i]``: "AB" when before ran first."""

    before_us: tuple[float, ...]
    after_us: tuple[float, ...]
    order: tuple[str, ...]
    warmup: int
    spin_us: float
    method: str
    buffers: tuple[str, ...] = ()  # per pair, whose buffers both variants ran on ("before"/"after"); () own


def time_pairs(before: Callable, after: Callable, *, pairs: int = 200, warmup: int = 10, spin_us: float = 200.0,
               backend, events: str = "CUDA events", shared: bool = False,
               stage: Callable | None = None) -> PairedTimes:
    """Time two no-argument launchers against each other: ``warmup`` untimed pairs, then ``pairs`` timed ones,
    pair i in the order (before, after) for even i and (after, before) for odd i, each launch between two
    events and behind ``spin_us`` of busy GPU time. backend: ``event()``, ``record(ev)``, ``spin(us)``,
    ``synchronize()``, ``elapsed_us(start, end)``; events: how the backend times, for ``method``; shared: the
    launchers take which variant's buffers to run on (0 before's, 1 after's), both variants of pairs 4k and
    4k+1 on before's, of 4k+2 and 4k+3 on after's, so that where the buffers lie cancels in every pair; stage:
    ``stage(which, mem)`` puts variant ``which``'s own inputs into buffer set ``mem``, called before each
    launch's busy kernel (outside its events), so each variant runs on its own data wherever it lies."""
    if pairs < MIN_PAIRS or warmup < 0:
        raise InputError(f"an A/B session needs at least {MIN_PAIRS} pairs and warmup >= 0 (got {pairs}, {warmup})")
    fns = (before, after)
    out: tuple[list, list] = ([], [])
    order, mems = [], []
    ev = [backend.event() for _ in range(4)]
    for i in range(warmup + pairs):
        seq = (0, 1) if i % 2 == 0 else (1, 0)
        mem = (i // 2) % 2
        for j, which in enumerate(seq):
            if stage is not None:
                stage(which, mem)
            backend.spin(spin_us)
            backend.record(ev[2 * j])
            if shared:
                fns[which](mem)
            else:
                fns[which]()
            backend.record(ev[2 * j + 1])
        backend.synchronize()
        if i >= warmup:
            for j, which in enumerate(seq):
                out[which].append(float(backend.elapsed_us(ev[2 * j], ev[2 * j + 1])))
            order.append("AB" if seq[0] == 0 else "BA")
            mems.append(("before", "after")[mem])
    method = METHOD.format(events=events, spin=spin_us, warmup=warmup, pairs=pairs)
    if shared:
        method += "; both variants of a pair on the same buffers, before's and after's in turn (two pairs each)"
    return PairedTimes(tuple(out[0]), tuple(out[1]), tuple(order), warmup, float(spin_us), method,
                       tuple(mems) if shared else ())


class CudaEvents:
    """``time_pairs``'s backend on PyCUDA: one stream, its events, ktrace's busy kernel."""

    def __init__(self):
        from ._cuda import ensure_context
        from .timing import _spin_function

        self.cuda = ensure_context()
        self.stream = self.cuda.Stream()
        self._spin = _spin_function()

    def event(self):
        return self.cuda.Event()

    def record(self, ev) -> None:
        ev.record(self.stream)

    @staticmethod
    def elapsed_us(start, end) -> float:
        return end.time_since(start) * 1000.0

    def spin(self, us: float) -> None:
        if us > 0:
            self._spin(np.uint64(int(us * 1000)), grid=(1, 1, 1), block=(1, 1, 1), stream=self.stream)

    def synchronize(self) -> None:
        self.stream.synchronize()


@frozen
class DriverCall:
    """A driver script and its arguments: one side of ``ktrace run --ab``."""

    path: Path
    argv: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str, role: str = "") -> "DriverCall":
        """``"work.py --extra-work 2"`` (shell words: the script, then its arguments)."""
        try:
            words = shlex.split(text)
        except ValueError as e:
            raise InputError(f"--ab {role} {text!r}: {e} (quote a driver and its arguments as one word)") from None
        if not words:
            raise InputError(f"--ab {role}: an empty driver; give DRIVER.py, or \"DRIVER.py ARGS\" in quotes")
        p = Path(words[0])
        if not p.is_file():
            raise InputError(f"--ab {role} {words[0]}: no such driver script")
        return cls(p, tuple(words[1:]))

    @property
    def label(self) -> str:
        return shlex.join([str(self.path), *self.argv])


@frozen
class ABSession:
    """What ``run_ab`` did: both captures (saved, sidecars naming the record), the pairs, the record read back."""

    before: object
    after: object
    times: PairedTimes
    record: abrecord.Record


def _is_array(x) -> bool:
    return hasattr(x, "gpudata") and hasattr(x, "nbytes") and hasattr(x, "dtype")


def sharing_problem(a, b) -> str:
    """Why the two kept launches cannot run on each other's buffers ("" when they can): every argument must be
    the profiler buffer in both, a GPU array of the same dtype and shape in both, or a scalar in both (scalars
    stay with their own kernel)."""
    from .recording import BUFFER

    if len(a.args) != len(b.args):
        return f"their kernels take {len(a.args)} and {len(b.args)} arguments"
    for i, (x, y) in enumerate(zip(a.args, b.args)):
        if (x is BUFFER) != (y is BUFFER):
            return f"argument {i} is the profiler buffer in one and not the other"
        if x is BUFFER:
            continue
        if _is_array(x) or _is_array(y):
            if not (_is_array(x) and _is_array(y) and x.dtype == y.dtype and tuple(x.shape) == tuple(y.shape)):
                return f"argument {i} is not a GPU array of the same dtype and shape in both"
        elif not (isinstance(x, (np.generic, int, float)) and isinstance(y, (np.generic, int, float))):
            return (f"argument {i} ({type(x).__name__}) is memory whose size ktrace cannot see (pass a GPUArray to "
                    "let the variants share it)")
    return ""


def _contents(x) -> bytes:
    """A GPU array's bytes, read back to the host."""
    return np.ascontiguousarray(x.get()).tobytes()


def own_contents(a, b) -> tuple[int, ...]:
    """The arguments (indices) that are GPU arrays in both kept launches and hold different bytes. The data a
    variant's driver prepares (a work table, a chunk map, a plan) is part of that variant: in a shared session
    each variant's own bytes of these are copied into whichever buffers it runs on (``_stager``), so a fix that
    lives in the data is timed, and only where the memory lies cancels."""
    return tuple(i for i, (x, y) in enumerate(zip(a.args, b.args))
                 if _is_array(x) and _is_array(y) and _contents(x) != _contents(y))


def _copy_into(dst, src, stream) -> None:
    """``src``'s bytes into ``dst`` on ``stream`` (device to device)."""
    from ._cuda import driver

    driver().memcpy_dtod_async(dst.gpudata, src.gpudata, src.nbytes, stream)


def _stager(sides, which_args, stream) -> Callable:
    """``stage(v, m)``: variant v's own contents of the arguments ``which_args`` (copies taken here, before any
    pair) into the arrays of buffer set m (``sides[m]``'s), on ``stream``."""
    own = [{i: k.args[i].copy() for i in which_args} for k in sides]

    def stage(v: int, m: int) -> None:
        for i in which_args:
            _copy_into(sides[m].args[i], own[v][i], stream)

    return stage


def _shared_launcher(k, mems, stream) -> Callable:
    """``f(m)``: k's unprofiled build on the GPU arrays of ``mems[m]``, its own scalars and scratch buffer."""
    argsets = [k.resolve([m.args[i] if _is_array(a) else a for i, a in enumerate(k.args)]) for m in mems]
    return lambda m: k.launch(argsets[m], stream)


def _forget_modules_from(folder: Path, known: set) -> None:
    """Forget modules a driver imported from its own folder, so the other driver imports its own helpers of
    the same name (the kept launchers hold on to what they use)."""
    root = folder.resolve()
    for name in [m for m in sys.modules if m not in known]:
        f = getattr(sys.modules.get(name), "__file__", None)
        if f and Path(f).resolve().parent == root:
            del sys.modules[name]


def _run_side(call: DriverCall, role: str, base_suffix: str):
    from .recording import keeping_launches
    from .runner import run_driver

    _settings.configure(suffix=f"{base_suffix}_{role}")
    known = set(sys.modules)
    with keeping_launches() as kept:
        caps = run_driver(call.path, call.argv)
    _forget_modules_from(call.path.parent, known)
    if len(kept) != 1 or len(caps) != 1 or kept[0].capture is not caps[0]:
        raise InputError(f"{call.path}: profiled {len(kept)} launch(es) through profile() and saved {len(caps)} "
                         "capture(s); --ab compares drivers that profile one launch with profile() and save it")
    if caps[0].timing is None:
        raise InputError(f"{call.path}: its launch was not timed; --ab needs the timing (drop --no-timing)")
    return kept[0]


def _side(call: DriverCall, cap) -> dict:
    return {"label": call.label, "name": cap.name, "capture": cap.paths["bin"].name,
            "sidecar": cap.paths["json"].name, "sha256": abrecord.file_sha256(cap.paths["bin"]),
            "kernel": cap.kernel.spec.name if hasattr(cap.kernel, "spec") else cap.name,
            "profiler_overhead": cap.timing.as_dict()}


def name_record(path: Path, record_file: str, role: str) -> None:
    """Add ``checks.ab_record`` and ``checks.ab_side`` to the sidecar at ``path`` (the record is found from it)."""
    import json

    from ..core.sidecar import write_sidecar

    meta = json.loads(path.read_text(encoding="utf-8"))
    checks = meta.get("checks") if isinstance(meta.get("checks"), dict) else {}
    checks.update(ab_record=record_file, ab_side=role)
    meta["checks"] = checks
    write_sidecar(path, meta)


def run_ab(before: DriverCall, after: DriverCall, *, pairs: int = 200, warmup: int = 10, confidence: float = 0.95,
           threshold_pct: float = DEFAULT_THRESHOLD_PCT, buffers: str = "shared") -> ABSession:
    """Run both drivers, time their unprofiled builds against each other, write the record; returns the session.

    The drivers write where ``settings`` say (``ktrace run --out``), each capture suffixed ``_before`` or
    ``_after``; the record is ``BEFORE_vs_AFTER.ab.json`` beside them. buffers: "shared" (default) runs both
    variants of each pair on the same GPU arrays, before's and after's in turn, when their arguments match
    (``sharing_problem``): where a buffer lies moves a kernel's time (a barrier counter's L2 home: 1.3% on an
    H200), so two allocations of the same inputs differ as two variants would; an array whose contents differ
    between the variants (``own_contents``: a work table, a chunk map) gets each variant's own bytes copied in
    before each of its launches, so a fix that lives in the data is timed; "own": each on its own buffers."""
    from .._version import __version__
    from ._cuda import device_index, device_info, ensure_context

    if pairs < MIN_PAIRS:
        raise InputError(f"--pairs {pairs}: an A/B session needs at least {MIN_PAIRS} pairs (50 or more advised)")
    s = _settings.current()
    if not s.timing:
        raise InputError("--ab times the unprofiled builds against each other: drop --no-timing")
    ensure_context()
    base = s.suffix
    try:
        a = _run_side(before, "before", base)
        b = _run_side(after, "after", base)
    finally:
        _settings.configure(suffix=base)
    folder = a.capture.paths["bin"].parent
    if b.capture.paths["bin"].parent != folder:
        raise InputError(f"the drivers saved their captures in different folders ({folder}, "
                         f"{b.capture.paths['bin'].parent}); --ab writes the record beside both: save them with "
                         "cap.save() (the folder of ktrace run --out)")
    if buffers not in ("shared", "own"):
        raise InputError(f"buffers {buffers!r}: 'shared' or 'own'")
    problem = sharing_problem(a, b) if buffers == "shared" else "--ab-buffers own"
    own: tuple[int, ...] = ()
    backend = CudaEvents()
    if problem:
        times = time_pairs(lambda: a.control(backend.stream), lambda: b.control(backend.stream), pairs=pairs,
                           warmup=warmup, spin_us=s.spin_us, backend=backend)
    else:
        own = own_contents(a, b)
        times = time_pairs(_shared_launcher(a, (a, b), backend.stream), _shared_launcher(b, (a, b), backend.stream),
                           pairs=pairs, warmup=warmup, spin_us=s.spin_us, backend=backend, shared=True,
                           stage=_stager((a, b), own, backend.stream) if own else None)
        if own:
            times = replace(times, method=times.method + (
                f"; each variant's own contents of argument(s) {', '.join(map(str, own))} copied into those "
                "buffers before each of its launches, outside the events"))
    name = abrecord.record_name(a.capture.name + base, b.capture.name + base)
    dev = {"index": device_index(), **{k: v for k, v in device_info().as_dict().items()
                                       if k in ("name", "pci_bus_id", "driver_version", "multiprocessors")}}
    for kept, role in ((a, "before"), (b, "after")):
        name_record(kept.capture.paths["json"], name, role)
    rec = abrecord.build_record(_side(before, a.capture), _side(after, b.capture), times.before_us, times.after_us,
                                times.order, method=times.method, warmup=warmup, spin_us=times.spin_us, device=dev,
                                confidence=confidence, threshold_pct=threshold_pct, version=__version__,
                                buffers_of_pair=times.buffers, buffers_note=problem, own_contents=own)
    path = abrecord.write_record(folder / name, rec)
    return ABSession(a.capture, b.capture, times, abrecord.read_record(path))
