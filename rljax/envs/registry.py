"""Environments by name: a gymnax id or ``brax:NAME``, ready for a vectorised trainer.

``make_env("Breakout-MinAtar")`` is ``from_gymnax("Breakout-MinAtar")`` with its
observations ``[10, 10, 4]`` flattened to ``[400]`` (``FlattenObservation``), so an MLP
policy sees ``[D]``; ``make_env("brax:inverted_pendulum")`` is ``from_brax("inverted_pendulum")``
(needs Brax). Optionally the observations are normalised (``NormalizeObservation``) and the
rewards scaled (``NormalizeReward``), both with running statistics merged over the named
batch axis :data:`~rljax.envs.batched.ENV_AXIS` (the ``N`` envs of one seed, as the trainers
step them). An unknown name is refused in one line listing its close matches.

The ``ppo`` study (``rljax run ppo --env NAME``) builds its environments here; the
trainers that take an env by name share it.
"""

from __future__ import annotations

from typing import Any

from rljax.envs.batched import ENV_AXIS
from rljax.envs.spaces import Box, as_rljax_space

__all__ = ["BRAX_PREFIX", "is_brax", "raw_env", "env_kind", "env_flattened", "make_env"]

BRAX_PREFIX = "brax:"
"""The prefix of a Brax environment's name (``brax:inverted_pendulum``); any other name is
a gymnax id."""


def is_brax(name: str) -> bool:
    """Whether ``name`` names a Brax environment (``brax:NAME``); no arrays involved."""
    return isinstance(name, str) and name.startswith(BRAX_PREFIX)


def raw_env(name: str) -> Any:
    """The un-wrapped environment ``name`` names: ``from_brax(NAME)`` for ``brax:NAME``,
    else ``from_gymnax(name)``; its observations keep their own shape (``[D]``,
    ``[H, W, C]``, ...).

    Raises:
      ValueError: one line for an unknown name, listing its close matches (from
        :func:`~rljax.envs.from_gymnax` / :func:`~rljax.envs.from_brax`), or a Brax name
        when Brax support cannot be imported.
    """
    if is_brax(name):
        try:
            from rljax.envs.brax_adapter import from_brax
        except ImportError as err:  # pragma: no cover - depends on the installation
            raise ValueError(f"{name}: Brax environments need rljax.envs.brax_adapter and "
                             f"brax ({err})") from None
        return from_brax(name[len(BRAX_PREFIX):])
    from rljax.envs.gymnax_adapter import from_gymnax

    return from_gymnax(name)


def env_kind(name: str) -> str | None:
    """The kind of ``name``'s actions: ``"continuous"`` (a ``Box``, actions ``[A]``),
    ``"discrete"`` (anything else), or ``None`` when the name is unknown or the env cannot
    be built (:func:`make_env` then says why)."""
    try:
        env = raw_env(name)
        space = as_rljax_space(env.action_space(env.default_params))
    except Exception:  # noqa: BLE001 - any failure is reported by make_env
        return None
    return "continuous" if isinstance(space, Box) else "discrete"


def env_flattened(raw: Any) -> bool:
    """Whether :func:`make_env` flattens the observations of the un-wrapped env ``raw``:
    their shape has rank != 1 (e.g. Catch's ``[10, 5]``, MinAtar's ``[10, 10, C]``)."""
    return len(as_rljax_space(raw.observation_space(raw.default_params)).shape) != 1


def make_env(name: str, *, normalize_observations: bool = False,
             normalize_rewards: bool = False, gamma: float = 0.99) -> Any:
    """The environment ``name`` names, ready for a vectorised trainer.

    ``raw_env(name)`` (a gymnax id, or ``brax:NAME``), then:

    * observations whose shape is not ``[D]`` are flattened (``FlattenObservation``:
      ``[10, 10, 4]`` -> ``[400]``);
    * with ``normalize_observations``, ``NormalizeObservation`` (running mean and variance
      of the ``[D]`` observations, merged over ``axis_name=ENV_AXIS``);
    * with ``normalize_rewards``, ``NormalizeReward`` (rewards ``[]`` per env scaled by the
      running standard deviation of the ``gamma``-discounted return, same axis; the raw
      reward stays in ``info["raw_reward"]``).

    Args:
      name: a gymnax id (``Pendulum-v1``, ``Breakout-MinAtar``, ...) or ``brax:NAME``.
      normalize_observations: wrap in ``NormalizeObservation``.
      normalize_rewards: wrap in ``NormalizeReward``.
      gamma: the discount of ``NormalizeReward``'s return (unused otherwise).

    Raises:
      ValueError: one line naming the env: an unknown name (close matches listed), or
        observations that are not a ``Box`` (what is allowed is named).
    """
    from rljax.envs.wrappers import FlattenObservation, NormalizeObservation, NormalizeReward

    env = raw_env(name)
    space = as_rljax_space(env.observation_space(env.default_params))
    if not isinstance(space, Box):
        raise ValueError(f"{name}: observation space {space!r} is not supported; make_env "
                         "takes Box observations (any shape: non-[D] ones are flattened)")
    if len(space.shape) != 1:
        env = FlattenObservation(env)
    if normalize_observations:
        env = NormalizeObservation(env, axis_name=ENV_AXIS)
    if normalize_rewards:
        env = NormalizeReward(env, gamma=float(gamma), axis_name=ENV_AXIS)
    return env
