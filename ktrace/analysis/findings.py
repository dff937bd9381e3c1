"""The method's verdicts, from the figures: load imbalance, start skew or slow release, a stable straggler or
a moving last finisher, the largest waits, and the phase that dominates the critical path.

Every duration is known to about one timer tick (``Kernel.tick_ns``): a difference below the tick is not a
finding. The thresholds are adjustable (``Thresholds``); their defaults are part of the report.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from ..errors import InputError
from .results import Figures

__all__ = ["Thresholds", "Finding", "find", "format_ns", "SEVERITIES"]

SEVERITIES = ("warning", "info")


@dataclass(frozen=True)
class Thresholds:
    """When a figure becomes a finding. Override by name: ``Thresholds.parse(["imbalance=1.2"])``."""

    imbalance: float = 1.10  # a phase's mean slowest slice / its mean slice above this: load imbalance
    excess_fraction: float = 0.05  # mean (wall - slowest slice) / mean wall above this: start skew or slow release
    stable_fraction: float = 0.75  # the top last block last in at least this share of instances: stable straggler
    wait_fraction: float = 0.05  # a boundary's waits above this share of all lanes' time: a large wait
    top_waits: int = 3  # at most this many wait findings, largest first
    dominant_share: float = 0.5  # a phase with this share of the critical path dominates it
    tick_ns: float = 0.0  # timer resolution; 0 = from the trace (launch tick, else smallest step, else 32 ns)

    @classmethod
    def parse(cls, items) -> "Thresholds":
        """Thresholds with ``name=value`` overrides (strings, e.g. from ``--threshold``)."""
        known = {f.name: f for f in fields(cls)}
        values = {}
        for item in items or ():
            name, sep, text = str(item).partition("=")
            name = name.strip().replace("-", "_")
            if not sep or name not in known:
                raise InputError(f"threshold {item!r}: use NAME=VALUE with NAME one of {', '.join(known)}")
            kind = int if known[name].type in ("int", int) else float
            try:
                value = kind(text)
            except ValueError:
                raise InputError(f"threshold {item!r}: {text!r} is not a number ({kind.__name__})") from None
            if not math.isfinite(value) or value < 0:
                raise InputError(f"threshold {item!r}: must be a finite number >= 0")
            values[name] = value
        return cls(**values)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Finding:
    """One verdict. kind: load_imbalance, start_skew, stable_straggler, moving_last_finisher, large_wait or
    critical_path; phase: the phase it is about (for a wait, the phase before the boundary); severity:
    'warning' or 'info'; figures: the numbers behind it (units in the names)."""

    kind: str
    phase: str | None
    severity: str
    message: str
    figures: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "phase": self.phase, "severity": self.severity, "message": self.message,
                "figures": dict(self.figures)}


def format_ns(ns) -> str:
    """A duration for people: '468 ns', '43.6 µs', '1.25 ms', '2.00 s'."""
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return "—"
    a = abs(ns)
    if a < 1e3:
        return f"{ns:.0f} ns"
    if a < 1e6:
        return f"{ns / 1e3:.3g} µs" if a < 1e5 else f"{ns / 1e3:.0f} µs"
    if a < 1e9:
        return f"{ns / 1e6:.3g} ms" if a < 1e8 else f"{ns / 1e6:.0f} ms"
    return f"{ns / 1e9:.3g} s"


def tick_of(fig: Figures, th: Thresholds) -> float:
    """The timer resolution the findings use, ns."""
    return float(th.tick_ns) if th.tick_ns > 0 else float(fig.kernel.tick_ns)


def find(fig: Figures, th: Thresholds | None = None) -> tuple[Finding, ...]:
    """The findings for ``fig``, warnings first, then in phase order."""
    th = th or Thresholds()
    tick = tick_of(fig, th)
    out: list[Finding] = []
    flagged: set[str] = set()
    rows = [_labelled(fig, i) for i in range(len(fig.phases))]
    for p in rows:
        for f in (_imbalance(fig, p, th, tick), _skew(p, th, tick)):
            if f:
                out.append(f)
                flagged.add(p["phase"])
    for p in rows:
        f = _last_finisher(p, th, tick, flagged)
        if f:
            out.append(f)
    out += _waits(fig, rows, th, tick)
    cp = _critical_path(fig, th)
    if cp:
        out.append(cp)
    order = {nm: i for i, nm in enumerate(fig.phases.phase.tolist())}
    out.sort(key=lambda f: (SEVERITIES.index(f.severity), order.get(f.phase, len(order))))
    return tuple(out)


def _labelled(fig: Figures, i: int) -> dict:
    """Phase row i with 'label': the phase's name, plus its warp groups when the launch has several."""
    p = fig.phases.row(i)
    groups = {g for gs in fig.phases.groups.tolist() for g in (gs or "").split(",") if g}
    p["label"] = p["phase"]
    if len(groups) > 1:
        word = "groups" if "," in (p["groups"] or "") else "group"
        p["label"] = f"{p['phase']} ({word} {p['groups']})"
    return p


def _slowest_lane(fig: Figures, phase: str) -> dict | None:
    lanes = fig.lanes
    rows = np.flatnonzero(lanes.phase == phase)
    if not len(rows):
        return None
    # Largest mean duration, then the lowest lane (lanes are sorted by lane within a phase).
    best = rows[np.argmax(lanes.mean_dur_ns[rows])]
    return lanes.row(best)


def _imbalance(fig: Figures, p: dict, th: Thresholds, tick: float) -> Finding | None:
    imb, mean_max, mean = p["imbalance"], p["mean_max_dur_ns"], p["mean_dur_ns"]
    if imb is None or imb <= th.imbalance or mean_max - mean <= tick:
        return None
    slow = _slowest_lane(fig, p["phase"])
    who = ""
    figures = {"imbalance": imb, "max_imbalance": p["max_imbalance"], "mean_max_dur_ns": mean_max,
               "mean_dur_ns": mean, "instances": p["instances"], "tick_ns": tick}
    if slow:
        who = f"; slowest on average: block {slow['block']}"
        who += f" group {slow['group']}" if "," in (p["groups"] or "") else ""
        who += f" ({format_ns(slow['mean_dur_ns'])})"
        figures.update(slowest_block=slow["block"], slowest_group=slow["group"],
                       slowest_mean_dur_ns=slow["mean_dur_ns"])
    msg = (f"{p['label']}: load imbalance {imb:.2f}x (threshold {th.imbalance:.2f}): the slowest lane takes "
           f"{format_ns(mean_max)} per instance against a mean of {format_ns(mean)} "
           f"(worst instance {p['max_imbalance']:.2f}x, {p['instances']} instances){who}")
    return Finding("load_imbalance", p["phase"], "warning", msg, figures)


def _skew(p: dict, th: Thresholds, tick: float) -> Finding | None:
    n = p["instances"]
    mean_wall = p["sum_wall_ns"] / n if n else 0.0
    excess = p["mean_excess_ns"]
    if not mean_wall or excess <= tick or excess / mean_wall <= th.excess_fraction:
        return None
    frac = excess / mean_wall
    msg = (f"{p['label']}: wall time exceeds the slowest lane's time by {format_ns(excess)} per instance "
           f"({frac:.0%} of its wall {format_ns(mean_wall)}; threshold {th.excess_fraction:.0%}): start skew "
           f"(begins spread over {format_ns(p['mean_start_skew_ns'])}) or a slow release after the "
           f"synchronization before it")
    return Finding("start_skew", p["phase"], "warning", msg, {
        "mean_excess_ns": excess, "mean_wall_ns": mean_wall, "excess_fraction": frac,
        "mean_start_skew_ns": p["mean_start_skew_ns"], "mean_end_skew_ns": p["mean_end_skew_ns"],
        "max_excess_ns": p["max_excess_ns"], "tick_ns": tick})


def _last_finisher(p: dict, th: Thresholds, tick: float, flagged: set) -> Finding | None:
    n, top, count = p["instances"], p["top_last_block"], p["top_last_count"]
    lead = p["mean_last_lead_ns"]
    if n < 2 or lead is None or lead <= tick:
        return None  # one instance, or the last lane finishes with the others (within a tick): no straggler
    # The lead is what the next dependency waits for the last lane alone: a warning when it is a real part
    # of the phase's wall time (the same fraction that makes excess a finding), or the phase has a warning.
    mean_wall = p["sum_wall_ns"] / n
    lead_fraction = lead / mean_wall if mean_wall else 0.0
    severity = "warning" if p["phase"] in flagged or lead_fraction > th.excess_fraction else "info"
    figures = {"top_last_block": top, "top_last_count": count, "instances": n,
               "distinct_last_blocks": p["distinct_last_blocks"], "tied_instances": p["tied_instances"],
               "mean_last_lead_ns": lead, "lead_fraction": lead_fraction, "tick_ns": tick}
    if count / n >= th.stable_fraction:
        msg = (f"{p['label']}: block {top} is the last finisher in {count} of {n} instances, ahead of the next "
               f"lane by {format_ns(lead)} on average: a stable straggler; fix its share of the work")
        return Finding("stable_straggler", p["phase"], severity, msg, figures)
    msg = (f"{p['label']}: {p['distinct_last_blocks']} different blocks were last in {n} instances (the most "
           f"frequent, block {top}, in {count}): the last finisher moves; the cost is contention or "
           f"synchronization")
    return Finding("moving_last_finisher", p["phase"], severity, msg, figures)


def _waits(fig: Figures, rows: list[dict], th: Thresholds, tick: float) -> list[Finding]:
    w, k = fig.waits, fig.kernel
    lane_time = (k.lanes or 0) * (k.wall_ns or 0)
    if not len(w) or not lane_time:
        return []
    top = {p["phase"]: p for p in rows}
    out = []
    for i in np.argsort(-w.sum_ns, kind="stable").tolist():
        r = w.row(i)
        frac = r["sum_ns"] / lane_time
        if frac <= th.wait_fraction or r["mean_ns"] <= tick:
            continue
        before = top.get(r["phase"])
        waits_for = ""
        if before and before["top_last_count"] / max(before["instances"], 1) >= th.stable_fraction:
            waits_for = f"; they wait for {r['phase']}'s last finisher, block {before['top_last_block']}"
        label = top[r["phase"]]["label"] if r["phase"] in top else r["phase"]
        msg = (f"{label} -> {r['next_phase']}: lanes wait {format_ns(r['mean_ns'])} on average (p90 "
               f"{format_ns(r['p90_ns'])}, longest {format_ns(r['max_ns'])} on block {r['max_block']} at "
               f"k={r['max_k']}), {frac:.0%} of all lanes' time (threshold {th.wait_fraction:.0%}){waits_for}")
        out.append(Finding("large_wait", r["phase"], "warning", msg, {
            "next_phase": r["next_phase"], "count": r["count"], "sum_ns": r["sum_ns"], "mean_ns": r["mean_ns"],
            "p90_ns": r["p90_ns"], "max_ns": r["max_ns"], "max_block": r["max_block"],
            "max_group": r["max_group"], "max_k": r["max_k"], "lane_time_fraction": frac, "tick_ns": tick}))
        if len(out) >= th.top_waits:
            break
    return out


def _critical_path(fig: Figures, th: Thresholds) -> Finding | None:
    c = fig.critical_shares
    if not len(c) or np.all(np.isnan(c.share)):
        return None
    i = int(np.nanargmax(c.share))
    r = c.row(i)
    verb = "dominates" if r["share"] >= th.dominant_share else "is the largest part of"
    msg = (f"{r['phase']} {verb} the critical path: {r['share']:.0%} of the kernel's wall time "
           f"{format_ns(fig.kernel.wall_ns)} ({r['instances']} instances: last finishers' slices "
           f"{format_ns(r['dur_ns'])} + waits after them {format_ns(r['wait_ns'])})")
    return Finding("critical_path", r["phase"], "info", msg, {
        "share": r["share"], "instances": r["instances"], "dur_ns": r["dur_ns"], "wait_ns": r["wait_ns"],
        "total_ns": r["total_ns"], "wall_ns": fig.kernel.wall_ns})
