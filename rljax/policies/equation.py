"""Policies and values for the "solve for x" environment (:class:`rljax.envs.EquationEnv`).

Two families, both over the environment's float32 observation ``[..., 8]`` =
``((a, b, c, d) / 10, time / max_steps, phi / 3, 1[c != 0], 1[b != 0])``:

* **No-training baseline** for search (MCTS, beam, best-of-N): :func:`uniform_prior`
  (zero logits; masking leaves the uniform distribution over valid moves) and
  :func:`heuristic_value`, the verifier-based value ``V(s) = 1 - phi(s) / 3`` read from the
  observation (1 at the solved form ``x = d``, 0 with all three terms still to remove).
* **A learned actor-critic**, :func:`equation_actor_critic`: an MLP actor (logits
  ``[..., 60]``) and an MLP critic (value ``[...]``) with separate torsos
  (:func:`rljax.policies.mlp_actor_critic`) behind a fixed input encoding
  (:func:`encode_observation`). Its parameters are ``{"actor": ..., "critic": ...}``, so
  GRPO / REINFORCE train ``params["actor"]`` alone and PPO or MCTS use both.

Masking. The environment's valid moves change with the state (division only by a common
divisor), so a policy acts on ``masked_logits(logits, action_mask)`` (invalid moves at
``-1e30``, never ``-inf``). :func:`masked_policy` turns any logits function into one over
the observation dict ``{"features": [..., 8], "action_mask": bool [..., 60]}``; that is the
form the training batches carry, so the log-probabilities of the update are those the
rollout sampled from.

Encoding. The coefficients are small integers and the right move is an integer lookup
("subtract the constant ``b``" is one of 20 actions), which a tanh MLP fed the four scaled
coefficients learns slowly. ``encoding="onehot"`` (default) appends a one-hot of each
rounded coefficient ``round(10 * obs[i])`` clipped to ``[-R, R]`` -- a token embedding,
nothing the observation does not already hold; ``encoding="raw"`` feeds the 8 features
unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import chex
import jax
import jax.numpy as jnp

from rljax.policies.mlp import ActorCritic, mlp_actor_critic
from rljax.policies.sampling import masked_logits
from rljax.policies.tabular import Policy
from rljax.types import Array, Params, PRNGKey

NUM_FEATURES = 8
NUM_ACTIONS = 60
PHI_FEATURE = 5
COEFFICIENT_SCALE = 10.0
ENCODINGS = ("onehot", "raw")


def uniform_prior(obs: Array, num_actions: int = NUM_ACTIONS) -> Array:
    """Zero logits: after masking, the uniform distribution over the valid moves.

    Args:
      obs: ``[..., 8]`` observations (only the batch shape is used).
      num_actions: A (60 for the default environment).

    Returns:
      float32 ``[..., A]`` zeros.
    """
    chex.assert_axis_dimension(obs, -1, NUM_FEATURES)
    return jnp.zeros((*obs.shape[:-1], num_actions), jnp.float32)


def heuristic_value(obs: Array) -> Array:
    """The verifier-based value ``V(s) = 1 - phi(s) / 3`` from the observation.

    ``phi = 1[b != 0] + 1[c != 0] + 1[a - c != 1]`` is the environment's distance to the
    solved form (:func:`rljax.envs.equation.distance_to_solved`), observed as
    ``obs[..., 5] = phi / 3``; every useful move removes one term, so ``V`` is the fraction
    of the way to ``x = d`` (a stand-in for the probability of solving, with no training).

    Args:
      obs: ``[..., 8]`` observations.

    Returns:
      float32 ``[...]`` values in ``[0, 1]``.
    """
    chex.assert_axis_dimension(obs, -1, NUM_FEATURES)
    return 1.0 - obs[..., PHI_FEATURE].astype(jnp.float32)


def masked_policy(apply: Callable[[Params, Array], Array]) -> Callable[[Params, Any], Array]:
    """Wrap ``apply(params, features [..., 8]) -> logits [..., A]`` into a policy over the
    observation dict ``{"features": [..., 8], "action_mask": bool [..., A]}`` returning
    masked logits (invalid moves at ``-1e30``, so they get probability exactly 0).

    The result plugs into :func:`rljax.algorithms.grpo` as ``policy_apply`` with
    ``GroupBatch.obs`` such a dict of ``[P, G, T, ...]`` leaves.
    """

    def masked_apply(params: Params, obs: dict[str, Array]) -> Array:
        return masked_logits(apply(params, obs["features"]), obs["action_mask"])

    return masked_apply


def encode_observation(obs: Array, encoding: str = "onehot", coefficient_range: int = 20
                       ) -> Array:
    """The network input for observations ``[..., 8]``.

    ``"raw"``: ``obs`` itself. ``"onehot"``: ``obs`` followed by, for each coefficient
    ``i`` of ``(a, b, c, d)``, ``onehot(clip(round(10 * obs[i]), -R, R) + R)`` of size
    ``2R + 1`` (values beyond ``R`` share the end bins).

    Args:
      obs: ``[..., 8]`` observations.
      encoding: ``"onehot"`` or ``"raw"``.
      coefficient_range: R (>= 1).

    Returns:
      float32 ``[..., 8]`` (raw) or ``[..., 8 + 4 (2R + 1)]`` (onehot).
    """
    if encoding not in ENCODINGS:
        raise ValueError(f"encoding: must be one of {', '.join(ENCODINGS)}, got {encoding!r}")
    if coefficient_range < 1:
        raise ValueError(f"coefficient_range: must be >= 1, got {coefficient_range}")
    chex.assert_axis_dimension(obs, -1, NUM_FEATURES)
    obs = obs.astype(jnp.float32)
    if encoding == "raw":
        return obs
    r = coefficient_range
    coeffs = jnp.clip(jnp.round(obs[..., :4] * COEFFICIENT_SCALE), -r, r).astype(jnp.int32)
    onehot = jax.nn.one_hot(coeffs + r, 2 * r + 1, dtype=jnp.float32)  # [..., 4, 2R+1]
    return jnp.concatenate([obs, onehot.reshape(*obs.shape[:-1], 4 * (2 * r + 1))], axis=-1)


def equation_actor_critic(
    hidden_sizes: Sequence[int] = (64, 64),
    *,
    encoding: str = "onehot",
    coefficient_range: int = 20,
    activation: str = "tanh",
    num_actions: int = NUM_ACTIONS,
) -> ActorCritic:
    """An MLP actor and critic over the equation observation (module docstring).

    ``apply(params, obs [..., 8]) -> (logits [..., A], value [...])`` with unmasked logits
    (mask them with :func:`masked_logits` or :func:`masked_policy`). The actor's head starts
    at gain 0.01 (near-uniform policy), the critic's at 1.0; weights are orthogonal and
    initialised sequentially under ``vmap`` (:func:`rljax.policies.sequential_init`).

    Args:
      hidden_sizes: hidden widths of each torso.
      encoding: ``"onehot"`` (default) or ``"raw"`` (:func:`encode_observation`).
      coefficient_range: R of the one-hot encoding.
      activation: ``"tanh"`` or ``"relu"``.
      num_actions: A (60 for the default environment).

    Returns:
      :class:`~rljax.policies.mlp.ActorCritic` whose ``init(key, obs)`` takes an example
      observation ``[8]`` or ``[..., 8]``; ``actor`` and ``value`` act on raw observations.
    """
    encode_observation(jnp.zeros(NUM_FEATURES), encoding, coefficient_range)  # validate
    net = mlp_actor_critic(num_actions, hidden_sizes, activation=activation)

    def encode(obs: Array) -> Array:
        return encode_observation(jnp.asarray(obs), encoding, coefficient_range)

    def init(key: PRNGKey, obs: Array) -> Params:
        return net.init(key, encode(obs))

    def actor_init(key: PRNGKey, obs: Array) -> Params:
        return net.actor.init(key, encode(obs))

    def actor_apply(params: Params, obs: Array) -> Array:
        return net.actor.apply(params, encode(obs))

    def value(params: Params, obs: Array) -> Array:
        return net.value(params, encode(obs))

    def apply(params: Params, obs: Array) -> tuple[Array, Array]:
        x = encode(obs)
        return net.actor.apply(params["actor"], x), net.value(params, x)

    return ActorCritic(init=init, apply=apply, actor=Policy(init=actor_init, apply=actor_apply),
                       value=value)
