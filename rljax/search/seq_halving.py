"""Sequential Halving with Gumbel at the root (Gumbel MuZero's root action selection).

Sequential Halving (Karnin et al. 2013, "Almost optimal exploration in multi-armed
bandits") splits the budget into ``ceil(log2 m)`` phases; each phase visits every
remaining action equally often, then keeps the better half. Danihelka et al. 2022 ("Policy
improvement by planning with Gumbel") run it on ``m`` actions sampled without replacement
by the Gumbel-top-k trick. Written as a schedule: simulation ``i`` visits, among the actions
whose visit count equals ``considered_visits(m, n)[i]``, the one with the best score.
"""

from __future__ import annotations

import math

import chex
import jax.numpy as jnp


def get_sequence_of_considered_visits(
    max_num_considered_actions: int, num_simulations: int
) -> tuple[int, ...]:
    """The visit count a root action must have to be considered at each simulation.

    Phase ``k`` (``m_k`` actions remaining, ``m_0 = m``, ``m_{k+1} = max(2, m_k // 2)``)
    gives each remaining action ``max(1, floor(n / (ceil(log2 m) * m_k)))`` visits, one
    round at a time; the schedule is cut at ``n`` entries.

    Args:
        max_num_considered_actions: ``m``, the number of actions sampled at the root.
        num_simulations: ``n``, the simulation budget.

    Returns:
        ``n`` visit counts.
    """
    if max_num_considered_actions <= 1:
        return tuple(range(num_simulations))
    num_phases = math.ceil(math.log2(max_num_considered_actions))
    schedule: list[int] = []
    remaining = max_num_considered_actions
    visits_so_far = 0  # every remaining action has this many visits at a round's start
    while len(schedule) < num_simulations:
        rounds = max(1, int(num_simulations / (num_phases * remaining)))
        for _ in range(rounds):
            schedule.extend([visits_so_far] * remaining)
            visits_so_far += 1
        remaining = max(2, remaining // 2)
    return tuple(schedule[:num_simulations])


def get_table_of_considered_visits(
    max_num_considered_actions: int, num_simulations: int
) -> tuple[tuple[int, ...], ...]:
    """Schedules for ``m = 0 .. max_num_considered_actions``: ``[m_max + 1, n]``."""
    return tuple(
        get_sequence_of_considered_visits(m, num_simulations)
        for m in range(max_num_considered_actions + 1)
    )


def score_considered(
    considered_visit: chex.Array,
    gumbel: chex.Array,
    logits: chex.Array,
    normalized_qvalues: chex.Array,
    visit_counts: chex.Array,
) -> chex.Array:
    """``g(a) + logits(a) + σ(q̂(a))`` for considered actions, ``-inf`` for the rest.

    An action is considered when its visit count equals ``considered_visit``. The score is
    floored at ``-1e9`` so a lone considered action with a masked logit stays selectable.

    Args:
        considered_visit: the visit count of the considered actions (broadcastable).
        gumbel: ``[..., A]`` Gumbel noise.
        logits: ``[..., A]`` prior logits.
        normalized_qvalues: ``[..., A]`` completed, scaled Q-values.
        visit_counts: ``[..., A]`` visit counts.

    Returns:
        ``[..., A]`` scores for an argmax.
    """
    logits = logits - jnp.max(logits, keepdims=True, axis=-1)
    penalty = jnp.where(visit_counts == considered_visit, 0, -jnp.inf)
    chex.assert_equal_shape([gumbel, logits, normalized_qvalues, penalty])
    return jnp.maximum(-1e9, gumbel + logits + normalized_qvalues) + penalty
