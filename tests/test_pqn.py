"""PQN's Q(lambda) returns and loss against a slow numpy backward loop (purejaxql's
recursion, with PPO's truncation bootstrapping), under jit and vmap; tiny shapes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.algorithms import PQNBatch, pqn, q_lambda_returns, q_lambda_targets

T, B, D, A, S = 6, 2, 3, 4, 3
GAMMA, LAM = 0.9, 0.5


def linear_q(params, obs):
    return obs @ params["w"] + params["b"]


def reference_returns(rewards, max_q, last_max_q, term, trunc, trunc_q, gamma, lam):
    """G_t = r_t + gamma (1 - term_t) [V' + lam (1 - done_t) (G_{t+1} - V')], V' = max Q of
    the next observation (of final_obs at a truncation, 0 there without it)."""
    returns = np.zeros_like(rewards, dtype=np.float64)
    for b in range(rewards.shape[1]):
        for t in reversed(range(rewards.shape[0])):
            v_next = last_max_q[b] if t == T - 1 else max_q[t + 1, b]
            g_next = last_max_q[b] if t == T - 1 else returns[t + 1, b]
            if trunc[t, b]:
                v_next = 0.0 if trunc_q is None else trunc_q[t, b]
            done = term[t, b] or trunc[t, b]
            returns[t, b] = rewards[t, b] + gamma * (1 - term[t, b]) * (
                v_next + lam * (1 - done) * (g_next - v_next))
    return returns


def random_rollout(seed):
    rng = np.random.default_rng(seed)
    flags = rng.integers(0, 5, (T, B))
    return PQNBatch(obs=rng.normal(size=(T, B, D)).astype(np.float32),
                    actions=rng.integers(0, A, (T, B)).astype(np.int32),
                    rewards=rng.normal(size=(T, B)).astype(np.float32),
                    terminated=flags == 0, last_obs=rng.normal(size=(B, D)).astype(np.float32),
                    truncated=flags == 1,
                    final_obs=rng.normal(size=(T, B, D)).astype(np.float32))


def test_q_lambda_returns_match_the_backward_loop_under_jit_vmap():
    rng = np.random.default_rng(0)
    rewards, max_q, trunc_q = (rng.normal(size=(S, T, B)).astype(np.float32) for _ in range(3))
    last = rng.normal(size=(S, B)).astype(np.float32)
    flags = rng.integers(0, 4, (S, T, B))
    term, trunc = flags == 0, flags == 1
    assert term.any() and trunc.any()

    def returns(r, q, last, te, tr, tq):
        return q_lambda_returns(r, q, last, te, gamma=GAMMA, lam=LAM, truncated=tr,
                                truncation_max_q=tq)

    got = jax.jit(jax.vmap(returns))(rewards, max_q, last, term, trunc, trunc_q)
    no_final = jax.jit(jax.vmap(returns))(rewards, max_q, last, term, trunc, None)
    for s in range(S):
        np.testing.assert_allclose(got[s], reference_returns(
            rewards[s], max_q[s], last[s], term[s], trunc[s], trunc_q[s], GAMMA, LAM),
            rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(no_final[s], reference_returns(
            rewards[s], max_q[s], last[s], term[s], trunc[s], None, GAMMA, LAM),
            rtol=1e-5, atol=1e-5)


def test_pqn_loss_and_grads_match_numpy_under_jit_vmap():
    rng = np.random.default_rng(1)
    params = {"w": rng.normal(size=(S, D, A)).astype(np.float32),
              "b": rng.normal(size=(S, A)).astype(np.float32)}
    batches = [random_rollout(s) for s in range(S)]
    batch = jax.tree.map(lambda *xs: np.stack(xs), *batches)
    rl = pqn(linear_q, gamma=GAMMA, lam=LAM)
    grads, _, metrics = jax.jit(jax.vmap(lambda p, b: rl.update(p, rl.init(p), b)))(params,
                                                                                   batch)
    for s, bt in enumerate(batches):
        w, b = params["w"][s], params["b"][s]
        q = bt.obs @ w + b
        targets = reference_returns(
            bt.rewards, q.max(-1), (bt.last_obs @ w + b).max(-1), bt.terminated, bt.truncated,
            (bt.final_obs @ w + b).max(-1), GAMMA, LAM)
        q_taken = np.take_along_axis(q, bt.actions[..., None], -1)[..., 0]
        td = q_taken - targets
        grad_w, grad_b = np.zeros((D, A)), np.zeros(A)
        for t in range(T):
            for e in range(B):
                grad_w[:, bt.actions[t, e]] += td[t, e] * bt.obs[t, e] / (T * B)
                grad_b[bt.actions[t, e]] += td[t, e] / (T * B)
        np.testing.assert_allclose(metrics["loss"][s], 0.5 * np.mean(td ** 2), rtol=1e-5)
        np.testing.assert_allclose(metrics["target"][s], targets.mean(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(grads["w"][s], grad_w, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(grads["b"][s], grad_b, rtol=1e-4, atol=1e-6)


def test_precomputed_targets_on_a_flat_minibatch_give_the_same_loss():
    """purejaxql's recipe: targets fixed once per rollout, then minibatches of any shape."""
    rng = np.random.default_rng(2)
    params = {"w": rng.normal(size=(D, A)).astype(np.float32),
              "b": rng.normal(size=A).astype(np.float32)}
    batch = random_rollout(3)
    rl = pqn(linear_q, gamma=GAMMA, lam=LAM)

    @jax.jit
    def both(params, batch):
        targets = q_lambda_targets(linear_q, params, batch, gamma=GAMMA, lam=LAM)
        flat = PQNBatch(obs=batch.obs.reshape(T * B, D), actions=batch.actions.reshape(-1),
                        targets=targets.reshape(-1))
        return rl.loss(params, (), batch)[0], rl.loss(params, (), flat)[0]

    rollout_loss, flat_loss = both(params, batch)
    np.testing.assert_allclose(flat_loss, rollout_loss, rtol=1e-6)


def test_targets_from_given_max_q_match_the_reference_under_jit_vmap():
    """q_lambda_targets(max_q=...) uses the given max_a Q(s_t, a) instead of a forward pass
    over batch.obs: against the numpy loop fed the same values (random ones, so a target
    that ignored them and recomputed Q would fail), under jit and a vmap over rollouts."""
    rng = np.random.default_rng(5)
    params = {"w": rng.normal(size=(D, A)).astype(np.float32),
              "b": rng.normal(size=A).astype(np.float32)}
    batches = [random_rollout(10 + i) for i in range(S)]
    given = rng.normal(size=(S, T, B)).astype(np.float32)
    stacked = jax.tree.map(lambda *xs: np.stack(xs), *batches)
    got = jax.jit(jax.vmap(lambda b, m: q_lambda_targets(linear_q, params, b, gamma=GAMMA,
                                                         lam=LAM, max_q=m)))(stacked, given)
    for i, b in enumerate(batches):
        last = (b.last_obs @ params["w"] + params["b"]).max(-1)
        trunc_q = (b.final_obs @ params["w"] + params["b"]).max(-1)
        want = reference_returns(b.rewards, given[i], last, b.terminated, b.truncated,
                                 trunc_q, GAMMA, LAM)
        np.testing.assert_allclose(got[i], want, rtol=1e-5, atol=1e-5)


def test_max_q_of_the_wrong_shape_is_a_one_line_error():
    batch = random_rollout(4)
    params = {"w": np.zeros((D, A), np.float32), "b": np.zeros(A, np.float32)}
    with pytest.raises(ValueError, match=r"^max_q: must be \[T, B\] = \(6, 2\) like the "
                       r"rewards, got shape \(6, 2, 4\)$"):
        q_lambda_targets(linear_q, params, batch, gamma=GAMMA, lam=LAM,
                         max_q=np.zeros((T, B, A), np.float32))


def test_bad_arguments_are_refused():
    for kwargs, name in [({"gamma": -0.1}, "gamma"), ({"lam": 1.5}, "lam")]:
        with pytest.raises(ValueError, match=name):
            pqn(linear_q, **kwargs)
    with pytest.raises(ValueError, match="last_obs"):
        q_lambda_targets(linear_q, {"w": jnp.zeros((D, A)), "b": jnp.zeros(A)},
                         PQNBatch(obs=jnp.zeros((T, B, D)), actions=jnp.zeros((T, B), int)),
                         gamma=GAMMA, lam=LAM)
