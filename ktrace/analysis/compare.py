"""Before/after: every phase's figures side by side, which changes are above the noise, and where cost moved.

    import ktrace
    d = ktrace.diff("before.bin", "after.bin")            # or compare.diff(Capture, Capture | Analysis)
    d.phase("compute").change("imbalance").relative      # -0.65
    d.to_json()                                           # schema ktrace.diff/1 (docs/ci.md)

The figures are named as ``ktrace check`` rules name them (``compute.imbalance``, ``kernel.wall_us``): the
catalog is ``KERNEL_FIGURES`` and ``PHASE_FIGURES`` (catalog.py), each derived from the Analysis JSON (docs/ci.md).

Significance, stated once: each figure carries a noise in its own unit; a change is significant only when
``|after - before| > max(noise before, noise after)``. The noise of
  - a time that is a mean over instances (wall_us, max_dur_us, excess_us, skews, last_lead_us): the larger
    of one timer tick and the standard deviation of the per-instance values (the spread across instances);
    its ``max_*`` twin has the same noise;
  - a ratio (imbalance, max_imbalance): the larger of tick / mean slice and the per-instance std;
  - a total over n instances (total_wall_us, critical_us): sqrt(n) x the per-instance noise;
  - a wait (wait_after_us, wait_before_us, max_wait_us): the larger of one tick and the widest p90 - p50 of
    the phase's boundaries (waits are per lane, not per instance);
  - critical_share: the critical_us noise / kernel wall; kernel.wall_us: one tick;
  - the control timings (profiled_us, control_us): the wider p90 - p10 over the timed repetitions, and
    overhead_ratio: the ratio of those spreads' sum to the control median;
  - counts, block indices and stability fractions: 0 (any change is a change).
Each side's noise uses its own capture's tick; a change's noise is the larger side's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from .catalog import (GROUP_FIGURES, KERNEL_FIGURES, PHASE_FIGURES, Capture, Figure, Timing, Value, as_capture,
                      group_values, kernel_values, phase_values, read_timing)

__all__ = ["Figure", "Value", "Timing", "Capture", "Change", "PhaseChange", "CostShift", "Diff",
           "KERNEL_FIGURES", "PHASE_FIGURES", "GROUP_FIGURES", "DIFF_SCHEMA", "read_timing",
           "kernel_values", "phase_values", "group_values", "diff"]


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
                "significant": self.significant, "verdict": self.verdict}


@dataclass(frozen=True)
class PhaseChange:
    """A phase's figures before and after. present: 'both', 'before' (gone after) or 'after' (new)."""

    phase: str
    present: str
    changes: tuple[Change, ...]

    def change(self, figure: str) -> Change:
        for c in self.changes:
            if c.figure == figure:
                return c
        raise KeyError(f"no figure {figure!r}; figures: {', '.join(c.figure for c in self.changes)}")

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

    def phase(self, name: str) -> PhaseChange:
        for p in self.phases:
            if p.phase == name:
                return p
        raise KeyError(f"no phase {name!r}; phases: {', '.join(p.phase for p in self.phases)}")

    def kernel_change(self, figure: str) -> Change:
        for c in self.kernel:
            if c.figure == figure:
                return c
        raise KeyError(f"no kernel figure {figure!r}")

    def to_dict(self) -> dict:
        return {"schema": DIFF_SCHEMA,
                "before": {"source": self.before_source, "kernel": self.before_kernel},
                "after": {"source": self.after_source, "kernel": self.after_kernel},
                "tick_ns": self.tick_ns, "kernel": [c.to_dict() for c in self.kernel],
                "phases": [p.to_dict() for p in self.phases],
                "cost_shift": self.cost_shift.to_dict() if self.cost_shift else None,
                "findings": {"resolved": list(self.findings_resolved), "new": list(self.findings_new)},
                "notes": list(self.notes)}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, allow_nan=False)


def _changes(catalog: dict[str, Figure], b: dict[str, Value], a: dict[str, Value]) -> tuple[Change, ...]:
    out = []
    for name, fig in catalog.items():
        if name not in b and name not in a:
            continue
        vb, va = b.get(name, Value(None)), a.get(name, Value(None))
        out.append(Change(name, fig.unit, _finite(vb.value), _finite(va.value), max(vb.noise, va.noise),
                          fig.lower_is_better))
    return tuple(out)


def _finite(v) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def diff(before, after) -> Diff:
    """Compares two captures (Capture, or Analysis without timings): every phase present in either, by name."""
    b, a = as_capture(before), as_capture(after)
    tb, ta = b.analysis.tick_ns, a.analysis.tick_ns
    kb, ka = dict(b.kernel_values), dict(a.kernel_values)
    notes = []
    if b.kernel_name != a.kernel_name:
        notes.append(f"different kernels: {b.kernel_name} before, {a.kernel_name} after")
    if (b.timing is None) != (a.timing is None):
        side = "before" if b.timing else "after"
        notes.append(f"control timings: only the {side} capture carries them (sidecar 'timing'); not compared")
    if not (b.timing and a.timing):
        for key in ("profiled_us", "control_us", "overhead_ratio"):
            kb.pop(key, None)
            ka.pop(key, None)
    kernel = _changes(KERNEL_FIGURES, kb, ka)
    pb, pa = b.phase_values, a.phase_values
    phases = []
    for name in list(pb) + [n for n in pa if n not in pb]:
        present = "both" if name in pb and name in pa else "before" if name in pb else "after"
        phases.append(PhaseChange(name, present, _changes(PHASE_FIGURES, pb.get(name, {}), pa.get(name, {}))))
    fb = {f"{f.kind}: {f.phase}" for f in b.analysis.findings if f.severity == "warning"}
    fa = {f"{f.kind}: {f.phase}" for f in a.analysis.findings if f.severity == "warning"}
    wall = next(c for c in kernel if c.figure == "wall_us")
    return Diff(str(b.analysis.source), str(a.analysis.source), b.kernel_name, a.kernel_name,
                float(max(tb, ta)), kernel, tuple(phases), _cost_shift(phases, wall),
                tuple(sorted(fb - fa)), tuple(sorted(fa - fb)), tuple(notes))


def _cost_shift(phases: list[PhaseChange], wall: Change) -> CostShift | None:
    fell, rose = {}, {}
    for p in phases:
        c = p.change("critical_us")
        d = c.delta if p.present == "both" else (c.after or 0.0) - (c.before or 0.0)
        if d is None or abs(d) <= c.noise:
            continue
        (fell if d < 0 else rose)[p.phase] = d
    if not fell or not rose:
        return None

    def listing(d: dict) -> str:
        return ", ".join(f"{k} {v:+,.2f} µs" for k, v in sorted(d.items(), key=lambda kv: -abs(kv[1])))

    gained = sum(rose.values())
    saved = -sum(fell.values())
    msg = (f"cost moved between phases on the critical path: {listing(fell)} fell; {listing(rose)} rose, "
           f"taking back {gained / saved:.0%} of the saving" if saved >= gained else
           f"cost moved between phases on the critical path: {listing(fell)} fell; {listing(rose)} rose by more "
           "than was saved")
    if wall.delta is not None:
        msg += f" (kernel wall {wall.delta:+,.2f} µs)"
    return CostShift(fell, rose, wall.delta, msg)
