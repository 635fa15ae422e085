"""``rljax bench ppo``: env steps/s of PPO on CartPole, rljax vs rejax, same run.

Both sides train PPO on CartPole-v1 (rljax's native :class:`~rljax.envs.CartPole`;
rejax 0.1.3's ``PPO`` on gymnax 1.0.1's ``CartPole-v1``) with the ppo-cartpole
hyperparameters: 4 envs x 128 steps per update, 4 epochs x 4 minibatches, gamma 0.99,
lambda 0.95, clip 0.2 (value clip 0.2), entropy 0.01, value 0.5, gradient clip 0.5,
lr 2.5e-4, tanh MLP 64x64 actor and critic. Each side is one ``jax.jit(jax.vmap(train))``
over ``S`` seeds in {1, 16, 128}, timed end to end on device-resident keys; throughput is
``S * updates * 512 / seconds``, training included. Compile time is measured separately
(``lower().compile()``). The sides alternate over ``ROUNDS`` rounds and the ratio is of
the median times (timings on this machine vary by up to 70 % back to back).

Differences that are rejax's, not the benchmark's: rejax keeps separate Adam states for
actor and critic, clips gradients elementwise (``optax.clip``), does not anneal the
learning rate, and initialises with LeCun-normal weights (no orthogonal QR, so its
vmapped init cannot hang); its evaluation callback is replaced by a no-op and
``skip_initial_evaluation=True`` so only training is timed. These change the arithmetic
by a few elementwise operations per gradient step.

Snags worked around (both documented in issue 4): rejax 0.1.3 unpacks five values from
``env.step`` while gymnax 1.0 returns six ("too many values to unpack"), so the gymnax
env is wrapped in gymnax's ``LegacyStepAPIWrapper``; that wrapper's ``__getattr__``
recurses forever under ``copy.deepcopy`` (which rejax's ``Algorithm.config`` calls through
``dataclasses.asdict``), so the wrapper is subclassed with a ``__deepcopy__`` that returns
itself and swapped in after ``PPO.create``.

Requires the ``bench`` extra (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import jax
import jax.numpy as jnp

from rljax.envs import CartPole
from rljax.policies import mlp_actor_critic
from rljax.training.ppo import PPOTrainConfig, make_ppo_train

SEED_COUNTS = (1, 16, 128)
# Updates per timed run for each seed count (512 env steps per update and seed), chosen
# so one run takes a few seconds on 2 CPU cores.
UPDATES = {1: 100, 16: 25, 128: 5}
ROUNDS = 5
CONFIG = PPOTrainConfig()


def _rljax_train(num_updates: int):
    config = CONFIG._replace(total_steps=num_updates * CONFIG.batch_size)
    return make_ppo_train(CartPole(), mlp_actor_critic(2), config)


def _rejax_train(num_updates: int):
    try:
        import gymnax  # noqa: F401
        from gymnax.wrappers import LegacyStepAPIWrapper
        from rejax import PPO
    except ImportError as err:
        raise RuntimeError("rljax bench ppo needs rejax and gymnax: "
                           "pip install -e '.[bench]'") from err

    class FiveValueStep(LegacyStepAPIWrapper):
        """gymnax's five-value wrapper, safe under ``copy.deepcopy``."""

        def __deepcopy__(self, memo):
            return self

    c = CONFIG
    algo = PPO.create(
        env="CartPole-v1", num_envs=c.num_envs, num_steps=c.num_steps,
        num_epochs=c.num_epochs, num_minibatches=c.num_minibatches,
        learning_rate=c.learning_rate, max_grad_norm=c.max_grad_norm,
        total_timesteps=num_updates * c.batch_size, eval_freq=num_updates * c.batch_size,
        gamma=c.gamma, gae_lambda=c.lam, clip_eps=c.clip_epsilon, ent_coef=c.entropy_coef,
        vf_coef=c.value_coef, skip_initial_evaluation=True,
        agent_kwargs={"activation": "tanh", "hidden_layer_sizes": (64, 64)},
    )
    algo = algo.replace(env=FiveValueStep(algo.env),
                        eval_callback=lambda algo, ts, rng: jnp.zeros(()))

    def train(key):
        train_state, _ = algo.train(key)
        return train_state

    return train


def _compile(train, num_seeds: int, typed_keys: bool):
    keys = jax.random.split(jax.random.key(0), num_seeds)
    if not typed_keys:
        keys = jax.random.key_data(keys)
    jitted = jax.jit(jax.vmap(train))
    start = time.perf_counter()
    compiled = jitted.lower(keys).compile()
    return compiled, keys, time.perf_counter() - start


def _time(compiled, keys) -> float:
    start = time.perf_counter()
    jax.block_until_ready(compiled(keys))
    return time.perf_counter() - start


def run() -> dict:
    """Compile both sides per seed count, then time alternating rounds; JSON-able dict."""
    rounds = int(os.environ.get("RLJAX_BENCH_ROUNDS", ROUNDS))
    result: dict[str, Any] = {"rounds": rounds, "steps_per_update": CONFIG.batch_size,
                              "sizes": []}
    for num_seeds in SEED_COUNTS:
        num_updates = UPDATES[num_seeds]
        ours, our_keys, our_compile = _compile(_rljax_train(num_updates), num_seeds, True)
        theirs, their_keys, their_compile = _compile(_rejax_train(num_updates), num_seeds,
                                                     False)
        _time(ours, our_keys)  # warm-up: first-call allocations
        _time(theirs, their_keys)
        our_times, their_times = [], []
        for _ in range(rounds):
            our_times.append(_time(ours, our_keys))
            their_times.append(_time(theirs, their_keys))
        steps = num_seeds * num_updates * CONFIG.batch_size
        our_median = statistics.median(our_times)
        their_median = statistics.median(their_times)
        result["sizes"].append({
            "seeds": num_seeds,
            "updates": num_updates,
            "env_steps": steps,
            "rljax_seconds": our_times,
            "rejax_seconds": their_times,
            "rljax_steps_per_second": steps / our_median,
            "rejax_steps_per_second": steps / their_median,
            "ratio": their_median / our_median,
            "rljax_compile_seconds": our_compile,
            "rejax_compile_seconds": their_compile,
        })
    result["min_ratio"] = min(s["ratio"] for s in result["sizes"])
    return result


def table(result: dict) -> str:
    """Markdown table of the ratios (rljax env steps/s over rejax's; > 1: rljax faster)."""
    lines = [
        f"PPO on CartPole, env steps/s including training (median of {result['rounds']} "
        "alternating rounds); compile seconds separately",
        "",
        "| seeds | rljax steps/s | rejax steps/s | ratio | rljax compile s | rejax compile s |",
        "|---|---|---|---|---|---|",
    ]
    for s in result["sizes"]:
        lines.append(
            f"| {s['seeds']} | {s['rljax_steps_per_second']:,.0f} | "
            f"{s['rejax_steps_per_second']:,.0f} | {s['ratio']:.2f} | "
            f"{s['rljax_compile_seconds']:.1f} | {s['rejax_compile_seconds']:.1f} |"
        )
    lines.append("")
    lines.append(f"minimum ratio: {result['min_ratio']:.2f} (target >= 1.0)")
    return "\n".join(lines)
