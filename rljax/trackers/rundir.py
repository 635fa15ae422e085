"""Reads a finished ``rljax run`` directory into one record per (config, seed).

A finished run DIR holds ``config.json`` (written last, once the study has finished:
``"experiment"``, ``"config"``, optionally ``"grid": {"fields": [...]}``),
``results.parquet`` (the tidy table: one row per seed [x config] [x step], column ``seed``)
and usually ``summary.json`` (the study's figures). How the table becomes tracker runs:

* **Identity** of a tracker run: the ``config`` column (a grid's configuration index), the
  swept fields named in ``config.json``'s ``grid.fields`` and every non-numeric column
  (e.g. orm-vs-prm's ``mode``), plus ``seed``. Each distinct combination is one run.
* **Step**: ``--step COL`` names the x-axis column; by default the ``step`` column when the
  table has one. Steps are integers >= 0, at most one row per (run, step). A table without
  a step column (a study with no training step: four-answer, gdro, grpo-signal) holds one
  value per run, logged at step 0 (each tracker's only point, so also its summary / final
  value). If it has several rows per (configuration, seed), the float columns crossed
  with the seeds that tell them apart (:func:`crossed_columns`; grpo-signal's ``p``)
  join the identity, so each (p, seed) is a run of its own, as ``rljax compare --group-by
  p`` reads it; if none does, the table is refused, naming ``--step``.
* **Metrics**: every other numeric or boolean column (booleans as 0/1), one curve each.
* **Params**: the run's config (``config.json``; nested mappings flattened with ``.``),
  with the run's identity values on top (a grid run's own field values, ``mode``, ...)
  and ``seed``.
* **Summary**: the study's numeric figures from ``summary.json`` (nested mappings flattened
  with ``/``, lists and strings left out) under ``summary/``; for a grid run the figures
  of its own configuration (``summary["configs"]`` row with the same ``config``) replace
  the study-level ones. They are across-seed figures, repeated on each seed's run so the
  trackers' tables can sort and filter by them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

CONFIG_FILE = "config.json"
RESULTS_FILE = "results.parquet"
SUMMARY_FILE = "summary.json"
SUMMARY_PREFIX = "summary/"


class RunDirError(ValueError):
    """A directory that is not a finished run, or a table the exporter cannot read (one
    line, naming the argument or file)."""


@dataclass
class TrackerRun:
    """One (config, seed) of a finished run: what one tracker run receives.

    Attributes:
      name: ``"seed=3"`` or ``"mode=orm/seed=3"`` (the config label, then the seed).
      config_label: ``"mode=orm"``, ``"config=1,learning_rate=0.01"``, or ``""`` when the
        run has one configuration.
      config_index: position of the configuration in the table (0-based, first-seen order).
      seed: the seed id (the ``seed`` column).
      params: flat ``{name: int | float | bool | str | None | list}``.
      steps: ``[T]`` int64 steps, increasing.
      curves: ``{metric: [T] float64}``, NaN where the run logged no finite value.
      summary: ``{"summary/<figure>": float}`` (see the module docstring).
    """

    name: str
    config_label: str
    config_index: int
    seed: int
    params: dict[str, Any]
    steps: np.ndarray
    curves: dict[str, np.ndarray]
    summary: dict[str, float] = field(default_factory=dict)

    def final(self) -> dict[str, float]:
        """``{metric: value at the last step}`` (``[T]`` curves -> their last entry)."""
        return {name: float(values[-1]) for name, values in self.curves.items()}


@dataclass
class FinishedRun:
    """A finished run directory, read.

    Attributes:
      source: the run directory.
      experiment: the study name (``config.json["experiment"]``).
      config: the run's config (``config.json["config"]``).
      finished_at: seconds since the epoch at which ``config.json`` was written.
      identity_columns: the columns that tell configurations apart (for a step-less table
        with several rows per seed, the crossed columns of :func:`crossed_columns` last).
      step_column: the x-axis column, or ``None`` (one row per run, logged at step 0).
      metric_columns: the logged columns.
      runs: one :class:`TrackerRun` per (config, seed), configurations in table order,
        seeds ascending; each run's curves are ``[T]`` arrays over its ``T`` steps.
    """

    source: Path
    experiment: str
    config: dict[str, Any]
    finished_at: float
    identity_columns: list[str]
    step_column: str | None
    metric_columns: list[str]
    runs: list[TrackerRun]


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise RunDirError(f"{what}: cannot read {path}: {err}".splitlines()[0]) from None


def _python(value: Any, dtype: Any = None) -> Any:
    """A table value as a Python scalar; a float stored as float32 in its shortest
    round-trip form (``0.01`` stored as float32 reads ``0.01``, not ``0.0099999998``)."""
    if isinstance(value, float | np.floating) and isinstance(dtype, np.dtype) \
            and np.issubdtype(dtype, np.floating):
        return float(np.format_float_positional(dtype.type(value), trim="-"))
    if isinstance(value, np.generic):
        return value.item()
    return value


def flatten_params(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}, "c": [1, 2]}`` -> ``{"a.b": 1, "c": [1, 2]}`` (key order kept)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten_params(value, prefix=f"{name}."))
        else:
            flat[name] = value
    return flat


def summary_figures(summary: Any, prefix: str = SUMMARY_PREFIX) -> dict[str, float]:
    """The numeric figures of a ``summary.json`` mapping, flattened with ``/``.

    Args:
      summary: the parsed ``summary.json`` (a mapping; anything else gives ``{}``).
      prefix: prepended to every name.

    Returns:
      ``{prefix + name: float}`` (scalars) for every int, float or bool leaf reached through nested
      mappings; lists (such as a grid run's ``configs`` rows, which :func:`read_run_dir`
      reads per configuration), strings and ``None`` are left out, as is the top-level
      ``grid`` record.
    """
    out: dict[str, float] = {}
    if not isinstance(summary, dict):
        return out
    for key, value in summary.items():
        if prefix == SUMMARY_PREFIX and key == "grid":
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(summary_figures(value, prefix=f"{name}/"))
        elif isinstance(value, bool | int | float) and not isinstance(value, str):
            out[name] = float(value)
    return out


def _per_config_summaries(summary: Any) -> dict[int, dict[str, float]]:
    rows = summary.get("configs") if isinstance(summary, dict) else None
    out: dict[int, dict[str, float]] = {}
    if not isinstance(rows, list):
        return out
    for row in rows:
        if isinstance(row, dict) and isinstance(row.get("config"), int):
            figures = summary_figures({k: v for k, v in row.items() if k != "config"},
                                      prefix=f"{SUMMARY_PREFIX}config/")
            out[row["config"]] = figures
    return out


def _is_metric(series: Any) -> bool:
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    return is_bool_dtype(series.dtype) or is_numeric_dtype(series.dtype)


def _is_integer(series: Any) -> bool:
    from pandas.api.types import is_integer_dtype

    return is_integer_dtype(series.dtype)


def crossed_columns(table: Any, identity: list[str], candidates: list[str]) -> list[str]:
    """The numeric columns that tell apart a step-less table's rows of one (configuration,
    seed): a factor crossed with the seeds, such as grpo-signal's ``p`` (every seed has one
    row per probability).

    A candidate qualifies when it is a float column without NaN that takes more than one
    value within a (configuration, seed) group and holds the same multiset of values in
    every group (a metric varies from seed to seed; at least two groups are needed to
    tell). Integer columns never qualify: one crossed with the seeds is an x-axis
    (ppo-cartpole's ``update``), which ``--step COL`` names. Qualifying columns are taken in
    table order until ``(identity, seed, columns)`` tells every row apart.

    Args:
      table: the results DataFrame (rows = runs x ...).
      identity: the configuration columns.
      candidates: the numeric columns that could be factors (the metric columns).

    Returns:
      The columns (names, a list), or ``[]`` if none tells the rows apart.
    """
    from pandas.api.types import is_float_dtype

    groups = table.groupby([*identity, "seed"], sort=False, observed=True, dropna=False)
    if groups.ngroups < 2:  # one seed: a factor and a metric look the same
        return []
    chosen: list[str] = []
    for column in candidates:
        values = table[column]
        if not is_float_dtype(values.dtype) or values.isna().any():
            continue  # integer columns crossed with the seeds are x-axes: --step COL
        per_group = groups[column].apply(lambda v: tuple(sorted(v.tolist())))
        if per_group.nunique() != 1 or len(set(per_group.iloc[0])) < 2:
            continue
        chosen.append(column)
        if not table.duplicated([*identity, "seed", *chosen]).any():
            return chosen
    return []


def read_run_dir(path: str | Path, step_column: str | None = None) -> FinishedRun:
    """Reads a finished run directory (see the module docstring for the rules).

    Args:
      path: the run directory (``rljax run STUDY --out DIR``).
      step_column: the x-axis column; ``None`` picks ``step`` when the table has one.

    Returns:
      A :class:`FinishedRun` with one :class:`TrackerRun` per (config, seed): ``[T]``
      steps and ``[T]`` curves each.

    Raises:
      RunDirError: one line, naming ``DIR`` when it is not a finished run (no
        ``config.json`` or ``results.parquet``), ``--step`` for a step column that is
        missing, not integral or negative, or the table when it has no ``seed`` column,
        no metric, or several rows per (config, seed[, step]) that neither the step nor
        crossed columns (:func:`crossed_columns`) tell apart.
    """
    import pandas as pd

    source = Path(path)
    if not source.is_dir():
        raise RunDirError(f"DIR: {source} is not a directory")
    config_path, table_path = source / CONFIG_FILE, source / RESULTS_FILE
    for needed in (config_path, table_path):
        if not needed.is_file():
            raise RunDirError(f"DIR: {source} is not a finished run (no {needed.name}; "
                              "`rljax run STUDY --out DIR` writes it when the study ends)")
    record = _read_json(config_path, "DIR")
    if not isinstance(record, dict) or not isinstance(record.get("experiment"), str):
        raise RunDirError(f"DIR: {config_path} has no \"experiment\" name; is it a run's "
                          "config.json?")
    config = record.get("config") if isinstance(record.get("config"), dict) else {}
    summary = (_read_json(source / SUMMARY_FILE, "DIR")
               if (source / SUMMARY_FILE).is_file() else {})
    try:
        table = pd.read_parquet(table_path)
    except Exception as err:  # noqa: BLE001 - any reader failure is bad input here
        raise RunDirError(f"DIR: cannot read {table_path}: {err}".splitlines()[0]) from None
    if "seed" not in table.columns:
        raise RunDirError(f"DIR: {table_path} has no 'seed' column; it has "
                          f"{list(table.columns)}")
    if not _is_integer(table["seed"]):
        raise RunDirError(f"DIR: the 'seed' column of {table_path} is not integer")

    if step_column is None and "step" in table.columns:
        step_column = "step"
    if step_column is not None:
        if step_column not in table.columns:
            raise RunDirError(f"--step: {table_path} has no column {step_column!r}; it has "
                              f"{list(table.columns)}")
        steps = table[step_column]
        if not _is_metric(steps) or not np.all(np.isfinite(steps.to_numpy(np.float64))) \
                or not np.all(steps.to_numpy(np.float64) % 1 == 0) or (steps < 0).any():
            raise RunDirError(f"--step: column {step_column!r} must hold integers >= 0")

    grid = record.get("grid") if isinstance(record.get("grid"), dict) else {}
    grid_fields = [f for f in grid.get("fields", []) if isinstance(f, str)]
    missing = [f for f in grid_fields if f not in table.columns]
    if missing:
        raise RunDirError(f"DIR: config.json lists grid field(s) {missing} but "
                          f"{RESULTS_FILE} has no such column")
    identity = [c for c in table.columns if c not in ("seed", step_column)
                and (c == "config" or c in grid_fields or not _is_metric(table[c]))]
    metrics = [c for c in table.columns
               if c not in ("seed", step_column) and c not in identity]
    if not metrics:
        raise RunDirError(f"DIR: {table_path} has no numeric metric column; it has "
                          f"{list(table.columns)}")
    keys = [*identity, "seed"] + ([step_column] if step_column else [])
    if step_column is None and table.duplicated(keys).any():
        crossed = crossed_columns(table, identity, metrics)
        if crossed and len(crossed) < len(metrics):
            identity += crossed
            metrics = [c for c in metrics if c not in crossed]
            keys = [*identity, "seed"]
    if table.duplicated(keys).any():
        if step_column is None:
            numeric = [c for c in metrics if _is_integer(table[c])]
            raise RunDirError(f"--step: {table_path} has several rows per "
                              f"({', '.join([*identity, 'seed'])}) and no 'step' column; "
                              f"name the x-axis column with --step COL (integer columns: "
                              f"{numeric})")
        raise RunDirError(f"--step: {table_path} has several rows per "
                          f"({', '.join(keys)}); the step column must tell a run's rows apart")

    study = summary_figures(summary)
    per_config = _per_config_summaries(summary) if "config" in identity else {}
    flat_config = flatten_params(config)
    runs: list[TrackerRun] = []
    groups = (table.groupby(identity, sort=False, observed=True, dropna=False)
              if identity else [((), table)])
    for index, (values, group) in enumerate(groups):
        values = values if isinstance(values, tuple) else (values,)
        identity_values = {c: _python(v, table[c].dtype)
                           for c, v in zip(identity, values, strict=True)}
        label = ",".join(f"{c}={v}" for c, v in identity_values.items())
        figures = dict(study)
        if "config" in identity_values and identity_values["config"] in per_config:
            figures.update(per_config[identity_values["config"]])
        for seed, rows in group.groupby("seed", sort=True):
            if step_column is not None:
                rows = rows.sort_values(step_column, kind="stable")
                steps = rows[step_column].to_numpy(np.float64).astype(np.int64)
            else:
                steps = np.zeros(1, np.int64)
            curves = {m: rows[m].to_numpy(np.float64) for m in metrics}
            seed = int(seed)
            runs.append(TrackerRun(
                name=f"{label}/seed={seed}" if label else f"seed={seed}",
                config_label=label, config_index=index, seed=seed,
                params={**flat_config, **identity_values, "seed": seed},
                steps=steps, curves=curves, summary=figures))
    return FinishedRun(source=source, experiment=record["experiment"], config=config,
                       finished_at=config_path.stat().st_mtime, identity_columns=identity,
                       step_column=step_column, metric_columns=metrics, runs=runs)

