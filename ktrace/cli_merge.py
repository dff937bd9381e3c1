"""Command-line handlers across GPUs: ``ktrace merge`` and ``ktrace analyze`` on several buffers.

    ktrace merge A.bin B.bin ... [-o OUT.perfetto-trace] [--align offset|start] [--report]
    ktrace analyze A.bin B.bin ... [--align offset|start] [--json | --markdown]

One buffer per GPU, each with its sidecar. Exit codes: 0 ok, 2 bad input (a buffer without a time anchor
cannot be aligned except with --align start), 3 engine missing (analyze).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .errors import EXIT_OK, InputError
from .cli import tracks_option

__all__ = ["add_merge_commands", "HANDLERS", "analyze_several", "align_option", "print_cross_gpu"]


def align_option(p) -> None:
    from .decoding.align import ALIGN_MODES

    p.add_argument("--align", choices=ALIGN_MODES, default="offset",
                   help="several buffers: by the clock offsets measured at capture (offset, default; needs each "
                        "buffer's time anchor) or by each buffer's first record (start)")


def add_merge_commands(sub, decode_options) -> None:
    """Register ``merge`` on the ``ktrace`` subparsers."""
    m = sub.add_parser(
        "merge", help="several GPUs' buffers -> one Perfetto trace, a process per GPU, aligned in time",
        description="Decode each buffer (one per GPU, with its sidecar) and write one trace: a process per GPU "
                    "('GPU 1 (NVIDIA H200)') holding its launch track tree, every GPU's times moved onto the "
                    "first GPU's clock by the offsets ktrace run --device measured (timer.offset_to_reference_ns "
                    "in the sidecars).",
        epilog="A buffer with no absolute time anchor (no kernel timer read, no host launch time) cannot be "
               "placed beside another GPU's: exit 2, unless --align start lines the first records up.")
    m.add_argument("buffers", nargs="+", metavar="BUF", help="profiler buffers, one per GPU (.bin or .npy)")
    m.add_argument("-o", "--output", metavar="OUT",
                   help="trace path (default: the first buffer's name with _merged.perfetto-trace)")
    tracks_option(m, "each GPU's track tree (see convert)")
    align_option(m)
    m.add_argument("--report", action="store_true", help="also print the cross-GPU table (as analyze does)")
    decode_options(m)


def _decode_kwargs(a) -> dict:
    from .cli import decode_kwargs as convert_kwargs

    return convert_kwargs(a)


def _refuse_traces(paths) -> None:
    from .analysis import is_trace_path

    traces = [str(p) for p in paths if is_trace_path(p)]
    if traces:
        raise InputError(f"{', '.join(traces)}: give profiler buffers (with their sidecars), not traces: the "
                         "alignment needs each buffer's time anchor and clock offset")


def _cmd_merge(a) -> int:
    from .export.merge import merge_traces

    _refuse_traces(a.buffers)
    out = Path(a.output) if a.output else Path(a.buffers[0]).with_name(
        Path(a.buffers[0]).stem + "_merged.perfetto-trace")
    res = merge_traces(a.buffers, out, align_mode=a.align, tracks=a.tracks, **_decode_kwargs(a))
    from .report.multigpu_report import alignment_lines

    for line in alignment_lines(res.alignment):
        print(line, file=sys.stderr if line.startswith("note:") else sys.stdout)
    slices = ", ".join(f"{c.label.split(' (')[0]} {s.slices:,}" for c, s in zip(res.alignment.clocks, res.summaries))
    print(f"{res.path}: {res.bytes:,} bytes; slices: {slices}")
    if a.report:
        from .analysis.multigpu import cross_gpu

        print_cross_gpu(cross_gpu(a.buffers, alignment=res.alignment, **_decode_kwargs(a)), header=False)
    print(f"open it at https://ui.perfetto.dev (Open trace file), or: ktrace view {res.path}")
    return EXIT_OK


def print_cross_gpu(x, header: bool = True) -> None:
    """The cross-GPU text report on stdout (``header``: with the alignment lines)."""
    from rich.console import Console

    from .report.multigpu_report import cross_gpu_text

    con = Console() if sys.stdout.isatty() else Console(width=160)
    items = cross_gpu_text(x)
    if not header:
        items = [i for i in items if not isinstance(i, str)]
    for r in items:
        con.print(r)


def analyze_several(a) -> int:
    """``ktrace analyze A.bin B.bin ...``: each buffer's analysis as for one, then the cross-GPU figures."""
    from .analysis import Thresholds, analyze
    from .analysis.multigpu import cross_gpu

    sources = list(a.source)
    _refuse_traces(sources)
    if a.plot:
        raise InputError("--plot takes one buffer: analyze the buffers one at a time to plot them")
    options = _decode_kwargs(a)
    x = cross_gpu(sources, align_mode=a.align, **options)  # first: an unalignable buffer fails fast
    thresholds = Thresholds.parse(a.threshold)
    per = [analyze(s, thresholds, engine=a.engine, **options) for s in sources]
    labels = [c.label for c in x.alignment.clocks]
    if a.json:
        print(json.dumps({"schema": "ktrace.analysis.multi/1", "gpus": [
            {"gpu": i, "label": lab, **r.to_dict()} for i, (lab, r) in enumerate(zip(labels, per))],
            "cross_gpu": x.to_dict()}, indent=2, ensure_ascii=False, allow_nan=False))
        return EXIT_OK
    if a.markdown:
        from .report.analysis_report import analysis_markdown
        from .report.multigpu_report import cross_gpu_markdown

        for lab, r, s in zip(labels, per, sources):
            print(f"## {lab}: `{s}`\n")
            print(analysis_markdown(r))
        print(cross_gpu_markdown(x))
        return EXIT_OK
    from rich.console import Console

    from .report.analysis_report import analysis_text

    con = Console() if sys.stdout.isatty() else Console(width=160)
    for lab, r, s in zip(labels, per, sources):
        con.rule(f"{lab}: {s}")
        for item in analysis_text(r):
            con.print(item)
    con.rule("across GPUs")
    print_cross_gpu(x)
    return EXIT_OK


HANDLERS = {"merge": _cmd_merge}
