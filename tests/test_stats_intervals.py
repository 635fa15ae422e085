"""Tests for rljax.stats intervals, profiles and curves: kernels vs slow references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import trim_mean

from rljax import stats
from rljax.stats import intervals as iv

pytestmark = pytest.mark.timeout(120)


def _resamples(scores, key, batch, task_bootstrap=False):
    n, m = scores.shape
    flat = np.asarray(iv.stratified_flat_indices(key, n, m, batch, task_bootstrap))
    return flat, scores.reshape(-1)[flat]


REFERENCES = {
    "mean": lambda r: r.mean(),
    "median": lambda r: np.median(r.mean(axis=0)),
    "iqm": lambda r: trim_mean(r, 0.25, axis=None),
    "optimality_gap": lambda r: 1.0 - np.mean(np.minimum(r, 1.0)),
}


@pytest.mark.parametrize("metric", sorted(REFERENCES))
@pytest.mark.parametrize("shape", [(1, 3), (7, 3), (10, 8), (33, 5)])
def test_kernels_match_numpy_per_resample(metric, shape):
    rng = np.random.default_rng(0)
    scores = np.round(rng.gamma(1.5, size=shape), 2).astype(np.float32)  # ties included
    flat, resampled = _resamples(scores, jax.random.key(1), 16)
    m = iv.METRICS[metric]
    got = np.asarray(jax.jit(m.kernel)(jnp.asarray(scores), jnp.asarray(flat), m.params))
    ref = np.array([REFERENCES[metric](r.astype(np.float64)) for r in resampled])
    np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-6)


def test_trimmed_kernel_other_proportions_and_task_bootstrap():
    scores = np.random.default_rng(2).normal(size=(9, 4)).astype(np.float32)
    flat, resampled = _resamples(scores, jax.random.key(2), 12, task_bootstrap=True)
    for p in (0.0, 0.1, 0.4):
        m = stats.trimmed_mean_metric(p)
        got = np.asarray(m.kernel(jnp.asarray(scores), jnp.asarray(flat), m.params))
        np.testing.assert_allclose(got, [trim_mean(r, p, axis=None) for r in resampled],
                                   rtol=2e-5, atol=2e-6)


def test_profile_kernel_matches_numpy():
    scores = np.round(np.random.default_rng(3).normal(size=(11, 4)), 1).astype(np.float32)
    taus = np.array([0.5, -1.0, 0.0, 0.25, 2.0])  # exact in float32: ties stay ties
    flat, resampled = _resamples(scores, jax.random.key(3), 10)
    for dist in (True, False):
        m = stats.profile_metric(taus, use_score_distribution=dist)
        got = np.asarray(m.kernel(jnp.asarray(scores), jnp.asarray(flat),
                                  jnp.asarray(m.params, jnp.float32)))
        ref = [m.point(r, taus) for r in resampled]
        np.testing.assert_allclose(got, ref, atol=1e-6)


def test_kernels_under_vmap_over_score_arrays():
    scores = jnp.asarray(np.random.default_rng(4).normal(size=(3, 6, 2)), jnp.float32)
    flat = iv.stratified_flat_indices(jax.random.key(0), 6, 2, 5)
    out = jax.vmap(lambda s: iv.IQM.kernel(s, flat, 0.25))(scores)
    for i in range(3):
        ref = [trim_mean(np.asarray(scores[i]).reshape(-1)[f], 0.25, axis=None)
               for f in np.asarray(flat)]
        np.testing.assert_allclose(out[i], ref, rtol=2e-5)


def test_interval_estimates_paired_and_determinism():
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(20, 3)), rng.normal(size=(20, 3))
    one = stats.interval_estimates({"a": a, "b": b}, "mean", key=jax.random.key(0), reps=200)
    two = stats.interval_estimates({"a": a}, "mean", key=jax.random.key(0), reps=200)
    assert one["a"] == two["a"]  # adding an algorithm does not move another's interval
    paired = stats.interval_estimates({"a": a, "b": a}, "mean", key=jax.random.key(0),
                                      reps=200, paired=True)
    assert paired["a"] == paired["b"]
    with pytest.raises(ValueError, match="paired=True needs score arrays of the same shape"):
        stats.interval_estimates({"a": a, "b": b[:5]}, "mean", key=jax.random.key(0),
                                 paired=True)


def test_callable_metric_and_nan_policy_omit():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(15, 4))

    def q75(s):
        return jnp.quantile(s, 0.75)

    ci = stats.interval_estimates({"a": x}, q75, key=jax.random.key(0), reps=300)["a"]
    assert ci.point == pytest.approx(np.quantile(x, 0.75), rel=1e-5)
    x[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"scores of 'a' has a non-finite value nan at "
                                         r"position \(2, 1\)"):
        stats.interval_estimates({"a": x}, "iqm", key=jax.random.key(0))
    ci = stats.interval_estimates({"a": x}, "iqm", key=jax.random.key(0), reps=300,
                                  nan_policy="omit")["a"]
    assert ci.point == pytest.approx(trim_mean(x[~np.isnan(x)], 0.25))
    assert ci.low < ci.point < ci.high
    assert stats.aggregate_mean(x, nan_policy="omit") == pytest.approx(
        np.mean(np.nanmean(x, axis=0)))


def test_sample_efficiency_resamples_runs_jointly():
    rng = np.random.default_rng(7)
    base = rng.normal(size=(12, 3, 1))
    curves = base + np.arange(5)[None, None, :]  # each run's curve is a shifted copy
    reps = stats.sample_efficiency_replicates(curves, "mean", key=jax.random.key(0), reps=100)
    # Joint resampling: every replicate curve is its first value plus the common shift.
    np.testing.assert_allclose(reps - reps[:, :1], np.broadcast_to(np.arange(5.0), (100, 5)),
                               atol=1e-5)
    out = stats.sample_efficiency_curves({"a": curves}, "iqm", key=jax.random.key(0), reps=200)
    assert out["a"].point.shape == (5,)
    np.testing.assert_allclose(out["a"].point, [trim_mean(curves[:, :, k], 0.25, axis=None)
                                                for k in range(5)], rtol=1e-12)


@pytest.mark.parametrize("kwargs,match", [
    ({"reps": 0}, "reps must be an integer >= 1"),
    ({"confidence": 1.5}, "confidence must be a number strictly between 0 and 1"),
    ({"method": "studentized"}, "method must be one of"),
    ({"nan_policy": "ignore"}, "nan_policy must be one of"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        stats.interval_estimates({"a": np.ones((3, 2))}, "iqm", key=jax.random.key(0), **kwargs)


def test_bad_scores():
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"must have rank 2 \[num_runs, num_tasks\]"):
        stats.aggregate_iqm(np.ones(5))
    with pytest.raises(ValueError, match="metric must be one of"):
        stats.interval_estimates({"a": np.ones((3, 2))}, "iqr", key=key)
    with pytest.raises(ValueError, match=r"scores of 'b' has a non-finite value inf"):
        stats.interval_estimates({"b": np.array([[1.0, np.inf]])}, "mean", key=key,
                                 nan_policy="omit")
    with pytest.warns(UserWarning, match="was the array passed transposed"):
        stats.aggregate_mean(np.ones((2, 60)))
    with pytest.warns(UserWarning, match="transposed"):
        stats.interval_estimates({"a": np.ones((1, 30))}, "mean", key=key, reps=10)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stats.aggregate_mean(np.ones((5, 26)))  # IRIS-like shape: no warning
