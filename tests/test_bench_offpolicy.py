"""``rljax bench offpolicy``: rejax's side gets the presets' numbers, the timed runs keep
the full run's share of updates before learning, the final window spans an episode, the
table reads a result; and (slow: rejax is the bench extra, `pip install -e '.[dev,bench]'`
then `python -m pytest -m slow`) rejax gets the presets' numbers and both sides train at
tiny sizes."""

import math

import numpy as np
import pytest

from experiments.benchmarks import offpolicy as bench


@pytest.mark.slow  # needs rejax, the bench extra (CI installs dev only: a skip would fail it)
def test_rejax_side_gets_the_presets_numbers():
    dqn = bench._rejax_algo("dqn", bench.default_config("dqn"))
    assert (dqn.num_envs, dqn.buffer_size, dqn.fill_buffer, dqn.batch_size) == (
        10, 50_000, 5_000, 100)
    assert dqn.num_epochs == 5 and dqn.ddqn and dqn.polyak == pytest.approx(0.98)
    assert dqn.target_update_freq == 1  # once per iteration of the 10 envs
    assert dqn.agent.hidden_layer_sizes == (64, 64) and dqn.total_timesteps == 100_000
    assert type(dqn.agent).__mro__[1].__name__ == "DuelingQNetwork"

    pqn = bench._rejax_algo("pqn", bench.default_config("pqn"))
    # rejax hard-codes 64x64; the bench clones the agent at purejaxql's 256x256
    assert pqn.agent.hidden_layer_sizes == (256, 256)
    assert (pqn.num_envs, pqn.num_steps, pqn.num_epochs, pqn.num_minibatches) == (
        32, 64, 4, 16)
    assert pqn.td_lambda == 0.95 and pqn.eps_end == 0.2 and pqn.exploration_fraction == 0.2
    # whole updates: rejax runs ceil(total / 2048) iterations, rljax total // 2048
    assert pqn.total_timesteps == 244 * 2048 == bench.default_config("pqn").num_updates * 2048

    sac = bench._rejax_algo("sac", bench.default_config("sac"))
    assert sac.actor.hidden_layer_sizes == (64, 64) and sac.normalize_observations
    assert math.isinf(sac.max_grad_norm) and sac.learning_rate == 0.01
    assert (sac.fill_buffer, sac.batch_size, sac.buffer_size) == (256, 256, 10_000)


def test_timed_runs_keep_the_full_runs_share_before_learning():
    config = bench.default_config("dqn")
    for steps in bench.TIMED_STEPS["dqn"].values():
        sized = bench._sized(config, steps // config.steps_per_update)
        assert sized.total_steps == steps
        assert sized.learning_starts == 5_000 * steps // 100_000
    assert bench._sized(config, config.num_updates) == config  # the full run unchanged
    pqn = bench._sized(bench.default_config("pqn"), 1)
    assert pqn.total_steps == 2048 and pqn.num_updates == 1


def test_final_window_spans_one_episode_per_env():
    dqn, pqn, sac = (bench.default_config(name) for name in ("dqn", "pqn", "sac"))
    assert bench._final_updates(dqn, "CartPole-v1") == 500  # 500 steps, 1 per update
    assert bench._final_updates(pqn, "CartPole-v1") == 8  # ceil(500 / 64) > 244 // 50
    assert bench._final_updates(sac, "Pendulum-v1") == 200  # 2 % of 10,000 = one episode
    assert bench._final_updates(sac.replace(total_steps=50), "Pendulum-v1") == 50


def test_unpaired_comparison_and_unknown_algorithm():
    ours = {"per_seed": [3.0, 4.0, 5.0, None]}
    theirs = {"per_seed": [0.0, 1.0, 2.0]}
    got = bench._unpaired(ours, theirs, reps=200)
    assert got["paired"] is False and got["probability_of_improvement"] == 1.0
    assert np.isfinite(got["ci"]).all() and got["pvalue"] < 0.2
    assert bench._unpaired({"per_seed": [1.0]}, theirs, reps=200) is None
    with pytest.raises(ValueError, match="unknown"):
        bench.run(algorithms=("ddpg",))


def _size(seeds):
    return {"seeds": seeds, "updates": 5, "env_steps": 50 * seeds,
            "rljax_steps_per_second": 1000.0, "rejax_steps_per_second": 900.0,
            "ratio": 1.11, "ratio_matched": 1.05,
            "ratio_rounds_median": {"median": 1.1, "ci": [1.0, 1.2]},
            "ratio_matched_rounds_median": {"median": 1.05, "ci": [1.0, 1.1]},
            "rljax_compile_seconds": 3.0, "rejax_compile_seconds": 4.0}


def test_table_reads_a_result():
    side = {"iqm": 480.0, "ci": [470.0, 490.0]}
    result = {"rounds": 9, "algorithms": {
        "dqn": {"env": "CartPole-v1", "matched": {"bootstrap_truncations": False},
                "sizes": [_size(1), _size(16)],
                "returns": {"seeds": 16, "env_steps_per_seed": 100_000, "updates": 10_000,
                            "final_updates": 500, "rljax": side, "rejax": side,
                            "each_within_other": True,
                            "comparison": {"probability_of_improvement": 0.5,
                                           "ci": [0.3, 0.7], "pvalue": 0.9}}},
        "pqn": {"env": "CartPole-v1", "matched": {}, "sizes": [], "returns": None,
                "error": "RuntimeError: no"}}}
    text = bench.table(result)
    assert "| dqn | CartPole-v1 | 16 | 5 | 1,000 | 900 | 1.11 (1.10 [1.00, 1.20])" in text
    assert "480 [470, 490]" in text and "0.50 [0.30, 0.70]" in text
    assert "pqn: could not run: RuntimeError: no" in text
    assert "no number is published" in text


#: Tiny configs: a few updates, both sides finish episodes inside the final window.
TINY = {
    "dqn": ({"total_steps": 600, "learning_starts": 100, "buffer_size": 1000}, 100),
    "pqn": ({"total_steps": 4096}, 2048),
    "sac": ({"total_steps": 400, "learning_starts": 50, "buffer_size": 1000,
             "batch_size": 64}, 50),
}


@pytest.mark.slow  # needs rejax (the bench extra); compiles five programs
@pytest.mark.timeout(300)
@pytest.mark.parametrize("algorithm", bench.ALGORITHMS)
def test_both_sides_train_at_tiny_sizes(algorithm):
    changes, timed = TINY[algorithm]
    config = bench.default_config(algorithm).replace(**changes)
    result = bench.run(algorithms=(algorithm,), seed_counts=(1,),
                       timed_steps={algorithm: {1: timed}}, rounds=1, return_seeds=2,
                       configs={algorithm: config})
    assert result["blas_threads"] == 1 and result["rounds"] == 1
    algo = result["algorithms"][algorithm]
    assert "error" not in algo, algo.get("error")
    (size,) = algo["sizes"]
    assert size["env_steps"] == timed and size["ratio_rounds"] == [size["ratio"]]
    assert size["ratio"] > 0 and size["ratio_matched"] > 0
    assert size["ratio_rounds_median"]["ci"] == [float("-inf"), float("inf")]
    returns = algo["returns"]
    assert returns["env_steps_per_seed"] == config.total_steps
    for side in ("rljax", "rejax"):
        # each side trained and finished episodes inside the final window
        assert min(returns[side]["episodes"]) > 0, side
        per_seed = np.asarray(returns[side]["per_seed"], float)
        assert per_seed.shape == (2,) and np.isfinite(per_seed).all(), side
        if algorithm == "sac":
            assert (per_seed < 0).all()  # Pendulum's returns
        else:
            assert (per_seed >= 1).all()  # CartPole's: one per step
    assert returns["comparison"]["paired"] is False
    assert "rejax's semantics" in bench.table(result)


@pytest.mark.slow  # needs rejax
@pytest.mark.timeout(120)
def test_rejax_side_outputs_a_sum_of_its_final_parameters():
    # without it XLA may drop rejax's last update as dead code (see the ppo bench)
    import jax

    key = jax.random.key_data(jax.random.key(0))
    base = bench.default_config("sac").replace(total_steps=20, learning_starts=4,
                                               batch_size=4, buffer_size=100)
    sums = [float(jax.jit(bench._rejax_train("sac", base.replace(learning_rate=rate)))(
        key)[2]) for rate in (1e-2, 1e-12)]
    assert np.isfinite(sums).all() and sums[0] != sums[1]
