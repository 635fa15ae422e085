"""Study ``ppo-cartpole``: PPO on CartPole-v1 over many seeds, and what dropping the
critic saves in memory.

Setup (issue #4; the usual CleanRL / PureJaxRL CartPole defaults): native CartPole
(standard physics, 500-step limit, truncations bootstrapped), 4 envs x 128 steps per
update, 4 epochs x 4 minibatches, gamma 0.99, GAE lambda 0.95, clip 0.2 (value clip 0.2),
learning rate 2.5e-4 annealed linearly to 0, entropy 0.01, value 0.5, global gradient-norm
clip 0.5, Adam (eps 1e-5); separate tanh MLP 64x64 actor and critic with orthogonal init;
5e5 environment steps per seed.

The run is cut into chunks of ``chunk_updates`` updates (0, the default: derived from the
run's length, about 16 chunks; ``rljax.training.make_ppo_chunks`` under
``rljax.sweep.ChunkedSweep``: progress, checkpoints and resume between chunks).
Logged per seed and row of ``log_every`` updates (no per-step info leaves the program):
the sum and count of returns of episodes that finished during the row's updates, and the
mean of the updates' mean losses; so the logs hold ``num_updates / log_every`` rows per
seed however long the run. Each seed also reports the first update after which its
parameters or loss went non-finite (``summary["nonfinite_seeds"]``).

Figures:

* **Return curve**: at ``curve_points`` checkpoints (equal runs of logged rows) the
  per-seed mean return of episodes that finished since the previous checkpoint,
  aggregated across seeds by the IQM with a pointwise 95 % stratified-bootstrap band
  (runs resampled jointly across checkpoints, ``rljax.stats.sample_efficiency_curves``).
* **Final return**: per seed, the mean return of episodes finished in the last
  ``final_updates`` updates; IQM with a 95 % interval over seeds
  (``rljax.stats.reported.reported_interval``, its method's measured coverage stated).
  CartPole-v1 caps an episode at 500 steps: when most seeds sit at the cap the IQM is
  500 and its interval [500, 500] is the ceiling, not precision; the informative figure is
  then **the fraction of seeds at the cap**, reported with an exact (Clopper-Pearson)
  binomial interval.
* **Throughput**: environment steps per second, training included, from the sweep's run
  time (compile time, with the first chunk, separately).
* **Memory**: bytes of parameters + optimizer state for PPO's actor + critic, and for
  GRPO's actor alone (the same actor MLP and the same optimizer, no critic).

**Grids** (``rljax run ppo-cartpole --grid learning_rate=1e-4,1e-3 --grid
clip_epsilon=0.1,0.2``): the fields of ``Config.TRACED`` are read from ``hparams`` inside
the compiled chunk program, so every configuration of a grid over them runs in one
program (``ChunkedSweep`` with a ``ConfigTable``); each distinct setting of the
``Config.STRUCTURAL`` fields compiles one more. A plain run is the one-row grid of its
config, so ``--set learning_rate=x`` alone is bitwise configuration ``x`` of any grid
(same seeds and block size). Config ``c`` and seed ``i`` use seed ``i``'s key in every
configuration (common random numbers). A grid run writes the sensitivity analysis of
:mod:`experiments.ppo_sensitivity` instead of the single-configuration figures.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from rljax import io, sensitivity, stats
from rljax.config import ConfigError, param
from rljax.envs import CartPole
from rljax.grid import Grid, grid_columns, run_grid
from rljax.policies import mlp_actor_critic
from rljax.report import Figure, figures_table, format_number, pyplot
from rljax.stats import clopper_pearson
from rljax.stats.reported import reported_interval
from rljax.training import final_returns
from rljax.training.chunking import auto_chunk_updates, chunk_size_error
from rljax.training.episode_returns import (
    binned_returns,
    chunked_runs,
    chunked_timing,
    ppo_results_table,
)
from rljax.training.ppo import PPOTrainConfig, make_ppo_chunks, ppo_optimizer

NAME = "ppo-cartpole"
SUPPORTS_TENSORBOARD = True  # its ChunkedSweep writes `rljax run --tensorboard DIR` logs
DESCRIPTION = "PPO on CartPole-v1: IQM return curve, final return, env steps/s, critic memory"

RETURN_CAP = 500.0  # CartPole-v1's episode limit: the largest return an episode can have
AT_CAP = RETURN_CAP - 0.5  # a seed whose final-window mean return is >= this is at the cap


@dataclass(frozen=True)
class Config(PPOTrainConfig):
    """Configuration of the study: the trainer's :class:`PPOTrainConfig` (its defaults
    are this study's) and the run's shape; every field settable with ``--set key=value``.

    The trainer's traced fields are read from ``hparams`` inside the compiled program (a
    grid over them is one program); its other fields and ``hidden_size`` fix the program
    (one per distinct value); the rest shape the run and its report.
    """

    hidden_size: int = param(64, "width of the actor's and the critic's two tanh layers",
                             low=1, high=2**16)
    seeds: int = param(16, "seeds (ids 0 .. seeds - 1)", sweep=False, low=1)
    block_size: int = param(16, "seeds per compiled block (part of the run's config)",
                            sweep=False, low=1)
    base_seed: int = param(0, "the sweep's base seed", sweep=False, low=0, high=2**31 - 1)
    chunk_updates: int = param(0, "updates per chunk; 0: automatic, about 16 chunks",
                               sweep=False, low=0)
    log_every: int = param(1, "updates per logged row", sweep=False, low=1)
    curve_points: int = param(50, "points of the return curve", sweep=False, low=1)
    final_updates: int = param(20, "updates in the final-return window", sweep=False, low=1)
    bootstrap_reps: int = param(2000, "bootstrap resamples", sweep=False, low=1)
    confidence: float = param(0.95, "the intervals' confidence", sweep=False, low=0.0,
                              high=1.0, low_open=True, high_open=True)

    @property
    def chunk_size(self) -> int:
        """Updates per chunk: ``chunk_updates``, or (0) the largest divisor of
        ``num_updates`` that is a multiple of ``log_every`` and ``<= num_updates / 16``
        (:func:`rljax.training.chunking.auto_chunk_updates`)."""
        if self.chunk_updates:
            return self.chunk_updates
        return auto_chunk_updates(self.num_updates, self.log_every)

    @property
    def num_rows(self) -> int:
        """Logged rows per seed, ``num_updates // log_every``."""
        return self.num_updates // self.log_every

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first invalid field: each against its
        declaration (:meth:`PPOTrainConfig.validate`), then the run's shape."""
        super().validate()
        if self.num_updates % self.chunk_size:
            raise ConfigError(chunk_size_error(self.chunk_size, self.num_updates))
        if self.chunk_size % self.log_every:
            raise ConfigError(f"log_every: must divide chunk_updates = {self.chunk_size}, "
                              f"got {self.log_every}")
        if self.curve_points > self.num_rows:
            raise ConfigError(f"curve_points: must be <= the number of logged rows "
                              f"total_steps // (num_envs * num_steps) // log_every = "
                              f"{self.num_rows}, got {self.curve_points}")
        if self.final_updates > self.num_updates:
            raise ConfigError(f"final_updates: must be <= the number of updates "
                              f"total_steps // (num_envs * num_steps) = {self.num_updates}, "
                              f"got {self.final_updates}")
        if self.final_updates % self.log_every:
            raise ConfigError(f"final_updates: must be a multiple of log_every = "
                              f"{self.log_every}, got {self.final_updates}")


def tree_bytes(tree: Any) -> int:
    """Bytes of all array leaves of ``tree`` (arrays or ``ShapeDtypeStruct``s); for arrays
    this is ``sum(x.nbytes for x in tree_leaves(tree))``."""
    return int(sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize
                   for x in jax.tree_util.tree_leaves(tree)))


def state_bytes(config: Config) -> dict[str, int]:
    """Parameters + optimizer state bytes: PPO's actor + critic vs GRPO's actor alone
    (the same actor network, the same ``clip_by_global_norm`` + Adam optimizer)."""
    network = mlp_actor_critic(2, (config.hidden_size, config.hidden_size))
    optimizer = ppo_optimizer(config.train_config())
    obs = jnp.zeros((4,), jnp.float32)
    params = jax.eval_shape(network.init, jax.random.key(0), obs)
    actor_params = jax.eval_shape(network.actor.init, jax.random.key(0), obs)
    return {
        "ppo_state_bytes": tree_bytes(params) + tree_bytes(jax.eval_shape(optimizer.init,
                                                                          params)),
        "grpo_state_bytes": tree_bytes(actor_params)
        + tree_bytes(jax.eval_shape(optimizer.init, actor_params)),
        "ppo_param_count": int(sum(math.prod(x.shape)
                                   for x in jax.tree_util.tree_leaves(params))),
        "grpo_param_count": int(sum(math.prod(x.shape)
                                    for x in jax.tree_util.tree_leaves(actor_params))),
    }


def make_chunks(config: Config) -> Any:
    """The chunked PPO program of ``config`` (its traced fields read from ``hparams``)."""
    return make_ppo_chunks(CartPole(), mlp_actor_critic(2, (config.hidden_size,) * 2),
                           config.train_config(), updates_per_chunk=config.chunk_size,
                           log_every=config.log_every)


def run_configs(configs: list[Config], desc: str = NAME,
                options: Any = None) -> tuple[list[dict], dict]:
    """Run ``seeds`` seeds of every configuration (:func:`rljax.grid.run_grid`: one
    :class:`ChunkedSweep` per distinct setting of the untraced fields, the traced values
    vmapped with the seeds).

    Returns:
      ``(runs, timing)``: ``runs[c]`` is ``{"logs": {name: [S, R_c]}, "first_nonfinite":
      [S] int, "final": {...}}`` (:func:`rljax.training.episode_returns.chunked_runs`);
      ``timing`` has ``compile_seconds``, ``run_seconds``, ``timed_steps`` (environment
      steps the run time covers: not the first chunk, timed with the compilation, nor
      work read back on ``--resume``), ``num_devices`` and ``programs``.
    """
    first = configs[0]
    result = run_grid(make_chunks, configs, None, first.seeds, base_seed=first.base_seed,
                      block_size=first.block_size, first_seed=getattr(first, "first_seed", 0),
                      desc=desc, options=options)
    return chunked_runs(result, lambda c: c.num_rows), chunked_timing(result)


def run(config: Config, out_dir: Path, grid: Grid | None = None,
        options: Any = None) -> dict[str, Any]:
    """Run the study; writes ``results.parquet``, ``summary.json``, ``report.md``,
    ``return_curve.png`` and ``final_returns.png`` into ``out_dir``; returns the summary.

    With ``grid`` (a :class:`rljax.grid.Grid` over the config's sweepable fields) it runs
    every configuration of the grid on the same seeds and writes the sensitivity analysis
    instead (:func:`analyse_grid`). ``options``: the run's
    :class:`rljax.sweep.SweepOptions` (from :func:`rljax.study.run_study`).
    """
    config.validate()
    if grid is not None:
        configs = grid.configs(config)
        for c in configs:
            c.validate()
        runs, timing = run_configs(configs, options=options)
        return analyse_grid(configs, grid, runs, timing, out_dir, base=config)
    # a plain run is the one-row grid of its config: its traced values go through hparams
    (only,), timing = run_configs([config], options=options)
    train_config = config.train_config()
    logs, first_nonfinite = only["logs"], only["first_nonfinite"]
    num_updates = train_config.num_updates
    steps_per_seed = num_updates * train_config.batch_size
    steps_per_row = config.log_every * train_config.batch_size
    timed_steps = timing["timed_steps"]

    key = jax.random.key(config.base_seed + 1)
    curve_key, final_key = jax.random.split(key)
    curve = binned_returns(logs["return_sum"], logs["episodes"], config.curve_points)
    edges = np.linspace(0, config.num_rows, config.curve_points + 1).round().astype(int)
    curve_steps = edges[1:] * steps_per_row
    valid = ~np.isnan(curve).any(axis=1)
    band = stats.sample_efficiency_curves(
        {"ppo": curve[valid][:, None, :]}, "iqm", key=curve_key, reps=config.bootstrap_reps,
        confidence=config.confidence)["ppo"]
    final = final_returns(logs, last=config.final_updates // config.log_every)
    final_ok = final[~np.isnan(final)]
    final_ci = reported_interval("iqm", final_ok, key=final_key, reps=config.bootstrap_reps,
                                 confidence=config.confidence) if final_ok.size else None
    at_cap = int(np.sum(final_ok >= AT_CAP))
    cap_ci = (clopper_pearson(at_cap, int(final_ok.size), config.confidence)
              if final_ok.size else (None, None))

    summary: dict[str, Any] = {
        "experiment": NAME,
        "seeds": config.seeds,
        "block_size": config.block_size,
        "num_devices": timing["num_devices"],
        "updates": num_updates,
        "chunks": num_updates // config.chunk_size,
        "chunk_updates": config.chunk_size,
        "log_every": config.log_every,
        "logged_rows": config.num_rows,
        "env_steps_per_seed": steps_per_seed,
        "final_return_iqm": float(final_ci.point) if final_ci else None,
        "final_return_ci": ([float(final_ci.low), float(final_ci.high)] if final_ci
                            else [None, None]),
        "final_return_interval_note": (final_ci.note.rstrip(".") if final_ci
                                       else "no seed finished"),
        "final_return_at_cap": bool(final_ci is not None and final_ci.point >= AT_CAP),
        "final_return_mean": float(np.mean(final_ok)) if final_ok.size else None,
        "final_return_median": float(np.median(final_ok)) if final_ok.size else None,
        "fraction_seeds_final_500": float(at_cap / final_ok.size) if final_ok.size else None,
        "fraction_seeds_final_500_ci": list(cap_ci),
        "seeds_final_500": at_cap,
        "seeds_without_final_episode": int(np.sum(np.isnan(final))),
        "env_steps_per_second": (timed_steps / max(timing["run_seconds"], 1e-9)
                                 if timed_steps > 0 else None),
        "compile_seconds": timing["compile_seconds"],
        "run_seconds": timing["run_seconds"],
        "curve_env_steps": curve_steps.tolist(),
        "curve_iqm": np.asarray(band.point).tolist(),
        "curve_ci_low": np.asarray(band.low).tolist(),
        "curve_ci_high": np.asarray(band.high).tolist(),
        "nonfinite_seeds": int(np.sum(first_nonfinite >= 0)),
        "first_nonfinite_update": {str(s): int(u) for s, u in enumerate(first_nonfinite)
                                   if u >= 0},
        **state_bytes(config),
    }
    summary["state_bytes_ratio"] = summary["ppo_state_bytes"] / summary["grpo_state_bytes"]

    io.write_parquet(out_dir / "results.parquet",
                     ppo_results_table(logs, train_config.batch_size, config.log_every))
    io.write_json(out_dir / "summary.json", summary)
    _write_plots(summary, final_ok, config, out_dir)
    io.atomic_write_text(out_dir / "report.md", report_markdown(summary, config))
    return summary


def _write_plots(summary: dict[str, Any], final: np.ndarray, config: Config,
                 out_dir: Path) -> None:
    plt = pyplot()

    steps = np.asarray(summary["curve_env_steps"])
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, summary["curve_iqm"], label="IQM across seeds")
    ax.fill_between(steps, summary["curve_ci_low"], summary["curve_ci_high"], alpha=0.3,
                    label=f"{100 * config.confidence:g} % CI (stratified bootstrap)")
    ax.axhline(500, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("environment steps (per seed)")
    ax.set_ylabel("episode return")
    ax.set_title(f"PPO on CartPole-v1, {config.seeds} seeds")
    ax.legend(loc="lower right")
    io.write_figure(out_dir / "return_curve.png", fig)

    fig, ax = plt.subplots(figsize=(7, 3))
    jitter = np.random.default_rng(0).uniform(-0.2, 0.2, final.shape[0])
    ax.scatter(final, jitter, alpha=0.6)
    ax.axvline(summary["final_return_iqm"], color="C1", label="IQM")
    ax.axvspan(*summary["final_return_ci"], color="C1", alpha=0.2,
               label=f"{100 * config.confidence:g} % CI")
    ax.set_yticks([])
    ax.set_xlabel(f"final return (episodes of the last {config.final_updates} updates)")
    ax.legend(loc="upper left")
    io.write_figure(out_dir / "final_returns.png", fig)


def report_markdown(summary: dict[str, Any], config: Config) -> str:
    """The study's report: figures with intervals, a plain-language reading, the procedure."""
    low, high = summary["final_return_ci"]
    cap_note = (" -- at the 500-step cap: the interval is the ceiling, not precision"
                if summary["final_return_at_cap"] else "")
    figures = [
        Figure("final return (IQM over seeds)", summary["final_return_iqm"], low, high,
               f"mean {format_number(summary['final_return_mean'])}, median "
               f"{format_number(summary['final_return_median'])}{cap_note}"),
        Figure("fraction of seeds at the 500 cap in the final window",
               summary["fraction_seeds_final_500"], *summary["fraction_seeds_final_500_ci"],
               f"{summary['seeds_final_500']} of "
               f"{config.seeds - summary['seeds_without_final_episode']} seeds; exact "
               "binomial (Clopper-Pearson)"),
        Figure("env steps per second (training included)", summary["env_steps_per_second"],
               note=f"{config.seeds} seeds, block {config.block_size}; compile "
                    f"{summary['compile_seconds']:.1f} s separately"),
        Figure("PPO state bytes (actor + critic params + Adam)", summary["ppo_state_bytes"],
               note=f"{summary['ppo_param_count']} parameters"),
        Figure("GRPO state bytes (actor params + Adam)", summary["grpo_state_bytes"],
               note=f"{summary['grpo_param_count']} parameters"),
        Figure("PPO / GRPO state bytes", summary["state_bytes_ratio"]),
    ]
    lines = [
        f"# {NAME}",
        "",
        DESCRIPTION + ".",
        "",
        f"{config.seeds} seeds x {summary['env_steps_per_seed']:,} environment steps "
        f"({summary['updates']} updates of {config.num_envs} envs x {config.num_steps} "
        f"steps; {config.num_epochs} epochs x {config.num_minibatches} minibatches; "
        f"gamma {config.gamma:g}, lambda {config.lam:g}, clip {config.clip_epsilon:g}, lr "
        f"{config.learning_rate:g}{' annealed' if config.anneal_lr else ''}, entropy "
        f"{config.entropy_coef:g}, value {config.value_coef:g}, grad-norm "
        f"{config.max_grad_norm:g}; tanh MLP {config.hidden_size}x{config.hidden_size}).",
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
        f"{config.chunk_size} updates, each chunk one jitted program (`lax.scan` over "
        f"updates); seeds are vmapped in blocks of {config.block_size} by "
        "`rljax.sweep.ChunkedSweep` (progress and checkpoints between chunks). Per row of "
        f"{config.log_every} update(s) only the sum and count of returns of the episodes "
        "that finished in it leave the program (plus the mean losses). The curve bins the "
        f"{summary['logged_rows']} rows into "
        f"{config.curve_points} equal runs; each seed's point is the mean return of the "
        "episodes finished in the bin (a bin without a finished episode repeats the "
        "previous value). IQM = mean of the middle 50 % of seeds. The curve band is "
        f"pointwise: {config.bootstrap_reps} stratified bootstrap resamples of whole runs, "
        "the same resampled runs at every checkpoint (`rljax.stats.sample_efficiency_curves`"
        "); the final-return interval: "
        f"{summary['final_return_interval_note']} "
        "(`rljax.stats.reported.reported_interval`). A seed is at the cap when the mean "
        f"return of its final-window episodes is >= {AT_CAP:g}; the fraction of seeds at "
        "the cap has an exact Clopper-Pearson interval (coverage >= the nominal "
        f"{100 * config.confidence:g} % for every proportion and n, by construction). "
        "Throughput is "
        "the environment steps run after the first chunk over the sweep's run time (the "
        "first chunk is timed with the compilation), on "
        "this machine's CPU. Memory counts the bytes of every array leaf of the parameters "
        "and of the optimizer state (`clip_by_global_norm` + Adam: two moments per "
        "parameter and a step count) for the same actor network; GRPO with a KL penalty "
        "would add a frozen reference copy of the actor's parameters.",
        "",
    ]
    return "\n".join(lines)


def reading(summary: dict[str, Any], config: Config) -> str:
    """A short plain-language reading of the figures."""
    low, high = summary["final_return_ci"]
    solved = summary["fraction_seeds_final_500"]
    pct = f"{100 * config.confidence:g} %"
    if summary["final_return_at_cap"]:
        text = (
            f"After {summary['env_steps_per_seed']:,} steps the IQM final return is at the "
            f"500-step cap ({format_number(summary['final_return_iqm'])}, {pct} CI "
            f"[{format_number(low)}, {format_number(high)}]): the middle half of the seeds "
            "cannot score higher, so the interval shows the ceiling, not a precise "
            "estimate. The informative figure is the fraction of seeds at the cap"
        )
    else:
        text = (
            f"After {summary['env_steps_per_seed']:,} steps, the IQM final return is "
            f"{format_number(summary['final_return_iqm'])} ({pct} CI [{format_number(low)}, "
            f"{format_number(high)}]) out of a maximum of 500"
        )
    if solved is not None:
        cap_low, cap_high = summary["fraction_seeds_final_500_ci"]
        counted = config.seeds - summary["seeds_without_final_episode"]
        text += (f"{':' if summary['final_return_at_cap'] else ';'} "
                 f"{summary['seeds_final_500']} of {counted} seeds ({100 * solved:.0f} %, "
                 f"{pct} CI [{100 * cap_low:.0f}, {100 * cap_high:.0f}] %) average 500 over "
                 "the final window")
    text += (
        f". Training ran at {format_number(summary['env_steps_per_second'])} environment "
        "steps per second including the PPO updates. Dropping the critic (GRPO's actor "
        f"alone) cuts parameters + optimizer state from {summary['ppo_state_bytes']:,} to "
        f"{summary['grpo_state_bytes']:,} bytes, a factor of "
        f"{format_number(summary['state_bytes_ratio'])}: here the critic is as large as the "
        "actor, so the saving is about half; for an LM policy with a same-size value model "
        "it is the same half."
    )
    return text


#: The score of a grid run: CartPole-v1's final return, in [0, 500], capped at 500.
SCORE = sensitivity.Score(name="final return", support=(0.0, RETURN_CAP), cap=RETURN_CAP,
                          cap_tolerance=RETURN_CAP - AT_CAP, key="final_return")


def analyse_grid(configs: list[Config], grid: Grid, runs: list[dict], timing: dict[str, Any],
                 out_dir: Path, base: Config | None = None) -> dict[str, Any]:
    """The sensitivity analysis of a grid run (:mod:`rljax.sensitivity`, paired over the
    shared seeds); writes ``results.parquet`` (one row per config x seed x logged row,
    with ``config`` and the swept fields), ``scores.parquet`` (config x seed final
    returns), ``summary.json``, ``report.md`` and ``sensitivity.png``; returns the
    summary. ``base``: the config the grid was applied to (default: the first)."""
    base = configs[0] if base is None else base
    scores = np.stack([np.where(run["first_nonfinite"] >= 0, np.nan,
                                final_returns(run["logs"], last=c.final_updates // c.log_every))
                       for c, run in zip(configs, runs, strict=True)])
    part, panels = sensitivity.analyse(scores, grid, base, reps=base.bootstrap_reps,
                                       key=jax.random.key(base.base_seed + 2), score=SCORE)
    steps = [c.num_updates * c.batch_size for c in configs]
    summary = {"experiment": NAME, "grid": grid.record(), **part, "seeds": base.seeds,
               "block_size": base.block_size,
               "env_steps_per_seed": steps[0] if len(set(steps)) == 1 else steps,
               "final_updates": base.final_updates,
               "nonfinite_runs": int(np.sum([np.sum(r["first_nonfinite"] >= 0) for r in runs])),
               "programs": timing["programs"], "compile_seconds": timing["compile_seconds"],
               "run_seconds": timing["run_seconds"],
               "env_steps_per_second": (timing["timed_steps"] / max(timing["run_seconds"], 1e-9)
                                        if timing["timed_steps"] > 0 else None)}
    columns = grid_columns(configs, grid.fields)
    tables = []
    for c, (config, run) in enumerate(zip(configs, runs, strict=True)):
        table = ppo_results_table(run["logs"], config.batch_size, config.log_every)
        lead = pd.DataFrame({name: np.repeat(col[c:c + 1], len(table))
                             for name, col in columns.items()})
        tables.append(pd.concat([lead, table], axis=1))
    io.write_parquet(out_dir / "results.parquet", pd.concat(tables, ignore_index=True))
    io.write_parquet(out_dir / "scores.parquet",
                     sensitivity.scores_table(scores, columns, key="final_return"))
    io.write_json(out_dir / "summary.json", summary)
    title = dataclasses.replace(SCORE, title=f"PPO on CartPole-v1: final return after "
                                f"{base.total_steps:,} steps")
    sensitivity.write_plot(panels, title, base.seeds, out_dir / "sensitivity.png")
    what = (f"{summary['env_steps_per_seed']} environment steps per run; score = mean return "
            f"of the episodes finished in the last {base.final_updates} updates.")
    io.atomic_write_text(out_dir / "report.md", sensitivity.report_markdown(summary, what))
    return summary
