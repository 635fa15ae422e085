"""The ``dqn``, ``pqn``, ``sac`` and ``offpolicy-compare`` studies end to end at tiny sizes:
the files a run writes, the figures' agreement with the per-seed table, the grid's paired
differences, the presets an env picks, one-line refusals, and the comparison's tuning /
fresh-seed protocol."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from experiments import dqn_env, offpolicy_compare, pqn_env, sac_env
from rljax.config import ConfigError
from rljax.grid import make_grid
from rljax.study import run_study
from rljax.training.offpolicy_presets import preset_for

TINY = dict(seeds=2, block_size=2, eval_episodes=2, curve_points=4, hidden_size=8,
            hidden_layers=1, bootstrap_reps=50)
TINY_REPLAY = dict(TINY, num_envs=2, total_steps=160, buffer_size=64, batch_size=8,
                   learning_starts=40, num_epochs=1)


def test_dqn_study_writes_its_files_and_its_figures_follow_the_table(tmp_path):
    config = dqn_env.Config(**TINY_REPLAY)
    outcome = run_study(dqn_env, config, tmp_path / "dqn")
    summary = json.loads((tmp_path / "dqn" / "summary.json").read_text())
    assert {"report.md", "results.parquet", "return_curve.png", "config.json"} <= {
        p.name for p in (tmp_path / "dqn").iterdir()}
    table = pd.read_parquet(tmp_path / "dqn" / "results.parquet")
    assert len(table) == config.seeds * config.num_rows == 2 * 80
    assert set(table.columns) >= {"seed", "update", "env_steps", "episode_return", "loss",
                                  "q", "epsilon"}
    # the training return is the mean of the finished episodes of the final window
    window = table[table["update"] > config.num_updates - config.final_size]
    per_seed = window.groupby("seed").return_sum.sum() / window.groupby("seed").episodes.sum()
    reported = np.asarray([np.nan if x is None else x for x in summary["train_returns"]])
    np.testing.assert_allclose(reported, per_seed.to_numpy(), rtol=1e-5)
    assert np.isfinite(per_seed.to_numpy()).any()
    assert len(summary["test_returns"]) == 2 and summary["preset"]["name"] == "rejax"
    assert "test return, greedy" in (tmp_path / "dqn" / "report.md").read_text()
    assert outcome is not None


def test_pqn_grid_is_paired_against_the_best(tmp_path):
    sizes = dict(TINY, num_envs=2, num_steps=8, total_steps=64, num_minibatches=2,
                 num_epochs=1)
    config = pqn_env.Config(**sizes)
    grid = make_grid(pqn_env.Config, sizes, grid=["learning_rate=1e-4,1e-2"])
    summary = pqn_env.run(config, tmp_path, grid=grid)
    assert [c["learning_rate"] for c in summary["configs"]] == [1e-4, 1e-2]
    paired = summary["paired_vs_best"]
    best = [p for p in paired if p["best"]]
    assert len(best) == 1
    other = next(p for p in paired if not p["best"])
    x = np.asarray(summary["configs"][other["config"]]["test_returns"])
    y = np.asarray(summary["configs"][best[0]["config"]]["test_returns"])
    assert other["difference"] == pytest.approx(float(np.mean(x - y)))
    table = pd.read_parquet(tmp_path / "results.parquet")
    assert set(table.config) == {0, 1} and "learning_rate" in table.columns


def test_sac_study_runs_on_a_box_env(tmp_path):
    config = sac_env.Config(**TINY_REPLAY)
    summary = sac_env.run(config, tmp_path)
    assert np.all(np.isfinite(summary["test_returns"]))
    assert summary["env"] == "Pendulum-v1" and summary["nonfinite_seeds"] == 0


def test_presets_follow_the_env_and_a_given_value_wins():
    minatar = pqn_env.Config(env="Breakout-MinAtar")
    assert (minatar.num_envs, minatar.lam, minatar.learning_rate) == (128, 0.65, 5e-4)
    assert pqn_env.Config(env="Breakout-MinAtar", lam=0.9).lam == 0.9
    assert pqn_env.Config().num_envs == 32
    assert preset_for("pqn", "Asterix-MinAtar").name == "purejaxql-minatar"
    assert preset_for("dqn", "Acrobot-v1").name == "rejax"


@pytest.mark.parametrize("module,overrides,field", [
    (dqn_env, {"env": "Pendulum-v1"}, "env"),
    (sac_env, {"env": "CartPole-v1"}, "env"),
    (pqn_env, {"preset": "rejax"}, "preset"),
    (dqn_env, {"batch_size": 99, "buffer_size": 10}, "batch_size"),
    (pqn_env, {"log_every": 7}, "log_every"),
    (sac_env, {"log_std_min": 3.0}, "log_std_min"),
])
def test_bad_input_is_one_line_naming_the_field(module, overrides, field):
    with pytest.raises(ConfigError) as err:
        module.Config(**overrides).validate()
    message = str(err.value)
    assert message.startswith(f"{field}: ") and "\n" not in message


def test_compare_tunes_on_tuning_seeds_and_reports_fresh_ones(tmp_path, monkeypatch):
    full = offpolicy_compare.Config.method_config
    small = dict(hidden_size=8, hidden_layers=1, buffer_size=64, batch_size=8, num_envs=2,
                 learning_starts=16, num_epochs=1, num_steps=8, num_minibatches=2,
                 total_steps=64)

    def method_config(self, method, *args, **kwargs):  # the preset rows at tiny sizes
        config = full(self, method, *args, **kwargs)
        names = {f.name for f in dataclasses.fields(config)} & set(small)
        return dataclasses.replace(config, **{f: small[f] for f in names})

    monkeypatch.setattr(offpolicy_compare.Config, "method_config", method_config)
    config = offpolicy_compare.Config(methods="dqn,pqn", env_steps=128, lr_factors="0.5,2",
                                      tune_seeds=2, seeds=2, first_seed=5, eval_episodes=2,
                                      bootstrap_reps=50)
    summary = offpolicy_compare.run(config, tmp_path)
    table = pd.read_parquet(tmp_path / "results.parquet")
    for method in ("dqn", "pqn"):
        tune = summary["tuning"][method]
        assert tune["rates"] == pytest.approx([0.5 * tune["row_rate"], 2 * tune["row_rate"]])
        assert tune["chosen"] == tune["rates"][int(np.argmax(tune["iqm"]))]
        rows = table[table.method == method]
        assert set(rows[rows.phase == "tune"].seed) == {0, 1}
        assert set(rows[rows.phase == "report"].seed) == {5, 6}  # fresh, disjoint
    (pair,) = summary["pairs"]
    x, y = (np.asarray(summary["report"][m]["returns"]) for m in ("dqn", "pqn"))
    assert pair["difference"] == pytest.approx(float(np.mean(x - y)))
    with pytest.raises(ConfigError, match="^first_seed: "):
        offpolicy_compare.Config(first_seed=1).validate()
    with pytest.raises(ConfigError, match="^methods: sac: env: "):
        offpolicy_compare.Config(methods="ppo,sac").validate()
