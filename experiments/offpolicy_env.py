"""The harness of the studies ``dqn``, ``pqn`` and ``sac`` (``rljax run dqn|pqn|sac --env
NAME``): an off-policy trainer on a gymnax env, at a peer's published configuration, over
many seeds (:mod:`experiments.dqn_env`, :mod:`experiments.pqn_env`,
:mod:`experiments.sac_env` hold each study's ``Config``; this module their shared run).

Training: :func:`rljax.training.dqn.make_dqn_chunks` (``pqn``, ``sac`` alike) under
:func:`rljax.grid.run_grid` (a :class:`~rljax.sweep.ChunkedSweep`: fixed seed blocks,
progress, checkpoints, resume; a grid's traced fields, e.g. ``learning_rate``, vmapped
with the seeds in one program), per logged row the sum and count of the returns of the
training episodes that finished. **Test return** (the headline): per seed the mean return
of ``eval_episodes`` fresh episodes with the greedy policy (argmax Q; SAC's squashed mean)
after training, IQM over seeds with a 95 % interval
(:func:`rljax.stats.reported.reported_interval`, its measured coverage stated);
**training return**: per seed the mean return of the training episodes of the last
``final_updates`` updates (exploring, epsilon-greedy or sampled). Where most seeds sit at
one largest value (CartPole's 500-step cap) the IQM's interval collapses onto it, so the
report also gives the fraction of seeds at that value with an exact (Clopper-Pearson)
interval: no claim rests on the cap itself.

A grid (``--grid learning_rate=...``) runs every configuration on the same seeds and keys
and reports each one's test-return IQM, and each against the best with paired differences
(mean over seeds, interval of ``reported_interval("paired_difference", ...)``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pandas as pd
import scipy.stats

from rljax import io
from rljax.config import ConfigError, param
from rljax.envs import registry
from rljax.grid import Grid, grid_columns, run_grid
from rljax.report import Figure, figures_table, format_number, pyplot
from rljax.stats.reported import reported_interval
from rljax.sweep import MAX_SEEDS
from rljax.training import final_returns
from rljax.training.chunking import auto_chunk_updates, chunk_size_error
from rljax.training.episode_returns import binned_returns, chunked_runs
from rljax.training.offpolicy_presets import preset_for, preset_names


@dataclass(frozen=True)
class RunFields:
    """The run's shape, shared by the off-policy studies' configs (a mixin; the trainer's
    fields come from the trainer config each study extends)."""

    env: str = param("CartPole-v1", "a gymnax id; --env NAME", sweep=False)
    normalize_observations: bool = param(False, "normalise observations over the seed's "
                                         "envs, at the env (NormalizeObservation)")
    seeds: int = param(16, "seeds per configuration (>= 2: intervals need two)",
                       sweep=False, low=2, high=MAX_SEEDS)
    block_size: int = param(16, "seeds per compiled block (part of the run's config)",
                            sweep=False, low=1)
    base_seed: int = param(0, "the sweep's base seed", sweep=False, low=0, high=2**31 - 1)
    first_seed: int = param(0, "seed ids first_seed .. first_seed + seeds - 1 (fresh "
                            "evaluation seeds)", sweep=False, low=0, high=MAX_SEEDS)
    chunk_updates: int = param(0, "updates per chunk; 0: auto, about 16 chunks",
                               sweep=False, low=0)
    log_every: int = param(1, "updates per logged row", sweep=False, low=1)
    final_updates: int = param(0, "updates in the training-return window; 0: the last 2 %",
                               sweep=False, low=0)
    eval_episodes: int = param(32, "greedy test episodes per seed after training",
                               sweep=False, low=1, high=2**16)
    curve_points: int = param(50, "points of the return curve (capped at the logged rows)",
                              sweep=False, low=1)
    bootstrap_reps: int = param(2000, "bootstrap resamples", sweep=False, low=1)
    confidence: float = param(0.95, "the intervals' confidence", sweep=False, low=0.0,
                              high=1.0, low_open=True, high_open=True)

    @property
    def chunk_size(self) -> int:
        """Updates per chunk: ``chunk_updates``, or (0) about 16 chunks."""
        return self.chunk_updates or auto_chunk_updates(self.num_updates, self.log_every)

    @property
    def num_rows(self) -> int:
        """Logged rows per seed."""
        return self.num_updates // self.log_every

    @property
    def final_size(self) -> int:
        """Updates in the training-return window (a multiple of ``log_every``)."""
        if self.final_updates:
            return self.final_updates
        return max(self.log_every, (self.num_updates // 50) // self.log_every * self.log_every)

    def validate_run(self) -> None:
        """The run-shape checks (after the trainer's): preset, env, chunk, window."""
        check_preset(self)
        if self.first_seed > MAX_SEEDS - self.seeds:
            raise ConfigError(f"first_seed: must be an integer in [0, "
                              f"{MAX_SEEDS - self.seeds}], got {self.first_seed!r}")
        if self.num_updates % self.log_every:
            raise ConfigError(f"log_every: must divide the number of updates "
                              f"{self.num_updates}, got {self.log_every}")
        error = chunk_size_error(self.chunk_size, self.num_updates, self.log_every)
        if error:
            raise ConfigError(error)
        if self.final_size > self.num_updates or self.final_size % self.log_every:
            raise ConfigError(f"final_updates: must be a multiple of log_every = "
                              f"{self.log_every} and <= the number of updates "
                              f"{self.num_updates}, got {self.final_updates}")
        try:
            self.check_actions(make_env(self))  # the env's action space vs the algorithm
        except ValueError as err:
            message = str(err).removeprefix("from_gymnax: ")
            raise ConfigError(f"env: {message}") from None

    def make_chunks_for(self, env: Any) -> Any:
        """The chunked trainer of this config (each study's Config defines it)."""
        raise NotImplementedError

    def check_actions(self, env: Any) -> None:
        """One-line ``ValueError`` naming the env when the algorithm cannot take its
        action space (each study's Config defines it; the network's shapes are checked
        when the program is built)."""
        raise NotImplementedError


def make_env(config: RunFields) -> Any:
    """The study's environment: :func:`rljax.envs.registry.make_env` of ``config.env``
    (flattened observations; ``normalize_observations`` at the env)."""
    return registry.make_env(config.env, normalize_observations=config.normalize_observations,
                             gamma=config.gamma)


def make_chunks(config: RunFields) -> Any:
    """The chunked program of ``config`` (its traced fields read from ``hparams``)."""
    return config.make_chunks_for(make_env(config))


def _seed_figures(config: RunFields, run: dict, key: jax.Array) -> dict[str, Any]:
    """Per seed: test return (mean of the greedy episodes) and training return; IQM of
    each with its interval."""
    test = np.asarray(run["final"]["eval_return_mode"], np.float64).mean(axis=1)
    train = final_returns(run["logs"], last=config.final_size // config.log_every)
    test_key, train_key = jax.random.split(key)
    test_ci = reported_interval("iqm", test, key=test_key, reps=config.bootstrap_reps,
                                confidence=config.confidence)
    ok = train[~np.isnan(train)]
    train_ci = (reported_interval("iqm", ok, key=train_key, reps=config.bootstrap_reps,
                                  confidence=config.confidence) if ok.size >= 2 else None)
    top = float(np.max(test))
    at_top = int(np.sum(test == top))
    low, high = scipy.stats.binomtest(at_top, test.size).proportion_ci(config.confidence,
                                                                        "exact")
    return {
        "test_return_iqm": float(test_ci.point),
        "test_return_ci": [float(test_ci.low), float(test_ci.high)],
        "test_return_interval_note": test_ci.note.rstrip("."),
        "test_returns": test.tolist(),
        "test_return_max": top,
        "seeds_at_max": at_top,
        "fraction_at_max_ci": [float(low), float(high)],
        "train_return_iqm": float(train_ci.point) if train_ci else None,
        "train_return_ci": ([float(train_ci.low), float(train_ci.high)] if train_ci
                            else [None, None]),
        "train_returns": [None if np.isnan(x) else float(x) for x in train],
        "nonfinite_seeds": int(np.sum(run["first_nonfinite"] >= 0)),
    }


def results_table(config: RunFields, logs: dict[str, np.ndarray]) -> pd.DataFrame:
    """One row per seed x logged row: ``seed``, ``update``, ``env_steps``, ``episodes``,
    ``episode_return`` (mean of the episodes finished in the row; NaN if none),
    ``return_sum`` and the trainer's other logs (row means)."""
    seeds, rows = logs["return_sum"].shape
    episodes = logs["episodes"].astype(np.int32)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_return = np.where(episodes > 0, logs["return_sum"] / episodes, np.nan)
    updates = np.arange(1, rows + 1, dtype=np.int64) * config.log_every
    table = {"seed": np.repeat(np.arange(config.first_seed, config.first_seed + seeds,
                                         dtype=np.int32), rows),
             "update": np.tile(updates.astype(np.int32), seeds),
             "env_steps": np.tile(updates * config.steps_per_update, seeds),
             "episodes": episodes.reshape(-1),
             "episode_return": mean_return.reshape(-1).astype(np.float32)}
    for name, values in sorted(logs.items()):
        if name not in ("episodes",):
            table[name] = np.asarray(values).reshape(-1).astype(np.float32)
    return pd.DataFrame(table)


def run_study(name: str, config: RunFields, out_dir: Path, grid: Grid | None = None,
              options: Any = None) -> dict[str, Any]:
    """Run the study ``name`` (module docstring); writes ``results.parquet``,
    ``summary.json``, ``report.md`` and ``return_curve.png`` into ``out_dir``; returns the
    summary."""
    config.validate()
    configs = grid.configs(config) if grid is not None else [config]
    for c in configs:
        c.validate()
    result = run_grid(make_chunks, configs, None, config.seeds, base_seed=config.base_seed,
                      block_size=config.block_size, first_seed=config.first_seed, desc=name,
                      options=options)
    runs = chunked_runs(result, lambda c: c.num_rows)
    keys = jax.random.split(jax.random.key(config.base_seed + 1), len(configs) + 1)
    entries = [_seed_figures(c, r, keys[i]) for i, (c, r) in enumerate(zip(configs, runs,
                                                                           strict=True))]
    steps = sum(c.num_updates * c.steps_per_update for c in configs) * config.seeds
    summary: dict[str, Any] = {
        "experiment": name, "env": config.env, "seeds": config.seeds,
        "first_seed": config.first_seed, "block_size": config.block_size,
        "env_steps_per_seed": config.num_updates * config.steps_per_update,
        "updates": config.num_updates, "chunk_updates": config.chunk_size,
        "eval_episodes": config.eval_episodes, "final_updates": config.final_size,
        "preset": preset_record(config),
        "hyperparameters": dataclasses.asdict(config.train_config()),
        "compile_seconds": result.compile_seconds, "run_seconds": result.run_seconds,
        "env_steps_per_second": steps / max(result.run_seconds + result.compile_seconds, 1e-9),
        "programs": [dict(p) for p in result.programs],
    }
    tables, columns = [], (grid_columns(configs, grid.fields) if grid is not None else {})
    for c, (cfg, run) in enumerate(zip(configs, runs, strict=True)):
        table = results_table(cfg, run["logs"])
        if grid is not None:
            for i, f in enumerate(grid.fields):
                table.insert(1 + i, f, columns[f][c])
            table.insert(0, "config", np.int32(c))
        tables.append(table)
    if grid is None:
        summary.update(entries[0])
        summary["curve"] = _curve(config, runs[0]["logs"], keys[-1])
    else:
        summary["grid"] = grid.record()
        summary["configs"] = [{**{f: getattr(cfg, f) for f in grid.fields}, **entry}
                              for cfg, entry in zip(configs, entries, strict=True)]
        summary["paired_vs_best"] = _paired_vs_best(config, entries, keys[-1])
    io.write_parquet(out_dir / "results.parquet", pd.concat(tables, ignore_index=True))
    io.write_json(out_dir / "summary.json", summary)
    if grid is None:
        _plot_curve(name, config, summary["curve"], out_dir)
    io.atomic_write_text(out_dir / "report.md", report_markdown(name, config, summary, grid))
    return summary


def _curve(config: RunFields, logs: dict[str, np.ndarray], key: jax.Array) -> dict[str, Any]:
    """IQM across seeds of the training return at ``curve_points`` bins with a pointwise
    stratified-bootstrap band (seeds that finished an episode in every bin)."""
    from rljax import stats

    points = min(config.curve_points, config.num_rows)
    curve = binned_returns(logs["return_sum"], logs["episodes"], points)
    edges = np.linspace(0, config.num_rows, points + 1).round().astype(int)
    steps = (edges[1:] * config.log_every * config.steps_per_update).tolist()
    valid = ~np.isnan(curve).any(axis=1)
    if valid.sum() < 2:
        return {"env_steps": steps, "iqm": None, "low": None, "high": None, "seeds": 0}
    band = stats.sample_efficiency_curves({"run": curve[valid][:, None, :]}, "iqm", key=key,
                                          reps=config.bootstrap_reps,
                                          confidence=config.confidence)["run"]
    return {"env_steps": steps, "iqm": np.asarray(band.point).tolist(),
            "low": np.asarray(band.low).tolist(), "high": np.asarray(band.high).tolist(),
            "seeds": int(valid.sum())}


def _paired_vs_best(config: RunFields, entries: list[dict], key: jax.Array) -> list[dict]:
    """Each configuration's test return minus the best one's, seed by seed (the grid's
    configurations share seeds and keys): mean difference with its interval."""
    best = int(np.argmax([e["test_return_iqm"] for e in entries]))
    top = np.asarray(entries[best]["test_returns"])
    out = []
    for c, (entry, k) in enumerate(zip(entries, jax.random.split(key, len(entries)),
                                       strict=True)):
        if c == best:
            out.append({"config": c, "best": True})
            continue
        diff = reported_interval("paired_difference", np.asarray(entry["test_returns"]), top,
                                 key=k, reps=config.bootstrap_reps,
                                 confidence=config.confidence)
        out.append({"config": c, "best": False, "difference": float(diff.point),
                    "ci": [float(diff.low), float(diff.high)],
                    "note": diff.note.rstrip(".")})
    return out


def _plot_curve(name: str, config: RunFields, curve: dict[str, Any], out_dir: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    if curve["iqm"] is not None:
        ax.plot(curve["env_steps"], curve["iqm"], label=f"IQM across {curve['seeds']} seeds")
        ax.fill_between(curve["env_steps"], curve["low"], curve["high"], alpha=0.3,
                        label=f"{100 * config.confidence:g} % CI (stratified bootstrap)")
        ax.legend(loc="lower right")
    ax.set_xlabel("environment steps (per seed)")
    ax.set_ylabel("training episode return")
    ax.set_title(f"{name} on {config.env}, {config.seeds} seeds")
    io.write_figure(out_dir / "return_curve.png", fig)


def report_markdown(name: str, config: RunFields, summary: dict[str, Any],
                    grid: Grid | None) -> str:
    """The study's report: figures with intervals, the config's source, the procedure."""
    preset = summary["preset"]
    head = [f"# {name} on {config.env}", "",
            f"{config.seeds} seeds x {summary['env_steps_per_seed']:,} environment steps "
            f"({summary['updates']} updates); hyperparameters: {preset['name']} "
            f"({preset['source']}){'; ' + preset['note'] if preset['note'] else ''}.", ""]
    pct = f"{100 * config.confidence:g} %"
    if grid is None:
        low, high = summary["fraction_at_max_ci"]
        figures = [
            Figure("test return, greedy (IQM over seeds)", summary["test_return_iqm"],
                   *summary["test_return_ci"],
                   f"{config.eval_episodes} fresh episodes per seed after training"),
            Figure("training return, last updates (IQM over seeds)",
                   summary["train_return_iqm"], *summary["train_return_ci"],
                   f"the exploring policy's episodes of the last {config.final_size} "
                   "updates"),
        ]
        if summary["seeds_at_max"] > 1:  # ties at the top: a cap (CartPole's 500)
            figures.append(Figure(
                f"seeds whose test return is the largest reached "
                f"({format_number(summary['test_return_max'])})",
                summary["seeds_at_max"] / config.seeds, low, high,
                f"{summary['seeds_at_max']} of {config.seeds}; exact binomial interval"))
        body = [figures_table(figures, config.confidence), "", "![return curve]"
                "(return_curve.png)", "", "## Procedure", "",
                f"Test return per seed: the mean return of {config.eval_episodes} fresh "
                "episodes acting greedily with the final parameters; the IQM's interval: "
                f"{summary['test_return_interval_note']}. Where most seeds sit at the "
                "largest value (an env's cap) the IQM and its interval are that value, not "
                "an estimate: read the fraction at the maximum and its exact interval."]
    else:
        body = [f"Every configuration ran on the same {config.seeds} seeds and keys; test "
                f"return IQM with its {pct} interval, and each configuration minus the best, "
                "paired seed by seed (mean difference, `reported_interval("
                "'paired_difference')`).", "",
                "| " + " | ".join(grid.fields) + " | test return IQM | interval | minus best "
                "(paired) |", "|" + "---|" * (len(grid.fields) + 3)]
        for entry, paired in zip(summary["configs"], summary["paired_vs_best"], strict=True):
            lo, hi = entry["test_return_ci"]
            diff = ("best" if paired["best"] else f"{format_number(paired['difference'])} "
                    f"[{format_number(paired['ci'][0])}, {format_number(paired['ci'][1])}]")
            body.append("| " + " | ".join(str(entry[f]) for f in grid.fields)
                        + f" | {format_number(entry['test_return_iqm'])} | "
                          f"[{format_number(lo)}, {format_number(hi)}] | {diff} |")
    return "\n".join(head + body) + "\n"


def resolving_presets(config_cls: type, algorithm: str) -> type:
    """Make ``config_cls.__init__`` fill the preset's fields the caller did not pass
    (:func:`rljax.training.offpolicy_presets.preset_for` of ``env`` and ``preset``), so
    every field holds the number that runs (``config.json``, ``--resume`` and grids see
    it). Returns ``config_cls``."""
    init = config_cls.__init__
    names = [f.name for f in dataclasses.fields(config_cls)]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        given = set(names[:len(args)]) | set(kwargs)
        try:
            preset = preset_for(algorithm, self.env, self.preset)
        except (ValueError, TypeError, AttributeError):
            return  # validate() names the bad preset
        for name, value in preset.values.items():
            if name not in given:
                object.__setattr__(self, name, value)

    config_cls.__init__ = __init__
    config_cls.ALGORITHM = algorithm
    return config_cls


def preset_record(config: Any) -> dict[str, Any]:
    """The row the config's defaults come from, and the fields the caller changed."""
    preset = preset_for(config.ALGORITHM, config.env, config.preset)
    defaults = {**{f.name: f.default for f in dataclasses.fields(config.TRAIN_CLASS)},
                **preset.values}
    changed = {k: getattr(config, k) for k, v in defaults.items() if getattr(config, k) != v}
    return {"name": preset.name, "source": preset.source, "note": preset.note,
            "changed": changed}


def study_config(train_cls: type, name: str, default_env: str, make_chunks_fn: Any,
                 check_actions_fn: Any, module: str) -> type:
    """A study's ``Config``: ``train_cls``'s fields (the trainer's), :class:`RunFields`
    (the run's shape), ``env`` (default ``default_env``) and ``preset`` (the rows of
    :mod:`rljax.training.offpolicy_presets` for ``name``), with the env's row filling the
    fields not given (:func:`resolving_presets`); ``make_chunks_fn(env, train_config,
    updates_per_chunk=..., log_every=..., eval_episodes=...)`` is the trainer's chunked
    program (e.g. :func:`rljax.training.dqn.make_dqn_chunks`);
    ``check_actions_fn(env, env_params)`` refuses an action space the algorithm cannot
    take (e.g. :func:`rljax.training.dqn.discrete_actions`). ``module`` names the defining
    study module."""

    @dataclass(frozen=True)
    class Config(train_cls, RunFields):
        env: str = param(default_env, "a gymnax id; --env NAME", sweep=False)
        preset: str = param("auto", "the published row the defaults come from",
                            sweep=False, choices=preset_names(name))

        def validate(self) -> None:
            """The trainer's checks, then the run's (one line naming the field)."""
            super().validate()
            self.validate_run()

        def check_actions(self, env: Any) -> None:
            """The algorithm's action space check (one line naming the env)."""
            check_actions_fn(env, env.default_params)

        def make_chunks_for(self, env: Any) -> Any:
            """The chunked trainer on ``env``."""
            return make_chunks_fn(env, self.train_config(), updates_per_chunk=self.chunk_size,
                                  log_every=self.log_every, eval_episodes=self.eval_episodes)

    Config.__doc__ = (f"The trainer's :class:`~rljax.training.offpolicy_config."
                      f"{train_cls.__name__}`, the env and the run's shape (every field "
                      "settable with ``--set key=value``); fields of the env's published row "
                      "that are not given take its values.")
    Config.__module__ = module
    Config.__qualname__ = "Config"
    return resolving_presets(Config, name)


def check_preset(config: Any) -> None:
    """One-line :class:`ConfigError` for a preset name the algorithm lacks."""
    try:
        preset_for(config.ALGORITHM, config.env, config.preset)
    except ValueError as err:
        raise ConfigError(str(err)) from None
