"""Study ``offpolicy-compare``: PPO against DQN and PQN (and SAC, on Box envs) at equal
environment steps, each method's learning rate tuned with the same budget on tuning seeds
and reported on fresh seeds.

The claim re-measured: PQN is competitive with PPO and DQN at equal environment steps
(paraphrasing Gallici et al., 2024, on MinAtar and Atari; purejaxql's CartPole config).

**Procedure.** For each method (``methods``; the ``ppo``, ``dqn``, ``pqn`` and ``sac``
studies' configurations at the env's published row, ``total_steps = env_steps``):

1. *Tuning*: a grid of ``learning_rate = factor x the row's rate`` for every factor of
   ``lr_factors`` (the same number of values for every method: an equal budget), each on
   the ``tune_seeds`` seeds ``0 .. tune_seeds - 1`` (one program per method, the rates
   vmapped with the seeds); the rate with the best test-return IQM wins.
2. *Report*: the winning rate on ``seeds`` fresh seeds, ids ``first_seed ..`` (disjoint
   from the tuning seeds); per seed the mean return of ``eval_episodes`` greedy test
   episodes after training (argmax Q; PPO's and SAC's distribution mode). IQM over seeds
   with a 95 % interval (:func:`rljax.stats.reported.reported_interval`, the measured
   coverage stated), and every pair of methods as the mean over seeds of the paired
   difference (the methods share seed ids, hence each seed's base key; they use the keys
   differently, so the pairing removes little variance, but it is a valid paired
   comparison) with its interval and the paired probability of improvement.

The tuning rates at the grid's edge are named in the report (a winner at an edge means
the grid may not contain the best rate), and so are ties: rates tied at the best tuning
IQM (e.g. all at CartPole's 500 cap) leave the first, smallest, as the winner.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pandas as pd

from experiments.offpolicy_env import make_chunks as offpolicy_chunks
from rljax import io
from rljax.config import ConfigError, param
from rljax.envs.registry import env_kind
from rljax.grid import run_grid
from rljax.report import format_number
from rljax.stats.reported import reported_interval
from rljax.study import load_study
from rljax.sweep import MAX_SEEDS
from rljax.training.episode_returns import chunked_runs

NAME = "offpolicy-compare"
SUPPORTS_TENSORBOARD = True
DESCRIPTION = ("PPO vs DQN vs PQN (SAC on Box envs) at equal env steps, learning rates tuned "
               "with an equal budget on tuning seeds, reported on fresh seeds, paired")
#: The methods, each the registered study that runs it (loaded by name: studies do not
#: import each other).
STUDIES = ("ppo", "dqn", "pqn", "sac")


def _names(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in str(text).split(",") if t.strip())


@dataclass(frozen=True)
class Config:
    """The comparison's settings (each method's own fields are its study's, at the env's
    published row)."""

    env: str = param("CartPole-v1", "a gymnax id; --env NAME", sweep=False)
    methods: str = param("ppo,dqn,pqn", "comma-separated methods among ppo, dqn, pqn, sac",
                         sweep=False)
    env_steps: int = param(500_000, "environment steps per seed for every method (rounded "
                           "down to whole updates)", sweep=False, low=1, high=10**10)
    lr_factors: str = param("0.333,1,3", "the tuning grid: multiples of each row's learning "
                            "rate (the same count for every method)", sweep=False)
    tune_seeds: int = param(4, "seeds per tuning configuration (ids 0 ..)", sweep=False,
                            low=2, high=256)
    seeds: int = param(16, "fresh seeds for the report", sweep=False, low=2, high=MAX_SEEDS)
    first_seed: int = param(1000, "the fresh seeds' first id (>= tune_seeds: disjoint)",
                            sweep=False, low=0, high=MAX_SEEDS)
    base_seed: int = param(0, "the sweeps' base seed", sweep=False, low=0, high=2**31 - 1)
    eval_episodes: int = param(32, "greedy test episodes per seed", sweep=False, low=1,
                               high=2**16)
    bootstrap_reps: int = param(2000, "bootstrap resamples", sweep=False, low=1)
    confidence: float = param(0.95, "the intervals' confidence", sweep=False, low=0.0,
                              high=1.0, low_open=True, high_open=True)

    def method_names(self) -> tuple[str, ...]:
        """The methods, in order."""
        return _names(self.methods)

    def factors(self) -> tuple[float, ...]:
        """The tuning grid's factors."""
        return tuple(float(x) for x in _names(self.lr_factors))

    def validate(self) -> None:
        """One-line :class:`ConfigError` naming the field."""
        from rljax.config import check_fields

        check_fields(self)
        methods = self.method_names()
        if not methods or any(m not in STUDIES for m in methods) or len(set(methods)) < len(
                methods):
            raise ConfigError(f"methods: must be distinct names among {', '.join(STUDIES)}, "
                              f"got {self.methods!r}")
        try:
            factors = self.factors()
        except ValueError:
            factors = ()
        if not factors or any(not np.isfinite(f) or f <= 0 for f in factors):
            raise ConfigError(f"lr_factors: must be positive numbers separated by commas, "
                              f"got {self.lr_factors!r}")
        if self.first_seed < self.tune_seeds:
            raise ConfigError(f"first_seed: must be >= tune_seeds = {self.tune_seeds} (fresh "
                              f"seeds), got {self.first_seed}")
        if self.first_seed > MAX_SEEDS - self.seeds:
            raise ConfigError(f"first_seed: must be <= {MAX_SEEDS - self.seeds}, got "
                              f"{self.first_seed}")
        for method in methods:
            try:
                self.method_config(method, self.tune_seeds, 0).validate()
            except ConfigError as err:
                raise ConfigError(f"methods: {method}: {err}") from None

    def method_config(self, method: str, seeds: int, first_seed: int,
                      learning_rate: float | None = None) -> Any:
        """``method``'s study config at the env's row with ``total_steps = env_steps``
        (rounded down to whole updates), ``seeds`` seeds from ``first_seed``."""
        module = load_study(method)
        base = module.Config(env=self.env)
        per_update = (base.batch_size if method == "ppo" else base.steps_per_update)
        steps = max(1, self.env_steps // per_update) * per_update
        kwargs: dict[str, Any] = dict(env=self.env, total_steps=steps, seeds=seeds,
                                      block_size=seeds, first_seed=first_seed,
                                      base_seed=self.base_seed,
                                      eval_episodes=self.eval_episodes)
        if learning_rate is not None:
            kwargs["learning_rate"] = learning_rate
        try:
            return module.Config(**kwargs)
        except ConfigError as err:
            raise ConfigError(f"methods: {method}: {err}") from None


def _test_returns(method: str, configs: list[Any], desc: str,
                  options: Any) -> list[np.ndarray]:
    """Per config, the ``[S]`` greedy test returns (mean over the episodes); ``desc`` names
    the sweep (its checkpoints)."""
    if method == "ppo":
        runs, _ = load_study("ppo").run_configs(configs, desc=desc, options=options)
    else:
        first = configs[0]
        result = run_grid(offpolicy_chunks, configs, None, first.seeds,
                          base_seed=first.base_seed, block_size=first.block_size,
                          first_seed=first.first_seed, desc=desc, options=options)
        runs = chunked_runs(result, lambda c: c.num_rows)
    return [np.asarray(r["final"]["eval_return_mode"], np.float64).mean(axis=1) for r in runs]


def run(config: Config, out_dir: Path, options: Any = None) -> dict[str, Any]:
    """Run the study; writes ``results.parquet`` (one row per method x phase x rate x
    seed), ``summary.json`` and ``report.md``; returns the summary."""
    config.validate()
    keys = iter(jax.random.split(jax.random.key(config.base_seed + 7), 64))
    methods, rows, tuning, report = config.method_names(), [], {}, {}
    for method in methods:
        base = config.method_config(method, config.tune_seeds, 0)
        rates = [base.learning_rate * f for f in config.factors()]
        configs = [dataclasses.replace(base, learning_rate=r) for r in rates]
        returns = _test_returns(method, configs, f"{NAME}-{method}-tune", options)
        iqms = [float(reported_interval("iqm", r, key=next(keys), reps=config.bootstrap_reps,
                                        confidence=config.confidence).point) for r in returns]
        best = int(np.argmax(iqms))
        tuning[method] = {"rates": rates, "iqm": iqms, "chosen": rates[best],
                          "chosen_at_edge": best in (0, len(rates) - 1) and len(rates) > 1,
                          "row_rate": base.learning_rate, "env_steps": base.total_steps}
        for rate, r in zip(rates, returns, strict=True):
            rows += [{"method": method, "phase": "tune", "learning_rate": rate,
                      "seed": base.first_seed + s, "test_return": float(x)}
                     for s, x in enumerate(r)]
        final_cfg = config.method_config(method, config.seeds, config.first_seed, rates[best])
        (final,) = _test_returns(method, [final_cfg], f"{NAME}-{method}-report", options)
        ci = reported_interval("iqm", final, key=next(keys), reps=config.bootstrap_reps,
                               confidence=config.confidence)
        report[method] = {"iqm": float(ci.point), "ci": [float(ci.low), float(ci.high)],
                          "note": ci.note.rstrip("."), "returns": final.tolist(),
                          "env_steps": final_cfg.total_steps}
        rows += [{"method": method, "phase": "report", "learning_rate": rates[best],
                  "seed": config.first_seed + s, "test_return": float(x)}
                 for s, x in enumerate(final)]
    pairs = []
    for i, a in enumerate(methods):
        for b in methods[i + 1:]:
            x, y = np.asarray(report[a]["returns"]), np.asarray(report[b]["returns"])
            diff = reported_interval("paired_difference", x, y, key=next(keys),
                                     reps=config.bootstrap_reps, confidence=config.confidence)
            pairs.append({"a": a, "b": b, "difference": float(diff.point),
                          "ci": [float(diff.low), float(diff.high)],
                          "p_a_better": float(np.mean(x > y) + 0.5 * np.mean(x == y)),
                          "note": diff.note.rstrip(".")})
    summary = {"experiment": NAME, "env": config.env, "env_kind": env_kind(config.env),
               "seeds": config.seeds, "first_seed": config.first_seed,
               "tune_seeds": config.tune_seeds, "lr_factors": list(config.factors()),
               "tuning": tuning, "report": report, "pairs": pairs}
    io.write_parquet(out_dir / "results.parquet", pd.DataFrame(rows))
    io.write_json(out_dir / "summary.json", summary)
    io.atomic_write_text(out_dir / "report.md", report_markdown(summary, config))
    return summary


def report_markdown(summary: dict[str, Any], config: Config) -> str:
    """The report: the tuning grid, each method on fresh seeds, the paired differences."""
    pct = f"{100 * config.confidence:g} %"
    lines = [f"# {NAME} on {config.env}", "", DESCRIPTION + ".", "",
             f"Tuning: learning rate x {', '.join(f'{f:g}' for f in config.factors())} of "
             f"each row's rate, {config.tune_seeds} tuning seeds each (ids 0 .."
             f" {config.tune_seeds - 1}); report: the chosen rate on {config.seeds} fresh "
             f"seeds (ids {config.first_seed} .. {config.first_seed + config.seeds - 1}); "
             f"test return = mean of {config.eval_episodes} greedy episodes per seed.", "",
             "| method | env steps | chosen lr (row's) | test return IQM | "
             f"{pct} interval |", "|---|---|---|---|---|"]
    for method, rep in summary["report"].items():
        tune = summary["tuning"][method]
        tied = sum(x == max(tune["iqm"]) for x in tune["iqm"])
        edge = " (grid edge)" if tune["chosen_at_edge"] else ""
        edge += f" (first of {tied} tied)" if tied > 1 else ""
        lines.append(f"| {method} | {rep['env_steps']:,} | {tune['chosen']:.3g}{edge} "
                     f"({tune['row_rate']:.3g}) | {format_number(rep['iqm'])} | "
                     f"[{format_number(rep['ci'][0])}, {format_number(rep['ci'][1])}] |")
    lines += ["", "Paired differences (a - b, mean over the fresh seeds, shared seed ids):",
              "", f"| a - b | mean difference | {pct} interval | P(a > b) |",
              "|---|---|---|---|"]
    for p in summary["pairs"]:
        lines.append(f"| {p['a']} - {p['b']} | {format_number(p['difference'])} | "
                     f"[{format_number(p['ci'][0])}, {format_number(p['ci'][1])}] | "
                     f"{p['p_a_better']:.2f} |")
    notes = sorted({rep["note"] for rep in summary["report"].values()}
                   | {p["note"] for p in summary["pairs"]})
    lines += ["", "Intervals: " + "; ".join(notes) + ".", ""]
    return "\n".join(lines)
