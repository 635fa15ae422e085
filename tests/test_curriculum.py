"""Curriculum: pass@k, the difficulty classifier and the four samplers vs slow references."""

import collections
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from rljax.curriculum import (
    DifficultyClassifier,
    Selection,
    dynamic_filter,
    dynamic_sampler,
    pass_at_k,
    prompt_gdro_sampler,
    rollout_gdro_sampler,
    uniform_sampler,
)
from rljax.curriculum.difficulty import pass_at_k_curve, zero_signal_probability

# --------------------------------------------------------------------------------------
# pass@k
# --------------------------------------------------------------------------------------


def brute_pass_at_k(n, c, k):
    """Fraction of the k-subsets of n samples (the first c correct) holding a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_vs_enumeration():
    pairs = [(n, c) for n in range(9) for c in range(n + 1)]
    n = np.array([p[0] for p in pairs], np.int32)
    c = np.array([p[1] for p in pairs], np.int32)
    ks = range(1, 9)

    def all_k(n, c):
        return jnp.stack([pass_at_k(n, c, k) for k in ks])

    got = np.asarray(jax.jit(all_k)(n, c))  # traced n: NaN where n < k
    got_vmap = np.asarray(jax.jit(jax.vmap(all_k, out_axes=1))(n, c))
    np.testing.assert_array_equal(got_vmap, got)
    for row, k in zip(got, ks, strict=True):
        defined = n >= k
        assert np.all(np.isnan(row[~defined]))
        want = [brute_pass_at_k(a, b, k) for a, b in zip(n[defined], c[defined], strict=True)]
        np.testing.assert_allclose(row[defined], want, rtol=1e-5, atol=1e-6)
        assert np.all(row[defined & (n - c < k)] == 1.0)
    np.testing.assert_allclose(pass_at_k(n[n >= 3], c[n >= 3], 3), got[2][n >= 3], rtol=1e-6)


def test_pass_at_k_large_n_is_stable_and_nan_where_traced_n_below_k():
    n = np.array([1000, 5000, 200, 64])
    c = np.array([1, 37, 150, 0])
    k = 10
    want = [1 - math.comb(a - b, k) / math.comb(a, k) for a, b in zip(n, c, strict=True)]
    np.testing.assert_allclose(pass_at_k(n, c, k), want, rtol=2e-6)
    got = jax.jit(lambda n, c: pass_at_k(n, c, 3))(jnp.array([2, 3, 5]), jnp.array([1, 1, 6]))
    assert np.isnan(got[0]) and not np.isnan(got[1]) and np.isnan(got[2])


def test_pass_at_k_errors():
    with pytest.raises(ValueError, match="k"):
        pass_at_k(4, 1, 0)
    with pytest.raises(ValueError, match="k"):
        pass_at_k(np.array([4, 2]), np.array([1, 1]), 3)
    with pytest.raises(ValueError, match="k"):
        pass_at_k(jnp.array(2), 1, 3)  # concrete jax arrays are checked too
    with pytest.raises(ValueError, match="c"):
        pass_at_k(4, 5, 2)


# --------------------------------------------------------------------------------------
# DifficultyClassifier
# --------------------------------------------------------------------------------------


class ReferenceClassifier:
    """Python loop: one deque per prompt, rows recorded one at a time."""

    def __init__(self, clf, initial):
        self.clf = clf
        self.groups = [collections.deque(maxlen=clf.window) for _ in range(clf.num_prompts)]
        self.estimate = np.array(initial, np.float64)
        self.bin = np.array([sum(e >= x for x in clf.bin_edges) for e in initial])

    def update(self, ids, succ, att, valid):
        touched = set()
        for i, s, a, v in zip(ids, succ, att, valid, strict=True):
            if v and a > 0 and 0 <= i < self.clf.num_prompts:
                self.groups[i].append((min(max(s, 0), a), a))
                touched.add(int(i))
        edges = (-np.inf, *self.clf.bin_edges, np.inf)
        h, k = self.clf.hysteresis, self.clf.k
        for p in touched:
            n = sum(a for _, a in self.groups[p])
            c = sum(s for s, _ in self.groups[p])
            if n < k:
                continue
            e = 1 - math.comb(n - c, k) / math.comb(n, k)
            self.estimate[p] = e
            b = self.bin[p]
            if not edges[b] - h <= e < edges[b + 1] + h:
                self.bin[p] = sum(e >= x for x in self.clf.bin_edges)


@pytest.mark.parametrize("k", [1, 2])
def test_classifier_vs_python_reference_with_duplicates(k):
    # Edges and hysteresis chosen so no reachable estimate sits exactly on a threshold.
    clf = DifficultyClassifier(5, bin_edges=(0.31, 0.69), window=3, k=k, hysteresis=0.07)
    rng = np.random.default_rng(k)
    initial = rng.uniform(size=5)
    steps, m = 25, 6
    ids = rng.integers(-1, 6, size=(steps, m))  # -1 and 5 are out of range: ignored
    att = rng.integers(0, 7, size=(steps, m))
    succ = rng.integers(0, 8, size=(steps, m))  # may exceed att: clipped
    valid = rng.uniform(size=(steps, m)) < 0.85

    def run(state, xs):
        state = clf.update(state, *xs)
        return state, (state.estimate, state.bin)

    _, (est, bins) = jax.jit(lambda s, xs: jax.lax.scan(run, s, xs))(
        clf.init(jnp.asarray(initial)),
        (jnp.asarray(ids), jnp.asarray(succ), jnp.asarray(att), jnp.asarray(valid)))
    ref = ReferenceClassifier(clf, initial)
    for t in range(steps):
        ref.update(ids[t], succ[t], att[t], valid[t])
        np.testing.assert_allclose(est[t], ref.estimate, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(bins[t], ref.bin)


def test_classifier_window_forgets_old_groups_and_duplicates_fill_consecutive_slots():
    clf = DifficultyClassifier(3, window=2, hysteresis=0.0)
    update = jax.jit(lambda s, ids, succ, att, valid: clf.update(
        s, jnp.array(ids), jnp.array(succ), jnp.array(att), jnp.array(valid)))
    state = clf.init()
    # Three groups of prompt 0 in one call: only the last two stay (0/4 and 2/4).
    state = update(state, [0, 0, 1, 0], [4, 0, 1, 2], [4, 4, 2, 4], [True] * 4)
    assert float(state.estimate[0]) == pytest.approx(2 / 8)
    assert sorted(np.asarray(state.successes[0]).tolist()) == [0, 2]
    assert int(state.cursor[0]) == 1 and int(state.cursor[1]) == 1
    one = [True, False, False, False]
    state = update(state, [0, 1, 1, 1], [0, 0, 0, 0], [4, 4, 4, 4], one)  # drops 0/4
    assert float(state.estimate[0]) == pytest.approx(2 / 8)
    state = update(state, [0, 1, 1, 1], [0, 0, 0, 0], [4, 4, 4, 4], one)  # drops 2/4
    assert float(state.estimate[0]) == 0.0
    assert float(state.estimate[1]) == 0.5 and float(state.estimate[2]) == 0.5  # prior
    # attempts == 0 and valid == False rows are ignored
    same = update(state, [0, 1, 2, 2], [3, 1, 1, 1], [0, 3, 2, 2], [True, False, False, False])
    for a, b in zip(jax.tree_util.tree_leaves(same), jax.tree_util.tree_leaves(state),
                    strict=True):
        np.testing.assert_array_equal(a, b)


def test_bins_zero_is_hardest():
    clf = DifficultyClassifier(4, bin_edges=(0.2, 0.5, 0.8), hysteresis=0.0)
    est = jnp.array([0.9, 0.1, 0.6, 0.3])
    np.testing.assert_array_equal(clf.init(est).bin, [3, 0, 2, 1])
    np.testing.assert_array_equal(clf.bin_of(jnp.array([0.0, 0.2, 0.79, 1.0])), [0, 1, 2, 3])
    np.testing.assert_array_equal(clf.bin_of(est), np.searchsorted(clf.bin_edges, est, "right"))
    assert clf.num_bins == 4


def test_hysteresis():
    clf = DifficultyClassifier(1, bin_edges=(0.5,), window=1, hysteresis=0.1)
    update = jax.jit(lambda s, c: clf.update(s, jnp.array([0]), c[None], jnp.array([100])))
    state = clf.init()  # prior 0.5 -> bin 1
    assert int(state.bin[0]) == 1
    bins = []
    # Within 0.1 of the edge 0.5 nothing flips (0.45, 0.55, 0.42, 0.58); beyond it, it does.
    for correct in [45, 55, 42, 58, 35, 55, 42, 58, 65, 45, 42, 38, 55]:
        state = update(state, jnp.array(correct))
        bins.append(int(state.bin[0]))
    assert bins == [1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0]
    # Without hysteresis the same sequence flips at every crossing.
    plain = clf.bin_of(jnp.array([45, 55, 42, 58, 35, 55, 42, 58, 65, 45, 42, 38, 55]) / 100)
    np.testing.assert_array_equal(plain, [0, 1, 0, 1, 0, 1, 0, 1, 1, 0, 0, 0, 1])


# --------------------------------------------------------------------------------------
# dynamic_filter
# --------------------------------------------------------------------------------------


def reference_dynamic_filter(rewards, mask, m):
    keep = np.zeros(len(rewards), bool)
    used = 0
    kept = 0
    for i in range(len(rewards)):
        if kept == m:
            break
        used += int(mask[i].sum())
        vals = rewards[i][mask[i]]
        if len(vals) and vals.max() != vals.min():
            keep[i] = True
            kept += 1
    return keep, used, kept == m


def test_dynamic_filter_vs_python_loop():
    rng = np.random.default_rng(0)
    batch, rows, slots, m = 40, 12, 5, 4
    p = rng.choice([0.02, 0.3, 0.5, 0.98], size=(batch, rows, 1))
    rewards = (rng.uniform(size=(batch, rows, slots)) < p).astype(np.float32)
    rewards = np.where(rng.uniform(size=rewards.shape) < 0.05, np.nan, rewards)  # unused junk
    rollouts = rng.integers(1, slots + 1, size=(batch, rows))
    mask = np.arange(slots) < rollouts[..., None]
    rewards = np.where(mask, np.nan_to_num(rewards), rewards)
    keep, used, filled = jax.jit(jax.vmap(lambda r, k: dynamic_filter(r, k, m)))(rewards, mask)
    n_filled = 0
    for b in range(batch):
        want = reference_dynamic_filter(rewards[b], mask[b], m)
        np.testing.assert_array_equal(keep[b], want[0])
        assert int(used[b]) == want[1] and bool(filled[b]) == want[2]
        n_filled += want[2]
    assert 0 < n_filled < batch  # both cases exercised


# --------------------------------------------------------------------------------------
# Samplers
# --------------------------------------------------------------------------------------

CLF = DifficultyClassifier(12, bin_edges=(0.25, 0.75))


def make_sampler(name):
    if name == "uniform":
        return uniform_sampler(CLF, 4, 3)
    if name == "dynamic":
        return dynamic_sampler(CLF, 2, 3, oversample=3)
    if name == "prompt_gdro":
        return prompt_gdro_sampler(CLF, 4, 3)
    return rollout_gdro_sampler(CLF, 4, n_min=1, n_max=5, budget=2.5)


@pytest.mark.parametrize("name", ["uniform", "dynamic", "prompt_gdro", "rollout_gdro"])
def test_sampler_jit_and_vmap_match_per_seed_loop(name):
    sampler = make_sampler(name)
    seeds = 3
    initial = jax.random.uniform(jax.random.key(7), (seeds, CLF.num_prompts))

    def step(state, key):
        select_key, reward_key = jax.random.split(key)
        selection = sampler.select(state, select_key)
        rewards = jax.random.bernoulli(reward_key, 0.5, selection.mask.shape).astype(
            jnp.float32)
        state, info = sampler.update(state, selection, rewards)
        return state, (selection, info)

    def one_step(initial_estimate, key):
        return step(sampler.init(CLF.init(initial_estimate)), key)

    keys = jax.random.split(jax.random.key(0), seeds)
    batched = jax.jit(jax.vmap(one_step))(initial, keys)
    single = jax.jit(one_step)
    for s in range(seeds):
        one = single(initial[s], keys[s])
        jax.tree_util.tree_map(
            lambda b, o, s=s: np.testing.assert_allclose(b[s], o, rtol=1e-6, atol=1e-7),
            batched, one)
    _, (selection, _) = batched
    assert isinstance(selection, Selection)
    rollouts, mask = np.asarray(selection.rollouts), np.asarray(selection.mask)
    assert rollouts.min() >= 1 and rollouts.max() <= mask.shape[-1]
    np.testing.assert_array_equal(mask, np.arange(mask.shape[-1]) < rollouts[..., None])
    assert np.asarray(selection.prompt_ids).max() < CLF.num_prompts
    # every sampler's default init works
    assert sampler.init().difficulty.estimate.shape == (CLF.num_prompts,)


def test_dynamic_sampler_records_examined_rows_only():
    clf = DifficultyClassifier(6, window=4)
    sampler = dynamic_sampler(clf, 2, 2, oversample=3)
    selection = Selection(prompt_ids=jnp.arange(6, dtype=jnp.int32),
                          rollouts=jnp.full((6,), 2, jnp.int32), mask=jnp.ones((6, 2), bool))
    rewards = jnp.array([[1, 1], [0, 1], [0, 0], [1, 0], [0, 1], [1, 1]], jnp.float32)
    state, info = jax.jit(sampler.update)(sampler.init(), selection, rewards)
    np.testing.assert_array_equal(info["kept"], [False, True, False, True, False, False])
    assert int(info["rollouts_used"]) == 8 and bool(info["filled"])
    np.testing.assert_array_equal(state.difficulty.attempts[:, 0], [2, 2, 2, 2, 0, 0])
    np.testing.assert_allclose(state.difficulty.estimate, [1, 0.5, 0, 0.5, 0.5, 0.5])


def test_prompt_gdro_weights_stay_a_distribution_and_upweight_high_loss_bin():
    clf = DifficultyClassifier(30, bin_edges=(0.25, 0.75))
    sampler = prompt_gdro_sampler(clf, 8, 4, step_size=0.1, ema=0.2, exploration=0.1)
    true_p = jnp.repeat(jnp.array([0.05, 0.5, 0.95]), 10)

    @jax.jit
    def run(key, hard_always_fails):
        def step(state, key):
            select_key, reward_key = jax.random.split(key)
            selection = sampler.select(state, select_key)
            p = true_p[selection.prompt_ids][:, None]
            rewards = jnp.where(hard_always_fails,  # loss 1 on hard prompts, 0 elsewhere
                                jnp.broadcast_to(p > 0.25, selection.mask.shape),
                                jax.random.uniform(reward_key, selection.mask.shape))
            state, info = sampler.update(state, selection, rewards.astype(jnp.float32))
            return state, info["bin_weights"]

        state = sampler.init(clf.init(true_p))
        return jax.lax.scan(step, state, jax.random.split(key, 300))

    _, weights = run(jax.random.key(0), False)
    weights = np.asarray(weights)
    assert np.all(weights >= 0) and np.all(np.isfinite(weights))
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    state, weights = run(jax.random.key(1), True)
    q = np.asarray(jax.nn.softmax(state.log_weights))
    assert q.argmax() == 0 and q[0] > 0.9
    assert np.asarray(weights)[-1, 0] > 0.9 * 0.9  # q_mix with exploration 0.1
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)


def test_rollout_gdro_meets_budget_and_favours_high_variance_bins():
    clf = DifficultyClassifier(30, bin_edges=(0.25, 0.75), window=8)
    budget = 4.0
    sampler = rollout_gdro_sampler(clf, 16, n_min=1, n_max=12, budget=budget,
                                   price_step_size=0.5)
    true_p = jnp.repeat(jnp.array([0.02, 0.5, 0.98]), 10)

    @jax.jit
    def run(key):
        def step(state, key):
            select_key, reward_key = jax.random.split(key)
            selection = sampler.select(state, select_key)
            p = true_p[selection.prompt_ids][:, None]
            rewards = jax.random.bernoulli(reward_key, p, selection.mask.shape).astype(
                jnp.float32)
            rows = jnp.zeros(3).at[clf.bin_of(p[:, 0])].add(1.0)
            total = jnp.zeros(3).at[clf.bin_of(p[:, 0])].add(selection.rollouts)
            state, info = sampler.update(state, selection, rewards)
            return state, (selection.rollouts, info, rows, total)

        state = sampler.init(clf.init(true_p))
        return jax.lax.scan(step, state, jax.random.split(key, 300))

    _, (rollouts, info, rows, total) = run(jax.random.key(0))
    assert abs(float(np.mean(rollouts)) - budget) < 0.05
    np.testing.assert_allclose(info["mean_rollouts"], np.mean(rollouts, axis=1), rtol=1e-6)
    assert np.all(np.isfinite(info["bin_rollouts"]))
    per_true_bin = np.asarray(total).sum(0) / np.asarray(rows).sum(0)
    assert per_true_bin[1] > 1.5 * per_true_bin[0] and per_true_bin[1] > 1.5 * per_true_bin[2]
    assert np.all(np.asarray(rollouts) >= 1) and np.all(np.asarray(rollouts) <= 12)


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, field", [
    (dict(bin_edges=(0.5, 0.4)), "bin_edges"),
    (dict(bin_edges=(0.0, 0.5)), "bin_edges"),
    (dict(bin_edges=(0.5, 1.0)), "bin_edges"),
    (dict(window=0), "window"),
    (dict(k=0), "k"),
    (dict(num_prompts=0), "num_prompts"),
    (dict(hysteresis=-0.01), "hysteresis"),
    (dict(bin_edges=(0.4, 0.6), hysteresis=0.1), "hysteresis"),
    (dict(prior=1.5), "prior"),
    (dict(prior=-0.1), "prior"),
])
def test_classifier_validation(kwargs, field):
    kwargs = {"num_prompts": 4, **kwargs}
    with pytest.raises(ValueError, match=field):
        DifficultyClassifier(**kwargs)


@pytest.mark.parametrize("build, field", [
    (lambda: uniform_sampler(CLF, 0, 4), "prompts_per_step"),
    (lambda: uniform_sampler(CLF, 4, 0), "group_size"),
    (lambda: dynamic_sampler(CLF, 4, 4, oversample=0), "oversample"),
    (lambda: dynamic_sampler(CLF, 0, 4), "prompts_per_step"),
    (lambda: prompt_gdro_sampler(CLF, 4, 4, step_size=0.0), "step_size"),
    (lambda: prompt_gdro_sampler(CLF, 4, 4, ema=0.0), "ema"),
    (lambda: prompt_gdro_sampler(CLF, 4, 4, ema=1.5), "ema"),
    (lambda: prompt_gdro_sampler(CLF, 4, 4, exploration=1.0), "exploration"),
    (lambda: prompt_gdro_sampler(CLF, 4, 4, exploration=-0.1), "exploration"),
    (lambda: prompt_gdro_sampler(CLF, 4, 0), "group_size"),
    (lambda: rollout_gdro_sampler(CLF, 4, n_min=0, n_max=4, budget=2), "n_min"),
    (lambda: rollout_gdro_sampler(CLF, 4, n_min=5, n_max=4, budget=4), "n_min"),
    (lambda: rollout_gdro_sampler(CLF, 4, n_min=1, n_max=4, budget=5), "budget"),
    (lambda: rollout_gdro_sampler(CLF, 4, n_min=2, n_max=4, budget=1.5), "budget"),
    (lambda: rollout_gdro_sampler(CLF, 4, n_min=1, n_max=4, budget=2, price_step_size=0),
     "price_step_size"),
    (lambda: rollout_gdro_sampler(CLF, 0, n_min=1, n_max=4, budget=2), "prompts_per_step"),
    (lambda: dynamic_filter(jnp.zeros((4, 2)), jnp.ones((4, 2), bool), 0),
     "prompts_per_step"),
])
def test_sampler_validation(build, field):
    with pytest.raises(ValueError, match=field):
        build()


# pass@k for every k, and the zero-signal probability of a group (lm-grpo's analysis)

def test_pass_curve_is_the_unbiased_estimator():
    rng = np.random.default_rng(0)
    correct = (rng.random((2, 3, 6)) < 0.4).astype(float)
    curve = pass_at_k_curve(correct)
    for s in range(2):
        for p in range(3):
            c = int(correct[s, p].sum())
            for k in range(1, 7):
                expected = 1 - math.comb(6 - c, k) / math.comb(6, k)
                assert curve[s, p, k - 1] == pytest.approx(expected)
    assert np.allclose(curve[..., 0], correct.mean(-1))  # pass@1 is the mean


@pytest.mark.parametrize("p", [0.0, 0.1, 0.37, 0.9, 1.0])
def test_zero_signal_prediction_is_unbiased(p):
    """E_c[(C(c,G) + C(n-c,G)) / C(n,G)] = p^G + (1-p)^G for c ~ Binomial(n, p)."""
    n, g = 32, 8
    c = np.arange(n + 1)
    expected = float(np.sum(scipy.stats.binom.pmf(c, n, p)
                            * np.asarray(zero_signal_probability(n, c, g))))
    assert expected == pytest.approx(p ** g + (1 - p) ** g, abs=2e-6)
