"""Stochastic MuZero: search with chance nodes (mctx's ``stochastic_muzero_policy``).

Stochastic MuZero (Antonoglou et al. 2022, "Planning in Stochastic Environments with a
Learned Model", ICLR) splits every environment step ``s --a--> s'`` in two:

* a *decision node* holds a state ``s``; an action ``a`` leads to an *afterstate* ``sa``
  (the world after the agent acted, before the environment answered). The decision model
  gives the afterstate's value ``Q(s, a) = v(sa)`` and the prior ``σ(c | sa)`` over ``C``
  chance outcomes; the edge has reward 0 and discount 1;
* a *chance node* holds an afterstate ``sa``; a chance outcome ``c`` leads to the next state
  ``s'``. The chance model gives ``s'``'s action prior, value, and the edge's reward and
  discount.

Decision and chance nodes alternate along every path. The search is rljax's generic
:func:`rljax.search.search` over ``A + C`` joint "actions": joint action ``j < A`` is
action ``j`` (valid only at decision nodes), ``j >= A`` is chance outcome ``j - A`` (valid
only at chance nodes); each node's embedding is a :class:`StochasticRecurrentState` that
says which kind it is. Selection at a node::

    decision node:  a* = argmax_a  q̂(s, a) + π(a|s) sqrt(N(s)) / (1 + n(s, a)) c(s)  (PUCT)
    chance node:    c* = argmax_c  σ(c|sa) / (1 + n(sa, c))

(``c(s) = c1 + log((N(s) + c2 + 1) / c2)``; the chance rule is mctx's: a deterministic,
quasi-random way to visit outcomes in proportion to their prior). Backups run through both
kinds of node unchanged: ``G <- r + discount * G`` with ``r = 0``, ``discount = 1`` on
decision edges.

Same arguments, defaults, key usage and results as mctx 0.0.71 (visit counts, values and
the sampled action equal mctx's on the same problem and key). Two things differ and neither
changes a search result:

* the root's afterstate slot is zeros of the afterstate's shape (mctx fills it by an extra
  ``decision_recurrent_fn`` call on action 0);
* in ``search_tree.embeddings`` a node's unused half is its parent's (a chance node's
  ``state_embedding`` is the state it was reached from, a decision node's
  ``afterstate_embedding`` the afterstate it was reached from), where mctx stores the other
  model's output on a dummy input. The models are always called with in-range inputs
  (action in ``[0, A)``, outcome in ``[0, C)``) on the rows whose output is discarded.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp
from flax import struct

from rljax.search.action_selection import muzero_action_selection
from rljax.search.base import (
    LoopFn,
    Params,
    PolicyOutput,
    QTransform,
    RecurrentFnOutput,
    RootFnOutput,
)
from rljax.search.loop import _mask_invalid_actions, search
from rljax.search.policies import (
    _add_dirichlet_noise,
    _apply_temperature,
    _get_logits_from_probs,
)
from rljax.search.qtransforms import qtransform_by_parent_and_siblings
from rljax.search.tree import Tree


@struct.dataclass
class DecisionRecurrentFnOutput:
    """What the decision model returns for ``(state s, action a)`` (mctx's fields).

    Attributes:
        chance_logits: ``[B, C]`` logits of the ``C`` chance outcomes at the afterstate
            ``sa``.
        afterstate_value: ``[B]`` value of the afterstate, ``v(sa) = Q(s, a)``.
    """

    chance_logits: chex.Array
    afterstate_value: chex.Array


@struct.dataclass
class ChanceRecurrentFnOutput:
    """What the chance model returns for ``(afterstate sa, outcome c)`` (mctx's fields).

    Attributes:
        action_logits: ``[B, A]`` action logits at the next state ``s'``.
        value: ``[B]`` value of ``s'``.
        reward: ``[B]`` reward of the transition ``sa --c--> s'``.
        discount: ``[B]`` discount between ``reward`` and ``value`` (0 at episode ends,
            -1 for two-player zero-sum games).
    """

    action_logits: chex.Array
    value: chex.Array
    reward: chex.Array
    discount: chex.Array


@struct.dataclass
class StochasticRecurrentState:
    """A node's embedding in a Stochastic MuZero tree (mctx's fields).

    Attributes:
        state_embedding: pytree of ``[B, ...]``, the state ``s`` (meaningful at decision
            nodes; at a chance node, the state it was reached from).
        afterstate_embedding: pytree of ``[B, ...]``, the afterstate ``sa`` (meaningful at
            chance nodes; at a decision node, the afterstate it was reached from, zeros at
            the root).
        is_decision_node: ``[B]`` bool, True at decision nodes.
    """

    state_embedding: Any
    afterstate_embedding: Any
    is_decision_node: chex.Array


DecisionRecurrentFn = Callable[
    [Params, chex.PRNGKey, chex.Array, Any], tuple[DecisionRecurrentFnOutput, Any]]
"""``decision_recurrent_fn(params, key, action [B], state_embedding) ->
(DecisionRecurrentFnOutput, afterstate_embedding)``."""

ChanceRecurrentFn = Callable[
    [Params, chex.PRNGKey, chex.Array, Any], tuple[ChanceRecurrentFnOutput, Any]]
"""``chance_recurrent_fn(params, key, chance_outcome [B], afterstate_embedding) ->
(ChanceRecurrentFnOutput, state_embedding)``."""


# --------------------------------------------------------------------------------------
# Small helpers.


def _where_rows(condition: chex.Array, if_true: Any, if_false: Any) -> Any:
    """Per-row ``where`` over two pytrees of ``[B, ...]`` leaves, ``condition [B]``."""
    def pick(a, b):
        return jnp.where(condition.reshape(condition.shape + (1,) * (jnp.ndim(a) - 1)), a, b)
    return jax.tree.map(pick, if_true, if_false)


def _slice_actions(tree: Tree, part: slice) -> Tree:
    """The tree restricted to joint actions ``part`` along its last (action) axis."""
    return tree.replace(
        children_index=tree.children_index[..., part],
        children_prior_logits=tree.children_prior_logits[..., part],
        children_visits=tree.children_visits[..., part],
        children_rewards=tree.children_rewards[..., part],
        children_discounts=tree.children_discounts[..., part],
        children_values=tree.children_values[..., part],
        root_invalid_actions=tree.root_invalid_actions[..., part],
        invalid_actions=tree.invalid_actions[..., part],
    )


# --------------------------------------------------------------------------------------
# Checks (trace time, static shapes).


def _shape_error(name: str, got, want) -> ValueError:
    return ValueError(f"{name} has shape {tuple(got)}, expected {tuple(want)}")


def _check_leaves(name: str, tree: Any, batch_size: int) -> None:
    leaves = jax.tree_util.tree_leaves_with_path(tree)
    if not leaves:
        raise ValueError(f"{name} has no array leaves; give it a [B, ...] array")
    for path, leaf in leaves:
        if jnp.ndim(leaf) < 1 or jnp.shape(leaf)[0] != batch_size:
            raise ValueError(f"{name}{jax.tree_util.keystr(path)} has shape "
                             f"{jnp.shape(leaf)}, expected leading batch axis B = {batch_size}")


def _check_fields(name: str, output: Any, expected: dict[str, tuple[int, ...]]) -> None:
    for field, shape in expected.items():
        if not hasattr(output, field):
            raise ValueError(f"{name} has no field {field!r} (fields: {', '.join(expected)})")
        got = jnp.shape(getattr(output, field))
        if got != shape:
            raise _shape_error(f"{name}.{field}", got, shape)


def _probe_models(params, rng_key, root: RootFnOutput, decision_recurrent_fn,
                  chance_recurrent_fn, num_simulations, max_depth, invalid_actions):
    """Validate every input's shape without running anything.

    Returns:
        ``(B, A, C, afterstate_shapes)``, the last a pytree of ``ShapeDtypeStruct``.
    """
    if not isinstance(num_simulations, int) or num_simulations < 1:
        raise ValueError(f"num_simulations must be an int >= 1, got {num_simulations!r}")
    if max_depth is not None and (not isinstance(max_depth, int) or max_depth < 1):
        raise ValueError(f"max_depth must be None or an int >= 1, got {max_depth!r}")
    logits_shape = jnp.shape(root.prior_logits)
    if len(logits_shape) != 2 or logits_shape[1] < 1:
        raise ValueError(f"root.prior_logits must be [B, num_actions], got shape "
                         f"{logits_shape}")
    batch_size, num_actions = logits_shape
    if jnp.shape(root.value) != (batch_size,):
        raise _shape_error("root.value", jnp.shape(root.value), (batch_size,))
    _check_leaves("root.embedding", root.embedding, batch_size)
    if invalid_actions is not None and jnp.shape(invalid_actions) != logits_shape:
        raise _shape_error("invalid_actions", jnp.shape(invalid_actions), logits_shape)

    action = jnp.zeros((batch_size,), jnp.int32)
    decision, afterstate = jax.eval_shape(
        lambda: decision_recurrent_fn(params, rng_key, action, root.embedding))
    if not hasattr(decision, "chance_logits"):
        raise ValueError("decision_recurrent_fn's output has no field 'chance_logits' (fields: "
                         "chance_logits, afterstate_value)")
    chance_shape = jnp.shape(decision.chance_logits)
    if len(chance_shape) != 2 or chance_shape[0] != batch_size or chance_shape[1] < 1:
        raise ValueError(f"decision_recurrent_fn's chance_logits has shape {chance_shape}, "
                         f"expected [B, num_chance_outcomes] with B = {batch_size}")
    num_outcomes = chance_shape[1]
    _check_fields("decision_recurrent_fn's output", decision,
                  {"chance_logits": (batch_size, num_outcomes),
                   "afterstate_value": (batch_size,)})
    _check_leaves("decision_recurrent_fn's afterstate embedding", afterstate, batch_size)

    chance, state = jax.eval_shape(
        lambda after: chance_recurrent_fn(params, rng_key, action, after), afterstate)
    _check_fields("chance_recurrent_fn's output", chance,
                  {"action_logits": (batch_size, num_actions), "value": (batch_size,),
                   "reward": (batch_size,), "discount": (batch_size,)})
    want = jax.tree.structure(root.embedding)
    if jax.tree.structure(state) != want:
        raise ValueError(f"chance_recurrent_fn returned a state embedding with structure "
                         f"{jax.tree.structure(state)}, expected root.embedding's {want}")
    for (path, new), old in zip(jax.tree_util.tree_leaves_with_path(state),
                                jax.tree.leaves(root.embedding), strict=True):
        if jnp.shape(new) != jnp.shape(old):
            raise _shape_error(f"chance_recurrent_fn's state embedding"
                               f"{jax.tree_util.keystr(path)}", jnp.shape(new), jnp.shape(old))
    return batch_size, num_actions, num_outcomes, afterstate


# --------------------------------------------------------------------------------------
# The joint model and the selection rule over A + C joint actions.


def _joint_recurrent_fn(decision_recurrent_fn: DecisionRecurrentFn,
                        chance_recurrent_fn: ChanceRecurrentFn,
                        num_actions: int, num_outcomes: int):
    """One ``recurrent_fn`` over joint actions ``[0, A + C)`` for :func:`search`.

    Both models run on every row (the batch mixes node kinds); each row keeps the output
    of the model its node's kind calls for. From a decision node: prior ``[-inf^A,
    chance_logits]``, value ``afterstate_value``, reward 0, discount 1. From a chance node:
    prior ``[action_logits, -inf^C]``, the chance model's value, reward and discount.
    """

    def recurrent_fn(params, rng_key, joint_action, state: StochasticRecurrentState):
        at_decision = state.is_decision_node
        action = jnp.clip(joint_action, 0, num_actions - 1)
        outcome = jnp.clip(joint_action - num_actions, 0, num_outcomes - 1)
        decision, afterstate = decision_recurrent_fn(
            params, rng_key, action, state.state_embedding)
        chance, next_state = chance_recurrent_fn(
            params, rng_key, outcome, state.afterstate_embedding)
        batch_size = at_decision.shape[0]

        def pad(logits, width, left):
            fill = jnp.full((batch_size, width), -jnp.inf, logits.dtype)
            return jnp.concatenate([fill, logits] if left else [logits, fill], axis=-1)

        afterstate_value = decision.afterstate_value
        output = RecurrentFnOutput(
            reward=jnp.where(at_decision, jnp.zeros_like(afterstate_value), chance.reward),
            discount=jnp.where(at_decision, jnp.ones_like(afterstate_value), chance.discount),
            prior_logits=jnp.where(at_decision[:, None],
                                   pad(decision.chance_logits, num_actions, left=True),
                                   pad(chance.action_logits, num_outcomes, left=False)),
            value=jnp.where(at_decision, afterstate_value, chance.value),
        )
        new_state = StochasticRecurrentState(
            state_embedding=_where_rows(at_decision, state.state_embedding, next_state),
            afterstate_embedding=_where_rows(at_decision, afterstate,
                                             state.afterstate_embedding),
            is_decision_node=jnp.logical_not(at_decision),
        )
        return output, new_state

    return recurrent_fn


def _chance_outcome_selection(tree: Tree, node_index: chex.Numeric) -> chex.Array:
    """``argmax_c softmax(chance_logits)(c) / (1 + n(sa, c))`` at one node of a tree
    restricted to the chance part (unbatched; scalar int32 outcome)."""
    probs = jax.nn.softmax(tree.children_prior_logits[node_index])
    visits = tree.children_visits[node_index]
    return jnp.argmax(probs / (visits + 1), axis=-1).astype(jnp.int32)


def _joint_selection(rng_key, tree: Tree, node_index, depth, *, num_actions: int,
                     decision_selection: Callable[..., chex.Array]) -> chex.Array:
    """Unbatched selection over joint actions: PUCT at decision nodes, prior / (visits + 1)
    at chance nodes (the outcome is returned shifted by ``A``)."""
    decision = decision_selection(
        rng_key, _slice_actions(tree, slice(None, num_actions)), node_index, depth)
    outcome = _chance_outcome_selection(_slice_actions(tree, slice(num_actions, None)),
                                        node_index)
    return jnp.where(tree.embeddings.is_decision_node[node_index], decision,
                     outcome + num_actions).astype(jnp.int32)


# --------------------------------------------------------------------------------------
# The policy.


def stochastic_muzero_policy(
    params: Params,
    rng_key: chex.PRNGKey,
    root: RootFnOutput,
    decision_recurrent_fn: DecisionRecurrentFn,
    chance_recurrent_fn: ChanceRecurrentFn,
    num_simulations: int,
    invalid_actions: chex.Array | None = None,
    max_depth: int | None = None,
    loop_fn: LoopFn = jax.lax.fori_loop,
    *,
    qtransform: QTransform = qtransform_by_parent_and_siblings,
    dirichlet_fraction: chex.Numeric = 0.25,
    dirichlet_alpha: chex.Numeric = 0.3,
    pb_c_init: chex.Numeric = 1.25,
    pb_c_base: chex.Numeric = 19652,
    temperature: chex.Numeric = 1.0,
) -> PolicyOutput:
    """Stochastic MuZero search (Antonoglou et al. 2022; mctx's ``stochastic_muzero_policy``).

    The root (a decision node) gets MuZero's exploration noise,
    ``π_root = (1 - ε) softmax(prior_logits) + ε Dir(α)``, with invalid actions at the
    dtype's minimum logit. Each simulation descends from the root, alternating

    * decision nodes: PUCT, ``argmax_a q̂(s, a) + π(a|s) sqrt(N(s)) c(s) / (1 + n(s, a))``
      with ``c(s) = c1 + log((N(s) + c2 + 1) / c2)`` and ``q̂ = qtransform`` over the
      node's actions (:func:`rljax.search.muzero_action_selection`, with its ``1e-7``
      uniform tie-break);
    * chance nodes: ``argmax_c σ(c|sa) / (1 + n(sa, c))``, ``σ = softmax(chance_logits)``;

    until it leaves the tree (or reaches ``max_depth`` edges, chance edges included), asks
    ``decision_recurrent_fn`` (from a decision node) or ``chance_recurrent_fn`` (from a
    chance node) for the new node, and backs ``G <- r + discount * G`` up the path (decision
    edges: ``r = 0``, ``discount = 1``). The action is sampled from
    ``visit_counts ** (1 / temperature)`` at the root.

    Keys are used as mctx uses them: ``rng_key`` splits into (action, Dirichlet, search)
    keys, and both models receive the same expansion key.

    Args:
        params: forwarded to both models.
        rng_key: key, consumed.
        root: ``RootFnOutput`` with ``prior_logits [B, A]``, ``value [B]`` and the state
            ``embedding`` (pytree of ``[B, ...]``).
        decision_recurrent_fn: ``(params, key, action [B] int32, state_embedding) ->
            (DecisionRecurrentFnOutput(chance_logits [B, C], afterstate_value [B]),
            afterstate_embedding [B, ...])``.
        chance_recurrent_fn: ``(params, key, chance_outcome [B] int32,
            afterstate_embedding) -> (ChanceRecurrentFnOutput(action_logits [B, A],
            value [B], reward [B], discount [B]), state_embedding)``; the state embedding
            has the root embedding's structure and shapes. mctx's output classes work too.
        num_simulations: number of simulations (an int >= 1); each adds one node, decision
            or chance, so a budget of ``2 k`` reaches about ``k`` environment steps deep.
        invalid_actions: ``[B, A]`` root mask, nonzero = invalid.
        max_depth: deepest leaf in edges from the root, chance edges included (default
            ``num_simulations``).
        loop_fn: the loop over simulations, ``loop_fn(0, num_simulations, body, init)``.
        qtransform: Q-value transformation at decision nodes (default min-max over parent
            and siblings).
        dirichlet_fraction: ``ε``.
        dirichlet_alpha: ``α``.
        pb_c_init: PUCT ``c1``.
        pb_c_base: PUCT ``c2``.
        temperature: acting temperature (0 = most visited).

    Returns:
        ``PolicyOutput(action [B] int32, action_weights [B, A] = root visit probabilities,
        search_tree)``. The tree (``[B, N, ...]``, ``N = num_simulations + 1``) holds
        decision and chance nodes; its per-action fields are cut to the ``A`` actions, as
        mctx's (a chance node's outcome edges are dropped; its ``node_visits`` and
        ``node_values`` stay), and its embeddings are :class:`StochasticRecurrentState`.

    Raises:
        ValueError: a shape that does not fit (root fields, ``invalid_actions``, a model's
            output fields, ``C`` inconsistent with ``B``, a state embedding unlike the
            root's), or a bad ``num_simulations`` / ``max_depth``.
    """
    batch_size, num_actions, num_outcomes, afterstate_shapes = _probe_models(
        params, rng_key, root, decision_recurrent_fn, chance_recurrent_fn, num_simulations,
        max_depth, invalid_actions)
    rng_key, dirichlet_rng_key, search_rng_key = jax.random.split(rng_key, 3)
    noisy_logits = _get_logits_from_probs(_add_dirichlet_noise(
        dirichlet_rng_key, jax.nn.softmax(root.prior_logits),
        dirichlet_alpha=dirichlet_alpha, dirichlet_fraction=dirichlet_fraction))
    root_logits = _mask_invalid_actions(noisy_logits, invalid_actions)
    joint_root = RootFnOutput(
        prior_logits=jnp.concatenate(
            [root_logits, jnp.full((batch_size, num_outcomes), -jnp.inf, root_logits.dtype)],
            axis=-1),
        value=root.value,
        embedding=StochasticRecurrentState(
            state_embedding=root.embedding,
            afterstate_embedding=jax.tree.map(
                lambda s: jnp.zeros(s.shape, s.dtype), afterstate_shapes),
            is_decision_node=jnp.ones((batch_size,), bool),
        ),
    )
    joint_invalid = None
    if invalid_actions is not None:
        joint_invalid = jnp.concatenate(
            [jnp.asarray(invalid_actions) != 0, jnp.zeros((batch_size, num_outcomes), bool)],
            axis=-1)
    select = functools.partial(
        _joint_selection, num_actions=num_actions,
        decision_selection=functools.partial(
            muzero_action_selection, pb_c_init=pb_c_init, pb_c_base=pb_c_base,
            qtransform=qtransform))
    tree = search(
        params,
        search_rng_key,
        root=joint_root,
        recurrent_fn=_joint_recurrent_fn(decision_recurrent_fn, chance_recurrent_fn,
                                         num_actions, num_outcomes),
        root_action_selection_fn=lambda key, tree, node: select(key, tree, node, 0),
        interior_action_selection_fn=select,
        num_simulations=num_simulations,
        max_depth=max_depth,
        invalid_actions=joint_invalid,
        loop_fn=loop_fn,
    )
    tree = _slice_actions(tree, slice(None, num_actions))
    action_weights = tree.summary().visit_probs
    action_logits = _apply_temperature(_get_logits_from_probs(action_weights), temperature)
    action = jax.random.categorical(rng_key, action_logits).astype(jnp.int32)
    return PolicyOutput(action=action, action_weights=action_weights, search_tree=tree)
