"""The paired test of two variants timed interleaved in one session (``ktrace run --ab``): numpy only.

    t = paired_test(before_us, after_us)          # pair i: before_us[i] and after_us[i], launched back to back
    t.change, t.mean_diff_us, t.ci_us, t.relative_ci, t.p_value

Each pair's difference (after - before) cancels what the two launches of a pair share: the clock, the
temperature, the other work on the GPU. The test is Student's t on those differences: their mean, its
confidence interval (mean +- t(n-1) * sd / sqrt(n)) and a two-sided p-value, leaving out outlier pairs (a
difference more than 6 normal-scaled median absolute deviations from the median: a launch that hit a hiccup,
4 ms instead of 250 µs, would widen the interval past any 1% change; under normal noise it leaves out none) and
saying how many. Beside it, the median of the
differences with its distribution-free interval (the sign test: order statistics of a Binomial(n, 1/2)),
which a few outlier pairs cannot move; when the two disagree the text says so.

The verdict adds a practical threshold (``threshold_pct`` of the before mean): an interval within +-threshold
is 'no change' (said so when it excludes zero), a significant mean change of the threshold or more is
'slower' or 'faster', anything else 'inconclusive' (more pairs narrow it).
"""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np

from .choices import DEFAULT_THRESHOLD_PCT
from .errors import InputError
from .records import frozen

__all__ = ["PairedTest", "paired_test", "t_quantile", "t_two_sided_p", "sign_interval", "MIN_PAIRS",
           "DEFAULT_THRESHOLD_PCT"]

MIN_PAIRS = 10
OUTLIER_MADS = 6  # a pair whose difference lies this many (normal-scaled) MADs from the median is an outlier


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betai(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln) * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, dof: int) -> float:
    """P(|T| >= |t|) for Student's t with ``dof`` degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return _betai(dof / 2.0, 0.5, dof / (dof + t * t))


def t_quantile(confidence: float, dof: int) -> float:
    """The two-sided critical value: P(|T| <= q) = confidence."""
    if not 0.0 < confidence < 1.0 or dof < 1:
        raise InputError(f"a t quantile needs 0 < confidence < 1 and dof >= 1 (got {confidence}, {dof})")
    alpha = 1.0 - confidence
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, dof) > alpha:
        hi *= 2.0
    for _ in range(200):  # the p-value falls as t grows: bisect
        mid = 0.5 * (lo + hi)
        if t_two_sided_p(mid, dof) > alpha:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * hi:
            break
    return 0.5 * (lo + hi)


def sign_interval(diffs, confidence: float) -> tuple[float, float, float]:
    """The median of ``diffs`` and its distribution-free interval: order statistics k and n+1-k (1-based), k the
    largest with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2. Its coverage is at least ``confidence``."""
    d = np.sort(np.asarray(diffs, np.float64))
    n = len(d)
    alpha = (1.0 - confidence) / 2.0
    cdf, k, total = 0.0, 0, 2.0 ** n
    for j in range(n // 2 + 1):
        cdf += math.comb(n, j) / total
        if cdf > alpha:
            break
        k = j + 1
    med = float(np.median(d))
    if k == 0:
        return med, -math.inf, math.inf
    return med, float(d[k - 1]), float(d[n - k])


@frozen
class PairedTest:
    """after - before over n interleaved pairs, in microseconds (relative figures: of the before mean).

    change: 'slower' / 'faster' (the interval excludes zero and the mean change is the threshold or more),
    'no change' (the interval lies within +-threshold, whether or not it excludes zero) or 'inconclusive'
    (neither: the interval reaches past the threshold)."""

    pairs: int
    confidence: float
    threshold_pct: float
    before_mean_us: float
    after_mean_us: float
    before_median_us: float
    after_median_us: float
    mean_diff_us: float
    sd_diff_us: float
    ci_us: tuple[float, float]
    t: float
    dof: int
    p_value: float
    median_diff_us: float
    median_ci_us: tuple[float, float]
    significant: bool
    change: str
    excluded: tuple[int, ...] = ()  # outlier pairs left out of the t-test (indices)

    @property
    def relative(self) -> float:
        return self.mean_diff_us / self.before_mean_us

    @property
    def relative_ci(self) -> tuple[float, float]:
        return self.ci_us[0] / self.before_mean_us, self.ci_us[1] / self.before_mean_us

    @property
    def tests_agree(self) -> bool:
        """The t interval and the sign test's interval both exclude zero on the same side, or both include it."""
        def side(lo, hi):
            return 1 if lo > 0 else -1 if hi < 0 else 0
        return side(*self.ci_us) == side(*self.median_ci_us)

    @property
    def p_text(self) -> str:
        return "p<0.001" if self.p_value < 0.001 else f"p={self.p_value:.3f}"

    @property
    def interval_text(self) -> str:
        lo, hi = self.relative_ci
        return f"{self.relative:+.2%} [{lo:+.2%}, {hi:+.2%}]"

    @property
    def how(self) -> str:
        """How it was judged, in words."""
        return (f"paired t-test on {self.pairs} interleaved pairs, {self.confidence:.0%} interval "
                f"{self.ci_us[0]:+,.2f} to {self.ci_us[1]:+,.2f} µs, {self.p_text}")

    @property
    def text(self) -> str:
        """The verdict in one line."""
        head = {"slower": "SLOWER", "faster": "FASTER", "no change": "no change",
                "inconclusive": "inconclusive"}[self.change]
        line = f"{head}: unprofiled {self.interval_text} ({self.how})"
        if self.change == "no change" and self.significant:
            line += f"; significant, but the interval lies within +-{self.threshold_pct:g}%"
        elif self.change == "no change":
            line += f"; the interval lies within +-{self.threshold_pct:g}%"
        elif self.change == "inconclusive":
            line += f"; the interval reaches past +-{self.threshold_pct:g}%: more pairs would narrow it"
        if self.excluded:
            n = len(self.excluded)
            line += (f"; {n} outlier pair{'s' if n != 1 else ''} (difference beyond {OUTLIER_MADS} MADs of the "
                     f"median) left out of the t-test, kept in the sign test")
        if not self.tests_agree and self.change in ("slower", "faster"):  # the verdict would rest on the t-test alone
            line += (f"; the median difference {self.median_diff_us:+,.2f} µs [{self.median_ci_us[0]:+,.2f}, "
                     f"{self.median_ci_us[1]:+,.2f}] (sign test) disagrees: outlier pairs?")
        return line

    def flipped(self) -> "PairedTest":
        """The same test read the other way round (before and after exchanged)."""
        change = {"slower": "faster", "faster": "slower"}.get(self.change, self.change)
        return PairedTest(self.pairs, self.confidence, self.threshold_pct, self.after_mean_us, self.before_mean_us,
                          self.after_median_us, self.before_median_us, -self.mean_diff_us, self.sd_diff_us,
                          (-self.ci_us[1], -self.ci_us[0]), -self.t, self.dof, self.p_value, -self.median_diff_us,
                          (-self.median_ci_us[1], -self.median_ci_us[0]), self.significant, change, self.excluded)

    def to_dict(self) -> dict:
        out = asdict(self)
        out.update(ci_us=list(self.ci_us), median_ci_us=list(self.median_ci_us), excluded=list(self.excluded),
                   relative=self.relative,
                   relative_ci=list(self.relative_ci), tests_agree=self.tests_agree, text=self.text)
        return out


def paired_test(before_us, after_us, *, confidence: float = 0.95,
                threshold_pct: float = DEFAULT_THRESHOLD_PCT) -> PairedTest:
    """The paired t-test of ``after_us[i] - before_us[i]`` (two equal-length sequences of kernel times in µs,
    element i of each timed in the same pair), with the sign test's interval of the median difference."""
    b = np.asarray(before_us, np.float64).ravel()
    a = np.asarray(after_us, np.float64).ravel()
    if len(b) != len(a):
        raise InputError(f"a paired test needs as many times after as before (got {len(b)} and {len(a)})")
    if len(b) < MIN_PAIRS:
        raise InputError(f"a paired test needs at least {MIN_PAIRS} pairs (got {len(b)}): time more pairs")
    if not (np.isfinite(b).all() and np.isfinite(a).all()) or b.mean() <= 0:
        raise InputError("a paired test needs finite, positive kernel times")
    if not 0.5 <= confidence < 1.0 or not 0.0 <= threshold_pct < 100.0:
        raise InputError(f"confidence {confidence!r}: between 0.5 and 1; threshold {threshold_pct!r}%: between 0 "
                         "and 100")
    d_all = a - b
    med_all = float(np.median(d_all))
    mad = 1.4826 * float(np.median(np.abs(d_all - med_all)))
    keep = np.abs(d_all - med_all) <= OUTLIER_MADS * mad if mad > 0 else np.ones(len(d_all), bool)
    if keep.sum() < MIN_PAIRS:
        keep[:] = True
    d = d_all[keep]
    n = len(d)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    q = t_quantile(confidence, n - 1)
    if se == 0.0:
        t = 0.0 if mean == 0.0 else math.copysign(math.inf, mean)
        p = 1.0 if mean == 0.0 else 0.0
    else:
        t = mean / se
        p = t_two_sided_p(t, n - 1)
    lo, hi = mean - q * se, mean + q * se
    med, mlo, mhi = sign_interval(d_all, confidence)
    significant = lo > 0.0 or hi < 0.0
    limit = threshold_pct / 100.0 * float(b[keep].mean())
    if significant and abs(mean) >= limit:
        change = "slower" if mean > 0 else "faster"
    elif -limit <= lo and hi <= limit:
        change = "no change"
    else:
        change = "inconclusive"
    return PairedTest(len(d_all), confidence, float(threshold_pct), float(b[keep].mean()), float(a[keep].mean()),
                      float(np.median(b)), float(np.median(a)), mean, sd, (lo, hi), t, n - 1, p, med, (mlo, mhi),
                      significant, change, tuple(int(i) for i in np.flatnonzero(~keep)))
