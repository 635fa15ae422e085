"""``rljax.envs.registry``: environments by name (a gymnax id or ``brax:NAME``), the factory
the ``ppo`` study and the trainers that take ``--env NAME`` share."""

import jax
import jax.numpy as jnp
import pytest

from rljax.envs import (
    BRAX_PREFIX,
    FlattenObservation,
    GymnaxEnv,
    NormalizeObservation,
    NormalizeReward,
    env_flattened,
    env_kind,
    is_brax,
    make_env,
    raw_env,
)
from rljax.envs.batched import ENV_AXIS, vmap_env


def _obs_shape(env):
    return tuple(env.observation_space(env.default_params).shape)


def test_names_give_their_env_and_action_kind():
    assert isinstance(raw_env("CartPole-v1"), GymnaxEnv)
    assert env_kind("CartPole-v1") == "discrete"
    assert env_kind("Breakout-MinAtar") == "discrete"
    assert env_kind("Pendulum-v1") == "continuous"
    assert env_kind("MountainCarContinuous-v0") == "continuous"
    assert env_kind("Pendulm-v1") is None  # unknown: the factory's error says why
    assert BRAX_PREFIX == "brax:" and is_brax("brax:ant") and not is_brax("Pendulum-v1")


def test_rank_one_observations_are_kept_and_others_flattened():
    pendulum = make_env("Pendulum-v1")
    assert not isinstance(pendulum, FlattenObservation) and _obs_shape(pendulum) == (3,)
    assert not env_flattened(raw_env("Pendulum-v1"))
    catch = make_env("Catch-bsuite")
    assert _obs_shape(raw_env("Catch-bsuite")) == (10, 5) and env_flattened(
        raw_env("Catch-bsuite"))
    assert isinstance(catch, FlattenObservation) and _obs_shape(catch) == (50,)
    obs, _ = catch.reset(jax.random.key(0))
    assert obs.shape == (50,)
    breakout = make_env("Breakout-MinAtar")
    assert _obs_shape(breakout) == (400,)


def test_unknown_name_is_one_line_with_close_matches():
    with pytest.raises(ValueError) as err:
        make_env("Pendulm-v1")
    message = str(err.value)
    assert "'Pendulm-v1'" in message and "close matches: Pendulum-v1" in message
    assert "\n" not in message


def test_non_box_observations_are_refused_in_one_line():
    with pytest.raises(ValueError) as err:
        make_env("FrozenLake-misc")
    message = str(err.value)
    assert message.startswith("FrozenLake-misc: observation space Discrete(16) is not "
                              "supported") and "\n" not in message


def test_normalisation_wrappers_only_when_asked():
    plain = make_env("Pendulum-v1")
    assert not isinstance(plain, (NormalizeObservation, NormalizeReward))
    observed = make_env("Pendulum-v1", normalize_observations=True)
    assert isinstance(observed, NormalizeObservation) and observed.axis_name == ENV_AXIS
    scaled = make_env("Pendulum-v1", normalize_rewards=True, gamma=0.9)
    assert isinstance(scaled, NormalizeReward) and not isinstance(scaled.env,
                                                                   NormalizeObservation)
    assert scaled.gamma == 0.9 and scaled.axis_name == ENV_AXIS
    both = make_env("Pendulum-v1", normalize_observations=True, normalize_rewards=True)
    assert isinstance(both, NormalizeReward) and both.gamma == 0.99  # the default gamma
    assert isinstance(both.env, NormalizeObservation) and isinstance(both.env.env, GymnaxEnv)


def test_normalised_env_steps_over_the_env_axis():
    # the running statistics merge over ENV_AXIS: the env steps under vmap_env's batch
    env = make_env("Pendulum-v1", normalize_observations=True, normalize_rewards=True)
    reset, step = vmap_env(env)
    keys = jax.random.split(jax.random.key(0), 4)
    obs, state = reset(keys, env.default_params)
    assert obs.shape == (4, 3)
    obs, state, reward, _, _, info = step(keys, state, jnp.zeros((4, 1)), env.default_params)
    assert obs.shape == (4, 3) and reward.shape == (4,) and info["raw_reward"].shape == (4,)
