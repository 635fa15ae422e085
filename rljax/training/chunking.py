"""Chunked runs: how many updates a chunked run (:func:`rljax.training.make_ppo_chunks`,
:class:`rljax.sweep.ChunkedSweep`) takes per chunk, derived from the run's length so a
user who changes ``total_steps`` does not also have to find a divisor by hand; and
:func:`chunked_program`, which cuts any trainer's ``start`` / ``run_updates`` into the
``init`` / ``advance`` / ``finish`` a :class:`~rljax.sweep.ChunkedSweep` runs (PPO and
the off-policy trainers).

A chunk of ``C`` updates must divide the run's ``U`` updates and be a multiple of the
``W`` updates per logged row. :func:`auto_chunk_updates` picks the largest such ``C`` with
about ``target_chunks`` chunks or more (progress and checkpoints between chunks), and
:func:`chunk_size_error` names the values that would work when a given ``C`` does not.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rljax.nonfinite import NONFINITE_STEP, first_nonfinite_step
from rljax.types import Array, PRNGKey

MAX_TOTAL_STEPS = 10**12
"""The most environment steps per seed a study accepts: keeps the divisor search
(``O(sqrt(U))`` over ``U`` updates) instant."""


def chunk_sizes(num_updates: int, log_every: int = 1) -> list[int]:
    """Every valid chunk size, ascending: the divisors ``C`` of ``num_updates`` with
    ``C % log_every == 0`` (``O(sqrt(U))``)."""
    small = [d for d in range(1, math.isqrt(num_updates) + 1) if num_updates % d == 0]
    return sorted(d for d in {*small, *(num_updates // d for d in small)} if d % log_every == 0)


def auto_chunk_updates(num_updates: int, log_every: int = 1, target_chunks: int = 16) -> int:
    """The largest valid chunk size ``C <= max(1, num_updates // target_chunks)`` (see
    :func:`chunk_sizes`), or ``num_updates`` (one chunk) if there is none.

    E.g. 976 updates, ``log_every=1``: 61 (16 chunks); 977 (a prime): 1.
    """
    target = max(1, num_updates // target_chunks)
    fitting = [c for c in chunk_sizes(num_updates, log_every) if c <= target]
    return max(fitting) if fitting else num_updates


def chunk_size_error(chunk_updates: int, num_updates: int, log_every: int = 1) -> str | None:
    """``None`` if ``chunk_updates`` is a valid chunk size, else one line naming the field
    and up to 12 values that would work (and ``0``, the automatic size)."""
    if num_updates % chunk_updates == 0 and chunk_updates % log_every == 0:
        return None
    sizes = chunk_sizes(num_updates, log_every)
    shown = ", ".join(map(str, sizes[:12])) + (", ..." if len(sizes) > 12 else "")
    return (f"chunk_updates: must divide the number of updates total_steps // (num_envs * "
            f"num_steps) = {num_updates} and be a multiple of log_every = {log_every}, got "
            f"{chunk_updates}; values that work: {shown} (or 0: automatic, "
            f"{auto_chunk_updates(num_updates, log_every)})")


#: Logs summed over a window of updates (the others are averaged).
SUMMED_LOGS = ("return_sum", "episodes")


def window_aggregate(x: Array, window: int, summed: bool) -> Array:
    """``[C] -> [C / window]``: sums (``summed``) or means of consecutive windows."""
    rows = x.reshape(x.shape[0] // window, window, *x.shape[1:])
    return jnp.sum(rows, axis=1, dtype=x.dtype) if summed else jnp.mean(rows, axis=1)


class ChunkState(NamedTuple):
    """One seed's run between chunks; every key lives here, so a run restored from a
    saved state continues bitwise.

    Attributes:
      carry: the trainer's carry (parameters, optimizer and transform state, buffer,
        environments).
      run_key: typed key ``[]``; update ``u`` uses ``fold_in(run_key, u)``.
      update: ``int32 []``, updates done so far.
      nonfinite_step: ``int32 []``, the first update after which the parameters or the
        loss were non-finite, ``-1`` if none so far.
    """

    carry: Any
    run_key: PRNGKey
    update: Array
    nonfinite_step: Array


class ChunkedRun(NamedTuple):
    """A run cut into chunks for :class:`rljax.sweep.ChunkedSweep` (unpacks as ``init,
    advance, finish, num_chunks``; every trainer's: ``rljax.training.PPOChunks`` is this
    class). One seed each: ``init(key [], hparams=None) -> ChunkState``; ``advance(state,
    hparams=None) -> (state, logs)`` with ``[C / W]`` log rows per chunk; ``finish(state,
    hparams=None) -> {NONFINITE_STEP: int32 [], ...}``."""

    init: Callable[..., Any]
    advance: Callable[..., tuple[Any, dict[str, Array]]]
    finish: Callable[..., dict[str, Array]]
    num_chunks: int


def check_chunking(num_updates: int, updates_per_chunk: int, log_every: int) -> None:
    """One-line ``ValueError`` naming the argument unless ``updates_per_chunk`` divides
    ``num_updates`` and ``log_every`` divides ``updates_per_chunk``."""
    for name, value, whole, what in (
        ("updates_per_chunk", updates_per_chunk, num_updates, "the number of updates"),
        ("log_every", log_every, updates_per_chunk, "updates_per_chunk"),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")
        if whole % value:
            raise ValueError(f"{name}: must divide {what} ({whole}), got {value}")


def chunked_program(start: Callable, run_updates: Callable, num_updates: int, *,
                    updates_per_chunk: int, log_every: int = 1,
                    evaluate: Callable | None = None,
                    check_hparams: Callable | None = None) -> ChunkedRun:
    """Cut a trainer's run into ``num_updates / updates_per_chunk`` chunks.

    Args:
      start: ``start(key, hparams) -> (carry, run_key)``.
      run_updates: ``run_updates(carry, run_key, first, count, hparams) -> (carry, logs
        {name: [count]}, finite bool [count])``, updates ``first .. first + count - 1``.
      num_updates: U.
      updates_per_chunk: C updates per ``advance``; must divide U.
      log_every: W updates per logged row (``return_sum`` / ``episodes`` summed over the
        window, the other logs averaged); must divide C.
      evaluate: ``evaluate(carry, key) -> {name: array}``, run by ``finish`` with key
        ``fold_in(run_key, U)``; ``None``: none.
      check_hparams: ``check_hparams(hparams)`` raising ``ValueError`` for an untraceable
        name (``finish`` calls it; ``start`` already does).

    Returns:
      :class:`ChunkedRun`: ``init(key, hparams=None)``, ``advance(state, hparams=None)
      -> (state, logs {name: [C / W]})``, ``finish(state, hparams=None) ->
      {NONFINITE_STEP: int32 [], ...evaluate's}``, ``num_chunks = U / C``. The chunks run
      the updates, with the keys, of one ``run_updates(carry, run_key, 0, U, hparams)``:
      bitwise so within one XLA program; compiled separately (e.g. vmapped over seeds)
      the losses may differ in float32 ulps.
    """
    check_chunking(num_updates, updates_per_chunk, log_every)

    def init(key: PRNGKey, hparams: Mapping[str, Array] | None = None) -> Any:
        carry, run_key = start(key, hparams)
        return ChunkState(carry, run_key, jnp.int32(0), jnp.int32(-1))

    def advance(state: Any, hparams: Mapping[str, Array] | None = None):
        carry, logs, finite = run_updates(state.carry, state.run_key, state.update,
                                          updates_per_chunk, hparams)
        in_chunk = first_nonfinite_step(finite)
        nonfinite_step = jnp.where(jnp.logical_and(state.nonfinite_step < 0, in_chunk >= 0),
                                   state.update + in_chunk, state.nonfinite_step)
        if log_every > 1:
            logs = {name: window_aggregate(x, log_every, name in SUMMED_LOGS)
                    for name, x in logs.items()}
        return ChunkState(carry, state.run_key, state.update + updates_per_chunk,
                          nonfinite_step), logs

    def finish(state: Any,
               hparams: Mapping[str, Array] | None = None) -> dict[str, Array]:
        if check_hparams is not None:
            check_hparams(hparams)
        out = {NONFINITE_STEP: state.nonfinite_step}
        if evaluate is not None:
            out.update(evaluate(state.carry, jax.random.fold_in(state.run_key, num_updates)))
        return out

    return ChunkedRun(init, advance, finish, num_updates // updates_per_chunk)
