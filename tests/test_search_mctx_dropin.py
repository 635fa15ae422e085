"""``import rljax.search as mctx`` is a drop-in for mctx 0.0.71: every public name, every
search-tree field's dtype and shape, and any embedding pytree mctx accepts (a leafless one
included), checked against mctx itself on the same inputs."""

from __future__ import annotations

import importlib.metadata

import jax
import jax.numpy as jnp
import mctx  # a dev dependency: a missing one fails, never skips
import numpy as np
import pytest

import rljax.search as rs

pytestmark = pytest.mark.timeout(240)

B, A = 2, 3
TRANSITIONS = jnp.array([[1, 2, 0], [2, 0, 1], [0, 1, 2]])  # next state [state, action]
LOGITS = jnp.array([[0.5, -0.2, 0.1], [0.0, 0.3, -0.4], [0.2, 0.2, -0.1]])
VALUES = jnp.array([0.1, -0.3, 0.6])


def _problem(lib, embedding):
    """A 3-state MDP whose state rides in ``embedding['s']`` when there is one; a leafless
    embedding is passed through unchanged and the model answers from the action alone."""

    def recurrent_fn(params, rng_key, action, emb):
        del params, rng_key
        state = emb["s"] if isinstance(emb, dict) else jnp.zeros((B,), jnp.int32)
        nxt = TRANSITIONS[state, action]
        out = lib.RecurrentFnOutput(reward=0.1 * action.astype(jnp.float32),
                                    discount=jnp.full((B,), 0.9), prior_logits=LOGITS[nxt],
                                    value=VALUES[nxt])
        return out, ({"s": nxt, "x": emb["x"]} if isinstance(emb, dict) else emb)

    root = lib.RootFnOutput(prior_logits=LOGITS[:B], value=VALUES[:B], embedding=embedding)
    return root, recurrent_fn


def _run(lib, policy, embedding, invalid_actions, key):
    root, recurrent_fn = _problem(lib, embedding)
    kwargs = (dict(dirichlet_fraction=0.0) if policy == "muzero_policy"
              else dict(gumbel_scale=0.0))
    return getattr(lib, policy)((), key, root, recurrent_fn, 4,
                                invalid_actions=invalid_actions, **kwargs)


def test_every_public_name_of_mctx_is_there():
    missing = [name for name in mctx.__all__ if not hasattr(rs, name)]
    assert missing == []
    assert set(mctx.__all__) <= set(rs.__all__)
    assert [name for name in rs.__all__ if not hasattr(rs, name)] == []
    # __version__ is the mctx release reproduced (see rljax/search/__init__.py).
    assert rs.__version__ == mctx.__version__ == importlib.metadata.version("mctx") == "0.0.71"


def _assert_same_dtypes_and_shapes(ours, theirs):
    """Every field mctx's ``PolicyOutput`` and tree have: same leaves' dtypes and shapes."""
    fields = [f for f in vars(theirs.search_tree) if not f.startswith("_")]
    assert "root_invalid_actions" in fields and "embeddings" in fields
    for field in fields:
        got = jax.tree.map(lambda x: (x.dtype, x.shape), getattr(ours.search_tree, field))
        want = jax.tree.map(lambda x: (x.dtype, x.shape), getattr(theirs.search_tree, field))
        assert jax.tree.leaves(got) == jax.tree.leaves(want), field
    for field in ("action", "action_weights"):
        got, want = getattr(ours, field), getattr(theirs, field)
        assert (got.dtype, got.shape) == (want.dtype, want.shape), field


EMBEDDINGS = {
    "int8_array": jnp.array([0, 2], jnp.int8),
    "dict_bfloat16": {"s": jnp.array([1, 2]), "x": jnp.ones((B, 2), jnp.bfloat16)},
}
CASES = [  # (policy, embedding, invalid_actions); no mask and a leafless one: below
    ("muzero_policy", "dict_bfloat16", jnp.array([[0, 0, 1], [0, 1, 0]], bool)),
    ("gumbel_muzero_policy", "int8_array", jnp.array([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])),
]


@pytest.mark.parametrize("policy, embedding, invalid_actions", CASES,
                         ids=[f"{p}-{e}" for p, e, _ in CASES])
def test_tree_fields_have_mctx_dtypes_and_results_under_jit(policy, embedding,
                                                            invalid_actions):
    """Every field both trees have: same dtype, shape and (noise off) visit counts; the
    root mask keeps the caller's dtype (mctx's float32 zeros like the logits when none)."""
    key = jax.random.PRNGKey(0)
    emb = EMBEDDINGS[embedding]
    ours = jax.jit(lambda k, m: _run(rs, policy, emb, m, k))(key, invalid_actions)
    theirs = jax.jit(lambda k, m: _run(mctx, policy, emb, m, k))(key, invalid_actions)
    _assert_same_dtypes_and_shapes(ours, theirs)
    assert ours.search_tree.root_invalid_actions.dtype == invalid_actions.dtype
    np.testing.assert_array_equal(ours.search_tree.children_visits,
                                  theirs.search_tree.children_visits)
    np.testing.assert_array_equal(ours.action, theirs.action)
    np.testing.assert_allclose(ours.search_tree.node_values, theirs.search_tree.node_values,
                               rtol=1e-5, atol=1e-6)


def test_leafless_embedding_under_vmap_and_subtree_reuse():
    """``embedding=()`` (mctx's own tests use it) and no root mask: a vmapped batch of
    searches equals mctx's (visits, dtypes, shapes), and the tree can be re-rooted and
    searched again."""
    keys = jax.random.split(jax.random.PRNGKey(1), 2)
    ours = jax.jit(jax.vmap(lambda k: _run(rs, "muzero_policy", (), None, k)))(keys)
    theirs = jax.jit(jax.vmap(lambda k: _run(mctx, "muzero_policy", (), None, k)))(keys)
    np.testing.assert_array_equal(ours.search_tree.children_visits,
                                  theirs.search_tree.children_visits)
    assert ours.search_tree.embeddings == ()
    _assert_same_dtypes_and_shapes(ours, theirs)  # no mask: float32 zeros, as mctx's
    assert ours.search_tree.root_invalid_actions.dtype == jnp.float32

    @jax.jit
    def search_twice(key_a, key_b):
        root, recurrent_fn = _problem(rs, ())
        first = rs.muzero_policy((), key_a, root, recurrent_fn, 4, num_nodes=9,
                                 dirichlet_fraction=0.0)
        subtree = rs.get_subtree(first.search_tree, first.action)
        again = rs.muzero_policy((), key_b, root, recurrent_fn, 4, initial_tree=subtree,
                                 dirichlet_fraction=0.0)
        return first, subtree, again

    first, subtree, again = search_twice(*keys)
    assert again.search_tree.embeddings == ()
    assert subtree.root_invalid_actions.dtype == first.search_tree.root_invalid_actions.dtype
    reused = subtree.children_visits[:, 0].sum(-1)
    assert reused.max() > 0
    np.testing.assert_array_equal(again.search_tree.children_visits[:, 0].sum(-1), 4 + reused)
