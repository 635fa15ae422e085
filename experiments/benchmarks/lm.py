"""``rljax bench lm``: tiny-LM generation with and without the KV cache, and RL step times.

Generation: the default ``TinyLM`` (width 64, 2 layers, 4 heads, context 32), randomly
initialised, generates ``NEW_TOKENS`` tokens after an 8-column prompt at batch 1, 64 and
512 (temperature 1; every row runs all steps, so tokens/s = batch x new tokens / time).
Cached decoding writes one key/value column per step; uncached decoding recomputes the
whole ``[B, prompt + new]`` forward every step. Each side is one ``jax.jit`` compiled
first (compile time reported), then the two sides alternate over ``ROUNDS`` rounds and
the medians are compared (timings on the 2-core machine vary by up to 70 % back to back).

RL steps: one seed's jitted GRPO step and PPO step of the ``lm-grpo`` study's default
config (16 prompts x 8 completions; PPO 128 prompts x 1), compile time and median step
time.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import jax

from rljax.envs.arithmetic import ArithmeticTask
from rljax.policies.lm import LMConfig, TinyLM
from rljax.training.lm import LMTrainConfig, make_lm_trainer

BATCHES = (1, 64, 512)
PROMPT_LENGTH = 8
NEW_TOKENS = 24
ROUNDS = 5
STEP_ROUNDS = 7


def _compiled_generate(lm: TinyLM, params, batch: int, use_cache: bool):
    problems = ArithmeticTask(levels=(1,), prompt_length=PROMPT_LENGTH).sample(
        jax.random.key(1), batch)

    def generate(params, key):
        return lm.generate(params, problems.prompt, problems.prompt_mask, key,
                           max_new_tokens=NEW_TOKENS, use_cache=use_cache).tokens

    start = time.perf_counter()
    compiled = jax.jit(generate).lower(params, jax.random.key(0)).compile()
    return compiled, time.perf_counter() - start


def _time(fn, *args) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - start


def measure_generation(batch: int) -> dict:
    """Cached vs uncached generation at ``batch``: compile seconds, median seconds and
    tokens/s of each, and ``cache_speedup`` (uncached / cached median time)."""
    lm = TinyLM(LMConfig(context_length=PROMPT_LENGTH + NEW_TOKENS))
    params = lm.init(jax.random.key(0))
    sides = {name: _compiled_generate(lm, params, batch, name == "cached")
             for name in ("cached", "uncached")}
    times = {name: [] for name in sides}
    for r in range(ROUNDS):
        key = jax.random.key(r + 1)
        for name, (fn, _) in sides.items():
            times[name].append(_time(fn, params, key))
    out = {"batch": batch}
    for name, (_, compile_seconds) in sides.items():
        median = statistics.median(times[name])
        out[name] = {"compile_seconds": compile_seconds, "median_seconds": median,
                     "tokens_per_second": batch * NEW_TOKENS / median}
    out["cache_speedup"] = out["uncached"]["median_seconds"] / out["cached"]["median_seconds"]
    return out


def measure_step(algorithm: str, config: LMTrainConfig | None = None) -> dict:
    """Compile time and median time of one seed's jitted RL step (``config``: default
    ``LMTrainConfig()`` without warm-up)."""
    config = LMTrainConfig(sft_steps=0) if config is None else config
    trainer = make_lm_trainer(dataclasses.replace(config, algorithm=algorithm))
    state = jax.jit(trainer.init)(jax.random.key(0))
    step = jax.jit(trainer.rl_step)
    start = time.perf_counter()
    compiled = step.lower(state).compile()
    compile_seconds = time.perf_counter() - start
    state, _ = compiled(state)  # warm
    times = []
    for _ in range(STEP_ROUNDS):
        start = time.perf_counter()
        state, metrics = compiled(state)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - start)
    cfg = trainer.config
    return {"algorithm": algorithm, "compile_seconds": compile_seconds,
            "median_step_seconds": statistics.median(times),
            "completions_per_step": cfg.prompts_per_step * cfg.group_size}


def run() -> dict:
    return {
        "device": jax.devices()[0].device_kind,
        "new_tokens": NEW_TOKENS,
        "prompt_length": PROMPT_LENGTH,
        "generation": [measure_generation(b) for b in BATCHES],
        "steps": [measure_step(a) for a in ("grpo", "ppo")],
        "rounds": ROUNDS,
    }


def table(result: dict) -> str:
    lines = [
        f"tiny LM on {result['device']}: {result['new_tokens']} new tokens after a "
        f"{result['prompt_length']}-column prompt; medians of {result['rounds']} alternating "
        "rounds",
        "",
        "| batch | cached tok/s | uncached tok/s | cache speed-up | compile cached s | "
        "compile uncached s |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for g in result["generation"]:
        lines.append(
            f"| {g['batch']} | {g['cached']['tokens_per_second']:,.0f} | "
            f"{g['uncached']['tokens_per_second']:,.0f} | {g['cache_speedup']:.2f}x | "
            f"{g['cached']['compile_seconds']:.2f} | {g['uncached']['compile_seconds']:.2f} |")
    lines += ["", "| step (one seed) | completions | median s | compile s |",
              "|---|---:|---:|---:|"]
    for s in result["steps"]:
        lines.append(f"| {s['algorithm']} | {s['completions_per_step']} | "
                     f"{s['median_step_seconds']:.4f} | {s['compile_seconds']:.2f} |")
    return "\n".join(lines)

