"""Study ``recurrent-ppo``: a GRU actor-critic against a feed-forward one on a memory task.

Task: CartPole-v1 with the velocities hidden (``rljax.envs.masked.masked_cartpole``:
observations ``[x, theta]``; 500-step cap, truncations bootstrapped). Two arms, the same
PPO config and budget, the same seeds:

* **GRU**: ``rljax.policies.gru_actor_critic`` (embedding ``hidden_size`` -> GRU
  ``hidden_size`` -> actor / critic heads), trained by
  ``rljax.training.make_recurrent_ppo_train`` (the hidden state is reset at episode
  boundaries inside the rollout and the update's scan; minibatches of whole env
  sequences);
* **FF**: ``rljax.policies.mlp_actor_critic`` (separate tanh MLPs ``hidden_size x
  hidden_size``), trained by ``rljax.training.make_ppo_train`` (minibatches of shuffled
  steps, as usual for a feed-forward policy).

Seed ``i`` of both arms gets the same key (``rljax.sweep.Sweep`` with the same base seed):
the same environment resets and action noise stream, so the arms are compared **paired**,
seed by seed (common random numbers).

Figures:

* **Final return** per arm: per seed, the mean return of the episodes that finished in the
  last ``final_updates`` updates; IQM and mean over seeds with 95 % intervals
  (``rljax.stats.reported.reported_interval``: the method the interval-coverage study
  recommends at this n, its measured coverage stated).
* **Paired difference GRU - FF** of the per-seed final returns: mean with a 95 % interval
  (``reported_interval("paired_difference")``, method and coverage stated), and how many
  seeds the GRU wins.
* **Learning curves**: per arm, IQM over seeds of the mean return in ``curve_points``
  equal bins of updates, with pointwise 95 % stratified-bootstrap bands
  (``rljax.stats.sample_efficiency_curves``).
* **Wall time**: compile and run seconds of each arm on this machine.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pandas as pd

from rljax import io, stats
from rljax.config import ConfigError, param, with_defaults
from rljax.envs.masked import masked_cartpole
from rljax.nonfinite import NONFINITE_STEP
from rljax.policies import mlp_actor_critic
from rljax.policies.recurrent import gru_actor_critic
from rljax.report import Figure, figures_table, format_number, interval_dict, pyplot
from rljax.stats.reported import reported_interval
from rljax.sweep import Sweep
from rljax.training import final_returns
from rljax.training.episode_returns import binned_returns, ppo_results_table
from rljax.training.ppo import PPOTrainConfig, make_ppo_train
from rljax.training.recurrent_ppo import make_recurrent_ppo_train

NAME = "recurrent-ppo"
DESCRIPTION = ("recurrent PPO: GRU vs feed-forward actor-critic on CartPole without "
               "velocities, paired over seeds")
ARMS = ("gru", "ff")
ARM_LABELS = {"gru": "GRU", "ff": "feed-forward MLP"}


@dataclass(frozen=True)
class Config(with_defaults(PPOTrainConfig, num_envs=32, num_steps=32, learning_rate=1e-3)):
    """Configuration of the study: the trainers' :class:`PPOTrainConfig` (the same for
    both arms; this study's defaults: 32 envs x 32 steps, learning rate 1e-3) and the
    networks, the env and the run's shape; every field settable with ``--set key=value``.

    Defaults: 16 seeds x 5e5 environment steps per arm; 32 envs x 32 steps per update
    (488 updates), 4 epochs x 4 minibatches (of 8 whole env sequences for the GRU, of 256
    shuffled steps for the MLP), learning rate 1e-3 annealed, the other PPO settings
    CleanRL's CartPole ones; GRU width 64, MLP 64 x 64.
    """

    seeds: int = param(16, "seeds per arm (>= 2; both arms on the same seeds)",
                       sweep=False, low=2)
    block_size: int = param(16, "seeds per compiled block", sweep=False, low=1)
    base_seed: int = param(0, "the sweep's base seed", sweep=False, low=0, high=2**31 - 1)
    hidden_size: int = param(64, "GRU width; the MLP is hidden_size x hidden_size", low=1)
    max_steps_in_episode: int = param(500, "the masked CartPole's episode limit", low=1)
    curve_points: int = param(20, "points of the learning curves", sweep=False, low=1)
    final_updates: int = param(20, "updates in the final-return window", sweep=False,
                               low=1)
    bootstrap_reps: int = param(2000, "bootstrap resamples", sweep=False, low=1)
    confidence: float = param(0.95, "the intervals' confidence", sweep=False, low=0.0,
                              high=1.0, low_open=True, high_open=True)

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first invalid field."""
        super().validate()
        if self.num_envs % self.num_minibatches:
            raise ConfigError(f"num_minibatches: must divide num_envs = {self.num_envs} (the "
                              f"GRU's minibatches are whole env sequences), got "
                              f"{self.num_minibatches}")
        for name in ("curve_points", "final_updates"):
            if getattr(self, name) > self.num_updates:
                raise ConfigError(f"{name}: must be <= the number of updates total_steps // "
                                  f"(num_envs * num_steps) = {self.num_updates}, got "
                                  f"{getattr(self, name)}")


def networks(config: Config) -> dict[str, Any]:
    """``{"gru": RecurrentActorCritic, "ff": ActorCritic}`` for CartPole's two actions."""
    width = config.hidden_size
    return {"gru": gru_actor_critic(2, width), "ff": mlp_actor_critic(2, (width, width))}


def trainers(config: Config) -> dict[str, Any]:
    """``{arm: train(key) -> logs}`` on the same env with the same trainer config."""
    env = masked_cartpole(config.max_steps_in_episode)
    nets, train_config = networks(config), config.train_config()
    return {"gru": make_recurrent_ppo_train(env, nets["gru"], train_config),
            "ff": make_ppo_train(env, nets["ff"], train_config)}


def param_count(net: Any) -> int:
    """Number of parameters of ``net`` on ``[x, theta]`` observations (abstract)."""
    obs = jax.ShapeDtypeStruct((2,), np.float32)
    params = jax.eval_shape(net.init, jax.random.key(0), obs)
    return int(sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(params)))


def run_arms(config: Config, options: Any = None) -> dict[str, dict[str, Any]]:
    """Both arms over ``seeds`` seeds (same base seed: seed ``i`` shares its key).

    Returns ``{arm: {"logs": {name: [S, U]}, "first_nonfinite": [S], "compile_seconds",
    "run_seconds"}}``.
    """
    runs = {}
    for arm, train in trainers(config).items():
        sweep = Sweep(train, base_seed=config.base_seed, block_size=config.block_size)
        result = sweep.run(config.seeds, desc=f"{NAME}-{arm}", options=options)
        outputs = dict(result.outputs)
        first_nonfinite = np.asarray(outputs.pop(NONFINITE_STEP))
        runs[arm] = {"logs": {k: np.asarray(v) for k, v in outputs.items()},
                     "first_nonfinite": first_nonfinite,
                     "compile_seconds": float(result.compile_seconds),
                     "run_seconds": float(result.run_seconds)}
    return runs


def _interval(statistic: str, *samples: np.ndarray, key: jax.Array,
              config: Config) -> dict[str, Any]:
    return interval_dict(reported_interval(statistic, *samples, key=key,
                                           reps=config.bootstrap_reps,
                                           confidence=config.confidence))


def run(config: Config, out_dir: Path, options: Any = None) -> dict[str, Any]:
    """Run the study; writes ``results.parquet``, ``summary.json``, ``report.md``,
    ``learning_curves.png`` and ``final_returns.png`` into ``out_dir``; returns the
    summary."""
    config.validate()
    out_dir = Path(out_dir)
    start = time.perf_counter()
    runs = run_arms(config, options)
    train_config = config.train_config()
    num_updates = train_config.num_updates
    steps_per_update = train_config.batch_size

    final = {arm: final_returns(runs[arm]["logs"], last=config.final_updates) for arm in ARMS}
    nonfinite = {arm: runs[arm]["first_nonfinite"] >= 0 for arm in ARMS}
    # a pair counts when both arms stayed finite and finished an episode in the window
    keep = np.ones(config.seeds, bool)
    for arm in ARMS:
        keep &= ~nonfinite[arm] & ~np.isnan(final[arm])
    paired = {arm: final[arm][keep] for arm in ARMS}
    n = int(keep.sum())

    keys = jax.random.split(jax.random.key(config.base_seed + 1), 6)
    summary: dict[str, Any] = {
        "experiment": NAME,
        "env": "MaskedCartPole [x, theta]",
        "seeds": config.seeds,
        "paired_seeds": n,
        "updates": num_updates,
        "env_steps_per_seed": num_updates * steps_per_update,
        "param_count": {arm: param_count(net) for arm, net in networks(config).items()},
        "final_return_per_seed": {arm: [None if np.isnan(x) else float(x) for x in final[arm]]
                                  for arm in ARMS},
        "nonfinite_seeds": {arm: int(nonfinite[arm].sum()) for arm in ARMS},
        # a seed at the cap: its final-window episodes average >= cap - 0.5
        "seeds_at_cap": {arm: int(np.sum(paired[arm] >= config.max_steps_in_episode - 0.5))
                         for arm in ARMS},
    }
    for i, arm in enumerate(ARMS):
        if n >= 2:
            summary[f"{arm}_final_iqm"] = _interval("iqm", paired[arm], key=keys[2 * i],
                                                    config=config)
            summary[f"{arm}_final_mean"] = _interval("mean", paired[arm], key=keys[2 * i + 1],
                                                     config=config)
        else:
            summary[f"{arm}_final_iqm"] = summary[f"{arm}_final_mean"] = None
    if n >= 2:
        difference = _interval("paired_difference", paired["gru"], paired["ff"], key=keys[4],
                               config=config)
        t = stats.paired_t_interval(paired["gru"], paired["ff"], confidence=config.confidence)
        difference["paired_t"] = [float(t.low), float(t.high)]
        difference["gru_wins"] = int(np.sum(paired["gru"] > paired["ff"]))
    else:
        difference = None
    summary["paired_difference"] = difference

    curves = {arm: binned_returns(runs[arm]["logs"]["return_sum"],
                                  runs[arm]["logs"]["episodes"], config.curve_points)
              for arm in ARMS}
    edges = np.linspace(0, num_updates, config.curve_points + 1).round().astype(int)
    valid = keep.copy()
    for arm in ARMS:
        valid &= ~np.isnan(curves[arm]).any(axis=1)
    summary["curve_env_steps"] = (edges[1:] * steps_per_update).tolist()
    if valid.sum() >= 1:
        bands = stats.sample_efficiency_curves(
            {arm: curves[arm][valid][:, None, :] for arm in ARMS}, "iqm", key=keys[5],
            reps=config.bootstrap_reps, confidence=config.confidence)
        summary["curves"] = {arm: {"iqm": np.asarray(bands[arm].point).tolist(),
                                   "low": np.asarray(bands[arm].low).tolist(),
                                   "high": np.asarray(bands[arm].high).tolist()}
                             for arm in ARMS}
    else:
        summary["curves"] = None
    summary["curve_seeds"] = int(valid.sum())
    summary["timing"] = {arm: {"compile_seconds": runs[arm]["compile_seconds"],
                               "run_seconds": runs[arm]["run_seconds"],
                               "env_steps_per_second": (config.seeds * num_updates
                                                        * steps_per_update
                                                        / max(runs[arm]["run_seconds"], 1e-9))}
                         for arm in ARMS}
    summary["wall_seconds"] = time.perf_counter() - start

    io.write_parquet(out_dir / "results.parquet", results_table(runs, steps_per_update))
    io.write_json(out_dir / "summary.json", summary)
    _write_plots(summary, paired, config, out_dir)
    io.atomic_write_text(out_dir / "report.md", report_markdown(summary, config))
    return summary


def results_table(runs: dict[str, dict[str, Any]], steps_per_update: int) -> pd.DataFrame:
    """Tidy table, one row per arm x seed x update: ``arm, seed, update, env_steps,
    episodes, episode_return`` (NaN when none finished), ``return_sum`` and the losses."""
    frames = []
    for arm in ARMS:
        table = ppo_results_table(runs[arm]["logs"], steps_per_update)
        table.insert(0, "arm", np.repeat(arm, len(table)))
        frames.append(table)
    return pd.concat(frames, ignore_index=True)


def _write_plots(summary: dict[str, Any], paired: dict[str, np.ndarray], config: Config,
                 out_dir: Path) -> None:
    plt = pyplot()

    pct = f"{100 * config.confidence:g} %"
    fig, ax = plt.subplots(figsize=(7, 4))
    if summary["curves"] is not None:
        steps = np.asarray(summary["curve_env_steps"])
        for arm in ARMS:
            curve = summary["curves"][arm]
            ax.plot(steps, curve["iqm"], label=f"{ARM_LABELS[arm]} (IQM)")
            ax.fill_between(steps, curve["low"], curve["high"], alpha=0.25)
    ax.axhline(config.max_steps_in_episode, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("environment steps (per seed)")
    ax.set_ylabel("episode return")
    ax.set_title(f"PPO on CartPole without velocities, {summary['curve_seeds']} seeds "
                 f"({pct} bands)")
    ax.legend(loc="upper left")
    io.write_figure(out_dir / "learning_curves.png", fig)

    fig, ax = plt.subplots(figsize=(5, 4))
    for g, f in zip(paired["gru"], paired["ff"], strict=True):
        ax.plot([0, 1], [f, g], color="grey", alpha=0.5, marker="o")
    ax.set_xticks([0, 1], [ARM_LABELS["ff"], ARM_LABELS["gru"]])
    ax.set_xlim(-0.3, 1.3)
    ax.set_ylabel(f"final return (last {config.final_updates} updates)")
    ax.set_title("per-seed final return, paired by seed")
    io.write_figure(out_dir / "final_returns.png", fig)


def report_markdown(summary: dict[str, Any], config: Config) -> str:
    """The study's report: figures with intervals, a reading, the procedure."""
    figures = []
    for arm in ARMS:
        for stat in ("iqm", "mean"):
            r = summary[f"{arm}_final_{stat}"]
            if r is not None:
                figures.append(Figure(f"{ARM_LABELS[arm]} final return ({stat.upper()} over "
                                      "seeds)", r["point"], r["low"], r["high"],
                                      f"{r['method']}, coverage {format_number(r['coverage'])}"))
    d = summary["paired_difference"]
    if d is not None:
        figures.append(Figure("paired difference GRU - FF (mean over seeds)", d["point"],
                              d["low"], d["high"],
                              f"{d['method']}, coverage {format_number(d['coverage'])}; GRU "
                              f"higher on {d['gru_wins']} of {d['n']} seeds"))
    for arm in ARMS:
        t = summary["timing"][arm]
        figures.append(Figure(f"{ARM_LABELS[arm]} env steps per second (training included)",
                              t["env_steps_per_second"],
                              note=f"compile {t['compile_seconds']:.1f} s, run "
                                   f"{t['run_seconds']:.1f} s"))
    notes = [summary[f"{arm}_final_{stat}"]["note"] for arm in ARMS for stat in ("iqm", "mean")
             if summary[f"{arm}_final_{stat}"] is not None]
    if d is not None:
        notes.append(d["note"])
    lines = [
        f"# {NAME}",
        "",
        DESCRIPTION + ".",
        "",
        f"{config.seeds} seeds per arm x {summary['env_steps_per_seed']:,} environment steps "
        f"({summary['updates']} updates of {config.num_envs} envs x {config.num_steps} steps; "
        f"{config.num_epochs} epochs x {config.num_minibatches} minibatches; gamma "
        f"{config.gamma:g}, lambda {config.lam:g}, clip {config.clip_epsilon:g}, lr "
        f"{config.learning_rate:g}{' annealed' if config.anneal_lr else ''}, entropy "
        f"{config.entropy_coef:g}, value {config.value_coef:g}, grad-norm "
        f"{config.max_grad_norm:g}). GRU: width {config.hidden_size} "
        f"({summary['param_count']['gru']:,} parameters); MLP: "
        f"{config.hidden_size}x{config.hidden_size} actor and critic "
        f"({summary['param_count']['ff']:,} parameters). Wall time "
        f"{summary['wall_seconds']:.0f} s.",
        "",
        figures_table(figures, config.confidence),
        "",
        "![learning curves](learning_curves.png)",
        "",
        "![final returns](final_returns.png)",
        "",
        "## Reading",
        "",
        reading(summary, config),
        "",
        "## Procedure",
        "",
        "Both arms run the same PPO config on `masked_cartpole()` (CartPole-v1 observing "
        "`[x, theta]` only), each seed's whole run one jitted program, seeds vmapped in "
        f"blocks of {config.block_size} (`rljax.sweep.Sweep`); seed i of both arms uses "
        "the same key, so the comparison is paired. The GRU's hidden state is zeroed at "
        "every episode start in the rollout and in the update, which re-runs the GRU over "
        "each environment's segment from its stored initial state; its minibatches are "
        "whole environment sequences. A seed's final return is the mean return of the "
        f"episodes that finished in the last {config.final_updates} updates; "
        f"{summary['paired_seeds']} of {config.seeds} seeds enter the comparison (both "
        "arms finite and with a finished episode in that window). Intervals "
        "(`rljax.stats.reported.reported_interval`): " + "; ".join(notes) + ". The paired "
        "Student-t interval of the difference, for reference: "
        + (f"[{format_number(d['paired_t'][0])}, {format_number(d['paired_t'][1])}]"
           if d is not None else "n/a")
        + f". Curves: {config.curve_points} equal bins of updates; IQM over the "
        f"{summary['curve_seeds']} seeds with an episode in every bin, pointwise "
        f"{config.bootstrap_reps}-resample stratified-bootstrap band "
        "(`rljax.stats.sample_efficiency_curves`). Throughput counts every arm's "
        "environment steps over its sweep's run time (compilation separately), on this "
        "machine's CPU.",
        "",
    ]
    return "\n".join(lines)


def reading(summary: dict[str, Any], config: Config) -> str:
    """A short plain-language reading of the figures."""
    d = summary["paired_difference"]
    if d is None:
        return "Fewer than two seeds finished episodes in both arms: no comparison."
    pct = f"{100 * config.confidence:g} %"
    gru, ff = summary["gru_final_iqm"], summary["ff_final_iqm"]
    if d["low"] > 0:
        verdict = "the GRU's final return is higher than the feed-forward policy's"
    elif d["high"] < 0:
        verdict = "the feed-forward policy's final return is higher than the GRU's"
    else:
        verdict = "the interval of the difference includes 0: no difference is established"
    return (f"Without velocities the feed-forward policy reaches an IQM final return of "
            f"{format_number(ff['point'])} ({pct} CI [{format_number(ff['low'])}, "
            f"{format_number(ff['high'])}]) and the GRU {format_number(gru['point'])} "
            f"([{format_number(gru['low'])}, {format_number(gru['high'])}]) out of "
            f"{config.max_steps_in_episode}. Paired by seed, GRU - FF averages "
            f"{format_number(d['point'])} ({pct} CI [{format_number(d['low'])}, "
            f"{format_number(d['high'])}], n = {d['n']}; GRU higher on {d['gru_wins']} "
            f"seeds): {verdict}. {summary['seeds_at_cap']['gru']} of {d['n']} GRU seeds "
            f"(FF: {summary['seeds_at_cap']['ff']}) sit at the {config.max_steps_in_episode}-"
            "step cap over the final window, so the GRU's upper interval bounds are the cap, "
            "not precision.")
