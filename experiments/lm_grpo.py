"""Study ``lm-grpo``: GRPO teaches a tiny transformer arithmetic it half knows.

A character-level decoder-only transformer (``rljax.policies.TinyLM``) is warmed up
with a short supervised phase on correct solutions -- short enough that it stays below
50 % greedy accuracy on held-out prompts -- and then trained with GRPO on the accuracy
reward program (the final answer is exactly right). Every seed trains its own model in
one vmapped program (``rljax.sweep.ChunkedSweep``; evaluation every chunk).

Held out means disjoint. Training draws only from the task's training split; the
evaluation set is one fixed draw (``eval_seed``) of ``eval_prompts`` problems from the
disjoint eval split (``rljax.envs.arithmetic``: a fixed hash of each problem), shared by
all seeds and arms, the levels in turn. Level 0 (100 problems) is too small to split, so
its evaluation prompts are training problems: its accuracy is reported separately as
*training* accuracy; the headline accuracies are over the held-out prompts only
(levels 1, 2, 4 can be split). Intervals are two-way: each (seed, prompt) correctness is
kept, and :func:`rljax.stats.reported.reported_interval` (``"two_way_mean"``) resamples
seeds *and* prompts, so the evaluation sample's own error is in the interval; a gain is
the two-way interval of the (after - before) matrix on the same prompts.

Beside it, on the same seeds and warm-up:

* **format only** -- GRPO on the format reward alone (the answer is a well-formed
  integer): the reward-hacking check; accuracy should not rise.
* **PPO** -- the same number of completions per step (``P * G`` prompts, one completion
  each) with a value model of the same size, GAE over tokens.

Memory: XLA's memory analysis of the compiled single-seed training step
(``temp + arguments + outputs - aliased``; the arguments hold parameters, the frozen
reference and Adam's moments), GRPO vs PPO at the same policy size.
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
from rljax.envs.arithmetic import ArithmeticTask, parse_levels
from rljax.plots import plot_sample_efficiency
from rljax.report import Figure, figures_table, format_number
from rljax.stats.reported import reported_interval
from rljax.sweep import ChunkedSweep
from rljax.training.lm import (
    LMTrainConfig,
    arithmetic_task,
    check_lm_trainer,
    make_lm_trainer,
    training_step_memory,
)
from rljax.training.lm_config import (
    LMArchitectureConfig,
    LMDecoderConfig,
    LMGRPOConfig,
    LMPPOConfig,
    config_from,
)

NAME = "lm-grpo"
SUPPORTS_TENSORBOARD = True  # its ChunkedSweep writes `rljax run --tensorboard DIR` logs
DESCRIPTION = ("Tiny transformer on 1-digit addition and 2-digit addition/subtraction: GRPO vs "
               "format-only reward "
               "vs PPO, and the memory of GRPO vs PPO steps")

RUNS = ("grpo", "format_only", "ppo")

TrainerArgs = tuple[LMTrainConfig, LMGRPOConfig | LMPPOConfig, LMDecoderConfig | None,
                    ArithmeticTask]
"""``make_lm_trainer``'s arguments for one arm: config, algorithm, decoder, task."""


@dataclass(frozen=True)
class Config(with_defaults(LMTrainConfig, eval_prompts=512), LMGRPOConfig,
             LMArchitectureConfig):
    """The study's knobs (``rljax run lm-grpo --set name=value``): the trainer's shared
    :class:`~rljax.training.lm.LMTrainConfig` (with 512 evaluation prompts), GRPO's
    :class:`~rljax.training.lm_config.LMGRPOConfig` (the grpo and format-only arms; the
    PPO arm runs :class:`~rljax.training.lm_config.LMPPOConfig`'s defaults), the policy
    (:class:`~rljax.training.lm_config.LMArchitectureConfig`), the arithmetic levels and
    the run's shape. The format-only arm sets ``reward_accuracy = 0, reward_format = 1``.
    """

    seeds: int = param(16, "seeds per arm (ids 0 .. seeds - 1)", sweep=False, low=2)
    block_size: int = param(16, "seeds per compiled block", sweep=False, low=1)
    base_seed: int = param(0, "the sweeps' base seed", sweep=False, low=0, high=2**31 - 1)
    levels: str = param("0,1", "comma-separated arithmetic levels to draw prompts from "
                        "(rljax.envs.arithmetic; prompts of 8 columns)")
    run_format_only: bool = param(True, "also run GRPO on the format reward alone",
                                  sweep=False)
    run_ppo: bool = param(True, "also run PPO on the same completions per step", sweep=False)
    measure_memory: bool = param(True, "XLA's memory analysis of a GRPO and a PPO step",
                                 sweep=False)
    bootstrap_reps: int = param(2000, "bootstrap resamples of the intervals", sweep=False,
                                low=1)

    def level_tuple(self) -> tuple[int, ...]:
        """The levels as ints (``"0,1"`` -> ``(0, 1)``)."""
        return parse_levels(self.levels)

    def task(self) -> ArithmeticTask:
        """The arithmetic task of every arm (its levels; 8 prompt columns, solutions of
        ``max_new_tokens``)."""
        return arithmetic_task(self, self.level_tuple())

    def trainer_args(self, run: str = "grpo") -> TrainerArgs:
        """``make_lm_trainer``'s arguments for arm ``run``: the shared config (format-only:
        ``reward_accuracy = 0, reward_format = 1``), GRPO's config (PPO's defaults for
        ``"ppo"``), the decoder config (``None``: TinyLM) and the task."""
        config = config_from(LMTrainConfig, self)
        if run == "format_only":
            config = dataclasses.replace(config, reward_accuracy=0.0, reward_format=1.0)
        algorithm = LMPPOConfig() if run == "ppo" else config_from(LMGRPOConfig, self)
        return config, algorithm, self.decoder(), self.task()

    def validate(self) -> None:
        """One-line :class:`ConfigError` naming the first invalid field: each against its
        declaration, then every arm's trainer values, then the checkpoint (read now)."""
        check_fields(self)
        if not self.level_tuple():
            raise ConfigError(f"levels: must name at least one level, got {self.levels!r}")
        try:
            for run in self.runs():
                check_lm_trainer(*self.trainer_args(run))
        except ValueError as err:
            message = str(err)
            name = message.split(":", 1)[0]
            if name == "solution_length":  # the task's solution columns: max_new_tokens
                message = "max_new_tokens" + message[len(name):]
            elif name not in {f.name for f in dataclasses.fields(self)}:
                # a fixed task setting (prompt_length) the levels outgrow
                message = (f"levels: must fit this study's fixed LM settings ({message}), "
                           f"got {self.levels!r}")
            raise ConfigError(message) from None
        if self.checkpoint:  # read it now: a mismatch is a one-line error, nothing written
            try:
                make_lm_trainer(*self.trainer_args())
            except ValueError as err:
                raise ConfigError(str(err).splitlines()[0]) from None
            except OSError as err:  # a missing directory or file
                raise ConfigError(f"checkpoint: {err}".splitlines()[0]) from None

    def runs(self) -> tuple[str, ...]:
        """The arms this config runs, in order."""
        return tuple(r for r in RUNS if r == "grpo" or (r == "format_only" and self.run_format_only)
                     or (r == "ppo" and self.run_ppo))


def train_run(config: Config, run: str, options: Any = None) -> dict[str, Any]:
    """One arm over all seeds: ``{"logs": {...[S, C, K]}, "final": {...[S]}, timing}``."""
    trainer = make_lm_trainer(*config.trainer_args(run))
    sweep = ChunkedSweep(trainer.init, trainer.advance, trainer.finish,
                         num_chunks=trainer.config.num_chunks, base_seed=config.base_seed,
                         block_size=config.block_size)
    result = sweep.run(config.seeds, desc=f"{NAME}:{run}", options=options)
    return {"logs": result.outputs["logs"], "final": result.outputs["final"],
            "first_chunk_seconds": result.compile_seconds, "run_seconds": result.run_seconds}


@dataclass(frozen=True)
class EvalSet:
    """What the evaluation prompts are (one fixed draw, the same for every seed and arm).

    Attributes:
      levels: int ``[P]`` each prompt's level.
      held_out: bool ``[P]`` the prompt is on the eval side of a split level.
      held_out_levels, training_only_levels: the study's levels that are / are not split.
      eval_split_sizes: ``{level: distinct problems on its eval side}`` (split levels).
    """

    levels: np.ndarray
    held_out: np.ndarray
    held_out_levels: tuple[int, ...]
    training_only_levels: tuple[int, ...]
    eval_split_sizes: dict[int, int]


def eval_set(config: Config) -> EvalSet:
    """The evaluation set of ``config`` (the grpo arm's; every arm shares it)."""
    trainer = make_lm_trainer(*config.trainer_args())
    problems = jax.device_get(trainer.eval_problems())
    task = trainer.task
    return EvalSet(levels=np.asarray(problems.level),
                   held_out=np.asarray(trainer.eval_held_out()),
                   held_out_levels=task.held_out_levels,
                   training_only_levels=task.training_only_levels,
                   eval_split_sizes={lv: task.split_size(lv, "eval")
                                     for lv in task.held_out_levels})


def run(config: Config, out_dir: Path, options: Any = None) -> dict[str, Any]:
    """Run the study; writes results.parquet, summary.json, report.md and figures."""
    start = time.perf_counter()
    arms = {name: train_run(config, name, options) for name in config.runs()}
    memory = {name: (training_step_memory(make_lm_trainer(*config.trainer_args(name)))
                     if config.measure_memory else None) for name in ("grpo", "ppo")}
    keys = iter(jax.random.split(jax.random.key(config.base_seed + 7), 32))
    evals = eval_set(config)
    # Headline columns: the held-out prompts (all prompts, flagged, if no level is split).
    any_held_out = bool(evals.held_out.any())
    headline = evals.held_out if any_held_out else np.ones_like(evals.held_out)
    training = ~evals.held_out
    notes: dict[str, str] = {}

    def ci(matrix, columns, name):
        """Two-way interval of the mean of ``matrix [S, P]`` over ``columns``."""
        iv = reported_interval(
            "two_way_mean", np.asarray(matrix, np.float64)[:, columns], key=next(keys),
            reps=config.bootstrap_reps)
        notes[name] = iv.note
        return float(iv.point), [float(iv.low), float(iv.high)]

    grpo = arms["grpo"]
    start_correct = np.asarray(grpo["final"]["start_correct"])
    final_correct = np.asarray(grpo["final"]["eval_correct"])
    start_point, start_ci = ci(start_correct, headline, "accuracy_start")
    acc_point, acc_ci = ci(final_correct, headline, "accuracy_grpo")
    gain, gain_ci = ci(final_correct - start_correct, headline, "accuracy_gain")
    logs = grpo["logs"]
    summary: dict[str, Any] = {
        "experiment": NAME,
        "seeds": config.seeds,
        "accuracy_is_held_out": any_held_out,
        "accuracy_start": start_point,
        "accuracy_start_ci": start_ci,
        "accuracy_grpo": acc_point,
        "accuracy_grpo_ci": acc_ci,
        "accuracy_gain": gain,
        "accuracy_gain_ci": gain_ci,
        "eval_set": {
            "eval_seed": config.eval_seed,
            "prompts": int(evals.levels.shape[0]),
            "held_out_prompts": int(evals.held_out.sum()),
            "training_prompts": int(training.sum()),
            "held_out_levels": list(evals.held_out_levels),
            "training_only_levels": list(evals.training_only_levels),
            "eval_split_sizes": {str(k): v for k, v in evals.eval_split_sizes.items()},
        },
        "accuracy_by_level": {
            str(level): {"held_out": bool(evals.held_out[evals.levels == level].any()),
                         "prompts": int((evals.levels == level).sum()),
                         "start": float(start_correct[:, evals.levels == level].mean()),
                         "grpo": float(final_correct[:, evals.levels == level].mean())}
            for level in sorted(set(evals.levels.tolist()))},
        "format_rate": float(np.mean(grpo["final"]["eval_format"])),
        "format_rate_start": float(np.mean(grpo["final"]["start_format"])),
        "zero_signal_fraction": float(np.mean(logs["zero_signal_fraction"])),
        "zero_signal_fraction_first_chunk": float(np.mean(logs["zero_signal_fraction"][:, 0])),
        "zero_signal_fraction_last_chunk": float(np.mean(logs["zero_signal_fraction"][:, -1])),
        "length_first_chunk": float(np.mean(logs["length"][:, 0])),
        "length_last_chunk": float(np.mean(logs["length"][:, -1])),
        "nan_rewards": int(np.sum(logs["nan_rewards"])),
        "grpo_step_bytes": memory["grpo"] and memory["grpo"]["total_bytes"],
        "ppo_step_bytes": memory["ppo"] and memory["ppo"]["total_bytes"],
        "memory_ratio": (memory["grpo"]["total_bytes"] / memory["ppo"]["total_bytes"]
                         if config.measure_memory else None),
        "memory": memory,
        "train_seconds": {name: arm["first_chunk_seconds"] + arm["run_seconds"]
                          for name, arm in arms.items()},
    }
    if any_held_out and training.any():
        # Prompts of levels too small to split: training problems, training accuracy.
        for name, matrix in (("start", start_correct), ("grpo", final_correct),
                             ("gain", final_correct - start_correct)):
            point, interval = ci(matrix, training, f"training_accuracy_{name}")
            summary[f"training_accuracy_{name}"] = point
            summary[f"training_accuracy_{name}_ci"] = interval
    if "format_only" in arms:
        fo = arms["format_only"]["final"]
        fo_start, fo_end = np.asarray(fo["start_correct"]), np.asarray(fo["eval_correct"])
        point, interval = ci(fo_end - fo_start, headline, "format_only_accuracy_gain")
        summary["format_only_accuracy"] = float(fo_end[:, headline].mean())
        summary["format_only_accuracy_gain"] = point
        summary["format_only_accuracy_gain_ci"] = interval
        summary["format_only_format_rate"] = float(np.mean(fo["eval_format"]))
    if "ppo" in arms:
        pf = arms["ppo"]["final"]
        pf_start, pf_end = np.asarray(pf["start_correct"]), np.asarray(pf["eval_correct"])
        summary["accuracy_ppo"], summary["accuracy_ppo_ci"] = ci(pf_end, headline,
                                                                 "accuracy_ppo")
        summary["accuracy_ppo_gain"], summary["accuracy_ppo_gain_ci"] = ci(
            pf_end - pf_start, headline, "accuracy_ppo_gain")
    summary["interval_notes"] = notes
    summary["wall_seconds"] = time.perf_counter() - start

    io.write_parquet(out_dir / "results.parquet", _table(arms, config))
    io.write_json(out_dir / "summary.json", summary)
    _plots(arms, config, out_dir, headline)
    io.atomic_write_text(out_dir / "report.md", report_markdown(summary, config))
    return summary


def _table(arms: dict[str, Any], config: Config) -> pd.DataFrame:
    """One row per (arm, seed, RL step): training metrics and the chunk-end evaluation."""
    frames = []
    k = config.steps_per_chunk
    for name, arm in arms.items():
        logs = arm["logs"]
        s, c = logs["eval_accuracy"].shape
        step = np.arange(c * k)
        frame = {"arm": np.repeat(name, s * c * k), "seed": np.repeat(np.arange(s), c * k),
                 "step": np.tile(step + 1, s)}
        for metric, values in logs.items():
            values = np.asarray(values)
            if values.ndim == 3:
                frame[metric] = values.reshape(-1)
            else:  # chunk-end values, on the chunk's last step only
                full = np.full((s, c, k), np.nan)
                full[:, :, -1] = values
                frame[metric] = full.reshape(-1)
        frames.append(pd.DataFrame(frame))
    return pd.concat(frames, ignore_index=True)


def _plots(arms: dict[str, Any], config: Config, out_dir: Path, headline: np.ndarray
           ) -> None:
    key = jax.random.key(config.base_seed + 11)
    k = config.steps_per_chunk
    curves = {}
    for name, arm in arms.items():
        start = np.asarray(arm["final"]["start_correct"])[:, headline].mean(axis=1)
        scores = np.concatenate([start[:, None], arm["logs"]["eval_held_out_accuracy"]],
                                axis=1)
        curves[name] = scores[:, None, :]
    steps = np.arange(next(iter(curves.values())).shape[-1]) * k
    bands = stats.sample_efficiency_curves(curves, "mean", key=key, reps=config.bootstrap_reps)
    io.write_figure(out_dir / "accuracy.png", plot_sample_efficiency(
        steps, bands, xlabel="RL step",
        ylabel="held-out greedy accuracy (mean, 95% CI over seeds)",
        title="lm-grpo: accuracy over training"))
    lengths = {name: arm["logs"]["length"].mean(axis=2)[:, None, :] for name, arm in arms.items()}
    chunk_steps = (np.arange(next(iter(lengths.values())).shape[-1]) + 1) * k
    bands = stats.sample_efficiency_curves(lengths, "mean", key=key, reps=config.bootstrap_reps)
    io.write_figure(out_dir / "completion_length.png", plot_sample_efficiency(
        chunk_steps, bands, xlabel="RL step", ylabel="mean completion tokens (with EOS)",
        title="lm-grpo: completion length over training"))
    zero = {name: arm["logs"]["zero_signal_fraction"].mean(axis=2)[:, None, :]
            for name, arm in arms.items() if name != "ppo"}
    bands = stats.sample_efficiency_curves(zero, "mean", key=key, reps=config.bootstrap_reps)
    io.write_figure(out_dir / "zero_signal.png", plot_sample_efficiency(
        chunk_steps, bands, xlabel="RL step", ylabel="fraction of groups with no signal",
        title="lm-grpo: zero-signal groups"))


def _interval(summary: dict[str, Any], name: str) -> str:
    low, high = summary[f"{name}_ci"]
    return f"{format_number(summary[name])} [{format_number(low)}, {format_number(high)}]"


def report_markdown(summary: dict[str, Any], config: Config) -> str:
    """The study's report.md: figures, reading, memory table and procedure."""
    m = summary["memory"]
    ev = summary["eval_set"]
    held = summary["accuracy_is_held_out"]
    held_levels = ", ".join(str(v) for v in ev["held_out_levels"]) or "none"
    train_levels = ", ".join(str(v) for v in ev["training_only_levels"]) or "none"
    what = (f"held-out, levels {held_levels}" if held
            else "TRAINING accuracy: no level here can be split")
    figures = [
        Figure("greedy accuracy after warm-up", summary["accuracy_start"],
               *summary["accuracy_start_ci"], what),
        Figure("greedy accuracy after GRPO", summary["accuracy_grpo"],
               *summary["accuracy_grpo_ci"], f"{what}; {config.rl_steps} steps"),
        Figure("GRPO accuracy gain", summary["accuracy_gain"], *summary["accuracy_gain_ci"],
               "paired per seed and prompt"),
    ]
    if "training_accuracy_gain" in summary:
        figures.append(Figure(f"training accuracy (level {train_levels}) gain",
                              summary["training_accuracy_gain"],
                              *summary["training_accuracy_gain_ci"],
                              f"{format_number(summary['training_accuracy_start'])} -> "
                              f"{format_number(summary['training_accuracy_grpo'])}; not "
                              "held out"))
    if "format_only_accuracy_gain" in summary:
        figures.append(Figure("format-only reward: accuracy gain",
                              summary["format_only_accuracy_gain"],
                              *summary["format_only_accuracy_gain_ci"],
                              f"format rate {format_number(summary['format_only_format_rate'])}"))
    if "accuracy_ppo" in summary:
        figures.append(Figure("accuracy after PPO", summary["accuracy_ppo"],
                              *summary["accuracy_ppo_ci"], "same completions per step"))
    excludes = summary["accuracy_gain_ci"][0] > 0
    label = "Held-out" if held else "Training (not held-out)"
    lines = [
        f"# {NAME}", "", DESCRIPTION + ".", "",
        f"{config.seeds} seeds; levels {config.levels}; warm-up {config.sft_steps} supervised "
        f"steps; {config.rl_steps} RL steps of {config.prompts_per_step} prompts x "
        f"{config.group_size} completions; model width {config.width}, {config.num_layers} "
        f"layers, {config.num_heads} heads; {ev['prompts']} evaluation prompts, greedy: "
        f"{ev['held_out_prompts']} held out (levels {held_levels}), {ev['training_prompts']} "
        f"training problems (levels {train_levels}, too small to split).",
        "", figures_table(figures), "",
        "## Reading", "",
        f"{label} accuracy moves from {format_number(summary['accuracy_start'])} to "
        f"{format_number(summary['accuracy_grpo'])} under GRPO; the 95 % two-way interval "
        f"of the gain {_interval(summary, 'accuracy_gain')} "
        + ("excludes zero." if excludes else "does NOT exclude zero."),
        "",
    ]
    if "training_accuracy_gain" in summary:
        lines += [
            f"On the levels too small to split ({train_levels}) the evaluation prompts are "
            "training problems, so their accuracy is training accuracy, not a held-out "
            f"result: {format_number(summary['training_accuracy_start'])} -> "
            f"{format_number(summary['training_accuracy_grpo'])}, gain "
            f"{_interval(summary, 'training_accuracy_gain')}.", ""]
    lines += [
        f"Format rate {format_number(summary['format_rate_start'])} -> "
        f"{format_number(summary['format_rate'])}; zero-signal groups "
        f"{format_number(summary['zero_signal_fraction_first_chunk'])} in the first chunk, "
        f"{format_number(summary['zero_signal_fraction_last_chunk'])} in the last "
        f"(mean {format_number(summary['zero_signal_fraction'])}); mean completion length "
        f"{format_number(summary['length_first_chunk'])} -> "
        f"{format_number(summary['length_last_chunk'])} tokens.", "",
    ]
    if "format_only_accuracy_gain" in summary:
        lines += [
            "With the format reward alone the model is paid for any well-formed integer: "
            f"{label.lower()} accuracy changes by "
            f"{_interval(summary, 'format_only_accuracy_gain')} while the format rate "
            f"reaches {format_number(summary['format_only_format_rate'])}.", ""]
    if summary["memory_ratio"] is None:
        lines += ["Memory was not measured (measure_memory=false).", ""]
    else:
        lines += [
            "## Memory of one training step (XLA memory analysis, one seed)", "",
            "| | GRPO | PPO |", "|---|---:|---:|",
        ]
        for field in ("param_bytes", "reference_bytes", "optimizer_bytes", "temp_bytes",
                      "total_bytes"):
            lines.append(f"| {field} | {m['grpo'][field]:,} | {m['ppo'][field]:,} |")
        lines += [
            "", f"GRPO / PPO = {summary['memory_ratio']:.3f}: dropping the critic "
            f"{'nearly halves' if summary['memory_ratio'] < 0.6 else 'reduces'} the step's "
            "memory at this size (the seeds' claim is 'nearly halves').", ""]
    sizes = ", ".join(f"level {k}: {v:,}" for k, v in ev["eval_split_sizes"].items())
    lines += [
        "## Procedure", "",
        "Held out means disjoint: every problem of a level with at least 1000 distinct "
        "problems is assigned to the training or the eval split by a fixed hash "
        "(rljax.envs.arithmetic.problem_hash, eval fraction "
        f"{config.task().eval_fraction:g}); warm-up and RL draw only training "
        "problems. The evaluation set is ONE fixed draw (eval_seed "
        f"{ev['eval_seed']}) of {ev['prompts']} prompts, levels in turn, shared by all "
        "seeds and arms: "
        f"{ev['held_out_prompts']} i.i.d. draws from the eval split (levels {held_levels}; "
        f"eval split sizes {sizes or 'none'}) and {ev['training_prompts']} draws of "
        f"levels {train_levels}, whose problems cannot be split honestly (level 0 has 100 "
        "problems) and are all training problems: that accuracy is training accuracy.", "",
        "Intervals are two-way: each seed's greedy correctness on each prompt is kept "
        "and the interval resamples seeds AND prompts, so the evaluation sample's own "
        "error is in it; gains use the (after - before) matrix on the same prompts and "
        f"seeds. Method and coverage: {summary['interval_notes']['accuracy_gain']}", "",
    ]
    return "\n".join(lines)
