"""PromptBank: prior logits, the heavy-tailed p0 mixture (against scipy), rewards, pass@k
(closed form and Monte Carlo), jit/vmap of sampling, the reset/step contract, and errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats as st
from scipy import optimize

from rljax.envs import PromptBank, PromptBankParams, PromptBankState

# XLA takes 1-2 s to compile the gamma sampler behind sample_params, once per program (a
# fresh jax.jit wrapper is a fresh program; eager calls share jax's own compiled sampler
# per shape). So the tests compile three: one jit of vmap for a small bank, and eager
# samplers for P = 64 (any K, min_p0, mixture) and P = 100k.
SMALL = PromptBank(num_prompts=64, num_answers=6)
sample_batch = jax.jit(jax.vmap(SMALL.sample_params))
BIG_P = 100_000


def np_softmax(logits):
    z = np.asarray(logits, np.float64)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def params():
    return SMALL.sample_params(jax.random.key(0))


@pytest.fixture(scope="module")
def big_p0():
    """p0 of one default bank of 100k prompts (the docstring's measurement)."""
    bank = PromptBank(num_prompts=BIG_P)
    return bank, np.asarray(bank.sample_params(jax.random.key(0)).p0, np.float64)


def check_prior(bank, params):
    num_prompts, num_answers = bank.num_prompts, bank.num_answers
    assert isinstance(params, PromptBankParams)
    assert params.correct.shape == (num_prompts,) and params.correct.dtype == jnp.int32
    assert params.prior_logits.shape == (num_prompts, num_answers)
    assert params.prior_logits.dtype == jnp.float32
    assert params.p0.dtype == jnp.float32 and params.difficulty.dtype == jnp.float32
    correct = np.asarray(params.correct)
    p0 = np.asarray(params.p0, np.float64)
    assert correct.min() >= 0 and correct.max() < num_answers
    probs = np_softmax(params.prior_logits)
    rows = np.arange(num_prompts)
    np.testing.assert_allclose(probs[rows, correct], p0, rtol=0, atol=1e-6)
    # every wrong answer shares the rest equally
    wrong = np.ones_like(probs, bool)
    wrong[rows, correct] = False
    expected_wrong = np.broadcast_to(((1 - p0) / (num_answers - 1))[:, None], probs.shape)
    np.testing.assert_allclose(probs[wrong], expected_wrong[wrong], rtol=0, atol=1e-6)
    np.testing.assert_allclose(params.difficulty, 1 - params.p0, rtol=0, atol=0)
    # the traced success probability agrees
    np.testing.assert_allclose(bank.success_probability(params, params.prior_logits), p0,
                               rtol=0, atol=1e-6)
    assert len(np.unique(correct)) == num_answers


def test_prior_logits_give_p0(params):
    check_prior(SMALL, params)  # eager
    banks = sample_batch(jax.random.split(jax.random.key(3), 4))  # jit of vmap
    for b in range(4):
        check_prior(SMALL, jax.tree_util.tree_map(lambda x, b=b: x[b], banks))
    two = PromptBank(num_prompts=64, num_answers=2)  # eager, K = 2
    check_prior(two, two.sample_params(jax.random.key(4)))


def test_p0_within_clip_bounds(big_p0):
    bank, p0 = big_p0
    lo, hi = np.float32(bank.min_p0), np.float32(1 - bank.min_p0)
    assert np.all(np.isfinite(p0))
    assert p0.min() >= lo and p0.max() <= hi
    assert (p0 == lo).mean() > 0.005  # the hard tail really reaches the clip
    wide = PromptBank(num_prompts=64, num_answers=6, min_p0=0.2)
    p0_wide = np.asarray(wide.sample_params(jax.random.key(1)).p0)
    assert p0_wide.min() >= np.float32(0.2) and p0_wide.max() <= np.float32(0.8)


def test_heavy_tail_matches_beta_mixture(big_p0):
    bank, p0 = big_p0
    n = p0.size
    # the shape asked for: a clear mass near 1 and a long hard tail
    assert (p0 > 0.8).mean() >= 0.2
    assert (p0 < 0.2).mean() >= 0.2
    assert (p0 < 0.01).mean() >= 0.05

    # scipy reference: the clipped two-component Beta mixture
    lo, hi = bank.min_p0, 1 - bank.min_p0
    frac = bank.num_easy / bank.num_prompts
    easy, hard = st.beta(bank.easy_a, bank.easy_b), st.beta(bank.hard_a, bank.hard_b)

    def cdf(x):
        return frac * easy.cdf(x) + (1 - frac) * hard.cdf(x)

    def clipped_mean(dist):
        return dist.expect(lambda x: np.clip(x, lo, hi))

    ref_mean = frac * clipped_mean(easy) + (1 - frac) * clipped_mean(hard)
    ref_var = (frac * easy.expect(lambda x: np.clip(x, lo, hi) ** 2)
               + (1 - frac) * hard.expect(lambda x: np.clip(x, lo, hi) ** 2) - ref_mean**2)
    assert abs(p0.mean() - ref_mean) < 5 * np.sqrt(ref_var / n)

    # median: standard error sqrt(q (1 - q) / n) / density
    ref_median = optimize.brentq(lambda x: cdf(x) - 0.5, 1e-6, 1 - 1e-6)
    density = frac * easy.pdf(ref_median) + (1 - frac) * hard.pdf(ref_median)
    assert abs(np.median(p0) - ref_median) < 5 * np.sqrt(0.25 / n) / density

    # the empirical CDF on a grid, inside the clip range
    for x in (0.005, 0.01, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 0.9, 0.95):
        ref = cdf(x)
        assert abs((p0 <= x).mean() - ref) < 5 * np.sqrt(ref * (1 - ref) / n) + 1e-4, x

    # the documented figures
    assert abs(p0.mean() - 0.4863) < 0.002
    assert abs((p0 < 0.1).mean() - 0.2686) < 0.002


@pytest.mark.parametrize("easy_fraction, mean", [(0.0, 0.6 / 6.6), (1.0, 0.75)])
def test_pure_components(easy_fraction, mean):
    bank = PromptBank(num_prompts=BIG_P, easy_fraction=easy_fraction)
    p0 = np.asarray(bank.sample_params(jax.random.key(2)).p0, np.float64)
    assert abs(p0.mean() - mean) < 0.005


def test_reward_matches_numpy_loop(params):
    num_prompts, num_answers = SMALL.num_prompts, SMALL.num_answers
    correct = np.asarray(params.correct)
    rng = np.random.default_rng(0)
    prompt_ids = rng.integers(0, num_prompts, size=(200,)).astype(np.int32)
    answers = rng.integers(0, num_answers, size=(200,)).astype(np.int32)
    answers[:50] = correct[prompt_ids[:50]]  # some hits for sure
    expected = np.array([float(a == correct[i])
                         for i, a in zip(prompt_ids, answers, strict=True)])
    reward = jax.jit(SMALL.reward)(params, prompt_ids, answers)
    assert reward.dtype == jnp.float32
    np.testing.assert_array_equal(reward, expected)
    assert 0 < expected.sum() < 200

    # a group [P, G]: prompt ids broadcast along the group axis
    group = rng.integers(0, num_answers, size=(num_prompts, 6)).astype(np.int32)
    group_reward = SMALL.reward(params, jnp.arange(num_prompts)[:, None], group)
    expected_group = np.array([[float(group[i, g] == correct[i]) for g in range(6)]
                               for i in range(num_prompts)])
    np.testing.assert_array_equal(group_reward, expected_group)

    # vmap over banks
    banks = sample_batch(jax.random.split(jax.random.key(1), 4))
    rewards = jax.vmap(SMALL.reward, in_axes=(0, None, None))(banks, prompt_ids, answers)
    for b in range(4):
        c = np.asarray(banks.correct[b])
        np.testing.assert_array_equal(
            rewards[b], [float(a == c[i]) for i, a in zip(prompt_ids, answers, strict=True)])


def test_reward_rejects_rank_mismatch(params):
    with pytest.raises(AssertionError):
        SMALL.reward(params, jnp.arange(4), jnp.zeros((4, 2), jnp.int32))


def test_success_probability_and_pass_at_k_closed_form(params):
    num_prompts, num_answers = SMALL.num_prompts, SMALL.num_answers
    rows, correct = np.arange(num_prompts), np.asarray(params.correct)
    ks = (1, 2, 8, 64)
    logits = 3.0 * jax.random.normal(jax.random.key(1), (num_prompts, num_answers))
    # a batch of policies: random, the prior, uniform, and both extremes (1 - p below
    # float32 resolution; p ~ 1e-14)
    sure = jnp.where(jax.nn.one_hot(params.correct, num_answers) > 0, 0.0, -30.0)
    batch = jnp.stack([logits, params.prior_logits, jnp.zeros_like(logits), sure, -sure])

    @jax.jit
    def evaluate(batch):
        success = jax.vmap(SMALL.success_probability, in_axes=(None, 0))(params, batch)
        passes = [jax.vmap(lambda lg, k=k: SMALL.pass_at_k(params, lg, k))(batch) for k in ks]
        return success, jnp.stack(passes)  # [B, P], [len(ks), B, P]

    success, passes = evaluate(batch)
    for b in range(len(batch)):
        p = np_softmax(batch[b])[rows, correct]
        np.testing.assert_allclose(success[b], p, rtol=1e-5, atol=1e-7)
        for j, k in enumerate(ks):
            np.testing.assert_allclose(passes[j, b], -np.expm1(k * np.log1p(-p)),
                                       rtol=1e-5, atol=1e-7, err_msg=f"policy {b}, k={k}")
    np.testing.assert_allclose(passes[2, 2], 1 - (5 / 6) ** 8, rtol=1e-6)
    np.testing.assert_allclose(passes[:, 3], 1.0, rtol=1e-7)
    tiny = np.exp(-30.0) / (np.exp(-30.0) + num_answers - 1)
    np.testing.assert_allclose(passes[:, 4], np.broadcast_to(
        np.array(ks, np.float64)[:, None] * tiny, passes[:, 4].shape), rtol=1e-5)


def test_pass_at_k_matches_monte_carlo(params):
    """Draw k answers per prompt from the policy (numpy inverse CDF), score them with
    ``reward``, and compare the fraction of prompts solved at least once to pass@k."""
    k, trials, num_prompts = 3, 20_000, SMALL.num_prompts
    logits = params.prior_logits
    cdf = np.cumsum(np_softmax(logits), axis=-1)  # [P, K]
    u = np.random.default_rng(6).random((trials, k, num_prompts))
    answers = (u[..., None] > cdf).sum(axis=-1).clip(0, SMALL.num_answers - 1)
    prompt_ids = np.broadcast_to(np.arange(num_prompts), answers.shape)
    rewards = np.asarray(jax.jit(SMALL.reward)(params, prompt_ids.astype(np.int32),
                                               answers.astype(np.int32)))
    hits = rewards.max(axis=1).mean(axis=0)  # [P]
    exact = np.asarray(SMALL.pass_at_k(params, logits, k))
    se = np.sqrt(exact * (1 - exact) / trials)
    assert np.all(np.abs(hits - exact) < 5 * se + 1e-3)


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_pass_at_k_rejects_bad_k(params, k):
    with pytest.raises(ValueError, match=r"^k:"):
        SMALL.pass_at_k(params, params.prior_logits, k)


def test_sample_params_jit_vmap_and_determinism(params):
    keys = jax.random.split(jax.random.key(7), 4)
    batched = sample_batch(keys)  # jit of vmap over keys
    assert batched.prior_logits.shape == (4, SMALL.num_prompts, SMALL.num_answers)
    for i in range(4):  # = the per-key loop
        one = SMALL.sample_params(keys[i])
        np.testing.assert_array_equal(batched.correct[i], one.correct)
        np.testing.assert_allclose(batched.p0[i], one.p0, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(batched.prior_logits[i], one.prior_logits, rtol=1e-6,
                                   atol=1e-6)
    # same key -> same bank; different keys -> different banks
    again = SMALL.sample_params(jax.random.key(0))
    np.testing.assert_array_equal(again.correct, params.correct)
    np.testing.assert_array_equal(again.p0, params.p0)
    twice = sample_batch(jnp.stack([jax.random.key(0), jax.random.key(0), keys[1], keys[2]]))
    np.testing.assert_array_equal(twice.correct[0], twice.correct[1])
    np.testing.assert_array_equal(twice.p0[0], twice.p0[1])
    np.testing.assert_array_equal(twice.correct[0], params.correct)
    np.testing.assert_allclose(twice.p0[0], params.p0, rtol=1e-6, atol=1e-7)
    assert not np.array_equal(batched.p0[0], batched.p0[1])
    assert not np.array_equal(batched.correct[0], batched.correct[1])


def test_reset_step_contract(params):
    num_prompts, num_draws = SMALL.num_prompts, 6400
    correct = np.asarray(params.correct)
    assert SMALL.num_actions == SMALL.num_answers and SMALL.num_states == num_prompts

    reset = jax.jit(jax.vmap(SMALL.reset, in_axes=(0, None)))
    obs, state = reset(jax.random.split(jax.random.key(1), num_draws), params)
    assert isinstance(state, PromptBankState)
    assert obs.dtype == jnp.int32
    np.testing.assert_array_equal(obs, state.prompt)
    np.testing.assert_array_equal(state.time, 0)
    counts = np.bincount(np.asarray(obs), minlength=num_prompts)
    assert counts.shape == (num_prompts,)
    assert st.chisquare(counts).pvalue > 1e-4  # uniform over prompts

    step = jax.jit(jax.vmap(SMALL.step, in_axes=(0, 0, 0, None)))
    actions = jnp.asarray(np.arange(num_draws) % SMALL.num_answers, jnp.int32)
    new_obs, new_state, reward, terminated, truncated, info = step(
        jax.random.split(jax.random.key(2), num_draws), state, actions, params)
    prompts = np.asarray(state.prompt)
    np.testing.assert_array_equal(reward, (np.asarray(actions) == correct[prompts]) * 1.0)
    assert reward.dtype == jnp.float32
    assert np.all(np.asarray(terminated)) and not np.any(np.asarray(truncated))
    np.testing.assert_array_equal(info["prompt"], prompts)
    # auto-reset: the returned obs/state are a fresh episode's first step
    np.testing.assert_array_equal(new_state.time, 0)
    np.testing.assert_array_equal(new_obs, new_state.prompt)
    assert np.asarray(new_obs).min() >= 0 and np.asarray(new_obs).max() < num_prompts
    assert (np.asarray(new_obs) != np.asarray(obs)).mean() > 0.9  # fresh draws

    # default params: the bank of key 0
    obs0, state0 = SMALL.reset(jax.random.key(3))
    _, _, r0, *_ = SMALL.step(jax.random.key(4), state0, params.correct[obs0])
    assert float(r0) == 1.0


@pytest.mark.parametrize("field, value", [
    ("num_prompts", 0), ("num_prompts", 2.0),
    ("num_answers", 1), ("num_answers", 0),
    ("easy_fraction", -0.1), ("easy_fraction", 1.5), ("easy_fraction", float("nan")),
    ("easy_a", 0.0), ("easy_b", -1.0), ("hard_a", 0.0), ("hard_b", -2.0),
    ("hard_a", float("inf")),
    ("min_p0", 0.0), ("min_p0", 0.5), ("min_p0", -0.1),
])
def test_validation_errors(field, value):
    with pytest.raises(ValueError, match=rf"^{field}:"):
        PromptBank(**{field: value})
