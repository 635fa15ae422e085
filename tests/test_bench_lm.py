"""`rljax bench lm` at a tiny size: the measurements run and the table prints."""

import dataclasses

from experiments.benchmarks import lm as bench
from rljax.training.lm import LMTrainConfig


def test_tiny_benchmark_prints(monkeypatch):
    monkeypatch.setattr(bench, "ROUNDS", 1)
    monkeypatch.setattr(bench, "STEP_ROUNDS", 1)
    monkeypatch.setattr(bench, "NEW_TOKENS", 4)
    tiny = LMTrainConfig(width=16, num_layers=1, num_heads=2, sft_steps=0, prompts_per_step=2,
                         group_size=2, eval_prompts=4)
    result = {"device": "cpu", "new_tokens": 4, "prompt_length": bench.PROMPT_LENGTH,
              "rounds": 1, "generation": [bench.measure_generation(2)],
              "steps": [bench.measure_step("grpo", dataclasses.replace(tiny))]}
    gen = result["generation"][0]
    assert gen["cached"]["tokens_per_second"] > 0 and gen["cache_speedup"] > 0
    assert result["steps"][0]["completions_per_step"] == 4
    text = bench.table(result)
    assert "cache speed-up" in text and "| grpo | 4 |" in text
