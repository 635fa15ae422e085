"""The search loop: selection, expansion and backup for ``B`` trees at once (mctx's
``search.py``; named ``loop`` so that the function ``rljax.search.search`` does not shadow
its module).

Each simulation is three batched phases over the ``B`` trees: *selection* (a
``lax.while_loop`` over depth, each iteration one ``[B, A]`` scoring step; the root level,
where every row starts, is taken once before the loop with the root rule only),
*expansion* (one batched ``recurrent_fn`` call and ``[B]``-row scatters) and *backup* (a
``lax.while_loop`` up the ``parents`` pointers whose every iteration updates one node per
row with ``[B]``-element gathers and scatters). mctx's backup is a ``jax.vmap``-ed per-tree
``while_loop``; under ``vmap`` every iteration selects between old and new copies of the
whole ``[B, N, A]`` tree, so its cost grows with ``B * N * A`` per level instead of ``B``.

The policies (:mod:`rljax.search.policies`) call ``_search`` with batched selectors; the
public :func:`search` takes mctx-style unbatched rules.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp

from rljax.search.action_selection import Selector, _LevelKeys, _vmapped_selector
from rljax.search.base import LoopFn, Params, RecurrentFn, RootFnOutput
from rljax.search.tree import Tree

# --------------------------------------------------------------------------------------
# Checks (all at trace time, on static shapes).


def _check_budget(num_simulations, max_depth) -> None:
    if not isinstance(num_simulations, int) or num_simulations < 1:
        raise ValueError(f"num_simulations must be an int >= 1, got {num_simulations!r}")
    if max_depth is not None and (not isinstance(max_depth, int) or max_depth < 1):
        raise ValueError(f"max_depth must be None or an int >= 1, got {max_depth!r}")


def _check_root(root: RootFnOutput, invalid_actions) -> tuple[int, int]:
    logits_shape = jnp.shape(root.prior_logits)
    if len(logits_shape) != 2:
        raise ValueError(f"root.prior_logits must be [B, num_actions], got shape {logits_shape}")
    batch_size, num_actions = logits_shape
    if jnp.shape(root.value) != (batch_size,):
        raise ValueError(f"root.value has shape {jnp.shape(root.value)}, expected (B,) = "
                         f"({batch_size},) from root.prior_logits {logits_shape}")
    # Any pytree, as in mctx: a leafless one (``()``, ``None``) is a model without state.
    for path, leaf in jax.tree_util.tree_leaves_with_path(root.embedding):
        if jnp.ndim(leaf) < 1 or jnp.shape(leaf)[0] != batch_size:
            raise ValueError(
                f"root.embedding{jax.tree_util.keystr(path)} has shape {jnp.shape(leaf)}, "
                f"expected leading batch axis B = {batch_size}")
    if invalid_actions is not None and jnp.shape(invalid_actions) != logits_shape:
        raise ValueError(f"invalid_actions has shape {jnp.shape(invalid_actions)}, expected "
                         f"[B, num_actions] = {logits_shape}")
    return batch_size, num_actions


def _check_step(output, embedding, root_embedding, batch_size: int, num_actions: int) -> None:
    expected = {"reward": (batch_size,), "discount": (batch_size,), "value": (batch_size,),
                "prior_logits": (batch_size, num_actions)}
    optional = {"invalid_actions": (batch_size, num_actions), "terminal": (batch_size,)}
    for name, shape in expected.items():
        if not hasattr(output, name):
            raise ValueError(f"recurrent_fn's output has no field {name!r}")
        got = jnp.shape(getattr(output, name))
        if got != shape:
            raise ValueError(f"recurrent_fn returned {name} of shape {got}, expected {shape}")
    for name, shape in optional.items():
        value = getattr(output, name, None)
        if value is not None and jnp.shape(value) != shape:
            raise ValueError(f"recurrent_fn returned {name} of shape {jnp.shape(value)}, "
                             f"expected {shape}")
    want = jax.tree.structure(root_embedding)
    if jax.tree.structure(embedding) != want:
        raise ValueError(f"recurrent_fn returned an embedding with structure "
                         f"{jax.tree.structure(embedding)}, expected the root's {want}")
    for (path, new), old in zip(jax.tree_util.tree_leaves_with_path(embedding),
                                jax.tree.leaves(root_embedding), strict=True):
        if jnp.shape(new) != jnp.shape(old):
            raise ValueError(f"recurrent_fn returned embedding{jax.tree_util.keystr(path)} of "
                             f"shape {jnp.shape(new)}, expected the root's {jnp.shape(old)}")


# --------------------------------------------------------------------------------------
# The search.


def _mask_invalid_actions(logits: chex.Array, invalid_actions: chex.Array | None) -> chex.Array:
    """Logits with invalid actions at the dtype's minimum (finite: no NaN if all invalid)."""
    if invalid_actions is None:
        return logits
    logits = logits - jnp.max(logits, axis=-1, keepdims=True)
    return jnp.where(invalid_actions, jnp.finfo(logits.dtype).min, logits)


def _new_tree(root: RootFnOutput, num_nodes: int, invalid: chex.Array, extra_data) -> Tree:
    """A ``[B, num_nodes, ...]`` tree holding only the roots."""
    batch_size, num_actions = root.prior_logits.shape
    dtype = root.value.dtype
    bn, bna = (batch_size, num_nodes), (batch_size, num_nodes, num_actions)
    tree = Tree(
        node_visits=jnp.zeros(bn, jnp.int32).at[:, 0].set(1),
        raw_values=jnp.zeros(bn, dtype).at[:, 0].set(root.value),
        node_values=jnp.zeros(bn, dtype).at[:, 0].set(root.value),
        parents=jnp.full(bn, Tree.NO_PARENT, jnp.int32),
        action_from_parent=jnp.full(bn, Tree.NO_PARENT, jnp.int32),
        children_index=jnp.full(bna, Tree.UNVISITED, jnp.int32),
        children_prior_logits=jnp.zeros(bna, root.prior_logits.dtype).at[:, 0].set(
            root.prior_logits),
        children_values=jnp.zeros(bna, dtype),
        children_visits=jnp.zeros(bna, jnp.int32),
        children_rewards=jnp.zeros(bna, dtype),
        children_discounts=jnp.zeros(bna, dtype),
        embeddings=jax.tree.map(
            lambda x: jnp.zeros(bn + x.shape[1:], x.dtype).at[:, 0].set(x), root.embedding),
        root_invalid_actions=invalid,
        extra_data=extra_data,
        invalid_actions=jnp.zeros(bna, bool).at[:, 0].set(invalid),
        terminal=jnp.zeros(bn, bool),
    )
    return tree


def _seed_tree(initial_tree: Tree, root: RootFnOutput, invalid: chex.Array, extra_data,
               num_simulations: int) -> tuple[Tree, chex.Array]:
    """Continue from ``initial_tree`` (e.g. ``get_subtree``'s): returns (tree, base index).

    Nodes at index ``>= N - num_simulations`` are dropped (with their subtrees, since
    children come after parents) so the new simulations fit; their edges keep their
    statistics. The root's priors, raw value, embedding and mask come from ``root``; rows
    with no kept node restart from ``root`` alone. New nodes go to ``base + sim + 1``.
    """
    batch_size, num_actions = root.prior_logits.shape
    num_nodes = initial_tree.node_visits.shape[1]
    if initial_tree.node_visits.shape[0] != batch_size or initial_tree.num_actions != num_actions:
        raise ValueError(f"initial_tree has [B, N, A] = {initial_tree.children_index.shape}, "
                         f"root has [B, A] = {(batch_size, num_actions)}")
    if num_nodes < num_simulations + 1:
        raise ValueError(f"initial_tree holds {num_nodes} nodes; num_simulations = "
                         f"{num_simulations} needs at least {num_simulations + 1}")
    keep = num_nodes - num_simulations
    nodes = jnp.arange(num_nodes)
    kept = (nodes[None, :] < keep) & (initial_tree.node_visits > 0)  # [B, N]
    fresh = ~kept[:, 0]  # [B] rows with nothing to reuse
    kept &= ~fresh[:, None] | (nodes[None, :] == 0)
    empty = _new_tree(root, num_nodes, invalid, extra_data)

    def pick(old, new):
        mask = kept.reshape(kept.shape + (1,) * (old.ndim - 2))
        return jnp.where(mask, old, new)

    t = jax.tree.map(pick, initial_tree.replace(extra_data=None, root_invalid_actions=None),
                     empty.replace(extra_data=None, root_invalid_actions=None))
    children_index = jnp.where(t.children_index >= keep, Tree.UNVISITED, t.children_index)
    rows = jnp.arange(batch_size)
    tree = t.replace(
        children_index=children_index,
        node_visits=t.node_visits.at[rows, 0].set(jnp.where(fresh, 1, t.node_visits[:, 0])),
        node_values=t.node_values.at[rows, 0].set(
            jnp.where(fresh, root.value, t.node_values[:, 0])),
        raw_values=t.raw_values.at[:, 0].set(root.value),
        children_prior_logits=t.children_prior_logits.at[:, 0].set(root.prior_logits),
        embeddings=jax.tree.map(lambda x, r: x.at[:, 0].set(r), t.embeddings, root.embedding),
        root_invalid_actions=invalid,
        invalid_actions=t.invalid_actions.at[:, 0].set(invalid),
        terminal=t.terminal.at[:, 0].set(False),
        extra_data=extra_data,
    )
    base = jnp.maximum(jnp.sum(kept, axis=1).astype(jnp.int32), 1) - 1
    return tree, base



def _simulate(keys, tree: Tree, root_select: Selector, interior_select: Selector,
              max_depth: int, may_terminate: bool = True):
    """Selection for all rows at once: descend until an unexpanded edge, max_depth or a
    terminal node.

    Every row starts at its root, so level 0 is taken once with the root rule; a
    ``while_loop`` then takes one level per iteration for the rows still descending (all
    of which sit at the same depth), until none is.

    Args:
        keys: ``[B]`` per-row keys of this simulation.
        tree: the batched tree (read only).
        root_select: batched selector at the roots.
        interior_select: batched selector below.
        max_depth: the deepest level a simulation may reach (edges from the root).
        may_terminate: whether ``tree.terminal`` must be read.

    Returns:
        ``(parent [B], action [B], child [B])``: the node reached, the action to expand
        from it and the child it leads to (``UNVISITED`` if none yet).
    """
    batch_size = keys.shape[0]
    rows = jnp.arange(batch_size)

    def step_state(node, action, depth):
        next_node = tree.children_index[rows, node, action]
        continuing = (next_node != Tree.UNVISITED) & (depth < max_depth)
        if may_terminate:
            continuing &= ~tree.terminal[rows, jnp.maximum(next_node, 0)]
        return next_node, continuing

    node = jnp.full((batch_size,), Tree.ROOT_INDEX, jnp.int32)
    level = jnp.zeros((), jnp.int32)
    action = root_select(tree, node, _LevelKeys(keys, level), jnp.ones((batch_size,), bool))
    next_node, continuing = step_state(node, action, level + 1)

    def cond(state):
        return jnp.any(state[-1])

    def body(state):
        level, node, action, next_node, continuing = state
        level = level + 1
        new_action = interior_select(tree, next_node, _LevelKeys(keys, level), continuing)
        new_next, new_continuing = step_state(next_node, new_action, level + 1)
        keep = functools.partial(jnp.where, continuing)
        return (level, keep(next_node, node), keep(new_action, action),
                keep(new_next, next_node), new_continuing & continuing)

    state = (level, node, action, next_node, continuing)
    _, node, action, next_node, _ = jax.lax.while_loop(cond, body, state)
    return node, action, next_node


def _expand(params, rng_key, tree: Tree, recurrent_fn, parent, action, next_node,
            may_terminate: bool = True) -> Tree:
    """Evaluate ``(parent, action)`` and write the result into node ``next_node``.

    A new index creates the node; an existing non-terminal one (reached at ``max_depth``)
    is re-evaluated and overwritten, as in mctx; an existing terminal one is left as it is
    and only gains a visit.
    """
    batch_size, num_nodes, num_actions = tree.children_index.shape
    rows = jnp.arange(batch_size)
    embedding = jax.tree.map(lambda x: x[rows, parent], tree.embeddings)
    output, embedding = recurrent_fn(params, rng_key, action, embedding)
    _check_step(output, embedding, embedding_like(tree), batch_size, num_actions)

    prior_logits = output.prior_logits
    value = output.value
    invalid = getattr(output, "invalid_actions", None)
    terminal_flag = getattr(output, "terminal", None)
    node_terminal = jnp.zeros((batch_size,), bool)
    if invalid is not None:
        invalid = jnp.asarray(invalid) != 0
        prior_logits = _mask_invalid_actions(prior_logits, invalid)
        node_terminal = jnp.all(invalid, axis=-1)
    if terminal_flag is not None:
        terminal_flag = jnp.asarray(terminal_flag).astype(bool)
        value = jnp.where(terminal_flag, jnp.zeros_like(value), value)
        node_terminal = node_terminal | terminal_flag

    if may_terminate:
        revisit_terminal = tree.terminal[rows, next_node]
        node = jnp.where(revisit_terminal, num_nodes, next_node)  # out of range: dropped
        edge_parent = jnp.where(revisit_terminal, num_nodes, parent)
        mode = "drop"
    else:
        node, edge_parent, mode = next_node, parent, "promise_in_bounds"

    def set_node(x, v):
        return x.at[rows, node].set(v, mode=mode)

    def set_edge(x, v):
        return x.at[rows, edge_parent, action].set(v, mode=mode)

    tree = tree.replace(
        children_prior_logits=set_node(tree.children_prior_logits, prior_logits),
        raw_values=set_node(tree.raw_values, value),
        node_values=set_node(tree.node_values, value),
        node_visits=tree.node_visits.at[rows, next_node].add(1),
        embeddings=jax.tree.map(set_node, tree.embeddings, embedding),
        children_index=set_edge(tree.children_index, next_node),
        children_rewards=set_edge(tree.children_rewards, output.reward),
        children_discounts=set_edge(tree.children_discounts, output.discount),
        parents=set_node(tree.parents, parent),
        action_from_parent=set_node(tree.action_from_parent, action),
    )
    if invalid is not None:
        tree = tree.replace(invalid_actions=set_node(tree.invalid_actions, invalid))
    if may_terminate:
        tree = tree.replace(terminal=set_node(tree.terminal, node_terminal))
    return tree


def embedding_like(tree: Tree):
    """One node's worth of embeddings: ``[B, ...]`` leaves (node 0's)."""
    return jax.tree.map(lambda x: x[:, 0], tree.embeddings)


def _backward(tree: Tree, leaf: chex.Array) -> Tree:
    """Back up every row's leaf value to its root, one level per iteration, all rows at once.

    Along the path, from the leaf up (mctx's arithmetic, in the same order)::

        G <- r(p, a) + discount(p, a) * G                  (G starts at the leaf's value)
        V(p) <- (V(p) * N(p) + G) / (N(p) + 1);  N(p) += 1
        children_values(p, a) <- V(child);  n(p, a) += 1

    Each iteration touches one node per row (``[B]`` gathers and scatters); rows already at
    the root rewrite their root's current values. The loop runs as deep as the deepest
    row's path.

    Args:
        tree: batched tree.
        leaf: ``[B]`` leaf indices.

    Returns:
        The updated tree.
    """
    batch_size = leaf.shape[0]
    rows = jnp.arange(batch_size)

    num_nodes = tree.node_visits.shape[1]

    def cond(state):
        return jnp.any(state[-1] > Tree.ROOT_INDEX)

    def body(state):
        tree, leaf_value, child_value, index = state
        # Rows already at their root (index 0, then -1) write out of range: dropped.
        index = jnp.maximum(index, Tree.ROOT_INDEX)
        parent = tree.parents[rows, index]
        target = jnp.where(index > Tree.ROOT_INDEX, parent, num_nodes)
        action = tree.action_from_parent[rows, index]
        count = tree.node_visits[rows, parent]
        reward = tree.children_rewards[rows, parent, action]
        discount = tree.children_discounts[rows, parent, action]
        leaf_value = reward + discount * leaf_value
        parent_value = (tree.node_values[rows, parent] * count + leaf_value) / (count + 1.0)
        child_visits = tree.children_visits[rows, parent, action] + 1
        tree = tree.replace(
            node_values=tree.node_values.at[rows, target].set(parent_value, mode="drop"),
            node_visits=tree.node_visits.at[rows, target].set(count + 1, mode="drop"),
            children_values=tree.children_values.at[rows, target, action].set(
                child_value, mode="drop"),
            children_visits=tree.children_visits.at[rows, target, action].set(
                child_visits, mode="drop"),
        )
        return tree, leaf_value, parent_value, parent

    leaf_value = tree.node_values[rows, leaf]
    state = (tree, leaf_value, leaf_value, leaf.astype(jnp.int32))
    tree, _, _, _ = jax.lax.while_loop(cond, body, state)
    return tree


def _probe_recurrent_fn(params, rng_key, recurrent_fn, root: RootFnOutput) -> bool:
    """Check ``recurrent_fn``'s output shapes at trace time (no computation is run).

    Returns:
        ``(has_masks, may_terminate)``: whether it returns interior ``invalid_actions`` (so
        selection must read them) and whether any node can be terminal (a ``terminal``
        flag or masks; without either, terminal bookkeeping is skipped).
    """
    batch_size, num_actions = root.prior_logits.shape
    action = jnp.zeros((batch_size,), jnp.int32)
    output, embedding = jax.eval_shape(
        lambda: recurrent_fn(params, rng_key, action, root.embedding))
    _check_step(output, embedding, root.embedding, batch_size, num_actions)
    has_masks = getattr(output, "invalid_actions", None) is not None
    return has_masks, has_masks or getattr(output, "terminal", None) is not None


def _search(
    params: Params,
    rng_key: chex.PRNGKey,
    *,
    root: RootFnOutput,
    recurrent_fn: RecurrentFn,
    root_select: Selector,
    interior_select: Selector,
    num_simulations: int,
    max_depth: int | None,
    invalid_actions: chex.Array | None,
    extra_data: Any,
    loop_fn: LoopFn,
    initial_tree: Tree | None,
    num_nodes: int | None,
    may_terminate: bool = True,
) -> Tree:
    """:func:`search` with batched selectors (see ``Selector``).

    ``may_terminate=False`` promises that no node is terminal (no ``terminal`` flag and no
    masks from ``recurrent_fn``, no terminal node in ``initial_tree``), which lets selection
    and expansion skip reading and writing ``tree.terminal``.
    """
    _check_budget(num_simulations, max_depth)
    batch_size, num_actions = _check_root(root, invalid_actions)
    if max_depth is None:
        max_depth = num_simulations
    if invalid_actions is None:
        invalid = jnp.zeros((batch_size, num_actions), bool)
    else:
        invalid = jnp.asarray(invalid_actions) != 0
    if initial_tree is None:
        if num_nodes is None:
            num_nodes = num_simulations + 1
        if num_nodes < num_simulations + 1:
            raise ValueError(f"num_nodes = {num_nodes} < num_simulations + 1 = "
                             f"{num_simulations + 1}")
        tree = _new_tree(root, num_nodes, invalid, extra_data)
        base = jnp.zeros((batch_size,), jnp.int32)
    else:
        if num_nodes is not None and num_nodes != initial_tree.node_visits.shape[1]:
            raise ValueError(f"num_nodes = {num_nodes} differs from initial_tree's "
                             f"{initial_tree.node_visits.shape[1]} nodes")
        tree, base = _seed_tree(initial_tree, root, invalid, extra_data, num_simulations)
    # mctx stores the root mask as given (zeros like the logits when absent), so the field
    # has the caller's dtype; the search itself reads the bool ``invalid``.
    tree = tree.replace(root_invalid_actions=jnp.zeros_like(root.prior_logits)
                        if invalid_actions is None else jnp.asarray(invalid_actions))

    def body(sim, loop_state):
        rng_key, tree = loop_state
        rng_key, simulate_key, expand_key = jax.random.split(rng_key, 3)
        simulate_keys = jax.random.split(simulate_key, batch_size)
        parent, action, next_node = _simulate(simulate_keys, tree, root_select,
                                              interior_select, max_depth, may_terminate)
        next_node = jnp.where(next_node == Tree.UNVISITED, base + sim + 1, next_node)
        tree = _expand(params, expand_key, tree, recurrent_fn, parent, action, next_node,
                       may_terminate)
        tree = _backward(tree, next_node)
        return rng_key, tree

    _, tree = loop_fn(0, num_simulations, body, (rng_key, tree))
    return tree


def search(
    params: Params,
    rng_key: chex.PRNGKey,
    *,
    root: RootFnOutput,
    recurrent_fn: RecurrentFn,
    root_action_selection_fn: Callable[..., chex.Array],
    interior_action_selection_fn: Callable[..., chex.Array],
    num_simulations: int,
    max_depth: int | None = None,
    invalid_actions: chex.Array | None = None,
    extra_data: Any = None,
    loop_fn: LoopFn = jax.lax.fori_loop,
    initial_tree: Tree | None = None,
    num_nodes: int | None = None,
) -> Tree:
    """Run ``num_simulations`` simulations on ``B`` trees at once (mctx's ``search``).

    Every simulation: split ``rng_key`` into (next, selection, expansion) keys; select a
    path in each tree (``[B]`` per-row keys split from the selection key, each split again
    per level for the rule's key); evaluate the leaf edges with one batched
    ``recurrent_fn`` call; back the values up.

    Args:
        params: forwarded to ``recurrent_fn``.
        rng_key: key; consumed.
        root: ``RootFnOutput`` with ``prior_logits [B, A]``, ``value [B]``,
            ``embedding [B, ...]``.
        recurrent_fn: ``(params, key, action [B], embedding [B, ...]) ->
            (RecurrentFnOutput, embedding [B, ...])``.
        root_action_selection_fn: unbatched ``(key, tree, node_index) -> action``.
        interior_action_selection_fn: unbatched ``(key, tree, node_index, depth) -> action``.
        num_simulations: number of simulations, an int >= 1.
        max_depth: deepest leaf, in edges from the root (default ``num_simulations``).
        invalid_actions: ``[B, A]`` root mask, nonzero = invalid.
        extra_data: stored as ``tree.extra_data``, ``[B, ...]`` leaves.
        loop_fn: the loop over simulations, called as
            ``loop_fn(0, num_simulations, body, (key, tree))``.
        initial_tree: a ``[B, N, ...]`` tree to continue (rljax; see ``get_subtree``).
        num_nodes: node capacity ``N`` of a fresh tree (default ``num_simulations + 1``).

    Returns:
        The ``[B, N, ...]`` search tree.
    """
    _check_budget(num_simulations, max_depth)
    _check_root(root, invalid_actions)
    _, may_terminate = _probe_recurrent_fn(params, rng_key, recurrent_fn, root)
    return _search(
        params, rng_key, root=root, recurrent_fn=recurrent_fn,
        root_select=_vmapped_selector(root_action_selection_fn, at_root=True),
        interior_select=_vmapped_selector(interior_action_selection_fn, at_root=False),
        num_simulations=num_simulations, max_depth=max_depth,
        invalid_actions=invalid_actions, extra_data=extra_data, loop_fn=loop_fn,
        initial_tree=initial_tree, num_nodes=num_nodes,
        may_terminate=may_terminate or initial_tree is not None)
