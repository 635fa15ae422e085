"""Group advantages, process-supervision advantages and GAE vs numpy loops."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.advantages import (
    generalized_advantage_estimation,
    group_mean_advantages,
    group_relative_advantages,
    leave_one_out_advantages,
    make_group_advantage,
    process_supervision_advantages,
)

GROUPS = np.array([[1, 0, 0, 1], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1], [0.3, 2.0, -1.0, 0.5]],
                  np.float32)


def np_group_relative(r, ddof=0, eps=1e-6):
    out = np.zeros_like(r)
    for i, row in enumerate(r):
        if row.max() == row.min():
            continue
        out[i] = (row - row.mean()) / (row.std(ddof=ddof) + eps)
    return out


@pytest.mark.parametrize("ddof", [0, 1])
def test_group_relative_vs_numpy(ddof):
    got = jax.jit(lambda r: group_relative_advantages(r, ddof=ddof))(GROUPS)
    np.testing.assert_allclose(got, np_group_relative(GROUPS, ddof), rtol=1e-5, atol=1e-6)
    # vmap over an extra seed axis
    got2 = jax.vmap(lambda r: group_relative_advantages(r, ddof=ddof))(GROUPS[None])
    np.testing.assert_allclose(got2[0], got, rtol=1e-6)


def test_group_mean_and_loo_vs_numpy():
    got_mean = jax.jit(group_mean_advantages)(GROUPS)
    got_loo = jax.jit(jax.vmap(leave_one_out_advantages))(GROUPS)
    for i, row in enumerate(GROUPS):
        np.testing.assert_allclose(got_mean[i], row - row.mean(), rtol=1e-5, atol=1e-6)
        loo = np.array([row[j] - np.delete(row, j).mean() for j in range(len(row))])
        np.testing.assert_allclose(got_loo[i], loo, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn", [group_relative_advantages, group_mean_advantages,
                                leave_one_out_advantages])
@pytest.mark.parametrize("value", [0.0, 1.0, 3.3e7, -1.7e9, 123456.789])
def test_equal_rewards_give_exactly_zero_in_float32(fn, value):
    r = jnp.full((3, 8), value, jnp.float32)
    got = np.asarray(jax.jit(fn)(r))
    assert np.all(got == 0.0) and not np.any(np.isnan(got))


def test_nan_reward_is_not_hidden():
    r = jnp.array([[1.0, np.nan, 0.0, 1.0]])
    for fn in (group_relative_advantages, group_mean_advantages, leave_one_out_advantages):
        assert np.isnan(np.asarray(fn(r))).any()


def test_group_errors():
    with pytest.raises(ValueError, match="group size"):
        group_relative_advantages(jnp.ones((3, 1)))
    with pytest.raises(ValueError, match="advantage"):
        make_group_advantage("median")
    with pytest.raises(ValueError, match="ddof"):
        make_group_advantage("group_relative", ddof=2)


def test_process_supervision_vs_numpy():
    rng = np.random.default_rng(0)
    g, k, t = 3, 4, 10
    rewards = rng.normal(size=(g, k)).astype(np.float32)
    ends = np.sort(rng.integers(0, t, size=(g, k)), axis=1)
    mask = np.ones((g, k), np.float32)
    mask[2, 3] = 0
    got = jax.jit(lambda a, b, c: process_supervision_advantages(a, b, c, t))(rewards, ends, mask)
    valid = rewards[mask > 0]
    norm = (rewards - valid.mean()) / (valid.std() + 1e-6)
    expected = np.zeros((g, t), np.float32)
    for i in range(g):
        for tok in range(t):
            expected[i, tok] = sum(norm[i, j] for j in range(k) if mask[i, j] and ends[i, j] >= tok)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    same = process_supervision_advantages(jnp.ones((2, 3)), jnp.zeros((2, 3), jnp.int32),
                                          jnp.ones((2, 3)), 4)
    assert np.all(np.asarray(same) == 0.0)


def np_gae(rewards, values, last_value, term, trunc, trunc_values, gamma, lam):
    T = len(rewards)
    adv = np.zeros(T)
    next_adv = 0.0
    for t in reversed(range(T)):
        if t == T - 1:
            next_v = last_value
        else:
            next_v = values[t + 1]
        if trunc[t]:
            next_v = trunc_values[t] if trunc_values is not None else 0.0
        delta = rewards[t] + gamma * (1 - term[t]) * next_v - values[t]
        done = term[t] or trunc[t]
        next_adv = delta + gamma * lam * (1 - done) * next_adv
        adv[t] = next_adv
    return adv


@pytest.mark.parametrize("with_trunc_values", [False, True])
def test_gae_matches_reverse_loop(with_trunc_values):
    rng = np.random.default_rng(1)
    T, N = 12, 3
    rewards = rng.normal(size=(T, N)).astype(np.float32)
    values = rng.normal(size=(T, N)).astype(np.float32)
    last = rng.normal(size=(N,)).astype(np.float32)
    term = rng.random((T, N)) < 0.15
    trunc = (rng.random((T, N)) < 0.1) & ~term
    tv = rng.normal(size=(T, N)).astype(np.float32) if with_trunc_values else None

    def f(r, v, lv, te, tr, tvals):
        return generalized_advantage_estimation(r, v, lv, te, gamma=0.99, lam=0.95,
                                                truncated=tr, truncation_values=tvals)

    # vmap over envs (time is the leading axis inside each env)
    adv, ret = jax.jit(jax.vmap(f, in_axes=(1, 1, 0, 1, 1, None if tv is None else 1),
                                out_axes=1))(rewards, values, last, term, trunc, tv)
    for n in range(N):
        expected = np_gae(rewards[:, n], values[:, n], last[n], term[:, n], trunc[:, n],
                          None if tv is None else tv[:, n], 0.99, 0.95)
        np.testing.assert_allclose(adv[:, n], expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ret, np.asarray(adv) + values, rtol=1e-6)


def test_gae_bad_gamma_lambda():
    z = jnp.zeros(3)
    with pytest.raises(ValueError, match="gamma"):
        generalized_advantage_estimation(z, z, z[0], z > 0, gamma=1.5, lam=0.9)
    with pytest.raises(ValueError, match="lambda"):
        generalized_advantage_estimation(z, z, z[0], z > 0, gamma=0.9, lam=-0.1)
