"""DQN over vectorised environments: one seed's whole run as one program.

The formula lives in :func:`rljax.algorithms.dqn.dqn` (the transform: double-Q, the target
network, Huber or squared TD loss); this module drives it the way rejax's ``DQN`` does
(``train_iteration``, Liesen et al. 2024), with :class:`DQNTrainConfig`
(:mod:`rljax.training.offpolicy_config`):

    each update u (an iteration):
      epsilon = 1 while u N < learning_starts, else linear_epsilon(u N)
      a = epsilon-greedy(Q_theta(s))                           [N] actions
      step the N envs once; add the N transitions to the buffer (flashbax, rljax.replay)
      if u N >= learning_starts: num_epochs times
          draw batch_size transitions uniformly; one dqn gradient step; the optimizer

so a run has ``total_steps // N`` updates, all in one ``lax.scan``. A time-limit
truncation is stored with ``terminated = False`` and ``next_obs = info["final_obs"]``
(bootstrapped, the semantics PPO uses; :mod:`rljax.training.offpolicy`).

:func:`make_dqn_chunks` cuts the same run into chunks for :class:`rljax.sweep.ChunkedSweep`
(checkpoints, progress, a configuration axis through ``hparams``); its ``finish`` plays
``eval_episodes`` greedy test episodes.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rljax.algorithms.dqn import TransitionBatch, dqn
from rljax.config import check_traced_hparams
from rljax.contracts import check_policy_head, function_name
from rljax.envs.base import Environment
from rljax.envs.spaces import Discrete, env_action_space
from rljax.nonfinite import all_finite
from rljax.policies.distributions import categorical
from rljax.policies.qnetwork import QNetwork, epsilon_greedy, mlp_q_network
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
    DQNTrainConfig,
    check_config,
    linear_epsilon,
    offpolicy_optimizer,
    resolve_values,
)
from rljax.types import Array, PRNGKey


class DQNCarry(NamedTuple):
    """What one update hands the next: parameters, the transform's state (the target
    network), the optimizer's, the replay buffer's, the ``N`` environments' observations
    ``[N, ...]`` and state, and their running returns ``[N]``."""

    params: Any
    rl_state: Any
    opt_state: Any
    buffer_state: Any
    obs: Array
    env_state: Any
    episode_return: Array


def discrete_actions(env: Environment, env_params: Any, algorithm: str) -> int:
    """The env's number of actions ``n`` (``Discrete(n)``); a one-line ``ValueError``
    naming the env for any other action space."""
    space = env_action_space(env, env_params)
    if not isinstance(space, Discrete):
        name = getattr(env, "name", type(env).__name__)
        raise ValueError(f"{name}: {algorithm} needs Discrete(n) actions, got {space!r}")
    return space.n


def q_network_for(config: Any, num_actions: int) -> QNetwork:
    """The config's Q-network: ``mlp_q_network`` with ``hidden_layers x hidden_size``,
    its ``activation``, ``layer_norm`` and (DQN) ``dueling`` head."""
    return mlp_q_network(num_actions, (config.hidden_size,) * config.hidden_layers,
                         activation=config.activation, layer_norm=config.layer_norm,
                         dueling=getattr(config, "dueling", False))


def check_q_network(env: Environment, env_params: Any, network: QNetwork, num_actions: int,
                    num_envs: int) -> None:
    """At trace time: ``network.apply(params, obs [N, ...])`` must give Q-values ``[N,
    n]`` for the env's ``Discrete(n)`` (one-line error naming the network's function and
    both shapes)."""
    keys = jax.random.split(jax.random.key(0), num_envs)

    def shapes(keys):
        obs, _ = vmap_env(env)[0](keys, env_params)
        return network.apply(network.init(keys[0], obs[0]), obs)

    q = jax.eval_shape(shapes, keys)
    check_policy_head(function_name(network.apply), "categorical", q, Discrete(num_actions),
                      getattr(env, "name", type(env).__name__), (num_envs,), role="Q-network",
                      outputs="Q-values")


def _dqn_program(env: Environment, config: DQNTrainConfig, env_params: Any,
                 network: QNetwork | None):
    """``(start, run_updates, network, env_params)`` of one seed's DQN run (see
    :func:`rljax.training.offpolicy.chunked_program` for the two functions' contract)."""
    check_config(config, DQNTrainConfig)
    env_params = env.default_params if env_params is None else env_params
    num_actions = discrete_actions(env, env_params, "DQN")
    network = q_network_for(config, num_actions) if network is None else network
    num_envs = config.num_envs
    check_q_network(env, env_params, network, num_actions, num_envs)
    reset, step = vmap_env(env)
    bootstrap, has_raw_reward = step_semantics(
        env, env_params, env_action_space(env, env_params), num_envs,
        config.bootstrap_truncations, getattr(env, "name", type(env).__name__))
    buffer = replay_buffer(config.buffer_size, config.batch_size)

    def transforms(hparams):
        values = resolve_values(config, hparams)
        rl = dqn(network.apply, gamma=values["gamma"], double_q=config.double_q,
                 loss=config.loss, target_update_period=config.target_update_period,
                 tau=values["tau"])
        return rl, offpolicy_optimizer(config, values)

    def start(key: PRNGKey, hparams):
        rl, optimizer = transforms(hparams)
        init_key, reset_key, run_key = jax.random.split(key, 3)
        obs, env_state = reset(jax.random.split(reset_key, num_envs), env_params)
        params = network.init(init_key, obs[0])
        example = TransitionBatch(obs[0], jnp.int32(0), jnp.float32(0.0), jnp.bool_(False),
                                  obs[0])
        carry = DQNCarry(params, rl.init(params), optimizer.init(params), buffer.init(example),
                         obs, env_state, jnp.zeros((num_envs,), jnp.float32))
        return carry, run_key

    def one_update(carry: DQNCarry, key: PRNGKey, update: Array, hparams):
        rl, optimizer = transforms(hparams)
        act_key, step_key, learn_key = jax.random.split(key, 3)
        steps_done = update * num_envs
        learning = steps_done >= config.learning_starts
        epsilon = jnp.where(learning, linear_epsilon(config, steps_done), 1.0)
        actions = epsilon_greedy(act_key, network.apply(carry.params, carry.obs), epsilon)
        moved = env_transition(step, env_params, carry.env_state, actions,
                               jax.random.split(step_key, num_envs), carry.episode_return,
                               bootstrap=bootstrap, has_raw_reward=has_raw_reward)
        buffer_state = buffer.add(carry.buffer_state, TransitionBatch(
            carry.obs, actions, moved.reward, moved.terminated, moved.bootstrap_obs))

        (params, rl_state, opt_state), metrics = replay_gradient_steps(
            rl, optimizer, buffer, buffer_state, (carry.params, carry.rl_state, carry.opt_state),
            learn_key, num_epochs=config.num_epochs, learning=learning, metrics=("loss", "q"),
            keyed=False)
        logs = {"return_sum": moved.return_sum, "episodes": moved.episodes,
                "epsilon": jnp.asarray(epsilon, jnp.float32), **metrics}
        carry = DQNCarry(params, rl_state, opt_state, buffer_state, moved.next_obs,
                         moved.env_state, moved.episode_return)
        return carry, (logs, all_finite((params, metrics["loss"])))

    run_updates = scan_updates(one_update)

    return start, run_updates, network, env_params


def make_dqn_train(env: Environment, config: DQNTrainConfig | None = None,
                   env_params: Any = None, *, network: QNetwork | None = None):
    """One seed's DQN run: ``train(key, hparams=None) -> logs`` with leaves ``[U]`` (``U =
    total_steps // num_envs`` updates; see the module docstring).

    Args:
      env: an rljax environment with ``Discrete(n)`` actions and array observations
        ``[D]`` (e.g. ``rljax.envs.registry.make_env("CartPole-v1")``).
      config: :class:`DQNTrainConfig` (default: rejax's CartPole row), validated here.
      env_params: the env's params (default ``env.default_params``).
      network: a :class:`~rljax.policies.QNetwork` (``init(key, obs [D])``, ``apply(params,
        obs [N, D]) -> q [N, n]``); default the config's MLP.

    Returns:
      ``train(key, hparams=None)``; ``hparams`` an optional dict of scalars for the traced
      fields (``learning_rate``, ``gamma``, ``tau``, ``adam_eps``, ``max_grad_norm``;
      traced under a configuration sweep). It returns ``[U]`` arrays: ``return_sum``
      (summed returns of the episodes that ended in the update), ``episodes`` (int32),
      ``loss`` and ``q`` (means over the update's gradient steps, 0 before
      ``learning_starts``), ``epsilon``; and ``NONFINITE_STEP`` (int32 ``[]``, the first
      update whose parameters or loss were non-finite, -1 if none).

    Raises:
      ValueError: one line naming the config field, the env (actions not ``Discrete``)
        or the network's function (Q-values not ``[N, n]``).
    """
    config = DQNTrainConfig() if config is None else config
    start, run_updates, _, _ = _dqn_program(env, config, env_params, network)
    return whole_run(start, run_updates, config.num_updates)


def make_dqn_chunks(env: Environment, config: DQNTrainConfig | None = None,
                    env_params: Any = None, *, updates_per_chunk: int, log_every: int = 1,
                    network: QNetwork | None = None, eval_episodes: int = 0,
                    eval_max_steps: int | None = None) -> OffPolicyChunks:
    """:func:`make_dqn_train`'s run in ``U / updates_per_chunk`` chunks, logged every
    ``log_every`` updates (:func:`rljax.training.chunking.chunked_program`: the updates and
    keys of ``make_dqn_train``); ``finish`` adds ``eval_episodes`` greedy
    test episodes with the final parameters (``eval_return_mode`` / ``eval_finished_mode``,
    ``[E]``) when ``eval_episodes > 0``.

    Raises:
      ValueError: one line naming the argument or config field.
    """
    config = DQNTrainConfig() if config is None else config
    start, run_updates, network, env_params = _dqn_program(env, config, env_params, network)
    return chunked_program(
        start, run_updates, config.num_updates, updates_per_chunk=updates_per_chunk,
        log_every=log_every,
        evaluate=greedy_evaluation(env, env_params, network.apply, categorical(), eval_episodes,
                                   eval_max_steps),
        check_hparams=lambda hp: check_traced_hparams(DQNTrainConfig, config, hp))
