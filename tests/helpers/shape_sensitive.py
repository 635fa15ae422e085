"""A one-seed workload whose last bits depend on the batch shape XLA CPU compiles for.

``train(key)`` reduces ``exp(x) * tanh(x)`` over 400 normal draws. Under
``jax.jit(jax.vmap(train))`` on XLA CPU (jaxlib 0.10.2, both at XLA's default
optimisation level and at the suite's ``--xla_backend_optimization_level=0``) a batch
below 16 seeds is vectorised differently from a batch of 16 or more, and the sum's last
bits move: measured 4 of the first 7 seeds differ between a batch of 7 and one of 256.
Tests of the fixed-block guarantee use it because most workloads happen not to move.
"""

import jax
import jax.numpy as jnp
import numpy as np

from rljax.sweep import seed_key


def train(key):
    """One seed: ``{"r": sum_j exp(x_j) tanh(x_j)}``, ``x ~ N(0, 1)^400``; ``r`` is ``[]``."""
    x = jax.random.normal(key, (400,))
    return {"r": jnp.sum(jnp.exp(x) * jnp.tanh(x))}


def plain_vmap(seed_ids, base_seed=0):
    """``jax.jit(jax.vmap(train))`` at the natural batch shape ``[len(seed_ids)]``."""
    keys = jax.vmap(seed_key, in_axes=(None, 0))(base_seed, jnp.asarray(seed_ids, jnp.int32))
    return np.asarray(jax.jit(jax.vmap(train))(keys)["r"])


def blocked_reference(num_seeds, block_size, base_seed=0):
    """Seed ``i``'s result as the fixed-block guarantee defines it: ``plain_vmap`` run on
    whole blocks of ``block_size`` ids (the last padded with the next ids), ``[num_seeds]``."""
    rounds = -(-num_seeds // block_size)
    out = [plain_vmap(np.arange(r * block_size, (r + 1) * block_size), base_seed)
           for r in range(rounds)]
    return np.concatenate(out)[:num_seeds]
