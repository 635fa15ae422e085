"""Run a Jumanji environment (Bonnet et al., 2024, https://github.com/instadeepai/jumanji)
through rljax.

Jumanji's API is dm_env-shaped: ``reset(key) -> (state, timestep)`` and ``step(state,
action) -> (state, timestep)``, where ``timestep`` carries ``step_type`` (FIRST / MID /
LAST), ``reward``, ``discount`` and ``observation`` (often a structured ``NamedTuple``), and
no auto-reset. :class:`JumanjiEnv` maps it onto rljax's contract:

================================================  ==========================================
Jumanji ``env.step(state, a)[1]``                 rljax ``JumanjiEnv.step(key, state, a)``
================================================  ==========================================
``observation`` (structured)                      ``info["final_obs"]``: the arrays flattened
                                                  into one float32 vector (before reset)
``reward``                                        ``reward`` float32 ``[]``
``step_type == LAST`` and ``discount == 0``       ``terminated`` bool ``[]`` (``termination``)
``step_type == LAST`` and ``discount > 0``        ``truncated`` bool ``[]`` (``truncation``)
``extras``                                        ``info["extras"]``
================================================  ==========================================

**Observations.** The observation's arrays (by default every field of the observation
``NamedTuple`` in its field order; ``observation_fields`` picks some) are each raveled, cast
to float32 and concatenated: for ``Snake-v1`` (12 x 12 grid) that is ``grid [12, 12, 5]``
(720) + ``step_count []`` (1) + ``action_mask [4]`` (4) = ``[725]``; for ``Game2048-v1`` it
is ``board [4, 4]`` (16, the tiles' exponents) + ``action_mask [4]`` = ``[20]``.
:attr:`JumanjiEnv.observation_layout` lists the pieces. Actions: ``Discrete(num_values)``
of Jumanji's ``DiscreteArray`` action spec (other action specs are refused).

**Episode ends.** Jumanji signals a termination with ``termination(...)`` (``discount =
0``) and a time-limit truncation with ``truncation(...)`` (``discount = 1``); the adapter
reads exactly that. Some Jumanji envs report their own time limit as a termination --
``Snake-v1`` ends with ``termination`` when ``step_count >= time_limit`` (4000) -- and the
adapter cannot tell those apart; pass ``episode_length`` below the env's own limit to get a
proper truncation: rljax then truncates a step when the episode's ``time`` reaches
``episode_length`` and Jumanji did not terminate it (never both flags at once).

**Reset semantics** are rljax's (and gymnax's): ``key_step, key_reset =
jax.random.split(key)`` and a finished episode continues from ``reset(key_reset)``, a fresh
random start; Jumanji's ``step`` draws its own randomness from the key in its state, so
``key_step`` is unused. (Jumanji's own ``AutoResetWrapper`` resets from the key carried in
the state instead.) Keys reach Jumanji as raw ``uint32[2]`` (``jax.random.key_data``), the
form Jumanji documents (``jax.random.PRNGKey``).

jumanji is an optional dependency (``pip install rljax[dev]`` or ``jumanji``); this module
does not import it -- only :func:`from_jumanji` does.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from rljax.envs.base import Environment
from rljax.envs.spaces import Box, Discrete
from rljax.types import Array, PRNGKey

_LAST = 2  # jumanji.types.StepType.LAST


@struct.dataclass
class JumanjiParams:
    """Episode settings: one static Python int scalar (or ``None``), no array leaves.

    Attributes:
      episode_length: rljax's time limit in steps (``>= 1``), or ``None`` for Jumanji's own
        episode ends only.
    """

    episode_length: int | None = struct.field(pytree_node=False, default=None)


@struct.dataclass
class JumanjiState:
    """Jumanji's state pytree and ``time``: steps taken in the episode (int32 ``[]``)."""

    jumanji_state: Any
    time: Array


def _check_params(params: JumanjiParams) -> None:
    value = params.episode_length
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < 1):
        raise ValueError(f"episode_length: must be None or an integer >= 1, got {value!r}")


def _raw_key(key: PRNGKey) -> Array:
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key)
    return key


class JumanjiEnv(Environment):
    """A Jumanji environment behind rljax's :class:`~rljax.envs.Environment` contract.

    ``reset(key, params) -> (obs [D], state)``;
    ``step(key, state, action [], params) -> (obs [D], state, reward [], terminated [],
    truncated [], info)`` with ``info["final_obs"]`` ``[D]`` (the observation the step
    reached, before auto-reset) and ``info["extras"]`` (Jumanji's ``timestep.extras``).
    ``D`` is the flattened observation's size (:attr:`observation_layout`). One environment
    per call; batch with ``jax.vmap``. See the module docstring for the mapping.

    Args:
      env: a Jumanji environment (``jumanji.make(id)``) with a ``DiscreteArray`` action
        spec.
      episode_length: rljax's time limit in steps, or ``None`` (Jumanji's own ends only).
      observation_fields: names of the observation's fields to flatten, in order (default:
        all of them).
      name: the environment's name (default: Jumanji's class name).

    Raises:
      ValueError: a non-discrete action spec, an unknown observation field, or a bad
        ``episode_length``.
      TypeError: ``env`` has no ``reset``/``step``.
    """

    def __init__(self, env: Any, *, episode_length: int | None = None,
                 observation_fields: Sequence[str] | None = None, name: str | None = None):
        for method in ("reset", "step"):
            if not callable(getattr(env, method, None)):
                raise TypeError(f"env: expected a Jumanji environment, got {type(env).__name__}")
        self.jumanji_env = env
        self._name = type(env).__name__ if name is None else str(name)
        self.params = JumanjiParams(episode_length=episode_length)
        _check_params(self.params)
        spec = env.action_spec
        num_values = getattr(spec, "num_values", None)
        if num_values is None or tuple(getattr(spec, "shape", ())) != ():
            raise ValueError(f"{self._name}: rljax adapts Jumanji envs with a DiscreteArray "
                             f"action spec, got {type(spec).__name__}")
        self._num_actions = int(num_values)
        self.observation_fields = None if observation_fields is None else tuple(
            observation_fields)
        _, timestep = jax.eval_shape(env.reset, jax.ShapeDtypeStruct((2,), jnp.uint32))
        pieces = self._pieces(timestep.observation)
        self.observation_layout: tuple[tuple[str, tuple[int, ...]], ...] = tuple(
            (field, tuple(x.shape)) for field, x in pieces)
        self.observation_size = sum(math.prod(shape) for _, shape in self.observation_layout)

    def __repr__(self) -> str:
        return f"JumanjiEnv({self.name})"

    @property
    def name(self) -> str:
        """The environment's name (e.g. ``"Snake-v1"``)."""
        return self._name

    @property
    def default_params(self) -> JumanjiParams:
        """The ``episode_length`` given at construction."""
        return self.params

    def action_space(self, params: Any = None) -> Discrete:
        """``Discrete(num_values)`` of Jumanji's action spec."""
        return Discrete(self._num_actions)

    def observation_space(self, params: Any = None) -> Box:
        """Unbounded ``Box(-inf, inf, (D,))`` float32 (the flattened observation)."""
        return Box(-jnp.inf, jnp.inf, (self.observation_size,))

    def _pieces(self, observation: Any) -> list[tuple[str, Any]]:
        """``(field name, array)`` of the observation, in flattening order."""
        if hasattr(observation, "shape"):  # a single array
            fields = [("observation", observation)]
        elif hasattr(observation, "_fields"):
            fields = [(f, getattr(observation, f)) for f in observation._fields]
        elif isinstance(observation, dict):
            fields = list(observation.items())
        else:
            raise ValueError(f"{self._name}: cannot flatten an observation of type "
                             f"{type(observation).__name__}")
        if self.observation_fields is not None:
            known = dict(fields)
            unknown = [f for f in self.observation_fields if f not in known]
            if unknown:
                raise ValueError(f"observation_fields: {self._name} has no field "
                                 f"{unknown[0]!r}; fields: {', '.join(known)}")
            fields = [(f, known[f]) for f in self.observation_fields]
        pieces = []
        for field, value in fields:
            for path, leaf in jax.tree_util.tree_flatten_with_path(value)[0]:
                pieces.append((field + jax.tree_util.keystr(path), leaf))
        return pieces

    def flatten_observation(self, observation: Any) -> Array:
        """Jumanji's observation -> float32 ``[D]`` (the layout of
        :attr:`observation_layout`)."""
        return jnp.concatenate([jnp.ravel(jnp.asarray(x)).astype(jnp.float32)
                                for _, x in self._pieces(observation)])

    def reset_env(self, key: PRNGKey, params: JumanjiParams) -> tuple[Array, JumanjiState]:
        """Jumanji's ``reset(key_data(key))``: ``(obs [D] float32, state)``, ``time = 0``."""
        _check_params(params)
        state, timestep = self.jumanji_env.reset(_raw_key(key))
        return (self.flatten_observation(timestep.observation),
                JumanjiState(jumanji_state=state, time=jnp.int32(0)))

    def step_env(
        self, key: PRNGKey, state: JumanjiState, action: Array, params: JumanjiParams
    ) -> tuple[Array, JumanjiState, Array, Array, Array, dict[str, Any]]:
        """One step *without* auto-reset (what :meth:`step` runs before resetting).

        Args:
          key: typed key ``[]`` (unused: Jumanji's randomness lives in its state).
          state: :class:`JumanjiState`.
          action: int ``[]`` in ``[0, num_actions)``.
          params: :class:`JumanjiParams`.

        Returns:
          ``(obs [D], state, reward [], terminated [], truncated [], info)`` with
          ``info = {"final_obs": obs, "extras": timestep.extras}``.
        """
        del key
        _check_params(params)
        jumanji_state, timestep = self.jumanji_env.step(state.jumanji_state,
                                                        jnp.asarray(action, jnp.int32))
        obs = self.flatten_observation(timestep.observation)
        time = state.time + 1
        last = timestep.step_type == _LAST
        terminated = jnp.logical_and(last, timestep.discount == 0)
        truncated = jnp.logical_and(last, timestep.discount != 0)
        if params.episode_length is not None:
            truncated = jnp.logical_or(truncated, time >= params.episode_length)
        truncated = jnp.logical_and(truncated, jnp.logical_not(terminated))
        info = {"final_obs": obs, "extras": dict(timestep.extras)}
        return (obs, JumanjiState(jumanji_state=jumanji_state, time=time),
                jnp.asarray(timestep.reward, jnp.float32), terminated, truncated, info)


def from_jumanji(name: str, *, episode_length: int | None = None,
                 observation_fields: Sequence[str] | None = None,
                 **kwargs: Any) -> JumanjiEnv:
    """A :class:`JumanjiEnv` from a Jumanji environment id.

    Args:
      name: a registered Jumanji id, e.g. ``"Snake-v1"``, ``"Game2048-v1"``.
      episode_length: rljax's time limit in steps (``None``: Jumanji's own ends only).
      observation_fields: observation fields to flatten (default all).
      **kwargs: passed to ``jumanji.make`` (the env's constructor, e.g. ``num_rows``,
        ``time_limit`` for Snake).

    Returns:
      The wrapped environment: observations float32 ``[D]``, actions ``Discrete(n)``.

    Raises:
      ValueError: unknown id (listing close matches), bad ``episode_length``, or an env
        whose action spec is not a ``DiscreteArray``.
    """
    _check_params(JumanjiParams(episode_length=episode_length))
    try:
        import jumanji
    except ImportError as error:  # pragma: no cover - depends on the installation
        raise ImportError(f"from_jumanji({name!r}) needs jumanji: pip install jumanji") from error
    names = sorted(jumanji.registered_environments())
    if name not in names:
        close = difflib.get_close_matches(str(name), names, n=3)
        hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(names)}"
        raise ValueError(f"from_jumanji: unknown Jumanji environment {name!r}; {hint}")
    env = jumanji.make(name, **kwargs)
    return JumanjiEnv(env, episode_length=episode_length, observation_fields=observation_fields,
                      name=name)
