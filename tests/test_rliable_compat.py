"""rljax.stats.rliable against rliable 1.2.0 itself (imported, never skipped).

Point estimates are compared for exact (bitwise) equality. Intervals are Monte Carlo: with
``R`` resamples a bound ``q_p`` (p = 0.025 or 0.975) of a roughly normal bootstrap
distribution of sd ``s`` has sd ``sqrt(p (1 - p) / R) / phi(1.96) * s = 2.67 s / sqrt(R)``;
the difference of two independent estimates (ours, rliable's) has sd ``3.78 s / sqrt(R)``,
and the interval is ``3.92 s`` wide, so the difference is ``0.96 / sqrt(R)`` interval
widths per sd. :data:`TOL` is 5 sd at :data:`REPS` (0.28 widths at 300 resamples, kept
small for CI); the slow test repeats the comparison at 4000 resamples (0.08 widths), and
the fast :func:`test_interval_formulas_exact` pins each method's formula exactly on our
own replicates. Both sides are seeded, so every test is deterministic.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.rliable_import import import_rliable
from scipy import stats as sps

from rljax.stats.rliable import library as ours
from rljax.stats.rliable import metrics as ometrics

pytestmark = pytest.mark.timeout(240)

rly, rmetrics = import_rliable()

REPS = 300
TOL = 0.28  # interval widths: 5 Monte Carlo sd at REPS, 5 * 0.96 / sqrt(300)
SLOW_REPS = 4000
SLOW_TOL = 0.08  # 5 * 0.96 / sqrt(4000)

RNG = np.random.default_rng(0)
X_INT = np.arange(5 * 16).reshape(5, 16)  # rliable's own test data
GAMMA = RNG.gamma(2.0, size=(10, 5))
TIES = np.round(RNG.normal(0.5, 0.5, size=(9, 5)), 1)
CURVES = RNG.gamma(2.0, size=(6, 4, 3))  # [runs, tasks, checkpoints]
Y_TIES = np.round(TIES[:7] + RNG.normal(0, 0.3, size=(7, 5)), 1)


def four_metrics(x):  # what rliable users write: numpy, not traceable
    return np.array([ometrics.aggregate_iqm(x), ometrics.aggregate_mean(x),
                     ometrics.aggregate_median(x), ometrics.aggregate_optimality_gap(x)])


def four_metrics_rliable(x):
    return np.array([rmetrics.aggregate_iqm(x), rmetrics.aggregate_mean(x),
                     rmetrics.aggregate_median(x), rmetrics.aggregate_optimality_gap(x)])


def four_metrics_jnp(x):  # the same, traceable: the JAX back end
    return jnp.stack([ometrics.aggregate_iqm(x), ometrics.aggregate_mean(x),
                      ometrics.aggregate_median(x), ometrics.aggregate_optimality_gap(x)])


def iqm_only(x):
    return np.array([ometrics.aggregate_iqm(x)])


def iqm_only_rliable(x):
    return np.array([rmetrics.aggregate_iqm(x)])


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (a, b)
    np.testing.assert_array_equal(a, b)  # NaN == NaN here


def _close(ci, ref, tol=TOL):
    ci, ref = np.asarray(ci, np.float64), np.asarray(ref, np.float64)
    assert ci.shape == ref.shape, (ci.shape, ref.shape)
    width = np.maximum(ref[1] - ref[0], 1e-12)
    assert np.all(np.abs(ci - ref) <= tol * width), (ci, ref)


# ----------------------------------------------------------------------------- metrics


@pytest.mark.parametrize("data", [X_INT, np.flip(X_INT, 0), GAMMA, TIES, CURVES,
                                  np.array([[1, 2], [2, 2], [1, 1], [2, 1]])])
def test_metrics_bitwise_equal_rliable(data):
    for name in ("aggregate_mean", "aggregate_median", "aggregate_iqm",
                 "aggregate_optimality_gap"):
        _same(getattr(ometrics, name)(data), getattr(rmetrics, name)(data))
    _same(ometrics.aggregate_optimality_gap(data, gamma=0.5),
          rmetrics.aggregate_optimality_gap(data, gamma=0.5))
    if data.ndim == 2:
        other = np.round(data[: max(2, len(data) - 2)] * 0.9, 0)
        _same(ometrics.probability_of_improvement(data, other),
              rmetrics.probability_of_improvement(data, other))
        _same(ometrics.probability_of_improvement(data, data),
              rmetrics.probability_of_improvement(data, data))


def test_metrics_nan_like_rliable():
    x = GAMMA.copy()
    x[0, 1] = np.nan
    for name in ("aggregate_mean", "aggregate_median", "aggregate_iqm",
                 "aggregate_optimality_gap"):
        _same(getattr(ometrics, name)(x), getattr(rmetrics, name)(x))
    _same(ometrics.probability_of_improvement(x, GAMMA),
          rmetrics.probability_of_improvement(x, GAMMA))


def test_metrics_jax_path_under_jit_and_vmap():
    batch = np.stack([GAMMA, np.round(GAMMA), GAMMA**2])  # the middle one has ties
    ref = np.stack([four_metrics(b) for b in batch])
    got = jax.jit(jax.vmap(four_metrics_jnp))(jnp.asarray(batch))
    np.testing.assert_allclose(got, ref, rtol=2e-6, atol=1e-6)
    poi = jax.jit(jax.vmap(ometrics.probability_of_improvement))(
        jnp.asarray(batch), jnp.asarray(batch[::-1]))
    np.testing.assert_allclose(
        poi, [rmetrics.probability_of_improvement(a, b)
              for a, b in zip(batch, batch[::-1], strict=True)],
        rtol=1e-6)
    nan = jnp.asarray(GAMMA).at[0, 0].set(jnp.nan)
    assert np.isnan(jax.jit(four_metrics_jnp)(nan)).all()


# ----------------------------------------------------------------------------- intervals


def _compare_multi(method, task_bootstrap, scores, reps, tol):
    np.random.seed(0)
    rpoint, rci = rly.get_interval_estimates(scores, four_metrics_rliable, method=method,
                                             task_bootstrap=task_bootstrap, reps=reps)
    point, ci = ours.get_interval_estimates(scores, four_metrics, method=method,
                                            task_bootstrap=task_bootstrap, reps=reps,
                                            key=jax.random.key(0))
    for name in scores:
        _same(point[name], rpoint[name])
        _close(ci[name], rci[name], tol)


@pytest.mark.parametrize("method,task_bootstrap", [("percentile", False), ("basic", True)])
def test_multi_metric_intervals_match_rliable(method, task_bootstrap):
    _compare_multi(method, task_bootstrap, {"a": GAMMA}, REPS, TOL)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["percentile", "basic", "bc", "bca"])
@pytest.mark.parametrize("task_bootstrap", [False, True])
def test_intervals_match_rliable_slow(method, task_bootstrap):
    """At 4000 resamples. BC/BCa on IQM only: arch's BCa is wrong for several metrics, and
    the bias estimate z0 adds Monte Carlo error the normal-quantile derivation leaves out
    (on the median of 5 task means the BC upper bound's sd is 0.06-0.12 widths, measured
    over 25-60 seeds; rliable's and ours agree within 1.1 standard errors)."""
    if method in ("percentile", "basic"):
        _compare_multi(method, task_bootstrap, {"a": GAMMA, "b": X_INT}, SLOW_REPS, SLOW_TOL)
        return
    np.random.seed(16)
    _, rci = rly.get_interval_estimates({"a": GAMMA}, iqm_only_rliable, method=method,
                                        task_bootstrap=task_bootstrap, reps=SLOW_REPS)
    _, ci = ours.get_interval_estimates({"a": GAMMA}, iqm_only, method=method,
                                        task_bootstrap=task_bootstrap, reps=SLOW_REPS,
                                        key=jax.random.key(16))
    _close(ci["a"], rci["a"], SLOW_TOL)


def _reference_interval(replicates, point, method, size, acceleration):
    """arch's formulas, written out (acceleration given per column)."""
    alpha = (1 - size) / 2
    low, high = [], []
    for j in range(replicates.shape[1]):
        r = replicates[:, j]
        probs = np.array([alpha, 1 - alpha])
        if method == "norm":
            sd = np.sqrt(np.mean((r - r.mean()) ** 2))
            low.append(point[j] + sps.norm.ppf(alpha) * sd)
            high.append(point[j] + sps.norm.ppf(1 - alpha) * sd)
            continue
        if method in ("bc", "bca"):
            z0 = sps.norm.ppf(np.mean(r < point[j]))
            zq = sps.norm.ppf(probs)
            a = acceleration[j] if method == "bca" else 0.0
            probs = sps.norm.cdf(z0 + (z0 + zq) / (1 - a * (z0 + zq)))
        lo, hi = np.percentile(r, 100 * probs)
        if method == "basic":
            lo, hi = 2 * point[j] - hi, 2 * point[j] - lo
        low.append(lo)
        high.append(hi)
    return np.array([low, high])


@pytest.mark.parametrize("method", ["percentile", "basic", "bc", "bca", "norm"])
def test_interval_formulas_exact(method):
    bs = ours.StratifiedBootstrap(GAMMA, key=jax.random.key(14))
    replicates = bs.apply(four_metrics, 200)
    bs.reset()
    ci = bs.conf_int(four_metrics, 200, method=method, size=0.9)
    point = four_metrics(GAMMA)
    loo = np.array([four_metrics(np.delete(GAMMA, i, 0)) for i in range(len(GAMMA))])
    u = loo.mean(axis=0) - loo  # per metric (arch: loo.mean() over all metrics)
    acceleration = np.sum(u**3, 0) / (6 * np.sum(u**2, 0) ** 1.5)
    ref = _reference_interval(replicates, point, method, 0.9, acceleration)
    np.testing.assert_allclose(ci, ref, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("method", ["bc", "bca"])
def test_bias_corrected_intervals_match_rliable(method):
    np.random.seed(1)
    rpoint, rci = rly.get_interval_estimates({"a": GAMMA}, iqm_only_rliable, method=method,
                                             reps=REPS)
    point, ci = ours.get_interval_estimates({"a": GAMMA}, iqm_only, method=method, reps=REPS,
                                            key=jax.random.key(1))
    _same(point["a"], rpoint["a"])
    _close(ci["a"], rci["a"])
    assert ci["a"].shape == (2, 1)


def test_bca_acceleration_is_per_metric():
    """A metric's BCa interval does not depend on the other metrics func returns (arch
    centres the jackknife on the mean over all of them)."""
    key = jax.random.key(2)
    _, multi = ours.get_interval_estimates({"a": GAMMA}, four_metrics, method="bca", reps=100,
                                           key=key)
    for j in range(4):
        _, single = ours.get_interval_estimates(
            {"a": GAMMA}, lambda x, j=j: four_metrics(x)[j:j + 1], method="bca", reps=100,
            key=key)
        np.testing.assert_array_equal(multi["a"][:, j], single["a"][:, 0])
    # arch/rliable gets this wrong: the same resamples, a different IQM interval.
    bs = rly.StratifiedBootstrap(GAMMA)
    np.random.seed(3)
    arch_multi = bs.conf_int(four_metrics_rliable, reps=100, method="bca")
    np.random.seed(3)
    arch_single = bs.conf_int(iqm_only_rliable, reps=100, method="bca")
    assert not np.allclose(arch_multi[:, 0], arch_single[:, 0])


def test_pair_form_matches_rliable():
    scores = {"x,y": [TIES[:, :2], Y_TIES[:, :2]]}  # 2 tasks: scipy's mannwhitneyu is slow
    np.random.seed(4)
    rpoint, rci = rly.get_interval_estimates(scores, rmetrics.probability_of_improvement,
                                             reps=REPS)
    point, ci = ours.get_interval_estimates(scores, ometrics.probability_of_improvement,
                                            reps=REPS, key=jax.random.key(4))
    _same(point["x,y"], rpoint["x,y"])
    assert ci["x,y"].shape == (2, 1)
    _close(ci["x,y"], rci["x,y"])
    # a tuple is the pair form too, and rliable's own (scipy) metric function works
    # unchanged on the host, on the same resamples as our traced one.
    _, ci_tuple = ours.get_interval_estimates({"x,y": tuple(scores["x,y"])},
                                              rmetrics.probability_of_improvement,
                                              reps=REPS, key=jax.random.key(4), backend="numpy")
    np.testing.assert_allclose(ci_tuple["x,y"], ci["x,y"], rtol=1e-6)


def test_pair_form_bca_is_several_sample_jackknife():
    """BCa on independent samples of different sizes (arch refuses): Davison & Hinkley's
    several-sample acceleration, checked against a hand computation."""
    x, y, reps = TIES, Y_TIES, 400
    poi = ometrics.probability_of_improvement
    bs = ours.StratifiedIndependentBootstrap(x, y, key=jax.random.key(5))
    replicates = bs.apply(poi, reps)[:, 0]
    bs.reset()
    ci = bs.conf_int(poi, reps, method="bca", size=0.9)
    num = den = 0.0
    for k, data in enumerate((x, y)):
        n = len(data)
        loo = np.array([poi(*[np.delete(d, i, 0) if j == k else d for j, d in
                              enumerate((x, y))]) for i in range(n)])
        infl = (n - 1) * (loo.mean() - loo)
        num += np.sum(infl**3) / n**3
        den += np.sum(infl**2) / n**2
    a = num / (6 * den**1.5)
    z0 = sps.norm.ppf(np.mean(replicates < poi(x, y)))
    zq = sps.norm.ppf([0.05, 0.95])
    probs = sps.norm.cdf(z0 + (z0 + zq) / (1 - a * (z0 + zq)))
    np.testing.assert_allclose(ci[:, 0], np.percentile(replicates, 100 * probs), rtol=1e-12)


def test_pair_form_task_bootstrap_shares_tasks():
    bs = ours.StratifiedIndependentBootstrap(TIES, y=Y_TIES, task_bootstrap=True,
                                             key=jax.random.key(6))
    moved = 0
    for (x_bs,), kw in bs.bootstrap(5):
        (ix,), kwi = bs.index
        np.testing.assert_array_equal(ix[1], kwi["y"][1])  # the same task draw
        np.testing.assert_array_equal(x_bs, TIES[ix])
        np.testing.assert_array_equal(kw["y"], Y_TIES[kwi["y"]])
        moved += not np.array_equal(ix[1][0], np.arange(5))
    assert moved


def test_nan_scores_give_nan_like_rliable():
    x = GAMMA.copy()
    x[2, 3] = np.nan
    np.random.seed(7)
    rpoint, rci = rly.get_interval_estimates({"a": x}, four_metrics_rliable, reps=50)
    point, ci = ours.get_interval_estimates({"a": x}, four_metrics, reps=50,
                                            key=jax.random.key(7))
    _same(point["a"], rpoint["a"])
    _same(ci["a"], rci["a"])  # all NaN
    with pytest.warns(RuntimeWarning, match="bca is undefined"):
        _, ci = ours.get_interval_estimates({"a": x}, four_metrics, method="bca", reps=50,
                                            key=jax.random.key(7))
    assert np.isnan(ci["a"]).all()


def test_three_d_scores_match_rliable():
    def per_checkpoint(s):
        return np.mean(np.mean(s, axis=0), axis=0)  # [K]

    np.random.seed(8)
    rpoint, rci = rly.get_interval_estimates({"a": CURVES}, per_checkpoint, reps=REPS)
    point, ci = ours.get_interval_estimates({"a": CURVES}, per_checkpoint, reps=REPS,
                                            key=jax.random.key(8))
    _same(point["a"], rpoint["a"])
    assert ci["a"].shape == (2, 3)
    _close(ci["a"], rci["a"])
    # rliable's scheme: every (task, checkpoint) draws its own runs
    bs = ours.StratifiedBootstrap(CURVES, key=jax.random.key(0))
    next(bs.bootstrap(1))
    runs = bs.index[0]
    assert runs.shape == CURVES.shape
    assert not np.array_equal(runs[:, :, 0], runs[:, :, 1])


def test_one_d_scores():
    x1 = GAMMA[:, 0]
    np.random.seed(9)
    _, rci = rly.get_interval_estimates({"a": [x1]}, np.mean, reps=REPS)  # list form only
    with pytest.raises(IndexError):
        rly.get_interval_estimates({"a": x1}, np.mean, reps=5)  # rliable: bare 1-D fails
    for scores in ([x1], x1):
        point, ci = ours.get_interval_estimates({"a": scores}, np.mean, reps=REPS,
                                                key=jax.random.key(9))
        _same(point["a"], np.mean(x1))
        _close(ci["a"], rci["a"])


def test_performance_profiles_match_rliable():
    taus = [0.0, 0.5, 1.0, 2.0, 3.0]
    for use, scores in ((True, GAMMA), (False, X_INT / 40)):
        np.random.seed(10)
        rprof, rci = rly.create_performance_profile({"a": scores}, taus,
                                                    use_score_distribution=use, reps=REPS)
        prof, ci = ours.create_performance_profile({"a": scores}, taus,
                                                   use_score_distribution=use, reps=REPS,
                                                   key=jax.random.key(10))
        _same(prof["a"], rprof["a"])
        # a profile moves in steps of 1/(N M) (runs) or 1/M (task means): allow one step
        step = 1 / (scores.size if use else scores.shape[1])
        width = rci["a"][1] - rci["a"][0]
        assert np.all(np.abs(ci["a"] - rci["a"]) <= TOL * width + step + 1e-6), (ci, rci)
    _same(ours.score_distributions(GAMMA, taus), rly.score_distributions(GAMMA, taus))
    _same(ours.average_score_distributions(GAMMA, taus),
          rly.average_score_distributions(GAMMA, taus))
    prof, ci = ours.create_performance_profile(
        {"a": GAMMA}, taus, custom_profile_func=lambda s, t: np.array([np.mean(s < u) for u in t]),
        reps=50, key=jax.random.key(0))
    np.testing.assert_array_equal(prof["a"], [np.mean(GAMMA < u) for u in taus])
    assert ci["a"].shape == (2, 5)


# ----------------------------------------------------------------------------- back ends, keys


def test_numpy_and_jax_back_ends_draw_the_same_resamples():
    key = jax.random.key(11)
    for method in ("percentile", "bca"):
        _, host = ours.get_interval_estimates({"a": GAMMA}, four_metrics, method=method,
                                              reps=100, key=key)
        _, dev = ours.get_interval_estimates({"a": GAMMA}, four_metrics_jnp, method=method,
                                             reps=100, key=key)
        _, forced = ours.get_interval_estimates({"a": GAMMA}, four_metrics_jnp, method=method,
                                                reps=100, key=key, backend="numpy")
        np.testing.assert_allclose(dev["a"], host["a"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(forced["a"], host["a"], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="backend='jax' needs a JAX-traceable func"):
        ours.get_interval_estimates({"a": GAMMA}, four_metrics, reps=10, key=key,
                                    backend="jax")


def test_auto_back_end_falls_back_when_tracing_changes_the_answer():
    def frozen(x):  # traces, but np.array_equal is False on tracers: 2 * mean under JAX
        return jnp.mean(x) * (1.0 if np.array_equal(x, x) else 2.0)

    key = jax.random.key(15)
    point, auto = ours.get_interval_estimates({"a": GAMMA}, frozen, reps=64, key=key)
    _, host = ours.get_interval_estimates({"a": GAMMA}, frozen, reps=64, key=key,
                                          backend="numpy")
    assert float(point["a"]) == pytest.approx(GAMMA.mean(), rel=1e-6)
    np.testing.assert_array_equal(auto["a"], host["a"])


def test_key_determinism_and_random_state():
    key = jax.random.key(12)
    runs = [ours.get_interval_estimates({"a": GAMMA, "b": TIES}, fn, reps=100, key=key)[1]
            for fn in (iqm_only, iqm_only, four_metrics_jnp, four_metrics_jnp)]
    np.testing.assert_array_equal(runs[0]["a"], runs[1]["a"])  # bitwise, host
    np.testing.assert_array_equal(runs[2]["a"], runs[3]["a"])  # bitwise, JAX
    alone = ours.get_interval_estimates({"a": GAMMA}, iqm_only, reps=100, key=key)[1]
    np.testing.assert_array_equal(alone["a"], runs[0]["a"])  # other algorithms don't matter
    other = ours.get_interval_estimates({"a": GAMMA}, iqm_only, reps=100,
                                        key=jax.random.key(13))[1]
    assert not np.array_equal(other["a"], alone["a"])
    # random_state is honoured (rliable ignores it); without key or random_state the global
    # numpy generator decides, so np.random.seed reproduces a call.
    by_state = [ours.get_interval_estimates({"a": GAMMA}, iqm_only, reps=100,
                                            random_state=np.random.RandomState(3))[1]["a"]
                for _ in range(2)]
    np.testing.assert_array_equal(*by_state)
    seeded = []
    for _ in range(2):
        np.random.seed(5)
        seeded.append(ours.get_interval_estimates({"a": GAMMA}, iqm_only, reps=100)[1]["a"])
    np.testing.assert_array_equal(*seeded)
    bs = ours.StratifiedBootstrap(GAMMA, key=key)
    first = bs.conf_int(iqm_only, reps=50)
    assert not np.array_equal(first, bs.conf_int(iqm_only, reps=50))  # stream advances
    bs.reset()
    np.testing.assert_array_equal(first, bs.conf_int(iqm_only, reps=50))


def test_class_interface_like_rliable():
    x, y, z = X_INT, np.flip(X_INT, 0), np.stack([X_INT, 2 * X_INT], -1)
    for task_bootstrap in (False, True):
        bs = ours.StratifiedBootstrap(x, y=y, z=z, task_bootstrap=task_bootstrap,
                                      key=jax.random.key(0))
        for data, kw in bs.bootstrap(3):
            np.testing.assert_array_equal(x[bs.index], data[0])
            np.testing.assert_array_equal(z[bs.index], kw["z"])
            np.testing.assert_array_equal(bs.y, y[bs.index])
            assert np.array_equal(bs.index[1][0], np.arange(16)) != task_bootstrap
    bs = ours.StratifiedBootstrap(GAMMA, key=jax.random.key(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lower = bs.conf_int(iqm_only, reps=100, method="percentile", tail="lower")
    assert lower.shape == (2, 1) and lower[1, 0] == np.inf
    norm = bs.conf_int(iqm_only, reps=400, method="norm")
    sd = np.sqrt(bs.var(iqm_only, reps=400))
    assert norm[1, 0] - norm[0, 0] == pytest.approx(2 * 1.959964 * sd[0], rel=0.25)


@pytest.mark.parametrize("call,match", [
    (lambda: ours.get_interval_estimates({"a": GAMMA}, iqm_only, method="studentized"),
     "method must be one of"),
    (lambda: ours.get_interval_estimates({"a": GAMMA}, iqm_only, reps=0), "reps must be"),
    (lambda: ours.get_interval_estimates({"a": GAMMA}, iqm_only, confidence_interval_size=1.5),
     "confidence_interval_size must be"),
    (lambda: ours.get_interval_estimates({}, iqm_only), "score_dict must be"),
    (lambda: ours.get_interval_estimates([GAMMA], iqm_only), "score_dict must be"),
    (lambda: ours.get_interval_estimates({"a": GAMMA}, "iqm"), "func must be callable"),
    (lambda: ours.get_interval_estimates({"a": [["x", "y"]]}, iqm_only), "must be a numeric"),
    (lambda: ours.get_interval_estimates({"a": []}, iqm_only), "empty list"),
    (lambda: ours.get_interval_estimates({"a": GAMMA[:, 0]}, np.mean, task_bootstrap=True),
     "task_bootstrap=True needs"),
    (lambda: ours.get_interval_estimates({"a": GAMMA}, iqm_only, backend="gpu"),
     "backend must be one of"),
    (lambda: ours.get_interval_estimates({"a": GAMMA}, iqm_only, key=jax.random.key(0),
                                         random_state=np.random.RandomState(0)),
     "either key or random_state"),
    (lambda: ours.get_interval_estimates({"a": GAMMA}, iqm_only, random_state="x"),
     "random_state/seed must be"),
    (lambda: ours.StratifiedBootstrap(GAMMA, y=GAMMA[:3]), "must start with"),
    (lambda: ours.StratifiedBootstrap(GAMMA, backend=GAMMA), "reserved name"),
    (lambda: ours.create_performance_profile({"a": GAMMA}, [[0.0, 1.0]]), "tau_list must be"),
    (lambda: ometrics.probability_of_improvement(GAMMA, GAMMA[:, :3]), "same number of tasks"),
    (lambda: ours.get_interval_estimates({"a": np.zeros((0, 3))}, iqm_only),
     "at least one run"),
])
def test_bad_input_one_line_errors(call, match):
    with pytest.raises(ValueError, match=match) as info:
        call()
    assert "\n" not in str(info.value)
