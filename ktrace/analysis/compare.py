"""Before/after: every phase's figures side by side, which changes are above the noise, and where cost moved.

    from ktrace.analysis import analyze
    from ktrace.analysis.compare import Capture, diff, read_timing
    d = diff(Capture(analyze("before.bin"), read_timing("before.bin")), analyze("after.bin"))
    d.phase("compute").change("imbalance").relative      # -0.65
    d.to_json()                                           # schema ktrace.diff/1 (docs/ci.md)

The figures are named as ``ktrace check`` rules name them (``compute.imbalance``, ``kernel.wall_us``): the
catalog is ``KERNEL_FIGURES`` and ``PHASE_FIGURES``, each derived from the Analysis JSON (docs/ci.md).

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
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..sidecar import read_sidecar
from . import Analysis, is_trace_path

__all__ = ["Figure", "Value", "Timing", "Capture", "Change", "PhaseChange", "CostShift", "Diff",
           "KERNEL_FIGURES", "PHASE_FIGURES", "GROUP_FIGURES", "DIFF_SCHEMA", "read_timing", "load_capture",
           "kernel_values", "phase_values", "group_values", "diff"]

DIFF_SCHEMA = "ktrace.diff/1"


@dataclass(frozen=True)
class Figure:
    """One named figure: its unit, whether lower is better (None: neither), and what it is."""

    name: str
    unit: str
    lower_is_better: bool | None
    doc: str


def _catalog(*rows) -> dict[str, Figure]:
    return {r[0]: Figure(*r) for r in rows}


KERNEL_FIGURES = _catalog(
    ("wall_us", "µs", True, "kernel wall time: last phase end - first phase begin"),
    ("slices", "count", None, "phase slices"),
    ("lanes", "count", None, "lanes (block, warp group) with phase slices"),
    ("phases", "count", None, "phases (event names)"),
    ("anomalous_records", "count", True, "records the decoder could not pair (launch fact)"),
    ("tick_ns", "ns", None, "timer resolution the figures carry"),
    ("profiled_us", "µs", True, "instrumented build's median kernel time (sidecar timing.with_profiler)"),
    ("control_us", "µs", True, "unprofiled control's median kernel time (sidecar timing.without_profiler)"),
    ("overhead_ratio", "x", True, "profiled_us / control_us: what the probes cost"),
)
PHASE_FIGURES = _catalog(
    ("instances", "count", None, "instances (k) of the phase"),
    ("slices", "count", None, "slices over all lanes and instances"),
    ("wall_us", "µs", True, "mean instance wall: latest end - earliest begin"),
    ("total_wall_us", "µs", True, "sum of the instances' walls"),
    ("max_dur_us", "µs", True, "mean over instances of the slowest lane's slice"),
    ("mean_dur_us", "µs", True, "mean slice over all lanes and instances"),
    ("imbalance", "x", True, "max_dur_us / mean_dur_us: load imbalance"),
    ("max_imbalance", "x", True, "the worst instance's slowest / mean"),
    ("excess_us", "µs", True, "mean wall - slowest slice: what start skew or slow release costs"),
    ("max_excess_us", "µs", True, "the worst instance's excess"),
    ("start_skew_us", "µs", True, "mean spread of begins"),
    ("max_start_skew_us", "µs", True, "the worst instance's spread of begins"),
    ("end_skew_us", "µs", True, "mean spread of ends"),
    ("max_end_skew_us", "µs", True, "the worst instance's spread of ends"),
    ("last_lead_us", "µs", True, "mean lead of the last finisher over the next lane"),
    ("last_block", "block", None, "the block most often last to finish (ties: docs/analysis-schema.md)"),
    ("last_block_stability", "fraction", None, "share of instances in which last_block was (among) the last"),
    ("distinct_last_blocks", "count", None, "blocks that were last, a tie never counted as a move"),
    ("wait_after_us", "µs", True, "mean wait from a slice's end to the lane's next slice"),
    ("wait_before_us", "µs", True, "mean wait from the lane's previous slice to this phase's begin"),
    ("max_wait_us", "µs", True, "longest single wait after the phase"),
    ("critical_us", "µs", True, "time on the critical path: the phase's slices on it + the waits after them"),
    ("critical_share", "fraction", None, "critical_us / kernel wall"),
)
# phase@G for a phase that ran on several groups: only what the per-lane table gives exactly per group.
GROUP_FIGURES = _catalog(
    ("slices", "count", None, "slices of the group's lanes"),
    ("mean_dur_us", "µs", True, "mean slice of the group's lanes"),
    ("last_finisher_share", "fraction", None, "share of instances whose last finisher is a lane of the group"),
)


@dataclass(frozen=True)
class Value:
    """A figure's value (None when undefined) and its noise, both in the figure's unit."""

    value: float | None
    noise: float = 0.0


@dataclass(frozen=True)
class Timing:
    """Median kernel times (µs) of the instrumented build and its unprofiled control, with p10/p90 over the
    timed repetitions, from a capture's sidecar ``timing``; None where the sidecar lacks one."""

    profiled_median_us: float | None
    profiled_spread_us: float
    control_median_us: float | None
    control_spread_us: float
    source: str


def _timing_of(meta: dict, source: str) -> Timing | None:
    t = meta.get("timing")
    if not isinstance(t, dict):
        return None

    def build(key) -> tuple[float | None, float]:
        s = t.get(key) if isinstance(t.get(key), dict) else {}
        med, p10, p90 = (s.get(k) for k in ("median_us", "p10_us", "p90_us"))
        if not isinstance(med, (int, float)) or isinstance(med, bool) or not math.isfinite(med):
            return None, 0.0
        ok = all(isinstance(x, (int, float)) and math.isfinite(x) for x in (p10, p90))
        return float(med), float(p90 - p10) if ok else 0.0

    (pm, ps), (cm, cs) = build("with_profiler"), build("without_profiler")
    return None if pm is None and cm is None else Timing(pm, ps, cm, cs, source)


def read_timing(source, sidecar=None) -> Timing | None:
    """The control timings of a capture, from its sidecar: ``sidecar`` (a path; False for none), else the
    file beside ``source`` with its stem and ``.json`` (``run.bin`` / ``run.perfetto-trace`` -> ``run.json``).
    A sidecar beside a trace that is unreadable or not a sidecar is ignored: the trace need not have one."""
    if sidecar is False or not isinstance(source, (str, Path)):
        return None
    if sidecar not in (None, True):
        return _timing_of(read_sidecar(sidecar), str(sidecar))
    p = Path(source)
    name = p.name[:-3] if p.name.lower().endswith(".gz") else p.name
    if is_trace_path(p):
        name = name.rsplit(".", 1)[0]
    else:
        name = Path(name).stem
    side = p.with_name(name + ".json")
    if not side.is_file():
        return None
    try:
        return _timing_of(read_sidecar(side), str(side))
    except InputError:  # not JSON, not an object: an unrelated .json beside the trace is not an error
        return None


@dataclass(frozen=True)
class Capture:
    """One side of a comparison or check: an analysis and, when its sidecar has them, its control timings."""

    analysis: Analysis
    timing: Timing | None = None

    @property
    def kernel_name(self) -> str:
        return str(self.analysis.launch.get("kernel", "kernel"))


def load_capture(source, *, engine: str = "auto", **decode_options) -> Capture:
    """Analyzes a trace or buffer (``analyze``; decode_options apply to a buffer) and reads its timings."""
    from . import analyze

    opts = {} if is_trace_path(source) else decode_options
    return Capture(analyze(source, engine=engine, **opts), read_timing(source, opts.get("sidecar")))


def _capture(x) -> Capture:
    return x if isinstance(x, Capture) else Capture(x)


def _us(ns) -> float | None:
    return None if ns is None or (isinstance(ns, float) and math.isnan(ns)) else float(ns) / 1e3


def _std(values) -> float:
    v = np.asarray(values, np.float64)
    v = v[~np.isnan(v)]
    return float(v.std()) if len(v) > 1 else 0.0


def kernel_values(cap) -> dict[str, Value]:
    """``kernel.*`` figures of a Capture (or Analysis): name -> Value. Timings only when the sidecar has them."""
    cap = _capture(cap)
    a, k = cap.analysis, cap.analysis.kernel
    tick_us = a.tick_ns / 1e3
    out = {"wall_us": Value(_us(k.wall_ns), tick_us), "slices": Value(k.slices), "lanes": Value(k.lanes),
           "phases": Value(k.phases), "tick_ns": Value(a.tick_ns),
           "anomalous_records": Value(a.launch.get("anomalous_records"))}
    t = cap.timing
    if t is not None:
        out["profiled_us"] = Value(t.profiled_median_us, t.profiled_spread_us)
        out["control_us"] = Value(t.control_median_us, t.control_spread_us)
        if t.profiled_median_us and t.control_median_us:
            out["overhead_ratio"] = Value(t.profiled_median_us / t.control_median_us,
                                          (t.profiled_spread_us + t.control_spread_us) / t.control_median_us)
    return out


def phase_values(a: Analysis) -> dict[str, dict[str, Value]]:
    """``<phase>.*`` figures: phase -> figure name -> Value, in phase order (catalog: PHASE_FIGURES)."""
    tick_ns = a.tick_ns
    wall_ns = a.kernel.wall_ns or 0
    inst, waits = a.instances, a.waits.rows()
    shares = {r["phase"]: r for r in a.critical_shares.rows()}
    cp = a.critical_path
    out = {}
    for p in a.phases.rows():
        name, n = p["phase"], p["instances"]
        m = inst.phase == name

        def noise_ns(column: str) -> float:
            return max(tick_ns, _std(getattr(inst, column)[m]))

        def mean_t(value_ns, column: str) -> Value:
            return Value(_us(value_ns), noise_ns(column) / 1e3)

        after = [w for w in waits if w["phase"] == name]
        before = [w for w in waits if w["next_phase"] == name]
        wait_noise = max([tick_ns] + [w["p90_ns"] - w["p50_ns"] for w in after + before]) / 1e3
        imb_noise = max(tick_ns / p["mean_dur_ns"] if p["mean_dur_ns"] else 0.0, _std(inst.imbalance[m]))
        cm = cp.phase == name
        step_noise = max(tick_ns, _std(cp.dur_ns[cm].astype(np.float64)))
        crit_noise = math.sqrt(max(int(cm.sum()), 1)) * step_noise
        share = shares.get(name)
        v = {
            "instances": Value(n), "slices": Value(p["slices"]),
            "wall_us": mean_t(p["sum_wall_ns"] / n, "wall_ns"),
            "total_wall_us": Value(_us(p["sum_wall_ns"]), math.sqrt(n) * noise_ns("wall_ns") / 1e3),
            "max_dur_us": mean_t(p["mean_max_dur_ns"], "max_dur_ns"),
            "mean_dur_us": mean_t(p["mean_dur_ns"], "mean_dur_ns"),
            "imbalance": Value(p["imbalance"], imb_noise), "max_imbalance": Value(p["max_imbalance"], imb_noise),
            "excess_us": mean_t(p["mean_excess_ns"], "excess_ns"),
            "max_excess_us": mean_t(p["max_excess_ns"], "excess_ns"),
            "start_skew_us": mean_t(p["mean_start_skew_ns"], "start_skew_ns"),
            "max_start_skew_us": mean_t(p["max_start_skew_ns"], "start_skew_ns"),
            "end_skew_us": mean_t(p["mean_end_skew_ns"], "end_skew_ns"),
            "max_end_skew_us": mean_t(p["max_end_skew_ns"], "end_skew_ns"),
            "last_lead_us": mean_t(p["mean_last_lead_ns"], "last_lead_ns"),
            "last_block": Value(p["top_last_block"]),
            "last_block_stability": Value(p["top_last_count"] / n if n else None),
            "distinct_last_blocks": Value(p["distinct_last_blocks"]),
            "wait_after_us": Value(_mean_wait_us(after), wait_noise),
            "wait_before_us": Value(_mean_wait_us(before), wait_noise),
            "max_wait_us": Value(_us(max((w["max_ns"] for w in after), default=None)), wait_noise),
            "critical_us": Value(_us(share["total_ns"]) if share else 0.0, crit_noise / 1e3),
            "critical_share": Value(share["share"] if share else 0.0, crit_noise / wall_ns if wall_ns else 0.0),
        }
        out[name] = v
    return out


def _mean_wait_us(rows) -> float | None:
    count = sum(w["count"] for w in rows)
    return _us(sum(w["sum_ns"] for w in rows) / count) if count else None


def group_values(a: Analysis, phase: str, group: int) -> dict[str, Value]:
    """``phase@group`` figures for a phase that ran on several groups (catalog GROUP_FIGURES), from the
    per-lane table; empty when the phase has no lanes of that group."""
    lanes = a.lanes
    m = (lanes.phase == phase) & (lanes.group == group)
    if not m.any():
        return {}
    n = int(lanes.instances[m].sum())
    instances = int(a.phases.instances[a.phases.phase == phase][0])
    return {"slices": Value(n), "mean_dur_us": Value(_us(lanes.sum_dur_ns[m].sum() / n), a.tick_ns / 1e3),
            "last_finisher_share": Value(int(lanes.last_count[m].sum()) / instances)}


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
    b, a = _capture(before), _capture(after)
    tb, ta = b.analysis.tick_ns, a.analysis.tick_ns
    kb, ka = kernel_values(b), kernel_values(a)
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
    pb, pa = phase_values(b.analysis), phase_values(a.analysis)
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
