"""Argument checks shared by :mod:`rljax.stats` (one-line ``ValueError`` messages)."""

from __future__ import annotations

import warnings
from typing import Any

import jax
import numpy as np

METHODS = ("percentile", "basic", "bca")
NAN_POLICIES = ("raise", "omit")

# Shapes with at least this many times more tasks than runs draw a "transposed?" warning.
# Real suites stay below it (Atari 100k: 5 runs x 26 games; ALE-57: 3-5 runs x 57 games).
TRANSPOSE_WARN_RATIO = 20


def check_reps(reps: Any) -> int:
    """Returns ``reps`` as an int, or raises if it is not an integer >= 1."""
    if isinstance(reps, bool) or not isinstance(reps, (int, np.integer)) or reps < 1:
        raise ValueError(f"reps must be an integer >= 1, got {reps!r}")
    return int(reps)


def check_confidence(confidence: Any) -> float:
    """Returns ``confidence`` as a float, or raises if it is not strictly inside (0, 1)."""
    try:
        value = float(confidence)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0.0 < value < 1.0:
        raise ValueError(
            f"confidence must be a number strictly between 0 and 1, got {confidence!r}"
        )
    return value


def check_method(method: Any) -> str:
    """Returns ``method`` or raises if it is not one of :data:`METHODS`."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(map(repr, METHODS))}, got {method!r}")
    return method


def check_nan_policy(nan_policy: Any) -> str:
    """Returns ``nan_policy`` or raises if it is not one of :data:`NAN_POLICIES`."""
    if nan_policy not in NAN_POLICIES:
        raise ValueError(
            f"nan_policy must be one of {', '.join(map(repr, NAN_POLICIES))}, got {nan_policy!r}"
        )
    return nan_policy


def check_key(key: Any) -> jax.Array:
    """Checks that ``key`` is a JAX PRNG key (typed ``jax.random.key`` or raw ``PRNGKey``)."""
    if isinstance(key, jax.Array):
        if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) and key.ndim == 0:
            return key
        if key.dtype == np.uint32 and key.shape == (2,):
            return key
    raise ValueError(
        "key must be a single JAX PRNG key (jax.random.key(seed)), got "
        f"{type(key).__name__} {getattr(key, 'shape', '')}"
    )


def _describe(name: str | None) -> str:
    return f"scores of {name!r}" if name is not None else "scores"


def check_scores(
    scores: Any,
    name: str | None = None,
    *,
    nan_policy: str = "raise",
    ndim: int | tuple[int, ...] = 2,
    warn_transposed: bool = True,
) -> np.ndarray:
    """Validates a score array shaped ``[num_runs, num_tasks]`` (rliable's convention).

    Args:
      scores: array-like of shape ``[num_runs, num_tasks]`` (or the ranks in ``ndim``).
      name: algorithm name used in messages.
      nan_policy: ``"raise"`` rejects NaN; ``"omit"`` lets NaN through (treated as missing
        runs by the caller). Infinite values are always rejected.
      ndim: allowed rank(s).
      warn_transposed: warn when there are many more tasks than runs.

    Returns:
      The scores as a float64 numpy array.
    """
    check_nan_policy(nan_policy)
    allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    try:
        array = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"{_describe(name)} must be a numeric array, got {type(scores).__name__}"
        ) from err
    if array.ndim not in allowed:
        want = " or ".join(f"rank {r}" for r in allowed)
        shape = "[num_runs, num_tasks]" if allowed == (2,) else "[num_runs, num_tasks, ...]"
        raise ValueError(
            f"{_describe(name)} must have {want} {shape}, got shape {array.shape}"
        )
    if array.shape[0] < 1 or (array.ndim > 1 and array.shape[1] < 1):
        raise ValueError(
            f"{_describe(name)} must have at least one run and one task, got shape {array.shape}"
        )
    bad = np.isinf(array) if nan_policy == "omit" else ~np.isfinite(array)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        value = array[where]
        hint = ""
        if nan_policy == "raise":
            hint = " (pass nan_policy='omit' to treat NaN as missing runs)"
        raise ValueError(
            f"{_describe(name)} has a non-finite value {value} at position {where} "
            f"(run, task{', ...' if array.ndim > 2 else ''}){hint if np.isnan(value) else ''}"
        )
    if nan_policy == "omit" and array.ndim >= 2:
        all_missing = np.all(np.isnan(array), axis=0)
        if all_missing.any():
            where = tuple(int(i) for i in np.argwhere(all_missing)[0])
            raise ValueError(f"{_describe(name)} has no finite run for task {where}")
    if warn_transposed and array.ndim >= 2:
        runs, tasks = array.shape[:2]
        if tasks >= TRANSPOSE_WARN_RATIO * runs:
            warnings.warn(
                f"{_describe(name)} has shape {array.shape}: {tasks} tasks but only {runs} "
                "run(s). rljax.stats expects [num_runs, num_tasks] (rliable's convention); "
                "was the array passed transposed?",
                UserWarning,
                stacklevel=3,
            )
    return array


def check_sample(sample: Any, position: int, *, allow_nan: bool = True) -> np.ndarray:
    """Validates one 1-D sample of per-seed values for :func:`bootstrap_ci`."""
    try:
        array = np.asarray(sample)
    except (TypeError, ValueError) as err:
        raise ValueError(f"samples[{position}] must be a numeric array") from err
    if array.ndim != 1:
        raise ValueError(f"samples[{position}] must be 1-D [n], got shape {array.shape}")
    if array.shape[0] < 1:
        raise ValueError(f"samples[{position}] must hold at least one value")
    if not np.issubdtype(array.dtype, np.number) and array.dtype != np.bool_:
        raise ValueError(f"samples[{position}] must be numeric, got dtype {array.dtype}")
    if not allow_nan and np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
        where = int(np.argwhere(~np.isfinite(array))[0][0])
        raise ValueError(f"samples[{position}] has a non-finite value at index {where}")
    return array
