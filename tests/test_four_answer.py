"""The four-answer study's sweep: traced optimizers, one-row runs inside the grid, the
verdict's tolerance logic and bad input (the small default-path run: test_studies.py)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd
import pytest
from helpers.study_runs import run_study

from experiments import four_answer
from experiments.four_answer_claim import CLAIM_TOLERANCE, claim_status, crossing, verdict
from rljax.cli import main
from rljax.config import ConfigError, build_config, parse_overrides

SMALL = ("seeds=40", "samples=500", "grpo_steps=6", "bootstrap_reps=100",
         "sgd_learning_rates=0.3,3", "adam_learning_rates=0.1", "kl_betas=0,0.04,0.16")


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_traced_optimizer_is_optax_bitwise(name):
    """A traced rate (jit argument, vmapped over rates) gives optax.sgd/adam(lr)'s updates."""
    reference = {"sgd": optax.sgd, "adam": optax.adam}[name]
    keys = jax.random.split(jax.random.key(3), 30)
    params = {"w": jnp.linspace(-1.0, 1.0, 5), "b": jnp.float32(0.3)}

    def steps(opt):
        def run(params):
            def step(carry, key):
                p, s = carry
                g = jax.tree_util.tree_map(
                    lambda x: jax.random.normal(key, jnp.shape(x)) + 0.1 * x, p)
                u, s = opt.update(g, s, p)
                return (optax.apply_updates(p, u), s), None
            (p, _), _ = jax.lax.scan(step, (params, opt.init(params)), keys)
            return p
        return run(params)

    rates = jnp.asarray([0.3, 0.01, 1.7], jnp.float32)
    traced = jax.jit(jax.vmap(lambda lr: steps(four_answer.traced_optimizer(name, lr))))(rates)
    for i, lr in enumerate(rates.tolist()):
        want = jax.jit(lambda lr=lr: steps(reference(lr)))()
        for k in want:
            np.testing.assert_array_equal(np.asarray(traced[k][i]), np.asarray(want[k]))


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory):
    """The default path (both optimizers' rates x kl_betas) at a small size."""
    return run_study(tmp_path_factory.mktemp("sweep"), "four-answer", *SMALL, block_size=32)


def test_one_configuration_is_bitwise_its_cell_in_the_sweep(tmp_path, sweep_run):
    out, s = sweep_run
    sweep = pd.read_parquet(out / "results.parquet")
    assert list(sweep.columns) == ["config", "optimizer", "learning_rate", "kl_beta", "seed",
                                   "p_correct"]
    assert len(sweep) == 9 * 40 and s["grid"]["num_configs"] == 9
    assert [p["structural"] for p in s["grid"]["programs"]] == [{"optimizer": "sgd"},
                                                                {"optimizer": "adam"}]
    for opt, lr, beta in [("sgd", 3.0, 0.16), ("adam", 0.1, 0.04)]:
        one_out, one = run_study(tmp_path / opt, "four-answer", *SMALL, "sweep=false",
                                 f"optimizer={opt}", f"learning_rate={lr}", f"kl_beta={beta}",
                                 block_size=32)
        alone = pd.read_parquet(one_out / "results.parquet")
        assert len(alone) == 40 and one["grid"]["num_configs"] == 1
        cell = sweep[(sweep.optimizer == opt) & (sweep.learning_rate == np.float64(lr))
                     & (sweep.kl_beta == np.float64(beta))]
        np.testing.assert_array_equal(alone.seed.to_numpy(), cell.seed.to_numpy())
        np.testing.assert_array_equal(alone.p_correct.to_numpy(), cell.p_correct.to_numpy())
    # common random numbers: seed i draws the same groups in every cell, so two close
    # cells (sgd 0.3 at beta 0 and 0.04) move together seed by seed
    grid = sweep.pivot_table(index="seed", columns="config", values="p_correct")
    assert np.corrcoef(grid[0], grid[1])[0, 1] > 0.9


def test_grid_flag_analyses_the_given_grid(tmp_path):
    out = tmp_path / "g"
    args = ["run", "four-answer", "--out", str(out), "--block-size", "32",
            "--grid", "learning_rate=0.3,3", "--grid", "kl_beta=0,0.16"]
    for pair in SMALL:
        args += ["--set", pair]
    assert main(args) == 0
    s = json.loads((out / "summary.json").read_text())
    frame = pd.read_parquet(out / "results.parquet")
    assert list(frame.columns) == ["config", "optimizer", "learning_rate", "kl_beta", "seed",
                                   "p_correct"]
    assert set(frame.optimizer) == {"sgd"} and len(frame) == 4 * 40
    assert [(c["learning_rate"], c["kl_beta"]) for c in s["cells"]] == [
        (0.3, 0.0), (0.3, 0.16), (3.0, 0.0), (3.0, 0.16)]
    assert [e["setting"] for e in s["verdict_details"]["no_kl"]] == ["sgd lr 0.3", "sgd lr 3"]
    assert (out / "grpo_heatmap.png").exists()


def _cell(opt, lr, beta, median, half, config=0):
    return {"optimizer": opt, "learning_rate": lr, "kl_beta": beta, "clip_epsilon": 0.2,
            "median": median, "low": median - half, "high": median + half, "config": config}


def test_claim_status_tolerance_and_ceiling():
    assert CLAIM_TOLERANCE == 0.005
    assert claim_status(0.9870, 0.9890, 0.99) == "matches"  # below 0.99, within 0.005
    assert claim_status(0.9840, 0.9848, 0.99) == "below"
    assert claim_status(0.9990, 0.9994, 0.99) == "above"  # a ceiling: >= 0.99, not 0.99
    assert claim_status(0.9930, 0.9960, 0.99) == "matches"
    assert claim_status(0.0, 0.999, 0.99) == "unresolved"  # wider than the window
    assert claim_status(float("nan"), 0.5, 0.99) == "unknown"
    assert crossing([0.0, 0.1, 0.2], [0.99, 0.96, 0.92], 0.94, falling=True) == {
        "low": 0.1, "high": 0.2, "interpolated": pytest.approx(0.15)}
    hit = crossing([0.1, 1.0], [0.9, 1.0], 0.95, log_x=True)
    assert hit["interpolated"] == pytest.approx(10 ** -0.5)
    assert crossing([0.0, 0.1], [0.99, 0.98], 0.94, falling=True) is None


def test_verdict_reads_intervals_with_the_tolerance():
    cells = [
        _cell("sgd", 0.1, 0.0, 0.9700, 0.001, 0),   # missed
        _cell("sgd", 0.1, 0.2, 0.9000, 0.001, 1),
        _cell("sgd", 0.3, 0.0, 0.9880, 0.001, 2),   # matches 0.99 (within 0.005)
        _cell("sgd", 0.3, 0.1, 0.9600, 0.001, 3),
        _cell("sgd", 0.3, 0.2, 0.9380, 0.0005, 4),  # matches 0.94
        _cell("sgd", 1.0, 0.0, 0.9992, 0.0002, 5),  # ceiling: exceeds 0.99
        _cell("sgd", 1.0, 0.2, 0.9400, 0.001, 6),
        _cell("sgd", 3.0, 0.0, 0.9846, 0.0002, 7),  # just below the window: missed
        _cell("sgd", 3.0, 0.2, 0.9400, 0.001, 8),
        _cell("adam", 0.1, 0.0, 0.9900, 0.0095, 9),  # consistent but wider: unresolved
        _cell("adam", 0.1, 0.2, 0.9400, 0.001, 10),
        _cell("adam", 1.0, 0.0, 0.9999, 0.0001, 11),  # ceiling, then collapses
        _cell("adam", 1.0, 0.1, 0.0002, 0.0001, 12),
    ]
    gaps = []
    v = verdict(cells, steps=60, group_size=8, seeds=2048,
                paired_gap=lambda a, b: gaps.append((a, b)) or [0.05, 0.04, 0.06])
    status = {e["setting"]: e["status"] for e in v["no_kl"]}
    assert status == {"sgd lr 0.1": "below", "sgd lr 0.3": "matches", "sgd lr 1": "above",
                      "sgd lr 3": "below", "adam lr 0.1": "unresolved", "adam lr 1": "above"}
    assert v["reaches_no_kl"] == ["sgd lr 0.3", "sgd lr 1", "adam lr 1"]
    assert v["both_figures"] == ["sgd lr 0.3"]
    assert v["both_figures_between_grid_points"] == []
    assert v["both_figures_at_or_above"] == ["sgd lr 1"]  # adam lr 1 collapses
    assert v["figures_reproduced"] and v["same_setting"]
    by = {b["setting"]: b for b in v["kl_beta_for_0.94"]}
    assert by["sgd lr 0.3"]["matching_betas"] == [0.2]
    assert by["sgd lr 0.3"]["bracket"]["low"] == 0.1 and by["sgd lr 0.3"]["bracket"]["high"] == 0.2
    assert by["adam lr 1"]["collapse"] and not by["sgd lr 0.3"]["collapse"]
    assert (2, 4) in gaps and by["sgd lr 0.3"]["kl_gap"]["mean_ci"] == [0.05, 0.04, 0.06]
    assert "exceeded (>= 0.99, not = 0.99) by sgd lr 1, adam lr 1" in v["text"]
    assert "(3) Yes" in v["text"] and "collapses" in v["text"]
    # only the ceiling and the unresolved settings reach 0.99: no setting gives both
    v = verdict([c for c in cells if c["learning_rate"] != 0.3], steps=20, group_size=8,
                seeds=2048)
    assert not v["figures_reproduced"] and "(3) No single setting" in v["text"]
    assert not v["same_setting"] and "20 steps" in v["text"]
    # no beta = 0 cell: 0.99 is not judged
    v = verdict([c for c in cells if c["kl_beta"] > 0], steps=60, group_size=8, seeds=64)
    assert v["no_kl"] == [] and "not judged" in v["text"]


@pytest.mark.parametrize("pair, field", [
    ("sgd_learning_rates=", "sgd_learning_rates"),
    ("sgd_learning_rates=0.1,,1", "sgd_learning_rates"),
    ("adam_learning_rates=0.1,abc", "adam_learning_rates"),
    ("adam_learning_rates=0,0.1", "adam_learning_rates"),
    ("sgd_learning_rates=-0.3", "sgd_learning_rates"),
    ("sgd_learning_rates=0.1,0.1", "sgd_learning_rates"),
    ("kl_betas=0,-0.1", "kl_betas"),
    ("kl_betas=nan", "kl_betas"),
    ("learning_rate=0", "learning_rate"),
    ("optimizer=rmsprop", "optimizer"),
])
def test_bad_input_is_one_line_naming_the_field(tmp_path, capsys, pair, field):
    with pytest.raises(ConfigError, match=f"^{field}: "):  # at validation, before any run
        build_config(four_answer.Config, parse_overrides(four_answer.Config, [pair]))
    args = ["run", "four-answer", "--out", str(tmp_path / "x")]
    for p in (*SMALL, pair):  # small, in case validation let it through
        args += ["--set", p]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err, err
    assert not (tmp_path / "x" / "summary.json").exists()
