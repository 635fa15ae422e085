"""Study ``ppo``: PPO on any gymnax environment (``rljax run ppo --env NAME``), at the env's
published hyperparameters, over many seeds.

``--env NAME`` takes a gymnax id (``Pendulum-v1``, ``Breakout-MinAtar``, ``Catch-bsuite``,
...; an unknown id is refused with its close matches) or ``brax:NAME`` when
:mod:`rljax.envs.brax_adapter` and Brax are installed. The hyperparameters default to the
env's published configuration (:mod:`rljax.training.ppo_presets`: gymnax-blines, rejax or
CleanRL, each row citing its file; ``--set preset=rejax`` picks another row); an env
without a row gets CleanRL's defaults for its action kind, and the report says which.
Every field can still be set with ``--set`` (a value given wins over the preset).

Environment: :func:`rljax.envs.registry.make_env` (``from_gymnax(NAME)``; observations of
rank != 1, Catch ``[10, 5]``, MinAtar ``[10, 10, C]``, flattened so the MLP sees ``[D]``;
with ``normalize_observations``, where the source normalises, a ``NormalizeObservation``
merged over the seed's ``N`` envs, ``axis_name=ENV_AXIS``). The policy is
``actor_critic_for``: categorical for ``Discrete(n)`` actions, a diagonal Gaussian for a
``Box`` ``(A,)`` (its raw sample is scored, the env step clips it to the box). An env whose
observations are not a ``Box`` (e.g. ``FrozenLake-misc``'s ``Discrete(16)``) or whose
actions are neither is refused in one line.

Training and figures are those of :mod:`experiments.ppo_cartpole` (both use the library's
``rljax.grid.run_grid`` and ``rljax.training.episode_returns`` reducers):
``make_ppo_chunks`` under ``ChunkedSweep`` (progress, checkpoints, resume), per seed and
logged row the sum and count of finished episodes' returns (``info["raw_reward"]`` where a
wrapper normalises). **Final return**: per seed, the mean return of the episodes finished
in the last ``final_updates`` updates; IQM over seeds with a 95 % interval
(``rljax.stats.reported.reported_interval``, measured coverage stated). **Curve**: IQM
across seeds at ``curve_points`` checkpoints with a pointwise stratified-bootstrap band.
**Throughput**: env steps/s including training (compile separately).

Grids over the trainer's traced fields run in one program per setting of the structural
ones (field metadata, :func:`rljax.config.param`), as in ppo-cartpole; a grid run writes
per-configuration final-return IQMs with intervals.

Auto sizes: ``chunk_updates = 0`` picks the largest divisor of the number of updates
``U`` that is ``<= U / 16`` (about 16 chunks); ``final_updates = 0`` takes the last 2 %
of updates (at least ``log_every``); ``curve_points`` is capped at the logged rows.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pandas as pd

from rljax import io, stats
from rljax.config import ConfigError, param
from rljax.envs import registry
from rljax.envs.registry import env_flattened, env_kind, raw_env
from rljax.grid import Grid, grid_columns, run_grid
from rljax.policies import actor_critic_for
from rljax.policies.mlp import ACTIVATIONS, GAUSSIAN_SCALES
from rljax.report import Figure, figures_table, format_number, pyplot
from rljax.stats.reported import reported_interval
from rljax.sweep import MAX_SEEDS
from rljax.training import final_returns
from rljax.training.chunking import auto_chunk_updates, chunk_size_error
from rljax.training.episode_returns import (
    binned_returns,
    chunked_runs,
    chunked_timing,
    ppo_results_table,
)
from rljax.training.ppo import PPOTrainConfig, make_ppo_chunks
from rljax.training.ppo_presets import PRESET_FIELDS, PRESET_NAMES, Preset, preset_for

NAME = "ppo"
SUPPORTS_TENSORBOARD = True
DESCRIPTION = ("PPO on any gymnax env (--env NAME) at its published hyperparameters: "
               "IQM final return, curve, env steps/s")

__all__ = ["Config", "run", "make_env", "make_network", "env_kind", "run_configs", "NAME"]


@dataclass(frozen=True)
class Config(PPOTrainConfig):
    """Configuration of the study: the trainer's :class:`PPOTrainConfig` and the env, the
    policy and the run's shape (every field settable with ``--set key=value``).

    Every field of :data:`~rljax.training.ppo_presets.PRESET_FIELDS` that the constructor
    is *not given* takes the env's published value (``preset``, see
    :func:`~rljax.training.ppo_presets.preset_for`; the class defaults are CartPole-v1's
    CleanRL row); a value given explicitly is kept. After construction every field holds
    the number that runs, so ``dataclasses.asdict``, ``--resume`` and grids see it.
    (``dataclasses.replace(c, env=...)`` passes every field, so it keeps ``c``'s values:
    build a new ``Config(env=...)`` to change env.)
    """

    env: str = param("CartPole-v1", "a gymnax id (or brax:NAME); --env NAME", sweep=False)
    preset: str = param("auto", "the published row the preset fields come from",
                        sweep=False, choices=PRESET_NAMES)
    seeds: int = param(16, "seeds per configuration (>= 2: intervals need two)",
                       sweep=False, low=2, high=MAX_SEEDS)
    block_size: int = param(16, "seeds per compiled block (part of the run's config)",
                            sweep=False, low=1)
    base_seed: int = param(0, "the sweep's base seed", sweep=False, low=0, high=2**31 - 1)
    first_seed: int = param(0, "seed ids first_seed .. first_seed + seeds - 1 (fresh "
                            "evaluation seeds)", sweep=False, low=0, high=MAX_SEEDS)
    hidden_size: int = param(64, "width of each hidden layer", low=1, high=2**16)
    hidden_layers: int = param(2, "hidden layers of the actor's and the critic's torso",
                               low=1, high=64)
    activation: str = param("tanh", "the torso's activation", choices=tuple(ACTIVATIONS))
    normalize_observations: bool = param(False, "normalise observations over the seed's "
                                         "envs (NormalizeObservation)")
    gaussian_scale: str = param("parameter", "a Gaussian head's standard deviation (Box "
                                "actions): 'parameter', state-independent log-std; "
                                "'softplus', state-dependent (gymnax-blines)",
                                choices=GAUSSIAN_SCALES)
    normalize_rewards: bool = param(False, "CleanRL's continuous-control reward "
                                    "normalisation (gym's NormalizeReward); in no preset")
    chunk_updates: int = param(0, "updates per chunk; 0: auto, about 16 chunks",
                               sweep=False, low=0)
    log_every: int = param(1, "updates per logged row", sweep=False, low=1)
    curve_points: int = param(50, "points of the return curve (capped at the logged rows)",
                              sweep=False, low=1)
    final_updates: int = param(0, "updates in the final-return window; 0: the last 2 %",
                               sweep=False, low=0)
    eval_episodes: int = param(64, "test episodes per seed after training, sampled and "
                               "greedy (0: none; gymnax-blines' published returns are the "
                               "sampled kind)", sweep=False, low=0, high=2**16)
    bootstrap_reps: int = param(2000, "bootstrap resamples", sweep=False, low=1)
    confidence: float = param(0.95, "the intervals' confidence", sweep=False, low=0.0,
                              high=1.0, low_open=True, high_open=True)

    def resolved_preset(self) -> Preset:
        """The published row the ``None`` fields were taken from (generic CleanRL for an
        env without one, or when the preset name is not one of the env's)."""
        continuous = env_kind(self.env) == "continuous"
        try:
            return preset_for(self.env, self.preset, continuous)
        except ValueError:
            return preset_for(self.env, "auto", continuous)

    @property
    def chunk_size(self) -> int:
        """Updates per chunk: ``chunk_updates``, or (0) the largest divisor of
        ``num_updates`` that is a multiple of ``log_every`` and ``<= num_updates / 16``."""
        if self.chunk_updates:
            return self.chunk_updates
        return auto_chunk_updates(self.num_updates, self.log_every)

    @property
    def num_rows(self) -> int:
        """Logged rows per seed, ``num_updates // log_every``."""
        return self.num_updates // self.log_every

    @property
    def final_size(self) -> int:
        """Updates in the final window: ``final_updates``, or (0) the last 2 % of updates
        rounded down to a multiple of ``log_every`` (at least ``log_every``)."""
        if self.final_updates:
            return self.final_updates
        window = (self.num_updates // 50) // self.log_every * self.log_every
        return max(self.log_every, window)

    @property
    def curve_size(self) -> int:
        """Curve checkpoints: ``curve_points`` capped at the logged rows."""
        return min(self.curve_points, self.num_rows)

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first invalid field: each against its
        declaration, the env (an unknown name lists close matches; spaces the policy
        cannot take say what it can), then the run's shape."""
        if not isinstance(self.env, str) or not self.env:
            raise ConfigError(f"env: must be an environment name, got {self.env!r}")
        super().validate()
        if self.first_seed > MAX_SEEDS - self.seeds:
            raise ConfigError(f"first_seed: must be an integer in [0, "
                              f"{MAX_SEEDS - self.seeds}], got {self.first_seed!r}")
        check_env(self)  # after the network's fields: it builds the env and the policy
        if self.preset != "auto":
            try:
                preset_for(self.env, self.preset, env_kind(self.env) == "continuous")
            except ValueError as err:
                raise ConfigError(str(err)) from None
        if self.num_updates % self.chunk_size:
            raise ConfigError(chunk_size_error(self.chunk_size, self.num_updates))
        if self.chunk_size % self.log_every:
            raise ConfigError(f"log_every: must divide chunk_updates = {self.chunk_size}, "
                              f"got {self.log_every}")
        if self.final_size > self.num_updates or self.final_size % self.log_every:
            raise ConfigError(f"final_updates: must be a multiple of log_every = "
                              f"{self.log_every} and <= the number of updates "
                              f"{self.num_updates}, got {self.final_updates}")


def _resolving_init(init: Any) -> Any:
    """Wrap the dataclass ``__init__``: preset fields the caller did not pass take the
    env's published values."""
    names = [f.name for f in dataclasses.fields(Config)]

    @functools.wraps(init)
    def __init__(self: Config, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        given = set(names[:len(args)]) | set(kwargs)
        missing = [name for name in PRESET_FIELDS if name not in given]
        if missing:
            preset = self.resolved_preset()
            for name in missing:
                object.__setattr__(self, name, preset.values[name])

    return __init__


Config.__init__ = _resolving_init(Config.__init__)


def check_env(config: Config) -> None:
    """Raise a one-line :class:`ConfigError` if ``config.env`` is unknown (close matches
    listed) or its spaces are not ones the study's MLP policy takes."""
    try:
        make_network(make_env(config), config)
    except ValueError as err:
        message = str(err)
        for prefix in ("from_gymnax: ", "from_brax: "):
            message = message.removeprefix(prefix)
        raise ConfigError(f"env: {message}") from None


def make_env(config: Config) -> Any:
    """The study's environment for ``config``: :func:`rljax.envs.registry.make_env` of
    ``config.env`` with the config's ``normalize_observations``, ``normalize_rewards`` and
    ``gamma`` (``ValueError`` in one line for an unknown name or unsupported observations).
    """
    return registry.make_env(config.env, normalize_observations=config.normalize_observations,
                             normalize_rewards=config.normalize_rewards, gamma=config.gamma)


def make_network(env: Any, config: Config) -> Any:
    """``actor_critic_for(env)`` with ``hidden_layers`` x ``hidden_size`` torsos: a
    categorical head for ``Discrete(n)`` actions, a diagonal Gaussian for ``Box (A,)``
    (its standard deviation ``config.gaussian_scale``).

    Raises:
      ValueError: one line naming the env and what is allowed, for any other action space.
    """
    from rljax.envs.spaces import Box, Discrete, as_rljax_space

    space = as_rljax_space(env.action_space(env.default_params))
    if not (isinstance(space, Discrete) or (isinstance(space, Box) and len(space.shape) == 1)):
        raise ValueError(f"{config.env}: action space {space!r} is not supported; the ppo "
                         "study's policy takes Discrete(n) (categorical) or Box of shape "
                         "(A,) (diagonal Gaussian) actions")
    return actor_critic_for(env, hidden_sizes=(config.hidden_size,) * config.hidden_layers,
                            activation=config.activation, scale=config.gaussian_scale)


def make_chunks(config: Config) -> Any:
    """The chunked PPO program of ``config`` (its traced fields read from ``hparams``),
    with ``eval_episodes`` test rollouts at the end."""
    env = make_env(config)
    return make_ppo_chunks(env, make_network(env, config), config.train_config(),
                           updates_per_chunk=config.chunk_size, log_every=config.log_every,
                           eval_episodes=config.eval_episodes)


def run_configs(configs: list[Config], desc: str = NAME,
                options: Any = None) -> tuple[list[dict], dict]:
    """Run ``seeds`` seeds of every configuration (:func:`rljax.grid.run_grid`: one
    :class:`ChunkedSweep` per distinct setting of the untraced fields, the traced values
    vmapped with the seeds). Returns ``(runs, timing)``: per config ``{"logs": {name:
    [S, R_c]}, "first_nonfinite": [S], "final": {test-rollout returns}}``
    (:func:`rljax.training.episode_returns.chunked_runs`) and
    :func:`~rljax.training.episode_returns.chunked_timing`."""
    first = configs[0]
    result = run_grid(make_chunks, configs, None, first.seeds, base_seed=first.base_seed,
                      block_size=first.block_size, first_seed=first.first_seed, desc=desc,
                      options=options)
    return chunked_runs(result, lambda c: c.num_rows), chunked_timing(result)


def _final_interval(config: Config, logs: dict[str, np.ndarray], key: jax.Array):
    final = final_returns(logs, last=config.final_size // config.log_every)
    final_ok = final[~np.isnan(final)]
    ci = (reported_interval("iqm", final_ok, key=key, reps=config.bootstrap_reps,
                            confidence=config.confidence) if final_ok.size else None)
    return final, final_ok, ci


def _eval_record(config: Config, final: dict[str, np.ndarray], key: jax.Array,
                 published: float | None) -> dict[str, Any]:
    """Test-rollout figures: per seed the mean return of ``eval_episodes`` fresh episodes
    (sampled actions, and the mode), IQM over seeds with its interval."""
    if not config.eval_episodes:
        return {"eval_episodes": 0}
    record: dict[str, Any] = {"eval_episodes": config.eval_episodes}
    for mode, k in zip(("sampled", "mode"), jax.random.split(key), strict=True):
        per_seed = np.asarray(final[f"eval_return_{mode}"], np.float64).mean(axis=1)
        finished = float(np.mean(final[f"eval_finished_{mode}"]))
        ci = reported_interval("iqm", per_seed, key=k, reps=config.bootstrap_reps,
                               confidence=config.confidence)
        record.update({
            f"eval_return_{mode}_iqm": float(ci.point),
            f"eval_return_{mode}_ci": [float(ci.low), float(ci.high)],
            f"eval_returns_{mode}": per_seed.tolist(),
            f"eval_finished_fraction_{mode}": finished,
            f"published_within_eval_{mode}_ci": (bool(ci.low <= published <= ci.high)
                                                 if published is not None else None),
        })
    return record


def _env_record(config: Config) -> dict[str, Any]:
    """What the env and the policy are: spaces, wrappers, head, the preset's citation."""
    from rljax.envs.spaces import as_rljax_space

    raw = raw_env(config.env)
    env = make_env(config)
    preset = config.resolved_preset()
    given = {f: getattr(config, f) for f in PRESET_FIELDS if getattr(config, f)
             != preset.values[f]}
    return {
        "env": config.env,
        "observation_shape": list(as_rljax_space(raw.observation_space(
            raw.default_params)).shape),
        "policy_observation_shape": list(as_rljax_space(env.observation_space(
            env.default_params)).shape),
        "action_space": repr(as_rljax_space(raw.action_space(raw.default_params))),
        "wrappers": [w for w, on in (("FlattenObservation", env_flattened(raw)),
                                     ("NormalizeObservation", config.normalize_observations),
                                     ("NormalizeReward", config.normalize_rewards))
                     if on],
        "policy_head": make_network(env, config).distribution.name,
        "preset": preset.name,
        "preset_source": preset.source,
        "preset_note": preset.note,
        "preset_overridden": given,
        "published_return": preset.published,
        "published_return_source": preset.published_source,
        "hyperparameters": {f: getattr(config, f) for f in PRESET_FIELDS},
    }


def run(config: Config, out_dir: Path, grid: Grid | None = None,
        options: Any = None) -> dict[str, Any]:
    """Run the study; writes ``results.parquet``, ``summary.json``, ``report.md``,
    ``return_curve.png`` and ``final_returns.png`` into ``out_dir``; returns the summary.

    With ``grid`` every configuration runs on the same seeds; the summary then lists each
    configuration's final-return IQM with its interval (``configs``) and the table has
    one row per configuration x seed x logged row.
    """
    config.validate()
    if grid is not None:
        configs = grid.configs(config)
        for c in configs:
            c.validate()
        runs, timing = run_configs(configs, options=options)
        return _grid_run(config, configs, grid, runs, timing, out_dir)
    (only,), timing = run_configs([config], options=options)
    train_config = config.train_config()
    logs, first_nonfinite = only["logs"], only["first_nonfinite"]
    num_updates = train_config.num_updates
    steps_per_seed = num_updates * train_config.batch_size
    steps_per_row = config.log_every * train_config.batch_size
    timed_steps = timing["timed_steps"]

    curve_key, final_key, eval_key = jax.random.split(jax.random.key(config.base_seed + 1), 3)
    points = config.curve_size
    curve = binned_returns(logs["return_sum"], logs["episodes"], points)
    edges = np.linspace(0, config.num_rows, points + 1).round().astype(int)
    curve_steps = edges[1:] * steps_per_row
    # a seed's bins are NaN until its first episode ends (then carried forward): the band
    # covers the seeds that finished one, from the first bin where all of them had
    valid = ~np.isnan(curve[:, -1])
    curve_iqm = curve_low = curve_high = [None] * points
    if valid.any():
        start = int(np.argmax(~np.isnan(curve[valid]).any(axis=0)))
        band = stats.sample_efficiency_curves(
            {"ppo": curve[valid][:, None, start:]}, "iqm", key=curve_key,
            reps=config.bootstrap_reps, confidence=config.confidence)["ppo"]
        curve_iqm, curve_low, curve_high = ([None] * start + np.asarray(x).tolist()
                                            for x in (band.point, band.low, band.high))
    final, final_ok, final_ci = _final_interval(config, logs, final_key)
    record = _env_record(config)
    published = record["published_return"]
    summary: dict[str, Any] = {
        "experiment": NAME,
        **record,
        "seeds": config.seeds,
        "first_seed": config.first_seed,
        "block_size": config.block_size,
        "num_devices": timing["num_devices"],
        "updates": num_updates,
        "chunks": num_updates // config.chunk_size,
        "chunk_updates": config.chunk_size,
        "log_every": config.log_every,
        "logged_rows": config.num_rows,
        "final_updates": config.final_size,
        "env_steps_per_seed": steps_per_seed,
        "final_return_iqm": float(final_ci.point) if final_ci else None,
        "final_return_ci": ([float(final_ci.low), float(final_ci.high)] if final_ci
                            else [None, None]),
        "final_return_interval_note": (final_ci.note.rstrip(".") if final_ci
                                       else "no seed finished an episode"),
        "final_return_mean": float(np.mean(final_ok)) if final_ok.size else None,
        "final_return_median": float(np.median(final_ok)) if final_ok.size else None,
        "final_returns": [None if np.isnan(x) else float(x) for x in final],
        "seeds_without_final_episode": int(np.sum(np.isnan(final))),
        "published_within_ci": (bool(final_ci.low <= published <= final_ci.high)
                                if final_ci and published is not None else None),
        "env_steps_per_second": (timed_steps / max(timing["run_seconds"], 1e-9)
                                 if timed_steps > 0 else None),
        "compile_seconds": timing["compile_seconds"],
        "run_seconds": timing["run_seconds"],
        "curve_env_steps": curve_steps.tolist(),
        "curve_iqm": curve_iqm,
        "curve_ci_low": curve_low,
        "curve_ci_high": curve_high,
        "curve_seeds": int(valid.sum()),
        "nonfinite_seeds": int(np.sum(first_nonfinite >= 0)),
        "first_nonfinite_update": {str(config.first_seed + s): int(u)
                                   for s, u in enumerate(first_nonfinite) if u >= 0},
        **_eval_record(config, only["final"], eval_key, published),
    }
    io.write_parquet(out_dir / "results.parquet",
                     ppo_results_table(logs, train_config.batch_size, config.log_every,
                                       first_seed=config.first_seed))
    io.write_json(out_dir / "summary.json", summary)
    _write_plots(summary, final_ok, config, out_dir)
    io.atomic_write_text(out_dir / "report.md", report_markdown(summary, config))
    return summary


def _grid_run(base: Config, configs: list[Config], grid: Grid, runs: list[dict],
              timing: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """Per configuration: final-return IQM with its interval; one table of all rows."""
    keys = jax.random.split(jax.random.key(base.base_seed + 1), len(configs))
    columns = grid_columns(configs, grid.fields)
    entries, tables = [], []
    for c, (config, result) in enumerate(zip(configs, runs, strict=True)):
        _, final_ok, ci = _final_interval(config, result["logs"], keys[c])
        entries.append({**{f: getattr(config, f) for f in grid.fields},
                        "final_return_iqm": float(ci.point) if ci else None,
                        "final_return_ci": [float(ci.low), float(ci.high)] if ci
                        else [None, None],
                        "nonfinite_seeds": int(np.sum(result["first_nonfinite"] >= 0))})
        table = ppo_results_table(result["logs"], config.batch_size,
                              config.log_every, first_seed=config.first_seed)
        for i, f in enumerate(grid.fields):
            table.insert(1 + i, f, columns[f][c])
        table.insert(0, "config", np.int32(c))
        tables.append(table)
    scored = [e for e in entries if e["final_return_iqm"] is not None]
    best = max(scored, key=lambda e: e["final_return_iqm"]) if scored else None
    summary = {"experiment": NAME, **_env_record(base), "seeds": base.seeds,
               "grid": grid.record(), "configs": entries, "best": best,
               "compile_seconds": timing["compile_seconds"],
               "run_seconds": timing["run_seconds"], "programs": timing["programs"]}
    io.write_parquet(out_dir / "results.parquet", pd.concat(tables, ignore_index=True))
    io.write_json(out_dir / "summary.json", summary)
    lines = [f"# {NAME} on {base.env}: grid over {', '.join(grid.fields)}", "",
             f"{base.seeds} seeds per configuration (the same seeds and keys in each); final "
             f"return IQM with a {100 * base.confidence:g} % interval "
             "(`rljax.stats.reported.reported_interval`).", "",
             "| " + " | ".join(grid.fields) + " | final return IQM | interval |",
             "|" + "---|" * (len(grid.fields) + 2)]
    for e in entries:
        low, high = e["final_return_ci"]
        lines.append("| " + " | ".join(f"{e[f]:g}" if isinstance(e[f], float) else str(e[f])
                                       for f in grid.fields)
                     + f" | {format_number(e['final_return_iqm'])} | "
                       f"[{format_number(low)}, {format_number(high)}] |")
    io.atomic_write_text(out_dir / "report.md", "\n".join(lines) + "\n")
    return summary


def _write_plots(summary: dict[str, Any], final: np.ndarray, config: Config,
                 out_dir: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4))
    if summary["curve_seeds"]:
        steps = np.asarray(summary["curve_env_steps"])
        as_float = lambda xs: np.asarray([np.nan if x is None else x for x in xs])  # noqa: E731
        ax.plot(steps, as_float(summary["curve_iqm"]),
                label=f"IQM across {summary['curve_seeds']} seeds")
        ax.fill_between(steps, as_float(summary["curve_ci_low"]),
                        as_float(summary["curve_ci_high"]), alpha=0.3,
                        label=f"{100 * config.confidence:g} % CI (stratified bootstrap)")
    if summary["published_return"] is not None:
        ax.axhline(summary["published_return"], color="grey", linestyle="--", linewidth=1,
                   label=f"published ({summary['preset']}): {summary['published_return']:g}")
    ax.set_xlabel("environment steps (per seed)")
    ax.set_ylabel("episode return")
    ax.set_title(f"PPO on {config.env} ({summary['preset']} config), {config.seeds} seeds")
    ax.legend(loc="lower right")
    io.write_figure(out_dir / "return_curve.png", fig)

    fig, ax = plt.subplots(figsize=(7, 3))
    jitter = np.random.default_rng(0).uniform(-0.2, 0.2, final.shape[0])
    ax.scatter(final, jitter, alpha=0.6)
    if summary["final_return_iqm"] is not None:
        ax.axvline(summary["final_return_iqm"], color="C1", label="IQM")
        ax.axvspan(*summary["final_return_ci"], color="C1", alpha=0.2,
                   label=f"{100 * config.confidence:g} % CI")
        ax.legend(loc="upper left")
    ax.set_yticks([])
    ax.set_xlabel(f"final return (episodes of the last {config.final_size} updates)")
    io.write_figure(out_dir / "final_returns.png", fig)


def report_markdown(summary: dict[str, Any], config: Config) -> str:
    """The study's report: figures with intervals, the config and its source, procedure."""
    low, high = summary["final_return_ci"]
    published = summary["published_return"]
    figures = [
        Figure("final return (IQM over seeds)", summary["final_return_iqm"], low, high,
               f"mean {format_number(summary['final_return_mean'])}, median "
               f"{format_number(summary['final_return_median'])}"
               + (f"; published {published:g} ({summary['published_return_source']})"
                  if published is not None else "")),
        *[Figure(f"test return, {label} (IQM over seeds)", summary[f"eval_return_{mode}_iqm"],
                 *summary[f"eval_return_{mode}_ci"],
                 f"{summary['eval_episodes']} fresh episodes per seed after training")
          for mode, label in (("sampled", "sampled actions"), ("mode", "greedy actions"))
          if summary.get("eval_episodes")],
        Figure("env steps per second (training included)", summary["env_steps_per_second"],
               note=f"{config.seeds} seeds, block {config.block_size}; compile "
                    f"{summary['compile_seconds']:.1f} s separately"),
    ]
    hp = summary["hyperparameters"]
    overridden = summary["preset_overridden"]
    flattened = (f" flattened to {summary['policy_observation_shape']}"
                 if "FlattenObservation" in summary["wrappers"] else "")
    normalised = (", normalised (running mean / variance over the seed's envs)"
                  if hp["normalize_observations"] else "")
    if "NormalizeReward" in summary["wrappers"]:
        normalised += ("; rewards scaled by the running std of the discounted return "
                       "(NormalizeReward; returns reported from the raw rewards)")
    lines = [
        f"# {NAME} on {config.env}",
        "",
        DESCRIPTION + ".",
        "",
        f"{config.seeds} seeds x {summary['env_steps_per_seed']:,} environment steps "
        f"({summary['updates']} updates of {hp['num_envs']} envs x {hp['num_steps']} steps; "
        f"{hp['num_epochs']} epochs x {hp['num_minibatches']} minibatches; gamma "
        f"{hp['gamma']:g}, lambda {hp['lam']:g}, clip {hp['clip_epsilon']:g} (value clip "
        f"{hp['value_clip']:g}), lr {hp['learning_rate']:g}"
        f"{' annealed' if hp['anneal_lr'] else ' constant'}, entropy {hp['entropy_coef']:g}, "
        f"value {hp['value_coef']:g}, grad-norm {hp['max_grad_norm']:g}; {hp['activation']} "
        f"MLP {'x'.join([str(hp['hidden_size'])] * hp['hidden_layers'])}, "
        f"{summary['policy_head']} head; observations {summary['observation_shape']}"
        f"{flattened}{normalised}).",
        "",
        f"Hyperparameters: the **{summary['preset']}** configuration, {summary['preset_source']}"
        + (f" ({summary['preset_note']})" if summary["preset_note"] else "")
        + (f"; changed here: {', '.join(f'{k}={v}' for k, v in overridden.items())}"
           if overridden else "") + ".",
        "",
        figures_table(figures, config.confidence),
        "",
        "![return curve](return_curve.png)",
        "",
        "## Reading",
        "",
        reading(summary, config),
        "",
        "## Procedure",
        "",
        f"Each seed's training runs in {summary['chunks']} chunks of "
        f"{summary['chunk_updates']} updates, each chunk one jitted program; seeds are "
        f"vmapped in blocks of {config.block_size} by `rljax.sweep.ChunkedSweep`. Per row of "
        f"{config.log_every} update(s) only the sum and count of the returns of the episodes "
        "that finished in it leave the program (un-normalised rewards). Final return per "
        f"seed: the mean return of the episodes finished in the last {config.final_size} "
        "updates (the policy's own samples, as in training). "
        + (f"Test return per seed: the mean return of {summary['eval_episodes']} fresh "
           "episodes from reset with the final parameters, actions sampled (as "
           "gymnax-blines' published returns) or greedy (the mode), raw rewards "
           "(`rljax.training.evaluation.evaluate_policy`). "
           if summary.get("eval_episodes") else "")
        + "IQM = mean of the middle 50 % "
        f"of seeds; the interval: {summary['final_return_interval_note']} "
        "(`rljax.stats.reported.reported_interval`). The curve bins the logged rows into "
        f"{len(summary['curve_env_steps'])} equal runs with a pointwise band of "
        f"{config.bootstrap_reps} stratified bootstrap resamples of whole runs "
        "(`rljax.stats.sample_efficiency_curves`). Throughput is the environment steps run "
        "after the first chunk over the sweep's run time, on this machine's CPU.",
        "",
    ]
    return "\n".join(lines)


def reading(summary: dict[str, Any], config: Config) -> str:
    """A short plain-language reading of the figures."""
    if summary["final_return_iqm"] is None:
        return "No seed finished an episode in the final window: no final return to report."
    low, high = summary["final_return_ci"]
    pct = f"{100 * config.confidence:g} %"
    text = (f"After {summary['env_steps_per_seed']:,} steps per seed, the IQM final return on "
            f"{config.env} is {format_number(summary['final_return_iqm'])} ({pct} CI "
            f"[{format_number(low)}, {format_number(high)}], {config.seeds} seeds)")
    published = summary["published_return"]
    if published is not None:
        where = ("inside" if summary["published_within_ci"] else
                 "above" if published > high else "below")
        text += (f"; the published figure for this configuration, {published:g} "
                 f"({summary['published_return_source']}), is {where} the interval")
    if summary.get("eval_episodes"):
        e_low, e_high = summary["eval_return_sampled_ci"]
        text += (f". On {summary['eval_episodes']} fresh test episodes per seed after "
                 "training, the IQM return is "
                 f"{format_number(summary['eval_return_sampled_iqm'])} [{format_number(e_low)}, "
                 f"{format_number(e_high)}] sampling actions and "
                 f"{format_number(summary['eval_return_mode_iqm'])} acting greedily")
        if published is not None:
            where = ("inside" if summary["published_within_eval_sampled_ci"] else
                     "above" if published > e_high else "below")
            text += f"; the published figure is {where} the sampled test-return interval"
    text += (f". Training ran at {format_number(summary['env_steps_per_second'])} environment "
             "steps per second including the PPO updates.")
    if summary["nonfinite_seeds"]:
        text += f" {summary['nonfinite_seeds']} seed(s) went non-finite."
    return text
