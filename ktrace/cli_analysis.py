"""Command-line handlers for the analysis commands (analyze, query), kept apart from cli.py's decoding ones.

    ktrace analyze TRACE|BUF [--json | --markdown] [--plot out.png] [--threshold NAME=VALUE ...]
    ktrace analyze BUF BUF ... [--align offset|start]   several GPUs: each, then across them (cli_merge)
    ktrace query TRACE|BUF "SQL" | -f file.sql [--csv | --json]

A BUF (anything not ending in .perfetto-trace / .pftrace) is converted to a temporary trace first, with the
same decoding options as ``ktrace convert``. Exit codes: 0 ok, 2 bad input, 3 engine missing.
"""

from __future__ import annotations

import json
import sys

from .errors import EXIT_OK, InputError

__all__ = ["add_analysis_commands", "HANDLERS"]

from .cli import engine_option as _engine_option


def add_analysis_commands(sub, decode_options) -> None:
    """Register the analysis subcommands on the ``ktrace`` parser; ``decode_options(p)`` adds convert's
    decoding options to a subparser."""
    a = sub.add_parser(
        "analyze", help="per-phase figures and findings: imbalance, skew, last finisher, waits, critical path",
        description="Per-phase figures over all blocks (max/mean, start skew, last-finisher stability, waits, "
        "critical path), computed by the ktrace SQL package in Perfetto's trace processor, and the findings "
        "they support. Findings come first, then a table per phase.",
        epilog="Thresholds (NAME=VALUE): imbalance, excess_fraction, stable_fraction, wait_fraction, "
        "top_waits, dominant_share, tick_ns. The JSON schema is ktrace.analysis/2 (docs/analysis-schema.md).")
    a.add_argument("source", metavar="TRACE|BUF", nargs="+",
                   help="a .perfetto-trace, or a profiler buffer (converted to a temporary trace first); several "
                   "buffers (one per GPU): each analyzed, then a table across GPUs")
    fmt = a.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the analysis as JSON (schema ktrace.analysis/2)")
    fmt.add_argument("--markdown", action="store_true", help="print the report as Markdown (for a PR comment)")
    a.add_argument("--plot", metavar="PNG", help="also write a plot: per-block durations and the critical path")
    a.add_argument("--all", dest="show_all", action="store_true",
                   help="list info findings too (below the impact floor, --threshold min_impact=...)")
    a.add_argument("--threshold", metavar="NAME=VALUE", action="append", default=[],
                   help="override a finding threshold (repeatable), e.g. --threshold imbalance=1.2")
    _engine_option(a)
    from .cli_merge import align_option

    align_option(a)
    decode_options(a)

    q = sub.add_parser(
        "query", help="run PerfettoSQL on a trace, with the ktrace SQL package registered",
        description="Run PerfettoSQL on a trace. The ktrace package is registered: start with "
        "INCLUDE PERFETTO MODULE ktrace.phases; (or ktrace.critical_path for every table). Tables: "
        "ktrace_phase_slice, ktrace_phase_instance, ktrace_phase, ktrace_phase_lane, ktrace_lane_wait, "
        "ktrace_wait, ktrace_critical_path, ktrace_critical_path_share, ktrace_kernel, ktrace_launch_arg.")
    q.add_argument("source", metavar="TRACE|BUF", nargs="?",
                   help="a .perfetto-trace, or a profiler buffer (converted to a temporary trace first)")
    q.add_argument("sql", metavar="SQL", nargs="?", help="the query (or use -f)")
    q.add_argument("-f", "--file", metavar="SQL_FILE", help="read the query from a file ('-' for stdin)")
    qfmt = q.add_mutually_exclusive_group()
    qfmt.add_argument("--csv", action="store_true", help="print CSV")
    qfmt.add_argument("--json", action="store_true", help="print a JSON list of row objects")
    qfmt.add_argument("--print-package", action="store_true",
                      help="print the ktrace package as one script (paste it into ui.perfetto.dev's query page) "
                      "and exit")
    _engine_option(q)
    decode_options(q)


def _decode_kwargs(a) -> dict:
    from .cli import decode_kwargs as convert_kwargs

    return convert_kwargs(a)


_PROGRESS_MIN_BYTES = 16 << 20


def _cmd_analyze(a) -> int:
    from .analysis import Thresholds, analyze, is_trace_path

    if len(a.source) > 1:
        from .cli_merge import analyze_several

        return analyze_several(a)
    a.source = a.source[0]
    thresholds = Thresholds.parse(a.threshold)
    options = {} if is_trace_path(a.source) else _decode_kwargs(a)
    if is_trace_path(a.source):
        _refuse_decode_options(a)
    from pathlib import Path

    from .cli import progress_bar

    big = Path(a.source).is_file() and Path(a.source).stat().st_size >= _PROGRESS_MIN_BYTES
    with progress_bar("loading into the trace processor", big, unit="bytes") as cb:
        result = analyze(a.source, thresholds, engine=a.engine, progress=cb, **options)
    if a.plot:
        from .report.analysis_report import plot_analysis

        path = plot_analysis(result, a.plot)
        print(f"plot: {path}", file=sys.stderr)
    if a.json:
        print(result.to_json())
    elif a.markdown:
        from .report.analysis_report import analysis_markdown

        print(analysis_markdown(result, show_all=a.show_all))
    else:
        from rich.console import Console

        from .report.analysis_report import analysis_text

        con = Console() if sys.stdout.isatty() else Console(width=160)
        for r in analysis_text(result, show_all=a.show_all):
            con.print(r)
    return EXIT_OK


def _refuse_decode_options(a) -> None:
    given = [k for k, v in _decode_kwargs(a).items() if v not in (None, False)]
    if given:
        raise InputError(f"{a.source}: decoding options ({', '.join(given)}) apply to buffers, not traces")


def _cmd_query(a) -> int:
    from .analysis import bundle_sql, is_trace_path

    if a.print_package:
        print(bundle_sql())
        return EXIT_OK
    if not a.source:
        raise InputError("query: give a TRACE (or BUF) and the SQL, e.g. ktrace query run.perfetto-trace "
                         "\"INCLUDE PERFETTO MODULE ktrace.phases; SELECT * FROM ktrace_phase\"")
    sql = _query_text(a)
    if is_trace_path(a.source):
        _refuse_decode_options(a)
        result = _run_query(a.source, sql, a.engine)
    else:
        from .analysis import temporary_trace

        with temporary_trace(a.source, **_decode_kwargs(a)) as trace:
            result = _run_query(trace, sql, a.engine)
    _print_result(result, a)
    return EXIT_OK


def _query_text(a) -> str:
    if a.file and a.sql:
        raise InputError("query: give the SQL as an argument or with -f, not both")
    if a.file:
        try:
            return sys.stdin.read() if a.file == "-" else open(a.file, encoding="utf-8").read()
        except OSError as e:
            raise InputError(f"{a.file}: cannot read it: {e.strerror or e}") from None
    if not a.sql:
        raise InputError("query: no SQL given (an argument, or -f FILE)")
    return a.sql


def _run_query(trace, sql: str, engine: str):
    from .analysis import register
    from .engine import open_trace

    with open_trace(trace, engine=engine) as session:
        register(session)
        try:
            return session.query(sql)
        except InputError as e:
            if "no such table: ktrace_" in str(e) and "INCLUDE PERFETTO MODULE" not in sql.upper():
                raise InputError(f"{e}\nhint: start the query with INCLUDE PERFETTO MODULE ktrace.critical_path; "
                                 "(brings in every ktrace table)") from None
            raise


def _print_result(result, a) -> None:
    if a.json:
        print(json.dumps(result.to_dicts(), indent=2, ensure_ascii=False, default=_json_value))
        return
    if a.csv:
        import csv

        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(result.columns)
        w.writerows(["" if v is None else v for v in row] for row in result.rows)
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(caption=f"{len(result):,} rows", caption_justify="left")
    for c in result.columns:
        t.add_column(c)
    for row in result.rows:
        t.add_row(*("NULL" if v is None else str(v) for v in row))
    (Console() if sys.stdout.isatty() else Console(width=160)).print(t)


def _json_value(v):
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    raise TypeError(f"cannot write {type(v).__name__} as JSON")


HANDLERS: dict = {"analyze": _cmd_analyze, "query": _cmd_query}
