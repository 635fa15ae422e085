"""Losses vs numpy / closed forms, under jit and vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax import losses


def np_clipped(lp, old, adv, lo, hi, dual=None):
    r = np.exp(lp - old)
    obj = np.minimum(r * adv, np.clip(r, 1 - lo, 1 + hi) * adv)
    if dual is not None:
        obj = np.where(adv < 0, np.maximum(obj, dual * adv), obj)
    return -obj


@pytest.mark.parametrize("lo, hi, dual", [(0.2, None, None), (0.2, 0.28, None), (0.2, 0.2, 3.0)])
def test_clipped_surrogate_vs_numpy(lo, hi, dual):
    rng = np.random.default_rng(0)
    lp = rng.normal(size=(4, 6)).astype(np.float32) * 0.5 - 1
    old = lp + rng.normal(size=(4, 6)).astype(np.float32) * 0.5
    adv = rng.normal(size=(4, 6)).astype(np.float32)

    def f(a, b, c):
        return losses.clipped_surrogate_loss(a, b, c, epsilon_low=lo, epsilon_high=hi,
                                             dual_clip=dual)

    got, metrics = jax.jit(jax.vmap(f))(lp, old, adv)
    expected = np_clipped(lp, old, adv, lo, lo if hi is None else hi, dual)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    r = np.exp(lp - old)
    frac = (np.clip(r, 1 - lo, 1 + (lo if hi is None else hi)) * adv < r * adv).mean(1)
    np.testing.assert_allclose(metrics["clip_fraction"], frac, rtol=1e-6)
    np.testing.assert_allclose(metrics["approx_kl"], ((r - 1) - np.log(r)).mean(1), rtol=1e-4)


def test_ppo_clip_examples():
    # (A=+1, r=1.5) -> objective 1.2; (A=-1, r=0.5) -> -0.8; (A=-1, r=1.5) -> -1.5
    adv = jnp.array([1.0, -1.0, -1.0])
    ratio = jnp.array([1.5, 0.5, 1.5])
    loss, _ = losses.clipped_surrogate_loss(jnp.log(ratio), jnp.zeros(3), adv)
    np.testing.assert_allclose(-loss, [1.2, -0.8, -1.5], rtol=1e-6)


def test_clipped_gradient_is_zero_outside_the_trust_region():
    grad = jax.grad(lambda lp: jnp.sum(losses.clipped_surrogate_loss(
        lp, jnp.zeros(2), jnp.array([1.0, -1.0]))[0]))(jnp.log(jnp.array([1.5, 0.5])))
    np.testing.assert_allclose(grad, [0.0, 0.0])


def test_policy_gradient_loss_gradient():
    lp = jnp.array([-1.0, -2.0])
    adv = jnp.array([0.5, -1.0])
    g = jax.grad(lambda x: jnp.sum(losses.policy_gradient_loss(x, adv)))(lp)
    np.testing.assert_allclose(g, -adv)


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_estimators_closed_form_and_unbiasedness(estimator):
    lp = jnp.array([-0.5, -1.0, -2.0])
    ref = jnp.array([-0.7, -1.0, -1.5])
    log_rho = np.asarray(ref - lp)
    expected = {"k1": -log_rho, "k2": 0.5 * log_rho**2, "k3": np.exp(log_rho) - 1 - log_rho}
    got = jax.jit(jax.vmap(lambda a, b: losses.kl_penalty(a, b, estimator)))(lp[None], ref[None])
    np.testing.assert_allclose(got[0], expected[estimator], rtol=1e-5, atol=1e-7)


def test_k1_k3_are_unbiased_for_true_kl():
    p = np.array([0.4, 0.3, 0.2, 0.1])
    q = np.array([0.25, 0.25, 0.25, 0.25])
    kl = float(np.sum(p * np.log(p / q)))
    lp, ref = jnp.log(jnp.asarray(p)), jnp.log(jnp.asarray(q))
    for est in ("k1", "k3"):  # exact expectation over a ~ p
        value = float(jnp.sum(jnp.asarray(p) * losses.kl_penalty(lp, ref, est)))
        assert value == pytest.approx(kl, rel=1e-5)


def test_gspo_sequence_ratio_and_gradient():
    lp = jnp.array([[-1.0, -2.0, -3.0]])
    old = jnp.array([[-1.5, -2.0, -2.0]])
    mask = jnp.array([[1.0, 1.0, 0.0]])
    s = losses.sequence_importance_ratio(lp, old, mask)
    np.testing.assert_allclose(s, np.full((1, 3), np.exp(0.25)), rtol=1e-6)
    g = jax.grad(lambda x: losses.sequence_importance_ratio(x, old, mask)[0, 0])(lp)
    np.testing.assert_allclose(g, [[np.exp(0.25) / 2, np.exp(0.25) / 2, 0.0]], rtol=1e-6)
    loss, _ = losses.gspo_loss(lp, old, jnp.array([1.0]), mask, epsilon_low=0.2,
                               epsilon_high=0.2)
    np.testing.assert_allclose(loss, -np.minimum(np.exp(0.25), 1.2) * np.ones((1, 3)),
                               rtol=1e-6)


def test_value_loss_clipping_vs_numpy():
    v = jnp.array([1.0, 2.0, 0.0])
    ret = jnp.array([0.0, 2.5, 1.0])
    old = jnp.array([0.5, 1.0, 0.5])
    got = losses.value_loss(v, ret, old, 0.2)
    clipped = np.asarray(old) + np.clip(np.asarray(v - old), -0.2, 0.2)
    expected = 0.5 * np.maximum((np.asarray(v - ret)) ** 2, (clipped - np.asarray(ret)) ** 2)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    np.testing.assert_allclose(losses.value_loss(v, ret), 0.5 * np.asarray(v - ret) ** 2)
    with pytest.raises(ValueError, match="old_values"):
        losses.value_loss(v, ret, clip_epsilon=0.2)


def test_entropy_vs_numpy():
    logits = jnp.log(jnp.array([[0.4, 0.3, 0.2, 0.1], [0.25] * 4]))
    p = np.array([[0.4, 0.3, 0.2, 0.1], [0.25] * 4])
    np.testing.assert_allclose(jax.jit(losses.categorical_entropy)(logits),
                               -(p * np.log(p)).sum(1), rtol=1e-6)


def test_aggregation_modes_vs_numpy():
    loss = np.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 0.0, 0.0]], np.float32)
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], np.float32)
    expected = {
        "token-mean": (1 + 2 + 3 + 4 + 5 + 6) / 6,
        "sequence-mean-token-mean": (10 / 4 + 11 / 2) / 2,
        "sequence-mean-token-sum": (10 + 11) / 2,
        "sequence-mean-token-sum-norm": 21 / (2 * 4),
    }
    for mode, value in expected.items():
        got = jax.jit(lambda a, b, m=mode: losses.aggregate_loss(a, b, m))(loss, mask)
        assert float(got) == pytest.approx(value), mode
    vm = jax.vmap(lambda a, b: losses.aggregate_loss(a, b, "token-mean"))(loss[None], mask[None])
    assert float(vm[0]) == pytest.approx(expected["token-mean"])


def test_bad_arguments():
    with pytest.raises(ValueError, match="aggregation"):
        losses.aggregate_loss(jnp.ones((1, 2)), jnp.ones((1, 2)), "mean")
    with pytest.raises(ValueError, match="kl_estimator"):
        losses.kl_penalty(jnp.ones(2), jnp.ones(2), "k4")
    with pytest.raises(ValueError, match="clip_epsilon"):
        losses.check_clip(0.0)
    with pytest.raises(ValueError, match="clip_epsilon_high"):
        losses.check_clip(0.2, 0.1)
    with pytest.raises(AssertionError):
        losses.clipped_surrogate_loss(jnp.ones(3), jnp.ones(2), jnp.ones(3))
