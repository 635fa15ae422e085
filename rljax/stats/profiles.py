"""Performance profiles and sample-efficiency curves with stratified-bootstrap bands.

A performance profile (score distribution) is the fraction of runs, pooled over tasks,
whose score exceeds each threshold ``tau``: ``F(tau) = (1/(N*M)) sum_{n,m} [x_nm > tau]``
(the average-score variant uses task means). Bands are pointwise stratified-bootstrap
intervals, one bootstrap shared by all thresholds.

Sample-efficiency curves evaluate a metric at every checkpoint ``k`` of a score array
``[N, M, K]``. Unlike rliable, which resamples each checkpoint independently, a replicate
here draws each task's runs *once* and uses those runs at every checkpoint, so the
replicate curves are curves of resampled *runs*: any quantity computed across checkpoints
(area under the curve, a difference between two checkpoints, the step at which a
threshold is reached) has a valid bootstrap distribution through
:func:`sample_efficiency_replicates`.

Source: Agarwal et al., NeurIPS 2021, Sec. 4.2 (profiles) and Fig. 10 (curves); Dolan &
More, Math. Program. 2002 (performance profiles).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from rljax.stats._validation import (
    check_confidence,
    check_key,
    check_method,
    check_reps,
    check_scores,
)
from rljax.stats.bootstrap import Interval
from rljax.stats.intervals import (
    Metric,
    algorithm_key,
    interval_estimate,
    profile_metric,
    stratified_replicates,
)


def performance_profile(scores, taus, *, use_score_distribution: bool = True) -> np.ndarray:
    """Point estimate of a performance profile ``[T]`` (exact, float64).

    Args:
      scores: ``[N, M]`` scores.
      taus: ``[T]`` thresholds.
      use_score_distribution: run-score distribution (default) or average-score
        distribution (fraction of tasks whose mean score exceeds ``tau``).

    Returns:
      ``[T]`` fractions ``F(tau)``.

    Source: Agarwal et al. 2021, Sec. 4.2.
    """
    m = profile_metric(taus, use_score_distribution=use_score_distribution)
    return np.asarray(m.point(check_scores(scores), m.params), dtype=np.float64)


def performance_profiles(score_dict: Mapping[str, Any], taus, *, key: jax.Array,
                         reps: int = 2000, confidence: float = 0.95,
                         method: str = "percentile", use_score_distribution: bool = True,
                         task_bootstrap: bool = False) -> dict[str, Interval]:
    """Performance profiles with pointwise stratified-bootstrap bands.

    Args:
      score_dict: ``{algorithm: scores [N, M]}``.
      taus: ``[T]`` thresholds.
      key: JAX PRNG key (each algorithm folds in its name, see :mod:`intervals`).
      reps: number of resamples.
      confidence: band coverage (pointwise).
      method: ``"percentile"``, ``"basic"`` or ``"bca"``.
      use_score_distribution: run-score (default) or average-score distribution.
      task_bootstrap: also resample tasks.

    Returns:
      ``{algorithm: Interval(point [T], low [T], high [T])}``.

    Source: Agarwal et al. 2021, Sec. 4.2 (rliable ``create_performance_profile``).
    """
    key = check_key(key)
    m = profile_metric(taus, use_score_distribution=use_score_distribution)
    return {
        name: interval_estimate(scores, m, key=algorithm_key(key, name), reps=reps,
                                confidence=confidence, method=method,
                                task_bootstrap=task_bootstrap, name=name)
        for name, scores in score_dict.items()
    }


def sample_efficiency_replicates(scores, metric: str | Metric | Callable = "iqm", *,
                                 key: jax.Array, reps: int = 2000) -> np.ndarray:
    """Replicate curves ``[reps, K]`` of ``metric`` over checkpoints, runs resampled jointly.

    Args:
      scores: ``[N, M, K]`` scores at ``K`` checkpoints.
      metric: a metric name, :class:`Metric` or jnp callable ``[N, M] -> scalar``.
      key: JAX PRNG key.
      reps: number of resamples.

    Returns:
      ``[reps, K]``: replicate ``r`` is the metric at every checkpoint of the same
      resampled runs.
    """
    scores = check_scores(scores, ndim=3)
    return stratified_replicates(scores, metric, key=key, reps=reps)


def sample_efficiency_curves(score_dict: Mapping[str, Any],
                             metric: str | Metric | Callable = "iqm", *, key: jax.Array,
                             reps: int = 2000, confidence: float = 0.95,
                             method: str = "percentile") -> dict[str, Interval]:
    """Metric at every checkpoint with pointwise bands; runs resampled jointly over checkpoints.

    Args:
      score_dict: ``{algorithm: scores [N, M, K]}`` (``K`` checkpoints, the same for all).
      metric: a metric name, :class:`Metric` or jnp callable ``[N, M] -> scalar``.
      key: JAX PRNG key.
      reps: number of resamples.
      confidence: band coverage (pointwise).
      method: ``"percentile"``, ``"basic"`` or ``"bca"``.

    Returns:
      ``{algorithm: Interval(point [K], low [K], high [K])}``.

    Source: Agarwal et al. 2021, Fig. 10 (with joint resampling of runs).
    """
    key = check_key(key)
    check_reps(reps)
    check_confidence(confidence)
    check_method(method)
    out = {}
    for name, scores in score_dict.items():
        array = check_scores(scores, name, ndim=3)
        out[name] = interval_estimate(array, metric, key=algorithm_key(key, name), reps=reps,
                                      confidence=confidence, method=method, name=name)
    return out
