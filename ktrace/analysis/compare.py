"""Before/after: every phase's figures side by side, which changes are above the noise, and where cost moved.

    import ktrace
    d = ktrace.diff("before.bin", "after.bin")            # or compare.diff(Capture, Capture | Analysis)
    d.phase("compute").change("imbalance").relative      # -0.65
    d.to_json()                                           # schema ktrace.diff/1 (docs/ci.md)

The figures are named as ``ktrace check`` rules name them (``compute.imbalance``, ``kernel.wall_us``): the
catalog is ``KERNEL_FIGURES`` and ``PHASE_FIGURES`` (catalog.py), each derived from the Analysis JSON (docs/ci.md).

Significance (noise.py; docs/ci.md): a timing change counts only when it exceeds 2 timer ticks, the
kernel's launch-to-launch jitter (the sidecar's timed repetitions, p10-p90), 1% of the kernel wall in the
kernel time it stands for, and the spread across instances (a rank test with 5 or more per side) or across
runs (several captures per side: ``diff([a1, a2], [b1, b2])``). A figure and its total share a verdict; a
new last finisher counts only when a side has a clear straggler; a finding is new or resolved only when its
impact moved by 1% of the wall.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..errors import InputError
from .catalog import (GROUP_FIGURES, KERNEL_FIGURES, PHASE_FIGURES, Capture, Figure, Timing, Value, as_capture,
                      group_values, kernel_values, phase_values, read_timing)
from .diff_result import DIFF_SCHEMA, Change, CostShift, Diff, PhaseChange
from .noise import MIN_IMPACT, MIN_TICKS, judge

__all__ = ["Figure", "Value", "Timing", "Capture", "Change", "PhaseChange", "CostShift", "Diff",
           "KERNEL_FIGURES", "PHASE_FIGURES", "GROUP_FIGURES", "DIFF_SCHEMA", "read_timing",
           "kernel_values", "phase_values", "group_values", "diff"]


# How a change of each phase figure converts to kernel time, for the impact floor: x instances (a mean per
# instance), x mean slice x instances (a ratio), as it is (a total or a single wait). Figures not listed are
# counts, blocks or tied to another figure.
_PER_INSTANCE = {"wall_us", "max_dur_us", "mean_dur_us", "excess_us", "max_excess_us", "start_skew_us",
                 "max_start_skew_us", "end_skew_us", "max_end_skew_us", "last_lead_us", "wait_after_us",
                 "wait_before_us"}
_RATIO = {"imbalance", "max_imbalance"}
_TOTAL = {"total_wall_us", "critical_us", "max_wait_us"}
_NO_RANK = {"max_imbalance", "max_excess_us", "max_start_skew_us", "max_end_skew_us", "total_wall_us"}
_TIED = {"total_wall_us": "wall_us", "critical_share": "critical_us"}
_LAST = ("last_block", "last_block_stability", "distinct_last_blocks")
_TIMING = ("profiled_us", "control_us", "overhead_ratio")
# A side's last finisher is a clear straggler when it is the same block in this share of the instances.
_STABLE = 0.75


@dataclass(frozen=True)
class _Side:
    """One side of a diff: one capture or several runs of it."""

    captures: tuple[Capture, ...]

    @property
    def first(self) -> Capture:
        return self.captures[0]

    @property
    def runs(self) -> bool:
        return len(self.captures) > 1

    @property
    def wall_us(self) -> float:
        return max((c.analysis.kernel.wall_ns or 0) / 1e3 for c in self.captures)

    @property
    def tick_ns(self) -> float:
        return max(float(c.analysis.tick_ns) for c in self.captures)

    @property
    def jitter(self) -> float:
        """Relative launch-to-launch spread of the profiled build: p10-p90 / median of the timed reps."""
        return max([c.timing.profiled_spread_us / c.timing.profiled_median_us for c in self.captures
                    if c.timing is not None and c.timing.profiled_median_us] or [0.0])

    def kernel(self) -> dict[str, Value]:
        return _pool([dict(c.kernel_values) for c in self.captures])

    def phases(self) -> dict[str, dict[str, Value]]:
        names = list(dict.fromkeys(n for c in self.captures for n in c.phase_values))
        return {n: _pool([c.phase_values[n] for c in self.captures if n in c.phase_values]) for n in names}


def _pool(runs: list[dict[str, Value]]) -> dict[str, Value]:
    """One run's values as they are; several runs': the mean, their widest own noise, one sample per run."""
    if len(runs) == 1:
        return runs[0]
    out = {}
    for name in dict.fromkeys(k for r in runs for k in r):
        vals = [_finite(r[name].value) for r in runs if name in r]
        defined = [v for v in vals if v is not None]
        if not defined:
            out[name] = Value(None)
            continue
        if name == "last_block":  # a block index has no mean: the most common one
            value = max(set(defined), key=defined.count)
        else:
            value = sum(defined) / len(defined)
        out[name] = Value(value, max(r[name].noise for r in runs if name in r), tuple(defined))
    return out


def _judged(name: str, fig: Figure, vb: Value, va: Value, ctx: dict) -> Change:
    b, a = _finite(vb.value), _finite(va.value)
    base = Change(name, fig.unit, b, a, max(vb.noise, va.noise), fig.lower_is_better)
    if b is None or a is None:
        return base
    if fig.unit in ("count", "ns", "block"):
        return replace(base, noise=0.0, decided=b != a, test="exact")
    floors, scale = [], 1.0
    tick_us, impact_us = ctx["tick_us"], MIN_IMPACT * ctx["wall_us"]
    if fig.unit == "µs":
        scale = ctx["n"] if name in _PER_INSTANCE else 1.0
        floors = [MIN_TICKS * tick_us, ctx["jitter"] * max(abs(b), abs(a)), impact_us / scale]
        if ctx.get("timing"):  # the kernel's own medians: their floor is 1% of themselves
            floors = [MIN_IMPACT * max(abs(b), abs(a))]
    elif fig.unit == "x":
        if name == "overhead_ratio":
            floors = [MIN_IMPACT * max(abs(b), abs(a))]
        else:
            mean = ctx["mean_dur_us"]
            floors = [MIN_TICKS * tick_us / mean if mean else 0.0,
                      impact_us / (mean * ctx["n"]) if mean else math.inf]
    j = judge(b, a, floors=floors, noise=[vb.noise, va.noise], samples=(vb.samples, va.samples),
              runs=ctx["runs"], rank=name not in _NO_RANK)
    return replace(base, noise=j.noise, decided=j.significant, test=j.test, p_value=j.p_value)


def _clear(v: dict[str, Value], ctx: dict) -> bool:
    """A clear straggler: the same block last in most instances, ahead of the next lane by 2 ticks and by
    enough, over the instances, to be 1% of the wall; else the last finisher is a near-tie."""
    stab, lead = _finite(v["last_block_stability"].value), _finite(v["last_lead_us"].value)
    if stab is None or lead is None or (v["last_block_stability"].samples and v["last_block"].samples and
                                        len(set(v["last_block"].samples)) > 1):
        return False
    return stab >= _STABLE and lead >= MIN_TICKS * ctx["tick_us"] and lead * ctx["n"] >= MIN_IMPACT * ctx["wall_us"]


def _phase_changes(pb: dict[str, Value], pa: dict[str, Value], ctx: dict) -> tuple[Change, ...]:
    if not pb or not pa:
        return _raw(PHASE_FIGURES, pb, pa)
    nb, na = _finite(pb["instances"].value) or 0, _finite(pa["instances"].value) or 0
    ctx = {**ctx, "n": max(nb, na, 1),
           "mean_dur_us": max(_finite(pb["mean_dur_us"].value) or 0, _finite(pa["mean_dur_us"].value) or 0)}
    out = {name: _judged(name, fig, pb.get(name, Value(None)), pa.get(name, Value(None)), ctx)
           for name, fig in PHASE_FIGURES.items() if name in pb or name in pa}
    for name, to in _TIED.items():
        if name in out and to in out and not (name == "total_wall_us" and nb != na):
            t = out[to]
            out[name] = replace(out[name], decided=t.significant if None not in (out[name].before, out[name].after)
                                else None, test="tied", p_value=t.p_value)
    moved = any(out[f].before != out[f].after for f in _LAST if f in out)
    clear = _clear(pb, ctx) or _clear(pa, ctx)
    for f in _LAST:
        if f in out:
            out[f] = replace(out[f], noise=0.0, decided=moved and clear, test="tied")
    return tuple(out.values())


def _raw(catalog: dict[str, Figure], b: dict[str, Value], a: dict[str, Value]) -> tuple[Change, ...]:
    return tuple(Change(name, fig.unit, _finite(b.get(name, Value(None)).value),
                        _finite(a.get(name, Value(None)).value), 0.0, fig.lower_is_better)
                 for name, fig in catalog.items() if name in b or name in a)


def _finite(v) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def _side(x) -> _Side:
    xs = list(x) if isinstance(x, (list, tuple)) else [x]
    if not xs:
        raise InputError("diff: a side with no capture")
    return _Side(tuple(as_capture(c) for c in xs))


def diff(before, after) -> Diff:
    """Compares two captures (Capture, or Analysis without timings), or two lists of runs of each (the
    run-to-run spread is then the noise): every phase present in either, by name."""
    sb, sa = _side(before), _side(after)
    b, a = sb.first, sa.first
    kb, ka = sb.kernel(), sa.kernel()
    notes = []
    kernels = {c.kernel_name for c in sb.captures + sa.captures}
    if len({c.kernel_name for c in sb.captures}) > 1 or len({c.kernel_name for c in sa.captures}) > 1:
        notes.append(f"runs of different kernels pooled on one side: {', '.join(sorted(kernels))}")
    if b.kernel_name != a.kernel_name:
        notes.append(f"different kernels: {b.kernel_name} before, {a.kernel_name} after")
    timed_b = all(c.timing for c in sb.captures)
    timed_a = all(c.timing for c in sa.captures)
    if timed_b != timed_a:
        side = "before" if timed_b else "after"
        notes.append(f"control timings: only the {side} capture carries them (sidecar 'timing'); not compared")
    if not (timed_b and timed_a):
        for key in _TIMING:
            kb.pop(key, None)
            ka.pop(key, None)
    ctx = {"tick_us": max(sb.tick_ns, sa.tick_ns) / 1e3, "wall_us": max(sb.wall_us, sa.wall_us),
           "jitter": max(sb.jitter, sa.jitter), "runs": sb.runs or sa.runs, "n": 1}
    kernel = tuple(_judged(name, fig, kb.get(name, Value(None)), ka.get(name, Value(None)),
                           {**ctx, "timing": name in _TIMING})
                   for name, fig in KERNEL_FIGURES.items() if name in kb or name in ka)
    pb, pa = sb.phases(), sa.phases()
    phases = []
    for name in list(pb) + [n for n in pa if n not in pb]:
        present = "both" if name in pb and name in pa else "before" if name in pb else "after"
        phases.append(PhaseChange(name, present, _phase_changes(pb.get(name, {}), pa.get(name, {}), ctx)))
    resolved, new = _findings(sb, sa, ctx, phases)
    wall = next(c for c in kernel if c.figure == "wall_us")
    return Diff(str(b.analysis.source), str(a.analysis.source), b.kernel_name, a.kernel_name,
                float(max(sb.tick_ns, sa.tick_ns)), kernel, tuple(phases), _cost_shift(phases, wall),
                resolved, new, tuple(notes), tuple(str(c.analysis.source) for c in sb.captures),
                tuple(str(c.analysis.source) for c in sa.captures))


# The figure each finding kind rests on: a finding is new (resolved) only when it got significantly worse
# (better), not when a share crossed a threshold because the kernel got shorter.
_EVIDENCE = {"load_imbalance": "imbalance", "stable_straggler": "last_lead_us", "late_start": "start_skew_us",
             "start_skew": "excess_us", "large_wait": "wait_after_us", "straggler_change": "end_skew_us",
             "rotating_imbalance": "end_skew_us", "moving_last_finisher": "end_skew_us"}


def _findings(sb: _Side, sa: _Side, ctx: dict, phases) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Warnings resolved and new: a warning on one side only whose impact (kernel time at stake, mean over
    the runs) moved by at least 1% of the wall and 2 ticks, and whose evidence figure (``_EVIDENCE``) moved
    beyond the noise the same way."""
    floor_ns = max(MIN_IMPACT * ctx["wall_us"] * 1e3, MIN_TICKS * ctx["tick_us"] * 1e3)

    def side(s: _Side) -> tuple[set, dict]:
        warn, impact = set(), {}
        for c in s.captures:
            for f in c.analysis.findings:
                key = f"{f.kind}: {f.phase}"
                impact[key] = impact.get(key, 0.0) + (f.impact_ns or 0.0) / len(s.captures)
                if f.severity == "warning":
                    warn.add(key)
        return warn, impact

    def evidence(key: str, verdict: str) -> bool:
        kind, phase = key.split(": ", 1)
        figure = _EVIDENCE.get(kind)
        p = next((p for p in phases if p.phase == phase and p.present == "both"), None)
        return figure is None or p is None or p.change(figure).verdict == verdict

    (wb, ib), (wa, ia) = side(sb), side(sa)
    resolved = {k for k in wb - wa if ib.get(k, 0.0) - ia.get(k, 0.0) >= floor_ns and evidence(k, "better")}
    new = {k for k in wa - wb if ia.get(k, 0.0) - ib.get(k, 0.0) >= floor_ns and evidence(k, "worse")}
    return tuple(sorted(resolved)), tuple(sorted(new))


def _cost_shift(phases: list[PhaseChange], wall: Change) -> CostShift | None:
    fell, rose = {}, {}
    for p in phases:
        c = p.change("critical_us")
        if p.present == "both":
            d = c.delta if c.significant else None
        else:
            d = (c.after or 0.0) - (c.before or 0.0)
            d = d if abs(d) >= MIN_IMPACT * max(wall.before or 0, wall.after or 0) else None
        if not d:
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
