"""The environment contract: gymnax-shaped, stateless, with branch-free auto-reset.

An :class:`Environment` is a stateless object; everything that changes lives in an
``EnvState`` pytree and everything configurable in an ``EnvParams`` pytree (both
``flax.struct.dataclass``; static sizes are ``pytree_node=False``).

    obs, state = env.reset(key, params)
    obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)

``step`` follows gymnax >= 1.0's six values: a time-limit ``truncated`` episode is
bootstrapped by value-based learners, a ``terminated`` one is not. When either is true the
returned ``obs``/``state`` are already those of a fresh episode (auto-reset, selected per
leaf with ``jnp.where`` so no Python branch depends on traced values); ``reward``,
``terminated``, ``truncated`` and ``info`` describe the step that just ended, and
``info["final_obs"]`` is the observation the step reached *before* auto-reset (what a
truncated episode is bootstrapped from): :meth:`Environment.step` adds it for every
environment whose ``step_env`` does not, so an environment written from the template
(``info == {}``) gets correct truncation bootstrapping without knowing the key exists.

What a subclass's ``reset_env`` / ``step_env`` return is checked once, at trace time
(:func:`rljax.contracts.check_env_step`): the step's observation has the reset's
structure, shape and dtype; ``reward`` is a float scalar and ``terminated`` /
``truncated`` bool scalars. A mismatch is a one-line error naming the method, e.g.
``GridWorld.step_env returns observations of shape [5, 5] but GridWorld.reset_env returns
[25]``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from rljax.contracts import ContractError, check_env_step, env_function_names
from rljax.envs.spaces import Box, Discrete, Space, check_action
from rljax.types import Array, PRNGKey


@struct.dataclass
class EnvState:
    """Base state: ``time`` is the step index within the current episode (int32 scalar)."""

    time: Array


@struct.dataclass
class EnvParams:
    """Base parameters: the episode-length limit (static)."""

    max_steps_in_episode: int = struct.field(pytree_node=False, default=500)


class Environment:
    """Base class of pure-functional environments (see the module docstring).

    Subclasses implement :meth:`reset_env`, :meth:`step_env`, :meth:`default_params` and
    either :attr:`num_actions` (a discrete action set) or :meth:`action_space` (e.g. a
    :class:`~rljax.envs.spaces.Box` for continuous control); the base class supplies
    auto-reset in :meth:`step`, ``action_space`` from ``num_actions`` and
    :meth:`observation_space` from the shape :meth:`reset` returns.

    Shapes, for one environment (a batch of environments is a ``vmap``): ``key`` is a
    typed key ``[]``; ``action`` an int32 scalar ``[]`` in ``[0, num_actions)``;
    ``reward`` a float32 scalar ``[]``; ``terminated`` and ``truncated`` bool scalars
    ``[]``; ``obs`` has the subclass's observation shape (``[]`` int32 for
    :class:`ChainMDP`, ``[4]`` float32 for :class:`CartPole`, ``[8]`` float32 for
    :class:`EquationEnv`); ``info`` maps names to arrays (scalars unless documented).
    """

    @property
    def default_params(self) -> EnvParams:
        """Default environment parameters."""
        return EnvParams()

    @property
    def name(self) -> str:
        """The environment's name (its class name unless a subclass says otherwise)."""
        return type(self).__name__

    @property
    def num_actions(self) -> int:
        """Size of the discrete action set (``ValueError`` for a continuous action space)."""
        space = self.action_space()
        if isinstance(space, Discrete):
            return space.n
        raise ValueError(f"{self.name}: num_actions is for Discrete action spaces; this "
                         f"env's action space is {space!r}")

    def action_space(self, params: Any = None) -> Space:
        """The action space: ``Discrete(num_actions)`` unless a subclass overrides it
        (a :class:`~rljax.envs.spaces.Box` of shape ``[A]`` for continuous control)."""
        if type(self).num_actions is Environment.num_actions:
            raise NotImplementedError(f"{self.name}: define num_actions or action_space")
        return Discrete(self.num_actions)

    def observation_space(self, params: Any = None) -> Space:
        """The observation space; by default an unbounded :class:`~rljax.envs.spaces.Box`
        of the shape and dtype :meth:`reset` returns (computed abstractly, no compute)."""
        params = self.default_params if params is None else params
        obs, _ = jax.eval_shape(self.reset, jax.random.key(0), params)
        if not hasattr(obs, "shape"):
            raise ValueError(f"{self.name}: observations are a pytree, not one array; "
                             "define observation_space")
        return Box(-jnp.inf, jnp.inf, tuple(obs.shape), dtype=obs.dtype)

    def reset(self, key: PRNGKey, params: EnvParams | None = None) -> tuple[Array, Any]:
        """Start an episode from ``key`` (a typed key ``[]``).

        Returns:
          ``(obs, state)``: the first observation (the environment's observation shape,
          e.g. ``[]`` or ``[4]``) and the state pytree (scalar leaves unless documented).
        """
        params = self.default_params if params is None else params
        return self.reset_env(key, params)

    def step(
        self,
        key: PRNGKey,
        state: Any,
        action: Array,
        params: EnvParams | None = None,
    ) -> tuple[Array, Any, Array, Array, Array, dict[str, Array]]:
        """Advance one step with auto-reset.

        Args:
          key: typed key ``[]``.
          state: the state pytree from :meth:`reset` or the previous :meth:`step`.
          action: int32 scalar ``[]`` in ``[0, num_actions)`` (``Discrete``), or a float
            array of the ``Box``'s shape; another shape or dtype raises a one-line
            ``ValueError`` naming the env (a static check, free under ``jit``).
          params: the environment's params (``default_params`` when ``None``).

        Returns:
          ``(obs, state, reward, terminated, truncated, info)``: ``obs`` with the
          environment's observation shape, ``reward`` float32 ``[]``, ``terminated`` and
          ``truncated`` bool ``[]``, ``info`` a dict of (scalar unless documented) arrays
          holding ``final_obs`` (the observation shape: the observation the step reached,
          before auto-reset; ``step_env``'s own when it gives one).
          On episode end ``obs``/``state`` are of the next episode's first step (reset
          with a key split from ``key``); the other values describe the step that ended.

        Raises:
          ContractError: (a ``ValueError``, at trace time) one line naming ``step_env`` /
            ``reset_env`` when their observations differ in structure, shape or dtype,
            when ``reward`` is not a float scalar or ``terminated`` / ``truncated`` not
            bool scalars, or when ``info`` is not a dict.
        """
        params = self.default_params if params is None else params
        check_action(self.action_space(params), action, self.name)
        key_step, key_reset = jax.random.split(key)
        obs_st, state_st, reward, terminated, truncated, info = self.step_env(
            key_step, state, action, params
        )
        obs_re, state_re = self.reset_env(key_reset, params)
        reset_name, step_name = env_function_names(self)
        check_env_step(reset_name, step_name, obs_re, obs_st, reward, terminated, truncated)
        if not isinstance(info, dict):
            raise ContractError(f"{step_name} returns info as {type(info).__name__}; it must "
                                "be a dict of arrays ({} when there is nothing to report)")
        done = jnp.logical_or(terminated, truncated)
        state = jax.tree_util.tree_map(lambda r, s: jnp.where(done, r, s), state_re, state_st)
        obs = jax.tree_util.tree_map(lambda r, s: jnp.where(done, r, s), obs_re, obs_st)
        if "final_obs" not in info:  # what a truncated episode is bootstrapped from
            info = {**info, "final_obs": obs_st}
        return obs, state, reward, terminated, truncated, info

    def transition(
        self,
        key: PRNGKey,
        state: Any,
        action: Array,
        params: EnvParams | None = None,
    ) -> tuple[Array, Any, Array, Array, Array, dict[str, Array]]:
        """One step *without* auto-reset, in :meth:`step`'s six-value form: what code that
        expands states itself (beam search, best-of-n) calls on any environment.

        For a native environment this is :meth:`step_env` (``key`` used as given);
        adapters whose ``step_env`` keeps another library's form (``GymnaxEnv``: gymnax's
        five values) override it.

        Returns:
          ``(obs, state, reward, terminated, truncated, info)``, shapes as in :meth:`step`;
          ``obs``/``state`` are those the step reached, never a reset's.
        """
        params = self.default_params if params is None else params
        return self.step_env(key, state, action, params)

    def reset_env(self, key: PRNGKey, params: Any) -> tuple[Array, Any]:
        """Environment-specific reset (no auto-reset logic): ``key [] -> (obs, state)``.

        Shapes as in :meth:`reset`.
        """
        raise NotImplementedError

    def step_env(
        self, key: PRNGKey, state: Any, action: Array, params: Any
    ) -> tuple[Array, Any, Array, Array, Array, dict[str, Array]]:
        """Environment-specific step (no auto-reset logic).

        Shapes as in :meth:`step`: ``action`` int32 ``[]`` -> ``(obs, state, reward [],
        terminated [], truncated [], info)``.
        """
        raise NotImplementedError
