"""Curriculum: which prompts a GRPO step trains on and how many rollouts each gets.

``difficulty`` estimates each prompt's pass@k over a window of recent groups and bins the
prompts by difficulty (with hysteresis); ``samplers`` allocates prompts and rollouts:
uniform, DAPO dynamic sampling, Prompt-GDRO (Hedge/EXP3 weights over difficulty bins) and
Rollout-GDRO (square-root rule with a shadow-price controller). See the two modules'
docstrings for the exact rules.
"""

from rljax.curriculum.difficulty import DifficultyClassifier, DifficultyState, pass_at_k
from rljax.curriculum.samplers import (
    PromptGDROState,
    RolloutGDROState,
    Sampler,
    Selection,
    UniformState,
    dynamic_filter,
    dynamic_sampler,
    prompt_gdro_sampler,
    rollout_gdro_sampler,
    uniform_sampler,
)

__all__ = [
    "DifficultyClassifier",
    "DifficultyState",
    "pass_at_k",
    "PromptGDROState",
    "RolloutGDROState",
    "Sampler",
    "Selection",
    "UniformState",
    "dynamic_filter",
    "dynamic_sampler",
    "prompt_gdro_sampler",
    "rollout_gdro_sampler",
    "uniform_sampler",
]
