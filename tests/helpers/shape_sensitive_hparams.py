"""``helpers.shape_sensitive`` with traced hyperparameters: ``train(key, hparams)``.

The reduction ``sum_j exp(a x_j) tanh(b x_j)`` over 400 normal draws moves its last bits
with the batch shape XLA CPU compiles for (like ``shape_sensitive.train``), so the
(config, seed) block guarantee is tested on a workload where it is not vacuous.
"""

import jax
import jax.numpy as jnp
import numpy as np

from rljax.grid import ConfigTable
from rljax.sweep import seed_key


def train(key, hparams):
    """One (config, seed) run: ``{"r": []}`` from ``hparams = {"a": [], "b": []}``."""
    x = jax.random.normal(key, (400,))
    return {"r": jnp.sum(jnp.exp(hparams["a"] * x) * jnp.tanh(hparams["b"] * x))}


def table(rows):
    """A :class:`ConfigTable` of ``[(a, b), ...]``."""
    return ConfigTable.from_rows([{"a": float(a), "b": float(b)} for a, b in rows])


def plain_vmap(seed_ids, a, b, base_seed=0):
    """``jit(vmap(train))`` of one config at the natural batch shape ``[len(seed_ids)]``."""
    keys = jax.vmap(seed_key, in_axes=(None, 0))(base_seed, jnp.asarray(seed_ids, jnp.int32))
    hp = {"a": jnp.float32(a), "b": jnp.float32(b)}
    return np.asarray(jax.jit(jax.vmap(train, in_axes=(0, None)))(keys, hp)["r"])
