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
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import linen as nn

from rljax.envs.spaces import Box, Discrete, Space, as_rljax_space
from rljax.policies.distributions import (
    ActionDistribution,
    categorical,
    check_supports,
    diagonal_gaussian,
)
from rljax.policies.tabular import Policy
from rljax.types import Array, Params, PRNGKey

ACTIVATIONS: dict[str, Callable[[Array], Array]] = {"tanh": jnp.tanh, "relu": nn.relu,
                                                    "swish": nn.swish}


class ActorCritic(NamedTuple):
    """A pure actor-critic.

    Attributes:
      init: ``init(key, obs) -> params`` (``{"actor": ..., "critic": ...}``).
      apply: ``apply(params, obs [..., D]) -> (dist_params, value [...])``: logits
        ``[..., A]`` for a categorical head, ``(mean [..., A], log_std [..., A])`` for a
        Gaussian one.
      actor: the actor alone, a :class:`~rljax.policies.tabular.Policy` over
        ``params["actor"]`` (its ``apply`` returns the ``dist_params``).
      value: ``value(params, obs [..., D]) -> value [...]`` (the critic alone).
      distribution: the head's :class:`~rljax.policies.distributions.ActionDistribution`
        (how ``dist_params`` are sampled and scored; which action spaces it supports).
    """

    init: Callable[[PRNGKey, Array], Params]
    apply: Callable[[Params, Array], tuple[Any, Array]]
    actor: Policy
    value: Callable[[Params, Array], Array]
    distribution: ActionDistribution = categorical()


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


#: The Gaussian head's scales (:func:`mlp_gaussian_actor_critic`'s ``scale``).
GAUSSIAN_SCALES = ("parameter", "softplus")


class GaussianActor(nn.Module):
    """An MLP mean ``[..., A]`` and its standard deviation, one of :data:`GAUSSIAN_SCALES`:

    * ``"parameter"``: a state-independent ``log_std`` parameter ``[A]`` (broadcast to the
      mean's shape), as in PPO for continuous control (Schulman et al., 2017; CleanRL
      ``ppo_continuous_action.py``);
    * ``"softplus"``: state-dependent, ``std = softplus(W h + b) + min_std`` from the
      mean's torso output ``h`` (a second linear head beside the mean's: one layer of
      ``2 A`` outputs), as gymnax-blines' ``GaussianSeparateMLP`` (``min_std`` 0.001).

    Attributes:
      hidden_sizes, activation: of the mean's torso.
      action_dim: A.
      head_gain: orthogonal gain of the mean's layer (0.01: actions start near 0).
      log_std_init: initial ``log_std`` (0: unit standard deviation; ``"parameter"``).
      scale: ``"parameter"`` or ``"softplus"``.
      min_std: the softplus scale's floor (``"softplus"``).
    """

    hidden_sizes: Sequence[int]
    action_dim: int
    head_gain: float
    activation: Callable[[Array], Array] = jnp.tanh
    log_std_init: float = 0.0
    scale: str = "parameter"
    min_std: float = 0.001

    @nn.compact
    def __call__(self, x: Array) -> tuple[Array, Array]:
        if self.scale == "softplus":
            out = MLP(self.hidden_sizes, 2 * self.action_dim, self.head_gain,
                      self.activation)(x)
            mean, pre_scale = out[..., :self.action_dim], out[..., self.action_dim:]
            return mean, jnp.log(nn.softplus(pre_scale) + self.min_std)
        mean = MLP(self.hidden_sizes, self.action_dim, self.head_gain, self.activation)(x)
        log_std = self.param("log_std", nn.initializers.constant(self.log_std_init),
                             (self.action_dim,))
        return mean, jnp.broadcast_to(log_std, mean.shape)


def mlp_gaussian_actor_critic(
    action_dim: int,
    hidden_sizes: Sequence[int] = (64, 64),
    *,
    activation: str = "tanh",
    actor_head_gain: float = 0.01,
    critic_head_gain: float = 1.0,
    log_std_init: float = 0.0,
    tanh_squash: bool = False,
    low: Any = None,
    high: Any = None,
    scale: str = "parameter",
) -> ActorCritic:
    """A diagonal-Gaussian actor and a critic with separate MLP torsos.

    ``apply(params, obs [..., D]) -> ((mean [..., A], log_std [..., A]), value [...])``,
    ``log_std`` a state-independent parameter (``params["actor"]["params"]["log_std"]``)
    or, with ``scale="softplus"``, ``log(softplus(W h + b) + 0.001)`` of the actor's torso
    output ``h`` (gymnax-blines' Gaussian head; :class:`GaussianActor`).

    Args:
      action_dim: A (>= 1).
      hidden_sizes, activation, actor_head_gain, critic_head_gain: as
        :func:`mlp_actor_critic`.
      log_std_init: initial log standard deviation (0.0).
      tanh_squash, low, high: of :func:`~rljax.policies.distributions.diagonal_gaussian`
        (squash the sample onto ``[low, high]`` with the log-prob correction).
      scale: one of :data:`GAUSSIAN_SCALES` (``"parameter"``).

    Returns:
      :class:`ActorCritic` whose ``distribution`` is the matching diagonal Gaussian.

    Raises:
      ValueError: one line naming ``scale`` when it is not one of :data:`GAUSSIAN_SCALES`.
    """
    if scale not in GAUSSIAN_SCALES:
        raise ValueError(f"scale: must be one of {', '.join(GAUSSIAN_SCALES)}, got {scale!r}")
    distribution = diagonal_gaussian(action_dim, tanh_squash=tanh_squash, low=low, high=high)
    _check_sizes(action_dim, hidden_sizes, activation)
    module = GaussianActor(tuple(hidden_sizes), action_dim, actor_head_gain,
                           ACTIVATIONS[activation], float(log_std_init), scale)
    critic = MLP(tuple(hidden_sizes), 1, critic_head_gain, ACTIVATIONS[activation])

    def actor_init(key: PRNGKey, obs: Array) -> Params:
        return module.init(key, jnp.asarray(obs, jnp.float32))

    actor = Policy(init=sequential_init(actor_init), apply=module.apply)

    def init(key: PRNGKey, obs: Array) -> Params:
        actor_key, critic_key = jax.random.split(key)
        return {"actor": actor.init(actor_key, obs),
                "critic": critic.init(critic_key, jnp.asarray(obs, jnp.float32))}

    def value(params: Params, obs: Array) -> Array:
        return critic.apply(params["critic"], obs)[..., 0]

    def apply(params: Params, obs: Array) -> tuple[tuple[Array, Array], Array]:
        return actor.apply(params["actor"], obs), value(params, obs)

    return ActorCritic(init=sequential_init(init), apply=apply, actor=actor, value=value,
                       distribution=distribution)


def actor_critic_for(
    env: Any,
    env_params: Any = None,
    hidden_sizes: Sequence[int] = (64, 64),
    *,
    activation: str = "tanh",
    tanh_squash: bool = False,
    log_std_init: float = 0.0,
    scale: str = "parameter",
) -> ActorCritic:
    """The MLP actor-critic that fits ``env``'s spaces: categorical for ``Discrete(n)``,
    diagonal Gaussian for a ``Box`` of shape ``(A,)`` (tanh-squashed onto its bounds when
    ``tanh_squash``).

    Args:
      env: an environment with ``action_space(params)`` and ``observation_space(params)``
        (rljax's or a gymnax space).
      env_params: its params (default ``env.default_params``).
      hidden_sizes, activation: of both torsos.
      tanh_squash, log_std_init, scale: Gaussian heads only (see
        :func:`mlp_gaussian_actor_critic`).

    Raises:
      ValueError: one line naming the env when its observations are not one vector (wrap
        it in :class:`~rljax.envs.wrappers.FlattenObservation`) or its action space is
        neither ``Discrete`` nor a 1-D ``Box``.
    """
    env_params = env.default_params if env_params is None else env_params
    name = getattr(env, "name", type(env).__name__)
    obs_space = as_rljax_space(env.observation_space(env_params))
    if len(obs_space.shape) != 1:
        raise ValueError(f"{name}: an MLP policy needs observations of shape [D], got "
                         f"{list(obs_space.shape)}; wrap the env in FlattenObservation")
    space: Space = as_rljax_space(env.action_space(env_params))
    if isinstance(space, Discrete):
        return mlp_actor_critic(space.n, hidden_sizes, activation=activation)
    if isinstance(space, Box) and len(space.shape) == 1:
        net = mlp_gaussian_actor_critic(
            space.shape[0], hidden_sizes, activation=activation, log_std_init=log_std_init,
            tanh_squash=tanh_squash, low=space.low if tanh_squash else None,
            high=space.high if tanh_squash else None, scale=scale)
        check_supports(net.distribution, space, name)
        return net
    raise ValueError(f"{name}: MLP policies support Discrete(n) and Box of shape (A,) action "
                     f"spaces, got {space!r}")
