"""Step-level beam search scored by a process verifier or a value function.

At every step each of the ``W`` live beams is expanded with its ``E`` most probable valid
actions under the policy (one policy evaluation per beam), every child is scored (one
verifier or value evaluation per child), and the ``W`` best children by cumulative score
survive; beams that stated an answer stay in the pool with their final score. The
answer of the best finished beam is returned. Compute is counted in policy/model
evaluations: ``W`` policy calls plus ``W * E`` scorer calls per step (Snell et al., 2024,
"Scaling LLM test-time compute", PRM beam search).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from rljax.policies.sampling import masked_logits
from rljax.search.best_of_n import NEG_INF
from rljax.types import Array, Params


def process_verifier_score(obs: Array, info: dict[str, Array]) -> Array:
    """Score a child by the step verifier's reward of the move that produced it.

    ``(child obs, info) -> info["process_reward"]``, a float32 scalar ``[]`` per child
    (the default ``score_fn`` of :func:`beam_search`).
    """
    del obs
    return info["process_reward"]


def beam_search(
    env: Any,
    env_params: Any,
    policy_apply: Callable[[Params, Array], Array],
    policy_params: Params,
    obs: Array,
    state: Any,
    *,
    beam_width: int,
    expansions: int,
    max_steps: int,
    score_fn: Callable[[Array, dict[str, Array]], Array] = process_verifier_score,
) -> tuple[Array, Array, Array]:
    """Deterministic step-level beam search from ``(obs, state)``.

    A beam's score is the sum of its children's scores along the path (with the policy's
    log-probability as a 1e-3-weighted tie-break).

    Args:
      env, env_params: environment with ``action_mask`` and ``answered``/``answer``/
        ``outcome_reward`` in ``info`` (see :mod:`rljax.search.best_of_n`).
      policy_apply, policy_params: ``apply(params, obs) -> logits [A]``.
      obs, state: the problem's start.
      beam_width: W >= 1.
      expansions: E >= 1 children per beam per step.
      max_steps: step limit.
      score_fn: ``(child_obs, info) -> scalar`` (process verifier by default; pass a value
        network for value-guided search).

    Returns:
      ``(answer, correct, evaluations)`` (int32, float32, int32).
    """
    for name, value in (("beam_width", beam_width), ("expansions", expansions),
                        ("max_steps", max_steps)):
        if value < 1:
            raise ValueError(f"{name}: must be >= 1, got {value}")
    num_actions = env.num_actions
    expansions = min(expansions, num_actions)
    width = beam_width

    def tile(x):
        return jnp.broadcast_to(x, (width, *jnp.shape(x)))

    beams = {
        "obs": tile(obs),
        "state": jax.tree_util.tree_map(tile, state),
        "score": jnp.where(jnp.arange(width) == 0, 0.0, NEG_INF),  # one real start beam
        "done": jnp.zeros(width, bool),
        "answer": jnp.zeros(width, jnp.int32),
        "outcome": jnp.zeros(width, jnp.float32),
    }

    def expand(beam):
        logits = masked_logits(policy_apply(policy_params, beam["obs"]),
                               env.action_mask(beam["state"], env_params))
        log_probs = jax.nn.log_softmax(logits)
        top_lp, actions = jax.lax.top_k(log_probs, expansions)

        def child(action, lp):
            obs_n, state_n, _, _, _, info = env.transition(jax.random.key(0), beam["state"],
                                                           action, env_params)
            score = beam["score"] + score_fn(obs_n, info) + 1e-3 * lp
            return {"obs": obs_n, "state": state_n, "score": score,
                    "done": info["answered"],
                    "answer": jnp.where(info["answered"], info["answer"], 0),
                    "outcome": jnp.where(info["answered"], info["outcome_reward"], 0.0)}

        children = jax.vmap(child)(actions.astype(jnp.int32), top_lp)
        children["score"] = jnp.where(top_lp > NEG_INF / 2, children["score"], NEG_INF)
        # a finished beam carries itself over as its only child
        keep = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (expansions, *x.shape)),
                                      beam)
        keep["score"] = jnp.where(jnp.arange(expansions) == 0, beam["score"], NEG_INF)
        return jax.tree_util.tree_map(lambda k, c: jnp.where(
            jnp.reshape(beam["done"], (1,) * 1 + (1,) * (k.ndim - 1)), k, c), keep, children)

    def step(carry, _):
        beams, evaluations = carry
        live = (~beams["done"]) & (beams["score"] > NEG_INF / 2)
        evaluations = evaluations + jnp.sum(live) * (1 + expansions)
        children = jax.vmap(expand)(beams)  # [W, E, ...]
        flat = jax.tree_util.tree_map(lambda x: x.reshape(width * expansions, *x.shape[2:]),
                                      children)
        _, best = jax.lax.top_k(flat["score"], width)
        return (jax.tree_util.tree_map(lambda x: x[best], flat), evaluations), None

    (beams, evaluations), _ = jax.lax.scan(step, (beams, jnp.int32(0)), None,
                                           length=max_steps)
    final = jnp.where(beams["done"], beams["score"], NEG_INF)
    best = jnp.argmax(final)
    return beams["answer"][best], beams["outcome"][best], evaluations
