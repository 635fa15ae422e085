"""``rljax bench lm-scale``: the LM trainer at the sizes people train -- LoRA's memory,
FSDP over a device mesh, and the batched sampler with variable prompt lengths.

**LoRA memory** (``lora_memory_ratio``): XLA's memory analysis
(:func:`rljax.training.lm.training_step_memory`, the state donated as in a training loop)
of one seed's compiled GRPO step of the LM trainer, full fine-tuning against LoRA
(:data:`LORA`: rank 16, alpha 32, every projection), at the sizes of :data:`SIZES`: about
10 M parameters (width 384, 6 layers, 8 / 4 heads, MLP 1152, the arithmetic task's 19
tokens) and the shapes of Qwen2-0.5B (hidden 896, 24 layers, 14 query / 2 key-value
heads, MLP 4864, 151,936 tokens, tied embeddings, q/k/v biases: 494 M parameters),
Qwen2.5-1.5B and Qwen2.5-7B, randomly initialised (``SIZE_NAMES`` picks the rows).
Both steps sample ``P x G`` completions of the arithmetic task's prompts
(ids below 19 embed into the larger vocabulary unchanged), score them, and update with a
KL to the reference (``kl_beta`` 0.04): full fine-tuning holds the policy, the frozen
reference and Adam's two moments; LoRA holds the base once (the policy's frozen part *and*
the reference), the adapters and their moments. On the CPU the steps are compiled, not
run (nothing is allocated); ``total = temp + argument + output - alias``, and the ratio is
LoRA / full (``lora_memory_ratio``: the 0.5 B row's). On an accelerator (``RUN_STEPS =
True``, the GPU preset, sizes 10 M and 0.5 B) both steps also run: median step seconds
and completion tokens/s.

**FSDP** (``sharded_vs_single_max_abs_diff``, ``fsdp_memory_per_device_ratio``): a child
process started with ``--xla_force_host_platform_device_count=8`` (so it runs on any
machine) runs :func:`rljax.training.lm_sharding.run_sharding_figures` -- one GRPO step of
a small decoder sharded over an 8-device FSDP mesh against the same step on one device
(the same sampled tokens; the largest parameter difference), and the per-device bytes of
params + Adam state, sharded over replicated.

**Sampler** (``sampler``): ``B`` prompts of lengths drawn from ``[4, Lp]``, generated as
one left-padded batch (one ``generate`` call with per-row keys) against one at a time,
each alone at its own length (every length compiled first; the batch is also compiled
first); alternating over ``ROUNDS`` rounds, medians. tokens/s = ``B x new_tokens /
seconds``; ``same_tokens_fraction`` is the share of tokens on which the two agree (1.0:
the padded batch generates what each prompt generates alone).

``RLJAX_BENCH_LM_SCALE_QUICK=1`` (or ``run(quick=True)``) runs tiny sizes for tests.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from dataclasses import dataclass

import jax
import numpy as np

from experiments.benchmarks.lm import _time
from rljax.policies.decoder import Decoder, DecoderConfig
from rljax.policies.lm_common import num_parameters
from rljax.policies.lora import LORA_TARGETS, LoRAConfig
from rljax.tokenizer import PAD_ID
from rljax.training.lm import (
    LMDecoderConfig,
    LMTrainConfig,
    LMTrainer,
    arithmetic_task,
    make_lm_trainer,
    training_step_memory,
)
from rljax.training.lm_sharding import run_sharding_figures

LORA = LoRAConfig(rank=16, alpha=32.0, targets=LORA_TARGETS)
"""The LoRA of the memory comparison: rank 16, alpha 32, all seven projections."""

ROUNDS = 5
STEP_ROUNDS = 3
RUN_STEPS = False
"""Time the full and LoRA steps too (an accelerator; on the CPU they are compiled only)."""
SHARD_DEVICES = 8
SHARD_TIMEOUT_S = 300


@dataclass(frozen=True)
class ScaleSize:
    """One model size of the LoRA comparison.

    Attributes:
      name: the row's label.
      config: the decoder's shapes (``max_position_embeddings`` is set to the task's
        prompt columns + ``new_tokens``).
      prompts, group_size, new_tokens: the GRPO step's ``P x G`` completions of
        ``new_tokens`` tokens.
    """

    name: str
    config: DecoderConfig
    prompts: int = 8
    group_size: int = 8
    new_tokens: int = 32


QWEN2_0_5B = DecoderConfig(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                           num_hidden_layers=24, num_attention_heads=14,
                           num_key_value_heads=2, rope_theta=1e6, rms_norm_eps=1e-6,
                           tie_word_embeddings=True, attention_bias=True, model_type="qwen2")
"""Qwen2-0.5B's shapes (its config.json), randomly initialised: 494 M parameters."""

QWEN2_1_5B = DecoderConfig(vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                           num_hidden_layers=28, num_attention_heads=12,
                           num_key_value_heads=2, rope_theta=1e6, rms_norm_eps=1e-6,
                           tie_word_embeddings=True, attention_bias=True,
                           model_type="qwen2")
"""Qwen2.5-1.5B's shapes: 1.54 B parameters."""

QWEN2_7B = DecoderConfig(vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                         num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                         rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=False,
                         attention_bias=True, model_type="qwen2")
"""Qwen2.5-7B's shapes (untied head): 7.6 B parameters."""

SIZES = (
    ScaleSize("10M", DecoderConfig(hidden_size=384, intermediate_size=1152,
                                   num_hidden_layers=6, num_attention_heads=8,
                                   num_key_value_heads=4)),
    ScaleSize("0.5B", QWEN2_0_5B),
    ScaleSize("1.5B", QWEN2_1_5B),
    ScaleSize("7B", QWEN2_7B),
)
SIZE_NAMES = ("10M", "0.5B", "1.5B", "7B")
"""The sizes a full run measures (the GPU preset keeps the two whose steps it runs)."""
QUICK_SIZES = (
    ScaleSize("tiny", DecoderConfig(hidden_size=32, intermediate_size=64,
                                    num_hidden_layers=1, num_attention_heads=2,
                                    num_key_value_heads=1),
              prompts=2, group_size=2, new_tokens=4),
)
SAMPLER_SIZE = ScaleSize("10M", SIZES[0].config, prompts=16, new_tokens=16)
QUICK_SAMPLER_SIZE = ScaleSize("tiny", QUICK_SIZES[0].config, prompts=3, new_tokens=3)


def _quick() -> bool:
    return os.environ.get("RLJAX_BENCH_LM_SCALE_QUICK", "") not in ("", "0")


def scale_trainer(size: ScaleSize) -> LMTrainer:
    """The LM trainer (GRPO, KL 0.04, the arithmetic task's levels 0-1, no warm-up) with
    ``size``'s decoder as its policy (randomly initialised)."""
    config = LMTrainConfig(width=32, num_layers=1, num_heads=2, sft_steps=0,
                           max_new_tokens=size.new_tokens, prompts_per_step=size.prompts,
                           group_size=size.group_size, rl_steps=1, steps_per_chunk=1,
                           eval_prompts=8, kl_beta=0.04)
    trainer = make_lm_trainer(config, None, LMDecoderConfig(),
                              task=arithmetic_task(config, (0, 1)))
    context = trainer.task.prompt_length + size.new_tokens
    policy = Decoder(dataclasses.replace(size.config, max_position_embeddings=context))
    return dataclasses.replace(trainer, policy=policy)


def _timed_steps(trainer: LMTrainer, rounds: int) -> dict:
    step = jax.jit(trainer.rl_step, donate_argnums=(0,))
    state = jax.jit(trainer.init)(jax.random.key(0))
    state, _ = step(state)  # compile and warm
    times = []
    for _ in range(rounds):
        seconds, (state, _) = _time(step, state)
        times.append(seconds)
    median = statistics.median(times)
    completions = trainer.config.prompts_per_step * trainer.config.group_size
    return {"median_step_seconds": median,
            "tokens_per_second": completions * trainer.config.max_new_tokens / median}


def lora_memory(size: ScaleSize, run_steps: bool = False, rounds: int = STEP_ROUNDS
                ) -> dict:
    """Full fine-tuning vs :data:`LORA` for ``size``: parameter counts, each step's
    :func:`~rljax.training.lm.training_step_memory` (donated state), ``ratio`` = LoRA /
    full total bytes and ``state_ratio`` = LoRA / full bytes of trainable params + Adam
    state; with ``run_steps``, median step seconds and tokens/s of each."""
    full = scale_trainer(size)
    lora = dataclasses.replace(full, lora=LORA)
    shapes = jax.eval_shape(lora.init, jax.random.key(0))
    out = {"name": size.name, "prompts": size.prompts, "group_size": size.group_size,
           "new_tokens": size.new_tokens,
           "num_parameters": num_parameters(shapes.reference),
           "adapter_parameters": num_parameters(shapes.params), "lora": dataclasses.asdict(LORA)}
    for name, trainer in (("full", full), ("lora", lora)):
        start = time.perf_counter()
        out[name] = training_step_memory(trainer, donate=True)
        out[name]["compile_seconds"] = time.perf_counter() - start
        if run_steps:
            out[name].update(_timed_steps(trainer, rounds))
    out["ratio"] = out["lora"]["total_bytes"] / out["full"]["total_bytes"]
    trainable = {k: out[k]["param_bytes"] + out[k]["optimizer_bytes"] for k in ("full", "lora")}
    out["state_ratio"] = trainable["lora"] / trainable["full"]
    return out


def compare_sampler(size: ScaleSize, rounds: int, seed: int = 0) -> dict:
    """One left-padded batch of ``size.prompts`` variable-length prompts vs each prompt
    alone (module docstring): ``{"batch", "new_tokens", "prompt_lengths", "padded",
    "unpadded", "padded_speedup", "same_tokens_fraction"}``; each side has
    ``compile_seconds``, ``median_seconds``, ``tokens_per_second``."""
    task = arithmetic_task(LMTrainConfig(), (0, 1))
    width = task.prompt_length
    policy = Decoder(dataclasses.replace(size.config,
                                         max_position_embeddings=width + size.new_tokens))
    params = policy.init(jax.random.key(seed))
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, width + 1, size.prompts)
    vocab = size.config.vocab_size
    prompts = np.full((size.prompts, width), PAD_ID, np.int32)
    masks = np.zeros((size.prompts, width), np.int32)
    for row, n in enumerate(lengths):
        prompts[row, width - n:] = rng.integers(3, vocab, n)
        masks[row, width - n:] = 1
    new = size.new_tokens

    def generate(params, prompt, mask, keys):
        return policy.generate(params, prompt, mask, keys, max_new_tokens=new).tokens

    start = time.perf_counter()
    batch_fn = jax.jit(generate).lower(params, prompts, masks,
                                       jax.random.split(jax.random.key(0), size.prompts)
                                       ).compile()
    padded_compile = time.perf_counter() - start
    start = time.perf_counter()
    alone_fns = {int(n): jax.jit(generate).lower(
        params, prompts[:1, :n], masks[:1, :n], jax.random.split(jax.random.key(0), 1)
    ).compile() for n in sorted(set(lengths.tolist()))}
    unpadded_compile = time.perf_counter() - start
    times = {"padded": [], "unpadded": []}
    same = []
    for r in range(rounds):
        keys = jax.random.split(jax.random.key(r + 1), size.prompts)
        seconds, batch_tokens = _time(batch_fn, params, prompts, masks, keys)
        times["padded"].append(seconds)
        start = time.perf_counter()
        alone = [jax.block_until_ready(alone_fns[int(n)](
            params, prompts[i:i + 1, width - n:], masks[i:i + 1, width - n:], keys[i:i + 1]))
            for i, n in enumerate(lengths)]
        times["unpadded"].append(time.perf_counter() - start)
        same.append(np.mean(np.asarray(batch_tokens) == np.concatenate(
            [np.asarray(a) for a in alone])))
    out = {"batch": size.prompts, "new_tokens": new, "rounds": rounds,
           "prompt_lengths": lengths.tolist()}
    for name, compile_seconds in (("padded", padded_compile), ("unpadded", unpadded_compile)):
        median = statistics.median(times[name])
        out[name] = {"compile_seconds": compile_seconds, "median_seconds": median,
                     "tokens_per_second": size.prompts * new / median}
    out["padded_speedup"] = out["unpadded"]["median_seconds"] / out["padded"]["median_seconds"]
    out["same_tokens_fraction"] = float(np.mean(same))
    return out


def sharding_check(devices: int = SHARD_DEVICES, timeout_s: float = SHARD_TIMEOUT_S) -> dict:
    """:func:`rljax.training.lm_sharding.run_sharding_figures` on ``devices`` forced CPU
    devices (a child process): ``sharded_vs_single_max_abs_diff``,
    ``fsdp_memory_per_device_ratio`` and the figures beside them."""
    return {"devices": devices, **run_sharding_figures(devices=devices, timeout=timeout_s)}


def run(quick: bool | None = None) -> dict:
    """All figures (module docstring); ``quick``: tiny sizes (default from
    ``RLJAX_BENCH_LM_SCALE_QUICK``)."""
    quick = _quick() if quick is None else quick
    start = time.perf_counter()
    rounds = 1 if quick else ROUNDS
    sizes = QUICK_SIZES if quick else tuple(s for s in SIZES if s.name in SIZE_NAMES)
    result = {"device": jax.devices()[0].device_kind, "jax_version": jax.__version__,
              "cpu_count": os.cpu_count(), "load_average_start": os.getloadavg()[0],
              "quick": quick}
    result["lora"] = [lora_memory(s, RUN_STEPS and not quick, 1 if quick else STEP_ROUNDS)
                      for s in sizes]
    # the headline: the ~0.5 B configuration (the issue's), the last row in a quick run
    result["lora_memory_ratio"] = next((r["ratio"] for r in result["lora"]
                                        if r["name"] == "0.5B"), result["lora"][-1]["ratio"])
    result["sampler"] = compare_sampler(QUICK_SAMPLER_SIZE if quick else SAMPLER_SIZE,
                                        rounds)
    result["sampler_tokens_per_second_padded"] = result["sampler"]["padded"][
        "tokens_per_second"]
    result["sampler_tokens_per_second_unpadded"] = result["sampler"]["unpadded"][
        "tokens_per_second"]
    result["sharding"] = sharding_check()
    for key in ("sharded_vs_single_max_abs_diff", "fsdp_memory_per_device_ratio"):
        result[key] = result["sharding"][key]
    result["wall_seconds"] = time.perf_counter() - start
    result["load_average_end"] = os.getloadavg()[0]
    return result


def _gb(n: int) -> str:
    return f"{n / 1e9:,.2f}"


def table(result: dict) -> str:
    lines = [f"LM at scale on {result['device']}"
             + (" (quick sizes)" if result["quick"] else ""), "",
             "| size | params | adapters | full step GB | LoRA step GB | LoRA / full | "
             "trainable state LoRA / full |", "|---|---:|---:|---:|---:|---:|---:|"]
    for row in result["lora"]:
        lines.append(f"| {row['name']} | {row['num_parameters']:,} | "
                     f"{row['adapter_parameters']:,} | {_gb(row['full']['total_bytes'])} | "
                     f"{_gb(row['lora']['total_bytes'])} | {row['ratio']:.3f} | "
                     f"{row['state_ratio']:.4f} |")
    s = result["sampler"]
    lines += ["", f"sampler, {s['batch']} prompts of lengths {s['prompt_lengths']}, "
              f"{s['new_tokens']} new tokens: padded batch "
              f"{s['padded']['tokens_per_second']:,.0f} tok/s, one at a time "
              f"{s['unpadded']['tokens_per_second']:,.0f} tok/s "
              f"({s['padded_speedup']:.1f}x); same tokens {s['same_tokens_fraction']:.3f}",
              f"FSDP over {result['sharding'].get('devices', SHARD_DEVICES)} devices: "
              f"max |sharded - single| {result['sharded_vs_single_max_abs_diff']:.2e}, "
              f"params + Adam per device / replicated "
              f"{result['fsdp_memory_per_device_ratio']:.3f}",
              f"wall {result['wall_seconds']:.0f} s"]
    return "\n".join(lines)
