"""Test-time search on "solve for x": every method at a given compute budget.

Used by the ``test-time-search`` and ``rl-then-search`` studies. A *budget* is a cap on
policy/model evaluations per problem (one policy call per step of a sampled attempt; one
recurrent-model call -- policy and value -- per MCTS simulation; one policy call per beam
per step plus one verifier call per expanded child). Each method turns the budget into
its own allocation:

* ``greedy``: argmax actions, at most ``min(B, T)`` steps;
* ``best_of_n``: ``N = max(1, B // T)`` sampled attempts of at most ``min(B, T)`` steps,
  the one the outcome verifier accepts (exact verifier: any correct attempt counts);
* ``majority_vote``: the same attempts, the most frequent stated answer;
* ``prm_beam``: step-level beam search scored by the step verifier, width ``W = 1`` below
  a budget of 32 and 2 above, ``E = max(1, B // (T W) - 1)`` sampled expansions per beam
  (Gumbel top-k, so ties under a flat prior are broken at random);
* ``mcts_puct`` / ``mcts_gumbel``: one search per move with ``S = max(1, B // T)``
  simulations (mctx-style PUCT without root noise, and Gumbel MuZero), acting by the
  most-visited action, at most ``min(T, B // S)`` moves.

``T`` is the environment's step limit. Policies are ``apply(params, obs) -> logits [A]``
with a value function ``value(params, obs) -> scalar``; the no-training baseline is the
flat prior with the verifier-based heuristic value ``1 - phi / 3``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from rljax import search
from rljax.envs.equation import EquationEnv, EquationParams
from rljax.policies.equation import heuristic_value as verifier_value
from rljax.policies.equation import uniform_prior
from rljax.policies.sampling import masked_logits
from rljax.search.beam import beam_search
from rljax.search.best_of_n import best_of_n, majority_vote, sample_candidates

METHODS = ("greedy", "best_of_n", "majority_vote", "prm_beam", "mcts_puct", "mcts_gumbel")


def flat_prior(params: Any, obs: jax.Array) -> jax.Array:
    """The untrained policy in ``(params, obs)`` form: ``uniform_prior`` (equal logits over
    the 60 actions; masking happens later)."""
    del params
    return uniform_prior(obs)


def heuristic_value(params: Any, obs: jax.Array) -> jax.Array:
    """The verifier-based value ``1 - phi / 3`` in ``(params, obs)`` form."""
    del params
    return verifier_value(obs)


def _noisy_prior(policy_apply, key):
    """The policy with Gumbel noise on its logits, so beam expansion samples without
    replacement (Gumbel top-k) instead of always taking the first tied actions."""

    def apply(params, obs):
        logits = policy_apply(params, obs)
        return logits + jax.random.gumbel(key, logits.shape)

    return apply


def beam_allocation(budget: int, max_steps: int, num_actions: int) -> tuple[int, int]:
    """``(W, E)`` for :func:`beam_search` at ``budget`` (module docstring)."""
    width = 1 if budget < 32 else 2
    expansions = max(1, budget // (max_steps * width) - 1)
    return width, min(expansions, num_actions)


def mcts_recurrent_fn(env: EquationEnv, env_params: EquationParams, policy_apply, value_fn):
    """``recurrent_fn(params, key, action [B], state [B]) -> (RecurrentFnOutput, state)``
    stepping the exact environment model; terminal or truncated transitions are terminal
    (value 0), interior invalid actions come from ``env.action_mask``."""

    def recurrent_fn(params, key, action, state):
        del key
        step = jax.vmap(lambda s, a: env.transition(jax.random.key(0), s, a, env_params))
        obs, new_state, reward, term, trunc, _ = step(state, action)
        mask = jax.vmap(lambda s: env.action_mask(s, env_params))(new_state)
        done = term | trunc
        out = search.RecurrentFnOutput(
            reward=reward,
            discount=jnp.where(done, 0.0, 1.0),
            prior_logits=masked_logits(policy_apply(params, obs), mask),
            value=jnp.where(done, 0.0, value_fn(params, obs)),
            invalid_actions=~mask,
            terminal=done,
        )
        return out, new_state

    return recurrent_fn


def solve_with_mcts(key, env, env_params, policy_apply, value_fn, params, obs, state, *,
                    budget: int, gumbel: bool) -> jax.Array:
    """Play each problem of the batch ``[B]`` with one search per move; returns float
    correctness ``[B]``."""
    max_steps = env_params.max_steps
    sims = max(1, budget // max_steps)
    moves = max(1, min(max_steps, budget // sims))
    recurrent_fn = mcts_recurrent_fn(env, env_params, policy_apply, value_fn)
    mask_fn = jax.vmap(lambda s: env.action_mask(s, env_params))
    step = jax.vmap(lambda s, a: env.transition(jax.random.key(0), s, a, env_params))

    def move(carry, key_t):
        obs, state, done, correct = carry
        mask = mask_fn(state)
        root = search.RootFnOutput(prior_logits=masked_logits(policy_apply(params, obs), mask),
                                   value=value_fn(params, obs), embedding=state)
        if gumbel:
            out = search.gumbel_muzero_policy(params, key_t, root, recurrent_fn, sims,
                                              invalid_actions=~mask,
                                              max_num_considered_actions=16)
            action = out.action
        else:
            out = search.muzero_policy(params, key_t, root, recurrent_fn, sims,
                                       invalid_actions=~mask, dirichlet_fraction=0.0)
            action = jnp.argmax(out.action_weights, axis=-1).astype(jnp.int32)
        obs_n, state_n, reward, term, trunc, info = step(state, action)
        live = ~done
        correct = jnp.where(live & info["answered"], info["outcome_reward"], correct)
        keep = lambda n, o: jnp.where(  # noqa: E731
            jnp.reshape(live, live.shape + (1,) * (n.ndim - 1)), n, o)
        return (keep(obs_n, obs), jax.tree_util.tree_map(keep, state_n, state),
                done | term | trunc, correct), None

    batch = obs.shape[0]
    carry = (obs, state, jnp.zeros(batch, bool), jnp.zeros(batch, jnp.float32))
    (_, _, _, correct), _ = jax.lax.scan(move, carry, jax.random.split(key, moves))
    return correct


def solve(method: str, key, env, env_params, policy_apply, value_fn, params, obs, state, *,
          budget: int) -> jax.Array:
    """Correctness ``[B]`` of ``method`` at ``budget`` on a batch of problems
    (``obs [B, 8]``, ``state`` batched)."""
    max_steps = env_params.max_steps
    steps = max(1, min(budget, max_steps))
    keys = jax.random.split(key, obs.shape[0])
    if method in ("greedy", "best_of_n", "majority_vote"):
        n = 1 if method == "greedy" else max(1, budget // max_steps)
        temperature = 0.0 if method == "greedy" else 1.0

        def one(k, o, s):
            c = sample_candidates(k, env, env_params, policy_apply, params, o, s, n, steps,
                                  temperature=temperature)
            if method == "majority_vote":
                return majority_vote(c)[1]
            return best_of_n(c, c.outcome)[1]

        return jax.vmap(one)(keys, obs, state)
    if method == "prm_beam":
        width, expansions = beam_allocation(budget, max_steps, env.num_actions)
        beam_steps = max(1, min(max_steps, budget // (width * (1 + expansions))))

        def one(k, o, s):
            return beam_search(env, env_params, _noisy_prior(policy_apply, k), params, o, s,
                               beam_width=width, expansions=expansions,
                               max_steps=beam_steps)[1]

        return jax.vmap(one)(keys, obs, state)
    if method in ("mcts_puct", "mcts_gumbel"):
        return solve_with_mcts(key, env, env_params, policy_apply, value_fn, params, obs, state,
                               budget=budget, gumbel=method == "mcts_gumbel")
    raise ValueError(f"method: must be one of {', '.join(METHODS)}, got {method!r}")
