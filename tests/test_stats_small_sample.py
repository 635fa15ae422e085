"""Tests for rljax.stats.small_sample: each interval against a slow obvious reference."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats as sps

from rljax import stats
from rljax.stats import small_sample as ss
from rljax.stats.bootstrap import resample_indices

pytestmark = pytest.mark.timeout(120)


def test_t_interval_matches_scipy_and_runs_under_jit_and_vmap():
    data = np.random.default_rng(0).normal(size=(5, 9))
    for row in data:
        iv = stats.t_interval(row, confidence=0.9)
        low, high = sps.t.interval(0.9, 8, loc=row.mean(), scale=sps.sem(row))
        assert iv.point == pytest.approx(row.mean())
        assert (iv.low, iv.high) == pytest.approx((low, high), rel=1e-12)
    low, high = jax.jit(jax.vmap(lambda x: ss.t_bounds(x, 0.9)))(jnp.asarray(data, jnp.float32))
    ref = np.array([sps.t.interval(0.9, 8, loc=r.mean(), scale=sps.sem(r)) for r in data])
    np.testing.assert_allclose(np.stack([low, high], 1), ref, rtol=1e-5, atol=1e-6)


def test_paired_t_is_t_on_differences():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=12), rng.normal(size=12)
    iv = stats.paired_t_interval(x, y)
    d = x - y
    assert (iv.low, iv.high) == pytest.approx(
        sps.t.interval(0.95, 11, loc=d.mean(), scale=sps.sem(d)), rel=1e-12)
    with pytest.raises(ValueError, match="same length"):
        stats.paired_t_interval(x, y[:5])


def _yuen_reference(x, proportion, confidence):
    x = np.sort(np.asarray(x, np.float64))
    n = len(x)
    g = int(math.floor(proportion * n))
    h = n - 2 * g
    w = x.copy()
    for i in range(n):  # winsorize one value at a time
        w[i] = min(max(x[i], x[g]), x[n - g - 1])
    se = math.sqrt((n - 1) * np.var(w, ddof=1) / (h * (h - 1)))
    tm = x[g:n - g].mean()
    half = sps.t.ppf((1 + confidence) / 2, h - 1) * se
    return tm, tm - half, tm + half


@pytest.mark.parametrize("n", [3, 8, 13, 40])
def test_trimmed_t_matches_yuen_formula(n):
    x = np.random.default_rng(n).lognormal(size=n)
    iv = stats.trimmed_t_interval(x)
    ref = _yuen_reference(x, 0.25, 0.95)
    assert iv.point == pytest.approx(ref[0], rel=1e-12)
    assert (iv.low, iv.high) == pytest.approx(ref[1:], rel=1e-5, abs=1e-6)
    assert iv.point == pytest.approx(stats.aggregate_iqm(x[:, None]), rel=1e-12)


def test_bootstrap_t_matches_numpy_loop():
    x = np.random.default_rng(3).exponential(size=10).astype(np.float32)
    key = jax.random.key(7)
    reps = 300
    iv = stats.bootstrap_t_interval(x, key=key, reps=reps, confidence=0.9)
    idx = np.asarray(resample_indices(key, 10, (reps, 10)))
    mean, se = x.mean(dtype=np.float64), x.std(ddof=1, dtype=np.float64) / math.sqrt(10)
    t_star = []
    for row in idx:  # one resample at a time
        r = x[row].astype(np.float64)
        s = r.std(ddof=1)
        if s > 0:
            t_star.append((r.mean() - mean) / (s / math.sqrt(10)))
    q_low, q_high = np.percentile(t_star, [5, 95])
    assert iv.low == pytest.approx(mean - q_high * se, rel=1e-4)
    assert iv.high == pytest.approx(mean - q_low * se, rel=1e-4)


def _ranks_reference(n, q, confidence):
    alpha = (1 - confidence) / 2

    def cdf(k):  # P(Binomial(n, q) <= k), summed term by term
        return sum(math.comb(n, j) * q**j * (1 - q) ** (n - j) for j in range(0, k + 1))

    lower, upper = 0, n + 1
    for r in range(1, n + 1):
        if cdf(r - 1) <= alpha:
            lower = r
    for r in range(n, 0, -1):
        if 1 - cdf(r - 1) <= alpha:
            upper = r
    return lower, upper


@pytest.mark.parametrize("q", [0.5, 0.25, 0.9])
def test_order_statistic_ranks_match_binomial_loop(q):
    for n in range(1, 61):
        lower, upper, coverage = stats.order_statistic_ranks(n, q, 0.95)
        assert (lower, upper) == _ranks_reference(n, q, 0.95), n
        assert coverage >= 0.95 - 1e-12
    assert stats.order_statistic_ranks(5)[:2] == (0, 6)  # a 95 % median needs n >= 6
    assert stats.order_statistic_ranks(6)[:2] == (1, 6)


def test_order_statistic_exact_coverage_on_continuous_data():
    # P(X_(l) <= median <= X_(u)) for uniforms equals B(u - 1) - B(l - 1).
    n = 11
    lower, upper, coverage = stats.order_statistic_ranks(n)
    u = np.sort(np.random.default_rng(0).random((200_000, n)), axis=1)
    hit = (u[:, lower - 1] <= 0.5) & (u[:, upper - 1] >= 0.5)
    assert abs(hit.mean() - coverage) < 4 * math.sqrt(coverage * (1 - coverage) / 200_000)


def test_order_statistic_interval_with_censored_values_and_errors():
    x = np.array([3.0, 1.0, np.inf, 2.0, 5.0, np.inf, 4.0, 7.0, np.inf, 6.0])
    iv = stats.order_statistic_interval(x)
    lower, upper, _ = stats.order_statistic_ranks(10)
    ordered = np.sort(x)
    assert (iv.low, iv.high) == (ordered[lower - 1], ordered[upper - 1])
    assert iv.high == np.inf and iv.point == 5.5
    with pytest.raises(ValueError, match="x has NaN at index 1"):
        stats.order_statistic_interval([1.0, np.nan, 2.0])
    with pytest.raises(ValueError, match="x has an infinite value"):
        stats.t_interval([1.0, np.inf, 2.0])


def test_ratio_of_medians_matches_bonferroni_reference():
    rng = np.random.default_rng(5)
    x, y = rng.lognormal(size=15), rng.lognormal(size=15) + 0.5
    iv = stats.ratio_of_medians_interval(x, y)
    lx, ux = _ranks_reference(15, 0.5, 0.975)
    sx, sy = np.sort(x), np.sort(y)
    assert iv.point == pytest.approx(np.median(x) / np.median(y))
    assert iv.low == pytest.approx(sx[lx - 1] / sy[ux - 1], rel=1e-6)
    assert iv.high == pytest.approx(sx[ux - 1] / sy[lx - 1], rel=1e-6)
    # censored numerators: an unbounded upper end, a finite lower one
    xc = np.where(x > np.median(x), np.inf, x)
    ivc = stats.ratio_of_medians_interval(xc, y)
    assert ivc.high == np.inf and 0 <= ivc.low < np.inf
    # a divisor interval that reaches 0 cannot bound the ratio
    assert stats.ratio_of_medians_interval(x, np.r_[np.zeros(8), y[:7]]).high == np.inf
    spanning = stats.ratio_of_medians_interval(x, rng.normal(size=15))
    assert (spanning.low, spanning.high) == (-np.inf, np.inf)


def test_two_way_t_and_two_way_replicates_match_numpy():
    rng = np.random.default_rng(2)
    m = (rng.random((6, 9)) < 0.4).astype(np.float32)
    iv = stats.two_way_t_interval(m)
    m64 = m.astype(np.float64)
    se = math.sqrt(np.var(m64.mean(1), ddof=1) / 6 + np.var(m64.mean(0), ddof=1) / 9)
    half = sps.t.ppf(0.975, 5) * se
    assert (iv.low, iv.high) == pytest.approx((m64.mean() - half, m64.mean() + half), rel=1e-9)
    key = jax.random.key(3)
    got = np.asarray(jax.jit(ss.two_way_replicates, static_argnums=2)(jnp.asarray(m), key, 50))
    seed_key, prompt_key = jax.random.split(key)
    rows = np.asarray(resample_indices(seed_key, 6, (50, 6)))
    cols = np.asarray(resample_indices(prompt_key, 9, (50, 9)))
    ref = [m[r][:, c].mean() for r, c in zip(rows, cols, strict=True)]
    np.testing.assert_allclose(got, ref, rtol=1e-5)


def test_sorted_quantiles_match_numpy_and_keep_inf():
    v = np.random.default_rng(0).normal(size=101).astype(np.float32)
    p = jnp.array([0.025, 0.5, 0.975], jnp.float32)
    np.testing.assert_allclose(ss.sorted_quantiles(jnp.asarray(v), p),
                               np.percentile(v, [2.5, 50, 97.5]), rtol=1e-5)
    w = jnp.array([1.0, np.inf, np.inf, np.nan], jnp.float32)
    assert np.asarray(ss.sorted_quantiles(w, jnp.array([0.9]))) == np.inf


def test_interval_bounds_bootstrap_matches_bootstrap_ci_and_vmap_matches_loop():
    x = np.random.default_rng(4).gamma(2.0, size=(3, 20)).astype(np.float32)
    key = jax.random.key(0)

    def bounds(k, v):
        return ss.interval_bounds("mean", ("percentile", "basic", "bca", "t"), (v,), k,
                                  reps=400)[1]

    keys = jax.random.split(key, 3)
    batched = np.asarray(jax.jit(jax.vmap(bounds))(keys, jnp.asarray(x)))
    for i in range(3):
        one = np.asarray(jax.jit(bounds)(keys[i], jnp.asarray(x[i])))
        np.testing.assert_allclose(batched[i], one, rtol=1e-5)
        boot_key = jax.random.split(keys[i])[0]
        for j, method in enumerate(("percentile", "basic", "bca")):
            ref = stats.bootstrap_ci(jnp.mean, x[i], key=boot_key, reps=400, method=method)
            # same definitions (arch's); bootstrap_ci chunks its resamples differently
            assert abs(batched[i, j, 0] - ref.low) < 0.25 * (ref.high - ref.low)
            assert abs(batched[i, j, 1] - ref.high) < 0.25 * (ref.high - ref.low)
    with pytest.raises(ValueError, match="method: median supports"):
        ss.interval_bounds("median", ("t",), (jnp.asarray(x[0]),), key)


def test_loo_values_match_leave_one_out_loop():
    rng = np.random.default_rng(1)
    for n in (3, 4, 9, 16):
        x = rng.poisson(3, size=n).astype(np.float32)
        y = rng.poisson(3, size=n).astype(np.float32) + 1
        for stat in ("mean", "median", "iqm", "paired_difference", "ratio_of_medians"):
            samples = (x,) if stat in ("mean", "median", "iqm") else (x, y)
            got = np.asarray(ss._loo_values(stat, tuple(map(jnp.asarray, samples))))
            ref = [float(ss.STATISTIC_FNS[stat](*[jnp.asarray(np.delete(s, i))
                                                  for s in samples])) for i in range(n)]
            if stat in ("median", "iqm"):  # by rank: the same multiset, in sorted order
                got, ref = np.sort(got), np.sort(ref)
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_clopper_pearson_matches_scipy_and_closed_forms():
    from scipy.stats import binomtest

    from rljax.stats import clopper_pearson

    for x, n in ((0, 16), (3, 16), (15, 16), (16, 16), (1, 1), (37, 100)):
        ref = binomtest(x, n).proportion_ci(confidence_level=0.95, method="exact")
        np.testing.assert_allclose(clopper_pearson(x, n), (ref.low, ref.high),
                                   rtol=1e-9, atol=1e-12)
    # x = n: [(alpha / 2)^(1 / n), 1]; x = 0: [0, 1 - (alpha / 2)^(1 / n)]
    assert clopper_pearson(16, 16) == pytest.approx((0.025 ** (1 / 16), 1.0))
    assert clopper_pearson(0, 16) == pytest.approx((0.0, 1 - 0.025 ** (1 / 16)))
    for bad, field in (((17, 16), "successes"), ((1, 0), "trials"), ((-1, 4), "successes")):
        with pytest.raises(ValueError, match=field):
            clopper_pearson(*bad)
