"""A finished run into W&B offline run directories, written by ``wandb`` itself.

``wandb.init(mode="offline")`` writes each run's transaction log
(``wandb/offline-run-<time>-<id>/run-<id>.wandb``) through wandb's own writer process
(``wandb-core``), with nothing sent anywhere; ``wandb sync`` uploads the directories later.
Measured with wandb 0.31 on a 2-core machine: about 0.5 s for the first ``wandb.init``
of a process, 0.1 s for each further one, well under a millisecond per logged row, so
the exporter uses wandb's public API rather than writing the log format itself. The
service is shut down (``wandb.teardown()``) before the export returns, error reports are
off, and stats, machine info, git, code and ``requirements.txt``
capture are switched off (an export is not the training process).

Layout: project ``rljax``, ``group`` = the study name, ``job_type`` = the config label
(``"run"`` for a run of one configuration; at most 64 characters, else ``config-<i>``),
name ``<config label>/seed=<i>``; ``config`` = the run's params; one ``run.log`` per step
with every curve's value at that step (``step=`` the rljax step); ``summary`` = each
curve's final value plus the study figures (``summary/...``).
"""

from __future__ import annotations

from pathlib import Path

from rljax.trackers.rundir import FinishedRun

PROJECT = "rljax"
MAX_JOB_TYPE_CHARS = 64


def job_type(label: str, index: int) -> str:
    """W&B ``job_type`` of a configuration: its label, ``"run"`` when empty, or
    ``config-<index>`` when the label is longer than W&B's 64 characters."""
    if not label:
        return "run"
    return label if len(label) <= MAX_JOB_TYPE_CHARS else f"config-{index}"


def write_wandb(finished: FinishedRun, path: Path, final_path: Path) -> int:
    """Writes ``finished`` as W&B offline runs under ``path/wandb/``.

    Args:
      finished: the run directory, read by :func:`rljax.trackers.rundir.read_run_dir`.
      path: an empty directory (the exporter's temporary directory).
      final_path: where ``path`` will be renamed to (unused: the run directories hold
        only relative links to each other).

    Returns:
      The number of W&B runs written (one per (config, seed)).

    Called in a process with a W&B run of its own in progress, that run is left alone
    (``reinit="create_new"``) and so is wandb's service; otherwise the service is shut
    down before this returns.
    """
    del final_path
    import wandb

    settings = wandb.Settings(
        mode="offline", silent=True, console="off", save_code=False, disable_git=True,
        disable_job_creation=True, x_disable_stats=True, x_disable_meta=True,
        x_disable_machine_info=True, x_save_requirements=False)
    owns_service = wandb.run is None  # a caller's own live run keeps its service
    try:
        for run in finished.runs:
            tracker = wandb.init(dir=str(path), project=PROJECT, group=finished.experiment,
                                 job_type=job_type(run.config_label, run.config_index),
                                 name=run.name, config=run.params, settings=settings,
                                 reinit="create_new")
            try:
                for i, step in enumerate(run.steps.tolist()):
                    tracker.log({name: float(values[i]) for name, values in run.curves.items()},
                                step=int(step))
                tracker.summary.update({**run.final(), **run.summary})
            finally:
                tracker.finish()
    finally:
        if owns_service:
            wandb.teardown()
    return len(finished.runs)
