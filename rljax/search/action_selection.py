"""Action selection at a node: PUCT (MuZero) and Gumbel MuZero's root and interior rules.

The public rules are mctx's: each is written for one *unbatched* tree and a scalar node
index, and the search ``jax.vmap``s it over the batch. Below them are the batched selectors
the search loop calls (``Selector``): one call per level for all ``B`` rows, including a
PUCT selector that draws mctx's tie-break noise only on the levels where it can change the
argmax.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
from flax import struct

from rljax.search import qtransforms, seq_halving
from rljax.search.base import QTransform
from rljax.search.tree import Tree


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
    num_valid = jnp.sum(tree.root_invalid_actions == 0, axis=-1).astype(jnp.int32)
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
# Batched selectors (what the search loop calls).


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
