"""The method's verdicts, from the figures, each with the evidence it rests on and the kernel time at stake.

Structure first: before a finding says *why*, the figures must show it (docs/analysis-structure.md): were
the lanes of a phase co-resident or did blocks run in waves, did a synchronization precede it, do its
instances line up across lanes, did its start skew come over from the previous phase? Each finding has
``impact_ns``, the kernel wall time it costs by the rule of its kind (docs/analysis-schema.md, "Findings"),
and ``impact_share`` of the wall. A finding is a warning only when its impact is at least ``min_impact`` of
the wall and at least ``min_ticks`` timer ticks; otherwise it is info. Findings are sorted by impact.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

from ..errors import InputError
from .results import Figures
from . import causes, verdicts
from ._verdict import format_ns

__all__ = ["Thresholds", "Finding", "find", "format_ns", "tick_of", "SEVERITIES"]

SEVERITIES = ("warning", "info")


@dataclass(frozen=True)
class Thresholds:
    """When a figure becomes a finding. Override by name: ``Thresholds.parse(["imbalance=1.2"])``."""

    imbalance: float = 1.10  # a phase's mean slowest slice / its mean slice above this: load imbalance
    excess_fraction: float = 0.05  # mean (wall - slowest slice) / mean wall above this: start skew
    stable_fraction: float = 0.75  # one block last in at least this share of instances (or of a segment's)
    wait_fraction: float = 0.05  # a boundary's waits above this share of all lanes' time: a large wait
    top_waits: int = 3  # at most this many wait findings, largest first
    dominant_share: float = 0.5  # a phase with this share of the critical path dominates it
    min_impact: float = 0.01  # a warning costs at least this share of the kernel's wall time
    min_ticks: float = 2.0  # ... and at least this many timer ticks; every difference a finding rests on too
    tail_share: float = 0.05  # the tail is a finding when it costs at least this share of the wall
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
    """One verdict. kind: see docs/analysis-schema.md; phase: the phase it is about (None for the launch);
    severity: 'warning' or 'info'; message: the claim and the advice; evidence: what in the data shows it;
    impact_ns: the kernel wall time at stake (rule per kind), impact_share: of the wall; figures: the
    numbers behind it (units in the names)."""

    kind: str
    phase: str | None
    severity: str
    message: str
    evidence: str = ""
    impact_ns: float = 0.0
    impact_share: float | None = None
    figures: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "phase": self.phase, "severity": self.severity, "message": self.message,
                "evidence": self.evidence, "impact_ns": self.impact_ns, "impact_share": self.impact_share,
                "figures": dict(self.figures)}


def tick_of(fig: Figures, th: Thresholds) -> float:
    """The timer resolution the findings use, ns."""
    return float(th.tick_ns) if th.tick_ns > 0 else float(fig.kernel.tick_ns)


def find(fig: Figures, th: Thresholds | None = None) -> tuple[Finding, ...]:
    """The findings for ``fig``: warnings first, each group by impact (largest first), then phase order."""
    th = th or Thresholds()
    tick = tick_of(fig, th)
    wall = float(fig.kernel.wall_ns or 0)
    raw = verdicts.all_verdicts(fig, th, tick)
    floor = max(th.min_impact * wall, th.min_ticks * tick)
    out = []
    for v, impact, claimed in causes.merge(raw, fig.critical_path.dur_ns):
        impact = float(max(impact, 0.0))
        severity = "warning" if v.warn and impact >= floor and impact > 0 else "info"
        figs = dict(v.figures)
        if claimed != impact:
            figs["claimed_ns"] = claimed  # before the findings ahead of it took their share of the path
        out.append(Finding(v.kind, v.phase, severity, v.message, v.evidence, impact,
                           impact / wall if wall else None, figs))
    order = {nm: i for i, nm in enumerate(fig.phases.phase.tolist())}
    out.sort(key=lambda f: (SEVERITIES.index(f.severity), -f.impact_ns, order.get(f.phase, -1), f.kind))
    return tuple(out)
