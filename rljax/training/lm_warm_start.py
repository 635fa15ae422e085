"""The supervised warm start of an LM RL study, computed once and shared by its arms.

Every arm of an RL study on a language model starts from the same place: seed ``i``'s
policy after the supervised warm-up (:meth:`rljax.training.lm.LMTrainer.warm_up`: Adam at
the constant ``sft_learning_rate``, never annealed, so the RL phase does not meet a
fresh optimizer on a policy that was last moved at a tiny rate). Recomputing it in each
arm costs ``arms x sft_steps`` supervised steps per seed and, on a different compiled
program, could move its last bits. :func:`cached_warm_start` runs it once as a
:class:`rljax.sweep.Sweep` over the seeds and writes the per-seed params under
``directory/<fingerprint>.npz``; every arm's trainer then reads the same arrays
(:class:`WarmStart` passed as ``make_lm_trainer(..., warm_start=...)``), so the arms
start bitwise the same, and a resumed or repeated run reads the file instead of
recomputing it.

The fingerprint is SHA-256 of everything the warm start depends on: the policy's model
config, the task, ``sft_steps``, ``sft_batch``, ``sft_learning_rate``, ``label_bank``,
the checkpoint's weights (if any), the seeds (count, base seed, block size) and the
``rljax`` source (:func:`rljax.study.code_version`). A file is only ever read under its
own fingerprint, so a changed setting computes a new one and never reuses a stale one.

Memory: the cached params are constants of each arm's compiled ``init`` (``S x``
the policy's size: 8 seeds of the default TinyLM are 3.3 MB).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io as bytes_io
import json
import math
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax import io
from rljax.study import code_version
from rljax.sweep import Sweep, seed_key
from rljax.types import Params, PRNGKey


class WarmStart:
    """Per-seed warm-started policy params, looked up by the seed's key.

    Compared and hashed by identity (like
    :class:`~rljax.training.lm.InitialParams`), so a trainer holding it stays hashable
    and two caches never share a compiled program.

    Attributes:
      params: the params tree with a leading seed axis ``[S, ...]`` (numpy).
      key_data: uint32 ``[S, 2]``, ``jax.random.key_data`` of each row's seed key.
      fingerprint: the cache's fingerprint (module docstring).
      path: the file it was read from or written to.
    """

    def __init__(self, params: Params, key_data: np.ndarray, fingerprint: str, path: Path):
        self.params, self.key_data = params, np.asarray(key_data)
        self.fingerprint, self.path = fingerprint, Path(path)

    @property
    def num_seeds(self) -> int:
        """Rows in the cache (the run's seeds, padded up to whole rounds of blocks)."""
        return int(self.key_data.shape[0])

    def lookup(self, key: PRNGKey) -> Params:
        """The params of the row whose seed key is ``key`` (a typed key ``[]``; traced
        under jit / vmap). A key with no row gives NaN params, which the trainer's
        non-finite tracking flags at its first step (the study checks the seed range on
        the host first, so this is a safety net, never the normal path)."""
        data = jax.random.key_data(key)
        match = jnp.all(jnp.asarray(self.key_data) == data, axis=-1)  # [S]
        row, found = jnp.argmax(match), jnp.any(match)
        return jax.tree_util.tree_map(
            lambda x: jnp.where(found, jnp.asarray(x)[row], jnp.nan), self.params)


def warm_start_fingerprint(trainer: Any, *, num_seeds: int, base_seed: int,
                           block_size: int) -> str:
    """The 16-hex-digit fingerprint of ``trainer``'s warm start over ``num_seeds`` seeds
    (module docstring lists what it covers)."""
    cfg = trainer.config
    digest = hashlib.sha256()
    record = {"policy": repr(trainer.policy.config), "task": repr(trainer.task),
              "sft_steps": cfg.sft_steps, "sft_batch": cfg.sft_batch,
              "sft_learning_rate": cfg.sft_learning_rate, "label_bank": cfg.label_bank,
              "num_seeds": num_seeds, "base_seed": base_seed, "block_size": block_size,
              "code": code_version()}
    digest.update(json.dumps(record, sort_keys=True).encode())
    if trainer.initial is not None:
        for leaf in jax.tree_util.tree_leaves(trainer.initial.params):
            digest.update(np.asarray(leaf).tobytes())
    return digest.hexdigest()[:16]


def cached_warm_start(trainer: Any, directory: str | Path, *, num_seeds: int,
                      base_seed: int = 0, block_size: int = 8, options: Any = None
                      ) -> WarmStart:
    """Seeds ``0 .. num_seeds - 1``'s warm-started policies: read from
    ``directory/<fingerprint>.npz`` if there, else computed by a
    :class:`~rljax.sweep.Sweep` of ``trainer.warm_start_params`` (the same block size as
    the arms, rows padded up to whole rounds so a padded slot finds its row too) and
    written atomically.

    Args:
      trainer: an :class:`~rljax.training.lm.LMTrainer` (its ``warm_start`` is ignored).
      directory: where cache files live (created if missing).
      num_seeds, base_seed, block_size: the arms' seeds (seed ``i``'s key is
        ``seed_key(base_seed, i)``).
      options: the study's :class:`~rljax.sweep.SweepOptions` (progress, checkpoints).

    Returns:
      the :class:`WarmStart`: ``params [R, ...]`` and ``key_data [R, 2]``, ``R >=
      num_seeds`` rows (whole rounds).
    """
    trainer = dataclasses.replace(trainer, warm_start=None)
    sweep = Sweep(trainer.warm_start_params, base_seed=base_seed, block_size=block_size)
    rows = math.ceil(num_seeds / sweep.round_size) * sweep.round_size
    fingerprint = warm_start_fingerprint(trainer, num_seeds=rows, base_seed=base_seed,
                                         block_size=block_size)
    path = Path(directory) / f"{fingerprint}.npz"
    keys = jax.vmap(seed_key, in_axes=(None, 0))(base_seed, jnp.arange(rows))
    key_data = np.asarray(jax.random.key_data(keys))
    template = jax.eval_shape(trainer.warm_start_params, keys[0])
    leaves, treedef = jax.tree_util.tree_flatten(template)
    if path.is_file():
        with np.load(path) as stored:
            if not np.array_equal(stored["key_data"], key_data):
                raise ValueError(f"{path}: its seed keys are not this run's; delete the file")
            params = treedef.unflatten([stored[f"leaf_{i}"] for i in range(len(leaves))])
        return WarmStart(params, key_data, fingerprint, path)
    params = sweep.run(rows, desc="warm-start", options=options).outputs
    params = jax.tree_util.tree_map(np.asarray, params)
    buffer = bytes_io.BytesIO()
    np.savez(buffer, key_data=key_data,
             **{f"leaf_{i}": leaf for i, leaf in enumerate(jax.tree_util.tree_leaves(params))})
    io.atomic_write_bytes(path, buffer.getvalue())
    return WarmStart(params, key_data, fingerprint, path)

