"""SAC over vectorised environments: one seed's whole run as one program.

The formula lives in :func:`rljax.algorithms.sac.sac` (twin critics, Polyak targets, the
automatic temperature, the tanh log-det correction); this module drives it as rejax's
``SAC.train_iteration`` does, with :class:`SACTrainConfig`
(:mod:`rljax.training.offpolicy_config`):

    each update u (an iteration):
      a = uniform in the box while u N < learning_starts, else a squashed sample of pi(.|s)
      step the N envs once; add the N transitions to the buffer (flashbax, rljax.replay)
      if u N >= learning_starts: num_epochs times
          draw batch_size transitions; one sac gradient step (critics, actor, temperature
          from one loss); the optimizer (one Adam over the whole tree, as rejax's three
          Adams with one rate)

so a run has ``total_steps // N`` updates in one ``lax.scan``. rejax acts with the policy
from the first step; CleanRL and Stable-Baselines3 act uniformly before learning starts,
as here (256 of Pendulum's 10,000 steps). A time-limit truncation (Pendulum's only episode
end) is bootstrapped from ``info["final_obs"]``; rejax ends it like a termination
(``bootstrap_truncations=False``).

:func:`make_sac_chunks` cuts the run into chunks for :class:`rljax.sweep.ChunkedSweep`;
its ``finish`` plays ``eval_episodes`` test episodes with the squashed mean action.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rljax.algorithms.sac import SACBatch, sac
from rljax.config import check_traced_hparams
from rljax.contracts import check_policy_head, function_name
from rljax.envs.base import Environment
from rljax.envs.spaces import Box, env_action_space
from rljax.nonfinite import all_finite
from rljax.policies.sac_networks import SACNetworks, mlp_sac_networks
from rljax.replay import replay_buffer
from rljax.training.offpolicy import (
    OffPolicyChunks,
    chunked_program,
    env_transition,
    greedy_evaluation,
    replay_gradient_steps,
    scan_updates,
    step_semantics,
    vmap_env,
    whole_run,
)
from rljax.training.offpolicy_config import (
    SACTrainConfig,
    check_config,
    offpolicy_optimizer,
    resolve_values,
)
from rljax.types import Array, PRNGKey


class SACCarry(NamedTuple):
    """What one update hands the next: ``{"actor", "critic", "log_alpha"}`` parameters,
    the transform's state (target critics), the optimizer's, the buffer's, the ``N``
    environments' observations ``[N, ...]`` and state and running returns ``[N]``."""

    params: Any
    rl_state: Any
    opt_state: Any
    buffer_state: Any
    obs: Array
    env_state: Any
    episode_return: Array


def box_actions(env: Environment, env_params: Any) -> Box:
    """The env's ``Box`` of shape ``(A,)``; a one-line ``ValueError`` naming the env
    otherwise."""
    space = env_action_space(env, env_params)
    if not (isinstance(space, Box) and len(space.shape) == 1):
        name = getattr(env, "name", type(env).__name__)
        raise ValueError(f"{name}: SAC needs Box actions of shape (A,), got {space!r}")
    return space


def sac_networks_for(config: SACTrainConfig, space: Box) -> SACNetworks:
    """The config's networks: :func:`rljax.policies.sac_networks.mlp_sac_networks` over
    the box, ``hidden_layers x hidden_size``, ``activation``, ``num_critics`` and the
    log-std clip."""
    return mlp_sac_networks(space.low, space.high, (config.hidden_size,) * config.hidden_layers,
                            activation=config.activation, num_critics=config.num_critics,
                            log_std_min=config.log_std_min, log_std_max=config.log_std_max)


def _check_actor(env: Environment, env_params: Any, networks: SACNetworks, space: Box,
                 num_envs: int) -> None:
    """At trace time: the actor maps ``[N, ...]`` observations to a Gaussian head ``[N, A]``
    (one-line error naming the actor's function and both shapes)."""
    keys = jax.random.split(jax.random.key(0), num_envs)

    def shapes(keys):
        obs, _ = vmap_env(env)[0](keys, env_params)
        return networks.actor(networks.init(keys[0], obs[0])["actor"], obs)

    out = jax.eval_shape(shapes, keys)
    check_policy_head(function_name(networks.actor), networks.distribution.name, out, space,
                      getattr(env, "name", type(env).__name__), (num_envs,), role="actor")


def _sac_program(env: Environment, config: SACTrainConfig, env_params: Any,
                 networks: SACNetworks | None):
    """``(start, run_updates, networks, env_params)`` of one seed's SAC run."""
    check_config(config, SACTrainConfig)
    env_params = env.default_params if env_params is None else env_params
    space = box_actions(env, env_params)
    networks = sac_networks_for(config, space) if networks is None else networks
    num_envs = config.num_envs
    _check_actor(env, env_params, networks, space, num_envs)
    reset, step = vmap_env(env)
    bootstrap, has_raw_reward = step_semantics(
        env, env_params, space, num_envs, config.bootstrap_truncations,
        getattr(env, "name", type(env).__name__))
    buffer = replay_buffer(config.buffer_size, config.batch_size)
    low, high = (jnp.broadcast_to(jnp.asarray(b, jnp.float32), space.shape)
                 for b in (space.low, space.high))

    def transforms(hparams):
        values = resolve_values(config, hparams)
        rl = sac(networks.actor, networks.critic, distribution=networks.distribution,
                 discount=values["gamma"], tau=values["tau"],
                 target_entropy=values["target_entropy"], num_critics=networks.num_critics)
        return rl, offpolicy_optimizer(config, values)

    def start(key: PRNGKey, hparams):
        rl, optimizer = transforms(hparams)
        init_key, reset_key, run_key = jax.random.split(key, 3)
        obs, env_state = reset(jax.random.split(reset_key, num_envs), env_params)
        params = networks.init(init_key, obs[0])
        example = SACBatch(obs[0], jnp.zeros(space.shape, jnp.float32), jnp.float32(0.0),
                           obs[0], jnp.float32(0.0))
        carry = SACCarry(params, rl.init(params), optimizer.init(params), buffer.init(example),
                         obs, env_state, jnp.zeros((num_envs,), jnp.float32))
        return carry, run_key

    def one_update(carry: SACCarry, key: PRNGKey, update: Array, hparams):
        rl, optimizer = transforms(hparams)
        uniform_key, noise_key, step_key, learn_key = jax.random.split(key, 4)
        learning = update * num_envs >= config.learning_starts
        dist_params = networks.actor(carry.params["actor"], carry.obs)
        sampled = networks.distribution.env_action(networks.distribution.sample(
            networks.distribution.noise(noise_key, (num_envs,)), dist_params))
        uniform = jax.random.uniform(uniform_key, (num_envs, *space.shape), jnp.float32,
                                     low, high)
        actions = jnp.where(learning, sampled, uniform)
        moved = env_transition(step, env_params, carry.env_state, actions,
                               jax.random.split(step_key, num_envs), carry.episode_return,
                               bootstrap=bootstrap, has_raw_reward=has_raw_reward)
        buffer_state = buffer.add(carry.buffer_state, SACBatch(
            carry.obs, actions, moved.reward, moved.bootstrap_obs,
            moved.terminated.astype(jnp.float32)))

        names = ("loss", "critic_loss", "actor_loss", "alpha", "entropy", "q")
        (params, rl_state, opt_state), metrics = replay_gradient_steps(
            rl, optimizer, buffer, buffer_state, (carry.params, carry.rl_state, carry.opt_state),
            learn_key, num_epochs=config.num_epochs, learning=learning, metrics=names,
            keyed=True)
        logs = {"return_sum": moved.return_sum, "episodes": moved.episodes, **metrics}
        carry = SACCarry(params, rl_state, opt_state, buffer_state, moved.next_obs,
                         moved.env_state, moved.episode_return)
        return carry, (logs, all_finite((params, metrics["loss"])))

    run_updates = scan_updates(one_update)

    return start, run_updates, networks, env_params


def make_sac_train(env: Environment, config: SACTrainConfig | None = None,
                   env_params: Any = None, *, networks: SACNetworks | None = None):
    """One seed's SAC run: ``train(key, hparams=None) -> logs`` with leaves ``[U]`` (``U =
    total_steps // num_envs`` updates; see the module docstring).

    Args:
      env: an rljax environment with ``Box`` actions of shape ``(A,)`` (bounded) and
        observations ``[D]`` (e.g. ``rljax.envs.registry.make_env("Pendulum-v1")``).
      config: :class:`SACTrainConfig` (default: rejax's Pendulum row), validated here.
      env_params: the env's params (default ``env.default_params``).
      networks: :class:`~rljax.policies.sac_networks.SACNetworks`; default the config's.

    Returns:
      ``train(key, hparams=None)``; ``hparams`` an optional dict of scalars for the traced
      fields (``learning_rate``, ``gamma``, ``tau``, ``target_entropy``, ``adam_eps``,
      ``max_grad_norm``; ``max_grad_norm`` and ``target_entropy`` only when the config's
      value is a number). It returns ``[U]`` arrays ``return_sum``, ``episodes`` (int32),
      and the means over the update's gradient steps of ``loss``, ``critic_loss``,
      ``actor_loss``, ``alpha``, ``entropy`` and ``q`` (0 before ``learning_starts``); and
      ``NONFINITE_STEP`` (int32 ``[]``).

    Raises:
      ValueError: one line naming the config field, the env (actions not a ``Box (A,)``)
        or the actor's function (a head that does not match the box).
    """
    config = SACTrainConfig() if config is None else config
    start, run_updates, _, _ = _sac_program(env, config, env_params, networks)
    return whole_run(start, run_updates, config.num_updates)


def make_sac_chunks(env: Environment, config: SACTrainConfig | None = None,
                    env_params: Any = None, *, updates_per_chunk: int, log_every: int = 1,
                    networks: SACNetworks | None = None, eval_episodes: int = 0,
                    eval_max_steps: int | None = None) -> OffPolicyChunks:
    """:func:`make_sac_train`'s run in ``U / updates_per_chunk`` chunks, logged every
    ``log_every`` updates (as :func:`rljax.training.dqn.make_dqn_chunks`: the same updates
    and keys); ``finish`` adds ``eval_episodes`` test episodes with the squashed mean
    (``eval_return_mode`` / ``eval_finished_mode``, ``[E]``) when ``eval_episodes > 0``.

    Raises:
      ValueError: one line naming the argument or config field.
    """
    config = SACTrainConfig() if config is None else config
    start, run_updates, networks, env_params = _sac_program(env, config, env_params, networks)
    return chunked_program(
        start, run_updates, config.num_updates, updates_per_chunk=updates_per_chunk,
        log_every=log_every,
        evaluate=greedy_evaluation(env, env_params,
                                   lambda params, obs: networks.actor(params["actor"], obs),
                                   networks.distribution, eval_episodes, eval_max_steps),
        check_hparams=lambda hp: check_traced_hparams(SACTrainConfig, config, hp))
