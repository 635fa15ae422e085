"""``rljax bench sweep``: the ORM-vs-PRM training through the library vs two references.

Workload: one seed = 400 episodes of REINFORCE on the 5-step ChainMDP with a tabular
softmax policy (``rljax.training.chain.make_chain_train``, ORM mode: every step's
return is the episode's outcome), plain SGD with lr 0.1, EMA baseline (0.5, rate 0.05).
It is timed at 1, 1024 and 16384 seeds, in episodes per second:

* **library**: ``rljax.sweep.Sweep(train, block_size=B).run(n)`` end to end (host-side
  padding, dispatch and fetch included). 1 seed runs with ``block_size=1`` (a larger
  block would time padding seeds); larger counts use ``min(n, BLOCK_SIZE)`` with
  ``BLOCK_SIZE = 4096``: measured here 6.1-6.4 M episodes/s against 4.6-6.0 M at
  ``rljax.sweep.DEFAULT_BLOCK_SIZE`` (1024) and 3.7 M at 256 (16384 seeds, medians).
* **fused**: one hand-written jitted function of the same algorithm with no library
  layers -- per seed two logit columns, the inverse-CDF draw, the closed-form update --
  vmapped over all ``n`` seeds in one call. It draws its uniforms from the same
  generator as the library (row ``e`` of one threefry draw per seed, computed inside the
  episode loop), so it stands for what the machine can do with this algorithm.
* **stepwise**: the same algorithm hand-written the general way, with no rljax layers
  (step-by-step rollout, gathered table rows, autodiff REINFORCE gradient, hand SGD):
  ``library / stepwise`` isolates what the layers cost, ``stepwise / fused`` what not
  specialising to the chain costs (the fused version knows the states in advance, so it
  vectorises over time and writes the gradient in closed form).
* **numpy**: a lean per-seed loop (vectorised within an episode, seeds one after
  another), timed on a few seeds and scaled to ``n`` (its cost is linear in seeds).

Methodology: everything is compiled and run once first (compile seconds reported
separately), then the library and the fused function alternate over several rounds and
the ratio is of the medians -- back-to-back timings on the 2-core machine differ by up to
70 %. Targets at 16384 seeds: ``ratio_vs_fused >= 0.8`` (the layers cost at most 20 %) and
``speedup_vs_numpy >= 200``.
"""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry2x32_p

from rljax.sweep import Sweep, seed_key
from rljax.training.chain import make_chain_train

CHAIN_LENGTH = 5
EPISODES = 400
LEARNING_RATE = 0.1
BASELINE_INIT = 0.5
BASELINE_RATE = 0.05
MODE = "orm"
SEED_COUNTS = (1, 1024, 16384)
ROUNDS = {1: 9, 1024: 15, 16384: 9}
BLOCK_SIZE = 4096  # see the module docstring
NUMPY_SEEDS = 32  # seeds actually run by the numpy reference; its time is scaled to n
TARGETS = {"ratio_vs_fused": 0.8, "speedup_vs_numpy": 200.0}


# --------------------------------------------------------------------------------------
# The hand-fused reference.


def fused_train(
    key: jax.Array,
    mode: str = MODE,
    *,
    chain_length: int = CHAIN_LENGTH,
    episodes: int = EPISODES,
) -> jax.Array:
    """One seed of the same training, hand-fused: returns ``success`` bool ``[episodes]``.

    State: two logit columns ``l0, l1`` ``[N]`` (the table ``[N, 2]``) and the baseline.
    Per episode ``e``: ``u`` = row ``e`` of ``jax.random.uniform(k, (episodes, N))``
    (computed alone from the threefry counters ``e * N + t``; ``k`` is the same policy key
    the library's ``train`` uses), ``a_t = 1[pi_0(t) <= u_t]`` (inverse CDF),
    ``R_t = outcome`` (ORM) or ``1[a_t = 1]`` (PRM), and the classic update
    ``l1 += lr (R - b)(a - pi_1)``, ``l0 -= lr (R - b)(a - pi_1)``;
    ``b += rate (score - b)``.
    """
    prm = mode == "prm"
    key_data = jax.random.key_data(jax.random.split(key, 4)[1])
    steps = jnp.arange(chain_length, dtype=jnp.uint32)

    def episode(carry, e):
        l0, l1, b = carry
        u = _episode_uniforms(key_data, e, steps)
        p0 = jax.nn.sigmoid(l0 - l1)
        correct = (p0 <= u).astype(jnp.float32)
        outcome = jnp.min(correct)
        ret = correct if prm else outcome
        score = jnp.mean(correct) if prm else outcome
        delta = LEARNING_RATE * (ret - b) * (correct - (1.0 - p0))
        new_b = b + BASELINE_RATE * (score - b)
        return (l0 - delta, l1 + delta, new_b), outcome > 0

    zeros = jnp.zeros(chain_length, jnp.float32)
    carry = (zeros, zeros, jnp.float32(BASELINE_INIT))
    _, success = jax.lax.scan(episode, carry, jnp.arange(episodes, dtype=jnp.int32))
    return success


def _episode_uniforms(key_data: jax.Array, e: jax.Array, steps: jax.Array) -> jax.Array:
    """Row ``e`` of ``jax.random.uniform(k, (episodes, N))`` from the threefry counters
    ``e * N + t`` (the same words the library's rollout draws)."""
    counters = e.astype(jnp.uint32) * jnp.uint32(steps.shape[0]) + steps
    zero = (counters ^ counters) + (key_data[0] ^ key_data[0])  # batched like both
    high, low = threefry2x32_p.bind(key_data[0], key_data[1], zero, counters + zero)
    mantissa = ((high ^ low) >> jnp.uint32(9)) | jnp.uint32(0x3F800000)
    return jax.lax.bitcast_convert_type(mantissa, jnp.float32) - jnp.float32(1.0)


def stepwise_train(
    key: jax.Array,
    mode: str = MODE,
    *,
    chain_length: int = CHAIN_LENGTH,
    episodes: int = EPISODES,
) -> jax.Array:
    """The same training hand-written the *general* way, with no rljax layers: a step-by-
    step rollout (``lax.scan`` over the N steps, unrolled; the observation is the env's
    step counter, the table row is gathered per step, the action drawn by inverse CDF),
    then the REINFORCE gradient of ``-sum_t (R_t - b) log softmax(table[s_t])[a_t]`` by
    autodiff and a hand-written SGD step. It is what a JAX user writes without knowing
    that the chain's states are fixed in advance, so ``library / stepwise`` is the cost of
    the layers alone, and ``stepwise / fused`` the cost of not specialising."""
    prm = mode == "prm"
    key_data = jax.random.key_data(jax.random.split(key, 4)[1])
    steps = jnp.arange(chain_length, dtype=jnp.uint32)

    def episode(carry, e):
        table, b = carry
        u = _episode_uniforms(key_data, e, steps)

        def step(state, u_t):
            t, num_correct = state
            logits = table[t]
            p0 = jax.nn.softmax(logits)[0]
            action = (p0 <= u_t).astype(jnp.int32)
            return (t + 1, num_correct + action), (t, action)

        (_, num_correct), (obs, actions) = jax.lax.scan(
            step, (jnp.int32(0), jnp.int32(0)), u, unroll=True)
        correct = actions.astype(jnp.float32)
        outcome = (num_correct == chain_length).astype(jnp.float32)
        ret = correct if prm else jnp.full_like(correct, outcome)
        score = jnp.mean(correct) if prm else outcome

        def loss(table):
            log_probs = jax.nn.log_softmax(table[obs], axis=-1)
            picked = jnp.take_along_axis(log_probs, actions[:, None], axis=-1)[:, 0]
            return -jnp.sum((ret - b) * picked)

        table = table - LEARNING_RATE * jax.grad(loss)(table)
        return (table, b + BASELINE_RATE * (score - b)), outcome > 0

    carry = (jnp.zeros((chain_length, 2), jnp.float32), jnp.float32(BASELINE_INIT))
    _, success = jax.lax.scan(episode, carry, jnp.arange(episodes, dtype=jnp.int32))
    return success


def make_fused(mode: str = MODE, **kwargs):
    """``jit(vmap(fused_train))`` over seed ids ``[n]`` (keys as ``rljax.sweep``)."""

    return _jit_over_seeds(fused_train, mode, **kwargs)


def make_stepwise(mode: str = MODE, **kwargs):
    """``jit(vmap(stepwise_train))`` over seed ids ``[n]`` (keys as ``rljax.sweep``)."""
    return _jit_over_seeds(stepwise_train, mode, **kwargs)


def _jit_over_seeds(train, mode, **kwargs):
    def run(seed_ids):
        keys = jax.vmap(seed_key, in_axes=(None, 0))(0, seed_ids)
        return jax.vmap(lambda k: train(k, mode, **kwargs))(keys)

    return jax.jit(run)


# --------------------------------------------------------------------------------------
# The numpy reference.


def numpy_train(
    seed: int,
    mode: str = MODE,
    *,
    chain_length: int = CHAIN_LENGTH,
    episodes: int = EPISODES,
) -> np.ndarray:
    """One seed of the same training in numpy (float32, vectorised over the N steps)."""
    rng = np.random.default_rng(seed)
    prm = mode == "prm"
    logits = np.zeros((chain_length, 2), np.float32)
    b = np.float32(BASELINE_INIT)
    lr, rate = np.float32(LEARNING_RATE), np.float32(BASELINE_RATE)
    success = np.zeros(episodes, bool)
    for e in range(episodes):
        u = rng.random(chain_length, dtype=np.float32)
        z = np.exp(logits - logits.max(axis=1, keepdims=True))
        pi = z / z.sum(axis=1, keepdims=True)
        correct = (pi[:, 0] <= u).astype(np.float32)  # inverse CDF: action 1 iff F_0 <= u
        outcome = np.float32(correct.min())
        ret = correct if prm else outcome
        score = np.float32(correct.mean()) if prm else outcome
        step = lr * (ret - b) * (correct - pi[:, 1])  # d/dl1; d/dl0 is its negative
        logits[:, 0] -= step
        logits[:, 1] += step
        b = b + rate * (score - b)
        success[e] = outcome > 0
    return success


def numpy_sweep(num_seeds: int, mode: str = MODE, **kwargs) -> np.ndarray:
    """``success`` ``[num_seeds, episodes]`` from :func:`numpy_train`, seed after seed."""
    return np.stack([numpy_train(s, mode, **kwargs) for s in range(num_seeds)])


# --------------------------------------------------------------------------------------
# Timing.


def _timed(fn) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - start


def measure(
    seed_counts=SEED_COUNTS,
    *,
    rounds=None,
    numpy_seeds: int = NUMPY_SEEDS,
    mode: str = MODE,
    episodes: int = EPISODES,
    block_size: int = BLOCK_SIZE,
) -> dict:
    """Time library, fused and numpy; returns the JSON-able result (see :func:`run`).

    ``rounds`` maps a seed count to its number of alternating rounds (default
    ``ROUNDS``, 5 for counts not listed); the small sizes are for tests.
    """
    rounds = ROUNDS if rounds is None else rounds
    train = make_chain_train(mode=mode, episodes=episodes)
    result = {
        "workload": f"ChainMDP({CHAIN_LENGTH}, {mode!r}), {episodes} episodes/seed, "
        "tabular REINFORCE, SGD lr 0.1, EMA baseline",
        "devices": str(jax.devices()),
        "method": "median over alternating rounds (library, fused); numpy scaled",
        "targets": dict(TARGETS),
        "rows": {},
    }
    fused = make_fused(mode, episodes=episodes)
    stepwise = make_stepwise(mode, episodes=episodes)
    for n in seed_counts:
        block = min(n, block_size)
        sweep = Sweep(train, block_size=block)
        lib_compile = sweep.compile()
        seed_ids = jnp.arange(n, dtype=jnp.int32)
        start = time.perf_counter()
        fused_compiled = fused.lower(seed_ids).compile()
        fused_compile = time.perf_counter() - start
        stepwise_compiled = stepwise.lower(seed_ids).compile()
        sweep.run(n, progress=False)  # warm-up
        jax.block_until_ready(fused_compiled(seed_ids))
        jax.block_until_ready(stepwise_compiled(seed_ids))
        lib_times, fused_times, stepwise_times = [], [], []
        for _ in range(rounds.get(n, 5)):
            lib_times.append(_timed(lambda s=sweep, n=n: s.run(n, progress=False).outputs))
            fused_times.append(_timed(lambda f=fused_compiled, i=seed_ids: f(i)))
            stepwise_times.append(_timed(lambda f=stepwise_compiled, i=seed_ids: f(i)))
        lib_s, fused_s = statistics.median(lib_times), statistics.median(fused_times)
        stepwise_s = statistics.median(stepwise_times)
        result["rows"][str(n)] = {
            "seeds": n,
            "block_size": block,
            "library_episodes_per_s": n * episodes / lib_s,
            "fused_episodes_per_s": n * episodes / fused_s,
            "ratio_vs_fused": fused_s / lib_s,
            "stepwise_episodes_per_s": n * episodes / stepwise_s,
            "ratio_vs_stepwise": stepwise_s / lib_s,
            "library_seconds": lib_s,
            "fused_seconds": fused_s,
            "library_compile_seconds": lib_compile,
            "fused_compile_seconds": fused_compile,
            "rounds": len(lib_times),
        }
    numpy_sweep(1, mode, episodes=episodes)  # warm numpy's code paths
    start = time.perf_counter()
    numpy_sweep(numpy_seeds, mode, episodes=episodes)
    numpy_eps = numpy_seeds * episodes / (time.perf_counter() - start)
    top = result["rows"][str(max(seed_counts))]
    result.update(
        seeds=top["seeds"],
        block_size=top["block_size"],
        library_episodes_per_s=top["library_episodes_per_s"],
        fused_episodes_per_s=top["fused_episodes_per_s"],
        numpy_episodes_per_s=numpy_eps,
        numpy_seeds_timed=numpy_seeds,
        ratio_vs_fused=top["ratio_vs_fused"],
        stepwise_episodes_per_s=top["stepwise_episodes_per_s"],
        ratio_vs_stepwise=top["ratio_vs_stepwise"],
        speedup_vs_numpy=top["library_episodes_per_s"] / numpy_eps,
        compile_seconds={"library": top["library_compile_seconds"],
                         "fused": top["fused_compile_seconds"]},
    )
    return result


def run() -> dict:
    """The full benchmark (about a minute): 1, 1024 and 16384 seeds.

    Returns a JSON-able dict with ``library_episodes_per_s``, ``fused_episodes_per_s``,
    ``numpy_episodes_per_s`` (at 16384 seeds), ``speedup_vs_numpy``, ``ratio_vs_fused``,
    ``compile_seconds``, ``block_size`` and per-seed-count ``rows``.
    """
    return measure()


def table(result: dict) -> str:
    """A printable table of the result of :func:`run`."""
    lines = [
        f"rljax bench sweep: {result['workload']}",
        f"{result['method']}; device {result['devices']}",
        f"{'seeds':>6} {'block':>6} {'library eps/s':>14} {'fused eps/s':>12} "
        f"{'lib/fused':>9} {'stepwise eps/s':>14} {'lib/stepwise':>12} "
        f"{'lib compile':>11} {'fused compile':>13}",
    ]
    for row in result["rows"].values():
        lines.append(
            f"{row['seeds']:>6} {row['block_size']:>6} {row['library_episodes_per_s']:>14.3g}"
            f" {row['fused_episodes_per_s']:>12.3g} {row['ratio_vs_fused']:>9.2f}"
            f" {row['stepwise_episodes_per_s']:>14.3g} {row['ratio_vs_stepwise']:>12.2f}"
            f" {row['library_compile_seconds']:>10.2f}s {row['fused_compile_seconds']:>12.2f}s"
        )
    targets = result["targets"]
    lines += [
        f"numpy per-seed loop: {result['numpy_episodes_per_s']:.3g} episodes/s "
        f"({result['numpy_seeds_timed']} seeds timed, scaled)",
        f"at {result['seeds']} seeds (block {result['block_size']}): "
        f"ratio_vs_fused {result['ratio_vs_fused']:.2f} (target >= "
        f"{targets['ratio_vs_fused']}), speedup_vs_numpy {result['speedup_vs_numpy']:.0f}x "
        f"(target >= {targets['speedup_vs_numpy']:.0f})",
        f"layers alone (library vs the same general step-by-step algorithm hand-written): "
        f"ratio_vs_stepwise {result['ratio_vs_stepwise']:.2f}",
        "1 seed runs with block_size=1 (no padding seeds); larger counts with the block shown.",
    ]
    return "\n".join(lines)
