"""CI gates: a rule book's rules evaluated on one capture (rules.py parses them; the catalog names the figures).

A capture's figure values are computed once (``Capture.kernel_values`` / ``phase_values`` /
``group_values``), however many rules read them. Rules that cannot be evaluated raise InputError naming
every such rule and why; so does a capture (or baseline) whose buffer looks broken (input_problems.py),
unless the rule book or the caller accepts those problems: a gate does not pass on part of the slices.
Several baselines of one kernel are runs of it: a baseline figure is their mean.
"""

from __future__ import annotations

import fnmatch
import math
import re

from ...core.errors import InputError
from ...core.filetypes import is_trace
from ..compare.catalog import GROUP_FIGURES, KERNEL_FIGURES, PHASE_FIGURES, Capture, Value
from ..model.input_problems import input_problems
from ..compare.noise_model import margin_for, noise_model
from .rules import OPERATORS, Check, Rule, RuleBook, RuleResult, SqlRule

__all__ = ["resolve", "evaluate", "baseline_for", "check_capture", "edit_distance", "unmatched_sections",
           "refuse_broken"]

_SHOWN_ROWS = 5


def resolve(rule: Rule, cap: Capture, phase: str | None = None) -> Value:
    """The Value of ``rule``'s figure in ``cap`` (phase: a wildcard's phase); InputError when it has none.

    ``phase@G``: a figure of GROUP_FIGURES comes from group G's lanes; any other needs the phase to have run
    on group G alone (its figures are over all its lanes)."""
    a = cap.analysis
    name = rule.metric(phase)
    if rule.scope == "kernel":
        v = cap.kernel_values.get(rule.figure)
        if v is None:
            raise InputError(f"{name}: this capture has no control timings (sidecar 'timing'); capture it "
                             "with `ktrace run` or drop the rule")
        return v
    phase = phase if phase is not None else rule.scope
    values = cap.phase_values
    if phase not in values:
        raise InputError(f"{name}: no phase {phase!r} in {a.source} (phases: {', '.join(values) or 'none'})")
    if rule.group is None:
        return values[phase][rule.figure]
    groups = [int(g) for g in str(a.phases.groups[a.phases.phase == phase][0] or "").split(",") if g.strip()]
    if rule.group not in groups:
        raise InputError(f"{name}: phase {phase} ran on group(s) {', '.join(map(str, groups))}, not {rule.group}")
    if rule.figure in GROUP_FIGURES:
        return cap.group_values(phase, rule.group)[rule.figure]
    if groups != [rule.group]:
        raise InputError(f"{name}: phase {phase} ran on groups {', '.join(map(str, groups))} together and its "
                         f"{rule.figure} is over all their lanes; per group there is {', '.join(GROUP_FIGURES)} "
                         f"(or give each group's phase its own event name)")
    return values[phase][rule.figure]


def _unit(rule: Rule) -> str:
    cat = KERNEL_FIGURES if rule.scope == "kernel" else {**PHASE_FIGURES, **GROUP_FIGURES}
    return cat[rule.figure].unit


def _fmt(v, unit: str) -> str:
    if v is None:
        return "undefined"
    if unit == "x":
        return f"{v:.4g}x"
    if unit in ("count", "block"):
        return f"{v:g}"
    if unit == "fraction":
        return f"{v:.4g}"
    return f"{v:,.4g} {unit}"


def _runs(baseline) -> tuple[Capture, ...]:
    if baseline is None:
        return ()
    return tuple(baseline) if isinstance(baseline, (list, tuple)) else (baseline,)


def _figure_result(rule: Rule, cap: Capture, baseline, phase: str | None) -> RuleResult:
    subject = rule.metric(phase)
    unit = _unit(rule)
    v = resolve(rule, cap, phase)
    base = None
    runs = _runs(baseline)
    if rule.uses_baseline:
        if not runs:
            raise InputError(f"{rule.origin} {rule.text!r}: compares with a baseline; give --baseline BEFORE")
        try:
            values = [resolve(rule, b, phase).value for b in runs]
        except InputError as e:
            if phase is not None:
                return RuleResult(rule.text, rule.origin, subject, "skip", f"not in the baseline: {e}", unit=unit)
            raise InputError(f"{rule.origin} {rule.text!r}: baseline: {e}") from None
        if any(b is None or (isinstance(b, float) and math.isnan(b)) for b in values):
            raise InputError(f"{rule.origin} {rule.text!r}: {subject} is undefined in the baseline")
        base = sum(values) / len(values)  # several runs of the baseline: their mean
        k = rule.baseline_k
        limit = base * k if rule.baseline_op == "*" else base + k if rule.baseline_op == "+" else base - k
    else:
        limit = rule.value
    measured = v.value if not (isinstance(v.value, float) and math.isnan(v.value)) else None
    ok = measured is not None and OPERATORS[rule.op](measured, limit)
    msg = f"{subject} = {_fmt(measured, unit)}, limit {rule.op} {_fmt(limit, unit)}"
    if base is not None:
        msg += f" (baseline {_fmt(base, unit)}{f', mean of {len(runs)} runs' if len(runs) > 1 else ''})"
    noise = v.noise
    margin = _baseline_noise(rule, cap, runs, phase, base, measured) if base is not None and measured is not None \
        else None
    if margin is not None:
        # a baseline rule compares two runs: past the limit by no more than the largest change seen between
        # runs of the same inputs is not a change (docs/ci.md)
        noise, words = margin
        past = measured - limit if rule.op in ("<", "<=") else limit - measured if rule.op in (">", ">=") else None
        if not ok and past is not None and past <= noise:
            ok = True
            msg += f"; past the limit by {_fmt(past, unit)}, within the noise ±{_fmt(noise, unit)} ({words})"
        elif not ok:
            msg += f"; beyond the noise ±{_fmt(noise, unit)} ({words})"
    elif not ok and measured is not None and v.noise and abs(measured - limit) <= v.noise:
        # this capture's own spread (a tick, its instances or timed reps): a second run may move it more
        msg += f"; within this capture's spread ±{_fmt(v.noise, unit)}, which a second run may exceed"
    return RuleResult(rule.text, rule.origin, subject, "pass" if ok else "fail", msg, measured, rule.op, limit,
                      base, unit, noise)


def _baseline_noise(rule: Rule, cap: Capture, runs, phase, base: float, measured: float) -> tuple[float, str] | None:
    """The noise model's margin for the rule's figure between the baseline and the capture, with its words
    ('the largest change of imbalance seen between 64 same-input runs of 15 kernels: 34.4% of the figure');
    None for figures it does not model (counts, blocks, per-group figures)."""
    if rule.group is not None and rule.figure in GROUP_FIGURES:
        return None
    caps = (cap, *runs)
    ctx = {"tick_us": max(float(c.analysis.tick_ns) for c in caps) / 1e3,
           "wall_us": max((c.analysis.kernel.wall_ns or 0) for c in caps) / 1e3, "n": 1, "mean_dur_us": 0.0}
    kernel = rule.scope == "kernel"
    if not kernel:
        name = phase if phase is not None else rule.scope
        vals = [c.phase_values.get(name, {}) for c in caps]
        ctx["n"] = max([v["instances"].value or 1 for v in vals if "instances" in v] or [1])
        ctx["mean_dur_us"] = max([v["mean_dur_us"].value or 0.0 for v in vals if "mean_dur_us" in v] or [0.0])
    m = margin_for(rule.figure, base, measured, ctx, kernel=kernel)
    if m is None:
        return None
    noise, words = m
    return noise, f"the largest change of {rule.figure} seen between {noise_model().describe()}: {words}"


_PHASE_EQ = re.compile(r"\b(?:next_)?phase\s*(?:==?|!=|<>)\s*'((?:[^']|'')*)'", re.I)
_PHASE_IN = re.compile(r"\b(?:next_)?phase\s+(?:NOT\s+)?IN\s*\(([^)]*)\)", re.I)


def _phase_typos(query: str, phases) -> list[str]:
    """Phase names a query compares with that name no phase of the capture but are a few edits from one:
    such a query returns no rows whatever the capture holds, a gate switched off."""
    literals = [m.replace("''", "'") for m in _PHASE_EQ.findall(query)]
    for group in _PHASE_IN.findall(query):
        literals += [m.replace("''", "'") for m in re.findall(r"'((?:[^']|'')*)'", group)]
    out = []
    for lit in dict.fromkeys(literals):
        if lit in phases:
            continue
        near = [p for p in phases if _near(lit, p)]
        if near:
            out.append(f"phase {lit!r} is not a phase of this capture (did you mean {' or '.join(map(repr, near))}?)")
    return out


def _sql_result(rule: SqlRule, session, phases=()) -> RuleResult:
    typos = _phase_typos(rule.query, list(phases))
    if typos:
        raise InputError(f"{rule.origin}{_label(rule)}: " + "; ".join(typos))
    from ...engine.session import result_limit_bytes

    try:
        r = session.query(rule.query, result_limit_bytes())
    except InputError as e:
        why = str(e).removeprefix(f"{session.trace_name}: ")  # the temporary trace's path says nothing
        raise InputError(f"{rule.origin}{_label(rule)}: {why}") from None
    n = len(r)
    rows = tuple(dict(zip(r.columns, row)) for row in r.head(_SHOWN_ROWS))
    msg = "no rows" if not n else f"{n} row{'s' if n != 1 else ''} returned (each is a violation)"
    if r.cut_at_bytes is not None:
        msg = (f"at least {n} rows returned (each is a violation; the result was cut at "
               f"{r.cut_at_bytes / 2**20:g} MiB, --max-result-mb raises the limit)")
    return RuleResult(rule.name, rule.origin, rule.name, "pass" if not n else "fail", msg, measured=float(n),
                      op="==", limit=0.0, unit="rows", row_count=n, rows=rows)


def evaluate(rules, cap: Capture, baseline=None, session=None) -> tuple[RuleResult, ...]:
    """Every rule on ``cap`` (SQL rules on ``session``, the open trace of ``cap``); baseline: a Capture, or
    several runs of one (their mean is the baseline); InputError naming every rule that cannot be evaluated
    and why."""
    out, errors = [], []
    phases = list(cap.phase_values)
    for rule in rules:
        try:
            if isinstance(rule, SqlRule):
                if session is None:
                    raise InputError(f"{rule.origin}{_label(rule)}: SQL rules need the trace open in an engine")
                out.append(_sql_result(rule, session, phases))
            elif rule.scope == "*":
                subjects = [p for p in phases if rule.group is None or _ran_on(cap, p, rule.group)]
                if not subjects:
                    raise InputError(f"{rule.origin} {rule.text!r}: no phase"
                                     f"{'' if rule.group is None else f' of group {rule.group}'} to check")
                out += [_figure_result(rule, cap, baseline, p) for p in subjects]
            else:
                out.append(_figure_result(rule, cap, baseline, None))
        except InputError as e:
            text = str(e)
            errors.append(text if text.startswith(rule.origin) else f"{rule.origin}{_label(rule)}: {text}")
    if errors:
        raise InputError(f"{cap.analysis.source}: rules that cannot be evaluated:\n  " + "\n  ".join(errors))
    return tuple(out)


def _label(rule) -> str:
    if isinstance(rule, SqlRule):
        return "" if rule.name == rule.origin else f" ({rule.name})"
    return f" {rule.text!r}"


def _ran_on(cap: Capture, phase: str, group: int) -> bool:
    lanes = cap.analysis.lanes
    return bool(((lanes.phase == phase) & (lanes.group == group)).any())


def baseline_for(kernel: str, baselines) -> tuple[Capture, ...]:
    """The baseline runs for a kernel: the only one given, else those of the same kernel name (several:
    runs of it, whose mean is the baseline)."""
    baselines = list(baselines)
    if len(baselines) <= 1:
        return tuple(baselines)
    return tuple(b for b in baselines if b.kernel_name == kernel)


def refuse_broken(cap: Capture, source, allowed=frozenset(), what: str = "") -> tuple[str, ...]:
    """InputError naming the file, the problems (input_problems.py), how to fix them and how to accept them,
    when its launch facts show problems that ``allowed`` (kinds) does not accept; else notes on those
    accepted."""
    problems = input_problems(cap.analysis.launch)
    refused = [p for p in problems if p.kind not in allowed]
    if refused:
        kinds = ",".join(p.kind for p in refused)
        where = "`ktrace inspect` on its buffer" if is_trace(str(source)) else f"`ktrace inspect {source}`"
        fixes = "; ".join(dict.fromkeys(p.fix for p in refused))
        raise InputError(f"{source}: {what}the buffer looks broken or incomplete, so no gate is checked on it: "
                         f"{'; '.join(p.text for p in refused)}. Fix: {fixes} ({where} lists "
                         f"them). To check it anyway: --allow-anomalies {kinds}, or allow_anomalies = "
                         f"[{', '.join(repr(p.kind).replace(chr(39), chr(34)) for p in refused)}] in the rules file")
    return tuple(f"{what}accepted: {p.text}" for p in problems)


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance: insertions, deletions and substitutions turning a into b."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def _near(pattern: str, kernel: str) -> bool:
    return edit_distance(pattern.lower(), kernel.lower()) <= max(2, len(pattern) // 5)


def unmatched_sections(book: RuleBook, kernels) -> list[str]:
    """A problem for each kernel section (its rules and SQL rules) that matches none of ``kernels`` while one
    of them is a few edits away from its name: a typo that would switch its gates off."""
    kernels = sorted(set(kernels))
    out = []
    for sec in book.sections:
        if sec.pattern is None or any(fnmatch.fnmatchcase(k, sec.pattern) for k in kernels):
            continue
        near = [k for k in kernels if _near(sec.pattern, k)]
        if near:
            where = sec.rules[0].origin.rsplit(" ", 1)[0] if sec.rules else f"[kernels.{sec.pattern}]"
            out.append(f"{where}: matches no capture's kernel, so its {len(sec.rules)} rule(s) would not run "
                       f"(did you mean {' or '.join(repr(k) for k in near)}?)")
    return out


def check_capture(cap: Capture, book: RuleBook, *, baselines=(), session=None, source: str | None = None,
                  verify_sections: bool = True, allow_anomalies=frozenset()) -> Check:
    """``book``'s rules for ``cap``'s kernel, evaluated on it (SQL rules on ``session``, its open trace).
    baselines: Captures for ``baseline`` rules (see baseline_for). InputError when no rule applies, a rule
    cannot be evaluated, the capture or its baseline looks broken (``refuse_broken``; accepted kinds: the
    book's ``allow_anomalies`` for the kernel and ``allow_anomalies``), or (verify_sections) a kernel
    section misses the kernel by a typo; the Check says which passed. Checking several captures, pass
    verify_sections=False and call ``unmatched_sections`` with every kernel: a section may be meant for
    another capture."""
    source = source if source is not None else cap.analysis.source
    typos = unmatched_sections(book, [cap.kernel_name]) if verify_sections else []
    if typos:
        raise InputError(f"{source}: kernel {cap.kernel_name!r}: " + "; ".join(typos))
    allowed = frozenset(allow_anomalies) | book.allowed_for(cap.kernel_name)
    notes = refuse_broken(cap, source, allowed)
    rules = book.for_kernel(cap.kernel_name)
    if not rules:
        have = ", ".join(book.patterns) or "none"
        raise InputError(f"{source}: no rule applies to kernel {cap.kernel_name!r} (kernel sections: "
                         f"{have}); add a [kernels.{cap.kernel_name}] section or rules for every kernel")
    base = baseline_for(cap.kernel_name, baselines)
    if not base and any(r.uses_baseline for r in rules) and baselines:
        raise InputError(f"{source}: no baseline of kernel {cap.kernel_name!r} among "
                         f"{', '.join(b.kernel_name for b in baselines)}")
    if any(r.uses_baseline for r in rules):
        for b in base:
            notes += refuse_broken(b, b.analysis.source, allowed, "baseline: ")
    results = evaluate(rules, cap, base, session)
    return Check(str(source), cap.kernel_name, ", ".join(str(b.analysis.source) for b in base) or None, results,
                 notes)
