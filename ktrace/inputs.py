"""The one way in: whatever a command is given, turned into what it needs, decoded once.

    with open_input("run.bin", engine="auto") as inp:     # or a trace, bytes, an array, a Decoded, a Session
        inp.session.query("SELECT 1")                     # the trace, loaded into the trace processor
    gpus = open_gpus(["run_gpu0.bin", "run_gpu1.bin"])    # several GPUs: a decoder each, and their alignment

``open_input`` checks the decoding options once (``buffer_options``: refused for traces), opens one
BufferDecoder for a buffer, writes it to a temporary trace only when the command needs a trace (removed on
exit), and opens the engine on it only when the command needs a session. Every command (analyze, query,
check, diff, view, merge, the multi-GPU analysis) comes in through here.
"""

from __future__ import annotations

import os
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from .decoding import BufferDecoder, is_proton_source, open_source
from .decoding.options import decode_options
from .decoding.clocks import given_offsets
from .decoding.align import Alignment, Shifted, align, open_decoders
from .core.errors import InputError
from .core.filetypes import (BUFFER_SUFFIXES, TRACE_SUFFIXES, buffer_stem, is_iket_pftrace, is_trace, json_found,
                              refuse_special_input)
from .core.model import Decoded, Summary
from .core.outputs import temporary_folder
from .core.progress import stage
from .core.records import frozen

__all__ = ["Input", "Gpus", "open_input", "open_gpus", "refuse_traces", "buffer_options", "given_options", "is_session",
           "is_trace", "is_proton_source", "TRACE_SUFFIXES", "BUFFER_SUFFIXES", "NEEDS"]

NEEDS = ("decoder", "trace", "session")


@dataclass
class Input:
    """One resolved input. kind: 'trace', 'buffer', 'decoded' or 'session'; name: what results call it (the
    path as given). decoder: the buffer's BufferDecoder (kind 'buffer'); decoded: a Decoded as given; trace:
    a trace path (the given one, or the temporary one written from the buffer); summary: the buffer's counts
    when a trace was written from it; session: the open engine Session (when asked for one)."""

    source: object
    name: str
    kind: str
    decoder: BufferDecoder | None = None
    decoded: Decoded | None = None
    trace: Path | None = None
    summary: Summary | None = None
    session: object = None


def is_session(x) -> bool:
    """True for an open engine Session (anything with ``query`` and ``add_sql_package``)."""
    return hasattr(x, "query") and hasattr(x, "add_sql_package")


def given_options(options: dict) -> dict:
    """The decoding options actually set (None and False mean: not given)."""
    return {k: v for k, v in options.items() if v not in (None, False)}


def buffer_options(sources, options: dict) -> dict:
    """The decoding options for ``sources``, checked once: refused (InputError) for a name that is no decoding
    option, and when every source is a trace path, since traces are already decoded. Returns ``options``
    unchanged otherwise (``event_names``/``group_names`` are folded by the decoder)."""
    paths = [s for s in sources if isinstance(s, (str, os.PathLike))]
    decode_options(options)  # unknown names refused here, for traces too, with the accepted ones listed
    given = given_options(options)
    if given and paths and len(paths) == len(sources) and all(is_trace(s) for s in paths):
        names = ", ".join(given)
        if len(paths) == 1:
            raise InputError(f"{paths[0]}: decoding options ({names}) apply to buffers, not traces")
        raise InputError(f"decoding options ({names}) apply to buffers; {', '.join(map(str, paths))} are traces")
    return options


def _name(source) -> str:
    if isinstance(source, (str, os.PathLike)):
        return str(source)
    if isinstance(source, Decoded):
        return str(source.source)
    if isinstance(source, BufferDecoder):
        return str(source.buf.path or source.buf.name)
    return "buffer"


def _kind(source) -> str:
    if is_session(source):
        return "session"
    if isinstance(source, Decoded):
        return "decoded"
    if isinstance(source, (str, os.PathLike)) and is_trace(source):
        return "trace"
    return "buffer"


@contextmanager
def open_input(source, *, need: str = "session", engine: str = "auto", progress=None, tracks: str = "sm",
               temp_prefix: str = "ktrace-", **decode_options):
    """Resolve ``source`` into an ``Input`` holding what ``need`` asks for: 'decoder' (a buffer's decoder
    only), 'trace' (a trace path: a buffer or Decoded is written to a temporary one, in ``tracks`` mode) or
    'session' (that trace open in ``engine``; ``progress(done_bytes, total_bytes)`` while it loads). Temporary
    files and the session are released on exit.

    source: a buffer path, a trace path, a Triton Proton trace (``.chrome_trace``: read into a Decoded, kind
    'decoded'), bytes or a numpy array (a buffer), a BufferDecoder, a Decoded or an open Session.
    decode_options (events, groups, layout, sidecar, num_blocks, num_groups; lanes, sm_clock_mhz, proton_log
    for a Proton trace) apply to a buffer;
    the caller checks them once for all its inputs (``buffer_options``), so a trace here ignores them.
    Raises InputError for unreadable input.
    """
    if need not in NEEDS:
        raise ValueError(f"need {need!r}: one of {', '.join(NEEDS)}")
    if isinstance(source, (str, os.PathLike)):
        refuse_special_input(source)  # a FIFO would block the first read: refused before it is opened
    kind = _kind(source)
    inp = Input(source, _name(source), kind)
    if kind == "session":
        inp.session = source
        yield inp
        return
    if kind == "decoded":
        inp.decoded = source
    elif kind == "buffer":
        opened = source if isinstance(source, (BufferDecoder, Shifted)) else open_source(source, **decode_options)
        if isinstance(opened, Decoded):  # a Triton Proton trace: read whole, then as a Decoded
            inp.kind, inp.decoded = "decoded", opened
        else:
            inp.decoder = opened
    else:
        if isinstance(source, (str, os.PathLike)) and is_iket_pftrace(source):
            raise InputError(f"{source}: NVIDIA IKET's Perfetto trace: ktrace reads IKET's JSON trace, which holds the "
                             "same ranges with each warp's SM, TPC and GPC; give the iket_pid_<pid>.trace.json "
                             "run-iket wrote beside it (run-iket ... profile --postprocess all, or run-iket "
                             "postprocess --postprocess json on the capture folder)")
        if isinstance(source, (str, os.PathLike)) and str(source).lower().endswith((".json", ".json.gz")):
            found = json_found(source)  # a JSON file is no Perfetto trace: say what it is instead
            if found:
                raise InputError(f"{source}: {found[0]}, not a Perfetto trace nor a capture ktrace reads; {found[1]}")
        inp.trace = Path(source)
    with ExitStack() as stack:
        if need != "decoder" and inp.trace is None:
            tmp = stack.enter_context(temporary_folder(temp_prefix))
            inp.trace = Path(tmp) / (_stem(source) + ".perfetto-trace")
            from .export.writer import write_trace

            staged = hasattr(progress, "stage")  # a plain progress(done, total) counts the load's bytes only
            stage(progress, "writing a temporary trace", None, "records")
            _, inp.summary = write_trace(inp.decoder or inp.decoded, inp.trace, tracks=tracks,
                                         progress=progress if staged else None)
        if need == "session":
            from .engine import open_trace

            inp.session = stack.enter_context(open_trace(inp.trace, engine=engine, progress=progress))
        yield inp


def _stem(source) -> str:
    if isinstance(source, (str, os.PathLike)):
        return buffer_stem(source)
    name = _name(source)
    return Path(name).stem if name not in ("buffer", "None") else "buffer"


@frozen
class Gpus:
    """Several GPUs' buffers, opened once: a decoder per buffer (in the order given) and how their clocks
    line up (``alignment.clocks[g]`` is buffer g)."""

    sources: tuple[str, ...]
    decoders: tuple
    alignment: Alignment


def refuse_traces(sources) -> None:
    """InputError naming the traces among several GPUs' sources: aligning GPUs needs their buffers."""
    traces = [str(p) for p in sources if isinstance(p, (str, os.PathLike)) and is_trace(p)]
    if traces:
        raise InputError(f"{', '.join(traces)}: give profiler buffers (with their sidecars), not traces: the "
                         "alignment needs each buffer's time anchor and clock offset")


def open_gpus(sources, *, align_mode: str = "offset", alignment: Alignment | None = None, offsets=None,
              clocks=None, **decode_options) -> Gpus:
    """One decoder per buffer (paths, bytes, BufferDecoders or Decodeds), opened once, and their alignment
    (``align_mode`` "offset": the clock offsets measured at capture; "start": first records), or the
    ``alignment`` given. offsets (``["GPU=NS", ...]``, as ``--offset``) and clocks (a clocks file, as
    ``--clocks``) supply the clock offsets instead of the sidecars (``ktrace.decoding.clocks``). Raises
    InputError for a trace among them (the alignment needs each buffer's time anchor) or buffers that cannot
    be aligned."""
    sources = list(sources)
    refuse_traces(sources)
    given = given_offsets(offsets, clocks)  # a malformed --offset is refused before any buffer is decoded
    decoders = open_decoders(sources, **decode_options)
    return Gpus(tuple(_name(s) for s in sources), tuple(decoders), alignment or align(decoders, align_mode, given))
