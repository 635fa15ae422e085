"""Boundary checks of user code: where a user's environment, policy or custom function
meets rljax's, its outputs are checked once, at trace time, against what rljax expects.

Shapes and dtypes are static under ``jit``, so every check here reads only static facts
(``shape``, ``dtype``, the pytree structure) and costs nothing per step. A mismatch is a
one-line :class:`ContractError` (a ``ValueError``) that names the function the user wrote
and both shapes, e.g.::

    ContractError: GridNet.apply (policy): logits have 3 actions but GridWorld's
    action_space is Discrete(4)

instead of a broadcasting error deep inside a ``scan``. The checks are:

===========================  =============================================================
:func:`check_env_step`       ``reset`` vs ``step`` observations (structure, shape, dtype);
                             ``reward`` a float scalar, ``terminated`` / ``truncated``
                             bool scalars, per environment
:func:`check_policy_head`    a policy head's distribution parameters against the env's
                             action space (categorical logits ``[..., n]`` for
                             ``Discrete(n)``; Gaussian ``(mean, log_std)`` ``[..., D]``
                             for a ``Box`` of shape ``(D,)``)
:func:`check_actor_critic`   ``apply(params, obs [B, ...]) -> (dist_params, value [B])``
:func:`check_output_shape`   a custom function's output against the shape the caller
                             needs (a custom advantage returns its rewards' shape; a
                             ``log_prob_fn`` returns ``[N, T]``; a baseline ``[G]``)
:func:`check_logits`         ``policy_apply(params, obs) -> logits [*batch, A]``
===========================  =============================================================

This module sits low in the import graph (it imports only JAX and NumPy): spaces are read
duck-typed (``space.n`` for a discrete space, ``space.shape`` for a box).
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "ContractError",
    "TruncationBootstrapWarning",
    "check_actor_critic",
    "check_array_outputs",
    "check_env",
    "check_env_step",
    "check_logits",
    "check_output_shape",
    "check_policy_head",
    "env_function_names",
    "function_name",
    "shape_text",
    "warn_no_final_obs",
]


class ContractError(ValueError):
    """A user's function returned something rljax cannot use (one line, naming it)."""


def function_name(fn: Any) -> str:
    """A readable name of the user's callable: ``Class.method`` for a bound method,
    ``module-level qualname`` for a function, the wrapped function's for a
    ``functools.partial``, the class name for a callable object."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, type) and hasattr(fn, "__name__") \
            and not type(owner).__name__ == "module":
        return f"{type(owner).__name__}.{fn.__name__}"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if name is None:
        name = type(fn).__name__
    return name.replace(".<locals>", "")


def shape_text(x: Any) -> str:
    """``[5, 5]`` for an array-like (``[]`` for a scalar); ``a tuple of 2`` / ``a dict``
    / the type's name for other pytrees."""
    if hasattr(x, "shape"):
        return str(list(x.shape))
    if isinstance(x, tuple | list):
        return f"a {type(x).__name__} of {len(x)}"
    if isinstance(x, int | float | bool | np.generic):
        return "[] (a Python number)"
    return f"a {type(x).__name__}"


def _dtype(x: Any) -> Any:
    return jnp.result_type(x)


def _with_last(batch: list[int], name: str) -> str:
    """``[4, 8, A]``: a batch shape with one more named axis."""
    return "[" + ", ".join([*map(str, batch), name]) + "]"


def _is_array(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype")


def env_function_names(env: Any) -> tuple[str, str]:
    """``(reset name, step name)`` the user wrote: ``Cls.reset_env`` / ``Cls.step_env``
    for an environment built on :class:`rljax.envs.Environment`'s auto-reset (it defines
    those), else ``Cls.reset`` / ``Cls.step``."""
    cls = type(env)
    name = getattr(cls, "__name__", "env")
    if callable(getattr(env, "step_env", None)) and callable(getattr(env, "reset_env", None)) \
            and "step" not in _own_attributes(cls):
        return f"{name}.reset_env", f"{name}.step_env"
    return f"{name}.reset", f"{name}.step"


@functools.cache
def _own_attributes(cls: type) -> frozenset[str]:
    """Names a class defines itself or inherits from a class that overrides ``step``
    (the base ``Environment.step`` is the one that calls ``step_env``)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass.__name__ == "Environment" and klass.__module__ == "rljax.envs.base":
            break
        names.update(vars(klass))
    return frozenset(names)


def check_env_step(
    reset_name: str,
    step_name: str,
    reset_obs: Any,
    step_obs: Any,
    reward: Any,
    terminated: Any,
    truncated: Any,
    *,
    batch_ndim: int = 0,
) -> None:
    """Check one environment step's outputs against the reset's (static facts only).

    Args:
      reset_name, step_name: the user's functions, for the message (e.g.
        ``"GridWorld.reset_env"``, ``"GridWorld.step_env"``).
      reset_obs: the observation pytree ``reset`` returns, ``[*batch, *obs]`` per leaf.
      step_obs: the observation pytree ``step`` returns: the same structure, shapes and
        dtypes as ``reset_obs`` (auto-reset selects between the two per leaf).
      reward: ``[*batch]`` floating.
      terminated, truncated: ``[*batch]`` bool.
      batch_ndim: the leading batch axes (0 for one environment; 1 under the trainer's
        ``vmap`` over ``N`` environments, whose shapes are then reported per env).

    Raises:
      ContractError: one line naming the function and both shapes or dtypes.
    """
    reset_leaves, reset_tree = jax.tree_util.tree_flatten(reset_obs)
    step_leaves, step_tree = jax.tree_util.tree_flatten(step_obs)
    if reset_tree != step_tree:
        raise ContractError(f"{step_name} returns observations structured as {step_tree} but "
                            f"{reset_name} returns {reset_tree}; both must return the same "
                            "observation structure")
    per_env = lambda x: list(jnp.shape(x)[batch_ndim:])  # noqa: E731
    for r, s in zip(reset_leaves, step_leaves, strict=True):
        if per_env(r) != per_env(s):
            raise ContractError(f"{step_name} returns observations of shape {per_env(s)} but "
                                f"{reset_name} returns {per_env(r)}; both must return the "
                                "same observation shape")
        if _dtype(r) != _dtype(s):
            raise ContractError(f"{step_name} returns observations of dtype {_dtype(s)} but "
                                f"{reset_name} returns {_dtype(r)}; both must return the "
                                "same observation dtype")
    for what, value, kind in (("reward", reward, "float"), ("terminated", terminated, "bool"),
                              ("truncated", truncated, "bool")):
        if not _is_array(value) and not isinstance(value, int | float | bool | np.generic):
            raise ContractError(f"{step_name} returns {what} as {shape_text(value)}; it must "
                                f"be a {kind} scalar [] per environment")
        if per_env(value) != []:
            raise ContractError(f"{step_name} returns {what} of shape {per_env(value)}; it "
                                f"must be a {kind} scalar [] per environment")
        dtype = _dtype(value)
        if kind == "float" and not jnp.issubdtype(dtype, jnp.floating):
            raise ContractError(f"{step_name} returns {what} of dtype {dtype}; it must be "
                                "floating (e.g. jnp.float32(r))")
        if kind == "bool" and dtype != jnp.bool_:
            raise ContractError(f"{step_name} returns {what} of dtype {dtype}; it must be "
                                "bool (e.g. x >= limit)")


def check_policy_head(
    apply_name: str,
    distribution_name: str,
    dist_params: Any,
    space: Any,
    env_name: str,
    batch_shape: tuple[int, ...],
    actions_shape: tuple[int, ...] | None = None,
    *,
    role: str = "policy",
    outputs: str = "logits",
) -> None:
    """Check a policy head's distribution parameters against the env's action space (or,
    where no env is at hand, a batch of the actions it will score).

    Args:
      apply_name: the user's policy function, for the message.
      distribution_name: ``"categorical"``, ``"gaussian"`` or ``"tanh_gaussian"``.
      dist_params: what the head returned for a ``[*batch_shape, ...]`` batch of
        observations: logits ``[*batch, A]`` (categorical) or ``(mean, log_std)``, each
        ``[*batch, D]`` (Gaussian).
      space: the env's action space: ``Discrete(n)`` (has ``n``) or a ``Box`` of shape
        ``(D,)``; ``None`` when the env declares none (nothing to check against).
      env_name: the environment's name, for the message.
      batch_shape: the batch the head was applied to.
      actions_shape: the shape of the actions the head's ``log_prob`` will score
        (``[*batch, D]`` for a Gaussian head), when known; ``None``: not checked.
      role, outputs: what the function is and what it returns, for the message
        (``"Q-network"`` / ``"Q-values"`` for a value-based method's ``[*batch, A]``).

    Raises:
      ContractError: one line, e.g. ``GridNet.apply ({role}): logits have 3 actions but
        GridWorld's action_space is Discrete(4)``.
    """
    batch = list(batch_shape)
    if distribution_name == "categorical":
        if not _is_array(dist_params) or list(jnp.shape(dist_params)[:-1]) != batch \
                or jnp.ndim(dist_params) != len(batch) + 1:
            raise ContractError(f"{apply_name} ({role}): returns {outputs} of shape "
                                f"{shape_text(dist_params)} for a batch {batch}; a "
                                f"categorical head needs {_with_last(batch, 'A')}")
        actions = int(jnp.shape(dist_params)[-1])
        n = getattr(space, "n", None)
        if n is not None and actions != int(n):
            raise ContractError(f"{apply_name} ({role}): {outputs} have {actions} actions but "
                                f"{env_name}'s action_space is {space!r}")
        return
    if not (isinstance(dist_params, tuple | list) and len(dist_params) == 2
            and all(_is_array(p) for p in dist_params)):
        raise ContractError(f"{apply_name} ({role}): a {distribution_name} head returns "
                            f"(mean, log_std), got {shape_text(dist_params)}")
    mean, log_std = dist_params
    for what, value in (("mean", mean), ("log_std", log_std)):
        if list(jnp.shape(value)[:-1]) != batch or jnp.ndim(value) != len(batch) + 1:
            raise ContractError(f"{apply_name} ({role}): {what} has shape {shape_text(value)} "
                                f"for a batch {batch}; a {distribution_name} head needs "
                                f"{_with_last(batch, 'D')}")
    shape = getattr(space, "shape", None)
    if shape is not None and getattr(space, "n", None) is None:
        if (int(jnp.shape(mean)[-1]),) != tuple(shape) or jnp.shape(log_std) != jnp.shape(mean):
            raise ContractError(f"{apply_name} ({role}): Gaussian mean "
                                f"{list(jnp.shape(mean)[-1:])} / log_std "
                                f"{list(jnp.shape(log_std)[-1:])} per observation but "
                                f"{env_name}'s action_space is {space!r}")
    if actions_shape is not None and tuple(jnp.shape(mean)) != tuple(actions_shape):
        raise ContractError(f"{apply_name} (actor-critic): Gaussian mean "
                            f"{list(jnp.shape(mean))} for actions {list(actions_shape)}; they "
                            "must match")


def check_actor_critic(
    apply_name: str,
    out: Any,
    distribution_name: str,
    space: Any,
    env_name: str,
    batch_shape: tuple[int, ...],
    actions_shape: tuple[int, ...] | None = None,
) -> None:
    """Check ``apply(params, obs [*batch, ...]) -> (dist_params, value [*batch])``.

    Args:
      apply_name: the user's ``apply``, for the message.
      out: what it returned.
      distribution_name, space, env_name, batch_shape, actions_shape: as for
        :func:`check_policy_head`.

    Raises:
      ContractError: one line naming ``apply`` and the shapes.
    """
    if not (isinstance(out, tuple | list) and len(out) == 2):
        raise ContractError(f"{apply_name} (actor-critic): must return (dist_params, value), "
                            f"got {shape_text(out)}")
    dist_params, value = out
    check_policy_head(apply_name, distribution_name, dist_params, space, env_name, batch_shape,
                      actions_shape)
    if not _is_array(value) or tuple(jnp.shape(value)) != tuple(batch_shape):
        raise ContractError(f"{apply_name} (actor-critic): returns values of shape "
                            f"{shape_text(value)} for {list(batch_shape)} observations; it "
                            f"must return one value per observation, {list(batch_shape)}")


def check_output_shape(
    what: str,
    fn: Any,
    out: Any,
    expected: tuple[int, ...],
    given: str,
) -> None:
    """Check that a custom function returned one array of the ``expected`` shape.

    Args:
      what: the argument the user passed it as, e.g. ``"advantage="``.
      fn: the user's function (named in the message).
      out: what it returned.
      expected: the shape the caller needs.
      given: what it was called on, for the message, e.g. ``"rewards [4, 8]"``.

    Raises:
      ContractError: e.g. ``advantage=my_adv returned [4] for rewards [4, 8]; it must
        return [4, 8]``.
    """
    if not _is_array(out) or tuple(jnp.shape(out)) != tuple(expected):
        raise ContractError(f"{what}{function_name(fn)} returned {shape_text(out)} for "
                            f"{given}; it must return {list(expected)}")


def check_logits(what: str, fn: Any, logits: Any, batch_shape: tuple[int, ...],
                 num_actions: int | None = None) -> None:
    """Check ``fn(params, obs [*batch, ...]) -> logits [*batch, A]`` (``A`` equal to
    ``num_actions`` when given, e.g. a language model's vocabulary).

    Raises:
      ContractError: one line naming ``what`` (``"policy_apply="``) and the shapes.
    """
    batch = list(batch_shape)
    if (not _is_array(logits) or jnp.ndim(logits) != len(batch) + 1
            or list(jnp.shape(logits)[:-1]) != batch):
        raise ContractError(f"{what}{function_name(fn)} returned {shape_text(logits)} for "
                            f"observations {batch}; it must return logits "
                            f"{_with_last(batch, 'A')}")
    if num_actions is not None and int(jnp.shape(logits)[-1]) != int(num_actions):
        raise ContractError(f"{what}{function_name(fn)} returned logits over "
                            f"{jnp.shape(logits)[-1]} actions; expected {num_actions}")


class TruncationBootstrapWarning(UserWarning):
    """A trainer asked to bootstrap time-limit truncations cannot: the env's ``step``
    gives no ``info["final_obs"]``, so truncations are treated as terminations."""


def warn_no_final_obs(env_name: str) -> None:
    """Warn (once per message, Python's default filter) that ``env_name``'s truncations
    cannot be bootstrapped: its ``step`` returns no ``info["final_obs"]``."""
    warnings.warn(
        f"{env_name}: env.step's info has no 'final_obs', so time-limit truncations are "
        "treated as terminations (bootstrap_truncations=True cannot be kept); return "
        "info['final_obs'] (the observation before auto-reset), build the env on "
        "rljax.envs.Environment (its step adds it), or set bootstrap_truncations=False",
        TruncationBootstrapWarning, stacklevel=3)


def check_env(
    env: Any,
    env_params: Any,
    action: Any,
    *,
    num_envs: int,
    axis_name: str | None = None,
) -> tuple[Any, Any]:
    """Reset and step ``num_envs`` copies of ``env`` abstractly (``jax.eval_shape``: no
    compute) under ``jax.vmap(..., axis_name=axis_name)``, as a trainer does, and check the
    step's outputs with :func:`check_env_step`.

    Args:
      env: ``reset(key, params) -> (obs, state)``, ``step(key, state, action, params) ->
        (obs, state, reward, terminated, truncated, info)``.
      env_params: its parameters.
      action: one environment's example action (e.g. int32 ``[]`` zeros).
      num_envs: ``N``, the batch to trace.
      axis_name: the ``vmap`` axis name (the normalising wrappers need it).

    Returns:
      ``(obs, info)``: ``ShapeDtypeStruct`` pytrees of the reset's observations
      ``[N, ...]`` and the step's ``info`` (``None`` when ``step``'s info is not a dict).

    Raises:
      ContractError: as :func:`check_env_step`, naming ``env``'s functions.
    """
    keys = jax.random.split(jax.random.key(0), num_envs)
    actions = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (num_envs, *jnp.shape(a))),
                                     action)

    def one_step(keys, actions):
        obs, state = jax.vmap(env.reset, in_axes=(0, None), axis_name=axis_name)(
            keys, env_params)
        return obs, jax.vmap(env.step, in_axes=(0, 0, 0, None), axis_name=axis_name)(
            keys, state, actions, env_params)

    reset_obs, (step_obs, _, reward, terminated, truncated, info) = jax.eval_shape(
        one_step, keys, actions)
    reset_name, step_name = env_function_names(env)
    check_env_step(reset_name, step_name, reset_obs, step_obs, reward, terminated, truncated,
                   batch_ndim=1)
    return reset_obs, info if isinstance(info, dict) else None


def check_array_outputs(what: str, fn: Any, out: Any) -> None:
    """Check that ``fn`` (a sweep's per-seed function) returned a pytree of arrays (of any
    shapes: ``[]``, ``[U]``, ...).

    Args:
      what: the argument it was passed as, e.g. ``"train="``.
      fn: the user's function (named in the message).
      out: one seed's outputs (traced).

    Raises:
      ContractError: one line naming ``fn`` and the first leaf that is not an array or a
        number, e.g. ``train=my_train returned a str at ['name']; a sweep's outputs must be
        arrays``.
    """
    leaves, _ = jax.tree_util.tree_flatten_with_path(out)
    for path, leaf in leaves:
        if not (_is_array(leaf) or isinstance(leaf, int | float | bool | complex | np.generic)):
            raise ContractError(f"{what}{function_name(fn)} returned a {type(leaf).__name__} "
                                f"at {jax.tree_util.keystr(path) or 'the top'}; a sweep's "
                                "outputs must be arrays (or numbers)")
