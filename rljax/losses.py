"""Policy-gradient surrogate losses, KL estimators, value and entropy terms, aggregation.

Every function here is pure and shape-polymorphic over leading batch axes; per-token
terms have the shape of their inputs (``[B, T]`` sequences x tokens, or ``[T, N]`` time x
envs) and are reduced by :func:`aggregate_loss` with an explicit mask. Losses are to be
*minimised*. Each surrogate returns ``(per_token_loss, metrics)`` where the metrics are
computed from quantities the loss already has (clip fraction, approximate KL), so asking
for them costs no extra pass.
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp

from rljax.types import Array

AGGREGATIONS = (
    "token-mean",
    "sequence-mean-token-mean",
    "sequence-mean-token-sum",
    "sequence-mean-token-sum-norm",
)
KL_ESTIMATORS = ("k1", "k2", "k3")


def check_clip(epsilon_low: Any, epsilon_high: Any = None) -> None:
    """Validate clip ranges at build time: ``epsilon_low > 0``, ``epsilon_high >= epsilon_low``.

    Traced values are not checked (they come from a sweep axis).
    """
    if isinstance(epsilon_low, int | float) and not float(epsilon_low) > 0:
        raise ValueError(f"clip_epsilon: must be > 0, got {epsilon_low!r}")
    if epsilon_high is not None and isinstance(epsilon_high, int | float):
        if isinstance(epsilon_low, int | float) and float(epsilon_high) < float(epsilon_low):
            raise ValueError(
                f"clip_epsilon_high: must be >= clip_epsilon_low ({epsilon_low!r}), "
                f"got {epsilon_high!r}"
            )


def check_aggregation(mode: str) -> str:
    """Raise a one-line ``ValueError`` unless ``mode`` is one of :data:`AGGREGATIONS`."""
    if mode not in AGGREGATIONS:
        raise ValueError(f"aggregation: must be one of {', '.join(AGGREGATIONS)}, got {mode!r}")
    return mode


def check_kl_estimator(name: str) -> str:
    """Raise a one-line ``ValueError`` unless ``name`` is ``k1``, ``k2`` or ``k3``."""
    if name not in KL_ESTIMATORS:
        raise ValueError(f"kl_estimator: must be one of {', '.join(KL_ESTIMATORS)}, got {name!r}")
    return name


def policy_gradient_loss(log_probs: Array, advantages: Array) -> Array:
    """Vanilla policy-gradient surrogate ``-A * log pi(a|s)`` per token.

    Its gradient is the REINFORCE estimator ``-A * grad log pi`` (Williams, 1992);
    ``advantages`` are treated as constants.

    Args:
      log_probs: ``[...]`` log-probabilities of the taken actions under the current policy.
      advantages: ``[...]`` same shape.

    Returns:
      ``[...]`` per-token loss.
    """
    chex.assert_equal_shape([log_probs, advantages])
    return -jax.lax.stop_gradient(advantages) * log_probs


def clipped_surrogate_loss(
    log_probs: Array,
    old_log_probs: Array,
    advantages: Array,
    *,
    epsilon_low: float | Array = 0.2,
    epsilon_high: float | Array | None = None,
    dual_clip: float | Array | None = None,
    mask: Array | None = None,
) -> tuple[Array, dict[str, Array]]:
    """PPO's clipped surrogate, with DAPO clip-higher and dual-clip options.

    With ``r = exp(log pi - log pi_old)``:

        L = -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)          (PPO, Schulman 2017)

    ``epsilon_high`` defaults to ``epsilon_low`` (symmetric); a larger one is DAPO's
    clip-higher (Yu et al., 2025). ``dual_clip = c > 1`` (Ye et al., 2020) bounds the
    objective of negative-advantage tokens from below by ``c A``:

        L = -max(min(r A, clip(r) A), c A)    for A < 0.

    Args:
      log_probs: ``[...]`` current log-probabilities of the taken actions.
      old_log_probs: ``[...]`` log-probabilities under the sampling policy.
      advantages: ``[...]`` advantages (constants).
      epsilon_low, epsilon_high: clip range ``[1 - eps_low, 1 + eps_high]``.
      dual_clip: optional constant ``c > 1``.
      mask: optional ``[...]`` mask for the metrics.

    Returns:
      ``(per_token_loss [...], metrics)`` with ``clip_fraction`` (share of masked tokens
      whose ratio was clipped in the direction that matters) and ``approx_kl``
      (``mean((r - 1) - log r)``, the k3 estimate of KL(pi_old || pi)).
    """
    chex.assert_equal_shape([log_probs, old_log_probs, advantages])
    epsilon_high = epsilon_low if epsilon_high is None else epsilon_high
    advantages = jax.lax.stop_gradient(advantages)
    log_ratio = log_probs - jax.lax.stop_gradient(old_log_probs)
    ratio = jnp.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - epsilon_low, 1.0 + epsilon_high) * advantages
    objective = jnp.minimum(unclipped, clipped)
    if dual_clip is not None:
        objective = jnp.where(advantages < 0, jnp.maximum(objective, dual_clip * advantages),
                              objective)
    mask = jnp.ones_like(log_probs) if mask is None else mask.astype(log_probs.dtype)
    was_clipped = (clipped < unclipped).astype(log_probs.dtype)
    denom = jnp.maximum(jnp.sum(mask), 1.0)
    metrics = {
        "clip_fraction": jnp.sum(was_clipped * mask) / denom,
        "approx_kl": jnp.sum(jax.lax.stop_gradient((ratio - 1.0) - log_ratio) * mask) / denom,
    }
    return -objective, metrics


def sequence_importance_ratio(log_probs: Array, old_log_probs: Array, mask: Array) -> Array:
    """GSPO's length-normalised sequence ratio (Zheng et al., 2025)::

        s_i = exp( (1/|y_i|) * sum_t (log pi(y_it) - log pi_old(y_it)) )

    Args:
      log_probs, old_log_probs, mask: ``[B, T]``.

    Returns:
      ``[B, T]``: each sequence's ratio broadcast to its tokens; its gradient is GSPO's
      ``s_i * (1/|y_i|) sum_t grad log pi(y_it)``.
    """
    chex.assert_rank([log_probs, old_log_probs, mask], 2)
    chex.assert_equal_shape([log_probs, old_log_probs, mask])
    mask = mask.astype(log_probs.dtype)
    length = jnp.maximum(jnp.sum(mask, axis=-1, keepdims=True), 1.0)
    mean_log_ratio = jnp.sum((log_probs - jax.lax.stop_gradient(old_log_probs)) * mask,
                             axis=-1, keepdims=True) / length
    return jnp.broadcast_to(jnp.exp(mean_log_ratio), log_probs.shape)


def gspo_loss(
    log_probs: Array,
    old_log_probs: Array,
    advantages: Array,
    mask: Array,
    *,
    epsilon_low: float | Array = 3e-4,
    epsilon_high: float | Array | None = 4e-4,
) -> tuple[Array, dict[str, Array]]:
    """GSPO: the clipped surrogate on the sequence-level ratio (Zheng et al., 2025).

        L_i = -min(s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i)

    placed on every token of sequence ``i`` (aggregate with ``sequence-mean-token-mean``
    to get GSPO's per-sequence objective).

    Args:
      log_probs, old_log_probs, mask: ``[B, T]``.
      advantages: ``[B]`` or ``[B, T]`` (per-sequence advantages broadcast).

    Returns:
      ``(per_token_loss [B, T], metrics)`` as :func:`clipped_surrogate_loss`.
    """
    chex.assert_rank([log_probs, old_log_probs, mask], 2)
    if advantages.ndim == 1:
        advantages = jnp.broadcast_to(advantages[:, None], log_probs.shape)
    chex.assert_equal_shape([log_probs, advantages])
    ratio = sequence_importance_ratio(log_probs, old_log_probs, mask)
    epsilon_high = epsilon_low if epsilon_high is None else epsilon_high
    advantages = jax.lax.stop_gradient(advantages)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - epsilon_low, 1.0 + epsilon_high) * advantages
    objective = jnp.minimum(unclipped, clipped)
    m = mask.astype(log_probs.dtype)
    denom = jnp.maximum(jnp.sum(m), 1.0)
    log_ratio = jax.lax.stop_gradient(jnp.log(ratio))
    metrics = {
        "clip_fraction": jnp.sum((clipped < unclipped) * m) / denom,
        "approx_kl": jnp.sum(((jnp.exp(log_ratio) - 1.0) - log_ratio) * m) / denom,
    }
    return -objective, metrics


def kl_penalty(log_probs: Array, ref_log_probs: Array, estimator: str = "k3") -> Array:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi (Schulman, 2020,
    "Approximating KL divergence"). With ``log rho = log pi_ref - log pi``:

        k1 = -log rho                    (unbiased, high variance, can be negative)
        k2 = (log rho)^2 / 2             (biased, low variance)
        k3 = (rho - 1) - log rho         (unbiased, >= 0; GRPO's estimator)

    Use it as a loss term (``beta * kl`` added to the per-token loss, GRPO) or as a reward
    penalty (``r_t - beta * kl_t``, PPO-RLHF); gradients flow through ``log_probs`` only.

    Args:
      log_probs: ``[...]`` log-probabilities under the current policy.
      ref_log_probs: ``[...]`` under the frozen reference policy.
      estimator: ``"k1"``, ``"k2"`` or ``"k3"``.

    Returns:
      ``[...]`` per-token estimates.
    """
    check_kl_estimator(estimator)
    chex.assert_equal_shape([log_probs, ref_log_probs])
    log_rho = jax.lax.stop_gradient(ref_log_probs) - log_probs
    if estimator == "k1":
        return -log_rho
    if estimator == "k2":
        return 0.5 * jnp.square(log_rho)
    return jnp.expm1(log_rho) - log_rho


def value_loss(
    values: Array,
    returns: Array,
    old_values: Array | None = None,
    clip_epsilon: float | Array | None = None,
) -> Array:
    """Squared-error value loss ``0.5 (V - R)^2``, optionally clipped as in PPO
    (Schulman et al., 2017; the "value clipping" of the baselines implementation):

        0.5 * max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2)

    Args:
      values: ``[...]`` current value predictions.
      returns: ``[...]`` regression targets (constants).
      old_values: ``[...]`` predictions at sampling time (needed when clipping).
      clip_epsilon: clip range, or ``None`` for the plain loss.

    Returns:
      ``[...]`` per-step loss.
    """
    chex.assert_equal_shape([values, returns])
    returns = jax.lax.stop_gradient(returns)
    loss = jnp.square(values - returns)
    if clip_epsilon is not None:
        if old_values is None:
            raise ValueError("value_loss: old_values is required when clip_epsilon is set")
        chex.assert_equal_shape([values, old_values])
        old_values = jax.lax.stop_gradient(old_values)
        clipped = old_values + jnp.clip(values - old_values, -clip_epsilon, clip_epsilon)
        loss = jnp.maximum(loss, jnp.square(clipped - returns))
    return 0.5 * loss


def categorical_entropy(logits: Array) -> Array:
    """Entropy ``-sum_a pi(a) log pi(a)`` of ``softmax(logits)`` over the last axis.

    Args:
      logits: ``[..., A]``.

    Returns:
      ``[...]``.
    """
    log_p = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)


def aggregate_loss(
    per_token: Array, mask: Array, mode: str = "token-mean", normaliser: float | None = None
) -> Array:
    """Reduce a per-token loss ``[B, T]`` (sequences x tokens) to a scalar.

    With ``m`` the mask and ``L`` the loss:

    * ``token-mean``: ``sum L m / sum m`` (every token weighs the same; DAPO);
    * ``sequence-mean-token-mean``: ``mean_i (sum_t L m / sum_t m)`` (GRPO as published:
      long sequences' tokens weigh less);
    * ``sequence-mean-token-sum``: ``mean_i sum_t L m`` (REINFORCE over whole sequences);
    * ``sequence-mean-token-sum-norm``: ``sum L m / (B * normaliser)`` with a constant
      normaliser, by default ``T`` (Dr. GRPO, Liu et al., 2025: no length bias).

    Args:
      per_token: ``[B, T]``.
      mask: ``[B, T]`` 1 for real tokens.
      mode: one of :data:`AGGREGATIONS`.
      normaliser: the constant of ``sequence-mean-token-sum-norm`` (default ``T``).

    Returns:
      scalar loss.
    """
    check_aggregation(mode)
    chex.assert_rank([per_token, mask], 2)
    chex.assert_equal_shape([per_token, mask])
    m = mask.astype(per_token.dtype)
    masked = per_token * m
    num_sequences, num_tokens = per_token.shape
    if mode == "token-mean":
        return jnp.sum(masked) / jnp.maximum(jnp.sum(m), 1.0)
    if mode == "sequence-mean-token-mean":
        per_sequence = jnp.sum(masked, axis=-1) / jnp.maximum(jnp.sum(m, axis=-1), 1.0)
        return jnp.mean(per_sequence)
    if mode == "sequence-mean-token-sum":
        return jnp.mean(jnp.sum(masked, axis=-1))
    norm = float(num_tokens) if normaliser is None else normaliser
    return jnp.sum(masked) / (num_sequences * norm)


def clip_fractions(
    ratio: Array, advantages: Array, *, epsilon_low: float | Array = 0.2,
    epsilon_high: float | Array | None = None, mask: Array | None = None,
) -> tuple[Array, Array]:
    """The two sides of the clip, as shares of the masked tokens:

        clipfrac_low  = mean_m[ ratio < 1 - eps_low  and A < 0 ]
        clipfrac_high = mean_m[ ratio > 1 + eps_high and A > 0 ]

    These are the tokens whose gradient the clip removes (the clipped term is the smaller
    one), so ``clipfrac_low + clipfrac_high`` is :func:`clipped_surrogate_loss`'s
    ``clip_fraction`` (verl's ``pg_clipfrac``). Split in two they tell DAPO's clip-higher
    (Yu et al., 2025) apart from the lower clip. (verl's ``pg_clipfrac_lower`` is a third
    quantity, the share of negative-advantage tokens bounded by the dual clip.)

    Args:
      ratio: ``[...]`` importance ratios (token or GSPO sequence ratios).
      advantages: ``[...]`` same shape.
      epsilon_low, epsilon_high: clip range ``[1 - eps_low, 1 + eps_high]`` (``high``
        defaults to ``low``).
      mask: optional ``[...]`` 1 for the tokens to count.

    Returns:
      ``(clipfrac_low [], clipfrac_high [])``.
    """
    chex.assert_equal_shape([ratio, advantages])
    epsilon_high = epsilon_low if epsilon_high is None else epsilon_high
    m = jnp.ones_like(ratio) if mask is None else mask.astype(ratio.dtype)
    low = (ratio < 1.0 - epsilon_low) & (advantages < 0)
    high = (ratio > 1.0 + epsilon_high) & (advantages > 0)
    denom = jnp.maximum(jnp.sum(m), 1.0)
    return jnp.sum(low * m) / denom, jnp.sum(high * m) / denom


def check_top_q(top_q: Any) -> None:
    """One-line ``ValueError`` unless ``top_q`` (a scalar ``[]``) is ``None`` or in
    ``(0, 1]`` (a traced value, e.g. a sweep axis, is not checked)."""
    if isinstance(top_q, bool) or (isinstance(top_q, int | float) and not 0.0 < top_q <= 1.0):
        raise ValueError(f"entropy_top_q: must be None or a number in (0, 1], got {top_q!r}")
    if top_q is not None and not isinstance(top_q, int | float | jax.Array):
        raise ValueError(f"entropy_top_q: must be None or a number in (0, 1], got {top_q!r}")


def top_entropy_mask(entropy: Array, mask: Array, top_q: float | Array) -> Array:
    """Keep the highest-entropy fraction ``q`` of the valid tokens (Wang et al., 2025,
    "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective RL for LLM
    Reasoning", §5: the policy gradient on the top 20 % "forking" tokens only).

    With ``n`` valid tokens in the whole batch and ``k = ceil(q n)`` (``>= 1``), the
    threshold ``h`` is the ``k``-th largest valid entropy and

        keep_t = mask_t * [H_t >= h]

    (ties at ``h`` are kept, so slightly more than ``k`` may be). The entropy is a
    constant here (stop-gradient). ``q = 1`` keeps every valid token.

    Args:
      entropy: ``[B, T]`` per-token policy entropy (e.g.
        :func:`categorical_entropy` of the current logits).
      mask: ``[B, T]`` 1 for valid tokens.
      top_q: ``q`` in ``(0, 1]``.

    Returns:
      ``[B, T]`` the new mask, in ``mask``'s dtype.
    """
    check_top_q(top_q if isinstance(top_q, int | float) else None)
    chex.assert_equal_shape([entropy, mask])
    entropy = jax.lax.stop_gradient(entropy)
    valid = mask > 0
    n = jnp.sum(valid)
    # float32 q * n can land just above an integer (0.2 * 30 -> 6.0000002): a small
    # margin keeps ceil on the intended count.
    k = jnp.clip(jnp.ceil(top_q * n - 1e-3), 1, jnp.maximum(n, 1)).astype(jnp.int32)
    ranked = jnp.sort(jnp.where(valid, entropy, -jnp.inf).ravel())[::-1]
    threshold = ranked[k - 1]
    return (mask * (valid & (entropy >= threshold))).astype(mask.dtype)
