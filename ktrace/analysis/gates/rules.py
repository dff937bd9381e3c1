"""CI gates: rules on a capture's figures, absolute or relative to a baseline, and raw SQL rules.

    compute.imbalance <= 1.2              a phase's figure against a number
    kernel.wall_us <= 650                 the kernel's
    compute.wall_us <= baseline * 1.05    against the same figure of a baseline capture (also: baseline,
                                          baseline + c, baseline - c, k * baseline)
    *.imbalance < 1.5                     every phase (``*@1.wall_us``: every phase of group 1)
    mma@1.wall_us <= 40                   a phase on warp group 1 (see ``resolve``)

Operators: < <= > >= == != (``==``/``!=`` compare exactly: meant for counts and block indices). Figures are
the catalog of catalog.py (KERNEL_FIGURES, PHASE_FIGURES, GROUP_FIGURES; docs/ci.md). A SQL rule is a query
on the ktrace tables (every module already included) that must return no rows; each row it returns is a
violation. A rules file (TOML) has rules for every kernel and sections per kernel name (docs/ci.md).

A figure that is undefined in the capture (an imbalance with every slice 0 ns long) fails its rule. Rules
that cannot be evaluated (bad syntax, unknown figure or phase, a baseline rule without a baseline, a SQL
error) raise InputError naming every such rule and why: exit 2, distinct from a failed gate (exit 1).

This module parses rules; gates.py evaluates them on a capture, ``ktrace.check`` on any input.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import math
import operator
import re
import sys
from pathlib import Path

from ...core.errors import InputError
from ..compare.catalog import GROUP_FIGURES, KERNEL_FIGURES, PHASE_FIGURES
from ..model.input_problems import parse_allowed
from ...core.records import frozen

__all__ = ["OPERATORS", "Rule", "SqlRule", "Section", "RuleBook", "RuleResult", "Check", "parse_rule",
           "load_rules_file", "rule_book"]

OPERATORS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
             "!=": operator.ne}
# Unambiguous (each digit can belong to one part only): a failed match backtracks in linear time. The former
# "\d+\.?\d*" could split a run of digits between its two parts in n ways: 40,000 digits hung `check`.
_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_BASELINE = re.compile(rf"^baseline(?:\s*(?P<op>[*+-])\s*(?P<k>{_NUM}))?$|^(?P<k2>{_NUM})\s*\*\s*baseline$")


@frozen
class Rule:
    """``metric op limit``: limit is ``value``, or the baseline's figure combined with ``baseline_k`` by
    ``baseline_op`` ('*', '+' or '-'). scope: 'kernel', a phase name or '*'; group: the warp group of
    ``phase@group``. origin: where it was written (``--rule 1``, ``rules.toml [kernels.attn] rules[2]``)."""

    text: str
    origin: str
    scope: str
    group: int | None
    figure: str
    op: str
    value: float | None = None
    baseline_op: str | None = None
    baseline_k: float = 1.0

    @property
    def uses_baseline(self) -> bool:
        return self.baseline_op is not None

    def metric(self, phase: str | None = None) -> str:
        scope = phase if phase is not None else self.scope
        return f"{scope}{'' if self.group is None else f'@{self.group}'}.{self.figure}"


@frozen
class SqlRule:
    """A query that must return no rows (each row is a violation)."""

    name: str
    query: str
    origin: str
    uses_baseline = False


@frozen
class Section:
    """Rules for the kernels whose name matches ``pattern`` (fnmatch; None: every kernel), and the kinds of
    broken input (input_problems.PROBLEM_KINDS) it accepts (``allow_anomalies``)."""

    pattern: str | None
    rules: tuple
    allow: frozenset = frozenset()


@frozen
class RuleBook:
    """Every rule, by the kernels it applies to."""

    sections: tuple[Section, ...]

    def for_kernel(self, kernel: str) -> tuple:
        return tuple(r for s in self.sections if s.pattern is None or fnmatch.fnmatchcase(kernel, s.pattern)
                     for r in s.rules)

    def allowed_for(self, kernel: str) -> frozenset:
        """The kinds of broken input the sections matching ``kernel`` accept."""
        return frozenset().union(*(s.allow for s in self.sections
                                   if s.pattern is None or fnmatch.fnmatchcase(kernel, s.pattern)))

    @property
    def uses_baseline(self) -> bool:
        return any(r.uses_baseline for s in self.sections for r in s.rules)

    @property
    def uses_sql(self) -> bool:
        """Whether any rule is a query, which needs the trace open in the trace processor."""
        return any(isinstance(r, SqlRule) for s in self.sections for r in s.rules)

    @property
    def patterns(self) -> tuple[str, ...]:
        return tuple(s.pattern for s in self.sections if s.pattern is not None)


@frozen
class RuleResult:
    """One rule on one subject (a wildcard rule gives one result per phase). status: 'pass', 'fail' or
    'skip'; measured/limit/baseline in ``unit``; for a SQL rule, row_count and the first rows."""

    rule: str
    origin: str
    subject: str
    status: str
    message: str
    measured: float | None = None
    op: str | None = None
    limit: float | None = None
    baseline: float | None = None
    unit: str = ""
    noise: float = 0.0
    row_count: int = 0
    rows: tuple = ()

    def to_dict(self) -> dict:
        return {"rule": self.rule, "origin": self.origin, "subject": self.subject, "status": self.status,
                "message": self.message, "measured": self.measured, "op": self.op, "limit": self.limit,
                "baseline": self.baseline, "unit": self.unit, "noise": self.noise, "row_count": self.row_count,
                "rows": [dict(r) for r in self.rows]}


@frozen
class Check:
    """The rules applied to one capture."""

    source: str
    kernel: str
    baseline: str | None
    results: tuple[RuleResult, ...]
    notes: tuple[str, ...] = ()

    @property
    def failures(self) -> tuple[RuleResult, ...]:
        return tuple(r for r in self.results if r.status == "fail")

    @property
    def passed(self) -> bool:
        return not self.failures

    def __str__(self) -> str:
        """The text ``ktrace check`` prints (registered by the facade: ktrace/__init__.py)."""
        from ...core.lazy import text_of

        return text_of(self)

    def _repr_html_(self) -> str:
        """Jupyter's rich display: passed or failed, and each rule's measured value and limit."""
        from ..model.notebook import check_html

        return check_html(self)

    def to_dict(self) -> dict:
        return {"source": self.source, "kernel": self.kernel, "baseline": self.baseline, "passed": self.passed,
                "notes": list(self.notes), "results": [r.to_dict() for r in self.results]}


# -------------------------------------------------------------------------------------------- parsing
def parse_rule(text: str, origin: str = "rule") -> Rule:
    """A Rule from its text; InputError saying what is wrong with it."""
    def bad(why: str) -> InputError:
        return InputError(f"{origin} {_cut(text, 200)!r}: {why}")

    if not isinstance(text, str):
        raise InputError(f"{origin}: a rule is a string such as 'compute.imbalance <= 1.2', not {text!r}")
    m = _split_rule(text.strip())
    if not m or not m["metric"]:
        raise bad("write METRIC OP LIMIT, e.g. 'compute.imbalance <= 1.2' or 'kernel.wall_us <= baseline * 1.05'")
    op, rhs = m["op"], m["rhs"].strip()
    if op not in OPERATORS:
        hint = " (use == to compare equal)" if op == "=" else ""
        raise bad(f"unknown operator {_cut(op)!r}: use one of {' '.join(OPERATORS)}{hint}")
    scope, group, figure = _parse_metric(m["metric"].strip(), bad)
    if not rhs:
        raise bad("no limit after the operator")
    b = _BASELINE.match(rhs)
    if b:
        k = b["k"] or b["k2"]
        if k and not math.isfinite(float(k)):
            raise bad(f"factor {_cut(k)!r} is too large to be a number")
        return Rule(text.strip(), origin, scope, group, figure, op, baseline_op=b["op"] or "*",
                    baseline_k=float(k) if k else 1.0)
    if not re.fullmatch(_NUM, rhs):
        raise bad(f"limit {_cut(rhs)!r} is not a number nor baseline, baseline * K, baseline + C, baseline - C")
    if not math.isfinite(float(rhs)):
        raise bad(f"limit {_cut(rhs)!r} is too large to be a number")
    return Rule(text.strip(), origin, scope, group, figure, op, value=float(rhs))


def _cut(text, keep: int = 60):
    """``text`` as a message shows it: a long value cut to its start and its length (never 40,000 digits echoed)."""
    if not isinstance(text, str) or len(text) <= keep:
        return text
    return f"{text[:keep * 3 // 5]}... ({len(text):,} characters)"


_OP_CHARS = re.compile(r"[<>=!]+")


def _split_rule(text: str) -> dict | None:
    """{metric, op, rhs} of METRIC OP RHS, split at the first operator character: one pass over the text
    (a backtracking pattern took minutes on a rule of 100,000 spaces)."""
    m = _OP_CHARS.search(text)
    if m is None:
        return None
    return {"metric": text[:m.start()].rstrip(), "op": m.group(), "rhs": text[m.end():]}


def _parse_metric(metric: str, bad) -> tuple[str, int | None, str]:
    scope, dot, figure = metric.rpartition(".")
    if not dot or not scope or not figure:
        raise bad(f"metric {_cut(metric)!r}: write kernel.FIGURE, PHASE.FIGURE, PHASE@GROUP.FIGURE or *.FIGURE")
    group = None
    if "@" in scope:
        scope, _, g = scope.rpartition("@")
        if not re.fullmatch(r"[0-9]{1,6}", g) or not scope:
            raise bad(f"metric {_cut(metric)!r}: after '@' give a warp group index, e.g. mma@1.wall_us")
        group = int(g)
    if scope == "kernel":
        if group is not None:
            raise bad("kernel figures have no group")
        catalog = KERNEL_FIGURES
    else:
        catalog = {**PHASE_FIGURES, **GROUP_FIGURES} if group is not None else PHASE_FIGURES
    if figure not in catalog:
        near = difflib.get_close_matches(figure, catalog, n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        if group is None and figure in GROUP_FIGURES:
            raise bad(f"{figure} is a per-group figure: write {_cut(scope)}@GROUP.{figure}")
        raise bad(f"unknown {'kernel' if scope == 'kernel' else 'phase'} figure {_cut(figure)!r}{hint}; figures: "
                  f"{', '.join(catalog)}")
    return scope, group, figure


def _load_toml(path: Path) -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read the rules file ({e.strerror or e})") from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path}: not valid TOML ({e})") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: the rules file is not UTF-8 text ({e.reason} at byte {e.start})") from None
    except RecursionError:
        raise InputError(f"{path}: the rules file is nested too deeply to be a rules file") from None


def load_rules_file(path) -> tuple[list[Section], list[str]]:
    """The sections of a TOML rules file and the problems found (each names the rule and why)."""
    path = Path(path)
    doc = _load_toml(path)
    errors: list[str] = []
    sections = [_section(path, None, "", doc, {"rules", "sql", "kernels", "allow_anomalies"}, errors)]
    kernels = doc.get("kernels", {})
    if not isinstance(kernels, dict):
        errors.append(f"{path}: 'kernels' must be a table of [kernels.NAME] sections")
        kernels = {}
    for name, body in kernels.items():
        where = f"[kernels.{name}]" if re.fullmatch(r"[A-Za-z0-9_-]+", name) else f'[kernels."{name}"]'
        if not isinstance(body, dict):
            errors.append(f"{path} {where}: must be a table with 'rules' and/or 'sql'")
            continue
        sections.append(_section(path, name, where, body, {"rules", "sql", "allow_anomalies"}, errors))
    return [s for s in sections if s.rules or s.allow], errors


def _section(path: Path, pattern, where: str, body: dict, keys: set, errors: list) -> Section:
    here = f"{path}{' ' + where if where else ''}"
    for k in body:
        if k not in keys:
            errors.append(f"{here}: unknown key {k!r} (allowed: {', '.join(sorted(keys))})")
    rules: list = []
    texts = body.get("rules", [])
    if not isinstance(texts, list):
        errors.append(f"{here}: 'rules' must be a list of strings")
        texts = []
    for i, t in enumerate(texts):
        try:
            rules.append(parse_rule(t, f"{here} rules[{i}]"))
        except InputError as e:
            errors.append(str(e))
    sql = body.get("sql", [])
    if not isinstance(sql, list):
        errors.append(f"{here}: 'sql' must be a list of {{name, query}} tables ([[...sql]])")
        sql = []
    for i, s in enumerate(sql):
        origin = f"{here} sql[{i}]"
        if not isinstance(s, dict) or not isinstance(s.get("query"), str) or not s["query"].strip():
            errors.append(f"{origin}: give a table with a non-empty 'query' (and a 'name')")
            continue
        extra = set(s) - {"name", "query"}
        if extra:
            errors.append(f"{origin}: unknown key(s) {', '.join(sorted(extra))} (allowed: name, query)")
        rules.append(SqlRule(str(s.get("name") or f"sql[{i}]"), s["query"], origin))
    allow = frozenset()
    if "allow_anomalies" in body:
        try:
            allow = parse_allowed(body["allow_anomalies"], f"{here}: allow_anomalies")
        except ValueError as e:
            errors.append(str(e))
    return Section(pattern, tuple(rules), allow)


def rule_book_of(book) -> RuleBook:
    """A RuleBook from what ``ktrace.check`` takes: a RuleBook, a list of rule strings, one rule string, or a
    rules file (TOML) path; InputError naming what is taken for anything else."""
    if isinstance(book, RuleBook):
        return book
    if isinstance(book, (list, tuple)) and book and all(isinstance(r, str) for r in book):
        return rule_book(list(book))
    if isinstance(book, os.PathLike) or (isinstance(book, str) and book.endswith(".toml")):
        return rule_book(files=[book])
    if isinstance(book, str):
        return rule_book([book])
    empty = " (an empty list)" if isinstance(book, (list, tuple)) and not book else ""
    raise InputError("rules: expected ktrace.rule_book(...), a list of rule strings such as "
                     f"['compute.imbalance <= 1.2'] or a rules file (.toml) path, got {type(book).__name__}{empty}")


def rule_book(rules=(), sql=(), files=()) -> RuleBook:
    """Rules from the command line (texts, SQL queries) and rules files; InputError listing every bad one."""
    errors, parsed = [], []
    for i, t in enumerate(rules, 1):
        try:
            parsed.append(parse_rule(t, f"--rule {i}"))
        except InputError as e:
            errors.append(str(e))
    for i, q in enumerate(sql, 1):
        if not q.strip():
            errors.append(f"--sql {i}: empty query")
        else:
            parsed.append(SqlRule(f"--sql {i}", q, f"--sql {i}"))
    sections = [Section(None, tuple(parsed))] if parsed else []
    for f in files:
        s, e = load_rules_file(f)
        sections += s
        errors += e
    if errors:
        raise InputError("bad rules:\n  " + "\n  ".join(errors))
    if not any(s.rules for s in sections):
        raise InputError("no rules: give --rule 'METRIC OP LIMIT', --sql QUERY or --rules FILE")
    return RuleBook(tuple(sections))
