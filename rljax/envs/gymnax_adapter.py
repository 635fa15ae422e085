"""Run any gymnax environment through rljax (rollouts, PPO, sweeps) with one wrapper.

gymnax (Lange, 2022, https://github.com/RobertTLange/gymnax) already has rljax's
environment shape -- stateless env objects, ``flax.struct`` state and params, auto-reset
inside ``step`` -- so :class:`GymnaxEnv` is a drop-in for the gymnax environment it wraps:
every gymnax method keeps gymnax's signature and return values, and any attribute it does
not define is the inner environment's (``get_obs``, ``is_terminal``, ``discount``,
``state_space``, ``supports_transition_gradients``, env-specific fields, ...). gymnax
1.0.1's own test suite passes with ``gymnax.make`` returning the adapted environment
(``python scripts/peer_tests.py gymnax``; ``docs/envs.md``). What rljax adds to ``step``:

=================================================  ==========================================
gymnax >= 1.0 ``env.step(key, state, a, params)``  rljax ``GymnaxEnv.step(key, state, a, params)``
=================================================  ==========================================
``obs`` (next episode's first obs when done)       ``obs`` (unchanged)
``state`` (auto-reset when done)                   ``state`` (unchanged)
``reward``                                         ``reward`` as float32 ``[]``
``terminated`` (natural end, not bootstrapped)     ``terminated`` as bool ``[]``
``truncated`` (time limit, bootstrapped)           ``truncated`` as bool ``[]``
``info["final_observation"]`` (before reset)       ``info["final_obs"]`` (gymnax's keys kept)
=================================================  ==========================================

``reset(key, params) -> (obs, state)`` is gymnax's own. The same key gives the same
numbers as calling gymnax directly (the adapter calls ``env.step``/``env.reset`` and splits
no keys of its own), so results are comparable with gymnax-based code such as rejax or
PureJaxRL. ``step_env``/``reset_env`` are gymnax's too: ``step_env`` returns gymnax's five
values ``(obs, state, reward, terminated, info)``. rljax code that expands states without
auto-reset calls :meth:`GymnaxEnv.transition` instead, which returns rljax's six values
(``truncated`` from gymnax's ``is_truncated``).

With ``info["final_obs"]`` present, :func:`rljax.algorithms.make_ppo_train` bootstraps a
truncated episode from the value of its last observation, exactly as with the native
:class:`~rljax.envs.CartPole`.

Older gymnax (< 1.0) returns five values ``(obs, state, reward, done, info)`` from ``step``
with the time limit folded into ``done`` and no final observation. The adapter accepts
that too and maps it to ``terminated = done``, ``truncated = False`` with no ``final_obs``:
PPO then takes its no-``final_obs`` path, in which a time-limit end is treated like a
termination (not bootstrapped), as gymnax < 1.0 itself does.

gymnax is an optional dependency (``pip install rljax[dev]`` or ``gymnax``); this module
does not import it -- only :func:`from_gymnax` does, when called with an environment id.
"""

from __future__ import annotations

import difflib
from typing import Any

import jax.numpy as jnp

from rljax.envs.base import Environment
from rljax.types import Array, PRNGKey


class GymnaxEnv(Environment):
    """A gymnax environment behind rljax's :class:`~rljax.envs.Environment` contract, and
    a drop-in for that gymnax environment.

    ``reset(key, params) -> (obs, state)``;
    ``step(key, state, action, params) -> (obs, state, reward [], terminated [],
    truncated [], info)`` with ``info["final_obs"]`` (the observation the step reached,
    before auto-reset) under gymnax >= 1.0; ``transition`` is the same without auto-reset.
    Shapes are those of one environment; batch with ``jax.vmap`` as usual. See the
    module docstring for the mapping.

    gymnax's API is kept: ``step_env`` (five values), ``reset_env``, ``action_space``,
    ``observation_space`` (gymnax's space objects; rljax code converts them with
    :func:`rljax.envs.spaces.as_rljax_space`), ``num_actions``, ``name``,
    ``default_params``, the transition-gradient API (``supports_transition_gradients``,
    ``transition_gradients_enabled``, ``with_transition_gradients()`` -> an adapted
    env), and every other attribute is looked up on the inner environment. ``params``
    defaults to the adapter's :attr:`default_params` wherever gymnax takes one.

    Args:
      env: a gymnax environment object (e.g. the first value of ``gymnax.make(name)``).
      params: its parameters (e.g. the second value of ``gymnax.make(name)``); default
        ``env.default_params``. Returned by :attr:`default_params`, so
        ``make_ppo_train(GymnaxEnv(env, params), ...)`` uses them.

    Example::

        env, params = gymnax.make("CartPole-v1")
        env = GymnaxEnv(env, params)            # or: from_gymnax("CartPole-v1")
        net = mlp_actor_critic(env.num_actions)
        train = make_ppo_train(env, net, PPOTrainConfig())
    """

    def __init__(self, env: Any, params: Any = None):
        for method in ("reset", "step"):
            if not callable(getattr(env, method, None)):
                raise TypeError(
                    f"env: expected a gymnax environment with reset/step, got {type(env).__name__}"
                )
        self.gymnax_env = env
        self.params = env.default_params if params is None else params

    def __getattr__(self, name: str) -> Any:
        """Anything the adapter does not define is the inner gymnax environment's.

        Only called when normal lookup fails. Dunder names and the adapter's own fields
        are never forwarded, so ``copy``/``pickle`` (which probe a half-built instance
        for ``__setstate__`` etc.) see a plain object instead of recursing.
        """
        inner = vars(self).get("gymnax_env")
        if inner is None or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(inner, name)

    def __repr__(self) -> str:
        return f"GymnaxEnv({self.name})"

    def _params(self, params: Any) -> Any:
        return self.params if params is None else params

    @property
    def name(self) -> str:
        """The gymnax environment's name (e.g. ``"CartPole-v1"``)."""
        return str(getattr(self.gymnax_env, "name", type(self.gymnax_env).__name__))

    @property
    def default_params(self) -> Any:
        """The gymnax parameters given at construction (or gymnax's defaults)."""
        return self.params

    def action_space(self, params: Any = None) -> Any:
        """gymnax's action space (``gymnax.environments.spaces``; convert with
        :func:`~rljax.envs.spaces.as_rljax_space`)."""
        return self.gymnax_env.action_space(self._params(params))

    def observation_space(self, params: Any = None) -> Any:
        """gymnax's observation space (``gymnax.environments.spaces``)."""
        return self.gymnax_env.observation_space(self._params(params))

    @property
    def num_actions(self) -> int:
        """gymnax's ``num_actions``: the number of discrete actions, or for gymnax's
        continuous envs the action dimension (Pendulum: 1). Where the inner environment
        does not define it (gymnax raises ``NotImplementedError``), ``n`` of a discrete
        action space, else a one-line ``ValueError`` (also a ``NotImplementedError``)."""
        try:
            return self.gymnax_env.num_actions
        except NotImplementedError:
            space = self.action_space()
            if type(space).__name__ == "Discrete":
                return int(space.n)
            raise _NumActionsError(
                f"{self.name}: num_actions is for Discrete action spaces; this env's action "
                f"space is {type(space).__name__} (use action_space(params))"
            ) from None

    @property
    def observation_shape(self) -> tuple[int, ...]:
        """Shape of one observation, from gymnax's observation space (e.g. ``(4,)``)."""
        return tuple(self.observation_space().shape)

    # -- the transition-gradient API (gymnax 1.0.1): read-only, and the configured copy
    #    stays adapted

    @property
    def supports_transition_gradients(self) -> bool:
        """Whether the inner environment implements differentiable transitions
        (read-only, as in gymnax; False for an environment without the API)."""
        return bool(getattr(self.gymnax_env, "supports_transition_gradients", False))

    @property
    def transition_gradients_enabled(self) -> bool:
        """Whether transitions keep their gradients (read-only, as in gymnax)."""
        return bool(getattr(self.gymnax_env, "transition_gradients_enabled", False))

    def with_transition_gradients(self) -> GymnaxEnv:
        """A new adapter around gymnax's ``with_transition_gradients()`` copy of the
        inner environment, with the same params (this adapter is unchanged). Raises
        gymnax's ``ValueError`` for an environment that does not support them."""
        return GymnaxEnv(self.gymnax_env.with_transition_gradients(), self.params)

    # -- stepping

    def reset(self, key: PRNGKey, params: Any = None) -> tuple[Any, Any]:
        """Start an episode: gymnax's ``reset``.

        Returns ``(obs, state)``: one environment's observation (shape
        :attr:`observation_shape`, e.g. ``[4]`` for CartPole) and state (scalar leaves).
        """
        return self.gymnax_env.reset(key, self._params(params))

    def step(
        self,
        key: PRNGKey,
        state: Any,
        action: Array,
        params: Any = None,
    ) -> tuple[Any, Any, Array, Array, Array, dict[str, Any]]:
        """gymnax's auto-resetting ``step`` in rljax's six-value form (module docstring).

        Returns:
          ``(obs, state, reward, terminated, truncated, info)``: ``reward`` float32 ``[]``,
          ``terminated``/``truncated`` bool ``[]``; ``obs``/``state`` already of the next
          episode when either is true; ``info`` is gymnax's plus ``final_obs`` (gymnax
          >= 1.0).
        """
        out = self.gymnax_env.step(key, state, action, self._params(params))
        if len(out) == 6:
            obs, state, reward, terminated, truncated, info = out
            info = dict(info)
            if "final_observation" in info:
                info["final_obs"] = info["final_observation"]
        elif len(out) == 5:  # gymnax < 1.0: the time limit is folded into done
            obs, state, reward, terminated, info = out
            info = dict(info)
            truncated = jnp.zeros_like(terminated, dtype=bool)
        else:
            raise ValueError(
                f"{self.name}: gymnax step returned {len(out)} values, expected 5 or 6"
            )
        return (obs, state, jnp.asarray(reward, jnp.float32),
                jnp.asarray(terminated, bool), jnp.asarray(truncated, bool), info)

    def reset_env(self, key: PRNGKey, params: Any = None) -> tuple[Any, Any]:
        """gymnax's ``reset_env`` (what :meth:`reset` runs): ``(obs [...], state)``, the
        observation of shape :attr:`observation_shape`."""
        return self.gymnax_env.reset_env(key, self._params(params))

    def step_env(
        self, key: PRNGKey, state: Any, action: Array, params: Any = None
    ) -> tuple[Any, Any, Array, Array, dict[str, Any]]:
        """gymnax's ``step_env``, unchanged: one step without auto-reset, returning gymnax's
        five values ``(obs, state, reward, terminated, info)`` (``done`` before gymnax 1.0),
        one environment's: ``obs`` of :attr:`observation_shape`, ``reward`` and
        ``terminated`` scalars ``[]``. rljax's six-value form of the same step is
        :meth:`transition`."""
        return self.gymnax_env.step_env(key, state, action, self._params(params))

    def transition(
        self, key: PRNGKey, state: Any, action: Array, params: Any = None
    ) -> tuple[Any, Any, Array, Array, Array, dict[str, Any]]:
        """One step *without* auto-reset in rljax's six-value form, for rljax code that
        expands states itself (``search.beam_search``, ``search.sample_candidates``).

        Runs gymnax's ``step_env(key, ...)`` (``key`` used as given, not split).

        Returns ``(obs, state, reward [], terminated [], truncated [], info)`` like
        :meth:`step`, ``obs`` of shape :attr:`observation_shape`; ``truncated`` is gymnax's
        ``is_truncated(next_state, params)`` (False where the environment has none, gymnax
        < 1.0); ``info`` is gymnax's plus ``final_obs``, the returned ``obs``.
        """
        params = self._params(params)
        obs, state, reward, terminated, info = self.gymnax_env.step_env(key, state, action,
                                                                        params)
        is_truncated = getattr(self.gymnax_env, "is_truncated", None)
        if is_truncated is None:
            truncated = jnp.zeros_like(terminated, dtype=bool)
        else:
            truncated = is_truncated(state, params)
        info = {**info, "final_obs": obs}
        return (obs, state, jnp.asarray(reward, jnp.float32),
                jnp.asarray(terminated, bool), jnp.asarray(truncated, bool), info)


class _NumActionsError(ValueError, NotImplementedError):
    """``num_actions`` of a non-discrete env that does not define it: a ``ValueError``
    for rljax, still the ``NotImplementedError`` gymnax code may catch."""


def from_gymnax(env: Any, params: Any = None, **make_kwargs: Any) -> GymnaxEnv:
    """A :class:`GymnaxEnv` from a gymnax environment id or object.

    Args:
      env: a gymnax id such as ``"CartPole-v1"`` or ``"Acrobot-v1"`` (made with
        ``gymnax.make(env, **make_kwargs)``; imports gymnax), or a gymnax environment
        object.
      params: environment parameters; default those ``gymnax.make`` returns (or
        ``env.default_params`` for an object).
      **make_kwargs: passed to ``gymnax.make`` (id only).

    Returns:
      The wrapped environment; its :attr:`~GymnaxEnv.default_params` are ``params``. It
      steps one environment at a time (``reward``, ``terminated``, ``truncated`` scalars
      ``[]``; observations of shape :attr:`~GymnaxEnv.observation_shape`); batch with
      ``jax.vmap``.

    Raises:
      ValueError: one line for an id gymnax has not registered, naming it and its close
        matches among ``gymnax.registered_envs``.
    """
    if isinstance(env, str):
        try:
            import gymnax
        except ImportError as error:  # pragma: no cover - depends on the installation
            raise ImportError(
                f"from_gymnax({env!r}) needs gymnax: pip install gymnax"
            ) from error
        registered = list(gymnax.registered_envs)
        if env not in registered:
            close = difflib.get_close_matches(env, registered, n=3, cutoff=0.6)
            hint = (f"close matches: {', '.join(close)}" if close
                    else f"no close match among gymnax.registered_envs ({len(registered)} ids)")
            raise ValueError(f"from_gymnax: {env!r} is not a registered gymnax "
                             f"environment; {hint}")
        env, made_params = gymnax.make(env, **make_kwargs)
        params = made_params if params is None else params
    elif make_kwargs:
        raise TypeError("from_gymnax: make_kwargs are only used with an environment id")
    return GymnaxEnv(env, params)
