"""rljax.search against mctx 0.0.71 on the same random problems, run in the same process.

Problems are table-lookup MDPs with continuous (Gaussian) priors, rewards and values, so no
two selection scores tie within the 1e-7 tie-break noise. (On exact ties, where the noise
falls below a score's float spacing, the winner depends on how XLA fuses the additions:
mctx's own unbatched selection rule, run on its own tree, then picks a different action
from its search loop, so no reimplementation can promise bitwise equality there.)
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mctx  # a dev dependency: a missing one fails, never skips
import numpy as np
import pytest

import rljax.search as rs

NUM_STATES = 48


def table_mdp(key, batch_size, num_actions, *, discount=0.95):
    """Random deterministic MDP: transitions, rewards, prior logits and values per state."""
    k1, k2, k3, k4, k5 = jax.random.split(key, 5)
    transitions = jax.random.randint(k1, (NUM_STATES, num_actions), 0, NUM_STATES)
    rewards = jax.random.normal(k2, (NUM_STATES, num_actions))
    logits = jax.random.normal(k3, (NUM_STATES, num_actions))
    values = jax.random.normal(k4, (NUM_STATES,))
    start = jax.random.randint(k5, (batch_size,), 0, NUM_STATES)

    def make(lib):
        def recurrent_fn(params, rng_key, action, state):
            del params, rng_key
            nxt = transitions[state, action]
            return lib.RecurrentFnOutput(
                reward=rewards[state, action],
                discount=jnp.full(state.shape, discount),
                prior_logits=logits[nxt],
                value=values[nxt],
            ), nxt

        root = lib.RootFnOutput(prior_logits=logits[start], value=values[start], embedding=start)
        return root, recurrent_fn

    return make


# (batch, num_actions, num_simulations, max_depth, discount, with root invalid mask)
CASES = [
    (1, 16, 48, None, 0.95, False),
    (8, 16, 40, 3, -1.0, False),
    (64, 8, 32, None, -1.0, True),
    (8, 6, 40, 2, 0.9, True),
]


def run_both(policy: str, case, seed: int, **kwargs):
    batch, num_actions, sims, max_depth, discount, masked = case
    make = table_mdp(jax.random.key(seed), batch, num_actions, discount=discount)
    invalid = None
    if masked:
        invalid = jax.random.bernoulli(jax.random.key(seed + 1), 0.4, (batch, num_actions))
        invalid = invalid.at[0].set(True)  # one row with every action invalid
        invalid = invalid.at[-1, 1:].set(False)
    outs = []
    for lib in (mctx, rs):
        root, recurrent_fn = make(lib)
        fn = functools.partial(getattr(lib, policy), None, root=root, recurrent_fn=recurrent_fn,
                               num_simulations=sims, invalid_actions=invalid,
                               max_depth=max_depth, **kwargs)
        outs.append(jax.jit(lambda key, fn=fn: fn(key))(jax.random.key(seed + 2)))
    return outs


def assert_same_search(ours, theirs):
    t, m = ours.search_tree, theirs.search_tree
    np.testing.assert_array_equal(t.node_visits, m.node_visits)
    np.testing.assert_array_equal(t.children_visits, m.children_visits)
    np.testing.assert_array_equal(t.parents, m.parents)
    np.testing.assert_array_equal(t.action_from_parent, m.action_from_parent)
    np.testing.assert_array_equal(t.children_index, m.children_index)
    np.testing.assert_allclose(t.node_values[:, 0], m.node_values[:, 0], atol=1e-5, rtol=0)
    np.testing.assert_allclose(t.node_values, m.node_values, atol=1e-5, rtol=0)
    np.testing.assert_allclose(t.children_values, m.children_values, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(ours.action, theirs.action)
    np.testing.assert_allclose(ours.action_weights, theirs.action_weights, atol=1e-5, rtol=0)
    assert np.all(np.isfinite(ours.action_weights))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"B{c[0]}-A{c[1]}-S{c[2]}-d{c[3]}-g{c[4]}"
                         f"{'-mask' if c[5] else ''}")
def test_muzero_policy_matches_mctx_without_noise(case):
    theirs, ours = run_both("muzero_policy", case, seed=case[0], dirichlet_fraction=0.0)
    assert_same_search(ours, theirs)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"B{c[0]}-A{c[1]}-S{c[2]}-d{c[3]}-g{c[4]}"
                         f"{'-mask' if c[5] else ''}")
def test_gumbel_muzero_policy_matches_mctx_without_noise(case):
    theirs, ours = run_both("gumbel_muzero_policy", case, seed=case[0] + 100, gumbel_scale=0.0,
                            max_num_considered_actions=min(16, case[1]))
    assert_same_search(ours, theirs)


def test_noisy_policies_match_mctx_too():
    """Same keys, same draws: Dirichlet noise and Gumbel noise on still give mctx's tree."""
    case = (8, 16, 32, None, 0.95, True)
    theirs, ours = run_both("muzero_policy", case, seed=7)
    assert_same_search(ours, theirs)
    theirs, ours = run_both("gumbel_muzero_policy", case, seed=8, max_num_considered_actions=4)
    assert_same_search(ours, theirs)


def test_sequential_halving_table_matches_mctx():
    from mctx._src import seq_halving as mctx_seq_halving

    from rljax.search import seq_halving

    for m in (1, 2, 3, 4, 7, 16):
        for n in (1, 5, 16, 64, 200):
            assert (seq_halving.get_table_of_considered_visits(m, n)
                    == mctx_seq_halving.get_table_of_considered_visits(m, n))


def test_qtransforms_match_mctx_on_a_searched_tree():
    root, recurrent_fn = table_mdp(jax.random.key(3), 8, 8, discount=-1.0)(rs)
    tree = jax.jit(lambda key: rs.muzero_policy(None, key, root, recurrent_fn, 24).search_tree)(
        jax.random.key(4))
    nodes = jnp.arange(tree.node_visits.shape[0]) % 5
    for name in ("qtransform_by_parent_and_siblings", "qtransform_completed_by_mix_value"):
        got = jax.vmap(getattr(rs, name))(tree, nodes)
        want = jax.vmap(getattr(mctx, name))(tree, nodes)
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
    got = jax.vmap(functools.partial(rs.qtransform_by_min_max, min_value=-3.0, max_value=3.0))(
        tree, nodes)
    want = jax.vmap(functools.partial(mctx.qtransform_by_min_max, min_value=-3.0,
                                      max_value=3.0))(tree, nodes)
    np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
