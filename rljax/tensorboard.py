"""TensorBoard logging of per-step aggregates across seeds (optional: ``tensorboardX``).

A sweep's logs hold one value per seed and step; a TensorBoard chart wants one curve per
statistic. :class:`AggregateWriter` writes, for every logged quantity ``name`` and step,
the scalars

    name/mean, name/median, name/iqm, name/q25, name/q75, name/finite_seeds

over the seeds whose value is finite (NaN/inf seeds are left out of the aggregates and
``finite_seeds`` counts the rest), with the IQM of :func:`rljax.stats.aggregate_iqm`
(the 25 % trimmed mean, Agarwal et al., 2021) and the quartiles of ``numpy.percentile``
(linear interpolation). :func:`write_chunk_logs` writes one chunk of
:class:`rljax.sweep.ChunkedSweep` logs (``[S, rows]`` per quantity) row by row::

    with AggregateWriter("runs/ppo/tb") as writer:
        ...  # after each chunk c of a round:
        write_chunk_logs(writer, chunk_logs, first_step=c * rows * steps_per_row,
                         steps_per_row=steps_per_row)

``tensorboardX`` is imported when a writer is built, so ``rljax`` itself does not need
it (``pip install 'rljax[tensorboard]'``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rljax.stats import aggregate_iqm

STATISTICS = ("mean", "median", "iqm", "q25", "q75", "finite_seeds")


def seed_aggregates(values: Any) -> dict[str, float]:
    """Aggregates across seeds of one quantity at one step.

    Args:
      values: ``[S]`` per-seed values (float, int or bool).

    Returns:
      ``{"finite_seeds": F}`` (how many of the ``S`` values are finite) and, when
      ``F >= 1``, ``mean``, ``median``, ``iqm``, ``q25``, ``q75`` of the finite values
      (float64); with no finite value only ``finite_seeds``.

    Raises:
      ValueError: one line, if ``values`` is not 1-D or is empty.
    """
    values = np.asarray(values)
    if values.ndim != 1 or values.shape[0] < 1:
        raise ValueError(f"values: must be a non-empty [S] array, got shape {values.shape}")
    values = values.astype(np.float64)
    finite = values[np.isfinite(values)]
    out = {"finite_seeds": float(finite.size)}
    if finite.size:
        q25, median, q75 = np.percentile(finite, [25.0, 50.0, 75.0])
        out.update(mean=float(np.mean(finite)), median=float(median),
                   iqm=aggregate_iqm(finite[:, None]), q25=float(q25), q75=float(q75))
    return out


def flatten_logs(logs: Mapping[str, Any], prefix: str = "") -> dict[str, np.ndarray]:
    """``{"a": {"b": x}}`` -> ``{"a/b": x}`` (leaves as numpy arrays), in key order."""
    flat: dict[str, np.ndarray] = {}
    for key, value in logs.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_logs(value, prefix=f"{name}/"))
        else:
            flat[name] = np.asarray(value)
    return flat


def _summary_writer_class() -> Any:
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        raise ImportError("rljax.tensorboard needs tensorboardX: "
                          "pip install 'rljax[tensorboard]'") from None
    return SummaryWriter


def _check_step(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ValueError(f"{name}: must be an integer >= 0, got {value!r}")
    return int(value)


class AggregateWriter:
    """Writes aggregates across seeds as TensorBoard scalars (see the module docstring).

    Args:
      logdir: directory of the event file (created if missing).

    Raises:
      ImportError: one line naming ``pip install 'rljax[tensorboard]'`` when
        ``tensorboardX`` is not installed.
    """

    def __init__(self, logdir: str | Path):
        summary_writer = _summary_writer_class()
        self.logdir = Path(logdir)
        self._writer = summary_writer(logdir=str(self.logdir))

    def write(self, step: int, logs: Mapping[str, Any]) -> None:
        """Write the aggregates of every quantity at ``step``.

        Args:
          step: the x-axis value (e.g. environment steps or updates), an int >= 0.
          logs: ``{name: [S] per-seed values}``; nested mappings are flattened with
            ``"/"`` (``{"loss": {"value": x}}`` writes ``loss/value/mean``, ...).

        Raises:
          ValueError: one line naming the step or the quantity with a bad shape.
        """
        step = _check_step("step", step)
        for name, values in flatten_logs(logs).items():
            if values.ndim != 1 or values.shape[0] < 1:
                raise ValueError(f"{name}: must be a non-empty [S] array of per-seed values, "
                                 f"got shape {values.shape}")
            for statistic, value in seed_aggregates(values).items():
                self._writer.add_scalar(f"{name}/{statistic}", value, global_step=step)

    def flush(self) -> None:
        """Write pending events to disk."""
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()

    def __enter__(self) -> AggregateWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def write_chunk_logs(writer: AggregateWriter, logs: Mapping[str, Any], first_step: int,
                     steps_per_row: int) -> None:
    """Write one chunk's logs row by row: row ``i`` at step ``first_step + i steps_per_row``.

    Args:
      writer: an :class:`AggregateWriter`.
      logs: ``{name: [S, R]}`` (one chunk of :class:`rljax.sweep.ChunkedSweep` logs for
        ``S`` seeds, ``R`` rows; nested mappings flattened with ``"/"``); every quantity
        has the same ``R``.
      first_step: the step of row 0, an int >= 0.
      steps_per_row: steps between rows, an int >= 1.

    Raises:
      ValueError: one line naming the argument or the quantity with a bad shape.
    """
    first_step = _check_step("first_step", first_step)
    if _check_step("steps_per_row", steps_per_row) < 1:
        raise ValueError(f"steps_per_row: must be an integer >= 1, got {steps_per_row!r}")
    flat = flatten_logs(logs)
    rows = None
    for name, values in flat.items():
        if values.ndim != 2:
            raise ValueError(f"{name}: must be a [S, rows] array, got shape {values.shape}")
        if rows is not None and values.shape[1] != rows:
            raise ValueError(f"{name}: has {values.shape[1]} rows, the other quantities "
                             f"{rows}")
        rows = values.shape[1]
    for i in range(rows or 0):
        writer.write(first_step + i * steps_per_row,
                     {name: values[:, i] for name, values in flat.items()})
