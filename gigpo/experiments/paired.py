"""Paired statistics for seed-matched comparisons: run k of algorithm A against run k of algorithm B.

With a shared warm-up and the same task seeds, seed k of two algorithms differs only in what the
algorithms do, so the per-seed differences cancel the variation between seeds that unpaired tests
(Welch) carry. The functions here are plain wrappers around scipy that also say when n is too small.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np

CONFIDENCE = 0.95
DIFF_DECIMALS = 12
WILCOXON_MIN_PAIRS = 3
"""Fewer non-zero differences than this give no Wilcoxon test: the smallest exact two-sided p-value
with n pairs is 2 / 2^n (0.25 at n = 3, 0.0625 at n = 5, below 0.05 only from n = 6 on)."""


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(mean, low, high): mean +- t_{(1+c)/2, n-1} * s / sqrt(n); low = high = nan for fewer than 2 values."""
    from scipy import stats

    x = np.asarray([v for v in values if not math.isnan(v)], dtype=np.float64)
    if len(x) == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(x.mean())
    if len(x) < 2:
        return mean, float("nan"), float("nan")
    half = float(stats.t.ppf((1 + confidence) / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return mean, mean - half, mean + half


@dataclass(frozen=True)
class PairedStats:
    """A - B over the seeds both sides have a finite value for."""

    seeds: list[int]
    diffs: list[float]
    mean: float
    ci_low: float
    ci_high: float
    t: float               # paired t statistic (nan for fewer than 2 pairs or zero spread)
    p_t: float             # two-sided p of the paired t-test (scipy.stats.ttest_rel)
    p_wilcoxon: Optional[float]   # two-sided Wilcoxon signed-rank p; None when n is too small

    @property
    def n(self) -> int:
        return len(self.diffs)


def paired_stats(a: Mapping[int, float], b: Mapping[int, float], confidence: float = CONFIDENCE) -> PairedStats:
    """Per-seed differences a[s] - b[s], their mean and t-interval, a paired t-test and a Wilcoxon test."""
    from scipy import stats

    seeds = sorted(s for s in a if s in b and not math.isnan(a[s]) and not math.isnan(b[s]))
    xa = np.asarray([a[s] for s in seeds], dtype=np.float64)
    xb = np.asarray([b[s] for s in seeds], dtype=np.float64)
    # success rates are multiples of 1/episodes: rounding drops float noise, so equal differences are equal
    # (no spread: no t-test) and ties and zeros are seen as such by the signed-rank test
    diffs = np.round(xa - xb, DIFF_DECIMALS)
    mean, low, high = t_interval(diffs.tolist(), confidence)
    t_stat = p_t = float("nan")
    if len(seeds) >= 2 and np.ptp(diffs) > 0:
        res = stats.ttest_rel(xa, xb)
        t_stat, p_t = float(res.statistic), float(res.pvalue)
    p_w = None
    if np.count_nonzero(diffs) >= WILCOXON_MIN_PAIRS:
        p_w = float(stats.wilcoxon(diffs).pvalue)
    diffs = diffs.tolist()
    return PairedStats(seeds, diffs, mean, low, high, t_stat, p_t, p_w)


def mean_band(curves: Sequence[tuple[Sequence[float], Sequence[float]]], grid: np.ndarray,
              confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and t-interval across curves at each grid point (each curve linearly interpolated onto `grid`)."""
    values = np.asarray([np.interp(grid, xs, ys) for xs, ys in curves], dtype=np.float64)
    bands = [t_interval(values[:, j].tolist(), confidence) for j in range(len(grid))]
    mean, low, high = (np.asarray(col) for col in zip(*bands))
    return mean, low, high
