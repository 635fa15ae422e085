"""A tiny config of the ppo-cartpole study through the CLI: the files and summary keys the
issue names, and the helpers that turn per-update logs into curves."""

import json

import numpy as np
import pandas as pd
import pytest

from experiments import ppo_cartpole
from rljax.cli import main


@pytest.mark.timeout(120)
def test_tiny_study_writes_files_and_keys(tmp_path):
    out = tmp_path / "ppo"
    args = ["run", "ppo-cartpole", "--out", str(out), "--seeds", "2", "--block-size", "2"]
    for s in ("total_steps=256", "num_steps=32", "curve_points=2", "final_updates=1",
              "bootstrap_reps=50"):
        args += ["--set", s]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    for key in ("final_return_iqm", "final_return_ci", "env_steps_per_second",
                "ppo_state_bytes", "grpo_state_bytes", "curve_iqm", "compile_seconds"):
        assert key in summary, key
    assert summary["updates"] == 2 and len(summary["curve_iqm"]) == 2
    low, high = summary["final_return_ci"]
    assert low <= summary["final_return_iqm"] <= high
    assert summary["env_steps_per_second"] > 0
    table = pd.read_parquet(out / "results.parquet")
    assert len(table) == 2 * 2
    assert {"seed", "update", "env_steps", "episodes", "episode_return", "entropy",
            "clip_fraction", "approx_kl"} <= set(table.columns)
    for name in ("report.md", "return_curve.png", "final_returns.png", "config.json"):
        assert (out / name).exists(), name
    assert "95 % CI" in (out / "report.md").read_text()


def test_state_bytes_count_params_and_adam_moments():
    b = ppo_cartpole.state_bytes(ppo_cartpole.Config())
    actor = 4 * 64 + 64 + 64 * 64 + 64 + 64 * 2 + 2
    critic = actor - 64 - 1
    assert b["grpo_param_count"] == actor and b["ppo_param_count"] == actor + critic
    # params + Adam's mu and nu, float32, plus int32 step counters
    assert 12 * actor <= b["grpo_state_bytes"] <= 12 * actor + 16
    assert 12 * (actor + critic) <= b["ppo_state_bytes"] <= 12 * (actor + critic) + 16


def test_binned_and_final_returns():
    sums = np.array([[20.0, 0.0, 30.0, 500.0]])
    counts = np.array([[1, 0, 1, 1]])
    np.testing.assert_allclose(ppo_cartpole.binned_returns(sums, counts, 2), [[20.0, 265.0]])
    np.testing.assert_allclose(ppo_cartpole.binned_returns(sums[:, 1:], counts[:, 1:], 3),
                               [[np.nan, 30.0, 500.0]])
    np.testing.assert_allclose(ppo_cartpole.final_returns(sums, counts, 2), [265.0])
    assert np.isnan(ppo_cartpole.final_returns(sums[:, :2], counts[:, :2], 1)[0])


def test_bad_config_names_the_field(capsys):
    assert main(["run", "ppo-cartpole", "--set", "gamma=1.5"]) == 2
    assert "gamma" in capsys.readouterr().err
    assert main(["run", "ppo-cartpole", "--set", "clip_epsilon=0"]) == 2
    assert "clip_epsilon" in capsys.readouterr().err
