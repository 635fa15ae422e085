"""The run protocol every study follows, as plain functions with options as arguments.

A study is a module with ``NAME``, ``DESCRIPTION``, a frozen ``Config`` and
``run(config, out_dir, grid=None, options=None) -> summary``; its ``run`` passes
``options`` to every sweep it starts (``Sweep.run(..., options=options)``,
:func:`rljax.grid.run_grid`). :func:`run_study` is the protocol around it, the same
whether ``rljax run NAME`` or a user's Python calls it::

    from experiments import grpo_signal
    from rljax.study import run_study

    outcome = run_study(grpo_signal, grpo_signal.Config(seeds=64), "results/gs",
                        checkpoint_every=1)
    outcome.summary, outcome.nonfinite

It writes into ``out``: ``checkpoints/run.json`` (the run record: study, config, code
version, grid flags) while the run is going, each sweep's checkpoints under
``checkpoints/NN-<sweep>/``, the study's own files (``results.parquet``,
``summary.json``, ``report.md``, plots), ``nonfinite.json`` when a seed went non-finite,
and last ``config.json`` (so a directory with ``config.json`` holds a finished run);
then it removes ``checkpoints/``. ``resume=True`` continues an interrupted run of the
same config and code; ``overwrite=True`` starts again over an old one. Nothing here reads
global or context state: two calls with the same arguments do the same thing.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: The run's working state under ``out``: checkpoints and the run record.
CHECKPOINTS = "checkpoints"
RUN_RECORD = "run.json"
_PACKAGE_DIR = Path(__file__).resolve().parent


class RunRefused(ValueError):
    """The output directory or the resume request does not fit this run (one line)."""


@dataclass(frozen=True)
class RunOutcome:
    """What :func:`run_study` returns.

    Attributes:
      summary: the study's summary (what it wrote to ``summary.json``).
      nonfinite: the flagged seed runs (:attr:`rljax.sweep.SweepOptions.nonfinite`).
      record: the run record (study, config, code version, grid flags).
      wall_seconds: the run's wall time.
    """

    summary: dict[str, Any]
    nonfinite: list[dict[str, Any]]
    record: dict[str, Any]
    wall_seconds: float


def code_version(*modules: Any) -> str:
    """A fingerprint of the code a run executes: SHA-256 (first 16 hex digits) of the
    ``rljax`` package's source files and those of ``modules`` (e.g. the study's module),
    by name and content. A checkpoint written by other code is refused on resume."""
    files = sorted(_PACKAGE_DIR.rglob("*.py"))
    files += [Path(m.__file__) for m in modules if getattr(m, "__file__", None)]
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


#: The entry-point group studies are registered in (pyproject.toml), read by ``rljax run``.
EXPERIMENT_GROUP = "rljax.experiments"


def load_study(name: str) -> Any:
    """The registered study ``name`` (its module, from the :data:`EXPERIMENT_GROUP` entry
    points): how a study that compares other studies' methods reaches them without
    importing them (studies stay independent of each other).

    Raises:
      ValueError: one line naming the study and the registered ones.
    """
    from importlib.metadata import entry_points

    found = {ep.name: ep for ep in entry_points(group=EXPERIMENT_GROUP)}
    if name not in found:
        raise ValueError(f"study: {name!r} is not registered; registered: "
                         f"{', '.join(sorted(found))}")
    return found[name].load()


def study_name(module: Any) -> str:
    """The study's registered name (its ``NAME``, else its module name)."""
    return str(getattr(module, "NAME", module.__name__.rsplit(".", 1)[-1]))


def check_output(out: Path, *, resume: bool, overwrite: bool) -> None:
    """Refuse an output directory that does not fit the request (before any work):
    ``resume`` needs an interrupted run there; otherwise a directory holding anything
    needs ``overwrite`` (:func:`rljax.io.check_output_dir`)."""
    out = Path(out)
    if resume and overwrite:
        raise RunRefused("resume and overwrite: choose one (continue the run in out, or "
                         "start it again)")
    if resume:
        if not (out / CHECKPOINTS / RUN_RECORD).is_file():
            if (out / "config.json").is_file():
                raise RunRefused(f"--resume: {out} holds a finished run; nothing to resume")
            raise RunRefused(f"--resume: {out} has no checkpoints of an interrupted run")
        return
    if out.exists():  # a missing directory is always fine (and costs no pandas import)
        from rljax import io

        io.check_output_dir(out, overwrite)


def read_run_record(out: Path) -> dict[str, Any]:
    """The record of the interrupted run in ``out`` (``{}`` when there is none)."""
    try:
        return dict(json.loads((Path(out) / CHECKPOINTS / RUN_RECORD).read_text()))
    except (OSError, ValueError):
        return {}


def recorded_config(out: Path, name: str) -> dict[str, Any]:
    """The config an interrupted run of study ``name`` in ``out`` started with."""
    data = read_run_record(out)
    if not data:
        if (Path(out) / "config.json").is_file():
            raise RunRefused(f"--resume: {out} holds a finished run; nothing to resume")
        raise RunRefused(f"--resume: {out} has no checkpoints of an interrupted run")
    if data.get("experiment") != name:
        raise RunRefused(f"--resume: {out} holds a run of {data.get('experiment')!r}, "
                         f"not {name!r}")
    return dict(data.get("config", {}))


def check_same_run(out: Path, record: dict[str, Any]) -> None:
    """A resumed run must have the interrupted run's config and code."""
    there = read_run_record(out)
    for name, value in record["config"].items():
        old = there.get("config", {}).get(name)
        if old != value:
            raise RunRefused(f"--resume: {out} was started with {name}={old!r}, not "
                             f"{value!r}; resume with the same config")
    if there.get("code_version") != record["code_version"]:
        raise RunRefused(f"--resume: {out} was started by another code version "
                         f"({there.get('code_version')} there, {record['code_version']} "
                         "here); resume with that code or start again with --overwrite")


def call_study(module: Any, config: Any, out: Path, grid: Any,
               options: Any) -> dict[str, Any]:
    """``module.run(config, out, grid=..., options=...)`` (``grid`` only when given: a
    study without grid axes takes none).

    Raises:
      TypeError: one line, when the study's ``run`` takes no ``options`` (its sweeps
        would silently run without the checkpoints, resume or debug seed asked for).
    """
    import inspect

    params = inspect.signature(module.run).parameters
    if "options" not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        raise TypeError(f"study {study_name(module)}: run(config, out_dir, ..., options=None) "
                        "must take options and pass it to every sweep (Sweep.run(..., "
                        "options=options)); checkpoints, --resume and --debug-nans reach the "
                        "sweeps only that way")
    if grid is None:
        return module.run(config, Path(out), options=options)
    return module.run(config, Path(out), grid=grid, options=options)


def run_study(module: Any, config: Any, out: Path | str, *, grid: Any = None,
              resume: bool = False, overwrite: bool = False,
              checkpoint_every: int | None = None, tensorboard_dir: Path | str | None = None,
              progress: bool | None = None, grid_args: dict[str, Any] | None = None,
              state: dict[str, bool] | None = None, name: str | None = None,
              on_start: Any = None) -> RunOutcome:
    """Run study ``module`` with ``config`` into ``out`` (the protocol in the module doc).

    Args:
      module: the study's module (``experiments.ppo_cartpole``, or a user's own).
      config: its validated ``Config``.
      out: the output directory.
      grid: a :class:`rljax.grid.Grid` over the study's sweepable fields, or ``None``.
      resume, overwrite: continue an interrupted run in ``out`` / start over an old one.
      checkpoint_every: chunks between in-round checkpoints (``None``: rounds only).
      tensorboard_dir: per-chunk aggregates for TensorBoard (``SUPPORTS_TENSORBOARD``
        studies).
      progress: progress bars (``None``: only on a terminal).
      grid_args: how the grid was asked for (kept in the run record for a resume).
      state: filled with ``started`` / ``finished`` as the run goes (what a Ctrl-C
        handler reports).
      name: the study's registered name, recorded in ``config.json`` (default: its
        ``NAME``).
      on_start: called with no arguments once ``out`` and the resume request are
        checked, before anything is written (the CLI announces a grid there).

    Returns:
      :class:`RunOutcome`. In a multi-process run only process 0 writes ``out``.

    Raises:
      RunRefused: ``out`` does not fit (see :func:`check_output`, :func:`check_same_run`).
    """
    from rljax import io
    from rljax.distributed import is_primary
    from rljax.sweep import SweepOptions

    out = Path(out)
    name = study_name(module) if name is None else name
    primary = is_primary()
    state = {} if state is None else state
    record: dict[str, Any] = {"experiment": name, "config": asdict(config),
                              "code_version": code_version(module)}
    if grid is not None:
        record["grid_args"] = {**(grid_args or {}), "fields": list(grid.fields)}
    checkpoints = out / CHECKPOINTS
    if primary:
        check_output(out, resume=resume, overwrite=overwrite)
    if resume:
        check_same_run(out, record)
    if on_start is not None:
        on_start()
    if primary:
        if overwrite and checkpoints.is_dir():
            shutil.rmtree(checkpoints)  # the old run's working state, not results
        if overwrite or resume:  # an old config.json would mark a cut-short run
            (out / "config.json").unlink(missing_ok=True)  # as finished; written again last
        if not resume:
            io.write_json(checkpoints / RUN_RECORD, record)
        state["started"] = True
    options = SweepOptions(checkpoint_dir=checkpoints, checkpoint_every=checkpoint_every,
                           resume=resume, metadata=record, progress=progress,
                           tensorboard_dir=tensorboard_dir)
    scratch = None if primary else tempfile.TemporaryDirectory(prefix="rljax-process-")
    work_out = out if primary else Path(scratch.name)
    start = time.perf_counter()
    try:
        summary = call_study(module, config, work_out, grid, options)
    finally:
        if scratch is not None:
            scratch.cleanup()
    wall = time.perf_counter() - start
    if primary:
        io.write_json(out / "config.json", {
            "experiment": name,
            "config": asdict(config),
            "metadata": {**io.run_metadata(), "code_version": record["code_version"]},
            "wall_seconds": wall,
            "resumed": bool(resume),
            "nonfinite": options.nonfinite,
            **({"grid": grid.record()} if grid is not None else {}),
        })
        state["finished"] = True
        if options.nonfinite:
            io.write_json(out / "nonfinite.json", options.nonfinite)
        shutil.rmtree(checkpoints, ignore_errors=True)  # the results are written
    return RunOutcome(summary=summary, nonfinite=options.nonfinite, record=record,
                      wall_seconds=wall)


def debug_seed_run(module: Any, config: Any, seed: int, grid: Any = None) -> dict[str, Any]:
    """Re-run seed ``seed`` of every sweep of the study op by op with ``jax_debug_nans``.

    Returns:
      ``{"sweeps": [names], "found": NonFiniteFound | None, "analysis_error": str | None}``
      (the study's analysis of a one-seed run may fail; that is reported, not raised).
    """
    from rljax.sweep import NonFiniteFound, SweepOptions

    options = SweepOptions(debug_seed=seed, progress=False)
    found, analysis_error = None, None
    with tempfile.TemporaryDirectory(prefix="rljax-debug-") as tmp:
        try:
            call_study(module, config, Path(tmp), grid, options)
        except NonFiniteFound as err:
            found = err
        except Exception as err:  # the study's analysis of a one-seed debug run
            analysis_error = type(err).__name__
    return {"sweeps": list(options.names), "found": found, "analysis_error": analysis_error}
