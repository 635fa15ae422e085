"""Tabular softmax policy and categorical sampling vs numpy references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.policies import (
    categorical_from_uniform,
    categorical_log_prob,
    sample_categorical,
    tabular_softmax,
)
from rljax.policies.sampling import log_softmax


def test_tabular_apply_is_a_table_lookup():
    policy = tabular_softmax(4, 3, init_scale=1.0)
    params = policy.init(jax.random.key(0), None)
    obs = jnp.array([[0, 3], [2, 2]])
    logits = jax.jit(policy.apply)(params, obs)
    np.testing.assert_array_equal(logits, np.asarray(params["logits"])[np.asarray(obs)])
    zero = tabular_softmax(4, 3).init(jax.random.key(0), None)
    np.testing.assert_array_equal(zero["logits"], np.zeros((4, 3)))


def test_tabular_bad_sizes():
    with pytest.raises(ValueError, match="num_states"):
        tabular_softmax(0, 2)
    with pytest.raises(ValueError, match="num_actions"):
        tabular_softmax(2, 0)


@pytest.mark.parametrize("num_actions", [2, 5, 20])
def test_log_softmax_matches_jax(num_actions):
    logits = jax.random.normal(jax.random.key(num_actions), (7, num_actions)) * 5
    np.testing.assert_allclose(jax.jit(log_softmax)(logits), jax.nn.log_softmax(logits),
                               rtol=1e-6, atol=1e-6)
    # gradients agree too
    g1 = jax.grad(lambda x: jnp.sum(jnp.sin(log_softmax(x))))(logits)
    g2 = jax.grad(lambda x: jnp.sum(jnp.sin(jax.nn.log_softmax(x))))(logits)
    np.testing.assert_allclose(g1, g2, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("num_actions", [2, 4, 20])
def test_categorical_from_uniform_is_inverse_cdf(num_actions):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(50, num_actions)).astype(np.float32)
    u = rng.uniform(size=50).astype(np.float32)
    got = jax.jit(jax.vmap(categorical_from_uniform))(u, logits)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    for i in range(50):  # smallest k with u < F_k, clipped to the last class
        expected = min(int(np.searchsorted(np.cumsum(p[i]), u[i], side="right")), num_actions - 1)
        assert int(got[i]) == expected


def test_sample_categorical_frequencies():
    probs = np.array([0.4, 0.3, 0.2, 0.1])
    logits = jnp.log(jnp.asarray(probs, jnp.float32))
    keys = jax.random.split(jax.random.key(0), 40_000)
    actions = jax.jit(jax.vmap(sample_categorical, in_axes=(0, None)))(keys, logits)
    freq = np.bincount(np.asarray(actions), minlength=4) / 40_000
    se = np.sqrt(probs * (1 - probs) / 40_000)
    assert np.all(np.abs(freq - probs) < 5 * se)


def test_categorical_log_prob_vs_numpy():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(3, 6, 4)).astype(np.float32)
    actions = rng.integers(0, 4, size=(3, 6))
    got = jax.jit(jax.vmap(categorical_log_prob))(logits, actions)
    lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = np.take_along_axis(lp, actions[..., None], -1)[..., 0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_sample_masked_never_picks_invalid_and_greedy_is_masked_argmax():
    from rljax.policies import sample_masked

    logits = jnp.array([5.0, 0.0, 1.0, -2.0])
    mask = jnp.array([False, True, True, True])
    assert int(sample_masked(jax.random.key(0), logits, mask, 0.0)) == 2
    keys = jax.random.split(jax.random.key(1), 4000)
    draws = np.asarray(jax.jit(jax.vmap(lambda k: sample_masked(k, logits, mask, 1.0)))(keys))
    assert not np.any(draws == 0)
    p = np.exp([0.0, 1.0, -2.0]) / np.exp([0.0, 1.0, -2.0]).sum()
    freq = np.bincount(draws, minlength=4)[1:] / 4000
    assert np.all(np.abs(freq - p) < 5 * np.sqrt(p * (1 - p) / 4000))
