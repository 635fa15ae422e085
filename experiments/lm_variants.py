"""Study ``lm-variants``: GRPO and five published variants, each tuned with an equal budget.

The arms (each a :class:`rljax.training.lm_config.LMGRPOConfig` and, for the clip, the
shared :class:`rljax.training.lm.LMTrainConfig`'s fields; the formulas are in
:mod:`rljax.algorithms.grpo`):

===============  ===========================================================================
arm              settings
===============  ===========================================================================
grpo             group-relative advantage (mean and std of the group), per-response length
                 normalisation (``sequence-mean-token-mean``); Shao et al. (2024)
dr_grpo          group-mean advantage (no std), ``sequence-mean-token-sum-norm`` (a constant
                 normaliser instead of each response's length); Liu et al. (2025)
dapo             clip-higher (0.2 / 0.28), ``token-mean``, dynamic sampling (groups without
                 signal leave the loss) and overlong reward shaping (inert at the default
                 12 tokens, below); Yu et al. (2025)
dapo_sym_clip    DAPO with a symmetric clip (0.2 / 0.2): the ablation that isolates clip-higher
gspo             sequence-level importance ratio, clip 3e-4 / 4e-4; Zheng et al. (2025)
rloo             leave-one-out baseline; Ahmadian et al. (2024)
reinforce_pp     REINFORCE++: group-free, batch-whitened advantages, ``token-mean``;
                 Hu et al. (2025)
===============  ===========================================================================

Every arm shares the study's :class:`~rljax.training.lm.LMTrainConfig` fields except those
its settings above name (DAPO's and GSPO's clip; DAPO's overlong shaping, ``L_max =
max_new_tokens`` and ``L_cache = dapo_overlong_cache``: 0 by default, since the recipe's 12
tokens are the widest level-4 solution's, so any ``L_cache`` would penalise correct
solutions (about three quarters of them have 10 to 12 tokens); the shaping is inert unless
both are raised). The defaults are the library's
:data:`rljax.training.lm.EQUATION_RECIPE` (12 completion tokens; a 300-step warm start of
128 problems at a constant 1e-3; 200 RL steps of 32 prompts x 8 completions after a 20-step
learning-rate warm-up; 512 evaluation prompts) with ``mu = 2`` (with one inner iteration
every ratio is 1 and no clip can act), no KL term, equal rollouts (DAPO's dynamic sampling
in its equal-budget form, see :mod:`rljax.training.lm`) and the same evaluation prompts.
The warm start depends only on the model, the task and the warm-up fields, which every arm
shares: :func:`rljax.training.lm_warm_start.cached_warm_start` computes it once per run,
before any arm (``out_dir/warm_start``; the tuning and evaluation seeds and a block of
padding), and every trainer reads it, so every arm at every rate starts seed ``i`` from
bitwise the same params.

**Tuning.** Each arm's learning rate is chosen from the same grid (``lr_grid``) on the same
``tuning_seeds`` seeds by the mean final held-out accuracy; while the winner is the lowest
or highest rate tried, one more rate beyond that edge (:func:`rljax.tune.extend_grid`) is
tuned on the same seeds, at most ``max_grid_extensions`` times, and the report says whether
each arm's rate ends interior or at an edge. Only the winner runs on ``seeds`` fresh
evaluation seeds (:func:`rljax.tune.tune`, whose optimism measures the winner's curse over
every rate tried); the winners are compared with GRPO's on those seeds: paired differences
with their interval, paired t-test p-values Holm-corrected over the arms.

**Cost** (2-core CPU): a seed-run of the RL phase takes about 40 s idle (68 s measured
with the cores shared by other jobs) and each (arm, rate) compiles in about 20 s. The
default run, 7 arms x 3 rates x 2 tuning seeds + 7 x 6 evaluation seeds = 84 seed-runs
(56 min), 21 compilations (7 min) and one warm start of 10 seeds (a few minutes), takes
about 65 minutes idle, plus about 2 minutes per grid extension (at most 14). Six
evaluation seeds are the fewest the paired comparisons need.

**Task.** Level 4 of :mod:`rljax.envs.arithmetic` by default: linear equations solved in
``;``-separated steps (``3x+4=19;`` -> ``3x=15;x=5``), where a completion's length can
vary (more or fewer steps, up to ``max_new_tokens``), so the length claim can be measured.
Held out means disjoint: the evaluation prompts are one fixed draw (``eval_seed``, held
fixed across seeds and arms) from the eval split.

**Verdicts** on two published claims:

* Dr. GRPO (Liu et al., 2025, arXiv:2503.20783): GRPO's per-response length normalisation
  lets incorrect responses grow longer during training; Dr. GRPO's does not. Measured as
  the change of the mean length of incorrect completions from the first to the last chunk,
  per seed.
* DAPO (Yu et al., 2025, arXiv:2503.14476): clip-higher keeps the policy's entropy from
  collapsing. Measured as the change of the mean per-token entropy of the sampled
  completions from the first to the last chunk, DAPO vs its symmetric-clip ablation.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pandas as pd
import scipy.stats

from rljax import io, stats
from rljax.config import ConfigError, check_fields, param, with_defaults
from rljax.envs.arithmetic import ArithmeticTask, parse_levels
from rljax.plots import plot_sample_efficiency
from rljax.report import Figure, figures_table, format_number
from rljax.stats.reported import reported_interval
from rljax.sweep import ChunkedSweep
from rljax.training.lm import (
    EQUATION_PROMPT_LENGTH,
    EQUATION_RECIPE,
    LMTrainConfig,
    arithmetic_task,
    check_lm_trainer,
    make_lm_trainer,
)
from rljax.training.lm_config import (
    LMArchitectureConfig,
    LMDecoderConfig,
    LMGRPOConfig,
    config_from,
)
from rljax.training.lm_warm_start import WarmStart, cached_warm_start
from rljax.tune import (
    EqualBudget,
    SeedSplit,
    grid_position,
    seed_split,
    tune_extended,
)

NAME = "lm-variants"
SUPPORTS_TENSORBOARD = True  # its ChunkedSweeps write `rljax run --tensorboard DIR` logs
DESCRIPTION = ("GRPO, Dr. GRPO, DAPO, GSPO, RLOO and REINFORCE++ on linear equations, each "
               "arm's learning rate tuned with an equal budget and compared on fresh seeds")

ARMS: dict[str, dict[str, Any]] = {
    "grpo": {"advantage": "group_relative", "aggregation": "sequence-mean-token-mean"},
    "dr_grpo": {"advantage": "group_mean", "aggregation": "sequence-mean-token-sum-norm"},
    "dapo": {"advantage": "group_relative", "aggregation": "token-mean",
             "clip_epsilon": 0.2, "clip_epsilon_high": 0.28, "dynamic_sampling": True,
             "overlong": True},
    "dapo_sym_clip": {"advantage": "group_relative", "aggregation": "token-mean",
                      "clip_epsilon": 0.2, "clip_epsilon_high": 0.2,
                      "dynamic_sampling": True, "overlong": True},
    "gspo": {"advantage": "group_relative", "aggregation": "sequence-mean-token-mean",
             "sequence_ratio": True, "clip_epsilon": 3e-4, "clip_epsilon_high": 4e-4},
    "rloo": {"advantage": "leave_one_out", "aggregation": "sequence-mean-token-mean"},
    "reinforce_pp": {"advantage": "reinforce_pp", "aggregation": "token-mean"},
}
"""Each arm's settings: :class:`~rljax.training.lm_config.LMGRPOConfig` fields, the clip
(:class:`~rljax.training.lm.LMTrainConfig` fields), and ``overlong`` (DAPO's overlong
shaping: ``L_max = max_new_tokens``, ``L_cache = dapo_overlong_cache``)."""
REFERENCE = "grpo"
CURVES = ("eval_held_out_accuracy", "accuracy", "entropy", "response_length_correct",
          "response_length_incorrect")
TrainerArgs = tuple[LMTrainConfig, LMGRPOConfig, LMDecoderConfig | None, ArithmeticTask]
"""``make_lm_trainer``'s arguments for one arm: config, algorithm, decoder, task."""

_Defaults = with_defaults(LMTrainConfig, **EQUATION_RECIPE, mu=2)


@dataclass(frozen=True)
class Config(_Defaults, LMArchitectureConfig):
    """The study's knobs (``rljax run lm-variants --set name=value``).

    ``seeds`` are the evaluation seeds of every arm's winner; ``tuning_seeds`` (disjoint,
    ids ``0 ..``) pick each arm's learning rate from ``lr_grid``; ``arms`` is a
    comma-separated subset of :data:`ARMS` that must contain ``grpo`` (the reference).
    The trainer's shared :class:`rljax.training.lm.LMTrainConfig` fields (this study's
    defaults: :data:`~rljax.training.lm.EQUATION_RECIPE` with ``mu = 2``, since with one
    inner iteration every ratio is 1 and no clip can act) apply to every arm except where
    the arm's settings name the field; ``learning_rate`` is not read (each arm's rate is
    tuned over ``lr_grid``, extended by up to ``max_grid_extensions`` rates while the
    winner is at an edge), so only its default is accepted. The policy is
    :class:`rljax.training.lm_config.LMArchitectureConfig`'s
    (``architecture="decoder"`` for the Llama-style decoder; ``checkpoint`` a local Hugging
    Face-layout directory to start every seed from, docs/hf_checkpoints.md).
    """

    seeds: int = param(6, "evaluation seeds of every arm's winner", sweep=False, low=2)
    tuning_seeds: int = param(2, "seeds that pick each arm's learning rate (ids 0 ..)",
                              sweep=False, low=2)
    block_size: int = param(2, "seeds per compiled block", sweep=False, low=1)
    base_seed: int = param(0, "the sweeps' base seed", sweep=False, low=0, high=2**31 - 1)
    arms: str = param(",".join(ARMS), "comma-separated arms (ARMS), including grpo",
                      sweep=False)
    lr_grid: str = param("3e-5,1e-4,3e-4", "comma-separated learning rates each arm is "
                         "tuned over", sweep=False)
    max_grid_extensions: int = param(2, "rates added beyond the grid's edge, one at a time, "
                                     "while an arm's tuned rate is its grid's lowest or "
                                     "highest", sweep=False, low=0)
    levels: str = param("4", "comma-separated arithmetic levels (one with a held-out split: "
                        "1, 2 or 4)")
    prompt_length: int = param(EQUATION_PROMPT_LENGTH, "the task's prompt columns (with BOS)",
                               low=1)
    dapo_overlong_cache: int = param(0, "the DAPO arms' overlong L_cache (their L_max is "
                                     "max_new_tokens)", low=0)
    bootstrap_reps: int = param(2000, "bootstrap resamples of the intervals", sweep=False,
                                low=1)

    def arm_names(self) -> tuple[str, ...]:
        """The arms, in order (one-line ``ConfigError`` naming ``arms`` if invalid)."""
        names = tuple(a.strip() for a in self.arms.split(",") if a.strip())
        unknown = [a for a in names if a not in ARMS]
        if unknown or not names or REFERENCE not in names or len(set(names)) != len(names):
            raise ConfigError(f"arms: must be distinct names from {', '.join(ARMS)} including "
                              f"{REFERENCE!r}, got {self.arms!r}")
        return names

    def learning_rates(self) -> tuple[float, ...]:
        """The learning-rate grid, ascending (one-line ``ConfigError`` naming ``lr_grid`` if
        invalid)."""
        try:
            rates = tuple(float(v) for v in self.lr_grid.split(",") if v.strip())
        except ValueError:
            rates = ()
        if (not rates or not all(math.isfinite(r) and r > 0 for r in rates)
                or len(set(rates)) != len(rates)):
            raise ConfigError(f"lr_grid: must be distinct comma-separated positive numbers, "
                              f"got {self.lr_grid!r}")
        return tuple(sorted(rates))

    def level_tuple(self) -> tuple[int, ...]:
        """The levels as ints (``"1,4"`` -> ``(1, 4)``)."""
        return parse_levels(self.levels)

    def task(self) -> ArithmeticTask:
        """The arithmetic task of every arm (its levels, ``prompt_length`` columns,
        solutions of ``max_new_tokens``)."""
        return arithmetic_task(self, self.level_tuple(), self.prompt_length)

    def trainer_args(self, arm: str = REFERENCE, learning_rate: float | None = None
                     ) -> TrainerArgs:
        """``make_lm_trainer``'s arguments for ``arm`` at ``learning_rate`` (default: the
        grid's first): the shared config with the arm's clip and overlong shaping, the
        arm's GRPO config, the decoder config (``None``: TinyLM) and the task."""
        knobs = dict(ARMS[arm])
        shared = {name: knobs.pop(name) for name in list(knobs)
                  if name in _TRAIN_FIELDS}
        if knobs.pop("overlong", False):
            shared.update(overlong_max_length=self.max_new_tokens,
                          overlong_cache=self.dapo_overlong_cache)
        rate = self.learning_rates()[0] if learning_rate is None else learning_rate
        config = dataclasses.replace(config_from(LMTrainConfig, self),
                                     learning_rate=float(rate), **shared)
        return config, LMGRPOConfig(**knobs), self.decoder(), self.task()

    def validate(self) -> None:
        """One-line :class:`ConfigError` naming the first invalid field: each against its
        declaration, the arms, grid and levels, every arm's trainer values, then the
        checkpoint (read now) and the task's held-out levels."""
        check_fields(self)
        default_rate = type(self).__dataclass_fields__["learning_rate"].default
        if self.learning_rate != default_rate:
            raise ConfigError(f"learning_rate: not read by lm-variants (each arm's rate is "
                              f"tuned over lr_grid); set lr_grid instead, got "
                              f"{self.learning_rate!r}")
        names = self.arm_names()
        self.learning_rates()
        if not self.level_tuple():
            raise ConfigError(f"levels: must name at least one level, got {self.levels!r}")
        if self.dapo_overlong_cache > self.max_new_tokens - 1:
            raise ConfigError(f"dapo_overlong_cache: must be an integer in [0, max_new_tokens "
                              f"- 1 = {self.max_new_tokens - 1}], got "
                              f"{self.dapo_overlong_cache!r}")
        for arm in names:
            try:
                check_lm_trainer(*self.trainer_args(arm))
            except ValueError as err:
                raise ConfigError(_study_message(str(err), self)) from None
        try:  # reads a checkpoint, if any, and checks it fits the task
            trainer = make_lm_trainer(*self.trainer_args())
        except ValueError as err:
            raise ConfigError(str(err).splitlines()[0]) from None
        except OSError as err:  # a missing directory or file
            raise ConfigError(f"checkpoint: {err}".splitlines()[0]) from None
        if not trainer.task.held_out_levels:
            raise ConfigError(f"levels: need a level with a held-out split (1, 2 or 4), got "
                              f"{self.levels!r}")


_TRAIN_FIELDS = frozenset(f.name for f in dataclasses.fields(LMTrainConfig))
_PROTOCOL = ("max_grid_extensions", "tuning_seeds", "rl_steps", "prompts_per_step",
             "group_size", "mu", "lr_warmup_steps", "sft_steps", "sft_batch",
             "sft_learning_rate", "max_new_tokens", "dapo_overlong_cache")


def _study_message(message: str, config: Config) -> str:
    """A trainer or task error in the study's field names (the task's
    ``solution_length`` is the study's ``max_new_tokens``)."""
    name = message.split(":", 1)[0]
    if name == "solution_length":
        return "max_new_tokens" + message[len(name):]
    if name not in {f.name for f in dataclasses.fields(config)}:
        return f"levels: must fit this study's LM settings ({message}), got {config.levels!r}"
    return message


# ----------------------------------------------------------------------------- running


def held_out_scores(correct: np.ndarray, held_out: np.ndarray) -> np.ndarray:
    """Per-seed held-out accuracy: ``correct [..., S, P]`` averaged over the held-out
    columns ``held_out [P]`` -> ``[..., S]``."""
    correct = np.asarray(correct, np.float64)
    return correct[..., np.asarray(held_out, bool)].mean(axis=-1)


def _runner(config: Config, arm: str, held_out: np.ndarray, store: dict[str, Any],
            warm_start: WarmStart | None, options: Any = None) -> Any:
    """``run_rates(rates [k], first_seed, num_seeds) -> [k, num_seeds]`` final held-out
    accuracy of ``arm`` at each rate (every trainer reads ``warm_start``); the evaluation
    outputs and every call's seconds are kept in ``store``."""
    sweeps: dict[float, ChunkedSweep] = {}  # one compiled program per rate, reused
    store.update(seconds=0.0, evaluation=[])

    def sweep_for(rate: float) -> ChunkedSweep:
        if rate not in sweeps:
            trainer = make_lm_trainer(*config.trainer_args(arm, rate), warm_start)
            sweeps[rate] = ChunkedSweep(trainer.init, trainer.advance, trainer.finish,
                                        num_chunks=trainer.config.num_chunks,
                                        base_seed=config.base_seed,
                                        block_size=config.block_size)
        return sweeps[rate]

    def run_rates(rates, first_seed, num_seeds):
        phase = "tuning" if first_seed < config.tuning_seeds else "evaluation"
        scores = []
        for rate in np.asarray(rates, np.float64).tolist():
            result = sweep_for(rate).run(int(num_seeds), first_seed=int(first_seed),
                                         desc=f"{NAME}:{arm}:lr={rate:g}:{phase}",
                                         options=options)
            store["seconds"] += result.compile_seconds + result.run_seconds
            final = {k: np.asarray(v) for k, v in result.outputs["final"].items()}
            if phase == "evaluation":
                store["evaluation"].append({
                    "logs": {k: np.asarray(v) for k, v in result.outputs["logs"].items()
                             if k in CURVES or k == "length"}, "final": final})
            scores.append(held_out_scores(final["eval_correct"], held_out))
        return np.stack(scores)

    return run_rates


def compare_arms(runners: dict[str, Any], config: Config, split: SeedSplit, key: Any
                 ) -> tuple[EqualBudget, dict[str, tuple[tuple[float, ...], int]]]:
    """Every arm through :func:`tune_extended` on the same grid and seeds, and each
    winner's paired difference with GRPO's on the evaluation seeds (keys as
    :func:`rljax.tune.equal_budget` folds them). Returns the comparison and each arm's
    (final grid, extensions)."""
    results, grids = {}, {}
    for i, (arm, run_rates) in enumerate(runners.items()):
        results[arm], rates, extensions = tune_extended(
            run_rates, config.learning_rates(), split, key=jax.random.fold_in(key, i),
            max_extensions=config.max_grid_extensions, reps=config.bootstrap_reps)
        grids[arm] = (rates, extensions)
    base = results[REFERENCE].evaluation_scores
    differences = {
        arm: reported_interval("paired_difference", results[arm].evaluation_scores, base,
                               key=jax.random.fold_in(key, len(runners) + i),
                               reps=config.bootstrap_reps)
        for i, arm in enumerate(runners) if arm != REFERENCE}
    budget = {"configs": len(config.learning_rates()), "tuning_seeds": split.tuning_count,
              "evaluation_seeds": split.evaluation_count}
    return EqualBudget(results, differences, budget, REFERENCE), grids


def run(config: Config, out_dir: Path, options: Any = None) -> dict[str, Any]:
    """Tune, evaluate and compare every arm from one cached warm start; writes
    results.parquet, summary.json, report.md and the curves (accuracy.png, entropy.png,
    length_incorrect.png)."""
    start = time.perf_counter()
    config.validate()
    trainer = make_lm_trainer(*config.trainer_args())  # any arm's: they share the warm start
    warm_seconds = time.perf_counter()
    warm_start = cached_warm_start(
        trainer, Path(out_dir) / "warm_start",
        num_seeds=config.tuning_seeds + config.seeds + config.block_size,
        base_seed=config.base_seed, block_size=config.block_size, options=options)
    warm_seconds = time.perf_counter() - warm_seconds
    held_out = np.asarray(trainer.eval_held_out())
    split = seed_split(tuning_seeds=config.tuning_seeds, evaluation_seeds=config.seeds)
    stores: dict[str, dict[str, Any]] = {a: {} for a in config.arm_names()}
    runners = {a: _runner(config, a, held_out, stores[a], warm_start, options) for a in stores}
    keys = iter(jax.random.split(jax.random.key(config.base_seed + 17), 256))
    compared, grids = compare_arms(runners, config, split, next(keys))
    winners = {a: stores[a]["evaluation"][0] for a in stores}
    summary = summarise(config, compared, winners, held_out, keys, grids)
    summary["warm_start"] = {"file": warm_start.path.name, "seconds": warm_seconds,
                             "seeds": warm_start.num_seeds}
    summary["train_seconds"] = {a: stores[a]["seconds"] for a in stores}
    summary["wall_seconds"] = time.perf_counter() - start
    io.write_parquet(out_dir / "results.parquet", _table(winners, config))
    io.write_json(out_dir / "summary.json", summary)
    _plots(winners, config, out_dir, held_out, keys)
    io.atomic_write_text(out_dir / "report.md", report_markdown(summary, config))
    return summary


# ----------------------------------------------------------------------------- statistics


def chunk_means(logs: dict[str, np.ndarray], metric: str) -> np.ndarray:
    """``[S, C]`` per-chunk mean of a per-step metric ``logs[metric] [S, C, K]``, ignoring
    the NaN steps (e.g. a step without an incorrect completion); NaN if a chunk has none."""
    values = np.asarray(logs[metric], np.float64)
    counts = np.sum(np.isfinite(values), axis=-1)
    sums = np.nansum(values, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def change(logs: dict[str, np.ndarray], metric: str) -> np.ndarray:
    """``[S]`` last-chunk minus first-chunk mean of ``metric`` per seed."""
    means = chunk_means(logs, metric)
    return means[:, -1] - means[:, 0]


def _finite_mean(values: np.ndarray) -> float:
    """Mean of the finite entries of ``values [S]`` (NaN when there are none)."""
    values = np.asarray(values, np.float64)
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else float("nan")


def _mean_interval(values: np.ndarray, key: Any, reps: int) -> dict[str, Any]:
    values = np.asarray(values, np.float64)
    finite = values[np.isfinite(values)]
    if finite.size < 2:
        return {"point": float("nan"), "ci": [float("nan"), float("nan")], "n": int(finite.size),
                "note": "fewer than 2 seeds with a value"}
    iv = reported_interval("mean", finite, key=key, reps=reps)
    return {"point": iv.point, "ci": [iv.low, iv.high], "n": int(finite.size), "note": iv.note}


def _paired_interval(x: np.ndarray, y: np.ndarray, key: Any, reps: int) -> dict[str, Any]:
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    both = np.isfinite(x) & np.isfinite(y)
    if both.sum() < 2:
        return {"point": float("nan"), "ci": [float("nan"), float("nan")], "n": int(both.sum()),
                "note": "fewer than 2 seeds with both values"}
    iv = reported_interval("paired_difference", x[both], y[both], key=key, reps=reps)
    return {"point": iv.point, "ci": [iv.low, iv.high], "n": int(both.sum()), "note": iv.note}


def _above(iv: dict[str, Any]) -> bool:
    return bool(np.isfinite(iv["ci"][0]) and iv["ci"][0] > 0)


def _below(iv: dict[str, Any]) -> bool:
    return bool(np.isfinite(iv["ci"][1]) and iv["ci"][1] < 0)


def drgrpo_verdict(grpo_change: dict[str, Any], drgrpo_change: dict[str, Any],
                   difference: dict[str, Any]) -> str:
    """The Dr. GRPO claim's verdict from the incorrect-length changes (each a dict with
    ``ci [2]``, last chunk minus first, per seed).

    ``not observed``: GRPO's incorrect completions did not grow (its interval is not above
    0), so there is no growth for Dr. GRPO to prevent. ``supported``: they grew and by more
    than Dr. GRPO's (the paired GRPO - Dr. GRPO interval is above 0). ``contradicted``:
    they grew but by less than Dr. GRPO's (paired interval below 0). ``not resolved``: the
    paired interval includes 0.
    """
    if not _above(grpo_change):
        return "not observed"
    if _above(difference):
        return "supported"
    return "contradicted" if _below(difference) else "not resolved"


def dapo_verdict(sym_change: dict[str, Any], dapo_change: dict[str, Any],
                 difference: dict[str, Any]) -> str:
    """The DAPO clip-higher claim's verdict from the entropy changes (each a dict with
    ``ci [2]``, last chunk minus first, per seed).

    No collapse to prevent (the symmetric-clip arm's entropy change is not below 0):
    ``no collapse``. Otherwise ``supported`` when clip-higher's final-minus-first entropy
    is above the symmetric arm's (paired interval above 0), ``contradicted`` when below,
    ``not resolved`` when the paired interval includes 0.
    """
    if not _below(sym_change):
        return "no collapse"
    if _above(difference):
        return "supported"
    return "contradicted" if _below(difference) else "not resolved"


def summarise(config: Config, compared: Any, winners: dict[str, Any], held_out: np.ndarray,
              keys: Any, grids: dict[str, tuple[tuple[float, ...], int]]) -> dict[str, Any]:
    """The summary dict: per-arm accuracy (two-way), tuning (final grid, extensions and
    where the tuned rate sits), paired differences with Holm p-values, curves' first/last
    chunk and the two verdicts."""
    reps = config.bootstrap_reps
    arms = list(winners)
    others = [a for a in arms if a != REFERENCE]
    per_arm: dict[str, Any] = {}
    for a in arms:
        result = compared.results[a]
        correct = np.asarray(winners[a]["final"]["eval_correct"], np.float64)[:, held_out]
        start = np.asarray(winners[a]["final"]["start_correct"], np.float64)[:, held_out]
        acc = reported_interval("two_way_mean", correct, key=next(keys), reps=reps)
        logs = winners[a]["logs"]
        rates, extensions = grids[a]
        per_arm[a] = {
            "learning_rate": rates[result.best], "lr_grid": list(rates),
            "grid_extensions": extensions,
            "grid_position": grid_position(rates, rates[result.best]),
            "tuning_means": [float(v) for v in np.mean(result.tuning_scores, axis=1)],
            "tuning_point": result.tuning_point,
            "optimism": float(result.optimism.point),
            "optimism_ci": [float(result.optimism.low), float(result.optimism.high)],
            "accuracy": acc.point, "accuracy_ci": [acc.low, acc.high],
            "accuracy_start": float(start.mean()),
            "evaluation_scores": [float(v) for v in result.evaluation_scores],
            **{f"{m}_first": _finite_mean(chunk_means(logs, m)[:, 0]) for m in CURVES
               if m in logs and m != "eval_held_out_accuracy"},
            **{f"{m}_last": _finite_mean(chunk_means(logs, m)[:, -1]) for m in CURVES
               if m in logs and m != "eval_held_out_accuracy"},
        }
    notes = {"accuracy": acc.note}
    pvalues = {}
    for a in others:
        x = np.asarray(compared.results[a].evaluation_scores, np.float64)
        y = np.asarray(compared.results[REFERENCE].evaluation_scores, np.float64)
        d = compared.differences[a]
        per_arm[a]["difference"] = d.point
        per_arm[a]["difference_ci"] = [d.low, d.high]
        notes["difference"] = d.note
        same = np.allclose(x, y)
        pvalues[a] = 1.0 if same else float(scipy.stats.ttest_rel(x, y).pvalue)
    if others:
        adjusted = stats.holm([pvalues[a] for a in others]).adjusted
        for a, p in zip(others, np.asarray(adjusted).tolist(), strict=True):
            per_arm[a]["p_value"] = pvalues[a]
            per_arm[a]["p_holm"] = float(p)
    claims: dict[str, Any] = {}
    if "dr_grpo" in winners:
        g = change(winners[REFERENCE]["logs"], "response_length_incorrect")
        d = change(winners["dr_grpo"]["logs"], "response_length_incorrect")
        gi, di = _mean_interval(g, next(keys), reps), _mean_interval(d, next(keys), reps)
        diff = _paired_interval(g, d, next(keys), reps)
        claims["dr_grpo_length"] = {
            "claim": "GRPO's per-response length normalisation makes incorrect responses "
                     "grow longer during training; Dr. GRPO does not (Liu et al., 2025)",
            "grpo_change": gi, "dr_grpo_change": di, "grpo_minus_dr_grpo": diff,
            "verdict": drgrpo_verdict(gi, di, diff)}
    if "dapo" in winners and "dapo_sym_clip" in winners:
        s = change(winners["dapo_sym_clip"]["logs"], "entropy")
        d = change(winners["dapo"]["logs"], "entropy")
        si, di = _mean_interval(s, next(keys), reps), _mean_interval(d, next(keys), reps)
        diff = _paired_interval(d, s, next(keys), reps)
        g = change(winners[REFERENCE]["logs"], "entropy")
        claims["dapo_entropy"] = {
            "claim": "clip-higher keeps the policy's entropy from collapsing (Yu et al., 2025)",
            "dapo_sym_clip_change": si, "dapo_change": di, "dapo_minus_sym_clip": diff,
            "grpo_change": _mean_interval(g, next(keys), reps),
            "verdict": dapo_verdict(si, di, diff)}
    return {
        "experiment": NAME,
        "arms": arms,
        "reference": REFERENCE,
        "protocol": {"lr_grid": list(config.learning_rates()), "evaluation_seeds": config.seeds,
                     "selection": "mean held-out accuracy",
                     "levels": list(config.level_tuple()),
                     **{name: getattr(config, name) for name in _PROTOCOL}},
        "eval_set": {"eval_seed": config.eval_seed,
                     "prompts": int(held_out.shape[0]),
                     "held_out_prompts": int(held_out.sum())},
        "per_arm": per_arm,
        "claims": claims,
        "interval_notes": notes,
    }


# ----------------------------------------------------------------------------- outputs


def _table(winners: dict[str, Any], config: Config) -> pd.DataFrame:
    """One row per (arm, evaluation seed, RL step) of every winner: the per-step metrics,
    and the chunk-end held-out evaluation on the chunk's last step."""
    frames = []
    k = config.steps_per_chunk
    for name, out in winners.items():
        logs = out["logs"]
        s, c = np.asarray(logs["eval_held_out_accuracy"]).shape
        frame = {"arm": np.repeat(name, s * c * k),
                 "seed": np.repeat(np.arange(config.tuning_seeds,
                                             config.tuning_seeds + s), c * k),
                 "step": np.tile(np.arange(c * k) + 1, s)}
        for metric, values in logs.items():
            values = np.asarray(values, np.float64)
            if values.ndim == 3:
                frame[metric] = values.reshape(-1)
            else:
                full = np.full((s, c, k), np.nan)
                full[:, :, -1] = values
                frame[metric] = full.reshape(-1)
        frames.append(pd.DataFrame(frame))
    return pd.concat(frames, ignore_index=True)


def _plots(winners: dict[str, Any], config: Config, out_dir: Path, held_out: np.ndarray,
           keys: Any) -> None:
    k = config.steps_per_chunk
    curves = {}
    for name, out in winners.items():
        start = held_out_scores(out["final"]["start_correct"], held_out)
        curves[name] = np.concatenate([start[:, None], out["logs"]["eval_held_out_accuracy"]],
                                      axis=1)[:, None, :]
    steps = np.arange(next(iter(curves.values())).shape[-1]) * k
    bands = stats.sample_efficiency_curves(curves, "mean", key=next(keys),
                                           reps=config.bootstrap_reps)
    io.write_figure(out_dir / "accuracy.png", plot_sample_efficiency(
        steps, bands, xlabel="RL step",
        ylabel="held-out greedy accuracy (mean, 95% CI over seeds)",
        title=f"{NAME}: accuracy"))
    for metric, file, label in (("entropy", "entropy.png", "policy entropy (nats / token)"),
                                ("response_length_incorrect", "length_incorrect.png",
                                 "length of incorrect completions (tokens)"),
                                ("response_length_correct", "length_correct.png",
                                 "length of correct completions (tokens)")):
        per = {}
        for name, out in winners.items():
            if metric not in out["logs"]:
                continue
            means = chunk_means(out["logs"], metric)
            if np.isfinite(means).all():
                per[name] = means[:, None, :]
        if not per:
            continue
        chunk_steps = (np.arange(next(iter(per.values())).shape[-1]) + 1) * k
        bands = stats.sample_efficiency_curves(per, "mean", key=next(keys),
                                               reps=config.bootstrap_reps)
        io.write_figure(out_dir / file, plot_sample_efficiency(
            chunk_steps, bands, xlabel="RL step", ylabel=label, title=f"{NAME}: {metric}"))


def _where(p: dict[str, Any]) -> str:
    """Where an arm's tuned rate sits, after how many extensions (report.md)."""
    n = p["grid_extensions"]
    after = f" after {n} extension{'s' * (n != 1)}" if n else ""
    if p["grid_position"] == "only":
        return "the only rate"
    if p["grid_position"] == "interior":
        return "interior" + after
    return f"at the {p['grid_position']} edge{after}"


def _iv(point: float, ci: list[float]) -> str:
    return f"{format_number(point)} [{format_number(ci[0])}, {format_number(ci[1])}]"


def report_markdown(summary: dict[str, Any], config: Config) -> str:
    """The study's report.md: accuracy table, paired differences, the two verdicts and
    the procedure."""
    per, proto, ev = summary["per_arm"], summary["protocol"], summary["eval_set"]
    figures = [Figure(f"{a}: held-out accuracy", p["accuracy"], *p["accuracy_ci"],
                      f"lr {p['learning_rate']:.3g}; after warm-up "
                      f"{format_number(p['accuracy_start'])}")
               for a, p in per.items()]
    ws = summary.get("warm_start", {})
    lines = [
        f"# {NAME}", "", DESCRIPTION + ".", "",
        f"Levels {proto['levels']}; one warm start per seed, shared bitwise by every arm and "
        f"rate ({proto['sft_steps']} supervised steps of {proto['sft_batch']} problems at a "
        f"constant {proto['sft_learning_rate']:g}, computed once: "
        f"warm_start/{ws.get('file', '?')}); {proto['rl_steps']} RL steps of "
        f"{proto['prompts_per_step']} prompts x {proto['group_size']} completions (mu "
        f"{proto['mu']}, learning-rate warm-up {proto['lr_warmup_steps']} steps) in every "
        f"arm; learning rate of each arm chosen from {proto['lr_grid']}, extended beyond an "
        f"edge winner by up to {proto['max_grid_extensions']} rates, on "
        f"{proto['tuning_seeds']} tuning seeds, winners run on {proto['evaluation_seeds']} "
        f"fresh seeds; {ev['held_out_prompts']} held-out evaluation prompts (one fixed draw, "
        f"eval_seed {ev['eval_seed']}, shared by every seed and arm).", "",
        figures_table(figures), "",
        "## Paired differences against GRPO (evaluation seeds)", "",
        "| arm | tuned lr | difference in held-out accuracy [95 % CI] | p (paired t) | "
        "p (Holm) | optimism of tuning |", "|---|---:|---|---:|---:|---|"]
    for a, p in per.items():
        if a == REFERENCE:
            continue
        lines.append(f"| {a} | {p['learning_rate']:.3g} | "
                     f"{_iv(p['difference'], p['difference_ci'])}"
                     f" | {format_number(p['p_value'])} | {format_number(p['p_holm'])} | "
                     f"{_iv(p['optimism'], p['optimism_ci'])} |")
    lines += ["", "## Tuned learning rates", "",
              "| arm | rates tried (mean tuning accuracy) | tuned lr | where |",
              "|---|---|---:|---|"]
    for a, p in per.items():
        tried = ", ".join(f"{r:.3g} ({format_number(m)})"
                          for r, m in zip(p["lr_grid"], p["tuning_means"], strict=True))
        lines.append(f"| {a} | {tried} | {p['learning_rate']:.3g} | {_where(p)} |")
    edge = [a for a, p in per.items() if p["grid_position"] in ("lowest", "highest")]
    grown = [a for a, p in per.items() if p["grid_extensions"] and a not in edge]
    lines.append("")
    if edge:
        lines.append(f"The tuned rate of {', '.join(edge)} is still at an edge of the rates "
                     "tried: the best rate may lie outside them, so each such figure is the "
                     "arm's best among the rates tried, not its best.")
    if grown:
        lines.append(f"The grid of {', '.join(grown)} was extended until the tuned rate was "
                     f"interior; each extension cost {proto['tuning_seeds']} more tuning "
                     "seed-runs, so the tuning budget is equal on the base grid only.")
    if not edge and not grown:
        lines.append("Every arm's tuned rate is interior to the base grid." if
                     all(p["grid_position"] == "interior" for p in per.values())
                     else "A one-rate grid: no rate was tuned.")
    lines += ["", "## Claims", ""]
    claims = summary["claims"]
    if "dr_grpo_length" in claims:
        c = claims["dr_grpo_length"]
        lines += [
            f"**Dr. GRPO** — {c['claim']}. Change of the mean length of incorrect "
            "completions, last chunk minus first: GRPO "
            f"{_iv(c['grpo_change']['point'], c['grpo_change']['ci'])}, Dr. GRPO "
            f"{_iv(c['dr_grpo_change']['point'], c['dr_grpo_change']['ci'])}, paired "
            f"difference {_iv(c['grpo_minus_dr_grpo']['point'], c['grpo_minus_dr_grpo']['ci'])}"
            f" tokens. Verdict: **{c['verdict']}**.", ""]
    if "dapo_entropy" in claims:
        c = claims["dapo_entropy"]
        lines += [
            f"**DAPO** — {c['claim']}. Change of the mean per-token entropy, last chunk minus "
            "first: symmetric clip "
            f"{_iv(c['dapo_sym_clip_change']['point'], c['dapo_sym_clip_change']['ci'])}, "
            f"clip-higher {_iv(c['dapo_change']['point'], c['dapo_change']['ci'])}, paired "
            f"difference {_iv(c['dapo_minus_sym_clip']['point'], c['dapo_minus_sym_clip']['ci'])}"
            f" nats (GRPO: {_iv(c['grpo_change']['point'], c['grpo_change']['ci'])}). "
            f"Verdict: **{c['verdict']}**.", ""]
    lines += [
        "Verdicts: *supported* / *contradicted* need the paired interval to exclude 0; "
        "*not resolved* means it does not; *not observed* (Dr. GRPO) means GRPO's incorrect "
        "completions did not grow here, *no collapse* (DAPO) that the symmetric-clip arm's "
        "entropy did not fall, so there was nothing for either fix to act on.", "",
        "## Procedure", "",
        "Intervals: per-arm accuracy is two-way (seeds and prompts resampled; "
        f"{summary['interval_notes']['accuracy']}); paired differences are over the "
        f"evaluation seeds ({summary['interval_notes'].get('difference', 'n/a')}); p-values "
        "are paired t-tests over the same seeds, Holm-corrected over the arms. The "
        "evaluation prompts are one draw held fixed across seeds and arms, so the paired "
        "differences are conditional on that draw.", ""]
    return "\n".join(lines)
