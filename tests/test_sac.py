"""SAC transform: the critic target, actor and temperature losses and their gradients
against a slow float64 numpy reference (change of variables by hand, critic gradients in
closed form, actor gradients by central differences), under jit and vmap over seeds;
terminated vs truncated bootstrapping; the Polyak target by hand; the fixed temperature;
the per-part optimizer; one-line refusals. Tiny shapes, each program compiled once."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.stats

from rljax.algorithms import SACBatch, SACState, sac, sac_optimizer
from rljax.policies import categorical, diagonal_gaussian

B, OBS, A, N = 6, 3, 2, 2
LOW, HIGH = np.array([-2.0, 0.0]), np.array([2.0, 3.0])
GAMMA, TAU = 0.9, 0.3
DIST = diagonal_gaussian(A, tanh_squash=True, low=LOW, high=HIGH)


def actor_fn(p, obs):
    return obs @ p["w_mean"], obs @ p["w_log_std"] - 0.5


def critic_fn(p, obs, action):
    return jnp.concatenate([obs, action], -1) @ p["w"] + p["b"]


RL = sac(actor_fn, critic_fn, distribution=DIST, discount=GAMMA, tau=TAU)
UPDATE = jax.jit(RL.update)


def make_problem(seed=0, terminated=(1.0, 0.0, 0.0, 0.0, 0.0, 1.0)):
    rng = np.random.default_rng(seed)
    f32 = lambda *shape: rng.normal(scale=0.5, size=shape).astype(np.float32)  # noqa: E731
    # critics of opposite slopes, so each is the minimum for some samples
    def twin():
        slope = np.array([[1.0], [-1.0]], np.float32) * f32(OBS + A)
        return slope + 0.3 * f32(N, OBS + A)

    params = {"actor": {"w_mean": f32(OBS, A), "w_log_std": f32(OBS, A)},
              "critic": {"w": twin(), "b": 0.1 * f32(N)},
              "log_alpha": np.float32(np.log(0.2))}
    state = SACState(target_critic={"w": twin(), "b": 0.1 * f32(N)})
    actions = (LOW + (HIGH - LOW) * rng.uniform(size=(B, A))).astype(np.float32)
    batch = SACBatch(obs=f32(B, OBS), actions=actions, rewards=f32(B), next_obs=f32(B, OBS),
                     terminated=np.asarray(terminated, np.float32))
    return params, state, batch


def noises(key):
    """The two noises SAC draws from ``key``: a' (target) and a~ (actor), ``[B, A]``."""
    target_key, actor_key = jax.random.split(key)
    return (np.asarray(jax.random.normal(target_key, (B, A)), np.float64),
            np.asarray(jax.random.normal(actor_key, (B, A)), np.float64))


def np_policy(actor, obs, eps):
    """Squashed sample a = c + s tanh(u), u = mean + std eps, and log pi(a) by the change
    of variables: log N(u) - sum log |da/du|, da/du = s (1 - tanh(u)^2)."""
    obs = np.asarray(obs, np.float64)
    mean = obs @ actor["w_mean"]
    log_std = obs @ actor["w_log_std"] - 0.5
    u = mean + np.exp(log_std) * eps
    center, scale = (HIGH + LOW) / 2, (HIGH - LOW) / 2
    log_pi = (scipy.stats.norm.logpdf(u, mean, np.exp(log_std))
              - np.log(scale * (1.0 - np.tanh(u) ** 2))).sum(-1)
    return center + scale * np.tanh(u), log_pi


def np_q(critic, obs, action):
    """``[N, B]``: each critic, one by one."""
    x = np.concatenate([np.asarray(obs, np.float64), action], -1)
    return np.stack([x @ np.asarray(critic["w"][j], np.float64) + critic["b"][j]
                     for j in range(N)])


def np_sac(params, state, batch, key, learn_temperature=True):
    """Losses, gradients and the new target in float64, one formula at a time."""
    p64 = jax.tree.map(lambda x: np.asarray(x, np.float64), params)
    eps_next, eps = noises(key)
    alpha = np.exp(p64["log_alpha"])
    target = jax.tree.map(lambda t, c: (1 - TAU) * np.asarray(t, np.float64) + TAU * c,
                          state.target_critic, p64["critic"])
    next_a, next_log_pi = np_policy(p64["actor"], batch.next_obs, eps_next)
    next_q = np_q(target, batch.next_obs, next_a)
    y = batch.rewards + GAMMA * (1 - batch.terminated) * (next_q.min(0) - alpha * next_log_pi)
    q = np_q(p64["critic"], batch.obs, batch.actions)
    critic_loss = 0.5 * np.sum(np.mean((q - y) ** 2, axis=1))
    x = np.concatenate([batch.obs, batch.actions], -1).astype(np.float64)
    critic_grad = {"w": (q - y) @ x / B, "b": np.mean(q - y, axis=1)}

    def actor_loss(actor):
        a, log_pi = np_policy(actor, batch.obs, eps)
        return np.mean(alpha * log_pi - np_q(p64["critic"], batch.obs, a).min(0)), log_pi

    loss_pi, log_pi = actor_loss(p64["actor"])
    actor_grad = {}
    for name, w in p64["actor"].items():   # central differences, float64
        grad = np.zeros_like(w)
        for idx in np.ndindex(w.shape):
            step = np.zeros_like(w)
            step[idx] = 1e-6
            hi = actor_loss({**p64["actor"], name: w + step})[0]
            lo = actor_loss({**p64["actor"], name: w - step})[0]
            grad[idx] = (hi - lo) / 2e-6
        actor_grad[name] = grad
    if learn_temperature:
        temperature_loss = np.mean(-p64["log_alpha"] * (log_pi - A))
        alpha_grad = -np.mean(log_pi - A)
    else:
        temperature_loss = alpha_grad = 0.0
    metrics = {"loss": critic_loss + loss_pi + temperature_loss, "critic_loss": critic_loss,
               "actor_loss": loss_pi, "temperature_loss": temperature_loss, "alpha": alpha,
               "entropy": -np.mean(log_pi), "q": np.mean(q), "target_q": np.mean(y)}
    grads = {"actor": actor_grad, "critic": critic_grad, "log_alpha": alpha_grad}
    picked = {"target": set(next_q.argmin(0)[batch.terminated == 0]),
              "actor": set(np_q(p64["critic"], batch.obs,
                                np_policy(p64["actor"], batch.obs, eps)[0]).argmin(0))}
    return grads, target, metrics, picked


def assert_close(got, want, rtol=2e-4, atol=2e-5):
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, rtol=rtol, atol=atol), got,
                 want)


def test_losses_gradients_and_target_match_numpy_under_jit_and_vmap_over_seeds():
    params, state, batch = make_problem()
    keys = jax.random.split(jax.random.key(7), 3)
    grads, new_state, metrics = jax.jit(jax.vmap(RL.update, in_axes=(None, None, None, 0)))(
        params, state, batch, keys)
    picked = {"target": set(), "actor": set()}
    for i in range(len(keys)):
        want_grads, want_target, want_metrics, chosen = np_sac(params, state, batch, keys[i])
        picked = {k: picked[k] | chosen[k] for k in picked}
        assert_close(jax.tree.map(lambda x, i=i: x[i], grads), want_grads)
        assert_close(jax.tree.map(lambda x, i=i: x[i], new_state.target_critic), want_target)
        assert_close({k: v[i] for k, v in metrics.items()}, want_metrics)
    # each critic is the minimum somewhere (the clipped double-Q target is exercised)
    assert picked == {"target": {0, 1}, "actor": {0, 1}}
    # the seeds draw different actions, so the losses differ
    assert np.unique(np.asarray(metrics["actor_loss"])).size == len(keys)
    # one seed alone under jit: the same numbers
    one = UPDATE(params, state, batch, keys[1])
    assert_close(one, jax.tree.map(lambda x: x[1], (grads, new_state, metrics)), 1e-5, 1e-6)


def test_terminated_is_not_bootstrapped_truncated_is():
    params, state, batch = make_problem(terminated=(1.0,) * B)
    key = jax.random.key(3)
    q = np_q(params["critic"], batch.obs, np.asarray(batch.actions, np.float64))
    # terminated everywhere: y = r, whatever s' is
    for next_obs in (batch.next_obs, batch.next_obs + 5.0):
        _, _, metrics = UPDATE(params, state, batch.replace(next_obs=next_obs), key)
        np.testing.assert_allclose(metrics["target_q"], np.mean(batch.rewards), rtol=1e-6)
        np.testing.assert_allclose(metrics["critic_loss"],
                                   0.5 * np.sum(np.mean((q - batch.rewards) ** 2, 1)),
                                   rtol=1e-5)
    # a time-limit truncation (terminated = 0) bootstraps from the real final obs
    truncated = batch.replace(terminated=np.zeros(B, np.float32))
    _, _, metrics = UPDATE(params, state, truncated, key)
    want = np_sac(params, state, truncated, key)[2]
    np.testing.assert_allclose(metrics["target_q"], want["target_q"], rtol=1e-5)
    assert abs(want["target_q"] - np.mean(batch.rewards)) > 0.01


def test_polyak_target_moves_toward_the_critics_each_update_by_hand():
    """Update k uses and returns T_k = (1 - tau) T_{k-1} + tau theta_k, T_0 = theta_0:
    the sources' order (gradient step, then Polyak with the new critics)."""
    params, _, batch = make_problem()
    opt = optax.sgd(0.5)
    state, opt_state = RL.init(params), opt.init(params)
    np.testing.assert_array_equal(state.target_critic["w"], params["critic"]["w"])
    target = jax.tree.map(lambda x: np.asarray(x, np.float64), params["critic"])
    for k in range(3):
        grads, state, _ = UPDATE(params, state, batch, jax.random.key(k))
        target = jax.tree.map(lambda t, c: (1 - TAU) * t + TAU * np.asarray(c, np.float64),
                              target, params["critic"])
        assert_close(state.target_critic, target, 1e-5, 1e-6)
        updates, opt_state = opt.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
    assert np.abs(target["w"] - np.asarray(params["critic"]["w"])).max() > 1e-2


def test_fixed_temperature_gives_log_alpha_no_gradient():
    params, state, batch = make_problem()
    key = jax.random.key(5)
    fixed = sac(actor_fn, critic_fn, distribution=DIST, discount=GAMMA, tau=TAU,
                learn_temperature=False)
    grads, _, metrics = jax.jit(fixed.update)(params, state, batch, key)
    want_grads, _, want_metrics, _ = np_sac(params, state, batch, key,
                                           learn_temperature=False)
    assert grads["log_alpha"] == 0.0 and metrics["temperature_loss"] == 0.0
    assert_close((grads, metrics), (want_grads, want_metrics))


def test_sac_optimizer_applies_one_optimizer_per_part():
    params, _, _ = make_problem()
    grads = jax.tree.map(lambda x: jnp.full(np.shape(x), 0.5), params)
    parts = {"actor": optax.sgd(1.0), "critic": optax.sgd(2.0), "log_alpha": optax.sgd(3.0)}
    opt = sac_optimizer(parts["actor"], parts["critic"], parts["log_alpha"])
    updates, _ = opt.update(grads, opt.init(params), params)
    for part, rate in (("actor", 1.0), ("critic", 2.0), ("log_alpha", 3.0)):
        assert_close(updates[part], jax.tree.map(lambda g, r=rate: -r * g, grads[part]))
    # one rate: the same as one optimizer over the whole tree
    same, _ = sac_optimizer(optax.sgd(1.0)).update(grads, opt.init(params), params)
    assert_close(same, jax.tree.map(lambda g: -g, grads))


def test_one_line_refusals():
    with pytest.raises(ValueError, match=r"^tau: must be a number in \[0, 1\], got 1.5$"):
        sac(actor_fn, critic_fn, tau=1.5)
    with pytest.raises(ValueError, match=r"^num_critics: must be an integer >= 1"):
        sac(actor_fn, critic_fn, num_critics=0)
    with pytest.raises(ValueError, match=r"^distribution: SAC needs a reparameterised"):
        sac(actor_fn, critic_fn, distribution=categorical())
    params, state, batch = make_problem()
    key = jax.random.key(0)
    wide = sac(actor_fn, lambda p, o, a: critic_fn(p, o, a)[:, None], distribution=DIST)
    with pytest.raises(ValueError, match=r"critic_fn .*<lambda>: must return q \[B\]"):
        jax.eval_shape(wide.loss, params, state, batch, key)
    three = sac(actor_fn, critic_fn, distribution=DIST, num_critics=3)
    with pytest.raises(ValueError, match=r"^params\['critic'\]: every leaf must lead"):
        jax.eval_shape(three.loss, params, state, batch, key)
    with pytest.raises(ValueError, match=r"^sac: loss/update need a key"):
        RL.loss(params, state, batch)
