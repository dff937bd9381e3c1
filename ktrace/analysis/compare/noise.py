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
4. **model** (noise_model.py): one run per side (or too few for a test): the largest change seen between
   runs of the same inputs (``noise_model.json``, built by ``scripts/build_noise_model.py`` from the same-input sets in
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

import math

import numpy as np
from ...core.records import frozen

__all__ = ["MIN_TICKS", "MIN_IMPACT", "ALPHA", "SESSION_NOISE", "MAX_RUNS", "Judgement", "t_test", "runs_test",
           "reps_test", "assumed", "not_judged", "runs_needed", "SD_PER_P10_P90"]

MIN_TICKS = 2
MIN_IMPACT = 0.01
ALPHA = 0.01
# Sessions of the same inputs (samples/: three H200 leases) moved the unprofiled control by up to 1.4% and
# the profiled build by up to 1.1%, two to three times their own reps' p10-p90.
SESSION_NOISE = 0.02
MAX_RUNS = 20
# p90 - p10 of a normal distribution is 2.563 standard deviations.
SD_PER_P10_P90 = 1 / 2.5631


@frozen
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
