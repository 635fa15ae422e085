"""An mctx user's code runs on rljax.search by changing the import.

``user_code(mctx)`` below is written the way mctx 0.0.71's README and ``examples/``
(``visualization_demo.py``, ``policy_improvement_demo.py``) use mctx: ``mctx.RootFnOutput``,
a ``recurrent_fn(params, rng_key, action, embedding)`` returning ``mctx.RecurrentFnOutput``,
``mctx.gumbel_muzero_policy`` / ``mctx.muzero_policy`` / the low-level ``mctx.search`` with
``mctx.muzero_action_selection``, the Q-transforms, ``jax.random.PRNGKey`` keys, mctx's type
names in annotations, and reading the tree (``num_actions``, ``num_simulations``,
``children_index``, ``qvalues``, ``summary()``, ``extra_data.root_gumbel``). It is defined
once and run twice, with ``import mctx`` and with ``import rljax.search as mctx``; actions,
visit counts and tree shapes must be equal and values close.
"""

import functools

import chex
import jax
import jax.numpy as jnp
import mctx as real_mctx  # a dev dependency: a missing one fails, never skips
import numpy as np
import pytest

import rljax.search

pytestmark = pytest.mark.timeout(180)


def user_code(mctx):
    """mctx user code; ``mctx`` is the module the user imported. Returns what it computed."""

    # --- examples/visualization_demo.py: a deterministic toy environment -------------
    def convert_tree_to_edges(tree: mctx.Tree, batch_index: int = 0):
        """The demo's ``convert_tree_to_graph`` without pygraphviz: a list of edges."""
        chex.assert_rank(tree.node_values, 2)
        tree = jax.device_get(tree)  # numpy leaves: cheap Python-side indexing
        # One compiled program for every node's Q-values (called eagerly, mctx's
        # ``qvalues`` traces a vmap on every call).
        qvalues = jax.jit(mctx.Tree.qvalues)
        batch_size = tree.node_values.shape[0]
        edges = []
        for node_i in range(tree.num_simulations):
            if not (tree.children_index[batch_index, node_i] >= 0).any():
                continue  # no edges out of this node
            node_index = jnp.full([batch_size], node_i)
            q = np.asarray(qvalues(tree, node_index))
            probs = np.asarray(jax.nn.softmax(tree.children_prior_logits[batch_index, node_i]))
            for a_i in range(tree.num_actions):
                children_i = tree.children_index[batch_index, node_i, a_i]
                if children_i >= 0:
                    edges.append((
                        node_i, a_i, int(children_i),
                        float(q[batch_index, a_i]),
                        float(probs[a_i]),
                        float(tree.children_rewards[batch_index, node_i, a_i]),
                        float(tree.children_discounts[batch_index, node_i, a_i]),
                        float(tree.node_values[batch_index, children_i]),
                        int(tree.node_visits[batch_index, children_i]),
                    ))
        return edges

    def _make_batched_env_model(batch_size, *, transition_matrix, rewards, discounts, values,
                                prior_logits):
        chex.assert_equal_shape([transition_matrix, rewards, discounts, prior_logits])
        num_states, num_actions = transition_matrix.shape
        chex.assert_shape(values, [num_states])
        root_state = 0
        root = mctx.RootFnOutput(
            prior_logits=jnp.full([batch_size, num_actions], prior_logits[root_state]),
            value=jnp.full([batch_size], values[root_state]),
            embedding=jnp.zeros([batch_size], dtype=jnp.int32),
        )

        def recurrent_fn(params, rng_key, action, embedding):
            del params, rng_key
            chex.assert_shape(action, [batch_size])
            chex.assert_shape(embedding, [batch_size])
            recurrent_fn_output = mctx.RecurrentFnOutput(
                reward=rewards[embedding, action],
                discount=discounts[embedding, action],
                prior_logits=prior_logits[embedding],
                value=values[embedding])
            next_embedding = transition_matrix[embedding, action]
            return recurrent_fn_output, next_embedding

        return root, recurrent_fn

    def _run_visualization_demo(rng_key: chex.PRNGKey) -> mctx.PolicyOutput:
        transition_matrix = jnp.array([
            [1, 2, 3, 4],
            [0, 5, 0, 0],
            [0, 0, 0, 6],
            [0, 0, 0, 0],
            [0, 0, 0, 0],
            [0, 0, 0, 0],
            [0, 0, 0, 0],
        ], dtype=jnp.int32)
        rewards = jnp.array([
            [1, -1, 0, 0],
            [0, 0, 0, 0],
            [0, 0, 0, 0],
            [0, 0, 0, 0],
            [0, 0, 0, 0],
            [0, 0, 0, 0],
            [10, 0, 20, 0],
        ], dtype=jnp.float32)
        num_states = rewards.shape[0]
        discounts = jnp.where(transition_matrix > 0, 1.0, 0.0)
        values = jnp.full([num_states], 15.0)
        all_prior_logits = jnp.zeros_like(rewards)
        root, recurrent_fn = _make_batched_env_model(
            batch_size=2, transition_matrix=transition_matrix, rewards=rewards,
            discounts=discounts, values=values, prior_logits=all_prior_logits)
        return mctx.gumbel_muzero_policy(
            params=(),
            rng_key=rng_key,
            root=root,
            recurrent_fn=recurrent_fn,
            num_simulations=32,
            max_depth=None,
            max_num_considered_actions=16,
        )

    out = {}
    policy_output = jax.jit(_run_visualization_demo)(jax.random.PRNGKey(42))
    out["demo_action"] = policy_output.action[0]
    out["demo_policy"] = policy_output
    out["demo_edges"] = convert_tree_to_edges(policy_output.search_tree)

    # --- examples/policy_improvement_demo.py: a bandit with random Q-values ----------
    batch_size, num_actions = 32, 82

    def _make_bandit_recurrent_fn(qvalues):
        def recurrent_fn(params, rng_key, action, embedding):
            del params, rng_key
            reward = jnp.where(embedding == 0, qvalues[jnp.arange(action.shape[0]), action],
                               0.0)
            discount = jnp.ones_like(reward)
            recurrent_fn_output = mctx.RecurrentFnOutput(
                reward=reward,
                discount=discount,
                prior_logits=jnp.zeros_like(qvalues),
                value=jnp.zeros_like(reward))
            next_embedding = embedding + 1
            return recurrent_fn_output, next_embedding

        return recurrent_fn

    def _run_improvement_demo(rng_key):
        rng_key, logits_rng, q_rng, search_rng = jax.random.split(rng_key, 4)
        prior_logits = jax.random.normal(logits_rng, shape=[batch_size, num_actions])
        qvalues = jax.random.uniform(q_rng, shape=prior_logits.shape)
        raw_value = jnp.sum(jax.nn.softmax(prior_logits) * qvalues, axis=-1)
        root = mctx.RootFnOutput(prior_logits=prior_logits, value=raw_value,
                                 embedding=jnp.zeros([batch_size]))
        recurrent_fn = _make_bandit_recurrent_fn(qvalues)
        policy_output = mctx.gumbel_muzero_policy(
            params=(),
            rng_key=search_rng,
            root=root,
            recurrent_fn=recurrent_fn,
            num_simulations=4,
            max_num_considered_actions=16,
            qtransform=functools.partial(mctx.qtransform_completed_by_mix_value,
                                         use_mixed_value=False),
        )
        selected_action_value = qvalues[jnp.arange(batch_size), policy_output.action]
        gumbel = policy_output.search_tree.extra_data.root_gumbel
        prior_policy_action = jnp.argmax(gumbel + prior_logits, axis=-1)
        prior_policy_action_value = qvalues[jnp.arange(batch_size), prior_policy_action]
        action_weights_policy_value = jnp.sum(policy_output.action_weights * qvalues, axis=-1)
        return rng_key, policy_output, {
            "action_value_improvement": selected_action_value - prior_policy_action_value,
            "weights_value_improvement": action_weights_policy_value - raw_value,
        }

    _, out["bandit_policy"], out["bandit_improvement"] = jax.jit(_run_improvement_demo)(
        jax.random.PRNGKey(42))

    # --- MuZero policy and the low-level search on a learned-model stand-in ----------
    num_states, num_actions, batch_size = 24, 5, 8

    def make_model(rng_key):
        k1, k2, k3, k4, k5 = jax.random.split(rng_key, 5)
        params = {
            "transitions": jax.random.randint(k1, (num_states, num_actions), 0, num_states),
            "rewards": jax.random.normal(k2, (num_states, num_actions)),
            "logits": jax.random.normal(k3, (num_states, num_actions)),
            "values": jax.random.normal(k4, (num_states,)),
        }
        start = jax.random.randint(k5, (batch_size,), 0, num_states)
        root = mctx.RootFnOutput(prior_logits=params["logits"][start],
                                 value=params["values"][start], embedding=start)
        return params, root

    def recurrent_fn(params, rng_key: chex.PRNGKey, action: chex.Array, embedding):
        del rng_key
        next_state = params["transitions"][embedding, action]
        return mctx.RecurrentFnOutput(
            reward=params["rewards"][embedding, action],
            discount=jnp.full(action.shape, 0.97),
            prior_logits=params["logits"][next_state],
            value=params["values"][next_state],
        ), next_state

    interior_action_selection_fn = functools.partial(
        mctx.muzero_action_selection, pb_c_init=1.25,
        qtransform=functools.partial(mctx.qtransform_by_min_max, min_value=-3.0,
                                     max_value=3.0))
    root_action_selection_fn = functools.partial(interior_action_selection_fn, depth=0)

    def low_level_search(params, rng_key, root: mctx.RootFnOutput,
                         recurrent_fn: mctx.RecurrentFn) -> mctx.Tree:
        return mctx.search(
            params=params,
            rng_key=rng_key,
            root=root,
            recurrent_fn=recurrent_fn,
            root_action_selection_fn=root_action_selection_fn,
            interior_action_selection_fn=interior_action_selection_fn,
            num_simulations=16,
            max_depth=4,
            loop_fn=jax.lax.fori_loop,
        )

    @functools.partial(jax.jit, static_argnames=("num_simulations",))
    def _run_muzero_demo(rng_key, num_simulations):
        model_key, policy_key, search_key = jax.random.split(rng_key, 3)
        params, root = make_model(model_key)
        invalid_actions = jnp.zeros([batch_size, num_actions]).at[:, 0].set(1.0)
        policy_output = mctx.muzero_policy(
            params, policy_key, root, recurrent_fn, num_simulations=num_simulations,
            invalid_actions=invalid_actions, dirichlet_fraction=0.0, temperature=1.0,
            qtransform=mctx.qtransform_by_parent_and_siblings)
        tree = low_level_search(params, search_key, root, recurrent_fn)
        return policy_output, policy_output.search_tree.summary(), tree

    (out["muzero_policy"], out["muzero_summary"],
     out["search_tree"]) = _run_muzero_demo(jax.random.PRNGKey(0), num_simulations=24)
    return out


TREE_FIELDS = ("node_visits", "raw_values", "node_values", "parents", "action_from_parent",
               "children_index", "children_prior_logits", "children_visits",
               "children_rewards", "children_discounts", "children_values",
               "root_invalid_actions")


def _assert_same_tree(ours, theirs):
    for field in TREE_FIELDS:
        a, b = np.asarray(getattr(ours, field)), np.asarray(getattr(theirs, field))
        assert a.shape == b.shape, field
        if np.issubdtype(b.dtype, np.integer) or b.dtype == bool:
            np.testing.assert_array_equal(a, b, err_msg=field)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=field)
    np.testing.assert_array_equal(np.asarray(ours.embeddings), np.asarray(theirs.embeddings))


def _assert_same_policy(ours, theirs):
    np.testing.assert_array_equal(ours.action, theirs.action)
    np.testing.assert_allclose(ours.action_weights, theirs.action_weights, rtol=1e-5,
                               atol=1e-6)
    _assert_same_tree(ours.search_tree, theirs.search_tree)


@pytest.fixture(scope="module")
def both():
    return user_code(real_mctx), user_code(rljax.search)


def test_visualization_demo_is_the_same(both):
    theirs, ours = both
    assert int(ours["demo_action"]) == int(theirs["demo_action"])
    _assert_same_policy(ours["demo_policy"], theirs["demo_policy"])
    np.testing.assert_array_equal(ours["demo_policy"].search_tree.extra_data.root_gumbel,
                                  theirs["demo_policy"].search_tree.extra_data.root_gumbel)
    assert len(ours["demo_edges"]) == len(theirs["demo_edges"]) > 0
    for a, b in zip(ours["demo_edges"], theirs["demo_edges"], strict=True):
        assert a[:3] == b[:3] and a[-1] == b[-1]  # node, action, child, child visits
        np.testing.assert_allclose(a[3:-1], b[3:-1], rtol=1e-5, atol=1e-6)


def test_policy_improvement_demo_is_the_same(both):
    theirs, ours = both
    _assert_same_policy(ours["bandit_policy"], theirs["bandit_policy"])
    for name, value in theirs["bandit_improvement"].items():
        np.testing.assert_allclose(ours["bandit_improvement"][name], value, rtol=1e-5,
                                   atol=1e-6, err_msg=name)
        assert float(jnp.min(value)) >= -1e-6  # Gumbel MuZero's policy improvement


def test_muzero_policy_and_summary_are_the_same(both):
    theirs, ours = both
    _assert_same_policy(ours["muzero_policy"], theirs["muzero_policy"])
    assert not np.asarray(ours["muzero_policy"].action == 0).any()  # action 0 is invalid
    for field in ("visit_counts", "visit_probs", "value", "qvalues"):
        np.testing.assert_allclose(getattr(ours["muzero_summary"], field),
                                   getattr(theirs["muzero_summary"], field), rtol=1e-5,
                                   atol=1e-6, err_msg=field)


def test_low_level_search_is_the_same(both):
    theirs, ours = both
    _assert_same_tree(ours["search_tree"], theirs["search_tree"])
    assert int(np.asarray(ours["search_tree"].node_visits)[:, 0].min()) == 16 + 1


# mctx 0.0.71 public names rljax.search does not have (yet): Stochastic MuZero and its
# output types, and four type aliases used only in annotations.
KNOWN_GAPS = {"stochastic_muzero_policy", "ChanceRecurrentFnOutput",
              "DecisionRecurrentFnOutput", "RecurrentState", "RootActionSelectionFn",
              "InteriorActionSelectionFn", "LoopFn"}


def test_public_names_and_signatures_match_mctx():
    """Every other public mctx name exists in rljax.search, and every mctx function's
    parameters exist there with the same kind, in the same positional order."""
    import inspect

    missing = {name for name in real_mctx.__all__ if not hasattr(rljax.search, name)}
    assert missing <= KNOWN_GAPS, missing - KNOWN_GAPS
    for name in real_mctx.__all__:
        theirs = getattr(real_mctx, name)
        if name in missing or not inspect.isfunction(theirs):
            continue
        ours = inspect.signature(getattr(rljax.search, name)).parameters
        positional = [p.name for p in ours.values() if p.kind != p.KEYWORD_ONLY]
        for i, param in enumerate(inspect.signature(theirs).parameters.values()):
            assert param.name in ours, (name, param.name)
            if param.kind != param.KEYWORD_ONLY:
                assert positional[i] == param.name, (name, param.name)
            assert (ours[param.name].default is param.empty) == (param.default is param.empty)
