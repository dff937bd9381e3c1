"""The ``ktrace`` command line: parse arguments, call ``ktrace.api``, print, return an exit code.

Exit codes: 0 ok, 1 a CI gate failed, 2 bad input, 3 environment missing (no GPU, no engine).
Each command group is a module here with ``register(subparsers)`` and ``HANDLERS`` (command -> handler);
``COMMAND_MODULES`` lists them in the order ``ktrace --help`` shows them. Shared options: _common.py.
"""

from __future__ import annotations

import argparse
import sys

from .._version import __version__
from ..runtime.allocator import one_blas_thread, tune_allocator
from ..core.errors import EXIT_INPUT, EXIT_OK, KtraceError
from ..report.safe_text import printable
from . import analysis, cache, capture, compare, convert, merge, view, whatif
from .formats import explicit_formats
from ._common import (Parser, Terminated, apply_timeout, force_option, guard_outputs, quiet_stdout, report_error,
                      stop_on_signals)

__all__ = ["main", "build_parser", "COMMAND_MODULES"]

COMMAND_MODULES = (convert, analysis, whatif, capture, view, compare, merge, cache)
# The commands whose numpy analysis gains from glibc's allocator settings (allocator.py): analyze at 1e8
# records 0.77x the CPU. convert is left as it was: no faster with them, and 134 -> 180 MB peak at 1e7.
TUNED_COMMANDS = frozenset({"analyze", "diff", "check"})


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; with ``command``, only that command's options are built (every command is
    listed, each other one with its help line alone): a few ms of argparse less before the command runs."""
    p = Parser(
        prog="ktrace",
        description="Per-block timelines of CUDA kernels instrumented with FlashInfer's profiler macros.",
        epilog="Exit codes: 0 ok, 1 a CI gate failed, 2 bad input, 3 environment missing.",
    )
    p.add_argument("--version", action="version", version=f"ktrace {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for mod in COMMAND_MODULES:
        mod.register(sub if command is None else _OnlyOne(sub, command))
    for parser in sub.choices.values():
        force_option(parser)
    return p


class _OnlyOne:
    """The subparsers of ``build_parser(command)``: that command's parser built whole, any other one added with
    its help line alone and its options sent to a ``_Sink``."""

    def __init__(self, sub, command: str):
        self._sub, self._command = sub, command

    def add_parser(self, name, **kwargs):
        if name == self._command:
            return self._sub.add_parser(name, **kwargs)
        self._sub.add_parser(name, help=kwargs.get("help"), add_help=False)
        return _Sink()


class _Sink:
    """Takes any call and any attribute: the options of a command that is not being run."""

    def __getattr__(self, name):
        return self

    def __call__(self, *args, **kwargs):
        return self


def _command_of(argv: list[str]) -> str | None:
    """The command ``argv`` runs: its first word not an option (the top level takes no option with a value)."""
    return next((w for w in argv if not w.startswith("-")), None)


def _never_unprintable() -> None:
    """A character stdout's encoding lacks (an ASCII terminal, PYTHONIOENCODING=ascii) is written escaped
    (\\xb1), never a UnicodeEncodeError: the report's own symbols are spelled in ASCII before that
    (report.safe_text.fit_encoding); this covers any other line. stderr does so already."""
    try:
        if sys.stdout.errors == "strict":
            sys.stdout.reconfigure(errors="backslashreplace")
    except (AttributeError, ValueError, OSError):  # not a text stream that can change (a test's capture)
        pass


def main(argv=None) -> int:
    try:  # --json / --markdown alone print to stdout; their file is given as --json=FILE (formats.py)
        argv = explicit_formats(sys.argv[1:] if argv is None else list(argv))
    except KtraceError as e:
        return report_error(e)
    parser = build_parser(_command_of(argv))
    a, extra = parser.parse_known_args(argv)
    if extra and getattr(a, "command", None) == "query":  # positionals after options: ktrace query T --csv SQL
        for name in ("source", "sql"):
            if getattr(a, name) is None and extra and not extra[0].startswith("-"):
                setattr(a, name, extra.pop(0))
    if extra:
        _unrecognized(parser, a, extra, argv)
    if not a.command:
        parser.print_help()
        return EXIT_INPUT
    handlers = {name: fn for mod in COMMAND_MODULES for name, fn in mod.HANDLERS.items()}
    _never_unprintable()
    one_blas_thread()  # before numpy loads: no BLAS thread spinning beside the work
    if a.command in TUNED_COMMANDS:  # this process is ktrace's own: numpy's temporaries reuse their pages
        tune_allocator()
    try:
        with apply_timeout(a), stop_on_signals():
            guard_outputs(a)
            return handlers[a.command](a)
    except KtraceError as e:
        return report_error(e)
    except Terminated as e:
        print(f"ktrace: stopped by {e.name}", file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt:
        print("ktrace: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader stopped (`| head`): not a failure, and never a failed gate
        quiet_stdout()  # no second error at exit
        return EXIT_OK
    except OSError as e:  # a file the command reads or writes: the user's to fix, never a traceback
        where = f"{e.filename}: " if e.filename else ""
        print(f"ktrace: error: {printable(where)}{e.strerror or e} (check the path, its permissions and the free "
              "space)", file=sys.stderr)
        return EXIT_INPUT


def _unrecognized(parser: argparse.ArgumentParser, a, extra: list[str], argv: list[str]) -> None:
    """The usage error of the command given (its own usage, not the top level's), with the option meant when
    one is close to what was typed (``--jsn``: did you mean --json?). Exits 2."""
    import difflib

    extra = [w[:-2] if w in ("--json=-", "--markdown=-") else w for w in extra]  # as typed (formats.py)
    sub = parser
    if getattr(a, "command", None):
        for action in parser._subparsers._group_actions:  # the command's own parser
            sub = action.choices.get(a.command, parser)
    options = [o for act in sub._actions for o in act.option_strings if o.startswith("--")]
    hints = []
    for word in extra:
        if word.startswith("-"):
            close = difflib.get_close_matches(word.split("=")[0], options, n=1, cutoff=0.6)
            if close:
                hints.append(f"{word}: did you mean {close[0]}?")
        elif any(x == word and y in ("--json=-", "--markdown=-") for y, x in zip(argv, argv[1:])):
            option = next(y for y, x in zip(argv, argv[1:]) if x == word and y.endswith("=-"))[:-2]
            hints.append(f"{option} alone prints to stdout: to write {word}, give {option}={word}")
    sub.error(f"unrecognized arguments: {' '.join(extra)}" + ("; " + "; ".join(hints) if hints else ""))


if __name__ == "__main__":
    sys.exit(main())
