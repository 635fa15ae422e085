"""Study ``rl-then-search``: does GRPO fine-tuning plus MCTS at inference add up?

Seed claim: "fine-tune with GRPO, then add MCTS at inference for hard problems". A 2 x 2
design per seed: the *untrained* MLP (the initialisation GRPO starts from) and the
*GRPO-trained* MLP (``experiments.equation_training``, outcome reward only), each played
greedily and with Gumbel MuZero search at a fixed budget of policy/model evaluations
per problem (``experiments.equation_search``). MCTS uses the verifier-based heuristic
value ``1 - phi / 3`` in both rows, so the policy factor changes only the prior.
Accuracy is measured on held-out equations (a coefficient-hash split never drawn in
training) at each difficulty level. "Gains add up" is read from the interaction
``(TM - TG) - (UM - UG)``: 0 when MCTS adds as much on top of training as on top of the
untrained policy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from experiments.equation_search import heuristic_value, solve
from experiments.equation_training import (
    EquationTrainConfig,
    init_params,
    make_equation_grpo_train,
    make_network,
    sample_problem,
    start_state,
)
from rljax import io, stats
from rljax.config import require_int
from rljax.envs.equation import NUM_LEVELS, EquationEnv, EquationParams
from rljax.report import Figure, figures_table, format_number
from rljax.sweep import Sweep

NAME = "rl-then-search"
DESCRIPTION = "GRPO-trained vs untrained policy, with and without MCTS, on 'solve for x'"
CONDITIONS = ("untrained_greedy", "untrained_mcts", "trained_greedy", "trained_mcts")


@dataclass(frozen=True)
class Config:
    """Each seed trains its own policy and evaluates it on its own held-out problems."""

    seeds: int = 8
    block_size: int = 8
    base_seed: int = 0
    updates: int = 600
    problems_per_level: int = 64
    mcts_budget: int = 64
    bootstrap_reps: int = 2000

    def validate(self) -> None:
        require_int("seeds", self.seeds, 1)
        require_int("block_size", self.block_size, 1)
        require_int("base_seed", self.base_seed, 0, 2**31 - 1)  # 32-bit keys, + offsets
        require_int("updates", self.updates, 1)
        require_int("problems_per_level", self.problems_per_level, 1)
        require_int("mcts_budget", self.mcts_budget, 1)
        require_int("bootstrap_reps", self.bootstrap_reps, 1)

    def train_config(self) -> EquationTrainConfig:
        return dataclasses.replace(EquationTrainConfig(), updates=self.updates)


def make_train(config: Config):
    """``train(key) -> {condition: float [L, P]}`` correctness on held-out problems."""
    train_config = config.train_config()
    grpo_train = make_equation_grpo_train(train_config)
    net = make_network(train_config)
    env = EquationEnv()
    env_params = EquationParams(max_steps=train_config.max_steps)

    def policy_apply(params, obs):
        return net.actor.apply(params["actor"], obs)

    def train(key):
        key_train, key_problems, key_search = jax.random.split(key, 3)
        trained, _ = grpo_train(key_train)
        untrained = init_params(train_config, key_train)
        levels = jnp.repeat(jnp.arange(NUM_LEVELS, dtype=jnp.int32), config.problems_per_level)
        coeffs, solution = jax.vmap(
            lambda k, lv: sample_problem(k, lv, train_config.holdout_modulus, True))(
            jax.random.split(key_problems, levels.shape[0]), levels)
        state = jax.vmap(start_state)(coeffs, solution)
        obs = jax.vmap(lambda s: env.observation(s, env_params))(state)
        out = {}
        for name, params in (("untrained", untrained), ("trained", trained)):
            for method, budget, tag in (("greedy", env_params.max_steps, "greedy"),
                                        ("mcts_gumbel", config.mcts_budget, "mcts")):
                correct = solve(method, key_search, env, env_params, policy_apply,
                                heuristic_value, params, obs, state, budget=budget)
                out[f"{name}_{tag}"] = correct.reshape(NUM_LEVELS, config.problems_per_level)
        return out

    return train


def _mean(x):
    return jnp.mean(x)


def _interaction(ug, um, tg, tm):  # arguments in CONDITIONS order
    return jnp.mean((tm - tg) - (um - ug))


def run(config: Config, out_dir: Path) -> dict[str, Any]:
    """Run the study; writes results.parquet, summary.json, report.md, accuracy_2x2.png."""
    result = Sweep(make_train(config), base_seed=config.base_seed,
                   block_size=config.block_size).run(config.seeds, desc=NAME)
    out = {c: np.asarray(result.outputs[c], np.float64) for c in CONDITIONS}  # [S, L, P]
    keys = iter(jax.random.split(jax.random.key(config.base_seed + 1), 64))
    per_seed = {c: out[c].mean(axis=(1, 2)).astype(np.float32) for c in CONDITIONS}
    summary: dict[str, Any] = {"experiment": NAME, "seeds": config.seeds,
                               "mcts_budget": config.mcts_budget,
                               "problems_per_level": config.problems_per_level,
                               "training_updates": config.updates,
                               "accuracy": {}, "accuracy_ci": {}, "accuracy_by_level": {},
                               "accuracy_by_level_ci": {}}
    for c in CONDITIONS:
        ci = stats.bootstrap_ci(_mean, per_seed[c], key=next(keys), reps=config.bootstrap_reps)
        summary["accuracy"][c] = float(per_seed[c].mean())
        summary["accuracy_ci"][c] = [ci.low, ci.high]
        levels, level_cis = [], []
        for lv in range(NUM_LEVELS):
            x = out[c][:, lv, :].mean(axis=1).astype(np.float32)
            lci = stats.bootstrap_ci(_mean, x, key=next(keys), reps=config.bootstrap_reps)
            levels.append(float(x.mean()))
            level_cis.append([lci.low, lci.high])
        summary["accuracy_by_level"][c] = levels
        summary["accuracy_by_level_ci"][c] = level_cis
    inter = stats.bootstrap_ci(_interaction, *(per_seed[c] for c in CONDITIONS),
                               key=next(keys), reps=config.bootstrap_reps, paired=True)
    summary["interaction"] = inter.point
    summary["interaction_ci"] = [inter.low, inter.high]
    for name, a, b in (("mcts_gain_untrained", "untrained_mcts", "untrained_greedy"),
                       ("mcts_gain_trained", "trained_mcts", "trained_greedy"),
                       ("training_gain_greedy", "trained_greedy", "untrained_greedy")):
        diff = per_seed[a] - per_seed[b]
        ci = stats.bootstrap_ci(_mean, diff, key=next(keys), reps=config.bootstrap_reps)
        summary[name] = float(diff.mean())
        summary[f"{name}_ci"] = [ci.low, ci.high]
    summary["compile_seconds"] = result.compile_seconds
    summary["run_seconds"] = result.run_seconds

    rows = []
    for c in CONDITIONS:
        s, levels, p = out[c].shape
        rows.append(pd.DataFrame({
            "seed": np.repeat(np.arange(s, dtype=np.int32), levels * p),
            "condition": c,
            "level": np.tile(np.repeat(np.arange(levels, dtype=np.int32), p), s),
            "correct": out[c].reshape(-1),
        }))
    io.write_parquet(out_dir / "results.parquet", pd.concat(rows, ignore_index=True))
    io.write_json(out_dir / "summary.json", summary)
    _plot(summary, out_dir)
    io.atomic_write_text(out_dir / "report.md", report_markdown(summary, config))
    return summary


def _plot(summary, out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.2
    x = np.arange(NUM_LEVELS)
    for i, c in enumerate(CONDITIONS):
        point = np.asarray(summary["accuracy_by_level"][c])
        ci = np.asarray(summary["accuracy_by_level_ci"][c])
        ax.bar(x + (i - 1.5) * width, point, width, label=c,
               yerr=[point - ci[:, 0], ci[:, 1] - point], capsize=2)
    ax.set_xticks(x, [f"level {lv}" for lv in range(NUM_LEVELS)])
    ax.set_ylabel("accuracy (held-out)")
    ax.legend(fontsize=8)
    io.write_figure(out_dir / "accuracy_2x2.png", fig)


def report_markdown(summary: dict[str, Any], config: Config) -> str:
    s = summary
    figures = [Figure(c, s["accuracy"][c], *s["accuracy_ci"][c],
                      "by level: " + " / ".join(format_number(v)
                                                for v in s["accuracy_by_level"][c]))
               for c in CONDITIONS]
    figures += [
        Figure("MCTS gain, untrained policy", s["mcts_gain_untrained"],
               *s["mcts_gain_untrained_ci"]),
        Figure("MCTS gain, trained policy", s["mcts_gain_trained"], *s["mcts_gain_trained_ci"]),
        Figure("training gain, greedy", s["training_gain_greedy"],
               *s["training_gain_greedy_ci"]),
        Figure("interaction (TM - TG) - (UM - UG)", s["interaction"], *s["interaction_ci"],
               "0: the gains add up; < 0: search adds less on top of training"),
    ]
    adds = s["interaction_ci"][0] <= 0.0 <= s["interaction_ci"][1]
    return "\n".join([
        f"# {NAME}", "", DESCRIPTION + ".", "",
        f"{config.seeds} seeds, each training its own policy with GRPO ({config.updates} "
        f"updates, outcome reward) and evaluating on {config.problems_per_level} held-out "
        f"equations per level; MCTS = Gumbel MuZero at {config.mcts_budget} evaluations per "
        "problem with the heuristic value.", "",
        figures_table(figures), "",
        "## Reading", "",
        f"Training moves greedy accuracy by {format_number(s['training_gain_greedy'])}; "
        f"search adds {format_number(s['mcts_gain_untrained'])} to the untrained policy and "
        f"{format_number(s['mcts_gain_trained'])} to the trained one. The gains "
        + ("add up (the interaction's interval contains 0)." if adds else
           "do not add up: the interaction's interval excludes 0 -- what search buys depends "
           "on the policy it searches with.")
        + f" At the hardest level (3) search moves the trained policy from "
        f"{format_number(s['accuracy_by_level']['trained_greedy'][-1])} to "
        f"{format_number(s['accuracy_by_level']['trained_mcts'][-1])}, the untrained one from "
        f"{format_number(s['accuracy_by_level']['untrained_greedy'][-1])} to "
        f"{format_number(s['accuracy_by_level']['untrained_mcts'][-1])}.", "",
        "## Procedure", "",
        f"95 % percentile bootstrap over seeds ({config.bootstrap_reps} resamples); the "
        "interaction and the gains resample the four conditions with the same seeds "
        "(paired).", "",
    ])
