"""``rljax run ppo --env NAME`` at tiny sizes through the real command line: a discrete env,
Pendulum-v1 (the Gaussian path), Catch-bsuite (flattened observations, as a grid); the
per-env published defaults; and the one-line refusals (exit 2)."""

import json

import numpy as np
import pandas as pd
import pytest

from experiments import ppo_env
from rljax.cli import main
from rljax.envs import FlattenObservation, NormalizeObservation, NormalizeReward
from rljax.training.ppo_presets import GENERIC_DISCRETE, PRESETS


def _run(out, env, *sets, extra=()):
    args = ["run", "ppo", "--env", env, "--out", str(out), "--seeds", "2", "--block-size", "2",
            *extra]
    for s in ("bootstrap_reps=50", *sets):
        args += ["--set", s]
    return main(args)


@pytest.mark.timeout(120)
def test_discrete_env_writes_files_and_keys(tmp_path):
    out = tmp_path / "cartpole"
    # 8 updates of 4 envs x 32 steps (the cleanrl preset's 4 envs), 2 chunks
    assert _run(out, "CartPole-v1", "total_steps=1024", "num_steps=32", "chunk_updates=4",
                "final_updates=4", "curve_points=4") == 0
    summary = json.loads((out / "summary.json").read_text())
    for key in ("final_return_iqm", "final_return_ci", "final_return_interval_note",
                "env_steps_per_second", "curve_iqm", "curve_ci_low", "curve_ci_high",
                "compile_seconds", "run_seconds", "nonfinite_seeds", "preset",
                "preset_source", "hyperparameters", "policy_head", "wrappers"):
        assert key in summary, key
    assert summary["preset"] == "cleanrl" and summary["policy_head"] == "categorical"
    assert summary["hyperparameters"]["num_envs"] == 4
    assert summary["preset_overridden"] == {"total_steps": 1024, "num_steps": 32}
    assert summary["updates"] == 8 and summary["chunks"] == 2 and summary["wrappers"] == []
    low, high = summary["final_return_ci"]
    assert low <= summary["final_return_iqm"] <= high
    assert summary["nonfinite_seeds"] == 0 and summary["env_steps_per_second"] > 0
    table = pd.read_parquet(out / "results.parquet")
    assert len(table) == 2 * 8 and table["env_steps"].max() == 1024
    for name in ("report.md", "return_curve.png", "final_returns.png", "config.json"):
        assert (out / name).exists(), name
    report = (out / "report.md").read_text()
    assert "95 % CI" in report and summary["preset_source"] in report


@pytest.mark.timeout(120)
def test_pendulum_trains_the_gaussian_head_at_its_published_config(tmp_path):
    out = tmp_path / "pendulum"
    # 13 updates of the gymnax-blines config (32 envs x 16 steps): every env ends its first
    # 200-step episode during update 13, so the final window (1 update) holds 32 episodes
    assert _run(out, "Pendulum-v1", "total_steps=6656", "chunk_updates=13",
                "final_updates=1", "curve_points=13") == 0
    summary = json.loads((out / "summary.json").read_text())
    hp = summary["hyperparameters"]
    assert summary["preset"] == "gymnax-blines" and summary["policy_head"] == "gaussian"
    assert (hp["num_envs"], hp["num_steps"], hp["learning_rate"], hp["anneal_lr"],
            hp["max_grad_norm"], hp["activation"]) == (32, 16, 5e-4, False, 1.0, "relu")
    assert summary["published_return"] == -200.6
    assert "ppo.pkl" in summary["published_return_source"]
    assert summary["updates"] == 13 and summary["env_steps_per_seed"] == 6656
    table = pd.read_parquet(out / "results.parquet")
    assert table.groupby("update")["episodes"].sum().tolist() == [0] * 12 + [64]
    finals = np.asarray(summary["final_returns"], float)
    assert finals.shape == (2,) and np.all(np.isfinite(finals)) and np.all(finals < 0)
    assert summary["nonfinite_seeds"] == 0
    assert np.isfinite(table[["loss", "policy_loss", "value_loss", "entropy"]]).all().all()
    # gymnax-blines' softplus scale: sigma = softplus(~0) + 0.001 at init (head gain 0.01),
    # so the entropy 0.5 log(2 pi e sigma^2) starts near 1.055, not log-std 0's 1.419
    assert hp["gaussian_scale"] == "softplus"
    sigma = np.log(2.0) + 0.001
    assert table["entropy"].iloc[0] == pytest.approx(
        0.5 * np.log(2 * np.pi * np.e * sigma**2), abs=0.03)


@pytest.mark.slow  # ~1 min: MJX compiles, and each test episode is 1000 Brax steps
@pytest.mark.timeout(600)
def test_brax_env_runs_the_study_through_its_test_episodes(tmp_path):
    """`rljax run ppo --env brax:NAME` end to end, test episodes included: their length
    comes from the Brax params' ``max_steps_in_episode`` (the study failed there before
    BraxParams had it)."""
    out = tmp_path / "brax"
    assert _run(out, "brax:inverted_pendulum", "total_steps=4096", "eval_episodes=2") == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policy_head"] == "gaussian" and summary["eval_episodes"] == 2
    assert summary["updates"] == 2 and summary["nonfinite_seeds"] == 0
    for mode in ("sampled", "mode"):
        assert np.isfinite(summary[f"eval_return_{mode}_iqm"]), mode


@pytest.mark.timeout(120)
def test_catch_is_flattened_and_runs_as_a_grid(tmp_path):
    out = tmp_path / "catch"
    # 2 updates of 16 envs x 32 steps; Catch episodes last 9 steps
    assert _run(out, "Catch-bsuite", "total_steps=1024", "chunk_updates=1", "final_updates=1",
                extra=["--grid", "learning_rate=5e-4,1e-3"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["observation_shape"] == [10, 5]
    assert summary["policy_observation_shape"] == [50]
    assert summary["wrappers"] == ["FlattenObservation"]
    assert [c["learning_rate"] for c in summary["configs"]] == [5e-4, 1e-3]
    for entry in summary["configs"]:
        low, high = entry["final_return_ci"]
        assert low <= entry["final_return_iqm"] <= high and -1 <= entry["final_return_iqm"] <= 1
    table = pd.read_parquet(out / "results.parquet")
    assert sorted(table["config"].unique()) == [0, 1] and len(table) == 2 * 2 * 2


def test_config_defaults_are_resolved_per_env():
    pendulum = ppo_env.Config(env="Pendulum-v1")
    blines = PRESETS["Pendulum-v1"]["gymnax-blines"].values
    assert {f: getattr(pendulum, f) for f in blines} == blines
    assert (pendulum.total_steps, pendulum.num_envs, pendulum.num_steps,
            pendulum.num_minibatches, pendulum.learning_rate) == (1_000_000, 32, 16, 4, 5e-4)
    rejax = ppo_env.Config(env="Pendulum-v1", preset="rejax")
    assert (rejax.activation, rejax.num_envs, rejax.gamma, rejax.entropy_coef,
            rejax.normalize_observations) == ("swish", 100, 0.995, 0.0, True)
    breakout = ppo_env.Config(env="Breakout-MinAtar")
    assert (breakout.hidden_size, breakout.gamma, breakout.num_envs, breakout.num_steps,
            breakout.total_steps) == (256, 0.999, 64, 128, 10_000_000)
    # an explicit value wins over the preset; others stay the preset's
    given = ppo_env.Config(env="Pendulum-v1", learning_rate=1e-3)
    assert given.learning_rate == 1e-3 and given.num_envs == 32
    # envs without a row: CleanRL's defaults for their action kind
    assert ppo_env.Config(env="MountainCar-v0").resolved_preset().source.endswith("/ppo.py")
    reacher = ppo_env.Config(env="Reacher-misc")
    assert reacher.num_steps == 2048 and reacher.entropy_coef == 0.0
    # the class defaults are the default env's row (CartPole-v1, CleanRL)
    default = ppo_env.Config()
    assert default.env == "CartPole-v1"
    assert {f: getattr(default, f) for f in GENERIC_DISCRETE.values} == GENERIC_DISCRETE.values
    # the env the study builds: flattened where the obs are not [D], normalised on request
    assert isinstance(ppo_env.make_env(ppo_env.Config(env="Catch-bsuite")), FlattenObservation)
    assert isinstance(ppo_env.make_env(rejax), NormalizeObservation)
    assert not isinstance(ppo_env.make_env(pendulum), NormalizeObservation)
    scaled = ppo_env.make_env(ppo_env.Config(env="Pendulum-v1", normalize_rewards=True))
    assert isinstance(scaled, NormalizeReward) and scaled.gamma == pendulum.gamma
    assert not isinstance(ppo_env.make_env(pendulum), NormalizeReward)
    for config in (pendulum, rejax, breakout, reacher):
        config.validate()


@pytest.mark.parametrize("args, message", [
    (["run", "ppo", "--env", "Pendulm-v1"], "close matches: Pendulum-v1"),
    (["run", "ppo", "--env", "FrozenLake-misc"],
     "FrozenLake-misc: observation space Discrete(16) is not supported"),
    (["run", "ppo", "--env", "Catch-bsuite", "--set", "preset=rejax"],
     "preset: Catch-bsuite has no 'rejax' row"),
    (["run", "ppo", "--env", "Catch-bsuite", "--set", "env=Pendulum-v1"], "give it once"),
    (["run", "ppo", "--env", "Pendulum-v1", "--set", "gaussian_scale=exp"],
     "gaussian_scale: must be one of"),
    (["run", "ppo-cartpole", "--env", "Pendulum-v1"], "study 'ppo-cartpole' takes no env"),
    (["bench", "sweep", "--env", "Pendulum-v1"], "benchmark 'sweep' takes no env"),
    (["bench", "ppo", "--env", "Pendulm-v1"], "close matches: Pendulum-v1"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path, capsys):
    if args[0] == "run":
        args = [*args, "--out", str(tmp_path / "out")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.timeout(180)
def test_first_seed_runs_fresh_seed_ids_bitwise_those_of_a_longer_run(tmp_path, capsys):
    """``--first-seed 1 --seeds 2`` runs seed ids 1 and 2: seed 1's results are bitwise
    those of the 2-seed run from 0 (fixed blocks), and the table says seeds 1 and 2."""
    sets = ("total_steps=512", "num_steps=32", "final_updates=4", "curve_points=4")
    assert _run(tmp_path / "both", "CartPole-v1", *sets) == 0
    args = ["run", "ppo", "--env", "CartPole-v1", "--out", str(tmp_path / "one"), "--seeds",
            "2", "--block-size", "2", "--first-seed", "1", "--set", "bootstrap_reps=50"]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0
    both = pd.read_parquet(tmp_path / "both" / "results.parquet")
    one = pd.read_parquet(tmp_path / "one" / "results.parquet")
    assert one["seed"].unique().tolist() == [1, 2]
    pd.testing.assert_frame_equal(one[one["seed"] == 1].reset_index(drop=True),
                                  both[both["seed"] == 1].reset_index(drop=True))
    assert not one[one["seed"] == 2]["episode_return"].equals(
        both[both["seed"] == 0]["episode_return"])
    summary = json.loads((tmp_path / "one" / "summary.json").read_text())
    assert summary["first_seed"] == 1 and summary["seeds"] == 2
    capsys.readouterr()
    assert main(["run", "orm-vs-prm", "--first-seed", "3", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: --first-seed: study 'orm-vs-prm' has no first_seed field (its seed "
                   "ids always start at 0); drop the flag")
    assert not (tmp_path / "x").exists()
