"""The coverage simulator against closed forms, the committed table, reported_interval and
the interval-coverage study end to end."""

import json
import math

import jax
import numpy as np
import pytest

from rljax.cli import main
from rljax.stats import coverage as cov
from rljax.stats import reported
from rljax.stats.small_sample import METHODS_BY_STATISTIC

pytestmark = pytest.mark.timeout(300)


def _within(result, expected, k=3.5):
    se = math.sqrt(expected * (1 - expected) / result.sims)
    return abs(result.coverage - expected) <= k * se


def test_t_interval_on_normal_data_covers_at_nominal():
    # Exact for normal data: coverage 0.95 up to Monte Carlo error.
    for n in (3, 8):
        r = cov.simulate_coverage("mean", "normal", n, methods=("t",), sims=4000, seed=1)["t"]
        assert _within(r, 0.95), (n, r)
        assert r.mc_se == pytest.approx(math.sqrt(r.coverage * (1 - r.coverage) / 4000))


def test_percentile_bootstrap_under_covers_a_normal_mean_at_8_seeds():
    # Its coverage is that of mean +- z s_n/sqrt(n) with s_n the ddof=0 sd, about 0.88.
    r = cov.simulate_coverage("mean", "normal", 8, methods=("percentile",), sims=1500,
                              reps=399, seed=2)["percentile"]
    assert 0.855 <= r.coverage <= 0.915, r


def test_truths_match_a_huge_sample():
    # 4M draws from numpy's own generators, not the library's quantile functions that
    # truth() integrates (scipy's Poisson ppf on 4M uniforms alone took ~10 CPU s): the
    # check also covers those quantiles. Pareto(2.5) on [1, inf) is numpy's Lomax + 1.
    rng = np.random.default_rng(0)
    n = 4_000_000
    draws = {"lognormal": lambda: rng.lognormal(0.0, 1.0, n),
             "pareto2.5": lambda: rng.pareto(2.5, n) + 1.0,
             "poisson3": lambda: rng.poisson(3.0, n).astype(np.float64)}
    for name in ("lognormal", "pareto2.5", "poisson3"):
        x = np.sort(draws[name]())
        iqm = x[1_000_000:3_000_000].mean()
        assert cov.truth("iqm", name) == pytest.approx(iqm, rel=5e-3), name
        assert cov.truth("median", name) == pytest.approx(np.median(x), rel=5e-3), name
    assert cov.truth("median", "censored_exp") == pytest.approx(math.log(2))
    crossed = cov.CROSSED["crossed_hard"]
    a, b = rng.normal(0, crossed.seed_sd, 10**6), rng.normal(0, crossed.prompt_sd, 10**6)
    mc = np.mean(1 / (1 + np.exp(-(crossed.mu + a + b))))
    assert cov.truth("two_way_mean", "crossed_hard") == pytest.approx(mc, abs=2e-3)


def test_order_statistic_covers_a_tied_median():
    # Counts 64 or 65 with P(64) = 0.45: the true median is 65 and most seeds tie with it or
    # its neighbour (orm-vs-prm's episode counts); the closed order-statistic interval keeps
    # coverage >= nominal, the percentile bootstrap's intervals collapse onto one count.
    rng = np.random.default_rng(3)
    sims = 400
    for n in (8, 40):
        data = (64.0 + (rng.random((sims, n)) >= 0.45)).astype(np.float32)
        bounds = cov.simulated_bounds("median", (data,),
                                      methods=("percentile", "order_statistic"),
                                      key=jax.random.key(n), reps=199)
        _, order = cov.summarize_bounds(bounds, 65.0)
        assert order.coverage >= 0.95 - 3 * math.sqrt(0.05 * 0.95 / sims), (n, order)
    data = (64.0 + (rng.random((sims, 40)) >= 0.3)).astype(np.float32)
    bounds = cov.simulated_bounds("median", (data,), methods=("percentile",),
                                  key=jax.random.key(1), reps=199)
    assert np.mean(bounds[:, 0, 0] == bounds[:, 0, 1]) > 0.5  # [65, 65] most of the time


def test_order_statistic_honest_on_censored_times_and_poisson_counts():
    for stat, dist in (("median", "censored_exp"), ("median", "poisson3"),
                       ("ratio_of_medians", "censored_exp")):
        r = cov.simulate_coverage(stat, dist, 16, methods=("order_statistic",), sims=1500,
                                  seed=4)["order_statistic"]
        assert r.coverage >= 0.95 - 3 * math.sqrt(0.05 * 0.95 / 1500), (stat, dist, r)


def _table(cells):
    """A synthetic nested coverage table {method: {stat: {dist: {n: result}}}}."""
    out = {}
    for (method, dist, n), (c, width, inf) in cells.items():
        out.setdefault(method, {}).setdefault("mean", {}).setdefault(dist, {})[str(n)] = {
            "coverage": c, "mean_width": width, "infinite_fraction": inf}
    return out


def test_recommend_methods_rule():
    table = _table({
        ("t", "normal", 3): (0.95, 5.0, 0.0), ("t", "lognormal", 3): (0.90, 5.0, 0.0),
        ("bca", "normal", 3): (0.85, 1.0, 0.0), ("bca", "lognormal", 3): (0.80, 1.0, 0.0),
        ("t", "normal", 8): (0.95, 2.0, 0.0), ("t", "lognormal", 8): (0.92, 2.0, 0.0),
        ("bca", "normal", 8): (0.935, 1.5, 0.0), ("bca", "lognormal", 8): (0.93, 1.5, 0.0),
        ("t", "normal", 64): (0.95, 1.0, 0.0), ("t", "lognormal", 64): (0.95, 1.0, 0.0),
        ("bca", "normal", 64): (0.99, 0.1, 0.5), ("bca", "lognormal", 64): (0.99, 0.1, 0.5),
    })
    rec = cov.recommend_methods(table, threshold=0.93)["mean"]
    assert rec == {"3-7": "none: run more seeds (smallest simulated n where a method "
                          "qualifies: 8)",
                   "8-63": "bca",  # t misses lognormal; bca qualifies
                   "64+": "t"}  # t first in PREFERENCE (bca is also unbounded half the time)
    # restricted to one kind of data, the first method in PREFERENCE order that qualifies
    normal = cov.recommend_methods(table, threshold=0.93, distributions=("normal",))["mean"]
    assert normal == {"3-7": "t", "8-63": "t", "64+": "t"}
    assert cov.PREFERENCE["mean"][0] == "t"
    assert cov.recommend_methods(table, distributions=("poisson3",)) == {}
    assert cov.size_ranges([3, 5, 8, 1000]) == {3: "3-4", 5: "5-7", 8: "8-999", 1000: "1000+"}


def test_committed_table_has_every_statistic_and_method():
    table = reported.coverage_table()
    for stat, methods in METHODS_BY_STATISTIC.items():
        assert stat in table["recommended_method"], stat
        for method in methods:
            by_dist = table["coverage"][method][stat]
            assert set(by_dist) == set(cov.STATISTIC_DISTRIBUTIONS[stat]), (method, stat)
            for by_n in by_dist.values():
                assert {"3", "8", "64", "1000"} <= set(by_n)
                assert {"coverage", "mc_se", "sims", "mean_width"} <= set(by_n["8"])


@pytest.mark.parametrize("statistic", reported.STATISTICS)
@pytest.mark.parametrize("n", [8, 4096])
def test_reported_interval_picks_a_method_with_measured_coverage(statistic, n):
    rng = np.random.default_rng(n)
    if statistic == "two_way_mean":
        samples = ((rng.random((n if n < 100 else 128, 16)) < 0.6).astype(float),)
    elif statistic in ("ratio_of_medians", "paired_difference"):
        samples = (rng.lognormal(size=n) + 1.0, rng.lognormal(size=n))
    else:
        samples = (rng.lognormal(size=n),)
    iv = reported.reported_interval(statistic, *samples, key=jax.random.key(0), reps=500)
    method = reported.recommended_method(statistic, iv.n)
    assert iv.coverage == reported.measured_coverage(iv.method, statistic, iv.n)
    assert iv.low <= iv.point <= iv.high
    assert f"{iv.coverage:.3f}" in iv.note
    if method.startswith("none"):  # no method qualifies: the best measured one, flagged
        others = [reported.measured_coverage(m, statistic, iv.n)
                  for m in METHODS_BY_STATISTIC[statistic]]
        assert iv.coverage == max(others)
        assert "run more seeds" in iv.note
    else:
        assert iv.method == method
        assert iv.coverage >= 0.93 and "run more seeds" not in iv.note


def test_measured_coverage_reads_the_nearest_simulated_n_at_or_below():
    assert reported.simulated_n("mean", 4096) == 1000
    assert reported.simulated_n("mean", 7) == 5
    assert reported.simulated_n("mean", 2) is None
    assert reported.measured_coverage("t", "mean", 4096) == reported.measured_coverage(
        "t", "mean", 1000)
    table = reported.coverage_table()["coverage"]["t"]["mean"]
    assert reported.measured_coverage("t", "mean", 7) == min(
        v["5"]["coverage"] for v in table.values())
    assert reported.measured_coverage("t", "mean", 2) is None
    assert reported.measured_coverage("order_statistic", "mean", 8) is None
    assert reported.recommended_method("mean", 2).startswith("none: run more seeds")


def test_reported_median_with_censored_seeds_and_bad_input():
    x = np.r_[np.arange(40.0), np.full(10, np.inf)]
    iv = reported.reported_interval("median", x, key=jax.random.key(1))
    assert iv.point == 24.5 and iv.low <= 24.5 <= iv.high and math.isfinite(iv.high)
    assert "median over n = 50 seeds" in iv.note and "measured coverage" in iv.note
    r = reported.reported_interval("ratio_of_medians", x, x / 2 + 1, key=jax.random.key(1))
    assert r.low <= r.point <= r.high
    with pytest.raises(ValueError, match="needs finite values"):
        reported.reported_interval("mean", x, key=jax.random.key(1))
    with pytest.raises(ValueError, match="NaN"):
        reported.reported_interval("median", [1.0, np.nan, 3.0], key=jax.random.key(1))
    with pytest.raises(ValueError, match="statistic must be one of"):
        reported.reported_interval("mode", x, key=jax.random.key(1))
    with pytest.raises(ValueError, match="takes 2 array"):
        reported.reported_interval("paired_difference", x, key=jax.random.key(1))
    with pytest.raises(ValueError, match="method: mean supports"):
        reported.reported_interval("mean", x[:40], key=jax.random.key(1),
                                   method="order_statistic")


@pytest.mark.slow  # suite time (~9 s); the coverage functions' tests stay fast
def test_study_runs_end_to_end(tmp_path):
    out = tmp_path / "ic"
    status = main(["run", "interval-coverage", "--out", str(out),
                   "--set", "sims=20", "--set", "reps=19", "--set", "sims_large=20",
                   "--set", "reps_large=19", "--set", "sims_closed_form=40",
                   "--set", "sizes=3,8", "--set", "large_n=8",
                   "--set", "statistics=mean,median,two_way_mean", "--set", "prompts=4"])
    assert status == 0
    summary = json.loads((out / "summary.json").read_text())
    assert {"coverage", "recommended_method", "min_coverage", "plan"} <= set(summary)
    cell = summary["coverage"]["t"]["mean"]["normal"]["8"]
    assert {"coverage", "mc_se", "sims", "mean_width"} <= set(cell)
    # at large_n the closed-form methods get sims_closed_form datasets, the bootstraps
    # sims_large
    assert cell["sims"] == 40
    assert summary["coverage"]["percentile"]["mean"]["normal"]["8"]["sims"] == 20
    assert summary["coverage"]["t"]["mean"]["normal"]["3"]["sims"] == 20
    assert summary["plan"]["8"] == {"sims": 20, "reps": 19, "sims_closed_form": 40}
    assert {"recommended_method_by_data", "data_kinds"} <= set(summary)
    assert set(summary["recommended_method_by_data"]["median"]) == {
        "symmetric", "skewed", "binary", "counts", "censored"}
    assert set(summary["recommended_method"]["median"]) == {"3-7", "8+"}
    assert (out / "coverage.png").read_bytes()[:4] == b"\x89PNG"
    assert "Monte Carlo" in (out / "report.md").read_text()
    assert (out / "results.parquet").stat().st_size > 0


@pytest.mark.parametrize("setting, field", [("sizes=2,8", "sizes"),
                                            ("statistics=mean,mode", "statistics"),
                                            ("confidence=1.5", "confidence"),
                                            ("sims=5", "sims")])
def test_bad_config_is_one_line_exit_2(tmp_path, capsys, monkeypatch, setting, field):
    from experiments import interval_coverage

    def refuse(*args, **kwargs):
        raise AssertionError(f"{setting} was accepted and the study started")

    monkeypatch.setattr(interval_coverage, "run", refuse)
    status = main(["run", "interval-coverage", "--out", str(tmp_path / "x"), "--set", setting])
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith(f"error: {field}:") and err.count("\n") == 1, err
    assert not (tmp_path / "x").exists()


def test_reported_interval_for_a_kind_of_data_states_that_and_the_worst_case():
    x = np.random.default_rng(3).binomial(32, 0.3, 16) / 32  # per-seed accuracies
    any_kind = reported.reported_interval("mean", x, key=jax.random.key(0))
    counts = reported.reported_interval("mean", x, key=jax.random.key(0), data="counts")
    poisson = [v["16"]["coverage"] for d, v in
               reported.coverage_table()["coverage"][counts.method]["mean"].items()
               if d in cov.DATA_KINDS["counts"]]
    assert counts.coverage == min(poisson) >= 0.93
    assert counts.coverage == reported.measured_coverage(counts.method, "mean", 16, "counts")
    assert any_kind.coverage < 0.93 <= counts.coverage  # the worst case is another kind
    assert "counts" in counts.note and f"{any_kind.coverage:.3f}" in counts.note
    assert "run more seeds" in any_kind.note and "run more seeds" not in counts.note
    with pytest.raises(ValueError, match="^data: "):
        reported.reported_interval("mean", x, key=jax.random.key(0), data="crossed")
    with pytest.raises(ValueError, match="^data: "):
        reported.recommended_method("mean", 16, data="gaussian")
