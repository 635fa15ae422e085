"""A finished run into a local MLflow file store (``mlflow-skinny``'s ``MlflowClient``).

Store: MLflow's **file store** (``file:`` URI, a directory tree of plain files), the one
local store ``mlflow-skinny`` can open without a server or extra packages: its sqlite
store needs SQLAlchemy and Alembic, which ``mlflow-skinny`` does not install. MLflow >= 3.7
keeps the file store in maintenance mode and refuses to open one unless
``MLFLOW_ALLOW_FILE_STORE=true`` (the exporter sets it while it writes; set it to read the
store, or convert it with ``mlflow migrate-filestore``).

Layout: experiment = the study name (tags ``rljax.study``, ``rljax.source``); one MLflow
run per (config, seed), named ``<config label>/seed=<i>``, tags ``rljax.config``,
``rljax.seed``; params = the run's config (:func:`param_text` of each value); metrics =
every curve at its steps, plus the study figures (``summary/...``) at the last step. Every
timestamp is the time the rljax run finished (``config.json``'s mtime), so two exports of
one run hold the same values.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rljax.trackers.rundir import FinishedRun

#: MLflow's limits per ``log_batch`` call (metrics, params, tags).
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100
MAX_PARAM_CHARS = 6000
_BAD_KEY_CHARS = re.compile(r"[^\w.\- /]")


def mlflow_key(name: str) -> str:
    """A metric or param name MLflow accepts: characters outside letters, digits, ``_``,
    ``.``, ``-``, space and ``/`` become ``_``."""
    return _BAD_KEY_CHARS.sub("_", str(name))[:250]


def param_text(value: Any) -> str:
    """A param value as MLflow stores it: ``str`` of a scalar or string, JSON of a list or
    mapping; cut at MLflow's 6000 characters."""
    text = json.dumps(value) if isinstance(value, list | tuple | dict) else str(value)
    return text[:MAX_PARAM_CHARS]


def write_mlflow(finished: FinishedRun, path: Path, final_path: Path) -> int:
    """Writes ``finished`` as an MLflow file store at ``path``.

    Args:
      finished: the run directory, read by :func:`rljax.trackers.rundir.read_run_dir`.
      path: an empty directory (the exporter's temporary directory).
      final_path: where ``path`` will be renamed to; the artifact locations MLflow records
        in ``meta.yaml`` are rewritten to point there.

    Returns:
      The number of MLflow runs written (one per (config, seed)).
    """
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=path.as_uri())
    timestamp = int(finished.finished_at * 1000)
    experiment_id = client.create_experiment(finished.experiment, tags={
        "rljax.study": finished.experiment, "rljax.source": str(finished.source.resolve())})
    for run in finished.runs:
        created = client.create_run(experiment_id, start_time=timestamp, run_name=run.name,
                                    tags={"rljax.study": finished.experiment,
                                          "rljax.config": run.config_label,
                                          "rljax.seed": str(run.seed)})
        run_id = created.info.run_id
        params = [Param(mlflow_key(k), param_text(v)) for k, v in run.params.items()]
        metrics = [Metric(mlflow_key(name), float(value), timestamp, int(step))
                   for name, values in run.curves.items()
                   for step, value in zip(run.steps.tolist(), values.tolist(), strict=True)]
        last = int(run.steps[-1])
        metrics += [Metric(mlflow_key(name), value, timestamp, last)
                    for name, value in run.summary.items()]
        for i in range(0, len(params), MAX_PARAMS_PER_BATCH):
            client.log_batch(run_id, params=params[i:i + MAX_PARAMS_PER_BATCH])
        for i in range(0, len(metrics), MAX_METRICS_PER_BATCH):
            client.log_batch(run_id, metrics=metrics[i:i + MAX_METRICS_PER_BATCH])
        client.set_terminated(run_id, status="FINISHED", end_time=timestamp)
    _relocate(path, final_path)
    return len(finished.runs)


def _relocate(path: Path, final_path: Path) -> None:
    """Rewrites the artifact URIs in the store's ``meta.yaml`` files from ``path`` to
    ``final_path`` (the file store records absolute locations)."""
    old, new = path.resolve().as_uri(), final_path.resolve().as_uri()
    for meta in path.rglob("meta.yaml"):
        text = meta.read_text(encoding="utf-8")
        if old in text:
            meta.write_text(text.replace(old, new), encoding="utf-8")
