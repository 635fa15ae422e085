"""Paired comparisons: tests and power for two algorithms run on the same seeds.

Runs that share seed keys are *paired*: configurations of one grid (common random
numbers: config ``c``, seed ``i`` uses seed ``i``'s key) and arms run with the same base
seed on the same seed ids. Seed ``i`` of X and seed ``i`` of Y then share their task draw,
initialisation and sampling noise, so the per-seed differences ``d_i = x_i - y_i`` carry
the comparison and a test on them is typically far more powerful than an unpaired one
(the seed-to-seed variation cancels).

* :func:`paired_ttest`: ``t = dbar / (s_d / sqrt(n))`` with ``n - 1`` degrees of freedom
  (Student 1908), via ``scipy.stats.ttest_rel``.
* :func:`wilcoxon_signed_rank`: ranks of ``|d_i|`` over the non-zero differences, ``W+`` =
  the sum of the ranks of the positive ones (Wilcoxon 1945), p-value via
  ``scipy.stats.wilcoxon`` (exact null distribution for small ``n`` without ties or zeros,
  else the normal approximation with tie correction: scipy's automatic choice). Valid
  for any symmetric distribution of ``d`` under H0, e.g. exchangeable pairs.
* :func:`paired_t_power`, :func:`paired_t_seeds`: power of the paired t-test and the seeds
  it needs, from the noncentral t with noncentrality ``delta / (sd_d / sqrt(n))``.

The paired probability of improvement is
``rljax.stats.probability_of_improvement_ci(x, y, paired=True)`` (the bootstrap resamples
seed pairs jointly) and the paired mean difference interval is
``rljax.stats.paired_t_interval``.

Sources: Student, Biometrika 1908; Wilcoxon, Biometrics Bulletin 1945; Cohen 1988, Ch. 2
(power of the one-sample / paired t-test).
"""

from __future__ import annotations

import numpy as np
from scipy import stats as sps

from rljax.stats.comparisons import TestResult, _check_alternative
from rljax.stats.power import _positive, _probability, _smallest_seed_count, _t_test_power

__all__ = ["paired_t_power", "paired_t_seeds", "paired_ttest", "wilcoxon_signed_rank"]


def _pairs(x, y) -> tuple[np.ndarray, np.ndarray]:
    """``x [n]``, ``y [n]`` as float64, or a one-line ``ValueError`` naming the argument."""
    arrays = []
    for name, sample in (("x", x), ("y", y)):
        try:
            array = np.asarray(sample, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a numeric 1-D array, got "
                             f"{type(sample).__name__}") from None
        if array.ndim != 1:
            raise ValueError(f"{name} must be a 1-D array [n] of per-seed values, got shape "
                             f"{array.shape}")
        if not np.isfinite(array).all():
            where = int(np.argwhere(~np.isfinite(array))[0][0])
            raise ValueError(f"{name} has a non-finite value {array[where]} at index {where}")
        arrays.append(array)
    x, y = arrays
    if x.shape != y.shape:
        raise ValueError(f"y must have the same length as x (one value per shared seed), got "
                         f"{y.shape[0]} and {x.shape[0]}")
    if x.shape[0] < 2:
        raise ValueError(f"x and y must hold at least 2 pairs, got {x.shape[0]}")
    return x, y


def paired_ttest(x, y, *, alternative: str = "two-sided") -> TestResult:
    """Paired (dependent-samples) t-test of ``mean(x - y) = 0``.

    ``t = dbar / (s_d / sqrt(n))``, ``d_i = x_i - y_i``, ``s_d`` the sample standard
    deviation of ``d`` (``ddof=1``), ``df = n - 1``. ``t`` is NaN when every difference
    is zero (no evidence either way), infinite when all differences are equal and
    non-zero.

    Args:
      x: ``[n]`` per-seed values of X.
      y: ``[n]`` per-seed values of Y on the same seeds, in the same order.
      alternative: ``"two-sided"``, ``"less"`` or ``"greater"`` (X greater than Y).

    Returns:
      :class:`TestResult` ``(t, p-value, df)`` via ``scipy.stats.ttest_rel``.

    Raises:
      ValueError: one line naming ``x`` or ``y`` (not 1-D, non-finite, different lengths,
        fewer than 2 pairs) or ``alternative``.

    Source: Student, Biometrika 1908.
    """
    x, y = _pairs(x, y)
    res = sps.ttest_rel(x, y, alternative=_check_alternative(alternative))
    return TestResult(float(res.statistic), float(res.pvalue), float(x.shape[0] - 1))


def _positive_rank_sum(d: np.ndarray) -> float:
    """``W+`` of differences ``d [n]``: zeros dropped, ranks of ``|d|`` (ties share their
    mean rank) summed over the positive differences."""
    d = d[d != 0]
    return float(np.sum(sps.rankdata(np.abs(d))[d > 0]))


def wilcoxon_signed_rank(x, y, *, alternative: str = "two-sided") -> TestResult:
    """Wilcoxon signed-rank test of the paired differences ``d_i = x_i - y_i``.

    ``W+ = sum_{i: d_i > 0} rank(|d_i|)`` over the non-zero differences (ties share their
    mean rank). Under H0 (``d`` symmetric about 0) each sign is a fair coin given the
    ranks; the p-value is scipy's (exact for small samples without ties or zeros, else the
    normal approximation with tie correction). All differences zero: ``W+ = 0``, p = 1.

    Args:
      x: ``[n]`` per-seed values of X.
      y: ``[n]`` per-seed values of Y on the same seeds, in the same order.
      alternative: ``"two-sided"``, ``"less"`` or ``"greater"`` (X greater than Y).

    Returns:
      :class:`TestResult` ``(W+, p-value)``: ``W+`` for every ``alternative`` (scipy
      reports ``min(W+, W-)`` for the two-sided test), the p-value of
      ``scipy.stats.wilcoxon(x, y, alternative=...)``.

    Raises:
      ValueError: one line naming ``x`` or ``y`` (not 1-D, non-finite, different lengths,
        fewer than 2 pairs) or ``alternative``.

    Source: Wilcoxon, "Individual comparisons by ranking methods", Biometrics Bulletin
    1945; Pratt 1959 and Cureton 1967 (ties and zeros in the normal approximation).
    """
    x, y = _pairs(x, y)
    alternative = _check_alternative(alternative)
    statistic = _positive_rank_sum(x - y)
    if np.all(x == y):
        return TestResult(statistic, 1.0)
    res = sps.wilcoxon(x, y, alternative=alternative)
    return TestResult(statistic, float(res.pvalue))


def paired_t_power(delta: float, sd_diff: float, n: int, *, alpha: float = 0.05,
                   alternative: str = "two-sided") -> float:
    """Power of the paired t-test with ``n`` seed pairs to detect ``mean(x - y) = delta``.

    The statistic follows a noncentral t with ``n - 1`` degrees of freedom and
    noncentrality ``delta / (sd_diff / sqrt(n))``; power is the probability that it falls
    beyond the level-``alpha`` critical value(s).

    Args:
      delta: true mean of the per-seed differences (scalar, X minus Y).
      sd_diff: standard deviation of the per-seed differences (scalar > 0).
      n: seed pairs (>= 2).
      alpha: significance level.
      alternative: ``"two-sided"``, ``"greater"`` (X > Y) or ``"less"``.

    Returns:
      ``P(reject H0)`` (a float scalar).

    Source: Cohen 1988, Ch. 2 (the one-sample t-test on the differences).
    """
    sd_diff = _positive(sd_diff, "sd_diff")
    alpha = _probability(alpha, "alpha")
    alternative = _check_alternative(alternative)
    if isinstance(n, bool) or int(n) != n or int(n) < 2:
        raise ValueError(f"n must be an integer >= 2, got {n!r}")
    n = int(n)
    df, nc = n - 1, float(delta) / (sd_diff / np.sqrt(n))
    return _t_test_power(df, nc, alpha, alternative)


def paired_t_seeds(delta: float, sd_diff: float, *, alpha: float = 0.05, power: float = 0.8,
                   alternative: str = "two-sided", max_n: int = 1_000_000) -> int:
    """Smallest number of seed pairs for the paired t-test to reach ``power``.

    Solves ``paired_t_power(delta, sd_diff, n) >= power`` for the smallest ``n >= 2`` by
    bisection (power increases with ``n``).

    Args:
      delta: mean per-seed difference to detect (scalar, non-zero).
      sd_diff: standard deviation of the per-seed differences (scalar > 0).
      alpha: significance level.
      power: target power in (0, 1).
      alternative: ``"two-sided"``, ``"greater"`` or ``"less"``.
      max_n: give up above this many seeds (raises ``ValueError``).

    Returns:
      Seeds (pairs) needed, an int scalar.

    Source: Cohen 1988, Ch. 2.
    """
    power = _probability(power, "power")
    if float(delta) == 0.0:
        raise ValueError("delta must be non-zero (no sample size detects a zero difference)")

    def reaches(k):
        return paired_t_power(delta, sd_diff, k, alpha=alpha, alternative=alternative) >= power

    return _smallest_seed_count(reaches, max_n)
