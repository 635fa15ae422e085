"""The one shared loop that applies an optimizer several times per batch.

PPO's epochs x minibatches and GRPO's mu inner iterations are the same thing: reuse one
batch of experience for several gradient steps. The transforms stay gradient-only; this
helper takes a transform and an optax optimizer and runs the steps with ``lax.scan``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from rljax.algorithms.base import RLTransform
from rljax.types import Params, PRNGKey, RLState


def check_minibatches(batch: Any, num_minibatches: int) -> int:
    """The batch's leading size, which ``num_minibatches`` must divide (checked at trace
    time: a one-line ``ValueError`` naming both numbers)."""
    if isinstance(num_minibatches, bool) or not isinstance(num_minibatches, int) or (
        num_minibatches < 1
    ):
        raise ValueError(f"num_minibatches: must be an integer >= 1, got {num_minibatches!r}")
    sizes = {leaf.shape[0] for leaf in jax.tree_util.tree_leaves(batch)}
    if len(sizes) != 1:
        raise ValueError(f"batch: every leaf needs the same leading size, got {sorted(sizes)}")
    size = sizes.pop()
    if size % num_minibatches:
        raise ValueError(
            f"num_minibatches: must divide the batch's leading size {size}, got {num_minibatches}"
        )
    return size


def multi_step_update(
    rl: RLTransform,
    optimizer: optax.GradientTransformation,
    params: Params,
    rl_state: RLState,
    opt_state: optax.OptState,
    batch: Any,
    key: PRNGKey,
    *,
    num_epochs: int = 1,
    num_minibatches: int = 1,
    shuffle: bool = True,
    **extra: Any,
) -> tuple[Params, RLState, optax.OptState, dict[str, jax.Array]]:
    """``num_epochs`` passes over ``batch``, each split into ``num_minibatches`` minibatches
    along the leading axis (reshuffled every epoch when ``shuffle``); one
    ``rl.update`` + ``optimizer.update`` per minibatch.

    Args:
      rl: the gradient transform.
      optimizer: any optax optimizer.
      params, rl_state, opt_state: current state.
      batch: pytree whose leaves share a leading axis ``[B, ...]`` (``B`` divisible by
        ``num_minibatches``).
      key: PRNG key for shuffling and the transform's own randomness.
      num_epochs: passes over the batch (PPO's epochs, GRPO's mu); >= 1.
      num_minibatches: minibatches per pass; >= 1.
      shuffle: permute the batch each epoch.
      **extra: passed to ``rl.update``.

    Returns:
      ``(params, rl_state, opt_state, metrics)``; metrics are the mean over all
      ``num_epochs * num_minibatches`` updates.
    """
    if isinstance(num_epochs, bool) or not isinstance(num_epochs, int) or num_epochs < 1:
        raise ValueError(f"num_epochs: must be an integer >= 1, got {num_epochs!r}")
    size = check_minibatches(batch, num_minibatches)
    minibatch_size = size // num_minibatches

    def one_update(carry, inputs):
        params, rl_state, opt_state = carry
        minibatch, update_key = inputs
        grads, rl_state, metrics = rl.update(params, rl_state, minibatch, update_key, **extra)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return (params, rl_state, opt_state), metrics

    def one_epoch(carry, epoch_key):
        perm_key, update_key = jax.random.split(epoch_key)
        if shuffle and num_minibatches > 1:
            order = jax.random.permutation(perm_key, size)
            shuffled = jax.tree_util.tree_map(lambda x: jnp.take(x, order, axis=0), batch)
        else:
            shuffled = batch
        minibatches = jax.tree_util.tree_map(
            lambda x: x.reshape(num_minibatches, minibatch_size, *x.shape[1:]), shuffled
        )
        keys = jax.random.split(update_key, num_minibatches)
        return jax.lax.scan(one_update, carry, (minibatches, keys))

    (params, rl_state, opt_state), metrics = jax.lax.scan(
        one_epoch, (params, rl_state, opt_state), jax.random.split(key, num_epochs)
    )
    metrics = jax.tree_util.tree_map(lambda m: jnp.mean(m, axis=(0, 1)), metrics)
    return params, rl_state, opt_state, metrics
