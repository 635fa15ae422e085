"""Study ``lm-grpo``: does GRPO teach a small transformer something it did not know?

The task is level 4 of :mod:`rljax.envs.arithmetic`: linear equations solved in
``;``-separated steps (``3x+4=19;`` -> ``3x=15;x=5``). A character-level transformer
(``rljax.policies.TinyLM``, 104k parameters) is warmed up on correct solutions (Adam at a
constant rate, never annealed; :mod:`rljax.training.lm_warm_start` computes it once per
seed and every arm starts from the same cached params, bitwise) and then trained by each
arm. Seed ``i`` uses the same key in every arm (paired).

**Held out means disjoint.** Every level-4 problem is assigned once to the training or
the eval split by a fixed hash (610 eval problems); training draws only the training
side. The evaluation set is one fixed i.i.d. draw (``eval_seed``) of ``eval_prompts``
problems from the eval split, shared by every seed and arm (a draw held fixed across
seeds: it is named in the report). Intervals are two-way (seeds *and* prompts resampled,
:func:`rljax.stats.reported.reported_interval` ``"two_way_mean"``); a gain or an arm
difference is the interval of the paired ``[seed, prompt]`` difference matrix.

Arms (all from the seed's cached warm start):

* ``grpo`` -- GRPO on unlabeled training prompts (token-mean, mu = 1, a linear RL
  learning-rate warm-up).
* ``sft`` -- the **SFT control**: continued supervised training on fresh labelled
  problems for ``sft_steps_per_rl_step x rl_steps`` steps (about GRPO's wall time; both
  wall times and both model-call counts are reported): the ceiling when labels exist.
* ``grpo_bank`` / ``sft_bank`` -- the **limited-label regime**: a warm start on a fixed
  bank of ``limited_labels`` labelled problems per seed, then GRPO on unlabeled
  training prompts vs more supervised training on the same bank.
* ``dapo_updates`` / ``dapo_rollouts`` -- **DAPO's dynamic sampling** in its own form
  (sample ``refill_oversample x P`` prompts, keep the first ``P`` groups with signal):
  at GRPO's number of updates (``refill_oversample x`` its rollouts) and at GRPO's
  number of rollouts (``1 / refill_oversample`` of its updates).

Measurements after training, on the GRPO model against the warm start:

* greedy, sampled (the mean of ``pass_samples`` draws at T = 1) and pass@k, k = 1 ..
  ``pass_samples`` (the unbiased estimator of Chen et al., 2021), on the held-out set;
* **where the signal is**, on ``signal_prompts`` fixed *training* prompts, four
  independent passes per seed: pass A (``signal_samples`` draws) bins each prompt by its
  pass rate ``p``; pass B (a group of ``G``) gives the observed zero-signal share; pass
  D (``signal_samples`` more, start model) the predicted share ``p^G + (1 - p)^G``
  (estimated without bias by ``(C(c, G) + C(n - c, G)) / C(n, G)``) and ``p`` before;
  pass C (``signal_samples``, the GRPO model) ``p`` after. Binning and measuring on the
  same draws would bias both (selection; regression to the mean);
* **test-time search after GRPO**, on ``search_prompts`` held-out prompts: majority@N
  and step-level beam search guided by the task's exact process verifier at equal
  samples (``N = W x E``), against the GRPO model's pass@1 and greedy accuracy;
  best-of-N with the exact outcome verifier is an oracle (pass@N), reported as such;
* memory: XLA's memory analysis of one compiled GRPO step vs one PPO step (a value
  model of the same size).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pandas as pd

from rljax import io, stats
from rljax.config import ConfigError, check_fields, param, with_defaults
from rljax.curriculum.difficulty import pass_at_k_curve, zero_signal_probability
from rljax.envs.arithmetic import parse_levels
from rljax.envs.text_problems import word_problem_task
from rljax.plots import plot_sample_efficiency
from rljax.report import Figure, figures_table, format_number
from rljax.search.lm_search import prm_beam_search, sample_and_vote
from rljax.stats.reported import reported_interval
from rljax.sweep import ChunkedSweep
from rljax.training.lm import (
    EQUATION_PROMPT_LENGTH,
    EQUATION_RECIPE,
    LMTrainConfig,
    LMTrainer,
    arithmetic_task,
    check_lm_trainer,
    make_lm_trainer,
    training_step_memory,
)
from rljax.training.lm_config import (
    LMArchitectureConfig,
    LMGRPOConfig,
    LMPPOConfig,
    LMSFTConfig,
    config_from,
)
from rljax.training.lm_warm_start import WarmStart, cached_warm_start

NAME = "lm-grpo"
SUPPORTS_TENSORBOARD = True  # its ChunkedSweeps write `rljax run --tensorboard DIR` logs
DESCRIPTION = ("GRPO on a small transformer solving linear equations in steps: held-out "
               "gain, SFT control, limited labels, where the signal is, DAPO's refill, "
               "pass@k and search after GRPO")

ARMS = ("grpo", "sft", "grpo_bank", "sft_bank", "dapo_updates", "dapo_rollouts")
BINS = ((0.0, 0.0), (0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0), (1.0, 1.0))
"""Pass-rate bins of the signal analysis: ``p = 0``, four open-closed quarters (the last
open at 1) and ``p = 1``."""
QUICK = dict(seeds=2, block_size=2, sft_steps=60, rl_steps=4, steps_per_chunk=2,
             prompts_per_step=4, group_size=4, eval_prompts=16, limited_labels=32,
             pass_samples=4, signal_prompts=8, signal_samples=8, search_prompts=4,
             search_beam_width=2, search_expansions=2, bootstrap_reps=100)
"""``--set quick=true``: every stage at a size that runs in about a minute (a smoke run,
not a result)."""
TASKS = ("arithmetic", "word-problems")
"""``--set task=``: the arithmetic levels (character tokenizer) or GSM8K-style word problems
(:func:`rljax.envs.text_problems.word_problem_task`, the shipped BPE)."""
WORD_PROBLEMS = dict(levels="1,2", prompt_length=32, max_new_tokens=24)
"""``task=word-problems``: these replace the fields still at their (arithmetic) defaults
(levels 1-2: prompts of up to 32 BPE tokens, solutions of up to 22)."""

_Defaults = with_defaults(LMTrainConfig, **EQUATION_RECIPE)


@dataclass(frozen=True)
class Config(_Defaults, LMGRPOConfig, LMArchitectureConfig):
    """The study's knobs (``rljax run lm-grpo --set name=value``): the trainer's shared
    :class:`~rljax.training.lm.LMTrainConfig` (with
    :data:`~rljax.training.lm.EQUATION_RECIPE`'s defaults, shared with ``lm-variants``),
    GRPO's :class:`~rljax.training.lm_config.LMGRPOConfig` (the DAPO arms add
    ``dynamic_sampling`` and ``oversample = refill_oversample``), the policy
    (:class:`~rljax.training.lm_config.LMArchitectureConfig`) and the study's own fields.
    """

    seeds: int = param(8, "seeds per arm (ids 0 .. seeds - 1)", sweep=False, low=2)
    block_size: int = param(8, "seeds per compiled block", sweep=False, low=1)
    base_seed: int = param(0, "the sweeps' base seed", sweep=False, low=0, high=2**31 - 1)
    levels: str = param("4", "comma-separated arithmetic levels (one with a held-out split)")
    prompt_length: int = param(EQUATION_PROMPT_LENGTH, "the task's prompt columns (with BOS)",
                               low=1)
    arms: str = param(",".join(ARMS), "comma-separated arms (ARMS), including grpo",
                      sweep=False)
    sft_steps_per_rl_step: int = param(4, "the SFT arms' supervised steps per GRPO step "
                                       "(about equal wall time)", sweep=False, low=1)
    limited_labels: int = param(512, "labelled problems per seed in the limited-label arms",
                                sweep=False, low=1)
    refill_oversample: int = param(2, "the DAPO arms' over-sampling factor", sweep=False,
                                   low=2)
    pass_samples: int = param(16, "samples per held-out prompt for sampled accuracy and "
                              "pass@k", sweep=False, low=1)
    signal_prompts: int = param(256, "fixed training prompts of the signal analysis",
                                sweep=False, low=1)
    signal_samples: int = param(32, "samples per pass of the signal analysis", sweep=False,
                                low=2)
    search_prompts: int = param(256, "held-out prompts searched after GRPO", sweep=False,
                                low=1)
    search_beam_width: int = param(4, "beam search's W (majority@N has N = W E)",
                                   sweep=False, low=1)
    search_expansions: int = param(4, "beam search's E continuations per beam per step",
                                   sweep=False, low=1)
    measure_memory: bool = param(True, "XLA's memory analysis of a GRPO and a PPO step",
                                 sweep=False)
    bootstrap_reps: int = param(2000, "bootstrap resamples of the intervals", sweep=False,
                                low=1)
    quick: bool = param(False, "a one-minute smoke run (QUICK's sizes replace the others)",
                        sweep=False)
    task: str = param("arithmetic", "arithmetic, or word-problems (GSM8K-style, the shipped "
                      "BPE; levels are steps 1-3; no test-time search)", sweep=False,
                      choices=TASKS)

    def resolved(self) -> Config:
        """The config that runs: with ``quick``, :data:`QUICK`'s sizes; with
        ``task=word-problems``, :data:`WORD_PROBLEMS` for the fields left at their
        defaults."""
        config = dataclasses.replace(self, **QUICK, quick=False) if self.quick else self
        if config.task == "word-problems":
            defaults = {f.name: f.default for f in dataclasses.fields(Config)}
            config = dataclasses.replace(config, **{k: v for k, v in WORD_PROBLEMS.items()
                                                    if getattr(config, k) == defaults[k]})
        return config

    def arm_tuple(self) -> tuple[str, ...]:
        """The arms to run, in :data:`ARMS` order."""
        return tuple(a for a in ARMS if a in {s.strip() for s in self.arms.split(",")})

    def build_task(self) -> Any:
        """The task of every arm: the arithmetic task, or the word problems (``task``),
        tokenized by the shipped BPE or, with a ``checkpoint`` directory holding a
        ``tokenizer.json``, by the checkpoint's own tokenizer (and chat template)."""
        if self.task == "word-problems":
            own = self.checkpoint and (Path(self.checkpoint).expanduser()
                                       / "tokenizer.json").is_file()
            return word_problem_task(self.checkpoint if own else None,
                                     parse_levels(self.levels),
                                     prompt_length=self.prompt_length)
        return arithmetic_task(self, parse_levels(self.levels), prompt_length=self.prompt_length)

    def trainer_args(self, arm: str = "grpo") -> tuple[LMTrainConfig, Any, Any, Any]:
        """``make_lm_trainer``'s ``(config, algorithm, decoder, task)`` for ``arm``."""
        config = config_from(LMTrainConfig, self)
        grpo = config_from(LMGRPOConfig, self)
        if arm in ("grpo_bank", "sft_bank"):
            config = dataclasses.replace(config, label_bank=self.limited_labels)
        if arm in ("sft", "sft_bank"):
            r = self.sft_steps_per_rl_step
            config = dataclasses.replace(config, rl_steps=r * self.rl_steps,
                                         steps_per_chunk=r * self.steps_per_chunk)
            return config, LMSFTConfig(), self.decoder(), self.build_task()
        if arm.startswith("dapo"):
            # the refill draws its own prompts: no curriculum (which draws exactly P)
            grpo = dataclasses.replace(grpo, dynamic_sampling=True, curriculum="none",
                                       oversample=self.refill_oversample)
            if arm == "dapo_rollouts":
                m = self.refill_oversample
                config = dataclasses.replace(config, rl_steps=self.rl_steps // m,
                                             steps_per_chunk=self.steps_per_chunk // m)
        return config, grpo, self.decoder(), self.build_task()

    def trainer(self, arm: str = "grpo", warm_start: WarmStart | None = None) -> LMTrainer:
        """The arm's trainer (``warm_start``: the cached per-seed warm start)."""
        return make_lm_trainer(*self.trainer_args(arm), warm_start)

    def validate(self) -> None:
        """One-line :class:`ConfigError` naming the first invalid field."""
        check_fields(self)
        cfg = self.resolved()
        arms = {s.strip() for s in cfg.arms.split(",")}
        if "grpo" not in arms or not arms <= set(ARMS):
            raise ConfigError(f"arms: a comma-separated subset of {', '.join(ARMS)} with "
                              f"grpo, got {cfg.arms!r}")
        levels = parse_levels(cfg.levels)
        if not levels:
            raise ConfigError(f"levels: must name at least one level, got {cfg.levels!r}")
        if cfg.rl_steps % cfg.refill_oversample or cfg.steps_per_chunk % cfg.refill_oversample:
            raise ConfigError(f"refill_oversample: must divide rl_steps={cfg.rl_steps} and "
                              f"steps_per_chunk={cfg.steps_per_chunk} (the equal-rollout "
                              f"arm), got {cfg.refill_oversample}")
        try:
            for arm in cfg.arm_tuple():
                check_lm_trainer(*cfg.trainer_args(arm))
        except ValueError as err:
            message = str(err)
            name = message.split(":", 1)[0]
            if name not in {f.name for f in dataclasses.fields(self)}:
                message = f"levels: must fit prompt_length and max_new_tokens ({message})"
            raise ConfigError(message) from None
        if not cfg.build_task().held_out_levels:
            raise ConfigError(f"levels: need a level with a held-out split (1, 2 or 4), got "
                              f"{cfg.levels!r}")
        if cfg.checkpoint:  # read it now: a mismatch is a one-line error, nothing written
            try:
                make_lm_trainer(*cfg.trainer_args())
            except ValueError as err:
                raise ConfigError(str(err).splitlines()[0]) from None
            except OSError as err:  # a missing directory or file
                raise ConfigError(f"checkpoint: {err}".splitlines()[0]) from None


# -- training -------------------------------------------------------------------------

def train_arm(config: Config, arm: str, warm_start: WarmStart, options: Any) -> dict[str, Any]:
    """One arm over all seeds: logs ``[S, C, K]``, finals ``[S, ...]`` with the final
    policy params, and its wall time."""
    trainer = config.trainer(arm, warm_start)

    def finish(state):
        return {**trainer.finish(state), "params": trainer.current_policy(state)}

    sweep = ChunkedSweep(trainer.init, trainer.advance, finish,
                         num_chunks=trainer.config.num_chunks, base_seed=config.base_seed,
                         block_size=config.block_size)
    result = sweep.run(config.seeds, desc=f"{NAME}:{arm}", options=options)
    return {"logs": result.outputs["logs"], "final": result.outputs["final"],
            "seconds": result.compile_seconds + result.run_seconds,
            "compile_seconds": result.compile_seconds, "trainer": trainer}


def sequence_passes(trainer: LMTrainer) -> int:
    """Model calls of one step, counted as sequence passes: a sampled completion 1, a
    forward 1, a forward and backward 3 (GRPO: ``m P G`` sampled, ``P G`` scored for
    pi_old, ``mu P G`` trained; SFT: ``sft_batch`` trained)."""
    cfg = trainer.config
    if trainer.is_sft:
        return 3 * cfg.sft_batch
    pg = cfg.prompts_per_step * cfg.group_size
    return trainer.algorithm.oversample * pg + pg + 3 * cfg.mu * pg


def equal_pass_reading(arm: dict[str, Any], passes: int, key: Any, reps: int) -> dict:
    """The SFT arm's held-out greedy accuracy at the chunk end whose sequence passes are
    closest to ``passes`` (GRPO's total): ``{"steps", "passes", "accuracy", "ci"}`` with a
    seeds-only interval (chunk-end evaluations keep per-seed means, not per-prompt
    correctness)."""
    trainer = arm["trainer"]
    per_step = sequence_passes(trainer)
    k = trainer.config.steps_per_chunk
    curve = np.asarray(arm["logs"]["eval_held_out_accuracy"], np.float64)  # [S, C]
    ends = per_step * k * (np.arange(curve.shape[1]) + 1)
    chunk = int(np.argmin(np.abs(ends - passes)))
    iv = reported_interval("mean", curve[:, chunk], key=key, reps=reps)
    return {"steps": int(k * (chunk + 1)), "passes": int(ends[chunk]),
            "accuracy": float(iv.point), "ci": [float(iv.low), float(iv.high)],
            "note": iv.note}


# -- measurements after training ------------------------------------------------------

def seeds_map(fn, *stacked):
    """``fn`` of one seed's arrays, jitted and vmapped over the leading seed axis."""
    return jax.device_get(jax.jit(jax.vmap(fn))(*stacked))


def bin_index(p: np.ndarray) -> np.ndarray:
    """Each pass rate's :data:`BINS` index."""
    return np.where(p <= 0, 0, np.where(p >= 1, len(BINS) - 1,
                                        np.minimum(np.ceil(p * 4), 4))).astype(int)


def signal_analysis(config: Config, trainer: LMTrainer, start: Any, end: Any) -> dict:
    """Where the signal is (module docstring), per seed, on fixed training prompts."""
    problems = trainer.task.sample(jax.random.key(config.eval_seed + 1), config.signal_prompts)
    n, g = config.signal_samples, config.group_size

    def passes(start_params, end_params, key):
        ka, kb, kc, kd = jax.random.split(key, 4)
        return {"a": trainer.sampled_correct(start_params, problems, ka, n),
                "group": trainer.sampled_correct(start_params, problems, kb, g),
                "start": trainer.sampled_correct(start_params, problems, kd, n),
                "end": trainer.sampled_correct(end_params, problems, kc, n)}

    keys = jax.random.split(jax.random.key(config.base_seed + 101), config.seeds)
    out = seeds_map(passes, start, end, keys)
    c = out["a"].sum(-1).astype(int)  # [S, P]: the pass that bins
    bins = bin_index(c / n)
    group = out["group"]
    zero = (group.max(-1) == group.min(-1)).astype(float)
    # predicted from another pass than the binning one: within a bin chosen on pass A,
    # A's own estimate is biased (its p = 0 bin would predict exactly 1)
    predicted = np.asarray(zero_signal_probability(n, out["start"].sum(-1).astype(int), g))
    delta = out["end"].mean(-1) - out["start"].mean(-1)
    c_end = out["end"].sum(-1).astype(int)
    rows, per_bin, note = [], [], None
    key = jax.random.key(config.base_seed + 102)
    for b, (lo, hi) in enumerate(BINS):
        inside = bins == b
        # each seed's mean change over its prompts in the bin (NaN: none there)
        per_bin.append(np.array([delta[s][inside[s]].mean() if inside[s].any() else np.nan
                                 for s in range(config.seeds)], delta.dtype))
        per_seed = per_bin[-1][np.isfinite(per_bin[-1])]
        interval = None
        if per_seed.size >= 2:
            iv = reported_interval("mean", per_seed, key=jax.random.fold_in(key, b),
                                   reps=config.bootstrap_reps)
            interval, note = [float(iv.low), float(iv.high)], iv.note
        rows.append({"bin": [lo, hi], "share_of_prompts": float(inside.mean()),
                     "zero_signal_observed": _masked_mean(zero, inside),
                     "zero_signal_predicted": _masked_mean(predicted, inside),
                     "delta_p": float(np.mean(per_seed)) if per_seed.size else None,
                     "delta_p_ci": interval, "delta_p_seeds": int(per_seed.size)})
    # the edge claim, paired per seed: the lowest non-zero bin minus the (0.5, 0.75] bin
    low, high = per_bin[1], per_bin[3]
    both = np.isfinite(low) & np.isfinite(high)
    edge = None
    if both.sum() >= 2:
        iv = reported_interval("paired_difference", low[both], high[both],
                               key=jax.random.fold_in(key, 99), reps=config.bootstrap_reps)
        edge = {"point": float(iv.point), "ci": [float(iv.low), float(iv.high)],
                "seeds": int(both.sum()), "note": iv.note}
    return {"by_bin": rows, "delta_p_note": note, "delta_p_low_minus_mid": edge,
            "zero_signal_observed_start": float(zero.mean()),
            "zero_signal_predicted_start": float(predicted.mean()),
            "zero_signal_predicted_end": float(np.mean(zero_signal_probability(n, c_end, g))),
            "pass_rate_start": float(out["start"].mean()),
            "pass_rate_end": float(out["end"].mean())}


def _masked_mean(values: np.ndarray, mask: np.ndarray) -> float | None:
    return float(values[mask].mean()) if mask.any() else None


def search_analysis(config: Config, trainer: LMTrainer, params: Any) -> dict:
    """Majority@N and PRM beam search on the GRPO model, per seed, ``[S, search_prompts]``."""
    problems = jax.tree_util.tree_map(lambda x: x[:config.search_prompts],
                                      trainer.eval_problems())
    w, e = config.search_beam_width, config.search_expansions
    max_steps = 3  # the level's solutions have 2 steps; one spare

    def search(policy_params, key):
        vote_key, beam_key = jax.random.split(key)
        vote = sample_and_vote(trainer.policy, policy_params, trainer.task, problems,
                               vote_key, num_samples=w * e,
                               max_new_tokens=trainer.config.max_new_tokens)
        beam = prm_beam_search(trainer.policy, policy_params, trainer.task, problems,
                               beam_key, beam_width=w, expansions=e,
                               max_new_tokens=trainer.config.max_new_tokens,
                               max_steps=max_steps)
        return {"majority": vote["majority"], "pass_at_1": vote["pass_at_1"],
                "oracle": vote["best_of_n_oracle"], "beam": beam["correct"],
                "beam_samples": beam["samples"], "beam_model_calls": beam["model_calls"]}

    keys = jax.random.split(jax.random.key(config.base_seed + 202), config.seeds)
    return seeds_map(search, params, keys)


def _search_summary(summary: dict, search: dict, config: Config, g1: np.ndarray, ci) -> None:
    """The search measurements' summary entries (``search``: :func:`search_analysis`)."""
    for name in ("majority", "beam", "pass_at_1", "oracle"):
        search[name] = np.asarray(search[name], np.float64)
    columns = np.ones(config.search_prompts, bool)
    summary["search_samples"] = config.search_beam_width * config.search_expansions
    summary["search_pass_at_1"], summary["search_pass_at_1_ci"] = ci(
        search["pass_at_1"], "search_pass_at_1", columns)
    summary["search_majority_at_n"], summary["search_majority_at_n_ci"] = ci(
        search["majority"], "search_majority", columns)
    summary["search_prm_beam"], summary["search_prm_beam_ci"] = ci(
        search["beam"], "search_beam", columns)
    summary["search_oracle_best_of_n"] = float(search["oracle"].mean())
    summary["search_greedy"] = float(g1[:, :config.search_prompts].mean())
    summary["search_majority_minus_pass_at_1"], summary[
        "search_majority_minus_pass_at_1_ci"] = ci(
        search["majority"] - search["pass_at_1"], "search_majority_gain", columns)
    summary["search_beam_minus_majority"], summary["search_beam_minus_majority_ci"] = ci(
        search["beam"] - search["majority"], "search_beam_vs_majority", columns)
    summary["search_beam_samples"] = int(np.max(search["beam_samples"]))
    summary["search_beam_model_calls"] = int(np.max(search["beam_model_calls"]))


# -- the run --------------------------------------------------------------------------

def run(config: Config, out_dir: Path, options: Any = None) -> dict[str, Any]:
    """Run the study; writes results.parquet, summary.json, report.md and figures."""
    start_time = time.perf_counter()
    config = config.resolved()
    out_dir = Path(out_dir)
    cache = out_dir / "warm_start"
    warm: dict[str, WarmStart] = {}
    warm_seconds: dict[str, float] = {}
    arms: dict[str, dict[str, Any]] = {}
    for arm in config.arm_tuple():
        kind = "bank" if arm.endswith("bank") else "full"
        if kind not in warm:
            t0 = time.perf_counter()
            warm[kind] = cached_warm_start(config.trainer(arm), cache, num_seeds=config.seeds,
                                           base_seed=config.base_seed,
                                           block_size=config.block_size, options=options)
            warm_seconds[kind] = time.perf_counter() - t0
        arms[arm] = train_arm(config, arm, warm[kind], options)
    grpo = arms["grpo"]
    trainer = grpo["trainer"]
    start_params = jax.tree_util.tree_map(lambda x: x[:config.seeds], warm["full"].params)
    end_params = grpo["final"]["params"]
    keys = iter(jax.random.split(jax.random.key(config.base_seed + 7), 64))
    notes: dict[str, str] = {}
    held_out = np.asarray(trainer.eval_held_out())

    def ci(matrix, name, columns=held_out):
        iv = reported_interval("two_way_mean", np.asarray(matrix, np.float64)[:, columns],
                               key=next(keys), reps=config.bootstrap_reps)
        notes[name] = iv.note
        return float(iv.point), [float(iv.low), float(iv.high)]

    def greedy(arm, which="eval_correct"):
        return np.asarray(arms[arm]["final"][which], np.float64)

    summary: dict[str, Any] = {"experiment": NAME, "seeds": config.seeds,
                               "eval_prompts": config.eval_prompts,
                               "held_out_prompts": int(held_out.sum())}
    g0, g1 = greedy("grpo", "start_correct"), greedy("grpo")
    summary["heldout_greedy_start"], summary["heldout_greedy_start_ci"] = ci(g0, "start")
    summary["heldout_greedy_grpo"], summary["heldout_greedy_grpo_ci"] = ci(g1, "grpo")
    summary["heldout_gain"], summary["heldout_gain_ci"] = ci(g1 - g0, "gain")

    # sampled accuracy and pass@k on the held-out set, before and after GRPO
    problems = trainer.eval_problems()
    n = config.pass_samples
    sample_keys = jax.random.split(jax.random.key(config.base_seed + 303), config.seeds)
    sampled = {name: seeds_map(lambda p, k: trainer.sampled_correct(p, problems, k, n),
                               params, sample_keys)
               for name, params in (("start", start_params), ("grpo", end_params))}
    curves = {name: pass_at_k_curve(s[:, held_out]) for name, s in sampled.items()}
    for name in ("start", "grpo"):
        summary[f"pass_at_k_{name}"] = curves[name].mean(axis=(0, 1)).tolist()
        point, interval = ci(sampled[name].mean(-1), f"sampled_{name}")
        summary[f"heldout_sampled_{name}"], summary[f"heldout_sampled_{name}_ci"] = (
            point, interval)
    all_columns = np.ones(int(held_out.sum()), bool)
    summary["sampled_gain"], summary["sampled_gain_ci"] = ci(
        sampled["grpo"].mean(-1)[:, held_out] - sampled["start"].mean(-1)[:, held_out],
        "sampled_gain", all_columns)
    summary["pass_at_max_k_change"], summary["pass_at_max_k_change_ci"] = ci(
        curves["grpo"][..., -1] - curves["start"][..., -1], "pass_at_max_k_change",
        all_columns)

    # the other arms, paired with GRPO (same seeds, same prompts)
    if "sft" in arms:
        s1 = greedy("sft")
        summary["sft_control_heldout"], summary["sft_control_heldout_ci"] = ci(s1, "sft")
        summary["sft_control_minus_grpo"], summary["sft_control_minus_grpo_ci"] = ci(
            s1 - g1, "sft_minus_grpo")
        summary["sft_control_at_equal_passes"] = equal_pass_reading(
            arms["sft"], sequence_passes(trainer) * trainer.config.rl_steps, next(keys),
            config.bootstrap_reps)
    if "grpo_bank" in arms and "sft_bank" in arms:
        b0 = greedy("grpo_bank", "start_correct")
        bg, bs = greedy("grpo_bank"), greedy("sft_bank")
        summary["limited_label_start"], summary["limited_label_start_ci"] = ci(b0, "bank_start")
        summary["limited_label_gain_grpo"], summary["limited_label_gain_grpo_ci"] = ci(
            bg - b0, "bank_gain_grpo")
        summary["limited_label_gain_sft"], summary["limited_label_gain_sft_ci"] = ci(
            bs - b0, "bank_gain_sft")
        summary["limited_label_grpo_minus_sft"], summary["limited_label_grpo_minus_sft_ci"] = (
            ci(bg - bs, "bank_grpo_minus_sft"))
    for arm in ("dapo_updates", "dapo_rollouts"):
        if arm in arms:
            d = greedy(arm)
            summary[f"{arm}_gain"], summary[f"{arm}_gain_ci"] = ci(d - g0, f"{arm}_gain")
            summary[f"{arm}_minus_grpo"], summary[f"{arm}_minus_grpo_ci"] = ci(
                d - g1, f"{arm}_minus_grpo")
            summary[f"{arm}_kept_group_fraction"] = float(
                np.mean(arms[arm]["logs"]["kept_group_fraction"]))

    # compute: wall time, rollouts and model calls per arm
    summary["arms"] = {
        name: {"seconds": arm["seconds"], "compile_seconds": arm["compile_seconds"],
               "steps": arm["trainer"].config.rl_steps,
               "rollouts_per_seed": int(np.sum(arm["logs"]["rollouts"]) // config.seeds),
               "sequence_passes_per_seed": sequence_passes(arm["trainer"])
               * arm["trainer"].config.rl_steps,
               "heldout_greedy": float(greedy(name)[:, held_out].mean())}
        for name, arm in arms.items()}
    summary["warm_start_seconds"] = warm_seconds
    summary["warm_start_files"] = {k: w.path.name for k, w in warm.items()}

    # where the signal is, and the per-chunk zero-signal share GRPO logged
    summary["signal"] = signal_analysis(config, trainer, start_params, end_params)
    summary["signal_fraction_by_bin"] = summary["signal"]["by_bin"]
    zero_logged = np.asarray(grpo["logs"]["zero_signal_fraction"]).mean(axis=(0, 2))
    summary["zero_signal_logged_by_chunk"] = zero_logged.tolist()

    # test-time search after GRPO (equal samples N = W E); its answer key and step
    # verifier read the arithmetic task's characters, so the word problems have none
    if config.task == "arithmetic":
        _search_summary(summary, search_analysis(config, trainer, end_params), config, g1, ci)

    memory = {name: (training_step_memory(make_lm_trainer(
        config_from(LMTrainConfig, config), algo, config.decoder(), config.build_task()))
        if config.measure_memory else None)
        for name, algo in (("grpo", config_from(LMGRPOConfig, config)),
                           ("ppo", LMPPOConfig()))}
    summary["memory"] = memory
    summary["memory_ratio"] = (memory["grpo"]["total_bytes"] / memory["ppo"]["total_bytes"]
                               if config.measure_memory else None)
    summary["nan_rewards"] = int(sum(np.sum(a["logs"].get("nan_rewards", 0))
                                     for a in arms.values()))
    summary["interval_notes"] = notes
    summary["wall_seconds"] = time.perf_counter() - start_time

    io.write_parquet(out_dir / "results.parquet", _table(arms, config))
    io.write_json(out_dir / "summary.json", summary)
    _plots(arms, config, out_dir, held_out, curves)
    io.atomic_write_text(out_dir / "report.md", report_markdown(summary, config))
    return summary


def _table(arms: dict[str, Any], config: Config) -> pd.DataFrame:
    """One row per (arm, seed, step): the step's metrics and the chunk-end evaluation."""
    frames = []
    for name, arm in arms.items():
        logs = {k: np.asarray(v) for k, v in arm["logs"].items()}
        s, c = logs["eval_accuracy"].shape
        k = arm["trainer"].config.steps_per_chunk
        frame = {"arm": np.repeat(name, s * c * k), "seed": np.repeat(np.arange(s), c * k),
                 "step": np.tile(np.arange(c * k) + 1, s)}
        for metric, values in logs.items():
            if values.ndim == 3:
                frame[metric] = values.reshape(-1).astype(np.float64)
            else:
                full = np.full((s, c, k), np.nan)
                full[:, :, -1] = values
                frame[metric] = full.reshape(-1)
        frames.append(pd.DataFrame(frame))
    return pd.concat(frames, ignore_index=True)


def _plots(arms, config, out_dir, held_out, curves) -> None:
    key = jax.random.key(config.base_seed + 11)
    bands = {}
    for name, arm in arms.items():
        start = np.asarray(arm["final"]["start_correct"])[:, held_out].mean(axis=1)
        scores = np.concatenate([start[:, None], np.asarray(arm["logs"]["eval_held_out_accuracy"])],
                                axis=1)
        bands[name] = scores[:, None, :]
    # x axis: the fraction of the arm's run (arms differ in steps)
    chunks = next(iter(bands.values())).shape[-1]
    x = np.linspace(0, 1, chunks)
    io.write_figure(out_dir / "accuracy.png", plot_sample_efficiency(
        x, stats.sample_efficiency_curves(bands, "mean", key=key, reps=config.bootstrap_reps),
        xlabel="fraction of the arm's run", ylabel="held-out greedy accuracy (95% CI, seeds)",
        title="lm-grpo: held-out accuracy per arm"))
    ks = np.arange(1, config.pass_samples + 1)
    pass_bands = {name: c.mean(axis=1)[:, None, :] for name, c in curves.items()}
    io.write_figure(out_dir / "pass_at_k.png", plot_sample_efficiency(
        ks, stats.sample_efficiency_curves(pass_bands, "mean", key=key,
                                           reps=config.bootstrap_reps),
        xlabel="k", ylabel="held-out pass@k (95% CI, seeds)",
        title="lm-grpo: pass@k before and after GRPO"))


# -- the report -----------------------------------------------------------------------

def _iv(summary: dict[str, Any], name: str) -> str:
    low, high = summary[f"{name}_ci"]
    return f"{summary[name]:+.3f} [{low:+.3f}, {high:+.3f}]"


def _level(summary: dict[str, Any], name: str) -> str:
    low, high = summary[f"{name}_ci"]
    return f"{summary[name]:.3f} [{low:.3f}, {high:.3f}]"


def _excludes_zero(summary: dict[str, Any], name: str) -> str:
    low, high = summary[f"{name}_ci"]
    return ("excludes 0" if low > 0 or high < 0 else "does NOT exclude 0")


def report_markdown(summary: dict[str, Any], config: Config) -> str:
    """The study's report.md: figures, readings (each from the numbers) and procedure."""
    s = summary
    arms = s["arms"]
    figures = [
        Figure("held-out greedy, warm start", s["heldout_greedy_start"],
               *s["heldout_greedy_start_ci"], f"{config.sft_steps} supervised steps"),
        Figure("held-out greedy, after GRPO", s["heldout_greedy_grpo"],
               *s["heldout_greedy_grpo_ci"], f"{config.rl_steps} GRPO steps"),
        Figure("GRPO gain (greedy)", s["heldout_gain"], *s["heldout_gain_ci"],
               "paired per seed and prompt"),
        Figure("GRPO gain (sampled, T = 1)", s["sampled_gain"], *s["sampled_gain_ci"],
               f"mean of {config.pass_samples} draws"),
        Figure(f"pass@{config.pass_samples} change", s["pass_at_max_k_change"],
               *s["pass_at_max_k_change_ci"], "coverage after - before"),
    ]
    if "sft_control_heldout" in s:
        figures.append(Figure("SFT control (labels exist)", s["sft_control_heldout"],
                              *s["sft_control_heldout_ci"], "continued supervised training"))
    if "limited_label_gain_grpo" in s:
        figures += [
            Figure("limited labels: GRPO gain", s["limited_label_gain_grpo"],
                   *s["limited_label_gain_grpo_ci"], f"bank of {config.limited_labels}"),
            Figure("limited labels: SFT-on-bank gain", s["limited_label_gain_sft"],
                   *s["limited_label_gain_sft_ci"], "same bank"),
            Figure("limited labels: GRPO - SFT", s["limited_label_grpo_minus_sft"],
                   *s["limited_label_grpo_minus_sft_ci"], "paired")]
    for arm, what in (("dapo_updates", "equal updates"), ("dapo_rollouts", "equal rollouts")):
        if f"{arm}_minus_grpo" in s:
            figures.append(Figure(f"DAPO refill - GRPO ({what})", s[f"{arm}_minus_grpo"],
                                  *s[f"{arm}_minus_grpo_ci"], "paired"))
    searched = "search_majority_at_n" in s  # not for the word problems
    figures += [
        Figure(f"search: majority@{s['search_samples']}", s["search_majority_at_n"],
               *s["search_majority_at_n_ci"], "GRPO model"),
        Figure(f"search: PRM beam ({config.search_beam_width} x "
               f"{config.search_expansions})", s["search_prm_beam"],
               *s["search_prm_beam_ci"], "exact step verifier"),
        Figure("search: pass@1 (same prompts)", s["search_pass_at_1"],
               *s["search_pass_at_1_ci"], "no search"),
    ] if searched else []
    gain_reading = (f"GRPO's held-out greedy gain is {_iv(s, 'heldout_gain')}: the interval "
                    f"{_excludes_zero(s, 'heldout_gain')}.")
    task = ("GSM8K-style word problems (BPE)" if config.task == "word-problems"
            else "linear equations in steps")
    lora = f", LoRA rank {config.lora_rank} ({config.lora_targets})" if config.lora_rank else ""
    lines = [f"# {NAME}", "", DESCRIPTION.replace("linear equations in steps", task) + ".", "",
             f"{config.seeds} seeds; policy {config.architecture}{lora}; level(s) "
             f"{config.levels}; warm start {config.sft_steps} "
             f"supervised steps of {config.sft_batch} at a constant {config.sft_learning_rate:g}; "
             f"{config.rl_steps} GRPO steps of {config.prompts_per_step} prompts x "
             f"{config.group_size} completions, lr {config.learning_rate:g} with a "
             f"{config.lr_warmup_steps}-step linear warm-up, mu {config.mu}, "
             f"{config.aggregation}; {s['held_out_prompts']} held-out prompts, one fixed "
             f"draw (eval_seed {config.eval_seed}) held fixed across seeds and arms.", "",
             figures_table(figures), "", "## Readings", "", gain_reading, ""]
    if "sft_control_heldout" in s:
        a = arms
        lines += [
            f"With labels, continued supervised training for {a['sft']['steps']} steps "
            f"({a['sft']['seconds']:.0f} s for all seeds, {a['sft']['sequence_passes_per_seed']:,} "
            f"sequence passes per seed) reaches {_level(s, 'sft_control_heldout')} against "
            f"GRPO's {_level(s, 'heldout_greedy_grpo')} ({a['grpo']['seconds']:.0f} s, "
            f"{a['grpo']['sequence_passes_per_seed']:,} passes): SFT - GRPO "
            f"{_iv(s, 'sft_control_minus_grpo')}. At GRPO's number of sequence passes "
            f"({s['sft_control_at_equal_passes']['steps']} SFT steps, "
            f"{s['sft_control_at_equal_passes']['passes']:,} passes) it is at "
            f"{s['sft_control_at_equal_passes']['accuracy']:.3f} "
            f"[{s['sft_control_at_equal_passes']['ci'][0]:.3f}, "
            f"{s['sft_control_at_equal_passes']['ci'][1]:.3f}] (seeds-only interval). This "
            "is the ceiling when correct solutions exist, not a competitor for the regime RL "
            "is for.", ""]
    if "limited_label_gain_grpo" in s:
        lines += [
            f"Limited labels ({config.limited_labels} per seed): from the bank's warm start "
            f"{_level(s, 'limited_label_start')}, GRPO on unlabeled prompts gains "
            f"{_iv(s, 'limited_label_gain_grpo')} and more SFT on the bank "
            f"{_iv(s, 'limited_label_gain_sft')}; the paired difference GRPO - SFT is "
            f"{_iv(s, 'limited_label_grpo_minus_sft')} "
            f"({_excludes_zero(s, 'limited_label_grpo_minus_sft')}).", ""]
    sig = s["signal"]
    lines += ["Where the signal is (training prompts, start model): zero-signal share "
              f"observed {sig['zero_signal_observed_start']:.3f}, predicted from p "
              f"{sig['zero_signal_predicted_start']:.3f}; GRPO logged "
              f"{s['zero_signal_logged_by_chunk'][0]:.3f} in its first chunk and "
              f"{s['zero_signal_logged_by_chunk'][-1]:.3f} in its last (predicted at the end "
              f"{sig['zero_signal_predicted_end']:.3f}).", "",
              "| p bin (start) | prompts | zero-signal observed | predicted | Δp after GRPO "
              "[95 % CI, seeds] |", "|---|---:|---:|---:|---:|"]
    for row in s["signal_fraction_by_bin"]:
        lo, hi = row["bin"]
        label = f"p = {lo:g}" if lo == hi else f"({lo:g}, {hi:g}{')' if hi == 1 else ']'}"
        change = format_number(row["delta_p"])
        if row.get("delta_p_ci"):
            change += f" [{row['delta_p_ci'][0]:+.3f}, {row['delta_p_ci'][1]:+.3f}]"
        lines.append(f"| {label} | {row['share_of_prompts']:.3f} | "
                     f"{format_number(row['zero_signal_observed'])} | "
                     f"{format_number(row['zero_signal_predicted'])} | {change} |")
    edge = sig.get("delta_p_low_minus_mid")
    if edge:
        lines += ["", f"Δp of the (0, 0.25] bin minus the (0.5, 0.75] bin, paired per seed: "
                  f"{edge['point']:+.3f} [{edge['ci'][0]:+.3f}, {edge['ci'][1]:+.3f}] "
                  f"({edge['seeds']} seeds) -- "
                  + ("learning concentrates on the prompts the model solves rarely." if
                     edge["ci"][0] > 0 else "no concentration on the hard end is shown.")]
    lines.append("")
    for arm, what in (("dapo_updates", "at equal updates"), ("dapo_rollouts",
                                                            "at equal rollouts")):
        if f"{arm}_minus_grpo" in s:
            lines.append(f"DAPO's refill {what} ({arms[arm]['rollouts_per_seed']:,} rollouts "
                         f"per seed vs GRPO's {arms['grpo']['rollouts_per_seed']:,}): minus GRPO "
                         f"{_iv(s, f'{arm}_minus_grpo')}; kept groups "
                         f"{s[f'{arm}_kept_group_fraction']:.3f}.")
    change = s["pass_at_max_k_change"]
    lines += ["", f"pass@k before: {', '.join(f'{v:.3f}' for v in s['pass_at_k_start'])}; "
              f"after: {', '.join(f'{v:.3f}' for v in s['pass_at_k_grpo'])}. pass@"
              f"{config.pass_samples} changes by {_iv(s, 'pass_at_max_k_change')}: "
              + ("coverage narrows" if s["pass_at_max_k_change_ci"][1] < 0 else
                 "coverage widens" if s["pass_at_max_k_change_ci"][0] > 0 else
                 "no change in coverage is shown") + (
                  f" (point {change:+.3f}).")]
    lines += [] if not searched else [
              "", f"Search after GRPO at {s['search_samples']} samples per problem: "
              f"majority {_level(s, 'search_majority_at_n')}, PRM beam "
              f"{_level(s, 'search_prm_beam')}, against pass@1 {_level(s, 'search_pass_at_1')} "
              f"and greedy {s['search_greedy']:.3f}; majority - pass@1 "
              f"{_iv(s, 'search_majority_minus_pass_at_1')}, beam - majority "
              f"{_iv(s, 'search_beam_minus_majority')}. Best-of-{s['search_samples']} with the "
              f"exact outcome verifier is an oracle: {s['search_oracle_best_of_n']:.3f}."]
    if s["memory_ratio"] is not None:
        lines += ["", f"Memory of one step (XLA, one seed): GRPO / PPO = "
                  f"{s['memory_ratio']:.3f} ({s['memory']['grpo']['total_bytes']:,} vs "
                  f"{s['memory']['ppo']['total_bytes']:,} bytes)."]
    lines += ["", "## Cost", "", "| arm | steps | seconds (all seeds) | rollouts / seed | "
              "sequence passes / seed | held-out greedy |", "|---|---:|---:|---:|---:|---:|"]
    for name, a in arms.items():
        lines.append(f"| {name} | {a['steps']} | {a['seconds']:.0f} | {a['rollouts_per_seed']:,} "
                     f"| {a['sequence_passes_per_seed']:,} | {a['heldout_greedy']:.3f} |")
    lines += ["", "Warm starts (computed once, cached): " + ", ".join(
        f"{k} {v:.0f} s" for k, v in s["warm_start_seconds"].items()) + ". Sequence passes: "
        "a sampled completion 1, a forward 1, a forward and backward 3.", "",
        "## Procedure", "",
        "Held out means disjoint (a fixed hash split of the level's problems). Intervals are "
        "two-way over seeds and prompts; differences are paired per seed and prompt. "
        f"Method and coverage: {s['interval_notes']['gain']}", "",
        "The signal analysis uses one fixed draw of training prompts (seed eval_seed + 1), "
        "held fixed across seeds; each seed estimates p from one pass, observes a group of "
        "G from another, and measures p before and after GRPO on two more.", ""]
    return "\n".join(lines)
