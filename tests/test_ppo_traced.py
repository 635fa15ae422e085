"""PPO's traced hyperparameters: ``train(key, hparams)`` reads every field of
``PPOTrainConfig`` declared traced inside the compiled program, bitwise the constant path of the
config with those values (measured: equal in every bit, under jit and vmap), and refuses
names it cannot trace."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.config import traced_fields
from rljax.envs import CartPole
from rljax.policies import mlp_actor_critic
from rljax.training.ppo import (
    PPOTrainConfig,
    make_ppo_chunks,
    make_ppo_train,
    ppo_optimizer,
)

NET = mlp_actor_critic(2, (16, 16))
TRACEABLE_HPARAMS = traced_fields(PPOTrainConfig)
# 3 updates of 4 envs x 16 steps, 2 epochs x 2 minibatches
# (a large step size, so that 3 updates move the ratio past a clip of 0.05)
BASE = PPOTrainConfig(num_envs=4, num_steps=16, total_steps=4 * 16 * 3, num_epochs=2,
                      num_minibatches=2, learning_rate=1e-2, clip_epsilon_high=0.2)
# every traceable field away from its default, each far enough to move 3 updates
CHANGED = {"learning_rate": 3e-3, "adam_eps": 1e-3, "max_grad_norm": 0.05,
           "clip_epsilon": 0.05, "clip_epsilon_high": 0.3, "value_coef": 0.9,
           "entropy_coef": 0.1, "value_clip": 0.05, "gamma": 0.8, "lam": 0.5}


def _assert_bitwise(a, b):
    jax.tree_util.tree_map(np.testing.assert_array_equal, a, b)


def _keys(n):
    return jax.vmap(jax.random.key)(jnp.arange(n))


def test_changed_covers_every_traceable_field():
    assert set(CHANGED) == set(TRACEABLE_HPARAMS)
    assert all(getattr(BASE, k) != v for k, v in CHANGED.items())


@pytest.mark.timeout(240)
def test_traced_values_are_bitwise_the_constant_config():
    """Rows [defaults, changed] through hparams == the constant path of each config."""
    keys = _keys(2)
    constant = {name: jax.jit(jax.vmap(make_ppo_train(CartPole(), NET, config)))(keys)
                for name, config in (("base", BASE), ("changed", BASE.replace(**CHANGED)))}
    train = make_ppo_train(CartPole(), NET, BASE)
    rows = [{k: getattr(BASE, k) for k in TRACEABLE_HPARAMS}, CHANGED]
    # vmap over configs x seeds: [2 configs, 2 seeds]
    hparams = {k: jnp.asarray([[r[k]] * 2 for r in rows], jnp.float32) for k in CHANGED}
    traced = jax.jit(jax.vmap(jax.vmap(train)))(jnp.stack([keys, keys]), hparams)
    for c, name in enumerate(("base", "changed")):
        _assert_bitwise(jax.tree_util.tree_map(lambda x, c=c: x[c], traced), constant[name])
    # and the change moved every logged metric (so the equality above is not vacuous)
    for metric in ("loss", "value_loss", "approx_kl"):
        assert not np.array_equal(traced[metric][0], traced[metric][1]), metric


@pytest.mark.timeout(240)
def test_each_field_alone_moves_the_run():
    """Tracing one field at a time: each changed value gives a different run (so no
    field is ignored in favour of the config's constant)."""
    key = jax.random.key(3)
    train = make_ppo_train(CartPole(), NET, BASE)
    names = list(CHANGED)
    # clip_epsilon_high only acts where a ratio passes 1 + eps_high: in these 3 updates no
    # ratio passes 1.05 (the clip fraction at eps 0.05 is that of the low side alone), so
    # it is compared at eps = eps_high = 0.01 (measured: clip fraction 0.30 -> 0.23 at 1.0)
    context = {"clip_epsilon_high": {"clip_epsilon": 0.01, "clip_epsilon_high": 0.01}}
    base = {k: getattr(BASE, k) for k in names}
    # K = 2 x 10 rows: per field its reference row, then the row with that field changed
    rows = [row for name in names for row in (
        {**base, **context.get(name, {})},
        {**base, **context.get(name, {}), name: CHANGED[name]})]
    hparams = {k: jnp.asarray([r[k] for r in rows], jnp.float32) for k in names}
    logs = jax.jit(jax.vmap(train, in_axes=(None, 0)))(key, hparams)
    for i, name in enumerate(names):
        moved = [m for m in ("loss", "policy_loss", "value_loss", "approx_kl")
                 if not np.array_equal(logs[m][2 * i + 1], logs[m][2 * i])]
        assert moved, f"{name}: tracing it changed nothing"


@pytest.mark.timeout(240)
def test_chunks_with_hparams_are_bitwise_train_with_hparams():
    chunks = make_ppo_chunks(CartPole(), NET, BASE, updates_per_chunk=1)
    hp = {k: jnp.float32(v) for k, v in CHANGED.items()}
    key = jax.random.key(5)

    def chunked(key, hp):
        state = chunks.init(key, hp)
        rows = []
        for _ in range(chunks.num_chunks):
            state, logs = chunks.advance(state, hp)
            rows.append(logs)
        return jax.tree_util.tree_map(lambda *x: jnp.concatenate(x), *rows), \
            chunks.finish(state, hp)

    logs, final = jax.jit(chunked)(key, hp)
    whole = jax.jit(make_ppo_train(CartPole(), NET, BASE))(key, hp)
    _assert_bitwise(logs, {k: v for k, v in whole.items() if k in logs})
    assert int(final["nonfinite_step"]) == -1 == int(whole["nonfinite_step"])


def test_optimizer_state_structure_does_not_depend_on_values():
    params = {"w": jnp.ones((3,))}
    for anneal in (True, False):
        config = BASE.replace(anneal_lr=anneal)
        const = jax.tree_util.tree_structure(ppo_optimizer(config).init(params))
        traced = jax.tree_util.tree_structure(
            ppo_optimizer(config, {"learning_rate": jnp.float32(0.1)}).init(params))
        assert const == traced


@pytest.mark.parametrize("hparams, match", [
    ({"num_envs": 8.0}, "num_envs"),
    ({"learning_rate": 1e-3, "anneal_lr": 0.0}, "anneal_lr"),
    ({"entropy": 0.1}, "entropy"),
])
def test_untraceable_names_are_refused(hparams, match):
    train = make_ppo_train(CartPole(), NET, BASE)
    with pytest.raises(ValueError, match=f"hparams: cannot trace .*{match}") as err:
        train(jax.random.key(0), {k: jnp.float32(v) for k, v in hparams.items()})
    assert len(str(err.value).splitlines()) == 1


def test_value_clip_off_is_structural():
    train = make_ppo_train(CartPole(), NET, BASE.replace(value_clip=None))
    with pytest.raises(ValueError, match="value_clip is traced but config.value_clip is None"):
        train(jax.random.key(0), {"value_clip": jnp.float32(0.2)})


def test_hparams_must_be_scalars():
    train = make_ppo_train(CartPole(), NET, BASE)
    with pytest.raises(ValueError, match=r"hparams: gamma must be a scalar .* shape \(2,\)"):
        train(jax.random.key(0), {"gamma": jnp.ones((2,))})
