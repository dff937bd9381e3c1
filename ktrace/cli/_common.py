"""What every command shares: the decoding, --tracks, --engine and --align options, the console, progress
bars, error reporting and the exit codes (0 ok, 1 a CI gate failed, 2 bad input, 3 environment missing)."""

from __future__ import annotations

import argparse
import glob
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from ..core.choices import ALIGN_MODES, ENGINES, TRACK_MODES
from ..core.errors import EXIT_ENV, EXIT_GATE, EXIT_INPUT, EXIT_OK, InputError, KtraceError

__all__ = ["Parser", "EXIT_OK", "EXIT_GATE", "EXIT_INPUT", "EXIT_ENV", "decode_options", "decode_kwargs", "tracks_option",
           "process_count",
           "engine_option", "result_options", "align_option", "apply_timeout", "stop_on_signals", "Terminated", "progress_bar",
           "console", "append", "report_error", "guard_outputs", "command_files", "PROGRESS_MIN_RECORDS"]

PROGRESS_MIN_RECORDS = 1_000_000


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose description and epilog may be callables, called when its help is shown: text
    computed from a heavy module (analyze's threshold defaults, query's table names) then costs nothing when
    another command runs or ``ktrace --help`` is printed. Registering a command imports no layer that does
    the work (tests/test_startup.py)."""

    def format_help(self) -> str:
        for name in ("description", "epilog"):
            text = getattr(self, name)
            if callable(text):
                setattr(self, name, text())
        return super().format_help()


def _capture_like(value: str) -> bool:
    from ..core.filetypes import BUFFER_SUFFIXES, PROTON_SUFFIXES, TRACE_SUFFIXES

    return not value.startswith("-") and value.lower().endswith(
        tuple(BUFFER_SUFFIXES) + tuple(TRACE_SUFFIXES) + tuple(PROTON_SUFFIXES))


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
    w = p.add_argument_group("roofline (docs/analysis-schema.md, \"Roofline\")")
    w.add_argument("--bytes", type=_work_bytes, metavar="N", help="the kernel's DRAM bytes moved (over the sidecar's "
                   "work.bytes): the report shows the bandwidth achieved, and no stake goes below N / peak bandwidth")
    w.add_argument("--flops", type=_work_flops, metavar="N", help="the kernel's FLOPs (over the sidecar's work.flops)")
    w.add_argument("--peak-gbps", type=_peak, metavar="GBPS", help="the device's peak DRAM bandwidth, GB/s (default: "
                   "from the device's name: H100, H200, B200, A100)")
    w.add_argument("--peak-tflops", type=_peak, metavar="TFLOPS", help="the device's peak FLOP rate, TFLOP/s (default: "
                   "its dense FP16/BF16 tensor rate, by name; give it for FP8 or FP32 work)")
    t = p.add_argument_group("Triton Proton traces (.chrome_trace) and NVIDIA IKET traces (.trace.json)")
    t.add_argument("--lanes", choices=["warp", "warpgroup"], help="one lane per warp (default) or per warp group "
                   "of 4 warps (a scope spans its warps' first begin to last end)")
    t.add_argument("--launch", type=int, metavar="N", help="which launch of an IKET trace holding several (0 = "
                   "the first)")
    t.add_argument("--sm-clock", metavar="MHZ", help="the SM clock to turn Proton's cycles into ns (default: the "
                   "sidecar's sm_clock_mhz, else ktrace calibrate's cache, else Proton's assumed 1000)")
    t.add_argument("--proton-log", metavar="FILE", help="Proton's stderr: its 'first N events are dropped' warnings "
                   "count what its circular buffer lost (default: the sidecar's proton_warnings)")


def decode_kwargs(a) -> dict:
    """The decoding options given on the command line, as keyword arguments for the ktrace.api functions."""
    return {
        "events": a.events,
        "groups": a.groups,
        "layout": a.layout,
        "sidecar": False if a.no_sidecar else a.sidecar,
        "num_blocks": a.num_blocks,
        "num_groups": a.num_groups,
        **{k: v for k, v in (("lanes", a.lanes), ("sm_clock_mhz", a.sm_clock), ("proton_log", a.proton_log),
                             ("launch", getattr(a, "launch", None)), ("work_bytes", a.bytes), ("work_flops", a.flops),
                             ("peak_gbps", a.peak_gbps), ("peak_tflops", a.peak_tflops))
           if v is not None},
    }


def tracks_option(p, help: str = "track tree: launch > SM > block > group (sm, default), launch > block > group, "
                  "or flat") -> None:
    """--tracks, as every command that writes a trace takes it."""
    p.add_argument("--tracks", choices=TRACK_MODES, default="sm", help=help)


def engine_option(p, numpy: bool = False, timeout: bool = True) -> None:
    """--engine, in the same words on every command that runs the engine; ``numpy``: the command analyzes a
    buffer, whose figures numpy computes too (analyze, diff, view, run); without it the command runs SQL on a
    trace (query, check's SQL rules), the trace processor's choices only. ``timeout``: --timeout as well."""
    tp = "wasm (the embedded trace processor), native (the trace_processor_shell of $KTRACE_TP_SHELL)"
    if numpy:
        p.add_argument("--engine", choices=ENGINES + ("numpy",), default="auto",
                       help=f"{tp}, numpy (a buffer's figures computed with numpy: the same figures, no engine to "
                       "compile), auto (the default: numpy for a buffer; for a trace, native when $KTRACE_TP_SHELL is "
                       "set, else wasm)")
    else:
        p.add_argument("--engine", choices=ENGINES, default="auto",
                       help=f"{tp}, auto (the default: native when $KTRACE_TP_SHELL is set, else wasm); this "
                       "command runs SQL on a trace, so numpy is not among its engines")
    if timeout:
        p.add_argument("--timeout", type=_seconds, metavar="SECONDS",
                       help="stop a query or SQL rule that runs longer than this (embedded engine; default 600)")


def result_options(p, rows: bool = False) -> None:
    """--max-result-mb (and with ``rows``, --max-rows): how much of a query's result is read and printed."""
    p.add_argument("--max-result-mb", type=_mebibytes, metavar="MB",
                   help="read at most this much of a query's result (its first rows; the output says what was left "
                   "out; default 32)")
    if rows:
        p.add_argument("--max-rows", type=_row_count, default=10_000, metavar="N",
                       help="print at most N rows (default 10,000; 0: every row read)")


def _bounded(parse, ok, what: str):
    """An argparse type: ``parse(text)`` where ``ok`` holds of it, else the error naming ``what`` it must be
    (nan and inf fail every comparison, so a float bound refuses them)."""
    def check(text: str):
        try:
            value = parse(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    return check


_row_count = _bounded(int, lambda n: n >= 0, "a number of rows (0 or more)")
_mebibytes = _bounded(float, lambda v: 0 < v <= 1 << 30, "a number of MiB above 0")
_seconds = _bounded(float, lambda v: 0 < v < 1e9, "a number of seconds above 0")
_work_bytes = _bounded(float, lambda v: 0 <= v <= 1e18, "a number of bytes (0 to 1e18)")
_work_flops = _bounded(float, lambda v: 0 <= v <= 1e21, "a number of FLOPs (0 to 1e21)")
_peak = _bounded(float, lambda v: 0 < v <= 1e7, "a peak rate above 0 (at most 1e7)")


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP: unwinds like Ctrl-C, so temporary files and the engine are cleaned up on the way."""

    def __init__(self, signum: int) -> None:
        import signal

        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name


def process_count(text: str) -> int:
    """--jobs N: a whole number of worker processes, 1 or more (argparse type)."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of processes (1 or more)")
    return n


@contextmanager
def stop_on_signals():
    """While a command runs, SIGTERM and SIGHUP (kill, a closed terminal) raise Terminated in the main thread."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise Terminated(signum)

    wanted = [getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n)]
    previous = {s: signal.signal(s, stop) for s in wanted}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextmanager
def apply_timeout(a):
    """Hands --timeout and --max-result-mb to the engine layer ($KTRACE_TIMEOUT, read when a query starts;
    $KTRACE_MAX_RESULT_MB) while the command runs."""
    given = {env: repr(v) for env, v in (("KTRACE_TIMEOUT", getattr(a, "timeout", None)),
                                         ("KTRACE_MAX_RESULT_MB", getattr(a, "max_result_mb", None)))
             if v is not None}
    old = {env: os.environ.get(env) for env in given}
    os.environ.update(given)
    try:
        yield
    finally:
        for env, value in old.items():
            if value is None:
                os.environ.pop(env, None)
            else:
                os.environ[env] = value


def align_option(p) -> None:
    """--align, as every command that takes several GPUs' buffers takes it."""
    p.add_argument("--align", choices=ALIGN_MODES, default="offset",
                   help="several buffers: by the clock offsets measured at capture (offset, default; needs each "
                        "buffer's time anchor) or by each buffer's first record (start)")
    p.add_argument("--offset", action="append", metavar="GPU=NS",
                   help="a GPU's clock minus the reference GPU's, in ns (repeatable; replaces the sidecars' "
                        "offsets; a GPU not named is the reference). GPU: the buffer's path, file name, sidecar "
                        "device index or PCI bus id, or its position (0, 1, ...) when its sidecar names no device")
    p.add_argument("--clocks", metavar="FILE",
                   help="the clock offsets from a JSON file: {\"offsets_ns\": {GPU: NS}, \"uncertainty_ns\": N} "
                        "or the clock_sync.json of ktrace run --device (--offset overrides its entries)")


@contextmanager
def progress_bar(label: str, enabled: bool, unit: str = "records"):
    """A rich progress bar on stderr when it is a terminal, as a callback progress(done, total); None
    otherwise (piped output stays as it is). The callback has ``stage(name, total, unit)`` too
    (``ktrace.core.progress``): the bar then says which stage runs (parsing, finalizing, each SQL module) and keeps
    moving through a stage of unknown length."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[amount]}"),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as prog:
        task = prog.add_task(label, total=None, amount="")
        now = {"unit": unit}

        def update(done: int, total: int) -> None:
            prog.update(task, completed=done, total=total, amount=_amount(done, total, now["unit"]))

        def stage(name: str, total: int | None = None, unit: str = "") -> None:
            now["unit"] = unit
            prog.reset(task, total=total, description=name, amount="")

        update.stage = stage
        update.say = lambda text: prog.console.print(text, markup=False, highlight=False, soft_wrap=True)
        yield update


def _amount(done: int, total: int, unit: str) -> str:
    if unit == "bytes":
        return f"{done / 2**20:,.0f}/{total / 2**20:,.0f} MiB"
    return f"{done:,}/{total:,} {unit}".rstrip()


PIPE_MIN_WIDTH = 100  # columns of text and rules into a pipe or file; a wider table gets its own width


def _columns() -> int | None:
    """$COLUMNS when it is a width a report can use (40 or more), else None."""
    try:
        n = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        return None
    return n if 40 <= n <= 10_000 else None


def console():
    """The stdout console: in a terminal, its width; into a pipe or a log file, $COLUMNS when set, else text
    wrapped at PIPE_MIN_WIDTH and each table as wide as its content (never cut), and no colour codes. Names in the reports come
    from captures: the console shows them as text, never as markup or escapes."""
    from ..report.safe_text import safe_console

    if sys.stdout.isatty():
        return safe_console()
    from rich.text import Text

    cols = _columns()
    con = safe_console(width=cols or PIPE_MIN_WIDTH, no_color=True, color_system=None, highlight=False)
    plain_print, plain_rule = con.print, con.rule

    def fitted_print(*objects, **kw):
        if cols:  # $COLUMNS: everything at that width (tables fold their cells, text wraps)
            con.width = cols
        else:  # text wraps at PIPE_MIN_WIDTH; a table keeps the width its content needs
            wide = con.options.update_width(1 << 16)
            need = [con.measure(o, options=wide).maximum for o in objects if not isinstance(o, (str, Text))]
            con.width = max([PIPE_MIN_WIDTH, *need])
        plain_print(*objects, **kw)

    def fitted_rule(*args, **kw):
        con.width = cols or PIPE_MIN_WIDTH
        plain_rule(*args, **kw)

    def broken_pipe() -> None:  # rich exits 1 on a closed pipe; 1 means a gate failed: let main decide
        raise BrokenPipeError

    con.print, con.rule, con.on_broken_pipe = fitted_print, fitted_rule, broken_pipe
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


def append(path: str, text: str, what: str = "Markdown summary") -> None:
    """Append ``text`` (one trailing newline) to ``path``, e.g. $GITHUB_STEP_SUMMARY, atomically
    (``ktrace.core.outputs.append_file``); never through a symbolic link to a file (/dev/stdout, this process's own
    stdout, is fine); never to a FIFO or a device (refused, never opened)."""
    from ..core.outputs import append_file, planted_link

    if planted_link(path):
        raise InputError(f"{path}: is a symbolic link to a file; ktrace never writes through one: remove it or "
                         "choose another file")
    append_file(path, text if text.endswith("\n") else text + "\n", what)


_INPUT_ARGS = ("buffer", "buffers", "source", "sources", "pair", "before", "after", "baseline", "sidecar", "clocks",
               "rules", "file", "driver", "proton_log")
# (argument, what it writes, the option, the name endings it takes)
_OUTPUT_ARGS = (("output", "trace", "-o", None), ("trace", "annotated trace", "--trace", None),
                ("plot", "plot", "--plot", "plots"), ("junit", "JUnit file", "--junit", None),
                ("markdown", "Markdown summary", "--markdown", None, True), ("json", "JSON file", "--json", None, True))


def force_option(parser) -> None:
    """``--force`` on a command that writes a file (one of _OUTPUT_ARGS): its outputs may then replace a
    capture, a sidecar or a trace (``outputs.captured_kind``) found where they go."""
    dests = {act.dest for act in parser._actions}
    if dests & {name for name, *_ in _OUTPUT_ARGS} and "force" not in dests:
        parser.add_argument("--force", action="store_true",
                            help="let an output replace a capture, a sidecar or a trace already there (refused "
                                 "without it)")


def command_files(a) -> tuple[list[str], list[tuple]]:
    """(the files a parsed command reads, the outputs it writes as ``outputs.check_outputs`` takes them). A
    quoted glob among the inputs stands for the files it matches (as the command expands it)."""
    from ..core.outputs import PLOT_SUFFIXES

    inputs: list[str] = []
    for name in _INPUT_ARGS:
        v = getattr(a, name, None)
        for x in v if isinstance(v, (list, tuple)) else [v]:
            if isinstance(x, str) and x and x != "-":
                inputs.append(x)
                if any(ch in x for ch in "*?[") and not _exists(x):
                    inputs += sorted(glob.glob(x))
    for name in ("events", "groups"):
        v = getattr(a, name, None)
        if isinstance(v, str) and v.startswith("@"):
            inputs.append(v[1:])
    outputs = []
    for name, what, option, suffixes, *stream_ok in _OUTPUT_ARGS:
        v = getattr(a, name, None)
        if isinstance(v, str) and v and v != "-":
            outputs.append((v, what, option, PLOT_SUFFIXES if suffixes == "plots" else None, *stream_ok))
    return inputs, outputs


def _exists(path: str) -> bool:
    try:
        return os.path.lexists(path)
    except (OSError, ValueError):
        return False


def guard_outputs(a) -> None:
    """Every file the command will write checked against every file it reads (quoted globs expanded), before
    any work: never an input or its sidecar (nor a hard link to one), never through a symbolic link, never a
    folder, a FIFO or a device, or a plot of a format it cannot write (ktrace.core.outputs.check_output). An input
    or sidecar that is a FIFO, a device or a socket is refused too, without opening it (it could block)."""
    from ..core.filetypes import refuse_special_input, sibling
    from ..core.outputs import check_outputs, refuse_replacing, replace_allowed, standard_stream

    json_file = getattr(a, "json", None)
    if isinstance(json_file, str) and json_file != "-" and standard_stream(json_file) and _is_stdout(json_file):
        a.json = "-"  # --json=/dev/stdout (or /proc/self/fd/1): printed, as --json alone
    inputs, outputs = command_files(a)
    if getattr(a, "force", False):
        replace_allowed(o[0] for o in outputs)
    for path in [*inputs, *(o[0] for o in outputs)]:
        if "\x00" in path or any("\ud800" <= c <= "\udfff" for c in path):
            from ..report.safe_text import printable

            raise InputError(f"{printable(path.encode('utf-8', 'backslashreplace').decode())}: a file name cannot "
                             "hold a NUL or bytes that are not UTF-8; rename the file or give another path")
    for path in inputs:
        refuse_special_input(path)
        refuse_special_input(sibling(path, ".json"), f"sidecar of {path}")
    if outputs:
        check_outputs(outputs, inputs, replacing=False)
    for path, what, option, *_ in outputs:
        # `--markdown=run.bin`, `--junit run.bin`: a capture by its name is never written over
        if option in ("--markdown", "--junit", "--json") and _capture_like(path):
            ending = {"--markdown": ".md", "--junit": ".xml", "--json": ".json"}[option]
            raise InputError(f"{path}: a capture by its name; {option} would write the {what} over it. Give the "
                             f"{what} a name ending in {ending}")
    refuse_replacing(outputs)  # then another capture, sidecar or trace where an output goes (--force: allowed)


def _is_stdout(path: str) -> bool:
    try:
        return os.path.samestat(os.stat(path), os.fstat(1))
    except (OSError, ValueError):
        return False


def report_error(e: KtraceError) -> int:
    """Print ``e`` as the command line reports errors; returns its exit code."""
    from ..report.safe_text import printable

    print(f"ktrace: error: {printable(e, keep_newlines=True)}", file=sys.stderr)
    return e.exit_code


def expand_globs(paths: list[str], what: str = "") -> list[str]:
    """Globs expanded here (sorted), as the shell does not expand quoted ones; a pattern matching nothing is
    an error naming it."""
    out = []
    for p in paths:
        if any(ch in p for ch in "*?[") and not Path(p).exists():
            hits = sorted(glob.glob(p))
            if not hits:
                raise InputError(f"{what}{p}: no file matches this pattern (check the path; quote it so that "
                                 "ktrace expands it)")
            out += hits
        else:
            out.append(p)
    return out
