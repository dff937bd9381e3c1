"""The ``ktrace`` command line: parse arguments, call the API, print, return an exit code.

Exit codes: 0 ok, 1 a CI gate failed, 2 bad input, 3 environment missing (no GPU, no engine).
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager

from . import __version__
from .errors import EXIT_INPUT, EXIT_OK, KtraceError

__all__ = ["main", "build_parser"]

_PROGRESS_MIN_RECORDS = 1_000_000


def _decode_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("decoding")
    g.add_argument("--events", metavar="NAMES", help="event names in index order: 'load,compute,reduce' or @file")
    g.add_argument("--groups", metavar="NAMES", help="warp group names in index order: 'producer,consumer' or @file")
    g.add_argument("--layout", choices=["flashinfer", "flashinfer_legacy", "mirage"],
                   help="tag layout (default: detected from which layout's fields agree with the positions)")
    side = g.add_mutually_exclusive_group()
    side.add_argument("--sidecar", metavar="JSON", help="launch metadata (default: BUF with .json, if present)")
    side.add_argument("--no-sidecar", action="store_true", help="ignore the metadata sidecar")
    g.add_argument("--num-blocks", type=int, metavar="N", help="override the header's block count")
    g.add_argument("--num-groups", type=int, metavar="N", help="override the header's group count")


def tracks_option(p: argparse.ArgumentParser, help: str = "track tree: launch > SM > block > group (sm, "
                  "default), launch > block > group, or flat") -> None:
    """--tracks, as every command that writes a trace takes it."""
    from .export.tracks import TRACK_MODES

    p.add_argument("--tracks", choices=TRACK_MODES, default="sm", help=help)


def engine_option(p: argparse.ArgumentParser) -> None:
    """--engine, as every command that queries a trace takes it."""
    from .engine.session import ENGINES

    p.add_argument("--engine", choices=ENGINES, default="auto",
                   help="trace processor: wasm (embedded), native ($KTRACE_TP_SHELL), auto (native when that "
                   "is set, else wasm)")


def decode_kwargs(a) -> dict:
    """The decoding options given on the command line, as keyword arguments for BufferDecoder/decode."""
    return {
        "events": a.events,
        "groups": a.groups,
        "layout": a.layout,
        "sidecar": False if a.no_sidecar else a.sidecar,
        "num_blocks": a.num_blocks,
        "num_groups": a.num_groups,
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ktrace",
        description="Per-block timelines of CUDA kernels instrumented with FlashInfer's profiler macros.",
        epilog="Exit codes: 0 ok, 1 a CI gate failed, 2 bad input, 3 environment missing.",
    )
    p.add_argument("--version", action="version", version=f"ktrace {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    c = sub.add_parser("convert", help="profiler buffer -> Perfetto trace (open it at ui.perfetto.dev)")
    c.add_argument("buffer", metavar="BUF", help="profiler buffer: .bin (raw uint64) or .npy")
    c.add_argument("-o", "--output", metavar="OUT", help="trace path (default: BUF with .perfetto-trace)")
    tracks_option(c)
    _decode_options(c)

    i = sub.add_parser("inspect", help="what is in a buffer: layout, lanes, records, anomalies")
    i.add_argument("buffer", metavar="BUF")
    i.add_argument("--json", action="store_true", help="print the report as JSON (schema ktrace.inspect/1)")
    _decode_options(i)

    for mod in _command_modules():
        getattr(mod, _COMMAND_MODULES[mod.__name__.rsplit(".", 1)[1]])(sub, _decode_options)
    return p


# Modules that add subcommands: module -> its registration function; each also has HANDLERS.
_COMMAND_MODULES = {
    "cli_analysis": "add_analysis_commands",
    "cli_capture": "add_capture_commands",
    "cli_view": "add_view_commands",
    "cli_compare": "add_compare_commands",
    "cli_merge": "add_merge_commands",
}


def _command_modules():
    """The modules that add subcommands (analysis, capture, view), each with add_*_commands and HANDLERS."""
    import importlib

    out = []
    for name in _COMMAND_MODULES:
        try:
            out.append(importlib.import_module(f".{name}", __package__))
        except ModuleNotFoundError as e:
            if e.name != f"{__package__}.{name}":
                raise
    return out


@contextmanager
def progress_bar(label: str, enabled: bool, unit: str = "records"):
    """A rich progress bar on stderr when it is a terminal, as a callback progress(done, total); None
    otherwise."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from rich.console import Console

    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as prog:
        task = prog.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            prog.update(task, completed=done, total=total)

        yield update


def _cmd_convert(a) -> int:
    from rich.console import Console

    from .api import convert
    from .decoding import BufferDecoder

    dec = BufferDecoder(a.buffer, **decode_kwargs(a))
    big = len(dec.body) >= _PROGRESS_MIN_RECORDS
    with progress_bar("writing trace", big, unit="lanes") as cb:
        res = convert(dec, a.output or _default_out(a.buffer), tracks=a.tracks, progress=cb)
    sm = res.summary
    anomalies = ", ".join(f"{k}: {n:,}" for k, n in sorted(sm.anomalies.items())) or "none"
    print(f"{res.path}: {res.bytes:,} bytes; {sm.slices:,} slices, {sm.instants:,} instants, "
          f"{sm.anomalous_records:,} anomalous records ({anomalies}) from {sm.records:,} records; "
          f"layout {dec.match.name} ({dec.match.score:.1%} match)")
    if sm.notes:
        notes = ", ".join(f"{k}: {n:,} lanes" for k, n in sorted(sm.notes.items()))
        Console(stderr=True).print(f"[yellow]notes[/]: {notes} (ktrace inspect {a.buffer} explains them)")
    print(f"open it at https://ui.perfetto.dev (Open trace file), or: ktrace view {res.path}")
    return EXIT_OK


def _default_out(buffer: str) -> str:
    from .api import default_output

    return str(default_output(buffer))


def _cmd_inspect(a) -> int:
    from rich.console import Console

    from .api import inspect

    from pathlib import Path

    big = Path(a.buffer).is_file() and Path(a.buffer).stat().st_size >= 8 * _PROGRESS_MIN_RECORDS
    with progress_bar("decoding", big, unit="lanes") as cb:
        info = inspect(a.buffer, progress=cb, **decode_kwargs(a))
    if a.json:
        print(json.dumps(info, indent=2, sort_keys=False))
        return EXIT_OK
    from .report.inspect import inspect_text

    con = Console(width=max(100, Console().width))
    for r in inspect_text(info):
        con.print(r)
    return EXIT_OK


def main(argv=None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    if not a.command:
        parser.print_help()
        return EXIT_INPUT
    handlers = {"convert": _cmd_convert, "inspect": _cmd_inspect}
    for mod in _command_modules():
        handlers.update(mod.HANDLERS)
    try:
        return handlers[a.command](a)
    except KtraceError as e:
        print(f"ktrace: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("ktrace: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
