"""When is a before/after change real? The noise model of ``ktrace diff`` (docs/ci.md states it for users).

A change of a timing figure is significant only when it passes every test below, each from evidence:

1. **the timer**: |change| >= ``MIN_TICKS`` (2) timer ticks (a ratio: 2 ticks / mean slice);
2. **the kernel's own jitter**: |change| > the capture's relative launch-to-launch spread (p10-p90 / median
   of the sidecar's timed repetitions of the profiled build) x the figure's value;
3. **the impact floor**: the kernel time the change stands for (a per-instance figure x its instances, a
   ratio x mean slice x instances, a total as it is) >= ``MIN_IMPACT`` (1%) of the kernel wall;
4. **the spread**: with at least ``RANK_MIN`` (5) values on each side (a phase's instances, or runs), a
   Mann-Whitney rank test over them gives p < ``ALPHA`` (0.01); with fewer, |change| > the wider side's
   spread (p10-p90 of instances, max - min of runs, p90 - p50 of a boundary's waits, p10-p90 of timed
   repetitions).

Counts are exact (any change is one). A figure and its total (``wall_us``, ``total_wall_us``;
``critical_us``, ``critical_share``) share one verdict; the last finisher's block, stability and distinct
count share one, which is a change only when a side has a clear straggler (see ``clear_straggler``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["MIN_TICKS", "MIN_IMPACT", "RANK_MIN", "ALPHA", "Judgement", "rank_test", "judge", "spread_of"]

MIN_TICKS = 2
MIN_IMPACT = 0.01
RANK_MIN = 5
ALPHA = 0.01


@dataclass(frozen=True)
class Judgement:
    """significant: the change passed every test; noise: the largest threshold it had to exceed, in the
    figure's unit; test: 'rank' (rank test over instances or runs), 'spread' (too few values to rank:
    the spread), 'exact' (counts), 'tied' (follows another figure's verdict); p_value: the rank test's."""

    significant: bool
    noise: float
    test: str
    p_value: float | None = None


def rank_test(x, y) -> float:
    """Two-sided p-value of the Mann-Whitney U test (normal approximation with tie and continuity
    corrections) that x and y come from one distribution; 1.0 when every value is equal."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    n1, n2 = len(x), len(y)
    both = np.concatenate([x, y])
    order = np.argsort(both, kind="mergesort")
    ranks = np.empty(len(both))
    ranks[order] = np.arange(1, len(both) + 1)
    values, inverse, counts = np.unique(both, return_inverse=True, return_counts=True)
    mean_rank = np.bincount(inverse, weights=ranks) / counts  # tied values share their mean rank
    u = mean_rank[inverse][:n1].sum() - n1 * (n1 + 1) / 2
    n = n1 + n2
    var = n1 * n2 / 12 * ((n + 1) - float((counts ** 3 - counts).sum()) / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u - n1 * n2 / 2) - 0.5) / math.sqrt(var)
    return float(min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2))))


def spread_of(samples, runs: bool) -> float:
    """Runs: max - min; instances: p10-p90; 0 for fewer than two values."""
    v = np.asarray(samples, np.float64)
    if len(v) < 2:
        return 0.0
    return float(v.max() - v.min()) if runs else float(np.percentile(v, 90) - np.percentile(v, 10))


def judge(before: float, after: float, *, floors: list[float], noise: list[float], samples=((), ()),
          runs: bool = False, rank: bool = True) -> Judgement:
    """The verdict on ``after - before``: floors (ticks, jitter, impact) must all be exceeded, then the
    rank test (enough samples on both sides and ``rank``) or the spread (``noise``: each side's own, and
    the samples' spread)."""
    delta = abs(after - before)
    floor = max(floors, default=0.0)
    sb, sa = samples
    if rank and min(len(sb), len(sa)) >= RANK_MIN:
        p = rank_test(sb, sa)
        return Judgement(delta >= floor and delta > 0 and p < ALPHA, floor, "rank", p)
    spread = max([*noise, spread_of(sb, runs), spread_of(sa, runs)])
    threshold = max(floor, spread)
    return Judgement(delta >= floor and delta > spread and delta > 0, threshold, "spread")
