"""Recurrent PPO: the GRU actor-critic, the masked memory task, the trainer and the study."""

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from helpers.study_runs import run_study

from experiments import recurrent_ppo as study
from rljax.config import ConfigError
from rljax.envs import CartPole
from rljax.envs.masked import MaskObservation, masked_cartpole
from rljax.nonfinite import NONFINITE_STEP
from rljax.policies import diagonal_gaussian, mlp_actor_critic
from rljax.policies.recurrent import gru_actor_critic
from rljax.training.ppo import PPOTrainConfig
from rljax.training.recurrent_ppo import (
    make_recurrent_ppo_train,
    recurrent_ppo_first_batch,
    sequence_apply,
)

pytestmark = pytest.mark.timeout(300)

H, D, A = 8, 3, 4


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def numpy_step(params, h, obs, reset):
    """The module docstring's formulas in numpy, one step: ``(h', logits, value)``."""
    p = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float64), params["params"])
    dense = lambda name, x: x @ p[name]["kernel"] + p[name].get("bias", 0.0)  # noqa: E731
    g = p["gru"]
    lin = lambda name, x: x @ g[name]["kernel"] + g[name].get("bias", 0.0)  # noqa: E731
    h = np.where(np.asarray(reset)[..., None], 0.0, np.asarray(h, np.float64))
    x = np.tanh(dense("embed", np.asarray(obs, np.float64)))
    r = _sigmoid(lin("ir", x) + lin("hr", h))
    z = _sigmoid(lin("iz", x) + lin("hz", h))
    n = np.tanh(lin("in", x) + r * lin("hn", h))
    h = (1.0 - z) * n + z * h
    logits = dense("actor_head", np.tanh(dense("actor_torso", h)))
    value = dense("critic_head", np.tanh(dense("critic_torso", h)))[..., 0]
    return h, logits, value


def _scaled(net, scale=3.0):
    """The net with every parameter multiplied by ``scale`` at init: a policy that depends
    strongly on its hidden state, so misaligned states show in the log-probabilities."""
    return net._replace(init=lambda key, obs: jax.tree_util.tree_map(
        lambda x: scale * x, net.init(key, obs)))


def _sequence_inputs(key, batch=3, steps=7):
    k_obs, k_h, k_reset = jax.random.split(key, 3)
    obs = 2.0 * jax.random.normal(k_obs, (batch, steps, D))
    h0 = jax.random.normal(k_h, (batch, H))
    resets = jax.random.bernoulli(k_reset, 0.3, (batch, steps))
    return h0, obs, resets


def test_gru_step_matches_numpy_formula():
    net = gru_actor_critic(A, H, actor_head_gain=1.0)
    params = net.init(jax.random.key(0), jnp.zeros((D,)))
    h0, obs, resets = _sequence_inputs(jax.random.key(1))
    h, (logits, value) = jax.jit(net.apply)(params, h0, obs[:, 0], resets[:, 0])
    h_ref, logits_ref, value_ref = numpy_step(params, h0, obs[:, 0], resets[:, 0])
    np.testing.assert_allclose(h, h_ref, atol=1e-5)
    np.testing.assert_allclose(logits, logits_ref, atol=1e-5)
    np.testing.assert_allclose(value, value_ref, atol=1e-5)
    assert h.shape == (3, H) and logits.shape == (3, A) and value.shape == (3,)


def test_sequence_equals_loop_of_steps_with_resets():
    net = gru_actor_critic(A, H, actor_head_gain=1.0)
    params = net.init(jax.random.key(0), jnp.zeros((D,)))
    h0, obs, resets = _sequence_inputs(jax.random.key(2))
    resets = resets.at[:, 3].set(True)  # at least one reset inside every sequence
    logits, values = jax.jit(net.apply_sequence)(params, h0, obs, resets)
    assert logits.shape == (3, 7, A) and values.shape == (3, 7)
    h, h_np = h0, np.asarray(h0, np.float64)
    for t in range(obs.shape[1]):
        h, (step_logits, step_value) = net.apply(params, h, obs[:, t], resets[:, t])
        h_np, logits_np, value_np = numpy_step(params, h_np, obs[:, t], resets[:, t])
        np.testing.assert_allclose(logits[:, t], step_logits, atol=1e-6)
        np.testing.assert_allclose(values[:, t], step_value, atol=1e-6)
        np.testing.assert_allclose(logits[:, t], logits_np, atol=1e-4)
        np.testing.assert_allclose(values[:, t], value_np, atol=1e-4)


def test_reset_zeroes_the_state():
    net = gru_actor_critic(A, H, actor_head_gain=1.0)
    params = net.init(jax.random.key(0), jnp.zeros((D,)))
    h0, obs, _ = _sequence_inputs(jax.random.key(3))
    zero = net.initial_state((3,))
    assert zero.shape == (3, H) and not np.any(zero)
    # one step: a reset makes the carried state irrelevant, no reset keeps it relevant
    reset_out = net.apply(params, h0, obs[:, 0], jnp.ones(3, bool))
    fresh_out = net.apply(params, zero, obs[:, 0], jnp.zeros(3, bool))
    carried_out = net.apply(params, h0, obs[:, 0], jnp.zeros(3, bool))
    for a, b in zip(jax.tree_util.tree_leaves(reset_out), jax.tree_util.tree_leaves(fresh_out),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    assert np.max(np.abs(carried_out[1][0] - fresh_out[1][0])) > 1e-3
    # a sequence: from a reset at step k on, the outputs are a fresh sequence's on obs[k:]
    k = 4
    resets = jnp.zeros((3, 7), bool).at[:, k].set(True)
    logits, values = net.apply_sequence(params, h0, obs, resets)
    fresh_logits, fresh_values = net.apply_sequence(params, zero, obs[:, k:],
                                                    jnp.zeros((3, 7 - k), bool))
    np.testing.assert_allclose(logits[:, k:], fresh_logits, atol=1e-6)
    np.testing.assert_allclose(values[:, k:], fresh_values, atol=1e-6)
    assert np.max(np.abs(logits[:, k - 1] - fresh_logits[:, 0])) > 1e-3


def test_policy_under_vmap_and_gaussian_head():
    net = gru_actor_critic(2, H, distribution=diagonal_gaussian(2), log_std_init=-0.5)
    keys = jax.random.split(jax.random.key(0), 3)
    params = jax.jit(jax.vmap(net.init, in_axes=(0, None)))(keys, jnp.zeros((D,)))
    assert params["params"]["log_std"].shape == (3, 2)
    h0, obs, resets = _sequence_inputs(jax.random.key(4), batch=2, steps=5)
    (mean, log_std), values = jax.jit(jax.vmap(net.apply_sequence, in_axes=(0, None, None,
                                                                            None)))(
        params, h0, obs, resets)
    assert mean.shape == (3, 2, 5, 2) and log_std.shape == (3, 2, 5, 2)
    assert values.shape == (3, 2, 5)
    np.testing.assert_allclose(log_std, -0.5)
    one = jax.tree_util.tree_map(lambda x: x[1], params)
    (mean_1, _), values_1 = net.apply_sequence(one, h0, obs, resets)
    np.testing.assert_allclose(mean[1], mean_1, atol=1e-5)
    np.testing.assert_allclose(values[1], values_1, atol=1e-5)


def test_masked_cartpole():
    env, inner = masked_cartpole(max_steps_in_episode=5), CartPole(5)
    assert env.name == "MaskedCartPole" and env.observation_space().shape == (2,)
    key = jax.random.key(0)
    obs, state = env.reset(key)
    full, inner_state = inner.reset(key)
    np.testing.assert_array_equal(obs, full[jnp.array([0, 2])])
    for t in range(5):
        step_key = jax.random.fold_in(key, t)
        obs, state, reward, terminated, truncated, info = env.step(step_key, state, 1)
        full, inner_state, *_, inner_info = inner.step(step_key, inner_state, 1)
        np.testing.assert_array_equal(obs, full[jnp.array([0, 2])])
        np.testing.assert_array_equal(info["final_obs"], inner_info["final_obs"][jnp.array([0,
                                                                                            2])])
    assert bool(terminated or truncated)  # 5 pushes right end the 5-step episode


def _tiny_config(**overrides):
    fields = dict(num_envs=4, num_steps=16, total_steps=4 * 16 * 3, num_epochs=2,
                  num_minibatches=2)
    return PPOTrainConfig(**{**fields, **overrides})


def test_update_recomputes_the_rollout_log_probs():
    # Short episodes: several resets (terminations and truncations) inside each segment.
    env, net = masked_cartpole(max_steps_in_episode=6), _scaled(gru_actor_critic(2, H))
    config = _tiny_config()
    params, batch = recurrent_ppo_first_batch(env, net, config, jax.random.key(0))
    assert batch.obs.h0.shape == (4, H) and batch.obs.obs.shape == (4, 16, 2)
    assert batch.actions.shape == batch.obs.resets.shape == (4, 16)  # env-major
    resets = np.asarray(batch.obs.resets)
    assert resets[:, 0].all() and resets[:, 1:].sum(axis=1).min() >= 2
    dist_params, values = sequence_apply(net)(params, batch.obs)
    log_probs = net.distribution.log_prob(dist_params, batch.actions)
    np.testing.assert_allclose(log_probs, batch.old_log_probs, atol=1e-6)
    np.testing.assert_allclose(values, batch.old_values, atol=1e-6)
    # a state misaligned by one step, or no resets, gives other log-probs: the check bites
    shifted = batch.obs._replace(resets=jnp.roll(batch.obs.resets, 1, axis=1))
    ignored = batch.obs._replace(resets=jnp.zeros_like(batch.obs.resets))
    for wrong in (shifted, ignored):
        wrong_log_probs = net.distribution.log_prob(sequence_apply(net)(params, wrong)[0],
                                                    batch.actions)
        assert np.max(np.abs(wrong_log_probs - batch.old_log_probs)) > 1e-2


def test_train_on_policy_ratio_jit_vmap_over_seeds():
    # A vanishing learning rate keeps every minibatch of every epoch on-policy: the
    # update's recomputed log-probs must equal the rollout's (ratio 1, KL 0, no clipping).
    env, net = masked_cartpole(max_steps_in_episode=6), _scaled(gru_actor_critic(2, H))
    train = make_recurrent_ppo_train(env, net, _tiny_config(learning_rate=1e-12))
    logs = jax.jit(jax.vmap(train))(jax.random.split(jax.random.key(0), 2))
    expected = {"return_sum", "episodes", "loss", "policy_loss", "value_loss", "entropy",
                "clip_fraction", "approx_kl", NONFINITE_STEP}
    assert set(logs) == expected
    assert logs["return_sum"].shape == (2, 3) and logs["episodes"].dtype == jnp.int32
    np.testing.assert_array_equal(logs[NONFINITE_STEP], -1)
    for name in expected - {NONFINITE_STEP}:
        assert np.isfinite(np.asarray(logs[name])).all(), name
    assert np.max(np.asarray(logs["approx_kl"])) < 1e-9
    np.testing.assert_array_equal(logs["clip_fraction"], 0.0)
    assert np.all(np.asarray(logs["episodes"]) > 0)
    assert not np.array_equal(logs["value_loss"][0], logs["value_loss"][1])  # seeds differ


def test_bad_input():
    with pytest.raises(ValueError, match="^num_actions:"):
        gru_actor_critic(0)
    with pytest.raises(ValueError, match="^hidden_size:"):
        gru_actor_critic(2, hidden_size=0)
    with pytest.raises(ValueError, match="^distribution:"):
        gru_actor_critic(2, distribution="gaussian")
    with pytest.raises(ValueError, match="^actor_head_gain:"):
        gru_actor_critic(2, actor_head_gain=0.0)
    env = masked_cartpole()
    with pytest.raises(ValueError, match="^num_minibatches: must divide num_envs = 6"):
        make_recurrent_ppo_train(env, gru_actor_critic(2, H),
                                 _tiny_config(num_envs=6, num_minibatches=4))
    with pytest.raises(ValueError, match="^num_envs:"):
        make_recurrent_ppo_train(env, gru_actor_critic(2, H), _tiny_config(num_envs=0))
    with pytest.raises(ValueError, match="^net: needs initial_state"):
        make_recurrent_ppo_train(env, mlp_actor_critic(2), _tiny_config())
    with pytest.raises(ValueError, match="^MaskedCartPole: action space"):
        make_recurrent_ppo_train(env, gru_actor_critic(2, H, distribution=diagonal_gaussian(2)),
                                 _tiny_config())
    for keep in ((), (0, 0), (4,), (0.5,), None):
        with pytest.raises(ValueError, match="^keep:"):
            MaskObservation(CartPole(), keep)
    with pytest.raises(ConfigError, match="^num_minibatches: must divide num_envs"):
        study.Config(num_envs=6, num_minibatches=4).validate()
    with pytest.raises(ConfigError, match="^final_updates:"):
        study.Config(final_updates=10_000).validate()


@pytest.mark.slow  # end to end through the study (~10 s); the trainer is tested above
def test_study_tiny(tmp_path):
    out, s = run_study(tmp_path, "recurrent-ppo", "seeds=4", "total_steps=256",
                       "num_envs=4", "num_steps=16", "num_minibatches=2", "num_epochs=1",
                       "hidden_size=8", "curve_points=2", "final_updates=2",
                       "bootstrap_reps=50", block_size=4)
    for name in ("summary.json", "report.md", "results.parquet", "learning_curves.png",
                 "final_returns.png", "config.json"):
        assert (out / name).exists(), name
    for key in ("gru_final_iqm", "gru_final_mean", "ff_final_iqm", "ff_final_mean",
                "paired_difference", "curves", "timing", "param_count", "wall_seconds"):
        assert key in s, key
    d = s["paired_difference"]
    assert d["n"] == s["paired_seeds"] == 4 and d["low"] <= d["point"] <= d["high"]
    gru, ff = (np.asarray(s["final_return_per_seed"][arm]) for arm in ("gru", "ff"))
    np.testing.assert_allclose(d["point"], np.mean(gru - ff), rtol=1e-5)
    assert "coverage" in d["note"] and len(s["curves"]["gru"]["iqm"]) == 2
    frame = pd.read_parquet(out / "results.parquet")
    assert len(frame) == 2 * 4 * 4 and set(frame["arm"]) == {"gru", "ff"}
    assert "paired difference GRU - FF" in (out / "report.md").read_text()
