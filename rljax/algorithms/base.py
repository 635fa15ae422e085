"""The RLTransform contract: optax's shape, for policy gradients.

    rl = reinforce(policy.apply, baseline=ema_baseline())
    rl_state = rl.init(params)
    grads, rl_state, metrics = rl.update(params, rl_state, batch, key)
    updates, opt_state = opt.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)

The transform only produces gradients (of a loss to *minimise*); any optax optimizer
applies them. ``as_optax`` lets an RL transform head an ``optax.chain``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import optax

from rljax.types import Grads, Metrics, Params, RLState


class RLTransform(NamedTuple):
    """``init(params) -> rl_state``; ``update(params, rl_state, batch, key, **extra) ->
    (grads, rl_state, metrics)``. Both are pure and jit/vmap-able.

    Shapes: ``grads`` has the structure and leaf shapes of ``params``; ``metrics`` maps
    names to float32 scalars ``[]``; ``batch`` is the algorithm's batch struct (e.g.
    :class:`EpisodeBatch` ``[G, T]``, :class:`GroupBatch` ``[P, G, T]``) and ``key`` a typed
    key ``[]`` (or ``None`` where the update draws nothing).
    """

    init: Callable[[Params], RLState]
    update: Callable[..., tuple[Grads, RLState, Metrics]]


class AsOptaxState(NamedTuple):
    """State of :func:`as_optax`: the wrapped transform's state, ``rl_state``, with the
    leaf shapes its ``init`` gives (e.g. ``[]`` for an EMA baseline's value)."""

    rl_state: Any


def as_optax(rl: RLTransform) -> optax.GradientTransformationExtraArgs:
    """Wrap an RL transform as an optax transformation, for the head of ``optax.chain``.

    The incoming ``updates`` are ignored (pass ``params`` or zeros); the wrapped
    transform's gradients come out. ``params`` and ``batch`` are required, ``key`` is
    optional (extra args of ``GradientTransformationExtraArgs``)::

        tx = optax.chain(as_optax(rl), optax.clip_by_global_norm(0.5), optax.adam(3e-4))
        updates, state = tx.update(params, state, params, batch=batch, key=key)

    The updates out have the structure and leaf shapes of ``params``; ``batch`` and
    ``key`` are shaped as :class:`RLTransform` ``update`` takes them.
    """

    def init_fn(params):
        return AsOptaxState(rl.init(params))

    def update_fn(updates, state, params=None, *, batch=None, key=None, **extra):
        del updates
        if params is None or batch is None:
            raise ValueError("as_optax: update needs params=... and batch=...")
        grads, rl_state, _ = rl.update(params, state.rl_state, batch, key, **extra)
        return grads, AsOptaxState(rl_state)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)
