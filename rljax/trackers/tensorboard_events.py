"""A finished run into TensorBoard event files (``tensorboardX``), one subdirectory per run.

Layout: ``PATH/<config label>/seed=<i>/events.out.tfevents.*`` (``PATH/seed=<i>/`` for a
run of one configuration; characters other than letters, digits and ``._=,+-`` in a
label become ``_``). Each run's directory holds every curve as scalars at its steps, the
study figures (``summary/...``) at the last step, and the run's params as an HParams
session (the ``hparams`` summaries TensorBoard's HParams dashboard reads; lists and
``None`` as JSON text). Every event's wall time is the time the rljax run finished.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from rljax.trackers.rundir import FinishedRun

_BAD_DIR_CHARS = re.compile(r"[^\w.=,+\-]")


def run_subdir(config_label: str, seed: int) -> str:
    """``"<config label>/seed=<i>"`` (``"seed=<i>"`` without a label), made safe as a path."""
    seed_dir = f"seed={seed}"
    if not config_label:
        return seed_dir
    label = _BAD_DIR_CHARS.sub("_", config_label).strip(".") or "_"
    return f"{label}/{seed_dir}"


def hparam_value(value: Any) -> bool | int | float | str:
    """A param as the HParams plugin stores it: bools, numbers and strings as they are,
    anything else (lists, ``None``) as JSON text."""
    if isinstance(value, bool | int | float | str):
        return value
    return json.dumps(value)


def write_tensorboard(finished: FinishedRun, path: Path, final_path: Path) -> int:
    """Writes ``finished`` as TensorBoard event files under ``path``.

    Args:
      finished: the run directory, read by :func:`rljax.trackers.rundir.read_run_dir`.
      path: an empty directory (the exporter's temporary directory).
      final_path: where ``path`` will be renamed to (unused: event files hold no paths).

    Returns:
      The number of TensorBoard runs (subdirectories) written.
    """
    del final_path
    walltime = finished.finished_at
    quiet = logging.getLogger("tensorboardX")  # warns on every NaN value; NaN is data here
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        _write_runs(finished, path, walltime)
    finally:
        quiet.setLevel(level)
    return len(finished.runs)


def _write_runs(finished: FinishedRun, path: Path, walltime: float) -> None:
    from tensorboardX import SummaryWriter
    from tensorboardX.summary import hparams

    labels: dict[str, int] = {}
    for run in finished.runs:
        subdir = run_subdir(run.config_label, run.seed)
        label = subdir.rpartition("/")[0]
        if labels.setdefault(label, run.config_index) != run.config_index:
            subdir = f"{label}-config{run.config_index}/seed={run.seed}"  # labels made equal
        with SummaryWriter(logdir=str(path / subdir), flush_secs=3600) as writer:
            params = {k: hparam_value(v) for k, v in run.params.items()}
            for summary in hparams(params, {name: 0.0 for name in run.curves}):
                writer.file_writer.add_summary(summary, None, walltime)
            for name, values in run.curves.items():
                for step, value in zip(run.steps.tolist(), values.tolist(), strict=True):
                    writer.add_scalar(name, value, global_step=step, walltime=walltime)
            last = int(run.steps[-1])
            for name, value in run.summary.items():
                writer.add_scalar(name, value, global_step=last, walltime=walltime)
