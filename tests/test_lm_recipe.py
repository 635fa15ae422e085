"""The LM RL recipe's pieces: pi_old scored as the sampler samples (temperature, top-k),
the RL learning-rate warm-up, the labelled bank, the SFT control arm, DAPO's refill and
the cached warm start."""

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.policies.sampling import MASKED_LOGIT, sampling_logits
from rljax.sweep import Sweep, seed_key
from rljax.training.lm import (
    LMTrainConfig,
    arithmetic_task,
    make_lm_trainer,
    rl_learning_rate,
)
from rljax.training.lm_config import LMGRPOConfig, LMPPOConfig, LMSFTConfig
from rljax.training.lm_warm_start import cached_warm_start

TINY = LMTrainConfig(width=16, num_layers=1, num_heads=2, sft_steps=30, sft_batch=16,
                     sft_learning_rate=1e-2, rl_steps=2, steps_per_chunk=1,
                     prompts_per_step=4, group_size=4, eval_prompts=8)


def trainer(config=TINY, algorithm=None, **kwargs):
    return make_lm_trainer(config, algorithm, task=arithmetic_task(config, (0,)), **kwargs)


def test_sampling_logits_matches_a_numpy_reference_and_vmaps():
    logits = jax.random.normal(jax.random.key(0), (3, 7))
    out = jax.jit(sampling_logits, static_argnums=2)(logits, 0.5, 3)
    ref = np.asarray(logits) / 0.5
    kth = np.sort(ref, axis=-1)[:, -3][:, None]
    ref = np.where(ref >= kth, ref, MASKED_LOGIT)
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-6)
    swept = jax.vmap(lambda t: sampling_logits(logits, t))(jnp.asarray([0.5, 2.0]))
    np.testing.assert_allclose(np.asarray(swept[1]), np.asarray(logits) / 2.0, rtol=1e-6)


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_old_log_probs_are_the_samplers_at_temperature_and_top_k(algorithm):
    """At T = 0.5 and top-k 3, pi_old (and the loss's log-probs at the same params) are
    the log-probabilities the sampler drew with -- not the temperature-1 policy's."""
    config = dataclasses.replace(TINY, temperature=0.5, top_k=3)
    algo = LMPPOConfig() if algorithm == "ppo" else LMGRPOConfig()
    tr = trainer(config, algo)
    state = jax.jit(tr.init)(jax.random.key(0))
    problem_key, sample_key = jax.random.split(jax.random.key(1))

    if algorithm == "grpo":
        def scored(state):
            batch, _, _ = tr.grpo_batch(state, problem_key, sample_key)
            p, g = config.prompts_per_step, config.group_size
            flat = lambda x: x.reshape(p * g, *x.shape[2:])  # noqa: E731
            repeated = jax.tree_util.tree_map(lambda x: jnp.repeat(x, g, axis=0),
                                              tr.sample_problems(problem_key, p))
            completion = tr.sample_completions(state.params, repeated, sample_key)
            obs = jax.tree_util.tree_map(flat, batch.obs)
            current = tr.sampling_log_probs(state.params, obs, flat(batch.actions))  # the loss's
            return flat(batch.old_log_probs), completion, current
    else:
        def scored(state):
            n = config.prompts_per_step * config.group_size
            problems = tr.sample_problems(problem_key, n)
            completion = tr.sample_completions(state.params["policy"], problems, sample_key)
            obs = {"prompt": problems.prompt, "prompt_mask": problems.prompt_mask,
                   "completion": completion.tokens, "completion_mask": completion.mask}
            logits, _ = tr.ppo_actor_critic(state.params, obs)
            old = jax.nn.log_softmax(logits)
            old = jnp.take_along_axis(old, completion.tokens[..., None], -1)[..., 0]
            return jnp.where(completion.mask > 0, old, 0.0), completion, old

    old, completion, current = jax.jit(scored)(state)
    mask = np.asarray(completion.mask) > 0
    sampler = np.where(mask, np.asarray(completion.log_probs), 0.0)
    np.testing.assert_allclose(np.asarray(old), sampler, atol=2e-5)
    np.testing.assert_allclose(np.where(mask, np.asarray(current), 0.0), sampler, atol=2e-5)
    # the temperature-1 policy's log-probs are far from them: the test can fail
    params = state.params["policy"] if algorithm == "ppo" else state.params
    untempered = jax.jit(tr.policy.completion_log_probs)(
        params, *_prompt_and_completion(tr, config, problem_key, completion, algorithm))
    assert np.max(np.abs(np.where(mask, np.asarray(untempered), 0.0) - sampler)) > 0.05


def _prompt_and_completion(tr, config, problem_key, completion, algorithm):
    if algorithm == "grpo":
        problems = jax.tree_util.tree_map(
            lambda x: jnp.repeat(x, config.group_size, axis=0),
            tr.sample_problems(problem_key, config.prompts_per_step))
    else:
        problems = tr.sample_problems(problem_key, config.prompts_per_step * config.group_size)
    return problems.prompt, problems.prompt_mask, completion.tokens, completion.mask


def test_temperature_zero_is_refused_for_the_rl_phase():
    with pytest.raises(ValueError, match="^temperature: "):
        trainer(dataclasses.replace(TINY, temperature=0.0))


def test_rl_learning_rate_warmup_closed_form_and_in_the_optimizer():
    assert rl_learning_rate(1e-3, 0) == 1e-3
    schedule = rl_learning_rate(1e-3, 4, updates_per_step=2)
    values = np.asarray([schedule(n) for n in range(10)])
    expected = 1e-3 * np.minimum(1.0, (np.arange(10) + 1) / 8)
    np.testing.assert_allclose(values, expected, rtol=1e-6)
    # the optimizer takes the scheduled step: Adam's first update is -lr * sign(g)
    config = dataclasses.replace(TINY, learning_rate=1e-3, lr_warmup_steps=4, mu=2,
                                 max_grad_norm=1e6)
    opt = trainer(config).rl_optimizer()
    params = {"w": jnp.ones(3)}
    updates, _ = opt.update({"w": jnp.asarray([1.0, -2.0, 3.0])}, opt.init(params), params)
    np.testing.assert_allclose(np.asarray(updates["w"]), -1e-3 / 8 * np.array([1, -1, 1]),
                               rtol=1e-4)
    plain = trainer(dataclasses.replace(config, lr_warmup_steps=0)).rl_optimizer()
    updates, _ = plain.update({"w": jnp.asarray([1.0, -2.0, 3.0])}, plain.init(params), params)
    np.testing.assert_allclose(np.asarray(updates["w"]), -1e-3 * np.array([1, -1, 1]),
                               rtol=1e-4)


def test_label_bank_supervised_draws_come_only_from_the_seed_bank():
    config = dataclasses.replace(TINY, label_bank=5)
    tr = make_lm_trainer(config, task=arithmetic_task(config, (1,)))
    bank = jax.jit(tr.label_bank)(jax.random.key(3))  # jitted: eager dispatch costs more
    assert bank.prompt.shape[0] == 5
    batch = jax.jit(tr.supervised_batch)(jax.random.key(4), bank)
    rows = {tuple(r) for r in np.asarray(bank.operands)}
    assert {tuple(r) for r in np.asarray(batch.operands)} <= rows
    fresh = jax.jit(tr.supervised_batch)(jax.random.key(4))
    assert not {tuple(r) for r in np.asarray(fresh.operands)} <= rows
    # init keeps the bank in the state (the SFT arm reads it)
    state = jax.eval_shape(tr.init, jax.random.key(0))
    assert state.bank.prompt.shape == (5, bank.prompt.shape[1])


def test_sft_arm_trains_on_solutions_and_reads_no_reward():
    config = dataclasses.replace(TINY, sft_steps=0, rl_steps=20, steps_per_chunk=20,
                                 lr_warmup_steps=2)
    tr = trainer(config, LMSFTConfig())
    state = jax.jit(tr.init)(jax.random.key(0))
    state, logs = jax.jit(tr.advance)(state)
    loss = np.asarray(logs["loss"])
    assert loss[-5:].mean() < loss[:5].mean()
    assert int(np.sum(logs["rollouts"])) == 0
    assert set(logs) >= {"loss", "eval_accuracy", "eval_held_out_accuracy"}


def test_refill_keeps_the_first_groups_with_signal_in_draw_order():
    # after 60 warm-up steps one-digit addition gives groups with and without signal
    config = dataclasses.replace(TINY, sft_steps=60, prompts_per_step=3, group_size=4)
    algo = LMGRPOConfig(dynamic_sampling=True, oversample=3)
    tr = trainer(config, algo)
    state = jax.jit(tr.init)(jax.random.key(0))
    problem_key, sample_key = jax.random.key(5), jax.random.key(6)
    batch, metrics, _ = jax.jit(tr.grpo_batch)(state, problem_key, sample_key)
    p, g, m = 3, 4, 3

    def all_rewards(params):  # the reference: score all m P groups
        problems = tr.sample_problems(problem_key, m * p)
        repeated = jax.tree_util.tree_map(lambda x: jnp.repeat(x, g, axis=0), problems)
        return tr.score(repeated, tr.sample_completions(params, repeated, sample_key))[0]

    grouped = np.asarray(jax.jit(all_rewards)(state.params)).reshape(m * p, g)
    signal = grouped.max(axis=1) != grouped.min(axis=1)
    assert 0 < signal.sum() < m * p  # both kinds, so the order matters
    order = [i for i in range(m * p) if signal[i]] + [i for i in range(m * p) if not signal[i]]
    np.testing.assert_array_equal(np.asarray(batch.rewards), grouped[order[:p]])
    kept = np.asarray(batch.mask).reshape(p, -1).max(axis=1) > 0
    np.testing.assert_array_equal(kept, signal[order[:p]])
    assert int(metrics["rollouts"]) == m * p * g
    assert float(metrics["signal_share_sampled"]) == pytest.approx(signal.mean())


def test_oversample_needs_dynamic_sampling():
    with pytest.raises(ValueError, match="^oversample: "):
        trainer(TINY, LMGRPOConfig(oversample=2))


def test_cached_warm_start_is_shared_bitwise_and_keyed_by_config(tmp_path):
    tr = trainer(dataclasses.replace(TINY, sft_steps=5))
    ws = cached_warm_start(tr, tmp_path, num_seeds=3, base_seed=0, block_size=2)
    assert ws.num_seeds == 4  # padded up to whole blocks
    assert ws.path.is_file()
    stamp = os.stat(ws.path).st_mtime_ns
    again = cached_warm_start(tr, tmp_path, num_seeds=3, base_seed=0, block_size=2)
    assert again.path == ws.path and os.stat(ws.path).st_mtime_ns == stamp  # read, not run
    for leaf_a, leaf_b in zip(jax.tree_util.tree_leaves(ws.params),
                              jax.tree_util.tree_leaves(again.params), strict=True):
        np.testing.assert_array_equal(leaf_a, leaf_b)
    arms = [trainer(tr.config, algo, warm_start=again)
            for algo in (LMGRPOConfig(), LMSFTConfig())]
    # the rows are what a Sweep of warm_start_params computes (the same block program)
    fresh = Sweep(tr.warm_start_params, base_seed=0, block_size=2).run(4, progress=False)
    for x, y in zip(jax.tree_util.tree_leaves(fresh.outputs),
                    jax.tree_util.tree_leaves(ws.params), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    for arm, seed in ((arms[0], 0), (arms[0], 2), (arms[1], 2)):  # what init reads
        row = jax.tree_util.tree_map(lambda x, s=seed: x[s], ws.params)
        cached = jax.jit(arm.warm_start_params)(seed_key(0, seed))
        for a, c in zip(jax.tree_util.tree_leaves(cached), jax.tree_util.tree_leaves(row),
                        strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(c))
    first = jax.tree_util.tree_leaves(ws.params)[0]
    assert not np.array_equal(first[0], first[1])  # each seed its own row
    # a key with no row gives NaN params (the non-finite tracker flags them)
    missing = jax.jit(arms[0].warm_start_params)(seed_key(0, 99))
    assert np.isnan(np.asarray(jax.tree_util.tree_leaves(missing)[0])).all()
    # another warm-up setting is another file
    other = cached_warm_start(trainer(dataclasses.replace(TINY, sft_steps=6)), tmp_path,
                              num_seeds=3, base_seed=0, block_size=2)
    assert other.path != ws.path


def test_sampled_correct_at_temperature_zero_is_greedy_correctness():
    tr = trainer(dataclasses.replace(TINY, sft_steps=60, eval_prompts=16))
    params = jax.jit(tr.warm_start_params)(jax.random.key(0))
    problems = tr.eval_problems()
    correct = jax.jit(lambda p, k: tr.sampled_correct(p, problems, k, 3, temperature=0.0))(
        params, jax.random.key(1))
    greedy, _ = jax.jit(tr.evaluate_per_prompt)(params, problems)
    assert correct.shape == (problems.prompt.shape[0], 3)
    assert 0.0 < float(greedy.mean()) < 1.0  # a mix of right and wrong: layout matters
    for column in range(3):
        np.testing.assert_array_equal(np.asarray(correct[:, column]), np.asarray(greedy))
