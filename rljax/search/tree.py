"""The batched search tree: mctx's ``Tree`` fields, plus interior masks and terminals.

A tree holds ``B`` independent searches. ``N`` is the node capacity (``num_simulations + 1``
for a fresh search) and ``A`` the number of actions. Node 0 of every row is its root; the
node first expanded by simulation ``i`` of a fresh search gets index ``i + 1``, so a parent's
index is always smaller than its children's (``get_subtree`` keeps that order).
"""

from __future__ import annotations

from typing import Any, ClassVar

import chex
import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class SearchSummary:
    """Root statistics of a finished search.

    Attributes:
        visit_counts: ``[B, A]`` float visit counts of the root's children.
        visit_probs: ``[B, A]`` ``visit_counts / sum(visit_counts)`` (uniform if no visit).
        value: ``[B]`` the root's search value.
        qvalues: ``[B, A]`` ``r(root, a) + discount(root, a) * value(child a)``.
    """

    visit_counts: chex.Array
    visit_probs: chex.Array
    value: chex.Array
    qvalues: chex.Array


@struct.dataclass
class Tree:
    """State of ``B`` search trees, stored as ``[B, N, ...]`` arrays (mctx's field names).

    Attributes:
        node_visits: ``[B, N]`` int32 visit count of each node (0 = node does not exist).
        raw_values: ``[B, N]`` the value the network gave each node when it was expanded.
        node_values: ``[B, N]`` the running mean of the returns backed up through the node.
        parents: ``[B, N]`` int32 parent index (``NO_PARENT`` = -1 for roots and free slots).
        action_from_parent: ``[B, N]`` int32 action that led from the parent (-1 at roots).
        children_index: ``[B, N, A]`` int32 node index of each child (``UNVISITED`` = -1).
        children_prior_logits: ``[B, N, A]`` prior logits of each node's actions (invalid
            actions already masked to the dtype's minimum).
        children_visits: ``[B, N, A]`` int32 visit count of each edge.
        children_rewards: ``[B, N, A]`` reward of each edge.
        children_discounts: ``[B, N, A]`` discount between the edge's reward and the child's
            value (-1 for two-player zero-sum games, 0 into terminal states).
        children_values: ``[B, N, A]`` the child's ``node_values`` at its last backup.
        embeddings: pytree of ``[B, N, ...]`` state embeddings, one per node.
        root_invalid_actions: ``[B, A]`` root mask as the caller gave it, nonzero where an
            action is invalid (mctx's dtype: that of ``invalid_actions``, or of the
            prior logits, zeros, when none is given).
        extra_data: policy-specific ``[B, ...]`` data (Gumbel noise for Gumbel MuZero).
        invalid_actions: ``[B, N, A]`` bool, True where an action is invalid at a node
            (row 0 = ``root_invalid_actions != 0``; interior rows come from the recurrent
            function's optional ``invalid_actions``). rljax extension.
        terminal: ``[B, N]`` bool, True for nodes no simulation expands below (the recurrent
            function's ``terminal`` flag, or every action invalid). rljax extension.
    """

    node_visits: chex.Array
    raw_values: chex.Array
    node_values: chex.Array
    parents: chex.Array
    action_from_parent: chex.Array
    children_index: chex.Array
    children_prior_logits: chex.Array
    children_visits: chex.Array
    children_rewards: chex.Array
    children_discounts: chex.Array
    children_values: chex.Array
    embeddings: Any
    root_invalid_actions: chex.Array
    extra_data: Any
    invalid_actions: chex.Array
    terminal: chex.Array

    ROOT_INDEX: ClassVar[int] = 0
    NO_PARENT: ClassVar[int] = -1
    UNVISITED: ClassVar[int] = -1

    @property
    def num_actions(self) -> int:
        """``A``, the number of actions."""
        return self.children_index.shape[-1]

    @property
    def num_simulations(self) -> int:
        """``N - 1``, the number of non-root node slots."""
        return self.node_visits.shape[-1] - 1

    def qvalues(self, indices: chex.Array) -> chex.Array:
        """Q-values ``r(s, a) + discount(s, a) * v(child(s, a))`` of the given nodes.

        Args:
            indices: ``[B]`` node indices for a batched tree, or a scalar for an unbatched
                one (inside ``jax.vmap``).

        Returns:
            ``[B, A]`` (or ``[A]``) Q-values; meaningless for unvisited actions.
        """
        if jnp.ndim(indices):
            return jax.vmap(_unbatched_qvalues)(self, indices)
        return _unbatched_qvalues(self, indices)

    def summary(self) -> SearchSummary:
        """Root visit counts, visit probabilities, value and Q-values (batched tree)."""
        chex.assert_rank(self.node_values, 2)
        value = self.node_values[:, Tree.ROOT_INDEX]
        (batch_size,) = value.shape
        qvalues = self.qvalues(jnp.full((batch_size,), Tree.ROOT_INDEX))
        visit_counts = self.children_visits[:, Tree.ROOT_INDEX].astype(value.dtype)
        total_counts = jnp.sum(visit_counts, axis=-1, keepdims=True)
        visit_probs = visit_counts / jnp.maximum(total_counts, 1)
        visit_probs = jnp.where(total_counts > 0, visit_probs, 1 / self.num_actions)
        return SearchSummary(
            visit_counts=visit_counts, visit_probs=visit_probs, value=value, qvalues=qvalues
        )


def _unbatched_qvalues(tree: Tree, index: chex.Array) -> chex.Array:
    chex.assert_rank(tree.children_discounts, 2)
    return tree.children_rewards[index] + tree.children_discounts[index] * tree.children_values[
        index
    ]


def infer_batch_size(tree: Tree) -> int:
    """``B`` of a batched tree."""
    if tree.node_values.ndim != 2:
        raise ValueError(f"expected a batched tree with node_values [B, N], got shape "
                         f"{tree.node_values.shape}")
    return tree.node_values.shape[0]


def get_subtree(tree: Tree, action: chex.Array) -> Tree:
    """The subtree under each root's child ``action``, as a tree with the same shapes.

    The child becomes node 0; its descendants keep their relative order (so parents still
    precede children) and are renumbered ``1 .. K - 1``; every other slot is emptied. Visit
    counts, values, priors, masks and embeddings of the kept nodes are unchanged. A row whose
    child was never expanded comes back empty (all ``node_visits`` 0), and the next search
    starts that row afresh from its ``root``.

    Feed the result to the next move's search as ``muzero_policy(..., initial_tree=subtree)``
    (rljax extension; see :func:`rljax.search.muzero_policy`).

    Membership uses pointer doubling: with ``f(i) = i`` where ``parents[i]`` is the root (or
    none) and ``f(i) = parents[i]`` otherwise, ``f`` applied ``2^ceil(log2 N)`` times maps
    every node to its depth-1 ancestor, in ``ceil(log2 N)`` batched gathers.

    Args:
        tree: a batched tree, ``[B, N, ...]``.
        action: ``[B]`` int, the action taken at each root.

    Returns:
        The re-rooted tree, ``[B, N, ...]``.
    """
    batch_size = infer_batch_size(tree)
    num_nodes = tree.node_visits.shape[1]
    chex.assert_shape(action, (batch_size,))
    rows = jnp.arange(batch_size)
    new_root = tree.children_index[rows, Tree.ROOT_INDEX, action]  # [B], -1 if unexpanded

    nodes = jnp.broadcast_to(jnp.arange(num_nodes), (batch_size, num_nodes))
    parents = tree.parents
    at_top = (parents == Tree.ROOT_INDEX) | (parents == Tree.NO_PARENT)
    ancestor = jnp.where(at_top, nodes, parents)  # f, one step up (stopping at depth 1)
    for _ in range(max(1, (num_nodes - 1).bit_length())):
        ancestor = jnp.take_along_axis(ancestor, ancestor, axis=1)  # f^(2k) = f^k o f^k
    member = (ancestor == new_root[:, None]) & (new_root[:, None] >= 0)
    member &= tree.node_visits > 0
    member &= nodes != Tree.ROOT_INDEX

    new_index = jnp.cumsum(member, axis=1) - 1  # [B, N] new index of each member
    num_kept = jnp.sum(member, axis=1)  # [B]
    # source[b, j] = old index of the node that moves to slot j (0 for empty slots).
    target = jnp.where(member, new_index, num_nodes)
    source = jnp.zeros((batch_size, num_nodes), jnp.int32).at[rows[:, None], target].set(
        nodes.astype(jnp.int32), mode="drop"
    )
    occupied = nodes < num_kept[:, None]  # [B, N]

    def relabel(old_index):  # old node index (or -1) -> new index (or -1)
        safe = jnp.maximum(old_index, 0)
        mapped = jnp.take_along_axis(new_index, safe.reshape(batch_size, -1), axis=1)
        mapped = mapped.reshape(old_index.shape)
        return jnp.where(old_index >= 0, mapped, -1).astype(jnp.int32)

    def move(x, empty):
        moved = jnp.take_along_axis(x, source.reshape(source.shape + (1,) * (x.ndim - 2)),
                                    axis=1)
        mask = occupied.reshape(occupied.shape + (1,) * (x.ndim - 2))
        return jnp.where(mask, moved, jnp.asarray(empty, x.dtype))

    children_index = relabel(move(tree.children_index, Tree.UNVISITED))
    children_index = jnp.where(
        occupied[..., None], children_index, jnp.asarray(Tree.UNVISITED, jnp.int32)
    )
    parents = jnp.where(occupied, relabel(move(tree.parents, Tree.NO_PARENT)), Tree.NO_PARENT)
    parents = parents.at[:, Tree.ROOT_INDEX].set(Tree.NO_PARENT)
    action_from_parent = move(tree.action_from_parent, Tree.NO_PARENT)
    action_from_parent = action_from_parent.at[:, Tree.ROOT_INDEX].set(Tree.NO_PARENT)
    invalid_actions = move(tree.invalid_actions, False)
    return tree.replace(
        node_visits=move(tree.node_visits, 0),
        raw_values=move(tree.raw_values, 0),
        node_values=move(tree.node_values, 0),
        parents=parents,
        action_from_parent=action_from_parent,
        children_index=children_index,
        children_prior_logits=move(tree.children_prior_logits, 0),
        children_visits=move(tree.children_visits, 0),
        children_rewards=move(tree.children_rewards, 0),
        children_discounts=move(tree.children_discounts, 0),
        children_values=move(tree.children_values, 0),
        embeddings=jax.tree.map(lambda x: move(x, 0), tree.embeddings),
        root_invalid_actions=invalid_actions[:, Tree.ROOT_INDEX].astype(
            tree.root_invalid_actions.dtype),
        invalid_actions=invalid_actions,
        terminal=move(tree.terminal, False),
    )


reuse_subtree = get_subtree
