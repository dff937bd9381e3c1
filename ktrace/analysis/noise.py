"""When is a before/after change real? The noise model of ``ktrace diff`` (docs/ci.md states it for users).

A verdict needs an estimate of how much a second run of the same inputs would move the figure. The
instances of one launch are not such an estimate (same placement, same SMs, same clocks): their spread
does not bound what a second run does. What is one:

1. **runs**: several captures per side (``diff([a1, a2], [b1, b2])``): a t-test across the per-run values
   (Welch's; with one run on a side, the other side's variance pooled), p < ``ALPHA`` (0.01);
2. **timed repetitions** (the kernel's own medians ``profiled_us``/``control_us`` only): the sidecar's reps
   of each build (p10-p90 -> standard deviation, ``reps``), a t-test on them, and, because reps of one
   session do not bound how much another session (machine, clocks, temperature) moves either, the change
   must also exceed ``SESSION_NOISE`` (2%) of the median, the most that sessions of the same inputs have
   been measured to differ by (docs/ci.md);
3. **assumed**: a relative noise the user gives (``--assume-noise PCT``);
4. **model**: one run per side (or too few for a test): the largest change seen between runs of the same
   inputs (``noise_model.json``, built by ``scripts/build_noise_model.py`` from the same-input sets in
   samples/, refined by the user's own runs). Each figure family (imbalance, walls, skews, waits,
   critical-path time, ...) has three bounds: relative to the figure's value, in timer ticks, and in the
   kernel time it stands for as a share of the kernel wall. Every same-input change that cleared the floors
   stayed within all three, so a change beyond any one of them was never seen between runs of the same
   inputs: ``noise_margin`` is the relative bound or, where smaller, the kernel-time bound (the wall share,
   never under the tick bound).

Without any of them a timing change is *not judged* (``test: "none"``), unless it is under the floors
(``test: "floor"``, not significant). Every judged change must also exceed the floors: ``MIN_TICKS`` (2) timer ticks and, in the kernel time it stands for, ``MIN_IMPACT`` (1%)
of the kernel wall. Counts are exact. Which block finishes last is information, never a change.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

__all__ = ["MIN_TICKS", "MIN_IMPACT", "ALPHA", "SESSION_NOISE", "MAX_RUNS", "Judgement", "t_test", "runs_test",
           "reps_test", "assumed", "not_judged", "runs_needed", "SD_PER_P10_P90", "FAMILIES", "KERNEL_FAMILIES",
           "Bound", "NoiseModel", "noise_model", "noise_margin", "family_of", "observations", "fit", "modelled", "margin_for",
           "MODEL_SCHEMA", "MODEL_PATH"]

MIN_TICKS = 2
MIN_IMPACT = 0.01
ALPHA = 0.01
# Sessions of the same inputs (samples/: three H200 leases) moved the unprofiled control by up to 1.4% and
# the profiled build by up to 1.1%, two to three times their own reps' p10-p90.
SESSION_NOISE = 0.02
MAX_RUNS = 20
# p90 - p10 of a normal distribution is 2.563 standard deviations.
SD_PER_P10_P90 = 1 / 2.5631


@dataclass(frozen=True)
class Judgement:
    """significant: the change passed its test and every floor (None: not judged, no noise estimate);
    noise: the threshold it had to exceed, in the figure's unit; test: 'runs', 'reps', 'assumed', 'floor'
    (under the tick and impact floors) or 'none';
    p_value: the t-test's."""

    significant: bool | None
    noise: float
    test: str
    p_value: float | None = None
    basis: str = ""  # 'model': the bound the change was measured against, in words


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (continued fraction, modified Lentz)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _betainc(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for aa in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                   -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return front * h / a


def _t_p(t: float, df: float) -> float:
    """Two-sided p-value of Student's t with df degrees of freedom."""
    if not math.isfinite(t):
        return 0.0
    return float(min(1.0, _betainc(df / 2, 0.5, df / (df + t * t))))


def t_test(mean_b: float, sd_b: float, n_b: int, mean_a: float, sd_a: float, n_a: int) -> float | None:
    """Two-sided p-value that two means differ, from each side's mean, standard deviation and count:
    Welch's test with two or more on each side; with one on a side, Student's with the other side's
    variance for both. None when there is no variance to test with (one value on each side)."""
    if n_b < 2 and n_a < 2:
        return None
    delta = abs(mean_a - mean_b)
    if n_b < 2 or n_a < 2:
        sd, df = (sd_a, n_a - 1) if n_b < 2 else (sd_b, n_b - 1)
        se2 = sd * sd * (1 / n_b + 1 / n_a)
        dof = float(df)
    else:
        vb, va = sd_b * sd_b / n_b, sd_a * sd_a / n_a
        se2 = vb + va
        dof = se2 * se2 / ((vb * vb / (n_b - 1) if vb else 0.0) + (va * va / (n_a - 1) if va else 0.0) or math.inf)
    if se2 <= 0:
        return 1.0 if delta == 0 else 0.0
    return _t_p(delta / math.sqrt(se2), dof if math.isfinite(dof) else 1e9)


def _verdict(delta: float, floor: float, p: float | None, test: str, threshold: float) -> Judgement:
    if p is None:
        return not_judged()
    return Judgement(delta > 0 and delta >= floor and p < ALPHA, max(floor, threshold), test, p)


def runs_test(before, after, floors: list[float]) -> Judgement:
    """Several runs per side: a t-test across the per-run values (see ``t_test``) and the floors."""
    b, a = np.asarray(before, np.float64), np.asarray(after, np.float64)
    sd_b = float(b.std(ddof=1)) if len(b) > 1 else 0.0
    sd_a = float(a.std(ddof=1)) if len(a) > 1 else 0.0
    p = t_test(float(b.mean()), sd_b, len(b), float(a.mean()), sd_a, len(a))
    delta = abs(float(a.mean() - b.mean()))
    return _verdict(delta, max(floors, default=0.0), p, "runs", max(sd_b, sd_a))


def reps_test(before: float, sd_b: float, reps_b: int, after: float, sd_a: float, reps_a: int,
              session: float = SESSION_NOISE) -> Judgement:
    """A kernel median of one session per side: a t-test on the timed repetitions, and the change beyond
    ``session`` (a fraction) of the median, what another session of the same inputs may move it."""
    p = t_test(before, sd_b, reps_b, after, sd_a, reps_a)
    floor = session * max(abs(before), abs(after))
    return _verdict(abs(after - before), floor, p, "reps", 0.0)


def assumed(before: float, after: float, relative: float, floors: list[float]) -> Judgement:
    """The user's estimate of run-to-run noise (a fraction of the figure): the change must exceed it."""
    noise = relative * max(abs(before), abs(after))
    delta = abs(after - before)
    floor = max([noise, *floors])
    return Judgement(delta > 0 and delta > noise and delta >= floor, floor, "assumed")


def not_judged(delta: float = math.inf, floors=()) -> Judgement:
    """No estimate of run-to-run noise: not judged ('none'), unless the change is under the floors (ticks,
    impact), which no noise makes significant ('floor': not significant)."""
    floor = max(floors, default=0.0)
    if abs(delta) < floor:
        return Judgement(False, floor, "floor")
    return Judgement(None, floor, "none")


def runs_needed(delta: float, sd: float | None) -> int | None:
    """Runs per side with which a change of ``delta`` would pass the t-test, if each run varies by ``sd``
    (a guess: the launch-to-launch spread of the timed reps); None when unknown or more than MAX_RUNS."""
    if sd is None or not delta:
        return None
    if sd <= 0:
        return 2
    for n in range(2, MAX_RUNS + 1):
        if (t_test(0.0, sd, n, abs(delta), sd, n) or 1.0) < ALPHA:
            return n
    return None



# -- the measured model: how far a figure moves between runs of the same inputs ------------------------------

MODEL_SCHEMA = "ktrace.noise_model/1"
MODEL_PATH = Path(__file__).with_name("noise_model.json")

# Phase figure -> family. Worst-instance figures (max_*) move more than the means and get families of their own;
# a total follows its mean (total_wall_us: wall), a share its time (critical_share: critical).
FAMILIES = {
    "imbalance": "imbalance", "max_imbalance": "worst_imbalance",
    "wall_us": "wall", "total_wall_us": "wall", "max_dur_us": "wall", "mean_dur_us": "wall",
    "excess_us": "skew", "start_skew_us": "skew", "end_skew_us": "skew", "last_lead_us": "skew",
    "max_excess_us": "worst_skew", "max_start_skew_us": "worst_skew", "max_end_skew_us": "worst_skew",
    "wait_after_us": "wait", "wait_before_us": "wait", "max_wait_us": "worst_wait",
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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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
    """A family's margin for one figure, in its unit, and its words: the relative bound, or, where smaller, the
    kernel time bound (the wall share, never under the tick bound: on a short kernel a few ticks are most of
    what a share allows). Every same-input change stayed within each bound, so within this too."""
    rel = (b.relative * abs(value), f"{b.relative:.1%} of the figure")
    kernel = []
    if wall_ns and per_ns and b.wall_share:
        kernel.append((b.wall_share * wall_ns / per_ns, f"{b.wall_share:.1%} of the kernel wall"))
        if tick_ns and unit_ns and b.ticks:
            kernel.append((b.ticks * tick_ns / unit_ns, f"{b.ticks:,.0f} timer ticks"))
    return min([rel, max(kernel, key=lambda x: x[0])] if kernel else [rel], key=lambda x: x[0])


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
