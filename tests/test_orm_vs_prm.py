"""orm-vs-prm's intervals: medians of tied, censored episode counts and their ratio are
exact order-statistic intervals (checked against a numpy binomial-rank loop), and the
report states the method and its measured coverage."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from experiments import orm_vs_prm
from rljax.cli import main
from rljax.config import ConfigError, structural_fields, traced_fields
from rljax.grid import make_grid
from rljax.training.chain import make_chain_train

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


# --------------------------------------------------------------------------------------
# The config axis: traced learning_rate / baseline_init / baseline_rate, structural
# baseline / chain_length.

SMALL = orm_vs_prm.Config(seeds=16, episodes=40, block_size=16, bootstrap_reps=50)
HEADLINE = ("orm_ep50_median", "prm_ep50_median", "ep50_ratio", "orm_final_success",
            "prm_final_success", "orm_never_reached", "prm_ep50_median_ci")


def _success(out_dir, **where):
    frame = pd.read_parquet(out_dir / "results.parquet")
    for name, value in where.items():
        frame = frame[frame[name] == value]
    frame = frame.sort_values(["mode", "seed", "step"])
    return frame["success"].to_numpy().reshape(2, SMALL.seeds, SMALL.episodes)


@pytest.mark.timeout(120)
def test_plain_run_is_bitwise_its_config_inside_a_grid(tmp_path):
    plain = orm_vs_prm.run(SMALL, tmp_path / "plain")
    grid = make_grid(orm_vs_prm.Config, {}, grid=["learning_rate=0.3,0.1,0.05"])
    summary = orm_vs_prm.run(SMALL, tmp_path / "grid", grid=grid)
    assert summary["programs"] == 2  # one per reward mode: the three values in one program
    assert [row["learning_rate"] for row in summary["configs"]] == [0.3, 0.1, 0.05]
    np.testing.assert_array_equal(_success(tmp_path / "grid", config=1),
                                  _success(tmp_path / "plain"))
    for key in HEADLINE:
        assert summary["configs"][1][key] == plain[key], key
    # not vacuous: another learning rate gives other runs on the same seeds
    assert np.any(_success(tmp_path / "grid", config=0) != _success(tmp_path / "plain"))
    frame = pd.read_parquet(tmp_path / "grid" / "results.parquet")
    assert list(frame.columns) == ["config", "learning_rate", "seed", "mode", "step", "success"]
    assert len(frame) == 3 * 2 * SMALL.seeds * SMALL.episodes
    assert "config" not in pd.read_parquet(tmp_path / "plain" / "results.parquet").columns
    report = (tmp_path / "grid" / "report.md").read_text()
    assert "| config | learning_rate |" in report and "| 2 | 0.05 |" in report


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["orm", "prm"])
def test_traced_values_match_the_values_baked_in(mode):
    """make_train reads the traced fields from hparams: a vmap over two learning rates and
    baseline rates equals make_chain_train with each value as a Python constant."""
    config = orm_vs_prm.Config(episodes=100)
    train = jax.jit(jax.vmap(orm_vs_prm.make_train(config, mode), in_axes=(0, None)))
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jnp.arange(16))
    runs = []
    for lr, rate, init in ((0.5, 0.2, 0.1), (0.05, 0.01, 0.9)):
        hp = {"learning_rate": jnp.float32(lr), "baseline_rate": jnp.float32(rate),
              "baseline_init": jnp.float32(init)}
        got = np.asarray(train(keys, hp)["success"])
        want = jax.jit(jax.vmap(make_chain_train(
            mode=mode, episodes=100, learning_rate=lr, baseline_rate=rate,
            baseline_init=init)))(keys)["success"]
        np.testing.assert_array_equal(got, want)
        runs.append(got)
    assert np.any(runs[0] != runs[1])  # the values reach the program


def test_sweepable_fields():
    assert traced_fields(orm_vs_prm.Config) == ("learning_rate", "baseline_init",
                                                "baseline_rate")
    assert structural_fields(orm_vs_prm.Config) == ("chain_length", "baseline")
    for field in ("episodes", "window", "threshold", "modes"):
        with pytest.raises(ConfigError, match=f"cannot vary '{field}'"):
            make_grid(orm_vs_prm.Config, {}, grid=[f"{field}=1,2"])


@pytest.mark.timeout(120)
def test_structural_grid_compiles_one_program_per_chain_length(tmp_path):
    out = tmp_path / "run"
    assert main(["run", "orm-vs-prm", "--out", str(out), "--block-size", "8", "--set",
                 "seeds=8", "--set", "episodes=20", "--set", "bootstrap_reps=20", "--grid",
                 "chain_length=2,3"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["programs"] == 4  # 2 chain lengths x 2 modes
    rows = summary["configs"]
    assert [r["chain_length"] for r in rows] == [2, 3]
    # a shorter chain is easier: more final success on the same seeds
    assert rows[0]["orm_final_success"] > rows[1]["orm_final_success"]
    frame = pd.read_parquet(out / "results.parquet")
    assert set(frame["chain_length"]) == {2, 3} and "learning_rate" not in frame.columns
