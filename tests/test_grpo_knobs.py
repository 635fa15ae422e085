"""GRPO's knobs (issue 17) on an OFF-policy batch, against float64 numpy loops.

Knobs: ``scale_rewards`` (group / batch / none), REINFORCE++ advantages, masking of
truncated completions, DAPO's overlong penalty, the 80/20 entropy mask, several rewards
with weights (sum-then-normalise vs GDPO's normalise-then-sum), and the new metrics
(entropy, clip fractions low / high, response lengths of correct / incorrect completions).

Every token of the batch has its own state of a tabular policy, so per-token entropies are
distinct and the gradient of each table row comes from one token. The batch's old
log-probs are the current policy's plus noise (ratios about 0.45 .. 2.2, on both sides of
the clip range). The reference loss is written out in numpy,

    rho_t = exp(log pi(a_t) - log pi_old(a_t))
    L_t   = -min(rho_t A_i, clip(rho_t, 1 - eps_low, 1 + eps_high) A_i) + beta k3_t
    L     = aggregate(L_t, m)

with the knob's advantages ``A [P, G]`` and mask ``m`` computed by loops, and its
gradient by central differences.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.advantages import (
    batch_normalize,
    make_group_advantage,
    multi_reward_advantages,
    overlong_penalty,
    reinforce_pp_advantages,
    scaled_group_advantages,
)
from rljax.algorithms import GroupBatch, grpo
from rljax.losses import clip_fractions, top_entropy_mask
from rljax.policies import categorical_log_prob, tabular_softmax

P, G, T, A = 4, 4, 5, 4
S = P * G * T  # one state per token
POLICY = tabular_softmax(S, A)
EPS_LOW, EPS_HIGH = 0.2, 0.3


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _entropy(table):
    logp = _log_softmax(table)
    return -np.sum(np.exp(logp) * logp, axis=-1)


def make_batch(seed, k=None):
    """``(table [S, A], GroupBatch)``: an off-policy batch of P groups with rewards of
    different spreads (one group all equal), padding, and two truncated completions.
    ``k``: rewards ``[P, G, k]`` instead of ``[P, G]``."""
    rng = np.random.default_rng(seed)
    table = rng.normal(size=(S, A)) * rng.uniform(0.2, 3.0, (S, 1))
    obs = rng.permutation(S).reshape(P, G, T)
    actions = rng.integers(0, A, (P, G, T))
    mask = np.ones((P, G, T))
    mask[:, 1, 3:] = 0.0
    mask[:, 2, 4:] = 0.0
    mask[0, 3, 2:] = 0.0
    current = _log_softmax(table)[obs, actions]
    old = current + rng.uniform(-0.8, 0.8, (P, G, T))
    ref = _log_softmax(table + rng.normal(size=(S, A)))[obs, actions]
    if k is None:
        rewards = rng.normal(size=(P, G)) * np.array([0.2, 1.0, 3.0, 1.0])[:, None]
        rewards[:, 0] += 1.0  # some completions above the correctness threshold
        rewards[3] = 0.7  # an all-equal group
    else:
        rewards = np.stack([rng.integers(0, 2, (P, G)), rng.integers(0, 2, (P, G)),
                            rng.uniform(-1, 1, (P, G))], axis=-1)[..., :k].astype(float)
        rewards[0, :, 0] = [1, 0, 0, 0]
        rewards[0, :, 1] = [0, 1, 0, 0]  # (1, 0) and (0, 1): equal sums, unequal rewards
    truncated = np.zeros((P, G), bool)
    truncated[0, 0] = truncated[2, 3] = True
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    batch = GroupBatch(obs=jnp.asarray(obs, jnp.int32), actions=jnp.asarray(actions, jnp.int32),
                       mask=f32(mask), rewards=f32(rewards), old_log_probs=f32(old),
                       ref_log_probs=f32(ref), truncated=jnp.asarray(truncated))
    return table, batch


def np_(x):
    return np.asarray(x, np.float64)


# ----------------------------------------------------------------- numpy references


def ref_group_adv(r, baseline="mean", scale="group", eps=1e-6):
    """Group baseline (mean or leave-one-out), then the group / batch / no std."""
    r = np_(r)
    out = np.zeros_like(r)
    batch_std = r.std()
    for i in range(r.shape[0]):
        row = r[i]
        if row.max() == row.min():
            continue
        for j in range(r.shape[1]):
            b = row.mean() if baseline == "mean" else (row.sum() - row[j]) / (len(row) - 1)
            s = {"group": row.std() + eps, "batch": batch_std + eps, "none": 1.0}[scale]
            out[i, j] = (row[j] - b) / s
    return out


def ref_whiten(x, eps=1e-6):
    flat = [v for row in np_(x) for v in row]
    if max(flat) == min(flat):
        return np.zeros_like(np_(x))
    mean = sum(flat) / len(flat)
    std = math.sqrt(sum((v - mean) ** 2 for v in flat) / len(flat))
    return (np_(x) - mean) / (std + eps)


def ref_reinforce_pp(r, baseline=False):
    r = np_(r)
    if not baseline:
        return ref_whiten(r)
    centred = np.array([row - row.mean() for row in r])
    out = ref_whiten(centred)
    for i, row in enumerate(r):
        if row.max() == row.min():
            out[i] = 0.0
    return out


def ref_multi(r, w, mode, batch_norm=True):
    """``r [P, G, K]``: weighted sum then GRPO z-score, or z-score per reward, weighted
    sum, then (GDPO) batch whitening."""
    r = np_(r)
    if mode == "sum_then_normalize":
        return ref_group_adv(np.einsum("pgk,k->pg", r, w))
    total = np.zeros(r.shape[:2])
    for k in range(r.shape[-1]):
        total += w[k] * ref_group_adv(r[..., k])
    return ref_whiten(total) if batch_norm else total


def ref_entropy_mask(table, batch, mask, q):
    """Keep the ceil(q n) highest-entropy of the n valid tokens (a loop over a sort)."""
    ent = _entropy(table)[np.asarray(batch.obs).reshape(P * G, T)]
    valid = [(ent[i, t], i, t) for i in range(P * G) for t in range(T) if mask[i, t] > 0]
    valid.sort(reverse=True)
    k = max(1, math.ceil(q * len(valid) - 1e-9))
    keep = np.zeros_like(mask)
    for _, i, t in valid[:k]:
        keep[i, t] = 1.0
    return keep


def ref_loss(table, batch, adv, mask, *, aggregation="sequence-mean-token-mean",
             kl_beta=0.0):
    """The GRPO loss (module docstring) in float64 numpy; ``adv [P, G]``, ``mask [P G, T]``."""
    obs = np.asarray(batch.obs).reshape(P * G, T)
    actions = np.asarray(batch.actions).reshape(P * G, T)
    old = np_(batch.old_log_probs).reshape(P * G, T)
    ref = np_(batch.ref_log_probs).reshape(P * G, T)
    logp = _log_softmax(table)[obs, actions]
    adv = np_(adv).reshape(P * G)
    loss = np.zeros((P * G, T))
    for i in range(P * G):
        for t in range(T):
            rho = np.exp(logp[i, t] - old[i, t])
            a = adv[i]
            obj = min(rho * a, np.clip(rho, 1 - EPS_LOW, 1 + EPS_HIGH) * a)
            log_rho = ref[i, t] - logp[i, t]
            loss[i, t] = -obj + kl_beta * (np.expm1(log_rho) - log_rho)
    masked = loss * mask
    if aggregation == "token-mean":
        return masked.sum() / mask.sum()
    return np.mean(masked.sum(-1) / np.maximum(mask.sum(-1), 1.0))


def ref_grad(table, batch, adv, mask, h=1e-6, **kwargs):
    grad = np.zeros_like(table)
    for idx in np.ndindex(table.shape):
        e = np.zeros_like(table)
        e[idx] = h
        grad[idx] = (ref_loss(table + e, batch, adv, mask, **kwargs)
                     - ref_loss(table - e, batch, adv, mask, **kwargs)) / (2 * h)
    return grad


def base_mask(batch):
    return np_(batch.mask).reshape(P * G, T)


def rljax_update(table, batch, **kwargs):
    kwargs = {"kl_beta": 0.0, "clip_epsilon": EPS_LOW, "clip_epsilon_high": EPS_HIGH,
              **kwargs}
    rl = grpo(POLICY.apply, group_size=G, **kwargs)
    params = {"logits": jnp.asarray(table, jnp.float32)}
    grads, _, metrics = jax.jit(rl.update)(params, (), batch)
    return np.asarray(grads["logits"], np.float64), metrics


def assert_grad(got, expected):
    assert np.max(np.abs(expected)) > 1e-3  # the comparison is not between two zeros
    np.testing.assert_allclose(got, expected, rtol=2e-4, atol=2e-6)


# ----------------------------------------------------------------- the batch


def test_batch_is_off_policy_on_both_sides_of_the_clip():
    table, batch = make_batch(0)
    current = np.asarray(categorical_log_prob(POLICY.apply(
        {"logits": jnp.asarray(table, jnp.float32)}, batch.obs), batch.actions))
    ratio = np.exp(current - np.asarray(batch.old_log_probs))[np.asarray(batch.mask) > 0]
    assert np.sum(ratio < 1 - EPS_LOW) >= 5 and np.sum(ratio > 1 + EPS_HIGH) >= 5


# ----------------------------------------------------------------- 1. scale_rewards


@pytest.mark.parametrize("advantage, baseline", [("group_relative", "mean"),
                                                 ("group_mean", "mean"),
                                                 ("leave_one_out", "loo")])
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_scale_rewards_advantages_vs_numpy_jit_vmap(advantage, baseline, scale):
    _, b0 = make_batch(0)
    _, b1 = make_batch(1)
    fn = make_group_advantage(advantage, scale_rewards=scale)
    got = jax.jit(jax.vmap(fn))(jnp.stack([b0.rewards, b1.rewards]))
    for i, b in enumerate((b0, b1)):
        np.testing.assert_allclose(got[i], ref_group_adv(b.rewards, baseline, scale),
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_scale_rewards_gradient_vs_numpy(scale):
    table, batch = make_batch(0)
    got, _ = rljax_update(table, batch, scale_rewards=scale)
    assert_grad(got, ref_grad(table, batch, ref_group_adv(batch.rewards, "mean", scale),
                              base_mask(batch)))


def test_scale_rewards_batch_differs_from_group_and_defaults_are_bitwise():
    table, batch = make_batch(0)
    r = batch.rewards
    assert np.max(np.abs(ref_group_adv(r, scale="batch") - ref_group_adv(r, scale="group"))) > 0.1
    default, _ = rljax_update(table, batch)
    for kwargs in ({"scale_rewards": "group"},
                   {"advantage": "group_mean", "scale_rewards": "group"}):
        got, _ = rljax_update(table, batch, **kwargs)
        np.testing.assert_allclose(got, default, rtol=1e-6, atol=1e-8)
    same, _ = rljax_update(table, batch, scale_rewards="group")
    np.testing.assert_array_equal(same, default)  # naming the default scale: bit for bit
    np.testing.assert_array_equal(
        rljax_update(table, batch, advantage="group_mean", scale_rewards="none")[0],
        rljax_update(table, batch, advantage="group_mean")[0])


# ----------------------------------------------------------------- 2. REINFORCE++


@pytest.mark.parametrize("baseline", [False, True])
def test_reinforce_pp_advantages_vs_numpy_jit_vmap(baseline):
    _, b0 = make_batch(0)
    _, b1 = make_batch(1)
    fn = lambda r: reinforce_pp_advantages(r, group_baseline=baseline)  # noqa: E731
    got = jax.jit(jax.vmap(fn))(jnp.stack([b0.rewards, b1.rewards]))
    for i, b in enumerate((b0, b1)):
        expected = ref_reinforce_pp(b.rewards, baseline)
        np.testing.assert_allclose(got[i], expected, rtol=1e-5, atol=1e-6)
    # global, not per group: the all-equal group 3 has signal only without the baseline
    assert np.all(np.asarray(got[0, 3]) == 0.0) == baseline


@pytest.mark.parametrize("name, baseline", [("reinforce_pp", False),
                                            ("reinforce_pp_baseline", True)])
def test_reinforce_pp_gradient_vs_numpy(name, baseline):
    table, batch = make_batch(0)
    got, _ = rljax_update(table, batch, advantage=name, aggregation="token-mean")
    assert_grad(got, ref_grad(table, batch, ref_reinforce_pp(batch.rewards, baseline),
                              base_mask(batch), aggregation="token-mean"))


def test_batch_normalize_equal_values_and_nan():
    assert np.all(np.asarray(batch_normalize(jnp.full((3, 4), 3.3e7))) == 0.0)
    assert np.isnan(np.asarray(batch_normalize(jnp.array([[1.0, jnp.nan]])))).all()


# ----------------------------------------------------------------- 3. truncation mask


@pytest.mark.parametrize("aggregation", ["token-mean", "sequence-mean-token-mean"])
def test_mask_truncated_gradient_vs_numpy(aggregation):
    table, batch = make_batch(0)
    mask = base_mask(batch)
    truncated = np.asarray(batch.truncated).reshape(P * G)
    for i in range(P * G):
        if truncated[i]:
            mask[i, :] = 0.0
    adv = ref_group_adv(batch.rewards)
    got, metrics = rljax_update(table, batch, mask_truncated=True, aggregation=aggregation)
    assert_grad(got, ref_grad(table, batch, adv, mask, aggregation=aggregation))
    assert float(metrics["truncated_fraction"]) == pytest.approx(2 / (P * G))
    # without the knob the field is only a metric: the full mask trains
    plain, _ = rljax_update(table, batch, aggregation=aggregation)
    assert_grad(plain, ref_grad(table, batch, adv, base_mask(batch), aggregation=aggregation))
    assert np.max(np.abs(plain - got)) > 1e-3


def test_mask_truncated_needs_the_field():
    table, batch = make_batch(0)
    with pytest.raises(ValueError, match="mask_truncated"):
        rljax_update(table, batch.replace(truncated=None), mask_truncated=True)


# ----------------------------------------------------------------- 4. overlong penalty


def ref_overlong(length, max_length, cache_length):
    if length <= max_length - cache_length:
        return 0.0
    if length <= max_length:
        return ((max_length - cache_length) - length) / cache_length
    return -1.0


@pytest.mark.parametrize("max_length, cache_length", [(20, 8), (20, 0), (20, 20), (7, 3)])
def test_overlong_penalty_vs_numpy_jit_vmap(max_length, cache_length):
    lengths = np.arange(0, max_length + 4).reshape(1, -1).repeat(2, 0)
    expected = np.array([[ref_overlong(x, max_length, cache_length) for x in row]
                         for row in lengths])
    fn = lambda x: overlong_penalty(x, max_length, cache_length)  # noqa: E731
    np.testing.assert_allclose(jax.jit(jax.vmap(fn))(lengths), expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(fn(lengths.astype(np.float32)), expected, rtol=1e-6, atol=1e-7)
    if cache_length:  # the ramp: 0 at L_max - L_cache, -1 at L_max, linear between
        assert float(fn(max_length - cache_length)) == 0.0 and float(fn(max_length)) == -1.0
        assert -1.0 < float(fn(max_length - 0.5 * cache_length)) < 0.0


@pytest.mark.parametrize("max_length, cache_length, field", [
    (20, -1, "cache_length"), (20, 21, "cache_length"), (0, 0, "max_length")])
def test_overlong_penalty_errors(max_length, cache_length, field):
    with pytest.raises(ValueError, match=field):
        overlong_penalty(jnp.arange(3), max_length, cache_length)


# ----------------------------------------------------------------- 5. entropy mask


@pytest.mark.parametrize("q", [0.2, 0.5, 1.0])
def test_entropy_top_q_gradient_vs_numpy(q):
    table, batch = make_batch(0)
    mask = ref_entropy_mask(table, batch, base_mask(batch), q)
    got, metrics = rljax_update(table, batch, entropy_top_q=q, aggregation="token-mean",
                                kl_beta=0.1)
    assert_grad(got, ref_grad(table, batch, ref_group_adv(batch.rewards), mask,
                              aggregation="token-mean", kl_beta=0.1))
    n = base_mask(batch).sum()
    assert float(metrics["entropy_kept_fraction"]) == pytest.approx(math.ceil(q * n) / n)


def test_top_entropy_mask_keeps_the_highest_jit_vmap():
    (table, b0), (_, b1) = make_batch(0), make_batch(1)
    ent = jnp.asarray(_entropy(table), jnp.float32)
    masks = jnp.stack([b0.mask, b1.mask]).reshape(2, P * G, T)
    obs = jnp.stack([b0.obs, b1.obs]).reshape(2, P * G, T)
    got = jax.jit(jax.vmap(lambda o, m: top_entropy_mask(ent[o], m, 0.3)))(obs, masks)
    for i, b in enumerate((b0, b1)):
        np.testing.assert_array_equal(got[i], ref_entropy_mask(table, b, base_mask(b), 0.3))


def test_entropy_top_q_with_truncation_counts_only_trained_tokens():
    table, batch = make_batch(0)
    mask = base_mask(batch)
    mask[np.asarray(batch.truncated).reshape(P * G)] = 0.0
    keep = ref_entropy_mask(table, batch, mask, 0.5)
    got, _ = rljax_update(table, batch, entropy_top_q=0.5, mask_truncated=True)
    assert_grad(got, ref_grad(table, batch, ref_group_adv(batch.rewards), keep))


def test_entropy_fn_path_equals_policy_apply_path_and_log_prob_fn_alone_refuses():
    table, batch = make_batch(0)
    params = {"logits": jnp.asarray(table, jnp.float32)}

    def log_prob_fn(p, obs, actions):
        return categorical_log_prob(POLICY.apply(p, obs), actions)

    def entropy_fn(p, obs, actions):
        logp = jax.nn.log_softmax(POLICY.apply(p, obs))
        return -jnp.sum(jnp.exp(logp) * logp, axis=-1)

    kwargs = {"group_size": G, "entropy_top_q": 0.3, "kl_beta": 0.0}
    a = grpo(POLICY.apply, **kwargs).update(params, (), batch)
    b = grpo(log_prob_fn=log_prob_fn, entropy_fn=entropy_fn, **kwargs).update(params, (), batch)
    np.testing.assert_allclose(a[0]["logits"], b[0]["logits"], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(a[2]["entropy"], b[2]["entropy"], rtol=1e-6)
    with pytest.raises(ValueError, match="entropy_top_q"):
        grpo(log_prob_fn=log_prob_fn, **kwargs)
    # log_prob_fn-only users keep working without the knob (no entropy metric then)
    _, _, metrics = grpo(log_prob_fn=log_prob_fn, group_size=G).update(params, (), batch)
    assert "entropy" not in metrics and np.isfinite(float(metrics["loss"]))


# ----------------------------------------------------------------- 6. several rewards

WEIGHTS = np.array([1.0, 0.5, 2.0])


@pytest.mark.parametrize("mode, batch_norm", [("sum_then_normalize", True),
                                              ("normalize_then_sum", True),
                                              ("normalize_then_sum", False)])
def test_multi_reward_advantages_vs_numpy_jit_vmap(mode, batch_norm):
    (_, b0), (_, b1) = make_batch(0, k=3), make_batch(1, k=3)
    adv = make_group_advantage("group_relative")
    fn = lambda r: multi_reward_advantages(r, WEIGHTS, adv, mode=mode,  # noqa: E731
                                           batch_norm=batch_norm)
    got = jax.jit(jax.vmap(fn))(jnp.stack([b0.rewards, b1.rewards]))
    for i, b in enumerate((b0, b1)):
        np.testing.assert_allclose(got[i], ref_multi(b.rewards, WEIGHTS, mode, batch_norm),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["sum_then_normalize", "normalize_then_sum"])
def test_multi_reward_gradient_vs_numpy(mode):
    table, batch = make_batch(0, k=3)
    r = np_(batch.rewards)
    # the two modes disagree on this batch
    assert np.max(np.abs(ref_multi(r, WEIGHTS, "sum_then_normalize")
                         - ref_multi(r, WEIGHTS, "normalize_then_sum"))) > 0.1
    got, metrics = rljax_update(table, batch, reward_weights=WEIGHTS, multi_reward=mode)
    assert_grad(got, ref_grad(table, batch, ref_multi(r, WEIGHTS, mode), base_mask(batch)))
    assert float(metrics["reward"]) == pytest.approx(np.mean(r @ WEIGHTS), rel=1e-5)


def test_multi_reward_shape_errors():
    table, batch = make_batch(0, k=3)
    with pytest.raises(ValueError, match="reward_weights"):
        rljax_update(table, batch)  # [P, G, K] without weights
    with pytest.raises(ValueError, match="reward_weights"):
        rljax_update(table, batch, reward_weights=[1.0, 2.0])  # K mismatch
    _, flat = make_batch(0)
    with pytest.raises(ValueError, match="reward_weights"):
        rljax_update(table, flat, reward_weights=[1.0])  # weights with [P, G] rewards


# ----------------------------------------------------------------- 7. metrics


def test_metrics_vs_numpy():
    table, batch = make_batch(0)
    _, metrics = rljax_update(table, batch, correct_threshold=0.5)
    mask = base_mask(batch)
    obs = np.asarray(batch.obs).reshape(P * G, T)
    ent = _entropy(table)[obs]
    assert float(metrics["entropy"]) == pytest.approx((ent * mask).sum() / mask.sum(), rel=1e-5)
    logp = _log_softmax(table)[obs, np.asarray(batch.actions).reshape(P * G, T)]
    ratio = np.exp(logp - np_(batch.old_log_probs).reshape(P * G, T))
    adv = ref_group_adv(batch.rewards).reshape(P * G)
    low = high = 0
    for i in range(P * G):
        for t in range(T):
            if mask[i, t]:
                low += ratio[i, t] < 1 - EPS_LOW and adv[i] < 0
                high += ratio[i, t] > 1 + EPS_HIGH and adv[i] > 0
    assert low > 0 and high > 0
    assert float(metrics["clipfrac_low"]) == pytest.approx(low / mask.sum(), rel=1e-6)
    assert float(metrics["clipfrac_high"]) == pytest.approx(high / mask.sum(), rel=1e-6)
    assert float(metrics["clip_fraction"]) == pytest.approx(
        float(metrics["clipfrac_low"] + metrics["clipfrac_high"]), rel=1e-6)
    r = np_(batch.rewards)
    lengths = np_(batch.mask).sum(-1)
    right = [lengths[i, j] for i in range(P) for j in range(G) if r[i, j] > 0.5]
    wrong = [lengths[i, j] for i in range(P) for j in range(G) if not r[i, j] > 0.5]
    assert right and wrong and np.mean(right) != np.mean(wrong)
    assert float(metrics["response_length_correct"]) == pytest.approx(np.mean(right))
    assert float(metrics["response_length_incorrect"]) == pytest.approx(np.mean(wrong))


def test_length_metric_is_nan_when_no_completion_is_correct():
    table, batch = make_batch(0)
    _, metrics = rljax_update(table, batch, correct_threshold=1e9)
    assert np.isnan(float(metrics["response_length_correct"]))
    assert float(metrics["response_length_incorrect"]) == pytest.approx(
        float(np_(batch.mask).sum(-1).mean()))


def test_clip_fractions_vs_numpy_jit_vmap():
    rng = np.random.default_rng(3)
    ratio = rng.uniform(0.5, 1.6, (2, 6, 7))
    adv = rng.normal(size=(2, 6, 7))
    mask = (rng.uniform(size=(2, 6, 7)) > 0.3).astype(float)
    fn = lambda r, a, m: clip_fractions(r, a, epsilon_low=0.1, epsilon_high=0.25,  # noqa: E731
                                        mask=m)
    low, high = jax.jit(jax.vmap(fn))(ratio, adv, mask)
    for s in range(2):
        lo = hi = 0.0
        for idx in np.ndindex(ratio.shape[1:]):
            if mask[s][idx]:
                lo += ratio[s][idx] < 0.9 and adv[s][idx] < 0
                hi += ratio[s][idx] > 1.25 and adv[s][idx] > 0
        assert float(low[s]) == pytest.approx(lo / mask[s].sum())
        assert float(high[s]) == pytest.approx(hi / mask[s].sum())


# ----------------------------------------------------------------- everything under vmap


def test_all_knobs_together_under_vmap_over_batches():
    (t0, b0), (_, b1) = make_batch(0, k=3), make_batch(1, k=3)
    kwargs = {"scale_rewards": "batch", "reward_weights": WEIGHTS,
              "multi_reward": "normalize_then_sum", "multi_reward_batch_norm": False,
              "mask_truncated": True, "entropy_top_q": 0.5, "aggregation": "token-mean",
              "kl_beta": 0.0, "clip_epsilon": EPS_LOW, "clip_epsilon_high": EPS_HIGH}
    rl = grpo(POLICY.apply, group_size=G, **kwargs)
    params = {"logits": jnp.asarray(t0, jnp.float32)}
    stacked = jax.tree_util.tree_map(lambda x, y: jnp.stack([x, y]), b0, b1)
    grads = jax.jit(jax.vmap(lambda b: rl.update(params, (), b)[0]["logits"]))(stacked)
    for i, b in enumerate((b0, b1)):
        r = np_(b.rewards)
        adv = sum(WEIGHTS[k] * ref_group_adv(r[..., k], scale="batch") for k in range(3))
        mask = base_mask(b)
        mask[np.asarray(b.truncated).reshape(P * G)] = 0.0
        mask = ref_entropy_mask(t0, b, mask, 0.5)
        assert_grad(np.asarray(grads[i], np.float64),
                    ref_grad(t0, b, adv, mask, aggregation="token-mean"))


# ----------------------------------------------------------------- errors


@pytest.mark.parametrize("kwargs, field", [
    ({"scale_rewards": "std"}, "scale_rewards"),
    ({"scale_rewards": "batch", "advantage": "reinforce_pp"}, "scale_rewards"),
    ({"scale_rewards": "batch", "advantage": lambda r: r}, "scale_rewards"),
    ({"advantage": "reinforce_plus"}, "advantage"),
    ({"entropy_top_q": 0.0}, "entropy_top_q"),
    ({"entropy_top_q": 1.5}, "entropy_top_q"),
    ({"entropy_top_q": -0.2}, "entropy_top_q"),
    ({"entropy_top_q": True}, "entropy_top_q"),
    ({"entropy_top_q": "top"}, "entropy_top_q"),
    ({"reward_weights": [[1.0, 2.0]]}, "reward_weights"),
    ({"reward_weights": []}, "reward_weights"),
    ({"multi_reward": "gdpo"}, "multi_reward"),
])
def test_bad_values_are_one_line_errors(kwargs, field):
    with pytest.raises(ValueError, match=field) as info:
        grpo(POLICY.apply, group_size=G, **kwargs)
    assert "\n" not in str(info.value)


def test_scaled_group_advantages_errors():
    r = jnp.ones((2, 4))
    with pytest.raises(ValueError, match="scale_rewards"):
        scaled_group_advantages(r, scale="global")
    with pytest.raises(ValueError, match="baseline"):
        scaled_group_advantages(r, baseline="median")
    with pytest.raises(ValueError, match="multi_reward"):
        multi_reward_advantages(jnp.ones((2, 4, 2)), jnp.ones(2), lambda x: x, mode="x")
