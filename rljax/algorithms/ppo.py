"""PPO (Schulman et al., 2017) as an :class:`~rljax.algorithms.base.RLTransform`: the loss.

For a minibatch of ``B`` samples the transform returns the gradient of

    L(theta) = L_clip + c_v L_V - c_H H

with ``r = pi_theta(a|s) / pi_old(a|s)`` and advantages ``A`` (normalised per minibatch
to zero mean and unit standard deviation when ``normalize_advantages``):

    L_clip = mean_b -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)     (PPO-clip, eq. 7)
    L_V    = mean_b 0.5 (V_theta(s) - R)^2       (or the clipped variant, ``value_clip``)
    H      = mean_b entropy(pi_theta(.|s))

(``losses.clipped_surrogate_loss``, ``losses.value_loss``). ``log pi`` and the entropy come
from the policy head's :class:`~rljax.policies.distributions.ActionDistribution`:
categorical (discrete actions, the default) or diagonal Gaussian (continuous control;
the log-probability of the raw, unclipped sample). Returns ``R`` and advantages come from
GAE (``advantages.generalized_advantage_estimation``). Epochs x minibatches are
``algorithms.loops.multi_step_update``, shared with GRPO; any optax optimizer applies the
gradients. The trainer that drives this transform over environments is
:mod:`rljax.training.ppo`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
from flax import struct

from rljax.algorithms.base import LossAux, RLTransform, update_from_loss
from rljax.contracts import check_actor_critic, function_name
from rljax.losses import check_clip, clipped_surrogate_loss, value_loss
from rljax.policies.distributions import ActionDistribution, categorical
from rljax.types import Array, Params


@struct.dataclass
class PPOBatch:
    """A (mini)batch of ``B`` samples for the PPO update; every leaf leads with ``[B]``.

    A sample is one action (``[B]``) or, for token sequences (language models), one
    sequence of ``T`` actions (``[B, T]``, every token a PPO sample, weighted by ``mask``).

    Attributes:
      obs: ``[B, ...]`` observations.
      actions: ``[B]`` (or ``[B, T]``) int actions taken; ``[B, A]`` float for a Gaussian
        head (the raw, unclipped samples).
      old_log_probs: ``[B]`` (or ``[B, T]``): ``log pi_old(a|s)`` at sampling time.
      advantages: like ``old_log_probs``: advantage estimates (e.g. GAE).
      returns: like ``old_log_probs``: value targets (``advantages + old_values`` for GAE).
      old_values: like ``old_log_probs``: ``V_old(s)`` at sampling time (value clipping).
      mask: optional, like ``old_log_probs``: 1 for real samples/tokens, 0 for padding.
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
    distribution: ActionDistribution | None = None,
) -> RLTransform:
    """Build the PPO transform (see the module docstring for the loss).

    Args:
      actor_critic_apply: ``apply(params, obs [B, ...]) -> (dist_params, value [B])``
        (a shared torso or two networks; e.g. ``policies.mlp_actor_critic(...).apply``):
        logits ``[B, A]`` for the categorical head, ``(mean [B, A], log_std [B, A])`` for
        a Gaussian one; for sequence batches ``(logits [B, T, A], value [B, T])``.
      clip_epsilon: eps_low of the ratio clip, > 0 (0.2).
      clip_epsilon_high: eps_high (DAPO's clip-higher), >= ``clip_epsilon``; default
        symmetric.
      dual_clip: optional dual-clip constant ``c > 1`` (Ye et al., 2020).
      value_coef: ``c_v`` >= 0 (0.5).
      entropy_coef: ``c_H`` >= 0 (0.01).
      value_clip: clip range of the value update around ``old_values`` (PPO2's value
        clipping; the baselines/CleanRL default uses ``clip_epsilon``), or ``None``.
      normalize_advantages: normalise advantages per minibatch.
      distribution: the policy head's
        :class:`~rljax.policies.distributions.ActionDistribution` (its ``log_prob`` and
        ``entropy``); default categorical. Pass ``actor_critic.distribution``.

    Returns:
      ``RLTransform`` whose ``loss(params, state, batch: PPOBatch, key=None)`` returns
      ``(L [], LossAux(state, metrics))`` and whose ``update`` (same arguments) returns its
      gradient, ``(grads, state, metrics)`` (``update_from_loss(loss)``: bitwise the
      ``jax.grad`` of ``loss``); the state is empty. Metrics: ``loss`` (L),
      ``policy_loss``, ``value_loss``, ``entropy``, ``clip_fraction``, ``approx_kl``.

    Raises:
      ValueError: at build time, naming the argument, for ``clip_epsilon <= 0`` and the
        other checks of :func:`check_ppo_args`.
    """
    check_ppo_args(clip_epsilon, clip_epsilon_high, dual_clip, value_coef, entropy_coef,
                   value_clip)
    distribution = categorical() if distribution is None else distribution

    def init(params: Params) -> PPOState:
        del params
        return PPOState()

    def loss(params: Params, state: PPOState, batch: PPOBatch, key=None, **extra):
        del key, extra
        chex.assert_rank(batch.old_log_probs, {1, 2})
        per_sample = [batch.old_log_probs, batch.advantages, batch.returns, batch.old_values]
        if batch.mask is not None:
            per_sample.append(batch.mask)
        chex.assert_equal_shape(per_sample)
        chex.assert_equal_shape_prefix([batch.actions, batch.old_log_probs],
                                       batch.old_log_probs.ndim)
        chex.assert_equal_shape_prefix(
            [*jax.tree_util.tree_leaves(batch.obs), batch.actions], 1)
        mask = (jnp.ones_like(batch.advantages) if batch.mask is None
                else batch.mask.astype(batch.advantages.dtype))
        denom = jnp.maximum(jnp.sum(mask), 1.0)
        advantages = batch.advantages
        if normalize_advantages:
            advantages = normalize(advantages, batch.mask)
        out = actor_critic_apply(params, batch.obs)
        check_actor_critic(function_name(actor_critic_apply), out, distribution.name, None,
                           "", batch.old_log_probs.shape, batch.actions.shape)
        dist_params, values = out
        log_probs = distribution.log_prob(dist_params, batch.actions)
        per_sample_policy, clip_metrics = clipped_surrogate_loss(
            log_probs, batch.old_log_probs, advantages, epsilon_low=clip_epsilon,
            epsilon_high=clip_epsilon_high, dual_clip=dual_clip, mask=batch.mask,
        )
        per_sample_value = value_loss(values, batch.returns, batch.old_values, value_clip)
        policy = jnp.sum(per_sample_policy * mask) / denom
        value = jnp.sum(per_sample_value * mask) / denom
        entropy = jnp.sum(distribution.entropy(dist_params) * mask) / denom
        total = policy + value_coef * value - entropy_coef * entropy
        metrics = {"loss": total, "policy_loss": policy, "value_loss": value,
                   "entropy": entropy, **clip_metrics}
        return total, LossAux(state, metrics)

    return RLTransform(init=init, update=update_from_loss(loss), loss=loss)
