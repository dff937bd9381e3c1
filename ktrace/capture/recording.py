"""The capture API: a context object that owns one launch's profiler buffer.

    kern = CudaKernel.from_file("my.cu", "my_kernel")               # instrumented + control builds
    with LaunchCapture(blocks=132, max_events_per_lane=48, kernel=kern, name="mine",
                 event_names=["load", "compute"]) as cap:
        kern.instrumented(cap.pointer, x, grid=(132, 1, 1), block=(128, 1, 1))
    cap.save()            # mine.bin + mine.json (the sidecar) in the output folder
    ktrace.convert(cap.paths["bin"]); ktrace.analyze(cap.paths["bin"])   # the library, from here on

Capture stops at the buffer and its sidecar: converting and analyzing are ``ktrace.api``'s (``ktrace run``
composes them).

``profile(kern, ...)`` does all of it for a launch described by its arguments: times the instrumented
build against its control (interleaved CUDA events), then captures one instrumented launch.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import numpy as np

from ..decoding import layouts as _layouts
from ..core.errors import InputError, KtraceError
from . import settings as _settings
from ..core.records import frozen

__all__ = ["BUFFER", "LaunchCapture", "profile", "saved_captures", "forget_saved", "KeptLaunch", "keeping_launches"]


class _BufferArg:
    """Stands for the profiler buffer's pointer in ``profile``'s argument list."""

    def __repr__(self) -> str:
        return "BUFFER"


BUFFER = _BufferArg()
_SAVED: list["LaunchCapture"] = []


def saved_captures() -> list["LaunchCapture"]:
    """Captures saved in this process, in order (``ktrace run`` converts and reports each)."""
    return list(_SAVED)


def forget_saved() -> None:
    _SAVED.clear()


@frozen
class KeptLaunch:
    """A launch ``profile`` captured, kept for an A/B session (``ktrace run --ab``): its capture, its arguments
    (``BUFFER`` where the profiler buffer goes) and ``launch(args, stream)``, which launches the unprofiled build
    with ``args`` (resolved: ``resolve``); the buffer's place is taken by ``scratch``, an allocation of its
    size that the control build never writes."""

    capture: "LaunchCapture"
    args: tuple
    launch: Callable
    scratch: object = None

    def resolve(self, args=None) -> list:
        """``args`` (default its own) with the scratch allocation's address where ``BUFFER`` stands."""
        return [np.uintp(int(self.scratch)) if a is BUFFER else a for a in (self.args if args is None else args)]

    def control(self, stream=None) -> None:
        """Launch the unprofiled build on its own arguments."""
        self.launch(self.resolve(), stream)


_KEPT: list | None = None


@contextmanager
def keeping_launches():
    """Within the block, every ``profile`` call appends its ``KeptLaunch`` to the list this yields."""
    global _KEPT
    old, _KEPT = _KEPT, []
    try:
        yield _KEPT
    finally:
        _KEPT = old


def buffer_words(producer: str, lanes: int, capacity: int) -> int:
    """Words of a buffer: header, capacity records per lane, and for ktrace's header the trailer
    (one overflow count per lane, then the 64-bit timer anchor)."""
    return _layouts.buffer_words(lanes, capacity, trailer=producer == "ktrace")


class LaunchCapture:
    """One launch's profiler buffer: allocated and zeroed on ``with``, read back when the block ends.

    blocks, groups: the launch's blocks (all of gridDim) and warp groups per block (lanes = blocks *
    groups); max_events_per_lane: records each lane may write (ktrace's header drops and counts the rest;
    FlashInfer's has no guard and writes past the end: size it generously); producer: "ktrace" or
    "flashinfer" (default: ``kernel.producer``); kernel: the ``CudaKernel`` launched (its module gets the
    capacity, its build goes into the sidecar), or a PyCUDA module of your own built with ktrace's header
    (it gets the capacity); name: the files' stem; event_names, group_names: names in index order; grid,
    block, shared_bytes: the launch's shape, for the sidecar.
    """

    def __init__(self, blocks: int, groups: int = 1, max_events_per_lane: int = 64, *, producer: str | None = None,
                 kernel=None, name: str = "capture", event_names=(), group_names=(), grid=None, block=None,
                 shared_bytes: int = 0):
        if blocks <= 0 or groups <= 0 or max_events_per_lane <= 0:
            raise InputError(f"a capture needs blocks, groups and max_events_per_lane > 0 "
                             f"(got {blocks}, {groups}, {max_events_per_lane})")
        self.kernel = kernel
        self.producer = producer or getattr(kernel, "producer", "ktrace")
        if self.producer not in ("ktrace", "flashinfer"):
            raise InputError(f"producer {self.producer!r}: 'ktrace' or 'flashinfer'")
        self.blocks, self.groups, self.capacity = int(blocks), int(groups), int(max_events_per_lane)
        self.lanes = self.blocks * self.groups
        self.name = name
        self.event_names = list(event_names)
        self.group_names = list(group_names)
        self.grid = tuple(grid) if grid is not None else (self.blocks, 1, 1)
        self.block = tuple(block) if block is not None else None
        self.shared_bytes = int(shared_bytes)
        self.words: np.ndarray | None = None
        self.host_launch_unix_ns: int | None = None
        self.timing = None  # a timing.Comparison, when the builds were timed
        self.meta: dict = {}  # more sidecar keys: ground_truth, block_smid, checks, ...
        self.paths: dict[str, Path] = {}
        self._alloc = None

    # -- the buffer on the device ---------------------------------------------------------------------------
    @property
    def nwords(self) -> int:
        return buffer_words(self.producer, self.lanes, self.capacity)

    @property
    def pointer(self) -> np.uintp:
        """The buffer's device address, to pass as the kernel's ``uint64_t*`` argument."""
        if self._alloc is None:
            raise InputError("the capture's buffer exists only inside its 'with' block")
        return np.uintp(int(self._alloc))

    def __enter__(self) -> "LaunchCapture":
        from ._cuda import ensure_context

        cuda = ensure_context()
        nbytes = self.nwords * 8
        try:
            self._alloc = cuda.mem_alloc(nbytes)
        except cuda.Error as e:
            raise KtraceError(f"cannot allocate the {nbytes:,}-byte profiler buffer on the GPU ({e})") from None
        self.reset()
        if self.kernel is not None and self.producer == "ktrace":
            _set_capacity(self.kernel, self.capacity)
        self.host_launch_unix_ns = time.time_ns()
        return self

    def reset(self) -> None:
        """Zero the buffer (before a launch whose records should be the only ones in it)."""
        from ._cuda import driver

        driver().memset_d8(self._alloc, 0, self.nwords * 8)

    def mark_launch(self) -> None:
        """Note the host clock just before the launch (``with`` notes it on entry; call this when the
        launch comes later). It places the 32-bit timestamps in time when the kernel wrote no anchor."""
        self.host_launch_unix_ns = time.time_ns()

    def __exit__(self, exc_type, exc, tb) -> bool:
        from ._cuda import driver

        cuda = driver()
        try:
            if exc_type is None:
                try:
                    cuda.Context.synchronize()
                except cuda.Error as e:
                    raise KtraceError(f"the kernel failed on the GPU ({e}); its profiler buffer is lost") from None
                words = np.empty(self.nwords, dtype=np.uint64)
                cuda.memcpy_dtoh(words, self._alloc)
                self.words = words
        finally:
            self._alloc.free()
            self._alloc = None
        return False

    # -- what the buffer says --------------------------------------------------------------------------------
    def _need_words(self) -> np.ndarray:
        if self.words is None:
            raise InputError("the capture has no buffer yet: launch inside its 'with' block first")
        return self.words

    @property
    def header_ok(self) -> bool:
        """The kernel wrote the header this capture expects (blocks | groups << 32)."""
        return int(self._need_words()[0]) == _layouts.header_word(self.blocks, self.groups)

    @property
    def overflow(self) -> np.ndarray | None:
        """Records each lane dropped because it was full (ktrace's header only; None for FlashInfer's)."""
        if self.producer != "ktrace":
            return None
        return _layouts.overflow_counts(self._need_words(), self.lanes, self.capacity)

    @property
    def anchor_ns(self) -> int | None:
        """The kernel's 64-bit %globaltimer read at PROFILER_INIT (ktrace's header; None if absent)."""
        if self.producer != "ktrace":
            return None
        return _layouts.timer_anchor(self._need_words()) or None

    @property
    def records(self) -> int:
        """Non-empty record slots."""
        w = self._need_words()
        return int(np.count_nonzero(w[_layouts.HEADER_WORDS:_layouts.trailer_start(self.lanes, self.capacity)]))

    # -- files ---------------------------------------------------------------------------------------------
    def default_path(self) -> Path:
        s = _settings.current()
        return s.out_dir / f"{self.name}{s.suffix}.bin"

    def save(self, path=None) -> Path:
        """Write ``NAME.bin`` (the raw buffer) and ``NAME.json`` (the sidecar); returns the .bin path."""
        from ..core.sidecar import write_sidecar
        from .sidecar import capture_metadata

        words = self._need_words()
        p = Path(path) if path is not None else self.default_path()
        if p.suffix != ".bin":
            p = p.with_name(p.name + ".bin")
        p.parent.mkdir(parents=True, exist_ok=True)
        words.astype("<u8").tofile(p)
        side = write_sidecar(p.with_suffix(".json"), capture_metadata(self, p))
        self.paths.update(bin=p, json=side)
        if self not in _SAVED:
            _SAVED.append(self)
        return p


def _set_capacity(kernel, capacity: int) -> None:
    """Tell ktrace's header the per-lane capacity: through a ``CudaKernel``, or a PyCUDA module of the user's
    own compiled with ktrace/profiler.cuh (its __constant__ variable ``ktrace_profiler_capacity``)."""
    if hasattr(kernel, "set_capacity"):
        kernel.set_capacity(capacity)
        return
    from ._cuda import driver

    try:
        ptr, _ = kernel.get_global("ktrace_profiler_capacity")
    except Exception:  # noqa: BLE001 - pycuda raises its own error types for a missing symbol
        raise InputError("the module has no ktrace_profiler_capacity: was it compiled with ktrace/profiler.cuh "
                         "and -DFLASHINFER_ENABLE_PROFILER?") from None
    driver().memcpy_htod(ptr, np.array([capacity], dtype=np.uint32))


def _prod(xs) -> int:
    return int(math.prod(int(x) for x in xs))


def profile(kernel, *, grid, block, args, shared_bytes: int = 0, groups: int = 1, max_events_per_lane: int,
            event_names=(), group_names=(), name: str, reps: int | None = None, warmup: int | None = None,
            before_capture=None) -> LaunchCapture:
    """Time ``kernel``'s instrumented build against its control, then capture one instrumented launch.

    args: the kernel's arguments, with ``BUFFER`` where the profiler buffer goes (both builds get the same
    arguments); grid, block: 3-tuples; shared_bytes: dynamic shared memory; groups: lanes per block;
    before_capture: called before the captured launch (to reset state the timing runs changed).
    Returns the LaunchCapture (buffer read back, ``timing`` set), not yet saved: add metadata to ``cap.meta``,
    then ``cap.save()``.
    """
    s = _settings.current()
    grid, block = tuple(grid) + (1,) * (3 - len(grid)), tuple(block) + (1,) * (3 - len(block))
    cap = LaunchCapture(_prod(grid), groups, max_events_per_lane, kernel=kernel, name=name, event_names=event_names,
                  group_names=group_names, grid=grid, block=block, shared_bytes=shared_bytes)
    with cap:
        real = [cap.pointer if a is BUFFER else a for a in args]

        def launcher(fn):
            return lambda stream=None: fn(*real, grid=grid, block=block, shared=shared_bytes, stream=stream)

        if s.timing:
            from .timing import time_interleaved

            cap.timing = time_interleaved(launcher(kernel.instrumented), launcher(kernel.control),
                                          reps=reps or s.reps, warmup=s.warmup if warmup is None else warmup,
                                          spin_us=s.spin_us)
        from ._cuda import driver

        driver().Context.synchronize()
        cap.reset()
        if before_capture is not None:
            before_capture()
        driver().Context.synchronize()
        from .multigpu import launch_barrier

        launch_barrier()  # a multi-GPU run (ktrace run --device 0,1): all GPUs launch together
        cap.mark_launch()
        launcher(kernel.instrumented)()
    if _KEPT is not None:
        _KEPT.append(_kept(kernel, cap, args, grid, block, shared_bytes))
    return cap


def _kept(kernel, cap: LaunchCapture, args, grid, block, shared_bytes: int) -> KeptLaunch:
    from ._cuda import driver

    def launch(real, stream=None):
        kernel.control(*real, grid=grid, block=block, shared=shared_bytes, stream=stream)

    return KeptLaunch(cap, tuple(args), launch, driver().mem_alloc(cap.nwords * 8))
