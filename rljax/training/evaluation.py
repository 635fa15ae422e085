"""Test-rollout evaluation of a trained actor-critic: fresh episodes, no learning.

Training-episode returns (what PPO's logs hold) mix many policies: every episode that ends
in an update's window started under older parameters. A paper's "final return" is often
something else: gymnax-blines (the source of gymnax's published PPO returns) resets
``num_test_rollouts`` fresh environments after training and sums each one's reward over
its first episode, sampling actions from the policy (``utils/ppo.py``,
``RolloutManager.batch_evaluate``); others act greedily. :func:`evaluate_policy` measures
both, so a study can say which one it compares:

    R_e = sum_{t < T_e} r_t   for episode e = 0 .. E - 1, from reset, with
    a_t ~ pi(. | s_t)           (``deterministic=False``) or
    a_t = mode pi(. | s_t)      (``deterministic=True``: argmax / Gaussian mean),

where ``T_e`` is the first step that terminates or truncates (at most ``max_steps``).
Continuous actions reach the env as in training (``distribution.env_action``, then clipped
to the ``Box``). Rewards are the env's raw ones (``info["raw_reward"]`` when a wrapper
normalises them). Observation normalisers (``NormalizeObservation``) continue from the
trained statistics, not from zero: pass the training environments' state
(``trained_env_state``, batched ``[N, ...]``; its first env's moments are used, which the
wrapper keeps equal across the ``N`` envs when it merges them over ``ENV_AXIS``). One
limit: the wrapper's reset normalises an episode's *first* observation with the fresh
statistics of that one observation (all zeros); the trained statistics apply from the
first step on. Without a normaliser nothing of this applies.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rljax.envs.batched import vmap_env
from rljax.envs.spaces import Box, env_action_space
from rljax.envs.wrappers import RunningMoments
from rljax.policies.distributions import policy_distribution
from rljax.types import Array, Params, PRNGKey


class Evaluation(NamedTuple):
    """``E`` test episodes.

    Attributes:
      returns: float32 ``[E]``, each episode's summed raw reward (up to ``max_steps``).
      lengths: int32 ``[E]``, steps until the episode ended (``max_steps`` if it did not).
      finished: bool ``[E]``, whether the episode ended within ``max_steps``.
    """

    returns: Array
    lengths: Array
    finished: Array


def episode_limit(env: Any, env_params: Any) -> int:
    """The env's time limit ``env_params.max_steps_in_episode`` (one-line ``ValueError``
    when it declares none: pass ``max_steps`` instead)."""
    limit = getattr(env_params, "max_steps_in_episode", None)
    if limit is None:
        name = getattr(env, "name", type(env).__name__)
        raise ValueError(f"max_steps: {name}'s params have no max_steps_in_episode; give "
                         "max_steps (an integer >= 1)")
    return int(limit)


def _with_trained_moments(state: Any, trained: Any) -> Any:
    """``state`` (batched ``[E]``) with every :class:`RunningMoments` replaced by the first
    env's moments of ``trained`` (batched ``[N]``), broadcast to ``E`` envs."""
    is_moments = lambda x: isinstance(x, RunningMoments)  # noqa: E731
    num = jax.tree_util.tree_leaves(state)[0].shape[0]

    def pick(fresh: Any, old: Any) -> Any:
        if not is_moments(fresh):
            return fresh
        return jax.tree_util.tree_map(
            lambda x: jnp.broadcast_to(x[0], (num, *x.shape[1:])), old)

    return jax.tree_util.tree_map(pick, state, trained, is_leaf=is_moments)


def evaluate_policy(
    env: Any,
    actor_critic: Any,
    params: Params,
    key: PRNGKey,
    *,
    num_episodes: int,
    max_steps: int | None = None,
    deterministic: bool = False,
    env_params: Any = None,
    trained_env_state: Any = None,
) -> Evaluation:
    """Run ``E = num_episodes`` fresh episodes of the policy (module docstring).

    Pure and jit/vmap-able (one ``lax.scan`` of ``max_steps`` steps over ``E`` envs vmapped
    under the axis name ``ENV_AXIS``, as in training).

    Args:
      env: an rljax ``Environment`` (wrappers included).
      actor_critic: ``apply(params, obs [E, ...]) -> (dist_params, value [E])`` and its
        ``distribution`` (categorical when it declares none).
      params: the actor-critic's parameters.
      key: typed key ``[]``; the resets, the env steps and the action noise derive from it.
      num_episodes: E (>= 1).
      max_steps: steps per episode at most (default: ``env_params.max_steps_in_episode``).
      deterministic: act with the distribution's mode instead of sampling.
      env_params: the env's params (default ``env.default_params``).
      trained_env_state: the training environments' state ``[N, ...]``, whose observation
        normaliser moments the test envs start from (``None``: fresh statistics).

    Returns:
      :class:`Evaluation` of ``[E]`` arrays.

    Raises:
      ValueError: one line naming ``num_episodes`` or ``max_steps``.
    """
    for name, value in (("num_episodes", num_episodes), ("max_steps", max_steps)):
        if value is None and name == "max_steps":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")
    env_params = env.default_params if env_params is None else env_params
    max_steps = episode_limit(env, env_params) if max_steps is None else max_steps
    distribution = policy_distribution(actor_critic)
    action_space = env_action_space(env, env_params)
    clip_box = action_space if isinstance(action_space, Box) else None
    reset, step = vmap_env(env)

    reset_key, step_key, noise_key = jax.random.split(key, 3)
    obs, state = reset(jax.random.split(reset_key, num_episodes), env_params)
    if trained_env_state is not None:
        state = _with_trained_moments(state, trained_env_state)
    noise = distribution.noise(noise_key, (max_steps, num_episodes))
    step_keys = jax.random.split(step_key, (max_steps, num_episodes))

    def body(carry, inputs):
        obs, state, returns, lengths, alive = carry
        u, keys = inputs
        dist_params, _ = actor_critic.apply(params, obs)
        action = (distribution.mode(dist_params) if deterministic
                  else distribution.sample(u, dist_params))
        to_env = distribution.env_action(action)
        if clip_box is not None:
            to_env = clip_box.clip(to_env)
        obs, state, reward, terminated, truncated, info = step(keys, state, to_env,
                                                               env_params)
        raw = jnp.asarray(info.get("raw_reward", reward), jnp.float32)
        returns = returns + jnp.where(alive, raw, 0.0)
        lengths = lengths + alive.astype(jnp.int32)
        alive = jnp.logical_and(alive, jnp.logical_not(jnp.logical_or(terminated, truncated)))
        return (obs, state, returns, lengths, alive), None

    init = (obs, state, jnp.zeros((num_episodes,), jnp.float32),
            jnp.zeros((num_episodes,), jnp.int32), jnp.ones((num_episodes,), bool))
    (_, _, returns, lengths, alive), _ = jax.lax.scan(body, init, (noise, step_keys))
    return Evaluation(returns, lengths, jnp.logical_not(alive))
