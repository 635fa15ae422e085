"""Equation policies (rljax.policies.equation) and GRPO training on "solve for x"
(rljax.training.equation)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.envs.equation import (
    EquationEnv,
    EquationParams,
    distance_to_solved,
    is_held_out,
    sample_equation,
    sample_split_equation,
)
from rljax.policies.equation import (
    encode_observation,
    equation_actor_critic,
    heuristic_value,
    masked_logits,
    masked_policy,
    uniform_prior,
)
from rljax.training.equation import (
    EquationTrainConfig,
    evaluate_greedy,
    evaluate_sampled,
    init_params,
    make_equation_grpo_train,
    run_attempt,
    start_state,
)

ENV = EquationEnv()
TINY = EquationTrainConfig(problems_per_update=4, group_size=4, updates=3,
                           hidden_sizes=(16,), level_weights=(1.0, 1.0, 1.0, 1.0))


def _states(n, seed=0):
    keys = jax.random.split(jax.random.key(seed), n)
    levels = jnp.arange(n) % 4
    obs, states = jax.vmap(lambda k, lv: ENV.reset(k, EquationParams(level=lv)))(keys, levels)
    return obs, states


def test_uniform_prior_and_heuristic_value_against_phi():
    obs, states = _states(32)
    masks = jax.vmap(ENV.action_mask)(states)
    prior = jax.jit(uniform_prior)(obs)
    assert prior.shape == (32, 60) and np.all(np.asarray(prior) == 0)
    probs = jax.nn.softmax(masked_logits(prior, masks), axis=-1)
    expected = np.asarray(masks) / np.asarray(masks).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(np.asarray(probs), expected, rtol=1e-6, atol=0)
    value = jax.jit(jax.vmap(heuristic_value))(obs)
    phi = np.asarray(jax.vmap(distance_to_solved)(states.coeffs))
    np.testing.assert_allclose(np.asarray(value), 1 - phi / 3, atol=1e-6)


def test_encode_observation_onehot_reads_the_coefficients():
    obs, states = _states(16)
    enc = jax.jit(lambda o: encode_observation(o, "onehot", 20))(obs)
    assert enc.shape == (16, 8 + 4 * 41)
    bins = np.asarray(enc[:, 8:]).reshape(16, 4, 41)
    np.testing.assert_array_equal(bins.sum(axis=-1), 1)
    coeffs = np.clip(np.asarray(states.coeffs), -20, 20)
    np.testing.assert_array_equal(bins.argmax(axis=-1) - 20, coeffs)
    assert encode_observation(obs[0], "raw").shape == (8,)
    with pytest.raises(ValueError, match="encoding"):
        encode_observation(obs, "bits")


def test_masked_policy_puts_no_mass_on_invalid_actions():
    # States with few valid divisions, from the problems' start and after random moves.
    net = equation_actor_critic((32, 32))
    params = net.init(jax.random.key(1), jnp.zeros(8))
    # Large random head weights so the unmasked logits favour invalid moves too.
    params = jax.tree_util.tree_map(lambda x: 30.0 * x, params)
    obs, states = _states(64, seed=3)
    masks = jax.vmap(ENV.action_mask)(states)
    assert not np.all(np.asarray(masks))  # some divisions are invalid
    policy = jax.jit(jax.vmap(masked_policy(net.actor.apply), in_axes=(None, 0)))
    logits = policy(params["actor"], {"features": obs, "action_mask": masks})
    probs = np.asarray(jax.nn.softmax(logits, axis=-1))
    assert np.all(np.isfinite(np.asarray(logits)))
    assert np.all(probs[~np.asarray(masks)] == 0.0)
    np.testing.assert_allclose(probs.sum(axis=-1), 1.0, rtol=1e-5)
    # Sampled and greedy attempts never take an invalid move.
    env_params = EquationParams(level=jnp.int32(0), max_steps=8)

    def attempt(key, state, greedy):
        rec = run_attempt(key, ENV, env_params,
                          lambda f: net.actor.apply(params["actor"], f), state,
                          greedy=greedy)
        return rec["actions"], rec["action_mask"], rec["alive"]

    for greedy in (False, True):
        actions, mask, alive = jax.jit(jax.vmap(lambda k, s, g=greedy: attempt(k, s, g)))(
            jax.random.split(jax.random.key(2), 64), states)
        taken = np.take_along_axis(np.asarray(mask), np.asarray(actions)[..., None], -1)[..., 0]
        assert np.all(taken[np.asarray(alive) > 0])


def test_held_out_split_is_disjoint_and_respected():
    keys = jax.random.split(jax.random.key(0), 200)
    for held_out in (False, True):
        coeffs, solution = jax.jit(jax.vmap(
            lambda k, h=held_out: sample_split_equation(k, jnp.int32(2), 5, h)))(keys)
        assert np.all(np.asarray(is_held_out(coeffs, 5)) == held_out)
        a, b, c, d = np.asarray(coeffs).T
        np.testing.assert_array_equal(a * np.asarray(solution) + b, c * np.asarray(solution) + d)
    # About a fifth of the problems are held out (hash mod 5).
    coeffs, _ = jax.vmap(lambda k: sample_equation(k, jnp.int32(3)))(
        jax.random.split(jax.random.key(1), 4000))
    frac = float(np.mean(np.asarray(is_held_out(coeffs, 5))))
    assert 0.15 < frac < 0.25


def test_run_attempt_against_a_python_loop():
    net = equation_actor_critic((16,))
    params = net.init(jax.random.key(4), jnp.zeros(8))
    logits_fn = lambda f: net.actor.apply(params["actor"], f)  # noqa: E731
    env_params = EquationParams(level=jnp.int32(0), max_steps=8)
    coeffs, solution = sample_split_equation(jax.random.key(5), jnp.int32(1), 5, True)
    rec = jax.jit(lambda s: run_attempt(jax.random.key(0), ENV, env_params, logits_fn, s,
                                        greedy=True))(start_state(coeffs, solution))
    # Reference: step the environment by hand with the recorded greedy actions.
    state, outcome, done = start_state(coeffs, solution), 0.0, False
    for t in range(8):
        mask = ENV.action_mask(state)
        action = int(np.argmax(np.where(mask, logits_fn(ENV.observation(state, env_params)),
                                        -np.inf)))
        assert float(rec["alive"][t]) == (not done)
        if done:
            continue
        assert int(rec["actions"][t]) == action
        _, state, reward, term, trunc, info = ENV.step_env(None, state, action, env_params)
        assert float(rec["process_reward"][t]) == float(info["process_reward"])
        outcome += float(reward)
        done = bool(term) or bool(trunc)
    assert float(rec["outcome"]) == outcome


@pytest.mark.slow  # suite time (~15 s); run_attempt's loop reference and the loss test stay fast
def test_tiny_training_runs_under_jit_and_vmap():
    # "outcome+progress" with a KL term exercises both advantage paths and the reference.
    # 32 problems x 3 updates x 2 seeds: were the split ignored, ~38 would be held out.
    config = dataclasses.replace(TINY, advantage="outcome+progress", kl_beta=0.04,
                                 problems_per_update=32)
    train = jax.jit(jax.vmap(make_equation_grpo_train(config)))
    keys = jax.random.split(jax.random.key(0), 2)
    params, logs = train(keys)
    initial = jax.vmap(lambda k: init_params(config, k))(keys)
    assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(initial)
    for leaf, start in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(initial),
                           strict=True):
        assert leaf.shape == start.shape and leaf.shape[0] == 2
        assert np.all(np.isfinite(np.asarray(leaf)))
    for name in ("accuracy", "signal_fraction", "process_reward", "loss", "value_loss", "kl",
                 "entropy", "clip_fraction"):
        assert logs[name].shape == (2, 3), name
        assert np.all(np.isfinite(np.asarray(logs[name]))), name
    assert logs["level_accuracy"].shape == (2, 3, 4)
    np.testing.assert_array_equal(np.asarray(logs["level_count"]).sum(-1), 32)
    # Training never drew an evaluation (held-out) problem.
    np.testing.assert_array_equal(np.asarray(logs["held_out_drawn"]), 0)
    # The first update's rollout comes from the initial parameters: KL to them is 0.
    np.testing.assert_allclose(np.asarray(logs["kl"][:, 0]), 0.0, atol=1e-6)
    # Seeds differ; evaluation runs on one seed's trained parameters and gives fractions.
    assert not np.allclose(np.asarray(logs["loss"][0]), np.asarray(logs["loss"][1]))
    one = jax.tree_util.tree_map(lambda x: x[0], params)
    # Under jit: one program each (run eagerly, every op of the vmapped attempt would
    # dispatch, and compile, on its own).
    acc = jax.jit(lambda p, k: evaluate_greedy(p, k, 2, 16, config=config))(
        one, jax.random.key(1))
    sampled = jax.jit(lambda p, k: evaluate_sampled(p, k, 1, 16, config=config))(
        one, jax.random.key(1))
    assert 0.0 <= float(acc) <= 1.0 and 0.0 <= float(sampled) <= 1.0


def test_config_validation():
    with pytest.raises(ValueError, match="level_weights"):
        EquationTrainConfig(level_weights=(1.0, 1.0))
    with pytest.raises(ValueError, match="advantage"):
        EquationTrainConfig(advantage="bogus")
    with pytest.raises(ValueError, match="num_minibatches"):
        EquationTrainConfig(problems_per_update=6, num_minibatches=4)


def test_critic_and_entropy_transform_loss_is_what_update_differentiates():
    # the equation trainer's transform (actor GRPO + entropy bonus + critic regression)
    # exposes the loss behind its update, like every RLTransform
    from rljax.algorithms import GroupBatch, grpo
    from rljax.training.equation import _with_critic_and_entropy

    p, g, t, f, a = 2, 3, 4, 5, 3
    keys = jax.random.split(jax.random.key(0), 6)
    features = jax.random.normal(keys[0], (p, g, t, f))

    def policy_apply(actor, obs):
        return obs["features"] @ actor["w"]

    def value_fn(params, feats):
        return feats @ params["critic"]["v"]

    actions = jax.random.randint(keys[1], (p, g, t), 0, a)
    mask = (jnp.arange(t) < jnp.array([[4, 2, 3], [1, 4, 4]])[..., None]).astype(jnp.float32)
    group = GroupBatch(obs={"features": features}, actions=actions, mask=mask,
                       rewards=jax.random.bernoulli(keys[2], 0.5, (p, g)).astype(jnp.float32),
                       old_log_probs=jnp.full((p, g, t), -1.1),
                       ref_log_probs=jnp.full((p, g, t), -1.1))
    returns = jax.random.normal(keys[3], (p, g, t))
    params = {"actor": {"w": 0.3 * jax.random.normal(keys[4], (f, a))},
              "critic": {"v": 0.3 * jax.random.normal(keys[5], (f,))}}
    rl = _with_critic_and_entropy(grpo(policy_apply, group_size=g), policy_apply, value_fn,
                                  value_coef=0.7, entropy_coef=0.05)
    state = rl.init(params)
    grads, _, metrics = jax.jit(rl.update)(params, state, (group, returns))
    loss_grads, aux = jax.jit(jax.grad(rl.loss, has_aux=True))(params, state, (group, returns))
    for got, want in zip(jax.tree.leaves(loss_grads), jax.tree.leaves(grads), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert float(aux.metrics["value_loss"]) == pytest.approx(float(metrics["value_loss"]))
    assert float(aux.metrics["entropy"]) == pytest.approx(float(metrics["entropy"]))
