"""Action distributions against scipy.stats and closed forms (jit and vmap), the spaces they
support, and the Gaussian actor-critic / ``actor_critic_for``."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from rljax.envs import Box, CartPole, Discrete, from_gymnax
from rljax.policies import (
    actor_critic_for,
    categorical,
    check_supports,
    diagonal_gaussian,
    mlp_gaussian_actor_critic,
)
from rljax.policies.sampling import categorical_from_uniform

pytestmark = pytest.mark.timeout(300)

RNG = np.random.default_rng(0)


def _gaussian_params(batch=(5,), dim=3):
    mean = RNG.normal(size=(*batch, dim)).astype(np.float32)
    log_std = RNG.normal(scale=0.5, size=(*batch, dim)).astype(np.float32)
    x = (mean + np.exp(log_std) * RNG.normal(size=(*batch, dim))).astype(np.float32)
    return mean, log_std, x


@pytest.mark.parametrize("transform", ["jit", "vmap"])
def test_gaussian_log_prob_and_entropy_match_scipy(transform):
    dist = diagonal_gaussian(3)
    mean, log_std, x = _gaussian_params()
    want_lp = scipy.stats.norm.logpdf(x, mean, np.exp(log_std)).sum(-1)
    want_h = scipy.stats.norm(mean, np.exp(log_std)).entropy().sum(-1)
    if transform == "jit":
        lp = jax.jit(dist.log_prob)((mean, log_std), x)
        h = jax.jit(dist.entropy)((mean, log_std))
    else:
        lp = jax.vmap(lambda m, s, a: dist.log_prob((m, s), a))(mean, log_std, x)
        h = jax.vmap(lambda m, s: dist.entropy((m, s)))(mean, log_std)
    np.testing.assert_allclose(lp, want_lp, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-5)


def test_gaussian_samples_have_the_mean_and_std():
    dist = diagonal_gaussian(2)
    mean = jnp.array([1.0, -2.0])
    log_std = jnp.log(jnp.array([0.5, 2.0]))
    noise = dist.noise(jax.random.key(0), (20000,))
    assert noise.shape == (20000, 2)
    x = jax.jit(jax.vmap(lambda e: dist.sample(e, (mean, log_std))))(noise)
    np.testing.assert_allclose(np.mean(x, 0), mean, atol=0.05)
    np.testing.assert_allclose(np.std(x, 0), [0.5, 2.0], rtol=0.03)
    np.testing.assert_array_equal(dist.mode((mean, log_std)), mean)


@pytest.mark.parametrize("bounds", [(None, None), ((-2.0, 0.0), (2.0, 3.0))])
def test_tanh_squashed_log_prob_is_the_change_of_variables(bounds):
    low, high = bounds
    dist = diagonal_gaussian(2, tanh_squash=True, low=low, high=high)
    lo = np.array([-1.0, -1.0]) if low is None else np.array(low)
    hi = np.array([1.0, 1.0]) if high is None else np.array(high)
    center, scale = (hi + lo) / 2, (hi - lo) / 2
    mean, log_std, u = _gaussian_params(dim=2)
    a = jax.jit(dist.env_action)(u)
    # numpy reference: p(a) = N(u) / prod |da/du|, da/du = s (1 - tanh(u)^2)
    want = (scipy.stats.norm.logpdf(u, mean, np.exp(log_std))
            - np.log(scale * (1 - np.tanh(u.astype(np.float64)) ** 2))).sum(-1)
    got = jax.jit(dist.log_prob)((mean, log_std), u)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(a, center + scale * np.tanh(u), rtol=1e-6, atol=1e-6)
    # stable far in the tails, where 1 - tanh(u)^2 underflows in float32
    far = jax.jit(dist.log_prob)((jnp.zeros(2), jnp.zeros(2)), jnp.array([30.0, -30.0]))
    assert np.isfinite(far)
    np.testing.assert_allclose(
        far, scipy.stats.norm.logpdf([30.0, -30.0]).sum()
        - np.sum(np.log(scale) + 2 * (np.log(2) - 30.0 - np.log1p(np.exp(-60.0)))),
        rtol=1e-5)


def test_tanh_squashed_density_integrates_to_one_over_the_box():
    """The corrected density of the squashed action integrates to 1 over [low, high]; the
    uncorrected Gaussian density of atanh(a) does not."""
    dist = diagonal_gaussian(1, tanh_squash=True, low=-2.0, high=1.0)
    a = np.linspace(-2.0, 1.0, 200001)[1:-1]
    u = np.arctanh((a - (-0.5)) / 1.5)[:, None].astype(np.float32)
    params = (jnp.full((1,), 0.3), jnp.full((1,), math.log(0.3)))
    density = np.exp(np.asarray(jax.vmap(lambda x: dist.log_prob(params, x))(u), np.float64))
    np.testing.assert_allclose(np.trapezoid(density, a), 1.0, atol=2e-3)
    uncorrected = scipy.stats.norm.pdf(u[:, 0], 0.3, 0.3)
    assert abs(np.trapezoid(uncorrected, a) - 1.0) > 0.1


@pytest.mark.parametrize("transform", ["jit", "vmap"])
def test_categorical_matches_scipy_and_keeps_the_uniform_sampler(transform):
    dist = categorical()
    logits = RNG.normal(size=(6, 4)).astype(np.float32)
    actions = RNG.integers(0, 4, size=6).astype(np.int32)
    p = scipy.special.softmax(logits.astype(np.float64), axis=-1)
    if transform == "jit":
        lp, h = jax.jit(dist.log_prob)(logits, actions), jax.jit(dist.entropy)(logits)
    else:
        lp = jax.vmap(dist.log_prob)(logits, actions)
        h = jax.vmap(dist.entropy)(logits)
    np.testing.assert_allclose(lp, np.log(p[np.arange(6), actions]), rtol=1e-5)
    np.testing.assert_allclose(h, scipy.stats.entropy(p, axis=-1), rtol=1e-5)
    u = dist.noise(jax.random.key(3), (6,))
    np.testing.assert_array_equal(jax.random.uniform(jax.random.key(3), (6,)), u)
    np.testing.assert_array_equal(dist.sample(u, logits), categorical_from_uniform(u, logits))


def test_supports_and_one_line_errors():
    assert categorical().supports(Discrete(3))
    assert not categorical().supports(Box(-1, 1, (2,)))
    assert diagonal_gaussian(2).supports(Box(-1, 1, (2,)))
    assert diagonal_gaussian(2).supports(Box(-np.inf, np.inf, (2,)))
    assert not diagonal_gaussian(2).supports(Box(-1, 1, (3,)))
    assert not diagonal_gaussian(2).supports(Discrete(2))
    assert not diagonal_gaussian(2, tanh_squash=True).supports(Box(-np.inf, np.inf, (2,)))
    with pytest.raises(ValueError, match=r"^Pendulum: action space .* categorical .*Discrete"):
        check_supports(categorical(), Box(-2, 2, (1,)), "Pendulum")
    with pytest.raises(ValueError, match="action_dim"):
        diagonal_gaussian(0)
    with pytest.raises(ValueError, match="low/high"):
        diagonal_gaussian(1, low=-1.0, high=1.0)
    with pytest.raises(ValueError, match="low/high"):
        diagonal_gaussian(1, tanh_squash=True, low=1.0, high=-1.0)


def test_gaussian_actor_critic_has_a_state_independent_log_std():
    net = mlp_gaussian_actor_critic(2, (8,), log_std_init=-0.5)
    params = jax.jit(net.init)(jax.random.key(0), jnp.zeros(3))
    (mean, log_std), value = net.apply(params, jnp.asarray(RNG.normal(size=(5, 3)), jnp.float32))
    assert mean.shape == log_std.shape == (5, 2) and value.shape == (5,)
    np.testing.assert_array_equal(log_std, np.full((5, 2), -0.5, np.float32))
    assert params["actor"]["params"]["log_std"].shape == (2,)
    grads = jax.grad(lambda p: net.distribution.log_prob(
        net.apply(p, jnp.ones((1, 3)))[0], jnp.ones((1, 2))).sum())(params)
    assert np.all(np.asarray(grads["actor"]["params"]["log_std"]) != 0)
    batched = jax.vmap(net.init, in_axes=(0, None))(jax.random.split(jax.random.key(1), 3),
                                                     jnp.zeros(3))
    assert batched["actor"]["params"]["log_std"].shape == (3, 2)


def test_softplus_scale_is_state_dependent_and_matches_a_numpy_forward():
    net = mlp_gaussian_actor_critic(2, (8,), scale="softplus", activation="relu")
    params = jax.jit(net.init)(jax.random.key(0), jnp.zeros(3))
    assert "log_std" not in params["actor"]["params"]
    obs = np.asarray(RNG.normal(size=(5, 3)), np.float32)
    (mean, log_std), _ = jax.jit(net.apply)(params, obs)
    # numpy reference: torso h = relu(x W0 + b0), head [mean | pre] = h W1 + b1,
    # std = softplus(pre) + 0.001 (gymnax-blines' GaussianSeparateMLP)
    layers = params["actor"]["params"]["MLP_0"]
    w0, b0 = (np.asarray(layers["Dense_0"][k], np.float64) for k in ("kernel", "bias"))
    w1, b1 = (np.asarray(layers["Dense_1"][k], np.float64) for k in ("kernel", "bias"))
    out = np.maximum(obs @ w0 + b0, 0.0) @ w1 + b1
    np.testing.assert_allclose(mean, out[:, :2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.exp(log_std), np.log1p(np.exp(out[:, 2:])) + 0.001,
                               rtol=1e-5)
    assert np.ptp(np.asarray(log_std), axis=0).min() > 0  # varies with the state
    # its log-prob is scipy's normal with that state's scale, under vmap over params
    action = np.asarray(RNG.normal(size=(5, 2)), np.float32)
    batched = jax.vmap(lambda p: net.distribution.log_prob(net.apply(p, obs)[0], action))(
        jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), params))
    expected = scipy.stats.norm(out[:, :2], np.exp(np.asarray(log_std, np.float64))).logpdf(
        action).sum(axis=1)
    np.testing.assert_allclose(batched[1], expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="^scale: must be one of parameter, softplus"):
        mlp_gaussian_actor_critic(2, scale="exp")


def test_actor_critic_for_picks_the_head_from_the_spaces():
    assert actor_critic_for(CartPole()).distribution.name == "categorical"
    pendulum = from_gymnax("Pendulum-v1")
    assert actor_critic_for(pendulum).distribution.name == "gaussian"
    squashed = actor_critic_for(pendulum, tanh_squash=True).distribution
    assert squashed.name == "tanh_gaussian"
    np.testing.assert_allclose(squashed.env_action(jnp.array([100.0])), [2.0])
    with pytest.raises(ValueError, match=r"^Catch-bsuite: .*\[10, 5\].*FlattenObservation"):
        actor_critic_for(from_gymnax("Catch-bsuite"))
