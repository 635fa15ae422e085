"""Aggregate metrics with ``rliable.metrics``' names, signatures and values.

Each function accepts a numpy array (or anything ``np.asarray`` takes) *or* a JAX array:

* numpy in, numpy out: the same float64 operations, in the same order, as rliable 1.2.0,
  so the values are bitwise equal to rliable's (tested), NaN in gives NaN out (rliable
  does the same), and any rank rliable accepts is accepted here (a ``[N, M, K]`` array
  gives per-checkpoint means and medians, as in rliable).
* JAX in (a ``jax.Array`` or a tracer), JAX out: a traceable ``jnp`` version of the same
  formula, so a metric function written with these (``lambda x:
  jnp.stack([metrics.aggregate_iqm(x), metrics.aggregate_mean(x)])``) runs on rljax's
  vectorised bootstrap in :mod:`rljax.stats.rliable.library` instead of a Python loop.

Scores are ``[num_runs N, num_tasks M]``: row ``n`` is run ``n``, column ``m`` task ``m``.

Source: Agarwal, Schwarzer, Castro, Courville, Bellemare, "Deep Reinforcement Learning at
the Edge of the Statistical Precipice", NeurIPS 2021, Sec. 4.3 (https://arxiv.org/abs/2108.13264).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.stats


def _is_jax(*arrays: Any) -> bool:
    return any(isinstance(a, jax.Array) for a in arrays)


def aggregate_mean(scores):
    """Mean over tasks of the per-task mean score.

    ``mean = (1/M) sum_m (1/N) sum_n x[n, m]``.

    Args:
      scores: ``[N, M]`` scores (``[N, M, ...]``: one value per trailing index).

    Returns:
      The aggregate mean (numpy float64 for numpy input, a JAX scalar for JAX input).
    """
    if _is_jax(scores):
        return jnp.mean(jnp.mean(scores, axis=0), axis=0)
    return np.mean(np.mean(scores, axis=0, keepdims=False), axis=0)


def aggregate_median(scores):
    """Median over tasks of the per-task mean score.

    ``median = median_m ((1/N) sum_n x[n, m])``.

    Args:
      scores: ``[N, M]`` scores (``[N, M, ...]``: one value per trailing index).

    Returns:
      The median of task means.
    """
    if _is_jax(scores):
        return jnp.median(jnp.mean(scores, axis=0), axis=0)
    return np.median(np.mean(scores, axis=0, keepdims=False), axis=0)


def aggregate_optimality_gap(scores, gamma=1):
    """Optimality gap: how far scores fall short of ``gamma`` on average (lower is better).

    ``gap = gamma - (1/(N M)) sum_{n,m} min(x[n, m], gamma)``.

    Args:
      scores: ``[N, M]`` scores (any rank: all values are pooled).
      gamma: target score; scores above it count as ``gamma``.

    Returns:
      The optimality gap.
    """
    if _is_jax(scores):
        return gamma - jnp.mean(jnp.minimum(scores, gamma))
    return gamma - np.mean(np.minimum(scores, gamma))


def _jnp_trim_mean(scores, proportion: float):
    flat = jnp.sort(jnp.ravel(scores))
    total = flat.shape[0]
    cut = int(proportion * total)  # scipy.stats.trim_mean: whole values cut from each end
    value = jnp.mean(flat[cut : total - cut])
    return jnp.where(jnp.any(jnp.isnan(flat)), jnp.nan, value)


def aggregate_iqm(scores):
    """Interquartile mean: the 25 % trimmed mean of all ``K = N M`` scores pooled.

    ``IQM = (1/(K - 2L)) sum_{k=L+1}^{K-L} x_(k)``, ``L = floor(K / 4)`` (whole scores cut
    from each end, as ``scipy.stats.trim_mean``, which the numpy path calls).

    Args:
      scores: ``[N, M]`` scores (any rank: all values are pooled).

    Returns:
      The IQM (NaN if any score is NaN, JAX path; the numpy path is scipy's).
    """
    if _is_jax(scores):
        return _jnp_trim_mean(scores, 0.25)
    return scipy.stats.trim_mean(scores, proportiontocut=0.25, axis=None)


def _check_pair(scores_x, scores_y) -> None:
    for name, s in (("scores_x", scores_x), ("scores_y", scores_y)):
        if np.ndim(s) != 2:
            raise ValueError(f"{name} must have rank 2 [num_runs, num_tasks], got shape "
                             f"{np.shape(s)}")
    if np.shape(scores_x)[1] != np.shape(scores_y)[1]:
        raise ValueError("scores_x and scores_y must have the same number of tasks, got "
                         f"shapes {np.shape(scores_x)} and {np.shape(scores_y)}")


def probability_of_improvement(scores_x, scores_y):
    """Probability that a run of X beats a run of Y on a task, averaged over tasks.

    ``P(X > Y) = (1/M) sum_m (1/(N_x N_y)) sum_{i,j} ([x_im > y_jm] + 1/2 [x_im = y_jm])``,
    the Mann-Whitney U of each task over ``N_x N_y``. The numpy path counts the pairs (the
    same float64 values as rliable's ``scipy.stats.mannwhitneyu``, faster); a task with a
    NaN score gives NaN, as in rliable.

    Args:
      scores_x: ``[N_x, M]`` scores of X.
      scores_y: ``[N_y, M]`` scores of Y (same tasks, any number of runs).

    Returns:
      ``P(X > Y)`` in ``[0, 1]``.

    Raises:
      ValueError: ranks other than 2, or different numbers of tasks.
    """
    _check_pair(scores_x, scores_y)
    if _is_jax(scores_x, scores_y):
        x = jnp.asarray(scores_x)[:, None, :]
        y = jnp.asarray(scores_y)[None, :, :]
        per_task = jnp.mean((x > y) + 0.5 * (x == y), axis=(0, 1))
        nan = jnp.any(jnp.isnan(x), axis=(0, 1)) | jnp.any(jnp.isnan(y), axis=(0, 1))
        return jnp.mean(jnp.where(nan, jnp.nan, per_task))
    x = np.asarray(scores_x)
    y = np.asarray(scores_y)
    probs = []
    for task in range(x.shape[1]):
        a, b = x[:, task], y[:, task]
        if np.isnan(a).any() or np.isnan(b).any():
            probs.append(np.nan)
            continue
        greater = np.count_nonzero(a[:, None] > b[None, :])
        ties = np.count_nonzero(a[:, None] == b[None, :])
        probs.append((greater + 0.5 * ties) / (a.shape[0] * b.shape[0]))
    return np.mean(probs)


__all__ = [
    "aggregate_iqm",
    "aggregate_mean",
    "aggregate_median",
    "aggregate_optimality_gap",
    "probability_of_improvement",
]
