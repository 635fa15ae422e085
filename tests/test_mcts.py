"""Properties of rljax.search's MCTS (no mctx needed): budgets, masks, batch independence,
terminal states, subtree reuse, and trace-time errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rljax.search as rs

NUM_STATES = 32


def table_mdp(key, batch_size, num_actions, *, discount=0.95, invalid_prob=0.0,
              terminal_prob=0.0):
    """A random table-lookup MDP, optionally with per-state invalid actions and terminals."""
    keys = jax.random.split(key, 7)
    transitions = jax.random.randint(keys[0], (NUM_STATES, num_actions), 0, NUM_STATES)
    rewards = jax.random.normal(keys[1], (NUM_STATES, num_actions))
    logits = jax.random.normal(keys[2], (NUM_STATES, num_actions))
    values = jax.random.normal(keys[3], (NUM_STATES,))
    invalid = jax.random.bernoulli(keys[4], invalid_prob, (NUM_STATES, num_actions))
    invalid = invalid.at[:, 0].set(False)  # at least one valid action per state
    terminal = jax.random.bernoulli(keys[5], terminal_prob, (NUM_STATES,))
    start = jax.random.randint(keys[6], (batch_size,), 0, NUM_STATES)

    def recurrent_fn(params, rng_key, action, state):
        del params, rng_key
        nxt = transitions[state, action]
        out = rs.RecurrentFnOutput(
            reward=rewards[state, action], discount=jnp.full(state.shape, discount),
            prior_logits=logits[nxt], value=values[nxt],
            invalid_actions=invalid[nxt] if invalid_prob else None,
            terminal=terminal[nxt] if terminal_prob else None)
        return out, nxt

    root = rs.RootFnOutput(prior_logits=logits[start], value=values[start], embedding=start)
    return root, recurrent_fn, invalid[start], dict(invalid=invalid, terminal=terminal,
                                                   start=start)


def embedding_states(tree):
    return np.asarray(tree.embeddings)


@pytest.mark.parametrize("policy", ["muzero_policy", "gumbel_muzero_policy"])
def test_budget_masks_and_finiteness(policy):
    """Root children visits sum to num_simulations; masked actions are never expanded,
    at the root or below; all outputs are finite."""
    sims = 40
    root, recurrent_fn, root_invalid, info = table_mdp(jax.random.key(0), 8, 8,
                                                       invalid_prob=0.4)
    out = jax.jit(lambda key: getattr(rs, policy)(
        None, key, root, recurrent_fn, sims, invalid_actions=root_invalid))(jax.random.key(1))
    tree = out.search_tree
    np.testing.assert_array_equal(tree.children_visits[:, 0].sum(-1), sims)
    np.testing.assert_array_equal(tree.node_visits[:, 0], sims + 1)
    assert not np.any(np.asarray(tree.children_visits[:, 0])[np.asarray(root_invalid)])
    # Below the root: an expanded child under action a of node n implies a is valid at n.
    states = embedding_states(tree)
    invalid = np.asarray(info["invalid"])
    children = np.asarray(tree.children_index)
    exists = np.asarray(tree.node_visits) > 0
    for b in range(tree.node_visits.shape[0]):
        for n in np.nonzero(exists[b])[0]:
            if n == 0:
                continue
            expanded = children[b, n] >= 0
            assert not np.any(expanded & invalid[states[b, n]]), (b, n)
    assert np.all(np.isfinite(out.action_weights))
    assert not np.asarray(root_invalid)[np.arange(8), np.asarray(out.action)].any()


def test_rows_are_independent_and_vmap_matches():
    """Row 0's search does not depend on the other rows' contents; vmap over seeds works."""
    sims = 24
    root, recurrent_fn, _, _ = table_mdp(jax.random.key(2), 4, 6)
    other = jax.random.randint(jax.random.key(3), (4,), 0, NUM_STATES).at[0].set(
        root.embedding[0])
    root2 = rs.RootFnOutput(prior_logits=root.prior_logits.at[1:].set(-root.prior_logits[1:]),
                            value=root.value.at[1:].add(3.0), embedding=other)

    @jax.jit
    def run(r, key):
        return rs.muzero_policy(None, key, r, recurrent_fn, sims)

    a, b = run(root, jax.random.key(4)), run(root2, jax.random.key(4))
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x)[0], np.asarray(y)[0])
    keys = jax.random.split(jax.random.key(5), 3)
    batched = jax.jit(jax.vmap(lambda k: run(root, k).action_weights))(keys)
    for i in range(3):
        np.testing.assert_allclose(batched[i], run(root, keys[i]).action_weights, atol=1e-6)


def test_terminal_states_stop_expansion():
    sims = 48
    root, recurrent_fn, _, info = table_mdp(jax.random.key(6), 4, 4, terminal_prob=0.5,
                                            discount=-1.0)
    out = jax.jit(lambda key: rs.gumbel_muzero_policy(None, key, root, recurrent_fn, sims))(
        jax.random.key(7))
    tree = out.search_tree
    terminal = np.asarray(tree.terminal)
    exists = np.asarray(tree.node_visits) > 0
    states = embedding_states(tree)
    assert terminal[exists].any()  # the test exercises terminals
    np.testing.assert_array_equal(terminal[:, 1:] & exists[:, 1:],
                                  np.asarray(info["terminal"])[states[:, 1:]] & exists[:, 1:])
    # Nothing below a terminal node, and its value is 0.
    assert np.all(np.asarray(tree.children_index)[terminal] == rs.Tree.UNVISITED)
    np.testing.assert_array_equal(np.asarray(tree.node_values)[terminal], 0.0)
    np.testing.assert_array_equal(tree.children_visits[:, 0].sum(-1), sims)


def test_all_invalid_root_gives_no_nan():
    root, recurrent_fn, _, _ = table_mdp(jax.random.key(8), 2, 5)
    invalid = jnp.ones((2, 5), bool)
    for policy in (rs.muzero_policy, rs.gumbel_muzero_policy):
        out = jax.jit(lambda key, p=policy: p(None, key, root, recurrent_fn, 8,
                                              invalid_actions=invalid))(jax.random.key(0))
        assert np.all(np.isfinite(out.action_weights))
        assert np.all(np.isfinite(out.search_tree.node_values))


def subtree_reference(tree, b, action):
    """Slow reference for get_subtree: walk the descendants in index order."""
    parents = np.asarray(tree.parents[b])
    visits = np.asarray(tree.node_visits[b])
    new_root = int(tree.children_index[b, 0, action])
    if new_root < 0:
        return []
    members = []
    for i in range(len(parents)):
        j = i
        while j > 0 and j != new_root:
            j = parents[j]
        if j == new_root and visits[i] > 0:
            members.append(i)
    return members


def test_get_subtree_matches_reference_and_seeds_the_next_search():
    sims = 30
    root, recurrent_fn, _, _ = table_mdp(jax.random.key(9), 3, 4)
    out = jax.jit(lambda key: rs.muzero_policy(None, key, root, recurrent_fn, sims,
                                               num_nodes=2 * sims + 1))(jax.random.key(1))
    tree = out.search_tree
    action = jnp.array([int(np.argmax(tree.children_visits[b, 0])) for b in range(3)])
    action = action.at[2].set(int(np.argmin(tree.children_visits[2, 0])))  # maybe unexpanded
    sub = jax.jit(rs.get_subtree)(tree, action)
    # Compare on host copies: indexing the device arrays element by element in Python
    # would dispatch (and compile) one small op per index.
    t, s = jax.device_get((tree, sub))
    for b in range(3):
        members = subtree_reference(t, b, int(action[b]))
        k = len(members)
        np.testing.assert_array_equal(s.node_visits[b, :k], t.node_visits[b, members])
        np.testing.assert_array_equal(s.node_values[b, :k], t.node_values[b, members])
        np.testing.assert_array_equal(s.embeddings[b, :k], t.embeddings[b, members])
        np.testing.assert_array_equal(s.node_visits[b, k:], 0)
        relabel = {old: new for new, old in enumerate(members)}
        for new, old in enumerate(members):
            want = [relabel.get(int(c), -1) for c in t.children_index[b, old]]
            np.testing.assert_array_equal(s.children_index[b, new], want)
        if k:
            assert s.node_visits[b, 0] == t.children_visits[b, 0, int(action[b])]

    # The next search continues from the subtree: reused visits stay, new ones add up.
    child = tree.children_index[jnp.arange(3), 0, action]
    next_state = tree.embeddings[jnp.arange(3), jnp.maximum(child, 0)]
    logits, values = root.prior_logits, root.value  # any root output will do for the test
    next_root = rs.RootFnOutput(prior_logits=logits, value=values, embedding=next_state)
    nxt = jax.jit(lambda key: rs.muzero_policy(None, key, next_root, recurrent_fn, sims,
                                               initial_tree=sub))(jax.random.key(2))
    visits = np.asarray(nxt.search_tree.children_visits[:, 0]).sum(-1)
    reused = np.maximum(np.asarray(sub.node_visits[:, 0]) - 1, 0)
    np.testing.assert_array_equal(visits, sims + reused)
    assert nxt.search_tree.node_visits.shape == tree.node_visits.shape


def test_trace_time_errors_name_the_problem():
    root, recurrent_fn, _, _ = table_mdp(jax.random.key(0), 2, 4)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="num_simulations"):
        rs.muzero_policy(None, key, root, recurrent_fn, 0)
    with pytest.raises(ValueError, match="max_depth"):
        rs.gumbel_muzero_policy(None, key, root, recurrent_fn, 4, max_depth=0)
    bad_root = root.replace(value=jnp.zeros(3))
    with pytest.raises(ValueError, match="root.value"):
        rs.muzero_policy(None, key, bad_root, recurrent_fn, 4)
    bad_root = root.replace(embedding=jnp.zeros((3, 2)))
    with pytest.raises(ValueError, match="root.embedding"):
        rs.muzero_policy(None, key, bad_root, recurrent_fn, 4)
    with pytest.raises(ValueError, match="invalid_actions"):
        rs.muzero_policy(None, key, root, recurrent_fn, 4, invalid_actions=jnp.zeros((2, 3)))

    def wrong_value(params, rng_key, action, state):
        out, nxt = recurrent_fn(params, rng_key, action, state)
        return out.replace(value=jnp.zeros((2, 1))), nxt

    with pytest.raises(ValueError, match="value of shape"):
        jax.jit(lambda k: rs.muzero_policy(None, k, root, wrong_value, 4))(key)

    def wrong_logits(params, rng_key, action, state):
        out, nxt = recurrent_fn(params, rng_key, action, state)
        return out.replace(prior_logits=out.prior_logits[:, :3]), nxt

    with pytest.raises(ValueError, match="prior_logits"):
        rs.gumbel_muzero_policy(None, key, root, wrong_logits, 4)
