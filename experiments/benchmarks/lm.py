"""``rljax bench lm``: LM generation with and without the KV cache, RL step times and the
memory of a GRPO step against a PPO step.

**TinyLM** (the ``lm-grpo`` study's model): the default ``TinyLM`` (width 64, 2 layers, 4
heads, context 32), randomly initialised, generates ``NEW_TOKENS`` tokens after an
8-column prompt at batch 1, 64 and 512 (temperature 1; every row runs all steps, so
tokens/s = batch x new tokens / time). Cached decoding writes one key/value column per
step; uncached decoding (``generate(..., use_cache=False)``) recomputes the whole ``[B,
prompt + new]`` forward every step. Each side is one ``jax.jit`` compiled first (compile
time reported), then the two sides alternate over ``ROUNDS`` rounds and the medians are
compared (timings on the 2-core machine vary by up to 70 % back to back). Beside it, one
seed's jitted GRPO step and PPO step of the ``lm-grpo`` study's default config (16 prompts
x 8 completions; PPO 128 prompts x 1): compile time and median step time.

**Decoder** (:class:`rljax.policies.decoder.Decoder`, Llama-style: RMSNorm, RoPE,
grouped-query attention, SwiGLU; randomly initialised) at the sizes of
:data:`DECODER_SIZES`: the study's size (``DecoderConfig()``: vocabulary 19 = the char
tokenizer, width 64, 2 layers, 4 heads, 2 key/value heads, MLP 176; 94,912 parameters;
8 + 24 tokens) and about 10 M parameters (width 384, 6 layers, 8 heads, 4 key/value heads,
MLP 1152, vocabulary 19; 10,636,416 parameters; 8 + 16 tokens, fewer rounds). For each
size:

* **sampling**: cached vs uncached ``generate`` (``use_cache``), ``batch`` rows x
  ``new_tokens`` at temperature 1, compiled first, alternating over ``rounds`` rounds,
  medians; ``same_tokens_fraction`` is the share of sampled tokens on which the two sides
  agree over the timed keys (the same key gives the same noise to both).
* **GRPO step**: one compiled step of ``prompts x group_size`` completions: draw
  arithmetic problems, sample (cached), score with the accuracy reward program, recompute
  the old log-probabilities with one forward, then :func:`rljax.algorithms.grpo`
  (token-mean, no KL, so no reference model) through
  :func:`rljax.algorithms.multi_step_update` with ``clip_by_global_norm(1) + adam(3e-4)``;
  tokens/s = completions x new tokens / median step time (every row samples all
  ``new_tokens`` columns). Warmed once, then ``step_rounds`` timed calls. A randomly
  initialised model answers nothing correctly, so the rewards, advantages and loss are 0
  (``final_loss``); the step still runs every operation (XLA does not skip zeros), so the
  time and memory are those of a step with signal.
* **memory**: XLA's ``compiled.memory_analysis()`` of that GRPO step and of a PPO step of
  the same completions (``prompts * group_size`` prompts x 1) with a separate critic of the
  same size (``Decoder`` with ``value_head=True``) trained by the same Adam:
  ``total = temp + argument + output - alias``. The parameters and Adam's state are donated
  (``donate_argnums``), so the updated ones alias them as they would in a training loop;
  neither step holds a frozen reference (no KL). The analysis is of the compiled program
  (the GRPO one is the timed program; the PPO step is compiled, never run).

The result records the wall time and the 1-minute load average at the start and the end
(the CPU is shared; medians are robust to a short burst of load, not to a sustained one).
``RLJAX_BENCH_ROUNDS`` replaces every rounds count; ``RLJAX_BENCH_LM_QUICK=1`` runs a tiny
configuration (tiny models, batch 2-4, 4 new tokens, one round, without the TinyLM
trainer's steps; well under a minute on the shared 2-core CPU, nearly all of it
compiling), for tests.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import time
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rljax.advantages import generalized_advantage_estimation
from rljax.algorithms.grpo import GroupBatch, grpo
from rljax.algorithms.loops import multi_step_update
from rljax.algorithms.ppo import PPOBatch, ppo
from rljax.envs.arithmetic import ArithmeticTask
from rljax.policies.decoder import Decoder, DecoderConfig
from rljax.policies.lm import LMConfig, TinyLM
from rljax.policies.lm_common import CausalLM, num_parameters
from rljax.policies.sampling import log_softmax
from rljax.training.lm import LMGRPOConfig, LMPPOConfig, LMTrainConfig, make_lm_trainer

BATCHES = (1, 64, 512)
PROMPT_LENGTH = 8
NEW_TOKENS = 24
ROUNDS = 5
STEP_ROUNDS = 7
LEVELS = (0, 1)  # the lm-grpo study's levels
LEARNING_RATE = 3e-4
MAX_GRAD_NORM = 1.0


@dataclass(frozen=True)
class DecoderSize:
    """One decoder size of the bench and its workload.

    Attributes:
      name: the row's label.
      config: the policy's :class:`DecoderConfig` (the critic is the same with
        ``value_head=True``); ``max_position_embeddings = PROMPT_LENGTH + new_tokens``.
      new_tokens: tokens sampled after the 8-column prompt.
      batch: rows of the sampling benchmark.
      prompts, group_size: the GRPO step's ``P x G`` completions (PPO: ``P G`` x 1).
      rounds: alternating cached / uncached sampling rounds.
      step_rounds: timed GRPO steps.
    """

    name: str
    config: DecoderConfig
    new_tokens: int
    batch: int = 64
    prompts: int = 8
    group_size: int = 8
    rounds: int = 5
    step_rounds: int = 5


DECODER_SIZES = (
    DecoderSize("study", DecoderConfig(max_position_embeddings=PROMPT_LENGTH + 24),
                new_tokens=24),
    DecoderSize("10M", DecoderConfig(hidden_size=384, intermediate_size=1152,
                                     num_hidden_layers=6, num_attention_heads=8,
                                     num_key_value_heads=4,
                                     max_position_embeddings=PROMPT_LENGTH + 16),
                new_tokens=16, rounds=3, step_rounds=3),
)

QUICK_DECODER_SIZES = (
    DecoderSize("tiny", DecoderConfig(hidden_size=16, intermediate_size=32,
                                        num_hidden_layers=1, num_attention_heads=2,
                                        num_key_value_heads=1,
                                        max_position_embeddings=PROMPT_LENGTH + 4),
                new_tokens=4, batch=4, prompts=2, group_size=2, rounds=1, step_rounds=1),
)


def _env_rounds() -> int | None:
    value = os.environ.get("RLJAX_BENCH_ROUNDS")
    return None if value in (None, "") else int(value)


def _quick() -> bool:
    return os.environ.get("RLJAX_BENCH_LM_QUICK", "") not in ("", "0")


def _time(fn, *args) -> tuple[float, object]:
    start = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return time.perf_counter() - start, out


def _task() -> ArithmeticTask:
    return ArithmeticTask(levels=LEVELS, prompt_length=PROMPT_LENGTH, solution_length=5)


# ----------------------------------------------------------------------------- sampling


def compare_generation(lm: CausalLM, params, batch: int, new_tokens: int, rounds: int
                       ) -> dict:
    """Cached vs uncached ``lm.generate`` of ``new_tokens`` tokens after ``batch``
    arithmetic prompts (temperature 1).

    Returns ``{"batch", "new_tokens", "rounds", "cached": {...}, "uncached": {...},
    "cache_speedup", "same_tokens_fraction"}``; each side has ``compile_seconds``,
    ``median_seconds`` and ``tokens_per_second = batch * new_tokens / median``;
    ``cache_speedup`` is uncached / cached median time.
    """
    problems = _task().sample(jax.random.key(1), batch)
    sides = {}
    for name in ("cached", "uncached"):
        def generate(params, key, use_cache=name == "cached"):
            return lm.generate(params, problems.prompt, problems.prompt_mask, key,
                               max_new_tokens=new_tokens, use_cache=use_cache).tokens

        start = time.perf_counter()
        compiled = jax.jit(generate).lower(params, jax.random.key(0)).compile()
        sides[name] = (compiled, time.perf_counter() - start)
    times = {name: [] for name in sides}
    same = []
    for r in range(rounds):
        key = jax.random.key(r + 1)
        tokens = {}
        for name, (fn, _) in sides.items():
            seconds, tokens[name] = _time(fn, params, key)
            times[name].append(seconds)
        same.append(np.mean(np.asarray(tokens["cached"]) == np.asarray(tokens["uncached"])))
    out = {"batch": batch, "new_tokens": new_tokens, "rounds": rounds}
    for name, (_, compile_seconds) in sides.items():
        median = statistics.median(times[name])
        out[name] = {"compile_seconds": compile_seconds, "median_seconds": median,
                     "tokens_per_second": batch * new_tokens / median}
    out["cache_speedup"] = out["uncached"]["median_seconds"] / out["cached"]["median_seconds"]
    out["same_tokens_fraction"] = float(np.mean(same))
    return out


def measure_generation(batch: int, new_tokens: int | None = None,
                       rounds: int | None = None) -> dict:
    """TinyLM (default config, context ``PROMPT_LENGTH + new_tokens``): cached vs uncached
    generation at ``batch`` (:func:`compare_generation`; defaults ``NEW_TOKENS``,
    ``ROUNDS``)."""
    new_tokens = NEW_TOKENS if new_tokens is None else new_tokens
    rounds = ROUNDS if rounds is None else rounds
    lm = TinyLM(LMConfig(context_length=PROMPT_LENGTH + new_tokens))
    return compare_generation(lm, lm.init(jax.random.key(0)), batch, new_tokens, rounds)


def measure_step(algorithm: str, config: LMTrainConfig | None = None,
                 rounds: int | None = None) -> dict:
    """Compile time and median time over ``rounds`` (default ``STEP_ROUNDS``) of one seed's
    jitted RL step of the TinyLM trainer (``config``: default ``LMTrainConfig()`` without
    warm-up; ``algorithm`` ``"grpo"`` or ``"ppo"``, each with its config's defaults)."""
    config = LMTrainConfig(sft_steps=0) if config is None else config
    rounds = STEP_ROUNDS if rounds is None else rounds
    trainer = make_lm_trainer(config, LMPPOConfig() if algorithm == "ppo" else LMGRPOConfig())
    state = jax.jit(trainer.init)(jax.random.key(0))
    step = jax.jit(trainer.rl_step)
    start = time.perf_counter()
    compiled = step.lower(state).compile()
    compile_seconds = time.perf_counter() - start
    state, _ = compiled(state)  # warm
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        state, metrics = compiled(state)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - start)
    cfg = trainer.config
    return {"algorithm": algorithm, "compile_seconds": compile_seconds,
            "median_step_seconds": statistics.median(times),
            "completions_per_step": cfg.prompts_per_step * cfg.group_size}


# --------------------------------------------------------------------------- RL steps


def optimizer() -> optax.GradientTransformation:
    """The RL optimizer of both steps: ``clip_by_global_norm(1) + adam(3e-4)``."""
    return optax.chain(optax.clip_by_global_norm(MAX_GRAD_NORM), optax.adam(LEARNING_RATE))


def make_grpo_step(policy: Decoder, size: DecoderSize):
    """``step(params, opt_state, key) -> (params, opt_state, loss)``: one GRPO step of
    ``P x G`` completions (module docstring)."""
    task, p, g, n = _task(), size.prompts, size.group_size, size.new_tokens

    def log_prob_fn(params, obs, actions):
        return policy.completion_log_probs(params, obs["prompt"], obs["prompt_mask"],
                                           actions, obs["completion_mask"])

    rl = grpo(log_prob_fn=log_prob_fn, group_size=g, kl_beta=0.0, aggregation="token-mean")

    def step(params, opt_state, key):
        problem_key, sample_key, update_key = jax.random.split(key, 3)
        problems = task.sample(problem_key, p)
        repeated = jax.tree_util.tree_map(lambda x: jnp.repeat(x, g, axis=0), problems)
        completion = policy.generate(params, repeated.prompt, repeated.prompt_mask,
                                     sample_key, max_new_tokens=n)
        rewards = task.rewards(repeated, completion.tokens, completion.mask).accuracy
        old = policy.completion_log_probs(params, repeated.prompt, repeated.prompt_mask,
                                          completion.tokens, completion.mask)
        group = lambda x: x.reshape(p, g, *x.shape[1:])  # noqa: E731
        old = group(jax.lax.stop_gradient(old))
        batch = GroupBatch(
            obs={"prompt": group(repeated.prompt), "prompt_mask": group(repeated.prompt_mask),
                 "completion_mask": group(completion.mask)},
            actions=group(completion.tokens), mask=group(completion.mask),
            rewards=rewards.reshape(p, g), old_log_probs=old, ref_log_probs=old)
        params, _, opt_state, metrics = multi_step_update(
            rl, optimizer(), params, (), opt_state, batch, update_key)
        return params, opt_state, metrics["loss"]

    return step


def make_ppo_step(policy: Decoder, critic: Decoder, size: DecoderSize):
    """``step({"policy", "value"}, opt_state, key) -> (params, opt_state, loss)``: one PPO
    step of ``P G`` prompts x 1 completion with a separate critic; the reward is the
    accuracy on the last token, GAE over tokens with gamma 1, lambda 0.95 (as the
    ``lm-grpo`` study's PPO arm, without its KL shaping)."""
    task, n = _task(), size.new_tokens
    batch_size = size.prompts * size.group_size

    def actor_critic(params, obs):
        prompt_length = obs["prompt"].shape[1]
        tokens = jnp.concatenate([obs["prompt"], obs["completion"]], axis=1)
        mask = jnp.concatenate([obs["prompt_mask"], obs["completion_mask"]], axis=1)
        logits = policy.logits(params["policy"], tokens, mask)
        logits = logits[:, prompt_length - 1: prompt_length - 1 + n]
        values = critic.completion_values(params["value"], obs["prompt"], obs["prompt_mask"],
                                          obs["completion"], obs["completion_mask"])
        return logits, values

    rl = ppo(actor_critic, clip_epsilon=0.2, value_coef=0.5, entropy_coef=0.0,
             value_clip=None)

    def step(params, opt_state, key):
        problem_key, sample_key, update_key = jax.random.split(key, 3)
        problems = task.sample(problem_key, batch_size)
        completion = policy.generate(params["policy"], problems.prompt, problems.prompt_mask,
                                     sample_key, max_new_tokens=n)
        reward = task.rewards(problems, completion.tokens, completion.mask).accuracy
        mask = completion.mask
        obs = {"prompt": problems.prompt, "prompt_mask": problems.prompt_mask,
               "completion": completion.tokens, "completion_mask": mask}
        logits, values = actor_critic(params, obs)
        old = jnp.take_along_axis(log_softmax(logits), completion.tokens[..., None], -1)[..., 0]
        maskf = mask.astype(jnp.float32)
        last = jax.nn.one_hot(jnp.sum(mask, axis=1) - 1, n) * maskf
        terminated = (last > 0) | (maskf == 0)
        advantages, returns = generalized_advantage_estimation(
            (reward[:, None] * last).T, (values * maskf).T, jnp.zeros(batch_size),
            terminated.T, gamma=1.0, lam=0.95)
        stop = jax.lax.stop_gradient
        batch = PPOBatch(obs=obs, actions=completion.tokens, old_log_probs=stop(old),
                         advantages=stop(advantages.T), returns=stop(returns.T),
                         old_values=stop(values), mask=mask)
        params, _, opt_state, metrics = multi_step_update(
            rl, optimizer(), params, (), opt_state, batch, update_key)
        return params, opt_state, metrics["loss"]

    return step


def compile_step(step, params, opt_state):
    """``jax.jit(step, donate_argnums=(0, 1))`` compiled for the shapes of ``params`` and
    ``opt_state`` (arrays or ``ShapeDtypeStruct``s) and a key; ``(compiled, seconds)``."""
    start = time.perf_counter()
    compiled = jax.jit(step, donate_argnums=(0, 1)).lower(
        params, opt_state, jax.random.key(0)).compile()
    return compiled, time.perf_counter() - start


def tree_bytes(tree) -> int:
    """Bytes of the array leaves of ``tree`` (arrays or ``ShapeDtypeStruct``s)."""
    return int(sum(math.prod(leaf.shape) * jnp.dtype(leaf.dtype).itemsize
                   for leaf in jax.tree_util.tree_leaves(tree)))


def memory_figures(compiled) -> dict[str, int]:
    """XLA's memory analysis of a compiled step: ``temp_bytes``, ``argument_bytes``,
    ``output_bytes``, ``alias_bytes`` and ``total_bytes = temp + argument + output -
    alias``."""
    analysis = compiled.memory_analysis()
    out = {"temp_bytes": int(analysis.temp_size_in_bytes),
           "argument_bytes": int(analysis.argument_size_in_bytes),
           "output_bytes": int(analysis.output_size_in_bytes),
           "alias_bytes": int(analysis.alias_size_in_bytes)}
    out["total_bytes"] = (out["temp_bytes"] + out["argument_bytes"] + out["output_bytes"]
                          - out["alias_bytes"])
    return out


def step_memory(step, params, opt_state) -> dict:
    """:func:`memory_figures` of ``step`` compiled by :func:`compile_step` (shapes only,
    nothing runs), with ``param_bytes``, ``optimizer_bytes`` and ``compile_seconds``."""
    compiled, seconds = compile_step(step, params, opt_state)
    return {"param_bytes": tree_bytes(params), "optimizer_bytes": tree_bytes(opt_state),
            **memory_figures(compiled), "compile_seconds": seconds}


def _shapes(tree):
    return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)


def measure_decoder(size: DecoderSize, rounds: int | None = None,
                    step_rounds: int | None = None) -> dict:
    """Every figure of one decoder size (module docstring): ``num_parameters``,
    ``generation`` (:func:`compare_generation`), ``grpo_step`` (compile seconds, median
    step seconds, tokens/s) and ``memory`` (``grpo``, ``ppo``, ``ratio`` = GRPO / PPO
    total bytes). ``rounds`` / ``step_rounds`` override the size's."""
    rounds = size.rounds if rounds is None else rounds
    step_rounds = size.step_rounds if step_rounds is None else step_rounds
    policy = Decoder(size.config)
    critic = Decoder(dataclasses.replace(size.config, value_head=True))
    params = policy.init(jax.random.key(0))
    critic_params = jax.eval_shape(critic.init, jax.random.key(1))
    out = {"name": size.name, "config": dataclasses.asdict(size.config),
           "num_parameters": num_parameters(params),
           "critic_parameters": num_parameters(critic_params),
           "prompt_length": PROMPT_LENGTH, "new_tokens": size.new_tokens}
    out["generation"] = compare_generation(policy, params, size.batch, size.new_tokens,
                                           rounds)

    grpo_step = make_grpo_step(policy, size)
    opt_state = optimizer().init(params)
    compiled, compile_seconds = compile_step(grpo_step, params, opt_state)
    params, opt_state, _ = compiled(params, opt_state, jax.random.key(0))  # warm
    times = []
    for r in range(step_rounds):
        seconds, (params, opt_state, loss) = _time(compiled, params, opt_state,
                                                   jax.random.key(r + 1))
        times.append(seconds)
    completions = size.prompts * size.group_size
    median = statistics.median(times)
    out["grpo_step"] = {"prompts": size.prompts, "group_size": size.group_size,
                        "completions": completions, "rounds": step_rounds,
                        "compile_seconds": compile_seconds, "median_step_seconds": median,
                        "tokens_per_second": completions * size.new_tokens / median,
                        "final_loss": float(loss)}

    # the timed program's own analysis (its arguments have the shapes of the state)
    grpo_memory = {"param_bytes": tree_bytes(params), "optimizer_bytes": tree_bytes(opt_state),
                   **memory_figures(compiled), "compile_seconds": compile_seconds}
    ppo_params = {"policy": _shapes(params), "value": critic_params}
    ppo_memory = step_memory(make_ppo_step(policy, critic, size), ppo_params,
                             jax.eval_shape(optimizer().init, ppo_params))
    out["memory"] = {"grpo": grpo_memory, "ppo": ppo_memory,
                     "ratio": grpo_memory["total_bytes"] / ppo_memory["total_bytes"]}
    return out


# --------------------------------------------------------------------------------- run


def run(quick: bool | None = None) -> dict:
    """All figures (module docstring). ``quick`` (default: ``RLJAX_BENCH_LM_QUICK``) runs
    the tiny configuration; ``RLJAX_BENCH_ROUNDS`` replaces every rounds count."""
    quick = _quick() if quick is None else quick
    override = _env_rounds()
    start = time.perf_counter()
    new_tokens, batches = (4, (2,)) if quick else (NEW_TOKENS, BATCHES)
    rounds, step_rounds = (1, 1) if quick else (ROUNDS, STEP_ROUNDS)
    if override is not None:
        rounds = step_rounds = override
    result = {
        "device": jax.devices()[0].device_kind,
        "jax_version": jax.__version__,
        "cpu_count": os.cpu_count(),
        "load_average_start": os.getloadavg()[0],
        "quick": quick,
        "new_tokens": new_tokens,
        "prompt_length": PROMPT_LENGTH,
        "generation": [measure_generation(b, new_tokens, rounds) for b in batches],
        # the TinyLM trainer's steps: not in the quick run (two trainer compiles, ~30 s;
        # the decoder's GRPO and PPO steps below cover the same code path)
        "steps": [] if quick else [measure_step(a, None, step_rounds) for a in ("grpo", "ppo")],
        "rounds": rounds,
        "step_rounds": step_rounds,
    }
    sizes = QUICK_DECODER_SIZES if quick else DECODER_SIZES
    result["decoder"] = [measure_decoder(s, override, override) for s in sizes]
    result["wall_seconds"] = time.perf_counter() - start
    result["load_average_end"] = os.getloadavg()[0]  # 1-minute; other jobs share the CPU
    return result


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f}"


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
    decoders = result.get("decoder", [])
    if decoders:
        lines += ["", "Decoder (Llama-style), randomly initialised; sampling at temperature 1, "
                  "cached and uncached alternating; GRPO step = sample + score + log-probs + "
                  "update + Adam",
                  "",
                  "| size | params | batch x new tokens | cached tok/s | uncached tok/s | "
                  "speed-up | same tokens | rounds | GRPO P x G | GRPO step s | "
                  "GRPO tok/s | step rounds |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for d in decoders:
            g, s = d["generation"], d["grpo_step"]
            lines.append(
                f"| {d['name']} | {d['num_parameters']:,} | {g['batch']} x {g['new_tokens']} "
                f"| {g['cached']['tokens_per_second']:,.0f} | "
                f"{g['uncached']['tokens_per_second']:,.0f} | {g['cache_speedup']:.2f}x | "
                f"{g['same_tokens_fraction']:.3f} | {g['rounds']} | {s['prompts']} x "
                f"{s['group_size']} | {s['median_step_seconds']:.3f} | "
                f"{s['tokens_per_second']:,.0f} | {s['rounds']} |")
        lines += ["", "XLA memory of one compiled step (MB; params and Adam state donated; "
                  "total = temp + argument + output - alias)", "",
                  "| size | algorithm | params | Adam | temp | argument | output | alias | "
                  "total | GRPO / PPO |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for d in decoders:
            for name in ("grpo", "ppo"):
                m = d["memory"][name]
                ratio = f"{d['memory']['ratio']:.2f}" if name == "grpo" else ""
                lines.append(
                    f"| {d['name']} | {name} | {_mb(m['param_bytes'])} | "
                    f"{_mb(m['optimizer_bytes'])} | {_mb(m['temp_bytes'])} | "
                    f"{_mb(m['argument_bytes'])} | {_mb(m['output_bytes'])} | "
                    f"{_mb(m['alias_bytes'])} | {_mb(m['total_bytes'])} | {ratio} |")
    if "wall_seconds" in result:
        lines += ["", f"wall time {result['wall_seconds']:.0f} s; 1-minute load average "
                  f"{result['load_average_start']:.1f} at the start, "
                  f"{result['load_average_end']:.1f} at the end ({result['cpu_count']} CPUs)"]
    return "\n".join(lines)
