"""Coverage of interval methods, measured by simulation on known truths.

An interval method "is 95 %" only if, over many datasets drawn from a distribution whose
true statistic ``theta`` is known, ``low <= theta <= high`` about 95 % of the time. This
module draws ``sims`` datasets of ``n`` seeds from each distribution of
:data:`DISTRIBUTIONS` (numpy, seeded), runs every method of
:data:`~rljax.stats.small_sample.METHODS_BY_STATISTIC` on each dataset with
:func:`~rljax.stats.small_sample.interval_bounds` (one jitted program per statistic, n and
method set; ``jax.lax.map`` over datasets with ``jax.vmap`` inside batches, never a Python
loop over simulations; the bootstrap methods share one set of replicates per dataset) and
reports, per method,

* ``coverage`` ``c`` = the fraction of datasets whose interval holds ``theta`` (an undefined,
  NaN, interval counts as a miss), with its Monte Carlo standard error ``sqrt(c (1 - c) /
  sims)``;
* ``mean_width`` over the datasets whose interval is finite, ``infinite_fraction`` (an
  unbounded interval, e.g. an order-statistic interval at n = 5, or one reaching a
  censored seed) and ``undefined_fraction`` (NaN bounds, e.g. BCa on constant data).

Distributions (the quantile function ``Q`` is applied to uniforms, so pairs come from a
Gaussian copula with correlation 0.5: ``x = Q(u1)``, ``y = Q(u2) / 2``):
normal; lognormal(0, 1) (skewed); Student t with 3 df and Pareto(2.5) (heavy tails);
Bernoulli(0.3) and Bernoulli(0.9) (success rates; ties); Poisson(3) (integer counts, ties);
exponential(1) times right-censored at 1 (``+inf``, 37 % of seeds; median and ratios only).
Truths are closed forms where they exist; the IQM's is ``2 int_{1/4}^{3/4} Q(u) du`` by the
midpoint rule on 2^21 points. Paired difference: ``E x - E y = E x / 2``; ratio of medians:
2. ``two_way_mean`` draws a crossed ``[S seeds, P prompts]`` matrix of Bernoulli outcomes
with ``P(success) = sigmoid(mu + a_s + b_p)``, seed effects ``a ~ N(0, sigma_s^2)`` and prompt
effects ``b ~ N(0, sigma_p^2)`` drawn anew per dataset; its truth is the population mean
``E sigmoid(mu + sqrt(sigma_s^2 + sigma_p^2) Z)`` (Gauss-Hermite, 200 nodes).

Source: the simulation design of Hall 1988 ("Theoretical comparison of bootstrap confidence
intervals", Ann. Stat.) and DiCiccio & Efron 1996 (Stat. Sci.), Sec. 1.
"""

from __future__ import annotations

import functools
import math
import warnings
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special as spsp
from scipy import stats as sps

from rljax.stats.small_sample import METHODS_BY_STATISTIC, TWO_SAMPLE, interval_bounds

COPULA_CORRELATION = 0.5
Y_SCALE = 0.5
CENSOR_AT = 1.0
# Resampled values per vmapped batch of datasets (keeps a batch's arrays a few MB).
BATCH_ELEMENTS = 2**21


class Distribution(NamedTuple):
    """A simulated population of per-seed values.

    Attributes:
      name: label.
      quantile: ``Q(u)`` elementwise on a numpy array of uniforms.
      mean: the true mean (None: undefined, e.g. censored).
      censor_at: values above it become ``+inf`` (None: not censored).
      positive: all values > 0 with a positive median (ratios of medians apply).
    """

    name: str
    quantile: Callable[[np.ndarray], np.ndarray]
    mean: float | None
    censor_at: float | None = None
    positive: bool = False

    def sample(self, u: np.ndarray, scale: float = 1.0) -> np.ndarray:
        """Values ``scale * Q(u)``, censored to ``+inf`` above ``censor_at``."""
        x = scale * self.quantile(u)
        if self.censor_at is not None:
            x = np.where(x > self.censor_at, np.inf, x)
        return x

    def median(self) -> float:
        """``Q(1/2)`` (for a discrete law: the smallest ``x`` with ``F(x) >= 1/2``)."""
        return float(self.sample(np.array([0.5]))[0])

    def iqm(self) -> float:
        """Population IQM ``2 int_{1/4}^{3/4} Q(u) du`` (midpoint rule, 2^21 points)."""
        m = 2**21
        u = 0.25 + 0.5 * (np.arange(m) + 0.5) / m
        return float(np.mean(self.sample(u)))


class CrossedDesign(NamedTuple):
    """Crossed seeds x prompts Bernoulli outcomes: ``P = sigmoid(mu + a_s + b_p)``."""

    name: str
    mu: float
    seed_sd: float
    prompt_sd: float

    def truth(self) -> float:
        """``E sigmoid(mu + sqrt(seed_sd^2 + prompt_sd^2) Z)``, Gauss-Hermite quadrature."""
        nodes, weights = np.polynomial.hermite_e.hermegauss(200)
        sd = math.hypot(self.seed_sd, self.prompt_sd)
        return float(np.sum(weights * spsp.expit(self.mu + sd * nodes)) / np.sum(weights))

    def sample(self, rng: np.random.Generator, sims: int, seeds: int,
               prompts: int) -> np.ndarray:
        """``[sims, seeds, prompts]`` 0/1 outcomes, effects drawn anew per dataset."""
        a = rng.normal(0.0, self.seed_sd, (sims, seeds, 1))
        b = rng.normal(0.0, self.prompt_sd, (sims, 1, prompts))
        return (rng.random((sims, seeds, prompts)) < spsp.expit(self.mu + a + b)).astype(
            np.float32)


def _bernoulli(p):
    return lambda u: (u > 1.0 - p).astype(np.float64)


DISTRIBUTIONS: dict[str, Distribution] = {d.name: d for d in [
    Distribution("normal", sps.norm.ppf, 0.0),
    Distribution("lognormal", lambda u: np.exp(sps.norm.ppf(u)), math.exp(0.5), positive=True),
    Distribution("student_t3", lambda u: sps.t.ppf(u, 3), 0.0),
    Distribution("pareto2.5", lambda u: (1.0 - u) ** (-1.0 / 2.5), 2.5 / 1.5, positive=True),
    Distribution("bernoulli0.3", _bernoulli(0.3), 0.3),
    Distribution("bernoulli0.9", _bernoulli(0.9), 0.9),
    Distribution("poisson3", lambda u: sps.poisson.ppf(u, 3.0), 3.0, positive=True),
    Distribution("censored_exp", lambda u: -np.log1p(-u), None, CENSOR_AT, positive=True),
]}
"""Per-seed populations (see the module docstring)."""

CROSSED: dict[str, CrossedDesign] = {d.name: d for d in [
    CrossedDesign("crossed_hard", 0.0, 0.5, 1.5),
    CrossedDesign("crossed_easy", 2.0, 1.0, 1.0),
]}
"""Crossed seeds x prompts designs for ``two_way_mean``."""

_UNCENSORED = [name for name, d in DISTRIBUTIONS.items() if d.censor_at is None]
STATISTIC_DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "mean": tuple(_UNCENSORED),
    "paired_difference": tuple(_UNCENSORED),
    "iqm": tuple(_UNCENSORED),
    "median": tuple(DISTRIBUTIONS),
    "ratio_of_medians": tuple(name for name, d in DISTRIBUTIONS.items() if d.positive),
    "two_way_mean": tuple(CROSSED),
}
"""The distributions each statistic is simulated on (no mean or IQM of censored times)."""

DATA_KINDS: dict[str, tuple[str, ...]] = {
    "symmetric": ("normal", "student_t3"),
    "skewed": ("lognormal", "pareto2.5"),
    "binary": ("bernoulli0.3", "bernoulli0.9"),
    "counts": ("poisson3",),
    "censored": ("censored_exp",),
    "crossed": tuple(CROSSED),
}
"""Kinds of per-seed data and the simulated distributions that stand for each.

A study says which kind its per-seed values are (``reported_interval(..., data=KIND)``) and
is held to the coverage on those distributions; ``"any"`` (the default) is the minimum
over all of a statistic's distributions. Why kinds at all: no interval for a mean can hold
its level over *every* distribution at a fixed n (Bahadur & Savage 1956, Ann. Math.
Stat. 27), so a worst case over all simulated ones -- single Bernoulli(0.9) trials at
n = 8 have all seeds equal 43 % of the time -- says nothing about, say, per-seed
accuracies over 32 problems. ``counts`` (Poisson(3)) stands for per-seed numbers of
successes (accuracy = successes / problems); ``binary`` for one 0/1 outcome per seed.
"""


class CoverageResult(NamedTuple):
    """Measured coverage of one method on one (statistic, distribution, n): Python scalars."""

    coverage: float
    mc_se: float
    sims: int
    mean_width: float
    infinite_fraction: float
    undefined_fraction: float


@functools.cache
def truth(statistic: str, distribution: str) -> float:
    """The true value of ``statistic`` on ``distribution`` (see the module docstring)."""
    if statistic == "two_way_mean":
        return CROSSED[distribution].truth()
    d = DISTRIBUTIONS[distribution]
    if statistic == "mean":
        if d.mean is None:
            raise ValueError(f"distribution: {distribution} has no mean (censored)")
        return d.mean
    if statistic == "paired_difference":
        return (1.0 - Y_SCALE) * truth("mean", distribution)
    if statistic == "median":
        return d.median()
    if statistic == "iqm":
        return d.iqm()
    if statistic == "ratio_of_medians":
        return d.median() / (Y_SCALE * d.median())
    raise ValueError(f"statistic must be one of {', '.join(METHODS_BY_STATISTIC)}, "
                     f"got {statistic!r}")


def _seed(*parts) -> int:
    return zlib.crc32("/".join(map(str, parts)).encode()) & 0x7FFFFFFF


def simulate_data(statistic: str, distribution: str, n: int, sims: int, *, seed: int = 0,
                  prompts: int = 64) -> tuple[np.ndarray, ...]:
    """The simulated datasets: ``([sims, n],)``, ``([sims, n], [sims, n])`` for the
    two-sample statistics, or ``([sims, n, prompts],)`` for ``two_way_mean``.

    Deterministic in ``(seed, statistic, distribution, n)``; float32.
    """
    rng = np.random.default_rng(_seed(seed, statistic, distribution, n, sims))
    if statistic == "two_way_mean":
        return (CROSSED[distribution].sample(rng, sims, n, prompts),)
    d = DISTRIBUTIONS[distribution]
    if statistic in TWO_SAMPLE:
        z1 = rng.standard_normal((sims, n))
        z2 = COPULA_CORRELATION * z1 + math.sqrt(1 - COPULA_CORRELATION**2) * \
            rng.standard_normal((sims, n))
        return (d.sample(sps.norm.cdf(z1)).astype(np.float32),
                d.sample(sps.norm.cdf(z2), Y_SCALE).astype(np.float32))
    return (d.sample(rng.random((sims, n))).astype(np.float32),)


@functools.partial(jax.jit, static_argnames=("statistic", "methods", "reps", "confidence",
                                             "batch"))
def _simulated_bounds(data, keys, statistic, methods, reps, confidence, batch):
    def one(args):
        key, *samples = args
        return interval_bounds(statistic, methods, samples, key, reps=reps,
                               confidence=confidence)[1]

    return jax.lax.map(one, (keys, *data), batch_size=batch)


def simulated_bounds(statistic: str, data: Sequence[np.ndarray], *, methods: Sequence[str],
                     key: jax.Array, reps: int, confidence: float = 0.95) -> np.ndarray:
    """``[sims, M, 2]`` bounds of every method on every simulated dataset (one program).

    Args:
      statistic: a key of :data:`~rljax.stats.small_sample.METHODS_BY_STATISTIC`.
      data: the arrays of :func:`simulate_data` (leading axis = datasets).
      methods: method names (static).
      key: JAX key; dataset ``i`` uses ``split(key, sims)[i]``.
      reps: bootstrap resamples per dataset.
      confidence: nominal coverage.
    """
    sims = data[0].shape[0]
    per_dataset = reps * int(np.prod(data[0].shape[1:])) * len(data)
    if statistic == "two_way_mean":
        per_dataset = reps * (sum(data[0].shape[1:]) + data[0].shape[1] * 8)
    batch = max(1, min(sims, BATCH_ELEMENTS // max(per_dataset, 1)))
    keys = jax.random.split(key, sims)
    out = _simulated_bounds(tuple(jnp.asarray(a) for a in data), keys, statistic,
                            tuple(methods), int(reps), float(confidence), int(batch))
    return np.asarray(out, np.float64)


def summarize_bounds(bounds: np.ndarray, truth_value: float) -> list[CoverageResult]:
    """One :class:`CoverageResult` per method from ``bounds [sims, M, 2]``."""
    sims = bounds.shape[0]
    low, high = bounds[..., 0], bounds[..., 1]
    with np.errstate(invalid="ignore"):
        covered = (low <= truth_value) & (truth_value <= high)
        width = high - low
    out = []
    for m in range(bounds.shape[1]):
        c = float(np.mean(covered[:, m]))
        finite = np.isfinite(width[:, m])
        undefined = np.isnan(low[:, m]) | np.isnan(high[:, m])
        out.append(CoverageResult(
            coverage=c, mc_se=math.sqrt(c * (1.0 - c) / sims), sims=int(sims),
            mean_width=float(np.mean(width[finite, m])) if finite.any() else math.inf,
            infinite_fraction=float(np.mean(~finite & ~undefined)),
            undefined_fraction=float(np.mean(undefined))))
    return out


def simulate_coverage(statistic: str, distribution: str, n: int, *,
                      methods: Sequence[str] | None = None, sims: int = 1000, reps: int = 999,
                      confidence: float = 0.95, seed: int = 0,
                      prompts: int = 64) -> dict[str, CoverageResult]:
    """Measured coverage of interval methods for one statistic, distribution and ``n``.

    Args:
      statistic: ``"mean"``, ``"median"``, ``"iqm"``, ``"ratio_of_medians"``,
        ``"paired_difference"`` or ``"two_way_mean"``.
      distribution: a key of :data:`DISTRIBUTIONS` (:data:`CROSSED` for two_way_mean).
      n: seeds per dataset (>= 2; >= 3 for BCa and the t methods to be defined).
      methods: defaults to all of ``METHODS_BY_STATISTIC[statistic]``.
      sims: simulated datasets (the MC error of a coverage ``c`` is ``sqrt(c (1-c)/sims)``).
      reps: bootstrap resamples per dataset.
      confidence: nominal coverage.
      seed: data and bootstrap seed.
      prompts: prompts per dataset (two_way_mean only).

    Returns:
      ``{method: CoverageResult}``.
    """
    if statistic not in METHODS_BY_STATISTIC:
        raise ValueError(f"statistic must be one of {', '.join(METHODS_BY_STATISTIC)}, "
                         f"got {statistic!r}")
    if distribution not in STATISTIC_DISTRIBUTIONS[statistic]:
        raise ValueError(f"distribution: {statistic} is simulated on "
                         f"{', '.join(STATISTIC_DISTRIBUTIONS[statistic])}, got {distribution!r}")
    if int(n) < 2:
        raise ValueError(f"n must be an integer >= 2, got {n!r}")
    methods = tuple(methods or METHODS_BY_STATISTIC[statistic])
    data = simulate_data(statistic, distribution, int(n), int(sims), seed=seed,
                         prompts=prompts)
    key = jax.random.key(_seed(seed, "bootstrap", statistic, distribution, n))
    bounds = simulated_bounds(statistic, data, methods=methods, key=key, reps=reps,
                              confidence=confidence)
    results = summarize_bounds(bounds, truth(statistic, distribution))
    return dict(zip(methods, results, strict=True))


# ----------------------------------------------------------------------------- paired


PAIRED_CORRELATIONS = (0.0, 0.5, 0.9)
"""Seed-to-seed correlations of X and Y at which the paired comparisons are simulated."""

PAIRED_MARGINALS = ("normal", "lognormal")
"""Marginal laws of the simulated pairs: ``normal`` (``x = delta + z1``, ``y = z2``) or
``lognormal`` (``exp`` of those; skewed, heavy right tail)."""

PAIRED_TESTS = ("paired_t", "wilcoxon", "welch", "mann_whitney")
"""Tests whose size :func:`simulate_paired_test_size` measures (the last two unpaired, for
contrast)."""


class RejectionRate(NamedTuple):
    """How often a test rejected at level ``alpha``: ``rate``, its Monte Carlo standard
    error ``mc_se = sqrt(rate (1 - rate) / sims)`` and ``sims`` (Python scalars)."""

    rate: float
    mc_se: float
    sims: int


def paired_data(n: int, sims: int, *, correlation: float, delta: float = 0.0,
                marginal: str = "normal", seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(x [sims, n], y [sims, n])``: ``sims`` datasets of ``n`` seed pairs.

    ``(z1, z2)`` standard bivariate normal with correlation ``correlation`` per seed;
    ``x = delta + z1``, ``y = z2`` (``marginal="normal"``) or their exponentials
    (``"lognormal"``). Seeds are independent; within a seed, ``x`` and ``y`` are
    correlated as runs sharing a seed key are. Deterministic in the arguments; float64.
    """
    if marginal not in PAIRED_MARGINALS:
        raise ValueError(f"marginal must be one of {', '.join(PAIRED_MARGINALS)}, got "
                         f"{marginal!r}")
    if not -1.0 < float(correlation) < 1.0:
        raise ValueError(f"correlation must be strictly between -1 and 1, got {correlation!r}")
    rng = np.random.default_rng(_seed(seed, "paired", n, sims, correlation, delta, marginal))
    z1 = rng.standard_normal((sims, n))
    z2 = correlation * z1 + math.sqrt(1.0 - correlation**2) * rng.standard_normal((sims, n))
    x, y = delta + z1, z2
    if marginal == "lognormal":
        x, y = np.exp(x), np.exp(y)
    return x, y


def poi_truth(delta: float) -> float:
    """True probability of improvement of :func:`paired_data`: ``Phi(delta / sqrt(2))``.

    Probability of improvement compares every run of X with every run of Y, so its
    estimand is ``P(X > Y')`` for *independent* draws (different seeds): ``X - Y' ~
    N(delta, 2)`` whatever the within-seed correlation (and the same for the lognormal
    marginals: ``exp`` is increasing). A scalar.
    """
    return float(sps.norm.cdf(float(delta) / math.sqrt(2.0)))


def simulate_paired_test_size(n: int, *, correlation: float, sims: int = 2000,
                              marginal: str = "normal", alpha: float = 0.05,
                              tests: Sequence[str] = PAIRED_TESTS,
                              seed: int = 0) -> dict[str, RejectionRate]:
    """Size (rejection rate under H0) of two-sided tests on paired data with no effect.

    Draws :func:`paired_data` with ``delta = 0`` (exchangeable pairs: ``x_i - y_i`` is
    symmetric about 0, so both the paired t-test's and Wilcoxon's null hypotheses hold) and
    runs each test of ``tests`` (:data:`PAIRED_TESTS`: the public ``rljax.stats`` functions,
    one call per dataset) at level ``alpha``. A valid test rejects at most ``alpha`` of the
    time (up to Monte Carlo error).

    Args:
      n: seed pairs per dataset (>= 2; the Wilcoxon test needs n >= 6 to reach p < 0.05).
      correlation: within-seed correlation of ``x`` and ``y``.
      sims: simulated datasets.
      marginal: ``"normal"`` or ``"lognormal"``.
      alpha: level.
      tests: names from :data:`PAIRED_TESTS`.
      seed: data seed.

    Returns:
      ``{test: RejectionRate}`` (scalars).
    """
    from rljax.stats import comparisons, paired

    functions = {"paired_t": paired.paired_ttest, "wilcoxon": paired.wilcoxon_signed_rank,
                 "welch": comparisons.welch_ttest, "mann_whitney": comparisons.mann_whitney_u}
    unknown = [t for t in tests if t not in functions]
    if unknown:
        raise ValueError(f"tests must be names from {', '.join(PAIRED_TESTS)}, got {unknown}")
    x, y = paired_data(int(n), int(sims), correlation=correlation, marginal=marginal,
                       seed=seed)
    out = {}
    for name in tests:
        with np.errstate(all="ignore"):
            pvalues = np.array([functions[name](a, b).pvalue for a, b in zip(x, y,
                                                                             strict=True)])
        rate = float(np.mean(pvalues <= alpha))  # NaN p-values (no variation) never reject
        out[name] = RejectionRate(rate, math.sqrt(rate * (1.0 - rate) / sims), int(sims))
    return out


def simulate_poi_coverage(n: int, *, correlation: float, delta: float = 0.5,
                          sims: int = 1000, reps: int = 999, confidence: float = 0.95,
                          methods: Sequence[str] = ("percentile", "basic", "bca"),
                          marginal: str = "normal",
                          seed: int = 0) -> dict[tuple[str, str], CoverageResult]:
    """Coverage of the probability-of-improvement interval, paired and unpaired.

    Draws :func:`paired_data` and computes, on each dataset,
    ``rljax.stats.probability_of_improvement_ci(x, y, paired=...)`` for both resampling
    schemes and every ``method`` (one task; dataset ``i`` uses ``fold_in(key, i)``, the
    methods share its replicates), and counts how often the interval holds
    :func:`poi_truth` ``(delta)``.

    Args:
      n: seeds per dataset (>= 2).
      correlation: within-seed correlation of ``x`` and ``y``.
      delta: the shift of X (``P = Phi(delta / sqrt(2))``).
      sims: simulated datasets.
      reps: bootstrap resamples per interval.
      confidence: nominal coverage.
      methods: interval methods (``percentile``, ``basic``, ``bca``).
      marginal: ``"normal"`` or ``"lognormal"`` (the same truth).
      seed: data and bootstrap seed.

    Returns:
      ``{("paired" | "unpaired", method): CoverageResult}`` (scalars).
    """
    from rljax.stats.comparisons import probability_of_improvement_ci

    x, y = paired_data(int(n), int(sims), correlation=correlation, delta=delta,
                       marginal=marginal, seed=seed)
    key = jax.random.key(_seed(seed, "poi", n, sims, correlation, delta, marginal))
    schemes = {"paired": True, "unpaired": False}
    bounds = np.empty((int(sims), len(schemes) * len(methods), 2))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # undefined BCa: NaN, a miss
        for i in range(int(sims)):
            dataset_key = jax.random.fold_in(key, i)
            for s, is_paired in enumerate(schemes.values()):
                for m, method in enumerate(methods):
                    iv = probability_of_improvement_ci(
                        x[i], y[i], key=dataset_key, reps=reps, confidence=confidence,
                        method=method, paired=is_paired)
                    bounds[i, s * len(methods) + m] = (iv.low, iv.high)
    results = summarize_bounds(bounds, poi_truth(delta))
    labels = [(scheme, method) for scheme in schemes for method in methods]
    return dict(zip(labels, results, strict=True))


POI_COVERAGE: dict[str, dict[str, dict[int, dict[float, float]]]] = {
    "paired": {
        "percentile": {
            5: {0.0: 0.866, 0.5: 0.8315, 0.9: 0.5305},
            10: {0.0: 0.907, 0.5: 0.925, 0.9: 0.8395},
            16: {0.0: 0.923, 0.5: 0.9415, 0.9: 0.912},
            32: {0.0: 0.944, 0.5: 0.945, 0.9: 0.93},
        },
        "basic": {
            5: {0.0: 0.7945, 0.5: 0.8775, 0.9: 0.918},
            10: {0.0: 0.8715, 0.5: 0.926, 0.9: 0.9725},
            16: {0.0: 0.8925, 0.5: 0.947, 0.9: 0.959},
            32: {0.0: 0.931, 0.5: 0.946, 0.9: 0.9545},
        },
        "bca": {
            5: {0.0: 0.8755, 0.5: 0.838, 0.9: 0.5145},
            10: {0.0: 0.936, 0.5: 0.9445, 0.9: 0.8935},
            16: {0.0: 0.9395, 0.5: 0.9575, 0.9: 0.929},
            32: {0.0: 0.948, 0.5: 0.949, 0.9: 0.9475},
        },
    },
    "unpaired": {
        "percentile": {
            5: {0.0: 0.913, 0.5: 0.956, 0.9: 0.9805},
            10: {0.0: 0.9235, 0.5: 0.977, 0.9: 0.9985},
            16: {0.0: 0.9255, 0.5: 0.9875, 0.9: 0.998},
            32: {0.0: 0.95, 0.5: 0.9895, 0.9: 1.0},
        },
        "basic": {
            5: {0.0: 0.7995, 0.5: 0.8805, 0.9: 0.9325},
            10: {0.0: 0.882, 0.5: 0.947, 0.9: 0.992},
            16: {0.0: 0.896, 0.5: 0.974, 0.9: 0.9945},
            32: {0.0: 0.9355, 0.5: 0.98, 0.9: 0.999},
        },
        "bca": {
            5: {0.0: 0.9305, 0.5: 0.967, 0.9: 0.9825},
            10: {0.0: 0.968, 0.5: 0.993, 0.9: 0.9995},
            16: {0.0: 0.958, 0.5: 0.994, 0.9: 0.999},
            32: {0.0: 0.957, 0.5: 0.995, 0.9: 1.0},
        },
    },
}
"""Measured coverage of 95 % probability-of-improvement intervals:
``{"paired" | "unpaired": {method: {n: {correlation: coverage}}}}``, from
``simulate_poi_coverage(n, correlation=rho, delta=0.5, sims=2000, reps=999, seed=0)``
(normal seeds, true P = Phi(0.5 / sqrt(2)) = 0.638; Monte Carlo standard error about
0.005 at 0.95). At few seeds and strong within-seed correlation the paired percentile
interval is too narrow: the estimator counts each seed's own pair (weight 1/n), whose
P(x_i > y_i) differs from the cross-seed P, and the paired bootstrap doubles that bias
(docs/stats.md, "Paired comparisons")."""

POI_COVERAGE_SIMS = 2000
"""Simulated datasets behind each cell of :data:`POI_COVERAGE`."""


def poi_coverage(scheme: str, method: str, n: int) -> tuple[int, float, float] | None:
    """The measured coverage of a probability-of-improvement interval at ``n`` seeds.

    Reads :data:`POI_COVERAGE` at the largest simulated n at or below ``n`` (fewer seeds
    cover worse) and takes the minimum over the simulated correlations.

    Args:
      scheme: ``"paired"`` or ``"unpaired"``.
      method: ``"percentile"``, ``"basic"`` or ``"bca"``.
      n: seeds (pairs) compared.

    Returns:
      ``(simulated n, minimum coverage, the correlation where it occurs)`` (scalars), or
      ``None`` below the smallest simulated n.
    """
    table = POI_COVERAGE[scheme][method]
    sizes = [k for k in sorted(table) if k <= int(n)]
    if not sizes:
        return None
    by_rho = table[sizes[-1]]
    rho = min(by_rho, key=by_rho.get)
    return sizes[-1], by_rho[rho], rho


def size_ranges(sizes: Sequence[int]) -> dict[int, str]:
    """``{n_k: "n_k-(n_{k+1} - 1)"}`` and ``"n_last+"``: each simulated n stands for the
    sizes up to the next one (conservative: a size uses the nearest simulated n at or
    below it)."""
    sizes = sorted(int(n) for n in sizes)
    out = {}
    for i, n in enumerate(sizes):
        out[n] = f"{n}+" if i == len(sizes) - 1 else (
            f"{n}" if sizes[i + 1] == n + 1 else f"{n}-{sizes[i + 1] - 1}")
    return out


def qualifies(results: Mapping[str, Mapping[str, Any]], threshold: float,
              max_infinite: float = 0.05) -> bool:
    """A method's ``{distribution: result dict}`` at one n passes the rule: coverage ``>=
    threshold`` on every distribution and finite intervals on all but ``max_infinite`` of
    the datasets of every uncensored distribution."""
    for dist, r in results.items():
        if r["coverage"] < threshold:
            return False
        censored = dist in DISTRIBUTIONS and DISTRIBUTIONS[dist].censor_at is not None
        if not censored and r["infinite_fraction"] > max_infinite:
            return False
    return True


PREFERENCE: dict[str, tuple[str, ...]] = {
    "mean": ("t", "bootstrap_t", "bca", "percentile", "basic"),
    "paired_difference": ("t", "bootstrap_t", "bca", "percentile", "basic"),
    "median": ("order_statistic", "percentile", "bca", "basic"),
    "iqm": ("trimmed_t", "bca", "percentile", "basic"),
    "ratio_of_medians": ("percentile", "bca", "order_statistic", "basic"),
    "two_way_mean": ("t", "percentile", "basic"),
}
"""Order in which :func:`recommend_methods` tries the methods of each statistic."""


def recommend_methods(coverage: Mapping[str, Any], *, threshold: float = 0.93,
                      max_infinite: float = 0.05,
                      distributions: Sequence[str] | None = None) -> dict[str, dict[str, str]]:
    """The recommended method per statistic and n-range from a nested coverage table.

    Rule: the first method in :data:`PREFERENCE` order that qualifies (:func:`qualifies`:
    minimum coverage over the distributions ``>= threshold``, bounded intervals); if none
    qualifies, ``"none: run more seeds (...)"`` naming the smallest simulated n at which one
    does. A fixed order (exact and closed-form methods first, then the bootstraps) rather
    than "the narrowest" keeps the choice from flipping between neighbouring n on Monte
    Carlo noise; the widths are in the table for anyone who wants to trade.

    Args:
      coverage: ``{method: {statistic: {distribution: {str(n): result dict}}}}`` (the
        study's ``summary["coverage"]``).
      threshold: minimum coverage.
      max_infinite: allowed fraction of unbounded intervals (uncensored distributions).
      distributions: only these distributions count (None: all); a statistic simulated
        on none of them is left out.

    Returns:
      ``{statistic: {n-range: method}}`` (strings; the table holds Python scalars).
    """
    out: dict[str, dict[str, str]] = {}
    statistics = sorted({s for by_stat in coverage.values() for s in by_stat})
    for stat in statistics:
        methods = [m for m in coverage if stat in coverage[m]]
        if distributions is not None and not any(
                d in distributions for m in methods for d in coverage[m][stat]):
            continue
        sizes = sorted({int(n) for m in methods for d in coverage[m][stat].values() for n in d})
        ranges = size_ranges(sizes)
        chosen: dict[int, str | None] = {}
        for n in sizes:
            chosen[n] = None
            order = [m for m in PREFERENCE.get(stat, ()) if m in methods]
            for m in order + [m for m in methods if m not in order]:
                at_n = {d: v[str(n)] for d, v in coverage[m][stat].items()
                        if str(n) in v and (distributions is None or d in distributions)}
                if at_n and qualifies(at_n, threshold, max_infinite):
                    chosen[n] = m
                    break
        out[stat] = {}
        for n in sizes:
            if chosen[n] is not None:
                out[stat][ranges[n]] = chosen[n]
            else:
                later = [k for k in sizes if k > n and chosen[k] is not None]
                hint = (f"smallest simulated n where a method qualifies: {later[0]}" if later
                        else "no simulated n qualifies")
                out[stat][ranges[n]] = f"none: run more seeds ({hint})"
    return out


def recommend_methods_by_data(coverage: Mapping[str, Any], *, threshold: float = 0.93,
                              max_infinite: float = 0.05) -> dict[str, dict[str, dict[str, str]]]:
    """:func:`recommend_methods` per kind of data (:data:`DATA_KINDS`).

    Returns:
      ``{statistic: {kind: {n-range: method}}}`` for the kinds a statistic was simulated on.
    """
    out: dict[str, dict[str, dict[str, str]]] = {}
    for kind, names in DATA_KINDS.items():
        table = recommend_methods(coverage, threshold=threshold, max_infinite=max_infinite,
                                  distributions=names)
        for stat, by_range in table.items():
            out.setdefault(stat, {})[kind] = by_range
    return out


__all__ = [
    "CROSSED",
    "PAIRED_CORRELATIONS",
    "PAIRED_MARGINALS",
    "PAIRED_TESTS",
    "POI_COVERAGE",
    "POI_COVERAGE_SIMS",
    "DATA_KINDS",
    "CoverageResult",
    "CrossedDesign",
    "DISTRIBUTIONS",
    "Distribution",
    "PREFERENCE",
    "RejectionRate",
    "STATISTIC_DISTRIBUTIONS",
    "paired_data",
    "poi_coverage",
    "poi_truth",
    "qualifies",
    "recommend_methods",
    "recommend_methods_by_data",
    "simulate_coverage",
    "simulate_data",
    "simulate_paired_test_size",
    "simulate_poi_coverage",
    "simulated_bounds",
    "size_ranges",
    "summarize_bounds",
    "truth",
]
