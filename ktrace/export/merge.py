"""Several GPUs' buffers in one Perfetto trace: a process per GPU, every GPU on the reference GPU's time axis.

    res = merge_traces(["run_gpu0.bin", "run_gpu1.bin"], "run.perfetto-trace")
    res.alignment.clocks[1].shift_ns          # -16400: GPU 1's clock ran 16.4 us ahead of GPU 0's

Each buffer is decoded as ``ktrace convert`` does and written with its own ``TraceSpace``: its own packet
sequence (``trusted_packet_sequence_id`` = position + 1, with its own interned names), its own track uuid
range (position * ``GPU_UUID_STRIDE``), and a process track ``GPU i (name)`` (pid = position + 1) above its
launch track. Its times are shifted by the alignment (``ktrace.decoding.align``): minus the measured clock
offset from its sidecar, or onto the first buffer's first record with ``align="start"``.
"""

from __future__ import annotations

from pathlib import Path

from ..decoding.align import Alignment, GpuClock, Shifted, align, open_decoders
from ..core.model import Summary
from .tracks import GPU_UUID_STRIDE
from .writer import TraceSpace, trace_chunks, write_chunks
from ..core.records import frozen

__all__ = ["MergeResult", "merge_traces", "merge_chunks", "gpu_space", "MAX_GPUS"]

MAX_GPUS = 127  # one packet sequence id (a one-byte varint) per GPU


@frozen
class MergeResult:
    """What ``merge_traces`` wrote: the path, its size in bytes, how the GPUs were aligned, and each
    buffer's Summary (in the order given)."""

    path: Path
    bytes: int
    alignment: Alignment
    summaries: tuple[Summary, ...]


def gpu_space(clock: GpuClock) -> TraceSpace:
    """The TraceSpace of the buffer at ``clock.position``: its sequence, uuid range, process track and
    the alignment facts as launch args."""
    args = [("gpu", clock.label), ("clock_shift_ns", int(clock.shift_ns))]
    if clock.device_index is not None:
        args.append(("device_index", int(clock.device_index)))
    if clock.offset_to_reference_ns is not None:
        args.append(("clock_offset_to_reference_ns", int(clock.offset_to_reference_ns)))
    if clock.offset_spread_ns is not None:
        args.append(("clock_offset_spread_ns", int(clock.offset_spread_ns)))
    if clock.offset_source:
        args.append(("clock_offset_source", clock.offset_source))
    return TraceSpace(seq_id=clock.position + 1, uuid_offset=clock.position * GPU_UUID_STRIDE,
                      process=(clock.position + 1, clock.label), description=_describe(clock),
                      launch_args=tuple(args))


def _describe(c: GpuClock) -> str:
    if c.offset_to_reference_ns is None:
        how = "own clock, no measured offset" if c.shift_ns == 0 else "aligned by its first record"
    else:
        how = (f"clock offset to the reference GPU {c.offset_to_reference_ns:+,} ns (spread "
               f"{c.offset_spread_ns if c.offset_spread_ns is not None else '?'} ns"
               + (f", from {c.offset_source}" if c.offset_source else "") + ")")
    return f"{c.source}: {how}; times shifted by {c.shift_ns:+,} ns"


def merge_chunks(decoders, alignment: Alignment, tracks: str = "sm", summaries_out: list | None = None):
    """The merged trace as byte strings: each buffer in turn, shifted and in its own TraceSpace."""
    for dec, clock in zip(decoders, alignment.clocks):
        got: list = []
        yield from trace_chunks(Shifted(dec, clock.shift_ns), tracks, summary_out=got, space=gpu_space(clock))
        if summaries_out is not None:
            summaries_out.append(got[0] if got else Summary())


def merge_traces(sources, out, *, align_mode: str = "offset", tracks: str = "sm", **decode_options) -> MergeResult:
    """Write one trace holding every buffer in ``sources`` (paths, BufferDecoders or Decodeds), one process
    per GPU, aligned by ``align_mode`` ("offset": measured clock offsets; "start": first records).

    decode_options apply to every buffer (events, groups, layout, num_blocks, num_groups; sidecar=False to
    ignore them all). Raises InputError when the buffers cannot be aligned (say, no time anchor).
    """
    from ..core.errors import InputError

    decoders = open_decoders(sources, **decode_options)
    if len(decoders) > MAX_GPUS:
        raise InputError(f"{len(decoders)} buffers: a merged trace holds at most {MAX_GPUS}")
    alignment = align(decoders, align_mode)
    summaries: list = []
    size = write_chunks(out, merge_chunks(decoders, alignment, tracks, summaries))
    return MergeResult(Path(out), size, alignment, tuple(summaries))
