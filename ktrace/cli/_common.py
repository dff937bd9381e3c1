"""What every command shares: the decoding, --tracks, --engine and --align options, the console, progress
bars, error reporting and the exit codes (0 ok, 1 a CI gate failed, 2 bad input, 3 environment missing)."""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager

from ..errors import EXIT_ENV, EXIT_GATE, EXIT_INPUT, EXIT_OK, InputError, KtraceError

__all__ = ["EXIT_OK", "EXIT_GATE", "EXIT_INPUT", "EXIT_ENV", "decode_options", "decode_kwargs", "tracks_option",
           "engine_option", "align_option", "progress_bar", "console", "append", "report_error",
           "PROGRESS_MIN_RECORDS"]

PROGRESS_MIN_RECORDS = 1_000_000


def decode_options(p: argparse.ArgumentParser) -> None:
    """The decoding options (as ``ktrace convert`` takes them) on a subparser."""
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


def decode_kwargs(a) -> dict:
    """The decoding options given on the command line, as keyword arguments for the ktrace.api functions."""
    return {
        "events": a.events,
        "groups": a.groups,
        "layout": a.layout,
        "sidecar": False if a.no_sidecar else a.sidecar,
        "num_blocks": a.num_blocks,
        "num_groups": a.num_groups,
    }


def tracks_option(p, help: str = "track tree: launch > SM > block > group (sm, default), launch > block > group, "
                  "or flat") -> None:
    """--tracks, as every command that writes a trace takes it."""
    from ..export.tracks import TRACK_MODES

    p.add_argument("--tracks", choices=TRACK_MODES, default="sm", help=help)


def engine_option(p, numpy: bool = False) -> None:
    """--engine, as every command that queries a trace takes it; ``numpy``: analyze also computes a buffer's
    figures with numpy, no trace processor."""
    from ..engine.session import ENGINES

    if numpy:
        p.add_argument("--engine", choices=ENGINES + ("numpy",), default="auto",
                       help="wasm (embedded trace processor), native ($KTRACE_TP_SHELL), numpy (a buffer's figures "
                       "computed with numpy: the same figures, far faster on large buffers), auto (numpy for a "
                       "buffer of 250,000 record slots or more, else native when $KTRACE_TP_SHELL is set, else wasm)")
        return
    p.add_argument("--engine", choices=ENGINES, default="auto",
                   help="trace processor: wasm (embedded), native ($KTRACE_TP_SHELL), auto (native when that "
                   "is set, else wasm)")


def align_option(p) -> None:
    """--align, as every command that takes several GPUs' buffers takes it."""
    from ..decoding.align import ALIGN_MODES

    p.add_argument("--align", choices=ALIGN_MODES, default="offset",
                   help="several buffers: by the clock offsets measured at capture (offset, default; needs each "
                        "buffer's time anchor) or by each buffer's first record (start)")


@contextmanager
def progress_bar(label: str, enabled: bool, unit: str = "records"):
    """A rich progress bar on stderr when it is a terminal, as a callback progress(done, total); None
    otherwise."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as prog:
        task = prog.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            prog.update(task, completed=done, total=total)

        yield update


def console():
    """The stdout console: the terminal's width, or 160 columns into a pipe or file."""
    from rich.console import Console

    con = Console() if sys.stdout.isatty() else Console(width=160)

    def broken_pipe() -> None:  # rich exits 1 on a closed pipe; 1 means a gate failed: let main decide
        raise BrokenPipeError

    con.on_broken_pipe = broken_pipe
    return con


def quiet_stdout() -> None:
    """After a broken pipe: stdout goes to the null device, so that exiting does not fail writing to it."""
    try:
        sys.stdout.flush()
    except (BrokenPipeError, OSError):
        pass
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def append(path: str, text: str) -> None:
    """Append ``text`` (one trailing newline) to ``path``, e.g. $GITHUB_STEP_SUMMARY."""
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text if text.endswith("\n") else text + "\n")
    except OSError as e:
        raise InputError(f"{path}: cannot write it ({e.strerror or e})") from None


def report_error(e: KtraceError) -> int:
    """Print ``e`` as the command line reports errors; returns its exit code."""
    print(f"ktrace: error: {e}", file=sys.stderr)
    return e.exit_code
