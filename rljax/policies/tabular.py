"""Tabular softmax policy: one row of logits per discrete state."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from rljax.types import Array, Params, PRNGKey


class Policy(NamedTuple):
    """A pure policy: ``init(key, obs) -> params`` and ``apply(params, obs) -> logits``.

    ``obs`` has the environment's observation shape, optionally with leading batch axes
    ``[..., *obs_shape]``; ``logits`` are float32 ``[..., A]`` over ``A`` actions.
    """

    init: Callable[[PRNGKey, Array], Params]
    apply: Callable[[Params, Array], Array]


def tabular_softmax(num_states: int, num_actions: int, init_scale: float = 0.0) -> Policy:
    """A table of logits ``[num_states, num_actions]``; ``pi(.|s) = softmax(table[s])``.

    ``apply(params, obs)`` takes integer states ``obs`` of any shape ``[...]`` and returns
    logits ``[..., num_actions]`` (a gather; its gradient is a scatter-add). Measured on
    CPU under ``vmap``: a gather beats both a one-hot product (lowered to a library
    reduction call) and a chain of selects by 2-3x.

    Args:
      num_states: number of discrete states (>= 1).
      num_actions: number of actions (>= 1).
      init_scale: std of the normal initial logits; 0 gives the uniform policy.
    """
    if num_states < 1:
        raise ValueError(f"num_states: must be >= 1, got {num_states}")
    if num_actions < 1:
        raise ValueError(f"num_actions: must be >= 1, got {num_actions}")

    def init(key: PRNGKey, obs: Array | None = None) -> Params:
        del obs
        shape = (num_states, num_actions)
        if init_scale == 0.0:
            return {"logits": jnp.zeros(shape, jnp.float32)}
        return {"logits": init_scale * jax.random.normal(key, shape, jnp.float32)}

    def apply(params: Params, obs: Array) -> Array:
        table = params["logits"]
        return table[obs]

    return Policy(init=init, apply=apply)
