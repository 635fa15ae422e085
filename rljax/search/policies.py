"""MuZero and Gumbel MuZero policies, call-compatible with mctx 0.0.71's.

``muzero_policy`` (PUCT with Dirichlet root noise) and ``gumbel_muzero_policy`` (Gumbel
MuZero, Sequential Halving at the root) take the same arguments, defaults and
``RootFnOutput`` / ``RecurrentFnOutput`` structures as mctx 0.0.71's, and return a
``PolicyOutput(action, action_weights, search_tree)`` whose tree has mctx's fields, so an
mctx user switches with one import::

    import rljax.search as mctx   # was: import mctx

With Dirichlet noise off (PUCT) or ``gumbel_scale=0`` the visit counts equal mctx's exactly:
selection scores, tie-break noise and key usage are the same.

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

import chex
import jax
import jax.numpy as jnp

from rljax.search import qtransforms, seq_halving
from rljax.search.action_selection import (
    GumbelMuZeroExtraData,
    _gumbel_interior_unmasked,
    _keyless_selector,
    _puct_selector,
    gumbel_muzero_interior_action_selection,
    gumbel_muzero_root_action_selection,
    masked_argmax,
)
from rljax.search.base import LoopFn, Params, PolicyOutput, QTransform, RecurrentFn, RootFnOutput
from rljax.search.loop import (
    _check_budget,
    _check_root,
    _mask_invalid_actions,
    _probe_recurrent_fn,
    _search,
)
from rljax.search.tree import Tree


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
