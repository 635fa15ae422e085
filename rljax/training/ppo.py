"""PPO over vectorised environments: one seed's whole training run as one program.

The formula lives in :mod:`rljax.algorithms.ppo` (the transform); this module drives it,
with :class:`PPOTrainConfig` and the optimizer it builds in :mod:`rljax.training.ppo_config`
(re-exported here).
:func:`make_ppo_train` builds ``train(key) -> per-update logs`` for one seed: ``N``
environments stepped ``T`` times per update (a ``[T, N]`` rollout), GAE, then the
multi-step update (``algorithms.loops.multi_step_update``), all inside one ``lax.scan``
over updates, so a seed's whole run is a single jitted program with no host work per
update (the defaults are those of CleanRL's ``ppo.py`` and PureJaxRL for CartPole). Both
report the first update whose parameters or loss went non-finite
(``rljax.nonfinite.NONFINITE_STEP``).

Discrete and continuous actions share the code: the actor-critic's ``distribution``
(:mod:`rljax.policies.distributions`) samples and scores actions. A Gaussian sample is
stored and scored *unclipped*; only the action handed to the environment is clipped to
its :class:`~rljax.envs.spaces.Box` (CleanRL ``ppo_continuous_action.py``, PureJaxRL,
rejax). The trainer checks the head against the env's action space before compiling.

The ``N`` environments are stepped under ``jax.vmap(..., axis_name=ENV_AXIS)``, so
wrappers with running statistics (``NormalizeObservation``, ``NormalizeReward`` built with
``axis_name=ENV_AXIS``) merge them across the ``N`` environments of a seed, never across
seeds. Episode returns are accumulated from ``info["raw_reward"]`` where a wrapper
provides it (the reward before normalisation), else from the reward.

:func:`make_ppo_chunks` cuts the same run into chunks of updates, ``init`` /
``advance`` / ``finish`` for :class:`rljax.sweep.ChunkedSweep` (checkpoints and progress
between chunks), and logs one row per ``log_every`` updates, so long runs keep bounded
logs. The two share the update code and its keys.

Both also take the traced fields of :class:`PPOTrainConfig` as a traced ``hparams`` dict
(``train(key, hparams)``, ``init(key, hparams)``, ...), so a sweep over configurations
(:class:`rljax.sweep.Sweep` with a ``ConfigTable``) runs every value in one compiled
program; a name missing from ``hparams`` keeps the config's constant.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rljax.advantages import generalized_advantage_estimation
from rljax.algorithms.loops import multi_step_update
from rljax.algorithms.ppo import PPOBatch
from rljax.contracts import check_actor_critic, check_env, function_name, warn_no_final_obs
from rljax.envs.base import Environment
from rljax.envs.batched import ENV_AXIS, vmap_env
from rljax.envs.spaces import Box, env_action_space
from rljax.nonfinite import NONFINITE_STEP, all_finite, first_nonfinite_step
from rljax.policies.distributions import (
    ActionDistribution,
    check_supports,
    policy_distribution,
)
from rljax.training.chunking import (  # noqa: F401  (SUMMED_LOGS re-exported)
    SUMMED_LOGS,
    ChunkedRun,
    ChunkState,
    check_chunking,
    chunked_program,
)
from rljax.training.evaluation import episode_limit, evaluate_policy
from rljax.training.ppo_config import (  # noqa: F401  (re-exported)
    GRAD_CLIPS,
    PPOTrainConfig,
    check_hparams,
    check_train_config,
    ppo_optimizer,
    ppo_transform,
    resolve_hparams,
)
from rljax.types import Array, Params, PRNGKey


class PPORollout(NamedTuple):
    """A ``[T, N]`` rollout (leaves lead with ``[T, N]``)."""

    obs: Array
    actions: Array
    log_probs: Array
    values: Array
    rewards: Array
    terminated: Array
    truncated: Array
    final_obs: Array | None  # ``None`` when truncations are not bootstrapped


class PPOCarry(NamedTuple):
    """What one update hands the next: parameters, optimizer state, the environments'
    current observations/states ``[N, ...]`` and each environment's running episode
    return ``[N]``."""

    params: Params
    rl_state: Any
    opt_state: Any
    obs: Array
    env_state: Any
    episode_return: Array


def make_ppo_train(
    env: Environment,
    actor_critic: Any,
    config: PPOTrainConfig | None = None,
    env_params: Any = None,
    *,
    init_params: Callable[[PRNGKey, Array], Params] | None = None,
) -> Callable[..., dict[str, Array]]:
    """One seed's PPO run: ``train(key, hparams=None) -> logs`` with leaves ``[U]``
    (U updates).

    Each update: step the ``N`` environments ``T`` times with the current policy
    (auto-reset; a truncated episode is bootstrapped from the value of its final
    observation, ``info["final_obs"]``, when the environment provides it), GAE over the
    ``[T, N]`` rollout, then ``num_epochs x num_minibatches`` PPO steps
    (``multi_step_update``) with :func:`ppo_optimizer`. Episode returns are accumulated
    in the scan carry, so only per-update aggregates leave the program. Update ``u`` draws
    its randomness from ``fold_in(run_key, u)``, so :func:`make_ppo_chunks` runs the same
    updates in pieces.

    Args:
      env: an environment whose action space the policy head supports (``Discrete`` for a
        categorical head, ``Box`` of shape ``(A,)`` for a Gaussian one; a Gaussian action
        is clipped to the box in the env step only); observations must be arrays.
      actor_critic: anything with ``init(key, obs) -> params`` and
        ``apply(params, obs [B, ...]) -> (dist_params, value [B])`` (e.g.
        ``policies.mlp_actor_critic``, ``policies.mlp_gaussian_actor_critic`` or
        ``policies.actor_critic_for(env)``), optionally with a ``distribution``
        (:class:`~rljax.policies.distributions.ActionDistribution`; categorical when
        absent); its ``init`` should be safe under vmap (see ``policies.sequential_init``).
      config: :class:`PPOTrainConfig` (default: its defaults), validated here
        (``ValueError`` naming the field).
      env_params: environment parameters (default ``env.default_params``).
      init_params: overrides ``actor_critic.init``.

    Returns:
      ``train(key, hparams=None)``: ``hparams`` an optional dict of scalars (traced under
      a configuration sweep) for some of :class:`PPOTrainConfig`'s traced fields, read
      inside the program in place of the config's values (a name it lacks keeps the config's
      constant; an unknown name raises ``ValueError``). It returns a dict of ``[U]``
      arrays: ``return_sum`` (sum of the
      returns of episodes that finished during the update), ``episodes`` (how many
      finished, int32), ``loss``, ``policy_loss``, ``value_loss``, ``entropy``,
      ``clip_fraction``, ``approx_kl`` (means over the update's gradient steps); and
      ``rljax.nonfinite.NONFINITE_STEP``, an ``int32 []``: the first update after which
      the parameters or the loss were non-finite (NaN/inf), ``-1`` if none.

    Raises:
      ValueError: one line naming the env when the head does not support its action space
        or the network cannot take its observations (e.g. an MLP on ``[10, 5]``).
    """
    config = PPOTrainConfig() if config is None else config
    start, run_updates = _ppo_program(env, actor_critic, config, env_params, init_params)

    def train(key: PRNGKey, hparams: Mapping[str, Array] | None = None) -> dict[str, Array]:
        carry, run_key = start(key, hparams)
        _, logs, finite = run_updates(carry, run_key, jnp.int32(0), config.num_updates,
                                      hparams)
        return {**logs, NONFINITE_STEP: first_nonfinite_step(finite)}

    return train


PPOChunkState = ChunkState
"""One seed's PPO run between chunks (:func:`make_ppo_chunks`): the shared
:class:`rljax.training.chunking.ChunkState`, whose ``carry`` is a :class:`PPOCarry`."""

PPOChunks = ChunkedRun
"""A PPO run cut into chunks (:func:`make_ppo_chunks`): the shared
:class:`rljax.training.chunking.ChunkedRun` (``init, advance, finish, num_chunks``)."""


def make_ppo_chunks(
    env: Environment,
    actor_critic: Any,
    config: PPOTrainConfig | None = None,
    env_params: Any = None,
    *,
    updates_per_chunk: int,
    log_every: int = 1,
    init_params: Callable[[PRNGKey, Array], Params] | None = None,
    eval_episodes: int = 0,
    eval_max_steps: int | None = None,
) -> PPOChunks:
    """:func:`make_ppo_train`'s run in ``U / updates_per_chunk`` chunks, logged every
    ``log_every`` updates.

    ``init(key)`` then ``num_chunks`` calls of ``advance`` run the same updates, with the
    same keys, as ``make_ppo_train(...)(key)`` (the update code is shared). Each chunk's
    logs are aggregated over windows of ``W = log_every`` updates: the window
    ``[w W, (w + 1) W)`` holds

        return_sum = sum_u return_sum[u],   episodes = sum_u episodes[u],
        m = (1/W) sum_u m[u]   for the loss metrics m,

    so a seed's logs hold ``U / W`` rows however long the run (``W = 1``: exactly
    ``make_ppo_train``'s per-update logs).

    Args:
      env, actor_critic, config, env_params, init_params: as for :func:`make_ppo_train`.
      updates_per_chunk: C updates per ``advance`` call; must divide
        ``config.num_updates``.
      log_every: W updates per logged row; must divide ``updates_per_chunk``.
      eval_episodes: E >= 0 test episodes ``finish`` runs with the final parameters
        (:func:`rljax.training.evaluation.evaluate_policy`, once sampling and once with
        the mode; key ``fold_in(run_key, U)``, one past the last update's); 0: none.
      eval_max_steps: steps per test episode at most (default: the env's
        ``max_steps_in_episode``).

    Returns:
      :class:`PPOChunks` ``(init, advance, finish, num_chunks)``, one seed each:
      ``init(key, hparams=None) -> PPOChunkState``; ``advance(state, hparams=None) ->
      (state, logs)`` with logs of ``[C / W]`` arrays under ``make_ppo_train``'s log keys
      (``episodes`` int32); ``finish(state, hparams=None) -> {NONFINITE_STEP: int32 []}``
      (first non-finite update, ``-1`` if none), plus, when ``eval_episodes > 0``,
      float32 ``[E]`` ``eval_return_sampled`` / ``eval_return_mode`` and bool ``[E]``
      ``eval_finished_sampled`` / ``eval_finished_mode``; ``num_chunks = U / C``. ``hparams`` (the
      same in every call of a run, e.g. :class:`rljax.sweep.ChunkedSweep` with
      ``configs``) is read as in :func:`make_ppo_train`, so ``init(key, hp)`` then the
      chunks run bitwise what ``make_ppo_train(...)(key, hp)`` runs.

    Raises:
      ValueError: one line naming the argument or ``config`` field.
    """
    config = PPOTrainConfig() if config is None else config
    check_train_config(config)
    num_updates = config.num_updates
    check_chunking(num_updates, updates_per_chunk, log_every)
    if isinstance(eval_episodes, bool) or not isinstance(eval_episodes, int) or eval_episodes < 0:
        raise ValueError(f"eval_episodes: must be an integer >= 0, got {eval_episodes!r}")
    if eval_episodes:
        eval_params = env.default_params if env_params is None else env_params
        if eval_max_steps is None:
            eval_max_steps = episode_limit(env, eval_params)
        elif (isinstance(eval_max_steps, bool) or not isinstance(eval_max_steps, int)
              or eval_max_steps < 1):
            raise ValueError(f"eval_max_steps: must be an integer >= 1, got "
                             f"{eval_max_steps!r}")
    start, run_updates = _ppo_program(env, actor_critic, config, env_params, init_params)

    def evaluate(carry: PPOCarry, key: PRNGKey) -> dict[str, Array]:
        out = {}
        for mode in ("sampled", "mode"):
            result = evaluate_policy(
                env, actor_critic, carry.params, key, num_episodes=eval_episodes,
                max_steps=eval_max_steps, deterministic=mode == "mode",
                env_params=env_params, trained_env_state=carry.env_state)
            out[f"eval_return_{mode}"] = result.returns
            out[f"eval_finished_{mode}"] = result.finished
        return out

    return chunked_program(start, run_updates, num_updates,
                           updates_per_chunk=updates_per_chunk, log_every=log_every,
                           evaluate=evaluate if eval_episodes else None,
                           check_hparams=lambda hparams: check_hparams(config, hparams))


def _ppo_program(
    env: Environment,
    actor_critic: Any,
    config: PPOTrainConfig,
    env_params: Any,
    init_params: Callable[[PRNGKey, Array], Params] | None,
) -> tuple[Callable, Callable]:
    """The pieces both :func:`make_ppo_train` and :func:`make_ppo_chunks` run.

    Returns ``(start, run_updates)``: ``start(key, hparams) -> (carry: PPOCarry,
    run_key)`` (parameters, optimizer and ``N`` environments initialised), and
    ``run_updates(carry, run_key, first, count, hparams) -> (carry, logs, finite)``
    running updates ``first .. first + count - 1`` (``first`` an int32 scalar, may be
    traced; ``count`` a Python int) in one ``lax.scan``: ``logs`` are ``[count]`` arrays
    and ``finite`` is ``bool [count]``, whether the parameters and the loss after each
    update are finite. ``hparams`` (``None`` or a dict of scalars, see
    :func:`resolve_hparams`) supplies the traced hyperparameters; the transform and the
    optimizer are built from them inside the traced function.
    """
    check_train_config(config)
    env_params = env.default_params if env_params is None else env_params
    init_params = actor_critic.init if init_params is None else init_params
    apply = actor_critic.apply
    distribution = policy_distribution(actor_critic)
    env_name = getattr(env, "name", type(env).__name__)
    action_space = env_action_space(env, env_params)
    if action_space is not None:
        check_supports(distribution, action_space, env_name)
    clip_box = action_space if isinstance(action_space, Box) else None

    def transforms(hparams):
        values = resolve_hparams(config, hparams)
        rl = ppo_transform(apply, config, values, distribution)
        return rl, ppo_optimizer(config, hparams), values

    num_envs, num_steps = config.num_envs, config.num_steps
    reset, step = vmap_env(env)
    has_final_obs, has_raw_reward = _step_info_keys(env, env_params, action_space, num_envs)
    bootstrap_truncations = bootstrap_possible(config, has_final_obs, env_name)
    _check_policy_shapes(env, env_params, init_params, apply, num_envs, env_name, distribution,
                         action_space)

    def rollout(params, obs, env_state, episode_return, key):
        noise_key, env_key = jax.random.split(key)
        noise = distribution.noise(noise_key, (num_steps, num_envs))
        env_keys = jax.random.split(env_key, (num_steps, num_envs))

        def body(carry, inputs):
            obs, env_state, episode_return, return_sum, episodes = carry
            u, keys = inputs
            action, log_prob, value, to_env = policy_step(apply, distribution, clip_box,
                                                          params, obs, u)
            next_obs, env_state, reward, terminated, truncated, info = step(
                keys, env_state, to_env, env_params)
            reward = jnp.asarray(reward, jnp.float32)
            done = jnp.logical_or(terminated, truncated)
            logged = jnp.asarray(info["raw_reward"], jnp.float32) if has_raw_reward else reward
            episode_return = episode_return + logged
            return_sum = return_sum + jnp.sum(jnp.where(done, episode_return, 0.0))
            episodes = episodes + jnp.sum(done, dtype=jnp.int32)
            episode_return = jnp.where(done, 0.0, episode_return)
            # the observation the step ended on, kept only when it is bootstrapped
            final_obs = info["final_obs"] if bootstrap_truncations else None
            transition = PPORollout(obs, action, log_prob, value, reward, terminated,
                                    truncated, final_obs)
            return (next_obs, env_state, episode_return, return_sum, episodes), transition

        init = (obs, env_state, episode_return, jnp.float32(0.0), jnp.int32(0))
        (obs, env_state, episode_return, return_sum, episodes), traj = jax.lax.scan(
            body, init, (noise, env_keys))
        return traj, obs, env_state, episode_return, return_sum, episodes

    def one_update(carry: PPOCarry, key: PRNGKey, hparams):
        rl, optimizer, values = transforms(hparams)
        rollout_key, update_key = jax.random.split(key)
        traj, obs, env_state, episode_return, return_sum, episodes = rollout(
            carry.params, carry.obs, carry.env_state, carry.episode_return, rollout_key)
        _, last_value = apply(carry.params, obs)
        truncation_values = None
        if bootstrap_truncations:
            _, truncation_values = apply(carry.params, traj.final_obs)
        advantages, returns = generalized_advantage_estimation(
            traj.rewards, traj.values, last_value, traj.terminated, gamma=values["gamma"],
            lam=values["lam"], truncated=traj.truncated, truncation_values=truncation_values)
        flat = lambda x: x.reshape(num_steps * num_envs, *x.shape[2:])  # noqa: E731
        batch = PPOBatch(obs=flat(traj.obs), actions=flat(traj.actions),
                         old_log_probs=flat(traj.log_probs), advantages=flat(advantages),
                         returns=flat(returns), old_values=flat(traj.values))
        params, rl_state, opt_state, metrics = multi_step_update(
            rl, optimizer, carry.params, carry.rl_state, carry.opt_state, batch, update_key,
            num_epochs=config.num_epochs, num_minibatches=config.num_minibatches)
        logs = {"return_sum": return_sum, "episodes": episodes, **metrics}
        finite = all_finite((params, metrics["loss"]))
        carry = PPOCarry(params, rl_state, opt_state, obs, env_state, episode_return)
        return carry, (logs, finite)

    def start(key: PRNGKey, hparams) -> tuple[PPOCarry, PRNGKey]:
        rl, optimizer, _ = transforms(hparams)
        init_key, reset_key, run_key = jax.random.split(key, 3)
        obs, env_state = reset(jax.random.split(reset_key, num_envs), env_params)
        params = init_params(init_key, obs[0])
        carry = PPOCarry(params, rl.init(params), optimizer.init(params), obs, env_state,
                         jnp.zeros((num_envs,), jnp.float32))
        return carry, run_key

    def run_updates(carry: PPOCarry, run_key: PRNGKey, first: Array, count: int, hparams):
        # fold_in(run_key, u) is split(run_key, U)[u] under JAX's (default) partitionable
        # threefry, so runs keep the bits they had when the keys were split up front.
        updates = jnp.asarray(first, jnp.int32) + jnp.arange(count, dtype=jnp.int32)
        keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(run_key, updates)
        carry, (logs, finite) = jax.lax.scan(
            lambda c, k: one_update(c, k, hparams), carry, keys)
        return carry, logs, finite

    return start, run_updates


def policy_step(apply: Callable, distribution: ActionDistribution, clip_box: Box | None,
                params: Params, obs: Array, noise: Array) -> tuple[Array, Array, Array, Array]:
    """One acting step of ``N`` environments: sample, score, and map to the env's action.

    Args:
      apply: ``apply(params, obs [N, ...]) -> (dist_params, value [N])``.
      distribution: the head's :class:`~rljax.policies.distributions.ActionDistribution`.
      clip_box: the env's ``Box`` action space (``None`` for a discrete one).
      params: the actor-critic's parameters.
      obs: ``[N, ...]`` observations.
      noise: ``[N]`` (categorical) or ``[N, A]`` (Gaussian) from ``distribution.noise``.

    Returns:
      ``(action, log_prob [N], value [N], env_action)``: ``action`` is the raw sample
      (``[N]`` int32 or ``[N, A]``) that PPO stores and scores, ``log_prob`` its
      log-probability; ``env_action`` is what the environment receives:
      ``distribution.env_action(action)`` clipped to ``clip_box``'s bounds.
    """
    dist_params, value = apply(params, obs)
    action = distribution.sample(noise, dist_params)
    log_prob = distribution.log_prob(dist_params, action)
    to_env = distribution.env_action(action)
    if clip_box is not None:
        to_env = clip_box.clip(to_env)
    return action, log_prob, value, to_env


def _example_action(space: Any) -> Array:
    """A zero action of the space's shape and dtype (int32 ``[]`` for an env that
    declares no space), for abstract evaluation."""
    return jnp.int32(0) if space is None else jnp.zeros(space.shape, space.dtype)


def _step_info_keys(env: Environment, env_params: Any, space: Any,
                    num_envs: int) -> tuple[bool, bool]:
    """Whether ``env.step``'s info carries ``final_obs`` and ``raw_reward`` (checked
    abstractly, no compute, under the same named vmap the trainer uses), after checking
    the env's reset / step outputs (:func:`rljax.contracts.check_env`: one-line
    ``ContractError`` naming the env's function on a mismatch)."""
    _, info = check_env(env, env_params, _example_action(space), num_envs=num_envs,
                        axis_name=ENV_AXIS)
    if info is None:
        return False, False
    return "final_obs" in info, "raw_reward" in info


def bootstrap_possible(config: PPOTrainConfig, has_final_obs: bool, env_name: str) -> bool:
    """Whether truncations are bootstrapped: ``config.bootstrap_truncations`` and the env
    gives ``info["final_obs"]``; a config that asks for it from an env that cannot warns
    (:class:`rljax.contracts.TruncationBootstrapWarning`) instead of dropping it silently."""
    if config.bootstrap_truncations and not has_final_obs:
        warn_no_final_obs(env_name)
    return config.bootstrap_truncations and has_final_obs


def _check_policy_shapes(env: Environment, env_params: Any, init_params: Callable,
                         apply: Callable, num_envs: int, env_name: str,
                         distribution: ActionDistribution, action_space: Any) -> None:
    """Check the actor-critic on a ``[N, *obs]`` batch of the env's observations, at trace
    time (:func:`rljax.contracts.check_actor_critic`): ``apply`` returns ``(dist_params,
    value [N])`` with a head that matches the env's action space (logits ``[N, n]`` for
    ``Discrete(n)``, a Gaussian ``[N, D]`` for a ``Box`` of shape ``(D,)``). One-line
    ``ValueError`` naming the env (an MLP on ``[10, 5]`` observations) or ``apply``."""
    keys = jax.random.split(jax.random.key(0), num_envs)

    def shapes(keys):
        obs, _ = vmap_env(env)[0](keys, env_params)
        params = init_params(keys[0], obs[0])
        return obs, apply(params, obs)

    obs, out = jax.eval_shape(shapes, keys)
    values = out[1] if isinstance(out, tuple | list) and len(out) == 2 else None
    obs_shape = list(getattr(obs, "shape", (num_envs,))[1:])
    if values is not None and len(obs_shape) > 1 and \
            getattr(values, "shape", None) != (num_envs,):
        raise ValueError(
            f"{env_name}: the actor-critic maps observations {obs_shape} to values "
            f"of shape {list(getattr(values, 'shape', ()))[1:]} per env, expected []; an MLP "
            "needs observations [D]: wrap the env in FlattenObservation")
    check_actor_critic(function_name(apply), out, distribution.name, action_space, env_name,
                       (num_envs,))


def _has_final_obs(env: Environment, env_params: Any) -> bool:
    """Whether ``env.step``'s info carries ``final_obs`` (checked abstractly, no compute)."""
    space = env_action_space(env, env_params)
    return _step_info_keys(env, env_params, space, 1)[0]
