"""Batched Monte Carlo tree search in lax control flow, call-compatible with mctx.

``muzero_policy`` (PUCT with Dirichlet root noise) and ``gumbel_muzero_policy`` (Gumbel
MuZero, Sequential Halving at the root) take the same arguments, defaults and
``RootFnOutput`` / ``RecurrentFnOutput`` structures as mctx 0.0.71's, and return a
``PolicyOutput(action, action_weights, search_tree)`` whose tree has mctx's fields, so an
mctx user switches with one import::

    from rljax import search as mctx   # was: import mctx

With Dirichlet noise off (PUCT) or ``gumbel_scale=0`` the visit counts equal mctx's exactly:
selection scores, tie-break noise and key usage are the same.

What differs is how the batch is walked. Each simulation is three batched phases over the
``B`` trees: *selection* (a ``lax.while_loop`` over depth, each iteration one ``[B, A]``
scoring step; the root level, where every row starts, is taken once before the loop with
the root rule only), *expansion* (one batched ``recurrent_fn`` call and ``[B]``-row
scatters) and *backup* (a ``lax.while_loop`` up the ``parents`` pointers whose every
iteration updates one node per row with ``[B]``-element gathers and scatters). mctx's backup
is a ``jax.vmap``-ed per-tree ``while_loop``; under ``vmap`` every iteration selects between
old and new copies of the whole ``[B, N, A]`` tree, so its cost grows with ``B * N * A`` per
level instead of ``B``.

Beyond mctx (all optional; without them the search is mctx's):

* interior invalid actions: a recurrent function may return ``invalid_actions [B, A]``;
  those actions are never selected below that node, and their prior is masked like the
  root's;
* terminal states: ``terminal [B]`` marks a transition that ends the episode; the node's
  value is taken as 0 and no simulation expands below it (a simulation that selects it
  again backs up its reward once more). A node whose every action is invalid is also
  never expanded below (its value is kept);
* two-player zero-sum games: return ``discount = -1`` (each backup step computes
  ``G = r + discount * G``, so values alternate perspective), as in mctx;
* subtree reuse: ``get_subtree(tree, action)`` re-roots a finished tree at the chosen
  child; ``muzero_policy(..., initial_tree=subtree)`` continues the search from there.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
from flax import struct

from rljax.search import qtransforms, seq_halving
from rljax.search.tree import Tree

Params = Any
LoopFn = Callable[..., Any]
QTransform = Callable[[Tree, chex.Array], chex.Array]


@struct.dataclass
class RootFnOutput:
    """The root of a search (mctx's fields).

    Attributes:
        prior_logits: ``[B, A]`` policy logits at the root.
        value: ``[B]`` value estimate of the root state.
        embedding: pytree of ``[B, ...]``, the first ``recurrent_fn`` input.
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


@struct.dataclass
class GumbelMuZeroExtraData:
    """Gumbel MuZero's tree ``extra_data``: ``root_gumbel [B, A]``."""

    root_gumbel: chex.Array


# --------------------------------------------------------------------------------------
# Action selection. Each rule is written for one *unbatched* tree and a scalar node index
# (mctx's signature); the search vmaps it over the batch.


def masked_argmax(to_argmax: chex.Array, invalid_actions: chex.Array | None) -> chex.Array:
    """``argmax`` over valid actions (``-inf`` where invalid; action 0 if none is valid).

    ``to_argmax`` ``[..., A]`` and bool ``invalid_actions`` ``[..., A]`` (or ``None``) ->
    int32 ``[...]``.
    """
    if invalid_actions is not None:
        chex.assert_equal_shape([to_argmax, invalid_actions])
        to_argmax = jnp.where(invalid_actions, -jnp.inf, to_argmax)
    return jnp.argmax(to_argmax, axis=-1).astype(jnp.int32)


def muzero_action_selection(
    rng_key: chex.PRNGKey,
    tree: Tree,
    node_index: chex.Numeric,
    depth: chex.Numeric,
    *,
    pb_c_init: float = 1.25,
    pb_c_base: float = 19652.0,
    qtransform: QTransform = qtransforms.qtransform_by_parent_and_siblings,
) -> chex.Array:
    """PUCT (MuZero, Schrittwieser et al. 2020, Appendix B) at one node::

        a* = argmax_a  q̂(s, a) + π(a|s) sqrt(N(s)) / (1 + n(s, a)) * c(s) + 1e-7 U(0, 1)
        c(s) = c1 + log((N(s) + c2 + 1) / c2)

    (the ``1e-7 U(0, 1)`` term, one uniform per action, breaks ties)

    with ``N(s)`` the node's visits, ``n(s, a)`` the edge's, ``π = softmax(prior_logits)``,
    ``q̂ = qtransform``. Actions invalid at the node (``tree.invalid_actions``, the root
    mask at node 0) are never chosen.

    Args:
        rng_key: key for the tie-break noise.
        tree: unbatched tree.
        node_index: scalar node index.
        depth: scalar depth of the node (unused; the node's own mask decides validity).
        pb_c_init: ``c1``.
        pb_c_base: ``c2``.
        qtransform: Q-value transformation.

    Returns:
        Scalar int32 action.
    """
    del depth
    visit_counts = tree.children_visits[node_index]
    node_visit = tree.node_visits[node_index]
    pb_c = pb_c_init + jnp.log((node_visit + pb_c_base + 1.0) / pb_c_base)
    prior_probs = jax.nn.softmax(tree.children_prior_logits[node_index])
    policy_score = jnp.sqrt(node_visit) * pb_c * prior_probs / (visit_counts + 1)
    value_score = qtransform(tree, node_index)
    tie_break = 1e-7 * jax.random.uniform(rng_key, (tree.num_actions,))
    to_argmax = value_score + policy_score + tie_break
    return masked_argmax(to_argmax, tree.invalid_actions[node_index])


def gumbel_muzero_root_action_selection(
    rng_key: chex.PRNGKey,
    tree: Tree,
    node_index: chex.Numeric,
    *,
    num_simulations: chex.Numeric,
    max_num_considered_actions: chex.Numeric,
    qtransform: QTransform = qtransforms.qtransform_completed_by_mix_value,
) -> chex.Array:
    """Sequential Halving with Gumbel at the root (Danihelka et al. 2022, Section 3)::

        a* = argmax_{a : n(a) = k_i}  g(a) + logits(a) + σ(q̂(a))

    where ``k_i`` is the schedule's visit count for simulation ``i = Σ_a n(a)`` with
    ``min(m, #valid actions)`` considered actions.

    Args:
        rng_key: unused (the rule is deterministic given the Gumbel noise).
        tree: unbatched tree whose ``extra_data.root_gumbel`` holds ``[A]`` noise.
        node_index: scalar node index (the root).
        num_simulations: the simulation budget.
        max_num_considered_actions: ``m``.
        qtransform: completed-Q transformation ``σ(q̂)``.

    Returns:
        Scalar int32 action.
    """
    del rng_key
    visit_counts = tree.children_visits[node_index]
    prior_logits = tree.children_prior_logits[node_index]
    completed_qvalues = qtransform(tree, node_index)
    table = jnp.array(
        seq_halving.get_table_of_considered_visits(max_num_considered_actions, num_simulations)
    )
    num_valid = jnp.sum(1 - tree.root_invalid_actions, axis=-1).astype(jnp.int32)
    num_considered = jnp.minimum(max_num_considered_actions, num_valid)
    simulation_index = jnp.sum(visit_counts, -1)
    considered_visit = table[num_considered, simulation_index]
    to_argmax = seq_halving.score_considered(
        considered_visit, tree.extra_data.root_gumbel, prior_logits, completed_qvalues,
        visit_counts,
    )
    return masked_argmax(to_argmax, tree.root_invalid_actions)


def gumbel_muzero_interior_action_selection(
    rng_key: chex.PRNGKey,
    tree: Tree,
    node_index: chex.Numeric,
    depth: chex.Numeric,
    *,
    qtransform: QTransform = qtransforms.qtransform_completed_by_mix_value,
) -> chex.Array:
    """Deterministic interior selection of Gumbel MuZero (Danihelka et al. 2022, Sec. 5)::

        a* = argmax_a  π'(a) - n(a) / (1 + Σ_b n(b)),   π' = softmax(logits + σ(q̂))

    so visit frequencies track the improved policy ``π'``. Actions invalid at the node are
    never chosen (rljax extension; mctx has no interior masks).

    Args:
        rng_key: unused.
        tree: unbatched tree.
        node_index: scalar node index.
        depth: unused.
        qtransform: completed-Q transformation.

    Returns:
        Scalar int32 action.
    """
    del rng_key, depth
    visit_counts = tree.children_visits[node_index]
    prior_logits = tree.children_prior_logits[node_index]
    completed_qvalues = qtransform(tree, node_index)
    probs = jax.nn.softmax(prior_logits + completed_qvalues)
    to_argmax = probs - visit_counts / (1 + jnp.sum(visit_counts, keepdims=True, axis=-1))
    return masked_argmax(to_argmax, tree.invalid_actions[node_index])


def _gumbel_interior_unmasked(rng_key, tree, node_index, depth, *, qtransform):
    """:func:`gumbel_muzero_interior_action_selection` without reading node masks (used
    when the recurrent function returns none: saves a ``[B, A]`` gather per level)."""
    del rng_key, depth
    visit_counts = tree.children_visits[node_index]
    probs = jax.nn.softmax(tree.children_prior_logits[node_index] + qtransform(tree, node_index))
    to_argmax = probs - visit_counts / (1 + jnp.sum(visit_counts, keepdims=True, axis=-1))
    return jnp.argmax(to_argmax, axis=-1).astype(jnp.int32)


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
    leaves = jax.tree_util.tree_leaves_with_path(root.embedding)
    if not leaves:
        raise ValueError("root.embedding has no array leaves; give it a [B, ...] array")
    for path, leaf in leaves:
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


class _LevelKeys(NamedTuple):
    """The selection keys of one level of a simulation, derived only when asked for.

    mctx splits every row's key once per level, ``(k_{d+1}, sel_d) = split(k_d)``, and uses
    ``sel_d`` for the tie-break noise at depth ``d``. The PUCT selector below needs the noise
    only when two scores are within its reach, so the chain is recomputed from ``k_0`` on
    those rare levels instead of being split at every level.

    Attributes:
        base: ``[B]`` the simulation's per-row keys ``k_0``.
        level: scalar int32 depth ``d`` of the nodes being selected from.
    """

    base: chex.Array
    level: chex.Array

    def selection_keys(self) -> chex.Array:
        """``[B]`` keys ``sel_d``."""
        split = jax.vmap(jax.random.split)
        chain = jax.lax.fori_loop(0, self.level, lambda _, k: split(k)[:, 0], self.base)
        return split(chain)[:, 1]


# A batched selector: (tree, node [B], keys: _LevelKeys, active [B]) -> action [B] int32.
# `active` marks the rows whose choice is used (the others have stopped descending).
Selector = Callable[[Tree, chex.Array, _LevelKeys, chex.Array], chex.Array]


def _vmapped_selector(fn: Callable[..., chex.Array], *, at_root: bool) -> Selector:
    """A batched selector from an mctx-style unbatched rule (keys derived eagerly)."""

    def select(tree, node, keys, active):
        del active
        selection_keys = keys.selection_keys()
        if at_root:
            return jax.vmap(fn)(selection_keys, tree, node)
        depth = jnp.full(node.shape, keys.level, jnp.int32)
        return jax.vmap(fn)(selection_keys, tree, node, depth)

    return select


def _keyless_selector(fn: Callable[..., chex.Array], *, at_root: bool) -> Selector:
    """A batched selector from an unbatched rule that ignores its key (Gumbel's)."""

    def select(tree, node, keys, active):
        del active
        dummy = jnp.zeros(node.shape, jnp.int32)
        if at_root:
            return jax.vmap(fn)(dummy, tree, node)
        return jax.vmap(fn)(dummy, tree, node, jnp.full(node.shape, keys.level, jnp.int32))

    return select


def _puct_selector(*, pb_c_init, pb_c_base, qtransform, use_node_masks: bool) -> Selector:
    """Batched :func:`muzero_action_selection` whose tie-break noise is drawn only if needed.

    With ``s = q̂ + policy score`` and noise ``n ∈ [0, 1e-7]``, rounding is monotone, so
    ``fl(s_best + n) >= s_best`` and ``fl(s_j + n_j) <= (s_j + 1e-7)(1 + 2^-23)``: when every
    used row's best score leads its runner-up by more than ``1e-7 + 2^-20 (|s_1| + |s_2|)``
    the noisy argmax is the noiseless one. Otherwise the whole level draws mctx's noise
    (same keys, same arithmetic) and takes the noisy argmax. The result is bitwise mctx's.
    """
    gap_ulps = 2.0**-20

    def scores_one(tree, node_index):
        visit_counts = tree.children_visits[node_index]
        node_visit = tree.node_visits[node_index]
        pb_c = pb_c_init + jnp.log((node_visit + pb_c_base + 1.0) / pb_c_base)
        prior_probs = jax.nn.softmax(tree.children_prior_logits[node_index])
        policy_score = jnp.sqrt(node_visit) * pb_c * prior_probs / (visit_counts + 1)
        value_score = qtransform(tree, node_index)
        return value_score + policy_score

    def select(tree, node, keys, active):
        batch_size, num_actions = node.shape[0], tree.num_actions
        rows = jnp.arange(batch_size)
        scores = jax.vmap(scores_one)(tree, node)
        invalid = tree.invalid_actions[rows, node] if use_node_masks else None
        masked = scores if invalid is None else jnp.where(invalid, -jnp.inf, scores)
        best = jnp.argmax(masked, axis=-1).astype(jnp.int32)
        top1 = jnp.max(masked, axis=-1)
        top2 = jnp.max(jnp.where(jnp.arange(num_actions) == best[:, None], -jnp.inf, masked),
                       axis=-1)
        magnitude = jnp.abs(top1) + jnp.where(jnp.isfinite(top2), jnp.abs(top2), 0.0)
        safe = (top1 - top2) > 1e-7 + gap_ulps * magnitude
        need_noise = jnp.any(active & ~safe)

        def noisy(_):
            uniform = jax.vmap(lambda k: jax.random.uniform(k, (num_actions,)))
            tie_break = 1e-7 * uniform(keys.selection_keys())
            return masked_argmax(scores + tie_break, invalid)

        return jax.lax.cond(need_noise, noisy, lambda _: best, None)

    return select


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


# --------------------------------------------------------------------------------------
# Policies.


def _get_logits_from_probs(probs: chex.Array) -> chex.Array:
    return jnp.log(jnp.maximum(probs, jnp.finfo(probs.dtype).tiny))


def _add_dirichlet_noise(rng_key, probs, *, dirichlet_alpha, dirichlet_fraction):
    """``(1 - ε) p + ε Dir(α)`` per row (AlphaZero's root exploration noise)."""
    batch_size, num_actions = probs.shape
    noise = jax.random.dirichlet(
        rng_key, alpha=jnp.full([num_actions], fill_value=dirichlet_alpha), shape=(batch_size,))
    return (1 - dirichlet_fraction) * probs + dirichlet_fraction * noise


def _apply_temperature(logits: chex.Array, temperature: chex.Numeric) -> chex.Array:
    """``logits / temperature`` (max-shifted; temperature 0 becomes argmax)."""
    logits = logits - jnp.max(logits, keepdims=True, axis=-1)
    return logits / jnp.maximum(jnp.finfo(logits.dtype).tiny, temperature)


def muzero_policy(
    params: Params,
    rng_key: chex.PRNGKey,
    root: RootFnOutput,
    recurrent_fn: RecurrentFn,
    num_simulations: int,
    invalid_actions: chex.Array | None = None,
    max_depth: int | None = None,
    loop_fn: LoopFn = jax.lax.fori_loop,
    *,
    qtransform: QTransform = qtransforms.qtransform_by_parent_and_siblings,
    dirichlet_fraction: chex.Numeric = 0.25,
    dirichlet_alpha: chex.Numeric = 0.3,
    pb_c_init: chex.Numeric = 1.25,
    pb_c_base: chex.Numeric = 19652,
    temperature: chex.Numeric = 1.0,
    initial_tree: Tree | None = None,
    num_nodes: int | None = None,
) -> PolicyOutput:
    """MuZero search: PUCT with Dirichlet noise at the root (mctx's ``muzero_policy``).

    Root priors become ``(1 - ε) softmax(logits) + ε Dir(α)`` (Silver et al. 2018), invalid
    root actions get the dtype's minimum logit; each simulation descends by
    :func:`muzero_action_selection`; the action is sampled from
    ``visit_counts ** (1 / temperature)``. Key usage is mctx's: ``rng_key`` splits into
    (action, Dirichlet, search) keys.

    Args:
        params: forwarded to ``recurrent_fn``.
        rng_key: key, consumed.
        root: ``RootFnOutput`` (``[B, A]``, ``[B]``, ``[B, ...]``).
        recurrent_fn: ``(params, key, action [B], embedding) -> (RecurrentFnOutput,
            embedding)``; may add ``invalid_actions`` / ``terminal`` (rljax).
        num_simulations: number of simulations (>= 1).
        invalid_actions: ``[B, A]`` root mask, nonzero = invalid.
        max_depth: deepest leaf in edges (>= 1; default ``num_simulations``).
        loop_fn: the loop over simulations.
        qtransform: Q-value transformation (default min-max over parent and siblings).
        dirichlet_fraction: ``ε``.
        dirichlet_alpha: ``α``.
        pb_c_init: PUCT ``c1``.
        pb_c_base: PUCT ``c2``.
        temperature: acting temperature (0 = most visited).
        initial_tree: rljax extension: continue from this ``[B, N, ...]`` tree, typically
            ``get_subtree(previous.search_tree, action)``. Its capacity ``N`` is kept; its
            nodes at index ``>= N - num_simulations`` are dropped to make room, so pass a
            first tree with spare capacity (``num_nodes``) to reuse anything. The root's
            priors (fresh noise), raw value and embedding come from ``root``; visit counts
            and values of the kept nodes carry over, so the root's children visits sum to
            ``num_simulations`` plus the reused visits.
        num_nodes: rljax extension: node capacity of a fresh tree (default
            ``num_simulations + 1``).

    Returns:
        ``PolicyOutput(action [B], action_weights [B, A] = visit probabilities,
        search_tree)``.
    """
    _check_budget(num_simulations, max_depth)
    _check_root(root, invalid_actions)
    rng_key, dirichlet_rng_key, search_rng_key = jax.random.split(rng_key, 3)
    noisy_logits = _get_logits_from_probs(
        _add_dirichlet_noise(
            dirichlet_rng_key,
            jax.nn.softmax(root.prior_logits),
            dirichlet_fraction=dirichlet_fraction,
            dirichlet_alpha=dirichlet_alpha,
        )
    )
    root = root.replace(prior_logits=_mask_invalid_actions(noisy_logits, invalid_actions))
    interior_masks, may_terminate = _probe_recurrent_fn(
        params, search_rng_key, recurrent_fn, root)
    puct = functools.partial(
        _puct_selector, pb_c_init=pb_c_init, pb_c_base=pb_c_base, qtransform=qtransform)
    search_tree = _search(
        params,
        search_rng_key,
        root=root,
        recurrent_fn=recurrent_fn,
        root_select=puct(use_node_masks=invalid_actions is not None),
        interior_select=puct(use_node_masks=interior_masks),
        num_simulations=num_simulations,
        max_depth=max_depth,
        invalid_actions=invalid_actions,
        extra_data=None,
        loop_fn=loop_fn,
        initial_tree=initial_tree,
        num_nodes=num_nodes,
        may_terminate=may_terminate or initial_tree is not None,
    )
    action_weights = search_tree.summary().visit_probs
    action_logits = _apply_temperature(_get_logits_from_probs(action_weights), temperature)
    action = jax.random.categorical(rng_key, action_logits)
    return PolicyOutput(action=action, action_weights=action_weights, search_tree=search_tree)


def gumbel_muzero_policy(
    params: Params,
    rng_key: chex.PRNGKey,
    root: RootFnOutput,
    recurrent_fn: RecurrentFn,
    num_simulations: int,
    invalid_actions: chex.Array | None = None,
    max_depth: int | None = None,
    loop_fn: LoopFn = jax.lax.fori_loop,
    *,
    qtransform: QTransform = qtransforms.qtransform_completed_by_mix_value,
    max_num_considered_actions: int = 16,
    gumbel_scale: chex.Numeric = 1.0,
) -> PolicyOutput:
    """Full Gumbel MuZero (Danihelka et al. 2022; mctx's ``gumbel_muzero_policy``).

    Sample ``g ~ gumbel_scale * Gumbel(0, 1)^A``; at the root, Sequential Halving over the
    ``min(m, #valid)`` actions with the largest ``g + logits`` (see
    :func:`gumbel_muzero_root_action_selection`); below, the deterministic rule of
    :func:`gumbel_muzero_interior_action_selection`. The action is the most-visited
    considered action with the best ``g + logits + σ(q̂)``; the weights are
    ``softmax(logits + σ(completed q̂))``, the improved policy to train towards.

    Args:
        params: forwarded to ``recurrent_fn``.
        rng_key: key, consumed (split into search and Gumbel keys, as mctx).
        root: ``RootFnOutput``.
        recurrent_fn: as for :func:`muzero_policy`.
        num_simulations: number of simulations (>= 1).
        invalid_actions: ``[B, A]`` root mask, nonzero = invalid.
        max_depth: deepest leaf in edges (default ``num_simulations``).
        loop_fn: the loop over simulations.
        qtransform: completed-Q transformation.
        max_num_considered_actions: ``m``, actions considered at the root.
        gumbel_scale: Gumbel noise scale (0 for deterministic evaluation).

    Returns:
        ``PolicyOutput(action [B], action_weights [B, A], search_tree)`` with
        ``search_tree.extra_data = GumbelMuZeroExtraData(root_gumbel)``.
    """
    _check_budget(num_simulations, max_depth)
    _check_root(root, invalid_actions)
    if not isinstance(max_num_considered_actions, int) or max_num_considered_actions < 1:
        raise ValueError(f"max_num_considered_actions must be an int >= 1, got "
                         f"{max_num_considered_actions!r}")
    root = root.replace(prior_logits=_mask_invalid_actions(root.prior_logits, invalid_actions))
    rng_key, gumbel_rng = jax.random.split(rng_key)
    gumbel = gumbel_scale * jax.random.gumbel(
        gumbel_rng, shape=root.prior_logits.shape, dtype=root.prior_logits.dtype)
    interior_masks, may_terminate = _probe_recurrent_fn(params, rng_key, recurrent_fn, root)
    interior = (gumbel_muzero_interior_action_selection if interior_masks
                else _gumbel_interior_unmasked)
    search_tree = _search(
        params,
        rng_key,
        root=root,
        recurrent_fn=recurrent_fn,
        root_select=_keyless_selector(functools.partial(
            gumbel_muzero_root_action_selection,
            num_simulations=num_simulations,
            max_num_considered_actions=max_num_considered_actions,
            qtransform=qtransform,
        ), at_root=True),
        interior_select=_keyless_selector(
            functools.partial(interior, qtransform=qtransform), at_root=False),
        num_simulations=num_simulations,
        max_depth=max_depth,
        invalid_actions=invalid_actions,
        extra_data=GumbelMuZeroExtraData(root_gumbel=gumbel),
        loop_fn=loop_fn,
        initial_tree=None,
        num_nodes=None,
        may_terminate=may_terminate,
    )
    summary = search_tree.summary()
    considered_visit = jnp.max(summary.visit_counts, axis=-1, keepdims=True)
    completed_qvalues = jax.vmap(qtransform, in_axes=[0, None])(search_tree, Tree.ROOT_INDEX)
    to_argmax = seq_halving.score_considered(
        considered_visit, gumbel, root.prior_logits, completed_qvalues, summary.visit_counts)
    action = masked_argmax(to_argmax, search_tree.root_invalid_actions)
    completed_search_logits = _mask_invalid_actions(
        root.prior_logits + completed_qvalues, invalid_actions)
    action_weights = jax.nn.softmax(completed_search_logits)
    return PolicyOutput(action=action, action_weights=action_weights, search_tree=search_tree)
