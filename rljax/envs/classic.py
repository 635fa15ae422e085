"""CartPole: the classic cart-pole balancing task, native and pure-functional.

Standard physics of OpenAI gym's ``CartPole-v1`` (Barto, Sutton & Anderson, 1983; the
equations of Florian, 2007, "Correct equations for the dynamics of the cart-pole
system", as coded in gym and gymnax). With ``F = +-force_mag`` (action 1 pushes right),
``m = masspole``, ``M = masscart + masspole``, ``l = length`` (half the pole):

    temp      = (F + m l thetadot^2 sin(theta)) / M
    thetaacc  = (g sin(theta) - cos(theta) temp) / (l (4/3 - m cos(theta)^2 / M))
    xacc      = temp - m l thetaacc cos(theta) / M

integrated with explicit Euler over ``tau = 0.02`` s (positions first from the old
velocities, as gym does). Reward ``1`` per step, the terminating step included.

* ``terminated`` when ``|x| > 2.4`` or ``|theta| > 12 deg`` after the step (not
  bootstrapped);
* ``truncated`` when the episode reaches ``max_steps_in_episode`` (500) steps
  (bootstrapped; gymnasium's ``TimeLimit`` semantics, so a step can be both -- a
  termination then wins).

Observation ``[x, x_dot, theta, theta_dot]`` float32 ``[4]``; two actions; the initial
state is ``U(-0.05, 0.05)^4``. Auto-reset comes from :class:`~rljax.envs.base.Environment`.
``info["final_obs"]`` is the observation the step reached *before* auto-reset, the one a
truncated episode's bootstrap value is taken from.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import struct

from rljax.envs.base import Environment
from rljax.types import Array, PRNGKey


@struct.dataclass
class CartPoleState:
    """Cart position/velocity, pole angle/angular velocity (float32 scalars) and ``time``
    (int32 scalar: steps taken in the current episode)."""

    x: Array
    x_dot: Array
    theta: Array
    theta_dot: Array
    time: Array


@struct.dataclass
class CartPoleParams:
    """Physical constants (float32 scalar pytree leaves ``[]``, so a sweep may vmap over
    them) and the static episode-length limit."""

    gravity: float = 9.8
    masscart: float = 1.0
    masspole: float = 0.1
    length: float = 0.5
    force_mag: float = 10.0
    tau: float = 0.02
    x_threshold: float = 2.4
    theta_threshold_radians: float = 12 * 2 * math.pi / 360
    max_steps_in_episode: int = struct.field(pytree_node=False, default=500)


class CartPole(Environment):
    """CartPole-v1 with auto-reset; see the module docstring.

    Observation: ``[x, x_dot, theta, theta_dot]`` float32 ``[4]``; action: int32 scalar
    ``[]`` in ``{0, 1}`` (1 pushes right); ``reward`` float32 ``[]`` (1 per step);
    ``info["final_obs"]`` float32 ``[4]``, the observation before auto-reset.

    Args:
      max_steps_in_episode: time limit (>= 1); default 500 as in ``CartPole-v1``.
    """

    def __init__(self, max_steps_in_episode: int = 500):
        if (
            isinstance(max_steps_in_episode, bool)
            or not isinstance(max_steps_in_episode, int)
            or max_steps_in_episode < 1
        ):
            raise ValueError(
                f"max_steps_in_episode: must be an integer >= 1, got {max_steps_in_episode!r}"
            )
        self.max_steps_in_episode = max_steps_in_episode

    @property
    def default_params(self) -> CartPoleParams:
        return CartPoleParams(max_steps_in_episode=self.max_steps_in_episode)

    @property
    def num_actions(self) -> int:
        return 2

    @property
    def observation_shape(self) -> tuple[int, ...]:
        """Shape of one observation: ``(4,)``."""
        return (4,)

    def reset_env(self, key: PRNGKey, params: CartPoleParams) -> tuple[Array, CartPoleState]:
        """A state drawn from ``U(-0.05, 0.05)^4``; returns ``(obs [4], state)``."""
        del params
        x, x_dot, theta, theta_dot = jax.random.uniform(
            key, (4,), jnp.float32, minval=-0.05, maxval=0.05
        )
        state = CartPoleState(x=x, x_dot=x_dot, theta=theta, theta_dot=theta_dot,
                              time=jnp.int32(0))
        return _obs(state), state

    def step_env(self, key: PRNGKey, state: CartPoleState, action: Array,
                 params: CartPoleParams):
        """One Euler step of the physics for ``action`` (int32 ``[]``).

        Returns ``(obs [4], state, reward [], terminated [], truncated [], info)`` with
        ``info["final_obs"]`` float32 ``[4]`` (equal to ``obs`` until auto-reset replaces it).
        """
        del key
        p = params
        force = jnp.where(action == 1, p.force_mag, -p.force_mag).astype(jnp.float32)
        total_mass = p.masspole + p.masscart
        polemass_length = p.masspole * p.length
        cos_theta = jnp.cos(state.theta)
        sin_theta = jnp.sin(state.theta)
        temp = (force + polemass_length * jnp.square(state.theta_dot) * sin_theta) / total_mass
        theta_acc = (p.gravity * sin_theta - cos_theta * temp) / (
            p.length * (4.0 / 3.0 - p.masspole * jnp.square(cos_theta) / total_mass)
        )
        x_acc = temp - polemass_length * theta_acc * cos_theta / total_mass
        new = CartPoleState(
            x=state.x + p.tau * state.x_dot,
            x_dot=state.x_dot + p.tau * x_acc,
            theta=state.theta + p.tau * state.theta_dot,
            theta_dot=state.theta_dot + p.tau * theta_acc,
            time=state.time + 1,
        )
        terminated = jnp.logical_or(jnp.abs(new.x) > p.x_threshold,
                                    jnp.abs(new.theta) > p.theta_threshold_radians)
        truncated = new.time >= p.max_steps_in_episode
        obs = _obs(new)
        return obs, new, jnp.float32(1.0), terminated, truncated, {"final_obs": obs}


def _obs(state: CartPoleState) -> Array:
    return jnp.stack([state.x, state.x_dot, state.theta, state.theta_dot]).astype(jnp.float32)
