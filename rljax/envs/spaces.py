"""Action and observation spaces: ``Discrete(n)`` and ``Box(low, high, shape)``.

The two spaces every comparison table needs, with gymnax's attribute names (``n``,
``shape``, ``dtype``, ``low``, ``high``, ``sample(key)``, ``contains(x)``) so gymnax users
read them as they read gymnax's. An environment declares ``action_space(params)`` and
``observation_space(params)``; a policy head declares which action spaces it supports
(categorical: :class:`Discrete`; diagonal Gaussian: :class:`Box`), and the PPO trainer
checks the pair before it compiles anything.

Spaces are plain Python objects (static: they are not pytrees and never cross a ``vmap``);
``sample`` and ``contains`` are jittable.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax.types import Array, PRNGKey


class Space:
    """Base class: ``sample(key) -> x`` and ``contains(x) -> bool []`` (jittable)."""

    shape: tuple[int, ...]
    dtype: Any

    def sample(self, key: PRNGKey) -> Array:
        """A uniformly random element (shape :attr:`shape`, dtype :attr:`dtype`)."""
        raise NotImplementedError

    def contains(self, x: Array) -> Array:
        """Whether ``x`` lies in the space: bool ``[]`` (jittable)."""
        raise NotImplementedError


class Discrete(Space):
    """The integers ``{0, ..., n - 1}``: an int32 scalar ``[]``.

    Args:
      n: number of actions (>= 1).
      dtype: integer dtype (int32).
    """

    def __init__(self, n: int, dtype: Any = jnp.int32):
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
            raise ValueError(f"Discrete.n: must be an integer >= 1, got {n!r}")
        self.n = int(n)
        self.shape: tuple[int, ...] = ()
        self.dtype = jnp.dtype(dtype)
        if not jnp.issubdtype(self.dtype, jnp.integer):
            raise ValueError(f"Discrete.dtype: must be an integer dtype, got {self.dtype}")

    def __repr__(self) -> str:
        return f"Discrete({self.n})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Discrete) and other.n == self.n and other.dtype == self.dtype

    def __hash__(self) -> int:
        return hash(("Discrete", self.n, str(self.dtype)))

    def sample(self, key: PRNGKey) -> Array:
        """Uniform over ``{0, ..., n - 1}``: ``[]`` of :attr:`dtype`."""
        return jax.random.randint(key, (), 0, self.n, dtype=self.dtype)

    def contains(self, x: Array) -> Array:
        """``0 <= x < n`` (and ``x`` integral): bool ``[]``."""
        x = jnp.asarray(x)
        integral = jnp.all(jnp.floor(x) == x) if jnp.issubdtype(x.dtype, jnp.floating) else True
        return jnp.logical_and(jnp.all((x >= 0) & (x < self.n)), integral)


class Box(Space):
    """A bounded (or unbounded, ``+-inf``) box ``low <= x <= high`` of a fixed shape.

    Args:
      low, high: bounds, scalars or arrays broadcastable to ``shape`` (``low <= high``
        everywhere).
      shape: the shape of one element (e.g. ``(1,)`` for Pendulum's torque); default the
        broadcast shape of ``low`` and ``high``.
      dtype: float32 by default.

    Attributes:
      low, high: numpy arrays of ``shape`` (host constants, so jitted code closes over
        them).
      bounded: whether every bound is finite (what a tanh-squashed head can map onto).
    """

    def __init__(self, low: Any, high: Any, shape: tuple[int, ...] | None = None,
                 dtype: Any = jnp.float32):
        low_np, high_np = np.asarray(low, np.float64), np.asarray(high, np.float64)
        if shape is None:
            shape = np.broadcast_shapes(low_np.shape, high_np.shape)
        try:
            shape = tuple(int(s) for s in shape)
        except TypeError as error:
            raise ValueError(f"Box.shape: must be a tuple of integers, got {shape!r}") from error
        if any(s < 0 for s in shape):
            raise ValueError(f"Box.shape: must be non-negative integers, got {shape!r}")
        try:
            low_np = np.broadcast_to(low_np, shape)
            high_np = np.broadcast_to(high_np, shape)
        except ValueError as error:
            raise ValueError(f"Box: low {low_np.shape} and high {high_np.shape} do not "
                             f"broadcast to shape {shape}") from error
        if np.any(np.isnan(low_np)) or np.any(np.isnan(high_np)) or np.any(low_np > high_np):
            raise ValueError("Box: needs low <= high everywhere (no NaN)")
        self.shape = shape
        self.dtype = jnp.dtype(dtype)
        if jnp.issubdtype(self.dtype, jnp.integer):  # infinite bounds -> the dtype's range
            info = np.iinfo(self.dtype)
            low_np = np.clip(low_np, info.min, info.max)
            high_np = np.clip(high_np, info.min, info.max)
        self.low = low_np.astype(self.dtype)
        self.high = high_np.astype(self.dtype)

    def __repr__(self) -> str:
        lo, hi = np.unique(self.low), np.unique(self.high)
        low = lo[0] if lo.size == 1 else "..."
        high = hi[0] if hi.size == 1 else "..."
        return f"Box({low}, {high}, {self.shape}, {self.dtype})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Box) and other.shape == self.shape
                and other.dtype == self.dtype and np.array_equal(other.low, self.low)
                and np.array_equal(other.high, self.high))

    def __hash__(self) -> int:
        return hash(("Box", self.shape, str(self.dtype)))

    @property
    def bounded(self) -> bool:
        """Whether every bound is finite."""
        return bool(np.all(np.isfinite(self.low)) and np.all(np.isfinite(self.high)))

    def sample(self, key: PRNGKey) -> Array:
        """Uniform in the box where bounded (standard normal along an unbounded axis):
        ``shape`` of :attr:`dtype`."""
        low = jnp.asarray(np.where(np.isfinite(self.low), self.low, 0.0), jnp.float32)
        high = jnp.asarray(np.where(np.isfinite(self.high), self.high, 0.0), jnp.float32)
        u_key, n_key = jax.random.split(key)
        uniform = jax.random.uniform(u_key, self.shape, minval=low, maxval=high)
        normal = jax.random.normal(n_key, self.shape)
        both = np.isfinite(self.low) & np.isfinite(self.high)
        return jnp.where(both, uniform, normal).astype(self.dtype)

    def contains(self, x: Array) -> Array:
        """Shape equal to :attr:`shape` and ``low <= x <= high`` everywhere: bool ``[]``."""
        x = jnp.asarray(x)
        if x.shape != self.shape:
            return jnp.asarray(False)
        return jnp.all((x >= self.low) & (x <= self.high))

    def clip(self, x: Array) -> Array:
        """``clip(x, low, high)`` (what an env step does with a Gaussian action): ``x`` of
        :attr:`shape` (or ``[..., *shape]``), the same shape back."""
        return jnp.clip(x, self.low, self.high)


def from_gymnax_space(space: Any) -> Space:
    """The rljax space equal to a gymnax (or gymnasium-like) ``Discrete`` / ``Box``
    (same ``n``, or same shape ``[...]``, bounds and dtype).

    Raises:
      ValueError: one line naming the space type for any other kind (``Dict``,
        ``Tuple``, ...).
    """
    kind = type(space).__name__
    if kind == "Discrete":
        return Discrete(int(space.n))
    if kind == "Box":
        return Box(np.asarray(space.low), np.asarray(space.high), tuple(space.shape),
                   dtype=space.dtype)
    raise ValueError(f"space: rljax handles Discrete and Box spaces, got {kind}")


def as_rljax_space(space: Any) -> Space:
    """``space`` itself if it is an rljax :class:`Space`, else :func:`from_gymnax_space`
    of it (what rljax code calls on ``env.action_space(params)``, whichever library's
    space an adapter returns). The shape is kept: ``[]`` for ``Discrete``, the box's
    ``shape`` (e.g. ``[A]``) for ``Box``."""
    return space if isinstance(space, Space) else from_gymnax_space(space)


def check_action(space: Space, action: Array, env_name: str = "env") -> None:
    """Raise a one-line ``ValueError`` if ``action``'s (static) shape or dtype cannot be
    one of ``space``'s actions (shape ``[]`` integer for :class:`Discrete`; ``shape`` and
    a float dtype for :class:`Box`). Works on tracers (only static facts are checked)."""
    shape, dtype = tuple(jnp.shape(action)), jnp.result_type(action)
    if isinstance(space, Discrete):
        if shape != () or not jnp.issubdtype(dtype, jnp.integer):
            raise ValueError(f"{env_name}: action must be an integer scalar [] in "
                             f"[0, {space.n}), got shape {list(shape)} dtype {dtype}")
    elif isinstance(space, Box):
        if shape != space.shape or not jnp.issubdtype(dtype, jnp.floating):
            raise ValueError(f"{env_name}: action must be a float array of shape "
                             f"{list(space.shape)} (Box), got shape {list(shape)} dtype {dtype}")


def env_action_space(env: Any, env_params: Any) -> Space | None:
    """``env.action_space(env_params)`` as an rljax space; for a duck-typed env with only
    ``num_actions``, ``Discrete(num_actions)``; ``None`` for one that declares neither
    (then the trainer trusts the policy head and checks nothing)."""
    if callable(getattr(env, "action_space", None)):
        return as_rljax_space(env.action_space(env_params))
    if hasattr(env, "num_actions"):
        return Discrete(int(env.num_actions))
    return None
