"""PQN (Gallici et al., 2024) as an :class:`~rljax.algorithms.base.RLTransform`.

Gallici, Fellows, Ellis, Pou, Masmitja, Foerster, Martin, 2024, "Simplifying Deep
Temporal Difference Learning" (arXiv:2407.04811): Q-learning over a rollout of ``T``
steps of ``B`` parallel environments, with no target network and no replay buffer
(LayerNorm in the Q-network keeps it stable: ``policies.mlp_q_network(...,
layer_norm=True)``). For a rollout the transform returns the gradient of

    L(theta) = mean_{t,b} 0.5 (Q_theta(s_t, a_t) - G_t)^2

with the Q(lambda) returns ``G`` (stop-gradient) computed backwards from
``G_T = max_a Q(s_T, a)`` (``s_T`` = the observation after the rollout)::

    G_t = r_t + gamma (1 - term_t) [ V_{t+1} + lambda (1 - done_t) (G_{t+1} - V_{t+1}) ]
    V_{t+1} = max_a Q(s_{t+1}, a)

(purejaxql's ``_get_target``; Peng & Williams, 1996). ``done_t = term_t or trunc_t``:
the lambda-recursion never crosses an episode boundary. This is GAE's lambda-return
with ``V = max_a Q`` (``returns = advantages + values`` of
:func:`~rljax.advantages.generalized_advantage_estimation`), so truncation is handled
exactly as PPO handles it: at a time-limit truncation ``V_{t+1}`` is
``max_a Q(final_obs_t, a)`` (the observation the time limit cut, before the auto-reset;
gymnax >= 1.0 semantics) when the batch carries ``final_obs``; without it a truncation
is not bootstrapped.

The targets come from the parameters the loss is given (one gradient step per rollout).
purejaxql's epochs x minibatches regress on targets fixed once per rollout: compute them
with :func:`q_lambda_targets`, put them in ``PQNBatch.targets`` and cut the batch into
minibatches (``algorithms.loops.multi_step_update``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
from flax import struct

from rljax.advantages import generalized_advantage_estimation
from rljax.algorithms.base import LossAux, RLTransform, update_from_loss
from rljax.types import Array, Params


@struct.dataclass
class PQNBatch:
    """A rollout of ``T`` steps of ``B`` environments for the PQN update.

    Attributes:
      obs: ``[T, B, ...]`` observations ``s_t``.
      actions: ``[T, B]`` int actions ``a_t``.
      rewards: ``[T, B]`` rewards ``r_t``.
      terminated: ``[T, B]`` bool: step ``t`` ended its episode by termination.
      last_obs: ``[B, ...]`` the observation after the last step, ``s_T``.
      truncated: optional ``[T, B]`` bool: step ``t`` hit the time limit.
      final_obs: optional ``[T, B, ...]``: at a truncation, the observation the time limit
        cut (``info["final_obs"]``); read only where ``truncated``.
      targets: optional precomputed Q(lambda) targets (:func:`q_lambda_targets`). When
        given the loss reads only ``obs``, ``actions`` and ``targets``, whose leading
        shape may then be any ``[...]`` (e.g. a shuffled minibatch ``[M]``), and the
        other fields may be ``None``.
    """

    obs: Array
    actions: Array
    rewards: Array | None = None
    terminated: Array | None = None
    last_obs: Array | None = None
    truncated: Array | None = None
    final_obs: Array | None = None
    targets: Array | None = None


class PQNState(NamedTuple):
    """PQN keeps no state between updates (no target network; optax's ``EmptyState``
    shape, no arrays)."""


def q_lambda_returns(
    rewards: Array,
    max_q: Array,
    last_max_q: Array,
    terminated: Array,
    *,
    gamma: float | Array,
    lam: float | Array,
    truncated: Array | None = None,
    truncation_max_q: Array | None = None,
) -> Array:
    """Q(lambda) returns with max-Q bootstrap along the leading time axis (see the module
    docstring for the recursion).

    Args:
      rewards, terminated: ``[T, ...]`` (e.g. ``[T, B]``).
      max_q: ``[T, ...]``: ``max_a Q(s_t, a)``.
      last_max_q: ``[...]``: ``max_a Q(s_T, a)`` of the observation after the last step.
      gamma, lam: in ``[0, 1]``.
      truncated: optional ``[T, ...]`` bool.
      truncation_max_q: optional ``[T, ...]``: ``max_a Q(final_obs_t, a)`` (read only
        where ``truncated``).

    Returns:
      ``[T, ...]`` returns ``G_t``.
    """
    chex.assert_equal_shape([rewards, max_q, terminated])
    _, returns = generalized_advantage_estimation(
        rewards, max_q, last_max_q, terminated, gamma=gamma, lam=lam, truncated=truncated,
        truncation_values=truncation_max_q)
    return returns


def q_lambda_targets(
    q_apply: Callable[[Params, Array], Array],
    params: Params,
    batch: PQNBatch,
    *,
    gamma: float | Array,
    lam: float | Array,
    max_q: Array | None = None,
) -> Array:
    """The Q(lambda) targets of a rollout under ``params`` (stop-gradient).

    Args:
      q_apply: ``apply(params, obs [..., D]) -> q [..., A]``.
      params: the Q-network's parameters.
      batch: a rollout ``[T, B]`` with ``rewards``, ``terminated`` and ``last_obs`` (and
        optionally ``truncated`` / ``final_obs``).
      gamma, lam: in ``[0, 1]``.
      max_q: optional ``[T, B]`` ``max_a Q(s_t, a)`` under ``params``, already computed
        (a trainer keeps the values it acted on); ``None`` computes it from ``batch.obs``.

    Returns:
      ``[T, B]`` targets ``G_t``.

    Raises:
      ValueError: one line, for a batch without rewards / terminated / last_obs or a
        ``max_q`` whose shape is not the rewards'.
    """
    if batch.rewards is None or batch.terminated is None or batch.last_obs is None:
        raise ValueError("q_lambda_targets: the batch needs rewards, terminated and last_obs")
    chex.assert_rank([batch.actions, batch.rewards, batch.terminated], 2)
    chex.assert_equal_shape([batch.actions, batch.rewards, batch.terminated])
    if max_q is None:
        max_q = jnp.max(q_apply(params, batch.obs), axis=-1)
    elif jnp.shape(max_q) != jnp.shape(batch.rewards):
        raise ValueError(f"max_q: must be [T, B] = {tuple(jnp.shape(batch.rewards))} like the "
                         f"rewards, got shape {tuple(jnp.shape(max_q))}")
    last_max_q = jnp.max(q_apply(params, batch.last_obs), axis=-1)
    truncation_max_q = None
    if batch.final_obs is not None and batch.truncated is not None:
        truncation_max_q = jnp.max(q_apply(params, batch.final_obs), axis=-1)
    returns = q_lambda_returns(batch.rewards, max_q, last_max_q, batch.terminated,
                               gamma=gamma, lam=lam, truncated=batch.truncated,
                               truncation_max_q=truncation_max_q)
    return jax.lax.stop_gradient(returns)


def pqn(
    q_apply: Callable[[Params, Array], Array],
    *,
    gamma: float | Array = 0.99,
    lam: float | Array = 0.65,
) -> RLTransform:
    """Build the PQN transform (see the module docstring for the loss).

    Args:
      q_apply: ``apply(params, obs [T, B, ...]) -> q [T, B, A]`` (e.g.
        ``policies.mlp_q_network(A, layer_norm=True).apply``).
      gamma: discount in ``[0, 1]`` (0.99).
      lam: the Q(lambda) trace parameter in ``[0, 1]`` (0.65); 0 is one-step
        Q-learning, 1 the Monte Carlo return (bootstrapped at the rollout's end).

    Returns:
      ``RLTransform`` with an empty state, whose ``loss(params, state, batch: PQNBatch,
      key=None)`` returns ``(L [], LossAux(state, metrics))`` and whose ``update`` (same
      arguments) returns its gradient, ``(grads, state, metrics)``. Metrics: ``loss``
      (L), ``q`` (mean ``Q(s_t, a_t)``), ``target`` (mean ``G_t``).

    Raises:
      ValueError: at build time, for ``gamma`` or ``lam`` outside ``[0, 1]``.
    """
    for name, value in (("gamma", gamma), ("lam", lam)):
        if isinstance(value, int | float) and not 0.0 <= float(value) <= 1.0:
            raise ValueError(f"{name}: must be in [0, 1], got {value!r}")

    def init(params: Params) -> PQNState:
        del params
        return PQNState()

    def loss(params: Params, state: PQNState, batch: PQNBatch, key=None, **extra):
        del key, extra
        if batch.targets is None:
            targets = q_lambda_targets(q_apply, params, batch, gamma=gamma, lam=lam)
        else:
            targets = jax.lax.stop_gradient(batch.targets)
        chex.assert_equal_shape([batch.actions, targets])
        q = q_apply(params, batch.obs)
        chex.assert_shape(q, (*batch.actions.shape, None))
        q_taken = jnp.take_along_axis(q, batch.actions[..., None].astype(jnp.int32), -1)[..., 0]
        value = 0.5 * jnp.mean(jnp.square(q_taken - targets))
        metrics = {"loss": value, "q": jnp.mean(q_taken), "target": jnp.mean(targets)}
        return value, LossAux(state, metrics)

    return RLTransform(init=init, update=update_from_loss(loss), loss=loss)
