"""Gradients of ``categorical_log_prob``'s custom JVP, checked numerically.

``jax.test_util.check_grads`` compares the JVP (forward mode) and its transpose (reverse
mode) with central finite differences, to first and second order, so a wrong closed-form
derivative (sign, a missing ``exp``, the wrong one-hot) fails here even where the values
are right.
"""

import jax
import numpy as np
import pytest
from jax.test_util import check_grads

from rljax.policies.sampling import SMALL_AXIS, categorical_log_prob


def _inputs(num_actions, shape=(3, 4), seed=0):
    k1, k2 = jax.random.split(jax.random.key(seed))
    logits = jax.random.normal(k1, (*shape, num_actions))
    actions = jax.random.randint(k2, shape, 0, num_actions)
    return logits, actions


@pytest.mark.parametrize("num_actions", [5, SMALL_AXIS + 3])  # both ``_pick`` paths
def test_check_grads_fwd_and_rev_orders_1_and_2(num_actions):
    logits, actions = _inputs(num_actions)
    f = lambda x: categorical_log_prob(x, actions)  # noqa: E731
    check_grads(f, (logits,), order=2, modes=("fwd", "rev"), eps=1e-2, atol=2e-2, rtol=2e-2)


def test_gradient_is_onehot_minus_softmax_and_matches_autodiff():
    """The closed form ``onehot(a) - softmax(logits)`` (numpy), and autodiff of
    ``jax.nn.log_softmax``, under jit and vmap."""
    logits, actions = _inputs(6, shape=(8,))
    grad = jax.jit(jax.vmap(jax.grad(categorical_log_prob)))(logits, actions)
    x = np.asarray(logits, np.float64)
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    expected = np.eye(6)[np.asarray(actions)] - p
    np.testing.assert_allclose(grad, expected, atol=1e-6)
    auto = jax.vmap(jax.grad(lambda z, a: jax.nn.log_softmax(z)[a]))(logits, actions)
    np.testing.assert_allclose(grad, auto, atol=1e-6)
    # forward mode along a random tangent agrees with the reverse-mode gradient
    tangent = jax.random.normal(jax.random.key(3), logits.shape)
    _, jvp = jax.jvp(lambda z: categorical_log_prob(z, actions), (logits,), (tangent,))
    np.testing.assert_allclose(jvp, np.sum(expected * np.asarray(tangent), -1), atol=1e-5)
