"""Stratified bootstrap interval estimates of aggregate metrics (rliable-compatible).

A score array ``[num_runs N, num_tasks M]`` is resampled *within each task*: replicate
``b`` takes, for every task ``m``, ``N`` run indices drawn with replacement from that
task's runs (optionally also the tasks themselves, ``task_bootstrap=True``: column ``m`` of
the resample then comes from a task drawn with replacement). This is rliable's
``StratifiedBootstrap``; point estimates are rliable's to 1e-12 (float64 numpy, see
:mod:`rljax.stats.aggregates`) and intervals agree within Monte Carlo error.

Speed: every metric is a *kernel* ``kernel(values [N, M], flat [B, N, M], params) -> [B,
...]`` evaluating ``B`` resamples at once from flat indices into ``values``. The named
metrics avoid sorting per resample: the trimmed means (IQM) sort the ``N*M`` pooled scores
once, count how often each sorted position is drawn (one scatter-add), and weigh the
sorted scores by how much of each position's count falls inside the kept middle
``[L, N*M - L)`` of the cumulative count. Cost per resample is ``O(N*M)``, versus
``O(N*M log(N*M))`` for a sort or partition.

Keys: each algorithm ``name`` uses ``jax.random.fold_in(key, crc32(name))``, so its interval
does not change when other algorithms are added; ``paired=True`` (algorithms run on the
same seeds) uses one key, hence the same resampled runs, for every algorithm.

Source: Agarwal et al., "Deep RL at the Edge of the Statistical Precipice", NeurIPS 2021,
Sec. 4.1-4.3 and App. A.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rljax.stats import aggregates
from rljax.stats._validation import (
    check_confidence,
    check_key,
    check_method,
    check_nan_policy,
    check_reps,
    check_scores,
)
from rljax.stats.bootstrap import (
    Interval,
    as_interval,
    interval_from_replicates,
    jackknife_acceleration,
    map_chunks,
    resample_indices,
)

Kernel = Callable[[jax.Array, jax.Array, Any], jax.Array]


class Metric(NamedTuple):
    """An aggregate metric: exact float64 point estimate plus a vectorised bootstrap kernel.

    Attributes:
      name: label used in reports.
      point: ``point(scores [N, M] float64 numpy, params) -> float or [...]`` (exact).
      kernel: ``kernel(values [N, M], flat [B, N, M] int32, params) -> [B, ...]``: the
        metric of the ``B`` resamples ``values.reshape(-1)[flat]``.
      params: pytree of array parameters passed to both (e.g. ``gamma``, thresholds).
    """

    name: str
    point: Callable[[np.ndarray, Any], Any]
    kernel: Kernel
    params: Any = None


# ----------------------------------------------------------------------------- kernels


def gather(values: jax.Array, flat: jax.Array) -> jax.Array:
    """``values.reshape(-1)[flat]``: the resampled score arrays ``[B, N, M]``."""
    return values.reshape(-1)[flat]


def _mean_kernel(values, flat, params):
    del params
    return jnp.mean(gather(values, flat), axis=(1, 2))


def _median_kernel(values, flat, params):
    del params
    return jnp.median(jnp.mean(gather(values, flat), axis=1), axis=1)


def _optimality_gap_kernel(values, flat, gamma):
    gamma = jnp.asarray(gamma, values.dtype)
    return gamma - jnp.mean(jnp.minimum(gather(values, flat), gamma), axis=(1, 2))


def cumsum_rows(counts: jax.Array, block: int = 16) -> jax.Array:
    """Inclusive cumulative sum along the last axis of ``[B, K]`` (blocked, CPU-friendly).

    ``jnp.cumsum`` lowers to a slow reduce-window on XLA:CPU; this computes within-block
    prefixes with a ``[block, block]`` triangular matmul and adds the block offsets.
    Exact for integer-valued float32 counts below 2**24.
    """
    rows, k = counts.shape
    pad = (-k) % block
    x = jnp.pad(counts, ((0, 0), (0, pad))).reshape(rows, (k + pad) // block, block)
    tri = jnp.triu(jnp.ones((block, block), counts.dtype))
    within = x @ tri
    totals = within[:, :, -1]
    offsets = jnp.cumsum(totals, axis=1) - totals
    return (within + offsets[:, :, None]).reshape(rows, k + pad)[:, :k]


def position_counts(positions: jax.Array, size: int) -> jax.Array:
    """Per-row histogram ``counts[b, k] = #{i : positions[b, i] == k}`` as float32 ``[B, size]``."""
    rows = positions.shape[0]
    offsets = (jnp.arange(rows, dtype=jnp.int32) * size)[:, None]
    flat = (positions.reshape(rows, -1) + offsets).reshape(-1)
    counts = jnp.zeros(rows * size, jnp.float32).at[flat].add(1.0, mode="promise_in_bounds")
    return counts.reshape(rows, size)


def _trimmed_kernel(values, flat, proportion):
    pooled = values.reshape(-1)
    total = pooled.shape[0]
    draws = flat.shape[1] * flat.shape[2]
    order = jnp.argsort(pooled)
    sorted_values = pooled[order]
    rank = jnp.zeros(total, jnp.int32).at[order].set(jnp.arange(total, dtype=jnp.int32))
    cut = jnp.floor(jnp.asarray(proportion, jnp.float32) * draws)
    counts = position_counts(rank[flat], total)
    upto = cumsum_rows(counts)
    before = upto - counts
    kept = jnp.clip(jnp.minimum(upto, draws - cut) - jnp.maximum(before, cut), 0.0)
    return (kept @ sorted_values.astype(jnp.float32)).astype(values.dtype) / (draws - 2 * cut)


def _profile_kernel(values, flat, taus):
    """Fraction of pooled resampled scores above each threshold, ``[B, T]``."""
    order = jnp.argsort(taus)
    sorted_taus = taus[order]
    # bins[v] = #{t : tau_t < v}: v > tau_(t) iff t < bins[v].
    bins = jnp.searchsorted(sorted_taus, values.reshape(-1), side="left").astype(jnp.int32)
    num = taus.shape[0]
    counts = position_counts(bins[flat], num + 1)
    above = counts.sum(axis=1, keepdims=True) - cumsum_rows(counts)  # #{bin > t}
    frac = above[:, :num] / (flat.shape[1] * flat.shape[2])
    return jnp.zeros_like(frac).at[:, order].set(frac)


def _average_profile_kernel(values, flat, taus):
    task_means = jnp.mean(gather(values, flat), axis=1)  # [B, M]
    return jnp.mean(task_means[:, :, None] > taus[None, None, :], axis=1)


def _nan_trimmed(x, proportion):
    x = jnp.sort(x.reshape(-1))  # NaN sort last
    valid = jnp.sum(~jnp.isnan(x))
    cut = jnp.floor(proportion * valid)
    pos = jnp.arange(x.shape[0])
    keep = (pos >= cut) & (pos < valid - cut)
    return jnp.sum(jnp.where(keep, x, 0.0)) / (valid - 2 * cut)


def _nan_kernel(kind):
    def kernel(values, flat, params):
        res = gather(values, flat)
        if kind == "mean":
            return jnp.mean(jnp.nanmean(res, axis=1), axis=1)
        if kind == "median":
            return jnp.median(jnp.nanmean(res, axis=1), axis=1)
        if kind == "optimality_gap":
            gamma = jnp.asarray(params, values.dtype)
            return gamma - jnp.nanmean(jnp.minimum(res, gamma), axis=(1, 2))
        return jax.vmap(lambda r: _nan_trimmed(r, params))(res)

    return kernel


_NAN_KERNELS = {k: _nan_kernel(k) for k in ("mean", "median", "optimality_gap", "trimmed")}


@functools.cache
def _callable_kernel(fn: Callable[[jax.Array], jax.Array]) -> Kernel:
    def kernel(values, flat, params):
        del params
        return jax.vmap(fn)(gather(values, flat))

    return kernel


# ----------------------------------------------------------------------------- metrics


def _point_profile(scores, taus):
    return np.mean(scores.reshape(-1)[:, None] > np.asarray(taus)[None, :], axis=0)


def _point_average_profile(scores, taus):
    return np.mean(np.mean(scores, axis=0)[:, None] > np.asarray(taus)[None, :], axis=0)


MEAN = Metric("mean", lambda s, p: aggregates.aggregate_mean(s), _mean_kernel)
MEDIAN = Metric("median", lambda s, p: aggregates.aggregate_median(s), _median_kernel)
IQM = Metric("iqm", lambda s, p: aggregates.aggregate_trimmed_mean(s, p), _trimmed_kernel, 0.25)
OPTIMALITY_GAP = Metric(
    "optimality_gap", lambda s, p: aggregates.aggregate_optimality_gap(s, p),
    _optimality_gap_kernel, 1.0,
)
METRICS: dict[str, Metric] = {m.name: m for m in (MEAN, MEDIAN, IQM, OPTIMALITY_GAP)}
"""The named metrics (``"mean"``, ``"median"``, ``"iqm"``, ``"optimality_gap"``) that a
``metric="..."`` argument accepts; each maps scores ``[N, M]`` (runs x tasks) to a
scalar."""


def trimmed_mean_metric(proportion: float) -> Metric:
    """Metric for the ``proportion``-trimmed mean of pooled scores (IQM: 0.25).

    Like every :class:`Metric`: scores ``[N, M]`` (runs x tasks) in, a scalar out.
    """
    if not 0.0 <= float(proportion) < 0.5:
        raise ValueError(f"proportion must be in [0, 0.5), got {proportion!r}")
    return IQM._replace(name=f"trimmed_mean({proportion:g})", params=float(proportion))


def optimality_gap_metric(gamma: float = 1.0) -> Metric:
    """Metric for the optimality gap at target ``gamma``.

    Like every :class:`Metric`: scores ``[N, M]`` (runs x tasks) in, a scalar out.
    """
    return OPTIMALITY_GAP._replace(name=f"optimality_gap({gamma:g})", params=float(gamma))


def profile_metric(taus, *, use_score_distribution: bool = True) -> Metric:
    """Metric for a performance profile at thresholds ``taus`` ``[T]``.

    Run-score distribution ``F(tau) = (1/(N*M)) sum_{n,m} [x[n, m] > tau]`` (default), or the
    average-score distribution ``(1/M) sum_m [mean_n x[n, m] > tau]``.
    """
    taus = np.asarray(taus, dtype=np.float64)
    if taus.ndim != 1 or taus.size < 1 or not np.isfinite(taus).all():
        raise ValueError(f"taus must be a non-empty 1-D array of finite thresholds, got {taus!r}")
    if use_score_distribution:
        return Metric("score_distribution", _point_profile, _profile_kernel, taus)
    return Metric("average_score_distribution", _point_average_profile,
                  _average_profile_kernel, taus)


def resolve_metric(metric: str | Metric | Callable, nan_policy: str = "raise") -> Metric:
    """Returns the :class:`Metric` for a name, a Metric, or a jnp callable ``[N, M] -> ...``."""
    if isinstance(metric, Metric):
        resolved = metric
    elif isinstance(metric, str):
        if metric not in METRICS:
            raise ValueError(
                f"metric must be one of {', '.join(map(repr, METRICS))} or a callable, "
                f"got {metric!r}"
            )
        resolved = METRICS[metric]
    elif callable(metric):
        fn = metric
        name = getattr(fn, "__name__", "metric")
        return Metric(name, lambda s, p: np.asarray(fn(jnp.asarray(s)), np.float64),
                      _callable_kernel(fn))
    else:
        raise ValueError(f"metric must be a name, a Metric or a callable, got {metric!r}")
    if nan_policy == "omit":
        kind = {_mean_kernel: "mean", _median_kernel: "median",
                _optimality_gap_kernel: "optimality_gap", _trimmed_kernel: "trimmed"}.get(
                    resolved.kernel)
        if kind is not None:
            point = {
                "mean": lambda s, p: aggregates.aggregate_mean(s, nan_policy="omit"),
                "median": lambda s, p: aggregates.aggregate_median(s, nan_policy="omit"),
                "optimality_gap": lambda s, p: aggregates.aggregate_optimality_gap(
                    s, p, nan_policy="omit"),
                "trimmed": lambda s, p: aggregates.aggregate_trimmed_mean(
                    s, p, nan_policy="omit"),
            }[kind]
            resolved = resolved._replace(point=point, kernel=_NAN_KERNELS[kind])
    return resolved


# ----------------------------------------------------------------------------- resampling


def stratified_flat_indices(key: jax.Array, num_runs: int, num_tasks: int, batch: int,
                            task_bootstrap: bool = False) -> jax.Array:
    """Flat indices ``[B, N, M]`` of ``B`` stratified resamples of an ``[N, M]`` array.

    ``flat[b, i, m] = run[b, i, m] * M + task[b, m]`` with ``run`` uniform in ``[0, N)``
    and ``task[b, m] = m`` (or uniform in ``[0, M)`` with ``task_bootstrap``).
    """
    run_key, task_key = jax.random.split(key)
    runs = resample_indices(run_key, num_runs, (batch, num_runs, num_tasks))
    if task_bootstrap:
        tasks = resample_indices(task_key, num_tasks, (batch, 1, num_tasks))
    else:
        tasks = jnp.arange(num_tasks, dtype=jnp.int32)[None, None, :]
    return runs * num_tasks + tasks


@functools.partial(jax.jit, static_argnames=("kernel", "reps", "task_bootstrap"))
def _stratified(kernel, values, params, key, reps, task_bootstrap):
    num_runs, num_tasks = values.shape[:2]

    def one_chunk(chunk_key, chunk):
        flat = stratified_flat_indices(chunk_key, num_runs, num_tasks, chunk, task_bootstrap)
        if values.ndim == 3:  # checkpoints: the same resampled runs at every checkpoint
            return jnp.moveaxis(jax.vmap(kernel, in_axes=(2, None, None))(values, flat, params),
                                0, 1)
        return kernel(values, flat, params)

    return map_chunks(one_chunk, key, reps, num_runs * num_tasks)


@functools.partial(jax.jit, static_argnames=("kernel",))
def _identity_and_jackknife(kernel, values, params):
    """Kernel on the data itself ``[...]`` and leave-one-run-out values ``[N, ...]``."""
    num_runs, num_tasks = values.shape[:2]
    grid = jnp.arange(num_runs * num_tasks, dtype=jnp.int32).reshape(num_runs, num_tasks)

    def apply(flat):
        if values.ndim == 3:
            return jax.vmap(kernel, in_axes=(2, None, None))(values, flat[None], params)[:, 0]
        return kernel(values, flat[None], params)[0]

    rows = jnp.arange(num_runs - 1)
    keep = rows[None, :] + (rows[None, :] >= jnp.arange(num_runs)[:, None])  # [N, N-1]
    jack = jax.lax.map(lambda k: apply(grid[k]), keep, batch_size=64)
    return apply(grid), jack


def algorithm_key(key: jax.Array, name: str) -> jax.Array:
    """The key of algorithm ``name``: ``fold_in(key, crc32(name))`` (stable across runs)."""
    return jax.random.fold_in(key, zlib.crc32(str(name).encode()) & 0x7FFFFFFF)


def stratified_replicates(scores, metric: str | Metric | Callable = "iqm", *,
                          key: jax.Array, reps: int = 2000, task_bootstrap: bool = False,
                          nan_policy: str = "raise") -> np.ndarray:
    """Stratified bootstrap replicates of ``metric`` on one score array.

    Args:
      scores: ``[N, M]`` (or ``[N, M, K]`` checkpoints: the same resampled runs are used at
        every checkpoint) scores.
      metric: a name in :data:`METRICS`, a :class:`Metric`, or a jnp callable ``[N, M] ->
        scalar/[...]``.
      key: JAX PRNG key (used as is).
      reps: number of resamples.
      task_bootstrap: also resample tasks.
      nan_policy: ``"raise"`` or ``"omit"`` (NaN = missing run).

    Returns:
      ``[reps, ...]`` replicates (``[reps, K, ...]`` with checkpoints).
    """
    key = check_key(key)
    reps = check_reps(reps)
    nan_policy = check_nan_policy(nan_policy)
    scores = check_scores(scores, nan_policy=nan_policy, ndim=(2, 3))
    m = resolve_metric(metric, nan_policy)
    return np.asarray(_stratified(m.kernel, jnp.asarray(scores), m.params, key, reps,
                                  bool(task_bootstrap)))


def interval_estimate(scores, metric: str | Metric | Callable = "iqm", *, key: jax.Array,
                      reps: int = 2000, confidence: float = 0.95,
                      method: str = "percentile", task_bootstrap: bool = False,
                      nan_policy: str = "raise", name: str | None = None) -> Interval:
    """Point estimate and stratified-bootstrap interval of ``metric`` on one score array.

    Args:
      scores: ``[N, M]`` scores (``[N, M, K]`` for per-checkpoint metrics).
      metric: see :func:`stratified_replicates`.
      key: JAX PRNG key (used as is).
      reps: number of resamples (>= 1).
      confidence: coverage, strictly between 0 and 1.
      method: ``"percentile"``, ``"basic"`` or ``"bca"`` (jackknife leaves out one run
        across all tasks, as arch/rliable do).
      task_bootstrap: also resample tasks.
      nan_policy: ``"raise"`` or ``"omit"``.
      name: algorithm name for error messages.

    Returns:
      :class:`Interval` (floats, or arrays for vector metrics).
    """
    key = check_key(key)
    reps = check_reps(reps)
    confidence = check_confidence(confidence)
    method = check_method(method)
    nan_policy = check_nan_policy(nan_policy)
    scores = check_scores(scores, name, nan_policy=nan_policy, ndim=(2, 3))
    m = resolve_metric(metric, nan_policy)
    if scores.ndim == 3:
        point = np.stack([np.asarray(m.point(scores[:, :, k], m.params), np.float64)
                          for k in range(scores.shape[2])])
    else:
        point = np.asarray(m.point(scores, m.params), np.float64)
    values = jnp.asarray(scores)
    replicates = np.asarray(_stratified(m.kernel, values, m.params, key, reps,
                                        bool(task_bootstrap)))
    acceleration, point_for_bias = 0.0, None
    if method == "bca":
        if scores.shape[0] < 2:
            raise ValueError(f"method='bca' needs at least 2 runs, got {scores.shape[0]}")
        same, jack = _identity_and_jackknife(m.kernel, values, m.params)
        point_for_bias = np.asarray(same)
        acceleration = jackknife_acceleration([np.asarray(jack)])
    low, high = interval_from_replicates(replicates, point, confidence=confidence,
                                         method=method, point_for_bias=point_for_bias,
                                         acceleration=acceleration)
    return as_interval(point, low, high)


def interval_estimates(score_dict: Mapping[str, Any], metric: str | Metric | Callable = "iqm",
                       *, key: jax.Array, reps: int = 2000, confidence: float = 0.95,
                       method: str = "percentile", task_bootstrap: bool = False,
                       paired: bool = False, nan_policy: str = "raise") -> dict[str, Interval]:
    """Point estimates and stratified-bootstrap intervals for several algorithms.

    For each algorithm, ``R = reps`` resamples of its ``[N, M]`` score array (runs drawn
    with replacement within each task; tasks too with ``task_bootstrap``) give replicates
    of ``metric``; the interval follows ``method`` (see :mod:`rljax.stats.bootstrap`).

    Args:
      score_dict: ``{algorithm: scores [N, M]}`` (rliable's layout; ``N`` may differ).
      metric: ``"mean"``, ``"median"``, ``"iqm"``, ``"optimality_gap"``, a :class:`Metric`
        (e.g. :func:`trimmed_mean_metric`), or a jnp callable ``[N, M] -> scalar``.
      key: JAX PRNG key; the same key gives bitwise the same intervals.
      reps: number of resamples (>= 1).
      confidence: coverage, strictly between 0 and 1.
      method: ``"percentile"``, ``"basic"`` or ``"bca"``.
      task_bootstrap: also resample tasks (sensitivity to the task set).
      paired: algorithms run on the same seeds: resample the same runs for every algorithm
        (requires equal shapes).
      nan_policy: ``"raise"`` (NaN/inf raise naming the algorithm and position) or
        ``"omit"`` (NaN = missing run; inf still raises).

    Returns:
      ``{algorithm: Interval(point, low, high)}``.

    Source: Agarwal et al. 2021 (rliable ``get_interval_estimates``).
    """
    key = check_key(key)
    check_reps(reps)
    check_confidence(confidence)
    check_method(method)
    check_nan_policy(nan_policy)
    if not isinstance(score_dict, Mapping) or not score_dict:
        raise ValueError("score_dict must be a non-empty mapping {algorithm: scores [N, M]}")
    arrays = {name: check_scores(s, name, nan_policy=nan_policy, ndim=(2, 3))
              for name, s in score_dict.items()}
    if paired and len({a.shape for a in arrays.values()}) > 1:
        shapes = {name: a.shape for name, a in arrays.items()}
        raise ValueError(f"paired=True needs score arrays of the same shape, got {shapes}")
    return {
        name: interval_estimate(scores, metric, key=key if paired else algorithm_key(key, name),
                                reps=reps, confidence=confidence, method=method,
                                task_bootstrap=task_bootstrap, nan_policy=nan_policy, name=name)
        for name, scores in arrays.items()
    }
