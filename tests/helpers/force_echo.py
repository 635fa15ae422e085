"""A continuous-action toy env whose reward shows what reached the env step."""

import jax
import jax.numpy as jnp
from flax import struct

from rljax.envs import Box, Environment


@struct.dataclass
class PointState:
    position: jax.Array
    time: jax.Array


class PointMass(Environment):
    """1-D point moved by a force in ``Box(-0.1, 0.1, (1,))``; the reward is the force the
    env received (so a test can see what reached the env step); 6-step episodes."""

    def action_space(self, params=None):
        return Box(-0.1, 0.1, (1,))

    def reset_env(self, key, params):
        position = jax.random.uniform(key, (1,), minval=-1.0, maxval=1.0)
        return position, PointState(position, jnp.int32(0))

    def step_env(self, key, state, action, params):
        position = state.position + action
        time = state.time + 1
        obs = position
        return (obs, PointState(position, time), jnp.sum(action), jnp.bool_(False),
                time >= 6, {"final_obs": obs})
