"""``ktrace diff`` (before/after) and ``ktrace check`` (CI gates).

    ktrace diff BEFORE AFTER [--json[=FILE]] [--markdown[=FILE]] [--plot out.png] [--all] [--assume-noise PCT]
    ktrace diff 'a_run*.bin' 'b_run*.bin'                                 (quoted globs: several runs per side)
    ktrace diff --before a1.bin a2.bin ... --after b1.bin b2.bin ...      (or globs: --before 'a*.bin')
    ktrace check TRACE|BUF ... [--rule 'compute.imbalance <= 1.2' ...] [--rules rules.toml] [--sql QUERY ...]
                 [--baseline BEFORE ...] [--allow-anomalies [KINDS]] [--junit FILE] [--markdown[=FILE]] [--json[=FILE]]

Buffers are converted to temporary traces first, with the same decoding options as ``ktrace convert``.
Every capture argument may be a quoted glob, expanded here (sorted); one that matches nothing is an error.
Exit codes: 0 ok (check: every rule passed), 1 a rule failed, 2 bad input or a bad rule, 3 engine missing.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from ..core.errors import EXIT_GATE, EXIT_OK, InputError
from ._common import (console, decode_kwargs, decode_options, engine_option, expand_globs, process_count,
                      progress_bar, quiet_stdout, result_options)
from .formats import ANY_KINDS, emit, format_options, one_stdout

__all__ = ["register", "HANDLERS"]


def register(sub) -> None:
    d = sub.add_parser(
        "diff", help="before/after: every phase's figures side by side, what changed beyond the noise",
        description="Compare two captures (traces or buffers) phase by phase: wall, slowest/mean, imbalance, "
        "start and end skew, waits, last-finisher stability, share of the critical path, with absolute and "
        "relative changes; kernel wall and, when both sidecars carry them, the unprofiled control timings, "
        "whose change is the kernel verdict. A change is judged only with an estimate of run-to-run noise: "
        "several runs per side (a t-test across runs), the timed repetitions for the kernel's medians, or "
        "--assume-noise; else it reads 'not judged'. Cost that moved between phases on the critical path is "
        "called out.",
        epilog="Figures are named as `ktrace check` rules name them (docs/ci.md). JSON schema: ktrace.diff/1.")
    d.add_argument("pair", metavar="BEFORE AFTER", nargs="*",
                   help=f"the captures before and after the change, each {ANY_KINDS} (a quoted glob: several runs "
                   "of it)")
    d.add_argument("--before", metavar="RUN", nargs="+", default=[],
                   help="several runs before the change (paths or quoted globs): a t-test across runs judges")
    d.add_argument("--after", metavar="RUN", nargs="+", default=[], help="several runs after the change")
    format_options(d, "the comparison (schema ktrace.diff/1)", markdown="the comparison", report="the table")
    d.add_argument("--plot", metavar="PNG", help="also write a plot: each phase's wall and imbalance before/after")
    d.add_argument("--all", action="store_true", help="show every figure, not only the main ones")
    d.add_argument("--assume-noise", metavar="PCT", type=_percent,
                   help="judge by this run-to-run noise (%% of each figure) where there is no estimate of it "
                   "(one run per side): your assumption, not a measurement")
    d.add_argument("--jobs", "-j", type=process_count, metavar="N",
                   help="analyze up to N captures at once, each in a worker process (default: the cores available, "
                   "capped by the number of captures; small files are analyzed in this process); 1: one after "
                   "the other. The report is the same either way")
    engine_option(d, numpy=True)
    decode_options(d)

    c = sub.add_parser(
        "check", help="CI gate: rules on a capture's figures; exit 1 when one fails",
        description="Check captures against rules: METRIC OP LIMIT (compute.imbalance <= 1.2, kernel.wall_us "
        "<= 650, compute.wall_us <= baseline * 1.05, *.imbalance < 1.5), raw SQL that must return no rows, or "
        "a TOML rules file with sections per kernel name. Each failing rule is printed with its measured value "
        "and limit.",
        epilog="Exit codes: 0 every rule passed, 1 a rule failed, 2 a bad rule or input (the message says which "
        "rule and why), 3 engine missing. Figures, operators and the rules file: docs/ci.md.")
    c.add_argument("sources", metavar="TRACE|BUF", nargs="+", help=f"captures to check, each {ANY_KINDS}")
    c.add_argument("--rule", metavar="RULE", action="append", default=[],
                   help="a rule, e.g. 'compute.imbalance <= 1.2' (repeatable)")
    c.add_argument("--rules", metavar="TOML", action="append", default=[],
                   help="a rules file: rules for every kernel and [kernels.NAME] sections (repeatable)")
    c.add_argument("--sql", metavar="QUERY", action="append", default=[],
                   help="a SQL rule: a query on the ktrace tables that must return no rows (repeatable)")
    c.add_argument("--baseline", metavar="BEFORE", action="append", default=[],
                   help="capture for 'baseline' rules (repeatable, or a quoted glob: matched to captures by "
                   "kernel name; several of one kernel are runs, their mean is the baseline)")
    c.add_argument("--allow-anomalies", metavar="KINDS", nargs="?", const="all", default="",
                   help="check captures whose buffer looks broken anyway: every kind, or those named "
                   "(comma-separated: unpaired_records, unreadable_records, full_lanes, records_lost, "
                   "layout_match); without it such a capture is refused (exit 2)")
    c.add_argument("--junit", metavar="FILE", help="write the results as JUnit XML")
    format_options(c, "the results (schema ktrace.check/1)", markdown="the results", report="the table")
    engine_option(c)
    result_options(c)
    decode_options(c)


def _cmd_diff(a) -> int:
    from ..api import diff
    from ..report import compare_report as rep

    one_stdout(a)
    before, after = _sides(a)
    n = sum(len(x) if isinstance(x, list) else 1 for x in (before, after))
    with progress_bar("analyzing the captures", n > 1, unit="captures") as cb:
        result = diff(before, after, engine=a.engine, jobs=a.jobs, on_done=cb, assume_noise_pct=a.assume_noise,
                      **decode_kwargs(a))
    if a.plot:
        print(f"plot: {rep.plot_diff(result, a.plot)}", file=sys.stderr)
    def text() -> None:
        con = console()
        for r in rep.diff_text(result, a.all):
            con.print(r)

    emit(a, text, json=result.to_json, markdown=lambda: rep.diff_markdown(result, a.all))
    return EXIT_OK


def _percent(text: str) -> float:
    try:
        v = float(text.rstrip("%"))
    except ValueError:
        v = math.nan
    if not 0 < v < 100:
        raise argparse.ArgumentTypeError(f"{text!r}: give a percentage between 0 and 100, e.g. 1.5")
    return v


def _runs(paths: list[str]):
    return paths if len(paths) > 1 else paths[0]


def _sides(a) -> tuple:
    if a.pair and (a.before or a.after):
        raise InputError("diff: give BEFORE AFTER, or --before RUN ... --after RUN ..., not both")
    if not a.pair:
        if not a.before or not a.after:
            raise InputError("diff: give BEFORE AFTER, or several runs with --before RUN ... --after RUN ...")
        return _runs(expand_globs(a.before, "--before ")), _runs(expand_globs(a.after, "--after "))
    if len(a.pair) != 2:
        raise InputError(f"diff: give two captures, BEFORE and AFTER (got {len(a.pair)}); several runs per side "
                         "go with quoted globs ('a_run*.bin' 'b_run*.bin') or --before RUN ... --after RUN ...")
    return _runs(expand_globs([a.pair[0]], "BEFORE ")), _runs(expand_globs([a.pair[1]], "AFTER "))


def _cmd_check(a) -> int:
    from ..analysis.gates.checks import unmatched_sections
    from ..analysis.model.input_problems import parse_allowed
    from ..api import check, load_capture, rule_book
    from ..inputs import buffer_options
    from ..report import compare_report as rep

    one_stdout(a)
    try:
        allowed = parse_allowed(a.allow_anomalies, "--allow-anomalies")
    except ValueError as e:
        hint = ("; it took the capture as its list of kinds: put --allow-anomalies after the captures"
                if Path(a.allow_anomalies).exists() else "")
        raise InputError(f"{e}{hint}") from None
    a.sources, a.baseline = expand_globs(a.sources), expand_globs(a.baseline, "--baseline ")
    book = rule_book(a.rule, a.sql, a.rules)
    if a.baseline and not book.uses_baseline:
        print("ktrace: note: --baseline given but no rule uses 'baseline'", file=sys.stderr)
    if book.uses_baseline and not a.baseline:
        raise InputError("rules compare with 'baseline' but no --baseline BEFORE was given")
    options = buffer_options(a.sources + a.baseline, decode_kwargs(a))
    baselines = [load_capture(b, engine=a.engine, **options) for b in a.baseline] if book.uses_baseline else []
    checks = [check(s, book, baselines=baselines, engine=a.engine, verify_sections=False, allow_anomalies=allowed,
                    **options) for s in a.sources]
    typos = unmatched_sections(book, [c.kernel for c in checks])
    if typos:  # a misspelled section would switch its gates off: refuse, before any result is shown
        raise InputError("rules that match no capture:\n  " + "\n  ".join(typos))
    if a.junit:
        from ..core.outputs import write_atomically

        write_atomically(a.junit, rep.junit_xml(checks).encode("utf-8"), "JUnit file")
    code = EXIT_OK if all(c.passed for c in checks) else EXIT_GATE

    def text() -> None:
        con = console()
        for r in rep.check_text(checks):
            con.print(r)

    try:
        emit(a, text, json=lambda: rep.check_json(checks), markdown=lambda: rep.check_markdown(checks))
        sys.stdout.flush()
    except BrokenPipeError:  # the reader stopped (`| head`): the gate's verdict still decides the exit code
        quiet_stdout()
    return code


HANDLERS: dict = {"diff": _cmd_diff, "check": _cmd_check}
