"""What ``ktrace diff`` returns: each figure before and after with its verdict, per phase, the cost that moved
between phases, and the whole result with its JSON (schema ``ktrace.diff/1``, docs/ci.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import jsonfmt

__all__ = ["Change", "PhaseChange", "CostShift", "Diff", "DIFF_SCHEMA"]

DIFF_SCHEMA = "ktrace.diff/1"


@dataclass(frozen=True)
class Change:
    """One figure before and after, in ``unit``. ``noise``: the larger side's; a change within it is not
    significant. ``verdict``: 'better', 'worse', 'changed' (no better direction), 'same' (within noise),
    'undefined' (a side lacks the figure)."""

    figure: str
    unit: str
    before: float | None
    after: float | None
    noise: float
    lower_is_better: bool | None
    decided: bool | None = None
    test: str = "spread"
    p_value: float | None = None

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
        if None in (self.before, self.after):
            return False
        if self.decided is not None:
            return self.decided
        if self.unit == "block":
            return None not in (self.before, self.after) and self.before != self.after
        d = self.delta
        return d is not None and abs(d) > self.noise

    @property
    def verdict(self) -> str:
        if self.before is None or self.after is None:
            return "undefined"
        if not self.significant:
            return "same"
        if self.lower_is_better is None:
            return "changed"
        return "better" if (self.delta < 0) == self.lower_is_better else "worse"

    def to_dict(self) -> dict:
        return {"figure": self.figure, "unit": self.unit, "before": self.before, "after": self.after,
                "change": self.delta, "relative": self.relative, "noise": self.noise,
                "significant": self.significant, "verdict": self.verdict, "test": self.test,
                "p_value": self.p_value, "confidence": None if self.p_value is None else 1.0 - self.p_value}


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class CostShift:
    """Cost that moved between phases: time on the critical path (critical_us) that fell significantly in
    some phases and rose significantly in others. ``fell_us``/``rose_us``: phase -> change (µs)."""

    fell_us: dict
    rose_us: dict
    kernel_wall_change_us: float | None
    message: str

    def to_dict(self) -> dict:
        return {"fell_us": dict(self.fell_us), "rose_us": dict(self.rose_us),
                "kernel_wall_change_us": self.kernel_wall_change_us, "message": self.message}


@dataclass(frozen=True)
class Diff:
    """``before`` against ``after``: kernel figures, every phase's figures, cost moved, findings resolved/new."""

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
    def headline(self) -> str:
        """'no significant change', or the kernel wall's verdict and how many figures changed where."""
        sig = self.significant
        if not sig and not self.findings_new and not self.findings_resolved:
            return "no significant change"
        w = self.kernel_change("wall_us")
        wall = (f"kernel wall {w.relative:+.1%} ({'WORSE' if w.verdict == 'worse' else w.verdict})"
                if w.relative is not None and w.significant else "kernel wall within the noise")
        where: dict[str, int] = {}
        for name in sig:
            scope = name.split(" (only", 1)[0] if "(only" in name else name.rsplit(".", 1)[0]
            where[scope] = where.get(scope, 0) + 1
        listing = ", ".join(f"{k} ({v})" for k, v in where.items())
        return f"{wall}; significant changes: {listing or 'none'}"

    @property
    def cost_message(self) -> str:
        """The cost shift's message, or the explicit statement that no cost moved to other phases."""
        if self.cost_shift is not None:
            return self.cost_shift.message
        fell = [p.phase for p in self.phases if p.present == "both" and p.change("critical_us").verdict == "better"]
        if fell:
            return (f"no cost moved to other phases: {', '.join(fell)} fell on the critical path and no phase's "
                    "time on it rose beyond the noise")
        return "no cost moved to other phases: no phase's time on the critical path changed beyond the noise"

    def phase(self, name: str) -> PhaseChange:
        return _find(self.phases, "phase", name,
                     f"no phase {name!r}; phases: {', '.join(p.phase for p in self.phases)}")

    def kernel_change(self, figure: str) -> Change:
        return _find(self.kernel, "figure", figure, f"no kernel figure {figure!r}")

    def to_dict(self) -> dict:
        return {"schema": DIFF_SCHEMA, "headline": self.headline,
                "before": {"source": self.before_source,
                           "sources": list(self.before_sources or (self.before_source,)), "kernel": self.before_kernel},
                "after": {"source": self.after_source,
                          "sources": list(self.after_sources or (self.after_source,)), "kernel": self.after_kernel},
                "tick_ns": self.tick_ns, "kernel": [c.to_dict() for c in self.kernel],
                "phases": [p.to_dict() for p in self.phases],
                "cost_shift": self.cost_shift.to_dict() if self.cost_shift else None,
                "cost": {"moved": self.cost_shift is not None, "message": self.cost_message},
                "findings": {"resolved": list(self.findings_resolved), "new": list(self.findings_new)},
                "notes": list(self.notes)}

    def to_json(self, indent: int | None = 2) -> str:
        return jsonfmt.dumps(self.to_dict(), indent=indent, ensure_ascii=False, allow_nan=False)


def _find(items, attr: str, value, missing: str):
    """The first of ``items`` whose ``attr`` equals ``value``; KeyError(missing) when none does."""
    for x in items:
        if getattr(x, attr) == value:
            return x
    raise KeyError(missing)
