"""The ``rljax`` command: ``list``, ``run``, ``bench``, ``compare``, ``export``.

Studies and benchmarks are found through entry-point groups (``rljax.experiments`` and
``rljax.benchmarks`` in pyproject.toml), so the library never imports ``experiments/``
and a user's own package can add studies of its own. Bad input prints one line
``error: <field>: <what is allowed>, got <value>`` on stderr and exits with status 2; no
traceback, no output directory.

**Start-up.** ``rljax --help``, ``rljax list`` and the argument errors that the command
line alone shows (unknown flags or study, bad integers, flags that exclude each other, an
output directory that needs ``--overwrite``, ``--resume`` with nothing to resume) answer
without importing JAX: ``rljax`` loads its names lazily, ``list`` reads each study's
``DESCRIPTION`` from its source, and a study's module is imported only once it is needed
(its ``Config`` checks ``--set`` values). ``rljax compare`` imports :mod:`rljax.compare`.

**Ctrl-C.** An interrupted command (``KeyboardInterrupt``, at any point, XLA's compile
included) prints at most a few lines on stderr and exits with status 130: for ``run``,
what was saved and the exact command that continues the run with ``--resume``, or, when
no checkpoint was saved yet, the command that starts it again (the run's own working
state, ``checkpoints/run.json``, is then removed). A run directory is finished when its
``config.json`` is written, last; an interrupted run never has one (``--overwrite``
removes the old one before the run starts).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import time
from collections.abc import Iterator
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, NoReturn

from rljax.study import (  # stdlib only: start-up stays light
    CHECKPOINTS,
    EXPERIMENT_GROUP,
    RUN_RECORD,
)

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT: what a shell reports for a command ended by Ctrl-C
BENCHMARK_GROUP = "rljax.benchmarks"


class UsageError(Exception):
    """Bad command-line input; the message is printed as one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        raise UsageError(message)


def registry(group: str) -> dict[str, Any]:
    """``{name: entry point}`` of an entry-point group, sorted by name."""
    return {ep.name: ep for ep in sorted(entry_points(group=group), key=lambda e: e.name)}


def _entry(group: str, name: str, what: str) -> EntryPoint:
    """The entry point ``name`` of ``group`` (nothing imported); unknown names exit 2."""
    known = registry(group)
    if name not in known:
        names = ", ".join(known) or "(none installed)"
        raise UsageError(f"unknown {what} {name!r}; known {what}s: {names}")
    return known[name]


def _load(group: str, name: str, what: str) -> Any:
    return _entry(group, name, what).load()


def cmd_list(args: argparse.Namespace) -> int:
    for name, ep in registry(EXPERIMENT_GROUP).items():
        print(f"{name:<20} {study_description(ep)}")
    return 0


DESCRIPTION_ATTRIBUTE = "DESCRIPTION"


def study_description(ep: EntryPoint | Any) -> str:
    """The one-line ``DESCRIPTION`` of the study module an entry point names.

    Read from the module's source without importing it (so ``rljax list`` imports no
    JAX) when the module assigns it once, at top level, a string literal; otherwise the
    module is imported and asked. A study that cannot be imported is listed with the
    reason rather than hiding the others.

    Args:
      ep: an entry point of the ``rljax.experiments`` group.

    Returns:
      The description, ``""`` when the module has none.
    """
    literal = _literal_description(ep)
    if literal is not None:
        return literal
    try:
        return str(getattr(ep.load(), DESCRIPTION_ATTRIBUTE, ""))
    except Exception as err:  # a broken third-party study must not hide the others
        return f"(cannot be imported: {err})"


def _literal_description(ep: EntryPoint | Any) -> str | None:
    """``DESCRIPTION`` of ``ep``'s module read statically, or ``None`` when it cannot be
    (an attribute entry point, no Python source, or not one top-level string literal).

    ``importlib.util.find_spec`` imports the parent packages only (``experiments/
    __init__.py`` imports nothing), never the study module itself.
    """
    import ast
    import importlib.util

    module = getattr(ep, "module", None)
    if not module or getattr(ep, "attr", None):
        return None
    try:
        spec = importlib.util.find_spec(module)
        if spec is None or not (spec.origin or "").endswith(".py"):
            return None
        tree = ast.parse(Path(spec.origin).read_bytes())
    except (ImportError, ValueError, OSError, SyntaxError):
        return None
    assigned = [node for node in ast.walk(tree)
                if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign)
                and any(isinstance(t, ast.Name) and t.id == DESCRIPTION_ATTRIBUTE
                        for t in (node.targets if isinstance(node, ast.Assign)
                                  else [node.target]))]
    if len(assigned) != 1 or assigned[0] not in tree.body:
        return None
    value = assigned[0].value
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    return None


def _positive_int(flag: str, text: str | None, minimum: int) -> int | None:
    if text is None:
        return None
    from rljax.config import parse_value

    value = parse_value(flag, text, int)
    if value < minimum:
        raise UsageError(f"{flag}: must be an integer >= {minimum}, got {text!r}")
    return value


TENSORBOARD_ATTRIBUTE = "SUPPORTS_TENSORBOARD"


def supports_tensorboard(module: Any) -> bool:
    """Whether a study module writes ``--tensorboard`` logs: it declares
    ``SUPPORTS_TENSORBOARD = True`` (a study whose sweeps are
    :class:`rljax.sweep.ChunkedSweep`, which write per-chunk aggregates). A study without
    it is refused with exit 2 before anything is written, rather than ignoring the flag."""
    return getattr(module, TENSORBOARD_ATTRIBUTE, False) is True


def cmd_run(args: argparse.Namespace) -> int:
    """``rljax run NAME``: check the command line, then run the study (see the module
    docstring for what a Ctrl-C prints)."""
    from rljax.config import build_config, field_types, parse_overrides, parse_value

    processes = _positive_int("--processes", args.processes, 1)
    local_devices = _positive_int("--local-devices", args.local_devices, 1)
    checkpoint_every = _positive_int("--checkpoint-every", args.checkpoint_every, 1)
    debug_seed = _positive_int("--debug-nans", args.debug_nans, 0)
    if args.resume and args.overwrite:
        raise UsageError("--resume and --overwrite: choose one (continue the run in --out, "
                         "or start it again)")
    if debug_seed is not None and (processes or 1) > 1:
        raise UsageError("--debug-nans: re-runs one seed in one process; drop --processes")
    if args.distributed and (processes or 1) > 1:
        raise UsageError("--distributed: this command is one process of a cluster job; "
                         "drop --processes (that launches local processes)")
    if checkpoint_every is not None and (processes or 1) > 1:
        raise UsageError("--checkpoint-every: in-round checkpoints need one process; with "
                         "--processes, checkpoints are taken when a round finishes")
    if local_devices is not None and not args.child and (processes or 1) == 1:
        raise UsageError("--local-devices: only with --processes N (it sets each child's CPU "
                         "device count); for one process set XLA_FLAGS yourself")

    # What the command line (and the output directory) alone can refuse is refused before
    # the study's module, and so JAX, is imported.
    study = _entry(EXPERIMENT_GROUP, args.name, "experiment")
    sweep_ints = {field: parse_value(field, getattr(args, field), int)
                  for field in ("seeds", "block_size", "base_seed", "first_seed")
                  if getattr(args, field) is not None}
    grid_args = _grid_args(args)
    out = Path(args.out) if args.out else Path("results") / args.name
    recorded = _recorded_config(out, args.name) if args.resume else None
    if not args.child and not args.distributed and debug_seed is None:
        _check_out(out, args.resume, args.overwrite)

    if args.child or args.distributed:  # before anything touches a JAX backend
        from rljax import distributed

        distributed.initialize()
    module = study.load()
    if args.tensorboard is not None and not supports_tensorboard(module):
        raise UsageError(f"--tensorboard: study {args.name!r} writes no TensorBoard logs (only "
                         f"studies declaring {TENSORBOARD_ATTRIBUTE} = True, whose ChunkedSweep "
                         "writes them, do); drop the flag")
    overrides = parse_overrides(module.Config, args.set or [])
    for field, value in sweep_ints.items():
        if field not in field_types(module.Config):
            why = ("its seed ids always start at 0" if field == "first_seed"
                   else "it runs no seed sweep")
            raise UsageError(f"--{field.replace('_', '-')}: study {args.name!r} has no "
                             f"{field} field ({why}); drop the flag")
        overrides[field] = value
    if args.env is not None:
        overrides["env"] = _env_override(module, args.name, args.env, overrides)
    if recorded is not None:
        swept = set(_recorded_grid_args(out).get("fields", []))
        overrides = {**{k: v for k, v in recorded.items() if k not in swept}, **overrides}
        grid_args = _resume_grid_args(out, grid_args)
    config = build_config(module.Config, overrides)
    grid = _build_grid(module, args.name, overrides, grid_args, config, args.yes)
    if debug_seed is not None:
        seeds = getattr(config, "seeds", None)
        if seeds is not None and debug_seed >= seeds:
            raise UsageError(f"--debug-nans: seed must be in 0..{seeds - 1} (this run's seeds), "
                             f"got {debug_seed}")
        with _one_blas_thread():
            return _debug_nans(module, config, debug_seed, grid)
    progress = {"out_existed": out.exists(), "started": False, "finished": False}
    try:
        if (processes or 1) > 1:
            progress["started"] = True  # process 0 writes the run record
            return _launch_local(processes, local_devices, _argv(args))

        if args.distributed:
            from rljax import distributed

            if distributed.is_primary():
                _check_out(out, args.resume, args.overwrite)
        with _one_blas_thread():
            return _run_study(module, args, config, out, checkpoint_every, grid, grid_args,
                              progress)
    except KeyboardInterrupt:
        _report_interrupted_run(args, out, progress)
        return EXIT_INTERRUPTED


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """:func:`rljax.cpu_threads.blas_threads` ``(1)`` around a command's XLA work
    (LAPACK off XLA's cores, same bits); entered only once the arguments are checked,
    since it imports JAX."""
    from rljax.cpu_threads import blas_threads

    with blas_threads(1):
        yield


def _report_interrupted_run(args: argparse.Namespace, out: Path,
                            progress: dict[str, bool]) -> None:
    """After a Ctrl-C of ``rljax run``: say what was saved and how to go on (<= 2 lines).

    With a finished checkpoint in ``out/checkpoints`` (or when resuming): the command that
    continues the run, the user's own with ``--resume`` added and ``--overwrite`` dropped.
    Without one, the run's working state (``run.json`` only) is removed, and so is ``out``
    if this run created it and it is empty, so the same command starts the run again.
    A local process of ``--processes`` (``--child``) or a non-primary process of a
    ``--distributed`` job says nothing: the process that started the run speaks for it.
    """
    if args.child or (args.distributed and not _is_primary()):
        return
    checkpoints = out / CHECKPOINTS
    if progress["finished"]:  # config.json is written: only the clean-up was cut short
        import shutil

        shutil.rmtree(checkpoints, ignore_errors=True)
        _say(f"interrupted after the results were written: {out}/ holds the finished run")
        return
    saved = saved_checkpoints(out)
    if saved or args.resume:
        where = ", ".join(f"{name}: step {step}" for name, step in list(saved.items())[:3])
        where += ", ..." if len(saved) > 3 else ""
        _say(f"interrupted: checkpoints kept in {checkpoints}/ ({where})" if saved else
             f"interrupted before a checkpoint was saved; {checkpoints}/ is kept")
        _say(f"continue with: {resume_command(_argv(args))}")
        return
    if progress["started"]:  # this run's record only: nothing worth resuming
        import shutil

        shutil.rmtree(checkpoints, ignore_errors=True)
        if not progress["out_existed"]:
            with contextlib.suppress(OSError):
                out.rmdir()  # only if empty
    again = _argv(args)
    if out.is_dir() and any(out.iterdir()) and not _has_flag(again, "--overwrite"):
        again.append("--overwrite")
    _say("interrupted before the first checkpoint: nothing to resume")
    _say(f"start again with: {shlex.join(['rljax', *again])}")


def saved_checkpoints(out: Path) -> dict[str, int]:
    """The finished checkpoints of an interrupted run in ``out``.

    A finished checkpoint is a directory ``<step>/`` holding ``checkpoint.json``
    (:class:`rljax.checkpoint.Checkpointer` renames it into place only once written), under
    ``out/checkpoints/<sweep>/`` (chunk states) or ``out/checkpoints/<sweep>/rounds/``
    (finished rounds); hidden ``.tmp-*`` / ``.trash-*`` directories are not.

    Args:
      out: the run's output directory.

    Returns:
      ``{checkpoint directory relative to out/checkpoints: latest finished step}``, sorted.
    """
    root = out / CHECKPOINTS
    latest: dict[str, int] = {}
    if root.is_dir():
        for manifest in root.rglob("checkpoint.json"):
            step = manifest.parent
            parts = step.relative_to(root).parts
            if step.name.isdigit() and not any(p.startswith(".") for p in parts):
                name = step.parent.relative_to(root).as_posix()
                latest[name] = max(latest.get(name, -1), int(step.name))
    return dict(sorted(latest.items()))


def resume_command(argv: list[str]) -> str:
    """The shell command that continues an interrupted ``rljax run``: the user's arguments
    with ``--resume`` added (once) and ``--overwrite`` dropped (it would start again).

    Args:
      argv: the ``rljax`` arguments of the interrupted run (``["run", NAME, ...]``).

    Returns:
      ``rljax run NAME ... --resume``, quoted for a POSIX shell.
    """
    kept = [a for a in argv if not _abbreviates(a, "--overwrite")]
    if not _has_flag(kept, "--resume"):
        kept.append("--resume")
    return shlex.join(["rljax", *kept])


def _abbreviates(token: str, flag: str) -> bool:
    """Whether argparse reads ``token`` as ``flag`` (a long option or an unambiguous prefix
    of it; an ambiguous prefix is refused before a run starts)."""
    return token.startswith("--") and len(token) > 2 and flag.startswith(token)


def _argv(args: argparse.Namespace) -> list[str]:
    """The ``rljax`` arguments ``args`` were parsed from (set by :func:`main`)."""
    return list(getattr(args, "argv", None) or sys.argv[1:])


def _has_flag(argv: list[str], flag: str) -> bool:
    return any(_abbreviates(a, flag) for a in argv)


def _is_primary() -> bool:
    try:
        from rljax.distributed import is_primary

        return bool(is_primary())
    except Exception:  # JAX not initialised: this process is all there is
        return True


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


ENV_FIELD = "env"


def _env_override(module: Any, name: str, env: str, overrides: dict[str, Any]) -> str:
    """``--env NAME`` is the study's ``env`` config field (a study without one refuses it;
    the name itself is checked by the study's ``Config.validate``)."""
    from rljax.config import field_types

    if ENV_FIELD not in field_types(module.Config):
        raise UsageError(f"--env: study {name!r} takes no environment (only studies with an "
                         f"{ENV_FIELD!r} config field, e.g. ppo, do); drop the flag")
    if ENV_FIELD in overrides and overrides[ENV_FIELD] != env:
        raise UsageError(f"--env: also given as --set env={overrides[ENV_FIELD]}; give it once")
    return env


def _grid_args(args: argparse.Namespace) -> dict[str, Any]:
    """The grid flags as given (kept in the run record so ``--resume`` rebuilds the grid)."""
    from rljax.config import parse_value

    samples = None if args.samples is None else parse_value("--samples", args.samples, int)
    seed = 0 if args.sample_seed is None else parse_value("--sample-seed", args.sample_seed, int)
    return {"grid": list(args.grid or []), "sample": list(args.sample or []),
            "samples": samples, "sample_seed": seed}


def _announce_grid(module: Any, grid: Any, config: Any) -> None:
    """One stderr line: how many configs and seeds, and how many programs compile."""
    from rljax.grid import split_structural, traced_fields

    seeds = getattr(config, "seeds", 1)
    traced = set(traced_fields(module.Config))
    configs = grid.configs(config)
    off = {f for f in grid.fields if any(getattr(c, f) is None for c in configs)}
    structural = [f for f in grid.fields if f not in traced or f in off]
    if structural:
        programs = len(split_structural(configs))
        print(f"grid: {len(grid)} configs x {seeds} seeds; {programs} distinct value(s) of the "
              f"structural field(s) {', '.join(structural)} (None is structural): one compiled "
              f"program each (per program of the study)", file=sys.stderr)
    else:
        print(f"grid: {len(grid)} configs x {seeds} seeds; traced fields ({', '.join(grid.fields)})"
              " share each of the study's compiled programs (no extra compile)", file=sys.stderr)


def _recorded_grid_args(out: Path) -> dict[str, Any]:
    import json

    try:
        return dict(json.loads((out / CHECKPOINTS / RUN_RECORD).read_text()).get("grid_args")
                    or {})
    except (OSError, ValueError):
        return {}


def _resume_grid_args(out: Path, given: dict[str, Any]) -> dict[str, Any]:
    """``--resume`` reuses the interrupted run's grid; grid flags given again must match."""
    there = {k: v for k, v in _recorded_grid_args(out).items() if k != "fields"}
    if not (given["grid"] or given["sample"] or given["samples"] is not None):
        return there or given
    if there and there != given:
        raise UsageError(f"--resume: {out} was started with grid {there}, not {given}; resume "
                         "with the same --grid/--sample flags (or none)")
    return given


def _build_grid(module: Any, name: str, overrides: dict[str, Any], grid_args: dict[str, Any],
                config: Any, yes: bool) -> Any:
    """The validated :class:`rljax.grid.Grid` of the grid flags, or ``None``."""
    from rljax.grid import CONFIRM_PAIRS, make_grid

    if not (grid_args.get("grid") or grid_args.get("sample")
            or grid_args.get("samples") is not None):
        return None
    grid = make_grid(module.Config, overrides, grid=grid_args.get("grid") or [],
                     sample=grid_args.get("sample") or [], samples=grid_args.get("samples"),
                     sample_seed=grid_args.get("sample_seed") or 0)
    import inspect

    if "grid" not in inspect.signature(module.run).parameters:
        raise UsageError(f"--grid/--sample: study {name!r} runs one configuration (its run "
                         "takes no grid); drop the flag, or vary a field with --set")
    seeds = getattr(config, "seeds", 1)
    pairs = len(grid) * seeds
    if pairs > CONFIRM_PAIRS and not yes:
        raise UsageError(f"--grid: {len(grid)} configs x {seeds} seeds = {pairs:,} runs (more "
                         f"than {CONFIRM_PAIRS:,}); add --yes to confirm")
    return grid


def _check_out(out: Path, resume: bool, overwrite: bool) -> None:
    """Refuse an output directory that holds something unless asked (before any work)."""
    from rljax.study import RunRefused, check_output

    try:
        check_output(out, resume=resume, overwrite=overwrite)
    except RunRefused as err:
        raise UsageError(str(err)) from None


def _recorded_config(out: Path, name: str) -> dict[str, Any]:
    """The config an interrupted run in ``out`` started with (``--resume`` reuses it)."""
    from rljax.study import RunRefused, recorded_config

    try:
        return recorded_config(out, name)
    except RunRefused as err:
        raise UsageError(str(err)) from None


def _run_study(module: Any, args: argparse.Namespace, config: Any, out: Path,
               checkpoint_every: int | None, grid: Any = None,
               grid_args: dict[str, Any] | None = None,
               progress: dict[str, bool] | None = None) -> int:
    """Run the study into ``out`` through :func:`rljax.study.run_study` (the protocol a
    Python caller gets too); ``progress`` (``started``, ``finished``) tells a Ctrl-C
    handler what this run has written so far."""
    from rljax.distributed import is_primary
    from rljax.study import RunRefused, run_study

    def announce() -> None:
        if grid is not None and is_primary():
            _announce_grid(module, grid, config)

    try:
        outcome = run_study(module, config, out, grid=grid, resume=args.resume,
                            overwrite=args.overwrite, checkpoint_every=checkpoint_every,
                            tensorboard_dir=args.tensorboard, grid_args=grid_args,
                            state=progress, name=args.name, on_start=announce)
    except RunRefused as err:
        raise UsageError(str(err)) from None
    if not is_primary():
        return 0
    print(f"wrote {out}/ (config.json, results.parquet, summary.json, report.md, *.png)")
    for key, value in outcome.summary.items():
        if isinstance(value, int | float | str) or value is None:
            print(f"  {key}: {value}")
    nonfinite = outcome.nonfinite
    if nonfinite:
        shown = ", ".join(("" if "config" not in r else f"config {r['config']} ")
                          + f"seed {r['seed']} ({r['sweep']}, step {r['step']})"
                          for r in nonfinite[:5])
        more = f" and {len(nonfinite) - 5} more" if len(nonfinite) > 5 else ""
        print(f"warning: {len(nonfinite)} seed run(s) went non-finite: {shown}{more}; "
              f"the other seeds are unaffected; listed in {out}/nonfinite.json; "
              f"find the operation with --debug-nans SEED", file=sys.stderr)
    return 0


def _debug_nans(module: Any, config: Any, seed: int, grid: Any = None) -> int:
    """Re-run one seed of every sweep of the study op by op with ``jax_debug_nans``."""
    from rljax.study import debug_seed_run

    result = debug_seed_run(module, config, seed, grid)
    found = result["found"]
    if found is not None:
        print(f"seed {seed}, sweep {found.sweep!r}: first non-finite value from "
              f"{found.operation!r} at {found.location}")
        return 1
    if result["analysis_error"]:
        print(f"(the study's analysis stopped on the debug run: {result['analysis_error']})",
              file=sys.stderr)
    names = ", ".join(result["sweeps"]) or "none"
    print(f"seed {seed} stayed finite when re-run op by op in every sweep ({names})")
    return 0


def _launch_local(processes: int, local_devices: int | None, argv: list[str]) -> int:
    """Run this command as ``processes`` local JAX processes (``jax.distributed`` over
    localhost, gloo collectives on CPU); process 0 writes the results."""
    import os
    import socket
    import subprocess

    from rljax import distributed

    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        port = sock.getsockname()[1]
    argv = _child_argv(argv)
    children = []
    for pid in range(processes):
        env = dict(os.environ)
        env.update({distributed.ENV_COORDINATOR: f"localhost:{port}",
                    distributed.ENV_NUM_PROCESSES: str(processes),
                    distributed.ENV_PROCESS_ID: str(pid)})
        if local_devices is not None:
            flags = env.get("XLA_FLAGS", "")
            flags = " ".join(f for f in flags.split()
                             if not f.startswith("--xla_force_host_platform_device_count"))
            env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={local_devices}"
        children.append(subprocess.Popen(
            [sys.executable, "-m", "rljax.cli", *argv, "--child"], env=env,
            stdout=None if pid == 0 else subprocess.DEVNULL,
            stderr=None if pid == 0 else subprocess.PIPE))
    status = 0
    try:
        while children:
            for child in list(children):
                code = child.poll()
                if code is None:
                    continue
                children.remove(child)
                if code != 0:
                    status = status or code
                    if child.stderr is not None:
                        tail = child.stderr.read().decode(errors="replace").strip()
                        if tail:
                            print(tail.splitlines()[-1], file=sys.stderr)
                    for other in children:  # the rest would wait for it forever
                        other.kill()
            time.sleep(0.05)
    finally:
        for child in children:
            child.kill()
        for child in children:  # gone before a Ctrl-C report looks at what they wrote
            child.wait()
    return status


def _child_argv(argv: list[str]) -> list[str]:
    """The parent's ``run`` arguments without ``--processes``/``--local-devices``."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--processes", "--local-devices"):
            skip = True
            continue
        if arg.startswith(("--processes=", "--local-devices=")):
            continue
        out.append(arg)
    return out


def cmd_bench(args: argparse.Namespace) -> int:
    module = _load(BENCHMARK_GROUP, args.name, "benchmark")
    if args.env is not None:
        if not getattr(module, "ACCEPTS_ENV", False):
            raise UsageError(f"--env: benchmark {args.name!r} takes no environment (only "
                             "benchmarks declaring ACCEPTS_ENV = True, e.g. ppo, do); drop "
                             "the flag")
        try:
            with _one_blas_thread():
                result = module.run(env=args.env)
        except ValueError as err:  # an env the benchmark cannot run: one line
            raise UsageError(f"--env: {err}") from None
    else:
        with _one_blas_thread():
            result = module.run()
    print(module.table(result))
    if args.json:
        from rljax import io

        io.write_json(args.json, result)
        print(f"wrote {args.json}")
    return 0


#: How to open each tracker's export (printed after it is written).
EXPORT_HINTS = {
    "mlflow": "open it with: MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri {path}",
    "wandb": "upload it with: wandb sync {path}/wandb/offline-run-*",
    "tensorboard": "open it with: tensorboard --logdir {path}",
}


def cmd_export(args: argparse.Namespace) -> int:
    """``rljax export DIR --to TRACKER``: see :func:`rljax.trackers.export_run`."""
    from rljax.trackers import ExportError, RunDirError, export_run

    try:
        result = export_run(args.dir, args.to, out=args.out, force=args.force,
                            step=args.step)
    except (ExportError, RunDirError) as err:
        raise UsageError(str(err)) from None
    print(f"wrote {result.path} ({result.runs} {result.tracker} run(s) of "
          f"{result.experiment!r}, one per (config, seed))")
    print(f"  {EXPORT_HINTS[result.tracker].format(path=result.path)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rljax", description="rljax: seed sweeps, studies and benchmarks")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    sub.add_parser("list", help="list the studies").set_defaults(func=cmd_list)

    run = sub.add_parser("run", help="run a study over many seeds")
    run.add_argument("name")
    run.add_argument("--seeds", help="number of seeds (>= 1)")
    run.add_argument("--block-size", dest="block_size",
                     help="seeds per device per compiled block (>= 1); fixes the result bits")
    run.add_argument("--base-seed", dest="base_seed", help="base seed (>= 0)")
    run.add_argument("--first-seed", dest="first_seed",
                     help="first seed id (>= 0): run seeds first_seed .. first_seed + seeds - "
                          "1, e.g. fresh evaluation seeds after tuning (studies with a "
                          "first_seed field, e.g. ppo)")
    run.add_argument("--env", metavar="NAME",
                     help="environment of a study that takes one (its 'env' field, e.g. "
                          "ppo: a gymnax id such as Pendulum-v1); others exit 2")
    run.add_argument("--out", help="output directory (default results/NAME)")
    run.add_argument("--set", action="append", metavar="KEY=VALUE",
                     help="override a config field (repeatable)")
    run.add_argument("--overwrite", action="store_true",
                     help="replace the results in a non-empty output directory")
    run.add_argument("--resume", action="store_true",
                     help="continue the interrupted run in --out from its checkpoints "
                          "(same config and code; --set may only repeat its values)")
    run.add_argument("--checkpoint-every", dest="checkpoint_every", metavar="K",
                     help="also checkpoint every K chunks within a round (chunked studies); "
                          "finished rounds are always checkpointed")
    run.add_argument("--processes", metavar="N",
                     help="run as N local JAX processes (jax.distributed over localhost)")
    run.add_argument("--local-devices", dest="local_devices", metavar="K",
                     help="with --processes: CPU devices per process")
    run.add_argument("--distributed", action="store_true",
                     help="this is one process of a multi-host job: call "
                          "jax.distributed.initialize() (SLURM, Open MPI auto-detected)")
    run.add_argument("--debug-nans", dest="debug_nans", metavar="SEED",
                     help="re-run seed SEED op by op with jax_debug_nans and name the first "
                          "operation that made a NaN; writes nothing")
    run.add_argument("--tensorboard", metavar="DIR",
                     help="write per-chunk aggregates across seeds to DIR (chunked studies, "
                          "those declaring SUPPORTS_TENSORBOARD = True; others exit 2)")
    run.add_argument("--grid", action="append", metavar="KEY=V1,V2,...",
                     help="sweep a field over these values (repeatable: the Cartesian "
                          "product); only fields its config declares sweepable (traced or "
                          "structural, rljax.config.param)")
    run.add_argument("--sample", action="append", metavar="KEY=KIND:ARGS",
                     help="random search: KIND is loguniform:LO:HI, uniform:LO:HI, "
                          "intuniform:LO:HI or choice:V1:V2:... (repeatable; with --samples)")
    run.add_argument("--samples", metavar="K", help="number of sampled configurations")
    run.add_argument("--sample-seed", dest="sample_seed", metavar="S",
                     help="seed of the --sample draws (default 0)")
    run.add_argument("--yes", action="store_true",
                     help="confirm a grid of more than a million (config, seed) runs")
    run.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    run.set_defaults(func=cmd_run)

    bench = sub.add_parser("bench", help="run a benchmark and print its table")
    bench.add_argument("name")
    bench.add_argument("--env", metavar="NAME",
                       help="environment of a benchmark that takes one (ACCEPTS_ENV, e.g. "
                            "ppo: default CartPole-v1); others exit 2")
    bench.add_argument("--json", help="also write the figures to this JSON file")
    bench.set_defaults(func=cmd_bench)

    export = sub.add_parser("export", help="write a finished run's curves and summary for "
                                           "MLflow, W&B or TensorBoard")
    export.add_argument("dir", metavar="DIR",
                        help="a finished run directory (rljax run STUDY --out DIR)")
    export.add_argument("--to", required=True, metavar="TRACKER",
                        help="mlflow (a local file store), wandb (offline runs for wandb "
                             "sync) or tensorboard (event files)")
    export.add_argument("--out", metavar="PATH",
                        help="output directory (default DIR.mlflow / DIR.wandb / "
                             "DIR.tensorboard beside DIR)")
    export.add_argument("--force", action="store_true",
                        help="replace an existing output directory")
    export.add_argument("--step", metavar="COL",
                        help="x-axis column of results.parquet (default: its step column)")
    export.set_defaults(func=cmd_export)

    sub.add_parser("compare", help="compare finished runs (see 'rljax compare --help')",
                   add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rljax`` command; returns the exit status.

    0 on success, 2 after one line ``error: ...`` on stderr for bad input, 130 after a
    Ctrl-C (``KeyboardInterrupt``, caught wherever it lands).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        with _swallowed_interrupts_redelivered():
            if argv and argv[0] == "compare":
                from rljax.compare import main as compare_main

                return compare_main(argv[1:])
            return _dispatch(argv)
    except KeyboardInterrupt:  # a started `rljax run` reports its own (saved, --resume)
        if "--child" not in argv:
            _say("interrupted")
        return EXIT_INTERRUPTED


#: Seconds before a Ctrl-C that Python swallowed is delivered again.
REDELIVER_SECONDS = 0.05


@contextlib.contextmanager
def _swallowed_interrupts_redelivered() -> Iterator[None]:
    """Deliver again a ``KeyboardInterrupt`` that Python swallowed, inside the block.

    Python raises ``KeyboardInterrupt`` in whatever Python code the main thread runs
    next; when that is a garbage-collector callback (JAX registers one,
    ``_xla_gc_callback``) or a ``__del__``, the exception cannot propagate: Python prints
    ``Exception ignored in ...`` with a traceback and goes on, and the run continued to
    its end (seen 3 times in 6 Ctrl-Cs during ``rljax run ppo-cartpole``'s compile). Such
    an exception reaches :data:`sys.unraisablehook`; this hook keeps it quiet and
    interrupts the main thread again shortly after, from a timer thread (an interrupt
    raised at once would land inside the hook, and be swallowed again).
    """
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type,
                                                          KeyboardInterrupt):
            import _thread
            import threading

            timer = threading.Timer(REDELIVER_SECONDS, _thread.interrupt_main)
            timer.daemon = True  # never holds up the interpreter's exit
            timer.start()
            return
        previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


def _dispatch(argv: list[str]) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        args.argv = argv
        return args.func(args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except (ValueError, FileExistsError) as err:
        if _is_refusal(err):
            print(f"error: {err}", file=sys.stderr)
            return EXIT_USAGE
        raise


#: The errors printed as one line with exit 2: ``(module, class)``, looked up among the
#: modules already imported (an instance cannot exist otherwise), so a refusal imports
#: nothing (``rljax.checkpoint`` would import JAX).
REFUSALS = (("rljax.config", "ConfigError"), ("rljax.io", "OutputExistsError"),
            ("rljax.checkpoint", "CheckpointError"))


def _is_refusal(err: BaseException) -> bool:
    return any(isinstance(err, getattr(sys.modules[module], name))
               for module, name in REFUSALS if module in sys.modules)


def exit_with(code: int) -> NoReturn:
    """Ends the process with ``code``.

    After a refusal (exit 2) or a Ctrl-C (exit 130) the process ends at once
    (``os._exit`` once stdout and stderr are flushed). A failed checkpoint read can leave
    tensorstore threads whose callbacks on orbax's closed event loop print
    ``RuntimeError: Event loop is closed`` tracebacks while the interpreter shuts down,
    which would turn the one-line error into a wall of text; and a Ctrl-C during XLA's
    compile leaves its compile threads running, which the interpreter's teardown raced
    into a segmentation fault (seen on ``rljax run ppo-cartpole``). Nothing is left to
    write then (a refusal writes nothing; an interrupted run has reported what it saved),
    so no exit handler is lost.
    """
    if code in (EXIT_USAGE, EXIT_INTERRUPTED):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def entry() -> NoReturn:
    """The ``rljax`` console command: :func:`main` on ``sys.argv``, then :func:`exit_with`."""
    try:
        code = main()
    except KeyboardInterrupt:  # a second Ctrl-C while the first was being reported
        code = EXIT_INTERRUPTED
    exit_with(code)


if __name__ == "__main__":
    entry()
