"""Baselines and returns for policy-gradient advantages, as small pure functions.

A baseline is an ``(init, update)`` pair in optax's shape:

    state = baseline.init()
    b, state = baseline.update(state, episode_rewards)   # episode_rewards: [G]

``b`` has shape ``[G]`` and is the value subtracted from each episode's return; ``state``
is an explicit pytree (carried in the RL transform's state, so a seed axis can be added
by vmap). A baseline must not depend on the action taken in the episode it is applied to
for the estimator to stay unbiased; the EMA baseline uses only *earlier* episodes, the
leave-one-out baseline only the *other* group members. Group mean (GRPO/Dr. GRPO) does
include the episode itself, which biases the gradient by a factor ``(G-1)/G``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp

from rljax.types import Array


class Baseline(NamedTuple):
    """``init() -> state``; ``update(state, episode_rewards [G]) -> (baseline [G], state)``."""

    init: Callable[[], Any]
    update: Callable[[Any, Array], tuple[Array, Any]]


def no_baseline() -> Baseline:
    """``b = 0``: plain REINFORCE (Williams, 1992).

    ``update(state, episode_rewards [G]) -> (zeros [G], state)``; the state is ``()``.
    """

    def init():
        return ()

    def update(state, episode_rewards):
        chex.assert_rank(episode_rewards, 1)
        return jnp.zeros_like(episode_rewards), state

    return Baseline(init, update)


def ema_baseline(initial: float = 0.5, rate: float = 0.05) -> Baseline:
    """Exponential moving average of past episode rewards (Williams, 1992, reinforcement
    comparison; Sutton & Barto 2018, §13.4).

    ``b_k`` is the value *before* batch ``k``; after it
    ``b_{k+1} = b_k + rate * (mean_g R_g - b_k)``. With one episode per update this is the
    classic per-episode EMA. ``initial`` and ``rate`` may be traced (sweepable) scalars.

    Args:
      initial: ``b_0``.
      rate: step size in ``(0, 1]``.

    Returns:
      A :class:`Baseline`: ``update(state, episode_rewards [G]) -> (b_k broadcast to
      [G], state)``; the state is ``{"value": float32 []}``.
    """
    _check_rate(rate)

    def init():
        return {"value": jnp.asarray(initial, jnp.float32)}

    def update(state, episode_rewards):
        chex.assert_rank(episode_rewards, 1)
        b = state["value"]
        new_value = b + rate * (jnp.mean(episode_rewards) - b)
        return jnp.broadcast_to(b, episode_rewards.shape), {"value": new_value}

    return Baseline(init, update)


def group_mean_baseline() -> Baseline:
    """``b_g = mean_j R_j`` over the group ``[G]`` (GRPO's and Dr. GRPO's centring;
    Shao et al., 2024; Liu et al., 2025). Needs ``G >= 2`` to carry any signal."""

    def init():
        return ()

    def update(state, episode_rewards):
        chex.assert_rank(episode_rewards, 1)
        _check_group(episode_rewards, "group_mean")
        b = jnp.mean(episode_rewards)
        return jnp.broadcast_to(b, episode_rewards.shape), state

    return Baseline(init, update)


def leave_one_out_baseline() -> Baseline:
    """``b_g = (sum_j R_j - R_g) / (G - 1)``: RLOO (Kool et al., 2019; Ahmadian et al.,
    2024); unbiased because ``b_g`` never sees episode ``g``. Needs ``G >= 2``.

    ``update(state, episode_rewards [G]) -> (baseline [G], state)``; the state is ``()``.
    """

    def init():
        return ()

    def update(state, episode_rewards):
        chex.assert_rank(episode_rewards, 1)
        _check_group(episode_rewards, "leave_one_out")
        g = episode_rewards.shape[0]
        total = jnp.sum(episode_rewards)
        return (total - episode_rewards) / (g - 1), state

    return Baseline(init, update)


BASELINES: dict[str, Callable[..., Baseline]] = {
    "none": no_baseline,
    "ema": ema_baseline,
    "group_mean": group_mean_baseline,
    "leave_one_out": leave_one_out_baseline,
}


def make_baseline(name: str, **kwargs: Any) -> Baseline:
    """Build a baseline by name: one of ``none``, ``ema``, ``group_mean``, ``leave_one_out``.

    ``kwargs`` go to the factory (``initial``, ``rate`` for ``ema``). Every baseline maps
    episode rewards ``[G]`` to baselines ``[G]`` (see :class:`Baseline`).
    """
    if name not in BASELINES:
        raise ValueError(f"baseline: must be one of {sorted(BASELINES)}, got {name!r}")
    return BASELINES[name](**kwargs)


def discounted_returns(rewards: Array, discount: float | Array, mask: Array | None = None) -> Array:
    """Reward-to-go ``G_t = r_t + discount * G_{t+1}`` (with ``G_T = 0``) along the last axis.

    ``discount = 1`` gives the undiscounted return-to-go (every step of an outcome-reward
    episode sees the final reward); ``discount = 0`` gives the immediate reward
    ``G_t = r_t`` (per-step process reward). Computed with ``lax.scan(reverse=True)``.

    Args:
      rewards: ``[..., T]``.
      discount: scalar in ``[0, 1]``.
      mask: optional ``[..., T]``; steps with mask 0 contribute no reward and cut the
        recursion (padding after an episode's end).

    Returns:
      ``[..., T]`` returns, same dtype as ``rewards``.
    """
    if mask is None:
        mask = jnp.ones_like(rewards)
    chex.assert_equal_shape([rewards, mask])
    rewards_t = jnp.moveaxis(rewards * mask, -1, 0)
    mask_t = jnp.moveaxis(mask.astype(rewards.dtype), -1, 0)

    def body(next_return, inputs):
        r, m = inputs
        g = r + discount * next_return * m
        return g, g

    num_steps = rewards_t.shape[0]
    _, returns = jax.lax.scan(
        body,
        jnp.zeros_like(rewards_t[0]),
        (rewards_t, mask_t),
        reverse=True,
        unroll=num_steps if num_steps <= 32 else 8,  # short episodes: no loop overhead
    )
    return jnp.moveaxis(returns, 0, -1)


def _check_rate(rate: Any) -> None:
    if isinstance(rate, int | float) and not (0.0 < float(rate) <= 1.0):
        raise ValueError(f"baseline rate: must be in (0, 1], got {rate!r}")


def _check_group(episode_rewards: Array, name: str) -> None:
    if episode_rewards.shape[0] < 2:
        raise ValueError(
            f"{name} baseline: needs a group of >= 2 episodes, got shape {episode_rewards.shape}"
        )


# --------------------------------------------------------------------------------------
# Group advantages (GRPO family), GAE and process-supervision advantages.
# --------------------------------------------------------------------------------------

GROUP_ESTIMATORS = ("group_relative", "group_mean", "leave_one_out", "reinforce_pp",
                    "reinforce_pp_baseline")
SCALE_REWARDS = ("group", "batch", "none")
MULTI_REWARD_MODES = ("sum_then_normalize", "normalize_then_sum")


def _all_equal(rewards: Array) -> Array:
    """``[..., G] -> [..., 1]`` bool: every member of the group has the same reward."""
    return (jnp.max(rewards, axis=-1, keepdims=True) == jnp.min(rewards, axis=-1, keepdims=True))


def _check_group_axis(rewards: Array) -> None:
    if rewards.ndim < 1 or rewards.shape[-1] < 2:
        raise ValueError(f"group size: must be >= 2 along the last axis, got shape {rewards.shape}")


def group_relative_advantages(rewards: Array, *, epsilon: float = 1e-6, ddof: int = 0) -> Array:
    """GRPO's outcome advantage (Shao et al., 2024, DeepSeekMath §4.1.2):

        A_i = (r_i - mean(r)) / (std(r) + epsilon)

    over the group axis (the last one). A group whose rewards are all equal gets exactly 0
    (selected explicitly: in float32, ``r - mean(r)`` of equal large rewards is not
    always 0). NaN rewards propagate (they are never turned into numbers).

    Args:
      rewards: ``[..., G]`` (e.g. ``[P, G]`` prompts x group members), ``G >= 2``.
      epsilon: added to the std.
      ddof: delta degrees of freedom of the std (0: population std, the default of the
        published implementations; 1: sample std).

    Returns:
      ``[..., G]`` advantages.
    """
    _check_group_axis(rewards)
    if ddof not in (0, 1):
        raise ValueError(f"ddof: must be 0 or 1, got {ddof!r}")
    centred = rewards - jnp.mean(rewards, axis=-1, keepdims=True)
    std = jnp.std(rewards, axis=-1, keepdims=True, ddof=ddof)
    return jnp.where(_all_equal(rewards), jnp.zeros_like(centred), centred / (std + epsilon))


def group_mean_advantages(rewards: Array) -> Array:
    """Dr. GRPO's advantage (Liu et al., 2025): ``A_i = r_i - mean(r)``, no std division
    (which up-weights groups of low variance, i.e. too easy or too hard prompts).
    All-equal groups get exactly 0.

    Args:
      rewards: ``[..., G]``, ``G >= 2``.

    Returns:
      ``[..., G]``.
    """
    _check_group_axis(rewards)
    centred = rewards - jnp.mean(rewards, axis=-1, keepdims=True)
    return jnp.where(_all_equal(rewards), jnp.zeros_like(centred), centred)


def leave_one_out_advantages(rewards: Array) -> Array:
    """RLOO (Kool et al., 2019; Ahmadian et al., 2024):
    ``A_i = r_i - (sum_j r_j - r_i) / (G - 1)`` -- unbiased, since the baseline of member
    ``i`` never sees ``r_i``; equals ``G / (G - 1) * (r_i - mean(r))``. All-equal groups get
    exactly 0.

    Args:
      rewards: ``[..., G]``, ``G >= 2``.

    Returns:
      ``[..., G]``.
    """
    _check_group_axis(rewards)
    g = rewards.shape[-1]
    baseline = (jnp.sum(rewards, axis=-1, keepdims=True) - rewards) / (g - 1)
    centred = rewards - baseline
    return jnp.where(_all_equal(rewards), jnp.zeros_like(centred), centred)


def _check_ddof(ddof: Any) -> None:
    if ddof not in (0, 1):
        raise ValueError(f"ddof: must be 0 or 1, got {ddof!r}")


def _check_scale(scale: Any) -> None:
    if scale not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards: must be one of {', '.join(SCALE_REWARDS)}, "
                         f"got {scale!r}")


def batch_normalize(values: Array, *, epsilon: float = 1e-6, ddof: int = 0) -> Array:
    """Whiten over the whole array: ``(x - mean(x)) / (std(x) + epsilon)``, every entry of
    ``values`` being one sample of the batch (call it per seed; vmap adds seeds).

    The batch-level normalisation of REINFORCE++ (Hu et al., 2025, §3) and of GDPO's last
    step (Liu et al., 2026). A batch whose entries are all equal gets exactly 0; NaN
    propagates.

    Args:
      values: ``[...]`` e.g. ``[P, G]`` per-completion advantages.
      epsilon: added to the std.
      ddof: 0 (population std) or 1 (sample std).

    Returns:
      ``[...]``, same shape.
    """
    _check_ddof(ddof)
    centred = values - jnp.mean(values)
    std = jnp.std(values, ddof=ddof)
    all_equal = jnp.max(values) == jnp.min(values)
    return jnp.where(all_equal, jnp.zeros_like(centred), centred / (std + epsilon))


def scaled_group_advantages(
    rewards: Array, *, baseline: str = "group_mean", scale: str = "group",
    epsilon: float = 1e-6, ddof: int = 0,
) -> Array:
    """A group baseline, then a choice of scale (TRL's ``scale_rewards``):

        A_i = (r_i - b_i) / (s + epsilon)        (s = 1 and no epsilon for "none")

    with ``b_i`` the group mean (``baseline="group_mean"``; GRPO, Shao et al., 2024) or the
    leave-one-out mean (``"leave_one_out"``; RLOO, Ahmadian et al., 2024), and

    * ``scale="group"``: ``s = std_j r_j`` over the group (GRPO);
    * ``scale="batch"``: ``s = std r`` over *every* reward of the array (all groups; TRL's
      ``scale_rewards="batch"``, after Liu et al., 2025, Dr. GRPO §3.1: the per-group std
      up-weights groups that are nearly all right or all wrong; one batch std does not);
    * ``scale="none"``: ``s = 1`` (Dr. GRPO: centre only).

    TRL uses the sample std (``ddof=1``) and ``epsilon=1e-4``; this module's default is the
    population std and ``1e-6`` (as :func:`group_relative_advantages`). All-equal groups get
    exactly 0; NaN propagates. ``baseline="group_mean", scale="group"`` equals
    :func:`group_relative_advantages`.

    Args:
      rewards: ``[..., G]`` (e.g. ``[P, G]``), ``G >= 2``; for ``"batch"`` the whole array
        is the batch.
      baseline: ``"group_mean"`` or ``"leave_one_out"``.
      scale: ``"group"``, ``"batch"`` or ``"none"``.
      epsilon: added to the std.
      ddof: 0 or 1, for the std.

    Returns:
      ``[..., G]`` advantages.
    """
    _check_group_axis(rewards)
    _check_ddof(ddof)
    _check_scale(scale)
    if baseline == "group_mean":
        centred = group_mean_advantages(rewards)
    elif baseline == "leave_one_out":
        centred = leave_one_out_advantages(rewards)
    else:
        raise ValueError(f"baseline: must be group_mean or leave_one_out, got {baseline!r}")
    if scale == "none":
        return centred
    if scale == "group":
        std = jnp.std(rewards, axis=-1, keepdims=True, ddof=ddof)
    else:
        std = jnp.std(rewards, ddof=ddof)
    return centred / (std + epsilon)


def reinforce_pp_advantages(
    rewards: Array, *, group_baseline: bool = False, epsilon: float = 1e-6, ddof: int = 0,
) -> Array:
    """REINFORCE++ outcome advantages (Hu et al., 2025, "REINFORCE++", §3): normalised
    by the mean and std over the *whole batch*, not per group:

        A_i = (r_i - mean_B r) / (std_B r + epsilon)                      (REINFORCE++)

    With ``group_baseline=True`` ("REINFORCE++-baseline", the paper's variant for
    ``G > 1`` samples per prompt) the group mean is subtracted first:

        r'_i = r_i - mean_{j in group(i)} r_j
        A_i  = (r'_i - mean_B r') / (std_B r' + epsilon)

    ``B`` is every completion of the array (call it per seed; vmap adds seeds). Each
    completion counts once; OpenRLHF whitens over tokens instead, which weights a
    completion by its length (identical when all lengths are equal). In the baseline
    variant all-equal groups keep exactly 0 (``mean_B r'`` is 0 in exact arithmetic); an
    all-equal batch gets exactly 0; NaN propagates.

    Args:
      rewards: ``[..., G]`` (e.g. ``[P, G]``), ``G >= 2``.
      group_baseline: subtract the group mean first.
      epsilon: added to the batch std.
      ddof: 0 or 1, for the batch std.

    Returns:
      ``[..., G]`` advantages.
    """
    _check_group_axis(rewards)
    _check_ddof(ddof)
    if not group_baseline:
        return batch_normalize(rewards, epsilon=epsilon, ddof=ddof)
    centred = group_mean_advantages(rewards)
    normalised = batch_normalize(centred, epsilon=epsilon, ddof=ddof)
    return jnp.where(_all_equal(rewards), jnp.zeros_like(normalised), normalised)


_DEFAULT_SCALE = {"group_relative": "group", "group_mean": "none", "leave_one_out": "none"}


def make_group_advantage(name: str, *, scale_rewards: str | None = None,
                         **kwargs: Any) -> Callable[[Array], Array]:
    """A group advantage estimator by name; ``kwargs`` go to it (``epsilon``, ``ddof``).

    ==========================  ============================================================
    ``group_relative``          GRPO, :func:`group_relative_advantages`
    ``group_mean``              Dr. GRPO, :func:`group_mean_advantages`
    ``leave_one_out``           RLOO, :func:`leave_one_out_advantages`
    ``reinforce_pp``            REINFORCE++, :func:`reinforce_pp_advantages`
    ``reinforce_pp_baseline``   REINFORCE++-baseline (group mean, then batch whitening)
    ==========================  ============================================================

    ``scale_rewards`` (``"group"``, ``"batch"``, ``"none"``; :func:`scaled_group_advantages`)
    divides the centred rewards of the first three by the group std, the batch std or
    nothing. ``None`` keeps each estimator's own scale (group for ``group_relative``, none
    for ``group_mean`` and ``leave_one_out``), as does naming that same scale: both give
    the estimator's function unchanged, bit for bit. So ``group_relative`` with
    ``"none"`` is Dr. GRPO's advantage and ``group_mean`` with ``"group"`` is GRPO's.

    Returns:
      ``advantage(rewards [..., G]) -> advantages [..., G]`` (groups on the last axis; the
      batch estimators treat the whole array as the batch).
    """
    table = {
        "group_relative": group_relative_advantages,
        "group_mean": group_mean_advantages,
        "leave_one_out": leave_one_out_advantages,
        "reinforce_pp": functools.partial(reinforce_pp_advantages, group_baseline=False),
        "reinforce_pp_baseline": functools.partial(reinforce_pp_advantages,
                                                   group_baseline=True),
    }
    if name not in table:
        raise ValueError(f"advantage: must be one of {', '.join(GROUP_ESTIMATORS)}, got {name!r}")
    if "ddof" in kwargs:
        _check_ddof(kwargs["ddof"])
    if scale_rewards is not None:
        _check_scale(scale_rewards)
        if name not in _DEFAULT_SCALE:
            raise ValueError(f"scale_rewards: applies to group_relative, group_mean and "
                             f"leave_one_out advantages, not {name!r}; leave it None")
        if scale_rewards != _DEFAULT_SCALE[name]:
            baseline = "leave_one_out" if name == "leave_one_out" else "group_mean"
            return lambda rewards: scaled_group_advantages(
                rewards, baseline=baseline, scale=scale_rewards, **kwargs)
    fn = table[name]
    return lambda rewards: fn(rewards, **kwargs)


def multi_reward_advantages(
    rewards: Array, weights: Array, advantage_fn: Callable[[Array], Array], *,
    mode: str = "sum_then_normalize", batch_norm: bool = True, epsilon: float = 1e-6,
) -> Array:
    """Advantages from ``K`` reward functions with weights ``w [K]``.

    * ``"sum_then_normalize"`` (the usual; e.g. TRL's ``reward_weights``): one reward
      ``r_i = sum_k w_k r_ik``, then the group advantage ``A = advantage_fn(r)``.
    * ``"normalize_then_sum"`` (GDPO; Liu et al., 2026, "GDPO: Group reward-Decoupled
      Normalization Policy Optimization", arXiv:2601.05242): each reward is normalised
      within its group first (``advantage_fn`` per reward, GRPO's z-score by default),
      then summed with the weights, then (``batch_norm``) whitened over the batch so the
      scale does not grow with ``K``:

          A_ik  = advantage_fn(r_{., k})_i
          A_i   = sum_k w_k A_ik
          A_i  <- (A_i - mean_B A) / (std_B A + epsilon)      (batch_norm=True)

      Decoupling keeps reward combinations apart that one joint normalisation maps to the
      same advantage (e.g. (1, 0) and (0, 1) in a group of two rewards).

    Args:
      rewards: ``[..., G, K]`` (e.g. ``[P, G, K]``).
      weights: ``[K]``.
      advantage_fn: ``[..., G] -> [..., G]`` (e.g. from :func:`make_group_advantage`).
      mode: ``"sum_then_normalize"`` or ``"normalize_then_sum"``.
      batch_norm: GDPO's final batch whitening (``normalize_then_sum`` only).
      epsilon: added to the batch std.

    Returns:
      ``[..., G]`` advantages.
    """
    if mode not in MULTI_REWARD_MODES:
        raise ValueError(f"multi_reward: must be one of {', '.join(MULTI_REWARD_MODES)}, "
                         f"got {mode!r}")
    weights = jnp.asarray(weights)
    if rewards.ndim < 2 or weights.ndim != 1 or rewards.shape[-1] != weights.shape[0]:
        raise ValueError(f"reward_weights: must have shape [K] with K = rewards.shape[-1]; "
                         f"got weights {weights.shape} for rewards {rewards.shape}")
    if mode == "sum_then_normalize":
        return advantage_fn(jnp.sum(rewards * weights, axis=-1))
    per_reward = jax.vmap(advantage_fn)(jnp.moveaxis(rewards, -1, 0))  # [K, ..., G]
    summed = jnp.sum(per_reward * weights.reshape((-1,) + (1,) * (per_reward.ndim - 1)),
                     axis=0)
    return batch_normalize(summed, epsilon=epsilon) if batch_norm else summed


def check_overlong(max_length: Any, cache_length: Any) -> None:
    """One-line ``ValueError`` unless ``0 < max_length`` and ``0 <= cache_length <=
    max_length`` (both scalars ``[]``; traced values are not checked)."""
    if isinstance(max_length, int | float) and not max_length > 0:
        raise ValueError(f"max_length: must be > 0, got {max_length!r}")
    if isinstance(cache_length, int | float):
        if not cache_length >= 0:
            raise ValueError(f"cache_length: must be >= 0, got {cache_length!r}")
        if isinstance(max_length, int | float) and cache_length > max_length:
            raise ValueError(f"cache_length: must be <= max_length ({max_length!r}), "
                             f"got {cache_length!r}")


def overlong_penalty(lengths: Array, max_length: int | Array,
                     cache_length: int | Array) -> Array:
    """DAPO's soft overlong punishment (Yu et al., 2025, "DAPO", eq. 13), a reward term:

        R(L) = 0                                   L <= L_max - L_cache
               ((L_max - L_cache) - L) / L_cache   L_max - L_cache < L <= L_max
               -1                                  L_max < L

    It falls linearly from 0 to -1 over the last ``L_cache`` tokens. Add it to the task
    reward (DAPO) or pass it as one more reward column with its weight (``grpo``'s
    ``reward_weights``). With ``cache_length = 0`` it is 0 up to ``L_max``, -1 beyond.

    Args:
      lengths: ``[...]`` completion lengths in tokens (int or float; e.g.
        ``mask.sum(-1)`` of ``[P, G, T]``).
      max_length: ``L_max > 0``.
      cache_length: ``L_cache`` in ``[0, L_max]``.

    Returns:
      ``[...]`` float32 penalties in ``[-1, 0]``.
    """
    check_overlong(max_length, cache_length)
    length = jnp.asarray(lengths).astype(jnp.float32)
    start = jnp.asarray(max_length - cache_length, jnp.float32)
    ramp = (start - length) / jnp.maximum(jnp.asarray(cache_length, jnp.float32), 1e-30)
    return jnp.where(length <= start, 0.0,
                     jnp.where(length <= max_length, ramp, -1.0)).astype(jnp.float32)

def process_supervision_advantages(
    step_rewards: Array, step_ends: Array, step_mask: Array, num_tokens: int,
    *, epsilon: float = 1e-6,
) -> Array:
    """Process-supervision advantages (Shao et al., 2024, DeepSeekMath §4.1.3).

    Step rewards of all members of a group are normalised together,
    ``r~ = (r - mean(R)) / (std(R) + epsilon)`` with ``R`` every valid step reward of the
    group, and each token's advantage is the sum of the normalised rewards of the steps
    that end at or after it:

        A_{i,t} = sum_{k : end(i, k) >= t} r~_{i,k}

    Args:
      step_rewards: ``[G, K]`` reward of step ``k`` of member ``i``.
      step_ends: ``[G, K]`` int token index at which step ``k`` ends (inclusive).
      step_mask: ``[G, K]`` 1 for real steps.
      num_tokens: T, the token axis of the result.
      epsilon: added to the std.

    Returns:
      ``[G, T]`` token advantages (0 after a member's last step). A group whose valid
      step rewards are all equal gets exactly 0.
    """
    chex.assert_rank([step_rewards, step_ends, step_mask], 2)
    chex.assert_equal_shape([step_rewards, step_ends, step_mask])
    m = step_mask.astype(step_rewards.dtype)
    count = jnp.maximum(jnp.sum(m), 1.0)
    mean = jnp.sum(step_rewards * m) / count
    std = jnp.sqrt(jnp.sum(jnp.square(step_rewards - mean) * m) / count)
    valid = step_mask > 0
    big = jnp.finfo(step_rewards.dtype).max
    all_equal = (jnp.max(jnp.where(valid, step_rewards, -big))
                 == jnp.min(jnp.where(valid, step_rewards, big)))
    normalised = jnp.where(all_equal, 0.0, (step_rewards - mean) / (std + epsilon)) * m
    t = jnp.arange(num_tokens)
    covers = step_ends[:, None, :] >= t[None, :, None]  # [G, T, K]
    return jnp.sum(jnp.where(covers, normalised[:, None, :], 0.0), axis=-1)


def generalized_advantage_estimation(
    rewards: Array,
    values: Array,
    last_value: Array,
    terminated: Array,
    *,
    gamma: float | Array,
    lam: float | Array,
    truncated: Array | None = None,
    truncation_values: Array | None = None,
) -> tuple[Array, Array]:
    """GAE(gamma, lambda) (Schulman et al., 2016) along the leading time axis:

        delta_t = r_t + gamma * (1 - term_t) * V_{t+1} - V_t
        A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}

    with ``V_T = last_value`` and ``done_t = term_t or trunc_t``. At a truncation the
    bootstrap value is ``truncation_values[t]`` (the value of the observation the time
    limit cut, before auto-reset; gymnax >= 1.0 semantics); without it a truncation is
    not bootstrapped. Computed with ``lax.scan(reverse=True)``.

    Args:
      rewards, values, terminated: ``[T, ...]`` (e.g. ``[T, N]`` for N envs).
      last_value: ``[...]`` value of the observation after the last step.
      gamma, lam: in ``[0, 1]``.
      truncated: optional ``[T, ...]`` bool.
      truncation_values: optional ``[T, ...]``.

    Returns:
      ``(advantages [T, ...], returns [T, ...])`` with ``returns = advantages + values``.
    """
    for name, value in (("gamma", gamma), ("lambda", lam)):
        if isinstance(value, int | float) and not 0.0 <= float(value) <= 1.0:
            raise ValueError(f"{name}: must be in [0, 1], got {value!r}")
    chex.assert_equal_shape([rewards, values, terminated])
    chex.assert_equal_shape([last_value, values[0]])
    term = terminated.astype(values.dtype)
    trunc = jnp.zeros_like(term) if truncated is None else truncated.astype(values.dtype)
    next_values = jnp.concatenate([values[1:], last_value[None]], axis=0)
    if truncation_values is not None:
        chex.assert_equal_shape([truncation_values, values])
        next_values = jnp.where(trunc > 0, truncation_values, next_values)
    else:
        next_values = next_values * (1.0 - trunc)
    deltas = rewards + gamma * (1.0 - term) * next_values - values
    continues = (1.0 - jnp.maximum(term, trunc)) * gamma * lam

    def body(next_advantage, inputs):
        delta, cont = inputs
        advantage = delta + cont * next_advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(body, jnp.zeros_like(last_value), (deltas, continues),
                                 reverse=True)
    return advantages, advantages + values
