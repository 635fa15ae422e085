"""rljax's stochastic_muzero_policy against mctx 0.0.71's, on the same problems and keys.

The problem is a random table model with continuous priors, values and rewards (so no two
selection scores tie within the 1e-7 tie-break noise): a state and an action give an
afterstate (its value carries noise drawn from the expansion key, so the two libraries
must hand the models the same keys), an afterstate and a chance outcome give the next
state, its reward, discount and action prior.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mctx  # a dev dependency: a missing one fails, never skips
import numpy as np
import pytest

import rljax.search as rs

BATCH, NUM_ACTIONS, NUM_OUTCOMES, NUM_STATES = 3, 4, 3, 20


def table_model(seed: int):
    """``make(decision_output_cls, chance_output_cls, root_cls) -> (root, decision_fn,
    chance_fn)`` for one random table problem."""
    keys = jax.random.split(jax.random.key(seed), 8)
    num_after = NUM_STATES * NUM_ACTIONS
    chance_logits = jax.random.normal(keys[0], (num_after, NUM_OUTCOMES))
    after_values = jax.random.normal(keys[1], (num_after,))
    transitions = jax.random.randint(keys[2], (num_after, NUM_OUTCOMES), 0, NUM_STATES)
    rewards = jax.random.normal(keys[3], (num_after, NUM_OUTCOMES))
    discounts = jnp.where(jax.random.bernoulli(keys[4], 0.3, (num_after, NUM_OUTCOMES)),
                          -1.0, 0.9)
    logits = jax.random.normal(keys[5], (NUM_STATES, NUM_ACTIONS))
    values = jax.random.normal(keys[6], (NUM_STATES,))
    start = jax.random.randint(keys[7], (BATCH,), 0, NUM_STATES)

    def make(decision_cls, chance_cls, root_cls):
        def decision_fn(params, rng_key, action, state):
            del params
            after = state["index"] * NUM_ACTIONS + action
            noise = 0.1 * jax.random.uniform(rng_key, after.shape)
            out = decision_cls(chance_logits=chance_logits[after],
                               afterstate_value=after_values[after] + noise)
            return out, (after, jnp.stack([after, after], -1).astype(jnp.float32))

        def chance_fn(params, rng_key, outcome, afterstate):
            del params, rng_key
            after = afterstate[0]
            nxt = transitions[after, outcome]
            out = chance_cls(action_logits=logits[nxt], value=values[nxt],
                             reward=rewards[after, outcome], discount=discounts[after, outcome])
            return out, {"index": nxt}

        root = root_cls(prior_logits=logits[start], value=values[start],
                        embedding={"index": start})
        return root, decision_fn, chance_fn

    make.transitions = transitions
    return make


MCTX_TYPES = (mctx.DecisionRecurrentFnOutput, mctx.ChanceRecurrentFnOutput, mctx.RootFnOutput)
OUR_TYPES = (rs.DecisionRecurrentFnOutput, rs.ChanceRecurrentFnOutput, rs.RootFnOutput)


def policy_pair(seed: int, num_simulations: int, invalid_actions=None, **kwargs):
    """(mctx's policy, ours) as functions of a key, on the same problem."""
    make = table_model(seed)
    pair = []
    for lib, types in ((mctx, MCTX_TYPES), (rs, OUR_TYPES)):
        root, decision_fn, chance_fn = make(*types)
        pair.append(functools.partial(
            lib.stochastic_muzero_policy, None, root=root, decision_recurrent_fn=decision_fn,
            chance_recurrent_fn=chance_fn, num_simulations=num_simulations,
            invalid_actions=invalid_actions, **kwargs))
    return pair


def assert_same_search(ours, theirs):
    t, m = ours.search_tree, theirs.search_tree
    assert t.children_visits.shape == m.children_visits.shape
    np.testing.assert_array_equal(ours.action, theirs.action)
    np.testing.assert_allclose(ours.action_weights, theirs.action_weights, atol=1e-6, rtol=0)
    for name in ("node_visits", "children_visits", "parents", "action_from_parent",
                 "children_index", "root_invalid_actions"):
        np.testing.assert_array_equal(getattr(t, name), getattr(m, name), err_msg=name)
    np.testing.assert_array_equal(t.embeddings.is_decision_node, m.embeddings.is_decision_node)
    for name in ("node_values", "raw_values", "children_values", "children_rewards",
                 "children_discounts", "children_prior_logits"):
        np.testing.assert_allclose(getattr(t, name), getattr(m, name), atol=1e-5, rtol=0,
                                   err_msg=name)
    # The search went through chance nodes and past them to decision nodes again.
    kinds = np.asarray(t.embeddings.is_decision_node)[np.asarray(t.node_visits) > 0]
    num_roots = np.prod(t.node_visits.shape[:-1])
    assert (~kinds).sum() > 0 and kinds.sum() > num_roots


def assert_embeddings_follow_the_path(tree, transitions):
    """Each node holds what the models gave along its path; its unused half is its
    parent's (rljax's documented choice; mctx stores a dummy-input output there)."""
    visits, parents = np.asarray(tree.node_visits), np.asarray(tree.parents)
    actions = np.asarray(tree.action_from_parent)
    state = np.asarray(tree.embeddings.state_embedding["index"])
    after = np.asarray(tree.embeddings.afterstate_embedding[0])
    decision = np.asarray(tree.embeddings.is_decision_node)
    transitions = np.asarray(transitions)
    assert np.all(after[:, 0] == 0) and np.all(decision[:, 0])
    for b, i in zip(*np.nonzero(visits[:, 1:] > 0), strict=True):
        i += 1
        p, a = parents[b, i], actions[b, i]
        assert decision[b, i] != decision[b, p]
        if decision[b, i]:  # reached from chance node p by outcome a - A
            assert a >= NUM_ACTIONS and after[b, i] == after[b, p]
            assert state[b, i] == transitions[after[b, p], a - NUM_ACTIONS]
        else:  # reached from decision node p by action a
            assert a < NUM_ACTIONS and state[b, i] == state[b, p]
            assert after[b, i] == state[b, p] * NUM_ACTIONS + a


def test_matches_mctx_under_jit_without_invalid_actions():
    theirs, ours = policy_pair(seed=0, num_simulations=14)
    key = jax.random.key(1)
    got, want = jax.jit(ours)(key), jax.jit(theirs)(key)
    assert_same_search(got, want)
    assert_embeddings_follow_the_path(got.search_tree, table_model(0).transitions)
    assert got.search_tree.children_visits.shape == (BATCH, 15, NUM_ACTIONS)
    np.testing.assert_array_equal(got.search_tree.children_visits[:, 0].sum(-1), 14)


def test_matches_mctx_under_vmap_over_keys_with_invalid_actions_and_options():
    invalid = jnp.array([[0, 1, 0, 1], [1, 1, 1, 0], [0, 0, 0, 0]], bool)
    kwargs = dict(max_depth=5, pb_c_init=2.0, dirichlet_alpha=0.5, dirichlet_fraction=0.4,
                  temperature=0.25)
    theirs, ours = policy_pair(seed=2, num_simulations=16, invalid_actions=invalid,
                               qtransform=functools.partial(rs.qtransform_by_min_max,
                                                            min_value=-4.0, max_value=4.0),
                               **kwargs)
    theirs = functools.partial(theirs, qtransform=functools.partial(
        mctx.qtransform_by_min_max, min_value=-4.0, max_value=4.0))
    keys = jax.random.split(jax.random.key(3), 4)
    got = jax.jit(jax.vmap(lambda k: ours(k)))(keys)
    want = jax.jit(jax.vmap(lambda k: theirs(k)))(keys)
    assert_same_search(got, want)
    weights = np.asarray(got.action_weights)
    assert np.all(weights[:, invalid] == 0) and np.all(np.asarray(got.action)[:, 1] == 3)


def _bad_models(kind: str):
    make = table_model(0)
    root, decision_fn, chance_fn = make(*OUR_TYPES)
    invalid = None
    if kind == "chance_logits_batch":
        def bad_decision(params, key, action, state):
            out, after = decision_fn(params, key, action, state)
            return out.replace(chance_logits=out.chance_logits[:-1]), after
        return root, bad_decision, chance_fn, invalid
    if kind == "action_logits_width":
        def bad_chance(params, key, outcome, after):
            out, state = chance_fn(params, key, outcome, after)
            return out.replace(action_logits=out.action_logits[:, :-1]), state
        return root, decision_fn, bad_chance, invalid
    if kind == "state_shape":
        def bad_chance(params, key, outcome, after):
            out, state = chance_fn(params, key, outcome, after)
            return out, {"index": state["index"][:, None]}
        return root, decision_fn, bad_chance, invalid
    if kind == "invalid_actions":
        return root, decision_fn, chance_fn, jnp.zeros((BATCH, NUM_ACTIONS + 1), bool)
    raise AssertionError(kind)


@pytest.mark.parametrize("kind, match", [
    ("chance_logits_batch", "chance_logits has shape"),
    ("action_logits_width", r"action_logits has shape \(3, 3\), expected \(3, 4\)"),
    ("state_shape", r"chance_recurrent_fn's state embedding\['index'\] has shape"),
    ("invalid_actions", r"invalid_actions has shape \(3, 5\), expected \(3, 4\)"),
])
def test_bad_shapes_get_a_one_line_error(kind, match):
    root, decision_fn, chance_fn, invalid = _bad_models(kind)
    with pytest.raises(ValueError, match=match) as info:
        rs.stochastic_muzero_policy(None, jax.random.key(0), root, decision_fn, chance_fn,
                                     num_simulations=4, invalid_actions=invalid)
    assert "\n" not in str(info.value)


def test_joint_model_keeps_each_rows_kind_and_feeds_models_in_range_inputs():
    """Row 0 sits at a decision node (action 2), row 1 at a chance node (outcome 2, joint
    action A + 2): each row keeps its own model's output, and the model whose output a row
    discards still gets an in-range input (action < A, outcome < C)."""
    from rljax.search.stochastic_muzero import _joint_recurrent_fn

    seen = {}

    def decision_fn(params, key, action, state):
        seen["action"] = np.asarray(action)
        return rs.DecisionRecurrentFnOutput(chance_logits=jnp.full((2, 3), 0.5),
                                            afterstate_value=jnp.array([7.0, 8.0])), state + 10

    def chance_fn(params, key, outcome, after):
        seen["outcome"] = np.asarray(outcome)
        return rs.ChanceRecurrentFnOutput(
            action_logits=jnp.full((2, 4), 0.25), value=jnp.array([3.0, 4.0]),
            reward=jnp.array([5.0, 6.0]), discount=jnp.array([0.5, -1.0])), after + 100

    state = rs.StochasticRecurrentState(
        state_embedding=jnp.array([1.0, 2.0]), afterstate_embedding=jnp.array([3.0, 4.0]),
        is_decision_node=jnp.array([True, False]))
    fn = _joint_recurrent_fn(decision_fn, chance_fn, NUM_ACTIONS, 3)
    out, new = fn(None, jax.random.key(0), jnp.array([2, NUM_ACTIONS + 2]), state)
    np.testing.assert_array_equal(seen["action"], [2, NUM_ACTIONS - 1])
    np.testing.assert_array_equal(seen["outcome"], [0, 2])
    np.testing.assert_array_equal(out.value, [7.0, 4.0])
    np.testing.assert_array_equal(out.reward, [0.0, 6.0])
    np.testing.assert_array_equal(out.discount, [1.0, -1.0])
    inf = np.inf
    np.testing.assert_array_equal(out.prior_logits, [[-inf] * 4 + [0.5] * 3,
                                                     [0.25] * 4 + [-inf] * 3])
    np.testing.assert_array_equal(new.state_embedding, [1.0, 104.0])
    np.testing.assert_array_equal(new.afterstate_embedding, [11.0, 4.0])
    np.testing.assert_array_equal(new.is_decision_node, [False, True])
