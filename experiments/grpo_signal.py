"""Study ``grpo-signal``: how many GRPO groups carry any learning signal?

A group of ``G`` completions of a prompt solved with probability ``p`` gives every
member the same reward -- hence zero group-relative advantage and no gradient -- with
probability ``p^G + (1 - p)^G``, so the fraction of groups with signal is

    s(p, G) = 1 - p^G - (1 - p)^G.

The study compares that closed form with the empirical fraction over many sampled groups
(each seed of the sweep samples one group per ``p``), and plots ``s`` over ``p`` for
several group sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from rljax import io
from rljax.config import ConfigError, check_fields, param
from rljax.report import Figure, figures_table, format_number, pyplot
from rljax.stats.reported import reported_interval
from rljax.sweep import DEFAULT_BLOCK_SIZE, Sweep

NAME = "grpo-signal"
DESCRIPTION = "Share of GRPO groups with any learning signal vs solve rate p (closed form, sampled)"

PROBABILITIES = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)
PLOT_GROUP_SIZES = (2, 4, 8, 16, 64)


@dataclass(frozen=True)
class Config:
    """The study's knobs (``rljax run grpo-signal --set name=value``)."""

    seeds: int = param(131_072, "sampled groups per probability (>= 100,000 for the issue's "
                       "figure)", sweep=False, low=1)
    block_size: int = param(8 * DEFAULT_BLOCK_SIZE, "seeds per compiled block", sweep=False,
                            low=1)
    base_seed: int = param(0, "the sweep's base seed (32-bit keys, + small offsets)",
                           sweep=False, low=0, high=2**31 - 1)
    group_size: int = param(8, "G, completions per group", sweep=False, low=2)
    probabilities: str = param(",".join(str(p) for p in PROBABILITIES),
                               "solve rates p in [0, 1], comma-separated", sweep=False)
    bootstrap_reps: int = param(2000, "bootstrap resamples", sweep=False, low=1)

    def probability_list(self) -> list[float]:
        """The probabilities of ``probabilities``, in the order given."""
        try:
            values = [float(p) for p in self.probabilities.split(",") if p.strip()]
        except ValueError:
            raise ConfigError(f"probabilities: must be comma-separated numbers in [0, 1], got "
                              f"{self.probabilities!r}") from None
        return values

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first invalid field."""
        check_fields(self)
        values = self.probability_list()
        if not values or any(not 0.0 <= p <= 1.0 for p in values):
            raise ConfigError(f"probabilities: must be comma-separated numbers in [0, 1], got "
                              f"{self.probabilities!r}")


def analytic_signal_fraction(p: np.ndarray | float, group_size: int) -> np.ndarray:
    """``1 - p^G - (1 - p)^G`` (elementwise over ``p``)."""
    p = np.asarray(p, np.float64)
    return 1.0 - p**group_size - (1.0 - p) ** group_size


def make_train(config: Config):
    """``train(key) -> {"signal": bool [num_p]}``: one group of ``G`` Bernoulli(p) rewards
    per probability; ``signal`` says whether the rewards are not all equal."""
    probs = jnp.asarray(config.probability_list(), jnp.float32)

    def train(key):
        u = jax.random.uniform(key, (probs.shape[0], config.group_size))
        rewards = u < probs[:, None]
        return {"signal": jnp.any(rewards != rewards[:, :1], axis=1)}

    return train


def run(config: Config, out_dir: Path, options: Any = None) -> dict[str, Any]:
    """Run the study; writes results.parquet, summary.json, report.md, signal_fraction.png."""
    probs = config.probability_list()
    result = Sweep(make_train(config), base_seed=config.base_seed,
                   block_size=config.block_size).run(config.seeds, desc=NAME,
                                                  options=options)
    signal = np.asarray(result.outputs["signal"])  # [S, num_p]
    keys = jax.random.split(jax.random.key(config.base_seed + 1), len(probs))
    table: dict[str, dict[str, Any]] = {}
    note = ""
    for j, p in enumerate(probs):
        ci = reported_interval("mean", signal[:, j].astype(np.float64), key=keys[j], data="binary",
                               reps=config.bootstrap_reps)
        note = ci.note.rstrip(".")
        table[str(p)] = {
            "analytic": float(analytic_signal_fraction(p, config.group_size)),
            "empirical": float(signal[:, j].mean()),
            "empirical_ci": [ci.low, ci.high],
        }
    summary = {
        "experiment": NAME,
        "seeds": config.seeds,
        "group_size": config.group_size,
        "signal_fraction": table,
        "max_abs_gap": max(abs(v["analytic"] - v["empirical"]) for v in table.values()),
        "interval_method": ci.method,
        "interval_coverage": ci.coverage,
        "interval_note": note,
        "groups_per_second": (config.seeds * len(probs) * result.timed_fraction
                              / max(result.run_seconds, 1e-9)),
    }
    io.write_parquet(out_dir / "results.parquet", pd.DataFrame({
        "seed": np.repeat(np.arange(config.seeds, dtype=np.int32), len(probs)),
        "p": np.tile(np.asarray(probs), config.seeds),
        "signal": signal.reshape(-1),
    }))
    io.write_json(out_dir / "summary.json", summary)
    _plot(table, config, out_dir)
    io.atomic_write_text(out_dir / "report.md", report_markdown(summary, config))
    return summary


def _plot(table, config: Config, out_dir: Path) -> None:
    plt = pyplot()
    grid = np.linspace(0.0, 1.0, 401)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for g in PLOT_GROUP_SIZES:
        ax.plot(grid, analytic_signal_fraction(grid, g), label=f"G = {g}")
    ps = [float(p) for p in table]
    emp = [table[p]["empirical"] for p in table]
    ax.plot(ps, emp, "ko", label=f"sampled, G = {config.group_size}")
    ax.set_xlabel("p (probability the prompt is solved)")
    ax.set_ylabel("fraction of groups with signal")
    ax.set_title("1 - p^G - (1 - p)^G")
    ax.legend(fontsize=8)
    io.write_figure(out_dir / "signal_fraction.png", fig)


def report_markdown(summary: dict[str, Any], config: Config) -> str:
    """The study's report.md: the sampled fractions with intervals, a reading, the
    procedure."""
    figures = [
        Figure(f"p = {p}: signal fraction (sampled)", v["empirical"], *v["empirical_ci"],
               f"analytic {v['analytic']:.6f}")
        for p, v in summary["signal_fraction"].items()
    ]
    inner = {p: v for p, v in summary["signal_fraction"].items() if 0.0 < float(p) < 1.0}
    informative = len(inner)
    covered = sum(v["empirical_ci"][0] <= v["analytic"] <= v["empirical_ci"][1]
                  for v in inner.values())
    z = [(v["empirical"] - v["analytic"])
         / np.sqrt(v["analytic"] * (1 - v["analytic"]) / summary["seeds"]) for v in inner.values()]
    worst_z = max(z, key=abs) if z else 0.0
    half = next((p for p in np.linspace(0, 0.5, 5001)
                 if analytic_signal_fraction(p, config.group_size) >= 0.5), None)
    return "\n".join([
        f"# {NAME}", "", DESCRIPTION + ".", "",
        f"{config.seeds:,} sampled groups of {config.group_size} per probability.", "",
        figures_table(figures), "",
        "## Reading", "",
        f"The sampled fractions match 1 - p^G - (1 - p)^G to within "
        f"{format_number(summary['max_abs_gap'])}; {covered} of {informative} intervals of "
        f"the p strictly inside (0, 1) contain the closed form (each should, 95 % of the "
        f"time); the largest deviation is {worst_z:+.1f} binomial standard errors. "
        f"With G = {config.group_size}, "
        f"a prompt solved 95 % of the time gives signal in only "
        f"{100 * analytic_signal_fraction(0.95, config.group_size):.0f} % of groups, and "
        f"prompts with p below {format_number(half)} or above "
        f"{format_number(1 - half if half is not None else None)} give signal in fewer than "
        "half: compute spent on too-easy or too-hard prompts is mostly wasted, which is what "
        "dynamic sampling and difficulty-aware curricula address. Larger groups widen the "
        "useful band (see signal_fraction.png).", "",
        "## Procedure", "",
        "Each seed of the sweep samples one group per p; intervals are of the mean over "
        f"groups (`rljax.stats.reported.reported_interval`): {summary['interval_note']}. "
        "At p = 0 or 1 every group is the same, so the interval is the point.", "",
    ])
