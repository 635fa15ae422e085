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
batch-std scaling   ``scale_rewards="batch"`` (TRL; ``"group"`` GRPO, ``"none"`` Dr. GRPO)
REINFORCE++         ``advantage="reinforce_pp"`` or ``"reinforce_pp_baseline"`` (batch
                    whitening, Hu et al., 2025)
overlong filtering  ``mask_truncated=True`` with ``GroupBatch.truncated [P, G]`` (DAPO)
overlong shaping    rewards ``+ rljax.advantages.overlong_penalty(lengths, L_max, L_cache)``
                    (DAPO eq. 13), or as one more reward column
80/20 entropy mask  ``entropy_top_q=0.2`` (Wang et al., 2025)
several rewards     rewards ``[P, G, K]``, ``reward_weights=[...]``,
                    ``multi_reward="normalize_then_sum"`` (GDPO) or ``"sum_then_normalize"``
==================  =====================================================================

The overlong shaping is a reward function the trainer calls rather than a ``grpo``
argument: the transform's contract is rewards in, gradients out, and a length penalty is
part of the reward's definition (DAPO adds it to the rule-based reward). Kept outside, it
needs no extra batch field, composes with ``reward_weights`` as one more column, and the
``reward`` metric and the advantage see the same reward.

``mu`` inner iterations (several optimizer steps on one batch, ``pi_old`` fixed) are run
by :func:`rljax.algorithms.loops.multi_step_update` with the batch's leading prompt axis
as the minibatch axis, so groups stay whole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rljax import losses
from rljax.advantages import MULTI_REWARD_MODES, make_group_advantage, multi_reward_advantages
from rljax.algorithms.base import LossAux, RLTransform, update_from_loss
from rljax.contracts import check_logits, check_output_shape
from rljax.policies.sampling import categorical_log_prob
from rljax.types import Array, Params


@struct.dataclass
class GroupBatch:
    """``P`` prompts x ``G`` completions x ``T`` tokens.

    Attributes:
      obs: ``[P, G, T, ...]`` what the policy conditions on at each token.
      actions: ``[P, G, T]`` int sampled tokens / answers.
      mask: ``[P, G, T]`` 1 for real tokens.
      rewards: ``[P, G]`` outcome rewards, or ``[P, G, K]`` for ``K`` reward functions
        (``grpo``'s ``reward_weights``). NaN propagates into the loss, never hidden.
      old_log_probs: ``[P, G, T]`` log-probabilities under the sampling policy.
      ref_log_probs: ``[P, G, T]`` under the frozen reference policy (any array when
        ``kl_beta == 0``; it is then unused).
      advantages: optional ``[P, G, T]`` token advantages that replace the group
        advantage (e.g. :func:`rljax.advantages.process_supervision_advantages`).
      truncated: optional ``[P, G]`` bool, True for a completion that hit the length limit
        without an end-of-sequence token (``grpo``'s ``mask_truncated``).
    """

    obs: Array
    actions: Array
    mask: Array
    rewards: Array
    old_log_probs: Array
    ref_log_probs: Array
    advantages: Array | None = None
    truncated: Array | None = None


def grpo(
    policy_apply: Callable[[Params, Array], Array] | None = None,
    *,
    group_size: int,
    advantage: str | Callable[[Array], Array] = "group_relative",
    advantage_kwargs: dict[str, Any] | None = None,
    scale_rewards: str | None = None,
    reward_weights: Sequence[float] | Array | None = None,
    multi_reward: str = "sum_then_normalize",
    multi_reward_batch_norm: bool = True,
    clip_epsilon: float = 0.2,
    clip_epsilon_high: float | None = None,
    dual_clip: float | None = None,
    sequence_ratio: bool = False,
    kl_beta: float = 0.04,
    kl_estimator: str = "k3",
    aggregation: str = "sequence-mean-token-mean",
    aggregation_normaliser: float | None = None,
    mask_truncated: bool = False,
    entropy_top_q: float | None = None,
    correct_threshold: float = 0.5,
    log_prob_fn: Callable[[Params, Array, Array], Array] | None = None,
    entropy_fn: Callable[[Params, Array, Array], Array] | None = None,
) -> RLTransform:
    """Build the GRPO transform (module docstring for the loss and the variants).

    Args:
      policy_apply: ``apply(params, obs [N, T, ...]) -> logits [N, T, A]``; or give
        ``log_prob_fn`` instead. From the logits it also takes the per-token entropy
        (``entropy`` metric, ``entropy_top_q``) at no extra forward pass.
      group_size: G (>= 2); the batch's group axis must have this size.
      advantage: ``"group_relative"`` (GRPO), ``"group_mean"`` (Dr. GRPO),
        ``"leave_one_out"`` (RLOO), ``"reinforce_pp"`` / ``"reinforce_pp_baseline"``
        (REINFORCE++, batch-whitened; :func:`rljax.advantages.reinforce_pp_advantages`),
        or a function ``rewards [P, G] -> A [P, G]`` (its output's shape is checked at
        trace time: a one-line ``ContractError`` naming ``advantage=`` and both shapes).
      advantage_kwargs: e.g. ``{"ddof": 1}`` or ``{"epsilon": 1e-4}``.
      scale_rewards: ``"group"``, ``"batch"`` or ``"none"``: divide the group-centred
        rewards by the group std (GRPO), by the std of all ``P G`` rewards of the batch
        (TRL's ``scale_rewards="batch"``) or by nothing (Dr. GRPO); see
        :func:`rljax.advantages.scaled_group_advantages`. ``None`` (default) keeps the
        estimator's own scale (group for ``group_relative``, none for ``group_mean`` and
        ``leave_one_out``). Only for those three. "Batch" is the batch ``update`` sees: a
        minibatch when :func:`~rljax.algorithms.loops.multi_step_update` splits prompts
        (pass precomputed ``batch.advantages`` to normalise over a larger one).
      reward_weights: ``[K]`` weights when ``batch.rewards`` is ``[P, G, K]``.
      multi_reward: ``"sum_then_normalize"`` (weighted sum, then the advantage) or
        ``"normalize_then_sum"`` (GDPO: the advantage of each reward, weighted sum, then
        batch whitening if ``multi_reward_batch_norm``); see
        :func:`rljax.advantages.multi_reward_advantages`.
      multi_reward_batch_norm: GDPO's final batch whitening.
      clip_epsilon, clip_epsilon_high: clip range (``high`` defaults to ``clip_epsilon``).
      dual_clip: optional dual-clip constant ``c > 1``.
      sequence_ratio: use GSPO's sequence-level ratio.
      kl_beta: KL coefficient (>= 0; 0 disables the reference term).
      kl_estimator: ``"k1"``, ``"k2"`` or ``"k3"``.
      aggregation: loss aggregation mode (:data:`rljax.losses.AGGREGATIONS`).
      aggregation_normaliser: constant of ``sequence-mean-token-sum-norm`` (default T).
      mask_truncated: DAPO's overlong filtering (Yu et al., 2025, §3.4): the tokens of
        completions with ``batch.truncated`` set get mask 0, so they add nothing to the
        loss (they still count in their group's advantage statistics; token-mean leaves
        them out of its denominator, the sequence-mean modes still divide by ``P G``).
        Needs ``batch.truncated``.
      entropy_top_q: ``q`` in ``(0, 1]``: train only on the ``ceil(q n)`` highest-entropy
        of the ``n`` valid tokens of the batch (Wang et al., 2025;
        :func:`rljax.losses.top_entropy_mask`); the entropy is the current policy's,
        stop-gradient, and the rest get mask 0 (surrogate and KL alike). Needs
        ``policy_apply`` or ``entropy_fn``.
      correct_threshold: a completion is "correct" when its reward (the weighted sum for
        ``[P, G, K]`` rewards) is ``> correct_threshold``; for the length metrics.
      log_prob_fn: ``(params, obs [N, T, ...], actions [N, T]) -> [N, T]``.
      entropy_fn: ``(params, obs [N, T, ...], actions [N, T]) -> [N, T]`` per-token policy
        entropy, for ``log_prob_fn`` users (else taken from ``policy_apply``).

    Returns:
      ``RLTransform``; ``loss(params, state, batch: GroupBatch, key=None)`` returns ``(L [],
      LossAux(state, metrics))``, and ``update`` (same arguments) its gradient, ``(grads,
      state, metrics)`` (``update_from_loss(loss)``: bitwise the ``jax.grad`` of ``loss``);
      the state is empty, ``()``. Metrics: ``loss`` (L), ``clip_fraction``, ``clipfrac_low``,
      ``clipfrac_high`` (:func:`rljax.losses.clip_fractions`; over the trained tokens),
      ``approx_kl``, ``kl``, ``reward`` (mean), ``signal_fraction`` (groups whose rewards are
      not all equal, in any reward column), ``nan_rewards`` (count),
      ``response_length_correct`` / ``response_length_incorrect`` (mean ``mask.sum(T)`` of the
      completions with reward ``>`` / ``<=`` ``correct_threshold``; NaN when there are none,
      and a NaN reward counts as incorrect); ``entropy`` (token-mean policy entropy over
      ``batch.mask``) when entropies are available; ``entropy_kept_fraction`` with
      ``entropy_top_q``; ``truncated_fraction`` when ``batch.truncated`` is given.
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
    losses.check_top_q(entropy_top_q)
    if multi_reward not in MULTI_REWARD_MODES:
        raise ValueError(f"multi_reward: must be one of {', '.join(MULTI_REWARD_MODES)}, "
                         f"got {multi_reward!r}")
    if reward_weights is not None:
        if np.ndim(reward_weights) != 1 or np.shape(reward_weights)[0] < 1:
            raise ValueError(f"reward_weights: must be a 1-D sequence [K], K >= 1; got shape "
                             f"{np.shape(reward_weights)}")
        reward_weights = jnp.asarray(reward_weights, jnp.float32)
    if callable(advantage):
        if scale_rewards is not None:
            raise ValueError("scale_rewards: applies to the named group advantages, not a "
                             "custom advantage function; leave it None")
        def advantage_fn(rewards):  # the user's function, its output checked at trace time
            out = advantage(rewards)
            check_output_shape("advantage=", advantage, out, rewards.shape,
                               f"rewards {list(rewards.shape)}")
            return out
    else:
        advantage_fn = make_group_advantage(advantage, scale_rewards=scale_rewards,
                                            **(advantage_kwargs or {}))
    if log_prob_fn is None and policy_apply is None:
        raise ValueError("grpo: give policy_apply or log_prob_fn")
    if entropy_top_q is not None and entropy_fn is None and policy_apply is None:
        raise ValueError("entropy_top_q: needs per-token entropies; give policy_apply or "
                         "entropy_fn")

    def log_probs_and_entropy(params, obs, actions):
        """``(log pi(a_t) [N, T], H_t [N, T] or None)``: one forward pass when the policy's
        logits are at hand."""
        given = f"actions {list(actions.shape)}"
        if log_prob_fn is None:
            logits = policy_apply(params, obs)
            check_logits("policy_apply=", policy_apply, logits, actions.shape)
            return (categorical_log_prob(logits, actions),
                    jax.lax.stop_gradient(losses.categorical_entropy(logits)))
        log_probs = log_prob_fn(params, obs, actions)
        check_output_shape("log_prob_fn=", log_prob_fn, log_probs, actions.shape, given)
        if entropy_fn is not None:
            entropy = entropy_fn(params, obs, actions)
            check_output_shape("entropy_fn=", entropy_fn, entropy, actions.shape, given)
            return log_probs, jax.lax.stop_gradient(entropy)
        if entropy_top_q is not None:  # log_prob_fn for the loss, policy_apply for H
            logits = policy_apply(params, obs)
            check_logits("policy_apply=", policy_apply, logits, actions.shape)
            return log_probs, jax.lax.stop_gradient(losses.categorical_entropy(logits))
        return log_probs, None

    use_kl = not (isinstance(kl_beta, int | float) and kl_beta == 0)

    def init(params: Params) -> tuple:
        del params
        return ()

    def group_advantages(rewards):
        """``[P, G]`` or ``[P, G, K]`` rewards -> ``([P, G] advantages, [P, G] reward)``."""
        if rewards.ndim == 2:
            if reward_weights is not None:
                raise ValueError(f"reward_weights: given, so rewards must be [P, G, K]; got "
                                 f"shape {rewards.shape}")
            return advantage_fn(rewards), rewards
        if reward_weights is None:
            raise ValueError(f"reward_weights: rewards are [P, G, K] (shape {rewards.shape}); "
                             f"give reward_weights [K]")
        if rewards.shape[-1] != reward_weights.shape[0]:
            raise ValueError(f"reward_weights: has {reward_weights.shape[0]} entries but "
                             f"rewards are [P, G, K] with K = {rewards.shape[-1]}")
        adv = multi_reward_advantages(rewards, reward_weights, advantage_fn, mode=multi_reward,
                                      batch_norm=multi_reward_batch_norm)
        return adv, jnp.sum(rewards * reward_weights, axis=-1)

    def loss(params: Params, state: Any, batch: GroupBatch, key=None, **extra):
        del key, extra
        chex.assert_rank([batch.actions, batch.mask], [3, 3])
        chex.assert_rank(batch.rewards, {2, 3})
        chex.assert_equal_shape([batch.actions, batch.mask, batch.old_log_probs])
        chex.assert_equal_shape_prefix([batch.actions, batch.rewards], 2)
        p, g, t = batch.actions.shape
        if g != group_size:
            raise ValueError(f"group_size: the batch's group axis is {g}, expected {group_size}")
        flat = lambda x: x.reshape(p * g, *x.shape[2:])  # noqa: E731
        group_adv, reward = group_advantages(batch.rewards)
        if batch.advantages is None:
            adv = jnp.broadcast_to(group_adv[..., None], (p, g, t))
        else:
            chex.assert_equal_shape([batch.advantages, batch.actions])
            adv = batch.advantages
        real = flat(batch.mask).astype(jnp.float32)
        mask = real
        if mask_truncated:
            if batch.truncated is None:
                raise ValueError("mask_truncated: needs batch.truncated [P, G] (bool)")
            chex.assert_shape(batch.truncated, (p, g))
            mask = mask * (1.0 - flat(batch.truncated).astype(jnp.float32))[:, None]
        adv = jax.lax.stop_gradient(flat(adv))
        old = flat(batch.old_log_probs)

        log_probs, entropy = log_probs_and_entropy(
            params, jax.tree_util.tree_map(flat, batch.obs), flat(batch.actions))
        chex.assert_equal_shape([log_probs, old])
        train_mask = mask
        metrics = {}
        if entropy is not None:
            chex.assert_equal_shape([entropy, old])
            metrics["entropy"] = jnp.sum(entropy * real) / jnp.maximum(jnp.sum(real), 1.0)
        if entropy_top_q is not None:
            train_mask = losses.top_entropy_mask(entropy, mask, entropy_top_q)
            metrics["entropy_kept_fraction"] = (jnp.sum(train_mask)
                                                / jnp.maximum(jnp.sum(mask), 1.0))
        if sequence_ratio:
            per_token, surrogate = losses.gspo_loss(
                log_probs, old, adv, train_mask, epsilon_low=clip_epsilon,
                epsilon_high=clip_epsilon_high)
            ratio = losses.sequence_importance_ratio(log_probs, old, train_mask)
        else:
            per_token, surrogate = losses.clipped_surrogate_loss(
                log_probs, old, adv, epsilon_low=clip_epsilon,
                epsilon_high=clip_epsilon_high, dual_clip=dual_clip, mask=train_mask)
            ratio = jnp.exp(log_probs - old)
        metrics.update(surrogate)
        metrics["clipfrac_low"], metrics["clipfrac_high"] = losses.clip_fractions(
            jax.lax.stop_gradient(ratio), adv, epsilon_low=clip_epsilon,
            epsilon_high=clip_epsilon_high, mask=train_mask)
        if use_kl:
            kl = losses.kl_penalty(log_probs, flat(batch.ref_log_probs), kl_estimator)
            per_token = per_token + kl_beta * kl
            metrics["kl"] = jnp.sum(kl * train_mask) / jnp.maximum(jnp.sum(train_mask), 1.0)
        else:
            metrics["kl"] = jnp.zeros(())
        value = losses.aggregate_loss(per_token, train_mask, aggregation,
                                      aggregation_normaliser)

        columns = batch.rewards if batch.rewards.ndim == 3 else batch.rewards[..., None]
        spread = jnp.any(jnp.max(columns, axis=1) != jnp.min(columns, axis=1), axis=-1)
        lengths = jnp.sum(batch.mask.astype(jnp.float32), axis=-1)  # [P, G]
        correct = (reward > correct_threshold).astype(jnp.float32)
        metrics = {
            **metrics,
            "loss": value,
            "reward": jnp.mean(reward),
            "signal_fraction": jnp.mean(spread.astype(jnp.float32)),
            "nan_rewards": jnp.sum(jnp.isnan(batch.rewards)),
            # 0 / 0 = NaN when no completion is (in)correct: documented, not hidden
            "response_length_correct": jnp.sum(lengths * correct) / jnp.sum(correct),
            "response_length_incorrect": (jnp.sum(lengths * (1.0 - correct))
                                          / jnp.sum(1.0 - correct)),
        }
        if batch.truncated is not None:
            metrics["truncated_fraction"] = jnp.mean(batch.truncated.astype(jnp.float32))
        return value, LossAux(state, metrics)

    return RLTransform(init=init, update=update_from_loss(loss), loss=loss)
