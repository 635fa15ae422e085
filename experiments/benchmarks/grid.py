"""``rljax bench grid``: K configurations x 64 seeds in one program vs a loop of K sweeps.

Workload: the ``orm-vs-prm`` study's per-seed run at its default sizes (ORM mode, 400
episodes of tabular REINFORCE on the 5-step ChainMDP), over ``K`` configurations of its
traced hyperparameters (``learning_rate``, ``baseline_rate``; ``baseline_init`` 0.5).
Configuration 0 is the study's default (lr 0.1, rate 0.05); the others are drawn from
``numpy.random.default_rng(0)``, row by row (so the 16 configurations are the first 16 of
the 256): lr log-uniform on [0.02, 0.5], rate uniform on [0.01, 0.2] (rounded to
float32, so a baked-in constant and a traced value are the same number). For ``K`` in
``CONFIG_COUNTS`` (1, 16, 256), ``SEEDS`` = 64 seeds each:

* **grid** (a): ``Sweep(train, block_size=min(K * 64, BLOCK_SIZE)).run(64,
  configs=table)`` -- every (config, seed) pair in one compiled program, ``train(key,
  hparams)`` reading the traced values (``experiments.orm_vs_prm.make_train``, with the
  final logits kept for the agreement check below).
* **loop** (b): what a user without the config axis writes: per configuration a fresh
  ``Sweep(make_chain_train(..., learning_rate=lr, baseline_rate=rate), block_size=64)``
  with the values baked in as Python constants, compiled and run -- K programs. Compiling
  256 of them takes ~20 minutes on this machine, so where ``K > LOOP_SAMPLE`` (16) only
  the first ``LOOP_SAMPLE`` configurations are compiled and run and both loop times are
  scaled by ``K / LOOP_SAMPLE`` (each configuration costs the same program size; the
  table marks these rows "extrapolated").

Method: each side is compiled first (timed: ``lower().compile()`` on a fresh ``Sweep``),
warmed up once, then the two alternate over ``ROUNDS`` rounds and the run time is the
median (back-to-back timings on the shared 2-core machine differ by up to 70 %). The grid
program is compiled ``COMPILE_ROUNDS`` times per ``K`` (alternating over the ``K`` values)
and its compile time is the median. Reported per ``K``: compile and run seconds of both
sides, ``ratio`` = (loop compile + loop run) / (grid compile + grid run) -- the speed-up a
user sees, compilation included -- and ``run_ratio`` (run times alone). Targets:
``ratio >= 10`` at ``K = 256``; grid compile time flat in ``K`` (its program depends on
the block size only, never on ``K`` or the values).

Agreement: for every configuration the loop ran, both sides' ``success`` ``[64, 400]`` and
final logits ``[64, 5, 2]`` are compared: the fraction of (config, seed) pairs bitwise
equal and the largest absolute logit difference. A traced value and a constant may round
differently inside XLA (constant folding, fused multiply-adds), and the two sides use
different block shapes, so bitwise equality is measured, not assumed.

Largest grid: ``BIG_CONFIGS`` x ``BIG_SEEDS`` (1000 x 1000) runs of the study's own
``make_train`` (outputs ``success`` + the non-finite step, kept on the host) through
``rljax.grid.run_grid`` with block ``BLOCK_SIZE``; the wall time, the outputs' bytes per
run and the peak RSS growth per run (``experiments.benchmarks.scaling.PeakRSS``) are
measured, and the largest grid that fits is estimated as the memory available before the
run over the peak bytes per run. Fixed blocks keep the device-side working set at one
block whatever the grid size, so host memory for the outputs is the limit. One
configuration is then re-run alone and checked bitwise against its row of the grid.

Sizes: the module constants, or ``RLJAX_BENCH_GRID_QUICK=1`` for a seconds-long run at
tiny sizes (``QUICK``); tests call :func:`measure` with their own sizes.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import time
from typing import Any

import jax
import numpy as np
import psutil

from experiments import orm_vs_prm
from experiments.benchmarks.scaling import PeakRSS
from rljax.grid import ConfigTable, run_grid
from rljax.stats.reported import reported_interval
from rljax.sweep import Sweep
from rljax.training.chain import make_chain_train

MODE = "orm"
CONFIG_COUNTS = (1, 16, 256)
SEEDS = 64
EPISODES = 400
BLOCK_SIZE = 4096
LOOP_SAMPLE = 16
ROUNDS = 5
COMPILE_ROUNDS = 3
BIG_CONFIGS = 1000
BIG_SEEDS = 1000
TARGETS = {"ratio_at_max_k": 10.0}
#: ``RLJAX_BENCH_GRID_QUICK=1``: a smoke run in seconds.
QUICK = {"config_counts": (1, 3), "seeds": 4, "episodes": 10, "block_size": 8,
         "loop_sample": 2, "rounds": 1, "compile_rounds": 1, "big_configs": 5,
         "big_seeds": 8}


def config_rows(k: int) -> list[dict[str, float]]:
    """``k`` configurations ``{learning_rate, baseline_init, baseline_rate}`` (Python floats
    exactly representable in float32): row 0 the study's default, the rest random; the
    first ``k`` rows are the same for any larger ``k``."""
    default = orm_vs_prm.Config()
    u = np.random.default_rng(0).random((max(k - 1, 0), 2))  # row by row: K is a prefix
    lr = np.exp(np.log(0.02) + u[:, 0] * (np.log(0.5) - np.log(0.02)))
    rate = 0.01 + u[:, 1] * (0.2 - 0.01)
    rows = [{"learning_rate": default.learning_rate, "baseline_init": default.baseline_init,
             "baseline_rate": default.baseline_rate}]
    rows += [{"learning_rate": a, "baseline_init": default.baseline_init, "baseline_rate": b}
             for a, b in zip(lr.tolist(), rate.tolist(), strict=True)]
    return [{name: float(np.float32(v)) for name, v in row.items()} for row in rows[:k]]


def grid_train(episodes: int = EPISODES, mode: str = MODE):
    """The grid side's ``train(key, hparams)``: the study's run with traced values
    (``experiments.orm_vs_prm.make_train``'s program) keeping ``final_logits`` ``[5, 2]``."""
    config = orm_vs_prm.Config(episodes=episodes)

    def train(key, hparams):
        return make_chain_train(mode=mode, chain_length=config.chain_length, episodes=episodes,
                                learning_rate=hparams["learning_rate"],
                                baseline=config.baseline,
                                baseline_init=hparams["baseline_init"],
                                baseline_rate=hparams["baseline_rate"])(key)

    return train


def loop_train(row: dict[str, float], episodes: int = EPISODES, mode: str = MODE):
    """The loop side's ``train(key)`` for one configuration, its values Python constants."""
    config = orm_vs_prm.Config(episodes=episodes)
    return make_chain_train(mode=mode, chain_length=config.chain_length, episodes=episodes,
                            learning_rate=row["learning_rate"], baseline=config.baseline,
                            baseline_init=row["baseline_init"],
                            baseline_rate=row["baseline_rate"])


def _timed(fn) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - start


def _agreement(grid_out: dict, loop_outs: list[dict]) -> dict[str, Any]:
    """Compare the grid's rows ``[K, S, ...]`` with the loop's ``[S, ...]`` per config."""
    n = len(loop_outs)
    succ_g = np.asarray(grid_out["success"])[:n]
    succ_l = np.stack([np.asarray(o["success"]) for o in loop_outs])
    log_g = np.asarray(grid_out["final_logits"])[:n]
    log_l = np.stack([np.asarray(o["final_logits"]) for o in loop_outs])
    pair_equal = (succ_g == succ_l).all(axis=-1) & (log_g == log_l).reshape(
        *log_g.shape[:2], -1).all(axis=-1)
    return {"configs_compared": n,
            "pairs_bitwise_equal": float(pair_equal.mean()),
            "success_equal": bool((succ_g == succ_l).all()),
            "success_pairs_differing": int((succ_g != succ_l).any(axis=-1).sum()),
            "logits_max_abs_diff": float(np.max(np.abs(log_g - log_l)))}


def add_intervals(result: dict[str, Any]) -> dict[str, Any]:
    """Add, to each extrapolated row of ``result``, a 95 % interval of the loop's compile
    time and of ``ratio``: ``K`` x the interval of the mean per-configuration compile time
    over the sampled configurations (``rljax.stats.reported.reported_interval("mean",
    data="skewed")``, its measured coverage in ``interval_note``), the loop's run time and
    the grid's times held at their medians. Returns ``result`` (changed in place)."""
    for row in result["rows"].values():
        sampled = row["loop_compile_seconds_sampled"]
        if not row["loop_extrapolated"] or len(sampled) < 2:
            continue
        iv = reported_interval("mean", np.asarray(sampled, np.float64),
                               key=jax.random.key(0), data="skewed")
        k, grid_total = row["configs"], row["grid_compile_seconds"] + row["grid_run_seconds"]
        row["loop_compile_seconds_ci"] = [k * iv.low, k * iv.high]
        row["ratio_ci"] = [(k * iv.low + row["loop_run_seconds"]) / grid_total,
                           (k * iv.high + row["loop_run_seconds"]) / grid_total]
        row["interval_note"] = iv.note.replace(" seeds", " sampled configurations")
    return result


def measure(config_counts=CONFIG_COUNTS, *, seeds: int = SEEDS, episodes: int = EPISODES,
            block_size: int = BLOCK_SIZE, loop_sample: int = LOOP_SAMPLE,
            rounds: int = ROUNDS, compile_rounds: int = COMPILE_ROUNDS,
            big_configs: int = BIG_CONFIGS, big_seeds: int = BIG_SEEDS) -> dict[str, Any]:
    """Time the grid and the loop per ``K``, then the largest grid; JSON-able dict (see
    :func:`run` for its keys). ``big_configs = 0`` skips the largest grid."""
    result: dict[str, Any] = {
        "workload": f"orm-vs-prm ({MODE}, {episodes} episodes/seed, tabular REINFORCE), "
                    f"{seeds} seeds per config; traced: learning_rate, baseline_rate",
        "devices": str(jax.devices()),
        "method": f"compile first; grid vs loop alternate over {rounds} rounds, medians; "
                  f"grid compile median of {compile_rounds}",
        "targets": dict(TARGETS),
        "rows": {},
    }
    train = grid_train(episodes)
    tables = {k: ConfigTable.from_rows(config_rows(k)) for k in config_counts}
    blocks = {k: min(k * seeds, block_size) for k in config_counts}
    compiles: dict[int, list[float]] = {k: [] for k in config_counts}
    sweeps: dict[int, Sweep] = {}
    for _ in range(compile_rounds):  # alternate over K so load drift hits every K alike
        for k in config_counts:
            sweeps[k] = Sweep(train, block_size=blocks[k])
            compiles[k].append(sweeps[k].compile(tables[k]))
    for k in config_counts:
        sweep, table = sweeps[k], tables[k]
        sample = min(k, loop_sample)
        loops = [Sweep(loop_train(table.row(c), episodes), block_size=seeds)
                 for c in range(sample)]
        loop_compile = [s.compile() for s in loops]
        grid_out = sweep.run(seeds, configs=table, progress=False).outputs  # warm-up
        loop_outs = [s.run(seeds, progress=False).outputs for s in loops]
        grid_times, loop_times = [], []
        for _ in range(rounds):
            grid_times.append(_timed(
                lambda s=sweep, t=table: s.run(seeds, configs=t, progress=False).outputs))
            loop_times.append(_timed(
                lambda ls=loops: [s.run(seeds, progress=False).outputs for s in ls]))
        scale = k / sample
        grid_compile = statistics.median(compiles[k])
        grid_run = statistics.median(grid_times)
        loop_compile_total = sum(loop_compile) * scale
        loop_run = statistics.median(loop_times) * scale
        result["rows"][str(k)] = {
            "configs": k,
            "seeds": seeds,
            "grid_block_size": blocks[k],
            "grid_compile_seconds": grid_compile,
            "grid_run_seconds": grid_run,
            "loop_compile_seconds": loop_compile_total,
            "loop_compile_seconds_sampled": loop_compile,
            "loop_run_seconds": loop_run,
            "loop_configs_timed": sample,
            "loop_extrapolated": sample < k,
            "ratio": (loop_compile_total + loop_run) / (grid_compile + grid_run),
            "run_ratio": loop_run / grid_run,
            "grid_episodes_per_s": k * seeds * episodes / grid_run,
            "grid_compile_seconds_all": compiles[k],
            "agreement": _agreement(grid_out, loop_outs),
        }
    add_intervals(result)
    top = result["rows"][str(max(config_counts))]
    result.update(configs=top["configs"], ratio=top["ratio"], run_ratio=top["run_ratio"],
                  grid_compile_spread=max(r["grid_compile_seconds"]
                                          for r in result["rows"].values())
                  / min(r["grid_compile_seconds"] for r in result["rows"].values()))
    if big_configs:
        result["big"] = measure_big(big_configs, big_seeds, episodes=episodes,
                                    block_size=block_size)
    return result


def measure_big(num_configs: int, num_seeds: int, *, episodes: int = EPISODES,
                block_size: int = BLOCK_SIZE) -> dict[str, Any]:
    """One ``run_grid`` of ``num_configs x num_seeds`` study runs; wall time, bytes per
    run and the largest grid the available memory would hold (see the module docstring)."""
    base = orm_vs_prm.Config(episodes=episodes, block_size=block_size)
    rows = config_rows(num_configs)
    configs = [dataclasses.replace(base, **row) for row in rows]

    def make(config):
        return orm_vs_prm.make_train(config, MODE)

    available = int(psutil.virtual_memory().available)
    start = time.perf_counter()
    with PeakRSS() as rss:
        result = run_grid(make, configs, None, num_seeds,
                          block_size=block_size, progress=False, desc="big")
    wall = time.perf_counter() - start
    runs = num_configs * num_seeds
    out_bytes = sum(int(np.asarray(x).nbytes) for x in jax.tree_util.tree_leaves(result.outputs))
    peak_per_run = max(rss.delta, out_bytes) / runs
    check = num_configs // 2
    alone = run_grid(make, [configs[check]], None, num_seeds,
                     block_size=block_size, progress=False, desc="alone")
    same = all(np.array_equal(np.asarray(a)[check], np.asarray(b)[0]) for a, b in zip(
        jax.tree_util.tree_leaves(result.outputs), jax.tree_util.tree_leaves(alone.outputs),
        strict=True))
    return {
        "configs": num_configs, "seeds": num_seeds, "runs": runs, "block_size": block_size,
        "programs": len(result.programs), "wall_seconds": wall,
        "compile_seconds": result.compile_seconds, "run_seconds": result.run_seconds,
        "episodes_per_s": runs * episodes / result.run_seconds,
        "output_bytes": out_bytes, "output_bytes_per_run": out_bytes / runs,
        "peak_rss_delta_bytes": rss.delta, "peak_bytes_per_run": peak_per_run,
        "available_bytes": available,
        "largest_runs_estimate": math.floor(available / peak_per_run),
        "alone_check_config": check, "alone_bitwise_equal": bool(same),
    }


def run() -> dict[str, Any]:
    """The full benchmark (about 10 minutes here), or a quick one with
    ``RLJAX_BENCH_GRID_QUICK=1``.

    Returns a JSON-able dict: ``rows`` per ``K`` (``grid_compile_seconds``,
    ``grid_run_seconds``, ``loop_compile_seconds``, ``loop_run_seconds``, ``ratio``,
    ``run_ratio``, ``loop_extrapolated``, ``agreement``), the top ``K``'s ``ratio`` and
    ``run_ratio``, ``grid_compile_spread`` (largest / smallest grid compile time) and
    ``big`` (the largest grid's wall time and memory).
    """
    if os.environ.get("RLJAX_BENCH_GRID_QUICK", "") not in ("", "0"):
        return measure(**QUICK)
    return measure()


def table(result: dict[str, Any]) -> str:
    """A printable table of the result of :func:`run`."""
    lines = [
        f"rljax bench grid: {result['workload']}",
        f"{result['method']}; device {result['devices']}",
        "",
        "| K | grid block | grid compile (range) | grid run | loop compile | loop run | ratio "
        "(compile incl.) | run ratio | loop timed | agreement (bitwise pairs, max logit diff) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"].values():
        timed = (f"{row['loop_configs_timed']} of {row['configs']}, extrapolated"
                 if row["loop_extrapolated"] else f"all {row['configs']}")
        agree = row["agreement"]
        rounds = row["grid_compile_seconds_all"]
        loop_ci = ratio_ci = ""
        if "ratio_ci" in row:
            low, high = row["loop_compile_seconds_ci"]
            loop_ci = f" [{low:.3g}, {high:.3g}]"
            ratio_ci = f" [{row['ratio_ci'][0]:.0f}, {row['ratio_ci'][1]:.0f}]"
        lines.append(
            f"| {row['configs']} | {row['grid_block_size']} "
            f"| {row['grid_compile_seconds']:.2f} s ({min(rounds):.3g}-{max(rounds):.3g}) "
            f"| {row['grid_run_seconds']:.3g} s "
            f"| {row['loop_compile_seconds']:.3g} s{loop_ci} | {row['loop_run_seconds']:.3g} s "
            f"| {row['ratio']:.1f}x{ratio_ci} | {row['run_ratio']:.1f}x | {timed} "
            f"| {100 * agree['pairs_bitwise_equal']:.1f} % of {agree['configs_compared']}x"
            f"{row['seeds']}, {agree['logits_max_abs_diff']:.2g} |")
    lines += [
        "",
        f"at K = {result['configs']}: ratio {result['ratio']:.1f}x (target >= "
        f"{result['targets']['ratio_at_max_k']:g}), run ratio {result['run_ratio']:.1f}x; "
        f"grid compile time largest / smallest over K: {result['grid_compile_spread']:.2f}",
    ]
    notes = [row["interval_note"] for row in result["rows"].values() if "interval_note" in row]
    if notes:
        lines.append("[low, high]: 95 % interval of K x the mean per-config compile time of "
                     f"the loop ({notes[-1]})")
    big = result.get("big")
    if big:
        lines += [
            f"largest grid run: {big['configs']} configs x {big['seeds']} seeds = "
            f"{big['runs']:,} runs in {big['wall_seconds']:.0f} s wall ({big['programs']} "
            f"program, compile {big['compile_seconds']:.1f} s, "
            f"{big['episodes_per_s']:.3g} episodes/s); outputs "
            f"{big['output_bytes_per_run']:.0f} B/run on the host, peak RSS growth "
            f"{big['peak_bytes_per_run']:.0f} B/run -> ~{big['largest_runs_estimate']:,} "
            f"runs would fit in the {big['available_bytes'] / 2**30:.1f} GiB available "
            "(estimate); config "
            f"{big['alone_check_config']} re-run alone bitwise equal to its grid row: "
            f"{big['alone_bitwise_equal']}",
        ]
    return "\n".join(lines)
