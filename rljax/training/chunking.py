"""How many updates a chunked run (:func:`rljax.training.make_ppo_chunks`,
:class:`rljax.sweep.ChunkedSweep`) takes per chunk: derived from the run's length, so a
user who changes ``total_steps`` does not also have to find a divisor by hand.

A chunk of ``C`` updates must divide the run's ``U`` updates and be a multiple of the
``W`` updates per logged row. :func:`auto_chunk_updates` picks the largest such ``C`` with
about ``target_chunks`` chunks or more (progress and checkpoints between chunks), and
:func:`chunk_size_error` names the values that would work when a given ``C`` does not.
"""

from __future__ import annotations

import math

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
