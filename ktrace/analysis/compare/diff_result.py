"""What ``ktrace diff`` returns: each figure before and after with its verdict, per phase, the cost that moved
between phases, and the whole result with its JSON (schema ``ktrace.diff/1``, docs/ci.md)."""

from __future__ import annotations

from dataclasses import field

from ...core import jsonfmt
from ...core.records import frozen

__all__ = ["Change", "PhaseChange", "CostShift", "Diff", "DIFF_SCHEMA", "VERDICTS", "paired_line"]

DIFF_SCHEMA = "ktrace.diff/1"
# The one vocabulary of diff and check: every verdict is one of these, with its evidence after it.
VERDICTS = ("better", "worse", "no change", "not judged")
_ALPHA = 0.01  # noise.ALPHA: a p-value under it beside 'no change' would contradict the words


def _p(p: float | None) -> str:
    return "" if p is None else "p<0.001" if p < 0.001 else f"p={p:.3f}"


def paired_line(t) -> str:
    """An A/B session's paired test (ktrace.core.paired.PairedTest) in the one vocabulary: 'worse: unprofiled
    +1.18% [+1.16%, +1.20%] (paired t-test on 200 interleaved pairs, ...)'; no p-value beside 'no change'."""
    word = {"slower": "worse", "faster": "better", "no change": "no change"}.get(t.change, "not judged")
    ci = f"{t.confidence:.0%} interval {t.ci_us[0]:+,.2f} to {t.ci_us[1]:+,.2f} µs"
    if t.change == "no change":
        line = (f"no change: unprofiled {t.interval_text}, within +-{t.threshold_pct:g}% (paired test on {t.pairs} "
                f"interleaved pairs, {ci})")
    elif t.change == "inconclusive":
        line = (f"not judged: unprofiled {t.interval_text} (paired test on {t.pairs} interleaved pairs, {ci}): the "
                f"interval reaches past +-{t.threshold_pct:g}%; more pairs would narrow it")
    else:
        line = f"{word}: unprofiled {t.interval_text} (paired t-test on {t.pairs} interleaved pairs, {ci}, {t.p_text})"
    if t.excluded:
        n = len(t.excluded)
        line += f"; {n} outlier pair{'s' if n != 1 else ''} left out of the t-test, kept in the sign test"
    if not t.tests_agree and t.change in ("slower", "faster"):
        line += (f"; the median difference {t.median_diff_us:+,.2f} µs [{t.median_ci_us[0]:+,.2f}, "
                 f"{t.median_ci_us[1]:+,.2f}] (sign test) disagrees: outlier pairs?")
    return line


@frozen
class Change:
    """One figure before and after, in ``unit``. ``noise``: the threshold the change had to exceed.
    ``test``: how it was judged ('runs', 'reps', 'assumed', 'exact', 'tied'; 'none': not judged, no estimate
    of run-to-run noise; 'info': reported, never significant). ``verdict``: 'better', 'worse', 'changed'
    (no better direction), 'same' (within noise), 'not judged', 'moved' (information: the last finisher),
    'undefined' (a side lacks the figure). ``reps``: the timed repetitions a 'reps' test used per side."""

    figure: str
    unit: str
    before: float | None
    after: float | None
    noise: float
    lower_is_better: bool | None
    decided: bool | None = None
    test: str = "spread"
    p_value: float | None = None
    reps: tuple | None = None
    basis: str = ""  # test 'model': the same-input bound it was measured against, in words

    @property
    def delta(self) -> float | None:
        """after - before; None when a side is undefined or the figure is a block index (no arithmetic)."""
        if self.before is None or self.after is None or self.unit == "block":
            return None
        return self.after - self.before

    @property
    def relative(self) -> float | None:
        d = self.delta
        return None if d is None or not self.before else d / abs(self.before)

    @property
    def significant(self) -> bool:
        if None in (self.before, self.after) or self.test in ("none", "info"):
            return False
        if self.decided is not None:
            return self.decided
        if self.unit == "block":
            return None not in (self.before, self.after) and self.before != self.after
        d = self.delta
        return d is not None and abs(d) > self.noise

    @property
    def detail(self) -> str:
        """What lies behind the verdict word: 'better', 'worse', 'changed' (significant, no better direction),
        'same' (within the noise or under the floors), 'unjudged' (moved, no estimate of the noise), 'info'
        (the last finisher: reported, never a change; 'moved' when it did) or 'undefined' (a side lacks it)."""
        if self.before is None or self.after is None:
            return "undefined"
        if self.test == "info":
            return "moved" if self.before != self.after else "info"
        if self.test == "none":
            return "same" if self.before == self.after else "unjudged"
        if not self.significant:
            return "same"
        if self.lower_is_better is None:
            return "changed"
        return "better" if (self.delta < 0) == self.lower_is_better else "worse"

    @property
    def verdict(self) -> str:
        """One of VERDICTS: 'better', 'worse', 'no change' (within the noise, under the floors, or the last
        finisher staying put), 'not judged' (no estimate of the noise, a side undefined, information that
        moved, a change with no better direction)."""
        return {"better": "better", "worse": "worse", "same": "no change", "info": "no change"}.get(self.detail,
                                                                                                "not judged")

    def to_dict(self) -> dict:
        return {"figure": self.figure, "unit": self.unit, "before": self.before, "after": self.after,
                "change": self.delta, "relative": self.relative, "noise": self.noise,
                "significant": self.significant, "verdict": self.verdict, "detail": self.detail, "test": self.test,
                "p_value": self.p_value, "confidence": None if self.p_value is None else 1.0 - self.p_value}


@frozen
class PhaseChange:
    """A phase's figures before and after. present: 'both', 'before' (gone after) or 'after' (new)."""

    phase: str
    present: str
    changes: tuple[Change, ...]

    def change(self, figure: str) -> Change:
        return _find(self.changes, "figure", figure,
                     f"no figure {figure!r}; figures: {', '.join(c.figure for c in self.changes)}")

    def to_dict(self) -> dict:
        return {"phase": self.phase, "present": self.present, "figures": [c.to_dict() for c in self.changes]}


@frozen
class CostShift:
    """Cost that moved between phases: time on the critical path (critical_us) that fell significantly in
    some phases and rose significantly in others. ``fell_us``/``rose_us``: phase -> change (µs)."""

    fell_us: dict
    rose_us: dict
    kernel_wall_change_us: float | None
    message: str

    @property
    def moves(self) -> str:
        """'compute -286.94 µs, reduce +294.66 µs': what fell, then what rose, the largest first."""
        def listing(d: dict) -> list[str]:
            return [f"{k} {v:+,.2f} µs" for k, v in sorted(d.items(), key=lambda kv: -abs(kv[1]))]

        return ", ".join(listing(self.fell_us) + listing(self.rose_us))

    def to_dict(self) -> dict:
        return {"fell_us": dict(self.fell_us), "rose_us": dict(self.rose_us),
                "kernel_wall_change_us": self.kernel_wall_change_us, "message": self.message}


@frozen
class Diff:
    """``before`` against ``after``: kernel figures, every phase's figures, cost moved, findings resolved/new
    (judged; not judged: ``findings_gone`` / ``findings_appeared``)."""

    before_source: str
    after_source: str
    before_kernel: str
    after_kernel: str
    tick_ns: float
    kernel: tuple[Change, ...]
    phases: tuple[PhaseChange, ...]
    cost_shift: CostShift | None
    findings_resolved: tuple[str, ...]
    findings_new: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())
    before_sources: tuple[str, ...] = ()
    after_sources: tuple[str, ...] = ()
    assumed_noise: float | None = None
    runs_needed: int | None = None
    cost_line: str = ""
    # not judged (no run-to-run noise estimate): warnings on one side only whose evidence moved that way
    findings_gone: tuple[str, ...] = ()
    findings_appeared: tuple[str, ...] = ()
    same_timing: bool = False  # both sides carry one timing session: the control cannot tell them apart
    # an A/B session's record (ktrace run --ab, analysis/ab_diff.py): its paired test (ktrace.core.paired.PairedTest)
    # of the unprofiled builds timed against each other, which the kernel verdict then rests on, and its path
    paired: object = None
    paired_record: str = ""
    model: str = ""  # one run per side judged by the noise model: what it was measured on ('64 same-input runs ...')

    @property
    def significant(self) -> tuple[str, ...]:
        """Every significant change, as ``kernel.FIGURE`` / ``PHASE.FIGURE`` (a phase on one side only:
        ``PHASE (only before)``)."""
        out = [f"kernel.{c.figure}" for c in self.kernel if c.significant]
        for p in self.phases:
            if p.present != "both":
                out.append(f"{p.phase} (only {p.present})")
            out += [f"{p.phase}.{c.figure}" for c in p.changes if p.present == "both" and c.significant]
        return tuple(out)

    @property
    def runs(self) -> tuple[int, int]:
        """Captures per side (before, after)."""
        return len(self.before_sources or (self.before_source,)), len(self.after_sources or (self.after_source,))

    @property
    def judged(self) -> bool:
        """Whether the timeline's figures had an estimate of run-to-run noise: runs, or an assumed noise."""
        nb, na = self.runs
        return min(nb, na) >= 2 or max(nb, na) >= 3 or self.assumed_noise is not None or bool(self.model)

    @property
    def why_unjudged(self) -> str:
        return "one run per side" if self.runs == (1, 1) else "too few runs"

    @property
    def verdict_change(self) -> Change:
        """The figure the kernel verdict rests on: the unprofiled control when both sides carry it, else the
        profiled timeline's wall (also when both sides carry the same timing session)."""
        c = next((c for c in self.kernel if c.figure == "control_us"), None)
        if c is None or None in (c.before, c.after) or self.same_timing:
            return self.kernel_change("wall_us")
        return c

    @property
    def verdict(self) -> str:
        """The kernel's, one of VERDICTS: the A/B session's paired test when there is one, else the verdict
        figure's (``verdict_change``)."""
        if self.paired is not None:  # the A/B session's paired test; 'inconclusive' is not judged
            return {"slower": "worse", "faster": "better", "no change": "no change"}.get(self.paired.change,
                                                                                        "not judged")
        return self.verdict_change.verdict

    def how_judged(self, c: Change) -> str:
        """The evidence behind a change's verdict, in words: the test, its interval or p-value (never beside
        words it contradicts), the bound it was held to."""
        nb, na = self.runs
        p = _p(c.p_value)
        if c.test == "paired" and self.paired is not None:
            return self.paired.how
        if c.test == "reps":
            rb, ra = c.reps or (0, 0)
            floor = c.noise / max(abs(c.before), abs(c.after)) if c.before or c.after else 0.0
            if c.significant:
                return (f"t-test on {rb}+{ra} timed reps, {p}; beyond the {floor:.0%} = {c.noise:,.2f} µs that sessions "
                        "of the same inputs move it")
            if c.p_value is not None and c.p_value < _ALPHA:
                return f"within the {floor:.0%} = {c.noise:,.2f} µs that sessions of the same inputs move it"
            return f"t-test on {rb}+{ra} timed reps, {p}"
        if c.test == "runs":
            if not c.significant and c.p_value is not None and c.p_value < _ALPHA:
                return f"across {nb}+{na} runs, under the floors: 2 timer ticks, 1% of the kernel wall"
            return f"t-test across {nb}+{na} runs, {p}"
        if c.test == "assumed":
            return f"{'beyond' if c.significant else 'within'} the assumed noise {self.assumed_noise:.1%}, --assume-noise"
        if c.test == "model":
            where = "beyond" if c.significant else "within"
            return f"{where} the largest change seen between {self.model}: {c.basis}"
        if c.test == "floor":
            return "under 2 timer ticks and 1% of the kernel wall"
        if c.test == "exact":
            return "counted"
        if c.test == "tied":
            return "follows its figure (a total its mean, a share its time on the critical path)"
        if c.test == "info":
            return "information: which block finishes last is never a change"
        if c.before is None or c.after is None:
            return "a side lacks the figure"
        return f"{self.why_unjudged}: no estimate of the run-to-run noise"

    def settle(self) -> str:
        """How many runs per side would judge the kernel's change."""
        n = self.runs_needed
        if n:
            return f"{n} runs per side would settle it: ktrace run --repeat {n}"
        return "several runs per side would settle it: ktrace run --repeat 3 or more, or --assume-noise PCT"

    @property
    def unjudged(self) -> tuple[str, ...]:
        """Every change that moved beyond the floors and could not be judged, as ``PHASE.FIGURE``."""
        out = [f"kernel.{c.figure}" for c in self.kernel if c.detail == "unjudged"]
        for p in self.phases:
            out += [f"{p.phase}.{c.figure}" for c in p.changes if p.present == "both" and c.detail == "unjudged"]
        return tuple(out)

    def _kernel_words(self) -> str:
        """The kernel's change and its evidence: 'unprofiled control -53.3% (t-test ...)'."""
        k = self.verdict_change
        what = "unprofiled control" if k.figure == "control_us" else "kernel wall"
        if self.paired is not None and k.figure == "control_us":
            return paired_line(self.paired).split(": ", 1)[1]
        if k.before is None or k.after is None:
            return f"{what} undefined on a side"
        if k.detail == "same" and k.test == "none":
            return f"{what} identical"
        rel = "" if k.relative is None else f" {k.relative:+.1%}"
        words = f"{what}{rel} ({self.how_judged(k)})"
        return words if k.detail != "unjudged" else f"{words}; {self.settle()}"

    @property
    def headline(self) -> str:
        """The first line of every diff: one of VERDICTS, then the evidence. Cost that moved between phases on
        the critical path leads it when it happened; beside the kernel verdict, the profiled wall and the
        probes' cost; then where the changes beyond the noise are."""
        v = self.verdict
        kernel = self._kernel_words()
        if self.cost_shift is not None:
            state = {"better": "the kernel got faster", "worse": "the kernel got slower",
                     "no change": "the kernel did not change"}.get(v, "the kernel's change not judged")
            head = f"{v}: cost moved: {self.cost_shift.moves} on the critical path; {state}: {kernel}"
        else:
            head = f"{v}: {kernel}"
        k = self.verdict_change
        if k.figure == "control_us":
            w = self.kernel_change("wall_us")
            o = next((c for c in self.kernel if c.figure == "overhead_ratio"), None)
            beside = [f"profiled wall {w.relative:+.1%}" if w.relative is not None else "profiled wall undefined"]
            if o is not None and o.relative is not None:
                beside.append(f"probes' cost {o.relative:+.1%} (overhead {o.before:.3f}x -> {o.after:.3f}x)")
            head += "; beside it: " + ", ".join(beside)
        others = [s for s in self.significant if s != f"kernel.{k.figure}"]
        if others:
            where: dict[str, int] = {}
            for name in others:
                scope = name.split(" (only", 1)[0] if "(only" in name else name.rsplit(".", 1)[0]
                where[scope] = where.get(scope, 0) + 1
            head += "; beyond the noise: " + ", ".join(f"{scope} ({n})" for scope, n in where.items())
        phases = [n for n in self.unjudged if not n.startswith("kernel.")]
        if phases:
            head += f"; {len(phases)} phase figure{'s' if len(phases) != 1 else ''} not judged: {self.why_unjudged}"
            if v != "not judged":
                head += f" ({self.settle().replace('settle it', 'settle them')})"
        return head

    @property
    def cost_message(self) -> str:
        """The cost shift's message, or the statement of what fell or rose on the critical path, or that
        nothing did."""
        if self.cost_shift is not None:
            return self.cost_shift.message
        return self.cost_line or "no cost moved to other phases: no phase's time on the critical path changed"

    def phase(self, name: str) -> PhaseChange:
        return _find(self.phases, "phase", name,
                     f"no phase {name!r}; phases: {', '.join(p.phase for p in self.phases)}")

    def kernel_change(self, figure: str) -> Change:
        return _find(self.kernel, "figure", figure, f"no kernel figure {figure!r}")

    def __str__(self) -> str:
        """The text ``ktrace diff`` prints (registered by the facade: ktrace/__init__.py)."""
        from ...core.lazy import text_of

        return text_of(self)

    def _repr_html_(self) -> str:
        """Jupyter's rich display: the headline, the cost line and every figure's change and verdict."""
        from ..model.notebook import diff_html

        return diff_html(self)

    def to_dict(self) -> dict:
        k = self.verdict_change
        return {"schema": DIFF_SCHEMA, "headline": self.headline,
                "verdict": {"verdict": self.verdict, "figure": f"kernel.{k.figure}", "test": k.test,
                            "evidence": self._kernel_words(),
                            "p_value": k.p_value, "judged": self.judged, "runs": list(self.runs),
                            "assumed_noise": self.assumed_noise, "runs_needed": self.runs_needed,
                            "noise_model": self.model or None},
                "before": {"source": self.before_source,
                           "sources": list(self.before_sources or (self.before_source,)), "kernel": self.before_kernel},
                "after": {"source": self.after_source,
                          "sources": list(self.after_sources or (self.after_source,)), "kernel": self.after_kernel},
                "tick_ns": self.tick_ns, "kernel": [{**c.to_dict(), "evidence": self.how_judged(c)} for c in self.kernel],
                "phases": [{**p.to_dict(), "figures": [{**c.to_dict(), "evidence": self.how_judged(c)}
                                                       for c in p.changes]} for p in self.phases],
                "cost_shift": self.cost_shift.to_dict() if self.cost_shift else None,
                "cost": {"moved": self.cost_shift is not None, "message": self.cost_message},
                "findings": {"resolved": list(self.findings_resolved), "new": list(self.findings_new),
                             "gone_not_judged": list(self.findings_gone),
                             "appeared_not_judged": list(self.findings_appeared)},
                "notes": list(self.notes),
                "paired": None if self.paired is None else {"record": self.paired_record, **self.paired.to_dict()}}

    def to_json(self, indent: int | None = 2) -> str:
        return jsonfmt.dumps(self.to_dict(), indent=indent, ensure_ascii=False, allow_nan=False)


def _find(items, attr: str, value, missing: str):
    """The first of ``items`` whose ``attr`` equals ``value``; KeyError(missing) when none does."""
    for x in items:
        if getattr(x, attr) == value:
            return x
    raise KeyError(missing)
