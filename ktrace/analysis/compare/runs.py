"""Several runs of one kernel on the same inputs: the figures with their run-to-run spread, and which warnings
hold in every run (a verdict that changes between two runs of the same inputs is noise).

    r = ktrace.analyze_runs(["run1.bin", "run2.bin", "run3.bin"])
    r.stable       # the warnings every run gives: [RunFinding(kind, phase, runs, blocks, ...)]
    r.unstable     # the warnings some runs give and others do not
    r.figure("compute", "max_dur_ns")   # (mean, min, max) over the runs

A warning is identified by its kind, phase, and (where it has them) next phase and warp group; the block it
names is compared apart: a warning that every run
gives but that names different blocks holds, its block does not (``blocks`` lists them).
"""

from __future__ import annotations


import numpy as np

from ...core import jsonfmt
from ...core.errors import InputError
from ...core.records import frozen

__all__ = ["RunFinding", "RunsAnalysis", "runs_analysis", "RUNS_SCHEMA", "PHASE_FIGURES"]

RUNS_SCHEMA = "ktrace.runs/1"
# Per-phase figures shown with their spread over the runs (columns of the Phases table, ns or x).
PHASE_FIGURES = ("mean_max_dur_ns", "mean_dur_ns", "imbalance", "mean_excess_ns", "mean_start_skew_ns")


def named_block(f) -> int | None:
    """The block a finding names, if any."""
    g = f.figures
    for key in ("block", "busiest_block", "slowest_block", "waited_block"):
        v = g.get(key)
        if isinstance(v, int):
            return v
    return None


@frozen
class RunFinding:
    """One warning over the runs: in how many runs it is a warning, the blocks it names (block -> runs), its
    impact's range (ns) and the first run's message."""

    kind: str
    phase: str | None
    runs: int
    of: int
    blocks: dict
    min_impact_ns: float
    max_impact_ns: float
    message: str

    @property
    def holds(self) -> bool:
        return self.runs == self.of

    @property
    def block_holds(self) -> bool:
        """Every run names the same block (or none names one)."""
        return len(self.blocks) <= 1 and (not self.blocks or next(iter(self.blocks.values())) == self.runs)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "phase": self.phase, "runs": self.runs, "of": self.of, "holds": self.holds,
                "blocks": {str(b): n for b, n in self.blocks.items()}, "block_holds": self.block_holds,
                "min_impact_ns": self.min_impact_ns, "max_impact_ns": self.max_impact_ns, "message": self.message}


@frozen
class RunsAnalysis:
    """Analyses of several runs of one kernel (``sources``, ``analyses`` in the same order)."""

    sources: tuple
    analyses: tuple
    findings: tuple  # RunFinding, warnings in every run first, then by runs, impact

    @property
    def stable(self) -> list:
        return [f for f in self.findings if f.holds]

    @property
    def unstable(self) -> list:
        return [f for f in self.findings if not f.holds]

    def wall(self) -> tuple[float, float, float]:
        w = np.array([float(a.kernel.wall_ns or 0) for a in self.analyses])
        return float(w.mean()), float(w.min()), float(w.max())

    def figure(self, phase: str, name: str) -> tuple[float, float, float] | None:
        """(mean, min, max) of a phase's figure over the runs that have the phase; None if none has it."""
        vals = []
        for a in self.analyses:
            ph = a.phases
            i = np.flatnonzero(ph.phase == phase)
            if len(i):
                v = getattr(ph, name)[i[0]]
                if v is not None and not (isinstance(v, float) and np.isnan(v)):
                    vals.append(float(v))
        if not vals:
            return None
        v = np.array(vals)
        return float(v.mean()), float(v.min()), float(v.max())

    def phases(self) -> list[str]:
        seen = []
        for a in self.analyses:
            for p in a.phases.phase.tolist():
                if p not in seen:
                    seen.append(p)
        return seen

    def noise(self) -> dict:
        """Family -> (the largest relative change between these runs that cleared the floors, the shipped noise
        model's): how these runs of the same inputs compare with what ``ktrace diff`` judges one run per side
        by (noise_model.py). Only families these runs moved beyond the floors."""
        from .catalog import as_capture
        from .noise_model import fit, noise_model, observations

        model = noise_model()
        mine = fit(observations([as_capture(a) for a in self.analyses], "yours"))
        return {fam: (b.relative, model.bound(fam).relative if model.bound(fam) else None)
                for fam, b in mine.items()}

    def to_dict(self) -> dict:
        mean, lo, hi = self.wall()
        return {
            "schema": RUNS_SCHEMA, "sources": list(self.sources), "runs": len(self.analyses),
            "kernel": {"wall_ns": {"mean": mean, "min": lo, "max": hi}},
            "phases": [{"phase": p, **{n: dict(zip(("mean", "min", "max"), self.figure(p, n) or (None,) * 3))
                                       for n in PHASE_FIGURES}} for p in self.phases()],
            "findings": [f.to_dict() for f in self.findings],
            "noise": {fam: {"runs": mine, "model": model} for fam, (mine, model) in self.noise().items()},
            "per_run": [{"source": s, "warnings": [{"kind": f.kind, "phase": f.phase, "block": named_block(f),
                                                    "impact_ns": f.impact_ns} for f in a.findings
                                                   if f.severity == "warning"]}
                        for s, a in zip(self.sources, self.analyses)],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return jsonfmt.dumps(self.to_dict(), indent=indent, ensure_ascii=False, allow_nan=False)


def _recalibrated(analyses) -> list:
    """The analyses with their findings judged against the noise model widened by these runs' own run-to-run
    changes (findings/margins.py): a warning must clear its thresholds by more than the user's runs move too."""
    from dataclasses import replace

    from ..findings.find import find
    from .catalog import as_capture
    from .noise_model import noise_model, observations

    obs = observations([as_capture(a) for a in analyses], "yours")
    if not obs:
        return list(analyses)
    model = noise_model().refine(obs, len(analyses))
    noise = {k: (b.relative, b.ticks, b.wall_share) for k, b in model.families.items()}
    return [replace(a, findings=find(a.figures, a.thresholds, noise)) for a in analyses]


def runs_analysis(sources, analyses) -> RunsAnalysis:
    """The RunsAnalysis of ``analyses`` (one per run, of one kernel: the same phases)."""
    if len(analyses) < 2:
        raise InputError("--runs compares several runs of one kernel: give two captures or more (a glob works: "
                         "'run*.bin')")
    kernels = {str(a.launch.get("kernel")) for a in analyses}
    shapes = {(a.launch.get("num_blocks"), a.launch.get("num_groups")) for a in analyses}
    if len(shapes) > 1:
        raise InputError(f"{', '.join(map(str, sources))}: these are not runs of one kernel (grids "
                         f"{sorted(map(str, shapes))}, kernels {sorted(kernels)}); --runs takes runs of the same "
                         "inputs")
    analyses = _recalibrated(analyses)
    n = len(analyses)
    seen: dict = {}
    for a in analyses:
        mine = set()
        for f in a.findings:
            if f.severity != "warning":
                continue
            # one warning: its kind and phase (a wait's boundary: phase -> next phase); the warp group and the block
            # it names are compared apart (a late start of block 127 is one warning whichever group is later)
            key = (f.kind, f.phase, f.figures.get("next_phase"))
            e = seen.setdefault(key, {"runs": 0, "blocks": {}, "impacts": [], "message": f.message})
            if key in mine:
                continue
            e["runs"] += 1
            mine.add(key)
            b = named_block(f)
            if b is not None:
                e["blocks"][b] = e["blocks"].get(b, 0) + 1
            e["impacts"].append(float(f.impact_ns))
    out = [RunFinding(k, p, e["runs"], n, dict(sorted(e["blocks"].items())), min(e["impacts"]), max(e["impacts"]),
                      e["message"]) for (k, p, _), e in seen.items()]
    out.sort(key=lambda f: (-f.runs, -f.max_impact_ns, f.kind, str(f.phase)))
    return RunsAnalysis(tuple(map(str, sources)), tuple(analyses), tuple(out))
