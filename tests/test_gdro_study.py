"""The gdro study: masked group advantages vs a loop, a tiny run through the CLI, bad input."""

import json

import jax
import numpy as np
import pandas as pd
import pytest

from experiments.gdro import masked_group_advantages
from rljax.cli import main


def test_masked_group_advantages_match_a_loop():
    rng = np.random.default_rng(0)
    rewards = (rng.random((40, 6)) < 0.5).astype(np.float32)
    mask = rng.random((40, 6)) < 0.7
    got = np.asarray(jax.jit(masked_group_advantages)(rewards, mask))
    for i in range(40):
        used = rewards[i][mask[i]]
        expected = np.zeros(6)
        if used.size and used.max() > used.min():
            expected[mask[i]] = (used - used.mean()) / (used.std() + 1e-6)
        np.testing.assert_allclose(got[i], expected, rtol=1e-5, atol=1e-6)
    batched = jax.vmap(masked_group_advantages)(rewards.reshape(4, 10, 6), mask.reshape(4, 10, 6))
    np.testing.assert_allclose(np.asarray(batched).reshape(40, 6), got, rtol=1e-6)


@pytest.mark.timeout(200)
def test_tiny_study_writes_files_and_keys(tmp_path):
    out = tmp_path / "gdro"
    args = ["run", "gdro", "--out", str(out), "--seeds", "4", "--block-size", "4"]
    for s in ("num_prompts=16", "prompts_per_step=4", "group_size=4", "budget_steps=6",
              "n_max=8", "bootstrap_reps=50"):
        args += ["--set", s]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    for key in ("pass8", "pass8_ci", "hard_pass8", "rel_gain", "rel_gain_ci", "rollouts_total"):
        assert key in summary, key
    methods = {"uniform", "dynamic", "prompt_gdro", "rollout_gdro"}
    assert set(summary["pass8"]) == methods and set(summary["rel_gain"]) == methods - {"uniform"}
    budget = 6 * 4 * 4
    assert summary["budget_rollouts_per_seed"] == budget
    for m in methods:  # nobody spends more than the budget
        assert summary["rollouts_total"][m] <= budget
    assert summary["rollouts_total"]["uniform"] == budget
    table = pd.read_parquet(out / "results.parquet")
    assert len(table) == 4 * 4 and (table["rollouts"] <= budget).all()
    for name in ("report.md", "curriculum.png", "config.json"):
        assert (out / name).exists(), name


@pytest.mark.parametrize("setting, field", [
    ("bin_edges=0.8,0.2", "bin_edges"), ("n_min=9", "n_min"), ("learning_rate=0", "learning_rate"),
    ("group_size=1", "group_size"), ("gdro_step_size=0", "step_size"),
])
def test_bad_settings_are_one_line_errors(tmp_path, capsys, setting, field):
    out = tmp_path / "bad"
    assert main(["run", "gdro", "--out", str(out), "--set", setting]) == 2
    err = capsys.readouterr().err.strip()
    assert field in err and "\n" not in err
    assert not out.exists()
