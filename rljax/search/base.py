"""The structures a search exchanges with its caller (mctx's ``base``), and their types.

``RootFnOutput`` and ``RecurrentFnOutput`` go in, ``PolicyOutput`` comes out; the type
aliases name the callables the search takes (``RecurrentFn``, ``RootActionSelectionFn``,
``InteriorActionSelectionFn``, ``LoopFn``, ``QTransform``) with mctx 0.0.71's names, so code
annotated against mctx type-checks against rljax.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import chex
from flax import struct

from rljax.search.tree import Tree

Params = Any
"""Whatever the caller's ``recurrent_fn`` takes as its first argument (a pytree)."""
RecurrentState = Any
"""A node's state embedding: any pytree of ``[B, ...]`` arrays, leafless included."""
Action = chex.Array
NodeIndices = chex.Array
Depth = chex.Array
LoopFn = Callable[[int, int, Callable[[Any, Any], Any], Any], Any]
"""``loop_fn(lower, upper, body_fun, init_val)``, like ``jax.lax.fori_loop``."""
QTransform = Callable[[Tree, chex.Array], chex.Array]
"""``qtransform(tree, node_index) -> [A]`` on one unbatched tree."""
RootActionSelectionFn = Callable[[chex.PRNGKey, Tree, NodeIndices], Action]
"""``(key, tree, node_index) -> action``: a root rule on one unbatched tree."""
InteriorActionSelectionFn = Callable[[chex.PRNGKey, Tree, NodeIndices, Depth], Action]
"""``(key, tree, node_index, depth) -> action``: an interior rule on one unbatched tree."""


@struct.dataclass
class RootFnOutput:
    """The root of a search (mctx's fields).

    Attributes:
        prior_logits: ``[B, A]`` policy logits at the root.
        value: ``[B]`` value estimate of the root state.
        embedding: any pytree of ``[B, ...]`` arrays (leafless, e.g. ``()``, included), the
            first ``recurrent_fn`` input.
    """

    prior_logits: chex.Array
    value: chex.Array
    embedding: Any


@struct.dataclass
class RecurrentFnOutput:
    """One model step from a node (mctx's four fields plus two optional rljax ones).

    Attributes:
        reward: ``[B]`` reward of the transition.
        discount: ``[B]`` discount between ``reward`` and the next value (-1 for two-player
            zero-sum games, 0 for episode ends).
        prior_logits: ``[B, A]`` policy logits at the new node.
        value: ``[B]`` value estimate of the new node.
        invalid_actions: optional ``[B, A]`` bool, actions invalid at the new node (rljax).
        terminal: optional ``[B]`` bool, the transition ends the episode (rljax): the new
            node's value is taken as 0 and nothing is expanded below it.
    """

    reward: chex.Array
    discount: chex.Array
    prior_logits: chex.Array
    value: chex.Array
    invalid_actions: chex.Array | None = None
    terminal: chex.Array | None = None



RecurrentFn = Callable[[Params, chex.PRNGKey, chex.Array, Any], tuple[RecurrentFnOutput, Any]]
"""``recurrent_fn(params, key, action [B], embedding) -> (RecurrentFnOutput, embedding)``:
one model step for all ``B`` trees at once, embeddings a pytree of ``[B, ...]`` (mctx's)."""


@struct.dataclass
class PolicyOutput:
    """What a policy returns (mctx's fields).

    Attributes:
        action: ``[B]`` int32 proposed action.
        action_weights: ``[B, A]`` policy-training targets; each row sums to 1.
        search_tree: the finished ``[B, N, ...]`` :class:`Tree`.
    """

    action: chex.Array
    action_weights: chex.Array
    search_tree: Tree
