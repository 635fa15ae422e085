"""GRPO transform: variants, errors, and the gradient against a hand-derived reference."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rljax.algorithms import GroupBatch, grpo, multi_step_update
from rljax.policies import categorical_log_prob, tabular_softmax

POLICY = tabular_softmax(1, 4)
REWARDS = jnp.array([0.0, 0.0, 1.0, 0.0])


def make_batch(params, actions, ref=None):
    obs = jnp.zeros(actions.shape, jnp.int32)
    lp = categorical_log_prob(POLICY.apply(params, obs), actions)
    ref_lp = lp if ref is None else categorical_log_prob(POLICY.apply(ref, obs), actions)
    return GroupBatch(obs=obs, actions=actions, mask=jnp.ones(actions.shape),
                      rewards=REWARDS[actions[..., 0]], old_log_probs=lp, ref_log_probs=ref_lp)


def test_on_policy_grpo_gradient_is_advantage_weighted_score():
    """With mu = 1 (ratio 1, no clipping) and no KL, the GRPO gradient of the mean loss is
    -(1/(P G)) sum A_i (onehot(a_i) - pi) -- computed here by a numpy loop."""
    logits = np.log(np.array([0.4, 0.3, 0.2, 0.1], np.float32))
    params = {"logits": jnp.asarray(logits)[None]}
    actions = jnp.array([[[2], [0], [1], [2], [3], [0], [0], [1]],
                         [[0], [0], [0], [0], [2], [1], [1], [3]]])
    rl = grpo(POLICY.apply, group_size=8, kl_beta=0.0)
    grads, _, metrics = jax.jit(rl.update)(params, (), make_batch(params, actions))
    pi = np.exp(logits) / np.exp(logits).sum()
    expected = np.zeros(4)
    for row in np.asarray(actions)[..., 0]:
        r = np.asarray(REWARDS)[row]
        adv = (r - r.mean()) / (r.std() + 1e-6) if r.max() > r.min() else np.zeros_like(r)
        for a, A in zip(row, adv, strict=True):
            expected -= A * (np.eye(4)[a] - pi) / 16
    np.testing.assert_allclose(grads["logits"][0], expected, rtol=1e-5, atol=1e-6)
    assert float(metrics["signal_fraction"]) == 1.0
    assert float(metrics["clip_fraction"]) == 0.0


def test_advantage_variants_are_arguments_and_scale_the_gradient():
    """On-policy, the advantage estimators differ by known scales. (Clip-higher, dual
    clip, GSPO and the KL estimators cannot act on an on-policy batch; they are checked
    off-policy against a numpy reference in tests/test_grpo_variants.py.)"""
    params = {"logits": jnp.zeros((1, 4))}
    actions = jnp.array([[[2], [0], [1], [2]]])
    batch = make_batch(params, actions)
    grads = {}
    for name, kwargs in {
        "grpo": {},
        "dr_grpo": {"advantage": "group_mean", "aggregation": "sequence-mean-token-sum-norm",
                    "kl_beta": 0.0},
        "rloo": {"advantage": "leave_one_out", "kl_beta": 0.0},
    }.items():
        rl = grpo(POLICY.apply, group_size=4, **kwargs)
        grads[name] = np.asarray(rl.update(params, (), batch)[0]["logits"])
    # group_mean vs group_relative differ by the std scale; RLOO by G/(G-1)
    r = np.array([1.0, 0, 0, 1])
    np.testing.assert_allclose(grads["rloo"], grads["dr_grpo"] * 4 / 3, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(grads["grpo"], grads["dr_grpo"] / (r.std() + 1e-6), rtol=1e-4,
                               atol=1e-7)


def test_kl_term_pulls_towards_reference():
    ref = {"logits": jnp.zeros((1, 4))}
    params = {"logits": jnp.array([[2.0, 0.0, 0.0, 0.0]])}
    actions = jnp.array([[[0], [0], [0], [0]]])  # all equal rewards: no policy-gradient signal
    rl = grpo(POLICY.apply, group_size=4, kl_beta=1.0, kl_estimator="k3")
    grads, _, metrics = rl.update(params, (), make_batch(params, actions, ref))
    assert float(metrics["signal_fraction"]) == 0.0
    assert float(metrics["kl"]) > 0
    assert grads["logits"][0, 0] > 0  # descent lowers the over-weighted logit


def test_nan_reward_propagates():
    params = {"logits": jnp.zeros((1, 4))}
    batch = make_batch(params, jnp.array([[[2], [0], [1], [2]]]))
    batch = batch.replace(rewards=batch.rewards.at[0, 1].set(jnp.nan))
    grads, _, metrics = grpo(POLICY.apply, group_size=4).update(params, (), batch)
    assert int(metrics["nan_rewards"]) == 1
    assert np.isnan(np.asarray(grads["logits"])).any()


@pytest.mark.parametrize("kwargs, field", [
    ({"group_size": 1}, "group_size"),
    ({"group_size": 4, "clip_epsilon": 0.0}, "clip_epsilon"),
    ({"group_size": 4, "clip_epsilon": 0.2, "clip_epsilon_high": 0.1}, "clip_epsilon_high"),
    ({"group_size": 4, "kl_beta": -0.1}, "kl_beta"),
    ({"group_size": 4, "aggregation": "mean"}, "aggregation"),
    ({"group_size": 4, "kl_estimator": "k9"}, "kl_estimator"),
    ({"group_size": 4, "advantage": "zscore"}, "advantage"),
])
def test_errors_at_build_time(kwargs, field):
    with pytest.raises(ValueError, match=field):
        grpo(POLICY.apply, **kwargs)


def test_wrong_group_axis_and_shape_mismatch():
    params = {"logits": jnp.zeros((1, 4))}
    batch = make_batch(params, jnp.array([[[2], [0], [1], [2]]]))
    with pytest.raises(ValueError, match="group_size"):
        grpo(POLICY.apply, group_size=8).update(params, (), batch)
    bad = batch.replace(old_log_probs=jnp.zeros((1, 4, 2)))
    with pytest.raises(AssertionError):
        grpo(POLICY.apply, group_size=4).update(params, (), bad)


def test_mu_inner_iterations_with_multi_step_update_under_vmap():
    rl = grpo(POLICY.apply, group_size=4, kl_beta=0.0)
    opt = optax.sgd(0.5)

    def one(key):
        params = {"logits": jnp.zeros((1, 4))}
        actions = jax.random.randint(key, (2, 4, 1), 0, 4)
        batch = make_batch(params, actions)
        params, _, _, metrics = multi_step_update(rl, opt, params, (), opt.init(params), batch,
                                                  key, num_epochs=4, num_minibatches=2)
        return params["logits"], metrics["clip_fraction"]

    logits, clip = jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(0), 3))
    assert logits.shape == (3, 1, 4) and np.all(np.isfinite(logits))
    assert np.all(np.asarray(clip) >= 0)
    with pytest.raises(ValueError, match="num_minibatches"):
        multi_step_update(rl, opt, {"logits": jnp.zeros((1, 4))}, (), opt.init(
            {"logits": jnp.zeros((1, 4))}), make_batch({"logits": jnp.zeros((1, 4))},
                                                        jnp.zeros((3, 4, 1), jnp.int32)),
            jax.random.key(0), num_minibatches=2)
