"""DQN (Mnih et al., 2015) and double DQN (van Hasselt et al., 2016) as an
:class:`~rljax.algorithms.base.RLTransform`.

For a batch of ``B`` transitions ``(s, a, r, term, s')`` the transform returns the
gradient of

    L(theta) = mean_b  l(Q_theta(s_b, a_b) - y_b)

    y_b = r_b + d_b * (1 - term_b) * Q_target(s'_b, a*_b)        (stop-gradient)
    a*_b = argmax_a Q_theta(s'_b, a)      double DQN (van Hasselt et al., 2016, eq. 4)
    a*_b = argmax_a Q_target(s'_b, a)     DQN (Mnih et al., 2015, Algorithm 1)

with ``l`` the Huber loss (``|x| <= delta: x^2 / 2``, else ``delta (|x| - delta / 2)``;
the "error clipping" of Mnih et al., 2015) or the squared loss ``x^2 / 2``, and ``d_b``
the bootstrap discount: ``gamma``, or the batch's own ``discount`` (``gamma^n``).

**n-step returns** are precomputed: the batch carries ``rewards = sum_{k<n} gamma^k
r_{t+k}``, ``next_obs = s_{t+n}`` and ``discount = gamma^n`` (``gamma^k`` when the
episode ended after ``k < n`` steps); the transform stays one TD formula over ``[B]``
whatever ``n`` is, and a replay buffer of n-step transitions feeds it unchanged.

**Truncation** (DESIGN.md, gymnax >= 1.0): a time-limit truncation is bootstrapped, a
termination is not. A truncated transition has ``terminated = False`` and
``next_obs`` = the observation the time limit cut (``info["final_obs"]``, before the
auto-reset), so its target bootstraps from ``Q_target(final_obs)``.

**Target network.** Its parameters live in the transform's state (:class:`DQNState`),
``init(params)`` copies the online ones. Update ``k`` (``k = 0, 1, ...``; ``state.count
= k`` on entry) first moves the target, then computes its TD targets with it, and returns
it as the new state::

    target_k = (1 - tau) target_{k-1} + tau params_k   if k > 0 and k % target_update_period == 0
    target_k = target_{k-1}                            otherwise

where ``params_k`` are the online parameters update ``k`` is computed at, i.e. those the
optimizer produced from update ``k - 1``'s gradient. So the target moves right after
every ``target_update_period``-th gradient step, the order of the sources (Mnih et al.,
2015, Algorithm 1: "every C steps reset Q_target = Q", after the step) and of
:func:`~rljax.algorithms.sac.sac`'s Polyak target. ``tau = 1`` is DQN's hard copy every
``target_update_period`` updates; ``tau < 1`` with ``target_update_period = 1`` is Polyak
averaging (Lillicrap et al., 2016).
"""

from __future__ import annotations

from collections.abc import Callable

import chex
import jax
import jax.numpy as jnp
import optax
from flax import struct

from rljax.algorithms.base import LossAux, RLTransform, update_from_loss
from rljax.types import Array, Params

DQN_LOSSES = ("huber", "squared")
"""The names ``dqn(loss=...)`` accepts: ``"huber"`` and ``"squared"`` (no arrays)."""


@struct.dataclass
class TransitionBatch:
    """``B`` transitions for a TD update; every leaf leads with ``[B]``.

    Attributes:
      obs: ``[B, ...]`` observations ``s``.
      actions: ``[B]`` int actions ``a``.
      rewards: ``[B]`` rewards ``r`` (n-step: ``sum_{k<n} gamma^k r_{t+k}``).
      terminated: ``[B]`` bool (or 0/1): ``next_obs`` is terminal, so no bootstrap. A
        time-limit truncation is *not* terminated (it is bootstrapped).
      next_obs: ``[B, ...]`` the next observation ``s'`` (``s_{t+n}`` for n-step; at a
        truncation the observation the time limit cut, ``info["final_obs"]``).
      discount: optional ``[B]`` bootstrap discount (``gamma^n`` for n-step returns);
        ``None``: the transform's ``gamma``.
    """

    obs: Array
    actions: Array
    rewards: Array
    terminated: Array
    next_obs: Array
    discount: Array | None = None


@struct.dataclass
class DQNState:
    """The DQN transform's state.

    Attributes:
      target_params: the target network's parameters (the structure and leaf shapes of
        the online ``params``).
      count: int32 ``[]``, the number of updates done so far.
    """

    target_params: Params
    count: Array


def _check_positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")


def _check_unit(name: str, value: object, low_open: bool = False) -> None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        ok = (0.0 < value <= 1.0) if low_open else (0.0 <= value <= 1.0)
        if not ok:
            bounds = "(0, 1]" if low_open else "[0, 1]"
            raise ValueError(f"{name}: must be in {bounds}, got {value!r}")


def dqn(
    q_apply: Callable[[Params, Array], Array],
    *,
    gamma: float | Array = 0.99,
    double_q: bool = True,
    loss: str = "huber",
    huber_delta: float | Array = 1.0,
    target_update_period: int = 500,
    tau: float | Array = 1.0,
) -> RLTransform:
    """Build the (double) DQN transform (see the module docstring for the loss).

    Args:
      q_apply: ``apply(params, obs [B, ...]) -> q [B, A]`` (e.g.
        ``policies.mlp_q_network(A).apply``).
      gamma: discount in ``[0, 1]`` (used where ``batch.discount`` is ``None``).
      double_q: pick the bootstrap action with the online network (van Hasselt et al.,
        2016); ``False``: with the target network (Mnih et al., 2015).
      loss: ``"huber"`` (default) or ``"squared"``.
      huber_delta: the Huber loss's ``delta`` > 0.
      target_update_period: update the target network every this many updates (>= 1).
      tau: the target step in ``(0, 1]``: 1 for a hard copy, e.g. 0.005 for Polyak.

    Returns:
      ``RLTransform`` whose ``init(params)`` gives :class:`DQNState` (the target a copy
      of ``params``, ``count = 0``), whose ``loss(params, state, batch: TransitionBatch,
      key=None)`` returns ``(L [], LossAux(new_state, metrics))`` and whose ``update``
      (same arguments) returns its gradient, ``(grads, new_state, metrics)``. Metrics:
      ``loss`` (L), ``q`` (mean ``Q(s, a)``), ``target`` (mean ``y``), ``td_abs`` (mean
      ``|Q(s, a) - y|``), ``target_updated`` (1.0 when this update moved the target).

    Raises:
      ValueError: at build time, naming the argument.
    """
    if loss not in DQN_LOSSES:
        raise ValueError(f"loss: must be one of {', '.join(DQN_LOSSES)}, got {loss!r}")
    _check_unit("gamma", gamma)
    _check_unit("tau", tau, low_open=True)
    _check_positive_int("target_update_period", target_update_period)
    if isinstance(huber_delta, int | float) and not huber_delta > 0:
        raise ValueError(f"huber_delta: must be > 0, got {huber_delta!r}")

    def init(params: Params) -> DQNState:
        return DQNState(target_params=jax.tree.map(jnp.array, params),
                        count=jnp.zeros((), jnp.int32))

    def loss_fn(params: Params, state: DQNState, batch: TransitionBatch, key=None, **extra):
        del key, extra
        chex.assert_rank([batch.actions, batch.rewards, batch.terminated], 1)
        chex.assert_equal_shape([batch.actions, batch.rewards, batch.terminated])
        if batch.discount is not None:
            chex.assert_equal_shape([batch.discount, batch.rewards])
        chex.assert_equal_shape_prefix(
            [*jax.tree_util.tree_leaves(batch.obs), *jax.tree_util.tree_leaves(batch.next_obs),
             batch.actions], 1)
        discount = gamma if batch.discount is None else batch.discount
        q = q_apply(params, batch.obs)
        chex.assert_shape(q, (batch.actions.shape[0], None))
        q_taken = jnp.take_along_axis(q, batch.actions[:, None].astype(jnp.int32), -1)[:, 0]
        due = (state.count > 0) & (state.count % target_update_period == 0)
        target_params = jax.tree.map(
            lambda t, p: jnp.where(due, (1.0 - tau) * t + tau * jax.lax.stop_gradient(p), t),
            state.target_params, params)
        next_q_target = q_apply(target_params, batch.next_obs)
        if double_q:
            selector_q = q_apply(params, batch.next_obs)
        else:
            selector_q = next_q_target
        next_actions = jnp.argmax(selector_q, axis=-1)
        next_value = jnp.take_along_axis(next_q_target, next_actions[:, None], -1)[:, 0]
        continues = 1.0 - batch.terminated.astype(q_taken.dtype)
        targets = jax.lax.stop_gradient(batch.rewards + discount * continues * next_value)
        td = q_taken - targets
        if loss == "huber":
            per_sample = optax.losses.huber_loss(td, delta=huber_delta)
        else:
            per_sample = 0.5 * jnp.square(td)
        value = jnp.mean(per_sample)

        count = state.count + 1
        metrics = {"loss": value, "q": jnp.mean(q_taken), "target": jnp.mean(targets),
                   "td_abs": jnp.mean(jnp.abs(td)), "target_updated": due.astype(jnp.float32)}
        return value, LossAux(DQNState(target_params=target_params, count=count), metrics)

    return RLTransform(init=init, update=update_from_loss(loss_fn), loss=loss_fn)
