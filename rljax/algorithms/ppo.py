"""PPO (Schulman et al., 2017) as an :class:`~rljax.algorithms.base.RLTransform`, plus a
one-seed training function for vectorised environments.

For a minibatch of ``B`` samples the transform returns the gradient of

    L(theta) = L_clip + c_v L_V - c_H H

with ``r = pi_theta(a|s) / pi_old(a|s)`` and advantages ``A`` (normalised per minibatch
to zero mean and unit standard deviation when ``normalize_advantages``):

    L_clip = mean_b -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)     (PPO-clip, eq. 7)
    L_V    = mean_b 0.5 (V_theta(s) - R)^2       (or the clipped variant, ``value_clip``)
    H      = mean_b entropy(pi_theta(.|s))

(``losses.clipped_surrogate_loss``, ``losses.value_loss``, ``losses.categorical_entropy``).
Returns ``R`` and advantages come from GAE (``advantages.generalized_advantage_estimation``).
Epochs x minibatches are ``algorithms.loops.multi_step_update``, shared with GRPO; any optax
optimizer applies the gradients.

:func:`make_ppo_train` builds ``train(key) -> per-update logs`` for one seed: ``N``
environments stepped ``T`` times per update (a ``[T, N]`` rollout), GAE, then the
multi-step update, all inside one ``lax.scan`` over updates, so a seed's whole run is a
single jitted program with no host work per update (the defaults are those of CleanRL's
``ppo.py`` and PureJaxRL for CartPole). Both report the first update whose parameters or
loss went non-finite (``rljax.nonfinite.NONFINITE_STEP``).

:func:`make_ppo_chunks` cuts the same run into chunks of updates, ``init`` /
``advance`` / ``finish`` for :class:`rljax.sweep.ChunkedSweep` (checkpoints and progress
between chunks), and logs one row per ``log_every`` updates, so long runs keep bounded
logs. The two share the update code and its keys.

Both also take the numeric hyperparameters of :data:`TRACEABLE_HPARAMS` as a traced
``hparams`` dict (``train(key, hparams)``, ``init(key, hparams)``, ...), so a sweep over
configurations (:class:`rljax.sweep.Sweep` with a ``ConfigTable``) runs every value in
one compiled program; a name missing from ``hparams`` keeps the config's constant.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax
from flax import struct

from rljax.advantages import generalized_advantage_estimation
from rljax.algorithms.base import RLTransform
from rljax.algorithms.loops import multi_step_update
from rljax.envs.base import Environment
from rljax.losses import categorical_entropy, check_clip, clipped_surrogate_loss, value_loss
from rljax.nonfinite import NONFINITE_STEP, all_finite, first_nonfinite_step
from rljax.policies.sampling import categorical_from_uniform, categorical_log_prob
from rljax.types import Array, Params, PRNGKey


@struct.dataclass
class PPOBatch:
    """A (mini)batch of ``B`` samples for the PPO update; every leaf leads with ``[B]``.

    A sample is one action (``[B]``) or, for token sequences (language models), one
    sequence of ``T`` actions (``[B, T]``, every token a PPO sample, weighted by ``mask``).

    Attributes:
      obs: ``[B, ...]`` observations.
      actions: ``[B]`` (or ``[B, T]``) int actions taken.
      old_log_probs: like ``actions``: ``log pi_old(a|s)`` at sampling time.
      advantages: like ``actions``: advantage estimates (e.g. GAE).
      returns: like ``actions``: value targets (``advantages + old_values`` for GAE).
      old_values: like ``actions``: ``V_old(s)`` at sampling time (for value clipping).
      mask: optional, like ``actions``: 1 for real samples/tokens, 0 for padding.
    """

    obs: Array
    actions: Array
    old_log_probs: Array
    advantages: Array
    returns: Array
    old_values: Array
    mask: Array | None = None


class PPOState(NamedTuple):
    """PPO keeps no state between updates (optax's ``EmptyState`` shape)."""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_nonnegative(name: str, value: Any) -> None:
    if _is_number(value) and not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name}: must be a finite number >= 0, got {value!r}")


def check_ppo_args(
    clip_epsilon: Any,
    clip_epsilon_high: Any = None,
    dual_clip: Any = None,
    value_coef: Any = 0.5,
    entropy_coef: Any = 0.01,
    value_clip: Any = None,
) -> None:
    """Validate PPO's hyperparameters (Python numbers only; traced sweep values pass).

    Raises a one-line ``ValueError`` naming the argument: ``clip_epsilon > 0``,
    ``clip_epsilon_high >= clip_epsilon``, ``dual_clip > 1``, ``value_coef >= 0``,
    ``entropy_coef >= 0``, ``value_clip > 0``.
    """
    check_clip(clip_epsilon, clip_epsilon_high)
    if _is_number(clip_epsilon) and not math.isfinite(clip_epsilon):
        raise ValueError(f"clip_epsilon: must be a finite number > 0, got {clip_epsilon!r}")
    if dual_clip is not None and _is_number(dual_clip) and not dual_clip > 1:
        raise ValueError(f"dual_clip: must be > 1, got {dual_clip!r}")
    _check_nonnegative("value_coef", value_coef)
    _check_nonnegative("entropy_coef", entropy_coef)
    if value_clip is not None and _is_number(value_clip) and not (
        math.isfinite(value_clip) and value_clip > 0
    ):
        raise ValueError(f"value_clip: must be a finite number > 0 (or None), got {value_clip!r}")


def normalize(x: Array, mask: Array | None = None, epsilon: float = 1e-8) -> Array:
    """``(x - mean) / (std + epsilon)`` over the (masked) entries; population std.

    Args:
      x: ``[B]``.
      mask: optional ``[B]``; masked-out entries do not enter the moments.
      epsilon: added to the std.

    Returns:
      ``[B]``.
    """
    if mask is None:
        return (x - jnp.mean(x)) / (jnp.std(x) + epsilon)
    m = mask.astype(x.dtype)
    count = jnp.maximum(jnp.sum(m), 1.0)
    mean = jnp.sum(x * m) / count
    std = jnp.sqrt(jnp.sum(jnp.square(x - mean) * m) / count)
    return (x - mean) / (std + epsilon)


def ppo(
    actor_critic_apply: Callable[[Params, Array], tuple[Array, Array]],
    *,
    clip_epsilon: float | Array = 0.2,
    clip_epsilon_high: float | Array | None = None,
    dual_clip: float | Array | None = None,
    value_coef: float | Array = 0.5,
    entropy_coef: float | Array = 0.01,
    value_clip: float | Array | None = None,
    normalize_advantages: bool = True,
) -> RLTransform:
    """Build the PPO transform (see the module docstring for the loss).

    Args:
      actor_critic_apply: ``apply(params, obs [B, ...]) -> (logits [B, A], value [B])``
        (a shared torso or two networks; e.g. ``policies.mlp_actor_critic(...).apply``);
        for sequence batches ``(logits [B, T, A], value [B, T])``.
      clip_epsilon: eps_low of the ratio clip, > 0 (0.2).
      clip_epsilon_high: eps_high (DAPO's clip-higher), >= ``clip_epsilon``; default
        symmetric.
      dual_clip: optional dual-clip constant ``c > 1`` (Ye et al., 2020).
      value_coef: ``c_v`` >= 0 (0.5).
      entropy_coef: ``c_H`` >= 0 (0.01).
      value_clip: clip range of the value update around ``old_values`` (PPO2's value
        clipping; the baselines/CleanRL default uses ``clip_epsilon``), or ``None``.
      normalize_advantages: normalise advantages per minibatch.

    Returns:
      ``RLTransform`` whose ``update(params, state, batch: PPOBatch, key=None)`` returns
      ``(grads, state, metrics)`` with metrics ``loss``, ``policy_loss``, ``value_loss``,
      ``entropy``, ``clip_fraction``, ``approx_kl``.

    Raises:
      ValueError: at build time, naming the argument, for ``clip_epsilon <= 0`` and the
        other checks of :func:`check_ppo_args`.
    """
    check_ppo_args(clip_epsilon, clip_epsilon_high, dual_clip, value_coef, entropy_coef,
                   value_clip)

    def init(params: Params) -> PPOState:
        del params
        return PPOState()

    def update(params: Params, state: PPOState, batch: PPOBatch, key=None, **extra):
        del key, extra
        chex.assert_rank(batch.actions, {1, 2})
        per_sample = [batch.actions, batch.old_log_probs, batch.advantages, batch.returns,
                      batch.old_values]
        if batch.mask is not None:
            per_sample.append(batch.mask)
        chex.assert_equal_shape(per_sample)
        chex.assert_equal_shape_prefix(
            [*jax.tree_util.tree_leaves(batch.obs), batch.actions], 1)
        mask = (jnp.ones_like(batch.advantages) if batch.mask is None
                else batch.mask.astype(batch.advantages.dtype))
        denom = jnp.maximum(jnp.sum(mask), 1.0)
        advantages = batch.advantages
        if normalize_advantages:
            advantages = normalize(advantages, batch.mask)

        def loss_fn(p):
            logits, values = actor_critic_apply(p, batch.obs)
            chex.assert_equal_shape([values, batch.returns])
            log_probs = categorical_log_prob(logits, batch.actions)
            per_sample_policy, clip_metrics = clipped_surrogate_loss(
                log_probs, batch.old_log_probs, advantages, epsilon_low=clip_epsilon,
                epsilon_high=clip_epsilon_high, dual_clip=dual_clip, mask=batch.mask,
            )
            per_sample_value = value_loss(values, batch.returns, batch.old_values, value_clip)
            policy = jnp.sum(per_sample_policy * mask) / denom
            value = jnp.sum(per_sample_value * mask) / denom
            entropy = jnp.sum(categorical_entropy(logits) * mask) / denom
            loss = policy + value_coef * value - entropy_coef * entropy
            metrics = {"loss": loss, "policy_loss": policy, "value_loss": value,
                       "entropy": entropy, **clip_metrics}
            return loss, metrics

        grads, metrics = jax.grad(loss_fn, has_aux=True)(params)
        return grads, state, metrics

    return RLTransform(init=init, update=update)


# --------------------------------------------------------------------------------------
# One seed's training run on vectorised environments.


class PPOTrainConfig(NamedTuple):
    """Hyperparameters of :func:`make_ppo_train` (defaults: CleanRL ``ppo.py`` CartPole).

    Attributes:
      num_envs: N parallel environments.
      num_steps: T steps per environment per update (a ``[T, N]`` rollout).
      total_steps: environment steps in all; ``total_steps // (N T)`` updates.
      num_epochs, num_minibatches: passes over each ``N T`` batch and minibatches per
        pass.
      gamma, lam: GAE's discount and lambda, in ``[0, 1]``.
      learning_rate: Adam's initial step size.
      anneal_lr: anneal linearly to 0 over all gradient steps.
      adam_eps: Adam's epsilon.
      max_grad_norm: global-norm gradient clip (``optax.clip_by_global_norm``).
      clip_epsilon, value_coef, entropy_coef, value_clip, normalize_advantages: of
        :func:`ppo` (``value_clip=None`` switches value clipping off).
    """

    num_envs: int = 4
    num_steps: int = 128
    total_steps: int = 500_000
    num_epochs: int = 4
    num_minibatches: int = 4
    gamma: float = 0.99
    lam: float = 0.95
    learning_rate: float = 2.5e-4
    anneal_lr: bool = True
    adam_eps: float = 1e-5
    max_grad_norm: float = 0.5
    clip_epsilon: float = 0.2
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    value_clip: float | None = 0.2
    normalize_advantages: bool = True

    @property
    def batch_size(self) -> int:
        """Samples per update, ``N T``."""
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        """Updates in a run, ``total_steps // (N T)``."""
        return self.total_steps // self.batch_size


def check_train_config(config: PPOTrainConfig) -> None:
    """Raise a one-line ``ValueError`` naming the first invalid field of ``config``."""
    for name in ("num_envs", "num_steps", "total_steps", "num_epochs", "num_minibatches"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")
    if config.num_updates < 1:
        raise ValueError(f"total_steps: must be >= num_envs * num_steps = {config.batch_size}, "
                         f"got {config.total_steps}")
    if config.batch_size % config.num_minibatches:
        raise ValueError(f"num_minibatches: must divide num_envs * num_steps = "
                         f"{config.batch_size}, got {config.num_minibatches}")
    for name in ("gamma", "lam"):
        value = getattr(config, name)
        if not _is_number(value) or not 0.0 <= value <= 1.0:
            raise ValueError(f"{name}: must be in [0, 1], got {value!r}")
    for name in ("learning_rate", "adam_eps", "max_grad_norm"):
        value = getattr(config, name)
        if not _is_number(value) or not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name}: must be a finite number > 0, got {value!r}")
    check_ppo_args(config.clip_epsilon, None, None, config.value_coef, config.entropy_coef,
                   config.value_clip)


#: The :class:`PPOTrainConfig` fields a training run may read from a traced ``hparams``
#: dict instead of the config (the others fix shapes, counts or choices, so the program).
TRACEABLE_HPARAMS = ("learning_rate", "adam_eps", "max_grad_norm", "clip_epsilon",
                     "value_coef", "entropy_coef", "value_clip", "gamma", "lam")


def check_hparams(config: PPOTrainConfig, hparams: Mapping[str, Any] | None) -> None:
    """Raise a one-line ``ValueError`` if ``hparams`` names a field that cannot be traced.

    Allowed names are :data:`TRACEABLE_HPARAMS`; ``value_clip`` only when
    ``config.value_clip`` is a number (``None``, value clipping off, is structural: it
    removes the clipped branch from the program). Values are not checked (they may be
    traced); a sweep validates each configuration before it runs.
    """
    if hparams is None:
        return
    unknown = sorted(set(hparams) - set(TRACEABLE_HPARAMS))
    if unknown:
        raise ValueError(f"hparams: cannot trace {', '.join(unknown)}; traceable fields: "
                         f"{', '.join(TRACEABLE_HPARAMS)}")
    if "value_clip" in hparams and config.value_clip is None:
        raise ValueError("hparams: value_clip is traced but config.value_clip is None (value "
                         "clipping off is structural); set config.value_clip to a number")


def resolve_hparams(config: PPOTrainConfig,
                    hparams: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{name: value}`` for every name of :data:`TRACEABLE_HPARAMS`: ``hparams[name]``
    (a scalar, possibly traced, cast to float32) where given, else the config's constant.

    Raises:
      ValueError: as :func:`check_hparams`.
    """
    check_hparams(config, hparams)
    values = {name: getattr(config, name) for name in TRACEABLE_HPARAMS}
    for name, value in (hparams or {}).items():
        if jnp.ndim(value) != 0:
            raise ValueError(f"hparams: {name} must be a scalar (one run's value), got shape "
                             f"{jnp.shape(value)}")
        values[name] = jnp.asarray(value, jnp.float32)
    return values


def ppo_optimizer(config: PPOTrainConfig,
                  hparams: Mapping[str, Any] | None = None) -> optax.GradientTransformation:
    """``clip_by_global_norm(max_grad_norm)`` then Adam with a linearly annealed step size
    (from ``learning_rate`` to 0 over ``num_updates * num_epochs * num_minibatches``
    gradient steps) or a constant one.

    ``learning_rate``, ``adam_eps`` and ``max_grad_norm`` come from ``hparams`` where it
    names them (traced scalars; see :func:`resolve_hparams`), else from ``config``. The
    optimizer state's structure depends only on ``anneal_lr`` (a schedule keeps a step
    count), never on the values.
    """
    values = resolve_hparams(config, hparams)
    if config.anneal_lr:
        steps = config.num_updates * config.num_epochs * config.num_minibatches
        learning_rate = optax.linear_schedule(values["learning_rate"], 0.0, steps)
    else:
        learning_rate = values["learning_rate"]
    return optax.chain(optax.clip_by_global_norm(values["max_grad_norm"]),
                       optax.adam(learning_rate, eps=values["adam_eps"]))


class PPORollout(NamedTuple):
    """A ``[T, N]`` rollout (leaves lead with ``[T, N]``)."""

    obs: Array
    actions: Array
    log_probs: Array
    values: Array
    rewards: Array
    terminated: Array
    truncated: Array
    final_obs: Array


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
      env: an environment with discrete actions; observations must be arrays.
      actor_critic: anything with ``init(key, obs) -> params`` and
        ``apply(params, obs [B, ...]) -> (logits [B, A], value [B])`` (e.g.
        ``policies.mlp_actor_critic``); its ``init`` should be safe under vmap (see
        ``policies.sequential_init``).
      config: :class:`PPOTrainConfig` (default: its defaults), validated here
        (``ValueError`` naming the field).
      env_params: environment parameters (default ``env.default_params``).
      init_params: overrides ``actor_critic.init``.

    Returns:
      ``train(key, hparams=None)``: ``hparams`` an optional dict of scalars (traced under
      a configuration sweep) for some of :data:`TRACEABLE_HPARAMS`, read inside the
      program in place of the config's values (a name it lacks keeps the config's
      constant; an unknown name raises ``ValueError``). It returns a dict of ``[U]``
      arrays: ``return_sum`` (sum of the
      returns of episodes that finished during the update), ``episodes`` (how many
      finished, int32), ``loss``, ``policy_loss``, ``value_loss``, ``entropy``,
      ``clip_fraction``, ``approx_kl`` (means over the update's gradient steps); and
      ``rljax.nonfinite.NONFINITE_STEP``, an ``int32 []``: the first update after which
      the parameters or the loss were non-finite (NaN/inf), ``-1`` if none.
    """
    config = PPOTrainConfig() if config is None else config
    start, run_updates = _ppo_program(env, actor_critic, config, env_params, init_params)

    def train(key: PRNGKey, hparams: Mapping[str, Array] | None = None) -> dict[str, Array]:
        carry, run_key = start(key, hparams)
        _, logs, finite = run_updates(carry, run_key, jnp.int32(0), config.num_updates,
                                      hparams)
        return {**logs, NONFINITE_STEP: first_nonfinite_step(finite)}

    return train


class PPOChunkState(NamedTuple):
    """One seed's PPO run between chunks (:func:`make_ppo_chunks`); every key lives here,
    so a run restored from a saved state continues bitwise.

    Attributes:
      carry: :class:`PPOCarry` (parameters, optimizer state, environments).
      run_key: typed key ``[]``; update ``u`` uses ``fold_in(run_key, u)``.
      update: ``int32 []``, updates done so far.
      nonfinite_step: ``int32 []``, the first update after which the parameters or the
        loss were non-finite, ``-1`` if none so far.
    """

    carry: PPOCarry
    run_key: PRNGKey
    update: Array
    nonfinite_step: Array


class PPOChunks(NamedTuple):
    """A PPO run cut into chunks for :class:`rljax.sweep.ChunkedSweep` (unpacks as
    ``init, advance, finish, num_chunks``).

    One seed each: ``init(key [], hparams=None) -> PPOChunkState``;
    ``advance(state, hparams=None) -> (state, logs)`` with ``[C / W]`` log rows per chunk
    (C updates per chunk, W per row); ``finish(state, hparams=None) -> {NONFINITE_STEP:
    int32 []}`` (see :func:`make_ppo_chunks`). ``hparams``: as for
    :func:`make_ppo_train`; pass the same values to every call of one run.
    """

    init: Callable[..., PPOChunkState]
    advance: Callable[..., tuple[PPOChunkState, dict[str, Array]]]
    finish: Callable[..., dict[str, Array]]
    num_chunks: int


SUMMED_LOGS = ("return_sum", "episodes")


def make_ppo_chunks(
    env: Environment,
    actor_critic: Any,
    config: PPOTrainConfig | None = None,
    env_params: Any = None,
    *,
    updates_per_chunk: int,
    log_every: int = 1,
    init_params: Callable[[PRNGKey, Array], Params] | None = None,
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

    Returns:
      :class:`PPOChunks` ``(init, advance, finish, num_chunks)``, one seed each:
      ``init(key, hparams=None) -> PPOChunkState``; ``advance(state, hparams=None) ->
      (state, logs)`` with logs of ``[C / W]`` arrays under ``make_ppo_train``'s log keys
      (``episodes`` int32); ``finish(state, hparams=None) -> {NONFINITE_STEP: int32 []}``
      (first non-finite update, ``-1`` if none); ``num_chunks = U / C``. ``hparams`` (the
      same in every call of a run, e.g. :class:`rljax.sweep.ChunkedSweep` with
      ``configs``) is read as in :func:`make_ppo_train`, so ``init(key, hp)`` then the
      chunks run bitwise what ``make_ppo_train(...)(key, hp)`` runs.

    Raises:
      ValueError: one line naming the argument or ``config`` field.
    """
    config = PPOTrainConfig() if config is None else config
    check_train_config(config)
    num_updates = config.num_updates
    for name, value, whole, what in (
        ("updates_per_chunk", updates_per_chunk, num_updates, "the number of updates"),
        ("log_every", log_every, updates_per_chunk, "updates_per_chunk"),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")
        if whole % value:
            raise ValueError(f"{name}: must divide {what} ({whole}), got {value}")
    start, run_updates = _ppo_program(env, actor_critic, config, env_params, init_params)

    def init(key: PRNGKey, hparams: Mapping[str, Array] | None = None) -> PPOChunkState:
        carry, run_key = start(key, hparams)
        return PPOChunkState(carry, run_key, jnp.int32(0), jnp.int32(-1))

    def advance(state: PPOChunkState, hparams: Mapping[str, Array] | None = None,
                ) -> tuple[PPOChunkState, dict[str, Array]]:
        carry, logs, finite = run_updates(state.carry, state.run_key, state.update,
                                          updates_per_chunk, hparams)
        in_chunk = first_nonfinite_step(finite)
        nonfinite_step = jnp.where(jnp.logical_and(state.nonfinite_step < 0, in_chunk >= 0),
                                   state.update + in_chunk, state.nonfinite_step)
        if log_every > 1:
            logs = {name: _window_aggregate(x, log_every, name in SUMMED_LOGS)
                    for name, x in logs.items()}
        state = PPOChunkState(carry, state.run_key, state.update + updates_per_chunk,
                              nonfinite_step)
        return state, logs

    def finish(state: PPOChunkState,
               hparams: Mapping[str, Array] | None = None) -> dict[str, Array]:
        check_hparams(config, hparams)
        return {NONFINITE_STEP: state.nonfinite_step}

    return PPOChunks(init, advance, finish, num_updates // updates_per_chunk)


def _window_aggregate(x: Array, window: int, summed: bool) -> Array:
    """``[C] -> [C / window]``: sums (``summed``) or means of consecutive windows."""
    rows = x.reshape(x.shape[0] // window, window, *x.shape[1:])
    return jnp.sum(rows, axis=1, dtype=x.dtype) if summed else jnp.mean(rows, axis=1)


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

    def transforms(hparams):
        values = resolve_hparams(config, hparams)
        rl = ppo(apply, clip_epsilon=values["clip_epsilon"], value_coef=values["value_coef"],
                 entropy_coef=values["entropy_coef"], value_clip=values["value_clip"],
                 normalize_advantages=config.normalize_advantages)
        return rl, ppo_optimizer(config, hparams), values

    num_envs, num_steps = config.num_envs, config.num_steps
    reset = jax.vmap(env.reset, in_axes=(0, None))
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    bootstrap_truncations = _has_final_obs(env, env_params)

    def rollout(params, obs, env_state, episode_return, key):
        noise_key, env_key = jax.random.split(key)
        noise = jax.random.uniform(noise_key, (num_steps, num_envs))
        env_keys = jax.random.split(env_key, (num_steps, num_envs))

        def body(carry, inputs):
            obs, env_state, episode_return, return_sum, episodes = carry
            u, keys = inputs
            logits, value = apply(params, obs)
            action = categorical_from_uniform(u, logits)
            log_prob = categorical_log_prob(logits, action)
            next_obs, env_state, reward, terminated, truncated, info = step(
                keys, env_state, action, env_params)
            reward = jnp.asarray(reward, jnp.float32)
            done = jnp.logical_or(terminated, truncated)
            episode_return = episode_return + reward
            return_sum = return_sum + jnp.sum(jnp.where(done, episode_return, 0.0))
            episodes = episodes + jnp.sum(done, dtype=jnp.int32)
            episode_return = jnp.where(done, 0.0, episode_return)
            final_obs = info["final_obs"] if bootstrap_truncations else next_obs
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


def _has_final_obs(env: Environment, env_params: Any) -> bool:
    """Whether ``env.step``'s info carries ``final_obs`` (checked abstractly, no compute)."""
    key = jax.random.key(0)
    _, state = jax.eval_shape(env.reset, key, env_params)
    out = jax.eval_shape(env.step, key, state, jnp.int32(0), env_params)
    return isinstance(out[5], dict) and "final_obs" in out[5]
