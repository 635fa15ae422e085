"""GRPO (Shao et al., 2024, DeepSeekMath §4) and its variants as one RLTransform factory.

For ``P`` prompts with a group of ``G`` sampled completions (sequences of ``T`` tokens)
each, outcome rewards ``r [P, G]`` become group advantages ``A [P, G]`` (broadcast to
every token), and the per-token loss is

    L_t = -min(rho_t A, clip(rho_t, 1 - eps_low, 1 + eps_high) A) + beta * KL_t

with ``rho_t = pi(a_t) / pi_old(a_t)`` (or GSPO's sequence ratio), aggregated over tokens
by one of :data:`rljax.losses.AGGREGATIONS`. Variants are arguments, not code:

==================  =====================================================================
GRPO                ``advantage="group_relative", aggregation="sequence-mean-token-mean",
                    kl_beta=0.04, kl_estimator="k3"``
Dr. GRPO            ``advantage="group_mean", aggregation="sequence-mean-token-sum-norm",
                    kl_beta=0``
DAPO-style          ``clip_epsilon=0.2, clip_epsilon_high=0.28, aggregation="token-mean",
                    kl_beta=0`` (+ dynamic sampling, see the curriculum module)
RLOO                ``advantage="leave_one_out", kl_beta=0``
GSPO                ``sequence_ratio=True`` (small clip ranges, e.g. 3e-4 / 4e-4)
==================  =====================================================================

``mu`` inner iterations (several optimizer steps on one batch, ``pi_old`` fixed) are run
by :func:`rljax.algorithms.loops.multi_step_update` with the batch's leading prompt axis
as the minibatch axis, so groups stay whole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp
from flax import struct

from rljax import losses
from rljax.advantages import make_group_advantage
from rljax.algorithms.base import RLTransform
from rljax.policies.sampling import categorical_log_prob
from rljax.types import Array, Params


@struct.dataclass
class GroupBatch:
    """``P`` prompts x ``G`` completions x ``T`` tokens.

    Attributes:
      obs: ``[P, G, T, ...]`` what the policy conditions on at each token.
      actions: ``[P, G, T]`` int sampled tokens / answers.
      mask: ``[P, G, T]`` 1 for real tokens.
      rewards: ``[P, G]`` outcome rewards (NaN propagates into the loss, never hidden).
      old_log_probs: ``[P, G, T]`` log-probabilities under the sampling policy.
      ref_log_probs: ``[P, G, T]`` under the frozen reference policy (any array when
        ``kl_beta == 0``; it is then unused).
      advantages: optional ``[P, G, T]`` token advantages that replace the group
        advantage (e.g. :func:`rljax.advantages.process_supervision_advantages`).
    """

    obs: Array
    actions: Array
    mask: Array
    rewards: Array
    old_log_probs: Array
    ref_log_probs: Array
    advantages: Array | None = None


def grpo(
    policy_apply: Callable[[Params, Array], Array] | None = None,
    *,
    group_size: int,
    advantage: str | Callable[[Array], Array] = "group_relative",
    advantage_kwargs: dict[str, Any] | None = None,
    clip_epsilon: float = 0.2,
    clip_epsilon_high: float | None = None,
    dual_clip: float | None = None,
    sequence_ratio: bool = False,
    kl_beta: float = 0.04,
    kl_estimator: str = "k3",
    aggregation: str = "sequence-mean-token-mean",
    aggregation_normaliser: float | None = None,
    log_prob_fn: Callable[[Params, Array, Array], Array] | None = None,
) -> RLTransform:
    """Build the GRPO transform (module docstring for the loss and the variants).

    Args:
      policy_apply: ``apply(params, obs [N, T, ...]) -> logits [N, T, A]``; or give
        ``log_prob_fn`` instead.
      group_size: G (>= 2); the batch's group axis must have this size.
      advantage: ``"group_relative"`` (GRPO), ``"group_mean"`` (Dr. GRPO),
        ``"leave_one_out"`` (RLOO), or a function ``rewards [P, G] -> A [P, G]``.
      advantage_kwargs: e.g. ``{"ddof": 1}`` or ``{"epsilon": 1e-4}``.
      clip_epsilon, clip_epsilon_high: clip range (``high`` defaults to ``clip_epsilon``).
      dual_clip: optional dual-clip constant ``c > 1``.
      sequence_ratio: use GSPO's sequence-level ratio.
      kl_beta: KL coefficient (>= 0; 0 disables the reference term).
      kl_estimator: ``"k1"``, ``"k2"`` or ``"k3"``.
      aggregation: loss aggregation mode (:data:`rljax.losses.AGGREGATIONS`).
      aggregation_normaliser: constant of ``sequence-mean-token-sum-norm`` (default T).
      log_prob_fn: ``(params, obs [N, T, ...], actions [N, T]) -> [N, T]``.

    Returns:
      ``RLTransform``; ``update(params, state, batch: GroupBatch, key=None)`` returns
      ``(grads, state, metrics)`` with ``loss``, ``clip_fraction``, ``approx_kl``, ``kl``,
      ``reward`` (mean), ``signal_fraction`` (groups whose rewards are not all equal),
      ``nan_rewards`` (count).
    """
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2:
        raise ValueError(f"group_size: must be an integer >= 2, got {group_size!r}")
    losses.check_clip(clip_epsilon, clip_epsilon_high)
    if dual_clip is not None and isinstance(dual_clip, int | float) and not dual_clip > 1:
        raise ValueError(f"dual_clip: must be > 1, got {dual_clip!r}")
    if isinstance(kl_beta, int | float) and not kl_beta >= 0:
        raise ValueError(f"kl_beta: must be >= 0, got {kl_beta!r}")
    losses.check_kl_estimator(kl_estimator)
    losses.check_aggregation(aggregation)
    if callable(advantage):
        advantage_fn = advantage
    else:
        advantage_fn = make_group_advantage(advantage, **(advantage_kwargs or {}))
    if log_prob_fn is None:
        if policy_apply is None:
            raise ValueError("grpo: give policy_apply or log_prob_fn")

        def log_prob_fn(params, obs, actions):
            return categorical_log_prob(policy_apply(params, obs), actions)

    use_kl = not (isinstance(kl_beta, int | float) and kl_beta == 0)

    def init(params: Params) -> tuple:
        del params
        return ()

    def update(params: Params, state: Any, batch: GroupBatch, key=None, **extra):
        del key, extra
        chex.assert_rank([batch.actions, batch.mask, batch.rewards], [3, 3, 2])
        chex.assert_equal_shape([batch.actions, batch.mask, batch.old_log_probs])
        chex.assert_equal_shape_prefix([batch.actions, batch.rewards], 2)
        p, g, t = batch.actions.shape
        if g != group_size:
            raise ValueError(f"group_size: the batch's group axis is {g}, expected {group_size}")
        flat = lambda x: x.reshape(p * g, *x.shape[2:])  # noqa: E731
        if batch.advantages is None:
            adv = jnp.broadcast_to(advantage_fn(batch.rewards)[..., None], (p, g, t))
        else:
            chex.assert_equal_shape([batch.advantages, batch.actions])
            adv = batch.advantages
        mask = flat(batch.mask).astype(jnp.float32)
        adv = jax.lax.stop_gradient(flat(adv))
        old = flat(batch.old_log_probs)

        def loss_fn(params):
            log_probs = log_prob_fn(params, jax.tree_util.tree_map(flat, batch.obs),
                                    flat(batch.actions))
            chex.assert_equal_shape([log_probs, old])
            if sequence_ratio:
                per_token, metrics = losses.gspo_loss(
                    log_probs, old, adv, mask, epsilon_low=clip_epsilon,
                    epsilon_high=clip_epsilon_high)
            else:
                per_token, metrics = losses.clipped_surrogate_loss(
                    log_probs, old, adv, epsilon_low=clip_epsilon,
                    epsilon_high=clip_epsilon_high, dual_clip=dual_clip, mask=mask)
            if use_kl:
                kl = losses.kl_penalty(log_probs, flat(batch.ref_log_probs), kl_estimator)
                per_token = per_token + kl_beta * kl
                metrics["kl"] = jnp.sum(kl * mask) / jnp.maximum(jnp.sum(mask), 1.0)
            else:
                metrics["kl"] = jnp.zeros(())
            loss = losses.aggregate_loss(per_token, mask, aggregation, aggregation_normaliser)
            return loss, metrics

        (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        rewards = batch.rewards
        spread = jnp.max(rewards, axis=-1) != jnp.min(rewards, axis=-1)
        metrics = {
            **metrics,
            "loss": loss,
            "reward": jnp.mean(rewards),
            "signal_fraction": jnp.mean(spread.astype(jnp.float32)),
            "nan_rewards": jnp.sum(jnp.isnan(rewards)),
        }
        return grads, state, metrics

    return RLTransform(init=init, update=update)
