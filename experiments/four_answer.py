"""Study ``four-answer``: the policy-gradient derivation, checked numerically.

A policy over four answers with probabilities (0.4, 0.3, 0.2, 0.1), written as softmax
logits ``z = log p``; only the third answer (p = 0.2) has reward 1. With
``J(z) = sum_a pi_a R_a``:

* exact gradient ``dJ/dz_j = pi_j (R_j - J)`` = (-0.08, -0.06, 0.16, -0.02);
* single-sample estimate ``g(a) = (R_a - b) (onehot(a) - pi)``, unbiased for any
  constant ``b``; for the correct answer's logit its variance is
  ``E[g_2^2] - 0.16^2`` = 0.1024 without a baseline and 0.0576 with ``b = J = 0.2``;
  checked by a Monte Carlo sweep over seeds (its own sweep, run once);
* GRPO (groups of 8, 60 steps) from that policy over a grid of optimizers (SGD, Adam),
  learning rates and KL betas: one compiled program per optimizer, the rate, beta and
  clip traced (read from ``hparams``), every cell on the same seeds (common random numbers);
* the GRPO advantage table for four reward groups and PPO's clipped objective for three
  (A, r) pairs.

The post's claim (:data:`CLAIM`): with groups of 8, 60 GRPO steps take p(correct) from
0.20 to 0.99 without a KL penalty and to 0.94 with one. The verdict
(:mod:`experiments.four_answer_claim`) says which (optimizer, rate) give 0.99 at beta = 0,
which beta then gives 0.94, and whether one setting gives both.

Runs: the default sweeps ``sgd_learning_rates`` and ``adam_learning_rates`` x
``kl_betas``; ``--grid learning_rate=... --grid kl_beta=... [--grid optimizer=...]``
analyses that grid instead; ``--set sweep=false`` runs the one configuration
(``optimizer``, ``learning_rate``, ``kl_beta``, ``clip_epsilon``) as a one-row grid, bitwise
the same as that cell inside any grid at the same block size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd

from experiments.four_answer_claim import CLAIM, CLAIM_TEXT, CLAIM_TOLERANCE, claim_status
from experiments.four_answer_claim import verdict as claim_verdict
from rljax import io, losses
from rljax.advantages import group_relative_advantages
from rljax.algorithms import GroupBatch, grpo
from rljax.config import ConfigError, check_fields, param, require_choice, traced_fields
from rljax.grid import Grid, grid_columns, run_grid, single_grid
from rljax.policies import categorical_log_prob, sample_categorical, tabular_softmax
from rljax.stats.reported import reported_interval
from rljax.sweep import DEFAULT_BLOCK_SIZE, Sweep

NAME = "four-answer"
DESCRIPTION = "Policy-gradient derivation on a four-answer toy: exact vs sampled gradients, GRPO"

PROBS = (0.4, 0.3, 0.2, 0.1)
REWARDS = (0.0, 0.0, 1.0, 0.0)
CORRECT = 2
ADVANTAGE_GROUPS = ((1, 0, 0, 1), (1, 0, 0, 0), (0, 0, 0, 0), (1, 1, 1, 1))
CLIP_CASES = ((1.0, 1.5), (-1.0, 0.5), (-1.0, 1.5))  # (A, r)
OPTIMIZERS = ("sgd", "adam")
#: The columns every results.parquet carries (plus any other swept field).
CELL_FIELDS = ("optimizer", "learning_rate", "kl_beta")

#: The kind of per-seed data each interval is held to (rljax.stats.coverage.DATA_KINDS):
#: a seed's variance estimate (over 20,000 samples) and its final p(correct) at the
#: reference rate are continuous and close to normal across seeds (skewness over the
#: 2048 default seeds: 0.06 and -0.41; lognormal's is 6.2); the medians are held to
#: every kind (near the ceiling p(correct) is skewed, so no symmetric kind is claimed).
DATA_KINDS = {"mean": "symmetric", "paired_difference": "symmetric"}


def parse_rates(name: str, text: str, *, allow_zero: bool = False) -> tuple[float, ...]:
    """``"0.1,0.3,1"`` -> ``(0.1, 0.3, 1.0)``: distinct finite numbers ``> 0`` (``>= 0``
    with ``allow_zero``), in the order given; a one-line :class:`ConfigError` naming
    ``name`` otherwise."""
    allowed = ">= 0" if allow_zero else "> 0"
    what = f"{name}: must be a comma-separated list of distinct numbers {allowed}, got {text!r}"
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise ConfigError(what)
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        raise ConfigError(what) from None
    if any(not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero) for v in values):
        raise ConfigError(what)
    if len(set(values)) != len(values):
        raise ConfigError(what)
    return values


@dataclass(frozen=True)
class Config:
    """Configuration (``--set key=value``; ``--grid`` over the optimizer and the traced
    ``learning_rate``, ``kl_beta``, ``clip_epsilon``)."""

    seeds: int = param(2048, "per GRPO cell, and for the Monte Carlo gradient sweep",
                       sweep=False, low=2)
    block_size: int = param(DEFAULT_BLOCK_SIZE, "seeds per compiled block", sweep=False,
                            low=1)
    base_seed: int = param(0, "the sweep's base seed (32-bit keys, + small offsets)",
                           sweep=False, low=0, high=2**31 - 1)
    samples: int = param(20_000, "draws per seed of the Monte Carlo gradient check",
                         sweep=False, low=2)
    baseline: float = param(0.2, "the constant baseline b of the variance check",
                            sweep=False)
    group_size: int = param(8, "GRPO's group size", sweep=False, low=2)
    grpo_steps: int = param(60, "GRPO steps per run", sweep=False, low=1)
    optimizer: str = param("sgd", "the one-configuration run's and the headline's",
                           choices=OPTIMIZERS)
    learning_rate: float = param(0.1, "the optimizer's step size", traced=True, low=0.0,
                                 low_open=True)
    kl_beta: float = param(0.04, "the k3 KL penalty's weight", traced=True, low=0.0)
    clip_epsilon: float = param(0.2, "GRPO's clip range", traced=True, low=0.0,
                                low_open=True)
    sweep: bool = param(True, "False: run (optimizer, learning_rate, kl_beta, clip) alone",
                        sweep=False)
    sgd_learning_rates: str = param("0.1,0.178,0.316,0.562,1,1.78,3.16,5.62,10",
                                    "the default sweep's SGD rates", sweep=False)
    adam_learning_rates: str = param("0.01,0.0178,0.0316,0.0562,0.1,0.178,0.316,0.562,1",
                                     "the default sweep's Adam rates", sweep=False)
    kl_betas: str = param("0,0.01,0.02,0.04,0.08,0.12,0.16,0.2,0.24,0.32,0.64",
                          "the default sweep's KL betas", sweep=False)
    tolerance: float = param(0.001, "the Monte Carlo gradient's error tolerance",
                             sweep=False, low=0.0, low_open=True)
    bootstrap_reps: int = param(2000, "bootstrap resamples", sweep=False, low=1)

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first invalid field: each against its
        declaration, then the default sweep's lists."""
        check_fields(self)
        parse_rates("sgd_learning_rates", self.sgd_learning_rates)
        parse_rates("adam_learning_rates", self.adam_learning_rates)
        parse_rates("kl_betas", self.kl_betas, allow_zero=True)


def default_grid(config: Config) -> Grid:
    """The default sweep: each optimizer's rates x ``kl_betas`` (optimizer slowest)."""
    rates = {"sgd": parse_rates("sgd_learning_rates", config.sgd_learning_rates),
             "adam": parse_rates("adam_learning_rates", config.adam_learning_rates)}
    betas = parse_rates("kl_betas", config.kl_betas, allow_zero=True)
    rows = tuple({"optimizer": opt, "learning_rate": lr, "kl_beta": b}
                 for opt in OPTIMIZERS for lr in rates[opt] for b in betas)
    return Grid(fields=CELL_FIELDS, rows=rows, spec={"default_sweep": {
        "sgd_learning_rates": list(rates["sgd"]), "adam_learning_rates": list(rates["adam"]),
        "kl_betas": list(betas)}})


def exact_gradient() -> np.ndarray:
    """``dJ/dz`` by autodiff of ``J(z) = softmax(z) . R`` at ``z = log p`` (float64 numpy)."""
    z = jnp.log(jnp.asarray(PROBS, jnp.float32))
    grad = jax.grad(lambda z: jnp.dot(jax.nn.softmax(z), jnp.asarray(REWARDS)))(z)
    return np.asarray(grad, np.float64)


def exact_variance(baseline: float, component: int = CORRECT) -> float:
    """Variance of ``g_component(a) = (R_a - b)(1[a = component] - pi_component)`` under
    ``a ~ pi``, by enumerating the four answers."""
    p = np.asarray(PROBS, np.float64)
    r = np.asarray(REWARDS, np.float64)
    g = (r - baseline) * ((np.arange(4) == component) - p[component])
    return float(np.sum(p * g**2) - np.sum(p * g) ** 2)


def traced_optimizer(name: str, learning_rate: Any) -> optax.GradientTransformation:
    """``optax.sgd(lr)`` / ``optax.adam(lr)`` (defaults) with ``lr`` a traced scalar.

    optax's own ``optax.sgd`` / ``optax.adam`` built with ``learning_rate`` as an argument
    (optax accepts a traced scalar, applied as ``u <- (-lr) * u``), so one program serves
    every rate and the updates equal a constant-rate optimizer's bitwise (tested).

    Args:
      name: ``"sgd"`` or ``"adam"``.
      learning_rate: scalar (Python float or ``[]`` array, possibly traced).
    """
    require_choice("optimizer", name, OPTIMIZERS)
    return optax.sgd(learning_rate) if name == "sgd" else optax.adam(learning_rate)


def make_mc_train(config: Config):
    """``train(key)`` for one seed of the Monte Carlo gradient check (``samples`` draws)."""
    logits0 = jnp.log(jnp.asarray(PROBS, jnp.float32))
    rewards = jnp.asarray(REWARDS, jnp.float32)
    exact = jnp.asarray(exact_gradient(), jnp.float32)

    def train(key):
        key_mc, _ = jax.random.split(key)  # the GRPO run takes the other half
        answers = sample_categorical(key_mc, jnp.broadcast_to(logits0, (config.samples, 4)))
        pi = jax.nn.softmax(logits0)
        r = rewards[answers]
        score = jax.nn.one_hot(answers, 4) - pi  # d log pi(a) / dz
        g = r[:, None] * score
        g_base = (r - config.baseline)[:, None] * score
        return {
            "mc_max_abs_err": jnp.max(jnp.abs(jnp.mean(g, axis=0) - exact)),
            "mc_max_abs_err_baseline": jnp.max(jnp.abs(jnp.mean(g_base, axis=0) - exact)),
            "var_no_baseline": jnp.var(g[:, CORRECT], ddof=1),
            "var_with_baseline": jnp.var(g_base[:, CORRECT], ddof=1),
        }

    return train


def make_train(config: Config):
    """``train(key, hparams)`` for one (config, seed): a GRPO run's p(correct) curve.

    ``hparams`` holds the traced ``learning_rate``, ``kl_beta``, ``clip_epsilon``
    (scalars); ``config`` gives only the structure (optimizer, group size, steps). Output
    ``{"p_correct": [grpo_steps + 1]}`` (the start, then after each step).
    """
    logits0 = jnp.log(jnp.asarray(PROBS, jnp.float32))
    rewards = jnp.asarray(REWARDS, jnp.float32)
    policy = tabular_softmax(1, 4)
    group = config.group_size

    def train(key, hp):
        _, key_grpo = jax.random.split(key)  # the Monte Carlo check takes the other half
        opt = traced_optimizer(config.optimizer, hp["learning_rate"])
        rl = grpo(policy.apply, group_size=group, kl_beta=hp["kl_beta"],
                  clip_epsilon=hp["clip_epsilon"])
        params = {"logits": logits0[None]}
        ref = params
        obs = jnp.zeros((1, group, 1), jnp.int32)
        ref_logits = policy.apply(ref, obs)

        def step(carry, key):
            params, opt_state = carry
            logits = policy.apply(params, obs)
            actions = sample_categorical(key, logits)
            log_probs = categorical_log_prob(logits, actions)
            batch = GroupBatch(
                obs=obs, actions=actions, mask=jnp.ones_like(log_probs),
                rewards=rewards[actions[..., 0]], old_log_probs=log_probs,
                ref_log_probs=categorical_log_prob(ref_logits, actions),
            )
            grads, _, _ = rl.update(params, (), batch)
            updates, opt_state = opt.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
            return (params, opt_state), jax.nn.softmax(params["logits"][0])[CORRECT]

        _, p_correct = jax.lax.scan(step, (params, opt.init(params)),
                                    jax.random.split(key_grpo, config.grpo_steps))
        return {"p_correct": jnp.concatenate([jnp.asarray([PROBS[CORRECT]], jnp.float32),
                                              p_correct])}

    return train


def advantage_table() -> list[list[float]]:
    """GRPO advantages (population std, epsilon 1e-6) of the four example groups."""
    table = group_relative_advantages(jnp.asarray(ADVANTAGE_GROUPS, jnp.float32))
    return [[round(float(x), 6) for x in row] for row in np.asarray(table)]


def clip_examples(epsilon: float) -> list[dict[str, float]]:
    """PPO's clipped objective ``min(r A, clip(r, 1-eps, 1+eps) A)`` for :data:`CLIP_CASES`."""
    adv = jnp.asarray([a for a, _ in CLIP_CASES])
    ratio = jnp.asarray([r for _, r in CLIP_CASES])
    loss, _ = losses.clipped_surrogate_loss(jnp.log(ratio), jnp.zeros(3), adv,
                                            epsilon_low=epsilon)
    return [{"advantage": a, "ratio": r, "objective": round(float(-v), 6)}
            for (a, r), v in zip(CLIP_CASES, np.asarray(loss), strict=True)]


class _Intervals:
    """``reported_interval`` calls with fresh keys, collecting each statistic's note."""

    def __init__(self, config: Config):
        self.key = jax.random.key(config.base_seed + 1)
        self.reps = config.bootstrap_reps
        self.notes: dict[str, str] = {}
        self.count = 0

    def __call__(self, statistic: str, *x, data: str | None = None):
        self.count += 1
        data = DATA_KINDS.get(statistic, "any") if data is None else data
        iv = reported_interval(statistic, *(np.asarray(v, np.float64) for v in x),
                               key=jax.random.fold_in(self.key, self.count), reps=self.reps,
                               data=data)
        label = statistic if data == DATA_KINDS.get(statistic, "any") else f"{statistic}_{data}"
        self.notes.setdefault(label, iv.note.rstrip("."))
        return iv


def _cells(configs, finals: np.ndarray, ci: _Intervals) -> list[dict[str, Any]]:
    """One dict per config: its fields and the median final p(correct) with interval."""
    cells = []
    for c, cfg in enumerate(configs):
        x = finals[c]
        finite = np.isfinite(x)
        cell = {"config": c, "optimizer": cfg.optimizer,
                "learning_rate": cfg.learning_rate, "kl_beta": cfg.kl_beta,
                "clip_epsilon": cfg.clip_epsilon, "nonfinite_seeds": int((~finite).sum())}
        if finite.all():
            iv = ci("median", x)
            cell.update(median=float(np.median(x)), low=float(iv.low), high=float(iv.high),
                        spread=[float(np.quantile(x, 0.025)), float(np.quantile(x, 0.975))])
        else:  # excluded from the verdict (status "unknown")
            cell.update(median=math.nan, low=math.nan, high=math.nan,
                        spread=[math.nan, math.nan])
        cell["vs_0.99"] = claim_status(cell["low"], cell["high"], CLAIM["p_no_kl"])
        cell["vs_0.94"] = claim_status(cell["low"], cell["high"], CLAIM["p_kl"])
        cells.append(cell)
    return cells


def _find(cells, optimizer: str, lr: float, beta: float, clip: float) -> int | None:
    for cell in cells:
        if (cell["optimizer"], cell["learning_rate"], cell["kl_beta"],
                cell["clip_epsilon"]) == (optimizer, lr, beta, clip):
            return cell["config"]
    return None


def _headline(cells, finals: np.ndarray, config: Config, ci: _Intervals) -> dict[str, Any]:
    """The reference setting's beta = 0 and beta = ``kl_beta`` cells and their paired gap
    (empty when the grid lacks either)."""
    find = [_find(cells, config.optimizer, config.learning_rate, b, config.clip_epsilon)
            for b in (0.0, config.kl_beta)]
    if None in find or find[0] == find[1] or not np.isfinite(finals[find]).all():
        return {}
    out: dict[str, Any] = {"grpo_optimizer": config.optimizer,
                           "grpo_learning_rate": config.learning_rate,
                           "grpo_kl_beta": config.kl_beta}
    for name, c in zip(("no_kl", "kl"), find, strict=True):
        out[f"grpo_p_correct_{name}"] = cells[c]["median"]
        out[f"grpo_p_correct_{name}_ci"] = [cells[c]["low"], cells[c]["high"]]
        out[f"grpo_p_correct_{name}_spread"] = cells[c]["spread"]
    gap = ci("paired_difference", finals[find[0]], finals[find[1]])
    out["grpo_kl_gap"] = float(gap.point)
    out["grpo_kl_gap_ci"] = [float(gap.low), float(gap.high)]
    return out


def _monte_carlo(config: Config, ci: _Intervals,
                 options: Any = None) -> tuple[dict[str, Any], dict, Any]:
    result = Sweep(make_mc_train(config), base_seed=config.base_seed,
                   block_size=config.block_size).run(config.seeds, desc=NAME + "-mc",
                                                   options=options)
    out = {k: np.asarray(v, np.float64) for k, v in result.outputs.items()}
    err, var0, var1 = out["mc_max_abs_err"], out["var_no_baseline"], out["var_with_baseline"]
    # Samples needed for the *largest* of the four components' errors to stay below the
    # tolerance on most keys: each component's error is ~ N(0, var_j / n); with the
    # largest per-component variance and the 75th percentile of |N(0,1)| (1.15).
    var_all = [exact_variance(0.0, j) for j in range(4)]
    summary = {
        "exact_gradient": [round(float(x), 6) for x in exact_gradient()],
        "mc_grad_max_abs_err_median": float(np.median(err)),
        "mc_grad_max_abs_err_median_ci": list(ci("median", err)[1:3]),
        "mc_grad_max_abs_err_quantiles": {q: float(np.quantile(err, float(q)))
                                          for q in ("0.05", "0.25", "0.5", "0.75", "0.95")},
        "mc_grad_within_tolerance_fraction": float(np.mean(err <= config.tolerance)),
        "mc_grad_max_abs_err_with_baseline_median": float(np.median(out[
            "mc_max_abs_err_baseline"])),
        "mc_samples_for_tolerance_on_most_keys": math.ceil(
            (1.15 * math.sqrt(max(var_all)) / config.tolerance) ** 2),
        "var_no_baseline": float(np.mean(var0)),
        "var_no_baseline_ci": list(ci("mean", var0)[1:3]),
        "var_with_baseline": float(np.mean(var1)),
        "var_with_baseline_ci": list(ci("mean", var1)[1:3]),
        "var_no_baseline_exact": exact_variance(0.0),
        "var_with_baseline_exact": exact_variance(config.baseline),
    }
    return summary, out, result


def run(config: Config, out_dir: Path, grid: Grid | None = None,
        options: Any = None) -> dict[str, Any]:
    """Run the study: the Monte Carlo sweep, then GRPO over ``grid`` (default: the
    optimizers' rates x ``kl_betas``; a one-row grid with ``sweep=false``).

    Writes results.parquet (one row per (config, seed): the swept fields, ``seed``,
    final ``p_correct``), curves.parquet, mc.parquet, summary.json, report.md and PNGs
    (the MC error histogram, p(correct) curves, the rate x beta heat map).
    """
    from experiments import four_answer_plots as plots

    if grid is None:
        grid = default_grid(config) if config.sweep else single_grid(
            config, ("optimizer", *traced_fields(Config)))
    fields = CELL_FIELDS + tuple(f for f in grid.fields if f not in CELL_FIELDS)
    configs = grid.configs(config)
    ci = _Intervals(config)
    mc_summary, mc, mc_result = _monte_carlo(config, ci, options)
    result = run_grid(make_train, configs, None, config.seeds,
                      base_seed=config.base_seed, block_size=config.block_size,
                      desc=NAME + "-grpo", options=options)
    curves = np.asarray(result.outputs["p_correct"])  # [K, S, steps + 1]
    finals = curves[:, :, -1].astype(np.float64)
    cells = _cells(configs, finals, ci)

    def paired_gap(a: int, b: int) -> list[float]:
        iv = ci("paired_difference", finals[a], finals[b], data="any")
        return [float(iv.point), float(iv.low), float(iv.high)]

    judged = claim_verdict(cells, steps=config.grpo_steps, group_size=config.group_size,
                           seeds=config.seeds, paired_gap=paired_gap)
    seconds = mc_result.run_seconds + result.run_seconds
    summary: dict[str, Any] = {
        "experiment": NAME, "seeds": config.seeds, "samples": config.samples, **mc_summary,
        "grpo_p_correct_start": PROBS[CORRECT],
        **_headline(cells, finals, config, ci),
        "grid": {**grid.record(), "seeds_per_config": config.seeds,
                 "programs": [dict(p) for p in result.programs]},
        "cells": cells,
        "advantage_table": advantage_table(),
        "advantage_groups": [list(g) for g in ADVANTAGE_GROUPS],
        "clip_examples": clip_examples(config.clip_epsilon),
        "seed_runs_per_second": (config.seeds * (len(configs) + 1) / max(seconds, 1e-9)),
        "compile_seconds": mc_result.compile_seconds + result.compile_seconds,
        "interval_notes": ci.notes, "claim": CLAIM_TEXT, "claim_figures": dict(CLAIM),
        "claim_tolerance": CLAIM_TOLERANCE,
    }
    summary["verdict"] = judged.pop("text")
    summary["verdict_details"] = judged
    columns = grid_columns(configs, fields)
    k, s = finals.shape
    io.write_parquet(out_dir / "results.parquet", pd.DataFrame({
        **{name: np.repeat(v, s) for name, v in columns.items()},
        "seed": np.tile(result.seed_ids.astype(np.int32), k),
        "p_correct": finals.reshape(-1)}))
    io.write_parquet(out_dir / "curves.parquet", _curves_table(curves))
    io.write_parquet(out_dir / "mc.parquet", pd.DataFrame({
        "seed": np.arange(config.seeds, dtype=np.int32), **mc}))
    io.write_json(out_dir / "summary.json", summary)
    plots.write_plots(summary, curves, mc["mc_max_abs_err"], config, out_dir)
    io.atomic_write_text(out_dir / "report.md", plots.report_markdown(summary, config))
    return summary


def _curves_table(curves: np.ndarray) -> pd.DataFrame:
    """Per config and step: median and quartiles of p(correct) over seeds."""
    k, _, steps = curves.shape
    q = np.quantile(curves, [0.25, 0.5, 0.75], axis=1)  # [3, K, steps]
    return pd.DataFrame({
        "config": np.repeat(np.arange(k, dtype=np.int32), steps),
        "step": np.tile(np.arange(steps, dtype=np.int32), k),
        "p_correct_q25": q[0].reshape(-1), "p_correct_median": q[1].reshape(-1),
        "p_correct_q75": q[2].reshape(-1)})
