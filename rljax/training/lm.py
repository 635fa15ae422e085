"""Training a tiny language model on verifiable tasks: warm-up, then GRPO or PPO.

A run is composed of four values (:func:`make_lm_trainer`), not of flags:

* :class:`LMTrainConfig`, what every run shares: completion length, warm-up, RL
  schedule, optimizer, clip and KL, sampling, reward weights, evaluation, model size;
* the algorithm, :class:`~rljax.training.lm_config.LMGRPOConfig` (the default) or
  :class:`~rljax.training.lm_config.LMPPOConfig`: a field only one algorithm reads lives
  only in its config;
* the policy: :class:`~rljax.policies.lm.TinyLM` (``decoder=None``), or with an
  :class:`~rljax.training.lm_config.LMDecoderConfig` the decoder;
* the task, an object with the methods of :class:`~rljax.training.lm_config.LMTask`:
  :class:`~rljax.envs.arithmetic.ArithmeticTask` (:func:`arithmetic_task`) by default.

One seed's run, cut into chunks so a sweep can checkpoint between them
(:class:`rljax.sweep.ChunkedSweep`):

* ``init(key)``: initialise the policy (and, for PPO, a value model of the same size),
  run ``sft_steps`` of supervised warm-up on correct solutions (cross-entropy of the
  solution tokens, Adam), freeze a copy as the KL reference, and evaluate.
* ``advance(state)``: ``steps_per_chunk`` RL steps, then a greedy evaluation on the
  held-out prompts. One **GRPO** step samples ``P`` prompts, ``G`` completions of each
  (``TinyLM.generate``), scores them with the task's reward programs, and applies
  :func:`rljax.algorithms.grpo` through :func:`rljax.algorithms.multi_step_update`
  (``mu`` inner iterations). One **PPO** step samples ``P * G`` prompts with one
  completion each (the same number of completions), rewards the last token, subtracts
  ``kl_beta * (log pi - log pi_ref)`` per token (the usual RLHF reward shaping), runs
  GAE with ``gamma = 1`` over tokens, and applies :func:`rljax.algorithms.ppo` to the
  sequences with a separate value model (``mu`` epochs).
* ``finish(state)``: the final evaluation.

**Sampling and scoring agree.** pi_old, the loss's pi_theta, the entropy and PPO's logits
are those of the distribution that sampled: the logits divided by ``temperature`` and cut
to ``top_k`` (:func:`rljax.policies.sampling.sampling_logits`, the function
``generate`` applies); the KL reference is scored at the same temperature without the cut.

**The recipe** (:data:`EQUATION_RECIPE`): a warm start at a constant rate (never
annealed), optionally from a fixed bank of ``label_bank`` labelled problems, computed
once per study and shared by its arms (:mod:`rljax.training.lm_warm_start`), then RL with
a linear learning-rate warm-up (``lr_warmup_steps``, :func:`rl_learning_rate`). The
control arm :class:`~rljax.training.lm_config.LMSFTConfig` replaces each RL step by a
supervised step; ``LMGRPOConfig.oversample`` is DAPO's own dynamic sampling
(:meth:`LMTrainer.refilled_grpo_batch`).

Rewards that are NaN (e.g. from a broken reward program) are counted in ``nan_rewards``
and their groups (GRPO) or sequences (PPO) are masked out of the update, never trained on.

**Evaluation set.** Training problems (warm-up and RL) come from the task's training
split (``task.sample``'s default ``split="train"``); the evaluation prompts are one fixed
draw of ``eval_prompts`` problems from the disjoint eval split (``split="eval"``), drawn
once from ``eval_seed`` and shared by every seed and arm, with the task's levels taken in
turn (``levels[i % len(levels)]``, so each level has an equal share). Draws are with
replacement, i.e. an i.i.d. sample of the eval split (what a bootstrap over prompts
assumes). A level too small to split (``ArithmeticTask.training_only_levels``) has no
eval side: its evaluation prompts are training problems and their accuracy is *training*
accuracy -- ``eval_held_out`` marks the prompts that are held out. Evaluation decodes
greedily (temperature 0) and keeps each prompt's correctness (``eval_correct
[eval_prompts]``), so a study can resample seeds *and* prompts.

**Policy.** Without a decoder config the policy is :class:`~rljax.policies.lm.TinyLM`
(GPT-2 style); with one it is :class:`~rljax.policies.decoder.Decoder` (Llama / Qwen2
style: RMSNorm, rotary positions, SwiGLU, grouped-query attention). Both are sized by
``width``, ``num_layers`` and ``num_heads``, with the context ``task.prompt_length +
max_new_tokens``; both are :class:`~rljax.policies.lm_common.CausalLM`, so the trainer
calls the same methods on either; PPO's value model is the same architecture with
``value_head=True``. With a decoder ``checkpoint`` (a local Hugging Face-layout
directory, read once by :func:`make_lm_trainer` on the host with
:func:`rljax.policies.load_hf_checkpoint`) the checkpoint's weights, not a random draw,
start every seed: a draw held fixed across seeds (the seeds still differ in their
warm-up, sampling and RL draws). Its sizes replace the size fields; its vocabulary must
be the task's tokenizer and its context must cover ``prompt_length +
max_new_tokens`` (:func:`load_checkpoint_policy`). PPO's value model then starts from
the checkpoint's trunk with a fresh scalar head.

**GRPO variants** are :class:`~rljax.training.lm_config.LMGRPOConfig` fields (and the
shared clip of :class:`LMTrainConfig`) passed to :func:`rljax.algorithms.grpo` (its
module docstring has the formulas); with equal rollouts ``P x G`` per step:

==============  ==========================================================================
GRPO            ``advantage="group_relative", aggregation="sequence-mean-token-mean"``
Dr. GRPO        ``advantage="group_mean", aggregation="sequence-mean-token-sum-norm"``
DAPO            ``clip_epsilon=0.2, clip_epsilon_high=0.28, aggregation="token-mean",
                dynamic_sampling=True, overlong_max_length=L, overlong_cache=C``
                (optionally ``mask_truncated=True``, DAPO's overlong *filtering*)
GSPO            ``sequence_ratio=True, clip_epsilon=3e-4, clip_epsilon_high=4e-4``
RLOO            ``advantage="leave_one_out"``
REINFORCE++     ``advantage="reinforce_pp"`` (or ``"reinforce_pp_baseline"``)
80/20 entropy   ``entropy_top_q=0.2``
==============  ==========================================================================

* ``overlong_max_length`` / ``overlong_cache`` (DAPO's soft overlong punishment,
  :class:`LMTrainConfig` fields) add :func:`rljax.advantages.overlong_penalty` of each
  completion's length (``mask.sum()``, EOS included) to its reward, for GRPO and PPO
  alike (a reward term, so the ``reward`` metric and the advantage see it; evaluation
  does not: it scores greedy accuracy).
* ``dynamic_sampling`` is the **equal-budget** form of DAPO's dynamic sampling: the same
  ``P x G`` rollouts are generated, and the groups whose rewards (the shaped reward the
  advantage sees) are all equal -- no signal -- get mask 0, so they add nothing to the
  loss and token-mean leaves their tokens out of its denominator (the sequence-mean
  modes still divide by ``P G``; the batch-whitened REINFORCE++ advantages still count
  their rewards in the batch statistics). DAPO itself over-samples prompts until the
  batch is full of groups with signal, which spends more rollouts per step; that form is
  :func:`rljax.curriculum.dynamic_filter` / :func:`rljax.curriculum.dynamic_sampler`.
  ``kept_group_fraction`` reports the share of groups that entered the loss.
* ``mask_truncated`` passes ``GroupBatch.truncated [P, G]``: True for a completion with
  no EOS among its ``max_new_tokens`` tokens.
* ``entropy_top_q`` trains on the highest-entropy fraction of the tokens; the entropies
  come from an ``entropy_fn`` that runs one more forward of the current policy.

**Per-step metrics** (``advance``'s logs, ``[steps_per_chunk]`` each): ``accuracy``,
``format``, ``process`` (task reward components, means), ``length`` (mean completion
tokens), ``reward`` (the shaped reward's mean), ``zero_signal_fraction``, ``kl``,
``clip_fraction``, ``loss``, ``nan_rewards``, ``mean_level``; and ``entropy`` (token-mean
entropy of the sampling distribution -- the params before the update, the training
temperature and top-k -- over
the tokens of every completion with a finite reward), ``response_length_correct`` /
``response_length_incorrect`` (mean length of the completions the task's *accuracy*
program scores correct / incorrect -- not the shaped reward, which overlong shaping and
format weights move off 0 / 1; NaN when there are none), ``truncated_fraction``,
``kept_group_fraction`` (GRPO: groups in the loss; PPO: sequences with a finite reward)
and ``entropy_kept_fraction`` (1 without ``entropy_top_q``). GRPO also logs
``clipfrac_low`` / ``clipfrac_high`` (:func:`rljax.losses.clip_fractions`); PPO's
transform does not report them, so its logs have no such keys.

GRPO and the SFT control log ``rollouts`` (completions sampled in the step: ``P G``,
``oversample P G`` with DAPO's refill, 0 for SFT), and the refill logs
``signal_share_sampled``. An :class:`~rljax.training.lm_config.LMSFTConfig` run logs
``loss`` and ``rollouts`` only.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from rljax.advantages import generalized_advantage_estimation, overlong_penalty
from rljax.algorithms.grpo import GroupBatch, grpo
from rljax.algorithms.loops import multi_step_update
from rljax.algorithms.ppo import PPOBatch, ppo
from rljax.config import ConfigError, check_fields, param
from rljax.contracts import ContractError
from rljax.curriculum import (
    DifficultyClassifier,
    Sampler,
    prompt_gdro_sampler,
    uniform_sampler,
)
from rljax.envs.arithmetic import ArithmeticTask, Problems
from rljax.losses import categorical_entropy
from rljax.nonfinite import NONFINITE_STEP, track_nonfinite
from rljax.policies.decoder import Decoder, DecoderConfig
from rljax.policies.hf_checkpoint import (
    CONFIG_FILE,
    TOKENIZER_FILE,
    check_tokenizer_matches,
    load_hf_checkpoint,
    load_hf_tokenizer,
)
from rljax.policies.lm import LMConfig, TinyLM
from rljax.policies.lm_common import CausalLM
from rljax.policies.lora import LoRAConfig, init_lora, merge_lora
from rljax.policies.sampling import categorical_log_prob, log_softmax, sampling_logits
from rljax.text_tokenizer import HFTokenizer
from rljax.tokenizer import ARITHMETIC_ALPHABET, EOS_ID, CharTokenizer
from rljax.training.lm_config import (
    LMDecoderConfig,
    LMGRPOConfig,
    LMPPOConfig,
    LMSFTConfig,
    LMTask,
    check_task,
)
from rljax.types import Array, Params, PRNGKey

PROMPT_LENGTH = 8
"""The default task's prompt columns (with BOS): the widest prompt of levels 0 and 1 is 7."""

DEFAULT_LEVELS = (0, 1)
"""The default task's levels: one-digit addition, two-digit addition / subtraction."""


EQUATION_RECIPE = dict(max_new_tokens=12, sft_steps=300, sft_batch=128,
                       sft_learning_rate=1e-3, rl_steps=200, steps_per_chunk=50,
                       prompts_per_step=32, group_size=8, learning_rate=1e-4,
                       lr_warmup_steps=20, eval_prompts=512)
"""The recipe for level 4 (linear equations, prompts of 11 columns) that the ``lm-grpo``
and ``lm-variants`` studies share as :class:`LMTrainConfig` defaults
(``with_defaults(LMTrainConfig, **EQUATION_RECIPE)``): a 300-step warm start of 128
problems at a constant 1e-3 (held-out greedy accuracy 0.33-0.40 on 2 probe seeds, so
GRPO's groups have signal), then 200 GRPO steps of 32 prompts x 8 completions at 1e-4
after a 20-step linear warm-up. Probes (2 seeds each): 3e-4 and 2e-4 lost accuracy; 400
steps at 1e-4 gained no more than 200 (+0.055, +0.057 at 400)."""
EQUATION_PROMPT_LENGTH = 11
"""Prompt columns of level 4 (the widest prompt, ``9x-9=-90;``, is 10 tokens with BOS)."""


@dataclass(frozen=True)
class LMTrainConfig:
    """What every LM training run shares, whatever its algorithm, policy and task (Python
    scalars; the algorithm, the decoder's own settings and the task are the other
    arguments of :func:`make_lm_trainer`).

    Each field is declared once with :func:`rljax.config.param` (its help below and in
    ``docs/lm.md``'s table, rendered by :func:`rljax.config.fields_markdown`);
    :meth:`validate` checks them and the cross-field rules.

    Attributes:
      max_new_tokens: completion tokens sampled per prompt (``T``, EOS included).
      sft_steps, sft_batch, sft_learning_rate: supervised warm-up on correct solutions
        (Adam at a constant rate: never annealed, so the RL phase starts from a policy
        whose last steps were taken at the rate it was trained with).
      label_bank: 0, or the size ``N`` of each seed's fixed bank of labelled training
        problems (drawn once from the seed's key); the warm-up and
        :class:`~rljax.training.lm_config.LMSFTConfig` steps then draw only from it, RL
        still samples unlabeled prompts from the whole training split.
      rl_steps: RL steps in all (``num_chunks * steps_per_chunk``).
      steps_per_chunk: RL steps between evaluations / checkpoints.
      prompts_per_step, group_size: ``P`` prompts x ``G`` completions per GRPO step
        (PPO: ``P * G`` prompts x 1 completion).
      learning_rate, max_grad_norm: Adam step size and global-norm clip of the RL phase.
      lr_warmup_steps: linear warm-up of the RL step size (:func:`rl_learning_rate`).
      mu: inner iterations per batch (GRPO's mu, PPO's epochs).
      clip_epsilon, clip_epsilon_high: ratio clip range (``None``: symmetric).
      kl_beta: KL to the warm-started reference (GRPO: in the loss, with the GRPO
        config's estimator; PPO: as reward shaping, k1 per token).
      temperature, top_k: sampling during training (top_k 0 = off).
      reward_accuracy, reward_format, reward_process: weights of the task's reward
        programs.
      overlong_max_length, overlong_cache: DAPO's soft overlong punishment ``L_max`` (0 =
        off; at most ``max_new_tokens``) and ``L_cache`` (in ``[0, L_max]``), added to the
        reward (GRPO and PPO).
      eval_prompts, eval_seed: the evaluation set, one fixed draw from the task's eval
        split (module docstring; the same for every seed).
      width, num_layers, num_heads: the policy's size (the decoder's ``hidden_size``,
        ``num_hidden_layers``, ``num_attention_heads``).
    """

    max_new_tokens: int = param(5, "completion tokens sampled per prompt (T, EOS included)",
                                low=1)
    sft_steps: int = param(150, "supervised warm-up steps on correct solutions", low=0)
    sft_batch: int = param(64, "problems per warm-up step", low=1)
    sft_learning_rate: float = param(3e-3, "Adam's step size in the warm-up (constant)",
                                     low=0.0, low_open=True)
    label_bank: int = param(0, "labelled problems the supervised steps may use: 0 = a fresh "
                            "training problem each draw; N = a fixed bank of N training "
                            "problems per seed (the limited-label regime)", low=0)
    rl_steps: int = param(200, "RL steps in all (a multiple of steps_per_chunk)", low=1)
    steps_per_chunk: int = param(25, "RL steps between evaluations / checkpoints", low=1)
    prompts_per_step: int = param(16, "P prompts per RL step (PPO: P G prompts)", low=1)
    group_size: int = param(8, "G completions per prompt (PPO: one per prompt, P G "
                            "prompts)", low=2)
    learning_rate: float = param(3e-4, "Adam's step size in the RL phase", low=0.0,
                                 low_open=True)
    lr_warmup_steps: int = param(0, "RL steps of linear learning-rate warm-up from "
                                 "learning_rate / (lr_warmup_steps mu) (0 = off)", low=0)
    max_grad_norm: float = param(1.0, "global-norm gradient clip in the RL phase", low=0.0,
                                 low_open=True)
    mu: int = param(1, "updates per batch (GRPO's mu, PPO's epochs)", low=1)
    clip_epsilon: float = param(0.2, "the ratio's clip range (below 1)", low=0.0,
                                low_open=True)
    clip_epsilon_high: float | None = param(None, "the ratio's clip range above 1 (None: "
                                            "clip_epsilon)", low=0.0, low_open=True)
    kl_beta: float = param(0.0, "weight of the KL to the warm-started reference (GRPO: in "
                           "the loss; PPO: a per-token reward term)", low=0.0)
    temperature: float = param(1.0, "sampling temperature in the RL phase (pi_old and the "
                               "loss score the same tempered distribution)", low=0.0,
                               low_open=True)
    top_k: int = param(0, "top-k sampling in the RL phase (0 = off; pi_old and the loss "
                       "score the same cut distribution)", low=0)
    reward_accuracy: float = param(1.0, "weight of the task's accuracy reward")
    reward_format: float = param(0.0, "weight of the task's format reward")
    reward_process: float = param(0.0, "weight of the task's process reward")
    overlong_max_length: int = param(0, "DAPO's overlong shaping L_max (0 = off; <= "
                                     "max_new_tokens)", low=0)
    overlong_cache: int = param(0, "DAPO's overlong shaping L_cache (<= "
                                "overlong_max_length)", low=0)
    eval_prompts: int = param(256, "evaluation prompts: one fixed draw from the eval split",
                              sweep=False, low=1)
    eval_seed: int = param(12345, "seed of the evaluation set's draw", sweep=False, low=0,
                           high=2**31 - 1)
    width: int = param(64, "the policy's width (the decoder's hidden_size)", low=1)
    num_layers: int = param(2, "the policy's layers", low=1)
    num_heads: int = param(4, "the policy's attention heads", low=1)

    @property
    def num_chunks(self) -> int:
        """RL chunks of a run: ``rl_steps // steps_per_chunk``."""
        return self.rl_steps // self.steps_per_chunk

    @property
    def reward_weights(self) -> dict[str, float]:
        """The reward components' weights by name (accuracy, format, process)."""
        return {"accuracy": self.reward_accuracy, "format": self.reward_format,
                "process": self.reward_process}

    def validate(self) -> None:
        """One-line :class:`~rljax.config.ConfigError` naming the first invalid field:
        each against its declaration, then ``rl_steps`` against ``steps_per_chunk`` and
        the overlong shaping against ``max_new_tokens``."""
        check_fields(self)
        if self.rl_steps % self.steps_per_chunk:
            raise ConfigError(f"rl_steps: must be a multiple of steps_per_chunk="
                              f"{self.steps_per_chunk}, got {self.rl_steps}")
        if self.overlong_max_length > self.max_new_tokens:
            raise ConfigError(f"overlong_max_length: must be <= max_new_tokens="
                              f"{self.max_new_tokens} (0 = off), got "
                              f"{self.overlong_max_length}")
        if self.overlong_cache > self.overlong_max_length:
            raise ConfigError(f"overlong_cache: must be <= overlong_max_length="
                              f"{self.overlong_max_length} (shaping needs "
                              f"overlong_max_length > 0), got {self.overlong_cache}")


def rl_learning_rate(learning_rate: float, warmup_steps: int, updates_per_step: int = 1
                     ) -> float | optax.Schedule:
    """The RL phase's step size: ``learning_rate`` (a constant, ``warmup_steps = 0``) or a
    linear warm-up over the first ``W = warmup_steps * updates_per_step`` optimizer
    updates, ``lr_n = learning_rate * min(1, (n + 1) / W)`` for update ``n = 0, 1, ...``
    (the first update already moves; ``updates_per_step`` is ``mu``, the updates of one RL
    step), then constant.

    Why: a fresh Adam's first steps are sign-like on every parameter (its moments start
    at 0), so a warm-started policy taken at full rate can collapse in a few steps (seen
    here: GRPO at 1e-3 from a warm start annealed to 5e-5 fell to 0.00 held-out accuracy
    within 100 steps). Goyal et al. (2017, arXiv:1706.02677) introduced the linear
    warm-up; RL on language models uses it the same way.
    """
    if warmup_steps == 0:
        return learning_rate
    updates = warmup_steps * updates_per_step
    return lambda count: learning_rate * jnp.minimum(1.0, (count + 1) / updates)


def arithmetic_task(config: LMTrainConfig, levels: tuple[int, ...] = DEFAULT_LEVELS,
                    prompt_length: int = PROMPT_LENGTH, **settings: Any) -> ArithmeticTask:
    """The arithmetic task of a run (the default task): ``levels``, prompts of
    ``prompt_length`` columns and solutions of ``config.max_new_tokens`` (the completion's
    length); ``settings`` are other :class:`~rljax.envs.arithmetic.ArithmeticTask` fields
    (``eval_fraction``, ``min_split_problems``). Builds no arrays (scalars only)."""
    return ArithmeticTask(levels=tuple(levels), prompt_length=prompt_length,
                          solution_length=config.max_new_tokens, **settings)


def policy_config(config: LMTrainConfig, decoder: LMDecoderConfig | None, context_length: int,
                  value_head: bool = False, vocab_size: int = CharTokenizer().vocab_size
                  ) -> LMConfig | DecoderConfig:
    """The policy's model config (scalars): TinyLM's :class:`~rljax.policies.lm.LMConfig`
    without a decoder config, else the decoder's
    :class:`~rljax.policies.decoder.DecoderConfig` (``intermediate_size`` 0: ``8 width /
    3`` rounded up to a multiple of 16); ``value_head`` for PPO's value model;
    ``vocab_size`` the task tokenizer's ``V`` (19 for arithmetic)."""
    if decoder is None:
        return LMConfig(context_length=context_length, num_layers=config.num_layers,
                        width=config.width, num_heads=config.num_heads, value_head=value_head,
                        vocab_size=vocab_size)
    intermediate = decoder.intermediate_size or 16 * math.ceil(8 * config.width / 48)
    return DecoderConfig(
        hidden_size=config.width, intermediate_size=intermediate,
        num_hidden_layers=config.num_layers, num_attention_heads=config.num_heads,
        num_key_value_heads=decoder.num_kv_heads or config.num_heads,
        max_position_embeddings=context_length, vocab_size=vocab_size,
        tie_word_embeddings=decoder.tie_embeddings, value_head=value_head)


def check_lm_trainer(config: LMTrainConfig, algorithm: LMGRPOConfig | LMPPOConfig,
                     decoder: LMDecoderConfig | None, task: LMTask) -> None:
    """Validate a run's four values (:func:`make_lm_trainer`'s arguments) without reading
    a checkpoint or building arrays (scalars only): each config's ``validate()``, the
    task's (:func:`~rljax.training.lm_config.check_task`), and the checks across them --
    the warm-up's solutions fit the completion, and the policy's sizes fit its
    architecture (a checkpoint's own sizes replace them). One-line ``ValueError``
    (:class:`~rljax.config.ConfigError` for a config field) naming the first bad field."""
    if not isinstance(config, LMTrainConfig):
        raise ConfigError(f"config: must be an LMTrainConfig, got {type(config).__name__}")
    if not isinstance(algorithm, LMGRPOConfig | LMPPOConfig | LMSFTConfig):
        raise ConfigError(f"algorithm: must be an LMGRPOConfig, an LMPPOConfig or an "
                          f"LMSFTConfig, got {type(algorithm).__name__}")
    if decoder is not None and not isinstance(decoder, LMDecoderConfig):
        raise ConfigError(f"decoder: must be None (TinyLM) or an LMDecoderConfig, got "
                          f"{type(decoder).__name__}")
    config.validate()
    algorithm.validate()
    if decoder is not None:
        decoder.validate()
    check_task(task)
    if task.solution_length > config.max_new_tokens:
        raise ConfigError(f"max_new_tokens: must be >= the task's solution_length="
                          f"{task.solution_length} (the warm-up's solutions), got "
                          f"{config.max_new_tokens}")
    context = task.prompt_length + config.max_new_tokens
    vocab_size = task_tokenizer(task).vocab_size
    if decoder is None:
        policy_config(config, None, context, vocab_size=vocab_size).validate()
        return
    if decoder.checkpoint:
        return  # the checkpoint's config.json gives the sizes
    if config.width % config.num_heads:
        raise ConfigError(f"width: must be divisible by num_heads={config.num_heads}, "
                          f"got {config.width}")
    if (config.width // config.num_heads) % 2:
        raise ConfigError(f"width: width / num_heads (the head size) must be even for the "
                          f"decoder's rotary embeddings, got {config.width} / "
                          f"{config.num_heads}")
    if decoder.num_kv_heads and config.num_heads % decoder.num_kv_heads:
        raise ConfigError(f"num_kv_heads: must divide num_heads={config.num_heads} "
                          f"(0 = num_heads), got {decoder.num_kv_heads}")
    policy_config(config, decoder, context, vocab_size=vocab_size).validate()


@struct.dataclass
class LMTrainState:
    """One seed's training state (everything a checkpoint needs to continue bitwise).

    Attributes:
      params: policy params (GRPO) or ``{"policy": ..., "value": ...}`` (PPO).
      reference: the frozen warm-started policy params (the KL reference).
      opt_state: Adam's state for ``params``.
      key: the run's PRNG key (split at every step).
      step: RL steps taken, int32 scalar.
      eval_accuracy, eval_format: the latest evaluation (means over all evaluation
        prompts).
      eval_correct: float32 ``[eval_prompts]``, the latest evaluation's per-prompt
        greedy correctness (0 or 1).
      start_accuracy, start_format, start_correct: the evaluation right after the warm-up.
      curriculum: the curriculum sampler's state (``()`` without one).
      nonfinite_step: the first RL step after which the loss or the params were NaN/inf
        (int32, -1 while finite); ``finish`` reports it as ``NONFINITE_STEP``.
      bank: the seed's labelled bank (``Problems`` of ``label_bank`` rows), ``()``
        without one.
    """

    params: Any
    reference: Any
    opt_state: Any
    key: PRNGKey
    step: Array
    eval_accuracy: Array
    eval_format: Array
    start_accuracy: Array
    start_format: Array
    eval_correct: Array = ()
    start_correct: Array = ()
    curriculum: Any = ()
    nonfinite_step: Array = -1
    bank: Any = ()


class InitialParams:
    """A checkpoint's policy params ``{"params": tree}`` (e.g. ``embed_tokens/embedding
    [V, W]``), loaded once on the host and shared by every seed.

    Compared and hashed by identity, so an :class:`LMTrainer` holding them stays hashable
    (jit caches bound methods by their instance) and two trainers with different weights
    never share a compiled program. Inside ``init`` they are constants of the program.

    Attributes:
      params: the parameter tree.
    """

    def __init__(self, params: Params):
        self.params = params


@dataclass(frozen=True)
class LMTrainer:
    """The pieces of one seed's run (module docstring); build with :func:`make_lm_trainer`.

    Attributes:
      config: the run's shared config.
      algorithm: the algorithm's config (:class:`~rljax.training.lm_config.LMGRPOConfig`
        or :class:`~rljax.training.lm_config.LMPPOConfig`).
      policy: the policy, a ``TinyLM`` or ``Decoder`` (``value``: the value model of the
        same architecture, PPO only).
      task: the task (:class:`~rljax.training.lm_config.LMTask`, e.g. ``ArithmeticTask``).
      sampler: the curriculum sampler (None without one).
      initial: the checkpoint's policy params (``{"params": tree}``, shared by every
        seed) or None for a random init.
      warm_start: None (``init`` warms up), or a
        :class:`~rljax.training.lm_warm_start.WarmStart` whose cached per-seed params
        replace the warm-up (arms sharing it start bitwise the same).
      lora: None (full fine-tuning), or a :class:`~rljax.policies.lora.LoRAConfig`: the
        RL phase trains only the adapters (``state.params``, Adam's state over them) on
        the frozen warm-started decoder ``state.reference``, which is also the KL
        reference -- the adapters off, no second copy (:meth:`policy_params`).
    """

    config: LMTrainConfig
    algorithm: LMGRPOConfig | LMPPOConfig
    policy: CausalLM
    value: CausalLM | None
    task: LMTask
    sampler: Sampler | None = None
    initial: InitialParams | None = None
    warm_start: Any = None
    lora: LoRAConfig | None = None

    # -- building blocks -------------------------------------------------------------
    @property
    def is_ppo(self) -> bool:
        """Whether the run is PPO (params ``{"policy", "value"}``) rather than GRPO."""
        return isinstance(self.algorithm, LMPPOConfig)

    @property
    def is_sft(self) -> bool:
        """Whether the "RL" phase is continued supervised training (the control arm)."""
        return isinstance(self.algorithm, LMSFTConfig)

    def rl_optimizer(self) -> optax.GradientTransformation:
        """The RL phase's optimizer: global-norm clip, then Adam at
        :func:`rl_learning_rate`'s schedule (a constant without a warm-up); for
        :class:`~rljax.training.lm_config.LMSFTConfig`, Adam at ``sft_learning_rate``
        with the same warm-up and no clip."""
        cfg = self.config
        if self.is_sft:
            return optax.adam(rl_learning_rate(cfg.sft_learning_rate, cfg.lr_warmup_steps))
        return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm),
                           optax.adam(rl_learning_rate(cfg.learning_rate, cfg.lr_warmup_steps,
                                                       cfg.mu)))

    def policy_params(self, params: Any, reference: Any = None) -> Any:
        """The policy's params within the RL params ``params`` (PPO's hold the value model
        too). In LoRA mode that part is the adapters, merged here into the frozen base
        ``reference`` (``state.reference``): ``W + (alpha / r) A B`` per adapted kernel
        (:func:`~rljax.policies.lora.merge_lora`), the decoder's own layout; only the
        adapters get gradients."""
        policy = params["policy"] if self.is_ppo else params
        if self.lora is None:
            return policy
        if reference is None:
            raise ValueError("reference: in LoRA mode the policy is the frozen base "
                             "(state.reference) with the adapters merged in; pass it")
        return merge_lora(reference, policy, self.lora)

    def current_policy(self, state: LMTrainState) -> Any:
        """The policy's params of ``state`` (:meth:`policy_params` of ``state.params``,
        merged into ``state.reference`` in LoRA mode): what samples and is evaluated."""
        return self.policy_params(state.params, state.reference)

    def sample_problems(self, key: PRNGKey, num: int) -> Problems:
        """``num`` training problems of the task (prompts ``[num, Lp]``)."""
        return self.task.sample(key, num)

    def eval_problems(self) -> Problems:
        """The evaluation set (module docstring): ``eval_prompts`` problems from the eval
        split, drawn from ``eval_seed``, levels in turn."""
        return _jitted_eval(self.task, tuple(self.task.levels), self.config.eval_prompts,
                            self.config.eval_seed)[0]

    def eval_held_out(self) -> Array:
        """bool ``[eval_prompts]``: which evaluation prompts are held out (on the eval side
        of a split level); the others are training problems of an unsplit level."""
        return _jitted_eval(self.task, tuple(self.task.levels), self.config.eval_prompts,
                            self.config.eval_seed)[1]

    def evaluate_per_prompt(self, policy_params: Any, problems: Problems | None = None
                            ) -> tuple[Array, Array]:
        """Greedy ``(accuracy [N], format [N])`` per prompt, float32 in {0, 1}, on
        ``problems`` (default: the evaluation set)."""
        problems = self.eval_problems() if problems is None else problems
        eos, pad = task_special_ids(self.task)
        completion = self.policy.generate(
            policy_params, problems.prompt, problems.prompt_mask, jax.random.key(0),
            max_new_tokens=self.config.max_new_tokens, temperature=0.0, stop_ids=(eos,),
            pad_id=pad)
        rewards = self.task.rewards(problems, completion.tokens, completion.mask)
        return rewards.accuracy, rewards.format

    def evaluate(self, policy_params: Any, problems: Problems | None = None
                 ) -> tuple[Array, Array]:
        """Greedy accuracy and format rate (means) on ``problems`` (default: the
        evaluation set)."""
        accuracy, fmt = self.evaluate_per_prompt(policy_params, problems)
        return jnp.mean(accuracy), jnp.mean(fmt)

    def _evaluation(self, policy_params: Any) -> dict[str, Array]:
        """The evaluation set's ``{"accuracy", "format", "held_out_accuracy", "correct"}``
        (``held_out_accuracy``: mean over the held-out prompts, or over all when none is
        held out)."""
        correct, fmt = self.evaluate_per_prompt(policy_params)
        held_out = self.eval_held_out()
        weights = jnp.where(jnp.any(held_out), held_out, True).astype(jnp.float32)
        return {"accuracy": jnp.mean(correct), "format": jnp.mean(fmt),
                "held_out_accuracy": jnp.sum(correct * weights) / jnp.sum(weights),
                "correct": correct}

    def sft_loss(self, params: Any, problems: Problems) -> Array:
        """Mean negative log-likelihood of the correct solution tokens."""
        log_probs = self.policy.completion_log_probs(
            params, problems.prompt, problems.prompt_mask, problems.solution,
            problems.solution_mask)
        mask = problems.solution_mask.astype(log_probs.dtype)
        return -jnp.sum(log_probs * mask) / jnp.maximum(jnp.sum(mask), 1.0)

    def label_bank(self, key: PRNGKey) -> Any:
        """The seed's fixed bank of ``label_bank`` labelled training problems (``()``
        without one), drawn from ``key`` (derived from the seed's warm-up key)."""
        if not self.config.label_bank:
            return ()
        return self.sample_problems(jax.random.fold_in(key, 1), self.config.label_bank)

    def supervised_batch(self, key: PRNGKey, bank: Any = ()) -> Problems:
        """``sft_batch`` labelled problems: fresh training problems, or drawn uniformly
        with replacement from ``bank`` (a ``Problems`` of ``N`` rows)."""
        cfg = self.config
        if isinstance(bank, tuple):
            return self.sample_problems(key, cfg.sft_batch)
        rows = jax.random.randint(key, (cfg.sft_batch,), 0, cfg.label_bank)
        return jax.tree_util.tree_map(lambda x: x[rows], bank)

    def warm_up(self, params: Any, key: PRNGKey, bank: Any = ()) -> Any:
        """``sft_steps`` Adam steps at the constant ``sft_learning_rate`` on correct
        solutions (one :meth:`supervised_batch` per step; ``bank``: the seed's labelled
        bank, ``()`` for fresh problems)."""
        cfg = self.config
        if cfg.sft_steps == 0:
            return params
        optimizer = optax.adam(cfg.sft_learning_rate)

        def step(carry, step_key):
            params, opt_state = carry
            grads = jax.grad(self.sft_loss)(params, self.supervised_batch(step_key, bank))
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), None

        (params, _), _ = jax.lax.scan(step, (params, optimizer.init(params)),
                                      jax.random.split(key, cfg.sft_steps))
        return params

    def initial_policy(self, key: PRNGKey) -> Params:
        """The policy params before the warm-up: the checkpoint's (the same for every
        ``key``) or a random draw from ``key`` (a typed key ``[]``)."""
        return self.policy.init(key) if self.initial is None else self.initial.params

    def initial_value(self, key: PRNGKey) -> Params:
        """PPO's value-model params: a random draw from ``key`` (``[]``), or with a
        checkpoint its trunk and a fresh scalar head ``lm_head [W, 1]``."""
        fresh = self.value.init(key)
        if self.initial is None:
            return fresh
        trunk = {k: v for k, v in self.initial.params["params"].items() if k != "lm_head"}
        return {"params": {**trunk, "lm_head": fresh["params"]["lm_head"]}}

    def completion_logits(self, params: Params, prompt: Array, prompt_mask: Array,
                          completion: Array, completion_mask: Array) -> Array:
        """The sampling distribution's logits at the completion tokens: ``[B, N, V]`` for
        a prompt ``[B, P]`` and a completion ``[B, N]`` (column ``P - 1 + t`` of one forward
        over ``[prompt, completion]``, divided by the training ``temperature`` and cut to
        its ``top_k``: :func:`~rljax.policies.sampling.sampling_logits`, the logits
        :meth:`sample_completions` draws from and ``completion_log_probs`` scores)."""
        p, n = prompt.shape[1], completion.shape[1]
        tokens = jnp.concatenate([prompt, completion.astype(prompt.dtype)], axis=1)
        mask = jnp.concatenate([prompt_mask.astype(jnp.int32),
                                completion_mask.astype(jnp.int32)], axis=1)
        logits = self.policy.logits(params, tokens, mask)[:, p - 1: p + n - 1]
        return sampling_logits(logits, self.config.temperature, self.config.top_k or None)

    def sample_completions(self, policy_params: Any, problems: Problems, key: PRNGKey):
        """Completions ``[N, max_new_tokens]`` of the problems' prompts, sampled at the
        training temperature and top-k."""
        cfg = self.config
        eos, pad = task_special_ids(self.task)
        return self.policy.generate(
            policy_params, problems.prompt, problems.prompt_mask, key,
            max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
            top_k=cfg.top_k or None, stop_ids=(eos,), pad_id=pad)

    def score(self, problems: Problems, completion) -> tuple[Array, Any]:
        """``(reward [N], parts)``: the weighted reward programs, plus DAPO's overlong
        penalty of each completion's length when ``overlong_max_length > 0``; ``parts``
        the task's :class:`~rljax.envs.arithmetic.Rewards` (``accuracy [N]``, ...)."""
        cfg = self.config
        rewards = self.task.rewards(problems, completion.tokens, completion.mask)
        reward = self.task.combined_reward(rewards, cfg.reward_weights)
        if cfg.overlong_max_length:
            reward = reward + overlong_penalty(jnp.sum(completion.mask, axis=1),
                                               cfg.overlong_max_length, cfg.overlong_cache)
        return reward, rewards

    # -- one seed's run --------------------------------------------------------------
    def warm_start_params(self, key: PRNGKey, bank: Any = None) -> Params:
        """The seed's warm-started policy (``key``: the seed's key, ``[]``): the initial
        policy after :meth:`warm_up` -- what :meth:`init` computes, or reads from the
        trainer's ``warm_start`` cache (:mod:`rljax.training.lm_warm_start`). ``bank``:
        the seed's :meth:`label_bank` if the caller already drew it (``None``: drawn
        here from the same key)."""
        init_key, _, sft_key, _ = jax.random.split(key, 4)
        if self.warm_start is not None:
            return self.warm_start.lookup(key)
        bank = self.label_bank(sft_key) if bank is None else bank
        return self.warm_up(self.initial_policy(init_key), sft_key, bank)

    def init(self, key: PRNGKey) -> LMTrainState:
        """Initialise, warm up (or read the cached warm start), freeze the reference,
        evaluate."""
        _, value_key, sft_key, run_key = jax.random.split(key, 4)
        bank = self.label_bank(sft_key)  # drawn once: the warm-up's and the SFT arm's
        policy_params = self.warm_start_params(key, bank)
        trainable = policy_params
        if self.lora is not None:  # adapters (B = 0: the merged policy is the base)
            trainable = init_lora(jax.random.fold_in(value_key, 1), policy_params, self.lora)
        if self.is_ppo:
            params = {"policy": trainable, "value": self.initial_value(value_key)}
        else:
            params = trainable
        evaluation = self._evaluation(policy_params)
        accuracy, fmt = evaluation["accuracy"], evaluation["format"]
        return LMTrainState(params=params, reference=policy_params,
                            opt_state=self.rl_optimizer().init(params), key=run_key,
                            step=jnp.zeros((), jnp.int32), eval_accuracy=accuracy,
                            eval_format=fmt, start_accuracy=accuracy, start_format=fmt,
                            eval_correct=evaluation["correct"],
                            start_correct=evaluation["correct"],
                            curriculum=() if self.sampler is None else self.sampler.init(None),
                            nonfinite_step=jnp.int32(-1), bank=bank)

    def rl_step(self, state: LMTrainState) -> tuple[LMTrainState, dict[str, Array]]:
        """One GRPO or PPO step (module docstring); returns the new state and metrics."""
        key, problem_key, sample_key, update_key = jax.random.split(state.key, 4)
        step = (self.ppo_update if self.is_ppo else self.sft_update if self.is_sft
                else self.grpo_update)
        params, opt_state, curriculum, metrics = step(state, problem_key, sample_key,
                                                      update_key)
        nonfinite_step = track_nonfinite(state.nonfinite_step, state.step,
                                         (params, metrics["loss"]))
        state = state.replace(params=params, opt_state=opt_state, key=key,
                              step=state.step + 1, curriculum=curriculum,
                              nonfinite_step=nonfinite_step)
        return state, metrics

    def advance(self, state: LMTrainState) -> tuple[LMTrainState, dict[str, Array]]:
        """``steps_per_chunk`` RL steps, then an evaluation on the evaluation set.

        Returns ``(state, logs)`` with per-step metrics ``[steps_per_chunk]`` and the
        chunk-end scalars ``eval_accuracy`` / ``eval_format`` (all evaluation prompts) and
        ``eval_held_out_accuracy`` (the held-out prompts; all prompts if none is)."""
        state, metrics = jax.lax.scan(lambda s, _: self.rl_step(s), state, None,
                                      length=self.config.steps_per_chunk)
        evaluation = self._evaluation(self.current_policy(state))
        state = state.replace(eval_accuracy=evaluation["accuracy"],
                              eval_format=evaluation["format"],
                              eval_correct=evaluation["correct"])
        return state, {**metrics, "eval_accuracy": evaluation["accuracy"],
                       "eval_format": evaluation["format"],
                       "eval_held_out_accuracy": evaluation["held_out_accuracy"]}

    def finish(self, state: LMTrainState) -> dict[str, Array]:
        """``{"start_accuracy", "start_format", "eval_accuracy", "eval_format",
        NONFINITE_STEP}`` (scalars) and ``"start_correct"``, ``"eval_correct"`` (float32
        ``[eval_prompts]`` per-prompt correctness after the warm-up and at the end)."""
        return {"start_accuracy": state.start_accuracy, "start_format": state.start_format,
                "eval_accuracy": state.eval_accuracy, "eval_format": state.eval_format,
                "start_correct": state.start_correct, "eval_correct": state.eval_correct,
                NONFINITE_STEP: state.nonfinite_step}

    # -- the two updates -------------------------------------------------------------
    def sampling_log_probs(self, params: Params, obs: dict[str, Array], actions: Array
                           ) -> Array:
        """GRPO's ``log_prob_fn``: ``log pi(y_t | x, y_<t)`` ``[N, T]`` of the completions
        ``actions [N, T]`` under the *sampling* distribution (the training temperature and
        top-k, :func:`~rljax.policies.sampling.sampling_logits`), so pi_theta and pi_old
        are the same policy at two parameter values; ``obs``: ``prompt``, ``prompt_mask``
        ``[N, P]`` and ``completion_mask [N, T]``."""
        cfg = self.config
        return self.policy.completion_log_probs(
            params, obs["prompt"], obs["prompt_mask"], actions, obs["completion_mask"],
            cfg.temperature, cfg.top_k or None)

    def grpo_transform(self, reference: Any = None):
        """The configured :func:`rljax.algorithms.grpo` transform over token batches
        (``obs``: ``prompt``, ``prompt_mask [N, P]`` and ``completion_mask [N, T]``); its
        params are the RL params (in LoRA mode the adapters, merged into the frozen base
        ``reference`` before each forward, so only they get gradients)."""
        cfg = self.config

        def log_prob_fn(params, obs, actions):
            return self.sampling_log_probs(self.policy_params(params, reference), obs,
                                           actions)

        def entropy_fn(params, obs, actions):
            """Per-token entropy ``[N, T]`` of the current policy's sampling distribution
            (the training temperature and top-k)."""
            logits = self.completion_logits(self.policy_params(params, reference),
                                            obs["prompt"], obs["prompt_mask"], actions,
                                            obs["completion_mask"])
            return jnp.where(obs["completion_mask"].astype(bool),
                             categorical_entropy(logits), 0.0)

        algo = self.algorithm
        top_q = algo.entropy_top_q or None
        return grpo(log_prob_fn=log_prob_fn, group_size=cfg.group_size,
                    advantage=algo.advantage, scale_rewards=algo.scale_rewards or None,
                    clip_epsilon=cfg.clip_epsilon, clip_epsilon_high=cfg.clip_epsilon_high,
                    sequence_ratio=algo.sequence_ratio, kl_beta=cfg.kl_beta,
                    kl_estimator=algo.kl_estimator, aggregation=algo.aggregation,
                    mask_truncated=algo.mask_truncated, entropy_top_q=top_q,
                    entropy_fn=entropy_fn if top_q is not None else None)

    def grpo_batch(self, state: LMTrainState, problem_key: PRNGKey, sample_key: PRNGKey
                   ) -> tuple[GroupBatch, dict[str, Array], Any]:
        """Sample and score one GRPO batch: ``(batch, metrics, selection)``.

        ``batch`` is a :class:`~rljax.algorithms.grpo.GroupBatch` of ``P`` prompts x ``G``
        completions x ``T = max_new_tokens`` tokens, ``truncated [P, G]`` included; its
        mask is 0 on the groups left out of the loss (a NaN reward, or no signal under
        ``dynamic_sampling``). ``metrics`` are the sample's per-step scalars (module
        docstring); ``selection`` the curriculum's draw (None without one).
        """
        cfg = self.config
        p, g = cfg.prompts_per_step, cfg.group_size
        selection = None
        if self.algorithm.oversample > 1:
            return self.refilled_grpo_batch(state, problem_key, sample_key)
        if self.sampler is None:
            problems = self.sample_problems(problem_key, p)
        else:
            select_key, problem_key = jax.random.split(problem_key)
            selection = self.sampler.select(state.curriculum, select_key)
            levels = jnp.asarray(self.task.levels, jnp.int32)[selection.prompt_ids]
            problems = self.task.sample(problem_key, p, level=levels)
        repeated = jax.tree_util.tree_map(lambda x: jnp.repeat(x, g, axis=0), problems)
        completion = self.sample_completions(self.current_policy(state), repeated, sample_key)
        reward, parts = self.score(repeated, completion)
        return self._group_batch(state, problems, repeated, completion, reward, parts,
                                 rollouts=p * g) + (selection,)

    def refilled_grpo_batch(self, state: LMTrainState, problem_key: PRNGKey,
                            sample_key: PRNGKey) -> tuple[GroupBatch, dict[str, Array], None]:
        """DAPO's dynamic sampling in its own form (Yu et al., 2025, arXiv:2503.14476,
        "over-sample and filter"): ``m P`` prompts x ``G`` completions are sampled and
        scored (``m = oversample``), and the batch is the first ``P`` groups, in draw
        order, whose rewards are not all equal; if fewer than ``P`` have signal, the rest
        of the batch is zero-signal groups with mask 0. DAPO repeats the draw until the
        batch is full; this fixed-shape form draws once, so its ``kept_group_fraction``
        can fall below 1 (logged). The step's rollouts, ``m P G``, are logged as
        ``rollouts``."""
        cfg = self.config
        p, g, m = cfg.prompts_per_step, cfg.group_size, self.algorithm.oversample
        problems = self.sample_problems(problem_key, m * p)
        repeated = jax.tree_util.tree_map(lambda x: jnp.repeat(x, g, axis=0), problems)
        completion = self.sample_completions(self.current_policy(state), repeated, sample_key)
        reward, parts = self.score(repeated, completion)
        grouped = reward.reshape(m * p, g)
        usable = ~jnp.any(jnp.isnan(grouped), axis=1)
        signal = usable & has_signal(jnp.where(jnp.isnan(grouped), 0.0, grouped))
        # the first P groups with signal, in draw order (a stable sort puts them first)
        chosen = jnp.argsort(~signal, stable=True)[:p]
        take = lambda x: x.reshape(m * p, g, *x.shape[1:])[chosen].reshape(  # noqa: E731
            p * g, *x.shape[1:])
        problems = jax.tree_util.tree_map(lambda x: x[chosen], problems)
        repeated, completion, chosen_reward, parts = jax.tree_util.tree_map(
            take, (repeated, completion, reward, parts))
        batch, metrics = self._group_batch(state, problems, repeated, completion,
                                           chosen_reward, parts, rollouts=m * p * g)
        metrics["signal_share_sampled"] = jnp.mean(signal.astype(jnp.float32))
        return batch, metrics, None

    def _group_batch(self, state, problems, repeated, completion, reward, parts, *,
                     rollouts: int) -> tuple[GroupBatch, dict[str, Array]]:
        """The :class:`GroupBatch` and sample metrics of ``P x G`` scored completions."""
        cfg = self.config
        p, g = cfg.prompts_per_step, cfg.group_size
        nan = jnp.isnan(reward).reshape(p, g)
        usable = ~jnp.any(nan, axis=1)
        rewards = jnp.where(nan, 0.0, reward.reshape(p, g))
        keep = usable
        if self.algorithm.dynamic_sampling:
            keep = usable & has_signal(rewards)
        mask = completion.mask * jnp.repeat(keep, g)[:, None]
        # one forward of the sampling policy gives pi_old and the entropy metric
        logits = self.completion_logits(self.current_policy(state), repeated.prompt,
                                        repeated.prompt_mask, completion.tokens,
                                        completion.mask)
        old = jnp.where(mask.astype(bool), categorical_log_prob(logits, completion.tokens),
                        0.0)
        if cfg.kl_beta > 0:  # the reference at the same temperature, without top-k
            ref = self.policy.completion_log_probs(state.reference, repeated.prompt,
                                                   repeated.prompt_mask, completion.tokens, mask,
                                                   cfg.temperature)
        else:
            ref = old
        truncated = is_truncated(completion.tokens, completion.mask,
                                 task_special_ids(self.task)[0])
        group = lambda x: x.reshape(p, g, *x.shape[1:])  # noqa: E731
        batch = GroupBatch(
            obs={"prompt": group(repeated.prompt), "prompt_mask": group(repeated.prompt_mask),
                 "completion_mask": group(mask)},
            actions=group(completion.tokens), mask=group(mask), rewards=rewards,
            old_log_probs=group(jax.lax.stop_gradient(old)),
            ref_log_probs=group(jax.lax.stop_gradient(ref)), truncated=group(truncated))
        finite = jnp.repeat(usable, g)
        metrics = {
            **_sample_metrics(parts, completion.mask),
            **_variant_metrics(parts, completion, logits, finite, truncated),
            "kept_group_fraction": jnp.mean(keep.astype(jnp.float32)),
            "nan_rewards": jnp.sum(nan).astype(jnp.int32),
            "mean_level": jnp.mean(problems.level.astype(jnp.float32)),
            "rollouts": jnp.asarray(rollouts, jnp.int32),
        }
        return batch, metrics

    def grpo_update(self, state, problem_key, sample_key, update_key):
        """One GRPO step: :meth:`grpo_batch`, then ``mu`` updates through
        :func:`~rljax.algorithms.loops.multi_step_update`; ``(params, opt_state,
        curriculum, metrics)`` with scalar ``[]`` metrics."""
        cfg = self.config
        batch, sample_metrics, selection = self.grpo_batch(state, problem_key, sample_key)
        params, _, opt_state, metrics = multi_step_update(
            self.grpo_transform(state.reference), self.rl_optimizer(), state.params, (),
            state.opt_state,
            batch, update_key, num_epochs=cfg.mu, num_minibatches=1)
        metrics = {
            **sample_metrics,
            "reward": jnp.mean(batch.rewards),
            "zero_signal_fraction": 1.0 - metrics["signal_fraction"],
            "kl": metrics["kl"],
            "clip_fraction": metrics["clip_fraction"],
            "clipfrac_low": metrics["clipfrac_low"],
            "clipfrac_high": metrics["clipfrac_high"],
            "entropy_kept_fraction": metrics.get("entropy_kept_fraction", jnp.ones(())),
            "loss": metrics["loss"],
        }
        curriculum = state.curriculum
        if self.sampler is not None:
            curriculum, _ = self.sampler.update(curriculum, selection, batch.rewards)
        return params, opt_state, curriculum, metrics

    def sft_update(self, state, problem_key, sample_key, update_key):
        """One supervised step of the control arm
        (:class:`~rljax.training.lm_config.LMSFTConfig`): the cross-entropy of one
        :meth:`supervised_batch` (the seed's bank, if any), Adam at
        :meth:`rl_optimizer`'s rate; ``(params, opt_state, curriculum, metrics)`` with
        ``loss`` and ``rollouts`` (0: nothing is sampled)."""
        del sample_key, update_key
        problems = self.supervised_batch(problem_key, state.bank)
        loss, grads = jax.value_and_grad(lambda params: self.sft_loss(
            self.policy_params(params, state.reference), problems))(state.params)
        updates, opt_state = self.rl_optimizer().update(grads, state.opt_state, state.params)
        return (optax.apply_updates(state.params, updates), opt_state, state.curriculum,
                {"loss": loss, "rollouts": jnp.zeros((), jnp.int32)})

    def sampled_correct(self, policy_params: Any, problems: Problems, key: PRNGKey,
                        num_samples: int, temperature: float = 1.0) -> Array:
        """float32 ``[N, num_samples]``: the task's accuracy of ``num_samples`` completions
        of each of the ``N`` problems, sampled independently at ``temperature`` (no
        top-k) from ``key`` -- the draws behind sampled accuracy, pass@k and a prompt's
        pass rate ``p``."""
        repeated = jax.tree_util.tree_map(lambda x: jnp.repeat(x, num_samples, axis=0),
                                          problems)
        eos, pad = task_special_ids(self.task)
        completion = self.policy.generate(
            policy_params, repeated.prompt, repeated.prompt_mask, key,
            max_new_tokens=self.config.max_new_tokens, temperature=temperature,
            stop_ids=(eos,), pad_id=pad)
        rewards = self.task.rewards(repeated, completion.tokens, completion.mask)
        return rewards.accuracy.reshape(-1, num_samples)

    def ppo_actor_critic(self, params, obs, reference: Any = None):
        """``(logits [B, N, V], values [B, N])`` of the completion tokens in ``obs``
        (``reference``: the frozen base the adapters merge into, LoRA mode only)."""
        prompt_len = obs["prompt"].shape[1]
        n = obs["completion"].shape[1]
        tokens = jnp.concatenate([obs["prompt"], obs["completion"]], axis=1)
        mask = jnp.concatenate([obs["prompt_mask"], obs["completion_mask"]], axis=1)
        logits = self.policy.logits(self.policy_params(params, reference), tokens, mask)
        logits = sampling_logits(logits[:, prompt_len - 1: prompt_len - 1 + n],
                                 self.config.temperature, self.config.top_k or None)
        values = self.value.completion_values(params["value"], obs["prompt"],
                                              obs["prompt_mask"], obs["completion"],
                                              obs["completion_mask"])
        return logits, values

    def ppo_update(self, state, problem_key, sample_key, update_key):
        """One PPO step on ``P G`` prompts x 1 completion (module docstring): ``(params,
        opt_state, curriculum, metrics)`` with scalar ``[]`` metrics."""
        cfg = self.config
        problems = self.sample_problems(problem_key, cfg.prompts_per_step * cfg.group_size)
        completion = self.sample_completions(self.current_policy(state), problems, sample_key)
        reward, parts = self.score(problems, completion)
        nan = jnp.isnan(reward)
        mask = completion.mask * (~nan)[:, None]
        reward = jnp.where(nan, 0.0, reward)
        obs = {"prompt": problems.prompt, "prompt_mask": problems.prompt_mask,
               "completion": completion.tokens, "completion_mask": mask}
        actor_critic = functools.partial(self.ppo_actor_critic, reference=state.reference)
        logits, values = actor_critic(state.params, obs)
        old = jnp.take_along_axis(log_softmax(logits), completion.tokens[..., None], -1)[..., 0]
        maskf = mask.astype(jnp.float32)
        ref = self.policy.completion_log_probs(state.reference, problems.prompt,
                                               problems.prompt_mask, completion.tokens, mask,
                                               cfg.temperature)
        length = jnp.sum(mask, axis=1)
        last = jax.nn.one_hot(length - 1, mask.shape[1]) * maskf
        token_rewards = reward[:, None] * last - cfg.kl_beta * (old - ref) * maskf
        # GAE over tokens (time-major), gamma = 1; the episode ends at the last real token.
        terminated = (last > 0) | (maskf == 0)
        advantages, returns = generalized_advantage_estimation(
            token_rewards.T, (values * maskf).T, jnp.zeros(values.shape[0]), terminated.T,
            gamma=1.0, lam=self.algorithm.lam)
        batch = PPOBatch(obs=obs, actions=completion.tokens,
                         old_log_probs=jax.lax.stop_gradient(old),
                         advantages=jax.lax.stop_gradient(advantages.T),
                         returns=jax.lax.stop_gradient(returns.T),
                         old_values=jax.lax.stop_gradient(values), mask=mask)
        rl = ppo(actor_critic, clip_epsilon=cfg.clip_epsilon,
                 clip_epsilon_high=cfg.clip_epsilon_high,
                 value_coef=self.algorithm.value_coef,
                 entropy_coef=self.algorithm.entropy_coef, value_clip=None)
        params, _, opt_state, metrics = multi_step_update(
            rl, self.rl_optimizer(), state.params, (), state.opt_state, batch, update_key,
            num_epochs=cfg.mu, num_minibatches=1)
        group_view = reward.reshape(cfg.prompts_per_step, cfg.group_size)
        spread = jnp.max(group_view, axis=1) != jnp.min(group_view, axis=1)
        metrics = {
            **_sample_metrics(parts, completion.mask),
            **_variant_metrics(parts, completion, logits, ~nan,
                               is_truncated(completion.tokens, completion.mask,
                                            task_special_ids(self.task)[0])),
            "kept_group_fraction": 1.0 - jnp.mean(nan.astype(jnp.float32)),
            "entropy_kept_fraction": jnp.ones(()),
            "reward": jnp.mean(reward),
            "zero_signal_fraction": 1.0 - jnp.mean(spread.astype(jnp.float32)),
            "kl": jnp.sum((old - ref) * maskf) / jnp.maximum(jnp.sum(maskf), 1.0),
            "clip_fraction": metrics["clip_fraction"],
            "loss": metrics["loss"],
            "nan_rewards": jnp.sum(nan).astype(jnp.int32),
            "mean_level": jnp.mean(problems.level.astype(jnp.float32)),
        }
        return params, opt_state, state.curriculum, metrics


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _jitted_eval(task: LMTask, levels: tuple[int, ...], num: int, seed: int
                 ) -> tuple[Problems, Array]:
    """The evaluation set and its held-out flags, as one compiled program (cached per
    task and set, so host-side calls do not dispatch the sampler op by op)."""
    level = jnp.asarray(levels, jnp.int32)[jnp.arange(num) % len(levels)]
    problems = task.sample(jax.random.key(seed), num, level=level, split="eval")
    return problems, task.is_held_out(problems)


def _sample_metrics(parts: Any, mask: Array) -> dict[str, Array]:
    return {"accuracy": jnp.mean(parts.accuracy), "format": jnp.mean(parts.format),
            "process": jnp.mean(parts.process),
            "length": jnp.mean(jnp.sum(mask, axis=1).astype(jnp.float32))}


def has_signal(rewards: Array) -> Array:
    """bool ``[P]``: the group's rewards ``[P, G]`` are not all equal (a group-centred
    advantage is not zero everywhere); ``dynamic_sampling`` keeps only these groups."""
    return jnp.max(rewards, axis=1) != jnp.min(rewards, axis=1)


def is_truncated(tokens: Array, mask: Array, eos_id: int = EOS_ID) -> Array:
    """bool ``[N]``: the completion ``tokens [N, T]`` has no EOS (``eos_id``, the task
    tokenizer's) among its real tokens (``mask [N, T]``), i.e. it hit ``max_new_tokens``
    unterminated (DAPO's overlong filtering masks these)."""
    return ~jnp.any((tokens == eos_id) & mask.astype(bool), axis=1)


def _variant_metrics(parts: Any, completion: Any, logits: Array, finite: Array,
                     truncated: Array) -> dict[str, Array]:
    """``entropy`` (token mean over the completions with a finite reward, ``finite
    [N]``, of the entropy of ``logits [N, T, V]``), the response lengths of the correct /
    incorrect completions by the task's accuracy (NaN where there are none) and the
    truncated share (``truncated [N]``)."""
    mask = completion.mask.astype(jnp.float32)
    weight = mask * finite.astype(jnp.float32)[:, None]
    entropy = jax.lax.stop_gradient(categorical_entropy(logits))
    lengths = jnp.sum(mask, axis=1)
    correct = (parts.accuracy > 0.5).astype(jnp.float32)
    return {
        "entropy": jnp.sum(entropy * weight) / jnp.maximum(jnp.sum(weight), 1.0),
        # 0 / 0 = NaN when no completion is (in)correct, as grpo's metrics of these names
        "response_length_correct": jnp.sum(lengths * correct) / jnp.sum(correct),
        "response_length_incorrect": (jnp.sum(lengths * (1.0 - correct))
                                      / jnp.sum(1.0 - correct)),
        "truncated_fraction": jnp.mean(truncated.astype(jnp.float32)),
    }


TASK_TOKENIZER = CharTokenizer(ARITHMETIC_ALPHABET)
"""The arithmetic task's tokenizer; a checkpoint's vocabulary must be exactly this one
(a task with a ``tokenizer`` attribute names its own)."""


def task_tokenizer(task: Any) -> CharTokenizer | HFTokenizer:
    """The tokenizer of ``task``'s token ids: its ``tokenizer`` attribute (e.g. a
    :class:`~rljax.envs.text_tasks.TokenizedTask`'s
    :class:`~rljax.text_tokenizer.HFTokenizer`), else the arithmetic task's
    :data:`TASK_TOKENIZER` (ids ``[V]``, V = 19)."""
    return getattr(task, "tokenizer", TASK_TOKENIZER)


def task_special_ids(task: Any) -> tuple[int, int]:
    """``(eos_id, pad_id)`` of ``task``'s tokenizer (:func:`task_tokenizer`): generation
    stops at EOS and pads with PAD (the tokenizer's EOS when it names no PAD token);
    ``(2, 0)`` for the arithmetic task.

    Raises:
      ValueError: the tokenizer has no EOS token (one line naming ``tokenizer``).
    """
    tokenizer = task_tokenizer(task)
    if tokenizer.eos_id is None:
        raise ValueError("tokenizer: the task's tokenizer has no eos_token (completions end "
                         "at EOS)")
    pad = tokenizer.eos_id if tokenizer.pad_id is None else tokenizer.pad_id
    return int(tokenizer.eos_id), int(pad)


def load_checkpoint_policy(checkpoint: str | Path, context_length: int,
                           vocab: CharTokenizer | HFTokenizer = TASK_TOKENIZER
                           ) -> tuple[Decoder, Params]:
    """Read the Hugging Face-layout directory ``checkpoint`` (host side) and check it fits
    the task.

    Checks, each a one-line error naming the file and field: for a character tokenizer
    ``vocab``, a ``tokenizer.json`` (if the directory has one) must be it (same special
    ids, every character the same id;
    :func:`~rljax.policies.hf_checkpoint.check_tokenizer_matches` for the size) and
    ``config.json``'s ``vocab_size`` must equal its ``V`` (19 for arithmetic); for an
    :class:`~rljax.text_tokenizer.HFTokenizer` (a text task's), the directory's
    ``tokenizer.json`` must be that tokenizer (:func:`check_checkpoint_tokenizer`); and
    ``max_position_embeddings`` must be at least ``context_length`` (``prompt_length +
    max_new_tokens``).

    Returns:
      ``(Decoder, {"params": tree})``: the checkpoint's decoder with its context (and KV
      cache) cut to ``context_length`` (plain RoPE does not depend on it, so the weights
      are unchanged), and its float32 params (e.g. ``embed_tokens/embedding [V, W]``).
    """
    directory = Path(checkpoint).expanduser()
    model, params = load_hf_checkpoint(directory)
    if isinstance(vocab, HFTokenizer):
        check_checkpoint_tokenizer(directory, model, vocab)
    elif (directory / TOKENIZER_FILE).is_file():
        tokenizer = load_hf_tokenizer(directory)
        check_tokenizer_matches(tokenizer, model)
        file = directory / TOKENIZER_FILE
        specials = {"pad": (tokenizer.pad_id, vocab.pad_id), "bos": (tokenizer.bos_id,
                    vocab.bos_id), "eos": (tokenizer.eos_id, vocab.eos_id)}
        for name, (found, expected) in specials.items():
            if found != expected:
                raise ValueError(f"{file}: {name}_token id {found}, but the arithmetic "
                                 f"task's character tokenizer uses {expected}")
        try:
            ids = tokenizer.encode(vocab.alphabet)
        except ValueError:
            ids = None
        if tokenizer.vocab_size != vocab.vocab_size or ids is None or not np.array_equal(
                ids, vocab.encode(vocab.alphabet)):
            raise ValueError(f"{file}: not the arithmetic task's character tokenizer "
                             f"({tokenizer.vocab_size} tokens; the task needs "
                             f"{vocab.vocab_size}: PAD, BOS, EOS, then each of "
                             f"{vocab.alphabet!r} as one token, ids 3..)")
    if not isinstance(vocab, HFTokenizer) and model.config.vocab_size != vocab.vocab_size:
        raise ValueError(f"{directory / CONFIG_FILE}: vocab_size {model.config.vocab_size}, "
                         f"but the arithmetic task's character tokenizer has "
                         f"{vocab.vocab_size} ids (the policy must be trained on it)")
    if model.config.max_position_embeddings < context_length:
        raise ValueError(f"{directory / CONFIG_FILE}: max_position_embeddings "
                         f"{model.config.max_position_embeddings} is shorter than "
                         f"prompt_length + max_new_tokens = {context_length}")
    policy = Decoder(dataclasses.replace(model.config, max_position_embeddings=context_length,
                                         value_head=False))
    return policy, params


def check_checkpoint_tokenizer(directory: str | Path, model: Decoder,
                               tokenizer: HFTokenizer) -> None:
    """A checkpoint directory's ``tokenizer.json`` is the task's ``tokenizer`` (host side,
    no arrays): the file exists, its tokenization model (vocabulary and merges) and every
    token's id equal the task's, and so do its PAD, BOS and EOS ids; the model's
    embedding ``[V, W]`` may be larger than the tokenizer (HF pads it, as Qwen2.5's), not
    smaller. One-line ``ValueError`` naming the file otherwise."""
    directory = Path(directory).expanduser()
    file = directory / TOKENIZER_FILE
    if not file.is_file():
        raise ValueError(f"{file}: missing; a text task's checkpoint must carry the task's "
                         f"tokenizer ({tokenizer.vocab_size} ids)")
    found = load_hf_tokenizer(directory)
    check_tokenizer_matches(found, model)
    for name in ("pad", "bos", "eos"):
        have, want = getattr(found, f"{name}_id"), getattr(tokenizer, f"{name}_id")
        if have != want:
            raise ValueError(f"{file}: {name}_token id {have}, but the task's tokenizer uses "
                             f"{want}")
    same_model = (json.loads(found.tokenizer.to_str())["model"]
                  == json.loads(tokenizer.tokenizer.to_str())["model"])
    if not same_model or (found.tokenizer.get_vocab(with_added_tokens=True)
                          != tokenizer.tokenizer.get_vocab(with_added_tokens=True)):
        raise ValueError(f"{file}: not the task's tokenizer ({found.vocab_size} tokens, the "
                         f"task's {tokenizer.vocab_size}; every token must have the same id "
                         f"and the same merges)")


def make_lm_trainer(config: LMTrainConfig,
                    algorithm: LMGRPOConfig | LMPPOConfig | LMSFTConfig | None = None,
                    decoder: LMDecoderConfig | None = None, task: LMTask | None = None,
                    warm_start: Any = None) -> LMTrainer:
    """Validate a run's values (:func:`check_lm_trainer`) and build its trainer.

    Args:
      config: what every run shares.
      algorithm: :class:`~rljax.training.lm_config.LMGRPOConfig` (``None``: its
        defaults) or :class:`~rljax.training.lm_config.LMPPOConfig`.
      decoder: ``None`` for :class:`~rljax.policies.lm.TinyLM`, or an
        :class:`~rljax.training.lm_config.LMDecoderConfig` for the decoder (its
        ``checkpoint``, if any, is read here, once, on the host:
        :func:`load_checkpoint_policy`).
      task: an :class:`~rljax.training.lm_config.LMTask`; ``None``:
        :func:`arithmetic_task` of ``config`` (levels 0 and 1, 8 prompt columns).
      warm_start: ``None``, or a :class:`~rljax.training.lm_warm_start.WarmStart`
        (:func:`~rljax.training.lm_warm_start.cached_warm_start`) whose per-seed params
        replace the warm-up.

    Returns:
      the :class:`LMTrainer`, whose ``init / advance / finish`` feed
      :class:`rljax.sweep.ChunkedSweep` (one seed's state per call, shapes as documented
      on :class:`LMTrainer`).
    """
    algorithm = LMGRPOConfig() if algorithm is None else algorithm
    task = arithmetic_task(config) if task is None else task
    check_lm_trainer(config, algorithm, decoder, task)
    context = task.prompt_length + config.max_new_tokens
    vocab = task_tokenizer(task)
    initial = None
    if decoder is not None and decoder.checkpoint:
        policy, params = load_checkpoint_policy(decoder.checkpoint, context, vocab)
        initial = InitialParams(params)
    elif decoder is not None:
        policy = Decoder(policy_config(config, decoder, context, vocab_size=vocab.vocab_size))
    else:
        policy = TinyLM(policy_config(config, None, context, vocab_size=vocab.vocab_size))
    value = None
    if isinstance(algorithm, LMPPOConfig):
        value = type(policy)(dataclasses.replace(policy.config, value_head=True))
    sampler = None
    if isinstance(algorithm, LMGRPOConfig) and algorithm.curriculum != "none":
        classifier = DifficultyClassifier(len(task.levels))
        build = uniform_sampler if algorithm.curriculum == "uniform" else prompt_gdro_sampler
        sampler = build(classifier, config.prompts_per_step, config.group_size)
    check_policy_vocabulary(policy, initial, vocab.vocab_size,
                            padded=initial is not None and isinstance(vocab, HFTokenizer))
    return LMTrainer(config=config, algorithm=algorithm, policy=policy, value=value, task=task,
                     sampler=sampler, initial=initial, warm_start=warm_start,
                     lora=None if decoder is None else decoder.lora())


def check_policy_vocabulary(policy: CausalLM, initial: InitialParams | None,
                            vocab_size: int, padded: bool = False) -> None:
    """The LM trainer's action-space check: the policy's logits are over the task
    tokenizer's ``V`` tokens (``[B, T, V]``; with ``padded``, a checkpoint of a subword
    tokenizer, at least ``V``: HF pads embeddings, e.g. Qwen2.5's, and an id beyond the
    tokenizer scores 0). Read from the model's declared ``config.vocab_size`` and, with
    checkpoint params, the ``[V, W]`` token embedding, so it costs nothing (no trace;
    ``validate`` builds trainers often). One-line ``ContractError`` naming the model and
    both sizes."""
    sizes = {"config.vocab_size": getattr(getattr(policy, "config", None), "vocab_size", None)}
    if initial is not None:
        leaves = jax.tree_util.tree_flatten_with_path(initial.params)[0]
        tables = [leaf for path, leaf in leaves if jnp.ndim(leaf) == 2 and any(
            name in jax.tree_util.keystr(path) for name in ("embed_tokens", "token_embed"))]
        if tables:
            sizes["the checkpoint's token embedding"] = int(jnp.shape(tables[0])[0])
    for what, size in sizes.items():
        if padded and isinstance(size, int) and size > vocab_size:
            continue  # HF pads embeddings past the tokenizer (an id beyond it scores 0)
        if size != vocab_size:
            raise ContractError(f"policy {type(policy).__name__}: logits over {size} tokens "
                                f"({what}) but the task's tokenizer has {vocab_size}")


def tree_bytes(tree: Any) -> int:
    """Bytes of all array leaves of ``tree`` (arrays or ``ShapeDtypeStruct``s)."""
    return int(sum(math.prod(leaf.shape) * jnp.dtype(leaf.dtype).itemsize
                   for leaf in jax.tree_util.tree_leaves(tree)))


def training_step_memory(trainer: LMTrainer, donate: bool = False) -> dict[str, int]:
    """XLA's memory analysis of one seed's compiled RL step (``trainer.rl_step``; with
    ``donate``, the state is donated, so the new params and Adam state alias the old as
    in a training loop).

    Returns bytes: ``param_bytes`` (policy, plus the value model for PPO),
    ``reference_bytes``, ``optimizer_bytes``, ``temp_bytes`` (XLA's temporaries: the
    activations and gradients of the step), ``argument_bytes``, ``output_bytes``,
    ``alias_bytes`` and ``total_bytes = temp + argument + output - alias`` (the step's
    peak footprint, parameters and optimizer included as arguments). Nothing is run:
    shapes come from ``jax.eval_shape`` of ``init``.
    """
    state = jax.eval_shape(trainer.init, jax.random.key(0))
    compiled = jax.jit(trainer.rl_step, donate_argnums=(0,) if donate else ()
                       ).lower(state).compile()
    analysis = compiled.memory_analysis()
    temp = int(analysis.temp_size_in_bytes)
    argument = int(analysis.argument_size_in_bytes)
    output = int(analysis.output_size_in_bytes)
    alias = int(analysis.alias_size_in_bytes)
    return {
        "param_bytes": tree_bytes(state.params),
        "reference_bytes": tree_bytes(state.reference),
        "optimizer_bytes": tree_bytes(state.opt_state),
        "temp_bytes": temp,
        "argument_bytes": argument,
        "output_bytes": output,
        "alias_bytes": alias,
        "total_bytes": temp + argument + output - alias,
    }
