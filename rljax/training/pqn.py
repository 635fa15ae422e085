"""PQN over vectorised environments: one seed's whole run as one program.

The formula lives in :func:`rljax.algorithms.pqn.pqn` (Q(lambda) regression, no target
network, no replay buffer; Gallici et al., 2024); this module drives it as purejaxql's
``pqn_gymnax.py`` does, with :class:`PQNTrainConfig` (:mod:`rljax.training.offpolicy_config`):

    each update u:
      epsilon = linear_epsilon(u N T)
      a [T, N] = epsilon-greedy(Q_theta(s)) over a T-step rollout of the N envs
      G [T, N] = Q(lambda) targets under theta (q_lambda_targets; rewards x reward_scale)
      num_epochs x num_minibatches steps of 0.5 (Q_theta(s, a) - G)^2 on the flat N T
      batch (algorithms.loops.multi_step_update), RAdam (or Adam), global-norm clip

so a run has ``total_steps // (N T)`` updates, all in one ``lax.scan``. A time-limit
truncation bootstraps from ``max_a Q(info["final_obs"], a)`` (the semantics PPO's GAE
uses); purejaxql ends it like a termination (``bootstrap_truncations=False``).

:func:`make_pqn_chunks` cuts the run into chunks for :class:`rljax.sweep.ChunkedSweep`;
its ``finish`` plays ``eval_episodes`` greedy test episodes (purejaxql's test returns are
greedy, ``EPS_TEST = 0``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rljax.algorithms.loops import multi_step_update
from rljax.algorithms.pqn import PQNBatch, pqn, q_lambda_targets
from rljax.config import check_traced_hparams
from rljax.envs.base import Environment
from rljax.envs.spaces import env_action_space
from rljax.nonfinite import all_finite
from rljax.policies.distributions import categorical
from rljax.policies.qnetwork import QNetwork, epsilon_greedy
from rljax.training.dqn import check_q_network, discrete_actions, q_network_for
from rljax.training.offpolicy import (
    OffPolicyChunks,
    chunked_program,
    env_transition,
    greedy_evaluation,
    scan_updates,
    step_semantics,
    vmap_env,
    whole_run,
)
from rljax.training.offpolicy_config import (
    PQNTrainConfig,
    check_config,
    linear_epsilon,
    offpolicy_optimizer,
    resolve_values,
)
from rljax.types import Array, PRNGKey


class PQNCarry(NamedTuple):
    """What one update hands the next: parameters, optimizer state, the ``N``
    environments' observations ``[N, ...]`` and state, their running returns ``[N]``."""

    params: Any
    opt_state: Any
    obs: Array
    env_state: Any
    episode_return: Array


def rollout_to_batch(obs: Array, actions: Array, rewards: Array, terminated: Array,
                     done: Array, bootstrap_obs: Array, last_obs: Array, *,
                     bootstrap: bool) -> PQNBatch:
    """A ``[T, N]`` rollout of :class:`rljax.training.offpolicy.EnvTransition` fields as the
    :class:`~rljax.algorithms.pqn.PQNBatch` whose Q(lambda) targets the trainer regresses on.

    With ``bootstrap``, a truncation (``done`` and not ``terminated``) is ``truncated`` and
    bootstraps from ``max_a Q(bootstrap_obs)`` (its true final observation); without it,
    ``terminated`` already holds every episode end and nothing is bootstrapped across one.

    Args:
      obs: ``[T, N, ...]``; actions, rewards, terminated, done: ``[T, N]``;
      bootstrap_obs: ``[T, N, ...]``; last_obs: ``[N, ...]`` (after the rollout).
      bootstrap: whether truncations are bootstrapped.
    """
    truncated = jnp.logical_and(done, jnp.logical_not(terminated)) if bootstrap else None
    return PQNBatch(obs, actions, rewards, terminated, last_obs, truncated,
                    bootstrap_obs if bootstrap else None)


def _pqn_program(env: Environment, config: PQNTrainConfig, env_params: Any,
                 network: QNetwork | None):
    """``(start, run_updates, network, env_params)`` of one seed's PQN run."""
    check_config(config, PQNTrainConfig)
    env_params = env.default_params if env_params is None else env_params
    num_actions = discrete_actions(env, env_params, "PQN")
    network = q_network_for(config, num_actions) if network is None else network
    num_envs, num_steps = config.num_envs, config.num_steps
    check_q_network(env, env_params, network, num_actions, num_envs)
    reset, step = vmap_env(env)
    bootstrap, has_raw_reward = step_semantics(
        env, env_params, env_action_space(env, env_params), num_envs,
        config.bootstrap_truncations, getattr(env, "name", type(env).__name__))

    def start(key: PRNGKey, hparams):
        values = resolve_values(config, hparams)
        init_key, reset_key, run_key = jax.random.split(key, 3)
        obs, env_state = reset(jax.random.split(reset_key, num_envs), env_params)
        params = network.init(init_key, obs[0])
        carry = PQNCarry(params, offpolicy_optimizer(config, values).init(params), obs,
                         env_state, jnp.zeros((num_envs,), jnp.float32))
        return carry, run_key

    def rollout(carry: PQNCarry, key: PRNGKey, epsilon: Array):
        def body(state, step_key):
            obs, env_state, episode_return = state
            act_key, env_key = jax.random.split(step_key)
            q = network.apply(carry.params, obs)
            actions = epsilon_greedy(act_key, q, epsilon)
            moved = env_transition(step, env_params, env_state, actions,
                                   jax.random.split(env_key, num_envs), episode_return,
                                   bootstrap=bootstrap, has_raw_reward=has_raw_reward)
            record = (obs, actions, moved.reward, moved.terminated, moved.done,
                      moved.bootstrap_obs, moved.return_sum, moved.episodes,
                      jnp.max(q, axis=-1))
            return (moved.next_obs, moved.env_state, moved.episode_return), record

        state = (carry.obs, carry.env_state, carry.episode_return)
        return jax.lax.scan(body, state, jax.random.split(key, num_steps))

    def one_update(carry: PQNCarry, key: PRNGKey, update: Array, hparams):
        values = resolve_values(config, hparams)
        rl = pqn(network.apply, gamma=values["gamma"], lam=values["lam"])
        optimizer = offpolicy_optimizer(config, values)
        rollout_key, update_key = jax.random.split(key)
        epsilon = linear_epsilon(config, update * num_envs * num_steps)
        (obs, env_state, episode_return), traj = rollout(carry, rollout_key, epsilon)
        (seen, actions, rewards, terminated, done, bootstrap_obs, return_sum, episodes,
         max_q) = traj
        rollout_batch = rollout_to_batch(seen, actions, rewards * values["reward_scale"],
                                         terminated, done, bootstrap_obs, obs,
                                         bootstrap=bootstrap)
        # the acting Q-values are the targets' max_q: the same params, no second pass
        targets = q_lambda_targets(network.apply, carry.params, rollout_batch,
                                   gamma=values["gamma"], lam=values["lam"], max_q=max_q)
        flat = lambda x: x.reshape(num_steps * num_envs, *x.shape[2:])  # noqa: E731
        batch = PQNBatch(flat(seen), flat(actions), targets=flat(targets))
        params, _, opt_state, metrics = multi_step_update(
            rl, optimizer, carry.params, rl.init(carry.params), carry.opt_state, batch,
            update_key, num_epochs=config.num_epochs, num_minibatches=config.num_minibatches)
        logs = {"return_sum": jnp.sum(return_sum), "episodes": jnp.sum(episodes),
                "epsilon": jnp.asarray(epsilon, jnp.float32), "loss": metrics["loss"],
                "q": metrics["q"]}
        carry = PQNCarry(params, opt_state, obs, env_state, episode_return)
        return carry, (logs, all_finite((params, metrics["loss"])))

    run_updates = scan_updates(one_update)

    return start, run_updates, network, env_params


def make_pqn_train(env: Environment, config: PQNTrainConfig | None = None,
                   env_params: Any = None, *, network: QNetwork | None = None):
    """One seed's PQN run: ``train(key, hparams=None) -> logs`` with leaves ``[U]`` (``U =
    total_steps // (N T)`` updates; see the module docstring).

    Args:
      env: an rljax environment with ``Discrete(n)`` actions and observations ``[D]``.
      config: :class:`PQNTrainConfig` (default: purejaxql's CartPole config), validated.
      env_params: the env's params (default ``env.default_params``).
      network: a :class:`~rljax.policies.QNetwork`; default the config's LayerNorm MLP.

    Returns:
      ``train(key, hparams=None)``; ``hparams`` an optional dict of scalars for the traced
      fields (``learning_rate``, ``gamma``, ``lam``, ``reward_scale``, ``adam_eps``,
      ``max_grad_norm``). It returns ``[U]`` arrays ``return_sum`` (un-scaled rewards),
      ``episodes`` (int32), ``loss``, ``q`` (means over the update's gradient steps) and
      ``epsilon``; and ``NONFINITE_STEP`` (int32 ``[]``).

    Raises:
      ValueError: one line naming the config field, the env or the network's function.
    """
    config = PQNTrainConfig() if config is None else config
    start, run_updates, _, _ = _pqn_program(env, config, env_params, network)
    return whole_run(start, run_updates, config.num_updates)


def make_pqn_chunks(env: Environment, config: PQNTrainConfig | None = None,
                    env_params: Any = None, *, updates_per_chunk: int, log_every: int = 1,
                    network: QNetwork | None = None, eval_episodes: int = 0,
                    eval_max_steps: int | None = None) -> OffPolicyChunks:
    """:func:`make_pqn_train`'s run in ``U / updates_per_chunk`` chunks, logged every
    ``log_every`` updates (as :func:`rljax.training.dqn.make_dqn_chunks`: the same updates
    and keys); ``finish`` adds ``eval_episodes`` greedy test episodes
    (``eval_return_mode`` / ``eval_finished_mode``, ``[E]``) when ``eval_episodes > 0``.

    Raises:
      ValueError: one line naming the argument or config field.
    """
    config = PQNTrainConfig() if config is None else config
    start, run_updates, network, env_params = _pqn_program(env, config, env_params, network)
    return chunked_program(
        start, run_updates, config.num_updates, updates_per_chunk=updates_per_chunk,
        log_every=log_every,
        evaluate=greedy_evaluation(env, env_params, network.apply, categorical(),
                                   eval_episodes, eval_max_steps),
        check_hparams=lambda hp: check_traced_hparams(PQNTrainConfig, config, hp))
