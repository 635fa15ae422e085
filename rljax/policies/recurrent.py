"""A GRU actor-critic whose hidden state resets at episode boundaries.

For partially observed tasks (a policy that must remember) the torso is a gated recurrent
unit (Cho et al., 2014, "Learning phrase representations using RNN encoder-decoder for
statistical machine translation", eq. 5-8; flax ``nn.GRUCell``'s form, with the reset
gate applied to the recurrent term after its matrix product as in cuDNN / PyTorch):

    x_t = tanh(W_e o_t + b_e)                                 (observation embedding)
    r_t = sigmoid(W_ir x_t + b_ir + W_hr h_{t-1})             (reset gate)
    z_t = sigmoid(W_iz x_t + b_iz + W_hz h_{t-1})             (update gate)
    n_t = tanh(W_in x_t + b_in + r_t * (W_hn h_{t-1} + b_hn)) (candidate)
    h_t = (1 - z_t) * n_t + z_t * h_{t-1}

then an actor head ``Dense(H) -> tanh -> Dense(A)`` and a critic head ``Dense(H) -> tanh
-> Dense(1)`` on ``h_t`` (the GRU is shared by both). At an episode start
(``reset_t = 1``) ``h_{t-1}`` is replaced by the zero initial state before the step, so
no memory crosses an episode boundary; the single-step :attr:`RecurrentActorCritic.apply`
(rollouts) and :attr:`RecurrentActorCritic.apply_sequence` (a ``lax.scan`` over ``T``:
the PPO update) apply the same reset at the same place, so the update re-creates the
hidden states the rollout acted with.

Initialisation: the embedding and heads are orthogonal (gain ``sqrt(2)`` for hidden
layers, ``actor_head_gain`` / ``critic_head_gain`` for the heads; biases zero), the GRU's
input kernels LeCun-normal and its recurrent kernels orthogonal (flax's defaults).
``init`` goes through :func:`~rljax.policies.mlp.sequential_init` (the vmapped
orthogonal initialiser can hang a 2-core CPU; DESIGN.md, known hazards).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
from flax import linen as nn

from rljax.policies.distributions import ActionDistribution, categorical
from rljax.policies.mlp import sequential_init
from rljax.types import Array, Params, PRNGKey


class RecurrentActorCritic(NamedTuple):
    """A pure recurrent actor-critic (see the module docstring).

    Attributes:
      init: ``init(key, obs [D] or [B, D]) -> params`` (sequential under ``vmap``).
      initial_state: ``initial_state(batch_shape) -> h [*batch_shape, H]`` zeros.
      apply: ``apply(params, h [B, H], obs [B, D], reset [B]) -> (h' [B, H],
        (dist_params, value [B]))``, one step; ``reset`` (bool) zeroes ``h`` before the
        step. Leading batch axes are optional (``h [H], obs [D], reset []`` works).
      apply_sequence: ``apply_sequence(params, h0 [B, H], obs [B, T, D], resets [B, T])
        -> (dist_params [B, T, ...], values [B, T])``: ``apply`` scanned over ``T``.
      distribution: the head's :class:`~rljax.policies.distributions.ActionDistribution`.
      hidden_size: ``H``.
    """

    init: Callable[[PRNGKey, Array], Params]
    initial_state: Callable[[tuple[int, ...]], Array]
    apply: Callable[[Params, Array, Array, Array], tuple[Array, tuple[Any, Array]]]
    apply_sequence: Callable[[Params, Array, Array, Array], tuple[Any, Array]]
    distribution: ActionDistribution
    hidden_size: int


class GRUActorCriticModule(nn.Module):
    """One step of the GRU actor-critic: ``(h, obs, reset) -> (h', (dist_params, value))``.

    Attributes:
      hidden_size: H (embedding, GRU and head widths).
      num_outputs: A (logits or Gaussian means).
      gaussian: a diagonal-Gaussian head (mean and a state-independent ``log_std``).
      actor_head_gain, critic_head_gain: orthogonal gains of the heads.
      log_std_init: initial ``log_std`` (Gaussian only).
    """

    hidden_size: int
    num_outputs: int
    gaussian: bool = False
    actor_head_gain: float = 0.01
    critic_head_gain: float = 1.0
    log_std_init: float = 0.0

    def setup(self):
        hidden = nn.initializers.orthogonal(math.sqrt(2.0))
        zeros = nn.initializers.zeros
        self.embed = nn.Dense(self.hidden_size, kernel_init=hidden, bias_init=zeros)
        self.gru = nn.GRUCell(features=self.hidden_size)
        self.actor_torso = nn.Dense(self.hidden_size, kernel_init=hidden, bias_init=zeros)
        self.actor_head = nn.Dense(self.num_outputs, bias_init=zeros,
                                   kernel_init=nn.initializers.orthogonal(self.actor_head_gain))
        self.critic_torso = nn.Dense(self.hidden_size, kernel_init=hidden, bias_init=zeros)
        self.critic_head = nn.Dense(1, bias_init=zeros,
                                    kernel_init=nn.initializers.orthogonal(self.critic_head_gain))
        if self.gaussian:
            self.log_std = self.param("log_std", nn.initializers.constant(self.log_std_init),
                                      (self.num_outputs,))

    def __call__(self, h: Array, obs: Array, reset: Array) -> tuple[Array, tuple[Any, Array]]:
        h = jnp.where(reset[..., None], jnp.zeros_like(h), h)
        x = jnp.tanh(self.embed(obs))
        h, _ = self.gru(h, x)
        out = self.actor_head(jnp.tanh(self.actor_torso(h)))
        value = self.critic_head(jnp.tanh(self.critic_torso(h)))[..., 0]
        if self.gaussian:
            out = (out, jnp.broadcast_to(self.log_std, out.shape))
        return h, (out, value)


def _check_positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")


def gru_actor_critic(
    num_actions: int,
    hidden_size: int = 64,
    *,
    distribution: ActionDistribution | None = None,
    actor_head_gain: float = 0.01,
    critic_head_gain: float = 1.0,
    log_std_init: float = 0.0,
) -> RecurrentActorCritic:
    """A GRU actor-critic (module docstring): categorical by default, or a diagonal
    Gaussian head when ``distribution`` is one (``policies.diagonal_gaussian(A)``).

    Args:
      num_actions: A, the number of actions (categorical) or action dimensions
        (Gaussian); >= 1.
      hidden_size: H, the width of the embedding, the GRU state and the heads' hidden
        layers; >= 1 (64).
      distribution: the head's
        :class:`~rljax.policies.distributions.ActionDistribution`; default categorical.
      actor_head_gain, critic_head_gain: orthogonal gains of the heads (0.01: a
        near-uniform initial policy; 1.0).
      log_std_init: initial ``log_std`` of a Gaussian head.

    Returns:
      :class:`RecurrentActorCritic`. Shapes (``B`` envs, ``T`` steps, ``D`` observation
      features, ``H`` hidden): ``apply(params, h [B, H], obs [B, D], reset [B]) -> (h'
      [B, H], (logits [B, A], value [B]))``; ``apply_sequence(params, h0 [B, H], obs
      [B, T, D], resets [B, T]) -> (logits [B, T, A], values [B, T])``; for a Gaussian
      head the logits are ``(mean, log_std)``, each ``[..., A]``.

    Raises:
      ValueError: one line naming the argument.
    """
    _check_positive_int("num_actions", num_actions)
    _check_positive_int("hidden_size", hidden_size)
    distribution = categorical() if distribution is None else distribution
    if not isinstance(distribution, ActionDistribution):
        raise ValueError(f"distribution: must be an ActionDistribution (policies.categorical() "
                         f"or policies.diagonal_gaussian(A)), got {type(distribution).__name__}")
    for name, gain in (("actor_head_gain", actor_head_gain),
                       ("critic_head_gain", critic_head_gain)):
        if not isinstance(gain, int | float) or not (math.isfinite(gain) and gain > 0):
            raise ValueError(f"{name}: must be a finite number > 0, got {gain!r}")
    gaussian = distribution.name != "categorical"
    module = GRUActorCriticModule(hidden_size, num_actions, gaussian, float(actor_head_gain),
                                  float(critic_head_gain), float(log_std_init))

    def initial_state(batch_shape: tuple[int, ...] = ()) -> Array:
        return jnp.zeros((*tuple(batch_shape), hidden_size), jnp.float32)

    def init(key: PRNGKey, obs: Array) -> Params:
        obs = jnp.asarray(obs, jnp.float32)
        batch = obs.shape[:-1]
        return module.init(key, initial_state(batch), obs, jnp.zeros(batch, bool))

    def apply(params: Params, h: Array, obs: Array,
              reset: Array) -> tuple[Array, tuple[Any, Array]]:
        chex.assert_shape(h, (*reset.shape, hidden_size))
        chex.assert_equal_shape_prefix([obs, reset], reset.ndim)
        return module.apply(params, h, jnp.asarray(obs, jnp.float32), reset.astype(bool))

    def apply_sequence(params: Params, h0: Array, obs: Array,
                       resets: Array) -> tuple[Any, Array]:
        chex.assert_rank(resets, 2)
        chex.assert_shape(h0, (resets.shape[0], hidden_size))
        chex.assert_equal_shape_prefix([obs, resets], 2)

        def step(h, inputs):
            o, r = inputs
            h, out = apply(params, h, o, r)
            return h, out

        time_major = (jnp.swapaxes(obs, 0, 1), jnp.swapaxes(resets, 0, 1))
        _, (dist_params, values) = jax.lax.scan(step, h0, time_major)
        batch_major = lambda x: jnp.swapaxes(x, 0, 1)  # noqa: E731
        return jax.tree_util.tree_map(batch_major, dist_params), batch_major(values)

    return RecurrentActorCritic(init=sequential_init(init), initial_state=initial_state,
                                apply=apply, apply_sequence=apply_sequence,
                                distribution=distribution, hidden_size=hidden_size)
