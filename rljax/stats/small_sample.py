"""Confidence intervals that stay honest at a handful of seeds.

Each method is a pure JAX function of one dataset (``*_bounds``: traceable, so the coverage
simulator of :mod:`rljax.stats.coverage` runs it under ``jax.vmap`` / ``jax.lax.map`` over
thousands of simulated datasets, and :mod:`rljax.stats.reported` runs the very same code
on a study's seeds), plus a public wrapper returning an :class:`~rljax.stats.Interval`.
``alpha = (1 - confidence) / 2`` throughout.

* **Student t** for a mean: ``mean +- t_{n-1, 1-alpha} s / sqrt(n)``; for a paired
  difference the same on ``d_i = x_i - y_i`` (Student 1908; any statistics text).
* **Trimmed t** for a trimmed mean (IQM = 25 % trimming; Tukey & McLaughlin 1963, Yuen
  1974): ``g = floor(gamma n)`` values cut from each end, ``h = n - 2g`` kept, winsorized
  variance ``s_w^2`` (the cut values set to the nearest kept one, divisor ``n - 1``),
  ``se^2 = (n - 1) s_w^2 / (h (h - 1))`` and ``t_{h-1}`` critical values.
* **Bootstrap-t** (studentized bootstrap) for a mean: ``t*_r = (mean*_r - mean) / (s*_r /
  sqrt(n))`` over resamples, interval ``[mean - q(1 - alpha) se, mean - q(alpha) se]`` with
  ``se = s / sqrt(n)`` and ``q`` the quantiles of ``t*`` (resamples with ``s* = 0`` are left
  out). Efron & Tibshirani, "An Introduction to the Bootstrap", 1993, Ch. 12.5.
* **Exact order-statistic interval** for the ``q``-quantile (median: ``q = 1/2``),
  distribution-free: with ``B(k) = P(Binomial(n, q) <= k)``, ranks ``l = max{l : B(l - 1)
  <= alpha}`` and ``u = min{u : 1 - B(u - 1) <= alpha}`` (``l = 0`` means ``-inf``, ``u =
  n + 1`` means ``+inf``) give ``[X_(l), X_(u)]`` with ``P(X_(l) > xi_q) <= alpha`` and
  ``P(X_(u) < xi_q) <= alpha`` for *any* distribution: the closed interval stays
  conservative with ties (integer counts), and ``+inf`` (a right-censored seed, e.g. one
  that never reached the target) is just a large order statistic. Coverage for continuous
  data is exactly ``B(u - 1) - B(l - 1) >= confidence``. Hahn & Meeker, "Statistical
  Intervals", 1991, Sec. 5.2; Scheffe & Tukey, Ann. Math. Stat. 1945.
* **Ratio of medians** ``median(x) / median(y)``: the two order-statistic intervals at
  confidence ``1 - alpha`` each (Bonferroni), divided as intervals. Joint coverage is at
  least ``confidence`` whatever the dependence between ``x`` and ``y`` (paired seeds or
  not), so it is conservative.
* **Two-way t** for the mean of a crossed ``[S seeds, P prompts]`` matrix: ``se^2 =
  var(row means) / S + var(column means) / P`` with ``t_{min(S, P) - 1}``. Under the
  random-effects decomposition ``x_sp = mu + a_s + b_p + e_sp`` this estimates
  ``sigma_a^2 / S + sigma_b^2 / P + 2 sigma_e^2 / (S P)``, slightly above the true variance
  ``... + sigma_e^2 / (S P)`` (conservative), which is also what the two-way ("pigeonhole")
  bootstrap that resamples seeds and prompts independently estimates (Owen, "The
  pigeonhole bootstrap", Ann. Appl. Stat. 2007).

Bootstrap bounds (``percentile``, ``basic``, ``bca``; definitions in
:mod:`rljax.stats.bootstrap`) are here as traceable functions too, so that every method the
coverage study measures is the code that :func:`rljax.stats.reported.reported_interval` runs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtr, ndtri
from scipy import stats as sps

from rljax.stats._validation import check_confidence, check_key, check_reps
from rljax.stats.bootstrap import Interval, as_interval, resample_indices

Bounds = tuple[jax.Array, jax.Array]

BOOTSTRAP_METHODS = ("percentile", "basic", "bca")
# Interval methods measured per statistic by the coverage study (and accepted by
# :func:`interval_bounds`).
METHODS_BY_STATISTIC = {
    "mean": ("percentile", "basic", "bca", "t", "bootstrap_t"),
    "paired_difference": ("percentile", "basic", "bca", "t", "bootstrap_t"),
    "median": ("percentile", "basic", "bca", "order_statistic"),
    "iqm": ("percentile", "basic", "bca", "trimmed_t"),
    "ratio_of_medians": ("percentile", "basic", "bca", "order_statistic"),
    "two_way_mean": ("percentile", "basic", "t"),
}
TWO_SAMPLE = ("ratio_of_medians", "paired_difference")


# ----------------------------------------------------------------------------- helpers


def t_critical(df: int, confidence: float) -> float:
    """Two-sided Student-t critical value ``t_{df, (1 + confidence) / 2}`` (scipy)."""
    return float(sps.t.ppf((1.0 + confidence) / 2.0, df))


def sorted_quantiles(values: jax.Array, probs: jax.Array) -> jax.Array:
    """``numpy.percentile``-style (linear) quantiles of ``values [R]`` at ``probs [...]``.

    NaN values are left out; ``+-inf`` values are kept (a quantile between ``inf`` and
    ``inf`` is ``inf``, not NaN). NaN probabilities give NaN. Traceable (``probs`` may be
    traced).
    """
    ordered = jnp.sort(values)  # NaN last
    count = jnp.sum(~jnp.isnan(values))
    valid_p = ~jnp.isnan(probs)
    pos = jnp.where(valid_p, probs, 0.0) * (count - 1).astype(values.dtype)
    lo = jnp.clip(jnp.floor(pos).astype(jnp.int32), 0, jnp.maximum(count - 1, 0))
    hi = jnp.minimum(lo + 1, jnp.maximum(count - 1, 0))
    frac = pos - lo.astype(values.dtype)
    a, b = ordered[lo], ordered[hi]
    out = jnp.where((frac <= 0) | (a == b), a, a + frac * (b - a))
    return jnp.where(valid_p & (count > 0), out, jnp.nan)


def _sample_iqm(x: jax.Array) -> jax.Array:
    n = x.shape[-1]
    g = n // 4
    return jnp.mean(jnp.sort(x, axis=-1)[..., g:n - g], axis=-1)


STATISTIC_FNS: dict[str, Callable[..., jax.Array]] = {
    "mean": lambda x: jnp.mean(x, axis=-1),
    "median": lambda x: jnp.median(x, axis=-1),
    "iqm": _sample_iqm,
    "ratio_of_medians": lambda x, y: jnp.median(x, axis=-1) / jnp.median(y, axis=-1),
    "paired_difference": lambda x, y: jnp.mean(x - y, axis=-1),
}
"""jnp statistics of one dataset (the last axis is the seeds); IQM = scipy's
``trim_mean(x, 0.25)`` (``floor(n / 4)`` values cut from each end)."""


def two_way_mean(matrix: jax.Array) -> jax.Array:
    """Grand mean of a crossed ``[S seeds, P prompts]`` matrix."""
    return jnp.mean(matrix)


# ----------------------------------------------------------------------------- t intervals


def t_bounds(x: jax.Array, confidence: float = 0.95) -> Bounds:
    """Traceable Student-t bounds ``mean +- t_{n-1} s / sqrt(n)`` of ``x [n]`` (n >= 2)."""
    n = x.shape[0]
    mean = jnp.mean(x)
    half = t_critical(n - 1, confidence) * jnp.std(x, ddof=1) / math.sqrt(n)
    return mean - half, mean + half


def trimmed_t_bounds(x: jax.Array, proportion: float = 0.25,
                     confidence: float = 0.95) -> Bounds:
    """Traceable Tukey-McLaughlin / Yuen bounds for the trimmed mean of ``x [n]``.

    See the module docstring; ``proportion = 0.25`` is the IQM. Needs ``h = n - 2 floor(
    proportion n) >= 2``.
    """
    n = x.shape[0]
    g = int(math.floor(proportion * n))
    h = n - 2 * g
    ordered = jnp.sort(x)
    trimmed = jnp.mean(ordered[g:n - g])
    winsorized = jnp.clip(ordered, ordered[g], ordered[n - g - 1])
    se = jnp.sqrt((n - 1) * jnp.var(winsorized, ddof=1) / (h * (h - 1)))
    half = t_critical(h - 1, confidence) * se
    return trimmed - half, trimmed + half


def two_way_t_bounds(matrix: jax.Array, confidence: float = 0.95) -> Bounds:
    """Traceable two-way t bounds for the grand mean of ``matrix [S, P]`` (see module)."""
    seeds, prompts = matrix.shape
    mean = jnp.mean(matrix)
    var = (jnp.var(jnp.mean(matrix, axis=1), ddof=1) / seeds
           + jnp.var(jnp.mean(matrix, axis=0), ddof=1) / prompts)
    half = t_critical(min(seeds, prompts) - 1, confidence) * jnp.sqrt(var)
    return mean - half, mean + half


# ----------------------------------------------------------------------------- order statistics


@functools.lru_cache(maxsize=4096)
def order_statistic_ranks(n: int, q: float = 0.5,
                          confidence: float = 0.95) -> tuple[int, int, float]:
    """1-based ranks ``(l, u)`` of the exact order-statistic interval and its coverage.

    ``l = max{l in 1..n : B(l - 1) <= alpha}`` (else 0, meaning ``-inf``) and ``u = min{u in
    1..n : 1 - B(u - 1) <= alpha}`` (else ``n + 1``, meaning ``+inf``), ``B`` the
    Binomial(n, q) CDF, ``alpha = (1 - confidence) / 2``. The coverage returned,
    ``B(u - 1) - B(l - 1)`` (``B(-1) = 0``, ``B(n) = 1``), is exact for continuous data and a
    lower bound otherwise (Hahn & Meeker 1991, Sec. 5.2).

    Args:
      n: sample size (>= 1).
      q: the quantile, in (0, 1).
      confidence: nominal coverage, in (0, 1).

    Returns:
      ``(l, u, coverage)``: Python scalars.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not 0.0 < q < 1.0:
        raise ValueError(f"q must be strictly between 0 and 1, got {q!r}")
    alpha = (1.0 - check_confidence(confidence)) / 2.0
    cdf = sps.binom.cdf(np.arange(-1, n + 1), n, q)  # cdf[k + 1] = B(k), k = -1..n
    cdf[0], cdf[-1] = 0.0, 1.0
    lows = [r for r in range(1, n + 1) if cdf[r] <= alpha]  # B(r - 1) = cdf[r]
    highs = [r for r in range(1, n + 1) if 1.0 - cdf[r] <= alpha]
    lower = max(lows) if lows else 0
    upper = min(highs) if highs else n + 1
    coverage = float(cdf[upper] - cdf[lower])
    return lower, upper, coverage


def order_statistic_bounds(x: jax.Array, q: float = 0.5,
                           confidence: float = 0.95) -> Bounds:
    """Traceable exact order-statistic bounds ``[X_(l), X_(u)]`` of the ``q``-quantile.

    ``x [n]`` may hold ``+inf`` (right-censored values); ranks from
    :func:`order_statistic_ranks`.
    """
    n = x.shape[0]
    lower, upper, _ = order_statistic_ranks(n, float(q), float(confidence))
    inf = jnp.full((1,), jnp.inf, x.dtype)
    padded = jnp.concatenate([-inf, jnp.sort(x), inf])
    return padded[lower], padded[upper]


def divide_intervals(x_low, x_high, y_low, y_high, nonnegative) -> Bounds:
    """``[x_low, x_high] / [y_low, y_high]`` as interval arithmetic, conservative.

    A divisor interval that touches 0 gives ``(-inf, inf)`` (``[0, inf]`` when
    ``nonnegative``); undefined corners (``inf / inf``) widen the bound to infinity.
    ``nonnegative`` (a bool array) clips the lower bound at 0.
    """
    corners = jnp.stack([x_low / y_low, x_low / y_high, x_high / y_low, x_high / y_high])
    undefined = jnp.any(jnp.isnan(corners))
    low = jnp.where(undefined, -jnp.inf, jnp.nanmin(corners))
    high = jnp.where(undefined, jnp.inf, jnp.nanmax(corners))
    spans_zero = (y_low <= 0) & (y_high >= 0)
    low = jnp.where(spans_zero, -jnp.inf, low)
    high = jnp.where(spans_zero, jnp.inf, high)
    low = jnp.where(nonnegative, jnp.maximum(low, 0.0), low)
    return low, high


def ratio_of_medians_bounds(x: jax.Array, y: jax.Array, confidence: float = 0.95) -> Bounds:
    """Traceable Bonferroni order-statistic bounds of ``median(x) / median(y)``.

    Each median gets an exact order-statistic interval at ``1 - (1 - confidence) / 2``; the
    ratio's interval is their quotient (:func:`divide_intervals`). ``x [n]``, ``y [m]``.
    """
    each = 1.0 - (1.0 - confidence) / 2.0
    x_low, x_high = order_statistic_bounds(x, 0.5, each)
    y_low, y_high = order_statistic_bounds(y, 0.5, each)
    nonnegative = (jnp.min(x) >= 0) & (jnp.min(y) >= 0)
    return divide_intervals(x_low, x_high, y_low, y_high, nonnegative)


# ----------------------------------------------------------------------------- bootstrap


def _replicates(statistic: str, samples: Sequence[jax.Array], key: jax.Array,
                reps: int) -> jax.Array:
    """``[reps]`` bootstrap replicates of a named statistic (two-sample: paired indices
    when the lengths agree, else independent)."""
    fn = STATISTIC_FNS[statistic]
    lengths = [s.shape[0] for s in samples]
    if len(samples) == 1 or len(set(lengths)) == 1:
        idx = resample_indices(key, lengths[0], (reps, lengths[0]))
        return fn(*[s[idx] for s in samples])
    keys = jax.random.split(key, len(samples))
    return fn(*[s[resample_indices(k, n, (reps, n))]
                for k, s, n in zip(keys, samples, lengths, strict=True)])


def _loo_median_by_rank(ordered: jax.Array) -> jax.Array:
    """``[n]`` medians of ``ordered [n]`` (sorted) with the value of rank ``r`` left out."""
    n = ordered.shape[0]
    r = jnp.arange(n)[:, None]
    k = jnp.array([(n - 2) // 2, (n - 1) // 2])[None, :]  # middle of the n - 1 left
    return jnp.mean(ordered[k + (k >= r)], axis=1)


def _loo_trimmed_by_rank(ordered: jax.Array) -> jax.Array:
    """``[n]`` IQMs (``floor(m / 4)`` cut per end, ``m = n - 1``) of sorted ``ordered [n]``
    with the value of rank ``r`` left out, from cumulative sums (O(n))."""
    n = ordered.shape[0]
    g = (n - 1) // 4
    a, b = g, n - 1 - g  # kept ranks [a, b) of the n - 1 left
    csum = jnp.concatenate([jnp.zeros((1,), ordered.dtype), jnp.cumsum(ordered)])
    r = jnp.arange(n)
    total = jnp.where(r >= b, csum[b] - csum[a],
                      jnp.where(r < a, csum[b + 1] - csum[a + 1],
                                csum[b + 1] - csum[a] - ordered[r]))
    return total / (b - a)


def _loo_values(statistic: str, samples: Sequence[jax.Array]) -> jax.Array:
    """``[n]`` leave-one-seed-out values of a named statistic (samples of equal length).

    Closed forms: means from the sum, medians and IQMs from one sort (the order of the
    values does not matter to the jackknife except where a pair is left out jointly).
    """
    n = samples[0].shape[0]
    if statistic in ("mean", "paired_difference"):
        d = samples[0] if statistic == "mean" else samples[0] - samples[1]
        return (jnp.sum(d) - d) / (n - 1)
    if statistic == "median":
        return _loo_median_by_rank(jnp.sort(samples[0]))
    if statistic == "iqm":
        return _loo_trimmed_by_rank(jnp.sort(samples[0]))
    x, y = samples  # ratio_of_medians: pair i left out of both
    rank_x = jnp.argsort(jnp.argsort(x))
    rank_y = jnp.argsort(jnp.argsort(y))
    return (_loo_median_by_rank(jnp.sort(x))[rank_x]
            / _loo_median_by_rank(jnp.sort(y))[rank_y])


def _jackknife(statistic: str, samples: Sequence[jax.Array]) -> jax.Array:
    """BCa acceleration from leave-one-out values (one group: the paired seeds)."""
    fn = STATISTIC_FNS[statistic]
    lengths = [s.shape[0] for s in samples]
    groups = []
    if len(samples) == 1 or len(set(lengths)) == 1:
        groups.append((_loo_values(statistic, samples), 1.0))
    else:
        for k, n in enumerate(lengths):
            keep = jnp.arange(n - 1)[None, :] + (jnp.arange(n - 1)[None, :]
                                                 >= jnp.arange(n)[:, None])
            loo = [s[keep] if j == k else jnp.broadcast_to(s, (n,) + s.shape)
                   for j, s in enumerate(samples)]
            groups.append((fn(*loo), (n - 1) / n))
    num = 0.0
    den = 0.0
    for values, scale in groups:
        u = (jnp.mean(values) - values) * scale
        num = num + jnp.sum(u**3)
        den = den + jnp.sum(u**2)
    den = 6.0 * den**1.5
    small = den <= jnp.abs(num) * jnp.finfo(den.dtype).eps
    return jnp.where(small, jnp.nan, num / jnp.where(small, 1.0, den))


def bounds_from_replicates(replicates: jax.Array, point: jax.Array, method: str,
                           confidence: float, acceleration: jax.Array | float = 0.0) -> Bounds:
    """Traceable percentile / basic / BCa bounds from ``replicates [R]`` (NaN left out).

    Formulas in :mod:`rljax.stats.bootstrap`. BCa gives NaN when every replicate lies on
    one side of the point estimate or the acceleration is undefined.
    """
    alpha = (1.0 - confidence) / 2.0
    if method == "bca":
        valid = ~jnp.isnan(replicates)
        frac = jnp.sum(valid & (replicates < point)) / jnp.maximum(jnp.sum(valid), 1)
        z0 = ndtri(frac)
        z = jnp.array([ndtri(alpha), ndtri(1.0 - alpha)], replicates.dtype)
        probs = ndtr(z0 + (z0 + z) / (1.0 - acceleration * (z0 + z)))
        degenerate = (frac <= 0) | (frac >= 1) | jnp.isnan(acceleration)
        probs = jnp.where(degenerate, jnp.nan, probs)
    else:
        probs = jnp.array([alpha, 1.0 - alpha], replicates.dtype)
    low, high = sorted_quantiles(replicates, probs)
    if method == "basic":
        low, high = 2.0 * point - high, 2.0 * point - low
    return low, high


def bootstrap_t_bounds(x: jax.Array, key: jax.Array, reps: int = 999,
                       confidence: float = 0.95) -> Bounds:
    """Traceable studentized-bootstrap bounds for the mean of ``x [n]`` (see module)."""
    n = x.shape[0]
    mean, sd = jnp.mean(x), jnp.std(x, ddof=1)
    resampled = x[resample_indices(key, n, (reps, n))]
    star_sd = jnp.std(resampled, axis=1, ddof=1)
    t_star = (jnp.mean(resampled, axis=1) - mean) / (star_sd / math.sqrt(n))
    t_star = jnp.where(star_sd > 0, t_star, jnp.nan)
    alpha = (1.0 - confidence) / 2.0
    q_low, q_high = sorted_quantiles(t_star, jnp.array([alpha, 1.0 - alpha], x.dtype))
    se = sd / math.sqrt(n)
    return mean - q_high * se, mean - q_low * se


def two_way_replicates(matrix: jax.Array, key: jax.Array, reps: int) -> jax.Array:
    """``[reps]`` two-way bootstrap replicates of the grand mean of ``matrix [S, P]``.

    Each replicate draws ``S`` seeds and ``P`` prompts with replacement, independently, and
    takes the mean of the ``S x P`` resampled cells: ``c_s^T X c_p / (S P)`` with ``c`` the
    draw counts (one matrix product per replicate, never the resampled matrix).
    Owen 2007 ("pigeonhole bootstrap").
    """
    seeds, prompts = matrix.shape
    seed_key, prompt_key = jax.random.split(key)
    rows = jnp.arange(reps)[:, None]
    seed_counts = jnp.zeros((reps, seeds), matrix.dtype).at[
        rows, resample_indices(seed_key, seeds, (reps, seeds))].add(1.0)
    prompt_counts = jnp.zeros((reps, prompts), matrix.dtype).at[
        rows, resample_indices(prompt_key, prompts, (reps, prompts))].add(1.0)
    return jnp.sum((seed_counts @ matrix) * prompt_counts, axis=1) / (seeds * prompts)


# ----------------------------------------------------------------------------- dispatch


def interval_bounds(statistic: str, methods: Sequence[str], samples: Sequence[jax.Array],
                    key: jax.Array, *, reps: int = 999,
                    confidence: float = 0.95) -> tuple[jax.Array, jax.Array]:
    """Point estimate and ``[len(methods), 2]`` bounds of a named statistic, traceable.

    The bootstrap methods share one set of replicates. This is what the coverage simulator
    vmaps over simulated datasets and what :func:`rljax.stats.reported.reported_interval`
    runs on real seeds.

    Args:
      statistic: a key of :data:`METHODS_BY_STATISTIC`.
      methods: names from ``METHODS_BY_STATISTIC[statistic]`` (static).
      samples: ``(x [n],)``, ``(x [n], y [m])`` for the two-sample statistics, or
        ``(matrix [S, P],)`` for ``two_way_mean``.
      key: JAX PRNG key (bootstrap methods).
      reps: bootstrap resamples (static).
      confidence: nominal coverage (static).

    Returns:
      ``(point [], bounds [M, 2])``.
    """
    allowed = METHODS_BY_STATISTIC[statistic]
    for method in methods:
        if method not in allowed:
            raise ValueError(f"method: {statistic} supports {', '.join(allowed)}, "
                             f"got {method!r}")
    boot_key, t_key = jax.random.split(key)
    samples = tuple(samples)
    if statistic == "two_way_mean":
        point = two_way_mean(samples[0])
    else:
        point = STATISTIC_FNS[statistic](*samples)
    replicates = None
    acceleration = 0.0
    if any(m in BOOTSTRAP_METHODS for m in methods):
        if statistic == "two_way_mean":
            replicates = two_way_replicates(samples[0], boot_key, reps)
        else:
            replicates = _replicates(statistic, samples, boot_key, reps)
        if "bca" in methods:
            acceleration = _jackknife(statistic, samples)
    out = []
    for method in methods:
        if method in BOOTSTRAP_METHODS:
            bounds = bounds_from_replicates(replicates, point, method, confidence,
                                            acceleration)
        elif method == "t":
            if statistic == "two_way_mean":
                bounds = two_way_t_bounds(samples[0], confidence)
            elif statistic == "paired_difference":
                bounds = t_bounds(samples[0] - samples[1], confidence)
            else:
                bounds = t_bounds(samples[0], confidence)
        elif method == "bootstrap_t":
            data = samples[0] - samples[1] if statistic == "paired_difference" else samples[0]
            bounds = bootstrap_t_bounds(data, t_key, reps, confidence)
        elif method == "trimmed_t":
            bounds = trimmed_t_bounds(samples[0], 0.25, confidence)
        elif statistic == "median":  # order_statistic
            bounds = order_statistic_bounds(samples[0], 0.5, confidence)
        else:  # ratio_of_medians, order_statistic
            bounds = ratio_of_medians_bounds(samples[0], samples[1], confidence)
        out.append(jnp.stack([jnp.asarray(b, point.dtype) for b in bounds]))
    return point, jnp.stack(out)


# ----------------------------------------------------------------------------- public wrappers


def _vector(x, name: str, allow_inf: bool = False, min_size: int = 1) -> np.ndarray:
    try:
        array = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a numeric 1-D array") from err
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D [n], got shape {array.shape}")
    if array.shape[0] < min_size:
        raise ValueError(f"{name} must hold at least {min_size} values, got {array.shape[0]}")
    if np.isnan(array).any():
        raise ValueError(f"{name} has NaN at index {int(np.argwhere(np.isnan(array))[0, 0])}; "
                         "drop missing seeds (code censored ones as +inf)")
    if not allow_inf and np.isinf(array).any():
        raise ValueError(f"{name} has an infinite value at index "
                         f"{int(np.argwhere(np.isinf(array))[0, 0])}; this interval needs "
                         "finite values (censored seeds: use a median)")
    return array


def _quantile64(x: np.ndarray, q: float) -> float:
    """``numpy.quantile(x, q)`` (linear) in float64 that keeps ``inf`` between infinities."""
    ordered = np.sort(x)
    pos = q * (ordered.shape[0] - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, ordered.shape[0] - 1)
    a, b, frac = ordered[lo], ordered[hi], pos - lo
    return float(a if frac == 0 or a == b else a + frac * (b - a))


def _f32(x: np.ndarray) -> jax.Array:
    return jnp.asarray(x, jnp.float32)


def t_interval(x, *, confidence: float = 0.95) -> Interval:
    """Student-t interval for the mean of ``x [n]`` (``n >= 2``, finite values).

    ``mean +- t_{n-1, (1 + confidence) / 2} s / sqrt(n)``; exact for normal data.

    Returns:
      :class:`Interval` (float64 throughout).
    """
    confidence = check_confidence(confidence)
    x = _vector(x, "x", min_size=2)
    n = x.shape[0]
    mean = float(np.mean(x))
    half = t_critical(n - 1, confidence) * float(np.std(x, ddof=1)) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half)


def paired_t_interval(x, y, *, confidence: float = 0.95) -> Interval:
    """Student-t interval for ``mean(x - y)`` over paired seeds ``x [n]``, ``y [n]``."""
    x = _vector(x, "x", min_size=2)
    y = _vector(y, "y", min_size=2)
    if x.shape != y.shape:
        raise ValueError(f"y must have the same length as x (paired), got {y.shape[0]} "
                         f"and {x.shape[0]}")
    return t_interval(x - y, confidence=confidence)


def trimmed_t_interval(x, *, proportion: float = 0.25, confidence: float = 0.95) -> Interval:
    """Tukey-McLaughlin / Yuen t interval for the trimmed mean of ``x [n]`` (IQM: 0.25).

    ``se^2 = (n - 1) s_w^2 / (h (h - 1))``, ``t_{h-1}``, ``h = n - 2 floor(proportion n)``
    (module docstring). Needs ``h >= 2``.
    """
    confidence = check_confidence(confidence)
    if not 0.0 <= float(proportion) < 0.5:
        raise ValueError(f"proportion must be in [0, 0.5), got {proportion!r}")
    x = _vector(x, "x", min_size=2)
    n = x.shape[0]
    g = int(math.floor(proportion * n))
    if n - 2 * g < 2:
        raise ValueError(f"x: trimming {proportion} of {n} values keeps fewer than 2")
    low, high = jax.jit(trimmed_t_bounds, static_argnums=(1, 2))(_f32(x), float(proportion),
                                                                 confidence)
    point = float(np.mean(np.sort(x)[g:n - g]))
    return as_interval(point, low, high)


def bootstrap_t_interval(x, *, key: jax.Array, reps: int = 1999,
                         confidence: float = 0.95) -> Interval:
    """Studentized-bootstrap (bootstrap-t) interval for the mean of ``x [n]`` (``n >= 2``).

    ``[mean - q(1 - alpha) se, mean - q(alpha) se]``, ``q`` the quantiles of ``t*`` over
    ``reps`` resamples (Efron & Tibshirani 1993, Ch. 12.5). Same key, same interval.
    """
    key = check_key(key)
    reps = check_reps(reps)
    confidence = check_confidence(confidence)
    x = _vector(x, "x", min_size=2)
    low, high = _jit_bootstrap_t(_f32(x), key, reps, confidence)
    return as_interval(float(np.mean(x)), low, high)


_jit_bootstrap_t = jax.jit(bootstrap_t_bounds, static_argnums=(2, 3))
_jit_order = jax.jit(order_statistic_bounds, static_argnums=(1, 2))
_jit_ratio = jax.jit(ratio_of_medians_bounds, static_argnums=(2,))


def order_statistic_interval(x, *, q: float = 0.5, confidence: float = 0.95) -> Interval:
    """Exact distribution-free interval ``[X_(l), X_(u)]`` for the ``q``-quantile of ``x``.

    Ranks from :func:`order_statistic_ranks`; coverage ``>= confidence`` for any
    distribution, with ties, and with ``+inf`` entries (right-censored seeds). Bounds are
    ``-inf`` / ``+inf`` when ``n`` is too small for the confidence (a median at 95 % needs
    ``n >= 6``). The point estimate is ``numpy.quantile(x, q)`` (the median for 0.5).

    Args:
      x: ``[n]`` values; ``+-inf`` allowed, NaN not.
      q: quantile in (0, 1).
      confidence: nominal coverage.

    Returns:
      :class:`Interval`.
    """
    confidence = check_confidence(confidence)
    x = _vector(x, "x", allow_inf=True)
    order_statistic_ranks(x.shape[0], float(q), confidence)  # validates q
    low, high = _jit_order(_f32(x), float(q), confidence)
    return as_interval(_quantile64(x, float(q)), low, high)


def ratio_of_medians_interval(x, y, *, confidence: float = 0.95) -> Interval:
    """Bonferroni order-statistic interval for ``median(x) / median(y)``.

    Two exact order-statistic intervals at ``1 - (1 - confidence) / 2`` divided as
    intervals; valid (conservative) for paired or independent samples, ties and ``+inf``
    (censored) values. ``x [n]``, ``y [m]``.
    """
    confidence = check_confidence(confidence)
    x = _vector(x, "x", allow_inf=True)
    y = _vector(y, "y", allow_inf=True)
    low, high = _jit_ratio(_f32(x), _f32(y), confidence)
    with np.errstate(divide="ignore", invalid="ignore"):
        point = float(np.median(x) / np.median(y))
    return as_interval(point, low, high)


def two_way_t_interval(matrix, *, confidence: float = 0.95) -> Interval:
    """Two-way t interval for the grand mean of a crossed ``matrix [S, P]`` (seeds x prompts).

    ``se^2 = var(row means) / S + var(column means) / P``, ``t_{min(S, P) - 1}`` (module
    docstring; conservative under the crossed random-effects model).
    """
    confidence = check_confidence(confidence)
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2 or min(m.shape) < 2:
        raise ValueError(f"matrix must be [seeds, prompts] with both >= 2, got shape {m.shape}")
    if not np.isfinite(m).all():
        raise ValueError("matrix must hold finite values")
    seeds, prompts = m.shape
    se = math.sqrt(np.var(m.mean(axis=1), ddof=1) / seeds + np.var(m.mean(axis=0), ddof=1)
                   / prompts)
    half = t_critical(min(seeds, prompts) - 1, confidence) * se
    mean = float(m.mean())
    return Interval(mean, mean - half, mean + half)


__all__ = [
    "BOOTSTRAP_METHODS",
    "METHODS_BY_STATISTIC",
    "STATISTIC_FNS",
    "bootstrap_t_bounds",
    "bootstrap_t_interval",
    "bounds_from_replicates",
    "divide_intervals",
    "interval_bounds",
    "order_statistic_bounds",
    "order_statistic_interval",
    "order_statistic_ranks",
    "paired_t_interval",
    "ratio_of_medians_bounds",
    "ratio_of_medians_interval",
    "sorted_quantiles",
    "t_bounds",
    "t_critical",
    "t_interval",
    "trimmed_t_bounds",
    "trimmed_t_interval",
    "two_way_mean",
    "two_way_replicates",
    "two_way_t_bounds",
    "two_way_t_interval",
]


def clopper_pearson(successes: int, trials: int,
                    confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval for a binomial proportion.

    ``low = Beta^{-1}(alpha; x, n - x + 1)`` (0 when ``x = 0``) and ``high =
    Beta^{-1}(1 - alpha; x + 1, n - x)`` (1 when ``x = n``), ``alpha = (1 - confidence) /
    2``: the interval inverts two one-sided binomial tests, so its coverage is ``>=
    confidence`` for every true proportion and every ``n`` (conservative; no simulation
    needed). Clopper & Pearson, Biometrika 26, 1934.

    Args:
      successes: x, an integer in ``[0, trials]``.
      trials: n >= 1.
      confidence: in (0, 1).

    Returns:
      ``(low, high)`` floats in [0, 1].
    """
    from scipy.stats import beta

    if not isinstance(trials, int | np.integer) or trials < 1:
        raise ValueError(f"trials: must be an integer >= 1, got {trials!r}")
    if not isinstance(successes, int | np.integer) or not 0 <= successes <= trials:
        raise ValueError(f"successes: must be an integer in [0, trials = {trials}], "
                         f"got {successes!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence: must be in (0, 1), got {confidence!r}")
    alpha = (1.0 - confidence) / 2.0
    x, n = int(successes), int(trials)
    low = 0.0 if x == 0 else float(beta.ppf(alpha, x, n - x + 1))
    high = 1.0 if x == n else float(beta.ppf(1.0 - alpha, x + 1, n - x))
    return low, high
