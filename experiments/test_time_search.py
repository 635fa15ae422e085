"""Study ``test-time-search``: accuracy vs compute on "solve for x" for six search methods.

Equations at four difficulty levels, drawn from the *held-out split* of the problem space
(:func:`rljax.envs.equation.is_held_out`: the side GRPO training never draws from, so a
GRPO-trained policy passed to :func:`run` is scored on problems its training never saw; for
the flat prior nothing is trained and the split only keeps this study on the problems
``rl-then-search`` evaluates on).
Every method of :mod:`rljax.search.equation` runs at budgets of 1 to 256
policy/model evaluations per problem; one seed of the sweep = a fresh draw of problems
(the same problems for every method and budget of that seed) and fresh method randomness.

Methods are compared by **paired differences** on the same seeds: for every budget and
every pair of methods, the mean over seeds of the per-seed accuracy difference, with a
paired sign-flip permutation p-value, Holm-corrected over the whole family (all pairs at
all budgets), and a Bonferroni interval at level ``1 - alpha / m`` (simultaneous over the
``m`` comparisons). Two methods are ranked only where the difference is significant on
both counts; otherwise they are reported as tied.

The policy is the no-training baseline (a flat prior with the verifier-based heuristic
value ``1 - phi / 3``) unless :func:`run` is given another ``policy_apply`` / ``value_fn`` /
``params`` (e.g. the GRPO-trained MLP of ``rl-then-search``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from rljax import io, stats
from rljax.config import ConfigError, check_fields, param
from rljax.envs.equation import (
    HOLDOUT_MODULUS,
    NUM_LEVELS,
    EquationEnv,
    EquationParams,
    sample_split_equation,
)
from rljax.report import Figure, figures_table, finite_or_none, format_number, pyplot
from rljax.search.equation import METHODS, flat_prior, heuristic_value, solve
from rljax.stats.reported import reported_interval
from rljax.sweep import Sweep
from rljax.training.equation import start_state

NAME = "test-time-search"
DESCRIPTION = "Accuracy vs compute on 'solve for x': greedy, best-of-N, voting, PRM beam, MCTS"
#: Per-seed accuracies are counts of solved problems: intervals are held to the coverage
#: measured on count data (rljax.stats.coverage.DATA_KINDS; the note gives the worst case).
DATA_KIND = "counts"


@dataclass(frozen=True)
class Config:
    """``seeds`` problem sets of ``problems_per_level`` held-out equations per level."""

    seeds: int = param(64, "problem sets (seeds), ids 0 .. seeds - 1", sweep=False, low=1)
    block_size: int = param(8, "seeds per compiled block", sweep=False, low=1)
    base_seed: int = param(0, "the sweep's base seed (32-bit keys, + small offsets)",
                           sweep=False, low=0, high=2**31 - 1)
    problems_per_level: int = param(8, "held-out equations per level and seed", sweep=False,
                                    low=1)
    budgets: str = param("1,4,16,64,256", "evaluations per problem, comma-separated",
                         sweep=False)
    methods: str = param(",".join(METHODS), "the search methods, comma-separated",
                         sweep=False)
    max_steps: int = param(8, "the environment's step limit", sweep=False, low=1)
    bootstrap_reps: int = param(2000, "bootstrap resamples", sweep=False, low=1)
    holdout_modulus: int = param(
        HOLDOUT_MODULUS, "the problem split (rljax.envs.equation.is_held_out; 0 or 1: no "
        "split, problems from the whole space)", sweep=False, low=0)
    alpha: float = param(0.05, "family-wise error level of the paired comparisons",
                         sweep=False, low=0.0, high=1.0, low_open=True, high_open=True)
    permutation_resamples: int = param(9999, "random sign flips per p-value", sweep=False,
                                       low=1)

    def budget_list(self) -> list[int]:
        """The budgets of ``budgets``, in the order given."""
        try:
            return [int(b) for b in self.budgets.split(",") if b.strip()]
        except ValueError:
            raise ConfigError(f"budgets: must be comma-separated integers >= 1, got "
                              f"{self.budgets!r}") from None

    def method_list(self) -> list[str]:
        """The methods of ``methods``, in the order given."""
        return [m.strip() for m in self.methods.split(",") if m.strip()]

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first invalid field: each against its
        declaration, then the ``budgets`` and ``methods`` lists."""
        check_fields(self)
        budgets = self.budget_list()
        if not budgets or min(budgets) < 1:
            raise ConfigError(f"budgets: must be comma-separated integers >= 1, got "
                              f"{self.budgets!r}")
        methods = self.method_list()
        bad = [m for m in methods if m not in METHODS]
        if not methods or bad:
            raise ConfigError(f"methods: must be a comma-separated subset of "
                              f"{', '.join(METHODS)}, got {self.methods!r}")


def make_problems(key, env: EquationEnv, problems_per_level: int, max_steps: int,
                  holdout_modulus: int = HOLDOUT_MODULUS):
    """``(obs [L * P, 8], state)``: ``P`` problems at each of the ``L`` levels, each drawn
    from the held-out split (:func:`rljax.envs.equation.sample_split_equation`)."""
    levels = jnp.repeat(jnp.arange(NUM_LEVELS, dtype=jnp.int32), problems_per_level)
    keys = jax.random.split(key, levels.shape[0])
    params = EquationParams(max_steps=max_steps)

    def one(k, level):
        coeffs, solution = sample_split_equation(k, level, holdout_modulus, True)
        state = start_state(coeffs, solution)
        return env.observation(state, params), state

    return jax.vmap(one)(keys, levels)


def make_train(config: Config, policy_apply=flat_prior, value_fn=heuristic_value, params=None):
    """``train(key) -> {method: float [num_budgets, L * P]}`` correctness per problem."""
    env = EquationEnv()
    env_params = EquationParams(max_steps=config.max_steps)
    budgets = config.budget_list()

    def train(key):
        key_problems, key_methods = jax.random.split(key)
        obs, state = make_problems(key_problems, env, config.problems_per_level,
                                   config.max_steps, config.holdout_modulus)
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


def accuracy_tables(outputs: dict[str, np.ndarray], config: Config, key) -> dict[str, Any]:
    """Per method and budget: accuracy (mean over seeds of the per-seed mean over problems)
    with its interval over seeds (:func:`rljax.stats.reported.reported_interval`,
    ``"mean"``); also per level (point estimates). ``outputs[method]``: ``[S, budgets,
    L * P]``."""
    budgets = config.budget_list()
    acc, acc_ci, by_level = {}, {}, {}
    note = ""
    keys = iter(jax.random.split(key, len(outputs) * len(budgets)))
    for method, x in outputs.items():
        x = np.asarray(x, np.float64)  # [S, num_budgets, L * P]
        per_seed = x.mean(axis=2)
        levels = x.reshape(x.shape[0], x.shape[1], NUM_LEVELS, -1).mean(axis=(0, 3))
        acc[method], acc_ci[method], by_level[method] = {}, {}, {}
        for j, b in enumerate(budgets):
            iv = reported_interval("mean", per_seed[:, j], key=next(keys),
                                   reps=config.bootstrap_reps, data=DATA_KIND)
            note = iv.note
            acc[method][str(b)] = float(per_seed[:, j].mean())
            acc_ci[method][str(b)] = [finite_or_none(iv.low), finite_or_none(iv.high)]
            by_level[method][str(b)] = [float(v) for v in levels[j]]
    return {"accuracy": acc, "accuracy_ci": acc_ci, "accuracy_by_level": by_level,
            "accuracy_interval_note": note}


def paired_sign_flip_test(differences, *, key: jax.Array, n_resamples: int = 9999
                          ) -> float:
    """Two-sided paired permutation (sign-flip) p-value for ``H0: mean difference = 0``.

    Under H0 each seed's difference ``d_i = x_i - y_i`` is symmetric about 0, so its sign
    is exchangeable: ``T = |mean(d)|`` is compared with ``T* = |mean(s * d)|`` over sign
    vectors ``s in {-1, +1}^n``. With ``2^n <= n_resamples + 1`` all sign vectors are
    enumerated (exact ``p = #{T* >= T} / 2^n``); otherwise ``R = n_resamples`` random ones
    give ``p = (1 + #{T* >= T}) / (R + 1)`` (Phipson & Smyth, 2010). All-zero differences
    give ``p = 1``.

    Args:
      differences: ``[n]`` paired differences (one per seed).
      key: JAX PRNG key (seeds the sign draws; the same key gives the same p).
      n_resamples: random sign vectors when enumeration is too large (>= 1).

    Returns:
      The p-value (float in ``(0, 1]``).

    Source: Fisher, "The Design of Experiments", 1935, §21 (the paired randomisation test);
    Good, "Permutation, Parametric and Bootstrap Tests of Hypotheses", 2005, §3.
    """
    d = np.asarray(differences, np.float64)
    if d.ndim != 1 or d.size < 1:
        raise ValueError(f"differences: must be a non-empty 1-D array, got shape {d.shape}")
    n = d.size
    observed = abs(d.mean())
    tol = 1e-12 * max(1.0, float(np.abs(d).max()))
    if 2**n <= n_resamples + 1:
        signs = 1.0 - 2.0 * ((np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1)
        return float(np.mean(np.abs(signs @ d) / n >= observed - tol))
    seed = np.asarray(jax.random.bits(key, (4,), jnp.uint32)).astype(np.uint64)
    rng = np.random.default_rng(seed)
    count = 0
    for start in range(0, n_resamples, 4096):
        rows = min(4096, n_resamples - start)
        signs = rng.choice(np.array([-1.0, 1.0]), size=(rows, n))
        count += int(np.sum(np.abs(signs @ d) / n >= observed - tol))
    return (1.0 + count) / (n_resamples + 1.0)


def rank_tiers(methods: list[str], point: dict[str, float],
               better: set[tuple[str, str]]) -> list[list[str]]:
    """Group methods into tiers from the significant pairwise wins.

    ``better`` holds ``(a, b)`` where ``a`` is significantly better than ``b``. Tier 1 is
    every method no other method beats; tier 2 every remaining method no remaining method
    beats; and so on. Within a tier no pair differs significantly (so its members are
    tied); each tier is ordered by the point estimate ``point[method]``.
    """
    remaining = list(methods)
    tiers = []
    while remaining:
        tier = [m for m in remaining if not any((o, m) in better for o in remaining)]
        if not tier:  # a cycle cannot arise from one set of mean differences; be safe
            tier = list(remaining)
        tiers.append(sorted(tier, key=lambda m: -point[m]))
        remaining = [m for m in remaining if m not in tier]
    return tiers


def paired_comparisons(outputs: dict[str, np.ndarray], config: Config, key
                       ) -> dict[str, Any]:
    """All pairs of methods at every budget, compared on the same seeds and problems.

    For budget ``b`` and methods ``(A, B)``: per-seed difference ``d_i = acc_i(A) -
    acc_i(B)`` (each seed's mean over its problems; both methods see the same problems);
    ``diff = mean_i d_i``; ``p`` from :func:`paired_sign_flip_test`; ``p_holm`` Holm's
    step-down adjustment (:func:`rljax.stats.holm`) over the whole family of ``m = budgets
    x M (M - 1) / 2`` comparisons; ``[low, high]`` a Bonferroni interval,
    :func:`rljax.stats.reported.reported_interval` ``("paired_difference", A, B)`` at
    confidence ``1 - alpha / m`` (simultaneous coverage ``>= 1 - alpha`` for all ``m``).
    ``significant``: ``p_holm <= alpha`` *and* the interval excludes 0.

    Returns:
      ``{"paired_differences": {budget: {"A - B": {diff, low, high, p, p_holm,
      significant}}}, "ranking": {budget: [[tier 1 methods], ...]}, "paired_family":
      {...}}`` (pairs are named best-first by point estimate).
    """
    budgets = config.budget_list()
    methods = list(outputs)
    per_seed = {m: np.asarray(x, np.float64).mean(axis=2) for m, x in outputs.items()}
    pairs = [(b, j, x, y) for j, b in enumerate(budgets)
             for i, x in enumerate(methods) for y in methods[i + 1:]]
    m = max(1, len(pairs))
    confidence = 1.0 - config.alpha / m
    # Bootstrap intervals need enough resamples to place the alpha / (2 m) quantiles.
    reps = max(config.bootstrap_reps, int(np.ceil(40.0 * m / config.alpha)))
    keys = iter(jax.random.split(key, 2 * m))
    rows, note = [], ""
    for b, j, x, y in pairs:
        a, c = (x, y) if per_seed[x][:, j].mean() >= per_seed[y][:, j].mean() else (y, x)
        xa, xc = per_seed[a][:, j], per_seed[c][:, j]
        d = xa - xc
        k_test, k_iv = next(keys), next(keys)
        if np.all(d == 0):
            row = {"diff": 0.0, "low": 0.0, "high": 0.0, "p": 1.0}
        else:
            iv = reported_interval("paired_difference", xa, xc, key=k_iv, reps=reps,
                                   confidence=confidence, data=DATA_KIND)
            note = iv.note
            row = {"diff": float(d.mean()), "low": finite_or_none(iv.low),
                   "high": finite_or_none(iv.high),
                   "p": paired_sign_flip_test(d, key=k_test,
                                              n_resamples=config.permutation_resamples)}
        rows.append((str(b), f"{a} - {c}", a, c, row))
    p_holm = (stats.holm([r[4]["p"] for r in rows], alpha=config.alpha).adjusted
              if rows else [])
    table: dict[str, dict[str, Any]] = {str(b): {} for b in budgets}
    wins: dict[str, set] = {str(b): set() for b in budgets}
    disagree = 0
    for (b, name, a, c, row), ph in zip(rows, p_holm, strict=True):
        excludes = row["low"] is not None and row["high"] is not None and (
            row["low"] > 0 or row["high"] < 0)
        row["p_holm"] = float(ph)
        row["significant"] = bool(ph <= config.alpha and excludes)
        disagree += int((ph <= config.alpha) != excludes)
        table[b][name] = row
        if row["significant"]:
            wins[b].add((a, c) if row["diff"] > 0 else (c, a))
    ranking = {str(b): rank_tiers(methods, {mm: float(per_seed[mm][:, j].mean())
                                            for mm in methods}, wins[str(b)])
               for j, b in enumerate(budgets)}
    return {
        "paired_differences": table,
        "ranking": ranking,
        "paired_family": {
            "comparisons": len(pairs), "alpha": config.alpha,
            "interval_confidence": confidence,
            "interval": "Bonferroni: reported_interval('paired_difference') at 1 - alpha/m",
            "test": "paired sign-flip permutation test, two-sided; Holm over all m",
            "significant": "p_holm <= alpha and the Bonferroni interval excludes 0",
            "test_interval_disagreements": disagree,
            "interval_note": note,
        },
    }


def run(config: Config, out_dir: Path, policy_apply=flat_prior, value_fn=heuristic_value,
        params=None, policy_name: str = "flat prior + heuristic value",
        options: Any = None) -> dict[str, Any]:
    """Run the study; writes results.parquet, summary.json, report.md, accuracy_vs_compute.png."""
    sweep = Sweep(make_train(config, policy_apply, value_fn, params), base_seed=config.base_seed,
                  block_size=config.block_size)
    result = sweep.run(config.seeds, desc=NAME, options=options)
    outputs = {m: np.asarray(v) for m, v in result.outputs.items()}
    summary: dict[str, Any] = {"experiment": NAME, "seeds": config.seeds,
                               "problems_per_seed": NUM_LEVELS * config.problems_per_level,
                               "problems": ("held-out split (hash mod "
                                            f"{config.holdout_modulus}), drawn per seed"
                                            if config.holdout_modulus > 1 else
                                            "whole problem space (no split), drawn per seed"),
                               "policy": policy_name}
    summary.update(accuracy_tables(outputs, config, jax.random.key(config.base_seed + 1)))
    summary.update(paired_comparisons(outputs, config, jax.random.key(config.base_seed + 2)))
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


def _nan(value) -> float:
    return float("nan") if value is None else value


def _plot(summary, config: Config, out_dir: Path) -> None:
    plt = pyplot()
    budgets = config.budget_list()
    fig, ax = plt.subplots(figsize=(7, 4))
    for method in summary["accuracy"]:
        point = [summary["accuracy"][method][str(b)] for b in budgets]
        low = [_nan(summary["accuracy_ci"][method][str(b)][0]) for b in budgets]
        high = [_nan(summary["accuracy_ci"][method][str(b)][1]) for b in budgets]
        ax.plot(budgets, point, marker="o", label=method)
        ax.fill_between(budgets, low, high, alpha=0.2)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("budget (policy/model evaluations per problem)")
    ax.set_ylabel("accuracy (all levels)")
    ax.set_title(f"{summary['policy']}: mean over {summary['seeds']} seeds, 95 % interval")
    ax.legend(fontsize=8)
    io.write_figure(out_dir / "accuracy_vs_compute.png", fig)


def _tiers_text(tiers: list[list[str]]) -> str:
    return " > ".join(t[0] if len(t) == 1 else "{" + " ~ ".join(t) + "}" for t in tiers)


def _p_text(p: float) -> str:
    return f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}"


def report_markdown(summary: dict[str, Any], config: Config) -> str:
    """The study's report.md: accuracy table, paired-comparison table, ranking, reading,
    procedure."""
    budgets = config.budget_list()
    figures = []
    for method in summary["accuracy"]:
        for b in budgets:
            lv = summary["accuracy_by_level"][method][str(b)]
            figures.append(Figure(
                f"{method}, budget {b}", summary["accuracy"][method][str(b)],
                *summary["accuracy_ci"][method][str(b)],
                "by level: " + " / ".join(format_number(v) for v in lv)))
    fam = summary["paired_family"]
    pair_lines = [
        f"| budget | pair | mean difference | {100 * fam['interval_confidence']:.3g} % "
        "interval (Bonferroni) | p | p (Holm) | ranked |",
        "|---|---|---|---|---|---|---|"]
    for b in budgets:
        for name, r in summary["paired_differences"][str(b)].items():
            pair_lines.append(
                f"| {b} | {name} | {format_number(r['diff'])} | [{format_number(r['low'])}, "
                f"{format_number(r['high'])}] | {_p_text(r['p'])} | {_p_text(r['p_holm'])} | "
                f"{'yes' if r['significant'] else 'tied'} |")
    ranking_lines = [f"* budget {b}: {_tiers_text(summary['ranking'][str(b)])}"
                     for b in budgets]
    top_budget = str(budgets[-1])
    top_tier = summary["ranking"][top_budget][0]
    acc = summary["accuracy"]
    lead = (f"At budget {top_budget} the first tier is {', '.join(top_tier)}"
            + (f" ({format_number(acc[top_tier[0]][top_budget])})" if len(top_tier) == 1 else
               " -- tied: no pair among them differs significantly after the correction")
            + ".")
    n_sig = sum(r["significant"] for t in summary["paired_differences"].values()
                for r in t.values())
    problems = ("drawn per seed from the held-out split of the problem space (a coefficient "
                f"hash 0 mod {config.holdout_modulus}, rljax.envs.equation.is_held_out: the "
                "side GRPO training never draws; for the flat prior nothing is trained, so "
                "here the split only keeps this study on the problems rl-then-search "
                "evaluates on)" if config.holdout_modulus > 1 else
                "drawn per seed from the whole problem space (no split)")
    return "\n".join([
        f"# {NAME}", "", DESCRIPTION + ".", "",
        f"Policy: {summary['policy']}. {summary['seeds']} seeds x "
        f"{summary['problems_per_seed']} equations ({config.problems_per_level} per level "
        f"0-3), {problems}; step limit {config.max_steps}.", "",
        figures_table(figures), "",
        "## Paired comparisons", "",
        f"Every pair of methods at every budget ({fam['comparisons']} comparisons), on the "
        "same seeds and problems: mean over seeds of the per-seed accuracy difference "
        "(first named minus second), a paired sign-flip p-value, Holm-adjusted over all "
        f"{fam['comparisons']}, and a Bonferroni interval at "
        f"{100 * fam['interval_confidence']:.3g} % (simultaneous 95 % over the family). "
        "\"ranked\" = Holm p <= "
        f"{config.alpha:g} and the interval excludes 0; otherwise the two are tied.", "",
        "\n".join(pair_lines), "",
        "## Ranking", "",
        "Tiers (\">\": every method of the later tier is beaten significantly by some method "
        "of an earlier one; \"~\": tied, no significant difference inside a tier):", "",
        "\n".join(ranking_lines), "",
        "## Reading", "",
        f"{lead} {n_sig} of {fam['comparisons']} paired comparisons are significant after the "
        "correction; everything else in the tables is a tie at this number of seeds, "
        "however the point estimates order it. With 60 actions per step and most of them "
        "useless, a policy that does not know which move helps spends its budget finding "
        "out: sampling methods (best-of-N, voting) need the whole move sequence right by "
        "chance, while the verifier-guided methods (PRM beam, MCTS with the heuristic "
        "value) can keep a useful move once they have tried it -- if the budget lets them "
        "try enough of the 60. This is this implementation on this toy, not a measurement "
        "of the methods' papers.", "",
        "## Procedure", "",
        "Budgets cap policy/model evaluations per problem; each method's allocation is in "
        "rljax/search/equation.py. The problems of a seed are drawn once and shared by "
        "every method and budget of that seed, so all comparisons are paired by seed. "
        "Accuracy is the mean over seeds of each seed's mean over its problems; its interval: "
        f"{summary['accuracy_interval_note'].rstrip('.')}. Paired differences: "
        f"{fam['interval_note'] or 'no non-degenerate pair'} (Bonferroni level 1 - "
        f"{config.alpha:g}/{fam['comparisons']}; the measured coverage figure is for the "
        "method at its nominal level); p-values from "
        f"{config.permutation_resamples} random sign flips per pair (exact enumeration for "
        "n <= 13), Holm's step-down over the family; pairs whose differences are all 0 get "
        f"p = 1 and the interval [0, 0]. Test and interval disagreed on "
        f"{fam['test_interval_disagreements']} pair(s); those are reported as tied.", "",
    ])
