"""Soft Actor-Critic (Haarnoja et al., 2018) as an :class:`~rljax.algorithms.base.RLTransform`.

SAC with twin critics, Polyak-averaged target critics and an automatically tuned entropy
temperature: Haarnoja, Zhou, Abbeel and Levine (2018), "Soft Actor-Critic: Off-Policy
Maximum Entropy Deep Reinforcement Learning with a Stochastic Actor", arXiv:1801.01290
(eqs. 5, 7, 11, 13; the tanh squashing of appendix C), and Haarnoja et al. (2018), "Soft
Actor-Critic Algorithms and Applications", arXiv:1812.05905 (the clipped double-Q target
of Fujimoto et al., 2018, and the temperature loss, eq. 18; algorithm 1).

For a batch of ``B`` transitions ``(s, a, r, s', terminated)`` and a key, with
``alpha = exp(log_alpha)``, ``N`` critics ``Q_j`` (2 by default) and their targets
``Q_targ_j``, the transform returns the gradient of ``L = L_Q + L_pi + L_alpha``:

    a'  = tanh-squashed sample of pi(.|s')           (fresh, from the key; reparameterised)
    y   = r + gamma (1 - terminated) (min_j Q_targ_j(s', a') - alpha log pi(a'|s'))
    L_Q = 0.5 sum_j mean_b (Q_j(s, a) - sg[y])^2                      (critics)
    a~  = tanh-squashed sample of pi(.|s)            (fresh, reparameterised: a~ = f(eps; s))
    L_pi    = mean_b [ sg[alpha] log pi(a~|s) - min_j Q_sg[j](s, a~) ]  (actor)
    L_alpha = mean_b [ -log_alpha (sg[log pi(a~|s)] + target_entropy) ]  (temperature)

``sg`` is ``jax.lax.stop_gradient``: the target ``y`` is a constant (no gradient into the
actor, the temperature or the targets); the actor loss moves only the actor (``Q_sg``:
the critics' parameters are stopped, the gradient flows through ``a~`` only); the
temperature loss moves only ``log_alpha``. So each loss reaches only its own part of
``params`` and ``grad L`` is the three parts' gradients side by side. ``log pi`` is the
density of the squashed action, with the change-of-variables correction
``- sum_i log(1 - tanh(u_i)^2)`` (and the box's ``- sum_i log s_i``), from
:func:`~rljax.policies.diagonal_gaussian` with ``tanh_squash=True``
(:mod:`rljax.policies.distributions`).

**Truncation.** Only ``terminated`` stops the bootstrap: a transition cut by a time limit
(``truncated``) is bootstrapped like any other, so its ``next_obs`` must be the real next
observation (the env's ``final_obs``), not the first observation after the auto-reset.

**Parameters and optimizers.** One pytree ``{"actor": ..., "critic": ..., "log_alpha":
[]}``; ``critic`` holds the ``N`` critics stacked on a leading axis (every leaf
``[N, ...]``, e.g. ``jax.vmap(critic_init)(keys)``), evaluated with ``jax.vmap`` over that
axis. Because each loss reaches only its own part, one optax optimizer over the whole tree
is the sources' separate optimizers: ``optax.adam(3e-4)`` on the tree is exactly three
Adams with one learning rate (arXiv:1812.05905, table 1; rejax), since Adam acts leaf by
leaf. Different rates per part (CleanRL: critics and temperature 1e-3, actor 3e-4) are
:func:`sac_optimizer` (``optax.multi_transform`` over the three keys).

**Target critics** live in the transform's state (:class:`SACState`), initialised to the
critics by ``init``. Update ``k`` first moves the target toward the critics it is given,
``target <- (1 - tau) target + tau sg[critic_k]``, then uses the moved target in ``y`` and
returns it as the new state. The critics given to update ``k`` are those the optimizer
produced after update ``k - 1``, so this is the sources' order (gradient step, then
Polyak with the new critics; CleanRL ``sac_continuous_action.py``, rejax): the target used
at update ``k`` is ``T_k = (1 - tau) T_{k-1} + tau theta_k`` with ``T_0 = theta_0``.
``tau = 1`` copies the critics every update; ``tau = 0`` freezes the target.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax
from flax import struct

from rljax.algorithms.base import LossAux, RLTransform, update_from_loss
from rljax.contracts import function_name
from rljax.policies.distributions import ActionDistribution, diagonal_gaussian
from rljax.types import Array, Params


@struct.dataclass
class SACBatch:
    """A batch of ``B`` transitions for the SAC update (e.g. sampled from a replay buffer).

    Attributes:
      obs: ``[B, ...]`` observations ``s``.
      actions: ``[B, A]`` float actions ``a`` as the environment received them (in the
        box: the squashed, scaled sample, ``distribution.env_action(u)``).
      rewards: ``[B]`` rewards ``r``.
      next_obs: ``[B, ...]`` next observations ``s'``; at a time-limit truncation the
        real final observation (``final_obs``), not the reset one.
      terminated: ``[B]`` bool or float: 1 where ``s'`` is terminal (no bootstrap); a
        truncated transition has 0 here.
    """

    obs: Array
    actions: Array
    rewards: Array
    next_obs: Array
    terminated: Array


class SACState(NamedTuple):
    """SAC's state between updates: the target critics.

    Attributes:
      target_critic: the Polyak-averaged target critics, the structure and leaf shapes
        of ``params["critic"]`` (every leaf ``[N, ...]``).
    """

    target_critic: Params


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_unit_interval(name: str, value: Any) -> None:
    if _is_number(value) and not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(f"{name}: must be a number in [0, 1], got {value!r}")


def polyak_update(target: Params, online: Params, tau: float | Array) -> Params:
    """``(1 - tau) target + tau online`` leaf by leaf (Polyak averaging of target networks).

    Args:
      target: a pytree of arrays (any shapes).
      online: the same structure and leaf shapes as ``target``.
      tau: the step toward ``online``, a scalar ``[]`` in ``[0, 1]``.

    Returns:
      The structure and leaf shapes of ``target``.
    """
    return jax.tree.map(lambda t, o: (1.0 - tau) * t + tau * o, target, online)


def sac_optimizer(
    actor: optax.GradientTransformation,
    critic: optax.GradientTransformation | None = None,
    temperature: optax.GradientTransformation | None = None,
) -> optax.GradientTransformation:
    """One optimizer per part of SAC's params (``optax.multi_transform``).

    ``sac_optimizer(optax.adam(3e-4), optax.adam(1e-3), optax.adam(1e-3))`` is CleanRL's
    ``sac_continuous_action.py`` (actor 3e-4; critics and temperature 1e-3). With one rate
    for all, ``optax.adam(lr)`` on the whole tree is the same optimizer (Adam acts leaf by
    leaf).

    Args:
      actor: applied to ``params["actor"]``.
      critic: applied to ``params["critic"]`` (every leaf ``[N, ...]``); default ``actor``.
      temperature: applied to ``params["log_alpha"]`` (a scalar ``[]``); default ``actor``.

    Returns:
      A ``GradientTransformation`` over ``{"actor", "critic", "log_alpha"}``; its updates
      have the params' structure and leaf shapes.
    """
    transforms = {"actor": actor,
                  "critic": actor if critic is None else critic,
                  "log_alpha": actor if temperature is None else temperature}

    def labels(params: Params) -> Params:
        return {part: jax.tree.map(lambda _, part=part: part, params[part])
                for part in transforms}

    return optax.multi_transform(transforms, labels)


def sac(
    actor_fn: Callable[[Params, Array], tuple[Array, Array]],
    critic_fn: Callable[[Params, Array, Array], Array],
    *,
    distribution: ActionDistribution | None = None,
    discount: float | Array = 0.99,
    tau: float | Array = 0.005,
    target_entropy: float | Array | None = None,
    learn_temperature: bool = True,
    num_critics: int = 2,
) -> RLTransform:
    """Build the SAC transform (see the module docstring for the losses and the sources).

    Args:
      actor_fn: ``actor_fn(params["actor"], obs [B, ...]) -> (mean [B, A], log_std
        [B, A])``, the pre-squash Gaussian (bound ``log_std`` in the network, e.g. to
        ``[-5, 2]``, as CleanRL and rejax do).
      critic_fn: ``critic_fn(critic_params, obs [B, ...], action [B, A]) -> q [B]`` for
        *one* critic; it is ``jax.vmap``-ed over the leading ``[N]`` axis of
        ``params["critic"]``. The action is the environment's (in the box).
      distribution: the actor's head, ``diagonal_gaussian(A, tanh_squash=True, low=...,
        high=...)`` for a ``Box`` (its ``env_action`` maps the sample onto the box, its
        ``log_prob`` carries the squashing and scaling terms); default the squashed
        Gaussian on ``[-1, 1]^A``. An unsquashed ``diagonal_gaussian`` is accepted
        (reparameterised, no correction); a categorical head is refused.
      discount: ``gamma`` in ``[0, 1]`` (0.99).
      tau: Polyak step of the target critics in ``[0, 1]`` (0.005).
      target_entropy: the entropy target ``H``; default ``-A`` (arXiv:1812.05905).
      learn_temperature: ``False`` keeps ``alpha = exp(params["log_alpha"])`` fixed (the
        first paper's constant temperature): ``L_alpha`` is dropped and ``log_alpha``'s
        gradient is 0.
      num_critics: ``N`` >= 1, the critics the minimum is taken over (2: clipped double-Q).

    Returns:
      ``RLTransform`` whose ``init(params) -> SACState`` copies ``params["critic"]`` as the
      target, whose ``loss(params, state, batch: SACBatch, key) -> (L [], LossAux(state,
      metrics))`` draws ``a'`` and ``a~`` from ``key`` (a typed key ``[]``, split once into
      the target's and the actor's), and whose ``update`` (same arguments) returns
      ``(grads, state, metrics)``, its gradient (``update_from_loss(loss)``). ``grads`` has
      the structure and leaf shapes of ``params``. Metrics (float32 ``[]``): ``loss``,
      ``critic_loss``, ``actor_loss``, ``temperature_loss``, ``alpha``, ``entropy``
      (``-mean log pi(a~|s)``), ``q`` (mean of ``Q_j(s, a)`` over critics and batch),
      ``target_q`` (mean of ``y``).

    Raises:
      ValueError: one line naming the argument: ``discount`` or ``tau`` outside
        ``[0, 1]``, ``num_critics < 1``, a categorical ``distribution``; at trace time,
        naming the user's function, for outputs of the wrong shape, a missing key, or
        critics not stacked ``[N, ...]``.
    """
    _check_unit_interval("discount", discount)
    _check_unit_interval("tau", tau)
    if isinstance(num_critics, bool) or not isinstance(num_critics, int) or num_critics < 1:
        raise ValueError(f"num_critics: must be an integer >= 1, got {num_critics!r}")
    if distribution is not None and distribution.name not in ("gaussian", "tanh_gaussian"):
        raise ValueError(f"distribution: SAC needs a reparameterised Gaussian head "
                         f"(diagonal_gaussian), got {distribution.name!r}")
    actor_name, critic_name = function_name(actor_fn), function_name(critic_fn)

    def init(params: Params) -> SACState:
        return SACState(target_critic=jax.tree.map(jnp.asarray, params["critic"]))

    def policy(actor_params: Params, obs: Array, batch_size: int, action_dim: int):
        out = actor_fn(actor_params, obs)
        if not (isinstance(out, tuple | list) and len(out) == 2):
            raise ValueError(f"actor_fn {actor_name}: must return (mean, log_std), got "
                             f"{type(out).__name__}")
        mean, log_std = out
        want = (batch_size, action_dim)
        if mean.shape != want or log_std.shape != want:
            raise ValueError(f"actor_fn {actor_name}: mean {tuple(mean.shape)} and log_std "
                             f"{tuple(log_std.shape)} must both be [B, A] = {want}")
        return mean, log_std

    def critics(critic_params: Params, obs: Array, actions: Array) -> Array:
        q = jax.vmap(critic_fn, in_axes=(0, None, None))(critic_params, obs, actions)
        want = (num_critics, actions.shape[0])
        if q.shape != want:
            raise ValueError(f"critic_fn {critic_name}: must return q [B] per critic; "
                             f"got {tuple(q.shape[1:])}, want ({actions.shape[0]},)")
        return q

    def loss(params: Params, state: SACState, batch: SACBatch, key=None, **extra):
        del extra
        if key is None:
            raise ValueError("sac: loss/update need a key (a' and a~ are sampled from it)")
        chex.assert_rank([batch.rewards, batch.terminated, batch.actions], [1, 1, 2])
        chex.assert_equal_shape([batch.rewards, batch.terminated])
        chex.assert_equal_shape_prefix(
            [*jax.tree_util.tree_leaves(batch.obs), *jax.tree_util.tree_leaves(batch.next_obs),
             batch.actions, batch.rewards], 1)
        chex.assert_rank(params["log_alpha"], 0)
        for leaf in jax.tree_util.tree_leaves(params["critic"]):
            if leaf.ndim < 1 or leaf.shape[0] != num_critics:
                raise ValueError(f"params['critic']: every leaf must lead with the critics "
                                 f"axis [N] = {num_critics}, got a leaf of shape "
                                 f"{tuple(leaf.shape)}")
        batch_size, action_dim = batch.actions.shape
        head = (diagonal_gaussian(action_dim, tanh_squash=True) if distribution is None
                else distribution)
        entropy_target = -float(action_dim) if target_entropy is None else target_entropy
        rewards = batch.rewards
        not_terminal = 1.0 - batch.terminated.astype(rewards.dtype)
        target_key, actor_key = jax.random.split(key)
        log_alpha = params["log_alpha"]
        alpha = jax.lax.stop_gradient(jnp.exp(log_alpha))

        # Polyak first: the critics given here are the ones the last gradient step made.
        critic_now = jax.lax.stop_gradient(params["critic"])
        target_critic = polyak_update(state.target_critic, critic_now, tau)

        # critics: the soft clipped double-Q target from a fresh a' ~ pi(.|s')
        next_dist = policy(params["actor"], batch.next_obs, batch_size, action_dim)
        next_u = head.sample(head.noise(target_key, (batch_size,)), next_dist)
        next_log_pi = head.log_prob(next_dist, next_u)
        next_q = critics(target_critic, batch.next_obs, head.env_action(next_u))
        soft_value = jnp.min(next_q, axis=0) - alpha * next_log_pi
        target = jax.lax.stop_gradient(rewards + discount * not_terminal * soft_value)
        q = critics(params["critic"], batch.obs, batch.actions)
        critic_loss = 0.5 * jnp.sum(jnp.mean(jnp.square(q - target[None]), axis=1))

        # actor: reparameterised a~ ~ pi(.|s) through stopped critics
        dist = policy(params["actor"], batch.obs, batch_size, action_dim)
        u = head.sample(head.noise(actor_key, (batch_size,)), dist)
        log_pi = head.log_prob(dist, u)
        q_pi = critics(critic_now, batch.obs, head.env_action(u))
        actor_loss = jnp.mean(alpha * log_pi - jnp.min(q_pi, axis=0))

        # temperature: -log_alpha (sg[log pi] + H)
        if learn_temperature:
            temperature_loss = jnp.mean(
                -log_alpha * (jax.lax.stop_gradient(log_pi) + entropy_target))
        else:
            temperature_loss = jnp.zeros((), rewards.dtype)

        total = critic_loss + actor_loss + temperature_loss
        metrics = {"loss": total, "critic_loss": critic_loss, "actor_loss": actor_loss,
                   "temperature_loss": temperature_loss, "alpha": alpha,
                   "entropy": -jnp.mean(log_pi), "q": jnp.mean(q),
                   "target_q": jnp.mean(target)}
        return total, LossAux(SACState(target_critic=target_critic), metrics)

    return RLTransform(init=init, update=update_from_loss(loss), loss=loss)
