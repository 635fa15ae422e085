"""flax.linen MLP actor and actor-critic as pure ``init`` / ``apply`` pairs.

The usual PPO networks for small control tasks (Engstrom et al., 2020, "Implementation
matters in deep RL"; Huang et al., 2022, "The 37 implementation details of PPO"):

* actor: ``obs [..., D] -> Dense(64) -> tanh -> Dense(64) -> tanh -> Dense(A)`` logits;
* critic: a *separate* torso of the same shape ``-> Dense(1)`` value.

Weights are orthogonal (Saxe et al., 2014) with gain ``sqrt(2)`` in the hidden layers,
``0.01`` in the actor head (a near-uniform initial policy) and ``1.0`` in the critic
head; biases are zero.

The actor-critic's parameters are ``{"actor": actor_params, "critic": critic_params}``
where ``actor_params`` has exactly the layout of :func:`mlp_actor`'s parameters, so the
same actor can be trained with a critic (PPO) or without one (GRPO, REINFORCE).

**Vmapped orthogonal initialisation can hang on a 2-core CPU** (DESIGN.md, known
hazards): the batched QR behind the orthogonal initialiser fans out onto XLA's intra-op
thread pool and, with two such initialisers in one program, can deadlock it. Every
``init`` returned here is therefore wrapped in :func:`sequential_init`, which runs the
seeds of a ``vmap`` one after another (a loop of unbatched QRs); initialisation is a
negligible part of a training run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import linen as nn

from rljax.policies.tabular import Policy
from rljax.types import Array, Params, PRNGKey

ACTIVATIONS: dict[str, Callable[[Array], Array]] = {"tanh": jnp.tanh, "relu": nn.relu}


class ActorCritic(NamedTuple):
    """A pure actor-critic.

    Attributes:
      init: ``init(key, obs) -> params`` (``{"actor": ..., "critic": ...}``).
      apply: ``apply(params, obs [..., D]) -> (logits [..., A], value [...])``.
      actor: the actor alone, a :class:`~rljax.policies.tabular.Policy` over
        ``params["actor"]``.
      value: ``value(params, obs [..., D]) -> value [...]`` (the critic alone).
    """

    init: Callable[[PRNGKey, Array], Params]
    apply: Callable[[Params, Array], tuple[Array, Array]]
    actor: Policy
    value: Callable[[Params, Array], Array]


class MLP(nn.Module):
    """``Dense -> activation`` per hidden size, then a linear head of ``out_size``.

    Attributes:
      hidden_sizes: widths of the hidden layers.
      out_size: width of the head.
      head_gain: orthogonal gain of the head.
      activation: elementwise nonlinearity.
    """

    hidden_sizes: Sequence[int]
    out_size: int
    head_gain: float
    activation: Callable[[Array], Array] = jnp.tanh

    @nn.compact
    def __call__(self, x: Array) -> Array:
        hidden_init = nn.initializers.orthogonal(math.sqrt(2.0))
        for width in self.hidden_sizes:
            x = self.activation(nn.Dense(width, kernel_init=hidden_init,
                                         bias_init=nn.initializers.zeros)(x))
        return nn.Dense(self.out_size, kernel_init=nn.initializers.orthogonal(self.head_gain),
                        bias_init=nn.initializers.zeros)(x)


def sequential_init(init: Callable[..., Params]) -> Callable[..., Params]:
    """Wrap ``init`` so that ``jax.vmap`` runs it once per batch element, in sequence.

    Uses ``jax.custom_batching.sequential_vmap``: under ``vmap`` the function becomes a
    ``lax.map`` over the batch instead of a batched computation. This avoids the batched
    QR of orthogonal initialisers, which can hang XLA's CPU thread pool on a 2-core
    machine (DESIGN.md, known hazards). Unbatched calls are unchanged.

    Args:
      init: ``init(key, obs) -> params`` (any positional array arguments).

    Returns:
      A function with the same signature and results: vmapped over keys ``[S]``, every
      parameter leaf gets a leading ``[S]`` axis, exactly as with a plain ``vmap``.
    """
    return jax.custom_batching.sequential_vmap(init)


def _check_sizes(num_actions: int, hidden_sizes: Sequence[int], activation: str) -> None:
    if isinstance(num_actions, bool) or not isinstance(num_actions, int) or num_actions < 1:
        raise ValueError(f"num_actions: must be an integer >= 1, got {num_actions!r}")
    sizes = tuple(hidden_sizes)
    if not sizes or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in sizes):
        raise ValueError(f"hidden_sizes: must be positive integers, got {hidden_sizes!r}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation: must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")


def mlp_actor(
    num_actions: int,
    hidden_sizes: Sequence[int] = (64, 64),
    *,
    activation: str = "tanh",
    head_gain: float = 0.01,
) -> Policy:
    """An MLP policy: ``apply(params, obs [..., D]) -> logits [..., A]``.

    Args:
      num_actions: A (>= 1).
      hidden_sizes: hidden widths; default ``(64, 64)``.
      activation: ``"tanh"`` (default) or ``"relu"``.
      head_gain: orthogonal gain of the logits layer (0.01: near-uniform start).

    Returns:
      :class:`~rljax.policies.tabular.Policy` whose ``init(key, obs)`` (sequential under
      vmap, see :func:`sequential_init`) takes an example observation ``[D]`` or
      ``[..., D]``.
    """
    _check_sizes(num_actions, hidden_sizes, activation)
    module = MLP(tuple(hidden_sizes), num_actions, head_gain, ACTIVATIONS[activation])

    def init(key: PRNGKey, obs: Array) -> Params:
        return module.init(key, jnp.asarray(obs, jnp.float32))

    def apply(params: Params, obs: Array) -> Array:
        return module.apply(params, obs)

    return Policy(init=sequential_init(init), apply=apply)


def mlp_actor_critic(
    num_actions: int,
    hidden_sizes: Sequence[int] = (64, 64),
    *,
    activation: str = "tanh",
    actor_head_gain: float = 0.01,
    critic_head_gain: float = 1.0,
) -> ActorCritic:
    """An actor and a critic with separate MLP torsos (see the module docstring).

    ``apply(params, obs [..., D]) -> (logits [..., A], value [...])``.

    Args:
      num_actions: A (>= 1).
      hidden_sizes: hidden widths of each torso; default ``(64, 64)``.
      activation: ``"tanh"`` (default) or ``"relu"``.
      actor_head_gain, critic_head_gain: orthogonal gains of the heads (0.01, 1.0).

    Returns:
      :class:`ActorCritic`; its ``actor`` is exactly :func:`mlp_actor` with the same
      arguments, applied to ``params["actor"]``.
    """
    actor = mlp_actor(num_actions, hidden_sizes, activation=activation,
                      head_gain=actor_head_gain)
    critic = MLP(tuple(hidden_sizes), 1, critic_head_gain, ACTIVATIONS[activation])

    def init(key: PRNGKey, obs: Array) -> Params:
        actor_key, critic_key = jax.random.split(key)
        return {"actor": actor.init(actor_key, obs),
                "critic": critic.init(critic_key, jnp.asarray(obs, jnp.float32))}

    def value(params: Params, obs: Array) -> Array:
        return critic.apply(params["critic"], obs)[..., 0]

    def apply(params: Params, obs: Array) -> tuple[Array, Array]:
        return actor.apply(params["actor"], obs), value(params, obs)

    return ActorCritic(init=sequential_init(init), apply=apply, actor=actor, value=value)
