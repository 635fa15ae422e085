"""PPO with a diagonal-Gaussian head: the transform's loss against a numpy reference on an
off-policy batch, the trainer's clip-in-the-env-step-only rule, and its one-line errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats
from helpers.force_echo import PointMass

from rljax.algorithms import PPOBatch, ppo
from rljax.envs import CartPole, from_gymnax
from rljax.policies import mlp_actor_critic, mlp_gaussian_actor_critic
from rljax.training import PPOTrainConfig, make_ppo_train
from rljax.training.ppo import policy_step

pytestmark = pytest.mark.timeout(300)


def _numpy_ppo_loss(mean, log_std, values, batch, clip, value_coef, entropy_coef):
    """Slow reference: normalised advantages, clipped surrogate, unclipped value loss, and
    the Gaussian entropy, all from scipy / numpy."""
    std = np.exp(log_std)
    logp = scipy.stats.norm.logpdf(batch["actions"], mean, std).sum(-1)
    ratio = np.exp(logp - batch["old_log_probs"])
    adv = batch["advantages"]
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    policy = np.mean(-np.minimum(ratio * adv, np.clip(ratio, 1 - clip, 1 + clip) * adv))
    value = np.mean(0.5 * (values - batch["returns"]) ** 2)
    entropy = np.mean(scipy.stats.norm(mean, std).entropy().sum(-1))
    return policy + value_coef * value - entropy_coef * entropy, ratio


@pytest.mark.parametrize("transform", ["jit", "vmap"])
def test_gaussian_ppo_loss_matches_numpy_off_policy(transform):
    net = mlp_gaussian_actor_critic(2, (8,), log_std_init=-0.3)
    params = net.init(jax.random.key(0), jnp.zeros(3))
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(16, 3)).astype(np.float32)
    (mean, log_std), values = net.apply(params, obs)
    actions = (np.asarray(mean) + rng.normal(size=(16, 2))).astype(np.float32)
    logp_now = scipy.stats.norm.logpdf(actions, mean, np.exp(log_std)).sum(-1)
    # an off-policy batch: the behaviour policy's log-probs differ by up to +-0.8, so many
    # ratios leave [0.8, 1.2] and the clip is exercised on both sides
    old = (logp_now + rng.uniform(-0.8, 0.8, size=16)).astype(np.float32)
    batch = {"actions": actions, "old_log_probs": old,
             "advantages": rng.normal(size=16).astype(np.float32),
             "returns": rng.normal(size=16).astype(np.float32),
             "old_values": np.asarray(values)}
    want, ratio = _numpy_ppo_loss(np.asarray(mean), np.asarray(log_std), np.asarray(values),
                                  batch, 0.2, 0.5, 0.01)
    assert np.mean(np.abs(ratio - 1) > 0.2) > 0.3
    rl = ppo(net.apply, clip_epsilon=0.2, value_coef=0.5, entropy_coef=0.01,
             distribution=net.distribution)
    ppo_batch = PPOBatch(obs=obs, **batch)
    if transform == "jit":
        _, _, metrics = jax.jit(rl.update)(params, rl.init(params), ppo_batch)
        np.testing.assert_allclose(metrics["loss"], want, rtol=1e-4, atol=1e-5)
    else:  # a seed axis of two copies of the batch
        stacked = jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), (params, ppo_batch))
        _, _, metrics = jax.vmap(lambda p, b: rl.update(p, rl.init(p), b))(*stacked)
        np.testing.assert_allclose(metrics["loss"], [want, want], rtol=1e-4, atol=1e-5)


def test_the_categorical_default_is_not_a_gaussian():
    """A Gaussian head's batch scored by the default (categorical) transform fails loudly
    instead of producing a number: the distribution argument matters."""
    net = mlp_gaussian_actor_critic(1, (4,))
    params = net.init(jax.random.key(0), jnp.zeros(2))
    batch = PPOBatch(obs=jnp.zeros((4, 2)), actions=jnp.zeros((4, 1)),
                     old_log_probs=jnp.zeros(4), advantages=jnp.ones(4), returns=jnp.zeros(4),
                     old_values=jnp.zeros(4))
    with pytest.raises(Exception):  # noqa: B017 - any shape/type error will do
        ppo(net.apply).update(params, None, batch)


def _point_mass_run(num_epochs=1, log_std_init=1.5, total_updates=2):
    env = PointMass()
    net = mlp_gaussian_actor_critic(1, (8,), log_std_init=log_std_init)
    config = PPOTrainConfig(num_envs=4, num_steps=12, total_steps=48 * total_updates,
                            num_epochs=num_epochs, num_minibatches=1, learning_rate=1e-3)
    return jax.jit(make_ppo_train(env, net, config))(jax.random.key(0))


def test_actions_are_clipped_in_the_env_step_and_scored_unclipped():
    logs = _point_mass_run()
    # std e^1.5 ~ 4.5 against a box of +-0.1: nearly every sample is clipped, so the
    # per-step reward (the force the env received) stays inside the box ...
    per_episode = np.asarray(logs["return_sum"]) / np.maximum(np.asarray(logs["episodes"]), 1)
    assert np.all(np.abs(per_episode) <= 6 * 0.1 + 1e-6)
    assert np.all(np.asarray(logs["episodes"]) > 0)
    # ... while the stored sample is the raw one: with one epoch of one minibatch the loss
    # is evaluated at the rollout's parameters, so every ratio is exactly 1 (scoring the
    # clipped action instead would give ratios far from 1 at this std).
    np.testing.assert_allclose(logs["approx_kl"][0], 0.0, atol=1e-6)
    np.testing.assert_array_equal(logs["clip_fraction"][0], 0.0)


def test_gaussian_ppo_on_pendulum_runs_finitely_under_vmap():
    env = from_gymnax("Pendulum-v1")
    net = mlp_gaussian_actor_critic(1, (16,))
    config = PPOTrainConfig(num_envs=4, num_steps=50, total_steps=4 * 50 * 4, num_epochs=2,
                            num_minibatches=2)
    logs = jax.jit(jax.vmap(make_ppo_train(env, net, config)))(
        jax.random.split(jax.random.key(0), 2))
    assert logs["loss"].shape == (2, 4)
    assert np.all(np.isfinite(np.asarray(logs["loss"])))
    assert np.all(np.asarray(logs["nonfinite_step"]) == -1)
    assert int(np.sum(logs["episodes"])) == 2 * 4  # one 200-step episode per env and seed
    per_episode = np.sum(logs["return_sum"]) / np.sum(logs["episodes"])
    assert -1800 < per_episode < -500  # a random Pendulum policy's range


def test_one_line_errors_name_the_env():
    with pytest.raises(ValueError, match=r"^PointMass: action space Box.* categorical"):
        make_ppo_train(PointMass(), mlp_actor_critic(2), PPOTrainConfig())
    with pytest.raises(ValueError, match=r"^CartPole: action space Discrete\(2\).* gaussian"):
        make_ppo_train(CartPole(), mlp_gaussian_actor_critic(2), PPOTrainConfig())
    with pytest.raises(ValueError, match=r"^Catch-bsuite: .*\[10, 5\].*FlattenObservation"):
        make_ppo_train(from_gymnax("Catch-bsuite"), mlp_actor_critic(3), PPOTrainConfig())


def test_policy_step_stores_and_scores_the_raw_sample():
    net = mlp_gaussian_actor_critic(1, (8,), log_std_init=1.5)
    params = net.init(jax.random.key(0), jnp.zeros(1))
    obs = jnp.linspace(-1, 1, 32)[:, None]
    noise = net.distribution.noise(jax.random.key(1), (32,))
    action, log_prob, value, to_env = jax.jit(
        lambda p, o, u: policy_step(net.apply, net.distribution, PointMass().action_space(),
                                    p, o, u))(params, obs, noise)
    dist_params, want_value = net.apply(params, obs)
    assert np.mean(np.abs(np.asarray(action)) > 0.1) > 0.5  # most samples leave the box
    np.testing.assert_array_equal(to_env, np.clip(action, -0.1, 0.1))
    np.testing.assert_allclose(log_prob, net.distribution.log_prob(dist_params, action),
                               rtol=1e-6)
    assert not np.allclose(log_prob, net.distribution.log_prob(dist_params, to_env))
    np.testing.assert_allclose(value, want_value, rtol=1e-5, atol=1e-6)


def test_env_step_refuses_an_action_of_the_wrong_shape_or_dtype():
    env = PointMass()
    _, state = env.reset(jax.random.key(0))
    env.step(jax.random.key(1), state, jnp.zeros(1))  # the right action passes
    with pytest.raises(ValueError, match=r"^PointMass: action must be a float array of shape "
                                         r"\[1\] \(Box\), got shape \[2\]"):
        jax.jit(env.step)(jax.random.key(1), state, jnp.zeros(2))
    with pytest.raises(ValueError, match=r"^PointMass: .* dtype int32"):
        env.step(jax.random.key(1), state, jnp.zeros(1, jnp.int32))
    _, cart = CartPole().reset(jax.random.key(0))
    with pytest.raises(ValueError, match=r"^CartPole: action must be an integer scalar \[\]"):
        CartPole().step(jax.random.key(1), cart, jnp.float32(1.0))
