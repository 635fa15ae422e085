"""Environment wrappers: an :class:`~rljax.envs.Environment` holding an ``Environment``.

A wrapper's state is a ``flax.struct.dataclass`` that nests the inner state (field
``env_state``) next to the wrapper's own leaves, so ``vmap``, checkpoints and sweeps see
one pytree. Every wrapper calls the *inner* environment's auto-resetting ``step`` (so
running statistics survive episode boundaries), forwards ``default_params``, ``name``,
the spaces (transformed where it changes them) and unknown attributes to the inner
environment, and is jit- and vmap-able (no Python branch on traced values).

=========================  ==============================================================
:class:`Wrapper`           base class: forwarding, :attr:`~Wrapper.unwrapped`
:class:`TimeLimit`         truncates episodes after ``max_steps`` steps (and resets)
:class:`FlattenObservation`  ``obs -> obs.reshape(-1)`` (``[10, 5] -> [50]``)
:class:`ClipAction`        clips a ``Box`` action into ``[low, high]`` before the step
:class:`LogWrapper`        episode returns and lengths in ``info`` (with a validity flag)
:class:`NormalizeObservation`  running mean / variance of observations, merged over a batch
:class:`NormalizeReward`   rewards divided by the running std of the discounted return
=========================  ==============================================================

Recommended order, innermost first::

    env = TimeLimit(env, max_steps)          # resets the inner env itself: innermost
    env = FlattenObservation(env)            # shape changes next
    env = ClipAction(env)                    # (continuous actions only)
    env = LogWrapper(env)                    # inside normalisation: logs true returns
    env = NormalizeObservation(env, axis_name=ENV_AXIS)
    env = NormalizeReward(env, gamma, axis_name=ENV_AXIS)

:class:`TimeLimit` refuses to wrap :class:`LogWrapper` / :class:`NormalizeObservation` /
:class:`NormalizeReward` (its own reset would clear their statistics). A
:class:`LogWrapper` placed *outside* :class:`NormalizeReward` logs normalised rewards;
the raw reward is always in ``info["raw_reward"]``.

With ``axis_name`` set, the normalising wrappers must be reset and stepped under
``jax.vmap(..., axis_name=axis_name)`` (the PPO trainer vmaps its ``N`` environments with
``axis_name=ENV_AXIS``): the batch's moments are merged with ``jax.lax.psum`` so every
environment of the batch holds the same statistics, those of all observations (returns)
of all environments seen so far. Without ``axis_name`` each environment copy keeps its own.

The wrappers follow gymnasium's (``gymnasium.wrappers``) and PureJaxRL's
(Lu et al., 2022, https://github.com/luchris429/purejaxrl, ``wrappers.py``) semantics
where those agree; where they differ the class docstring says which one is followed.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rljax.envs.base import Environment
from rljax.envs.batched import ENV_AXIS
from rljax.envs.spaces import Box, Discrete, Space, as_rljax_space
from rljax.types import Array, PRNGKey

__all__ = ["ENV_AXIS"]  # re-exported: rljax.envs.batched defines it
_INT32_MAX = np.iinfo(np.int32).max


class Wrapper(Environment):
    """Base class of wrappers: an environment that holds an environment (``self.env``).

    Forwards :meth:`reset`, :meth:`step` (unchanged shapes: the inner environment's
    observation, scalar ``[]`` reward / terminated / truncated), :attr:`default_params`,
    :attr:`name`, the spaces (passed through
    :func:`~rljax.envs.spaces.as_rljax_space`, so a gymnax space becomes an rljax one) and
    every attribute it does not define itself (``wrapper.max_steps_in_episode`` reads the
    inner environment's). Subclasses override what they change.

    Args:
      env: the environment to wrap (an rljax :class:`~rljax.envs.Environment`, possibly
        itself a wrapper; adapt a gymnax environment with :func:`rljax.envs.from_gymnax`).

    Raises:
      TypeError: ``env`` is not an rljax ``Environment``.
    """

    _has_running_statistics = False  # whether reset() clears statistics a run accumulates

    def __init__(self, env: Environment):
        if not isinstance(env, Environment):
            raise TypeError(f"{type(self).__name__}: env must be an rljax Environment (adapt "
                            f"gymnax envs with rljax.envs.from_gymnax), got {type(env).__name__}")
        self.env = env

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails. ``env`` itself and dunders are never
        # forwarded, so copy / pickle (which look attributes up on an instance whose
        # __dict__ is still empty) get an AttributeError instead of infinite recursion.
        if name == "env" or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        env = self.__dict__.get("env")
        if env is None:
            raise AttributeError(name)
        return getattr(env, name)

    def __repr__(self) -> str:
        inner = repr(self.env) if isinstance(self.env, Wrapper) else self.env.name
        return f"{type(self).__name__}({inner})"

    @property
    def unwrapped(self) -> Environment:
        """The innermost environment (the first one that is not a :class:`Wrapper`)."""
        env = self.env
        while isinstance(env, Wrapper):
            env = env.env
        return env

    @property
    def name(self) -> str:
        """The inner environment's name (e.g. ``"CartPole"``)."""
        return self.env.name

    @property
    def default_params(self) -> Any:
        """The inner environment's default parameters."""
        return self.env.default_params

    def action_space(self, params: Any = None) -> Space:
        """The inner environment's action space as an rljax space (``Discrete``: scalar
        actions ``[]``; ``Box``: actions of its ``shape``, e.g. ``[A]``)."""
        return as_rljax_space(self.env.action_space(params))

    def observation_space(self, params: Any = None) -> Space:
        """The inner environment's observation space as an rljax space (observations of
        its ``shape``, e.g. ``[4]``)."""
        return as_rljax_space(self.env.observation_space(params))

    @property
    def observation_shape(self) -> tuple[int, ...]:
        """Shape of one observation, from :meth:`observation_space` (e.g. ``(4,)``)."""
        return tuple(self.observation_space().shape)

    def reset(self, key: PRNGKey, params: Any = None) -> tuple[Array, Any]:
        """The inner environment's reset: ``key []`` (typed) ``-> (obs, state)``, ``obs`` of
        :attr:`observation_shape`."""
        return self.env.reset(key, self._params(params))

    def step(
        self, key: PRNGKey, state: Any, action: Array, params: Any = None
    ) -> tuple[Array, Any, Array, Array, Array, dict[str, Array]]:
        """The inner environment's auto-resetting step: ``(obs, state, reward [],
        terminated [], truncated [], info)``; shapes as in :meth:`Environment.step`."""
        return self.env.step(key, state, action, self._params(params))

    def reset_env(self, key: PRNGKey, params: Any) -> tuple[Array, Any]:
        """Not available: wrappers wrap the inner environment's auto-resetting
        :meth:`reset` / :meth:`step` (scalar ``[]`` key; raises ``NotImplementedError``)."""
        raise NotImplementedError(f"{self!r}: wrappers have no reset_env/step_env; call "
                                  "reset/step, or use .unwrapped")

    def step_env(self, key: PRNGKey, state: Any, action: Array,
                 params: Any) -> tuple[Array, Any, Array, Array, Array, dict[str, Array]]:
        """Not available: wrappers wrap the inner environment's auto-resetting
        :meth:`step` (scalar ``[]`` key; raises ``NotImplementedError``)."""
        raise NotImplementedError(f"{self!r}: wrappers have no reset_env/step_env; call "
                                  "reset/step, or use .unwrapped")

    def _params(self, params: Any) -> Any:
        return self.default_params if params is None else params


def _where(condition: Array, if_true: Any, if_false: Any) -> Any:
    """``jnp.where(condition, a, b)`` per leaf of two pytrees of the same structure."""
    return jax.tree_util.tree_map(lambda a, b: jnp.where(condition, a, b), if_true, if_false)


# ------------------------------------------------------------------------------ TimeLimit


@struct.dataclass
class TimeLimitState:
    """State of :class:`TimeLimit`: the inner state and ``time``, the steps taken in the
    current episode (int32 scalar ``[]``, 0 after a reset)."""

    env_state: Any
    time: Array


class TimeLimit(Wrapper):
    """Truncate every episode after ``max_steps`` steps (gymnasium's ``TimeLimit``).

    After the ``max_steps``-th step of an episode, ``truncated`` is ``True`` and, unless
    the inner environment ended the episode on that same step (and so auto-reset itself),
    the wrapper resets the inner environment with a key split from the step's key:
    ``obs``/``state`` are the next episode's and ``info["final_obs"]`` is the observation
    the step reached before that reset (the one a truncated episode bootstraps from).

    Semantics, as gymnasium's ``TimeLimit``:

    * ``truncated = inner truncated or time >= max_steps``; ``terminated`` is the inner
      environment's. A step that both terminates and reaches the limit reports
      ``terminated=True`` **and** ``truncated=True``; a termination wins (it is not
      bootstrapped, as :func:`rljax.advantages.generalized_advantage_estimation` treats it).
    * ``time`` counts the steps of the current episode and returns to 0 whenever the
      episode ends (the limit, or the inner environment's own termination / truncation).
    * ``info["final_obs"]``: the pre-reset observation at the limit; otherwise the inner
      environment's ``info["final_obs"]`` when it provides one, else the returned ``obs``
      (then on a step where the inner environment ended the episode itself it is already
      the next episode's first observation: only TimeLimit's own cut is exact).

    The step key is split into the inner step's key and the reset key, so a wrapped
    trajectory differs from the unwrapped one drawn with the same keys.

    Shapes: one environment's (``reward``, ``terminated``, ``truncated`` scalars ``[]``,
    ``obs`` and ``info["final_obs"]`` of the inner observation shape); batch with
    ``jax.vmap``.

    Args:
      env: the environment to limit. Place TimeLimit innermost: it refuses an ``env`` that
        contains :class:`LogWrapper` / :class:`NormalizeObservation` /
        :class:`NormalizeReward`, whose statistics its reset would clear.
      max_steps: steps per episode (integer >= 1).

    Raises:
      ValueError: ``max_steps < 1`` (or not an integer), or a statistics wrapper inside.
    """

    def __init__(self, env: Environment, max_steps: int):
        super().__init__(env)
        if isinstance(max_steps, bool) or not isinstance(max_steps, int | np.integer) \
                or max_steps < 1:
            raise ValueError(f"TimeLimit({env.name}): max_steps must be an integer >= 1, "
                             f"got {max_steps!r}")
        inner = env
        while isinstance(inner, Wrapper):
            if inner._has_running_statistics:
                raise ValueError(f"TimeLimit({env!r}): place TimeLimit inside "
                                 f"{type(inner).__name__} (its reset would clear the "
                                 "statistics); wrap the environment first")
            inner = inner.env
        self.max_steps = int(max_steps)

    def reset(self, key: PRNGKey, params: Any = None) -> tuple[Array, TimeLimitState]:
        """Reset the inner environment (``key []`` typed) and the step counter:
        ``(obs, TimeLimitState)`` with ``time = 0`` (int32 ``[]``)."""
        obs, env_state = self.env.reset(key, self._params(params))
        return obs, TimeLimitState(env_state=env_state, time=jnp.int32(0))

    def step(
        self, key: PRNGKey, state: TimeLimitState, action: Array, params: Any = None
    ) -> tuple[Array, TimeLimitState, Array, Array, Array, dict[str, Array]]:
        """Step the inner environment and cut the episode at ``max_steps`` (class
        docstring): ``(obs, state, reward [], terminated [], truncated [], info)`` with
        ``info["final_obs"]`` of the observation shape."""
        params = self._params(params)
        step_key, reset_key = jax.random.split(key)
        obs, env_state, reward, terminated, truncated, info = self.env.step(
            step_key, state.env_state, action, params)
        inner_done = jnp.logical_or(terminated, truncated)
        time = state.time + 1
        at_limit = time >= self.max_steps
        cut = jnp.logical_and(at_limit, jnp.logical_not(inner_done))  # we must reset
        obs_reset, env_state_reset = self.env.reset(reset_key, params)
        # Before the cut's reset: on a cut step the inner env did not end the episode, so
        # its own final_obs (when it has one) is this same pre-reset obs.
        info = {**info, "final_obs": info.get("final_obs", obs)}
        obs = _where(cut, obs_reset, obs)
        env_state = _where(cut, env_state_reset, env_state)
        truncated = jnp.logical_or(truncated, at_limit)
        time = jnp.where(jnp.logical_or(inner_done, at_limit), 0, time).astype(jnp.int32)
        return (obs, TimeLimitState(env_state=env_state, time=time), reward, terminated,
                truncated, info)


# ---------------------------------------------------------------------- FlattenObservation


class FlattenObservation(Wrapper):
    """Flatten each observation: ``obs [d1, ..., dk] -> obs.reshape(-1) [d1 * ... * dk]``.

    ``info["final_obs"]`` is flattened too when present. gymnax's ``Catch`` (``[10, 5]``)
    becomes ``[50]``, MinAtar's ``[10, 10, C]`` becomes ``[100 C]``, a scalar ``[]``
    becomes ``[1]``. The observation space becomes the flattened ``Box`` (a ``Discrete(n)``
    observation space becomes ``Box(0, n - 1, (1,))`` of its integer dtype). The state is
    the inner environment's, unchanged.

    Args:
      env: an environment whose observations are one array.

    Raises:
      ValueError: the observations are not one array (a pytree / a ``Dict`` space).
    """

    def __init__(self, env: Environment):
        super().__init__(env)
        self.observation_space()  # refuse non-array observations now, not under jit

    def observation_space(self, params: Any = None) -> Box:
        """The inner ``Box`` flattened: shape ``(prod(shape),)``, bounds reshaped."""
        try:
            space = as_rljax_space(self.env.observation_space(params))
        except ValueError as error:
            raise ValueError(f"FlattenObservation({self.env.name}): observations must be one "
                             f"array (a Box or Discrete space): {error}") from None
        if isinstance(space, Discrete):
            return Box(0, space.n - 1, (1,), dtype=space.dtype)
        return Box(space.low.reshape(-1), space.high.reshape(-1), (int(np.prod(space.shape)),),
                   dtype=space.dtype)

    def _flatten(self, obs: Any) -> Array:
        if not hasattr(obs, "reshape"):
            raise ValueError(f"FlattenObservation({self.env.name}): observations must be one "
                             f"array, got {type(obs).__name__}")
        return jnp.reshape(obs, (-1,))

    def reset(self, key: PRNGKey, params: Any = None) -> tuple[Array, Any]:
        """Reset the inner environment (``key []``); ``obs`` flattened to ``[D]``."""
        obs, state = self.env.reset(key, self._params(params))
        return self._flatten(obs), state

    def step(
        self, key: PRNGKey, state: Any, action: Array, params: Any = None
    ) -> tuple[Array, Any, Array, Array, Array, dict[str, Array]]:
        """Step the inner environment; ``obs`` (and ``info["final_obs"]``) flattened to
        ``[D]``, ``reward``/``terminated``/``truncated`` scalars ``[]`` unchanged."""
        obs, state, reward, terminated, truncated, info = self.env.step(
            key, state, action, self._params(params))
        if "final_obs" in info:
            info = {**info, "final_obs": self._flatten(info["final_obs"])}
        return self._flatten(obs), state, reward, terminated, truncated, info


# ------------------------------------------------------------------------------ ClipAction


def _box_bounds(space: Any) -> tuple[Array, Array]:
    """``(low, high)`` of a Box, rljax's (numpy) or another library's (may be traced)."""
    return jnp.asarray(space.low), jnp.asarray(space.high)


class ClipAction(Wrapper):
    """Clip a continuous action into the action space: ``a -> clip(a, low, high)``.

    The inner environment receives the clipped action (shape ``[A]``, the ``Box``'s
    shape); everything else is unchanged, the state included. The action space stays the
    inner ``Box`` (as PureJaxRL's ``ClipAction``; gymnasium's reports an unbounded box), so
    a policy head still sees the true bounds. Bounds are read from
    ``env.action_space(params)`` at every step, so they may depend on (even traced)
    parameters, as gymnax's Pendulum's ``max_torque`` does.

    Args:
      env: an environment with a ``Box`` action space.

    Raises:
      ValueError: the action space is not a ``Box`` (e.g. ``Discrete``).
    """

    def __init__(self, env: Environment):
        super().__init__(env)
        space = as_rljax_space(env.action_space(env.default_params))
        if not isinstance(space, Box):
            raise ValueError(f"ClipAction({env.name}): needs a Box action space, got {space!r}")

    def step(
        self, key: PRNGKey, state: Any, action: Array, params: Any = None
    ) -> tuple[Array, Any, Array, Array, Array, dict[str, Array]]:
        """Step the inner environment with ``clip(action [A], low, high)``; outputs as the
        inner step's (``reward`` etc. scalars ``[]``)."""
        params = self._params(params)
        low, high = _box_bounds(self.env.action_space(params))
        return self.env.step(key, state, jnp.clip(action, low, high), params)


# ------------------------------------------------------------------------------ LogWrapper


@struct.dataclass
class LogState:
    """State of :class:`LogWrapper` (scalars ``[]`` for one environment):

    Attributes:
      env_state: the inner environment's state.
      episode_return: float32 ``[]``, reward summed over the running episode so far.
      episode_length: int32 ``[]``, steps of the running episode so far.
      returned_episode_return: float32 ``[]``, the return of the last finished episode
        (0 while none has finished; read it only where ``returned_episode_valid``).
      returned_episode_length: int32 ``[]``, the length of the last finished episode.
      returned_episode_valid: bool ``[]``, whether an episode has finished since reset.
    """

    env_state: Any
    episode_return: Array
    episode_length: Array
    returned_episode_return: Array
    returned_episode_length: Array
    returned_episode_valid: Array


class LogWrapper(Wrapper):
    """Episode returns and lengths, recorded when an episode ends (PureJaxRL's
    ``LogWrapper`` plus a validity flag).

    Per step, with ``done = terminated or truncated``:

        R <- R + reward;  L <- L + 1
        if done: (returned_R, returned_L, valid) <- (R, L, True);  R, L <- 0, 0

    (with ``jnp.where``, no branch). ``info`` keeps the inner keys (e.g. ``final_obs``)
    and gains, all scalars ``[]``:

    * ``returned_episode``: bool, this step ended an episode;
    * ``returned_episode_returns``: float32, the return of the last finished episode;
    * ``returned_episode_lengths``: int32, its length in steps;
    * ``returned_episode_valid``: bool, at least one episode has finished since
      :meth:`reset` -- before that the two values above are placeholders (0), not a
      return of 0.

    The logged rewards are those this wrapper receives: place it *inside*
    :class:`NormalizeReward` to log true returns (outside, it logs normalised rewards; the
    raw reward is then ``info["raw_reward"]``). Obs, rewards and flags pass through.

    Args:
      env: the environment to log.
    """

    _has_running_statistics = True

    def reset(self, key: PRNGKey, params: Any = None) -> tuple[Array, LogState]:
        """Reset the inner environment (``key []``) and the episode statistics:
        ``(obs, LogState)`` with scalar ``[]`` zeros and ``returned_episode_valid=False``."""
        obs, env_state = self.env.reset(key, self._params(params))
        state = LogState(env_state=env_state, episode_return=jnp.float32(0.0),
                         episode_length=jnp.int32(0), returned_episode_return=jnp.float32(0.0),
                         returned_episode_length=jnp.int32(0),
                         returned_episode_valid=jnp.bool_(False))
        return obs, state

    def step(
        self, key: PRNGKey, state: LogState, action: Array, params: Any = None
    ) -> tuple[Array, LogState, Array, Array, Array, dict[str, Array]]:
        """Step the inner environment and update the episode statistics (class docstring):
        ``(obs, state, reward [], terminated [], truncated [], info)``, the four
        ``returned_episode*`` entries of ``info`` scalars ``[]``."""
        obs, env_state, reward, terminated, truncated, info = self.env.step(
            key, state.env_state, action, self._params(params))
        done = jnp.logical_or(terminated, truncated)
        episode_return = state.episode_return + jnp.asarray(reward, jnp.float32)
        episode_length = state.episode_length + 1
        state = LogState(
            env_state=env_state,
            episode_return=jnp.where(done, 0.0, episode_return).astype(jnp.float32),
            episode_length=jnp.where(done, 0, episode_length).astype(jnp.int32),
            returned_episode_return=jnp.where(
                done, episode_return, state.returned_episode_return).astype(jnp.float32),
            returned_episode_length=jnp.where(
                done, episode_length, state.returned_episode_length).astype(jnp.int32),
            returned_episode_valid=jnp.logical_or(state.returned_episode_valid, done),
        )
        info = {
            **info,
            "returned_episode": done,
            "returned_episode_returns": state.returned_episode_return,
            "returned_episode_lengths": state.returned_episode_length,
            "returned_episode_valid": state.returned_episode_valid,
        }
        return obs, state, reward, terminated, truncated, info


# ------------------------------------------------------------------ running mean / variance


@struct.dataclass
class RunningMoments:
    """Running mean and (population) variance of a stream of arrays of feature shape
    ``F`` (e.g. ``[4]`` for CartPole observations, ``[]`` for returns).

    Attributes:
      mean: float32 ``F``, the mean of every value seen.
      var: float32 ``F``, their population variance (``np.var``, ``ddof=0``).
      count: int32 ``[]``, how many values of shape ``F`` were seen (saturates at
        ``2**31 - 1``; beyond that new batches get a slightly too small weight).
    """

    mean: Array
    var: Array
    count: Array


def _init_moments(shape: tuple[int, ...]) -> RunningMoments:
    return RunningMoments(mean=jnp.zeros(shape, jnp.float32), var=jnp.ones(shape, jnp.float32),
                          count=jnp.int32(0))


def _axis_sum(x: Any, axis_name: Any, who: str) -> Any:
    try:
        return jax.lax.psum(x, axis_name)
    except NameError as error:
        raise ValueError(f"{who}: axis_name={axis_name!r} is not bound; reset/step this env "
                         f"under jax.vmap(..., axis_name={axis_name!r}), or pass "
                         "axis_name=None for per-env statistics") from error


def _update_moments(moments: RunningMoments, x: Array, axis_name: Any,
                    who: str) -> RunningMoments:
    """Add one value ``x`` (shape ``F``) per environment to ``moments``.

    With ``axis_name`` the batch is the ``n_b`` values along that (vmap) axis: its mean
    and ``M2`` are summed with ``jax.lax.psum`` (two passes: mean, then squared deviations)
    so every member of the batch computes the same result. The batch is merged with
    Chan, Golub & LeVeque (1979, "Updating formulae and a pairwise algorithm for computing
    sample variances"; "parallel algorithm" of Wikipedia's "Algorithms for calculating
    variance"), written with the variances ``var = M2 / n``:

        n     = n_a + n_b,   delta = mean_b - mean_a
        mean  = mean_a + delta n_b / n
        var   = (n_a / n) var_a + (n_b / n) var_b + (n_a / n)(n_b / n) delta^2
    """
    x = jnp.asarray(x, jnp.float32)
    if axis_name is None:
        batch_count = 1
        batch_mean, batch_var = x, jnp.zeros_like(x)
    else:
        batch_count = _axis_sum(1, axis_name, who)
        batch_mean = _axis_sum(x, axis_name, who) / batch_count
        batch_var = _axis_sum(jnp.square(x - batch_mean), axis_name, who) / batch_count
    added = jnp.minimum(jnp.int32(batch_count), _INT32_MAX - moments.count)
    count = moments.count + added
    total = count.astype(jnp.float32)
    weight_old = moments.count.astype(jnp.float32) / total
    weight_new = jnp.float32(batch_count) / total
    delta = batch_mean - moments.mean
    mean = moments.mean + weight_new * delta
    var = weight_old * moments.var + weight_new * batch_var \
        + weight_old * weight_new * jnp.square(delta)
    return RunningMoments(mean=mean, var=var, count=count)


def _check_axis_name(who: str, axis_name: Any) -> None:
    names = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    if axis_name is not None and not all(isinstance(n, str) for n in names):
        raise ValueError(f"{who}: axis_name must be None, a vmap axis name (str) or a tuple "
                         f"of them, got {axis_name!r}")


def _check_positive(who: str, **values: float) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float | np.floating) \
                or not value > 0:
            raise ValueError(f"{who}: {name} must be a number > 0, got {value!r}")


# -------------------------------------------------------------------- NormalizeObservation


@struct.dataclass
class NormalizeObservationState:
    """State of :class:`NormalizeObservation`: the inner state and the observation
    statistics (:class:`RunningMoments` of the observation shape, e.g. ``[4]``)."""

    env_state: Any
    obs_moments: RunningMoments


class NormalizeObservation(Wrapper):
    """Normalise observations by their running mean and variance.

    Each observation is ``clip((obs - mean) / sqrt(var + epsilon), -clip, clip)`` where
    ``mean`` and ``var`` (float32, the observation's shape ``F``: per feature, not per
    environment) are the statistics of every observation seen since :meth:`reset`, the
    current one included. They are updated with each observation :meth:`reset` and
    :meth:`step` return (after an auto-reset: the next episode's first observation), merged
    with Chan et al.'s parallel formula (see :class:`RunningMoments`);
    ``info["final_obs"]`` is normalised with the same statistics but not added to them
    (gymnasium's vector ``NormalizeObservation`` does the same).

    With ``axis_name``, :meth:`reset` and :meth:`step` must run under
    ``jax.vmap(..., axis_name=axis_name)`` over a batch of ``N`` environments: the
    batch's moments are combined with ``jax.lax.psum``, so every environment holds the
    same statistics, those of all ``N t`` observations of all environments seen after
    ``t`` calls. Without it, each environment copy keeps its own (``N = 1``).

    Args:
      env: an environment with float observations (one array).
      epsilon: added to the variance (> 0).
      clip: normalised observations are clipped to ``[-clip, clip]`` (> 0; ``inf``: none).
      axis_name: the vmap axis to merge statistics over (e.g. :data:`ENV_AXIS`), or
        ``None`` for per-environment statistics.

    Raises:
      ValueError: non-float (integer, bool) or non-array observations, ``epsilon`` or
        ``clip`` not > 0; at reset/step, an ``axis_name`` no ``vmap`` binds.
    """

    _has_running_statistics = True

    def __init__(self, env: Environment, epsilon: float = 1e-8, clip: float = 10.0,
                 axis_name: Any = None):
        super().__init__(env)
        who = f"NormalizeObservation({env.name})"
        _check_positive(who, epsilon=epsilon, clip=clip)
        _check_axis_name(who, axis_name)
        try:
            space = as_rljax_space(env.observation_space(env.default_params))
        except ValueError as error:
            raise ValueError(f"{who}: observations must be one float array: {error}") from None
        self._check_dtype(space.dtype, space)
        self.epsilon, self.clip, self.axis_name = float(epsilon), float(clip), axis_name

    def _check_dtype(self, dtype: Any, what: Any) -> None:
        if not jnp.issubdtype(dtype, jnp.floating):
            raise ValueError(f"NormalizeObservation({self.env.name}): observations must be "
                             f"floats, got {what!r} (one-hot or cast them first)")

    def observation_space(self, params: Any = None) -> Box:
        """``Box(-clip, clip, shape, float32)`` of the inner observation shape (e.g. ``[4]``)."""
        space = as_rljax_space(self.env.observation_space(params))
        return Box(-self.clip, self.clip, tuple(space.shape), dtype=jnp.float32)

    def _normalize(self, obs: Array, moments: RunningMoments) -> Array:
        scaled = (jnp.asarray(obs, jnp.float32) - moments.mean) / jnp.sqrt(
            moments.var + self.epsilon)
        return jnp.clip(scaled, -self.clip, self.clip)

    def _update(self, moments: RunningMoments, obs: Any) -> RunningMoments:
        if not hasattr(obs, "dtype"):
            raise ValueError(f"NormalizeObservation({self.env.name}): observations must be "
                             f"one float array, got {type(obs).__name__}")
        self._check_dtype(obs.dtype, f"dtype {obs.dtype}")
        return _update_moments(moments, obs, self.axis_name, repr(self))

    def reset(self, key: PRNGKey, params: Any = None) -> tuple[Array, NormalizeObservationState]:
        """Reset the inner environment (``key []``) and the statistics (then add the
        first observation): ``(obs float32 F, state)``, ``F`` the observation shape."""
        obs, env_state = self.env.reset(key, self._params(params))
        moments = self._update(_init_moments(jnp.shape(obs)), obs)
        return (self._normalize(obs, moments),
                NormalizeObservationState(env_state=env_state, obs_moments=moments))

    def step(
        self, key: PRNGKey, state: NormalizeObservationState, action: Array, params: Any = None
    ) -> tuple[Array, NormalizeObservationState, Array, Array, Array, dict[str, Array]]:
        """Step the inner environment, add the returned observation to the statistics and
        normalise it (and ``info["final_obs"]``): ``obs`` float32 of shape ``F``,
        ``reward``/``terminated``/``truncated`` scalars ``[]`` unchanged."""
        obs, env_state, reward, terminated, truncated, info = self.env.step(
            key, state.env_state, action, self._params(params))
        moments = self._update(state.obs_moments, obs)
        if "final_obs" in info:
            info = {**info, "final_obs": self._normalize(info["final_obs"], moments)}
        state = NormalizeObservationState(env_state=env_state, obs_moments=moments)
        return self._normalize(obs, moments), state, reward, terminated, truncated, info


# ------------------------------------------------------------------------- NormalizeReward


@struct.dataclass
class NormalizeRewardState:
    """State of :class:`NormalizeReward`: the inner state, ``discounted_return`` (float32
    ``[]``, this environment's running ``G``) and ``return_moments``
    (:class:`RunningMoments` of scalars ``[]``: the statistics of ``G``)."""

    env_state: Any
    discounted_return: Array
    return_moments: RunningMoments


class NormalizeReward(Wrapper):
    """Scale rewards by the running standard deviation of the discounted return
    (gym / CleanRL / PureJaxRL's ``NormalizeReward``; Engstrom et al., 2020, "Implementation
    Matters in Deep RL: A Case Study on PPO and TRPO", "reward scaling").

    Per environment, with ``done_prev`` = the previous step ended an episode (terminated
    *or* truncated; ``True`` at :meth:`reset`)::

        G_t   = gamma G_{t-1} (1 - done_prev) + r_t
        var   = running variance of every G_t seen (merged over the batch, as in
                :class:`NormalizeObservation`, when ``axis_name`` is given)
        r'_t  = clip(r_t / sqrt(var + epsilon), -clip, clip)

    So ``G`` accumulates the whole episode, its last reward included, and is zeroed at
    the start of the next: after a step with ``terminated`` or ``truncated`` and at
    :meth:`reset`. (gymnasium >= 1.0 and PureJaxRL zero it with the *current* step's
    ``done`` instead, dropping the episode's earlier rewards from its last ``G``;
    gym 0.21 / CleanRL's vector wrapper, followed here, zero it after the step.) The
    variance includes the current ``G_t`` (updated, then used); :meth:`reset` adds nothing.
    Only the reward is rescaled (the mean of ``G`` is not subtracted).

    ``info["raw_reward"]`` holds the reward before scaling (an inner ``NormalizeReward``'s
    value is kept, so it is always the environment's own). A :class:`LogWrapper` placed
    outside this wrapper logs normalised returns: place it inside to log true returns.

    Args:
      env: the environment (rewards float32 scalars ``[]``).
      gamma: discount of ``G``, in ``[0, 1]`` (use the agent's).
      epsilon: added to the variance (> 0).
      clip: scaled rewards are clipped to ``[-clip, clip]`` (> 0; ``inf``: none).
      axis_name: the vmap axis to merge statistics over (e.g. :data:`ENV_AXIS`), or
        ``None`` for per-environment statistics.

    Raises:
      ValueError: ``gamma`` outside ``[0, 1]``, ``epsilon`` or ``clip`` not > 0, a
        non-scalar reward; at step, an ``axis_name`` no ``vmap`` binds.
    """

    _has_running_statistics = True

    def __init__(self, env: Environment, gamma: float = 0.99, epsilon: float = 1e-8,
                 clip: float = 10.0, axis_name: Any = None):
        super().__init__(env)
        who = f"NormalizeReward({env.name})"
        if isinstance(gamma, bool) or not isinstance(gamma, int | float | np.floating) \
                or not 0.0 <= gamma <= 1.0:
            raise ValueError(f"{who}: gamma must be a number in [0, 1], got {gamma!r}")
        _check_positive(who, epsilon=epsilon, clip=clip)
        _check_axis_name(who, axis_name)
        self.gamma, self.epsilon, self.clip = float(gamma), float(epsilon), float(clip)
        self.axis_name = axis_name

    def reset(self, key: PRNGKey, params: Any = None) -> tuple[Array, NormalizeRewardState]:
        """Reset the inner environment (``key []``), ``G = 0`` and the statistics:
        ``(obs, state)`` (scalar ``[]`` leaves besides the inner state)."""
        obs, env_state = self.env.reset(key, self._params(params))
        state = NormalizeRewardState(env_state=env_state, discounted_return=jnp.float32(0.0),
                                     return_moments=_init_moments(()))
        return obs, state

    def step(
        self, key: PRNGKey, state: NormalizeRewardState, action: Array, params: Any = None
    ) -> tuple[Array, NormalizeRewardState, Array, Array, Array, dict[str, Array]]:
        """Step the inner environment and scale its reward (class docstring):
        ``(obs, state, reward float32 [], terminated [], truncated [], info)`` with
        ``info["raw_reward"]`` float32 ``[]``."""
        obs, env_state, reward, terminated, truncated, info = self.env.step(
            key, state.env_state, action, self._params(params))
        if jnp.shape(reward) != ():
            raise ValueError(f"NormalizeReward({self.env.name}): rewards must be scalars [], "
                             f"got shape {list(jnp.shape(reward))}")
        reward = jnp.asarray(reward, jnp.float32)
        discounted_return = self.gamma * state.discounted_return + reward
        moments = _update_moments(state.return_moments, discounted_return, self.axis_name,
                                  repr(self))
        scaled = jnp.clip(reward / jnp.sqrt(moments.var + self.epsilon), -self.clip, self.clip)
        done = jnp.logical_or(terminated, truncated)
        state = NormalizeRewardState(
            env_state=env_state,
            discounted_return=jnp.where(done, 0.0, discounted_return).astype(jnp.float32),
            return_moments=moments)
        info = {**info, "raw_reward": info.get("raw_reward", reward)}
        return obs, state, scaled, terminated, truncated, info


__all__ = [
    "ENV_AXIS",
    "Wrapper",
    "TimeLimit",
    "TimeLimitState",
    "FlattenObservation",
    "ClipAction",
    "LogWrapper",
    "LogState",
    "RunningMoments",
    "NormalizeObservation",
    "NormalizeObservationState",
    "NormalizeReward",
    "NormalizeRewardState",
]
