"""Before/after: every phase's figures side by side, which changes are above the noise, and where cost moved.

    import ktrace
    d = ktrace.diff("before.bin", "after.bin")            # or compare.diff(Capture, Capture | Analysis)
    d.phase("compute").change("imbalance").relative      # -0.65
    d.to_json()                                           # schema ktrace.diff/1 (docs/ci.md)

The figures are named as ``ktrace check`` rules name them (``compute.imbalance``, ``kernel.wall_us``): the
catalog is ``KERNEL_FIGURES`` and ``PHASE_FIGURES`` (catalog.py), each derived from the Analysis JSON (docs/ci.md).

Significance (noise.py; docs/ci.md): a timing change is judged only with an estimate of how much a second
run moves it: several runs per side (``diff([a1, a2], [b1, b2])``: a t-test across runs), the timed
repetitions of the sidecar for the kernel's own medians (a t-test on the reps and a between-session floor),
or a noise the user assumes (``assume_noise_pct``); else it is 'not judged'. A judged change must also
exceed 2 timer ticks and 1% of the kernel wall in the kernel time it stands for. The headline's verdict is
the unprofiled control's when both sides carry it; the profiled wall and the probes' cost are beside it. A
figure and its total share a verdict; the last finisher is information, never a change; a finding is new
or resolved only when its impact moved by 1% of the wall.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ...core.errors import InputError
from .catalog import (GROUP_FIGURES, KERNEL_FIGURES, PHASE_FIGURES, Capture, Figure, Timing, Value, as_capture,
                      group_values, kernel_values, phase_values, read_timing)
from .diff_result import DIFF_SCHEMA, Change, CostShift, Diff, PhaseChange
from ..findings import kinds
from ..model.input_problems import input_problems
from .noise import (MIN_IMPACT, MIN_TICKS, SD_PER_P10_P90, SESSION_NOISE, assumed, not_judged, reps_test, runs_needed,
                    runs_test)
from .noise_model import modelled, noise_model, observations
from ...core.records import frozen

__all__ = ["Figure", "Value", "Timing", "Capture", "Change", "PhaseChange", "CostShift", "Diff",
           "KERNEL_FIGURES", "PHASE_FIGURES", "GROUP_FIGURES", "DIFF_SCHEMA", "read_timing",
           "kernel_values", "phase_values", "group_values", "diff"]


# How a change of each phase figure converts to kernel time, for the impact floor: x instances (a mean per
# instance), x mean slice x instances (a ratio), as it is (a total or a single wait). Figures not listed are
# counts, blocks or tied to another figure.
_PER_INSTANCE = {"wall_us", "max_dur_us", "mean_dur_us", "excess_us", "max_excess_us", "start_skew_us",
                 "max_start_skew_us", "end_skew_us", "max_end_skew_us", "last_lead_us", "wait_after_us",
                 "wait_before_us"}
_TIED = {"total_wall_us": "wall_us", "critical_share": "critical_us"}
_LAST = ("last_block", "last_block_stability", "distinct_last_blocks")
_TIMING = ("profiled_us", "control_us", "overhead_ratio")
_MEDIANS = ("profiled_us", "control_us")


@frozen
class _Side:
    """One side of a diff: one capture or several runs of it."""

    captures: tuple[Capture, ...]

    @property
    def first(self) -> Capture:
        return self.captures[0]

    @property
    def n(self) -> int:
        return len(self.captures)

    @property
    def wall_us(self) -> float:
        return max((c.analysis.kernel.wall_ns or 0) / 1e3 for c in self.captures)

    @property
    def tick_ns(self) -> float:
        return max(float(c.analysis.tick_ns) for c in self.captures)

    @property
    def rep_sd(self) -> float | None:
        """Relative launch-to-launch standard deviation of the profiled build (its timed reps), if known."""
        sds = [c.timing.profiled_spread_us * SD_PER_P10_P90 / c.timing.profiled_median_us for c in self.captures
               if c.timing is not None and c.timing.profiled_median_us and c.timing.profiled_reps]
        return max(sds) if sds else None

    def kernel(self) -> dict[str, Value]:
        return _pool([dict(c.kernel_values) for c in self.captures])

    def phases(self) -> dict[str, dict[str, Value]]:
        names = list(dict.fromkeys(n for c in self.captures for n in c.phase_values))
        return {n: _pool([c.phase_values[n] for c in self.captures if n in c.phase_values]) for n in names}


def _pool(runs: list[dict[str, Value]]) -> dict[str, Value]:
    """The runs' mean of each figure (a block index: the most common), one sample per run; one run keeps
    its timed repetitions (sd, reps) for the kernel's medians."""
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
        samples = tuple(defined)
        one = runs[0][name] if len(runs) == 1 else Value(None)
        if name in _TIMING and len({(r[name].value, r[name].sd, r[name].reps) for r in runs if name in r}) == 1:
            # runs that carry one timing session (record_runs times once, then saves N buffers): one sample
            samples, one = samples[:1], runs[0][name]
        out[name] = Value(value, max(r[name].noise for r in runs if name in r), samples, one.sd, one.reps)
    return out


def _floors(name: str, fig: Figure, b: float, a: float, ctx: dict) -> list[float]:
    """The timer and impact floors a change must clear, in the figure's unit (the kernel's medians and their
    ratio: 1% of themselves)."""
    tick_us, impact_us = ctx["tick_us"], MIN_IMPACT * ctx["wall_us"]
    if name in _TIMING:  # the kernel's own medians and their ratio: 1% of themselves
        return [MIN_IMPACT * max(abs(b), abs(a))]
    if fig.unit == "µs":
        scale = ctx["n"] if name in _PER_INSTANCE else 1.0
        return [MIN_TICKS * tick_us, impact_us / scale]
    if fig.unit == "x":
        mean = ctx["mean_dur_us"]
        return [MIN_TICKS * tick_us / mean if mean else 0.0, impact_us / (mean * ctx["n"]) if mean else math.inf]
    return []


def _judged(name: str, fig: Figure, vb: Value, va: Value, ctx: dict, kernel: bool = False) -> Change:
    b, a = _finite(vb.value), _finite(va.value)
    base = Change(name, fig.unit, b, a, max(vb.noise, va.noise), fig.lower_is_better)
    if b is None or a is None:
        return base
    if fig.unit in ("count", "ns", "block"):
        return replace(base, noise=0.0, decided=b != a, test="exact")
    floors = _floors(name, fig, b, a, ctx)
    nb, na = len(vb.samples) or 1, len(va.samples) or 1
    if ctx["runs"] and (min(nb, na) >= 2 or max(nb, na) >= 3):
        j = runs_test(vb.samples or (b,), va.samples or (a,), floors)
    elif ctx["assume"] is not None:
        j = assumed(b, a, ctx["assume"], floors)
    elif name in _MEDIANS and vb.reps and va.reps and nb == na == 1:  # one timing session per side
        j = reps_test(b, vb.sd, vb.reps, a, va.sd, va.reps, SESSION_NOISE)
    elif ctx.get("model") is not None:  # one run per side (or too few): the largest same-input change seen
        j = modelled(name, b, a, floors, ctx, kernel=kernel, model=ctx["model"])
    else:
        j = not_judged(a - b, floors)
    return replace(base, noise=j.noise, decided=j.significant, test=j.test, p_value=j.p_value,
                   reps=(vb.reps, va.reps) if j.test == "reps" else None, basis=j.basis)


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
            defined = None not in (out[name].before, out[name].after)
            # a total or a share gets its figure's verdict, and its figure's better direction with it
            out[name] = replace(out[name], decided=t.decided if defined else None, lower_is_better=t.lower_is_better,
                                test=t.test if t.test in ("none", "floor") else "tied", p_value=t.p_value)
    for f in _LAST:  # which block is last is information: reported, never a significant change
        if f in out:
            out[f] = replace(out[f], noise=0.0, decided=False, test="info", p_value=None)
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


def _notes(sb: _Side, sa: _Side, assume, runs: bool) -> list[str]:
    notes = []
    kernels = {c.kernel_name for c in sb.captures + sa.captures}
    if len({c.kernel_name for c in sb.captures}) > 1 or len({c.kernel_name for c in sa.captures}) > 1:
        notes.append(f"runs of different kernels pooled on one side: {', '.join(sorted(kernels))}")
    if sb.first.kernel_name != sa.first.kernel_name:
        notes.append(f"different kernels: {sb.first.kernel_name} before, {sa.first.kernel_name} after")
    timed_b = all(c.timing for c in sb.captures)
    timed_a = all(c.timing for c in sa.captures)
    if timed_b != timed_a:
        side = "before" if timed_b else "after"
        notes.append(f"control timings: only the {side} capture carries them (sidecar 'timing'); not compared")
    elif timed_b and sb.n == sa.n == 1 and assume is None and not (sb.first.timing.control_reps and
                                                                 sa.first.timing.control_reps):
        notes.append("control timings without their repetitions (sidecar timing.without_profiler.reps, p10_us, "
                     "p90_us): the control's change is judged against the largest change between sessions of the "
                     "same inputs")
    if assume is not None and runs:
        notes.append("--assume-noise not used: the runs give the run-to-run noise")
    elif assume is not None:
        notes.append(f"assumed run-to-run noise {assume:.2%} (--assume-noise): not measured")
    for where, s in (("before", sb), ("after", sa)):
        for c in s.captures:
            probs = input_problems(c.analysis.launch)
            if probs:
                listing = ", ".join(p.text for p in probs)
                notes.append(f"{where}: {c.analysis.source}: {listing} (`ktrace inspect` says which)")
    return notes


def diff(before, after, *, assume_noise_pct: float | None = None) -> Diff:
    """Compares two captures (Capture, or Analysis without timings), or two lists of runs of each (a
    t-test across the runs is then the noise). assume_noise_pct: the run-to-run noise (% of each figure)
    to judge by where there is no estimate of it. Every phase present in either, by name."""
    sb, sa = _side(before), _side(after)
    b, a = sb.first, sa.first
    if assume_noise_pct is not None and not (isinstance(assume_noise_pct, (int, float)) and
                                             0 < assume_noise_pct < 100):
        raise InputError(f"assumed noise {assume_noise_pct!r}: give a percentage between 0 and 100 (e.g. 1.5)")
    assume = None if assume_noise_pct is None else assume_noise_pct / 100
    kb, ka = sb.kernel(), sa.kernel()
    # a t-test across runs needs a variance with 2 degrees of freedom or more: 2 runs on each side, or 3 on
    # one (whose variance then stands for both)
    runs = min(sb.n, sa.n) >= 2 or max(sb.n, sa.n) >= 3
    notes = _notes(sb, sa, assume, runs)
    if not (all(c.timing for c in sb.captures) and all(c.timing for c in sa.captures)):
        for key in _TIMING:
            kb.pop(key, None)
            ka.pop(key, None)
    # one timing session on both sides (record_runs times once, then saves N buffers): the same measurement
    # of the control cannot tell the sides apart; the verdict is then the profiled timeline's
    sessions = {replace(c.timing, source="") for c in sb.captures + sa.captures if c.timing is not None}
    same_timing = "control_us" in kb and len(sessions) == 1
    if same_timing:
        notes.append("both sides carry one timing session (the same measurement of the control): it cannot "
                     "tell them apart; the verdict is the profiled wall's")
    if not runs and sb.n + sa.n > 2:
        notes.append(f"{sb.n} run(s) before, {sa.n} after: too few for a test across runs (2 on each side, or 3 "
                     "on one); judged by the noise model, widened by the spread of these runs")
    model = None
    if not runs and assume is None:  # one run per side, or too few: the model, widened by the user's own runs
        mine = [s for s in (sb, sa) if s.n > 1 and len({c.kernel_name for c in s.captures}) == 1]
        model = noise_model().refine([o for s in mine for o in observations(s.captures, "yours")],
                                     sum(s.n for s in mine))
    ctx = {"tick_us": max(sb.tick_ns, sa.tick_ns) / 1e3, "wall_us": max(sb.wall_us, sa.wall_us),
           "runs": runs, "assume": None if runs else assume, "n": 1, "model": model,
           "why": "one run per side" if sb.n == sa.n == 1 else "too few runs"}
    kernel = tuple(_judged(name, fig, kb.get(name, Value(None)), ka.get(name, Value(None)), ctx, kernel=True)
                   for name, fig in KERNEL_FIGURES.items() if name in kb or name in ka)
    pb, pa = sb.phases(), sa.phases()
    phases = []
    for name in list(pb) + [n for n in pa if n not in pb]:
        present = "both" if name in pb and name in pa else "before" if name in pb else "after"
        phases.append(PhaseChange(name, present, _phase_changes(pb.get(name, {}), pa.get(name, {}), ctx)))
    resolved, new = _findings(sb, sa, ctx, phases)
    # else a warning gone or new is not a verdict either
    judged = ctx["runs"] or ctx["assume"] is not None or ctx["model"] is not None
    gone, appeared = ((), ()) if judged else (resolved, new)
    resolved, new = (resolved, new) if judged else ((), ())
    wall = next(c for c in kernel if c.figure == "wall_us")
    shift, cost_line = _cost(phases, wall, ctx)
    rep_sd = [s for s in (sb.rep_sd, sa.rep_sd) if s is not None]
    needed = None
    if wall.test == "none" and wall.delta:
        needed = runs_needed(wall.delta, max(rep_sd) * max(wall.before, wall.after) if rep_sd else None)
    return Diff(str(b.analysis.source), str(a.analysis.source), b.kernel_name, a.kernel_name,
                float(max(sb.tick_ns, sa.tick_ns)), kernel, tuple(phases), shift,
                resolved, new, tuple(notes), tuple(str(c.analysis.source) for c in sb.captures),
                tuple(str(c.analysis.source) for c in sa.captures), ctx["assume"], needed, cost_line, gone, appeared,
                same_timing, model=model.describe() if model is not None else "")


def _evidence_figure(kind: str) -> str | None:
    """The figure a finding kind rests on (its module's ``diff``): a finding is new (resolved) only when it got
    significantly worse (better), not when a share crossed a threshold because the kernel got shorter."""
    k = kinds.get(kind)
    return k.diff if k else None


def _findings(sb: _Side, sa: _Side, ctx: dict, phases) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Warnings resolved and new: a warning on one side only whose impact (kernel time at stake, mean over
    the runs) moved by at least 1% of the wall and 2 ticks, and whose evidence figure (its kind's ``diff``) moved
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
        figure = _evidence_figure(kind)
        p = next((p for p in phases if p.phase == phase and p.present == "both"), None)
        if figure is None or p is None:
            return True
        c = p.change(figure)
        # Not judged (one run per side), or a figure whose noise is as large as the figure itself (the model saw
        # it move by all of it between runs of the same inputs: no change of it is ever beyond the noise): the
        # direction, beyond the floors, is what there is; the impact's move (above) is the test.
        blind = c.noise is not None and c.before is not None and c.after is not None and \
            c.noise >= max(abs(c.before), abs(c.after)) > 0
        if c.test == "none" or blind:
            return bool(c.delta) and ((c.delta < 0) == bool(c.lower_is_better)) == (verdict == "better")
        return c.verdict == verdict

    (wb, ib), (wa, ia) = side(sb), side(sa)
    resolved = {k for k in wb - wa if ib.get(k, 0.0) - ia.get(k, 0.0) >= floor_ns and evidence(k, "better")}
    new = {k for k in wa - wb if ia.get(k, 0.0) - ib.get(k, 0.0) >= floor_ns and evidence(k, "worse")}
    return tuple(sorted(resolved)), tuple(sorted(new))


def _cost(phases: list[PhaseChange], wall: Change, ctx: dict) -> tuple[CostShift | None, str]:
    """Each phase's time on the critical path that fell and rose beyond the noise: a CostShift when some fell
    and others rose, and the cost line. Not judged (no run-to-run noise estimate), the line lists the moves
    that clear the floors (2 ticks, 1% of the kernel wall) as not judged, and there is no CostShift."""
    floor = max(MIN_IMPACT * ctx["wall_us"], MIN_TICKS * ctx["tick_us"])
    fell, rose = {}, {}
    judged = ctx["runs"] or ctx["assume"] is not None or ctx["model"] is not None
    for p in phases:
        c = p.change("critical_us")
        if p.present == "both":  # not judged: a move beyond the floors ('none', not 'floor')
            d = c.delta if c.significant or c.test == "none" else None
        else:
            d = (c.after or 0.0) - (c.before or 0.0)
            d = d if abs(d) >= floor else None
        if d:
            (fell if d < 0 else rose)[p.phase] = d

    def listing(d: dict) -> str:
        return ", ".join(f"{k} {v:+,.2f} µs" for k, v in sorted(d.items(), key=lambda kv: -abs(kv[1])))

    if not judged and (fell or rose):
        moved = [f"{listing(fell)} fell" if fell else "no phase's time on it fell by 1% of the kernel wall",
                 f"{listing(rose)} rose" if rose else "no phase's time on it rose by 1% of the kernel wall"]
        return None, f"cost on the critical path not judged ({ctx['why']}): " + "; ".join(moved)
    beyond = "beyond the noise" if judged else "by 1% of the kernel wall"
    if not fell or not rose:
        if fell:
            line = (f"no cost moved to other phases: {', '.join(fell)} fell on the critical path ({listing(fell)}) "
                    f"and no phase's time on it rose {beyond}")
        elif rose:
            line = (f"no cost moved from other phases: {', '.join(rose)} rose on the critical path ({listing(rose)}) "
                    f"and no phase's time on it fell {beyond}")
        else:
            line = f"no cost moved to other phases: no phase's time on the critical path changed {beyond}"
        return None, line
    gained = sum(rose.values())
    saved = -sum(fell.values())
    msg = (f"cost moved between phases on the critical path: {listing(fell)} fell; {listing(rose)} rose, "
           f"taking back {gained / saved:.0%} of the saving" if saved >= gained else
           f"cost moved between phases on the critical path: {listing(fell)} fell; {listing(rose)} rose by more "
           "than was saved")
    if wall.delta is not None:
        msg += f" (kernel wall {wall.delta:+,.2f} µs)"
    return CostShift(fell, rose, wall.delta, msg), msg
