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
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from rljax import io, stats
from rljax.config import ConfigError, require_float, require_int
from rljax.envs import CartPole
from rljax.grid import Grid, split_structural
from rljax.nonfinite import NONFINITE_STEP
from rljax.policies import mlp_actor_critic
from rljax.report import Figure, figures_table, format_number
from rljax.stats.reported import reported_interval
from rljax.sweep import ChunkedSweep
from rljax.training import final_returns
from rljax.training.chunking import MAX_TOTAL_STEPS, auto_chunk_updates, chunk_size_error
from rljax.training.ppo import PPOTrainConfig, make_ppo_chunks, ppo_optimizer, train_config_from

NAME = "ppo-cartpole"
SUPPORTS_TENSORBOARD = True  # its ChunkedSweep writes `rljax run --tensorboard DIR` logs
DESCRIPTION = "PPO on CartPole-v1: IQM return curve, final return, env steps/s, critic memory"

METRIC_COLUMNS = ("loss", "policy_loss", "value_loss", "entropy", "clip_fraction", "approx_kl")
RETURN_CAP = 500.0  # CartPole-v1's episode limit: the largest return an episode can have
AT_CAP = RETURN_CAP - 0.5  # a seed whose final-window mean return is >= this is at the cap


@dataclass(frozen=True)
class Config:
    """Configuration of the study (every field settable with ``--set key=value``).

    ``TRACED`` fields are read from ``hparams`` inside the compiled program (a grid over
    them is one program); ``STRUCTURAL`` ones fix the program (one per distinct value).
    ``value_clip`` is structural because 0 removes value clipping from the program.
    """

    TRACED: ClassVar[tuple[str, ...]] = ("learning_rate", "clip_epsilon", "entropy_coef",
                                         "value_coef", "gamma", "lam", "max_grad_norm")
    STRUCTURAL: ClassVar[tuple[str, ...]] = ("hidden_size", "num_envs", "num_steps",
                                             "num_epochs", "num_minibatches", "anneal_lr",
                                             "value_clip", "total_steps")

    seeds: int = 16
    block_size: int = 16
    base_seed: int = 0
    total_steps: int = 500_000
    num_envs: int = 4
    num_steps: int = 128
    num_epochs: int = 4
    num_minibatches: int = 4
    gamma: float = 0.99
    lam: float = 0.95
    learning_rate: float = 2.5e-4
    anneal_lr: bool = True
    clip_epsilon: float = 0.2
    value_clip: float = 0.2  # 0 switches value clipping off
    entropy_coef: float = 0.01
    value_coef: float = 0.5
    max_grad_norm: float = 0.5
    hidden_size: int = 64
    chunk_updates: int = 0  # updates per chunk; 0: automatic, about 16 chunks (61 of 976)
    log_every: int = 1  # updates per logged row
    curve_points: int = 50
    final_updates: int = 20
    bootstrap_reps: int = 2000
    confidence: float = 0.95

    def train_config(self) -> PPOTrainConfig:
        """The trainer's config; its ``TRACED`` values are overridden by ``hparams``."""
        return train_config_from(self)

    def hparams(self) -> dict[str, float]:
        """``{field: value}`` of the ``TRACED`` fields: this config's row of a grid."""
        return {name: getattr(self, name) for name in self.TRACED}

    @property
    def num_updates(self) -> int:
        return self.total_steps // (self.num_envs * self.num_steps)

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
        """Raise :class:`ConfigError` naming the first invalid field."""
        require_int("seeds", self.seeds, 1)
        require_int("block_size", self.block_size, 1)
        require_int("base_seed", self.base_seed, 0, 2**31 - 1)  # 32-bit keys, + offsets
        for name in ("num_envs", "num_steps", "num_epochs", "num_minibatches", "hidden_size"):
            require_int(name, getattr(self, name), 1)
        require_int("total_steps", self.total_steps, 1, MAX_TOTAL_STEPS)
        if self.total_steps < self.num_envs * self.num_steps:
            raise ConfigError(f"total_steps: must be >= num_envs * num_steps = "
                              f"{self.num_envs * self.num_steps}, got {self.total_steps}")
        if (self.num_envs * self.num_steps) % self.num_minibatches:
            raise ConfigError(f"num_minibatches: must divide num_envs * num_steps = "
                              f"{self.num_envs * self.num_steps}, got {self.num_minibatches}")
        require_float("gamma", self.gamma, low=0.0, high=1.0)
        require_float("lam", self.lam, low=0.0, high=1.0)
        require_float("learning_rate", self.learning_rate, low=0.0, low_inclusive=False)
        require_float("clip_epsilon", self.clip_epsilon, low=0.0, low_inclusive=False)
        require_float("value_clip", self.value_clip, low=0.0)
        require_float("entropy_coef", self.entropy_coef, low=0.0)
        require_float("value_coef", self.value_coef, low=0.0)
        require_float("max_grad_norm", self.max_grad_norm, low=0.0, low_inclusive=False)
        require_int("chunk_updates", self.chunk_updates, 0)
        require_int("log_every", self.log_every, 1)
        if self.num_updates % self.chunk_size:
            raise ConfigError(chunk_size_error(self.chunk_size, self.num_updates))
        if self.chunk_size % self.log_every:
            raise ConfigError(f"log_every: must divide chunk_updates = {self.chunk_size}, "
                              f"got {self.log_every}")
        require_int("curve_points", self.curve_points, 1)
        if self.curve_points > self.num_rows:
            raise ConfigError(f"curve_points: must be <= the number of logged rows "
                              f"total_steps // (num_envs * num_steps) // log_every = "
                              f"{self.num_rows}, got {self.curve_points}")
        require_int("final_updates", self.final_updates, 1)
        if self.final_updates > self.num_updates:
            raise ConfigError(f"final_updates: must be <= the number of updates "
                              f"total_steps // (num_envs * num_steps) = {self.num_updates}, "
                              f"got {self.final_updates}")
        if self.final_updates % self.log_every:
            raise ConfigError(f"final_updates: must be a multiple of log_every = "
                              f"{self.log_every}, got {self.final_updates}")
        require_int("bootstrap_reps", self.bootstrap_reps, 1)
        require_float("confidence", self.confidence, low=0.0, high=1.0, low_inclusive=False,
                      high_inclusive=False)


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


def clopper_pearson(successes: int, trials: int,
                    confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval for a binomial proportion.

    ``low = Beta^{-1}(alpha; x, n - x + 1)`` (0 when ``x = 0``) and ``high =
    Beta^{-1}(1 - alpha; x + 1, n - x)`` (1 when ``x = n``), ``alpha = (1 - confidence) /
    2``: the interval inverts two one-sided binomial tests, so its coverage is ``>=
    confidence`` for every true proportion and every ``n`` (conservative; no simulation
    needed). Clopper & Pearson, Biometrika 26, 1934.

    Args:
      successes: x, an integer in ``[0, trials]``.
      trials: n >= 1.
      confidence: in (0, 1).

    Returns:
      ``(low, high)`` floats in [0, 1].
    """
    from scipy.stats import beta

    if not isinstance(trials, int | np.integer) or trials < 1:
        raise ValueError(f"trials: must be an integer >= 1, got {trials!r}")
    if not isinstance(successes, int | np.integer) or not 0 <= successes <= trials:
        raise ValueError(f"successes: must be an integer in [0, trials = {trials}], "
                         f"got {successes!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence: must be in (0, 1), got {confidence!r}")
    alpha = (1.0 - confidence) / 2.0
    x, n = int(successes), int(trials)
    low = 0.0 if x == 0 else float(beta.ppf(alpha, x, n - x + 1))
    high = 1.0 if x == n else float(beta.ppf(1.0 - alpha, x + 1, n - x))
    return low, high


def binned_returns(return_sum: np.ndarray, episodes: np.ndarray, bins: int) -> np.ndarray:
    """Per-seed mean return of the episodes finished in each of ``bins`` equal runs of
    logged rows (the last bin takes the remainder); a bin with no finished episode carries
    the previous bin's value forward (NaN before the first episode).

    Args:
      return_sum: ``[S, R]`` summed returns of the episodes finished in each row (a row
        is ``log_every`` updates).
      episodes: ``[S, R]`` how many finished.
      bins: K <= R.

    Returns:
      ``[S, K]`` float64.
    """
    num_rows = return_sum.shape[1]
    edges = np.linspace(0, num_rows, bins + 1).round().astype(int)
    sums = np.add.reduceat(return_sum.astype(np.float64), edges[:-1], axis=1)
    counts = np.add.reduceat(episodes.astype(np.float64), edges[:-1], axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, sums / counts, np.nan)
    return pd.DataFrame(means.T).ffill().to_numpy().T


def run_configs(configs: list[Config], desc: str = NAME) -> tuple[list[dict], dict]:
    """Run ``seeds`` seeds of every configuration: one :class:`ChunkedSweep` per distinct
    setting of the untraced fields, its configurations' ``TRACED`` values vmapped with the
    seeds (``rljax.grid.split_structural``).

    Args:
      configs: ``K`` validated configs differing only in ``TRACED`` / ``STRUCTURAL``
        fields (same seeds, base seed and block size).
      desc: sweep name (checkpoints, progress); a structural group appends its values.

    Returns:
      ``(runs, timing)``: ``runs[c]`` is ``{"logs": {name: [S, R_c]}, "first_nonfinite":
      [S] int}`` (R_c logged rows of config ``c``); ``timing`` has ``compile_seconds``,
      ``run_seconds``, ``timed_steps`` (environment steps the run time covers: not the
      first chunk, timed with the compilation, nor work read back on ``--resume``),
      ``num_devices`` and ``programs`` (one per compiled program).
    """
    return run_chunked_groups(
        configs, Config.TRACED, desc,
        lambda first, train_config: make_ppo_chunks(
            CartPole(), mlp_actor_critic(2, (first.hidden_size, first.hidden_size)),
            train_config, updates_per_chunk=first.chunk_size, log_every=first.log_every))


def run_chunked_groups(configs: list[Any], traced: tuple[str, ...], desc: str,
                       make_chunks: Any) -> tuple[list[dict], dict]:
    """The loop behind a PPO study's ``run_configs`` (this study's and ``ppo``'s): one
    :class:`ChunkedSweep` per distinct setting of the untraced fields
    (``rljax.grid.split_structural``), ``make_chunks(first_config, train_config) ->
    PPOChunks`` building its program. Returns ``(runs, timing)`` as
    :func:`run_configs` documents (logs ``[S, R_c]`` per config), plus ``final``: the
    other outputs of ``finish`` per config, ``[S, ...]``."""
    runs: list[dict | None] = [None] * len(configs)
    timing: dict[str, Any] = {"compile_seconds": 0.0, "run_seconds": 0.0, "timed_steps": 0.0,
                              "num_devices": 1, "programs": []}
    for group in split_structural(configs, traced):
        first = configs[int(group.config_ids[0])]
        train_config = first.train_config()
        chunks = make_chunks(first, train_config)
        sweep = ChunkedSweep(chunks.init, chunks.advance, chunks.finish,
                             num_chunks=chunks.num_chunks, base_seed=first.base_seed,
                             block_size=first.block_size)
        name = desc + "".join(f"-{k}={v}" for k, v in group.structural.items())
        result = sweep.run(first.seeds, configs=group.table, desc=name,
                           first_seed=getattr(first, "first_seed", 0))
        for j, c in enumerate(group.config_ids):
            # [K, S, chunks, rows per chunk] -> [S, R] rows of log_every updates, in order
            runs[int(c)] = {
                "logs": {k: np.asarray(v[j]).reshape(first.seeds, first.num_rows)
                         for k, v in result.outputs["logs"].items()},
                "first_nonfinite": np.asarray(result.outputs["final"][NONFINITE_STEP][j]),
                # anything else ``finish`` returns (e.g. test-rollout returns [S, E])
                "final": {k: np.asarray(v[j]) for k, v in result.outputs["final"].items()
                          if k != NONFINITE_STEP},
            }
        steps_per_seed = train_config.num_updates * train_config.batch_size
        timing["compile_seconds"] += result.compile_seconds
        timing["run_seconds"] += result.run_seconds
        timing["timed_steps"] += (len(group.table) * first.seeds * steps_per_seed
                                  * result.timed_fraction)
        timing["num_devices"] = result.num_devices
        timing["programs"].append({"structural": dict(group.structural),
                                   "configs": len(group.table),
                                   "compile_seconds": float(result.compile_seconds)})
    return runs, timing


def run(config: Config, out_dir: Path, grid: Grid | None = None) -> dict[str, Any]:
    """Run the study; writes ``results.parquet``, ``summary.json``, ``report.md``,
    ``return_curve.png`` and ``final_returns.png`` into ``out_dir``; returns the summary.

    With ``grid`` (a :class:`rljax.grid.Grid` over ``TRACED`` / ``STRUCTURAL`` fields)
    it runs every configuration of the grid on the same seeds and writes the sensitivity
    analysis instead (:func:`experiments.ppo_sensitivity.analyse`).
    """
    config.validate()
    if grid is not None:
        from experiments import ppo_sensitivity

        configs = grid.configs(config)
        for c in configs:
            c.validate()
        runs, timing = run_configs(configs)
        return ppo_sensitivity.analyse(configs, grid, runs, timing, out_dir, base=config)
    # a plain run is the one-row grid of its config: its traced values go through hparams
    (only,), timing = run_configs([config])
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
                     results_table(logs, train_config.batch_size, config.log_every))
    io.write_json(out_dir / "summary.json", summary)
    _write_plots(summary, final_ok, config, out_dir)
    io.atomic_write_text(out_dir / "report.md", report_markdown(summary, config))
    return summary


def results_table(logs: dict[str, np.ndarray], steps_per_update: int,
                  log_every: int = 1, *, first_seed: int = 0) -> pd.DataFrame:
    """Tidy table, one row per seed x logged row (``logs`` leaves ``[S, R]``, a row is
    ``log_every`` updates): ``seed`` (the seed id, ``first_seed + s``), ``update``
    (updates done at the row's end),
    ``env_steps``, ``episodes``, ``episode_return`` (mean of the episodes finished in the
    row; NaN if none), ``return_sum`` and the row's mean losses."""
    num_seeds, num_rows = logs["return_sum"].shape
    episodes = logs["episodes"].astype(np.int32)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_return = np.where(episodes > 0, logs["return_sum"] / episodes, np.nan)
    updates = np.arange(1, num_rows + 1, dtype=np.int64) * log_every
    table = {
        "seed": np.repeat(np.arange(first_seed, first_seed + num_seeds, dtype=np.int32),
                          num_rows),
        "update": np.tile(updates.astype(np.int32), num_seeds),
        "env_steps": np.tile(updates * steps_per_update, num_seeds),
        "episodes": episodes.reshape(-1),
        "episode_return": mean_return.reshape(-1).astype(np.float32),
        "return_sum": logs["return_sum"].reshape(-1).astype(np.float32),
    }
    for name in METRIC_COLUMNS:
        table[name] = logs[name].reshape(-1).astype(np.float32)
    return pd.DataFrame(table)


def _write_plots(summary: dict[str, Any], final: np.ndarray, config: Config,
                 out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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


def config_fields() -> list[str]:
    """Names of the config fields (for ``--set``)."""
    return [f.name for f in dataclasses.fields(Config)]
