"""An A/B session for kernels launched through torch (FlashInfer's wrappers): ``ktrace run --ab`` for callables.

    rec = record_ab((lambda: prof_a.run(q, kv, profiler_buffer=buf), lambda: ctrl_a.run(q, kv)),   # before
                    (lambda: prof_b.run(q, kv, profiler_buffer=buf), lambda: ctrl_b.run(q, kv)),   # after
                    buf, event_names=["prefill", "decode", "reduction"], name="fi_batch_attention",
                    out_dir="captures")
    rec.record.test.text      # the paired verdict; captures/fi_batch_attention_vs_fi_batch_attention.ab.json
    # then: ktrace diff captures/fi_batch_attention_before.bin captures/fi_batch_attention_after.bin

Each side is (profiled, unprofiled): no-argument callables, closing over their inputs and the profiler buffer.
First each side's profiled and unprofiled callables are timed interleaved (its profiler overhead, as
``record_runs`` does), then the two unprofiled callables against each other (``time_pairs``: alternating
order, warm-up pairs, a busy kernel before each call), then one profiled call of each is captured
(``NAME_before.bin``, ``NAME_after.bin`` with their sidecars) and the record is written beside them.
"""

from __future__ import annotations

from pathlib import Path

from ..core import abrecord
from ..core.errors import InputError
from ..core.paired import DEFAULT_THRESHOLD_PCT
from .ab import PairedTimes, time_pairs
from .timing import Comparison
from .torchflow import Recorded, TorchBackend, cached_timer, save_one, time_callables
from ..core.records import frozen

__all__ = ["record_ab", "RecordedAB"]


@frozen
class RecordedAB:
    """What ``record_ab`` saved: both buffers, each side's overhead timing, the pairs, the record read back."""

    before: Path
    after: Path
    overhead: tuple[Comparison, Comparison]
    times: PairedTimes
    record: abrecord.Record


def _pair(x, what: str) -> tuple:
    if isinstance(x, (tuple, list)) and len(x) == 2:
        return tuple(x)
    raise InputError(f"record_ab: {what} must be a pair (before, after)" if what != "side" else
                     "record_ab: each side is (profiled, unprofiled): two no-argument callables")


def record_ab(before, after, buffer, *, event_names, name, out_dir, pairs: int = 200, warmup: int = 10,
              reps: int = 50, spin_us: float = 200.0, confidence: float = 0.95,
              threshold_pct: float = DEFAULT_THRESHOLD_PCT, group_names=(), keep_entries: int | None = None,
              workload=None, ground_truth=None, kernel: str | None = None, grid=None, block=None,
              num_blocks: int | None = None, num_groups: int | None = None, group_of_thread: str | None = None,
              timer: dict | None = None, compress: bool = False, backend=None) -> RecordedAB:
    """Time before against after, capture one profiled call of each, write the record (see the module).

    before, after: (profiled, unprofiled) callables; buffer: the profiler buffer both profiled callables
    write, or a pair (before's, after's); name: both stems' base, or a pair of them; pairs, warmup: the A/B
    session's timed and warm-up pairs; reps: each side's own profiled/unprofiled timing; threshold_pct: the
    change that counts (docs/sidecar.md); the rest as ``record_runs``. Returns the saved files and the record."""
    pb, cb = _pair(before, "side")
    pa, ca = _pair(after, "side")
    if not all(callable(f) for f in (pb, cb, pa, ca)):
        raise InputError("record_ab: each side is (profiled, unprofiled): two no-argument callables")
    bufs = _pair(buffer, "buffer") if isinstance(buffer, (tuple, list)) else (buffer, buffer)
    names = _pair(name, "name") if isinstance(name, (tuple, list)) else (name, name)
    events = [str(x) for x in event_names]
    if not events:
        raise InputError("record_ab needs event_names (the kernel's events in enum order)")
    be = backend if backend is not None else TorchBackend()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    overhead = []
    reps_us = []
    for prof, ctrl in ((pb, cb), (pa, ca)):
        cmp, r = time_callables(prof, ctrl, reps=reps, warmup=warmup, spin_us=spin_us, backend=be)
        overhead.append(cmp)
        reps_us.append(r)
    times = time_pairs(cb, ca, pairs=pairs, warmup=warmup, spin_us=spin_us, backend=be,
                       events="CUDA events (torch; torch.cuda._sleep as the busy kernel)")
    device = be.device_facts()
    if timer is None:
        timer = cached_timer(device)
    launch = dict(kernel=kernel, grid=grid, block=block, num_blocks=num_blocks, num_groups=num_groups,
                  group_of_thread=group_of_thread, timer=timer)
    record_file = abrecord.record_name(names[0], names[1])
    sides, paths = [], []
    for i, (role, prof) in enumerate((("before", pb), ("after", pa))):
        total = be.length(bufs[i])
        keep = total if keep_entries is None else int(keep_entries)
        if not 1 <= keep <= total:
            raise InputError(f"keep_entries={keep_entries}: between 1 and the buffer's {total:,} words")
        rec = Recorded(name=names[i])
        path = save_one(be, prof, bufs[i], keep, out, f"{names[i]}_{role}", names[i], events, list(group_names),
                        device, overhead[i], reps_us[i], launch, workload, ground_truth,
                        dict(ab_record=record_file, ab_side=role), compress, rec)
        paths.append(path)
        sides.append({"label": f"{role} callable", "name": names[i], "capture": path.name,
                      "sidecar": rec.sidecars[0].name, "sha256": abrecord.file_sha256(path),
                      "kernel": kernel or names[i], "profiler_overhead": overhead[i].as_dict()})
    from .._version import __version__

    data = abrecord.build_record(sides[0], sides[1], times.before_us, times.after_us, times.order,
                                 method=times.method, warmup=warmup, spin_us=spin_us, device=device,
                                 confidence=confidence, threshold_pct=threshold_pct, version=__version__)
    rpath = abrecord.write_record(out / record_file, data)
    return RecordedAB(paths[0], paths[1], (overhead[0], overhead[1]), times, abrecord.read_record(rpath))
