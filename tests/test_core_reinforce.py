"""Baselines, returns, rollouts and the REINFORCE transform vs numpy references."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rljax.advantages import (
    discounted_returns,
    ema_baseline,
    group_mean_baseline,
    leave_one_out_baseline,
    make_baseline,
    no_baseline,
)
from rljax.algorithms import AS_OPTAX_UPDATES, EpisodeBatch, as_optax, reinforce
from rljax.envs import ChainMDP
from rljax.policies import tabular_softmax
from rljax.rollout import draw_uniforms_and_keys, episode_rollout


def test_ema_baseline_sequence_vs_numpy():
    baseline = ema_baseline(initial=0.5, rate=0.05)
    rewards = np.array([1.0, 0.0, 0.0, 1.0, 0.2], np.float32)

    def run(rs):
        def body(state, r):
            b, state = baseline.update(state, r[None])
            return state, b[0]

        return jax.lax.scan(body, baseline.init(), rs)[1]

    got = jax.jit(run)(rewards)
    b, expected = 0.5, []
    for r in rewards:
        expected.append(b)
        b = b + 0.05 * (r - b)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    # vmapped over seeds: each row is its own sequence
    batch = np.stack([rewards, rewards[::-1]])
    got2 = jax.jit(jax.vmap(run))(batch)
    np.testing.assert_allclose(got2[0], expected, rtol=1e-6)


def test_group_baselines_vs_numpy():
    r = np.array([[1.0, 0.0, 0.0, 1.0], [3.0, 1.0, 2.0, 2.0]], np.float32)
    for baseline, reference in [
        (no_baseline(), lambda x: np.zeros_like(x)),
        (group_mean_baseline(), lambda x: np.full_like(x, x.mean())),
        (leave_one_out_baseline(), lambda x: (x.sum() - x) / (len(x) - 1)),
    ]:
        got = jax.jit(jax.vmap(lambda x, b=baseline: b.update(b.init(), x)[0]))(r)
        for row, g in zip(r, np.asarray(got), strict=True):
            np.testing.assert_allclose(g, reference(row), rtol=1e-6)


def test_baseline_errors():
    with pytest.raises(ValueError, match="baseline: must be one of"):
        make_baseline("median")
    with pytest.raises(ValueError, match="rate"):
        ema_baseline(rate=0.0)
    with pytest.raises(ValueError, match=">= 2"):
        leave_one_out_baseline().update((), jnp.ones(1))


def test_discounted_returns_vs_reverse_loop():
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(3, 7)).astype(np.float32)
    mask = np.ones((3, 7), np.float32)
    mask[1, 5:] = 0
    for gamma in (0.0, 0.9, 1.0):
        got = jax.jit(jax.vmap(lambda r, m, g=gamma: discounted_returns(r, g, m)))(rewards, mask)
        expected = np.zeros_like(rewards)
        for i in range(3):
            g_next = 0.0
            for t in reversed(range(7)):
                g_next = mask[i, t] * (rewards[i, t] + gamma * g_next)
                expected[i, t] = g_next
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def classic_update(logits, obs, actions, returns, b, lr):
    """logit[s] += lr * (R - b) * (onehot(a) - pi(.|s)), every step of every episode,
    all computed from the pre-update logits, averaged over episodes."""
    new = logits.copy()
    num_episodes = obs.shape[0]
    for g in range(num_episodes):
        for t in range(obs.shape[1]):
            s, a = obs[g, t], actions[g, t]
            pi = np.exp(logits[s] - logits[s].max())
            pi /= pi.sum()
            onehot = np.eye(logits.shape[1])[a]
            new[s] += lr * (returns[g, t] - b[g]) * (onehot - pi) / num_episodes
    return new


@pytest.mark.parametrize("discount", [0.0, 1.0])
def test_reinforce_sgd_is_the_classic_update(discount):
    rng = np.random.default_rng(3)
    num_states, num_actions, groups, steps = 5, 3, 2, 5
    policy = tabular_softmax(num_states, num_actions)
    rl = reinforce(policy.apply, baseline=ema_baseline(0.5, 0.05), discount=discount)
    opt = optax.sgd(0.1)
    logits = rng.normal(size=(num_states, num_actions)).astype(np.float32)
    obs = np.tile(np.arange(steps), (groups, 1))
    actions = rng.integers(0, num_actions, size=(groups, steps))
    rewards = rng.integers(0, 2, size=(groups, steps)).astype(np.float32)
    batch = EpisodeBatch(obs=jnp.asarray(obs), actions=jnp.asarray(actions),
                         rewards=jnp.asarray(rewards), mask=jnp.ones((groups, steps)),
                         episode_reward=jnp.asarray(rewards.mean(1)))

    @jax.jit
    def step(params, batch):
        state = rl.init(params)
        grads, state, metrics = rl.update(params, state, batch, None)
        updates, _ = opt.update(grads, opt.init(params), params)
        return optax.apply_updates(params, updates), state, metrics

    new_params, state, metrics = step({"logits": jnp.asarray(logits)}, batch)
    returns = rewards if discount == 0.0 else np.cumsum(rewards[:, ::-1], 1)[:, ::-1]
    expected = classic_update(logits, obs, actions, returns, np.full(groups, 0.5), 0.1)
    np.testing.assert_allclose(new_params["logits"], expected, rtol=1e-5, atol=1e-6)
    # baseline moved once with the batch's mean episode reward
    np.testing.assert_allclose(state.baseline["value"],
                               0.5 + 0.05 * (rewards.mean() - 0.5), rtol=1e-6)
    assert np.isfinite(metrics["loss"])

    # the same under vmap over a seed axis of different params
    stacked = jnp.stack([jnp.asarray(logits), jnp.asarray(logits) * 2])
    vm = jax.jit(jax.vmap(lambda table: step({"logits": table}, batch)[0]["logits"]))(stacked)
    np.testing.assert_allclose(vm[0], expected, rtol=1e-5, atol=1e-6)
    expected2 = classic_update(logits * 2, obs, actions, returns, np.full(groups, 0.5), 0.1)
    np.testing.assert_allclose(vm[1], expected2, rtol=1e-5, atol=1e-6)


def test_reinforce_shape_mismatch_is_a_chex_error():
    policy = tabular_softmax(3, 2)
    rl = reinforce(policy.apply)
    params = policy.init(jax.random.key(0), None)
    bad = EpisodeBatch(obs=jnp.zeros((2, 4), jnp.int32), actions=jnp.zeros((2, 4), jnp.int32),
                       rewards=jnp.zeros((2, 3)), mask=jnp.ones((2, 4)),
                       episode_reward=jnp.zeros(2))
    with pytest.raises(AssertionError):
        rl.update(params, rl.init(params), bad, None)


def test_reinforce_bad_discount():
    with pytest.raises(ValueError, match="discount"):
        reinforce(lambda p, o: p, discount=1.5)


def test_as_optax_chain_equals_manual_sgd():
    """``chain(as_optax(rl), sgd)`` fed ``AS_OPTAX_UPDATES`` (under jit) == ``-lr *`` the
    classic gradient; the former idiom (``params`` as the updates) is refused. The optax
    wrappers and ``rl.loss`` are tests/test_optax_idiom.py."""
    policy = tabular_softmax(5, 2)
    rl = reinforce(policy.apply, baseline=no_baseline())
    params = {"logits": jnp.zeros((5, 2))}
    batch = EpisodeBatch(obs=jnp.arange(5)[None], actions=jnp.array([[1, 0, 1, 1, 0]]),
                         rewards=jnp.array([[0, 0, 0, 0, 1.0]]), mask=jnp.ones((1, 5)),
                         episode_reward=jnp.array([1.0]))
    tx = optax.chain(as_optax(rl), optax.sgd(0.1))
    state = tx.init(params)
    # the sentinel passes through jit as an argument (a pytree with no leaves)
    updates, _ = jax.jit(tx.update)(AS_OPTAX_UPDATES, state, params, batch=batch)
    # the classic update: logit[s] += lr * R * (onehot(a) - pi(.|s)), pi uniform, R = 1
    expected = 0.1 * (np.eye(2)[[1, 0, 1, 1, 0]] - 0.5)
    np.testing.assert_allclose(updates["logits"], expected, rtol=1e-6)
    with pytest.raises(ValueError, match="updates must be rljax.algorithms.AS_OPTAX_UPDATES"):
        tx.update(params, state, params, batch=batch)


def test_episode_rollout_on_the_chain():
    env = ChainMDP(5, "prm")
    policy = tabular_softmax(5, 2)
    params = {"logits": jnp.array([[-20.0, 20.0]] * 5)}  # always action 1
    traj = jax.jit(lambda k: episode_rollout(k, env, env.default_params, policy.apply, params,
                                             5, unroll=True))(jax.random.key(0))
    np.testing.assert_array_equal(traj.obs, np.arange(5))
    np.testing.assert_array_equal(traj.action, np.ones(5))
    np.testing.assert_array_equal(traj.reward, np.ones(5))
    np.testing.assert_array_equal(traj.terminated, [False] * 4 + [True])
    np.testing.assert_allclose(traj.info["correct_fraction"], np.arange(1, 6) / 5)
    # determinism: same key, same bits; and a vmapped batch matches the single runs
    uniform = {"logits": jnp.zeros((5, 2))}

    def roll(k):
        return episode_rollout(k, env, env.default_params, policy.apply, uniform, 5)

    keys = jax.random.split(jax.random.key(1), 8)
    batched = jax.jit(jax.vmap(roll))(keys)
    for i in range(8):
        np.testing.assert_array_equal(jax.jit(roll)(keys[i]).action, batched.action[i])


def test_draw_uniforms_and_keys():
    u, (k0, ks) = jax.jit(lambda k: draw_uniforms_and_keys(k, 1000, ((), (3,))))(
        jax.random.key(0))
    u = np.asarray(u)
    assert u.shape == (1000,) and u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.05
    data = np.asarray(jax.random.key_data(ks))
    assert ks.shape == (3,) and len({tuple(d) for d in data}) == 3
    assert k0.shape == ()
