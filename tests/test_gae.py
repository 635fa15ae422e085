"""GAE against a reverse Python loop, with terminated / truncated masks, under jit and vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.advantages import generalized_advantage_estimation


def python_gae(rewards, values, last_value, terminated, truncated, truncation_values, gamma,
               lam):
    """The textbook recursion, one environment, one step at a time, float64.

    At step t the next state's value is V(s_{t+1}) -- ``values[t+1]``, or ``last_value``
    after the last step -- except that a terminated step has none (0) and a truncated
    step bootstraps from ``truncation_values[t]`` (the cut episode's final observation);
    the advantage recursion restarts at every episode end.
    """
    num_steps = len(rewards)
    advantages = np.zeros(num_steps)
    next_advantage = 0.0
    for t in reversed(range(num_steps)):
        if terminated[t]:
            next_value = 0.0
        elif truncated[t]:
            next_value = truncation_values[t]
        else:
            next_value = values[t + 1] if t + 1 < num_steps else last_value
        delta = rewards[t] + gamma * next_value - values[t]
        done = terminated[t] or truncated[t]
        next_advantage = delta + (0.0 if done else gamma * lam * next_advantage)
        advantages[t] = next_advantage
    return advantages, advantages + np.asarray(values, np.float64)


def random_rollout(seed, num_steps=24, num_envs=3):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(num_steps, num_envs)).astype(np.float32)
    values = rng.normal(size=(num_steps, num_envs)).astype(np.float32)
    last_value = rng.normal(size=(num_envs,)).astype(np.float32)
    terminated = rng.random((num_steps, num_envs)) < 0.15
    truncated = (rng.random((num_steps, num_envs)) < 0.1) & ~terminated
    truncated[3, 0] = terminated[3, 0] = True  # both at once: the termination wins
    truncation_values = rng.normal(size=(num_steps, num_envs)).astype(np.float32)
    return rewards, values, last_value, terminated, truncated, truncation_values


@pytest.mark.parametrize("gamma, lam", [(0.99, 0.95), (0.9, 1.0), (0.0, 0.5), (1.0, 0.0)])
def test_gae_matches_reverse_loop_under_jit(gamma, lam):
    r, v, last, term, trunc, tv = random_rollout(0)

    @jax.jit
    def gae(r, v, last, term, trunc, tv):
        return generalized_advantage_estimation(r, v, last, term, gamma=gamma, lam=lam,
                                                truncated=trunc, truncation_values=tv)

    adv, ret = gae(r, v, last, term, trunc, tv)
    assert adv.shape == ret.shape == r.shape
    for n in range(r.shape[1]):
        exp_adv, exp_ret = python_gae(r[:, n], v[:, n], last[n], term[:, n], trunc[:, n],
                                      tv[:, n], gamma, lam)
        np.testing.assert_allclose(adv[:, n], exp_adv, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ret[:, n], exp_ret, rtol=1e-5, atol=1e-5)


def test_gae_under_vmap_over_seeds():
    rollouts = [random_rollout(seed) for seed in range(4)]
    stacked = [np.stack(x) for x in zip(*rollouts, strict=True)]

    def gae(r, v, last, term, trunc, tv):
        return generalized_advantage_estimation(r, v, last, term, gamma=0.99, lam=0.95,
                                                truncated=trunc, truncation_values=tv)

    adv, _ = jax.jit(jax.vmap(gae))(*stacked)
    for s, (r, v, last, term, trunc, tv) in enumerate(rollouts):
        for n in range(r.shape[1]):
            expected, _ = python_gae(r[:, n], v[:, n], last[n], term[:, n], trunc[:, n],
                                     tv[:, n], 0.99, 0.95)
            np.testing.assert_allclose(adv[s, :, n], expected, rtol=1e-5, atol=1e-5)


def test_truncation_without_values_is_not_bootstrapped():
    r, v, last, term, trunc, _ = random_rollout(1)
    adv, _ = generalized_advantage_estimation(r, v, last, term, gamma=0.99, lam=0.95,
                                              truncated=trunc)
    zeros = np.zeros_like(v)
    for n in range(r.shape[1]):
        expected, _ = python_gae(r[:, n], v[:, n], last[n], term[:, n], trunc[:, n],
                                 zeros[:, n], 0.99, 0.95)
        np.testing.assert_allclose(adv[:, n], expected, rtol=1e-5, atol=1e-5)


def test_lambda_one_is_monte_carlo_return_minus_value():
    rewards = jnp.array([1.0, 2.0, 3.0])
    values = jnp.array([0.5, 0.25, 0.125])
    adv, ret = generalized_advantage_estimation(rewards, values, jnp.float32(10.0),
                                                jnp.zeros(3, bool), gamma=0.5, lam=1.0)
    expected_returns = [1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 10, 2 + 0.5 * 3 + 0.25 * 10,
                        3 + 0.5 * 10]
    np.testing.assert_allclose(ret, expected_returns, rtol=1e-6)
    np.testing.assert_allclose(adv, np.array(expected_returns) - values, rtol=1e-6)


def test_nan_reward_propagates():
    r, v, last, term, trunc, tv = random_rollout(2)
    r = r.copy()
    r[10, 1] = np.nan
    adv, ret = jax.jit(lambda *a: generalized_advantage_estimation(
        *a[:4], gamma=0.99, lam=0.95, truncated=a[4], truncation_values=a[5]))(
        r, v, last, term, trunc, tv)
    assert np.isnan(adv[10, 1]) and np.isnan(ret[10, 1])
    assert np.all(np.isfinite(np.asarray(adv)[11:, 1]))
    assert np.all(np.isfinite(np.asarray(adv)[:, [0, 2]]))


def test_errors():
    z = jnp.zeros((3, 2))
    with pytest.raises(ValueError, match="gamma"):
        generalized_advantage_estimation(z, z, z[0], z > 0, gamma=1.01, lam=0.9)
    with pytest.raises(ValueError, match="lambda"):
        generalized_advantage_estimation(z, z, z[0], z > 0, gamma=0.9, lam=1.5)
    with pytest.raises(AssertionError, match=r"\(3, 2\).*\(4, 2\)|\(4, 2\).*\(3, 2\)"):
        generalized_advantage_estimation(z, jnp.zeros((4, 2)), z[0], z > 0, gamma=0.9,
                                         lam=0.9)
