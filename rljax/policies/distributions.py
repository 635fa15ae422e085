"""Action distributions of policy heads: categorical and diagonal Gaussian (optionally
tanh-squashed), behind one small interface the PPO transform and trainer use.

A head's ``apply`` returns *distribution parameters* (``dist_params``): logits
``[..., A]`` for :func:`categorical`, ``(mean [..., D], log_std [..., D])`` for
:func:`diagonal_gaussian`. An :class:`ActionDistribution` then says how to sample, score
and regularise them:

* ``noise(key, batch_shape)`` draws the randomness of a batch of samples up front
  (uniforms ``[*batch]`` for the categorical, standard normals ``[*batch, D]`` for the
  Gaussian), and ``sample(noise, dist_params)`` turns it into actions, so a rollout of
  ``T`` steps draws all its noise with one key (the categorical keeps the bits rljax's PPO
  has always drawn);
* ``log_prob(dist_params, action)`` and ``entropy(dist_params)``: ``[...]``;
* ``env_action(action)``: what the environment receives. PPO stores the *raw* sample
  and scores it; clipping to a :class:`~rljax.envs.spaces.Box`'s bounds happens only in
  the environment step (CleanRL ``ppo_continuous_action.py``, PureJaxRL, rejax), so the
  log-probability is always of the unclipped sample;
* ``supports(space)``: whether the head can act in an action space.

Formulas (``D`` action dimensions, ``sigma = exp(log_std)``):

    Gaussian:  log N(u; mu, sigma) = sum_d [ -(u_d - mu_d)^2 / (2 sigma_d^2)
                                              - log sigma_d - 0.5 log(2 pi) ]
               H = sum_d [ 0.5 log(2 pi e) + log sigma_d ]
    tanh:      a = c + s tanh(u)   (c = (high + low) / 2, s = (high - low) / 2, or c = 0,
                                    s = 1 without bounds)
               log p(a) = log N(u; mu, sigma) - sum_d [ log(1 - tanh(u_d)^2) + log s_d ]
               with log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2 u))  (stable form;
               Haarnoja et al., 2018, SAC, appendix C).

The tanh-squashed head stores the pre-squash sample ``u`` as its action (so
``log_prob`` never takes ``atanh`` of a value at the bound) and maps it to the box in
``env_action``. Its ``entropy`` is the pre-squash Gaussian's (the squashed density's
entropy has no closed form); the Jacobian term does not depend on the policy's
parameters once ``u`` is fixed, so it cancels in PPO's ratio.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rljax.envs.spaces import Box, Discrete, Space
from rljax.policies.sampling import categorical_from_uniform, categorical_log_prob
from rljax.types import Array, PRNGKey

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class ActionDistribution(NamedTuple):
    """How a policy head's ``dist_params`` become actions (module docstring). Shapes for
    a batch ``[*batch]`` of ``A``-dimensional (Gaussian) or scalar (categorical) actions.

    Attributes:
      name: ``"categorical"``, ``"gaussian"`` or ``"tanh_gaussian"``.
      noise: ``noise(key, batch_shape) -> noise`` (``[*batch]`` or ``[*batch, D]``).
      sample: ``sample(noise, dist_params) -> action`` (``[*batch]`` int32 or
        ``[*batch, D]`` float32).
      log_prob: ``log_prob(dist_params, action) -> [*batch]``.
      entropy: ``entropy(dist_params) -> [*batch]``.
      mode: ``mode(dist_params) -> action`` (argmax / mean: a deterministic policy).
      env_action: ``env_action(action) -> action`` the environment receives (before any
        clipping to the bounds).
      supports: ``supports(space) -> bool``.
    """

    name: str
    noise: Callable[[PRNGKey, tuple[int, ...]], Array]
    sample: Callable[[Array, Any], Array]
    log_prob: Callable[[Any, Array], Array]
    entropy: Callable[[Any], Array]
    mode: Callable[[Any], Array]
    env_action: Callable[[Array], Array]
    supports: Callable[[Space], bool]


def _categorical_entropy(logits: Array) -> Array:
    log_p = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)


def categorical() -> ActionDistribution:
    """A categorical head over ``softmax(logits [..., A])`` for a ``Discrete(A)`` space.

    ``noise(key, batch)`` is ``uniform(key, batch)``; ``sample`` inverts the CDF
    (:func:`~rljax.policies.sampling.categorical_from_uniform`); ``log_prob`` is
    ``log_softmax(logits)[a]``; ``entropy`` ``-sum_a p_a log p_a``.
    """

    def noise(key: PRNGKey, batch_shape: tuple[int, ...]) -> Array:
        return jax.random.uniform(key, tuple(batch_shape))

    return ActionDistribution(
        name="categorical",
        noise=noise,
        sample=lambda u, logits: categorical_from_uniform(u, logits),
        log_prob=categorical_log_prob,
        entropy=_categorical_entropy,
        mode=lambda logits: jnp.argmax(logits, axis=-1).astype(jnp.int32),
        env_action=lambda action: action,
        supports=lambda space: isinstance(space, Discrete),
    )


def gaussian_log_prob(mean: Array, log_std: Array, x: Array) -> Array:
    """``sum_d log N(x_d; mean_d, exp(log_std_d))`` over the last axis: ``[..., D] -> [...]``."""
    z = (x - mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * jnp.square(z) - log_std - _HALF_LOG_2PI, axis=-1)


def gaussian_entropy(log_std: Array) -> Array:
    """``sum_d 0.5 log(2 pi e) + log_std_d``: ``[..., D] -> [...]``."""
    return jnp.sum(log_std + _HALF_LOG_2PI + 0.5, axis=-1)


def log_one_minus_tanh_squared(u: Array) -> Array:
    """``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2 u))``, finite for any ``u``."""
    return 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))


def diagonal_gaussian(
    action_dim: int,
    *,
    tanh_squash: bool = False,
    low: Any = None,
    high: Any = None,
) -> ActionDistribution:
    """A diagonal Gaussian head ``N(mean, diag(exp(log_std))^2)`` over ``[D]`` actions.

    ``dist_params = (mean [..., D], log_std [..., D])`` (a state-independent log-std is
    broadcast to the mean's shape by the network).

    Args:
      action_dim: ``D`` (>= 1).
      tanh_squash: squash samples through ``tanh`` (and onto ``[low, high]`` when given);
        log-probabilities carry the change-of-variables correction (module docstring).
      low, high: the box the squashed action is mapped onto (``tanh_squash`` only;
        finite, broadcastable to ``[D]``); default ``[-1, 1]``.

    Returns:
      :class:`ActionDistribution` named ``"gaussian"`` or ``"tanh_gaussian"``; it
      supports a ``Box`` of shape ``(D,)`` (the squashed one only a bounded box).

    Raises:
      ValueError: one line naming the argument.
    """
    if isinstance(action_dim, bool) or not isinstance(action_dim, int) or action_dim < 1:
        raise ValueError(f"action_dim: must be an integer >= 1, got {action_dim!r}")
    if not tanh_squash and (low is not None or high is not None):
        raise ValueError("low/high: only used with tanh_squash=True (an unsquashed Gaussian "
                         "is clipped to the box in the env step)")
    center = scale = None
    if tanh_squash:
        lo = np.broadcast_to(np.asarray(-1.0 if low is None else low, np.float64), (action_dim,))
        hi = np.broadcast_to(np.asarray(1.0 if high is None else high, np.float64),
                             (action_dim,))
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo < hi)):
            raise ValueError(f"low/high: tanh_squash needs finite low < high, got {low!r}, "
                             f"{high!r}")
        center = jnp.asarray((hi + lo) / 2.0, jnp.float32)
        scale = jnp.asarray((hi - lo) / 2.0, jnp.float32)

    def noise(key: PRNGKey, batch_shape: tuple[int, ...]) -> Array:
        return jax.random.normal(key, (*batch_shape, action_dim))

    def sample(eps: Array, dist_params: Any) -> Array:
        mean, log_std = dist_params
        return mean + jnp.exp(log_std) * eps

    def log_prob(dist_params: Any, action: Array) -> Array:
        mean, log_std = dist_params
        base = gaussian_log_prob(mean, log_std, action)
        if not tanh_squash:
            return base
        jacobian = jnp.sum(log_one_minus_tanh_squared(action) + jnp.log(scale), axis=-1)
        return base - jacobian

    def entropy(dist_params: Any) -> Array:
        return gaussian_entropy(dist_params[1])

    def env_action(action: Array) -> Array:
        return center + scale * jnp.tanh(action) if tanh_squash else action

    def supports(space: Space) -> bool:
        if not isinstance(space, Box) or space.shape != (action_dim,):
            return False
        return space.bounded if tanh_squash else True

    return ActionDistribution(
        name="tanh_gaussian" if tanh_squash else "gaussian",
        noise=noise,
        sample=sample,
        log_prob=log_prob,
        entropy=entropy,
        mode=lambda dist_params: dist_params[0],
        env_action=env_action,
        supports=supports,
    )


def check_supports(distribution: ActionDistribution, space: Space, env_name: str) -> None:
    """Raise a one-line ``ValueError`` naming the env if the head cannot act in ``space``."""
    if not distribution.supports(space):
        allowed = {"categorical": "Discrete(n)",
                   "gaussian": "a Box of shape (D,)",
                   "tanh_gaussian": "a bounded Box of shape (D,)"}[distribution.name]
        raise ValueError(f"{env_name}: action space {space!r} is not supported by a "
                         f"{distribution.name} policy head (it needs {allowed})")


def policy_distribution(actor_critic: Any) -> ActionDistribution:
    """The actor-critic's ``distribution`` (categorical when it declares none)."""
    distribution = getattr(actor_critic, "distribution", None)
    return categorical() if distribution is None else distribution
