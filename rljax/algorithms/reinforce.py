"""REINFORCE (Williams, 1992) as an :class:`~rljax.algorithms.base.RLTransform`.

For a batch of ``G`` episodes of ``T`` steps the transform returns the gradient of

    L(theta) = -(1/G) * sum_g sum_t mask[g,t] * (R[g,t] - b[g]) * log pi_theta(a[g,t] | s[g,t])

where ``R[g,t]`` is the discounted reward-to-go of step ``t`` (``discount=1``: every step
of an outcome-reward episode sees the final reward; ``discount=0``: each step sees its own
reward, as for per-step process rewards) and ``b[g]`` comes from a pluggable baseline fed
with each episode's score. For a tabular softmax policy the descent step with plain SGD
and learning rate ``lr`` is exactly the classic update

    logit[s] += lr * (R - b) * (onehot(a) - pi(.|s)).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp
from flax import struct

from rljax.advantages import Baseline, discounted_returns, ema_baseline
from rljax.algorithms.base import LossAux, RLTransform, update_from_loss
from rljax.contracts import check_logits, check_output_shape
from rljax.policies.sampling import categorical_log_prob
from rljax.types import Array, Params


@struct.dataclass
class EpisodeBatch:
    """``G`` episodes of ``T`` steps for a policy-gradient update.

    Attributes:
      obs: ``[G, T, ...]`` observations.
      actions: ``[G, T]`` int actions.
      rewards: ``[G, T]`` per-step rewards (outcome or process).
      mask: ``[G, T]`` 1 for real steps, 0 for padding.
      episode_reward: ``[G]`` the score fed to the baseline (e.g. outcome reward, or the
        fraction of correct steps).
    """

    obs: Array
    actions: Array
    rewards: Array
    mask: Array
    episode_reward: Array


@struct.dataclass
class ReinforceState:
    """``baseline``: the baseline's state pytree (``{"value": float32 []}`` for
    :func:`~rljax.advantages.ema_baseline`, ``()`` for the stateless baselines)."""

    baseline: Any


def reinforce(
    policy_apply: Callable[[Params, Array], Array],
    *,
    baseline: Baseline | None = None,
    discount: float = 1.0,
) -> RLTransform:
    """Build the REINFORCE transform (see the module docstring for the loss).

    Args:
      policy_apply: ``apply(params, obs [G, T, ...]) -> logits [G, T, A]``.
      baseline: an ``advantages`` baseline; default ``ema_baseline(0.5, 0.05)``.
      discount: gamma in ``[0, 1]`` for the reward-to-go.

    Returns:
      ``RLTransform`` whose ``loss(params, state, batch: EpisodeBatch, key=None)`` returns
      ``(L [], LossAux(state, metrics))`` and whose ``update`` (same arguments) returns its
      gradient, ``(grads, state, metrics)`` (``update_from_loss(loss)``: bitwise the
      ``jax.grad`` of ``loss``). Metrics: ``loss`` (L), ``baseline`` (mean b),
      ``advantage`` (mean), ``episode_reward`` (mean). The new state is the baseline fed
      with this batch's ``episode_reward`` (it does not depend on ``params``).
    """
    if isinstance(discount, int | float) and not (0.0 <= float(discount) <= 1.0):
        raise ValueError(f"discount: must be in [0, 1], got {discount!r}")
    baseline = ema_baseline() if baseline is None else baseline

    def init(params: Params) -> ReinforceState:
        del params
        return ReinforceState(baseline=baseline.init())

    def loss(params: Params, state: ReinforceState, batch: EpisodeBatch, key=None, **extra):
        del key, extra
        chex.assert_rank([batch.actions, batch.rewards, batch.mask, batch.episode_reward],
                         [2, 2, 2, 1])
        chex.assert_equal_shape([batch.actions, batch.rewards, batch.mask])
        chex.assert_equal_shape_prefix([batch.actions, batch.episode_reward], 1)
        mask = batch.mask.astype(jnp.float32)
        returns = discounted_returns(batch.rewards, discount, mask)
        b, baseline_state = baseline.update(state.baseline, batch.episode_reward)
        check_output_shape("baseline=", baseline.update, b, batch.episode_reward.shape,
                           f"episode rewards {list(batch.episode_reward.shape)}")
        advantages = jax.lax.stop_gradient(returns - b[:, None]) * mask
        logits = policy_apply(params, batch.obs)
        check_logits("policy_apply=", policy_apply, logits, batch.actions.shape)
        log_probs = categorical_log_prob(logits, batch.actions)
        value = -jnp.sum(advantages * log_probs) / batch.actions.shape[0]
        metrics = {
            "loss": value,
            "baseline": jnp.mean(b),
            "advantage": jnp.sum(advantages) / jnp.maximum(jnp.sum(mask), 1.0),
            "episode_reward": jnp.mean(batch.episode_reward),
        }
        return value, LossAux(ReinforceState(baseline=baseline_state), metrics)

    return RLTransform(init=init, update=update_from_loss(loss), loss=loss)
