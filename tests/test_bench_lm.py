"""`rljax bench lm` at its quick size: every figure is there and positive, the parameter
counts and memory figures agree with independent computations, and cached and uncached
decoder sampling give the same tokens (the last: tests/test_decoder.py, which checks
the same ``generate(..., use_cache=...)`` paths the bench times)."""

import math

import jax
import numpy as np
import pytest

from experiments.benchmarks import lm as bench
from rljax.policies.decoder import Decoder, DecoderConfig

# the quick run compiles the generation and GRPO/PPO steps of two models (~25 s): slow;
# the decoder, trainer and memory analysis have fast tests of their own
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def result():
    return bench.run(quick=True)


def _positive(value) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def test_quick_run_reports_every_figure(result):
    assert result["quick"] and _positive(result["wall_seconds"])
    gen = result["generation"][0]
    for side in ("cached", "uncached"):
        assert all(_positive(gen[side][k]) for k in
                   ("compile_seconds", "median_seconds", "tokens_per_second"))
    assert _positive(gen["cache_speedup"])
    assert result["steps"] == []  # the TinyLM trainer's steps: full runs only
    assert [d["name"] for d in result["decoder"]] == [s.name for s in bench.QUICK_DECODER_SIZES]
    for d, size in zip(result["decoder"], bench.QUICK_DECODER_SIZES, strict=True):
        g, s = d["generation"], d["grpo_step"]
        assert (g["batch"], g["new_tokens"], g["rounds"]) == (size.batch, size.new_tokens, 1)
        for side in ("cached", "uncached"):
            assert all(_positive(g[side][k]) for k in
                       ("compile_seconds", "median_seconds", "tokens_per_second"))
            assert g[side]["tokens_per_second"] == pytest.approx(
                size.batch * size.new_tokens / g[side]["median_seconds"])
        assert _positive(g["cache_speedup"]) and 0.0 <= g["same_tokens_fraction"] <= 1.0
        assert s["completions"] == size.prompts * size.group_size
        assert all(_positive(s[k]) for k in
                   ("compile_seconds", "median_step_seconds", "tokens_per_second"))
        assert s["tokens_per_second"] == pytest.approx(
            s["completions"] * size.new_tokens / s["median_step_seconds"])
        assert math.isfinite(s["final_loss"])
        for name in ("grpo", "ppo"):
            m = d["memory"][name]
            assert all(_positive(m[k]) for k in ("param_bytes", "optimizer_bytes", "temp_bytes",
                                                 "argument_bytes", "output_bytes",
                                                 "total_bytes"))
            assert m["total_bytes"] == (m["temp_bytes"] + m["argument_bytes"]
                                        + m["output_bytes"] - m["alias_bytes"])
            assert m["alias_bytes"] > 0  # params and Adam state are donated
        assert d["memory"]["ratio"] == pytest.approx(
            d["memory"]["grpo"]["total_bytes"] / d["memory"]["ppo"]["total_bytes"])
    text = bench.table(result)
    assert "cache speed-up" in text
    assert "| tiny | grpo |" in text and "GRPO / PPO" in text


def test_parameter_counts_are_the_sums_of_the_leaves(result):
    for d, size in zip(result["decoder"], bench.QUICK_DECODER_SIZES, strict=True):
        params = Decoder(size.config).init(jax.random.key(3))
        count = sum(int(np.size(leaf)) for leaf in jax.tree_util.tree_leaves(params))
        assert d["num_parameters"] == count
        assert d["memory"]["grpo"]["param_bytes"] == 4 * count  # float32
        critic = Decoder(DecoderConfig(**{**d["config"], "value_head": True}))
        critic_count = sum(int(np.size(leaf)) for leaf in
                           jax.tree_util.tree_leaves(critic.init(jax.random.key(4))))
        assert d["critic_parameters"] == critic_count
        assert d["memory"]["ppo"]["param_bytes"] == 4 * (count + critic_count)


def test_memory_matches_an_independent_analysis(result):
    size = bench.QUICK_DECODER_SIZES[0]
    policy = Decoder(size.config)
    critic = Decoder(DecoderConfig(**{**result["decoder"][0]["config"], "value_head": True}))
    optimizer = bench.optimizer()
    grpo_params = jax.eval_shape(policy.init, jax.random.key(0))
    ppo_params = {"policy": grpo_params, "value": jax.eval_shape(critic.init, jax.random.key(0))}
    steps = {"grpo": (bench.make_grpo_step(policy, size), grpo_params),
             "ppo": (bench.make_ppo_step(policy, critic, size), ppo_params)}
    for name, (step, params) in steps.items():
        opt_state = jax.eval_shape(optimizer.init, params)
        analysis = jax.jit(step, donate_argnums=(0, 1)).lower(
            params, opt_state, jax.random.key(0)).compile().memory_analysis()
        reported = result["decoder"][0]["memory"][name]
        assert reported["temp_bytes"] == analysis.temp_size_in_bytes
        assert reported["argument_bytes"] == analysis.argument_size_in_bytes
        assert reported["output_bytes"] == analysis.output_size_in_bytes
        assert reported["alias_bytes"] == analysis.alias_size_in_bytes
