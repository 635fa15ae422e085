"""Monotonic transformations of Q-values, with mctx's names, signatures and defaults.

Each takes an *unbatched* tree (the search ``jax.vmap``s it over the batch) and a scalar
node index, and returns ``[A]`` transformed Q-values of that node's actions, so an mctx
``QTransform`` can be passed to rljax's policies unchanged and vice versa.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from rljax.search.tree import Tree


def qtransform_by_min_max(
    tree: Tree,
    node_index: chex.Numeric,
    *,
    min_value: chex.Numeric,
    max_value: chex.Numeric,
) -> chex.Array:
    """Q-values rescaled by known bounds: ``(q - min_value) / (max_value - min_value)``.

    Unvisited actions get 0 (their Q-value is taken as ``min_value``).

    Args:
        tree: unbatched tree (``[N, ...]`` fields).
        node_index: scalar index of the node whose actions are scored.
        min_value: the smallest possible Q-value.
        max_value: the largest possible Q-value.

    Returns:
        ``[A]`` rescaled Q-values.
    """
    chex.assert_shape(node_index, ())
    qvalues = tree.qvalues(node_index)
    visit_counts = tree.children_visits[node_index]
    value_score = jnp.where(visit_counts > 0, qvalues, min_value)
    return (value_score - min_value) / (max_value - min_value)


def qtransform_by_parent_and_siblings(
    tree: Tree,
    node_index: chex.Numeric,
    *,
    epsilon: chex.Numeric = 1e-8,
) -> chex.Array:
    """Q-values min-max normalised over the node's value and its visited actions' Q-values.

    With ``lo = min(v(s), min_{a visited} q(s, a))`` and ``hi`` the matching max,
    ``q̂(s, a) = (q(s, a) - lo) / max(hi - lo, epsilon)`` for visited actions and 0 for the
    rest (MuZero, Schrittwieser et al. 2020, Appendix B; mctx's default for PUCT).

    Args:
        tree: unbatched tree.
        node_index: scalar node index.
        epsilon: the smallest denominator.

    Returns:
        ``[A]`` Q-values in ``[0, 1]``.
    """
    chex.assert_shape(node_index, ())
    qvalues = tree.qvalues(node_index)
    visit_counts = tree.children_visits[node_index]
    node_value = tree.node_values[node_index]
    visited = visit_counts > 0
    safe_qvalues = jnp.where(visited, qvalues, node_value)
    lo = jnp.minimum(node_value, jnp.min(safe_qvalues, axis=-1))
    hi = jnp.maximum(node_value, jnp.max(safe_qvalues, axis=-1))
    completed_by_lo = jnp.where(visited, qvalues, lo)
    return (completed_by_lo - lo) / jnp.maximum(hi - lo, epsilon)


def qtransform_completed_by_mix_value(
    tree: Tree,
    node_index: chex.Numeric,
    *,
    value_scale: chex.Numeric = 0.1,
    maxvisit_init: chex.Numeric = 50.0,
    rescale_values: bool = True,
    use_mixed_value: bool = True,
    epsilon: chex.Numeric = 1e-8,
) -> chex.Array:
    """Completed Q-values, scaled by ``(maxvisit_init + max_a n(s, a)) * value_scale``.

    Unvisited actions get the mixed value (Danihelka et al. 2022, "Policy improvement by
    planning with Gumbel", Appendix D)::

        v_mix = (v̂(s) + N(s) * Σ_{a visited} π(a) q(s, a) / Σ_{a visited} π(a)) / (N(s) + 1)

    with ``N(s) = Σ_a n(s, a)`` and ``π = softmax(prior_logits)``; the completed values are
    optionally min-max rescaled to ``[0, 1]``, then scaled (σ in the paper).

    Args:
        tree: unbatched tree.
        node_index: scalar node index.
        value_scale: ``c_scale``.
        maxvisit_init: ``c_visit``.
        rescale_values: min-max rescale the completed Q-values first.
        use_mixed_value: complete with ``v_mix`` (else with the raw network value).
        epsilon: the smallest rescaling denominator.

    Returns:
        ``[A]`` completed, scaled Q-values.
    """
    chex.assert_shape(node_index, ())
    qvalues = tree.qvalues(node_index)
    visit_counts = tree.children_visits[node_index]
    raw_value = tree.raw_values[node_index]
    prior_probs = jax.nn.softmax(tree.children_prior_logits[node_index])
    if use_mixed_value:
        value = _compute_mixed_value(raw_value, qvalues, visit_counts, prior_probs)
    else:
        value = raw_value
    completed = jnp.where(visit_counts > 0, qvalues, value)
    if rescale_values:
        lo = jnp.min(completed, axis=-1, keepdims=True)
        hi = jnp.max(completed, axis=-1, keepdims=True)
        completed = (completed - lo) / jnp.maximum(hi - lo, epsilon)
    visit_scale = maxvisit_init + jnp.max(visit_counts, axis=-1)
    return visit_scale * value_scale * completed


def _compute_mixed_value(raw_value, qvalues, visit_counts, prior_probs):
    """``v_mix`` above; priors floored at the dtype's ``tiny`` so it is never NaN (mctx's name:
    its own tests call it)."""
    total_visits = jnp.sum(visit_counts, axis=-1)
    prior_probs = jnp.maximum(jnp.finfo(prior_probs.dtype).tiny, prior_probs)
    visited = visit_counts > 0
    visited_mass = jnp.sum(jnp.where(visited, prior_probs, 0.0), axis=-1)
    weighted_q = jnp.sum(
        jnp.where(visited, prior_probs * qvalues / jnp.where(visited, visited_mass, 1.0), 0.0),
        axis=-1,
    )
    return (raw_value + total_visits * weighted_q) / (total_visits + 1)
