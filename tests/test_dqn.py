"""DQN / double DQN against a slow numpy loop: TD targets, loss, gradient, the target
network's hard and Polyak updates, truncation vs termination (tiny shapes, one compile
per test)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.algorithms import DQNState, TransitionBatch, dqn

B, D, A, S = 8, 3, 4, 3
GAMMA = 0.9


def linear_q(params, obs):
    return obs @ params["w"] + params["b"]


def random_case(seed, with_discount):
    rng = np.random.default_rng(seed)
    params = {"w": rng.normal(size=(D, A)).astype(np.float32),
              "b": rng.normal(size=A).astype(np.float32)}
    target = {"w": rng.normal(size=(D, A)).astype(np.float32),
              "b": rng.normal(size=A).astype(np.float32)}
    batch = TransitionBatch(
        obs=rng.normal(size=(B, D)).astype(np.float32),
        actions=rng.integers(0, A, B).astype(np.int32),
        rewards=rng.normal(size=B).astype(np.float32),
        terminated=np.arange(B) % 3 == 0,
        next_obs=rng.normal(size=(B, D)).astype(np.float32),
        discount=(GAMMA ** rng.integers(1, 4, B)).astype(np.float32) if with_discount else None)
    return params, target, batch


def reference(params, target, batch, double_q, huber, delta=1.0):
    """A loop over transitions: target, per-sample loss and its gradient in (w, b)."""
    loss, grad_w, grad_b, selections_differ = 0.0, np.zeros((D, A)), np.zeros(A), False
    for i in range(B):
        q = batch.obs[i] @ params["w"] + params["b"]
        next_online = batch.next_obs[i] @ params["w"] + params["b"]
        next_target = batch.next_obs[i] @ target["w"] + target["b"]
        a_star = int(np.argmax(next_online if double_q else next_target))
        selections_differ |= np.argmax(next_online) != np.argmax(next_target)
        discount = GAMMA if batch.discount is None else batch.discount[i]
        bootstrap = 0.0 if batch.terminated[i] else discount * next_target[a_star]
        y = batch.rewards[i] + bootstrap
        td = q[batch.actions[i]] - y
        if huber:
            loss += 0.5 * td ** 2 if abs(td) <= delta else delta * (abs(td) - 0.5 * delta)
            dl = np.clip(td, -delta, delta)
        else:
            loss += 0.5 * td ** 2
            dl = td
        grad_w[:, batch.actions[i]] += dl * batch.obs[i] / B
        grad_b[batch.actions[i]] += dl / B
    return loss / B, grad_w, grad_b, selections_differ


@pytest.mark.parametrize("double_q,huber,with_discount", [(True, True, False),
                                                          (False, False, True)])
def test_loss_and_grads_match_the_numpy_loop_under_jit_vmap(double_q, huber, with_discount):
    cases = [random_case(seed, with_discount) for seed in range(S)]
    params, target, batch = jax.tree.map(lambda *xs: np.stack(xs), *cases)
    rl = dqn(linear_q, gamma=GAMMA, double_q=double_q,
             loss="huber" if huber else "squared", target_update_period=100)

    def one_seed(p, t, b):
        state = DQNState(target_params=t, count=jnp.zeros((), jnp.int32))
        return rl.update(p, state, b)

    grads, _, metrics = jax.jit(jax.vmap(one_seed))(params, target, batch)
    differ = False
    for s, (p, t, b) in enumerate(cases):
        loss, gw, gb, d = reference(p, t, b, double_q, huber)
        differ |= d
        np.testing.assert_allclose(metrics["loss"][s], loss, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(grads["w"][s], gw, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(grads["b"][s], gb, rtol=1e-5, atol=1e-6)
    assert differ  # the cases tell double-Q from target argmax


def test_truncated_is_bootstrapped_terminated_is_not():
    """A time-limit truncation is a transition with terminated=False whose next_obs is the
    cut observation: its target bootstraps; a termination's target is the reward alone."""
    params = {"w": jnp.zeros((1, 2)), "b": jnp.zeros(2)}
    target = {"w": jnp.array([[1.0, 3.0]]), "b": jnp.zeros(2)}
    rl = dqn(linear_q, gamma=GAMMA, loss="squared", double_q=False)
    state = DQNState(target_params=target, count=jnp.zeros((), jnp.int32))
    batch = TransitionBatch(obs=jnp.zeros((2, 1)), actions=jnp.zeros(2, jnp.int32),
                            rewards=jnp.array([1.0, 1.0]), terminated=jnp.array([False, True]),
                            next_obs=jnp.array([[2.0], [2.0]]))
    _, aux = jax.jit(rl.loss)(params, state, batch)
    # Q(s, a) = 0; targets 1 + 0.9 * 6 (truncated: max target Q of next_obs) and 1
    np.testing.assert_allclose(aux.metrics["target"], (1 + GAMMA * 6.0 + 1.0) / 2, rtol=1e-6)
    np.testing.assert_allclose(aux.metrics["loss"], ((1 + GAMMA * 6.0) ** 2 + 1.0) / 4,
                               rtol=1e-6)


@pytest.mark.parametrize("period,tau", [(3, 1.0), (1, 0.25)])
def test_target_network_updates_by_hand(period, tau):
    """Update k (0-based) first moves the target towards the params it is computed at (those
    after update k - 1's step) when k > 0 and k % period == 0, uses it, and returns it."""
    rl = dqn(linear_q, gamma=GAMMA, target_update_period=period, tau=tau)
    params0 = {"w": jnp.ones((D, A)), "b": jnp.zeros(A)}
    batch = random_case(0, False)[2]

    def run(params0):
        def body(carry, k):
            state = carry
            params = jax.tree.map(lambda x: x + k.astype(jnp.float32), params0)
            _, state, metrics = rl.update(params, state, batch)
            return state, (state.target_params, metrics)
        return jax.lax.scan(body, rl.init(params0), jnp.arange(7))

    state, (targets, metrics) = jax.jit(run)(params0)
    expected = {"w": np.ones((D, A)), "b": np.zeros(A)}  # init copies the params
    for k in range(7):
        params = {"w": np.ones((D, A)) + k, "b": np.zeros(A) + k}
        if k > 0 and k % period == 0:
            expected = {n: (1 - tau) * expected[n] + tau * params[n] for n in expected}
        np.testing.assert_allclose(targets["w"][k], expected["w"], rtol=1e-6)
        assert metrics["target_updated"][k] == float(k > 0 and k % period == 0)
        # update k's TD targets already read the target it moved (the sources' order)
        loss, *_ = reference(params, expected, batch, True, True)
        np.testing.assert_allclose(metrics["loss"][k], loss, rtol=1e-5)
    assert int(state.count) == 7


def test_init_copies_params_and_bad_arguments_are_refused():
    params = {"w": jnp.ones((D, A)), "b": jnp.zeros(A)}
    state = dqn(linear_q).init(params)
    assert int(state.count) == 0
    np.testing.assert_array_equal(state.target_params["w"], params["w"])
    for kwargs, name in [({"loss": "l1"}, "loss"), ({"gamma": 1.5}, "gamma"),
                         ({"tau": 0.0}, "tau"), ({"target_update_period": 0},
                                                 "target_update_period"),
                         ({"huber_delta": 0.0}, "huber_delta")]:
        with pytest.raises(ValueError, match=name):
            dqn(linear_q, **kwargs)
