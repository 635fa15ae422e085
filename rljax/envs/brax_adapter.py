"""Run a Brax environment (Freeman et al., 2021, https://github.com/google/brax) through rljax.

:func:`from_brax` wraps a *raw* Brax environment (``brax.envs.get_environment(name,
backend=...)``) -- not Brax's training wrappers -- and does the episode time limit and the
auto-reset itself, so that ``terminated`` and ``truncated`` are exact:

==============================================  =============================================
Brax                                            rljax ``BraxEnv.step(key, state, a, params)``
==============================================  =============================================
``env.step(state, a).obs``                      ``info["final_obs"]`` (before auto-reset)
``env.step(state, a).reward``                   ``reward`` float32 ``[]``
``env.step(state, a).done`` (physics end)       ``terminated`` bool ``[]`` (not bootstrapped)
``EpisodeWrapper``'s ``info["truncation"]``     ``truncated`` bool ``[]`` (time limit,
                                                bootstrapped)
``AutoResetWrapper`` (first state of episode)   ``env.reset(split(key)[1])`` (a fresh start)
==============================================  =============================================

**Time limit.** ``state.time`` counts agent steps in the episode. A step is *truncated* when
``time * action_repeat >= episode_length`` after it and the physics did not end the episode
on that step -- bit for bit what Brax's ``EpisodeWrapper`` puts in ``info["truncation"]``
(``steps >= episode_length`` and ``1 - done``), so the two flags are never both true: a step
that terminates on the last allowed step is a termination. Brax's wrapper instead folds the
time limit into ``done`` (``done = done | steps >= episode_length``), which is why Brax's PPO
reads ``truncation`` back out; here ``terminated`` is Brax's ``done`` alone and ``truncated``
is the ``truncation`` flag. With ``action_repeat = k`` one rljax step runs Brax's ``step``
``k`` times with the same action, sums the ``k`` rewards and takes ``done`` from the last of
them, as ``EpisodeWrapper`` does (an episode is at most ``ceil(episode_length / k)`` agent
steps).

**Reset semantics.** Brax's ``AutoResetWrapper`` restarts a finished episode from the *first*
state of that episode (cached at ``reset``): each parallel env replays one fixed initial
state forever, with no new randomness. rljax resets like gymnax (and like rljax's own
environments, :meth:`rljax.envs.Environment.step`): ``key_step, key_reset =
jax.random.split(key)`` and a finished episode continues from ``env.reset(key_reset)``, so
successive episodes of one env start from fresh random states. Brax's ``step`` is
deterministic, so ``key_step`` is unused. The cost is one ``reset`` (a ``pipeline_init``)
computed per step and selected with ``jnp.where`` (branch-free).

**Actions** are ``Box(-1, 1, (action_size,))`` float32; they are clipped to ``[-1, 1]``
before Brax's ``step`` (which rescales ``[-1, 1]`` to the actuators' control range), so a
Gaussian policy's unbounded sample behaves like its clipped value. **Observations** are
float32 ``[observation_size]``.

**Keys.** rljax passes typed keys (``jax.random.key``); Brax's envs take raw ``uint32[2]``
keys, so the adapter hands Brax ``jax.random.key_data(key)`` (the same bits: a typed
threefry key and its raw data give the same random numbers).

**Pipeline.** ``backend="mjx"`` (MuJoCo XLA) is the default, as Brax's documentation points to
MJX as the maintained physics. Measured on this project's 2-core CPU (jax 0.10.2, brax
0.14.2, mujoco-mjx 3.17.0; jit of reset + 100 steps of 16 vmapped envs, random actions):

==================  =============  =====================  ====================
env                 backend        compile (s)            env-steps / s
==================  =============  =====================  ====================
inverted_pendulum   mjx            6.1                    32 k
inverted_pendulum   generalized    6.1                    55 k
inverted_pendulum   positional     18.2                   35 k
inverted_pendulum   spring         11.8                   114 k
reacher             mjx            20.4                   21 k
reacher             generalized    24.3                   12 k
reacher             spring         17.3                   53 k
hopper              mjx            28.1                   3.1 k
hopper              generalized    32.6                   8.9 k
hopper              spring         33.5                   31 k
==================  =============  =====================  ====================

(timings on a shared machine vary by tens of percent; ``spring``/``positional`` also take 4
physics frames per step on ``inverted_pendulum`` where ``mjx``/``generalized`` take 2, so
they are not the same simulation). MJX compiles as fast as any pipeline on the small envs
and is the one Brax maintains, so it is the default and the pipeline rljax's tests use
(``inverted_pendulum``, the cheapest env to compile). For contact-rich envs on CPU
(``hopper``) ``generalized`` or ``spring`` step faster; pass ``backend=`` to choose.

brax is an optional dependency (``pip install rljax[dev]`` or ``brax``); this module does not
import it -- only :func:`from_brax` does.
"""

from __future__ import annotations

import difflib
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from rljax.envs.base import Environment
from rljax.envs.spaces import Box
from rljax.types import Array, PRNGKey

BRAX_BACKENDS = ("mjx", "generalized", "positional", "spring")


@struct.dataclass
class BraxParams:
    """Episode settings: two static Python int scalars, no array leaves (a change compiles a
    new program).

    Attributes:
      episode_length: time limit in Brax (physics-env) steps, as Brax's ``EpisodeWrapper``
        counts them (``>= 1``).
      action_repeat: Brax steps per rljax step, each with the same action (``>= 1``).
    """

    episode_length: int = struct.field(pytree_node=False, default=1000)
    action_repeat: int = struct.field(pytree_node=False, default=1)

    @property
    def max_steps_in_episode(self) -> int:
        """The time limit in agent steps, ``ceil(episode_length / action_repeat)`` (the
        gymnax name, read by :func:`rljax.training.evaluation.episode_limit`)."""
        return -(-self.episode_length // self.action_repeat)


@struct.dataclass
class BraxState:
    """Brax's ``State`` pytree (``pipeline_state``, ``obs [O]``, ``reward []``, ``done []``,
    ``metrics``, ``info``) and ``time``: agent steps taken in the episode (int32 ``[]``)."""

    brax_state: Any
    time: Array


def _check_params(params: BraxParams) -> None:
    for field in ("episode_length", "action_repeat"):
        value = getattr(params, field)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{field}: must be an integer >= 1, got {value!r}")


def _raw_key(key: PRNGKey) -> Array:
    """Brax's key form: ``uint32[2]`` raw data of a typed key (a raw key passes through)."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key)
    return key


class BraxEnv(Environment):
    """A raw Brax environment behind rljax's :class:`~rljax.envs.Environment` contract.

    ``reset(key, params) -> (obs [O], state)``;
    ``step(key, state, action [A], params) -> (obs [O], state, reward [], terminated [],
    truncated [], info)`` with ``info["final_obs"]`` ``[O]`` (the observation the step
    reached, before auto-reset) and ``info["metrics"]`` (Brax's per-step metrics dict, each
    ``[]``). ``O`` is Brax's ``observation_size``, ``A`` its ``action_size``. Shapes are those
    of one environment; batch with ``jax.vmap``. See the module docstring for the time limit,
    the reset semantics and the pipeline.

    Args:
      env: a raw Brax environment (``brax.envs.get_environment(name, backend=...)``), not
        wrapped by Brax's ``EpisodeWrapper``/``AutoResetWrapper``/``VmapWrapper``.
      episode_length: time limit in Brax steps (>= 1).
      action_repeat: Brax steps per rljax step (>= 1).
      name: the environment's name (default: Brax's class name).

    Raises:
      ValueError: bad ``episode_length``/``action_repeat``, or a Brax env whose observation
        is not one vector (a dict observation).
      TypeError: ``env`` is not a Brax environment, or is one of Brax's training wrappers.
    """

    def __init__(self, env: Any, *, episode_length: int = 1000, action_repeat: int = 1,
                 name: str | None = None):
        for method in ("reset", "step"):
            if not callable(getattr(env, method, None)):
                raise TypeError(f"env: expected a Brax environment, got {type(env).__name__}")
        if getattr(env, "unwrapped", env) is not env:
            raise TypeError(f"env: pass the raw Brax environment, not {type(env).__name__} "
                            "(rljax does the time limit and auto-reset itself)")
        self.brax_env = env
        self.params = BraxParams(episode_length=episode_length, action_repeat=action_repeat)
        _check_params(self.params)
        self._name = type(env).__name__ if name is None else str(name)
        obs = jax.eval_shape(env.reset, jax.ShapeDtypeStruct((2,), jnp.uint32)).obs
        if not hasattr(obs, "shape") or len(obs.shape) != 1:
            raise ValueError(f"{self._name}: rljax needs a vector observation, got "
                             f"{jax.tree_util.tree_map(lambda x: x.shape, obs)}")
        self.observation_size = int(obs.shape[0])
        self.action_size = int(env.action_size)

    def __repr__(self) -> str:
        return f"BraxEnv({self.name}, backend={self.backend!r})"

    @property
    def name(self) -> str:
        """The environment's name (e.g. ``"inverted_pendulum"``)."""
        return self._name

    @property
    def backend(self) -> str:
        """Brax's physics pipeline (``"mjx"``, ``"generalized"``, ``"positional"``,
        ``"spring"``)."""
        return str(getattr(self.brax_env, "backend", "unknown"))

    @property
    def default_params(self) -> BraxParams:
        """The ``episode_length``/``action_repeat`` given at construction."""
        return self.params

    def action_space(self, params: Any = None) -> Box:
        """``Box(-1, 1, (A,))`` float32 (Brax's normalised actuator controls)."""
        return Box(-1.0, 1.0, (self.action_size,))

    def observation_space(self, params: Any = None) -> Box:
        """Unbounded ``Box(-inf, inf, (O,))`` float32."""
        return Box(-jnp.inf, jnp.inf, (self.observation_size,))

    def reset_env(self, key: PRNGKey, params: BraxParams) -> tuple[Array, BraxState]:
        """Brax's ``reset(key_data(key))``: ``(obs [O] float32, state)`` with ``time = 0``."""
        _check_params(params)
        brax_state = self.brax_env.reset(_raw_key(key))
        brax_state = brax_state.replace(obs=jnp.asarray(brax_state.obs, jnp.float32),
                                        reward=jnp.asarray(brax_state.reward, jnp.float32),
                                        done=jnp.asarray(brax_state.done, jnp.float32))
        return brax_state.obs, BraxState(brax_state=brax_state, time=jnp.int32(0))

    def step_env(
        self, key: PRNGKey, state: BraxState, action: Array, params: BraxParams
    ) -> tuple[Array, BraxState, Array, Array, Array, dict[str, Any]]:
        """One step *without* auto-reset (what :meth:`step` runs before resetting).

        Args:
          key: typed key ``[]`` (unused: Brax's dynamics are deterministic).
          state: :class:`BraxState`.
          action: float ``[A]``, clipped to ``[-1, 1]``.
          params: :class:`BraxParams`.

        Returns:
          ``(obs [O], state, reward [], terminated [], truncated [], info)``: ``reward`` the
          sum over ``action_repeat`` Brax steps (float32), ``terminated`` Brax's ``done`` of
          the last of them, ``truncated`` the time limit on a non-terminating step (Brax's
          ``truncation``), ``info = {"final_obs": obs, "metrics": Brax's metrics}``.
        """
        del key
        _check_params(params)
        action = jnp.clip(jnp.asarray(action, jnp.float32), -1.0, 1.0)

        def one_brax_step(brax_state, _):
            brax_state = self.brax_env.step(brax_state, action)
            brax_state = brax_state.replace(reward=jnp.asarray(brax_state.reward, jnp.float32),
                                            done=jnp.asarray(brax_state.done, jnp.float32))
            return brax_state, brax_state.reward

        brax_state, rewards = jax.lax.scan(one_brax_step, state.brax_state, None,
                                           length=params.action_repeat)
        obs = jnp.asarray(brax_state.obs, jnp.float32)
        brax_state = brax_state.replace(obs=obs)
        time = state.time + 1
        terminated = brax_state.done > 0
        truncated = jnp.logical_and(time * params.action_repeat >= params.episode_length,
                                    jnp.logical_not(terminated))
        info = {"final_obs": obs, "metrics": dict(brax_state.metrics)}
        return (obs, BraxState(brax_state=brax_state, time=time), jnp.sum(rewards),
                terminated, truncated, info)


def brax_env_names() -> list[str]:
    """The names in Brax's environment registry (imports brax)."""
    from brax import envs

    return sorted(getattr(envs, "_envs", {}))


def from_brax(name: str, *, backend: str = "mjx", episode_length: int = 1000,
              action_repeat: int = 1, **kwargs: Any) -> BraxEnv:
    """A :class:`BraxEnv` from a Brax environment name.

    Args:
      name: a registered Brax env, e.g. ``"inverted_pendulum"``, ``"reacher"``,
        ``"hopper"``, ``"ant"``.
      backend: physics pipeline, one of ``"mjx"`` (default, the maintained one),
        ``"generalized"``, ``"positional"``, ``"spring"``.
      episode_length: time limit in Brax steps (>= 1; Brax's own default is 1000).
      action_repeat: Brax steps per rljax step with the same action (>= 1).
      **kwargs: passed to ``brax.envs.get_environment`` (the env's constructor, e.g.
        ``n_frames``).

    Returns:
      The wrapped environment: observations float32 ``[O]``, actions ``Box(-1, 1, (A,))``,
      one environment per call (batch with ``jax.vmap``).

    Raises:
      ValueError: unknown name (listing close matches), unknown backend, or
        ``episode_length``/``action_repeat`` < 1.
    """
    if backend not in BRAX_BACKENDS:
        raise ValueError(f"backend: must be one of {', '.join(BRAX_BACKENDS)}, got {backend!r}")
    _check_params(BraxParams(episode_length=episode_length, action_repeat=action_repeat))
    try:
        from brax import envs
    except ImportError as error:  # pragma: no cover - depends on the installation
        raise ImportError(f"from_brax({name!r}) needs brax: pip install brax") from error
    names = brax_env_names()
    if name not in names:
        close = difflib.get_close_matches(str(name), names, n=3)
        hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(names)}"
        raise ValueError(f"from_brax: unknown Brax environment {name!r}; {hint}")
    env = envs.get_environment(name, backend=backend, **kwargs)
    return BraxEnv(env, episode_length=episode_length, action_repeat=action_repeat, name=name)
