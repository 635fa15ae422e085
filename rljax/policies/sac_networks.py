"""SAC's networks for a ``Box`` of shape ``(A,)``: a tanh-squashed Gaussian actor and ``N``
Q(s, a) critics stacked on a leading axis, in the parameter layout
:func:`rljax.algorithms.sac.sac` reads (``{"actor", "critic" [N, ...], "log_alpha" []}``).

The actor is an MLP torso with two linear heads, ``mean [..., A]`` and ``log_std [..., A]``
clipped to ``[log_std_min, log_std_max]`` (rejax's ``SquashedGaussianPolicy``: ``(-10,
2)``; CleanRL bounds it to ``[-5, 2]`` with a tanh); a critic is an MLP over ``concat(obs,
action) -> q``. Kernels use flax's default LeCun-normal initialisation (no QR, so a
vmapped init cannot hang; DESIGN.md, known hazards); ``log_alpha`` starts at 0
(``alpha = 1``, rejax).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from rljax.policies.distributions import ActionDistribution, diagonal_gaussian
from rljax.policies.mlp import ACTIVATIONS, _check_sizes
from rljax.types import Array, Params, PRNGKey


class SquashedActor(nn.Module):
    """``obs [..., D] -> (mean [..., A], log_std [..., A])`` (pre-squash)."""

    hidden_sizes: Sequence[int]
    action_dim: int
    activation: Callable[[Array], Array]
    log_std_min: float
    log_std_max: float

    @nn.compact
    def __call__(self, x: Array) -> tuple[Array, Array]:
        for width in self.hidden_sizes:
            x = self.activation(nn.Dense(width)(x))
        mean = nn.Dense(self.action_dim, name="mean")(x)
        log_std = nn.Dense(self.action_dim, name="log_std")(x)
        return mean, jnp.clip(log_std, self.log_std_min, self.log_std_max)


class StateActionCritic(nn.Module):
    """``(obs [..., D], action [..., A]) -> q [...]``."""

    hidden_sizes: Sequence[int]
    activation: Callable[[Array], Array]

    @nn.compact
    def __call__(self, obs: Array, action: Array) -> Array:
        x = jnp.concatenate([obs, action], axis=-1)
        for width in self.hidden_sizes:
            x = self.activation(nn.Dense(width)(x))
        return nn.Dense(1)(x)[..., 0]


class SACNetworks(NamedTuple):
    """SAC's pure network functions.

    Attributes:
      init: ``init(key, obs [D]) -> params`` ``{"actor", "critic" (leaves [N, ...]),
        "log_alpha" []}``.
      actor: ``actor(actor_params, obs [B, D]) -> (mean [B, A], log_std [B, A])``.
      critic: ``critic(one_critic_params, obs [B, D], action [B, A]) -> q [B]``.
      distribution: the squashed Gaussian onto the box (``diagonal_gaussian(A,
        tanh_squash=True, low, high)``).
      num_critics: N.
    """

    init: Callable[[PRNGKey, Array], Params]
    actor: Callable[[Params, Array], tuple[Array, Array]]
    critic: Callable[[Params, Array, Array], Array]
    distribution: ActionDistribution
    num_critics: int


def mlp_sac_networks(low: Any, high: Any, hidden_sizes: Sequence[int] = (64, 64), *,
                     activation: str = "swish", num_critics: int = 2,
                     log_std_min: float = -10.0, log_std_max: float = 2.0) -> SACNetworks:
    """MLP actor and critics for a ``Box(low, high, (A,))`` (module docstring).

    Args:
      low, high: the box's bounds, ``[A]`` (finite).
      hidden_sizes: the hidden widths of the actor and of each critic.
      activation: ``"swish"`` (rejax's SAC rows), ``"relu"`` or ``"tanh"``.
      num_critics: N >= 1 critics.
      log_std_min, log_std_max: the log-std clip.

    Returns:
      :class:`SACNetworks`.

    Raises:
      ValueError: one line naming the argument.
    """
    low, high = jnp.atleast_1d(jnp.asarray(low, jnp.float32)), jnp.atleast_1d(
        jnp.asarray(high, jnp.float32))
    action_dim = int(low.shape[0])
    _check_sizes(action_dim, hidden_sizes, activation)
    if isinstance(num_critics, bool) or not isinstance(num_critics, int) or num_critics < 1:
        raise ValueError(f"num_critics: must be an integer >= 1, got {num_critics!r}")
    if not log_std_min < log_std_max:
        raise ValueError(f"log_std_min: must be < log_std_max = {log_std_max}, got "
                         f"{log_std_min}")
    act = ACTIVATIONS[activation]
    actor_module = SquashedActor(tuple(hidden_sizes), action_dim, act, log_std_min,
                                 log_std_max)
    critic_module = StateActionCritic(tuple(hidden_sizes), act)

    def init(key: PRNGKey, obs: Array) -> Params:
        actor_key, critic_key = jax.random.split(key)
        obs = jnp.asarray(obs, jnp.float32)
        action = jnp.zeros((action_dim,), jnp.float32)
        critics = jax.vmap(critic_module.init, in_axes=(0, None, None))(
            jax.random.split(critic_key, num_critics), obs, action)
        return {"actor": actor_module.init(actor_key, obs), "critic": critics,
                "log_alpha": jnp.zeros((), jnp.float32)}

    def actor(params: Params, obs: Array) -> tuple[Array, Array]:
        return actor_module.apply(params, obs)

    def critic(params: Params, obs: Array, action: Array) -> Array:
        return critic_module.apply(params, obs, action)

    distribution = diagonal_gaussian(action_dim, tanh_squash=True, low=low, high=high)
    return SACNetworks(init, actor, critic, distribution, num_critics)
