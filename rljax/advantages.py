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
    """``b = 0``: plain REINFORCE (Williams, 1992)."""

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
    2024); unbiased because ``b_g`` never sees episode ``g``. Needs ``G >= 2``."""

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

    ``kwargs`` go to the factory (``initial``, ``rate`` for ``ema``).
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
