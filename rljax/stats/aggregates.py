"""Aggregate performance over runs and tasks (point estimates, float64, exact).

All functions take a score array shaped ``[num_runs, num_tasks]`` (rliable's convention:
row ``n`` is run/seed ``n``, column ``m`` is task ``m``) and return a Python float.

Precision: point estimates are computed with numpy in float64, whatever JAX's global
configuration says (``jax_enable_x64`` is never touched), so they equal rliable 1.2.0's to
a relative 1e-12 (tested). The bootstrap replicates behind interval estimates
(:mod:`rljax.stats.intervals`) run in JAX in the default float dtype (float32 unless x64 is
enabled): their Monte Carlo error (~1/sqrt(reps)) dwarfs float32 rounding.

Source: Agarwal, Schwarzer, Castro, Courville, Bellemare, "Deep Reinforcement Learning at
the Edge of the Statistical Precipice", NeurIPS 2021 (https://arxiv.org/abs/2108.13264).
"""

from __future__ import annotations

import numpy as np

from rljax.stats._validation import check_nan_policy, check_scores


def _task_means(scores: np.ndarray, nan_policy: str) -> np.ndarray:
    if nan_policy == "omit":
        return np.nanmean(scores, axis=0)
    return np.mean(scores, axis=0)


def _pooled(scores: np.ndarray, nan_policy: str) -> np.ndarray:
    flat = scores.reshape(-1)
    if nan_policy == "omit":
        flat = flat[~np.isnan(flat)]
    return flat


def aggregate_mean(scores, *, nan_policy: str = "raise") -> float:
    """Mean over tasks of the per-task mean score.

    ``mean = (1/M) sum_m (1/N) sum_n x[n, m]``.

    Args:
      scores: ``[num_runs, num_tasks]`` scores.
      nan_policy: ``"raise"`` (default) rejects NaN; ``"omit"`` treats NaN as missing runs.

    Returns:
      The aggregate mean (float64).

    Source: Agarwal et al. 2021, Sec. 4.3 (``rliable.metrics.aggregate_mean``).
    """
    check_nan_policy(nan_policy)
    scores = check_scores(scores, nan_policy=nan_policy)
    return float(np.mean(_task_means(scores, nan_policy)))


def aggregate_median(scores, *, nan_policy: str = "raise") -> float:
    """Median over tasks of the per-task mean score.

    ``median = median_m ((1/N) sum_n x[n, m])``.

    Args:
      scores: ``[num_runs, num_tasks]`` scores.
      nan_policy: ``"raise"`` (default) rejects NaN; ``"omit"`` treats NaN as missing runs.

    Returns:
      The median of task means (float64).

    Source: Agarwal et al. 2021, Sec. 4.3 (``rliable.metrics.aggregate_median``).
    """
    check_nan_policy(nan_policy)
    scores = check_scores(scores, nan_policy=nan_policy)
    return float(np.median(_task_means(scores, nan_policy)))


def aggregate_trimmed_mean(scores, proportion: float = 0.25, *, nan_policy: str = "raise") -> float:
    """Trimmed mean of all ``N*M`` run scores pooled across tasks.

    With ``K = N*M`` pooled scores sorted ascending ``x_(1) <= ... <= x_(K)`` and
    ``L = floor(proportion * K)``: ``trimmed = (1/(K - 2L)) sum_{k=L+1}^{K-L} x_(k)``
    (whole scores are cut, as in ``scipy.stats.trim_mean``).

    Args:
      scores: ``[num_runs, num_tasks]`` scores.
      proportion: fraction cut from each end, in ``[0, 0.5)``.
      nan_policy: ``"raise"`` (default) rejects NaN; ``"omit"`` drops NaN before pooling.

    Returns:
      The trimmed mean (float64).

    Source: Agarwal et al. 2021, Sec. 4.3; Tukey & McLaughlin 1963.
    """
    check_nan_policy(nan_policy)
    if not 0.0 <= float(proportion) < 0.5:
        raise ValueError(f"proportion must be in [0, 0.5), got {proportion!r}")
    scores = check_scores(scores, nan_policy=nan_policy)
    flat = np.sort(_pooled(scores, nan_policy))
    cut = int(proportion * flat.size)
    return float(np.mean(flat[cut : flat.size - cut]))


def aggregate_iqm(scores, *, nan_policy: str = "raise") -> float:
    """Interquartile mean: the 25 % trimmed mean of all run scores pooled across tasks.

    ``IQM = (1/(K - 2L)) sum_{k=L+1}^{K-L} x_(k)`` with ``K = N*M``, ``L = floor(K/4)``.

    Args:
      scores: ``[num_runs, num_tasks]`` scores.
      nan_policy: ``"raise"`` (default) rejects NaN; ``"omit"`` drops NaN before pooling.

    Returns:
      The IQM (float64).

    Source: Agarwal et al. 2021, Sec. 4.3 (``rliable.metrics.aggregate_iqm``).
    """
    return aggregate_trimmed_mean(scores, 0.25, nan_policy=nan_policy)


def aggregate_optimality_gap(scores, gamma: float = 1.0, *, nan_policy: str = "raise") -> float:
    """Optimality gap: how far run scores fall short of a target ``gamma`` on average.

    ``gap = gamma - (1/(N*M)) sum_{n,m} min(x[n, m], gamma)`` (lower is better).

    Args:
      scores: ``[num_runs, num_tasks]`` scores.
      gamma: the target score (1 for human-normalised scores); scores above it count as
        ``gamma``.
      nan_policy: ``"raise"`` (default) rejects NaN; ``"omit"`` drops NaN before pooling.

    Returns:
      The optimality gap (float64).

    Source: Agarwal et al. 2021, Sec. 4.3 (``rliable.metrics.aggregate_optimality_gap``).
    """
    check_nan_policy(nan_policy)
    gamma = float(gamma)
    if not np.isfinite(gamma):
        raise ValueError(f"gamma must be a finite number, got {gamma!r}")
    scores = check_scores(scores, nan_policy=nan_policy)
    return float(gamma - np.mean(np.minimum(_pooled(scores, nan_policy), gamma)))
