"""``ktrace merge``: several GPUs' buffers in one trace (and the cross-GPU table printer ``analyze`` shares).

    ktrace merge A.bin B.bin ... [-o OUT.perfetto-trace] [--align offset|start] [--offset GPU=NS ...]
                 [--clocks FILE] [--report]

One buffer per GPU, each with its sidecar. Exit codes: 0 ok, 2 bad input (a buffer without a time anchor
cannot be aligned except with --align start), 3 engine missing.
"""

from __future__ import annotations

import sys

from ..core.errors import EXIT_OK
from ._common import align_option, console, decode_kwargs, decode_options, tracks_option

__all__ = ["register", "HANDLERS", "print_cross_gpu"]


def register(sub) -> None:
    m = sub.add_parser(
        "merge", help="several GPUs' buffers -> one Perfetto trace, a process per GPU, aligned in time",
        description="Decode each buffer (one per GPU, with its sidecar) and write one trace: a process per GPU "
                    "('GPU 1 (NVIDIA H200)') holding its launch track tree, every GPU's times moved onto the "
                    "first GPU's clock by the offsets ktrace run --device measured (timer.offset_to_reference_ns "
                    "in the sidecars).",
        epilog="A buffer with no absolute time anchor (no kernel timer read, no host launch time) cannot be "
               "placed beside another GPU's: exit 2, unless --align start lines the first records up. Captures "
               "made without ktrace run --device carry no offset: give it with --offset GPU=NS or --clocks FILE.")
    m.add_argument("buffers", nargs="+", metavar="BUF", help="profiler buffers, one per GPU (.bin or .npy)")
    m.add_argument("-o", "--output", metavar="OUT",
                   help="trace path (default: the first buffer's name with _merged.perfetto-trace)")
    tracks_option(m, "each GPU's track tree (see convert)")
    align_option(m)
    m.add_argument("--report", action="store_true", help="also print the cross-GPU table (as analyze does)")
    decode_options(m)


def _cmd_merge(a) -> int:
    from ..api import merge
    from ..report.multigpu_report import alignment_lines
    from ..report.safe_text import for_stream, printable

    res = merge(a.buffers, a.output, align_mode=a.align, tracks=a.tracks, report=a.report, offsets=a.offset,
                clocks=a.clocks, **decode_kwargs(a))
    for line in alignment_lines(res.alignment):
        stream = sys.stderr if line.startswith("note:") else sys.stdout
        print(for_stream(line, stream), file=stream)
    slices = ", ".join(f"{c.label.split(' (')[0]} {s.slices:,}" for c, s in zip(res.alignment.clocks, res.summaries))
    print(printable(f"{res.path}: {res.bytes:,} bytes; slices: {slices}"))
    if res.cross_gpu is not None:
        print_cross_gpu(res.cross_gpu, header=False)
    print(printable(f"open it at https://ui.perfetto.dev (Open trace file), or: ktrace view {res.path}"))
    return EXIT_OK


def print_cross_gpu(x, header: bool = True) -> None:
    """The cross-GPU text report on stdout (``header``: with the alignment lines)."""
    from rich.table import Table

    from ..report.multigpu_report import cross_gpu_text

    con = console()
    items = cross_gpu_text(x)
    if not header:
        items = [i for i in items if isinstance(i, Table)]
    for r in items:
        con.print(r)


HANDLERS = {"merge": _cmd_merge}
