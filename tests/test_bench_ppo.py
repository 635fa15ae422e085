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


def test_cartpole_default_keeps_the_ppo_cartpole_setup():
    setup = bench.setup_for()
    assert setup.preset == "ppo-cartpole" and setup.config == bench.CONFIG
    assert [bench._updates(setup, s, None) for s in bench.SEED_COUNTS] == [100, 25, 5]
    breakout = bench.setup_for("Breakout-MinAtar")
    assert breakout.preset == "rejax" and breakout.config.batch_size == 1024
    with pytest.raises(ValueError, match="close matches"):
        bench.setup_for("Pendulm-v1")
