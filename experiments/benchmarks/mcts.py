"""``rljax bench mcts``: simulations/s of rljax.search vs mctx 0.0.71, same run, same model.

Both libraries search the same table-lookup MDP (64 states, 16 actions; transitions,
rewards ~ N(0, 1), prior logits ~ N(0, 1) and values ~ N(0, 1) drawn once from a fixed key;
discount 0.99), with each library's own ``muzero_policy`` (defaults: Dirichlet noise on)
and ``gumbel_muzero_policy`` (defaults: Gumbel scale 1, 16 considered actions), at batch
1, 64 and 1024 and 16, 64 and 256 simulations. Each side is one ``jax.jit`` of
``policy(...).action_weights`` over the batch, timed end to end on a device-resident key;
throughput is ``batch * num_simulations / seconds``. Compile time is measured separately
(``lower().compile()``). The sides alternate over ``ROUNDS`` rounds and the ratio is of the
median times (timings on this 2-core machine vary by up to 70 % back to back). mctx needs
about a minute per call at batch 1024 with 256 PUCT simulations (its backup ``vmap``s a
per-tree ``while_loop``, so every level rewrites the whole ``[B, N, A]`` tree), so the
largest sizes run fewer rounds (see ``rounds_for``).

Requires the dev extra (mctx).
"""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp

import rljax.search as rs

BATCHES = (1, 64, 1024)
SIMULATIONS = (16, 64, 256)
POLICIES = ("muzero_policy", "gumbel_muzero_policy")
NUM_STATES = 64
NUM_ACTIONS = 16
DISCOUNT = 0.99
ROUNDS = 5


def rounds_for(batch: int, sims: int) -> int:
    """Rounds per configuration: fewer where one mctx call takes seconds."""
    work = batch * sims
    if work >= 1024 * 256:
        return 1
    if work >= 1024 * 64:
        return 2
    if work >= 1024 * 16:
        return 3
    return ROUNDS


def table_mdp(lib, batch: int):
    """``(root, recurrent_fn)`` of the benchmark MDP, built with ``lib``'s output types."""
    k1, k2, k3, k4, k5 = jax.random.split(jax.random.key(0), 5)
    transitions = jax.random.randint(k1, (NUM_STATES, NUM_ACTIONS), 0, NUM_STATES)
    rewards = jax.random.normal(k2, (NUM_STATES, NUM_ACTIONS))
    logits = jax.random.normal(k3, (NUM_STATES, NUM_ACTIONS))
    values = jax.random.normal(k4, (NUM_STATES,))
    start = jax.random.randint(k5, (batch,), 0, NUM_STATES)

    def recurrent_fn(params, rng_key, action, state):
        del params, rng_key
        nxt = transitions[state, action]
        return lib.RecurrentFnOutput(
            reward=rewards[state, action], discount=jnp.full(state.shape, DISCOUNT),
            prior_logits=logits[nxt], value=values[nxt]), nxt

    root = lib.RootFnOutput(prior_logits=logits[start], value=values[start], embedding=start)
    return root, recurrent_fn


def _compiled(lib, policy: str, batch: int, sims: int):
    root, recurrent_fn = table_mdp(lib, batch)

    def run(key):
        return getattr(lib, policy)(None, key, root, recurrent_fn, sims).action_weights

    key = jax.random.key(1)
    start = time.perf_counter()
    fn = jax.jit(run).lower(key).compile()
    compile_seconds = time.perf_counter() - start
    jax.block_until_ready(fn(key))  # warm-up
    return fn, compile_seconds


def measure_one(mctx, policy: str, batch: int, sims: int) -> dict:
    """Time both libraries on one configuration, alternating over rounds."""
    sides = {"rljax": rs, "mctx": mctx}
    fns, compiles, times = {}, {}, {name: [] for name in sides}
    for name, lib in sides.items():
        fns[name], compiles[name] = _compiled(lib, policy, batch, sims)
    keys = [jax.random.key(10 + i) for i in range(rounds_for(batch, sims))]
    for key in keys:
        for name in sides:
            start = time.perf_counter()
            jax.block_until_ready(fns[name](key))
            times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(t) for name, t in times.items()}
    return {
        "policy": policy, "batch": batch, "simulations": sims, "rounds": len(keys),
        "rljax_sims_per_s": batch * sims / median["rljax"],
        "mctx_sims_per_s": batch * sims / median["mctx"],
        "ratio": median["mctx"] / median["rljax"],
        "rljax_compile_seconds": compiles["rljax"],
        "mctx_compile_seconds": compiles["mctx"],
    }


def run() -> dict:
    """The full benchmark (about three minutes on 2 CPU cores).

    Returns:
        JSON-able dict: ``rows`` (one per policy x batch x simulations, with sims/s of each
        side, ``ratio`` = mctx time / rljax time, compile seconds, rounds), plus the
        workload description and device.
    """
    try:
        import mctx
    except ImportError as err:
        raise RuntimeError("rljax bench mcts needs mctx: pip install mctx==0.0.71") from err
    rows = [measure_one(mctx, policy, batch, sims)
            for policy in POLICIES for batch in BATCHES for sims in SIMULATIONS]
    return {
        "workload": (f"table-lookup MDP, {NUM_STATES} states x {NUM_ACTIONS} actions, "
                     f"discount {DISCOUNT}; policy defaults"),
        "method": "jit of policy(...).action_weights; sides alternate; median of rounds",
        "mctx_version": getattr(mctx, "__version__", "?"),
        "devices": str(jax.devices()),
        "rows": rows,
    }


def table(result: dict) -> str:
    """A printable table of the result of :func:`run`."""
    lines = [
        f"rljax bench mcts: {result['workload']} (mctx {result['mctx_version']})",
        f"{result['method']}; device {result['devices']}",
        f"{'policy':<21} {'batch':>5} {'sims':>5} {'rljax sims/s':>13} {'mctx sims/s':>12} "
        f"{'ratio':>6} {'rounds':>6} {'rljax compile':>13} {'mctx compile':>12}",
    ]
    for row in result["rows"]:
        lines.append(
            f"{row['policy']:<21} {row['batch']:>5} {row['simulations']:>5} "
            f"{row['rljax_sims_per_s']:>13.4g} {row['mctx_sims_per_s']:>12.4g} "
            f"{row['ratio']:>6.2f} {row['rounds']:>6} {row['rljax_compile_seconds']:>12.2f}s "
            f"{row['mctx_compile_seconds']:>11.2f}s")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(run()))
