"""``ktrace analyze`` and ``ktrace query``.

    ktrace analyze TRACE|BUF [--json[=FILE]] [--markdown[=FILE]] [--plot out.png] [--trace out.perfetto-trace] [--threshold ...]
    ktrace analyze BUF BUF ... [--align offset|start]   several GPUs: each, then across them
    ktrace query TRACE|BUF "SQL" | -f file.sql [--csv | --json[=FILE]]

A BUF (anything that is not a trace: ktrace.is_trace) is converted to a temporary trace first, with the
same decoding options as ``ktrace convert``. Exit codes: 0 ok, 2 bad input, 3 engine missing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..core.errors import EXIT_OK, InputError
from ..report.safe_text import printable
from ._common import (align_option, console, decode_kwargs, decode_options, engine_option, process_count,
                      progress_bar, result_options)
from .formats import ANY_KINDS, emit, format_options, one_stdout, write_text

__all__ = ["register", "HANDLERS", "print_analysis"]


def register(sub) -> None:
    a = sub.add_parser(
        "analyze", help="per-phase figures and findings: imbalance, skew, last finisher, waits, critical path",
        description="Per-phase figures over all blocks (max/mean, start skew, last-finisher stability, waits, "
        "critical path), computed with numpy for a buffer and by the ktrace SQL package in Perfetto's trace "
        "processor for a trace (the same figures), and the findings they support. The short report first: the "
        "kernel's line, each warning's headline with its stake, what to do and its evidence; --details adds the "
        "tables (words: docs/glossary.md).",
        epilog=lambda: f"Thresholds (NAME=VALUE, default in parentheses): {_threshold_names()}. The JSON schema "
        "is ktrace.analysis/2 (docs/analysis-schema.md); records the figures lack (lost, unpaired, unreadable) "
        "are warned of first, as data_quality in the JSON.")
    a.add_argument("source", metavar="TRACE|BUF", nargs="+",
                   help=f"{ANY_KINDS}; several buffers (one per GPU): each analyzed, then a table across GPUs")
    format_options(a, "the analysis (schema ktrace.analysis/2)", markdown="the report")
    a.add_argument("--plot", metavar="PNG", help="also write a plot: per-block durations and the critical path")
    a.add_argument("--trace", metavar="OUT", help="also write the trace with the analysis drawn on it (a findings "
                   "track first, the critical path as a track and flow arrows, busy SMs and lanes running per phase as "
                   "counters; docs/trace-format.md, Annotations): open it with ktrace view or ui.perfetto.dev")
    a.add_argument("--runs", action="store_true",
                   help="the sources are runs of one kernel on the same inputs (a quoted glob works: 'run*.bin'): "
                   "the figures with their run-to-run spread, and which warnings hold in every run")
    a.add_argument("--details", "--tables", dest="details", action="store_true",
                   help="after the short report: each finding in full, the launch shape, the thresholds and the "
                   "tables (phases, waits, critical path, instances per phase), fitted to the terminal's width")
    a.add_argument("--all", dest="show_all", action="store_true",
                   help="list info findings too (below the impact floor, --threshold min_impact=...)")
    a.add_argument("--threshold", metavar="NAME=VALUE", action="append", default=[],
                   help="override a finding threshold (repeatable), e.g. --threshold imbalance=1.2")
    a.add_argument("-j", "--jobs", type=process_count, metavar="N",
                   help="numpy engine: worker processes decoding and reducing ranges of lanes side by side (default: "
                   "the cores available up to 8, for a buffer of 250,000 record slots or more on 3 cores or more; at "
                   "most the cores; 1: none); the figures are the same whatever N")
    engine_option(a, numpy=True)
    align_option(a)
    decode_options(a)

    q = sub.add_parser(
        "query", help="run PerfettoSQL on a trace, with the ktrace SQL package registered",
        description=lambda: "Run PerfettoSQL on a trace. The ktrace package is registered, its tables are not "
        "loaded: start the query with INCLUDE PERFETTO MODULE ktrace.critical_path; (every table but the "
        f"multi-GPU ones) or the module named below. Tables by module: {_table_names()} (docs/analysis-schema.md).")
    q.add_argument("source", metavar="TRACE|BUF", nargs="?",
                   help=f"{ANY_KINDS} (a capture is converted to a temporary trace first)")
    q.add_argument("sql", metavar="SQL", nargs="?", help="the query (or use -f)")
    q.add_argument("-f", "--file", metavar="SQL_FILE", help="read the query from a file ('-' for stdin)")
    qfmt = q.add_mutually_exclusive_group()
    qfmt.add_argument("--csv", action="store_true", help="print CSV")
    qfmt.add_argument("--json", metavar="FILE", nargs="?", const="-",
                      help="print a JSON list of row objects instead of the table; --json=FILE writes it to FILE and "
                      "still prints the table")
    qfmt.add_argument("--print-package", action="store_true",
                      help="print the ktrace package as one script (paste it into ui.perfetto.dev's query page) "
                      "and exit")
    engine_option(q)
    result_options(q, rows=True)
    decode_options(q)


def _threshold_names() -> str:  # shown by analyze --help only (cli._common.Parser)
    from dataclasses import fields

    from ..analysis.model.thresholds import Thresholds

    return ", ".join(f"{f.name} ({'auto' if f.name == 'tick_ns' and not f.default else f'{f.default:g}'})"
                     for f in fields(Thresholds))


def _table_names() -> str:
    from ..analysis.figures.sql.package import public_tables

    return "; ".join(f"{m}: {', '.join(t)}" for m, t in public_tables().items())


_PROGRESS_MIN_BYTES = 4 << 20  # a trace or buffer this large takes a few seconds: show where it stands


def _is_big(source) -> bool:
    p = Path(source)
    return p.is_file() and p.stat().st_size >= _PROGRESS_MIN_BYTES


def _cmd_analyze(a) -> int:
    from ..analysis import Thresholds

    thresholds = Thresholds.parse(a.threshold)
    one_stdout(a)  # before any work
    if a.runs:
        return _analyze_runs(a, thresholds)
    if len(a.source) > 1:
        return _analyze_several(a, thresholds)
    source = a.source[0]
    from ..api import merged_gpus
    from ..inputs import is_trace

    if is_trace(source) and Path(source).is_file() and a.engine != "numpy" and merged_gpus(source, engine=a.engine) > 1:
        return _analyze_merged(a, source, thresholds)
    _say_buffer_beside(source)
    with progress_bar("loading into the trace processor", _is_big(source), unit="bytes") as cb:
        from ..api import analyze, annotate

        if a.trace:
            written = annotate(source, a.trace, thresholds, engine=a.engine, progress=cb, on_engine=_sayer(cb),
                               **decode_kwargs(a))
            result = written.analysis
        else:
            result = analyze(source, thresholds, engine=a.engine, progress=cb, on_engine=_sayer(cb), jobs=a.jobs,
                             **decode_kwargs(a))
    if a.trace:
        print(printable(f"trace: {a.trace} (the analysis drawn on it: ktrace view {a.trace})"), file=sys.stderr)
    if a.plot:
        from ..report.analysis_report import plot_analysis

        print(printable(f"plot: {plot_analysis(result, a.plot)}"), file=sys.stderr)
    def markdown() -> str:
        from ..report.analysis_report import analysis_markdown

        return analysis_markdown(result, show_all=a.show_all)

    emit(a, lambda: print_analysis(result, show_all=a.show_all, details=a.details),
         json=lambda: result.to_json(jobs=_json_jobs(a, result)), markdown=markdown)
    return EXIT_OK


def _say_buffer_beside(source) -> None:
    """One line on stderr when a large trace's profiler buffer lies beside it: the buffer is analyzed with numpy,
    without loading a trace (a 1e7-record trace: 49 s and 3 GB; its buffer: 4.5 s)."""
    from ..core.filetypes import sibling
    from ..inputs import is_trace

    if not (is_trace(source) and _is_big(source)):
        return
    for suffix in (".bin", ".bin.gz"):
        buf = sibling(source, suffix)
        if buf.is_file():
            print(printable(f"ktrace: {buf} lies beside this trace: `ktrace analyze {buf}` gives the same figures "
                            "faster (the buffer is analyzed without loading a trace)"), file=sys.stderr)
            return


def _json_jobs(a, result):
    """The runtime configuration writing the JSON's long tables: the numpy engine's (--jobs, else its default);
    1 (this process) for the SQL package's."""
    if result.engine != "numpy":
        return 1
    from ..api import numpy_parallelism

    return numpy_parallelism(a.jobs)


def _sayer(bar):
    """on_engine for analyze: the engine auto chose and why, on stderr (above the progress bar when one is
    shown, so the bar does not draw over it)."""
    def say(engine: str, why: str) -> None:
        if bar is not None and getattr(bar, "say", None) is not None:
            bar.say(why)
        else:
            print(why, file=sys.stderr)

    return say


def print_analysis(result, con=None, show_all: bool = False, details: bool = False) -> None:
    """An Analysis as ``ktrace analyze`` prints it (text): the short report; ``details`` adds the tables."""
    if con is None and not details and not sys.stdout.isatty():  # a pipe or a file: the lines rich would print
        from ..report.analysis_report import short_lines
        from ..report.safe_text import for_stream
        from ._common import PIPE_MIN_WIDTH, _columns

        items = short_lines(result, show_all, _columns(), PIPE_MIN_WIDTH)
        if items is not None:
            for lines in items:  # one write each, as the console prints them
                sys.stdout.write(for_stream("".join(line + "\n" for line in lines)))
                sys.stdout.flush()
            return
    from ..report.analysis_report import analysis_text

    con = con or console()
    for r in analysis_text(result, show_all=show_all, details=details):
        con.print(r)


def _analyze_several(a, thresholds) -> int:
    """``ktrace analyze A.bin B.bin ...``: each buffer's analysis as for one, then the cross-GPU figures."""
    from ..api import analyze_gpus

    if a.plot or a.trace:
        from ..inputs import refuse_traces

        refuse_traces(a.source)
        raise InputError(f"{'--plot' if a.plot else '--trace'} takes one buffer: analyze the buffers one at a time")
    m = analyze_gpus(a.source, thresholds, align_mode=a.align, engine=a.engine, offsets=a.offset, clocks=a.clocks,
                     **decode_kwargs(a))
    return _print_several(a, m)


def _analyze_runs(a, thresholds) -> int:
    """``ktrace analyze --runs A.bin B.bin ...``: several runs of one kernel, what holds in every run."""
    from ..api import analyze_runs
    from ._common import expand_globs

    if a.plot or a.trace:
        raise InputError(f"{'--plot' if a.plot else '--trace'} takes one capture: analyze the runs one at a time")
    sources = expand_globs(a.source)
    with progress_bar("analyzing the runs", True, unit="runs") as cb:
        r = analyze_runs(sources, thresholds, engine=a.engine, progress=cb, **decode_kwargs(a))
    from ..report.runs_report import runs_markdown, runs_text

    def text() -> None:
        con = console()
        for x in runs_text(r):
            con.print(x)

    emit(a, text, json=r.to_json, markdown=lambda: runs_markdown(r))
    return EXIT_OK


def _analyze_merged(a, source, thresholds) -> int:
    """A trace written by ``ktrace merge``: each GPU's process analyzed on its own, then across GPUs."""
    from ..api import analyze_merged

    given = [k for k, v in decode_kwargs(a).items() if v not in (None, False)]
    if given:
        raise InputError(f"{source}: decoding options ({', '.join(given)}) apply to buffers, not traces")
    if a.plot or a.trace:
        raise InputError(f"{source}: {'--plot' if a.plot else '--trace'} takes one GPU's capture: give the GPUs' "
                         "buffers one at a time")
    return _print_several(a, analyze_merged(source, thresholds, engine=a.engine))


def _print_several(a, m) -> int:
    from .merge import print_cross_gpu

    def markdown() -> str:
        from ..report.analysis_report import analysis_markdown
        from ..report.multigpu_report import cross_gpu_markdown
        from ..report.safe_text import md_code, md_text

        parts = [f"## {md_text(lab)}: {md_code(s)}\n\n{analysis_markdown(r, show_all=a.show_all)}"
                 for lab, r, s in zip(m.labels, m.per_gpu, m.sources)]
        return "\n".join([*parts, cross_gpu_markdown(m.cross_gpu)])

    def text() -> None:
        con = console()
        for lab, r, s in zip(m.labels, m.per_gpu, m.sources):
            con.rule(printable(f"{lab}: {s}"))
            print_analysis(r, con, show_all=a.show_all, details=a.details)
        con.rule("across GPUs")
        print_cross_gpu(m.cross_gpu)

    emit(a, text, json=m.to_json, markdown=markdown)
    return EXIT_OK


def _cmd_query(a) -> int:
    from ..analysis import bundle_sql
    from ..api import query

    if a.print_package:
        print(bundle_sql())
        return EXIT_OK
    if not a.source:
        raise InputError("query: give a TRACE (or BUF) and the SQL, e.g. ktrace query run.perfetto-trace "
                         "\"INCLUDE PERFETTO MODULE ktrace.phases; SELECT * FROM ktrace_phase\"")
    from ..engine.session import result_limit_bytes

    sql = _query_text(a)
    with progress_bar("loading into the trace processor", _is_big(a.source), unit="bytes") as cb:
        result = query(a.source, sql, engine=a.engine, progress=cb, max_result_bytes=result_limit_bytes(),
                       **decode_kwargs(a))
    _print_result(result, a)
    cut = _what_was_cut(result, a.max_rows)
    if cut:
        sys.stdout.flush()
        print(f"ktrace: note: {cut}", file=sys.stderr)
    return EXIT_OK


def _what_was_cut(result, max_rows: int) -> str:
    """The note on what of the result was not printed and the option that shows more; "" when nothing."""
    n = len(result)
    shown = n if not max_rows else min(n, max_rows)
    if result.cut_at_bytes is not None:
        mib = f"{result.cut_at_bytes / 2**20:g} MiB"
        return (f"printed {shown:,} rows: the result is longer than {mib} (the limit read); the rest was not "
                f"read. Select less (LIMIT, fewer columns) or raise the limit with --max-result-mb MB")
    if shown < n:
        return f"printed the first {shown:,} of {n:,} rows; --max-rows N prints more (0: every row)"
    return ""


def _query_text(a) -> str:
    if a.file and a.sql:
        raise InputError("query: give the SQL as an argument or with -f, not both")
    if a.file:
        try:
            return sys.stdin.read() if a.file == "-" else open(a.file, encoding="utf-8").read()
        except OSError as e:
            raise InputError(f"{a.file}: cannot read it: {e.strerror or e}") from None
        except UnicodeDecodeError as e:
            raise InputError(f"{a.file}: the SQL is not UTF-8 text ({e.reason} at byte {e.start}); save it as UTF-8") from None
    if not a.sql:
        raise InputError("query: no SQL given (an argument, or -f FILE)")
    if any("\ud800" <= c <= "\udfff" for c in a.sql):
        raise InputError("query: the SQL holds bytes that are not UTF-8 (a lone surrogate); give it as UTF-8 text")
    return a.sql


def _print_result(result, a) -> None:
    from ..report.safe_text import csv_cell, json_text

    max_rows = getattr(a, "max_rows", 0)
    rows = result.head(max_rows) if max_rows else result.rows
    if a.json:
        dicts = [dict(zip(result.columns, row)) for row in rows]
        text = json_text(json.dumps(dicts, indent=2, ensure_ascii=False, default=_json_value))
        if a.json == "-":
            print(text)
            return
        write_text(a.json, text)
        print(printable(f"{a.json}: {len(rows):,} rows as JSON"), file=sys.stderr)
    if a.csv:  # a cell's escape sequences never reach the terminal; its line breaks are quoted
        import csv

        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(map(csv_cell, result.columns))
        w.writerows(["" if v is None else csv_cell(v) for v in row] for row in rows)
        return
    from rich.table import Table

    more = "+" if result.cut_at_bytes is not None else ""
    shown = f"{len(rows):,} of {len(result):,}{more} rows" if len(rows) < len(result) or more else f"{len(result):,} rows"
    t = Table(caption=shown, caption_justify="left")
    for c in result.columns:
        t.add_column(printable(c))
    for row in rows:  # a line break in a value never fakes a row
        t.add_row(*("NULL" if v is None else _table_cell(v) for v in row))
    console().print(t)


TABLE_CELL_CHARS = 1000  # what the table shows of one value (--csv and --json write it whole)


def _table_cell(v) -> str:
    """A value for the table: printable, a long one cut to its start and its length (rendering a 30 MB value
    in a terminal table took a minute)."""
    if isinstance(v, (bytes, bytearray, memoryview)) and len(v) > TABLE_CELL_CHARS // 4:
        return f"{printable(bytes(v[:TABLE_CELL_CHARS // 4]))}... ({len(v):,} bytes; --csv or --json for all)"
    text = printable(v)
    if len(text) > TABLE_CELL_CHARS:
        return f"{text[:TABLE_CELL_CHARS]}... ({len(text):,} characters; --csv or --json for all)"
    return text


def _json_value(v):
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    raise TypeError(f"cannot write {type(v).__name__} as JSON")


HANDLERS: dict = {"analyze": _cmd_analyze, "query": _cmd_query}
