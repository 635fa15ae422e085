"""rljax.training.final_returns (per-seed final return of a PPO run) and the user's
first run from Python: PPOTrainConfig is a documented dataclass."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

import rljax
from rljax.config import traced_fields
from rljax.envs import CartPole
from rljax.policies import mlp_actor_critic
from rljax.training import PPOTrainConfig, final_returns, make_ppo_train


def _reference(return_sum, episodes, last):
    """A loop over every leading index: pooled mean of the last ``last`` rows."""
    out = np.full(return_sum.shape[:-1], np.nan)
    for index in np.ndindex(*return_sum.shape[:-1]):
        total, count = 0.0, 0
        for u in range(return_sum.shape[-1] - last, return_sum.shape[-1]):
            total += float(return_sum[index + (u,)])
            count += int(episodes[index + (u,)])
        if count:
            out[index] = total / count
    return out


@pytest.mark.parametrize("shape", [(6,), (3, 6), (2, 3, 6)])
@pytest.mark.parametrize("last", [1, 4])
def test_final_returns_against_a_loop(shape, last):
    rng = np.random.default_rng(0)
    episodes = rng.integers(0, 3, shape).astype(np.int32)
    return_sum = (rng.normal(50, 10, shape) * episodes).astype(np.float32)
    got = final_returns({"return_sum": return_sum, "episodes": episodes}, last=last)
    np.testing.assert_allclose(got, _reference(return_sum, episodes, last), rtol=1e-12)


def test_final_returns_is_nan_for_a_seed_that_finished_nothing():
    logs = {"return_sum": np.array([[5.0, 0.0], [3.0, 9.0]]),
            "episodes": np.array([[1, 0], [1, 3]])}
    out = final_returns(logs)
    assert np.isnan(out[0]) and out[1] == 3.0


@pytest.mark.parametrize("logs, last, match", [
    ({"return_sum": np.zeros(3)}, 1, r"^logs: needs return_sum and episodes .*missing episodes$"),
    ({"return_sum": np.zeros(3), "episodes": np.zeros(4)}, 1, r"^logs: return_sum \[3\] and "),
    ({"return_sum": np.zeros(3), "episodes": np.zeros(3)}, 4, r"^last: must be an integer in "
                                                              r"\[1, 3\]"),
    ({"return_sum": np.zeros(3), "episodes": np.zeros(3)}, 0, r"^last: "),
])
def test_final_returns_bad_input(logs, last, match):
    with pytest.raises(ValueError, match=match):
        final_returns(logs, last=last)


def test_final_returns_of_a_ppo_sweep_is_one_value_per_seed():
    config = PPOTrainConfig(num_envs=2, num_steps=32, total_steps=2 * 32 * 3, num_epochs=1,
                            num_minibatches=1)
    train = make_ppo_train(CartPole(), mlp_actor_critic(2, (8,)), config)
    result = rljax.Sweep(train, block_size=2).run(3, progress=False)
    out = final_returns(result.outputs, last=2)
    assert out.shape == (3,)
    logs = jax.tree_util.tree_map(np.asarray, result.outputs)
    np.testing.assert_allclose(out, _reference(logs["return_sum"], logs["episodes"], 2))
    assert np.all(np.isfinite(out))


def test_ppo_train_config_is_a_documented_frozen_dataclass():
    names = [f.name for f in dataclasses.fields(PPOTrainConfig)]
    assert names[:3] == ["num_envs", "num_steps", "total_steps"]
    for f in dataclasses.fields(PPOTrainConfig):
        assert f.metadata["help"], f.name
        assert f.name in PPOTrainConfig.__doc__, f.name
    assert set(traced_fields(PPOTrainConfig)) == {
        "learning_rate", "adam_eps", "max_grad_norm", "clip_epsilon", "clip_epsilon_high",
        "value_coef", "entropy_coef", "value_clip", "gamma", "lam"}
    config = PPOTrainConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.num_envs = 8  # type: ignore[misc]
    changed = config.replace(num_envs=8)
    assert changed.num_envs == 8 and config.num_envs == 4 and changed != config
    assert hash(changed) == hash(PPOTrainConfig(num_envs=8))
    with pytest.raises(TypeError):
        config.replace(num_env=8)
