"""rljax.stats against rliable 1.2.0 itself: point estimates exact, intervals within MC error.

rliable is a dev dependency (pyproject ``[dev]``): these tests must run, not skip. rliable
1.2.0 needs arch < 8, and every arch < 8 calls pandas' private ``deprecate_kwarg`` with the
pandas-2 signature at import time, which pandas 3 rejects. ``_import_rliable`` accepts
that one old call form for the duration of the import only (a test-side shim; nothing in
rljax depends on rliable).
"""

import jax
import numpy as np
import pytest
from helpers.rliable_import import import_rliable

from rljax import stats

pytestmark = pytest.mark.timeout(240)


rly, rmetrics = import_rliable()


def _data():
    rng = np.random.default_rng(0)
    gamma = rng.gamma(2.0, size=(20, 8))
    ties = np.round(rng.normal(0.5, 0.5, size=(15, 6)), 1)  # many ties
    spr = stats.atari100k_scores()["SPR"]  # real data, 100 x 26, human-normalised
    return {"gamma": gamma, "ties": ties, "spr": spr, "odd": rng.normal(size=(7, 3))}


DATA = _data()


@pytest.mark.parametrize("name", sorted(DATA))
def test_aggregates_equal_rliable_to_1e12(name):
    x = DATA[name]
    pairs = [
        (stats.aggregate_mean(x), rmetrics.aggregate_mean(x)),
        (stats.aggregate_median(x), rmetrics.aggregate_median(x)),
        (stats.aggregate_iqm(x), rmetrics.aggregate_iqm(x)),
        (stats.aggregate_optimality_gap(x), rmetrics.aggregate_optimality_gap(x)),
        (stats.aggregate_optimality_gap(x, gamma=0.5),
         rmetrics.aggregate_optimality_gap(x, gamma=0.5)),
    ]
    for ours, theirs in pairs:
        assert ours == pytest.approx(float(theirs), rel=1e-12, abs=1e-300)


def test_trimmed_means_equal_scipy():
    from scipy.stats import trim_mean

    x = DATA["gamma"]
    for p in (0.0, 0.1, 0.25, 0.4):
        assert stats.aggregate_trimmed_mean(x, p) == pytest.approx(
            trim_mean(x, p, axis=None), rel=1e-12)


@pytest.mark.parametrize("name", ["gamma", "ties", "odd"])
def test_probability_of_improvement_equals_rliable(name):
    x = DATA[name]
    rng = np.random.default_rng(1)
    y = np.round(x[: max(2, x.shape[0] - 3)] + rng.normal(0, 0.3, size=(max(2, x.shape[0] - 3),
                                                                        x.shape[1])), 1)
    assert stats.probability_of_improvement(x, y) == pytest.approx(
        rmetrics.probability_of_improvement(x, y), rel=1e-12)
    assert stats.probability_of_improvement(x, x) == 0.5 == rmetrics.probability_of_improvement(
        x, x)


def _close(ours, low, high, tol):
    width = high - low
    assert abs(ours.low - low) <= tol * width, (ours, low, high)
    assert abs(ours.high - high) <= tol * width, (ours, low, high)


RLIABLE_FNS = {
    "mean": rmetrics.aggregate_mean,
    "median": rmetrics.aggregate_median,
    "iqm": rmetrics.aggregate_iqm,
    "optimality_gap": rmetrics.aggregate_optimality_gap,
}


@pytest.mark.parametrize("metric", sorted(RLIABLE_FNS))
@pytest.mark.parametrize("method", ["percentile", "basic", "bca"])
def test_interval_estimates_match_rliable(metric, method):
    x = DATA["gamma"]
    reps = 4000
    np.random.seed(0)  # rliable draws from numpy's global generator (ignores random_state)
    fn = RLIABLE_FNS[metric]
    point, ci = rly.get_interval_estimates({"a": x}, lambda s: np.array([fn(s)]), reps=reps,
                                           method=method)
    ours = stats.interval_estimates({"a": x}, metric, key=jax.random.key(0), reps=reps,
                                    method=method)["a"]
    assert ours.point == pytest.approx(float(point["a"][0]), rel=1e-12)
    _close(ours, ci["a"][0, 0], ci["a"][1, 0], tol=0.2)


def test_task_bootstrap_matches_rliable():
    x = DATA["gamma"]
    np.random.seed(1)
    _, ci = rly.get_interval_estimates({"a": x}, lambda s: np.array([rmetrics.aggregate_iqm(s)]),
                                       reps=4000, task_bootstrap=True)
    ours = stats.interval_estimates({"a": x}, "iqm", key=jax.random.key(1), reps=4000,
                                    task_bootstrap=True)["a"]
    _close(ours, ci["a"][0, 0], ci["a"][1, 0], tol=0.2)


@pytest.mark.parametrize("method", ["percentile", "basic"])
def test_probability_of_improvement_ci_matches_rliable(method):
    x = DATA["ties"]
    y = np.round(x[:11] + np.random.default_rng(2).normal(0, 0.4, size=(11, x.shape[1])), 1)
    np.random.seed(2)
    _, ci = rly.get_interval_estimates(
        {"p": [x, y]}, lambda a, b: np.array([rmetrics.probability_of_improvement(a, b)]),
        reps=1000, method=method)
    ours = stats.probability_of_improvement_ci(x, y, key=jax.random.key(2), reps=1000,
                                               method=method)
    _close(ours, ci["p"][0, 0], ci["p"][1, 0], tol=0.3)


def test_performance_profile_matches_rliable():
    x = DATA["spr"][:, :10]
    taus = np.linspace(0.0, 2.0, 21)
    np.random.seed(3)
    prof, prof_ci = rly.create_performance_profile({"a": x}, taus, reps=2000)
    ours = stats.performance_profiles({"a": x}, taus, key=jax.random.key(3), reps=2000)["a"]
    np.testing.assert_allclose(ours.point, prof["a"], rtol=1e-12)
    width = np.maximum(prof_ci["a"][1] - prof_ci["a"][0], 0.02)
    assert np.all(np.abs(ours.low - prof_ci["a"][0]) <= 0.3 * width + 1e-9)
    assert np.all(np.abs(ours.high - prof_ci["a"][1]) <= 0.3 * width + 1e-9)
    np.random.seed(3)
    prof, _ = rly.create_performance_profile({"a": x}, taus, reps=50, use_score_distribution=False)
    ours = stats.performance_profiles({"a": x}, taus, key=jax.random.key(3), reps=50,
                                      use_score_distribution=False)["a"]
    np.testing.assert_allclose(ours.point, prof["a"], rtol=1e-12)
