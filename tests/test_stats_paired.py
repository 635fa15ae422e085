"""Paired comparisons: the paired t and Wilcoxon signed-rank tests against scipy, the paired
probability-of-improvement bootstrap against a numpy loop over the same resamples (under
jit and vmap), its width against the unpaired one, paired-t power against statsmodels, and
the tests' size / the interval's coverage measured by simulation."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats as sps

from rljax import stats
from rljax.stats import coverage as cov
from rljax.stats.bootstrap import chunk_plan
from rljax.stats.comparisons import _pair_tables, _poi_replicates

pytestmark = pytest.mark.timeout(120)

ALTERNATIVES = ("two-sided", "less", "greater")


def _correlated(n, rho=0.9, shift=0.3, seed=0, tasks=None):
    rng = np.random.default_rng(seed)
    shape = (n,) if tasks is None else (n, tasks)
    z1, z2 = rng.normal(size=shape), rng.normal(size=shape)
    return shift + z1, rho * z1 + math.sqrt(1 - rho**2) * z2


# ----------------------------------------------------------------------------- tests vs scipy


@pytest.mark.parametrize("alternative", ALTERNATIVES)
def test_paired_ttest_equals_scipy_ttest_rel(alternative):
    x, y = _correlated(12)
    got = stats.paired_ttest(x, y, alternative=alternative)
    ref = sps.ttest_rel(x, y, alternative=alternative)
    assert (got.statistic, got.pvalue) == pytest.approx((ref.statistic, ref.pvalue), rel=1e-12)
    assert got.df == 11
    unpaired = sps.ttest_ind(x, y, equal_var=False, alternative=alternative)
    assert got.pvalue != pytest.approx(unpaired.pvalue, rel=1e-3)  # it is not Welch's


@pytest.mark.parametrize("alternative", ALTERNATIVES)
@pytest.mark.parametrize("data", ["exact", "ties_and_zeros", "large"])
def test_wilcoxon_signed_rank_equals_scipy(alternative, data):
    if data == "exact":  # small n, no ties: scipy's exact null distribution
        x, y = _correlated(9, seed=1)
    elif data == "ties_and_zeros":  # normal approximation with tie and zero handling
        x = np.array([3.0, 1.0, 2.0, 2.0, 5.0, 4.0, 0.0, 1.0, 6.0, 2.0])
        y = np.array([1.0, 1.0, 1.0, 3.0, 2.0, 2.0, 1.0, 0.0, 3.0, 2.0])
    else:
        x, y = _correlated(80, seed=2)
    got = stats.wilcoxon_signed_rank(x, y, alternative=alternative)
    assert got.pvalue == pytest.approx(sps.wilcoxon(x, y, alternative=alternative).pvalue,
                                       rel=1e-12)
    # W+ for every alternative: scipy's one-sided statistic.
    assert got.statistic == sps.wilcoxon(x, y, alternative="greater").statistic
    d = (x - y)[x != y]
    ranks = sps.rankdata(np.abs(d))
    assert got.statistic == pytest.approx(ranks[d > 0].sum())
    assert math.isnan(got.df)


def test_degenerate_differences():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    assert stats.wilcoxon_signed_rank(x, x) == (0.0, 1.0, pytest.approx(float("nan"),
                                                                         nan_ok=True))
    with np.errstate(all="ignore"):
        t = stats.paired_ttest(x, x)
    assert math.isnan(t.statistic) and math.isnan(t.pvalue)


@pytest.mark.parametrize("fn", [stats.paired_ttest, stats.wilcoxon_signed_rank])
@pytest.mark.parametrize("x, y, match", [
    ([1.0, 2.0, 3.0], [1.0, 2.0], r"^y must have the same length as x .*got 2 and 3$"),
    ([1.0], [2.0], r"^x and y must hold at least 2 pairs, got 1$"),
    ([1.0, np.nan, 3.0], [1.0, 2.0, 3.0], r"^x has a non-finite value nan at index 1$"),
    ([1.0, 2.0, 3.0], [1.0, 2.0, np.inf], r"^y has a non-finite value inf at index 2$"),
    (np.ones((3, 2)), np.ones((3, 2)), r"^x must be a 1-D array \[n\]"),
    (["a", "b"], [1.0, 2.0], r"^x must be a numeric 1-D array"),
])
def test_bad_paired_input_is_one_line(fn, x, y, match):
    with pytest.raises(ValueError, match=match) as err:
        fn(x, y)
    assert "\n" not in str(err.value)


def test_bad_alternative():
    for fn in (stats.paired_ttest, stats.wilcoxon_signed_rank):
        with pytest.raises(ValueError, match="alternative must be one of"):
            fn([1.0, 2.0, 3.0], [0.0, 1.0, 1.0], alternative="bigger")


# ----------------------------------------------------------------------------- paired PoI


def _poi_reference(x, y):
    """All pairs, one task at a time (the slow obvious reference)."""
    probs = []
    for m in range(x.shape[1]):
        wins = sum((a > b) + 0.5 * (a == b) for a, b in itertools.product(x[:, m], y[:, m]))
        probs.append(wins / (x.shape[0] * y.shape[0]))
    return np.mean(probs)


def test_paired_poi_replicates_match_a_loop_over_the_same_seed_draws():
    """One draw of seed indices per (resample, task), applied to both X and Y."""
    x, y = _correlated(7, tasks=3, seed=3)
    x, y = np.round(x, 1), np.round(y, 1)  # ties
    key, reps = jax.random.key(0), 20
    got = stats.probability_of_improvement_replicates(x, y, key=key, reps=reps, paired=True)
    chunk, num_chunks = chunk_plan(reps, 7 * 3)
    ref = []
    for c in range(num_chunks):
        idx = np.asarray(stats.resample_indices(jax.random.split(key, num_chunks)[c], 7,
                                                (chunk, 7, 3)))
        for b in range(chunk):
            ref.append(_poi_reference(np.take_along_axis(x, idx[b], axis=0),
                                      np.take_along_axis(y, idx[b], axis=0)))
    np.testing.assert_allclose(got, np.array(ref[:reps]), rtol=1e-6)
    unpaired = stats.probability_of_improvement_replicates(x, y, key=key, reps=reps)
    assert not np.allclose(unpaired, got)


def test_paired_poi_kernel_under_jit_and_vmap():
    """The jitted replicate program vmapped over keys equals one call per key."""
    x, y = _correlated(6, tasks=2, seed=4)
    lo, hi, rank_y = (jnp.asarray(a, jnp.int32) for a in _pair_tables(x, y))
    keys = jax.random.split(jax.random.key(1), 3)
    batched = jax.jit(jax.vmap(lambda k: _poi_replicates(lo, hi, rank_y, k, 16, True)))(keys)
    for k, row in zip(keys, np.asarray(batched), strict=True):
        np.testing.assert_allclose(row, stats.probability_of_improvement_replicates(
            x, y, key=k, reps=16, paired=True), rtol=1e-6)


def test_paired_interval_is_narrower_on_correlated_seeds_same_point():
    x, y = _correlated(24, rho=0.95, shift=0.3, seed=5)
    key = jax.random.key(2)
    paired = stats.probability_of_improvement_ci(x, y, key=key, reps=1000, paired=True)
    unpaired = stats.probability_of_improvement_ci(x, y, key=key, reps=1000)
    assert paired.point == unpaired.point == pytest.approx(
        _poi_reference(x[:, None], y[:, None]), abs=1e-12)
    assert paired.low <= paired.point <= paired.high
    assert paired.high - paired.low < 0.6 * (unpaired.high - unpaired.low), (paired, unpaired)


def test_paired_bca_uses_the_leave_one_pair_out_jackknife():
    x, y = _correlated(10, tasks=2, seed=6)
    key = jax.random.key(3)
    got = stats.probability_of_improvement_ci(x, y, key=key, reps=400, paired=True,
                                              method="bca")
    reps = stats.probability_of_improvement_replicates(x, y, key=key, reps=400, paired=True)
    loo = np.array([_poi_reference(np.delete(x, i, 0), np.delete(y, i, 0))
                    for i in range(10)])
    point = _poi_reference(x, y)
    low, high = stats.interval_from_replicates(
        reps, point, method="bca", acceleration=stats.jackknife_acceleration([loo]))
    assert (got.low, got.high) == pytest.approx((low, high), rel=1e-9)


def test_paired_poi_refuses_other_shapes():
    with pytest.raises(ValueError, match=r"^scores_y must have the same shape as scores_x "
                                         r"with paired=True .*got \(5, 2\) and \(6, 2\)$"):
        stats.probability_of_improvement_ci(np.ones((6, 2)), np.ones((5, 2)),
                                            key=jax.random.key(0), paired=True)
    with pytest.raises(ValueError, match="same shape"):
        stats.probability_of_improvement_replicates(np.ones(4), np.ones(5),
                                                    key=jax.random.key(0), paired=True)


# ----------------------------------------------------------------------------- power


def test_paired_t_power_matches_statsmodels():
    from statsmodels.stats.power import TTestPower

    for delta, sd, n in [(0.5, 1.0, 10), (0.2, 0.4, 30), (1.0, 2.0, 5)]:
        assert stats.paired_t_power(delta, sd, n) == pytest.approx(
            TTestPower().power(delta / sd, n, 0.05), rel=1e-9)
        assert stats.paired_t_power(delta, sd, n, alternative="greater") == pytest.approx(
            TTestPower().power(delta / sd, n, 0.05, alternative="larger"), rel=1e-9)
    n = stats.paired_t_seeds(0.3, 1.0)
    assert stats.paired_t_power(0.3, 1.0, n - 1) < 0.8 <= stats.paired_t_power(0.3, 1.0, n)
    assert n == math.ceil(TTestPower().solve_power(0.3, power=0.8, alpha=0.05))
    with pytest.raises(ValueError, match="delta must be non-zero"):
        stats.paired_t_seeds(0.0, 1.0)
    with pytest.raises(ValueError, match="sd_diff must be a finite number > 0"):
        stats.paired_t_power(0.1, 0.0, 10)


# ----------------------------------------------------------------------------- measured


def _within(rate, expected, sims, k=3.5):
    return abs(rate - expected) <= k * math.sqrt(expected * (1 - expected) / sims)


def test_paired_tests_hold_their_size_on_correlated_seeds():
    """Under H0 on correlated pairs the paired tests reject ~5 %; the unpaired ones, blind
    to the correlation, far less (they are conservative and lose power)."""
    sims = 1000
    got = cov.simulate_paired_test_size(10, correlation=0.7, sims=sims,
                                        tests=("paired_t", "wilcoxon", "welch"))
    assert _within(got["paired_t"].rate, 0.05, sims), got
    assert got["wilcoxon"].rate <= 0.05 + 3.5 * math.sqrt(0.05 * 0.95 / sims), got
    assert got["welch"].rate < 0.02, got


def test_paired_poi_interval_coverage_at_16_seeds():
    """The paired basic-bootstrap interval covers the true P(X > Y') = Phi(delta / sqrt(2))
    about 95 % of the time at 16 seeds with correlation 0.5, and is narrower than the
    unpaired interval (which over-covers)."""
    sims = 250
    got = cov.simulate_poi_coverage(16, correlation=0.5, sims=sims, reps=300,
                                    methods=("basic",))
    paired, unpaired = got[("paired", "basic")], got[("unpaired", "basic")]
    assert abs(paired.coverage - 0.95) <= 3.5 * math.sqrt(0.95 * 0.05 / sims), paired
    assert paired.mean_width < 0.85 * unpaired.mean_width, (paired, unpaired)
    assert cov.poi_truth(0.5) == pytest.approx(
        np.mean(np.random.default_rng(0).normal(0.5, 1, 10**6)
                > np.random.default_rng(1).normal(0, 1, 10**6)), abs=2e-3)


def test_recorded_poi_coverage_is_reproduced_by_a_smaller_simulation():
    """The committed table's worst cell (paired percentile, 5 seeds, correlation 0.9: the
    diagonal bias) and a good one are what a fresh 300-dataset simulation measures."""
    sims = 300
    got = cov.simulate_poi_coverage(5, correlation=0.9, sims=sims, reps=300, seed=7,
                                    methods=("percentile", "basic"))
    for method in ("percentile", "basic"):
        want = cov.POI_COVERAGE["paired"][method][5][0.9]
        se = math.sqrt(want * (1 - want) / sims)
        assert abs(got[("paired", method)].coverage - want) <= 3.5 * se, (method, got)
    assert cov.poi_coverage("paired", "percentile", 12) == (10, 0.8395, 0.9)
    assert cov.poi_coverage("paired", "bca", 4) is None
