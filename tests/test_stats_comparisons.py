"""Tests for rljax.stats comparisons, effect sizes, corrections and power."""

import itertools

import jax
import numpy as np
import pytest
from scipy import stats as sps

from rljax import stats

pytestmark = pytest.mark.timeout(120)


def _poi_reference(x, y):
    """All pairs, one task at a time (slow obvious reference)."""
    probs = []
    for m in range(x.shape[1]):
        wins = sum((a > b) + 0.5 * (a == b) for a, b in itertools.product(x[:, m], y[:, m]))
        probs.append(wins / (x.shape[0] * y.shape[0]))
    return np.mean(probs)


def test_probability_of_improvement_matches_all_pairs_reference():
    rng = np.random.default_rng(0)
    x = np.round(rng.normal(size=(9, 4)), 1)
    y = np.round(rng.normal(size=(6, 4)), 1)
    assert stats.probability_of_improvement(x, y) == pytest.approx(_poi_reference(x, y), 1e-12)
    assert stats.probability_of_improvement(x[:, 0], y[:, 0]) == pytest.approx(
        _poi_reference(x[:, :1], y[:, :1]), 1e-12)


def test_poi_replicates_match_loop_over_the_same_resamples():
    rng = np.random.default_rng(1)
    x = np.round(rng.normal(size=(7, 3)), 1)
    y = np.round(rng.normal(size=(5, 3)), 1)
    key = jax.random.key(0)
    reps = stats.probability_of_improvement_replicates(x, y, key=key, reps=20)
    from rljax.stats.bootstrap import chunk_plan

    chunk, num_chunks = chunk_plan(20, (7 + 5) * 3)
    ref = []
    for c in range(num_chunks):
        kx, ky = jax.random.split(jax.random.split(key, num_chunks)[c])
        ix = np.asarray(stats.resample_indices(kx, 7, (chunk, 7, 3)))
        iy = np.asarray(stats.resample_indices(ky, 5, (chunk, 5, 3)))
        for b in range(chunk):
            rx = np.take_along_axis(x, ix[b], axis=0)
            ry = np.take_along_axis(y, iy[b], axis=0)
            ref.append(_poi_reference(rx, ry))
    np.testing.assert_allclose(reps, np.array(ref[:20]), rtol=1e-6)


def test_poi_ci_deterministic_and_bca_runs():
    rng = np.random.default_rng(2)
    x, y = rng.normal(0.5, 1, size=(10, 3)), rng.normal(size=(12, 3))
    a = stats.probability_of_improvement_ci(x, y, key=jax.random.key(1), reps=300)
    b = stats.probability_of_improvement_ci(x, y, key=jax.random.key(1), reps=300)
    assert a == b and a.low <= a.point <= a.high
    c = stats.probability_of_improvement_ci(x, y, key=jax.random.key(1), reps=300, method="bca")
    assert c.low <= c.point <= c.high


def test_classical_tests_wrap_scipy():
    rng = np.random.default_rng(3)
    x, y = rng.normal(1, 1, 12), rng.normal(0, 2, 9)
    w = stats.welch_ttest(x, y)
    ref = sps.ttest_ind(x, y, equal_var=False)
    assert (w.statistic, w.pvalue) == pytest.approx((ref.statistic, ref.pvalue))
    assert w.df == pytest.approx(ref.df)
    u = stats.mann_whitney_u(x, y, alternative="greater")
    ref = sps.mannwhitneyu(x, y, alternative="greater")
    assert (u.statistic, u.pvalue) == pytest.approx((ref.statistic, ref.pvalue))
    p1 = stats.permutation_test(x, y, key=jax.random.key(0), n_resamples=999)
    p2 = stats.permutation_test(x, y, key=jax.random.key(0), n_resamples=999)
    assert p1 == p2 and p1.statistic == pytest.approx(x.mean() - y.mean())
    assert abs(p1.pvalue - ref.pvalue * 2) < 0.2  # same evidence, different test


def test_effect_sizes():
    x, y = np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.0, 1.0, 1.0, 2.0, 3.5])
    sp = np.sqrt((3 * np.var(x, ddof=1) + 4 * np.var(y, ddof=1)) / 7)
    assert stats.cohens_d(x, y) == pytest.approx((x.mean() - y.mean()) / sp)
    assert stats.hedges_g(x, y) == pytest.approx(stats.cohens_d(x, y) * (1 - 3 / (4 * 9 - 9)))
    ref = np.mean(np.sign(x[:, None] - y[None, :]))
    assert stats.cliffs_delta(x, y) == pytest.approx(ref)


def _holm_reference(p):
    k, order = len(p), np.argsort(p)
    adj, running = np.empty(k), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (k - rank) * p[i]))
        adj[i] = running
    return adj


def test_holm_and_bh_against_references():
    p = np.array([0.01, 0.04, 0.03, 0.2, 0.001, 0.04])
    holm = stats.holm(p, alpha=0.05)
    np.testing.assert_allclose(holm.adjusted, _holm_reference(p))
    np.testing.assert_array_equal(holm.reject, _holm_reference(p) <= 0.05)
    from statsmodels.stats.multitest import multipletests  # installed with rliable's arch

    np.testing.assert_allclose(holm.adjusted, multipletests(p, method="holm")[1])
    np.testing.assert_allclose(stats.benjamini_hochberg(p).adjusted,
                               multipletests(p, method="fdr_bh")[1])
    with pytest.raises(ValueError, match="pvalues must all lie in"):
        stats.holm([0.5, 1.5])


def test_welch_power_matches_statsmodels_for_equal_variances():
    from statsmodels.stats.power import TTestIndPower

    for d, n in [(0.5, 20), (1.0, 5), (0.2, 100)]:
        assert stats.welch_power(d, 1.0, n) == pytest.approx(
            TTestIndPower().power(d, n, 0.05), rel=1e-9)
    n = stats.welch_seeds(0.5, 1.0, power=0.8)
    assert n == int(np.ceil(TTestIndPower().solve_power(0.5, power=0.8, alpha=0.05)))
    assert stats.welch_power(0.5, 1.0, n - 1) < 0.8 <= stats.welch_power(0.5, 1.0, n)
    assert stats.welch_power(1.0, 1.0, 10, alternative="greater") > stats.welch_power(1.0, 1.0,
                                                                                       10)


def test_simulated_power_agrees_with_analytic_for_normal_pilot():
    pilot = np.random.default_rng(0).normal(size=4000)
    sim = stats.simulated_power(pilot, n=20, key=jax.random.key(0), delta=0.8, sims=2000)
    assert sim == pytest.approx(stats.welch_power(0.8, 1.0, 20), abs=0.04)
    size = stats.simulated_power(pilot, n=10, key=jax.random.key(1), sims=2000,
                                 test="mannwhitney")
    assert size < 0.08
    curve = stats.simulated_seeds(pilot, key=jax.random.key(2), delta=0.8, sims=400,
                                  n_grid=(5, 10, 20, 40))
    assert curve.n in (20, 40) and np.all(np.diff(curve.power) > -0.05)


def test_expected_ci_widths():
    sd, n = 2.0, 12
    rng = np.random.default_rng(0)
    widths = []
    for _ in range(4000):
        s = rng.normal(0, sd, n).std(ddof=1)
        widths.append(2 * sps.t.ppf(0.975, n - 1) * s / np.sqrt(n))
    assert stats.expected_mean_ci_width(n, sd) == pytest.approx(np.mean(widths), rel=0.02)
    pilot = rng.normal(size=(200, 4))
    w10 = stats.expected_ci_width(pilot, 10, "mean", key=jax.random.key(0), sims=50, reps=300)
    w40 = stats.expected_ci_width(pilot, 40, "mean", key=jax.random.key(0), sims=50, reps=300)
    # Mean over 4 tasks of n runs each: sd 1/sqrt(4n), width ~ 2 * 1.96 * that.
    assert w10 == pytest.approx(2 * 1.96 / np.sqrt(40), rel=0.15)
    assert w40 == pytest.approx(w10 / 2, rel=0.2)


def test_bad_test_arguments():
    with pytest.raises(ValueError, match="alternative must be one of"):
        stats.welch_ttest([1, 2, 3], [1, 2, 4], alternative="bigger")
    with pytest.raises(ValueError, match="x has a non-finite value"):
        stats.mann_whitney_u([1, np.nan, 3], [1, 2])
    with pytest.raises(ValueError, match="same number of tasks"):
        stats.probability_of_improvement(np.ones((3, 2)), np.ones((3, 3)))
    with pytest.raises(ValueError, match="delta must be non-zero"):
        stats.welch_seeds(0.0, 1.0)
