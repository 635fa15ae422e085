"""A memory task: hide part of each observation, so a policy must remember to act well.

:class:`MaskObservation` keeps only the chosen features of a vector observation
(``obs [D] -> obs[keep] [K]``, ``info["final_obs"]`` likewise). :func:`masked_cartpole`
is CartPole-v1 with the velocities hidden, ``[x, x_dot, theta, theta_dot] -> [x,
theta]``: the usual partially observed control benchmark of recurrent RL (the
"CartPole with velocities removed" of Heess et al., 2015, "Memory-based control with
recurrent neural networks"; POPGym's ``StatelessCartPole``, Morad et al., 2023). A
feed-forward policy sees only positions and cannot tell a pole falling left from one
swinging back; a recurrent one can difference successive observations and recover the
velocities.

Why this task rather than gymnax's ``MemoryChain-bsuite``: it is native (no gymnax
dependency in the study), it keeps CartPole's dense reward and 500-step cap (so its
return has the same scale as the ``ppo-cartpole`` study), and the memory it needs is
short (a velocity is a difference of two positions), so a small GRU learns it within a
CPU budget, while the gap to the feed-forward policy stays large.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rljax.envs.base import Environment
from rljax.envs.classic import CartPole
from rljax.envs.spaces import Box, as_rljax_space
from rljax.envs.wrappers import Wrapper
from rljax.types import Array, PRNGKey

#: CartPole's observation features ``[x, x_dot, theta, theta_dot]`` kept by
#: :func:`masked_cartpole`: positions only.
CARTPOLE_POSITIONS = (0, 2)


class MaskObservation(Wrapper):
    """Keep only the features ``keep`` of a vector observation: ``obs [D] -> obs[keep]
    [K]`` (and ``info["final_obs"]`` when present, so truncations bootstrap from the same
    partial view). Rewards, terminations, truncations and the state are the inner
    environment's.

    Args:
      env: an environment with observations of shape ``[D]``.
      keep: the feature indices to keep, distinct integers in ``[0, D)`` (in order).

    Raises:
      ValueError: one line naming ``keep`` (empty, repeated, out of range, not integers)
        or the env (observations not a vector).
    """

    def __init__(self, env: Environment, keep: Sequence[int]):
        super().__init__(env)
        space = as_rljax_space(env.observation_space(env.default_params))
        if not isinstance(space, Box) or len(space.shape) != 1:
            raise ValueError(f"{env.name}: MaskObservation needs observations of shape [D], "
                             f"got {space!r}")
        size = space.shape[0]
        try:
            indices = tuple(keep)
        except TypeError:
            raise ValueError(f"keep: must be a sequence of feature indices, got {keep!r}") from None
        if (not indices or any(isinstance(i, bool) or not isinstance(i, int | np.integer)
                               for i in indices)
                or len(set(indices)) != len(indices)
                or any(not 0 <= int(i) < size for i in indices)):
            raise ValueError(f"keep: must be distinct integers in [0, {size}), got {keep!r}")
        self.keep = tuple(int(i) for i in indices)
        self._index = np.asarray(self.keep, np.int32)
        self._space = Box(space.low[self._index], space.high[self._index], (len(self.keep),),
                          dtype=space.dtype)

    @property
    def name(self) -> str:
        """``"Masked" + the inner name`` (e.g. ``"MaskedCartPole"``)."""
        return f"Masked{self.env.name}"

    def observation_space(self, params: Any = None) -> Box:
        """The inner ``Box`` restricted to ``keep``: shape ``(K,)``."""
        return self._space

    def _mask(self, obs: Array) -> Array:
        return obs[..., self._index]

    def reset(self, key: PRNGKey, params: Any = None) -> tuple[Array, Any]:
        """Reset the inner environment (``key []``); ``obs [K]``."""
        obs, state = self.env.reset(key, self._params(params))
        return self._mask(obs), state

    def step(
        self, key: PRNGKey, state: Any, action: Array, params: Any = None
    ) -> tuple[Array, Any, Array, Array, Array, dict[str, Array]]:
        """Step the inner environment; ``obs`` and ``info["final_obs"]`` masked to ``[K]``,
        ``reward`` / ``terminated`` / ``truncated`` scalars ``[]`` unchanged."""
        obs, state, reward, terminated, truncated, info = self.env.step(
            key, state, action, self._params(params))
        if "final_obs" in info:
            info = {**info, "final_obs": self._mask(info["final_obs"])}
        return self._mask(obs), state, reward, terminated, truncated, info


def masked_cartpole(max_steps_in_episode: int = 500) -> MaskObservation:
    """CartPole-v1 with the velocities hidden: observations ``[x, theta]`` float32 ``[2]``
    (module docstring); two actions, reward 1 per step, ``max_steps_in_episode`` cap."""
    return MaskObservation(CartPole(max_steps_in_episode), CARTPOLE_POSITIONS)
