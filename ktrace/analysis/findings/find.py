"""The method's verdicts, from the figures, each with the evidence it rests on and the kernel time at stake.

Structure first: before a finding says *why*, the figures must show it (docs/analysis-structure.md): were
the lanes of a phase co-resident or did blocks run in waves, did a synchronization precede it, do its
instances line up across lanes, did its start skew come over from the previous phase? Each finding has
``impact_ns``, the kernel wall time it costs by the rule of its kind (docs/analysis-schema.md, "Findings"),
and ``impact_share`` of the wall. A finding is a warning only when its impact is at least ``min_impact`` of
the wall and at least ``min_ticks`` timer ticks; otherwise it is info. Findings are sorted by impact.
"""

from __future__ import annotations


from ..model.results import Figures
from ..model.thresholds import Thresholds
from . import causes
from . import verdicts
from .kinds import KindFigures
from .margins import marginal
from .stakes import Stakes
from .verdict import format_ns
from ...core.records import frozen

__all__ = ["Thresholds", "Finding", "find", "format_ns", "tick_of", "SEVERITIES", "WHY_INFO"]

SEVERITIES = ("warning", "info")

# Why a finding is info, not a warning: its words in the report (a label never says more than its number does).
WHY_INFO = {"below_floor": "below the impact floor", "marginal": "within the run-to-run noise of its floor",
            "tiny_phase": "its phase is too short to judge", "information": "information, not a cause to act on"}


@frozen
class Finding:
    """One verdict. kind: see docs/analysis-schema.md; phase: the phase it is about (None for the launch);
    severity: 'warning' or 'info'; message: the claim and the advice; evidence: what in the data shows it;
    impact_ns: the kernel wall time at stake (rule per kind), impact_share: of the wall; figures: the
    numbers behind it (units in the names); change: what removing its cause changes (a ``Change``, None where
    its kind names none): ``ktrace whatif --fix N`` replays it."""

    kind: str
    phase: str | None
    severity: str
    message: str
    evidence: str = ""
    impact_ns: float = 0.0
    impact_share: float | None = None
    figures: KindFigures | None = None
    change: object = None  # the Change whose replayed saving bounds its stake (analysis/replay/change.py)
    why_info: str | None = None  # an info finding's reason: one of WHY_INFO's keys (None: a warning)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "phase": self.phase, "severity": self.severity, "message": self.message,
                "evidence": self.evidence, "impact_ns": self.impact_ns, "impact_share": self.impact_share,
                "figures": self.figures.to_dict() if self.figures is not None else {}}


def tick_of(fig: Figures, th: Thresholds) -> float:
    """The timer resolution the findings use, ns."""
    return float(th.tick_ns) if th.tick_ns > 0 else float(fig.kernel.tick_ns)


def find(fig: Figures, th: Thresholds | None = None, noise: dict | None = None) -> tuple[Finding, ...]:
    """The findings for ``fig``: warnings first, each group by impact (largest first), then phase order.
    noise: the run-to-run noise bounds a warning must clear its thresholds by (margins.py; default the shipped
    model's)."""
    th = th or Thresholds()
    tick = tick_of(fig, th)
    wall = float(fig.kernel.wall_ns or 0)
    raw = verdicts.all_verdicts(fig, th, tick)
    floor = max(th.min_impact * wall, th.min_ticks * tick)
    out = []
    stakes = Stakes(fig)
    for v, impact, claimed in causes.merge(raw, fig.critical_path.dur_ns, stakes.saving):
        impact = float(max(impact, 0.0))
        figs = v.figures
        saving = stakes.saving(v)
        if saving is not None:  # never more than removing the cause saves, replayed on the timeline: the stake
            figs = figs.with_(replayed_saving_ns=saving)  # is what ``ktrace whatif --fix N`` replays, to the ns
            impact = min(impact, saving)
        message = v.message
        if stakes.room is not None and impact > stakes.room:  # no stake promises a wall below the roofline
            rf = stakes.roofline
            figs = figs.with_(roofline_cap_ns=stakes.room)
            message += (f"; at most {format_ns(stakes.room)} can be saved: the work takes {format_ns(rf.floor_ns)} at "
                        f"the device's peak {'bandwidth' if rf.bound == 'bandwidth' else 'FLOP rate'} (the roofline)")
            impact = stakes.room
        severity = "warning" if v.warn and impact >= floor and impact > 0 else "info"
        why = None if severity == "warning" else "tiny_phase" if figs.get("tiny_phase") else \
            "below_floor" if impact < floor or impact <= 0 else "information"
        if severity == "warning":
            close = marginal(fig, v.kind, figs, v.phase, impact, th, tick, noise)
            if close is not None:  # within a rerun's noise of its threshold: info, said so
                figs = figs.with_(marginal=close)
                severity, why = "info", "marginal"
        if claimed != impact:
            figs = figs.with_(claimed_ns=claimed)  # before the findings ahead of it took their share of the path
        out.append(Finding(v.kind, v.phase, severity, message, v.evidence, impact,
                           impact / wall if wall else None, figs, stakes.change(v), why))
    order = {nm: i for i, nm in enumerate(fig.phases.phase.tolist())}
    out.sort(key=lambda f: (SEVERITIES.index(f.severity), -f.impact_ns, order.get(f.phase, -1), f.kind))
    return tuple(out)
