"""`rljax bench lm-scale` at its quick size: the issue's keys are written, LoRA's memory
figures agree with the state's own sizes, and the padded sampler generates what each
prompt generates alone. The 8-device sharding check itself runs in
tests/test_lm_sharding.py (the same ``run_sharding_figures``), so here it is replaced by
a stand-in whose values must come through unchanged."""

import math

import jax
import pytest

from experiments.benchmarks import lm_scale as bench
from rljax.policies.lora import adapted_kernels
from rljax.training.lm import tree_bytes

KEYS = ("sharded_vs_single_max_abs_diff", "fsdp_memory_per_device_ratio",
        "lora_memory_ratio", "sampler_tokens_per_second_padded",
        "sampler_tokens_per_second_unpadded")


def test_quick_run_reports_the_issue_keys(monkeypatch):
    calls = []

    def stand_in(devices, timeout):
        calls.append(devices)
        return {"sharded_vs_single_max_abs_diff": 6.2e-6,
                "fsdp_memory_per_device_ratio": 0.128}

    monkeypatch.setattr(bench, "run_sharding_figures", stand_in)
    result = bench.run(quick=True)
    assert calls == [8]
    assert set(KEYS) <= set(result)
    assert result["sharded_vs_single_max_abs_diff"] == 6.2e-6
    assert result["fsdp_memory_per_device_ratio"] == 0.128

    (row,) = result["lora"]
    assert result["lora_memory_ratio"] == row["ratio"]
    full, lora = row["full"], row["lora"]
    assert row["ratio"] == pytest.approx(lora["total_bytes"] / full["total_bytes"])
    assert 0 < row["ratio"] < 1
    for m in (full, lora):
        assert m["total_bytes"] == (m["temp_bytes"] + m["argument_bytes"] + m["output_bytes"]
                                    - m["alias_bytes"])
        assert m["alias_bytes"] > 0  # the state is donated
    # LoRA's trainable state is the adapters: r (in + out) per adapted kernel, and Adam's
    # two moments of them (plus its step count)
    trainer = bench.scale_trainer(bench.QUICK_SIZES[0])
    base = jax.eval_shape(trainer.policy.init, jax.random.key(0))
    expected = sum(bench.LORA.rank * sum(k.shape) for k in
                   adapted_kernels(base, bench.LORA).values())
    assert row["adapter_parameters"] == expected
    assert lora["param_bytes"] == 4 * expected
    assert full["param_bytes"] == tree_bytes(base) == lora["reference_bytes"]
    assert row["state_ratio"] == pytest.approx(
        (lora["param_bytes"] + lora["optimizer_bytes"])
        / (full["param_bytes"] + full["optimizer_bytes"]))
    assert 2 * lora["param_bytes"] <= lora["optimizer_bytes"] < 2 * lora["param_bytes"] + 64

    sampler = result["sampler"]
    assert sampler["same_tokens_fraction"] == 1.0  # padded batch == each prompt alone
    assert len(set(sampler["prompt_lengths"])) > 1  # the prompts differ in length
    for side in ("padded", "unpadded"):
        assert sampler[side]["tokens_per_second"] == pytest.approx(
            sampler["batch"] * sampler["new_tokens"] / sampler[side]["median_seconds"])
        assert math.isfinite(sampler[side]["tokens_per_second"])
    assert result["sampler_tokens_per_second_padded"] == sampler["padded"]["tokens_per_second"]
    text = bench.table(result)
    assert "LoRA / full" in text and f"{row['ratio']:.3f}" in text
