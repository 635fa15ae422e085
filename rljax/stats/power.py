"""Power analysis: how many seeds to detect a difference, and how wide intervals will be.

Analytic (Welch's t-test, normal scores): with per-seed standard deviations ``s_x, s_y``
and ``n_x, n_y`` seeds, the Welch statistic for a true mean difference ``delta`` follows a
noncentral t with noncentrality ``lambda = delta / sqrt(s_x^2/n_x + s_y^2/n_y)`` and
Welch-Satterthwaite degrees of freedom ``df = (s_x^2/n_x + s_y^2/n_y)^2 /
((s_x^2/n_x)^2/(n_x-1) + (s_y^2/n_y)^2/(n_y-1))``; power is the probability that it falls
beyond the level-``alpha`` critical value(s) ``t_{df}``.

By simulation (any score distribution): draw ``n`` seeds with replacement from a pilot
sweep's per-seed scores (X shifted by ``delta``), run the test, repeat; power is the
rejection rate. The expected bootstrap interval width at ``n`` seeds is estimated the same
way: draw ``n`` runs per task from a pilot ``[N, M]`` array, compute the stratified
percentile interval, average its width.

Sources: Welch, Biometrika 1947; Cohen 1988, Ch. 2; Colas, Sigaud & Oudeyer, "How Many
Random Seeds? Statistical Power Analysis in Deep RL Experiments", 2018
(arXiv:1806.08295).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special
from scipy import stats as sps

from rljax.stats._validation import check_confidence, check_key, check_reps, check_scores
from rljax.stats.bootstrap import map_chunks, resample_indices
from rljax.stats.comparisons import _check_alternative
from rljax.stats.intervals import Metric, resolve_metric, stratified_flat_indices

DEFAULT_N_GRID = (2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100, 150, 200)
TESTS = ("welch", "mannwhitney")


class PowerCurve(NamedTuple):
    """Smallest ``n`` reaching the target power (``None`` if none in the grid) and the curve.

    ``n_grid`` int ``[K]`` seed counts and ``power`` float64 ``[K]``, the power at each.
    """

    n: int | None
    n_grid: np.ndarray
    power: np.ndarray


def _positive(value, name: str) -> float:
    value = float(value)
    if not value > 0 or not np.isfinite(value):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return value


def _probability(value, name: str) -> float:
    value = float(value)
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must be strictly between 0 and 1, got {value!r}")
    return value


def welch_power(delta: float, sd_x: float, n_x: int, *, sd_y: float | None = None,
                n_y: int | None = None, alpha: float = 0.05,
                alternative: str = "two-sided") -> float:
    """Power of Welch's t-test to detect a true mean difference ``delta = mu_x - mu_y``.

    Args:
      delta: true difference of means (X minus Y).
      sd_x: per-seed standard deviation of X.
      n_x: seeds of X (>= 2).
      sd_y: per-seed standard deviation of Y (default ``sd_x``).
      n_y: seeds of Y (default ``n_x``).
      alpha: significance level.
      alternative: ``"two-sided"``, ``"greater"`` (X > Y) or ``"less"``.

    Returns:
      ``P(reject H0)`` under the noncentral t (see the module docstring).

    Source: Welch 1947; Cohen 1988, Ch. 2.
    """
    sd_y = sd_x if sd_y is None else sd_y
    n_y = n_x if n_y is None else n_y
    sd_x, sd_y = _positive(sd_x, "sd_x"), _positive(sd_y, "sd_y")
    alpha = _probability(alpha, "alpha")
    alternative = _check_alternative(alternative)
    if int(n_x) < 2 or int(n_y) < 2:
        raise ValueError(f"n_x and n_y must be >= 2, got {n_x} and {n_y}")
    vx, vy = sd_x**2 / n_x, sd_y**2 / n_y
    df = (vx + vy) ** 2 / (vx**2 / (n_x - 1) + vy**2 / (n_y - 1))
    nc = float(delta) / np.sqrt(vx + vy)
    return _t_test_power(df, nc, alpha, alternative)


def _smallest_seed_count(reaches, max_n: int) -> int:
    """The smallest ``n >= 2`` with ``reaches(n)`` true, for a ``reaches`` that is
    monotone in ``n`` (power grows with the seeds): doubling, then bisection.

    Raises:
      ValueError: ``reaches`` is false up to ``max_n``.
    """
    hi = 2
    while not reaches(hi):
        hi *= 2
        if hi > max_n:
            raise ValueError(f"more than max_n={max_n} seeds would be needed; raise max_n")
    lo = max(2, hi // 2)
    if reaches(lo):
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if reaches(mid) else (mid, hi)
    return hi


def welch_seeds(delta: float, sd_x: float, *, sd_y: float | None = None, alpha: float = 0.05,
                power: float = 0.8, alternative: str = "two-sided",
                max_n: int = 1_000_000) -> int:
    """Smallest number of seeds per algorithm for Welch's test to reach ``power``.

    Equal seeds for both algorithms; solves ``welch_power(delta, sd_x, n, sd_y=sd_y) >=
    power`` for the smallest ``n >= 2`` by bisection (power increases with ``n``).

    Args:
      delta: difference of means to detect (non-zero).
      sd_x: per-seed standard deviation of X; sd_y: of Y (default ``sd_x``).
      alpha: significance level.
      power: target power in (0, 1).
      alternative: ``"two-sided"``, ``"greater"`` or ``"less"``.
      max_n: give up above this many seeds (raises ``ValueError``).

    Returns:
      Seeds per algorithm.

    Source: Cohen 1988, Ch. 2; Colas et al. 2018.
    """
    power = _probability(power, "power")
    if float(delta) == 0.0:
        raise ValueError("delta must be non-zero (no sample size detects a zero difference)")

    def reaches(n):
        return welch_power(delta, sd_x, n, sd_y=sd_y, alpha=alpha,
                           alternative=alternative) >= power

    return _smallest_seed_count(reaches, max_n)


def expected_mean_ci_width(n: int, sd: float, *, confidence: float = 0.95) -> float:
    """Expected width of the t interval for a mean from ``n`` normal seeds.

    ``E[width] = 2 t_{(1+c)/2, n-1} c4(n) sd / sqrt(n)`` with ``c4(n) = sqrt(2/(n-1))
    Gamma(n/2) / Gamma((n-1)/2)`` (``E[s] = c4 sd``).

    Args:
      n: seeds (>= 2).
      sd: per-seed standard deviation.
      confidence: coverage.

    Returns:
      The expected interval width.

    Source: Student 1908; c4 from e.g. Montgomery, "Statistical Quality Control", 2009.
    """
    confidence = check_confidence(confidence)
    sd = _positive(sd, "sd")
    if int(n) < 2:
        raise ValueError(f"n must be >= 2, got {n}")
    n = int(n)
    c4 = np.sqrt(2.0 / (n - 1)) * np.exp(special.gammaln(n / 2) - special.gammaln((n - 1) / 2))
    return float(2 * sps.t.ppf((1 + confidence) / 2, n - 1) * c4 * sd / np.sqrt(n))


def _pilot(sample, name: str) -> np.ndarray:
    array = np.asarray(sample, dtype=np.float64)
    if array.ndim != 1 or array.size < 2 or not np.isfinite(array).all():
        raise ValueError(f"{name} must be a 1-D array of at least 2 finite per-seed scores")
    return array


def simulated_power(pilot_x, pilot_y=None, *, n: int, key: jax.Array, delta: float = 0.0,
                    test: str | Callable = "welch", alpha: float = 0.05,
                    alternative: str = "two-sided", sims: int = 2000) -> float:
    """Power at ``n`` seeds per algorithm, by simulation from pilot per-seed scores.

    Each simulation draws ``n`` seeds with replacement from ``pilot_x`` (plus ``delta``) and
    ``n`` from ``pilot_y`` (default ``pilot_x``), runs ``test``, and rejects if ``p <=
    alpha``; returns the rejection rate. With ``delta = 0`` and one pilot it estimates the
    test's size.

    Args:
      pilot_x: ``[P_x]`` per-seed scores of X from a pilot sweep.
      pilot_y: ``[P_y]`` per-seed scores of Y (default: ``pilot_x``).
      n: seeds per algorithm (>= 2).
      key: JAX PRNG key.
      delta: shift added to X's draws (the difference to detect).
      test: ``"welch"``, ``"mannwhitney"``, or ``f(x [S, n], y [S, n]) -> p-values [S]``.
      alpha: significance level.
      alternative: ``"two-sided"``, ``"greater"`` or ``"less"``.
      sims: number of simulated experiments.

    Returns:
      Estimated power (Monte Carlo standard error ``sqrt(p(1-p)/sims)``).

    Source: Colas, Sigaud & Oudeyer 2018.
    """
    x = _pilot(pilot_x, "pilot_x")
    y = x if pilot_y is None else _pilot(pilot_y, "pilot_y")
    key = check_key(key)
    sims = check_reps(sims)
    alpha = _probability(alpha, "alpha")
    alternative = _check_alternative(alternative)
    if int(n) < 2:
        raise ValueError(f"n must be >= 2, got {n}")
    if not callable(test) and test not in TESTS:
        raise ValueError(f"test must be one of {', '.join(map(repr, TESTS))} or a callable, "
                         f"got {test!r}")
    kx, ky = jax.random.split(key)
    draws_x = x[np.asarray(resample_indices(kx, x.size, (sims, int(n))))] + float(delta)
    draws_y = y[np.asarray(resample_indices(ky, y.size, (sims, int(n))))]
    if callable(test):
        pvalues = np.asarray(test(draws_x, draws_y))
    elif test == "welch":
        with np.errstate(invalid="ignore", divide="ignore"):
            pvalues = sps.ttest_ind(draws_x, draws_y, axis=1, equal_var=False,
                                    alternative=alternative).pvalue
        pvalues = np.where(np.isnan(pvalues), 1.0, pvalues)  # constant draws: no evidence
    else:
        pvalues = sps.mannwhitneyu(draws_x, draws_y, axis=1, alternative=alternative).pvalue
    return float(np.mean(pvalues <= alpha))


def simulated_seeds(pilot_x, pilot_y=None, *, key: jax.Array, delta: float = 0.0,
                    power: float = 0.8, test: str | Callable = "welch", alpha: float = 0.05,
                    alternative: str = "two-sided", sims: int = 1000,
                    n_grid: Sequence[int] = DEFAULT_N_GRID) -> PowerCurve:
    """Smallest ``n`` in ``n_grid`` whose simulated power reaches ``power``, with the curve.

    Args:
      pilot_x, pilot_y, delta, test, alpha, alternative, sims: as :func:`simulated_power`.
      key: JAX PRNG key (grid point ``i`` uses ``fold_in(key, i)``).
      power: target power.
      n_grid: increasing seed counts to evaluate.

    Pilots are ``[P_x]`` and ``[P_y]`` per-seed scores, as for :func:`simulated_power`.

    Returns:
      :class:`PowerCurve` ``(n, n_grid [K], power [K])``.
    """
    power = _probability(power, "power")
    key = check_key(key)
    grid = np.asarray(sorted(int(v) for v in n_grid))
    if grid.size == 0 or grid[0] < 2:
        raise ValueError(f"n_grid must be a non-empty list of integers >= 2, got {n_grid!r}")
    curve = np.array([
        simulated_power(pilot_x, pilot_y, n=int(v), key=jax.random.fold_in(key, i),
                        delta=delta, test=test, alpha=alpha, alternative=alternative,
                        sims=sims)
        for i, v in enumerate(grid)
    ])
    hits = np.flatnonzero(curve >= power)
    return PowerCurve(int(grid[hits[0]]) if hits.size else None, grid, curve)


@functools.partial(jax.jit, static_argnames=("kernel", "n", "sims", "reps"))
def _simulated_widths(kernel, pilot, params, key, n, sims, reps, probs):
    pilot_runs, tasks = pilot.shape

    def one(sim_key):
        draw_key, boot_key = jax.random.split(sim_key)
        runs = resample_indices(draw_key, pilot_runs, (n, tasks))
        values = pilot.reshape(-1)[runs * tasks + jnp.arange(tasks)]

        def chunk_fn(chunk_key, chunk):
            return kernel(values, stratified_flat_indices(chunk_key, n, tasks, chunk), params)

        replicates = map_chunks(chunk_fn, boot_key, reps, n * tasks)
        q = jnp.quantile(replicates, probs)
        return q[1] - q[0]

    return jax.lax.map(one, jax.random.split(key, sims))


def expected_ci_width(pilot_scores, n: int, metric: str | Metric | Callable = "iqm", *,
                      key: jax.Array, confidence: float = 0.95, sims: int = 200,
                      reps: int = 500) -> float:
    """Expected width of the stratified percentile interval of ``metric`` at ``n`` runs.

    Simulates ``sims`` experiments of ``n`` runs per task drawn with replacement from a pilot
    ``[N, M]`` array, bootstraps each (``reps`` resamples), and averages the widths.

    Args:
      pilot_scores: ``[N, M]`` pilot scores.
      n: runs per task in the planned experiment (>= 1).
      metric: a metric name, :class:`Metric` or jnp callable ``[N, M] -> scalar``.
      key: JAX PRNG key.
      confidence: interval coverage.
      sims: simulated experiments.
      reps: bootstrap resamples per simulated experiment.

    Returns:
      The mean interval width.

    Source: Agarwal et al. 2021 (stratified bootstrap); Colas et al. 2018 (planning seeds).
    """
    key = check_key(key)
    sims, reps = check_reps(sims), check_reps(reps)
    confidence = check_confidence(confidence)
    if int(n) < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    pilot = check_scores(pilot_scores)
    m = resolve_metric(metric)
    alpha = (1 - confidence) / 2
    probs = jnp.asarray([alpha, 1 - alpha], dtype=jnp.float32)
    widths = _simulated_widths(m.kernel, jnp.asarray(pilot), m.params, key, int(n), sims,
                               reps, probs)
    return float(np.mean(np.asarray(widths)))


def _t_test_power(df: float, nc: float, alpha: float, alternative: str) -> float:
    """Power of a t test with ``df`` degrees of freedom when the statistic is noncentral
    t with noncentrality ``nc``: ``P(T > t_{1-alpha/2}) + P(T < -t_{1-alpha/2})``
    (two-sided) or the one tail (``"greater"`` / ``"less"``). Shared by Welch's and the
    paired t test's power."""
    if alternative == "two-sided":
        crit = sps.t.ppf(1 - alpha / 2, df)
        return float(sps.nct.sf(crit, df, nc) + sps.nct.cdf(-crit, df, nc))
    crit = sps.t.ppf(1 - alpha, df)
    if alternative == "greater":
        return float(sps.nct.sf(crit, df, nc))
    return float(sps.nct.cdf(-crit, df, nc))
