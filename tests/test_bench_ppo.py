"""``rljax bench ppo --env NAME``: the bench runs both sides at tiny sizes for a continuous
env and returns the documented keys; CartPole-v1 keeps ppo-cartpole's setup."""

import numpy as np
import pytest

from experiments.benchmarks import ppo as bench


@pytest.mark.slow  # needs rejax (the bench extra): `python -m pytest -m slow`
@pytest.mark.timeout(120)
def test_continuous_env_bench_has_the_documented_keys():
    # 13 updates of Pendulum's 32 envs x 16 steps: every env ends one 200-step episode in
    # update 13; the final window spans one episode (13 updates), on both sides
    result = bench.run("Pendulum-v1", seed_counts=(1,), updates={1: 1}, rounds=1,
                       return_seeds=2, return_steps=13 * 512)
    assert result["env"] == "Pendulum-v1" and result["preset"] == "gymnax-blines"
    assert result["steps_per_update"] == 512 and result["config"]["num_envs"] == 32
    (size,) = result["sizes"]
    for key in ("seeds", "updates", "env_steps", "rljax_seconds", "rejax_seconds",
                "rljax_steps_per_second", "rejax_steps_per_second", "ratio",
                "rljax_compile_seconds", "rejax_compile_seconds", "rljax_matched_seconds",
                "rljax_matched_steps_per_second", "ratio_matched"):
        assert key in size, key
    assert size["env_steps"] == 512 and size["ratio"] > 0 and size["ratio_matched"] > 0
    # one round: its paired ratio is the ratio of the medians
    assert size["ratio_rounds"] == [size["ratio"]]
    assert size["ratio_matched_rounds"] == [size["ratio_matched"]]
    # one round is too few for a 95 % interval of the median: infinite ends
    assert size["ratio_rounds_median"]["median"] == size["ratio"]
    assert size["ratio_rounds_median"]["ci"] == [float("-inf"), float("inf")]
    assert result["blas_threads"] == 1  # the bench runs as rljax's commands do
    init = result["rljax_init_seconds"]
    assert init["seeds"] == 1 and init["one_thread"] > 0 and init["one_per_core"] > 0
    assert result["min_ratio"] == size["ratio"]
    assert result["min_ratio_matched"] == size["ratio_matched"]
    assert result["matched"] == {"bootstrap_truncations": False, "grad_clip": "elementwise",
                                 "adam_eps": 1e-8}
    returns = result["returns"]
    assert returns["updates"] == 13 and returns["final_updates"] == 13
    for side in ("rljax", "rejax"):
        per_seed = np.asarray(returns[side]["per_seed"], float)
        assert per_seed.shape == (2,) and np.all(np.isfinite(per_seed)) and np.all(per_seed < 0)
        low, high = returns[side]["ci"]
        assert low <= returns[side]["iqm"] <= high
    assert isinstance(returns["each_within_other"], bool)
    text = bench.table(result)
    assert "Pendulum-v1" in text and "final return" in text and "rejax's semantics" in text
    assert "initialisation alone at 1 seeds" in text


@pytest.mark.slow  # needs rejax (the bench extra)
@pytest.mark.timeout(120)
def test_rejax_side_outputs_a_sum_of_its_final_parameters():
    # rejax's train returns only env-state counts; without an output that reads the
    # parameters its last update writes, XLA drops that update as dead code and rejax is
    # timed doing one update fewer than rljax
    import dataclasses

    import jax

    setup = bench.setup_for("Pendulum-v1")
    key = jax.random.key_data(jax.random.key(0))
    sums = []
    for learning_rate in (5e-4, 1e-12):
        config = setup.config.replace(learning_rate=learning_rate)
        train = bench._rejax_train(1, dataclasses.replace(setup, config=config))
        out = jax.jit(train)(key)
        assert len(out) == 3
        sums.append(float(out[2]))
    assert np.isfinite(sums).all() and sums[0] != sums[1]  # the update's parameters


def test_median_interval_of_round_ratios_is_the_order_statistic_one():
    ratios = [1.3, 0.9, 1.0, 1.1, 0.8, 1.2, 0.95, 1.05, 0.85]  # 9 rounds
    got = bench._median_interval(ratios)
    ordered = sorted(ratios)
    assert got["median"] == 1.0
    assert got["ci"] == pytest.approx([ordered[1], ordered[7]], rel=1e-6)  # ranks 2, 8 of 9
    assert abs(got["coverage"] - (1 - 2 * 10 / 512)) < 1e-12  # 1 - 2 P(Bin(9, .5) <= 1)


def test_cartpole_default_keeps_the_ppo_cartpole_setup():
    setup = bench.setup_for()
    assert setup.preset == "ppo-cartpole" and setup.config == bench.CONFIG
    assert [bench._updates(setup, s, None) for s in bench.SEED_COUNTS] == [100, 25, 5]
    breakout = bench.setup_for("Breakout-MinAtar")
    assert breakout.preset == "rejax" and breakout.config.batch_size == 1024
    with pytest.raises(ValueError, match="close matches"):
        bench.setup_for("Pendulm-v1")
