"""Tests for rljax.stats.bootstrap: resampling, replicates, bootstrap_ci."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats as sps

from rljax import stats

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("n", [1, 2, 7, 100, 1000, 65535])
def test_resample_indices_is_exact_multiply_shift(n):
    key = jax.random.key(3)
    bits = np.asarray(stats.bootstrap.random_words(key, 4096)).astype(np.uint64)
    expected = (bits * np.uint64(n)) >> np.uint64(32)
    got = np.asarray(stats.resample_indices(key, n, (4096,)))
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == np.int32


def test_resample_indices_large_n_in_range_and_jittable():
    key = jax.random.key(0)
    got = jax.jit(lambda k: stats.resample_indices(k, 70000, (1000,)))(key)
    assert int(got.min()) >= 0 and int(got.max()) < 70000


def test_replicates_match_python_loop_reference():
    x = np.random.default_rng(0).normal(size=13).astype(np.float32)
    key = jax.random.key(1)
    reps = stats.bootstrap_replicates(jnp.mean, x, key=key, reps=37)
    # Slow obvious reference: the same chunked keys, one resample at a time.
    from rljax.stats.bootstrap import chunk_plan

    chunk, num_chunks = chunk_plan(37, 13)
    keys = jax.random.split(key, num_chunks)
    ref = []
    for c in range(num_chunks):
        idx = np.asarray(stats.resample_indices(keys[c], 13, (chunk, 13)))
        for row in idx:
            ref.append(np.mean(x[row]))
    np.testing.assert_allclose(np.asarray(reps), np.array(ref[:37]), rtol=1e-5, atol=1e-6)


def test_same_key_same_interval_bitwise_and_different_key_differs():
    x = np.random.default_rng(0).normal(size=30)
    a = stats.bootstrap_ci(jnp.median, x, key=jax.random.key(5), reps=500)
    b = stats.bootstrap_ci(jnp.median, x, key=jax.random.key(5), reps=500)
    c = stats.bootstrap_ci(jnp.median, x, key=jax.random.key(6), reps=500)
    assert a == b
    assert a != c
    assert isinstance(a.point, float) and a.low <= a.point <= a.high


@pytest.mark.parametrize("method,scipy_method", [("percentile", "percentile"),
                                                 ("basic", "basic"), ("bca", "BCa")])
def test_one_sample_matches_scipy_bootstrap(method, scipy_method):
    x = np.random.default_rng(2).gamma(2.0, size=40)
    ours = stats.bootstrap_ci(jnp.mean, x, key=jax.random.key(0), reps=4000, method=method)
    ref = sps.bootstrap((x,), np.mean, n_resamples=4000, method=scipy_method,
                        rng=np.random.default_rng(0)).confidence_interval
    width = ref.high - ref.low
    assert abs(ours.low - ref.low) < 0.1 * width
    assert abs(ours.high - ref.high) < 0.1 * width
    assert ours.point == pytest.approx(np.mean(x), rel=1e-6)


def test_two_samples_unpaired_and_paired_match_scipy():
    rng = np.random.default_rng(3)
    x, y = rng.normal(1.0, 1.0, size=25), rng.normal(0.0, 2.0, size=18)

    def diff(a, b):
        return jnp.mean(a) - jnp.mean(b)

    ours = stats.bootstrap_ci(diff, x, y, key=jax.random.key(1), reps=4000)
    ref = sps.bootstrap((x, y), lambda a, b, axis=-1: a.mean(axis) - b.mean(axis),
                        n_resamples=4000, method="percentile",
                        rng=np.random.default_rng(1)).confidence_interval
    width = ref.high - ref.low
    assert abs(ours.low - ref.low) < 0.1 * width and abs(ours.high - ref.high) < 0.1 * width

    z = x[:18] + rng.normal(0, 0.1, size=18)
    ours = stats.bootstrap_ci(diff, x[:18], z, key=jax.random.key(1), reps=4000, paired=True,
                              method="bca")
    ref = sps.bootstrap((x[:18], z), lambda a, b, axis=-1: a.mean(axis) - b.mean(axis),
                        paired=True, n_resamples=4000, method="BCa",
                        rng=np.random.default_rng(1)).confidence_interval
    width = ref.high - ref.low
    assert abs(ours.low - ref.low) < 0.15 * width and abs(ours.high - ref.high) < 0.15 * width


def test_unpaired_bca_acceleration_reduces_to_one_sample_formula():
    u = np.random.default_rng(0).normal(size=(11,))
    one = stats.jackknife_acceleration([u])
    ref = np.sum((u.mean() - u) ** 3) / (6 * np.sum((u.mean() - u) ** 2) ** 1.5)
    assert one == pytest.approx(ref, rel=1e-12)


def test_nan_aware_statistic_and_nan_replicates_warn():
    x = np.random.default_rng(0).normal(size=12)
    x[:2] = np.nan
    ci = stats.bootstrap_ci(jnp.nanmedian, x, key=jax.random.key(0), reps=300)
    assert np.isfinite([ci.point, ci.low, ci.high]).all()
    with pytest.warns(RuntimeWarning, match="replicates are NaN"):
        ci = stats.bootstrap_ci(jnp.median, x, key=jax.random.key(0), reps=300)
    assert np.isnan(ci.point)


def test_vector_statistic_returns_arrays():
    x = np.random.default_rng(0).normal(size=50)
    ci = stats.bootstrap_ci(lambda a: jnp.stack([a.mean(), a.std()]), x,
                            key=jax.random.key(0), reps=200)
    assert ci.point.shape == ci.low.shape == ci.high.shape == (2,)
    assert np.all(ci.low <= ci.high)


@pytest.mark.parametrize("kwargs,match", [
    ({"reps": 0}, "reps must be an integer >= 1"),
    ({"reps": 2.5}, "reps must be an integer >= 1"),
    ({"confidence": 1.0}, "confidence must be a number strictly between 0 and 1"),
    ({"confidence": 0}, "confidence must be a number strictly between 0 and 1"),
    ({"method": "bc"}, "method must be one of 'percentile', 'basic', 'bca'"),
    ({"key": 0}, "key must be a single JAX PRNG key"),
])
def test_bad_arguments_raise_one_line_value_error(kwargs, match):
    args = {"key": jax.random.key(0), **kwargs}
    with pytest.raises(ValueError, match=match) as info:
        stats.bootstrap_ci(jnp.mean, np.ones(5), **args)
    assert "\n" not in str(info.value)


def test_bad_samples_raise():
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"samples\[0\] must be 1-D"):
        stats.bootstrap_ci(jnp.mean, np.ones((3, 2)), key=key)
    with pytest.raises(ValueError, match="paired=True needs samples of the same length"):
        stats.bootstrap_ci(lambda a, b: a.mean() - b.mean(), np.ones(3), np.ones(4), key=key,
                           paired=True)
    with pytest.raises(ValueError, match="at least one"):
        stats.bootstrap_ci(jnp.mean, key=key)
