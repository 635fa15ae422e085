"""orm-vs-prm's intervals: medians of tied, censored episode counts and their ratio are
exact order-statistic intervals (checked against a numpy binomial-rank loop), and the
report states the method and its measured coverage."""

import math

import jax
import numpy as np

from experiments import orm_vs_prm

CONFIG = orm_vs_prm.Config(bootstrap_reps=200)


def success_matrix(ep50, episodes=400):
    """Seeds that succeed every episode from ``k = ep50 - 14`` on reach a 50 % rate over a
    full 30-episode window at exactly ``ep50`` (>= 30); ``inf``: never succeed."""
    s = np.zeros((len(ep50), episodes), bool)
    for i, e in enumerate(ep50):
        if math.isfinite(e):
            s[i, int(e) - 15:] = True
    return s


def order_statistic_reference(x, confidence):
    """``[X_(l), X_(u)]`` with l = max{l : B(l - 1) <= alpha}, u = min{u : 1 - B(u - 1) <=
    alpha}, B the Binomial(n, 1/2) cdf, by a plain loop over ranks."""
    x = np.sort(np.asarray(x, np.float64))
    n = x.size
    alpha = (1 - confidence) / 2
    pmf = [math.comb(n, k) / 2**n for k in range(n + 1)]

    def cdf(k):
        return sum(pmf[: k + 1]) if k >= 0 else 0.0

    low = max(r for r in range(0, n + 1) if cdf(r - 1) <= alpha)
    high = min(r for r in range(1, n + 2) if 1 - cdf(r - 1) <= alpha)
    return (-math.inf if low == 0 else x[low - 1]), (math.inf if high == n + 1 else x[high - 1])


def test_median_and_ratio_intervals_are_order_statistics_with_ties_and_censoring():
    prm = [60.0] * 24 + [64.0] * 16 + [65.0] * 24  # 64 seeds, heavy ties, median 64
    orm = [200.0] * 30 + [240.0] * 24 + [math.inf] * 10  # 10 seeds never reach 50 %
    rng = np.random.default_rng(0)
    order = rng.permutation(64)
    prm, orm = np.asarray(prm)[order], np.asarray(orm)[order]
    success = {"orm": success_matrix(orm), "prm": success_matrix(prm)}
    np.testing.assert_array_equal(
        orm_vs_prm.episodes_to_threshold(success["orm"], 30, 0.5, True), orm)
    out = orm_vs_prm.analyse(success, CONFIG, jax.random.key(0))

    assert "order-statistic" in out["interval_notes"]["median"]
    assert "coverage" in out["interval_notes"]["median"]
    for mode, x in (("orm", orm), ("prm", prm)):
        low, high = order_statistic_reference(x, 0.95)
        expected = [None if math.isinf(v) else v for v in (low, high)]
        assert out[f"{mode}_ep50_median_ci"] == expected, mode
        assert out[f"{mode}_ep50_median"] == np.median(x)
    # a percentile bootstrap gives about [63.95, 64.5] here: it excludes both tied neighbours
    assert out["prm_ep50_median_ci"] == [60.0, 65.0]
    assert out["orm_ep50_median_ci"] == [200.0, 240.0]
    assert out["orm_never_reached"] == 10 / 64

    # ratio of medians: both order-statistic intervals at 1 - alpha (Bonferroni), divided
    assert "order-statistic" in out["interval_notes"]["ratio_of_medians"]
    ol, oh = order_statistic_reference(orm, 0.975)
    pl, ph = order_statistic_reference(prm, 0.975)
    assert out["ep50_ratio"] == 240.0 / 64.0
    np.testing.assert_allclose(out["ep50_ratio_ci"], [ol / ph, oh / pl], rtol=1e-6)


def test_report_procedure_states_the_intervals_coverage():
    success = {"orm": success_matrix([200.0, 240.0, 250.0, 260.0, math.inf] * 4),
               "prm": success_matrix([60.0, 64.0, 64.0, 65.0, 70.0] * 4)}
    summary = {"seeds": 20, "episodes": 400, "episodes_per_second": 1.0,
               **orm_vs_prm.analyse(success, CONFIG, jax.random.key(1))}
    procedure = orm_vs_prm.report_markdown(summary, CONFIG).split("## Procedure")[1]
    for statistic in ("median", "ratio_of_medians", "mean"):
        assert summary["interval_notes"][statistic] in procedure, statistic
    assert "percentile bootstrap over seeds" not in procedure
