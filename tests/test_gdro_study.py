"""The gdro study: masked group advantages vs a loop, a tiny run through the CLI, bad input."""

import json

import jax
import numpy as np
import pandas as pd
import pytest

from experiments import gdro
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
    # per-seed banks (the default): every seed its own bank, the same one for every method
    assert summary["bank"]["mode"] == "per_seed" and summary["bank"]["distinct_banks"] == 4
    per_seed = table.pivot(index="seed", columns="method", values="bank_mean_p0")
    assert per_seed["uniform"].nunique() == 4
    assert (per_seed.nunique(axis=1) == 1).all()  # paired: one bank per seed across methods
    report = (out / "report.md").read_text()
    assert "drawn per seed" in report and "does not reproduce" not in report
    assert "coverage" in report.split("## Procedure")[1]


def test_banks_differ_across_seeds_unless_fixed():
    config = gdro.Config(num_prompts=32)
    keys = jax.random.split(jax.random.key(0), 3)
    bank = gdro.PromptBank(num_prompts=32, num_answers=config.num_answers)

    def p0(config):
        return np.stack([np.asarray(bank.sample_params(gdro.bank_key(config, k)).p0)
                         for k in keys])

    per_seed = p0(config)
    assert not np.array_equal(per_seed[0], per_seed[1])
    assert not np.array_equal(per_seed[1], per_seed[2])
    fixed = p0(gdro.Config(num_prompts=32, bank="fixed", bank_seed=7))
    assert np.array_equal(fixed[0], fixed[1]) and np.array_equal(fixed[1], fixed[2])
    expected = np.asarray(bank.sample_params(jax.random.key(7)).p0)
    np.testing.assert_array_equal(fixed[0], expected)
    # the bank's key is not one of the seed's step keys
    steps = jax.random.split(keys[0], 188)
    bank_bits = jax.random.key_data(gdro.bank_key(config, keys[0]))
    assert not (np.asarray(jax.random.key_data(steps)) == np.asarray(bank_bits)).all(1).any()


@pytest.mark.parametrize("setting, field", [
    ("bin_edges=0.8,0.2", "bin_edges"), ("n_min=9", "n_min"), ("learning_rate=0", "learning_rate"),
    ("group_size=1", "group_size"), ("gdro_step_size=0", "step_size"),
    ("bank=shared", "bank"),
])
def test_bad_settings_are_one_line_errors(tmp_path, capsys, setting, field):
    out = tmp_path / "bad"
    assert main(["run", "gdro", "--out", str(out), "--set", setting]) == 2
    err = capsys.readouterr().err.strip()
    assert field in err and "\n" not in err
    assert not out.exists()
