"""Per-seed returns from a PPO run's logs: what every user otherwise writes by hand from
``return_sum / episodes``.

The PPO trainers (:func:`rljax.training.make_ppo_train`, :func:`make_ppo_chunks`,
:func:`make_recurrent_ppo_train`) log, per update (or per row of ``log_every``
updates), ``return_sum`` (the summed returns of the episodes that finished) and
``episodes`` (how many finished). The mean return of the episodes that finished in the
last ``K`` rows is

    final_return = sum_{u > U - K} return_sum[u] / sum_{u > U - K} episodes[u]

(NaN when no episode finished there: a seed with nothing to report is never counted as
0). A sweep's outputs carry leading ``[configs, seeds]`` axes; the reduction is over the
last axis only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def final_returns(logs: Mapping[str, Any], *, last: int = 1) -> np.ndarray:
    """Mean return of the episodes that finished in the last ``last`` logged rows.

    Args:
      logs: a mapping with ``return_sum`` and ``episodes`` of shape ``[..., R]`` (R
        logged rows; e.g. ``Sweep(train).run(S).outputs``, ``[S, R]``, or a grid's
        ``[K, S, R]``).
      last: K, the rows to pool (1 <= K <= R).

    Returns:
      float64 ``[...]``: one return per seed (per config and seed); NaN where no episode
      finished in those rows.

    Raises:
      ValueError: one line naming ``logs`` (a missing key or mismatched shapes) or
        ``last``.

    Example::

        result = rljax.Sweep(make_ppo_train(env, net, config), block_size=8).run(8)
        rljax.training.final_returns(result.outputs, last=10)   # [8]
    """
    missing = [k for k in ("return_sum", "episodes") if k not in logs]
    if missing:
        raise ValueError(f"logs: needs return_sum and episodes (a PPO run's logs), missing "
                         f"{', '.join(missing)}")
    sums = np.asarray(logs["return_sum"], np.float64)
    counts = np.asarray(logs["episodes"], np.float64)
    if sums.shape != counts.shape or sums.ndim < 1:
        raise ValueError(f"logs: return_sum {list(sums.shape)} and episodes "
                         f"{list(counts.shape)} must have one shape [..., R]")
    rows = sums.shape[-1]
    if isinstance(last, bool) or not isinstance(last, int | np.integer) or not 1 <= last <= rows:
        raise ValueError(f"last: must be an integer in [1, {rows}] (the logged rows), got "
                         f"{last!r}")
    total = sums[..., -last:].sum(axis=-1)
    finished = counts[..., -last:].sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(finished > 0, total / finished, np.nan)


def binned_returns(return_sum: np.ndarray, episodes: np.ndarray, bins: int) -> np.ndarray:
    """Per-seed mean return of the episodes finished in each of ``bins`` equal runs of
    logged rows (the last bin takes the remainder); a bin with no finished episode carries
    the previous bin's value forward (NaN before the first episode).

    Args:
      return_sum: ``[S, R]`` summed returns of the episodes finished in each row (a row
        is ``log_every`` updates).
      episodes: ``[S, R]`` how many finished.
      bins: K <= R.

    Returns:
      ``[S, K]`` float64.
    """
    import pandas as pd

    num_rows = return_sum.shape[1]
    edges = np.linspace(0, num_rows, bins + 1).round().astype(int)
    sums = np.add.reduceat(return_sum.astype(np.float64), edges[:-1], axis=1)
    counts = np.add.reduceat(episodes.astype(np.float64), edges[:-1], axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, sums / counts, np.nan)
    return pd.DataFrame(means.T).ffill().to_numpy().T


#: The mean losses a PPO run logs per row, besides ``return_sum`` and ``episodes``.
PPO_METRICS = ("loss", "policy_loss", "value_loss", "entropy", "clip_fraction", "approx_kl")


def ppo_results_table(logs: Mapping[str, np.ndarray], steps_per_update: int,
                      log_every: int = 1, *, first_seed: int = 0) -> Any:
    """Tidy table of a PPO run's logs, one row per seed x logged row (``logs`` leaves
    ``[S, R]``, a row is ``log_every`` updates): ``seed`` (the seed id, ``first_seed +
    s``), ``update`` (updates done at the row's end), ``env_steps``, ``episodes``,
    ``episode_return`` (mean of the episodes finished in the row; NaN if none),
    ``return_sum`` and the row's mean losses (:data:`PPO_METRICS`).

    Returns:
      a ``pandas.DataFrame`` of ``S * R`` rows.
    """
    import pandas as pd

    num_seeds, num_rows = logs["return_sum"].shape
    episodes = logs["episodes"].astype(np.int32)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_return = np.where(episodes > 0, logs["return_sum"] / episodes, np.nan)
    updates = np.arange(1, num_rows + 1, dtype=np.int64) * log_every
    table = {
        "seed": np.repeat(np.arange(first_seed, first_seed + num_seeds, dtype=np.int32),
                          num_rows),
        "update": np.tile(updates.astype(np.int32), num_seeds),
        "env_steps": np.tile(updates * steps_per_update, num_seeds),
        "episodes": episodes.reshape(-1),
        "episode_return": mean_return.reshape(-1).astype(np.float32),
        "return_sum": logs["return_sum"].reshape(-1).astype(np.float32),
    }
    for name in PPO_METRICS:
        table[name] = logs[name].reshape(-1).astype(np.float32)
    return pd.DataFrame(table)


def chunked_runs(result: Any, num_rows: int) -> list[dict[str, Any]]:
    """Per configuration, a chunked PPO grid's outputs (:func:`rljax.grid.run_grid` over
    :func:`rljax.training.make_ppo_chunks`) as ``{"logs": {name: [S, R]}, "first_nonfinite":
    [S] int, "final": {name: [S, ...]}}``: the ``[K, S, chunks, rows per chunk]`` logs
    put back in row order (``R = num_rows`` rows of ``log_every`` updates), and the other
    outputs of ``finish`` (e.g. test-rollout returns).

    Args:
      result: the :class:`rljax.grid.GridResult`.
      num_rows: R, logged rows per seed, or ``num_rows(config) -> R`` when the grid
        varies the run's length.
    """
    from rljax.nonfinite import NONFINITE_STEP

    num_seeds = len(result.seed_ids)
    runs = []
    for c, config in enumerate(result.configs):
        out = result.config_outputs(c)
        rows = num_rows(config) if callable(num_rows) else num_rows
        runs.append({"logs": {k: np.asarray(v).reshape(num_seeds, rows)
                              for k, v in out["logs"].items()},
                     "first_nonfinite": np.asarray(out["final"][NONFINITE_STEP]),
                     "final": {k: np.asarray(v) for k, v in out["final"].items()
                               if k != NONFINITE_STEP}})
    return runs


def chunked_timing(result: Any) -> dict[str, Any]:
    """A chunked PPO grid's timing: ``compile_seconds``, ``run_seconds``, ``timed_steps``
    (environment steps the run time covers: not each program's first chunk, timed with its
    compilation, nor work read back on resume), ``num_devices`` and ``programs`` (one
    ``{"structural", "configs", "compile_seconds"}`` per compiled program)."""
    timed = 0.0
    for (ids, _), fraction in zip(result.parts, result.timed_fractions, strict=True):
        first = result.configs[int(ids[0])]
        steps_per_seed = first.num_updates * first.batch_size
        timed += len(ids) * len(result.seed_ids) * steps_per_seed * fraction
    return {"compile_seconds": result.compile_seconds, "run_seconds": result.run_seconds,
            "timed_steps": timed, "num_devices": result.num_devices,
            "programs": [dict(p) for p in result.programs]}
