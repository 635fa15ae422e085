"""Results tables to and from rliable's ``score_dict`` (``{algorithm: scores [runs, tasks]}``).

A tidy results table has one row per algorithm x task x run and a score column, e.g.

=========  =========  ====  =====
algorithm  task       seed  score
=========  =========  ====  =====
SPR        Alien      0     0.09
SPR        Alien      1     0.11
...        ...        ...   ...
=========  =========  ====  =====

rliable (Agarwal et al., 2021, "Deep RL at the Edge of the Statistical Precipice") and
:mod:`rljax.stats` both take ``score_dict[algorithm]`` as a ``[num_runs, num_tasks]`` array:
column ``j`` is task ``tasks[j]`` and row ``i`` its ``i``-th run (runs sorted by run id
within each task). Every task of an algorithm needs the same number of runs; algorithms
may differ (Atari 100k: SPR 100 runs, IRIS 5).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np


def _sorted(values: Sequence[Any]) -> list[Any]:
    try:
        return sorted(values)
    except TypeError:  # mixed types: a stable, readable order
        return sorted(values, key=str)


def _order(given: Sequence[Any] | None, present: Sequence[Any], what: str,
           column: str) -> list[Any]:
    if given is None:
        return _sorted(present)
    if isinstance(given, str):
        raise ValueError(f"{what} must be a sequence of {column!r} values, got the string "
                         f"{given!r}")
    order = list(given)
    if not order:
        raise ValueError(f"{what} must not be empty")
    seen = set()
    for value in order:
        if value in seen:
            raise ValueError(f"{what} lists {value!r} twice")
        seen.add(value)
    return order


def to_rliable_scores(
    table: Any,
    *,
    algorithm: str = "algorithm",
    task: str = "task",
    run: str = "seed",
    score: str = "score",
    tasks: Sequence[Hashable] | None = None,
    algorithms: Sequence[Hashable] | None = None,
) -> dict[Hashable, np.ndarray]:
    """rliable's ``score_dict`` from a tidy results table (one row per algorithm x task x run).

    ``out[a][i, j]`` is the score of the ``i``-th run (by sorted run id) of algorithm ``a``
    on task ``tasks[j]``. The result goes straight into rliable
    (``rliable.library.get_interval_estimates``, ``rliable.plot_utils``) or into
    :func:`rljax.stats.interval_estimates` and friends. NaN scores are kept as NaN
    (rljax's statistics take ``nan_policy="omit"``; rliable's propagate NaN).

    Args:
      table: a pandas ``DataFrame`` with (at least) the four columns named below; other
        columns are ignored.
      algorithm, task, run, score: the column names (defaults ``"algorithm"``, ``"task"``,
        ``"seed"``, ``"score"``); ``score`` must be numeric.
      tasks: the tasks, in column order (default: all tasks, sorted); selects too --
        rows of other tasks are ignored.
      algorithms: the algorithms, in the dict's order (default: all, sorted); selects too.

    Returns:
      ``{algorithm: float64 [num_runs, num_tasks]}``.

    Raises:
      ValueError (one line, naming the column): a missing column, missing values in the
      algorithm/task/run columns, a non-numeric score column, duplicate (algorithm, task,
      run) rows, an algorithm without rows for a listed task, or an algorithm whose tasks
      have different numbers of runs (ragged).
    """
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    names = {"algorithm": algorithm, "task": task, "run": run, "score": score}
    columns = getattr(table, "columns", None)
    if columns is None:
        raise ValueError(f"table must be a pandas DataFrame, got {type(table).__name__}")
    for argument, column in names.items():
        if column not in columns:
            raise ValueError(f"table has no column {column!r} (the {argument} column); "
                             f"it has {list(columns)}")
    if len({algorithm, task, run, score}) < 4:
        raise ValueError(f"algorithm, task, run and score must name different columns, got "
                         f"{names}")
    frame = table[[algorithm, task, run, score]]
    for column in (algorithm, task, run):
        if frame[column].isna().any():
            raise ValueError(f"column {column!r} has missing values")
    if not is_numeric_dtype(frame[score]) or is_bool_dtype(frame[score]):
        raise ValueError(f"column {score!r} (score) must be numeric, got dtype "
                         f"{frame[score].dtype}")
    values = frame[score].to_numpy(np.float64, na_value=np.nan)
    sizes = frame.groupby([algorithm, task, run], sort=False).size()
    repeated = sizes[sizes > 1]
    if len(repeated):
        raise ValueError(f"duplicate ({algorithm}, {task}, {run}) rows: "
                         f"{tuple(repeated.index[0])!r} appears {int(repeated.iloc[0])} times")
    task_order = _order(tasks, list(frame[task].unique()), "tasks", task)
    algo_order = _order(algorithms, list(frame[algorithm].unique()), "algorithms", algorithm)
    groups = frame.groupby([algorithm, task], sort=False).indices
    runs = frame[run].to_numpy()
    out = {}
    for algo in algo_order:
        columns_of_algo = []
        for t in task_order:
            index = groups.get((algo, t))
            if index is None:
                if not any(a == algo for a, _ in groups):
                    raise ValueError(f"no rows with {algorithm} == {algo!r}")
                raise ValueError(f"{algorithm} {algo!r} has no rows for {task} {t!r}")
            order = index[np.argsort(runs[index], kind="stable")]
            columns_of_algo.append(values[order])
        counts = {t: len(c) for t, c in zip(task_order, columns_of_algo, strict=True)}
        if len(set(counts.values())) > 1:
            raise ValueError(f"{algorithm} {algo!r}: tasks have different numbers of runs "
                             f"(column {run!r}): {counts}")
        out[algo] = np.stack(columns_of_algo, axis=1)
    return out


def from_rliable_scores(
    score_dict: Mapping[Hashable, Any],
    tasks: Sequence[Hashable] | None = None,
    *,
    algorithm: str = "algorithm",
    task: str = "task",
    run: str = "seed",
    score: str = "score",
) -> Any:
    """A tidy results table from rliable's ``score_dict`` (inverse of :func:`to_rliable_scores`).

    Args:
      score_dict: ``{algorithm: scores [num_runs, num_tasks]}`` (``num_runs`` may differ
        between algorithms; ``num_tasks`` may not).
      tasks: names of the ``num_tasks`` columns (default ``0 .. num_tasks - 1``).
      algorithm, task, run, score: the column names of the table.

    Returns:
      A pandas ``DataFrame`` with one row per algorithm x run x task; run ids are the row
      indices ``0 .. num_runs - 1``. ``to_rliable_scores(from_rliable_scores(d, tasks),
      tasks=tasks, algorithms=list(d))`` gives ``d`` back.
    """
    import pandas as pd

    if not isinstance(score_dict, Mapping) or not score_dict:
        raise ValueError("score_dict must be a non-empty mapping {algorithm: scores [N, M]}")
    arrays = {}
    for name, scores in score_dict.items():
        array = np.asarray(scores, dtype=np.float64)
        if array.ndim != 2:
            raise ValueError(f"score_dict[{name!r}] must be [num_runs, num_tasks], got shape "
                             f"{array.shape}")
        arrays[name] = array
    num_tasks = {a.shape[1] for a in arrays.values()}
    if len(num_tasks) > 1:
        shapes = {name: a.shape for name, a in arrays.items()}
        raise ValueError(f"score_dict arrays must share num_tasks, got shapes {shapes}")
    (m,) = num_tasks
    task_names = list(range(m)) if tasks is None else list(tasks)
    if len(task_names) != m:
        raise ValueError(f"tasks has {len(task_names)} names for {m} task columns")
    parts = []
    for name, array in arrays.items():
        n = array.shape[0]
        parts.append(pd.DataFrame({
            algorithm: [name] * (n * m),
            task: task_names * n,
            run: np.repeat(np.arange(n), m),
            score: array.reshape(-1),
        }))
    return pd.concat(parts, ignore_index=True)
