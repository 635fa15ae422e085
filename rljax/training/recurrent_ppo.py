"""Recurrent PPO: a GRU actor-critic trained over vectorised environments, one seed's
whole run as one program.

The PPO transform (:mod:`rljax.algorithms.ppo`), its optimizer, config and checks are the
feed-forward trainer's (:mod:`rljax.training.ppo`); what changes is the hidden state:

* **Rollout.** The scan over ``T`` steps carries each environment's GRU state ``h``
  ``[N, H]`` and the flag ``reset`` ``[N]`` (the previous step ended an episode). Step
  ``t`` applies ``net.apply(params, h, obs_t, reset_t)``, which zeroes ``h`` where
  ``reset_t`` before the step. The segment stores its initial state ``h0 [N, H]`` (the
  carry before step 0) and the flags ``resets [T, N]`` (``resets[0]`` is the last step
  of the previous segment ending an episode; all ones at the very start).
* **Update.** The batch is **env-major**: ``PPOBatch.obs`` is a :class:`SequenceObs`
  ``(h0 [N, H], obs [N, T, D], resets [N, T])`` and every per-sample leaf is ``[N, T]``,
  so ``multi_step_update`` splits (and shuffles) **environments**, each minibatch a set
  of whole ``T``-step sequences. The loss re-runs the GRU over each sequence from its
  stored ``h0`` with the stored resets (``net.apply_sequence``), so the hidden states of
  the first epoch are bitwise those the rollout acted with (ratio 1 on-policy) and the
  state resets at the same episode boundaries inside the scan. Later epochs recompute
  the states with the current parameters from the stored ``h0`` (the "burn-in-free"
  scheme of PureJaxRL's ``ppo_rnn.py`` and CleanRL's ``ppo_atari_lstm.py``).
* **Bootstrapping.** GAE as in the feed-forward trainer; the value after the segment is
  ``apply(params, h_T, obs_T, reset_T)``; a truncated episode bootstraps from the value
  of ``info["final_obs"]`` given the hidden state after the truncated step (the same
  episode's memory), computed in the rollout.

Logs are :func:`~rljax.training.ppo.make_ppo_train`'s (``return_sum``, ``episodes``, the
losses, ``NONFINITE_STEP``); the traced ``hparams`` are the same
(the traced fields of :class:`~rljax.training.ppo_config.PPOTrainConfig`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rljax.advantages import generalized_advantage_estimation
from rljax.algorithms.loops import multi_step_update
from rljax.algorithms.ppo import PPOBatch
from rljax.contracts import check_actor_critic, function_name
from rljax.envs.base import Environment
from rljax.envs.batched import vmap_env
from rljax.envs.spaces import Box, env_action_space
from rljax.nonfinite import NONFINITE_STEP, all_finite, first_nonfinite_step
from rljax.policies.distributions import check_supports
from rljax.training.ppo import _step_info_keys, bootstrap_possible
from rljax.training.ppo_config import (
    PPOTrainConfig,
    check_train_config,
    ppo_optimizer,
    ppo_transform,
    resolve_hparams,
)
from rljax.types import Array, Params, PRNGKey


class SequenceObs(NamedTuple):
    """What the recurrent PPO loss reads as ``PPOBatch.obs`` (env-major, ``B`` envs).

    Attributes:
      h0: ``[B, H]`` the GRU state before the segment's first step.
      obs: ``[B, T, D]`` observations.
      resets: ``[B, T]`` bool, ``resets[:, t]``: step ``t`` starts an episode (zero the
        state before it).
    """

    h0: Array
    obs: Array
    resets: Array


class RecurrentCarry(NamedTuple):
    """What one update hands the next: parameters, optimizer state, the environments
    ``[N, ...]``, their GRU states ``h [N, H]``, whether their last step ended an episode
    (``reset [N]``) and running episode returns ``[N]``."""

    params: Params
    rl_state: Any
    opt_state: Any
    obs: Array
    env_state: Any
    h: Array
    reset: Array
    episode_return: Array


def check_recurrent_config(config: PPOTrainConfig) -> None:
    """:func:`~rljax.training.ppo_config.check_train_config`, and ``num_minibatches`` must divide
    ``num_envs`` (minibatches are whole environments' sequences); one-line
    ``ValueError`` naming the field."""
    check_train_config(config)
    if config.num_envs % config.num_minibatches:
        raise ValueError(f"num_minibatches: must divide num_envs = {config.num_envs} "
                         f"(recurrent minibatches are whole env sequences), got "
                         f"{config.num_minibatches}")


def sequence_apply(net: Any) -> Callable[[Params, SequenceObs], tuple[Any, Array]]:
    """``apply(params, SequenceObs) -> (dist_params [B, T, ...], values [B, T])``: the
    network's ``apply_sequence`` in the shape the PPO transform calls."""

    def apply(params: Params, batch_obs: SequenceObs) -> tuple[Any, Array]:
        return net.apply_sequence(params, batch_obs.h0, batch_obs.obs, batch_obs.resets)

    return apply


def make_recurrent_ppo_train(
    env: Environment,
    net: Any,
    config: PPOTrainConfig | None = None,
    env_params: Any = None,
) -> Callable[..., dict[str, Array]]:
    """One seed's recurrent PPO run: ``train(key, hparams=None) -> logs`` with leaves
    ``[U]`` (U updates); see the module docstring.

    Args:
      env: an environment whose action space ``net``'s head supports; observations
        ``[D]``.
      net: a recurrent actor-critic
        (:func:`~rljax.policies.recurrent.gru_actor_critic`): ``init``,
        ``initial_state``, ``apply``, ``apply_sequence``, ``distribution``.
      config: :class:`~rljax.training.ppo_config.PPOTrainConfig` (default: its defaults),
        validated by :func:`check_recurrent_config`.
      env_params: environment parameters (default ``env.default_params``).

    Returns:
      ``train(key, hparams=None)`` returning the logs of
      :func:`~rljax.training.ppo.make_ppo_train`: ``[U]`` arrays ``return_sum``,
      ``episodes`` (int32), ``loss``, ``policy_loss``, ``value_loss``, ``entropy``,
      ``clip_fraction``, ``approx_kl``, and ``NONFINITE_STEP`` (int32 ``[]``, -1 if the
      run stayed finite).

    Raises:
      ValueError: one line naming the config field (e.g. ``num_minibatches`` not dividing
        ``num_envs``) or the env (a head that does not support its action space).
    """
    config = PPOTrainConfig() if config is None else config
    start, run_updates, _ = _recurrent_program(env, net, config, env_params)

    def train(key: PRNGKey, hparams: Mapping[str, Array] | None = None) -> dict[str, Array]:
        carry, run_key = start(key, hparams)
        updates = jnp.arange(config.num_updates, dtype=jnp.int32)
        _, logs, finite = run_updates(carry, run_key, updates, hparams)
        return {**logs, NONFINITE_STEP: first_nonfinite_step(finite)}

    return train


def recurrent_ppo_first_batch(
    env: Environment,
    net: Any,
    config: PPOTrainConfig,
    key: PRNGKey,
    env_params: Any = None,
) -> tuple[Params, PPOBatch]:
    """The initial parameters and the env-major :class:`~rljax.algorithms.ppo.PPOBatch`
    the first update of ``make_recurrent_ppo_train(env, net, config)(key)`` trains on
    (the same keys): for checking what the update sees, e.g. that re-running
    ``net.apply_sequence`` on ``batch.obs`` gives back ``batch.old_log_probs``.

    Returns:
      ``(params, batch)``: ``batch.obs`` a :class:`SequenceObs` (``h0 [N, H]``, ``obs
      [N, T, D]``, ``resets [N, T]``), every other leaf ``[N, T]`` (``actions [N, T, A]``
      for a Gaussian head).
    """
    start, _, collect = _recurrent_program(env, net, config, env_params)
    carry, run_key = start(key, None)
    rollout_key, _ = jax.random.split(jax.random.fold_in(run_key, 0))
    batch, *_ = collect(carry, rollout_key, resolve_hparams(config, None))
    return carry.params, batch


def _recurrent_program(env: Environment, net: Any, config: PPOTrainConfig,
                       env_params: Any) -> tuple[Callable, Callable, Callable]:
    """``(start, run_updates, collect)``: ``start(key, hparams) -> (carry, run_key)``;
    ``run_updates(carry, run_key, updates [U] int32, hparams) -> (carry, logs, finite)``;
    ``collect(carry, rollout_key, values) -> (batch, carry', return_sum, episodes)`` (one
    rollout, GAE and the env-major batch; ``carry'`` has the new env / GRU states)."""
    check_recurrent_config(config)
    for name in ("init", "initial_state", "apply", "apply_sequence"):
        if not callable(getattr(net, name, None)):
            raise ValueError(f"net: needs {name} (a recurrent actor-critic such as "
                             f"policies.gru_actor_critic), got {type(net).__name__}")
    env_params = env.default_params if env_params is None else env_params
    distribution = net.distribution
    env_name = getattr(env, "name", type(env).__name__)
    action_space = env_action_space(env, env_params)
    if action_space is not None:
        check_supports(distribution, action_space, env_name)
    clip_box = action_space if isinstance(action_space, Box) else None
    num_envs, num_steps = config.num_envs, config.num_steps
    reset_envs, step_envs = vmap_env(env)
    has_final_obs, has_raw_reward = _step_info_keys(env, env_params, action_space, num_envs)
    bootstrap_truncations = bootstrap_possible(config, has_final_obs, env_name)
    obs_shape = jax.eval_shape(reset_envs, jax.random.split(jax.random.key(0), num_envs),
                               env_params)[0].shape
    if len(obs_shape) != 2:
        raise ValueError(f"{env_name}: a recurrent actor-critic needs observations [D], got "
                         f"{list(obs_shape[1:])}; wrap the env in FlattenObservation")
    _check_recurrent_head(net, reset_envs, env_params, num_envs, env_name, action_space)

    def env_action(action):
        action = distribution.env_action(action)
        return action if clip_box is None else clip_box.clip(action)

    def transforms(hparams):
        values = resolve_hparams(config, hparams)
        rl = ppo_transform(sequence_apply(net), config, values, distribution)
        return rl, ppo_optimizer(config, hparams), values

    def collect(carry: RecurrentCarry, key: PRNGKey, values: dict[str, Any]):
        params = carry.params
        noise_key, env_key = jax.random.split(key)
        noise = distribution.noise(noise_key, (num_steps, num_envs))
        env_keys = jax.random.split(env_key, (num_steps, num_envs))
        not_reset = jnp.zeros((num_envs,), bool)

        def body(state, inputs):
            obs, env_state, h, reset, episode_return, return_sum, episodes = state
            u, keys = inputs
            h_next, (dist_params, value) = net.apply(params, h, obs, reset)
            action = distribution.sample(u, dist_params)
            log_prob = distribution.log_prob(dist_params, action)
            next_obs, env_state, reward, terminated, truncated, info = step_envs(
                keys, env_state, env_action(action), env_params)
            reward = jnp.asarray(reward, jnp.float32)
            done = jnp.logical_or(terminated, truncated)
            if bootstrap_truncations:  # the cut episode's last observation, its memory
                _, (_, truncation_value) = net.apply(params, h_next, info["final_obs"],
                                                     not_reset)
            else:
                truncation_value = jnp.zeros_like(value)
            logged = jnp.asarray(info["raw_reward"], jnp.float32) if has_raw_reward else reward
            episode_return = episode_return + logged
            return_sum = return_sum + jnp.sum(jnp.where(done, episode_return, 0.0))
            episodes = episodes + jnp.sum(done, dtype=jnp.int32)
            episode_return = jnp.where(done, 0.0, episode_return)
            out = (obs, reset, action, log_prob, value, reward, terminated, truncated,
                   truncation_value)
            return (next_obs, env_state, h_next, done, episode_return, return_sum,
                    episodes), out

        init = (carry.obs, carry.env_state, carry.h, carry.reset, carry.episode_return,
                jnp.float32(0.0), jnp.int32(0))
        final, traj = jax.lax.scan(body, init, (noise, env_keys))
        obs, env_state, h, reset, episode_return, return_sum, episodes = final
        (seq_obs, resets, actions, log_probs, seq_values, rewards, terminated, truncated,
         truncation_values) = traj
        _, (_, last_value) = net.apply(params, h, obs, reset)
        advantages, returns = generalized_advantage_estimation(
            rewards, seq_values, last_value, terminated, gamma=values["gamma"],
            lam=values["lam"], truncated=truncated,
            truncation_values=truncation_values if bootstrap_truncations else None)
        env_major = lambda x: jnp.swapaxes(x, 0, 1)  # noqa: E731  [T, N, ...] -> [N, T, ...]
        batch = PPOBatch(
            obs=SequenceObs(carry.h, env_major(seq_obs), env_major(resets)),
            actions=env_major(actions), old_log_probs=env_major(log_probs),
            advantages=env_major(advantages), returns=env_major(returns),
            old_values=env_major(seq_values))
        carry = carry._replace(obs=obs, env_state=env_state, h=h, reset=reset,
                               episode_return=episode_return)
        return batch, carry, return_sum, episodes

    def one_update(carry: RecurrentCarry, key: PRNGKey, hparams):
        rl, optimizer, values = transforms(hparams)
        rollout_key, update_key = jax.random.split(key)
        batch, carry, return_sum, episodes = collect(carry, rollout_key, values)
        params, rl_state, opt_state, metrics = multi_step_update(
            rl, optimizer, carry.params, carry.rl_state, carry.opt_state, batch, update_key,
            num_epochs=config.num_epochs, num_minibatches=config.num_minibatches)
        logs = {"return_sum": return_sum, "episodes": episodes, **metrics}
        finite = all_finite((params, metrics["loss"]))
        carry = carry._replace(params=params, rl_state=rl_state, opt_state=opt_state)
        return carry, (logs, finite)

    def start(key: PRNGKey, hparams) -> tuple[RecurrentCarry, PRNGKey]:
        rl, optimizer, _ = transforms(hparams)
        init_key, reset_key, run_key = jax.random.split(key, 3)
        obs, env_state = reset_envs(jax.random.split(reset_key, num_envs), env_params)
        params = net.init(init_key, obs[0])
        carry = RecurrentCarry(
            params=params, rl_state=rl.init(params), opt_state=optimizer.init(params),
            obs=obs, env_state=env_state, h=net.initial_state((num_envs,)),
            reset=jnp.ones((num_envs,), bool), episode_return=jnp.zeros((num_envs,)))
        return carry, run_key

    def run_updates(carry: RecurrentCarry, run_key: PRNGKey, updates: Array, hparams):
        keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(run_key, updates)
        carry, (logs, finite) = jax.lax.scan(
            lambda c, k: one_update(c, k, hparams), carry, keys)
        return carry, logs, finite

    return start, run_updates, collect


def _check_recurrent_head(net: Any, reset_envs: Callable, env_params: Any, num_envs: int,
                          env_name: str, action_space: Any) -> None:
    """Check ``net.apply(params, h [N, H], obs [N, D], reset [N]) -> (h', (dist_params,
    value [N]))`` against the env's action space, abstractly
    (:func:`rljax.contracts.check_actor_critic`; one-line ``ContractError``)."""

    def outputs(keys):
        obs, _ = reset_envs(keys, env_params)
        params = net.init(keys[0], obs[0])
        return net.apply(params, net.initial_state((num_envs,)), obs,
                         jnp.ones((num_envs,), bool))

    out = jax.eval_shape(outputs, jax.random.split(jax.random.key(0), num_envs))
    name = function_name(net.apply)
    if not (isinstance(out, tuple | list) and len(out) == 2):
        raise ValueError(f"{name} (recurrent actor-critic): must return (h, (dist_params, "
                         f"value)), got {type(out).__name__}")
    check_actor_critic(name, out[1], net.distribution.name, action_space, env_name,
                       (num_envs,))
