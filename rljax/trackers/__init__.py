"""``rljax export``: a finished run's curves and summary into the trackers labs use.

::

    rljax export DIR --to mlflow        # DIR.mlflow/       a local MLflow file store
    rljax export DIR --to wandb         # DIR.wandb/wandb/  W&B offline runs (wandb sync)
    rljax export DIR --to tensorboard   # DIR.tensorboard/  TensorBoard event files

One tracker run per (config, seed) of the run's ``results.parquet``, grouped by study
(MLflow: experiment = study, tags for config and seed; W&B: ``group`` = study,
``job_type`` = config; TensorBoard: one subdirectory per run); params = the run's config,
metrics = the curves at their steps, plus the study's figures from ``summary.json``
(:mod:`rljax.trackers.rundir` has the rules). A table without a step column (a study with
no training step) holds one value per run, logged at step 0; a float column crossed with
the seeds (grpo-signal's ``p``) makes each of its values a configuration of its own.
Nothing is sent anywhere: the environment variables that keep each tracker offline are set
while it writes (:data:`OFFLINE_ENV`).

The output is written into a temporary directory beside it and renamed into place when
complete; an existing output is replaced only with ``force=True`` (``--force``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rljax.trackers.rundir import (
    FinishedRun,
    RunDirError,
    TrackerRun,
    read_run_dir,
    summary_figures,
)

__all__ = ["TRACKERS", "OFFLINE_ENV", "ExportError", "ExportResult", "FinishedRun",
           "RunDirError", "TrackerRun", "default_out", "export_run", "read_run_dir",
           "summary_figures"]

TRACKERS = ("mlflow", "wandb", "tensorboard")
"""The values ``--to`` accepts."""

REQUIREMENTS = {"mlflow": ("mlflow", "mlflow-skinny"), "wandb": ("wandb", "wandb"),
                "tensorboard": ("tensorboardX", "tensorboardX")}
"""``{tracker: (module that must be importable, pip package that provides it)}``."""

OFFLINE_ENV = {
    "mlflow": {"MLFLOW_ALLOW_FILE_STORE": "true", "MLFLOW_DISABLE_TELEMETRY": "true",
               "DO_NOT_TRACK": "true", "MLFLOW_TRACKING_URI": "", "MLFLOW_REGISTRY_URI": ""},
    "wandb": {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_ERROR_REPORTING": "false",
              "WANDB_DISABLE_GIT": "true", "WANDB_DISABLE_CODE": "true",
              "DO_NOT_TRACK": "true",
              "WANDB_API_KEY": "", "WANDB_BASE_URL": ""},
    "tensorboard": {},
}
"""Environment set while a tracker writes (restored afterwards): no server, no upload, no
telemetry, no error reports; an empty value unsets the variable (no API key or server URL
from the user's environment reaches the tracker)."""


class ExportError(ValueError):
    """Bad input for an export (one line, naming the argument)."""


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_run` wrote (a path and scalars): ``path`` (the output),
    ``tracker``, ``runs`` (tracker runs written, one per (config, seed)) and
    ``experiment`` (the study)."""

    path: Path
    tracker: str
    runs: int
    experiment: str


def default_out(run_dir: str | os.PathLike, tracker: str) -> Path:
    """The output beside the run: ``DIR.mlflow``, ``DIR.wandb`` or ``DIR.tensorboard``
    (a path; no arrays, so no shapes)."""
    run_dir = Path(run_dir).resolve()
    return run_dir.with_name(f"{run_dir.name}.{tracker}")


@contextlib.contextmanager
def offline_environment(tracker: str) -> Iterator[None]:
    """Sets :data:`OFFLINE_ENV` of ``tracker`` (an empty value unsets the variable) and
    restores the previous environment on exit."""
    saved = {name: os.environ.get(name) for name in OFFLINE_ENV[tracker]}
    try:
        for name, value in OFFLINE_ENV[tracker].items():
            if value:
                os.environ[name] = value
            else:
                os.environ.pop(name, None)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def check_tracker(tracker: str) -> None:
    """Refuses an unknown tracker or one whose package is missing.

    Raises:
      ExportError: one line naming ``--to``, the trackers allowed, or the package to
        install.
    """
    if tracker not in TRACKERS:
        raise ExportError(f"--to: must be one of {', '.join(TRACKERS)}, got {tracker!r}")
    module, package = REQUIREMENTS[tracker]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ExportError(f"--to: {tracker} needs the {package} package, which is not "
                          f"installed (pip install {package})")


def _writer(tracker: str):
    if tracker == "mlflow":
        from rljax.trackers.mlflow_store import write_mlflow

        return write_mlflow
    if tracker == "wandb":
        from rljax.trackers.wandb_offline import write_wandb

        return write_wandb
    from rljax.trackers.tensorboard_events import write_tensorboard

    return write_tensorboard


def export_run(run_dir: str | os.PathLike, to: str, out: str | os.PathLike | None = None,
               force: bool = False, step: str | None = None) -> ExportResult:
    """Exports a finished run directory to a tracker's local format.

    Args:
      run_dir: a finished ``rljax run STUDY --out DIR`` directory (``config.json`` and
        ``results.parquet``).
      to: ``"mlflow"``, ``"wandb"`` or ``"tensorboard"``.
      out: the output path (default :func:`default_out`: ``DIR.<tracker>`` beside DIR).
      force: replace an existing ``out`` (the new output is complete before the old one
        is removed).
      step: the x-axis column of ``results.parquet`` (default ``step`` when present).

    Returns:
      An :class:`ExportResult`; each tracker run holds its ``[T]`` curves (``T`` steps of
      that (config, seed); ``T = 1``, step 0, for a table without a step column, whose
      float columns crossed with the seeds join the configuration:
      :func:`rljax.trackers.rundir.crossed_columns`).

    Raises:
      ExportError: one line naming ``--to`` (unknown, or its package not installed) or
        ``--out`` (exists and ``force`` is false; exists and is not a directory; lies inside
        DIR or holds it); nothing is written.
      RunDirError: one line naming ``DIR`` (not a finished run) or ``--step``.
    """
    check_tracker(to)
    finished = read_run_dir(run_dir, step_column=step)
    out = default_out(run_dir, to) if out is None else Path(out).resolve()
    if out.exists() or out.is_symlink():
        if not force:
            raise ExportError(f"--out: {out} exists; pass --force to replace it")
        if not out.is_dir() or out.is_symlink():
            raise ExportError(f"--out: {out} exists and is not a directory; not replacing it")
    source = finished.source.resolve()
    if out == source or source in out.parents:
        raise ExportError(f"--out: {out} is inside the run directory {finished.source}; "
                          "write the export beside it")
    if out in source.parents:
        raise ExportError(f"--out: {out} holds the run directory {finished.source}; "
                          "write the export beside it")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        os.chmod(work, 0o777 & ~_umask())  # mkdtemp makes 0700; results are for sharing
        with offline_environment(to):
            runs = _writer(to)(finished, work, out)
        _replace_dir(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return ExportResult(path=out, tracker=to, runs=runs, experiment=finished.experiment)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _replace_dir(work: Path, out: Path) -> None:
    """Renames ``work`` to ``out``; an existing ``out`` is moved aside first and deleted
    once the new one is in place."""
    if not out.exists():
        os.rename(work, out)
        return
    old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".old"))
    os.rename(out, old / out.name)
    try:
        os.rename(work, out)
    except BaseException:
        os.rename(old / out.name, out)
        raise
    shutil.rmtree(old, ignore_errors=True)
