"""The measured noise model: how far each figure family moves between runs of the same inputs.

    from ktrace.analysis.compare.noise_model import noise_margin, noise_model, family_of
    noise_margin("imbalance", 2.9, 32.0, unit_ns=22_000, kernel_ns_per_unit=8 * 22_000, wall_ns=600_000)

The data (``noise_model.json``) is built by ``scripts/build_noise_model.py`` from the same-input sets in
samples/ (docs/ci.md says which); ``ktrace diff`` judges one run per side against it (``modelled``) and
``ktrace check`` gives baseline rules its margin (``margin_for``). Each family has three bounds, each the
largest seen over every same-input change that cleared the floors (noise.py: 2 ticks, 1% of the kernel
wall): relative to the figure's value, in timer ticks, and the kernel time the change stands for as a share
of the kernel wall. The margin is the relative bound or, where smaller, the kernel-time bound (the wall
share, never under the tick bound): every same-input change stayed within each, so within it too.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from ..model.thresholds import margin_of
from .noise import MIN_IMPACT, MIN_TICKS, Judgement, not_judged
from ...core.records import frozen

__all__ = ["FAMILIES", "KERNEL_FAMILIES", "Bound", "NoiseModel", "noise_model", "noise_margin", "family_of",
           "observations", "fit", "modelled", "margin_for", "MODEL_SCHEMA", "MODEL_PATH"]

MODEL_SCHEMA = "ktrace.noise_model/1"
MODEL_PATH = Path(__file__).with_name("noise_model.json")

# Phase figure -> family. A total follows its mean (total_wall_us: wall), a share its time (critical_share:
# critical). The maxima (max_*: the worst instance's figure, the longest single wait) are one family of their
# own: an extreme of one run moves far more than a mean, whichever figure it is the extreme of, and a few
# same-input changes of one maximum (30 of max_wait_us) understate it (a longest wait 1.89 -> 0.51 µs between
# two runs of the same inputs was read as better); pooled, their bound is the largest seen over every maximum.
FAMILIES = {
    "imbalance": "imbalance", "max_imbalance": "worst",
    "wall_us": "wall", "total_wall_us": "wall", "max_dur_us": "wall", "mean_dur_us": "wall",
    "excess_us": "skew", "start_skew_us": "skew", "end_skew_us": "skew", "last_lead_us": "skew",
    "max_excess_us": "worst", "max_start_skew_us": "worst", "max_end_skew_us": "worst",
    "wait_after_us": "wait", "wait_before_us": "wait", "max_wait_us": "worst",
    "critical_us": "critical", "critical_share": "critical",
}
KERNEL_FAMILIES = {"wall_us": "kernel_wall", "profiled_us": "profiled", "control_us": "control",
                   "overhead_ratio": "overhead"}
# How one unit of a figure converts to kernel time (for the wall-share bound): a mean per instance x the
# instances, a ratio x mean slice x instances, a total or a single wait as it is.
PER_INSTANCE = frozenset({"wall_us", "max_dur_us", "mean_dur_us", "excess_us", "start_skew_us", "end_skew_us",
                          "last_lead_us", "wait_after_us", "wait_before_us"})
RATIOS = frozenset({"imbalance", "max_imbalance"})


def family_of(figure: str, kernel: bool = False) -> str | None:
    """The noise family of a figure (``kernel=True``: a ``kernel.*`` figure); None: not modelled (counts,
    blocks, the last finisher)."""
    return (KERNEL_FAMILIES if kernel else FAMILIES).get(figure)


def _up(x: float) -> float:
    """x rounded up to 4 significant digits: the shipped bounds cover what was measured, and print stably."""
    if not x or not math.isfinite(x):
        return float(x)
    e = math.floor(math.log10(abs(x))) - 3
    m = math.ceil(x / 10.0 ** e)
    while float(f"{m}e{e}") < x:
        m += 1
    return float(f"{m}e{e}")


@frozen
class Bound:
    """One family's largest same-input change that cleared the floors: ``relative`` (a fraction of the
    figure's value), ``ticks`` (timer ticks), ``wall_share`` (the kernel time it stands for / the kernel
    wall); ``seen``: how many same-input changes (figure x pair of runs) it covers; ``worst``: where the relative bound came from."""

    relative: float
    ticks: float
    wall_share: float
    seen: int
    worst: str = ""

    def to_dict(self) -> dict:
        return {"relative": self.relative, "ticks": self.ticks, "wall_share": self.wall_share,
                "seen": self.seen, "worst": self.worst}


@frozen
class NoiseModel:
    """Per family, the largest change seen between runs of the same inputs (``Bound``); ``runs``: the runs
    it was measured on, ``kernels``: how many same-input sets (kernels), ``refined``: runs of the user's own
    added (``refine``)."""

    families: dict
    runs: int
    kernels: int
    sets: tuple = ()
    refined: int = 0
    source: str = "samples/"

    def bound(self, family: str | None) -> Bound | None:
        return self.families.get(family) if family else None

    def refine(self, obs: list[tuple], runs: int = 0) -> "NoiseModel":
        """The model widened by the user's own same-input observations (``observations`` of ``runs`` runs): a
        family's bound is the larger of the shipped one and theirs."""
        if not obs and not runs:
            return self
        mine = fit(obs)
        fams = dict(self.families)
        for name, b in mine.items():
            old = fams.get(name)
            if old is None:
                fams[name] = b
            else:
                fams[name] = Bound(max(old.relative, b.relative), max(old.ticks, b.ticks),
                                   max(old.wall_share, b.wall_share), old.seen + b.seen,
                                   b.worst if b.relative > old.relative else old.worst)
        return replace(self, families=fams, refined=self.refined + (runs or len({o[5] for o in obs})))

    def describe(self) -> str:
        """'64 same-input runs of 15 kernels' (+ 'and N of yours')."""
        mine = f" and {self.refined} of yours" if self.refined else ""
        return f"{self.runs} same-input runs of {self.kernels} kernels{mine}"

    def to_dict(self) -> dict:
        return {"schema": MODEL_SCHEMA, "source": self.source, "runs": self.runs, "kernels": self.kernels,
                "floors": {"ticks": MIN_TICKS, "wall_share": MIN_IMPACT},
                "families": {k: self.families[k].to_dict() for k in sorted(self.families)},
                "sets": [list(s) for s in self.sets]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=False, ensure_ascii=False) + "\n"

    @classmethod
    def from_dict(cls, doc: dict) -> "NoiseModel":
        fams = {k: Bound(float(v["relative"]), float(v["ticks"]), float(v["wall_share"]), int(v["seen"]),
                         str(v.get("worst", ""))) for k, v in doc["families"].items()}
        return cls(fams, int(doc["runs"]), int(doc["kernels"]), tuple(tuple(s) for s in doc.get("sets", ())),
                   source=str(doc.get("source", "")))


@lru_cache(maxsize=1)
def noise_model() -> NoiseModel:
    """The model shipped with ktrace (``noise_model.json``; ``scripts/build_noise_model.py`` rebuilds it)."""
    return NoiseModel.from_dict(json.loads(MODEL_PATH.read_text(encoding="utf-8")))


def _margin(b: Bound, value: float, tick_ns: float, unit_ns: float, per_ns: float | None,
            wall_ns: float | None) -> tuple[float, str]:
    """A family's margin for one figure, in its unit, and its words (``model.thresholds.margin_of``: the findings'
    calibration uses the same rule)."""
    return margin_of((b.relative, b.ticks, b.wall_share), value, tick_ns, unit_ns, per_ns, wall_ns)


def noise_margin(family: str, value: float, tick_ns: float, *, unit_ns: float = 1.0,
                 kernel_ns_per_unit: float | None = None, wall_ns: float | None = None,
                 model: NoiseModel | None = None) -> float | None:
    """How far a figure of ``family`` with ``value`` moves between runs of the same inputs, at most, in the
    figure's own unit: the smaller of its relative bound (x |value|) and its kernel-time bound (wall share x
    ``wall_ns``, never under ticks x ``tick_ns``). ``unit_ns``: ns per unit of the figure (1 for ns, 1000 for
    µs, the mean slice for a ratio); ``kernel_ns_per_unit``: kernel time one unit stands for (default
    ``unit_ns``; x instances for a per-instance mean); ``wall_ns``: the kernel wall (without it, the relative
    bound alone). None: the family is not modelled. A change beyond it was never seen between same-input runs
    (above the floors: 2 ticks, 1% of the kernel wall)."""
    b = (model or noise_model()).bound(family)
    if b is None:
        return None
    per = kernel_ns_per_unit if kernel_ns_per_unit is not None else unit_ns
    return _margin(b, value, tick_ns, unit_ns, per, wall_ns)[0]


def _scales(figure: str, kernel: bool, ctx: dict) -> tuple[float, float]:
    """(µs per unit, kernel µs per unit) of a figure: ctx has 'n' (instances), 'mean_dur_us'."""
    if kernel:
        return 1.0, 1.0
    if figure in RATIOS:
        return ctx["mean_dur_us"], ctx["mean_dur_us"] * ctx["n"]
    return 1.0, (ctx["n"] if figure in PER_INSTANCE else 1.0)


def margin_for(figure: str, before: float, after: float, ctx: dict, *, kernel: bool = False,
               model: NoiseModel | None = None) -> tuple[float, str] | None:
    """The model's margin for a change of ``figure`` from ``before`` to ``after`` (the smallest of its family's
    bounds, on the larger of the two values) and its words ('34.4% of the figure'); None: not modelled.
    ctx: 'tick_us', 'wall_us', 'n' (instances), 'mean_dur_us'."""
    model = model or noise_model()
    b = model.bound(family_of(figure, kernel))
    unit, per = _scales(figure, kernel, ctx)
    if b is None or not unit:
        return None
    value = max(abs(before), abs(after))
    return _margin(b, value, ctx["tick_us"] * 1e3, unit * 1e3, per * 1e3, None if kernel else ctx["wall_us"] * 1e3)


def modelled(figure: str, before: float, after: float, floors: list[float], ctx: dict, *, kernel: bool = False,
             model: NoiseModel | None = None) -> Judgement:
    """One run per side judged by the model: significant when the change clears the floors and is beyond the
    largest same-input change of its family (``noise_margin``); ``basis`` names the bound in words.
    ctx: 'tick_us', 'wall_us', 'n', 'mean_dur_us'. Not modelled: not judged."""
    m = margin_for(figure, before, after, ctx, kernel=kernel, model=model)
    if m is None:
        return not_judged(after - before, floors)
    margin, words = m
    delta = abs(after - before)
    floor = max(floors, default=0.0)
    significant = delta > 0 and delta >= floor and delta > margin
    return Judgement(significant, max(margin, floor), "model", None, words)


def _val(v):
    v = getattr(v, "value", v)
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def _run_facts(cap) -> tuple:
    """(source, tick_us, wall_us, kernel values, phase values) of a Capture, values as plain floats."""
    a = cap.analysis
    kv = {k: _val(v) for k, v in cap.kernel_values.items()}
    pv = {ph: {k: _val(v) for k, v in d.items()} for ph, d in cap.phase_values.items()}
    return str(a.source), float(a.tick_ns) / 1e3, (a.kernel.wall_ns or 0) / 1e3, kv, pv, cap.timing


def observations(captures, label: str = "") -> list[tuple]:
    """Every pair of runs of the same inputs (Captures): per figure that changed beyond the floors (2 ticks,
    1% of the kernel wall; the kernel's medians: 1% of themselves), (family, relative, ticks, wall share,
    figure, label). Runs that carry one timing session (``record_runs``) give no timing observation."""
    runs = [_run_facts(c) for c in captures]
    out = []
    for r1, r2 in itertools.combinations(runs, 2):
        tick, wall = max(r1[1], r2[1]), max(r1[2], r2[2])
        if not tick or not wall:
            continue
        one_session = r1[5] is not None and r2[5] is not None and replace(r1[5], source="") == replace(r2[5],
                                                                                                      source="")
        for fig, fam in KERNEL_FAMILIES.items():
            a, b = r1[3].get(fig), r2[3].get(fig)
            if a is None or b is None or (fig != "wall_us" and one_session):
                continue
            d, v = abs(a - b), max(abs(a), abs(b))
            if v and d >= MIN_IMPACT * v and (fig != "wall_us" or d >= MIN_TICKS * tick):
                # the timings are CUDA-event medians, not timeline ticks: no tick bound for them
                out.append((fam, d / v, d / tick if fig == "wall_us" else 0.0, d / v, f"kernel.{fig}", label))
        for ph in r1[4]:
            p1, p2 = r1[4][ph], r2[4].get(ph)
            if p2 is None:
                continue
            ctx = {"n": max(p1.get("instances") or 1, p2.get("instances") or 1),
                   "mean_dur_us": max(p1.get("mean_dur_us") or 0.0, p2.get("mean_dur_us") or 0.0)}
            for fig, fam in FAMILIES.items():
                src = "critical_us" if fig == "critical_share" else fig  # a share is judged by its time
                if fig == "critical_share":
                    continue
                a, b = p1.get(src), p2.get(src)
                if a is None or b is None:
                    continue
                unit, per = _scales(fig, False, ctx)
                d, v = abs(a - b), max(abs(a), abs(b))
                ticks, share = d * unit / tick, d * per / wall
                if v and ticks >= MIN_TICKS and share >= MIN_IMPACT:
                    out.append((fam, d / v, ticks, share, f"{ph}.{fig}", label))
    return out


def fit(obs: list[tuple]) -> dict:
    """Per family, the largest of each bound over the observations (rounded up to 4 significant digits)."""
    out = {}
    for fam in sorted({o[0] for o in obs}):
        mine = [o for o in obs if o[0] == fam]
        worst = max(mine, key=lambda o: (o[1], o[5], o[4]))
        out[fam] = Bound(_up(max(o[1] for o in mine)), _up(max(o[2] for o in mine)), _up(max(o[3] for o in mine)),
                         len(mine), f"{worst[5]}: {worst[4]}".lstrip(": "))
    return out
