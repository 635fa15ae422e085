"""The gdro study: masked advantages vs a loop, traced-rate SGD vs optax.sgd, the
equal-budget protocol on a small run through the CLI, a (method, rate) cell alone vs in a
grid (bitwise), the plan of a grid, bad input."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd
import pytest

from experiments import gdro
from experiments.gdro import masked_group_advantages, traced_sgd
from rljax.cli import main
from rljax.config import ConfigError
from rljax.grid import make_grid

#: A small bank and budget (16 prompts, 6 steps of 4 prompts x 4 rollouts).
SMALL = ("num_prompts=16", "prompts_per_step=4", "group_size=4", "budget_steps=6",
         "n_max=8", "bootstrap_reps=50", "tuning_seeds=4")
SEEDS = ["--seeds", "4", "--block-size", "8"]


def _run(out, *extra):
    args = ["run", "gdro", "--out", str(out), *SEEDS]
    for s in SMALL:
        args += ["--set", s]
    assert main([*args, *extra]) == 0
    return json.loads((out / "summary.json").read_text()), pd.read_parquet(out / "results.parquet")


@pytest.fixture(scope="module")
def small_grid(tmp_path_factory):
    """Two methods (structural: one program each) x two traced rates, 4 tuning + 4 eval seeds."""
    out = tmp_path_factory.mktemp("gdro") / "grid"
    summary, table = _run(out, "--grid", "method=uniform,prompt_gdro",
                          "--grid", "learning_rate=2,8")
    return out, summary, table


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


def test_traced_sgd_is_optax_sgd_bitwise():
    rng = np.random.default_rng(1)
    params = {"logits": jnp.asarray(rng.normal(size=(16, 8)), jnp.float32),
              "b": jnp.asarray(rng.normal(size=(3,)), jnp.float32)}
    grads = jax.tree_util.tree_map(
        lambda p: jnp.asarray(rng.normal(size=p.shape) * 1e-3, jnp.float32), params)
    rates = np.asarray([1e-3, 0.1, 0.5, 8.0, 2048.0, 8192.0], np.float32)
    stepped = jax.jit(jax.vmap(traced_sgd, in_axes=(None, None, 0)))(params, grads, rates)
    for i, lr in enumerate(rates):
        opt = optax.sgd(float(lr))
        updates, _ = opt.update(grads, opt.init(params), params)
        expected = optax.apply_updates(params, updates)
        alone = jax.jit(traced_sgd)(params, grads, jnp.float32(lr))
        for name in params:
            np.testing.assert_array_equal(np.asarray(stepped[name][i]), np.asarray(expected[name]))
            np.testing.assert_array_equal(np.asarray(alone[name]), np.asarray(expected[name]))


@pytest.mark.timeout(300)
def test_small_run_follows_the_equal_budget_protocol(small_grid):
    out, summary, table = small_grid
    for name in ("report.md", "curriculum.png", "sensitivity.png", "config.json"):
        assert (out / name).exists(), name
    methods = ["uniform", "prompt_gdro"]
    assert summary["methods"] == methods and summary["reference"] == "uniform"
    proto = summary["protocol"]
    assert proto["configs_per_method"] == {"uniform": 2, "prompt_gdro": 2}
    assert proto["tuning_seed_ids"] == [0, 3] and proto["evaluation_seed_ids"] == [4, 7]
    tuning, evaluation = table[table.phase == "tuning"], table[table.phase == "evaluation"]
    # every method: the same configurations on the same tuning seeds; disjoint evaluation ids
    for m in methods:
        mine = tuning[tuning.method == m]
        assert sorted(mine.learning_rate.unique()) == [2.0, 8.0] and len(mine) == 2 * 4
        assert sorted(mine.seed.unique()) == [0, 1, 2, 3]
        assert sorted(evaluation[evaluation.method == m].seed) == [4, 5, 6, 7]
    assert not set(tuning.seed) & set(evaluation.seed)
    # the grid's own config index (method-major product of the two --grid axes)
    assert sorted(tuning.config.unique()) == [0, 1, 2, 3]
    # the traced rate reaches the trainer: the two rates give different runs
    pivot = tuning.pivot_table(index=["method", "seed"], columns="learning_rate",
                               values="pass8")
    assert (pivot[2.0] != pivot[8.0]).any()
    # the analysis is the parquet's numbers: winner = best tuning mean, scores re-computed
    for m in methods:
        means = tuning[tuning.method == m].groupby("learning_rate").pass8.mean()
        assert summary["chosen_learning_rate"][m] == means.idxmax()
        assert summary["tuning_pass8"][m] == pytest.approx(means.max())
        mine = evaluation[evaluation.method == m].sort_values("seed")
        assert (mine.learning_rate == means.idxmax()).all()
        assert summary["pass8"][m] == pytest.approx(mine.pass8.mean())
        assert summary["optimism"][m] == pytest.approx(means.max() - mine.pass8.mean())
    ev = evaluation.pivot(index="seed", columns="method", values="pass8")
    assert summary["pass8_diff"]["prompt_gdro"] == pytest.approx(
        (ev.prompt_gdro - ev.uniform).mean())
    low, high = summary["pass8_diff_ci"]["prompt_gdro"]
    assert low <= summary["pass8_diff"]["prompt_gdro"] <= high
    assert set(summary["pass8_diff_p_holm"]) == {"prompt_gdro"}
    # budgets and per-seed banks: every seed its own bank, the same for every method and rate
    budget = 6 * 4 * 4
    assert summary["budget_rollouts_per_seed"] == budget and (table.rollouts <= budget).all()
    assert (table[table.method == "uniform"].rollouts == budget).all()
    assert table.groupby("seed").bank_mean_p0.nunique().eq(1).all()
    assert table.groupby("seed").bank_mean_p0.first().nunique() == 8
    assert summary["bank"]["distinct_banks"] == 4
    report = (out / "report.md").read_text()
    assert "Equal tuning budget" in report and "Holm" in report.split("## Procedure")[1]


@pytest.mark.timeout(300)
def test_a_method_and_rate_alone_is_its_cell_in_the_grid(small_grid, tmp_path):
    _, _, grid_table = small_grid
    summary, alone = _run(tmp_path / "alone", "--set", "method=prompt_gdro",
                          "--set", "lr_grid=", "--set", "learning_rate=2")
    assert summary["methods"] == ["prompt_gdro"] and summary["pass8_diff"] == {}
    assert summary["protocol"]["configs_per_method"] == {"prompt_gdro": 1}
    cell = grid_table[(grid_table.phase == "tuning") & (grid_table.method == "prompt_gdro")
                      & (grid_table.learning_rate == 2.0)].sort_values("seed")
    mine = alone[alone.phase == "tuning"].sort_values("seed")
    assert list(mine.seed) == list(cell.seed) == [0, 1, 2, 3]
    for name in ("pass8", "hard_pass8", "updates", "bank_mean_p0"):
        np.testing.assert_array_equal(mine[name].to_numpy(), cell[name].to_numpy())


def _grid(*axes, sample=(), samples=None):
    return make_grid(gdro.Config, {}, grid=list(axes), sample=list(sample), samples=samples)


def test_plan_gives_every_method_the_same_configurations():
    config = gdro.Config()
    plain = gdro.plan(config)
    assert plain.methods == gdro.METHODS and plain.num_configs == len(config.rates()) == 8
    for m in gdro.METHODS:
        assert [r["learning_rate"] for r in plain.rows[m]] == list(config.rates())
    assert sorted(sum(plain.index.values(), [])) == list(range(32))
    # a grid over the method only: each method is tuned over lr_grid
    by_method = gdro.plan(config, _grid("method=dynamic,uniform"))
    assert by_method.methods == ("dynamic", "uniform") and by_method.num_configs == 8
    # a grid over the rate replaces lr_grid; lr_grid empty: learning_rate alone
    rates = gdro.plan(config, _grid("learning_rate=1,3"))
    assert [r["learning_rate"] for r in rates.rows["rollout_gdro"]] == [1.0, 3.0]
    one = gdro.plan(gdro.Config(lr_grid="", learning_rate=5.0, method="uniform"))
    assert one.methods == ("uniform",) and one.rows["uniform"][0]["learning_rate"] == 5.0
    with pytest.raises(ConfigError, match="^method: give the methods with --grid"):
        gdro.plan(config, _grid(sample=["method=choice:uniform:dynamic"], samples=5))
    with pytest.raises(ConfigError, match="^method: a grid over method"):
        gdro.plan(config, _grid("method=all,uniform"))


@pytest.mark.parametrize("setting, field", [
    ("bin_edges=0.8,0.2", "bin_edges"), ("n_min=9", "n_min"), ("learning_rate=0", "learning_rate"),
    ("group_size=1", "group_size"), ("gdro_step_size=0", "step_size"),
    ("bank=shared", "bank"), ("method=best", "method"), ("lr_grid=1,0", "lr_grid"),
    ("lr_grid=1,1", "lr_grid"), ("lr_grid=fast", "lr_grid"), ("tuning_seeds=1", "tuning_seeds"),
])
def test_bad_settings_are_one_line_errors(tmp_path, capsys, setting, field):
    out = tmp_path / "bad"
    assert main(["run", "gdro", "--out", str(out), "--set", setting]) == 2
    err = capsys.readouterr().err.strip()
    assert field in err and "\n" not in err
    assert not out.exists()


@pytest.mark.parametrize("flag, field", [
    ("learning_rate=1,-2", "learning_rate"), ("method=uniform,best", "method"),
    ("hard_p0=0.1,0.2", "hard_p0"),
])
def test_bad_grids_are_one_line_errors(tmp_path, capsys, flag, field):
    out = tmp_path / "bad"
    assert main(["run", "gdro", "--out", str(out), "--grid", flag]) == 2
    err = capsys.readouterr().err.strip()
    assert field in err and "\n" not in err
    assert not out.exists()


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
