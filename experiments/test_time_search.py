"""Study ``test-time-search``: accuracy vs compute on "solve for x" for six search methods.

Held-out equations at four difficulty levels; every method of
:mod:`experiments.equation_search` at budgets of 1 to 256 policy/model evaluations per
problem; one seed of the sweep = a fresh set of problems and fresh method randomness.
The policy is the no-training baseline (a flat prior with the verifier-based heuristic
value ``1 - phi / 3``), unless ``policy = "trained"`` (a GRPO-trained MLP, see
``rl-then-search``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from experiments.equation_search import METHODS, flat_prior, heuristic_value, solve
from rljax import io, stats
from rljax.config import ConfigError, require_int
from rljax.envs.equation import NUM_LEVELS, EquationEnv, EquationParams
from rljax.report import Figure, figures_table, format_number
from rljax.sweep import Sweep

NAME = "test-time-search"
DESCRIPTION = "Accuracy vs compute on 'solve for x': greedy, best-of-N, voting, PRM beam, MCTS"


@dataclass(frozen=True)
class Config:
    """``seeds`` problem sets of ``problems_per_level`` equations per level."""

    seeds: int = 64
    block_size: int = 8
    base_seed: int = 0
    problems_per_level: int = 8
    budgets: str = "1,4,16,64,256"
    methods: str = ",".join(METHODS)
    max_steps: int = 8
    bootstrap_reps: int = 2000

    def budget_list(self) -> list[int]:
        try:
            return [int(b) for b in self.budgets.split(",") if b.strip()]
        except ValueError:
            raise ConfigError(f"budgets: must be comma-separated integers >= 1, got "
                              f"{self.budgets!r}") from None

    def method_list(self) -> list[str]:
        return [m.strip() for m in self.methods.split(",") if m.strip()]

    def validate(self) -> None:
        require_int("seeds", self.seeds, 1)
        require_int("block_size", self.block_size, 1)
        require_int("base_seed", self.base_seed, 0, 2**31 - 1)  # 32-bit keys, + offsets
        require_int("problems_per_level", self.problems_per_level, 1)
        require_int("max_steps", self.max_steps, 1)
        require_int("bootstrap_reps", self.bootstrap_reps, 1)
        budgets = self.budget_list()
        if not budgets or min(budgets) < 1:
            raise ConfigError(f"budgets: must be comma-separated integers >= 1, got "
                              f"{self.budgets!r}")
        methods = self.method_list()
        bad = [m for m in methods if m not in METHODS]
        if not methods or bad:
            raise ConfigError(f"methods: must be a comma-separated subset of "
                              f"{', '.join(METHODS)}, got {self.methods!r}")


def make_problems(key, env: EquationEnv, problems_per_level: int, max_steps: int):
    """``(obs [L * P, 8], state)`` with ``P`` problems at each of the ``L`` levels."""
    levels = jnp.repeat(jnp.arange(NUM_LEVELS, dtype=jnp.int32), problems_per_level)
    keys = jax.random.split(key, levels.shape[0])
    return jax.vmap(lambda k, lv: env.reset(k, EquationParams(level=lv, max_steps=max_steps)))(
        keys, levels)


def make_train(config: Config, policy_apply=flat_prior, value_fn=heuristic_value, params=None):
    """``train(key) -> {method: float [num_budgets, L * P]}`` correctness per problem."""
    env = EquationEnv()
    env_params = EquationParams(max_steps=config.max_steps)
    budgets = config.budget_list()

    def train(key):
        key_problems, key_methods = jax.random.split(key)
        obs, state = make_problems(key_problems, env, config.problems_per_level,
                                   config.max_steps)
        out = {}
        for i, method in enumerate(config.method_list()):
            rows = []
            for j, budget in enumerate(budgets):
                k = jax.random.fold_in(jax.random.fold_in(key_methods, i), j)
                rows.append(solve(method, k, env, env_params, policy_apply, value_fn, params,
                                  obs, state, budget=budget))
            out[method] = jnp.stack(rows)
        return out

    return train


def _mean(x):
    return jnp.mean(x)


def accuracy_tables(outputs: dict[str, np.ndarray], config: Config, key) -> dict[str, Any]:
    """Per method and budget: accuracy (mean over seeds of the per-seed mean over problems)
    with a bootstrap CI over seeds; also per level (point estimates)."""
    budgets = config.budget_list()
    acc, acc_ci, by_level = {}, {}, {}
    keys = iter(jax.random.split(key, len(outputs) * len(budgets)))
    for method, x in outputs.items():
        x = np.asarray(x, np.float64)  # [S, num_budgets, L * P]
        per_seed = x.mean(axis=2)
        levels = x.reshape(x.shape[0], x.shape[1], NUM_LEVELS, -1).mean(axis=(0, 3))
        acc[method], acc_ci[method], by_level[method] = {}, {}, {}
        for j, b in enumerate(budgets):
            ci = stats.bootstrap_ci(_mean, per_seed[:, j].astype(np.float32), key=next(keys),
                                    reps=config.bootstrap_reps)
            acc[method][str(b)] = float(per_seed[:, j].mean())
            acc_ci[method][str(b)] = [ci.low, ci.high]
            by_level[method][str(b)] = [float(v) for v in levels[j]]
    return {"accuracy": acc, "accuracy_ci": acc_ci, "accuracy_by_level": by_level}


def run(config: Config, out_dir: Path, policy_apply=flat_prior, value_fn=heuristic_value,
        params=None, policy_name: str = "flat prior + heuristic value") -> dict[str, Any]:
    """Run the study; writes results.parquet, summary.json, report.md, accuracy_vs_compute.png."""
    sweep = Sweep(make_train(config, policy_apply, value_fn, params), base_seed=config.base_seed,
                  block_size=config.block_size)
    result = sweep.run(config.seeds, desc=NAME)
    outputs = {m: np.asarray(v) for m, v in result.outputs.items()}
    summary: dict[str, Any] = {"experiment": NAME, "seeds": config.seeds,
                               "problems_per_seed": NUM_LEVELS * config.problems_per_level,
                               "policy": policy_name}
    summary.update(accuracy_tables(outputs, config, jax.random.key(config.base_seed + 1)))
    summary["compile_seconds"] = result.compile_seconds
    summary["run_seconds"] = result.run_seconds
    io.write_parquet(out_dir / "results.parquet", _table(outputs, config))
    io.write_json(out_dir / "summary.json", summary)
    _plot(summary, config, out_dir)
    io.atomic_write_text(out_dir / "report.md", report_markdown(summary, config))
    return summary


def _table(outputs, config: Config) -> pd.DataFrame:
    budgets = config.budget_list()
    frames = []
    for method, x in outputs.items():
        s, nb, n = x.shape
        frames.append(pd.DataFrame({
            "seed": np.repeat(np.arange(s, dtype=np.int32), nb * n),
            "method": method,
            "budget": np.tile(np.repeat(np.asarray(budgets, np.int32), n), s),
            "level": np.tile(np.repeat(np.arange(NUM_LEVELS, dtype=np.int32),
                                       config.problems_per_level), s * nb),
            "correct": x.reshape(-1),
        }))
    return pd.concat(frames, ignore_index=True)


def _plot(summary, config: Config, out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    budgets = config.budget_list()
    fig, ax = plt.subplots(figsize=(7, 4))
    for method in summary["accuracy"]:
        point = [summary["accuracy"][method][str(b)] for b in budgets]
        low = [summary["accuracy_ci"][method][str(b)][0] for b in budgets]
        high = [summary["accuracy_ci"][method][str(b)][1] for b in budgets]
        ax.plot(budgets, point, marker="o", label=method)
        ax.fill_between(budgets, low, high, alpha=0.2)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("budget (policy/model evaluations per problem)")
    ax.set_ylabel("accuracy (all levels)")
    ax.set_title(f"{summary['policy']}: mean over {summary['seeds']} seeds, 95 % CI")
    ax.legend(fontsize=8)
    io.write_figure(out_dir / "accuracy_vs_compute.png", fig)


def report_markdown(summary: dict[str, Any], config: Config) -> str:
    budgets = config.budget_list()
    figures = []
    for method in summary["accuracy"]:
        for b in budgets:
            lv = summary["accuracy_by_level"][method][str(b)]
            figures.append(Figure(
                f"{method}, budget {b}", summary["accuracy"][method][str(b)],
                *summary["accuracy_ci"][method][str(b)],
                "by level: " + " / ".join(format_number(v) for v in lv)))
    best = max(((m, b) for m in summary["accuracy"] for b in budgets),
               key=lambda mb: summary["accuracy"][mb[0]][str(mb[1])])
    return "\n".join([
        f"# {NAME}", "", DESCRIPTION + ".", "",
        f"Policy: {summary['policy']}. {summary['seeds']} seeds x "
        f"{summary['problems_per_seed']} held-out equations ({config.problems_per_level} per "
        f"level 0-3), step limit {config.max_steps}.", "",
        figures_table(figures), "",
        "## Reading", "",
        f"Best: {best[0]} at budget {best[1]} "
        f"({format_number(summary['accuracy'][best[0]][str(best[1])])}). With 60 actions "
        "per step and most of them useless, a policy that does not know which move helps "
        "spends its budget finding out: sampling methods (best-of-N, voting) need the whole "
        "move sequence right by chance, while the verifier-guided methods (PRM beam, MCTS "
        "with the heuristic value) can keep a useful move once they have tried it -- if the "
        "budget lets them try enough of the 60.", "",
        "## Procedure", "",
        "Budgets cap policy/model evaluations per problem; each method's allocation is in "
        "experiments/equation_search.py. Accuracy is the mean over seeds of each seed's "
        f"mean over its problems; intervals are 95 % percentile bootstrap over seeds "
        f"({config.bootstrap_reps} resamples).", "",
    ])
