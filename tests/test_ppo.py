"""PPO transform: loss and metrics vs a slow numpy reference, gradients vs autodiff of an
independent jnp loss, under jit and vmap; build-time validation; shape errors; NaN;
composition with optax; a short CartPole training run; the chunked run (ChunkedSweep)
against the whole run (Sweep); the first non-finite update."""

import shutil
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rljax.algorithms import PPOBatch, multi_step_update, ppo
from rljax.checkpoint import Checkpointer
from rljax.envs import CartPole, ChainMDP
from rljax.nonfinite import NONFINITE_STEP
from rljax.policies import mlp_actor_critic
from rljax.sweep import ChunkedSweep, Sweep
from rljax.training import PPOTrainConfig, make_ppo_chunks, make_ppo_train

AC = mlp_actor_critic(3, (8, 8))


def make_batch(seed, size=32, spread=0.3):
    rng = np.random.default_rng(seed)
    params = AC.init(jax.random.key(seed), jnp.zeros(4))
    obs = rng.normal(size=(size, 4)).astype(np.float32)
    logits, values = AC.apply(params, obs)
    actions = rng.integers(0, 3, size).astype(np.int32)
    log_pi = np.asarray(jax.nn.log_softmax(logits))[np.arange(size), actions]
    batch = PPOBatch(
        obs=obs, actions=actions,
        old_log_probs=(log_pi + rng.normal(scale=spread, size=size)).astype(np.float32),
        advantages=rng.normal(size=size).astype(np.float32),
        returns=(np.asarray(values) + rng.normal(size=size)).astype(np.float32),
        old_values=(np.asarray(values) + rng.normal(scale=0.3, size=size)).astype(np.float32),
    )
    return params, batch


def numpy_mlp(params, obs):
    p = params["params"]
    x = np.asarray(obs, np.float64)
    for i in range(len(p)):
        x = x @ np.asarray(p[f"Dense_{i}"]["kernel"], np.float64) + np.asarray(
            p[f"Dense_{i}"]["bias"], np.float64)
        if i < len(p) - 1:
            x = np.tanh(x)
    return x


def numpy_ppo_loss(params, batch, eps=0.2, value_clip=None, vc=0.5, ec=0.01, normalise=True):
    """PPO's loss, one sample at a time, float64."""
    logits = numpy_mlp(params["actor"], batch.obs)
    values = numpy_mlp(params["critic"], batch.obs)[:, 0]
    adv = np.asarray(batch.advantages, np.float64)
    if normalise:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pol, val, ent, clipped, kl = [], [], [], [], []
    for i in range(len(adv)):
        z = logits[i] - logits[i].max()
        log_p = z - np.log(np.exp(z).sum())
        ratio = np.exp(log_p[batch.actions[i]] - batch.old_log_probs[i])
        unclipped, clip = ratio * adv[i], np.clip(ratio, 1 - eps, 1 + eps) * adv[i]
        pol.append(-min(unclipped, clip))
        clipped.append(clip < unclipped)
        kl.append((ratio - 1) - np.log(ratio))
        err = (values[i] - batch.returns[i]) ** 2
        if value_clip is not None:
            v_clip = batch.old_values[i] + np.clip(values[i] - batch.old_values[i],
                                                   -value_clip, value_clip)
            err = max(err, (v_clip - batch.returns[i]) ** 2)
        val.append(0.5 * err)
        ent.append(-(np.exp(log_p) * log_p).sum())
    pol, val, ent = np.mean(pol), np.mean(val), np.mean(ent)
    return {"loss": pol + vc * val - ec * ent, "policy_loss": pol, "value_loss": val,
            "entropy": ent, "clip_fraction": np.mean(clipped), "approx_kl": np.mean(kl)}


def jnp_ppo_loss(params, batch, eps=0.2, value_clip=None, vc=0.5, ec=0.01):
    """An independent jnp statement of the same loss (for gradients)."""
    logits, values = AC.apply(params, batch.obs)
    log_p = jax.nn.log_softmax(logits)
    log_pi = jnp.take_along_axis(log_p, batch.actions[:, None], axis=1)[:, 0]
    adv = (batch.advantages - batch.advantages.mean()) / (batch.advantages.std() + 1e-8)
    ratio = jnp.exp(log_pi - batch.old_log_probs)
    pol = -jnp.mean(jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - eps, 1 + eps) * adv))
    err = jnp.square(values - batch.returns)
    if value_clip is not None:
        v_clip = batch.old_values + jnp.clip(values - batch.old_values, -value_clip, value_clip)
        err = jnp.maximum(err, jnp.square(v_clip - batch.returns))
    ent = -jnp.mean(jnp.sum(jnp.exp(log_p) * log_p, axis=-1))
    return pol + vc * 0.5 * jnp.mean(err) - ec * ent


@pytest.mark.parametrize("value_clip", [None, 0.2])
def test_loss_metrics_and_grads_match_references_under_jit(value_clip):
    params, batch = make_batch(0)
    rl = ppo(AC.apply, value_clip=value_clip)
    grads, state, metrics = jax.jit(rl.update)(params, rl.init(params), batch, None)
    expected = numpy_ppo_loss(params, batch, value_clip=value_clip)
    assert 0 < expected["clip_fraction"] < 1  # both branches of the clip are exercised
    for name, value in expected.items():
        np.testing.assert_allclose(metrics[name], value, rtol=2e-4, atol=2e-6, err_msg=name)
    ref_grads = jax.grad(jnp_ppo_loss)(params, batch, value_clip=value_clip)
    for a, b in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads),
                    strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-6)


def test_update_under_vmap_over_seeds():
    pairs = [make_batch(seed) for seed in range(3)]
    params = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *[p for p, _ in pairs])
    batch = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *[b for _, b in pairs])
    rl = ppo(AC.apply, value_clip=0.2)
    _, _, metrics = jax.jit(jax.vmap(rl.update, in_axes=(0, None, 0, None)))(
        params, rl.init(None), batch, None)
    for s, (p, b) in enumerate(pairs):
        expected = numpy_ppo_loss(p, b, value_clip=0.2)
        np.testing.assert_allclose(metrics["loss"][s], expected["loss"], rtol=2e-4)


def test_mask_drops_padding():
    params, batch = make_batch(1, size=16)
    padded = jax.tree_util.tree_map(
        lambda x: np.concatenate([x, x[:4] * 3 + 1]), batch)
    padded = padded.replace(mask=np.concatenate([np.ones(16), np.zeros(4)]).astype(np.float32))
    rl = ppo(AC.apply)
    update = jax.jit(rl.update)
    _, _, m_ref = update(params, rl.init(params), batch)
    _, _, m_pad = update(params, rl.init(params), padded)
    for name in m_ref:
        np.testing.assert_allclose(m_pad[name], m_ref[name], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kwargs, name", [
    ({"clip_epsilon": 0.0}, "clip_epsilon"),
    ({"clip_epsilon": -0.1}, "clip_epsilon"),
    ({"clip_epsilon": 0.2, "clip_epsilon_high": 0.1}, "clip_epsilon_high"),
    ({"dual_clip": 0.5}, "dual_clip"),
    ({"value_coef": -1.0}, "value_coef"),
    ({"entropy_coef": float("nan")}, "entropy_coef"),
    ({"value_clip": 0.0}, "value_clip"),
])
def test_bad_hyperparameters_fail_at_build_time(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ppo(AC.apply, **kwargs)


@pytest.mark.parametrize("field, value", [
    ("gamma", 1.5), ("lam", -0.1), ("clip_epsilon", 0.0), ("num_minibatches", 3),
    ("learning_rate", 0.0), ("total_steps", 10),
])
def test_bad_train_config_fails_before_tracing(field, value):
    config = PPOTrainConfig(**{field: value})
    with pytest.raises(ValueError, match=field):
        make_ppo_train(CartPole(), AC, config)


def test_shape_mismatch_names_both_shapes():
    params, batch = make_batch(2, size=8)
    bad = batch.replace(advantages=np.zeros(9, np.float32))
    rl = ppo(AC.apply)
    with pytest.raises(AssertionError, match=r"\(8,\).*\(9,\)|\(9,\).*\(8,\)"):
        rl.update(params, rl.init(params), bad)
    bad = batch.replace(mask=np.ones(7, np.float32))
    with pytest.raises(AssertionError, match=r"\(7,\)"):
        rl.update(params, rl.init(params), bad)


def test_nan_advantage_is_not_silently_dropped():
    params, batch = make_batch(3, size=8)
    advantages = np.asarray(batch.advantages).copy()
    advantages[2] = np.nan
    for normalise in (True, False):
        rl = ppo(AC.apply, normalize_advantages=normalise)
        grads, _, metrics = rl.update(params, rl.init(params), batch.replace(
            advantages=advantages))
        assert np.isnan(metrics["loss"])
        assert any(np.isnan(g).any() for g in jax.tree_util.tree_leaves(grads))


def test_composes_with_optax_and_the_shared_loop():
    params, batch = make_batch(4, size=64, spread=0.0)
    rl = ppo(AC.apply)
    for optimizer in (optax.sgd(0.05), optax.chain(optax.clip_by_global_norm(0.5),
                                                    optax.adam(1e-2))):
        opt_state = optimizer.init(params)
        _, _, before = rl.update(params, rl.init(params), batch)
        new_params, _, _, metrics = jax.jit(
            lambda p, s, b, k, optimizer=optimizer: multi_step_update(
                rl, optimizer, p, rl.init(p), s, b, k, num_epochs=4, num_minibatches=4)
        )(params, opt_state, batch, jax.random.key(0))
        _, _, after = rl.update(new_params, rl.init(new_params), batch)
        assert float(after["loss"]) < float(before["loss"])
        assert set(metrics) >= {"clip_fraction", "approx_kl", "entropy", "value_loss",
                                "policy_loss"}


def test_truncation_bootstrap_detection():
    ppo_module = sys.modules["rljax.training.ppo"]
    env = CartPole()
    assert ppo_module._has_final_obs(env, env.default_params)
    chain = ChainMDP(3)  # its step_env gives no final_obs: the base class's step adds it
    assert ppo_module._has_final_obs(chain, chain.default_params)

    class NoFinalObs:  # duck-typed, no rljax base class: nothing adds it
        name, num_actions, default_params = "NoFinalObs", chain.num_actions, chain.default_params

        def reset(self, key, params):
            return chain.reset(key, params)

        def step(self, key, state, action, params):
            return (*chain.step(key, state, action, params)[:5], {})

    assert not ppo_module._has_final_obs(NoFinalObs(), chain.default_params)


@pytest.mark.timeout(120)
def test_short_cartpole_training_learns_under_jit_and_vmap():
    config = PPOTrainConfig(num_envs=4, num_steps=64, total_steps=4 * 64 * 40,
                            learning_rate=1e-3)
    train = make_ppo_train(CartPole(), mlp_actor_critic(2, (32, 32)), config)
    keys = jax.random.split(jax.random.key(0), 2)
    logs = jax.jit(jax.vmap(train))(keys)
    assert logs["return_sum"].shape == (2, 40) and logs["episodes"].dtype == jnp.int32
    np.testing.assert_array_equal(logs[NONFINITE_STEP], [-1, -1])
    for name, value in logs.items():
        assert np.all(np.isfinite(np.asarray(value))), name
    ret = np.asarray(logs["return_sum"]) / np.maximum(np.asarray(logs["episodes"]), 1)
    first = ret[:, :5].mean()
    last = ret[:, -5:][np.asarray(logs["episodes"])[:, -5:] > 0].mean()
    assert last > 1.5 * first, (first, last)


# --------------------------------------------------------------------------------------
# Chunked runs and non-finite tracking.

CHUNK_CONFIG = PPOTrainConfig(num_envs=4, num_steps=16, total_steps=4 * 16 * 12,
                              learning_rate=1e-3)  # 12 updates
CHUNK_NET = mlp_actor_critic(2, (16, 16))
SUMMED = ("return_sum", "episodes")


def window_aggregate(logs, window):
    """numpy reference: ``[S, U] -> [S, U / window]`` sums (return_sum, episodes) or
    means (the loss metrics) of consecutive windows of updates."""
    out = {}
    for name, x in logs.items():
        rows = np.asarray(x).reshape(x.shape[0], -1, window)
        out[name] = rows.sum(axis=2) if name in SUMMED else rows.mean(axis=2)
    return out


def chunked_sweep_logs(num_seeds, updates_per_chunk, log_every, sweep=None, **run_kwargs):
    chunks = make_ppo_chunks(CartPole(), CHUNK_NET, CHUNK_CONFIG,
                             updates_per_chunk=updates_per_chunk, log_every=log_every)
    assert chunks.num_chunks == CHUNK_CONFIG.num_updates // updates_per_chunk
    if sweep is None:
        sweep = ChunkedSweep(chunks.init, chunks.advance, chunks.finish,
                             num_chunks=chunks.num_chunks, block_size=4)
    result = sweep.run(num_seeds, progress=False, **run_kwargs)
    rows = updates_per_chunk // log_every
    logs = {}
    for name, x in result.outputs["logs"].items():
        assert x.shape == (num_seeds, chunks.num_chunks, rows), name
        logs[name] = x.reshape(num_seeds, chunks.num_chunks * rows)
    return logs, result.outputs["final"], sweep


@pytest.mark.timeout(300)
@pytest.mark.slow  # ~14 s; test_ppo_traced checks chunks == whole run with hparams
def test_chunked_run_matches_the_whole_run(tmp_path):
    # 3 seeds in a padded block of 4, jitted and vmapped by Sweep / ChunkedSweep.
    whole = Sweep(make_ppo_train(CartPole(), CHUNK_NET, CHUNK_CONFIG), block_size=4).run(
        3, progress=False).outputs
    np.testing.assert_array_equal(whole[NONFINITE_STEP], [-1, -1, -1])
    checkpointer = Checkpointer(tmp_path / "ckpt")
    per_update, final, sweep = chunked_sweep_logs(3, updates_per_chunk=3, log_every=1,
                                                  checkpointer=checkpointer,
                                                  checkpoint_every=1)
    assert set(per_update) == set(whole) - {NONFINITE_STEP}
    np.testing.assert_array_equal(final[NONFINITE_STEP], [-1, -1, -1])
    assert per_update["episodes"].dtype == np.int32
    # Same updates with the same keys, but two XLA programs instead of one: measured
    # bitwise equal episode counts and returns, losses within a few float32 ulps (XLA
    # compiles the update loop differently when the parameters enter as arguments).
    for name, x in per_update.items():
        np.testing.assert_allclose(x, whole[name], rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_array_equal(per_update["episodes"], whole["episodes"])

    # Resumed from the state saved after chunk 2 of 4 (the finished round forgotten):
    # bitwise the uninterrupted run (the PPO state, keys included, round-trips).
    assert checkpointer.steps() == [2, 3]
    shutil.rmtree(tmp_path / "ckpt" / "rounds")
    shutil.rmtree(tmp_path / "ckpt" / "3")
    resumed, resumed_final, _ = chunked_sweep_logs(3, updates_per_chunk=3, log_every=1,
                                                   sweep=sweep, checkpointer=checkpointer,
                                                   resume=True)
    for name, x in per_update.items():
        np.testing.assert_array_equal(resumed[name], x, err_msg=name)
    np.testing.assert_array_equal(resumed_final[NONFINITE_STEP], final[NONFINITE_STEP])

    windowed, _, _ = chunked_sweep_logs(3, updates_per_chunk=6, log_every=3)
    expected = window_aggregate(per_update, 3)
    whole_windows = window_aggregate({name: whole[name] for name in per_update}, 3)
    for name, x in windowed.items():
        assert x.dtype == per_update[name].dtype, name
        np.testing.assert_allclose(x, expected[name], rtol=1e-6, atol=1e-7, err_msg=name)
        np.testing.assert_allclose(x, whole_windows[name], rtol=1e-5, atol=1e-6, err_msg=name)


class NaNRewardAfter:
    """CartPole whose reward is NaN from each environment's ``after``-th step on."""

    def __init__(self, after):
        self.env, self.after = CartPole(), after
        self.default_params = self.env.default_params

    def reset(self, key, params):
        obs, state = self.env.reset(key, params)
        return obs, (state, jnp.int32(0))

    def step(self, key, state, action, params):
        inner, t = state
        obs, inner, reward, terminated, truncated, info = self.env.step(key, inner, action,
                                                                        params)
        reward = jnp.where(t >= self.after, jnp.nan, reward)
        return obs, (inner, t + 1), reward, terminated, truncated, info


@pytest.mark.timeout(300)
def test_first_nonfinite_update_whole_and_chunked():
    config = PPOTrainConfig(num_envs=2, num_steps=8, total_steps=2 * 8 * 8)  # 8 updates
    env = NaNRewardAfter(after=5 * 8 + 3)  # the first NaN reward is in update 5
    keys = jax.random.split(jax.random.key(1), 2)
    logs = jax.jit(jax.vmap(make_ppo_train(env, CHUNK_NET, config)))(keys)
    assert logs[NONFINITE_STEP].dtype == jnp.int32
    np.testing.assert_array_equal(logs[NONFINITE_STEP], [5, 5])
    assert np.isfinite(np.asarray(logs["loss"])[:, :5]).all()
    assert np.isnan(np.asarray(logs["loss"])[:, 5]).all()

    # chunks of 2 updates: update 5 is the second of the third chunk, and it sticks
    chunks = make_ppo_chunks(env, CHUNK_NET, config, updates_per_chunk=2, log_every=2)
    state = jax.jit(jax.vmap(chunks.init))(keys)
    advance = jax.jit(jax.vmap(chunks.advance))
    for c in range(chunks.num_chunks):
        state, chunk_logs = advance(state)
        assert chunk_logs["loss"].shape == (2, 1)
        expected = -1 if c < 2 else 5
        np.testing.assert_array_equal(state.nonfinite_step, [expected, expected])
    np.testing.assert_array_equal(state.update, [8, 8])
    final = jax.jit(jax.vmap(chunks.finish))(state)
    np.testing.assert_array_equal(final[NONFINITE_STEP], [5, 5])


@pytest.mark.parametrize("kwargs, name", [
    ({"updates_per_chunk": 5}, "updates_per_chunk"),  # does not divide 12
    ({"updates_per_chunk": 0}, "updates_per_chunk"),
    ({"updates_per_chunk": 2.0}, "updates_per_chunk"),
    ({"updates_per_chunk": 4, "log_every": 3}, "log_every"),  # does not divide 4
    ({"updates_per_chunk": 4, "log_every": 0}, "log_every"),
])
def test_bad_chunk_arguments_fail_before_tracing(kwargs, name):
    with pytest.raises(ValueError, match=f"^{name}:") as err:
        make_ppo_chunks(CartPole(), CHUNK_NET, CHUNK_CONFIG, **kwargs)
    assert "\n" not in str(err.value)
