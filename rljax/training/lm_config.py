"""The LM trainer's variant configs, composed with its core config instead of flagged.

One run of :func:`rljax.training.lm.make_lm_trainer` is four values:

* :class:`rljax.training.lm.LMTrainConfig`: what every run shares (completion length,
  warm-up, RL schedule, optimizer, clip and KL, sampling, reward weights, evaluation,
  model size);
* the algorithm: :class:`LMGRPOConfig` (GRPO and its published variants),
  :class:`LMPPOConfig` (PPO with a value model) or :class:`LMSFTConfig` (continued
  supervised training, the control); a field only one algorithm reads lives only in its
  config, so a GRPO knob on a PPO run cannot be written;
* the policy: ``None`` for :class:`~rljax.policies.lm.TinyLM`, or an
  :class:`LMDecoderConfig` for the Llama / Qwen2-style
  :class:`~rljax.policies.decoder.Decoder` (its grouped-query heads, SwiGLU width, tied
  head and Hugging Face checkpoint exist only there);
* the task: an object with the methods of :class:`LMTask`
  (:class:`~rljax.envs.arithmetic.ArithmeticTask` by default).

Every field is declared once with :func:`rljax.config.param` (default, help, bounds or
choices); each config's ``validate()`` checks them with :func:`rljax.config.check_fields`
and adds only its cross-field checks. A study with ``--set`` knobs extends the flat pieces
it exposes (``class Config(LMTrainConfig, LMGRPOConfig, LMArchitectureConfig)``, other
defaults with :func:`rljax.config.with_defaults`) and builds the trainer's values from
itself with :func:`config_from`; :class:`LMArchitectureConfig` is the flat form of the
policy choice (``architecture`` plus the decoder's fields) such a study extends.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from rljax.config import ConfigError, check_fields, declared_fields, param
from rljax.losses import AGGREGATIONS, KL_ESTIMATORS
from rljax.policies.lora import LoRAConfig

ADVANTAGES = ("group_relative", "group_mean", "leave_one_out", "reinforce_pp",
              "reinforce_pp_baseline")
"""GRPO's advantage estimators (:func:`rljax.algorithms.grpo`'s ``advantage``)."""

SCALED_ADVANTAGES = ADVANTAGES[:3]
"""The estimators whose reward scale ``scale_rewards`` may set."""

SCALE_REWARDS = ("", "group", "batch", "none")
"""``scale_rewards`` values: ``""`` (the estimator's own scale), ``group``, ``batch``,
``none``."""

CURRICULA = ("none", "uniform", "prompt_gdro")
"""GRPO's curricula over the task's levels: ``none`` (the task draws the levels) or a
:mod:`rljax.curriculum` sampler."""

ARCHITECTURES = ("tiny", "decoder")
"""The policies a flat config chooses (:class:`LMArchitectureConfig`)."""

LORA_TARGET_SETS = {"attention": ("q_proj", "k_proj", "v_proj", "o_proj"),
                    "mlp": ("gate_proj", "up_proj", "down_proj"),
                    "all": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                            "down_proj")}
"""``lora_targets``' values: the decoder projections each adapts (HF's module names)."""

C = TypeVar("C")


@dataclass(frozen=True)
class LMGRPOConfig:
    """GRPO's own settings: the advantage, the loss's aggregation and the published
    variants' knobs (Python scalars and strings; ``rljax.training.lm``'s module docstring
    lists each variant's settings). The shared clip, KL weight and ``mu`` are fields of
    :class:`~rljax.training.lm.LMTrainConfig`.

    Attributes:
      advantage: the estimator (:data:`ADVANTAGES`).
      aggregation: the loss's aggregation (:data:`rljax.losses.AGGREGATIONS`).
      kl_estimator: the estimator of the KL to the reference in the loss (read when
        ``kl_beta > 0``).
      scale_rewards: ``""`` (the estimator's own scale), ``"group"``, ``"batch"`` or
        ``"none"``; the first three estimators only.
      sequence_ratio: GSPO's sequence-level importance ratio.
      mask_truncated: DAPO's overlong filtering: completions without EOS within
        ``max_new_tokens`` get mask 0.
      entropy_top_q: 0 (off) or ``q`` in ``(0, 1]``: train on the top-``q`` entropy tokens.
      dynamic_sampling: the zero-signal groups leave the loss (the equal-budget form of
        DAPO's dynamic sampling).
      oversample: ``m >= 1``; with ``m > 1`` (and ``dynamic_sampling``) DAPO's own form:
        each step samples ``m P`` prompts x ``G`` completions (``m P G`` rollouts) and
        trains on the first ``P`` groups with signal, in draw order; when fewer than
        ``P`` have signal, zero-signal groups fill the batch with mask 0.
      curriculum: ``"none"``, or a :mod:`rljax.curriculum` sampler over the task's levels
        as "prompts" (difficulty = level): ``"uniform"`` or ``"prompt_gdro"``.
    """

    advantage: str = param("group_relative", "GRPO's advantage estimator",
                           choices=ADVANTAGES)
    aggregation: str = param("token-mean", "the loss's aggregation over tokens and sequences",
                             choices=AGGREGATIONS)
    kl_estimator: str = param("k3", "estimator of the KL to the reference in the loss "
                              "(read when kl_beta > 0)", choices=KL_ESTIMATORS)
    scale_rewards: str = param("", "reward scale: '' (the estimator's own), group, batch or "
                               "none (the first three estimators only)",
                               choices=SCALE_REWARDS)
    sequence_ratio: bool = param(False, "GSPO's sequence-level importance ratio")
    mask_truncated: bool = param(False, "DAPO's overlong filtering: completions without EOS "
                                 "within max_new_tokens leave the loss")
    entropy_top_q: float = param(0.0, "0 (off) or q: train on the top-q entropy tokens",
                                 low=0.0, high=1.0)
    dynamic_sampling: bool = param(False, "zero-signal groups leave the loss (DAPO's "
                                   "dynamic sampling, equal-budget form)")
    oversample: int = param(1, "DAPO's refill: sample oversample x P prompts and keep the "
                            "first P groups with signal (needs dynamic_sampling; 1 = off)",
                            low=1)
    curriculum: str = param("none", "none (the task draws the levels), or a curriculum "
                            "sampler over the levels: uniform or prompt_gdro",
                            choices=CURRICULA)

    def validate(self) -> None:
        """One-line :class:`~rljax.config.ConfigError` naming the first invalid field:
        each against its declaration, then ``scale_rewards`` against ``advantage``."""
        check_fields(self)
        if self.scale_rewards and self.advantage not in SCALED_ADVANTAGES:
            raise ConfigError(f"scale_rewards: applies to advantage in {SCALED_ADVANTAGES}, "
                              f"not {self.advantage!r}; leave it ''")
        if self.oversample > 1 and not self.dynamic_sampling:
            raise ConfigError(f"oversample: needs dynamic_sampling=True (the refill keeps "
                              f"groups with signal), got {self.oversample}")
        if self.oversample > 1 and self.curriculum != "none":
            raise ConfigError(f"oversample: a curriculum draws exactly P prompts; use "
                              f"oversample=1 with curriculum={self.curriculum!r}")


@dataclass(frozen=True)
class LMSFTConfig:
    """Continued supervised training, the control arm of an RL study: each step of the
    "RL" phase is one supervised step instead (cross-entropy of ``sft_batch`` correct
    solutions, Adam at ``sft_learning_rate`` -- the warm-up's constant rate -- with the
    RL phase's ``lr_warmup_steps`` and no gradient clip), drawn like the warm-up's: fresh
    training problems, or with ``label_bank`` the seed's fixed bank. It reads no reward.
    What it measures is the ceiling when labels exist (or, with a bank, what more
    supervised training on the few labels gives). Each step's batch is ``sft_batch``
    problems (prompts ``[sft_batch, Lp]``, solutions ``[sft_batch, Ls]``).

    Attributes:
      (none: the shared :class:`~rljax.training.lm.LMTrainConfig` fields ``sft_batch``,
      ``sft_learning_rate``, ``label_bank``, ``lr_warmup_steps`` and ``rl_steps`` say
      everything; the class names the algorithm.)
    """

    def validate(self) -> None:
        """Nothing to check (no fields)."""
        check_fields(self)


@dataclass(frozen=True)
class LMPPOConfig:
    """PPO's own settings: the value model's loss weight, the entropy bonus and GAE's
    lambda over tokens (Python scalars; ``gamma = 1``). The shared clip, KL weight (a
    per-token reward term for PPO) and ``mu`` (epochs) are fields of
    :class:`~rljax.training.lm.LMTrainConfig`.

    Attributes:
      value_coef: weight of the value loss.
      entropy_coef: weight of the entropy bonus.
      lam: GAE's lambda over the completion's tokens.
    """

    value_coef: float = param(0.5, "weight of the value model's loss", low=0.0)
    entropy_coef: float = param(0.0, "weight of the entropy bonus", low=0.0)
    lam: float = param(0.95, "GAE lambda over tokens (gamma = 1)", low=0.0, high=1.0)

    def validate(self) -> None:
        """One-line :class:`~rljax.config.ConfigError` naming the first invalid field."""
        check_fields(self)


@dataclass(frozen=True)
class LMDecoderConfig:
    """The Llama / Qwen2-style :class:`~rljax.policies.decoder.Decoder`'s own settings
    (Python scalars and a path); its ``hidden_size``, ``num_hidden_layers`` and
    ``num_attention_heads`` are :class:`~rljax.training.lm.LMTrainConfig`'s ``width``,
    ``num_layers`` and ``num_heads`` (``width / num_heads`` must be even: rotary
    embeddings rotate halves).

    Attributes:
      num_kv_heads: key/value heads (0 = ``num_heads``; fewer is grouped-query attention;
        must divide ``num_heads``).
      intermediate_size: the SwiGLU width (0 = ``8 width / 3`` rounded up to a multiple
        of 16, the parameters of a ``4 width`` GELU MLP: 176 for width 64, as
        ``DecoderConfig``'s default).
      tie_embeddings: the vocabulary head is the embedding's transpose.
      checkpoint: ``""`` (random init), or a local Hugging Face-layout directory whose
        weights start every seed's policy (then ``sft_steps`` of warm-up on top, may be 0);
        its sizes replace the size fields, its vocabulary must be the task's tokenizer
        and its ``max_position_embeddings`` at least ``prompt_length + max_new_tokens``.
      lora_rank, lora_alpha, lora_targets: LoRA (:mod:`rljax.policies.lora`): with
        ``lora_rank = r > 0`` the RL phase trains only rank-``r`` adapters of the
        ``lora_targets`` projections, scaled by ``lora_alpha / r``, on the warm-started
        decoder, which stays frozen and is also the KL reference (no second copy);
        ``0``: full fine-tuning. :meth:`lora` gives the
        :class:`~rljax.policies.lora.LoRAConfig`.
    """

    num_kv_heads: int = param(0, "key/value heads (0 = num_heads; fewer is grouped-query "
                              "attention; must divide num_heads)", low=0)
    intermediate_size: int = param(0, "the SwiGLU width (0 = 8 width / 3 rounded up to a "
                                   "multiple of 16)", low=0)
    tie_embeddings: bool = param(False, "the vocabulary head is the embedding's transpose")
    checkpoint: str = param("", "'' (random init) or a local Hugging Face-layout directory "
                            "whose weights start every seed (its sizes replace the size "
                            "fields)")
    lora_rank: int = param(0, "LoRA's rank r: the RL phase trains only rank-r adapters on "
                           "the frozen warm-started decoder, also the KL reference (0 = "
                           "full fine-tuning)", low=0)
    lora_alpha: float = param(16.0, "LoRA's scale numerator: the adapters add "
                              "(lora_alpha / lora_rank) A B", low=0.0, low_open=True)
    lora_targets: str = param("attention", "the projections LoRA adapts: attention (q, k, "
                              "v, o), mlp (gate, up, down) or all",
                              choices=tuple(LORA_TARGET_SETS))

    def validate(self) -> None:
        """One-line :class:`~rljax.config.ConfigError` naming the first invalid field."""
        check_fields(self)
        if self.lora_rank == 0:
            defaults = {f.name: f.default for f in dataclasses.fields(LMDecoderConfig)}
            for name in ("lora_alpha", "lora_targets"):
                default = defaults[name]
                if getattr(self, name) != default:
                    raise ConfigError(f"{name}: a LoRA setting, needs lora_rank >= 1 (leave "
                                      f"it {default!r} for full fine-tuning), got "
                                      f"{getattr(self, name)!r}")

    def lora(self) -> LoRAConfig | None:
        """The :class:`~rljax.policies.lora.LoRAConfig` of the ``lora_*`` fields, or None
        for full fine-tuning (``lora_rank = 0``)."""
        if not self.lora_rank:
            return None
        return LoRAConfig(rank=self.lora_rank, alpha=float(self.lora_alpha),
                          targets=LORA_TARGET_SETS[self.lora_targets])


@dataclass(frozen=True)
class LMArchitectureConfig(LMDecoderConfig):
    """The policy choice in flat form, for a config set field by field (a study's
    ``--set``): ``architecture`` plus :class:`LMDecoderConfig`'s fields (Python scalars
    and a path), which :meth:`decoder` turns into the trainer's ``decoder`` argument.

    Attributes:
      architecture: ``"tiny"`` (:class:`~rljax.policies.lm.TinyLM`, GPT-2 style) or
        ``"decoder"`` (:class:`~rljax.policies.decoder.Decoder`, Llama / Qwen2 style,
        with the decoder fields).
    """

    architecture: str = param("tiny", "the policy: tiny (TinyLM, GPT-2 style) or decoder "
                              "(Llama / Qwen2 style, with the decoder fields)",
                              choices=ARCHITECTURES)

    def decoder(self) -> LMDecoderConfig | None:
        """``None`` for ``"tiny"``, else the :class:`LMDecoderConfig` of these fields.

        Raises:
          ConfigError: (one line) a decoder field differs from its default with
            ``architecture="tiny"``, where nothing would read it.
        """
        if self.architecture == "decoder":
            return config_from(LMDecoderConfig, self)
        for f in declared_fields(LMDecoderConfig):
            value = getattr(self, f.name)
            if value != f.default:
                raise ConfigError(f"{f.name}: a decoder setting, needs architecture='decoder' "
                                  f"(leave it {f.default!r} for 'tiny'), got {value!r}")
        return None


class LMTask(Protocol):
    """What the LM trainer calls on its task (:class:`~rljax.envs.arithmetic.ArithmeticTask`
    is one, :class:`~rljax.envs.text_tasks.TokenizedTask` another): problems as token
    arrays and reward programs over completions. An optional ``tokenizer`` attribute
    (``vocab_size``, ``eos_id``, ``pad_id``) sets the policy's vocabulary ``V`` and
    generation's stop and pad ids; without one, the arithmetic character tokenizer's.

    Attributes:
      levels: the difficulty levels (ints) the task draws from; the evaluation set takes
        them in turn and a curriculum samples over them.
      prompt_length: ``Lp``, prompt columns (with BOS); the policy's context is
        ``Lp + max_new_tokens``.
      solution_length: ``Ls <= max_new_tokens``, the columns of the warm-up's solutions.
    """

    levels: tuple[int, ...]
    prompt_length: int
    solution_length: int

    def validate(self) -> None:
        """Raise a one-line ``ValueError`` naming the first bad setting (no arrays)."""

    def sample(self, key: Any, num: int, level: Any = None, split: str = "train") -> Any:
        """``num`` problems: ``prompt, prompt_mask [N, Lp]``, ``solution, solution_mask
        [N, Ls]``, ``level [N]`` (``level [N]`` given: those levels; ``split``:
        ``"train"`` or ``"eval"``)."""

    def is_held_out(self, problems: Any) -> Any:
        """bool ``[N]``: the problem is on the held-out side of the task's split."""

    def rewards(self, problems: Any, completion: Any, completion_mask: Any) -> Any:
        """The reward programs of completions ``[N, T]``: ``accuracy``, ``format`` and
        ``process``, float32 ``[N]`` each."""

    def combined_reward(self, rewards: Any, weights: dict[str, float]) -> Any:
        """``sum_k weights[k] * rewards.k``: float32 ``[N]``."""


TASK_METHODS = ("validate", "sample", "is_held_out", "rewards", "combined_reward")
"""The methods of :class:`LMTask` the trainer calls."""

TASK_ATTRIBUTES = ("levels", "prompt_length", "solution_length")
"""The attributes of :class:`LMTask` the trainer reads."""


def config_from(config_cls: type[C], flat: Any) -> C:
    """A ``config_cls`` whose every field is read from ``flat`` (a config extending
    ``config_cls``, e.g. a study's): how a flat config builds the trainer's values. No
    arrays; the fields are Python scalars."""
    return config_cls(**{f.name: getattr(flat, f.name)
                         for f in dataclasses.fields(config_cls)})  # type: ignore[call-arg]


def check_task(task: Any) -> None:
    """The task has the attributes and methods of :class:`LMTask` (one-line
    :class:`~rljax.config.ConfigError` naming the first missing one), and its own
    ``validate()`` passes. Reads no arrays (scalars only)."""
    needed = (*TASK_ATTRIBUTES, *TASK_METHODS)
    for name in needed:
        if not hasattr(task, name):
            raise ConfigError(f"task: {type(task).__name__} has no {name!r} (the LM trainer "
                              f"needs {', '.join(needed)})")
    task.validate()


__all__ = [
    "ADVANTAGES",
    "ARCHITECTURES",
    "CURRICULA",
    "SCALED_ADVANTAGES",
    "SCALE_REWARDS",
    "LMArchitectureConfig",
    "LMDecoderConfig",
    "LMGRPOConfig",
    "LMPPOConfig",
    "LMTask",
    "LORA_TARGET_SETS",
    "check_task",
    "config_from",
]
