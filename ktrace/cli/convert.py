"""``ktrace convert`` (buffer -> Perfetto trace) and ``ktrace inspect`` (what is in a buffer)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ._common import (EXIT_OK, PROGRESS_MIN_RECORDS, console, decode_kwargs, decode_options, process_count,
                      progress_bar, tracks_option)
from .formats import BUFFER_KINDS, emit, format_options

__all__ = ["register", "HANDLERS", "print_inspect"]


def register(sub) -> None:
    c = sub.add_parser("convert", help="profiler buffer -> Perfetto trace (open it at ui.perfetto.dev)",
                       description=f"Decode a capture into a Perfetto trace. BUF is {BUFFER_KINDS}; its kind is "
                       "told by its name, then by its first bytes.")
    c.add_argument("buffer", metavar="BUF", help=f"{BUFFER_KINDS}")
    c.add_argument("-o", "--output", metavar="OUT", help="trace path (default: BUF with .perfetto-trace)")
    tracks_option(c)
    c.add_argument("-j", "--jobs", type=process_count, metavar="N",
                   help="worker processes decoding and encoding ranges of lanes in parallel (default: the cores "
                   "available, on 3 cores or more; 1: none); the trace is the same whatever N")
    decode_options(c)

    i = sub.add_parser("inspect", help="what is in a buffer: layout, lanes, records, anomalies",
                       description=f"What is in a capture, decoded but not analyzed: layout, lanes, records, "
                       f"anomalies. BUF is {BUFFER_KINDS}.")
    i.add_argument("buffer", metavar="BUF", help=f"{BUFFER_KINDS}")
    format_options(i, "the report (schema ktrace.inspect/1)")
    decode_options(i)


def _big(path: str) -> bool:
    p = Path(path)
    return p.is_file() and p.stat().st_size >= 8 * PROGRESS_MIN_RECORDS


def _cmd_convert(a) -> int:
    from ..api import convert
    from ..report.safe_text import printable

    with progress_bar("writing trace", _big(a.buffer), unit="lanes") as cb:
        res = convert(a.buffer, a.output, tracks=a.tracks, progress=cb, jobs=a.jobs, **decode_kwargs(a))
    sm = res.summary
    layout = (f"layout {res.decoder.match.name} ({res.decoder.match.score:.1%} match)" if res.decoder is not None
              else "a Triton Proton trace")
    anomalies = ", ".join(f"{k}: {n:,}" for k, n in sorted(sm.anomalies.items())) or "none"
    print(printable(f"{res.path}: {res.bytes:,} bytes; {sm.slices:,} slices, {sm.instants:,} instants, "
                    f"{sm.anomalous_records:,} anomalous records ({anomalies}) from {sm.records:,} records; "
                    f"{layout}"))
    if sm.notes:  # rich only for this coloured line
        from rich.text import Text

        from ..report.safe_text import safe_console

        notes = ", ".join(f"{k}: {n:,} lanes" for k, n in sorted(sm.notes.items()))
        line = Text.assemble(("notes", "yellow"), printable(f": {notes} (ktrace inspect {a.buffer} explains them)"))
        safe_console(stderr=True).print(line)
    print(printable(f"open it at https://ui.perfetto.dev (Open trace file), or: ktrace view {res.path}"))
    return EXIT_OK


def print_inspect(buffer: str) -> None:
    """The inspect report of ``buffer`` on stdout, as ``ktrace inspect BUF`` prints it."""
    from ..api import inspect

    _print_info(inspect(buffer), False)


def _print_info(info: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(info, indent=2, sort_keys=False))
        return
    from rich.console import Console

    from ..report.inspect import inspect_text
    from ..report.safe_text import safe_console

    con = console() if not sys.stdout.isatty() else safe_console(width=max(100, Console().width))
    for r in inspect_text(info):
        con.print(r)


def _cmd_inspect(a) -> int:
    from ..api import inspect

    with progress_bar("decoding", _big(a.buffer), unit="lanes") as cb:
        info = inspect(a.buffer, progress=cb, **decode_kwargs(a))
    emit(a, lambda: _print_info(info, False), json=lambda: json.dumps(info, indent=2, sort_keys=False))
    return EXIT_OK


HANDLERS = {"convert": _cmd_convert, "inspect": _cmd_inspect}
