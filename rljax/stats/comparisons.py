"""Comparing algorithms: probability of improvement, classical tests, effect sizes, corrections.

Probability of improvement (rliable's definition) averages, over tasks, the Mann-Whitney
probability that a run of X beats a run of Y on that task (ties count 1/2):

    P(X > Y) = (1/M) sum_m (1/(N_x N_y)) sum_{i,j} ( [x_im > y_jm] + 1/2 [x_im = y_jm] ).

It is computed without comparing all pairs: each task's Y scores are sorted once, and for
every X score ``lo = #{y < x}`` and ``hi = #{y <= x}`` come from a binary search, so the
pair count is ``sum_i (lo_i + hi_i) / 2``. In the bootstrap the same holds with counts: a
resample draws Y's sorted positions with multiplicities ``c``; with ``C`` the cumulative
counts, ``U = sum over drawn x of (C[lo_x] + C[hi_x]) / 2``: ``O(N_x + N_y)`` per task and
resample instead of the ``O((N_x + N_y) log(N_x + N_y))`` ranking behind scipy's
``mannwhitneyu``. For runs on shared seeds (``paired=True``) the same counts apply with one
draw of seed indices per task used for both X and Y. The paired tests live in
:mod:`rljax.stats.paired`.

The classical tests call scipy.stats; Holm's step-down adjustment is written here and the
Benjamini-Hochberg one is ``scipy.stats.false_discovery_control``.

Sources: Agarwal et al., NeurIPS 2021 (probability of improvement); Mann & Whitney 1947;
Welch 1947; Holm, Scand. J. Statist. 1979; Benjamini & Hochberg, JRSS-B 1995; Cohen 1988
(d); Hedges 1981 (g); Cliff, Psychol. Bull. 1993 (delta).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats as sps

from rljax.stats._validation import (
    check_confidence,
    check_key,
    check_method,
    check_reps,
    check_scores,
)
from rljax.stats.bootstrap import (
    Interval,
    as_interval,
    interval_from_replicates,
    jackknife_acceleration,
    map_chunks,
    resample_indices,
)
from rljax.stats.intervals import cumsum_rows, position_counts

ALTERNATIVES = ("two-sided", "less", "greater")


class TestResult(NamedTuple):
    """A hypothesis test's statistic and p-value (``df`` for t-tests, else NaN)."""

    statistic: float
    pvalue: float
    df: float = float("nan")


class Correction(NamedTuple):
    """Adjusted p-values ``[K]`` and which hypotheses are rejected at level ``alpha``."""

    adjusted: np.ndarray
    reject: np.ndarray


def _as_task_scores(scores: Any, name: str) -> np.ndarray:
    array = np.asarray(scores, dtype=np.float64) if not isinstance(scores, np.ndarray) else scores
    if array.ndim == 1:
        array = array[:, None]
    return check_scores(array, name)


def _check_pair(scores_x, scores_y):
    x = _as_task_scores(scores_x, "scores_x")
    y = _as_task_scores(scores_y, "scores_y")
    if x.shape[1] != y.shape[1]:
        raise ValueError(
            f"scores_x and scores_y must have the same number of tasks, got {x.shape[1]} and "
            f"{y.shape[1]}"
        )
    return x, y


def _pair_tables(x: np.ndarray, y: np.ndarray):
    """Per task: Y's sorted order and each X score's ``lo = #{y < x}``, ``hi = #{y <= x}``."""
    y_sorted = np.sort(y, axis=0)
    lo = np.stack([np.searchsorted(y_sorted[:, m], x[:, m], side="left")
                   for m in range(x.shape[1])], axis=1)
    hi = np.stack([np.searchsorted(y_sorted[:, m], x[:, m], side="right")
                   for m in range(x.shape[1])], axis=1)
    rank_y = np.argsort(np.argsort(y, axis=0, kind="stable"), axis=0, kind="stable")
    return lo, hi, rank_y


def probability_of_improvement(scores_x, scores_y) -> float:
    """Probability that a run of X beats a run of Y on a random task (ties count 1/2).

    ``P(X > Y) = (1/M) sum_m U_m / (N_x N_y)`` with ``U_m`` the Mann-Whitney U statistic of
    X over Y on task ``m``. Exact, in float64.

    Args:
      scores_x: ``[N_x, M]`` scores of X (or ``[N_x]`` for one task).
      scores_y: ``[N_y, M]`` scores of Y; ``N_y`` may differ from ``N_x``.

    Returns:
      The probability of improvement (float).

    Source: Agarwal et al. 2021, Sec. 4.3 (``rliable.metrics.probability_of_improvement``).
    """
    x, y = _check_pair(scores_x, scores_y)
    lo, hi, _ = _pair_tables(x, y)
    u = 0.5 * np.sum(lo + hi, axis=0, dtype=np.float64)
    return float(np.mean(u / (x.shape[0] * y.shape[0])))


def _poi_kernel(lo, hi, rank_y, idx_x, idx_y):
    """POI of ``B`` resamples; ``idx_x [B, Nx, M]``, ``idx_y [B, Ny, M]`` run indices."""
    batch, num_x, num_tasks = idx_x.shape
    num_y = idx_y.shape[1]
    task = jnp.arange(num_tasks, dtype=jnp.int32)
    pos_y = rank_y.reshape(-1)[idx_y * num_tasks + task]  # sorted position of each draw
    pos_y = jnp.swapaxes(pos_y, 1, 2).reshape(batch * num_tasks, num_y)
    counts = position_counts(pos_y, num_y)
    upto = jnp.pad(cumsum_rows(counts), ((0, 0), (1, 0)))  # upto[k] = #draws at pos < k
    upto = upto.reshape(batch, num_tasks * (num_y + 1))
    base = task * (num_y + 1)
    sel = idx_x * num_tasks + task
    lo_flat = lo.reshape(-1)[sel] + base
    hi_flat = hi.reshape(-1)[sel] + base
    below = jnp.take_along_axis(upto, lo_flat.reshape(batch, -1), axis=1)
    upto_hi = jnp.take_along_axis(upto, hi_flat.reshape(batch, -1), axis=1)
    u = 0.5 * jnp.sum((below + upto_hi).reshape(batch, num_x, num_tasks), axis=1)
    return jnp.mean(u, axis=1) / (num_x * num_y)


@functools.partial(jax.jit, static_argnames=("reps", "paired"))
def _poi_replicates(lo, hi, rank_y, key, reps, paired=False):
    num_x, num_tasks = lo.shape
    num_y = rank_y.shape[0]

    def one_chunk(chunk_key, chunk):
        if paired:  # one draw of seed indices per (resample, task), shared by X and Y
            idx = resample_indices(chunk_key, num_x, (chunk, num_x, num_tasks))
            return _poi_kernel(lo, hi, rank_y, idx, idx)
        kx, ky = jax.random.split(chunk_key)
        idx_x = resample_indices(kx, num_x, (chunk, num_x, num_tasks))
        idx_y = resample_indices(ky, num_y, (chunk, num_y, num_tasks))
        return _poi_kernel(lo, hi, rank_y, idx_x, idx_y)

    draws = num_x * num_tasks if paired else (num_x + num_y) * num_tasks
    return map_chunks(one_chunk, key, reps, draws)


def _check_paired_shapes(x: np.ndarray, y: np.ndarray) -> None:
    if x.shape != y.shape:
        raise ValueError(
            f"scores_y must have the same shape as scores_x with paired=True (row i of both "
            f"is seed i), got {y.shape} and {x.shape}"
        )


def probability_of_improvement_replicates(scores_x, scores_y, *, key: jax.Array,
                                          reps: int = 2000, paired: bool = False) -> np.ndarray:
    """Stratified bootstrap replicates ``[reps]`` of :func:`probability_of_improvement`.

    Unpaired (default): X and Y are resampled independently, runs within each task
    (rliable's ``StratifiedIndependentBootstrap``). ``paired=True``: row ``i`` of
    ``scores_x [N, M]`` and of ``scores_y [N, M]`` are the same seed; every resample draws,
    for each task independently, ``N`` seed indices with replacement and takes those rows
    of both X and Y (the paired bootstrap: the seed pair is the resampled unit; Efron & Tibshirani
    1993).
    """
    key = check_key(key)
    reps = check_reps(reps)
    x, y = _check_pair(scores_x, scores_y)
    if paired:
        _check_paired_shapes(x, y)
    lo, hi, rank_y = _pair_tables(x, y)
    return np.asarray(_poi_replicates(jnp.asarray(lo, jnp.int32), jnp.asarray(hi, jnp.int32),
                                      jnp.asarray(rank_y, jnp.int32), key, reps,
                                      bool(paired)))


def probability_of_improvement_ci(scores_x, scores_y, *, key: jax.Array, reps: int = 2000,
                                  confidence: float = 0.95, method: str = "percentile",
                                  paired: bool = False) -> Interval:
    """Probability of improvement of X over Y with a stratified-bootstrap interval.

    The point estimate is the same either way: ``P(X > Y) = (1/M) sum_m (1/(N_x N_y))
    sum_{i,j} ([x_im > y_jm] + 1/2 [x_im = y_jm])`` over *all* pairs of runs (rliable's
    definition); its estimand is ``P(X > Y')`` for independent draws of a run of X and a
    run of Y. Only the resampling differs:

    * unpaired (default): X's and Y's runs are resampled independently within each task;
    * ``paired=True``, for runs that share seed keys (configurations of one grid, arms
      run with the same base seed on the same seeds): row ``i`` of ``scores_x`` and of
      ``scores_y`` is seed ``i``, and each resample draws one set of seed indices per task
      and takes those rows of both (the paired bootstrap of the seed pairs, which keeps
      the correlation between ``x_i`` and ``y_i``; Efron & Tibshirani 1993, resampling
      the pairs as units). On positively correlated seeds its interval is narrower than
      the unpaired one (about half as wide at correlation 0.9). Its measured coverage is
      :data:`rljax.stats.coverage.POI_COVERAGE`: from 16 seeds it holds about 0.93 or
      more with ``bca``, but at few seeds with strongly correlated pairs the percentile
      and BCa intervals are too narrow (0.53 at 5 seeds, correlation 0.9): each seed's own
      pair enters the estimate with weight 1/n, and the paired resamples double that
      bias; ``"basic"`` reflects it back (0.92 there).

    Args:
      scores_x: ``[N_x, M]`` (or ``[N_x]``) scores of X.
      scores_y: ``[N_y, M]`` (or ``[N_y]``) scores of Y; with ``paired=True`` the same
        shape as ``scores_x``, rows in the same seed order.
      key: JAX PRNG key; the same key gives bitwise the same interval.
      reps: number of resamples (>= 1).
      confidence: coverage, strictly between 0 and 1.
      method: ``"percentile"``, ``"basic"`` or ``"bca"`` (BCa acceleration from the
        leave-one-run-out jackknife: each sample's on its own, combined as for independent
        samples, or leave-one-seed-pair-out with ``paired=True``).
      paired: resample seed pairs jointly (see above).

    Returns:
      :class:`Interval` ``(point, low, high)`` (float scalars).

    Raises:
      ValueError: one line naming the argument (``scores_y`` of another shape with
        ``paired=True``, different task counts, non-finite scores, ``reps``, ...).

    Source: Agarwal et al. 2021, Sec. 4.3 and Fig. 8 (probability of improvement and its
    stratified bootstrap); Efron & Tibshirani, "An Introduction to the Bootstrap", 1993
    (resampling pairs as units).
    """
    key = check_key(key)
    reps = check_reps(reps)
    confidence = check_confidence(confidence)
    method = check_method(method)
    x, y = _check_pair(scores_x, scores_y)
    point = probability_of_improvement(x, y)
    replicates = probability_of_improvement_replicates(x, y, key=key, reps=reps,
                                                       paired=paired)
    acceleration = 0.0
    if method == "bca":
        if min(x.shape[0], y.shape[0]) < 2:
            raise ValueError("method='bca' needs at least 2 runs of each algorithm")
        if paired:
            jxy = [probability_of_improvement(np.delete(x, i, 0), np.delete(y, i, 0))
                   for i in range(x.shape[0])]
            acceleration = jackknife_acceleration([np.array(jxy)])
        else:
            jx = [probability_of_improvement(np.delete(x, i, 0), y) for i in range(x.shape[0])]
            jy = [probability_of_improvement(x, np.delete(y, i, 0)) for i in range(y.shape[0])]
            acceleration = jackknife_acceleration([np.array(jx), np.array(jy)])
    low, high = interval_from_replicates(replicates, point, confidence=confidence,
                                         method=method, acceleration=acceleration)
    return as_interval(point, low, high)


# ----------------------------------------------------------------------------- tests


def _check_alternative(alternative: str) -> str:
    if alternative not in ALTERNATIVES:
        raise ValueError(
            f"alternative must be one of {', '.join(map(repr, ALTERNATIVES))}, got {alternative!r}"
        )
    return alternative


def _vector(sample, name: str) -> np.ndarray:
    array = np.asarray(sample, dtype=np.float64)
    if array.ndim != 1 or array.size < 2:
        raise ValueError(
            f"{name} must be a 1-D array of at least 2 values, got shape {array.shape}"
        )
    if not np.isfinite(array).all():
        where = int(np.argwhere(~np.isfinite(array))[0][0])
        raise ValueError(f"{name} has a non-finite value {array[where]} at index {where}")
    return array


def welch_ttest(x, y, *, alternative: str = "two-sided") -> TestResult:
    """Welch's unequal-variance t-test of ``mean(x) - mean(y)``.

    ``t = (xbar - ybar) / sqrt(s_x^2/n_x + s_y^2/n_y)`` with Welch-Satterthwaite degrees of
    freedom ``df = (s_x^2/n_x + s_y^2/n_y)^2 / ((s_x^2/n_x)^2/(n_x-1) + (s_y^2/n_y)^2/(n_y-1))``.

    Args:
      x: ``[n_x]`` per-seed values of X.
      y: ``[n_y]`` per-seed values of Y.
      alternative: ``"two-sided"``, ``"less"`` or ``"greater"`` (X greater than Y).

    Returns:
      :class:`TestResult` ``(t, p-value, df)`` via ``scipy.stats.ttest_ind(equal_var=False)``.

    Source: Welch, Biometrika 1947.
    """
    x, y = _vector(x, "x"), _vector(y, "y")
    res = sps.ttest_ind(x, y, equal_var=False, alternative=_check_alternative(alternative))
    return TestResult(float(res.statistic), float(res.pvalue), float(res.df))


def mann_whitney_u(x, y, *, alternative: str = "two-sided") -> TestResult:
    """Mann-Whitney U test (``U`` of X: pairs with x > y, ties 1/2).

    Args:
      x: ``[n_x]`` per-seed values of X.
      y: ``[n_y]`` per-seed values of Y.
      alternative: ``"two-sided"``, ``"less"`` or ``"greater"``.

    Returns:
      :class:`TestResult` ``(U, p-value)`` via ``scipy.stats.mannwhitneyu`` (exact or
      asymptotic, scipy's automatic choice).

    Source: Mann & Whitney, Ann. Math. Statist. 1947.
    """
    x, y = _vector(x, "x"), _vector(y, "y")
    res = sps.mannwhitneyu(x, y, alternative=_check_alternative(alternative))
    return TestResult(float(res.statistic), float(res.pvalue))


def permutation_test(x, y, *, key: jax.Array, statistic: str = "mean_difference",
                     n_resamples: int = 9999, alternative: str = "two-sided") -> TestResult:
    """Two-sample permutation test (labels shuffled under H0: X and Y exchangeable).

    Statistic ``mean(x) - mean(y)`` (``"mean_difference"``) or ``median(x) - median(y)``
    (``"median_difference"``); p-value as ``scipy.stats.permutation_test`` (which counts
    the observed arrangement, so ``p >= 1/(n_resamples + 1)``).

    Args:
      x: ``[n_x]`` per-seed values of X.
      y: ``[n_y]`` per-seed values of Y.
      key: JAX PRNG key; seeds scipy's generator, so the same key gives the same p-value.
      statistic: ``"mean_difference"`` or ``"median_difference"``.
      n_resamples: number of random permutations (>= 1).
      alternative: ``"two-sided"``, ``"less"`` or ``"greater"``.

    Returns:
      :class:`TestResult` ``(statistic, p-value)``.

    Source: Fisher 1935; Pitman 1937; Phipson & Smyth 2010 (the +1 correction).
    """
    x, y = _vector(x, "x"), _vector(y, "y")
    key = check_key(key)
    n_resamples = check_reps(n_resamples)
    fns = {"mean_difference": np.mean, "median_difference": np.median}
    if statistic not in fns:
        raise ValueError(
            f"statistic must be one of {', '.join(map(repr, fns))}, got {statistic!r}"
        )
    fn = fns[statistic]
    seed = np.asarray(jax.random.bits(key, (4,), jnp.uint32)).astype(np.uint64)
    rng = np.random.default_rng(seed)
    res = sps.permutation_test(
        (x, y), lambda a, b, axis: fn(a, axis=axis) - fn(b, axis=axis),
        permutation_type="independent", vectorized=True, n_resamples=n_resamples,
        alternative=_check_alternative(alternative), rng=rng,
    )
    return TestResult(float(res.statistic), float(res.pvalue))


# ----------------------------------------------------------------------------- effect sizes


def cohens_d(x, y) -> float:
    """Cohen's d: ``(xbar - ybar) / s_p``, ``s_p^2 = ((n_x-1)s_x^2 + (n_y-1)s_y^2)/(n_x+n_y-2)``.

    Args:
      x: ``[n_x]`` values; y: ``[n_y]`` values.

    Returns:
      The standardised mean difference (float).

    Source: Cohen, "Statistical Power Analysis for the Behavioral Sciences", 1988.
    """
    x, y = _vector(x, "x"), _vector(y, "y")
    nx, ny = x.size, y.size
    pooled = ((nx - 1) * np.var(x, ddof=1) + (ny - 1) * np.var(y, ddof=1)) / (nx + ny - 2)
    return float((np.mean(x) - np.mean(y)) / np.sqrt(pooled))


def hedges_g(x, y) -> float:
    """Hedges' g: Cohen's d times the small-sample correction ``J = 1 - 3/(4(n_x+n_y) - 9)``.

    Args:
      x: ``[n_x]`` values; y: ``[n_y]`` values.

    Returns:
      The bias-corrected standardised mean difference (float).

    Source: Hedges, J. Educ. Statist. 1981.
    """
    d = cohens_d(x, y)
    n = np.size(x) + np.size(y)
    return float(d * (1.0 - 3.0 / (4.0 * n - 9.0)))


def cliffs_delta(x, y) -> float:
    """Cliff's delta: ``P(x > y) - P(x < y) = 2 P(X > Y) - 1`` (ties count 1/2 in ``P``).

    Args:
      x: ``[n_x]`` values; y: ``[n_y]`` values.

    Returns:
      The dominance statistic in ``[-1, 1]`` (float).

    Source: Cliff, Psychol. Bull. 1993.
    """
    x, y = _vector(x, "x"), _vector(y, "y")
    return 2.0 * probability_of_improvement(x, y) - 1.0


# ----------------------------------------------------------------------------- corrections


def _pvalues(pvalues) -> np.ndarray:
    p = np.asarray(pvalues, dtype=np.float64)
    if p.ndim != 1 or p.size < 1:
        raise ValueError(f"pvalues must be a non-empty 1-D array, got shape {p.shape}")
    if np.isnan(p).any() or (p < 0).any() or (p > 1).any():
        raise ValueError("pvalues must all lie in [0, 1]")
    return p


def _check_alpha(alpha) -> float:
    alpha = float(alpha)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be strictly between 0 and 1, got {alpha!r}")
    return alpha


def holm(pvalues, *, alpha: float = 0.05) -> Correction:
    """Holm's step-down correction (controls the family-wise error rate).

    With ``p_(1) <= ... <= p_(K)``: ``adjusted_(i) = max_{j <= i} min(1, (K - j + 1) p_(j))``;
    reject ``H_(i)`` iff ``adjusted_(i) <= alpha``.

    Args:
      pvalues: ``[K]`` p-values.
      alpha: family-wise error level.

    Returns:
      :class:`Correction` ``(adjusted [K], reject [K])`` in the input order.

    Source: Holm, Scand. J. Statist. 1979.
    """
    p = _pvalues(pvalues)
    alpha = _check_alpha(alpha)
    order = np.argsort(p, kind="stable")
    k = p.size
    stepped = np.minimum(1.0, (k - np.arange(k)) * p[order])
    adjusted = np.empty(k)
    adjusted[order] = np.maximum.accumulate(stepped)
    return Correction(adjusted, adjusted <= alpha)


def benjamini_hochberg(pvalues, *, alpha: float = 0.05) -> Correction:
    """Benjamini-Hochberg correction (controls the false discovery rate).

    ``adjusted_(i) = min_{j >= i} min(1, K p_(j) / j)``; reject iff ``adjusted <= alpha``.

    Args:
      pvalues: ``[K]`` p-values.
      alpha: false discovery rate.

    Returns:
      :class:`Correction` ``(adjusted [K], reject [K])`` via
      ``scipy.stats.false_discovery_control``.

    Source: Benjamini & Hochberg, JRSS-B 1995.
    """
    p = _pvalues(pvalues)
    alpha = _check_alpha(alpha)
    adjusted = np.asarray(sps.false_discovery_control(p, method="bh"), dtype=np.float64)
    return Correction(adjusted, adjusted <= alpha)
