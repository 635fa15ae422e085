"""What the off-policy trainers (:mod:`rljax.training.dqn`, :mod:`~rljax.training.pqn`,
:mod:`~rljax.training.sac`) share: stepping ``N`` environments with the truncation
semantics PPO uses (:func:`env_transition`), cutting one seed's run into chunks for
:class:`rljax.sweep.ChunkedSweep` (:func:`chunked_program`) and the greedy test episodes at
the end (:func:`greedy_evaluation`).

**Truncation** (DESIGN.md, gymnax >= 1.0): a transition cut by a time limit keeps
``terminated = False`` and its ``next_obs`` is the observation the limit cut
(``info["final_obs"]``, before the auto-reset), so the TD target bootstraps from it, as
PPO's GAE does. With ``bootstrap_truncations=False`` (rejax, purejaxql) a truncation ends
the bootstrap like a termination; an env whose step gives no ``final_obs`` warns
(:class:`rljax.contracts.TruncationBootstrapWarning`) and does the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rljax.envs.batched import vmap_env
from rljax.nonfinite import NONFINITE_STEP, first_nonfinite_step
from rljax.training.chunking import (
    ChunkedRun,
    ChunkState,
    chunked_program,
)
from rljax.training.evaluation import episode_limit, evaluate_policy
from rljax.training.ppo import _step_info_keys
from rljax.types import Array, PRNGKey


class EnvTransition(NamedTuple):
    """``N`` environments' step, what a TD target needs (leaves lead with ``[N]``).

    Attributes:
      next_obs: ``[N, ...]`` the observations the next step starts from (after auto-reset).
      env_state: the environments' state after the step.
      reward: ``[N]`` float32 rewards.
      terminated: ``[N]`` bool: no bootstrap from ``bootstrap_obs`` (a termination, or any
        episode end when truncations are not bootstrapped).
      done: ``[N]`` bool: the episode ended (terminated or truncated).
      bootstrap_obs: ``[N, ...]`` the observation the target bootstraps from: the true
        final observation at a bootstrapped truncation, else ``next_obs``.
      episode_return: ``[N]`` running returns after the step (0 where an episode ended).
      return_sum: ``[]`` float32: the summed returns of the episodes that ended.
      episodes: ``[]`` int32: how many ended.
    """

    next_obs: Array
    env_state: Any
    reward: Array
    terminated: Array
    done: Array
    bootstrap_obs: Array
    episode_return: Array
    return_sum: Array
    episodes: Array


def step_semantics(env: Any, env_params: Any, action_space: Any, num_envs: int,
                   bootstrap_truncations: bool, env_name: str) -> tuple[bool, bool]:
    """``(bootstrap, has_raw_reward)``: whether truncations are bootstrapped (the config
    asks and the env gives ``final_obs``; asking an env that cannot warns) and whether the
    env reports un-normalised rewards in ``info["raw_reward"]``. Checks the env's reset /
    step outputs once (:func:`rljax.contracts.check_env`)."""
    from rljax.contracts import warn_no_final_obs

    has_final_obs, has_raw_reward = _step_info_keys(env, env_params, action_space, num_envs)
    if bootstrap_truncations and not has_final_obs:
        warn_no_final_obs(env_name)
    return bootstrap_truncations and has_final_obs, has_raw_reward


def env_transition(step: Callable, env_params: Any, env_state: Any, actions: Array,
                   keys: Array, episode_return: Array, *, bootstrap: bool,
                   has_raw_reward: bool) -> EnvTransition:
    """Step ``N`` environments once (``step`` from :func:`rljax.envs.batched.vmap_env`)
    and account for finished episodes.

    Args:
      step: the vmapped ``step(keys [N], state, actions [N, ...], params)``.
      env_params: the env's params.
      env_state: ``[N, ...]`` state.
      actions: ``[N]`` or ``[N, A]`` actions as the env takes them.
      keys: ``[N]`` typed keys.
      episode_return: ``[N]`` running returns (un-normalised rewards where the env gives
        ``info["raw_reward"]``).
      bootstrap: bootstrap truncations from ``info["final_obs"]``.
      has_raw_reward: read ``info["raw_reward"]`` for the logged returns.

    Returns:
      :class:`EnvTransition`.
    """
    next_obs, env_state, reward, terminated, truncated, info = step(keys, env_state, actions,
                                                                    env_params)
    reward = jnp.asarray(reward, jnp.float32)
    done = jnp.logical_or(terminated, truncated)
    logged = jnp.asarray(info["raw_reward"], jnp.float32) if has_raw_reward else reward
    episode_return = episode_return + logged
    return_sum = jnp.sum(jnp.where(done, episode_return, 0.0))
    episodes = jnp.sum(done, dtype=jnp.int32)
    if bootstrap:
        cut = truncated.reshape(truncated.shape + (1,) * (next_obs.ndim - truncated.ndim))
        bootstrap_obs = jnp.where(cut, info["final_obs"], next_obs)
        no_bootstrap = jnp.asarray(terminated, bool)
    else:
        bootstrap_obs, no_bootstrap = next_obs, done
    return EnvTransition(next_obs, env_state, reward, no_bootstrap, done, bootstrap_obs,
                         jnp.where(done, 0.0, episode_return), return_sum, episodes)


def fold_in_keys(run_key: PRNGKey, first: Array, count: int) -> Array:
    """``[count]`` keys ``fold_in(run_key, u)`` for updates ``u = first .. first + count -
    1`` (the keys of :func:`rljax.training.make_ppo_train`'s updates)."""
    updates = jnp.asarray(first, jnp.int32) + jnp.arange(count, dtype=jnp.int32)
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(run_key, updates)


def scan_updates(one_update: Callable) -> Callable:
    """``run_updates(carry, run_key, first, count, hparams) -> (carry, logs, finite)`` for
    :func:`chunked_program`: updates ``first .. first + count - 1`` in one ``lax.scan``,
    update ``u`` as ``one_update(carry, fold_in(run_key, u), u, hparams) -> (carry, (logs,
    finite))`` (``u`` an int32 scalar ``[]``, may be traced)."""

    def run_updates(carry: Any, run_key: PRNGKey, first: Array, count: int, hparams: Any):
        updates = jnp.asarray(first, jnp.int32) + jnp.arange(count, dtype=jnp.int32)
        carry, (logs, finite) = jax.lax.scan(
            lambda c, x: one_update(c, x[0], x[1], hparams), carry,
            (fold_in_keys(run_key, first, count), updates))
        return carry, logs, finite

    return run_updates


def whole_run(start: Callable, run_updates: Callable, num_updates: int) -> Callable:
    """``train(key, hparams=None) -> {name: [U], NONFINITE_STEP: int32 []}``: the run's
    ``U`` updates in one program (what :func:`chunked_program`'s chunks run in pieces)."""

    def train(key: PRNGKey, hparams: Mapping[str, Array] | None = None) -> dict[str, Array]:
        carry, run_key = start(key, hparams)
        _, logs, finite = run_updates(carry, run_key, jnp.int32(0), num_updates, hparams)
        return {**logs, NONFINITE_STEP: first_nonfinite_step(finite)}

    return train


def replay_gradient_steps(rl: Any, optimizer: Any, buffer: Any, buffer_state: Any,
                          state: tuple, key: PRNGKey, *, num_epochs: int, learning: Array,
                          metrics: tuple[str, ...], keyed: bool) -> tuple[tuple, dict]:
    """``num_epochs`` gradient steps on minibatches drawn from the buffer when
    ``learning`` (a bool ``[]``), none otherwise (DQN's and SAC's inner loop).

    Args:
      rl, optimizer: the transform and the optax optimizer.
      buffer, buffer_state: :func:`rljax.replay.replay_buffer` and its state.
      state: ``(params, rl_state, opt_state)``.
      key: typed key ``[]``; step ``k`` draws its minibatch from ``split(key,
        num_epochs)[k]``, or, when ``keyed``, from ``split(key, (num_epochs, 2))[k, 0]`` and
        passes the transform ``[k, 1]``.
      num_epochs: gradient steps.
      learning: whether to take them (before ``learning_starts``: no).
      metrics: the transform's metric names to average over the steps (0 when idle).
      keyed: the transform samples (SAC) and takes a key.

    Returns:
      ``((params, rl_state, opt_state), {name: float32 []})``.
    """
    def gradient_step(state, keys):
        params, rl_state, opt_state = state
        batch = buffer.sample(buffer_state, keys[0] if keyed else keys)
        grads, rl_state, out = rl.update(params, rl_state, batch, keys[1] if keyed else None)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), rl_state, opt_state), out

    def learn(state):
        keys = jax.random.split(key, (num_epochs, 2) if keyed else num_epochs)
        state, out = jax.lax.scan(gradient_step, state, keys)
        return state, {name: jnp.mean(out[name]) for name in metrics}

    def wait(state):
        return state, {name: jnp.float32(0.0) for name in metrics}

    return jax.lax.cond(learning, learn, wait, state)


class _GreedyPolicy(NamedTuple):
    """An actor-critic view of a policy for :func:`evaluate_policy`: ``apply(params,
    obs) -> (dist_params, zeros)``."""

    apply: Callable
    distribution: Any


def greedy_evaluation(env: Any, env_params: Any, dist_params_fn: Callable, distribution: Any,
                      num_episodes: int, max_steps: int | None = None) -> Callable | None:
    """``evaluate(carry, key) -> {"eval_return_mode": [E], "eval_finished_mode": [E]}`` for
    :func:`chunked_program`: ``E`` fresh episodes acting with the mode of
    ``distribution`` over ``dist_params_fn(carry.params, obs [E, ...])`` (the argmax of Q
    for a categorical view of Q-values; the squashed mean for SAC's actor), through
    :func:`rljax.training.evaluation.evaluate_policy` (observation normalisers start from
    ``carry.env_state``'s moments). ``None`` when ``num_episodes`` is 0.

    Raises:
      ValueError: one line naming ``eval_episodes`` or ``eval_max_steps``.
    """
    if isinstance(num_episodes, bool) or not isinstance(num_episodes, int) or num_episodes < 0:
        raise ValueError(f"eval_episodes: must be an integer >= 0, got {num_episodes!r}")
    if not num_episodes:
        return None
    env_params = env.default_params if env_params is None else env_params
    if max_steps is None:
        max_steps = episode_limit(env, env_params)
    elif isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"eval_max_steps: must be an integer >= 1, got {max_steps!r}")

    def apply(params, obs):
        return dist_params_fn(params, obs), jnp.zeros(obs.shape[:1], jnp.float32)

    policy = _GreedyPolicy(apply, distribution)

    def evaluate(carry, key):
        result = evaluate_policy(env, policy, carry.params, key, num_episodes=num_episodes,
                                 max_steps=max_steps, deterministic=True,
                                 env_params=env_params, trained_env_state=carry.env_state)
        return {"eval_return_mode": result.returns, "eval_finished_mode": result.finished}

    return evaluate


OffPolicyChunks = ChunkedRun
"""The off-policy trainers' chunked runs (:class:`rljax.training.chunking.ChunkedRun`)."""
OffPolicyChunkState = ChunkState
"""One seed's off-policy run between chunks (:class:`rljax.training.chunking.ChunkState`)."""

__all__ = ["EnvTransition", "env_transition", "step_semantics", "chunked_program",
           "OffPolicyChunks", "OffPolicyChunkState", "fold_in_keys", "greedy_evaluation",
           "scan_updates", "whole_run", "replay_gradient_steps", "vmap_env"]
