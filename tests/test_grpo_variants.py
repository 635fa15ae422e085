"""GRPO's variants on an OFF-policy batch, against a float64 numpy reference.

On an on-policy batch every ratio is 1, so clip-higher, dual-clip and the clip itself
cannot act, and KL estimators whose gradients agree at ``pi = pi_ref`` look alike. Here
the batch's old log-probs are the current policy's plus noise (ratios from about 0.45 to
2.2, both sides of ``[1 - eps, 1 + eps]``), the reference policy is another one, and
every variant's gradient is compared with central differences (float64) of the loss
written out in numpy:

    rho_t = exp(log pi(a_t) - log pi_old(a_t))          (or GSPO's s_i, every token of i)
    J_t   = min(rho_t A, clip(rho_t, 1 - eps_low, 1 + eps_high) A)
    J_t   = max(J_t, c A)  where A < 0                   (dual clip c)
    L_t   = -J_t + beta * k(log pi_ref - log pi)         (k1, k2, k3)
    L     = aggregate(L_t, mask)
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.algorithms import GroupBatch, grpo
from rljax.policies import categorical_log_prob, tabular_softmax

P, G, T, S, A = 2, 4, 5, 3, 4
POLICY = tabular_softmax(S, A)


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def make_batch(seed):
    """An off-policy batch: tabular logits, states ``obs [P, G, T]``, unequal lengths."""
    rng = np.random.default_rng(seed)
    table = rng.normal(size=(S, A))
    obs = rng.integers(0, S, (P, G, T))
    actions = rng.integers(0, A, (P, G, T))
    mask = np.ones((P, G, T))
    mask[:, 1, 3:] = 0.0  # shorter sequences
    mask[:, 2, 4:] = 0.0
    current = _log_softmax(table)[obs, actions]
    old = current + rng.uniform(-0.8, 0.8, (P, G, T))  # ratios exp(+-0.8): 0.45 .. 2.2
    ref = _log_softmax(table + rng.normal(size=(S, A)))[obs, actions]
    rewards = rng.integers(0, 2, (P, G)).astype(float)
    rewards[:, 0], rewards[:, 1] = 0.0, 1.0  # every group has signal
    batch = GroupBatch(obs=jnp.asarray(obs, jnp.int32), actions=jnp.asarray(actions, jnp.int32),
                       mask=jnp.asarray(mask, jnp.float32),
                       rewards=jnp.asarray(rewards, jnp.float32),
                       old_log_probs=jnp.asarray(old, jnp.float32),
                       ref_log_probs=jnp.asarray(ref, jnp.float32))
    return table, batch


def reference_loss(table, batch, *, clip_epsilon=0.2, clip_epsilon_high=None, dual_clip=None,
                   sequence_ratio=False, kl_beta=0.04, kl_estimator="k3",
                   aggregation="sequence-mean-token-mean"):
    """The GRPO loss in float64 numpy (module docstring), a scalar."""
    f = lambda x: np.asarray(x, np.float64).reshape(P * G, *np.shape(x)[2:])  # noqa: E731
    obs, actions, mask = f(batch.obs).astype(int), f(batch.actions).astype(int), f(batch.mask)
    old, ref = f(batch.old_log_probs), f(batch.ref_log_probs)
    r = np.asarray(batch.rewards, np.float64)
    adv = np.zeros_like(r)
    for i in range(P):  # group-relative, population std
        if r[i].max() > r[i].min():
            adv[i] = (r[i] - r[i].mean()) / (r[i].std() + 1e-6)
    adv = np.repeat(adv.reshape(P * G, 1), T, axis=1)
    logp = _log_softmax(table)[obs, actions]
    eps_high = clip_epsilon if clip_epsilon_high is None else clip_epsilon_high
    loss = np.zeros_like(logp)
    for i in range(P * G):
        n = mask[i].sum()
        seq = np.exp(np.sum((logp[i] - old[i]) * mask[i]) / n)
        for t in range(T):
            rho = seq if sequence_ratio else np.exp(logp[i, t] - old[i, t])
            a = adv[i, t]
            obj = min(rho * a, np.clip(rho, 1 - clip_epsilon, 1 + eps_high) * a)
            if dual_clip is not None and not sequence_ratio and a < 0:
                obj = max(obj, dual_clip * a)
            log_rho = ref[i, t] - logp[i, t]
            kl = {"k1": -log_rho, "k2": 0.5 * log_rho**2,
                  "k3": np.expm1(log_rho) - log_rho}[kl_estimator]
            loss[i, t] = -obj + kl_beta * kl
    masked = loss * mask
    if aggregation == "token-mean":
        return masked.sum() / mask.sum()
    if aggregation == "sequence-mean-token-mean":
        return np.mean(masked.sum(-1) / mask.sum(-1))
    if aggregation == "sequence-mean-token-sum":
        return np.mean(masked.sum(-1))
    return masked.sum() / (P * G * T)


def reference_grad(table, batch, h=1e-6, **kwargs):
    """Central differences of :func:`reference_loss` in every table entry, ``[S, A]``."""
    grad = np.zeros_like(table)
    for idx in np.ndindex(table.shape):
        e = np.zeros_like(table)
        e[idx] = h
        grad[idx] = (reference_loss(table + e, batch, **kwargs)
                     - reference_loss(table - e, batch, **kwargs)) / (2 * h)
    return grad


def rljax_grad(table, batch, **kwargs):
    rl = grpo(POLICY.apply, group_size=G, **kwargs)
    params = {"logits": jnp.asarray(table, jnp.float32)}
    grads, _, metrics = jax.jit(rl.update)(params, (), batch)
    return np.asarray(grads["logits"], np.float64), metrics


BASE = {"kl_beta": 0.0}
VARIANTS = {
    "clip": {},
    "clip_high": {"clip_epsilon_high": 0.5},
    "dual_clip": {"dual_clip": 1.5},
    "gspo": {"sequence_ratio": True, "clip_epsilon": 0.05, "clip_epsilon_high": 0.1},
    "k1": {"kl_beta": 0.3, "kl_estimator": "k1"},
    "k2": {"kl_beta": 0.3, "kl_estimator": "k2"},
    "k3": {"kl_beta": 0.3, "kl_estimator": "k3"},
    "token_mean": {"aggregation": "token-mean"},
    "token_sum": {"aggregation": "sequence-mean-token-sum"},
    "token_sum_norm": {"aggregation": "sequence-mean-token-sum-norm"},
}


def test_batch_is_off_policy_on_both_sides():
    table, batch = make_batch(0)
    current = np.asarray(categorical_log_prob(POLICY.apply(
        {"logits": jnp.asarray(table, jnp.float32)}, batch.obs), batch.actions))
    ratio = np.exp(current - np.asarray(batch.old_log_probs))
    assert np.sum(ratio < 0.8) >= 5 and np.sum(ratio > 1.5) >= 5
    _, metrics = rljax_grad(table, batch, **BASE)
    assert 0.1 < float(metrics["clip_fraction"]) < 0.9


@functools.cache
def variant_grad(name):
    """rljax's gradient of variant ``name`` on batch 0 (each compiled once per process)."""
    table, batch = make_batch(0)
    return rljax_grad(table, batch, **{**BASE, **VARIANTS[name]})[0]


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_gradient_matches_numpy_reference(name):
    table, batch = make_batch(0)
    kwargs = {**BASE, **VARIANTS[name]}
    grad = variant_grad(name)
    np.testing.assert_allclose(grad, reference_grad(table, batch, **kwargs),
                               rtol=2e-4, atol=2e-6)


@pytest.mark.parametrize("name, baseline", [
    ("clip_high", "clip"), ("dual_clip", "clip"), ("gspo", "clip"),
    ("k1", "k3"), ("k2", "k3"), ("k1", "k2"), ("k3", "clip"),
])
def test_each_variant_changes_the_gradient(name, baseline):
    a, b = variant_grad(name), variant_grad(baseline)
    assert np.max(np.abs(a - b)) > 1e-3, (name, baseline)


def test_variants_under_vmap_over_batches():
    """One transform vmapped over two off-policy batches equals each batch's reference."""
    kwargs = {"clip_epsilon_high": 0.5, "dual_clip": 1.5, "kl_beta": 0.3, "kl_estimator": "k2"}
    (t0, b0), (_, b1) = make_batch(0), make_batch(1)
    rl = grpo(POLICY.apply, group_size=G, **kwargs)
    params = {"logits": jnp.asarray(t0, jnp.float32)}
    stacked = jax.tree_util.tree_map(lambda x, y: jnp.stack([x, y]), b0, b1)
    grads = jax.jit(jax.vmap(lambda b: rl.update(params, (), b)[0]["logits"]))(stacked)
    for i, b in enumerate((b0, b1)):
        np.testing.assert_allclose(grads[i], reference_grad(t0, b, **kwargs),
                                   rtol=2e-4, atol=2e-6)
