"""A uniform replay buffer that vmaps over seeds: a thin adapter over flashbax.

**Why flashbax** (InstaDeep's ``flashbax``, Apache-2.0; pinned in pyproject.toml): it is
the maintained JAX buffer library the JAX RL peers use (Stoix, purejaxql's DQN
baselines), it installs from PyPI with only dependencies rljax already has (chex, flax,
tensorstore through orbax-checkpoint), and measured here under jax / jaxlib 0.10.2 its
item buffer is pure and jit/vmap-safe: its state is a pytree of arrays, ``add`` is one
scatter, ``sample`` one ``jax.random.randint`` over the filled slots. Writing our own
would duplicate those forty lines; the adapter pins down the one contract rljax relies
on and tests it (tests/test_replay.py), so a later flashbax that changed it would fail
there, not in a training run.

The contract (one seed; vmap adds the seed axis)::

    buffer = replay_buffer(capacity=10_000, batch_size=128)
    state = buffer.init(example)          # example: one item, leaves without a batch axis
    state = buffer.add(state, items)      # items: leaves [N, ...], N <= capacity
    batch = buffer.sample(state, key)     # leaves [batch_size, ...]

* **Fixed capacity, circular insertion**: the ``N`` items of an ``add`` go to slots
  ``(i + j) % capacity``, ``j < N``, after the last write ``i``; when full, the oldest
  items are overwritten first.
* **Uniform sampling among the filled slots**: ``batch_size`` slots drawn independently
  and uniformly (with replacement) from the ``size`` filled ones; nothing unwritten is
  ever returned. Sample only once ``can_sample`` (``size >= min_size``; before any add
  the draw is from an empty range and meaningless).
* **Bitwise reproducible**: ``sample`` is a pure function of ``(state, key)``.
* **Vmaps over seeds**: the state is a pytree of arrays (flashbax's
  ``TrajectoryBufferState``: ``experience`` leaves ``[1, capacity, ...]``,
  ``current_index`` int32 ``[]``, ``is_full`` bool ``[]``), so ``jax.vmap`` over keys
  gives every seed its own buffer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import flashbax
import jax
import jax.numpy as jnp
from flashbax.buffers.trajectory_buffer import TrajectoryBufferState

from rljax.types import Array, PRNGKey

__all__ = ["ReplayBuffer", "replay_buffer"]

ReplayState = TrajectoryBufferState
"""The buffer's state (flashbax's ``TrajectoryBufferState``): ``experience`` (the items'
pytree, leaves ``[1, capacity, ...]``), ``current_index`` (int32 ``[]``, the next slot
written) and ``is_full`` (bool ``[]``)."""


class ReplayBuffer(NamedTuple):
    """A uniform replay buffer's pure functions (see the module docstring).

    Attributes:
      init: ``init(example) -> state``; ``example`` is one item (leaves without a batch
        axis, e.g. a transition with ``obs [D]``, ``action []``).
      add: ``add(state, items) -> state``; ``items`` has the example's structure with a
        leading ``[N]`` axis, ``1 <= N <= capacity``.
      sample: ``sample(state, key) -> items`` with leaves ``[batch_size, ...]``, drawn
        uniformly with replacement from the filled slots.
      can_sample: ``can_sample(state) -> bool []``: at least ``min_size`` items stored.
      size: ``size(state) -> int32 []``: the number of filled slots (``<= capacity``).
      capacity: the number of slots.
      batch_size: the number of items ``sample`` draws.
    """

    init: Callable[[Any], ReplayState]
    add: Callable[[ReplayState, Any], ReplayState]
    sample: Callable[[ReplayState, PRNGKey], Any]
    can_sample: Callable[[ReplayState], Array]
    size: Callable[[ReplayState], Array]
    capacity: int
    batch_size: int


def replay_buffer(capacity: int, batch_size: int, *, min_size: int = 1) -> ReplayBuffer:
    """Build a uniform replay buffer of ``capacity`` items (flashbax's item buffer).

    Args:
      capacity: the number of slots (>= 1).
      batch_size: items per ``sample`` (``1 <= batch_size <= capacity``).
      min_size: ``can_sample`` is true from this many stored items on
        (``1 <= min_size <= capacity``).

    Returns:
      :class:`ReplayBuffer`: ``add`` takes items ``[N, ...]``, ``sample`` returns
      ``[batch_size, ...]``.

    Raises:
      ValueError: at build time, naming the argument.
    """
    for name, value in (("capacity", capacity), ("batch_size", batch_size),
                        ("min_size", min_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")
    if batch_size > capacity:
        raise ValueError(f"batch_size: must be <= capacity ({capacity}), got {batch_size}")
    if min_size > capacity:
        raise ValueError(f"min_size: must be <= capacity ({capacity}), got {min_size}")
    inner = flashbax.make_item_buffer(max_length=capacity, min_length=min_size,
                                      sample_batch_size=batch_size, add_batches=True)

    def init(example: Any) -> ReplayState:
        return inner.init(jax.tree.map(jnp.asarray, example))

    def add(state: ReplayState, items: Any) -> ReplayState:
        sizes = {jnp.shape(x)[0] if jnp.ndim(x) else None for x in jax.tree.leaves(items)}
        if len(sizes) != 1 or None in sizes or not 1 <= next(iter(sizes)) <= capacity:
            raise ValueError(f"replay_buffer.add: items must share a leading axis [N] with "
                             f"1 <= N <= capacity ({capacity}), got leading sizes {sizes}")
        return inner.add(state, items)

    def sample(state: ReplayState, key: PRNGKey) -> Any:
        return inner.sample(state, key).experience

    def can_sample(state: ReplayState) -> Array:
        return inner.can_sample(state)

    def size(state: ReplayState) -> Array:
        return jnp.where(state.is_full, capacity, state.current_index).astype(jnp.int32)

    return ReplayBuffer(init=init, add=add, sample=sample, can_sample=can_sample, size=size,
                        capacity=capacity, batch_size=batch_size)
