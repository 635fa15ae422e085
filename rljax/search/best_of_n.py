"""Best-of-N and voting over sampled solutions, with outcome and process verifiers.

A *candidate* is one complete attempt at a problem: the policy acts from the problem's
start state until the environment says the episode ended (an answer was stated) or the
step limit. Every method here spends **policy evaluations** (one per step of one
candidate), the unit in which all search methods in :mod:`rljax.search` count compute.

* :func:`sample_candidates` -- N independent attempts (masked sampling, temperature).
* :func:`best_of_n` -- keep the candidate a verifier scores highest (Cobbe et al., 2021).
* :func:`majority_vote` -- the most frequent final answer (self-consistency; Wang et al.,
  2023).
* :func:`weighted_vote` -- answers weighted by a verifier's score (e.g. the minimum step
  reward along the attempt; Lightman et al., 2023; Uesato et al., 2022).

The environment must expose ``action_mask(state, params) -> bool [A]`` and put
``answered``, ``answer``, ``outcome_reward`` and ``process_reward`` in ``info`` (as
:class:`rljax.envs.EquationEnv` does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp
from flax import struct

from rljax.policies.sampling import sample_masked
from rljax.types import Array, Params, PRNGKey

NEG_INF = -1e30  # score of a candidate that must never be chosen


@struct.dataclass
class Candidates:
    """N attempts at one problem; every field is ``[N]``.

    Attributes:
      answer: int32 stated answer (0 if none was stated).
      answered: bool, an answer was stated before the step limit.
      outcome: float32 outcome-verifier score (1 if the answer is right).
      process_min: float32 minimum step-verifier score over the attempt's steps (1 only
        if every step was judged useful), the usual PRM aggregate.
      process_mean: float32 mean step-verifier score.
      evaluations: int32 policy evaluations spent (steps taken).
    """

    answer: Array
    answered: Array
    outcome: Array
    process_min: Array
    process_mean: Array
    evaluations: Array


def sample_candidates(
    key: PRNGKey,
    env: Any,
    env_params: Any,
    policy_apply: Callable[[Params, Array], Array],
    policy_params: Params,
    obs: Array,
    state: Any,
    num_samples: int,
    max_steps: int,
    *,
    temperature: float = 1.0,
) -> Candidates:
    """``num_samples`` independent attempts from ``(obs, state)``.

    Each step samples ``a ~ softmax(masked logits / temperature)`` (``temperature = 0``:
    greedy argmax); an attempt stops at the first ``terminated`` or ``truncated`` step.

    Args:
      key: PRNG key.
      env, env_params: the environment (see the module docstring).
      policy_apply: ``apply(params, obs) -> logits [A]``.
      policy_params: policy parameters.
      obs, state: the problem's start (e.g. from ``env.reset``).
      num_samples: N >= 1.
      max_steps: step limit per attempt (>= 1).
      temperature: >= 0.

    Returns:
      :class:`Candidates` with ``[N]`` fields.
    """
    if num_samples < 1:
        raise ValueError(f"num_samples: must be >= 1, got {num_samples}")
    if max_steps < 1:
        raise ValueError(f"max_steps: must be >= 1, got {max_steps}")
    if temperature < 0:
        raise ValueError(f"temperature: must be >= 0, got {temperature}")

    def attempt(key):
        def step(carry, key_t):
            obs_t, state_t, done, stats = carry
            action = sample_masked(key_t, policy_apply(policy_params, obs_t),
                                   env.action_mask(state_t, env_params), temperature)
            obs_n, state_n, _, term, trunc, info = env.transition(key_t, state_t, action,
                                                                  env_params)
            live = ~done
            answer, answered, outcome, pmin, psum, steps = stats
            stats = (
                jnp.where(live & info["answered"], info["answer"], answer),
                answered | (live & info["answered"]),
                jnp.where(live & info["answered"], info["outcome_reward"], outcome),
                jnp.where(live, jnp.minimum(pmin, info["process_reward"]), pmin),
                psum + jnp.where(live, info["process_reward"], 0.0),
                steps + live.astype(jnp.int32),
            )
            keep = lambda new, old: jax.tree_util.tree_map(  # noqa: E731
                lambda n, o: jnp.where(live, n, o), new, old)
            return (keep(obs_n, obs_t), keep(state_n, state_t), done | term | trunc,
                    stats), None

        stats0 = (jnp.int32(0), jnp.bool_(False), jnp.float32(0.0), jnp.float32(1.0),
                  jnp.float32(0.0), jnp.int32(0))
        (_, _, _, stats), _ = jax.lax.scan(step, (obs, state, jnp.bool_(False), stats0),
                                           jax.random.split(key, max_steps))
        answer, answered, outcome, pmin, psum, steps = stats
        return Candidates(answer=answer, answered=answered, outcome=outcome,
                          process_min=pmin,
                          process_mean=psum / jnp.maximum(steps, 1).astype(jnp.float32),
                          evaluations=steps)

    return jax.vmap(attempt)(jax.random.split(key, num_samples))


def best_of_n(candidates: Candidates, scores: Array) -> tuple[Array, Array]:
    """The candidate with the highest verifier score (first among ties).

    Args:
      candidates: ``[N]`` attempts.
      scores: ``[N]`` verifier scores (e.g. ``candidates.outcome`` or
        ``candidates.process_min``); unanswered attempts are never chosen over answered
        ones.

    Returns:
      ``(index, correct)``: the chosen index and its outcome (1.0 if right).
    """
    chex.assert_equal_shape([candidates.answer, scores])
    ranked = jnp.where(candidates.answered, scores, NEG_INF)
    index = jnp.argmax(ranked)
    return index, candidates.outcome[index]


def weighted_vote(candidates: Candidates, weights: Array) -> tuple[Array, Array]:
    """The answer with the largest total weight among answered candidates.

    ``total(v) = sum_i w_i 1[answer_i = v, answered_i]``; ties go to the answer that
    appears first. ``weights = 1`` is the plain majority vote.

    Args:
      candidates: ``[N]`` attempts.
      weights: ``[N]`` non-negative weights.

    Returns:
      ``(answer, correct)``: the voted answer and whether a candidate stating it was right
      (answers are checked by the outcome verifier of a candidate that gave it).
    """
    chex.assert_equal_shape([candidates.answer, weights])
    same = candidates.answer[:, None] == candidates.answer[None, :]
    votes = jnp.where(candidates.answered[None, :] & same, weights[None, :], 0.0).sum(axis=1)
    votes = jnp.where(candidates.answered, votes, NEG_INF)
    index = jnp.argmax(votes)
    return candidates.answer[index], candidates.outcome[index]


def majority_vote(candidates: Candidates) -> tuple[Array, Array]:
    """Self-consistency: the most frequent stated answer (:func:`weighted_vote` with
    unit weights).

    ``candidates`` holds ``[N]`` attempts; returns ``(answer, correct)``, two scalars ``[]``
    (int32 answer, float32 outcome-verifier verdict) as :func:`weighted_vote` does.
    """
    return weighted_vote(candidates, jnp.ones_like(candidates.outcome))
