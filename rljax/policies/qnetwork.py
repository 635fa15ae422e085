"""MLP Q-networks for value-based RL (DQN, PQN) as pure ``init`` / ``apply`` pairs.

``apply(params, obs [..., D]) -> q [..., A]``: one Q-value per discrete action.

* torso: ``Dense(width) -> [LayerNorm] -> activation`` per hidden width. LayerNorm before
  the nonlinearity is PQN's stabiliser (Gallici et al., 2024, "Simplifying Deep Temporal
  Difference Learning", arXiv:2407.04811, §4: it lets off-policy TD without a target
  network converge); off by default, as in DQN (Mnih et al., 2015).
* head: a ``Dense(A)`` layer, or the dueling head (Wang et al., 2016, "Dueling network
  architectures for deep RL", eq. 9)::

      Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')

  with ``V`` a ``Dense(1)`` and ``A`` a ``Dense(A)`` layer on the same torso.

Weights use flax's default initialiser (LeCun normal, zero biases): no matrix
decomposition, so ``jax.vmap`` of ``init`` over seed keys cannot hit the orthogonal-QR
hang of DESIGN.md's known hazards. Everything here is pure and works under ``jax.jit``
and ``jax.vmap`` over seeds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import linen as nn

from rljax.policies.mlp import ACTIVATIONS, _check_sizes
from rljax.types import Array, Params, PRNGKey


class QNetwork(NamedTuple):
    """A pure Q-network.

    Attributes:
      init: ``init(key, obs) -> params`` from an example observation ``[D]`` or
        ``[..., D]``.
      apply: ``apply(params, obs [..., D]) -> q [..., A]``, the Q-value of every action.
      num_actions: ``A``.
    """

    init: Callable[[PRNGKey, Array], Params]
    apply: Callable[[Params, Array], Array]
    num_actions: int


class QMLP(nn.Module):
    """The torso and head of :func:`mlp_q_network`: ``[..., D] -> [..., A]``.

    Attributes:
      hidden_sizes: widths of the hidden layers.
      num_actions: ``A``.
      activation: elementwise nonlinearity.
      layer_norm: LayerNorm after each hidden Dense (before the activation).
      dueling: the dueling head ``V + A - mean(A)`` instead of one Dense.
    """

    hidden_sizes: Sequence[int]
    num_actions: int
    activation: Callable[[Array], Array] = nn.relu
    layer_norm: bool = False
    dueling: bool = False

    @nn.compact
    def __call__(self, x: Array) -> Array:
        for width in self.hidden_sizes:
            x = nn.Dense(width)(x)
            if self.layer_norm:
                x = nn.LayerNorm()(x)
            x = self.activation(x)
        if not self.dueling:
            return nn.Dense(self.num_actions, name="q")(x)
        value = nn.Dense(1, name="value")(x)
        advantage = nn.Dense(self.num_actions, name="advantage")(x)
        return value + advantage - jnp.mean(advantage, axis=-1, keepdims=True)


def mlp_q_network(
    num_actions: int,
    hidden_sizes: Sequence[int] = (64, 64),
    *,
    activation: str = "relu",
    layer_norm: bool = False,
    dueling: bool = False,
) -> QNetwork:
    """An MLP Q-network (see the module docstring): ``obs [..., D] -> q [..., A]``.

    Args:
      num_actions: A (>= 1).
      hidden_sizes: hidden widths; default ``(64, 64)``.
      activation: ``"relu"`` (default), ``"tanh"`` or ``"swish"``.
      layer_norm: LayerNorm in every hidden layer (PQN's network; Gallici et al., 2024).
      dueling: the dueling head ``Q = V + A - mean_a A`` (Wang et al., 2016).

    Returns:
      :class:`QNetwork`; its ``init(key, obs)`` takes an example observation ``[D]``
      or ``[..., D]``, and vmaps over keys ``[S]`` (every leaf gets a leading ``[S]``).
    """
    _check_sizes(num_actions, hidden_sizes, activation)
    module = QMLP(tuple(hidden_sizes), num_actions, ACTIVATIONS[activation], layer_norm,
                  dueling)

    def init(key: PRNGKey, obs: Array) -> Params:
        return module.init(key, jnp.asarray(obs, jnp.float32))

    def apply(params: Params, obs: Array) -> Array:
        return module.apply(params, obs)

    return QNetwork(init=init, apply=apply, num_actions=num_actions)


def epsilon_greedy(key: PRNGKey, q_values: Array, epsilon: float | Array) -> Array:
    """Epsilon-greedy actions: uniform with probability ``epsilon``, else ``argmax_a q``.

    Each element of the batch draws independently (ties of the argmax go to the first
    action).

    Args:
      key: a typed key ``[]``.
      q_values: ``[..., A]``.
      epsilon: scalar in ``[0, 1]`` (may be traced, e.g. a schedule's value).

    Returns:
      int32 actions ``[...]``.
    """
    if q_values.ndim < 1:
        raise ValueError(f"epsilon_greedy: q_values must be [..., A], got shape {q_values.shape}")
    explore_key, action_key = jax.random.split(key)
    batch, num_actions = q_values.shape[:-1], q_values.shape[-1]
    greedy = jnp.argmax(q_values, axis=-1).astype(jnp.int32)
    uniform = jax.random.randint(action_key, batch, 0, num_actions, jnp.int32)
    explore = jax.random.uniform(explore_key, batch) < epsilon
    return jnp.where(explore, uniform, greedy)
