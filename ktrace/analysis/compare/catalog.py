"""The figure catalog: every figure ``ktrace diff`` compares and ``ktrace check`` rules name, and a capture's
values of them, computed once per capture.

    cap = Capture(analysis, read_timing("run.bin"))
    cap.kernel_values["wall_us"]                 # Value(value, noise) in the figure's unit
    cap.phase_values["compute"]["imbalance"]
    cap.group_values("mma", 1)["mean_dur_us"]

Catalogs: ``KERNEL_FIGURES`` (``kernel.*``), ``PHASE_FIGURES`` (``<phase>.*``) and ``GROUP_FIGURES``
(``<phase>@<group>.*``); each figure is derived from the Analysis JSON (docs/ci.md). How each figure's noise
is estimated: compare.py's docstring.
"""

from __future__ import annotations

import math
from functools import cached_property
from pathlib import Path

import numpy as np

from ...core.errors import InputError
from ...core.filetypes import is_trace
from ...core.sidecar import read_sidecar
from .. import Analysis
from .noise import SD_PER_P10_P90
from ...core.records import frozen

__all__ = ["Figure", "Value", "Timing", "Capture", "as_capture", "KERNEL_FIGURES", "PHASE_FIGURES", "GROUP_FIGURES",
           "read_timing", "kernel_values", "phase_values", "group_values"]


@frozen
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


@frozen
class Value:
    """A figure's value (None when undefined) and its noise, both in the figure's unit. ``noise``: the
    capture's own evidence of spread (the timer tick, p10-p90 across instances or timed repetitions);
    ``samples``: the values it summarizes (one per instance, or per run when several runs are pooled), which
    compare.py ranks; empty where there are none. ``sd``, ``reps``: for a kernel median, the standard
    deviation of its timed repetitions (from p10-p90) and how many there were (0: the sidecar has none)."""

    value: float | None
    noise: float = 0.0
    samples: tuple = ()
    sd: float = 0.0
    reps: int = 0


@frozen
class Timing:
    """Median kernel times (µs) of the instrumented build and its unprofiled control, with p10/p90 over the
    timed repetitions and their count (0: not given), from a capture's sidecar ``timing``; None where the
    sidecar lacks one."""

    profiled_median_us: float | None
    profiled_spread_us: float
    control_median_us: float | None
    control_spread_us: float
    source: str
    profiled_reps: int = 0
    control_reps: int = 0


def _timing_of(meta: dict, source: str) -> Timing | None:
    t = meta.get("timing")
    if not isinstance(t, dict):
        return None

    def build(key) -> tuple[float | None, float, int]:
        s = t.get(key) if isinstance(t.get(key), dict) else {}
        med, p10, p90, reps = (s.get(k) for k in ("median_us", "p10_us", "p90_us", "reps"))
        if not isinstance(med, (int, float)) or isinstance(med, bool) or not math.isfinite(med):
            return None, 0.0, 0
        ok = all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in (p10, p90))
        # without a spread the repetitions cannot be tested: as if there were none
        n = int(reps) if ok and isinstance(reps, int) and not isinstance(reps, bool) and reps > 1 else 0
        return float(med), float(p90 - p10) if ok else 0.0, n

    (pm, ps, pn), (cm, cs, cn) = build("with_profiler"), build("without_profiler")
    return None if pm is None and cm is None else Timing(pm, ps, cm, cs, source, pn, cn)


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
    if is_trace(p):
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


@frozen
class Capture:
    """One capture as rules and comparisons see it: an analysis and, when its sidecar has them, its control
    timings; its figure values are computed once, on first use."""

    analysis: Analysis
    timing: Timing | None = None

    @property
    def kernel_name(self) -> str:
        return str(self.analysis.launch.get("kernel", "kernel"))

    @cached_property
    def kernel_values(self) -> dict[str, Value]:
        """``kernel.*``: figure name -> Value (see ``kernel_values``). Shared: copy before changing it."""
        return kernel_values(self)

    @cached_property
    def phase_values(self) -> dict[str, dict[str, Value]]:
        """``<phase>.*``: phase -> figure name -> Value (see ``phase_values``). Shared: copy before changing."""
        return phase_values(self.analysis)

    def group_values(self, phase: str, group: int) -> dict[str, Value]:
        """``<phase>@<group>.*`` (see ``group_values``), computed once per (phase, group)."""
        cache = self.__dict__.setdefault("_group_values", {})
        if (phase, group) not in cache:
            cache[phase, group] = group_values(self.analysis, phase, group)
        return cache[phase, group]


def as_capture(x) -> Capture:
    """A Capture as it is, an Analysis as a Capture without timings."""
    return x if isinstance(x, Capture) else Capture(x)


def _us(ns) -> float | None:
    return None if ns is None or (isinstance(ns, float) and math.isnan(ns)) else float(ns) / 1e3


def _clean(values) -> np.ndarray:
    v = np.asarray(values, np.float64)
    return v[~np.isnan(v)]


def _spread(values) -> float:
    """p90 - p10 of the values (NaN dropped): the spread most of them fall in; 0 for fewer than two."""
    v = _clean(values)
    return float(np.percentile(v, 90) - np.percentile(v, 10)) if len(v) > 1 else 0.0


def kernel_values(cap) -> dict[str, Value]:
    """``kernel.*`` figures of a Capture (or Analysis): name -> Value. Timings only when the sidecar has them."""
    cap = as_capture(cap)
    a, k = cap.analysis, cap.analysis.kernel
    tick_us = a.tick_ns / 1e3
    t = cap.timing
    # One launch's wall varies from launch to launch as the timed repetitions do (their p10-p90).
    rep = t.profiled_spread_us if t is not None and t.profiled_median_us else 0.0
    out = {"wall_us": Value(_us(k.wall_ns), max(tick_us, rep)), "slices": Value(k.slices), "lanes": Value(k.lanes),
           "phases": Value(k.phases), "tick_ns": Value(a.tick_ns),
           "anomalous_records": Value(a.launch.get("anomalous_records"))}
    if t is not None:
        out["profiled_us"] = Value(t.profiled_median_us, t.profiled_spread_us,
                                   sd=t.profiled_spread_us * SD_PER_P10_P90, reps=t.profiled_reps)
        out["control_us"] = Value(t.control_median_us, t.control_spread_us,
                                  sd=t.control_spread_us * SD_PER_P10_P90, reps=t.control_reps)
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

        def samples(column: str, scale: float = 1e-3) -> tuple:
            return tuple((_clean(getattr(inst, column)[m]) * scale).tolist())

        def noise_ns(column: str) -> float:
            return max(tick_ns, _spread(getattr(inst, column)[m]))

        def mean_t(value_ns, column: str) -> Value:
            return Value(_us(value_ns), noise_ns(column) / 1e3, samples(column))

        after = [w for w in waits if w["phase"] == name]
        before = [w for w in waits if w["next_phase"] == name]
        wait_noise = max([tick_ns] + [w["p90_ns"] - w["p50_ns"] for w in after + before]) / 1e3
        imb_noise = max(tick_ns / p["mean_dur_ns"] if p["mean_dur_ns"] else 0.0, _spread(inst.imbalance[m]))
        cm = cp.phase == name
        steps = _per_instance(cp.k[cm], cp.dur_ns[cm])  # each instance's time on the path: slice + wait
        crit_noise = max(tick_ns, _spread(steps))
        share = shares.get(name)
        v = {
            "instances": Value(n), "slices": Value(p["slices"]),
            "wall_us": mean_t(p["sum_wall_ns"] / n, "wall_ns"),
            "total_wall_us": Value(_us(p["sum_wall_ns"]), math.sqrt(n) * noise_ns("wall_ns") / 1e3,
                                   samples("wall_ns")),
            "max_dur_us": mean_t(p["mean_max_dur_ns"], "max_dur_ns"),
            "mean_dur_us": mean_t(p["mean_dur_ns"], "mean_dur_ns"),
            "imbalance": Value(p["imbalance"], imb_noise, samples("imbalance", 1.0)),
            "max_imbalance": Value(p["max_imbalance"], imb_noise, samples("imbalance", 1.0)),
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
            "critical_us": Value(_us(share["total_ns"]) if share else 0.0, crit_noise / 1e3,
                                 tuple((steps / 1e3).tolist())),
            "critical_share": Value(share["share"] if share else 0.0, crit_noise / wall_ns if wall_ns else 0.0),
        }
        out[name] = v
    return out


def _per_instance(k, dur_ns) -> np.ndarray:
    """Sums of dur_ns per instance index k (ns)."""
    k = np.asarray(k, np.float64)
    ok = ~np.isnan(k)
    if not ok.any():
        return np.zeros(0)
    _, inverse = np.unique(k[ok], return_inverse=True)
    return np.bincount(inverse, weights=np.asarray(dur_ns, np.float64)[ok])


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
