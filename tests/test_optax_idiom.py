"""optax's own idiom for rljax's transforms: ``jax.grad(rl.loss)``, then any optax chain or
wrapper (``MultiSteps``, ``apply_if_finite``, ``inject_hyperparams``), checked against the
closed-form REINFORCE gradient of a tabular softmax policy in numpy; ``rl.loss``'s gradient
is ``rl.update``'s in every bit; ``as_optax`` refuses the places where it cannot be right."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rljax.advantages import ema_baseline
from rljax.algorithms import (
    AS_OPTAX_UPDATES,
    EpisodeBatch,
    GroupBatch,
    LossAux,
    PPOBatch,
    RLTransform,
    as_optax,
    grpo,
    ppo,
    reinforce,
)
from rljax.policies import tabular_softmax

S, A, G, T, K = 5, 2, 4, 3, 3  # states, actions, episodes, steps, batches per MultiSteps
RATE, LR = 0.2, 0.5
POLICY = tabular_softmax(S, A)
# discount 0: each step's return is its own reward, so the gradient has a closed form
RL = reinforce(POLICY.apply, baseline=ema_baseline(0.5, RATE), discount=0.0)


def make_batch(key, nan=False) -> EpisodeBatch:
    """``[G, T]`` random episodes; ``nan``: one reward (and so the score) is NaN."""
    k_obs, k_act, k_rew = jax.random.split(key, 3)
    rewards = jax.random.uniform(k_rew, (G, T))
    rewards = jnp.where(nan, rewards.at[0, 0].set(jnp.nan), rewards)
    return EpisodeBatch(obs=jax.random.randint(k_obs, (G, T), 0, S),
                        actions=jax.random.randint(k_act, (G, T), 0, A),
                        rewards=rewards, mask=jnp.ones((G, T)),
                        episode_reward=jnp.mean(rewards, axis=1))


def init_params(key):
    return {"logits": jax.random.normal(key, (S, A))}


def np_grad(logits, b, batch):
    """Closed form: ``d/dlogits[s] = -(1/G) sum_{g,t: s_gt = s} (r_gt - b) (onehot(a_gt) -
    pi(.|s))`` in float64, and the EMA baseline's next value."""
    logits = np.asarray(logits, np.float64)
    pi = np.exp(logits - logits.max(-1, keepdims=True))
    pi /= pi.sum(-1, keepdims=True)
    obs, act, rew = (np.asarray(x) for x in (batch.obs, batch.actions, batch.rewards))
    grad = np.zeros_like(logits)
    for g in range(G):
        for t in range(T):
            s = obs[g, t]
            grad[s] -= (rew[g, t] - b) * (np.eye(A)[act[g, t]] - pi[s]) / G
    return grad, b + RATE * (np.mean(np.asarray(batch.episode_reward, np.float64)) - b)


def run(opt, params, batches, set_lr=None):
    """Steps of optax's idiom over ``batches`` (leading axis): ``jax.grad(rl.loss)``, then
    ``opt``. The RL state is kept where ``apply_if_finite`` skipped the step. Returns the
    params after each step ``[n, S, A]`` and the optimizer states ``[n, ...]``."""

    def step(carry, inputs):
        params, rl_state, opt_state = carry
        batch, lr = inputs
        if set_lr is not None:
            opt_state.hyperparams["learning_rate"] = lr
        grads, (new_rl_state, _) = jax.grad(RL.loss, has_aux=True)(params, rl_state, batch)
        updates, opt_state = opt.update(grads, opt_state, params)
        if isinstance(opt_state, optax.ApplyIfFiniteState):  # keep a skipped step's RL state
            new_rl_state = jax.tree_util.tree_map(
                lambda new, old: jnp.where(opt_state.last_finite, new, old), new_rl_state,
                rl_state)
        params = optax.apply_updates(params, updates)
        return (params, new_rl_state, opt_state), (params, opt_state)

    lrs = jnp.zeros(len(batches.rewards)) if set_lr is None else jnp.asarray(set_lr)
    carry = (params, RL.init(params), opt.init(params))
    return jax.lax.scan(step, carry, (batches, lrs))[1]


def stack(batches):
    return jax.tree_util.tree_map(lambda *x: jnp.stack(x), *batches)


# -- the loss behind each transform ------------------------------------------------------

def _ppo_case(key):
    k = jax.random.split(key, 6)
    apply = lambda p, obs: (obs @ p["w"], obs @ p["v"])  # noqa: E731
    params = {"w": jax.random.normal(k[0], (4, A)), "v": jax.random.normal(k[1], (4,))}
    batch = PPOBatch(obs=jax.random.normal(k[2], (8, 4)),
                     actions=jax.random.randint(k[3], (8,), 0, A),
                     old_log_probs=-jnp.abs(jax.random.normal(k[4], (8,))) - 0.3,
                     advantages=jax.random.normal(k[5], (8,)), returns=jnp.ones(8),
                     old_values=jnp.zeros(8), mask=(jnp.arange(8) < 6).astype(jnp.float32))
    return ppo(apply, value_clip=0.2), params, batch


def _grpo_case(key):
    k = jax.random.split(key, 5)
    p, g, t = 2, 3, 4
    params = init_params(k[0])
    batch = GroupBatch(obs=jax.random.randint(k[1], (p, g, t), 0, S),
                       actions=jax.random.randint(k[2], (p, g, t), 0, A),
                       mask=jnp.ones((p, g, t)).at[:, :, -1].set(0.0),
                       rewards=jax.random.bernoulli(k[3], 0.5, (p, g)).astype(jnp.float32),
                       old_log_probs=jnp.full((p, g, t), -0.6),
                       ref_log_probs=-jnp.abs(jax.random.normal(k[4], (p, g, t))) - 0.5)
    return grpo(POLICY.apply, group_size=g, entropy_top_q=0.8), params, batch


CASES = {
    "reinforce": lambda key: (RL, init_params(key), make_batch(key)),
    "ppo": _ppo_case,
    "grpo": _grpo_case,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_grad_of_loss_is_update_bitwise(name):
    """``jax.grad(rl.loss, has_aux=True)`` is ``rl.update`` in every bit (each under
    jax.jit): same grads, new state and metrics. Without the aux
    (``jax.grad(lambda p: rl.loss(p, ...)[0])``) XLA compiles a smaller program, equal to
    float32 rounding (measured: up to 3e-7 relative, PPO)."""
    rl, params, batch = CASES[name](jax.random.key(3))
    state = rl.init(params)
    key = jax.random.key(4)
    grads, new_state, metrics = jax.jit(rl.update)(params, state, batch, key)
    aux_grads, aux = jax.jit(jax.grad(rl.loss, has_aux=True))(params, state, batch, key)
    loss, loss_grads = jax.jit(jax.value_and_grad(lambda p: rl.loss(p, state, batch, key)[0]))(
        params)
    assert isinstance(aux, LossAux)
    jax.tree_util.tree_map(np.testing.assert_array_equal, aux_grads, grads)
    jax.tree_util.tree_map(np.testing.assert_array_equal, aux.rl_state, new_state)
    jax.tree_util.tree_map(np.testing.assert_array_equal, aux.metrics, metrics)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-7),
                           loss_grads, grads)
    np.testing.assert_allclose(loss, metrics["loss"], rtol=1e-6)
    assert all(np.any(np.asarray(x) != 0) for x in jax.tree_util.tree_leaves(grads))


def test_reinforce_loss_grad_vs_closed_form():
    params, batch = init_params(jax.random.key(0)), make_batch(jax.random.key(1))
    grads, aux = jax.jit(jax.grad(RL.loss, has_aux=True))(params, RL.init(params), batch)
    expected, b_next = np_grad(params["logits"], 0.5, batch)
    np.testing.assert_allclose(grads["logits"], expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(aux.rl_state.baseline["value"], b_next, rtol=1e-6)


# -- optax wrappers around the gradient --------------------------------------------------

def test_multisteps_equals_mean_of_k_gradients_then_one_step_vmapped_over_seeds():
    """``MultiSteps(sgd, K)`` over K batches == ``params - LR * mean_k grad_k`` (all at the
    same params; the EMA baseline moving batch by batch), for 3 seeds under jit(vmap)."""
    opt = optax.MultiSteps(optax.sgd(LR), every_k_schedule=K)

    def train(key):
        k_params, k_batches = jax.random.split(key)
        batches = jax.vmap(make_batch)(jax.random.split(k_batches, K))
        params, _ = run(opt, init_params(k_params), batches)
        return params["logits"], batches

    seeds = jax.random.split(jax.random.key(7), 3)
    logits, batches = jax.jit(jax.vmap(train))(seeds)  # [3, K, S, A]
    for i, seed in enumerate(seeds):
        start = np.asarray(init_params(jax.random.split(seed)[0])["logits"])
        b, grads = 0.5, []
        for k in range(K):
            grad, b = np_grad(start, b, jax.tree_util.tree_map(lambda x, i=i, k=k: x[i, k],
                                                                batches))
            grads.append(grad)
        for k in range(K - 1):  # the mini-steps leave the params alone
            np.testing.assert_array_equal(logits[i, k], start)
        expected = start - LR * np.mean(grads, axis=0)
        np.testing.assert_allclose(logits[i, -1], expected, rtol=1e-5, atol=1e-6)
        assert not np.allclose(expected, start - LR * grads[-1], atol=1e-3)  # not the last


def test_apply_if_finite_skips_a_nan_batch():
    """A NaN batch: params unchanged, ``notfinite_count`` 1; the next finite batch steps
    from the same params (and, kept by the caller, the same baseline)."""
    opt = optax.apply_if_finite(optax.sgd(LR), max_consecutive_errors=3)
    keys = jax.random.split(jax.random.key(5), 3)
    batches = stack([make_batch(keys[0]), make_batch(keys[1], nan=True), make_batch(keys[2])])
    params = init_params(jax.random.key(6))
    logits, state = jax.jit(lambda p, b: run(opt, p, b))(params, batches)
    assert np.isnan(np.asarray(batches.rewards[1])).any()
    np.testing.assert_array_equal(logits["logits"][1], logits["logits"][0])
    np.testing.assert_array_equal(state.notfinite_count, [0, 1, 0])
    np.testing.assert_array_equal(state.total_notfinite, [0, 1, 1])
    grad0, b = np_grad(params["logits"], 0.5, jax.tree_util.tree_map(lambda x: x[0], batches))
    step1 = np.asarray(params["logits"]) - LR * grad0
    np.testing.assert_allclose(logits["logits"][0], step1, rtol=1e-5, atol=1e-6)
    grad2, _ = np_grad(step1, b, jax.tree_util.tree_map(lambda x: x[2], batches))
    np.testing.assert_allclose(logits["logits"][2], step1 - LR * grad2, rtol=1e-5, atol=1e-6)


def test_inject_hyperparams_changes_the_learning_rate():
    """``inject_hyperparams(sgd)``: the learning rate set in the state between steps (0.5
    then 0.05) is the one each step uses."""
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=LR)
    keys = jax.random.split(jax.random.key(8), 2)
    batches = stack([make_batch(k) for k in keys])
    params = init_params(jax.random.key(9))
    logits, state = jax.jit(lambda p, b: run(opt, p, b, set_lr=[LR, 0.05]))(params, batches)
    np.testing.assert_allclose(state.hyperparams["learning_rate"], [LR, 0.05])
    p, b = np.asarray(params["logits"]), 0.5
    for k, lr in enumerate([LR, 0.05]):
        grad, b = np_grad(p, b, jax.tree_util.tree_map(lambda x, k=k: x[k], batches))
        p = p - lr * grad
        np.testing.assert_allclose(logits["logits"][k], p, rtol=1e-5, atol=1e-6)


# -- as_optax: right where it can be, refusing elsewhere ---------------------------------

def test_as_optax_first_in_chain_and_inside_inject_hyperparams():
    """Where nothing acts on the updates before it, as_optax gives the rl.loss idiom's
    result: first in a (nested) chain, and inside inject_hyperparams."""
    params, batch = init_params(jax.random.key(0)), make_batch(jax.random.key(1))
    grad, _ = np_grad(params["logits"], 0.5, batch)
    txs = {
        "nested": optax.chain(optax.chain(as_optax(RL), optax.clip_by_global_norm(1e3)),
                              optax.sgd(LR)),
        "inject": optax.inject_hyperparams(
            lambda learning_rate: optax.chain(as_optax(RL), optax.sgd(learning_rate)))(
                learning_rate=LR),
    }
    for name, tx in txs.items():
        state = jax.jit(tx.init)(params)
        updates, _ = jax.jit(lambda p, s, b, tx=tx: tx.update(AS_OPTAX_UPDATES, s, p, batch=b))(
            params, state, batch)
        np.testing.assert_allclose(updates["logits"], -LR * grad, rtol=1e-5, atol=1e-7,
                                   err_msg=name)


def _head(*rest):
    return optax.chain(as_optax(RL), *rest)


REFUSED_INIT = {
    "MultiSteps": (lambda: optax.MultiSteps(_head(optax.sgd(LR)), every_k_schedule=2),
                   "inside optax's MultiSteps"),
    "apply_if_finite": (lambda: optax.apply_if_finite(_head(optax.sgd(LR)), 3),
                        "inside optax's apply_if_finite"),
    "chain_ahead": (lambda: optax.chain(optax.clip_by_global_norm(1.0), as_optax(RL),
                                        optax.sgd(LR)), "first member of its optax.chain"),
    "nested_chain_ahead": (lambda: optax.chain(optax.scale(2.0), _head(optax.sgd(LR))),
                           "first member of its optax.chain"),
}


@pytest.mark.parametrize("name", sorted(REFUSED_INIT))
def test_as_optax_refuses_wrappers_and_members_ahead(name):
    """Refused at ``init`` (under jax.jit), one line pointing to ``rl.loss``."""
    make, match = REFUSED_INIT[name]
    params = init_params(jax.random.key(0))
    with pytest.raises(ValueError, match=match) as info:
        jax.jit(make().init)(params)
    assert "jax.grad(rl.loss" in str(info.value) and "\n" not in str(info.value)


def test_as_optax_refuses_at_update_time_too():
    """A wrapper handed a state built outside it is refused by ``update`` as well (jit),
    and so is a chain whose member ahead of as_optax passes the sentinel on unchanged."""
    params, batch = init_params(jax.random.key(0)), make_batch(jax.random.key(1))
    head = _head(optax.sgd(LR))
    wrapped = optax.apply_if_finite(head, 3)
    state = optax.ApplyIfFiniteState(notfinite_count=jnp.zeros([], jnp.int32),
                                     last_finite=jnp.array(True),
                                     total_notfinite=jnp.zeros([], jnp.int32),
                                     inner_state=head.init(params))
    update = jax.jit(lambda p, s, b: wrapped.update(AS_OPTAX_UPDATES, s, p, batch=b))
    with pytest.raises(ValueError, match="inside optax's apply_if_finite"):
        update(params, state, batch)
    ahead = optax.chain(optax.identity(), head)
    state = (optax.identity().init(params), head.init(params))
    with pytest.raises(ValueError, match="first member of its optax.chain"):
        jax.jit(lambda p, s, b: ahead.update(AS_OPTAX_UPDATES, s, p, batch=b))(
            params, state, batch)


def test_as_optax_refuses_the_former_idiom():
    """``tx.update(params, state, params, batch=...)`` (updates ignored): a one-line error
    naming what to pass."""
    params, batch = init_params(jax.random.key(0)), make_batch(jax.random.key(1))
    tx = _head(optax.sgd(LR))
    with pytest.raises(ValueError, match="updates must be rljax.algorithms.AS_OPTAX_UPDATES"):
        jax.jit(lambda p, s, b: tx.update(p, s, p, batch=b))(params, tx.init(params), batch)


def test_transform_built_without_a_loss():
    """``RLTransform(init, update)`` (positional, as before ``loss``) still builds; its
    ``loss`` is a one-line error."""
    rl = RLTransform(RL.init, RL.update)
    assert (rl.init, rl.update) == (RL.init, RL.update) == tuple(rl)[:2]
    params, batch = init_params(jax.random.key(0)), make_batch(jax.random.key(1))
    with pytest.raises(ValueError, match="RLTransform.loss: this transform was built without"):
        rl.loss(params, rl.init(params), batch)
