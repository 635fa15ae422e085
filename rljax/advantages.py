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

GROUP_ESTIMATORS = ("group_relative", "group_mean", "leave_one_out")


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


def make_group_advantage(name: str, **kwargs: Any) -> Callable[[Array], Array]:
    """A group advantage estimator by name (``group_relative``, ``group_mean``,
    ``leave_one_out``); ``kwargs`` go to it (``epsilon``, ``ddof``).

    Returns:
      ``advantage(rewards [..., G]) -> advantages [..., G]`` (groups on the last axis).
    """
    table = {
        "group_relative": group_relative_advantages,
        "group_mean": group_mean_advantages,
        "leave_one_out": leave_one_out_advantages,
    }
    if name not in table:
        raise ValueError(f"advantage: must be one of {', '.join(GROUP_ESTIMATORS)}, got {name!r}")
    if name == "group_relative":
        ddof = kwargs.get("ddof", 0)
        if ddof not in (0, 1):
            raise ValueError(f"ddof: must be 0 or 1, got {ddof!r}")
    fn = table[name]
    return lambda rewards: fn(rewards, **kwargs)


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
