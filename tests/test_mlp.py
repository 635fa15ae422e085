"""MLP actor / actor-critic: shapes, orthogonal init with the PPO gains, forward pass vs
a numpy reference, and vmapped (sequential) initialisation under jit."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.policies import mlp_actor, mlp_actor_critic, sequential_init


def layers(params):
    p = params["params"]
    return [(np.asarray(p[f"Dense_{i}"]["kernel"]), np.asarray(p[f"Dense_{i}"]["bias"]))
            for i in range(len(p))]


def numpy_mlp(params, obs):
    x = np.asarray(obs, np.float64)
    layer_list = layers(params)
    for w, b in layer_list[:-1]:
        x = np.tanh(x @ w + b)
    w, b = layer_list[-1]
    return x @ w + b


def test_shapes_and_layout():
    ac = mlp_actor_critic(3)
    params = ac.init(jax.random.key(0), jnp.zeros(5))
    shapes = jax.tree_util.tree_map(lambda x: x.shape, params)
    assert shapes["actor"]["params"]["Dense_0"]["kernel"] == (5, 64)
    assert shapes["actor"]["params"]["Dense_2"]["kernel"] == (64, 3)
    assert shapes["critic"]["params"]["Dense_2"]["kernel"] == (64, 1)
    actor_only = mlp_actor(3).init(jax.random.key(0), jnp.zeros(5))
    assert (jax.tree_util.tree_structure(actor_only)
            == jax.tree_util.tree_structure(params["actor"]))
    logits, value = jax.jit(ac.apply)(params, jnp.ones((7, 2, 5)))
    assert logits.shape == (7, 2, 3) and value.shape == (7, 2)


@pytest.mark.parametrize("width", [16, 64])
def test_orthogonal_init_with_ppo_gains(width):
    params = mlp_actor_critic(2, (width, width)).init(jax.random.key(1), jnp.zeros(4))
    for net, head_gain in (("actor", 0.01), ("critic", 1.0)):
        gains = [math.sqrt(2.0), math.sqrt(2.0), head_gain]
        for (w, b), gain in zip(layers(params[net]), gains, strict=True):
            np.testing.assert_array_equal(b, 0.0)
            small = min(w.shape)
            gram = w.T @ w if w.shape[0] >= w.shape[1] else w @ w.T
            np.testing.assert_allclose(gram, gain**2 * np.eye(small), atol=1e-5 * max(gain, 1))
    # actor and critic torsos are independent draws
    assert not np.allclose(layers(params["actor"])[0][0], layers(params["critic"])[0][0])


def test_forward_matches_numpy_reference_under_jit_and_vmap():
    ac = mlp_actor_critic(2)
    keys = jax.random.split(jax.random.key(2), 3)
    params = jax.vmap(ac.init, in_axes=(0, None))(keys, jnp.zeros(4))
    obs = jax.random.normal(jax.random.key(3), (3, 6, 4))
    logits, values = jax.jit(jax.vmap(ac.apply))(params, obs)
    for s in range(3):
        p = jax.tree_util.tree_map(lambda x, s=s: x[s], params)
        np.testing.assert_allclose(logits[s], numpy_mlp(p["actor"], obs[s]), rtol=1e-4,
                                   atol=1e-6)
        np.testing.assert_allclose(values[s], numpy_mlp(p["critic"], obs[s])[..., 0],
                                   rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(ac.value(p, obs[s]), values[s], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(ac.actor.apply(p["actor"], obs[s]), logits[s], rtol=1e-6,
                                   atol=1e-7)


@pytest.mark.timeout(60)
def test_vmapped_init_is_sequential_and_equals_single_inits():
    ac = mlp_actor_critic(2)
    keys = jax.random.split(jax.random.key(4), 64)
    batched = jax.jit(jax.vmap(ac.init, in_axes=(0, None)))(keys, jnp.zeros(4))
    single = jax.jit(ac.init)
    for i in (0, 17, 63):
        one = single(keys[i], jnp.zeros(4))
        for a, b in zip(jax.tree_util.tree_leaves(one), jax.tree_util.tree_leaves(batched),
                        strict=True):
            np.testing.assert_allclose(a, b[i], rtol=1e-6, atol=1e-7)
    # the helper is a custom_vmap: a vmapped call lowers to a loop, not a batched QR
    hlo = jax.jit(jax.vmap(sequential_init(lambda k: jax.nn.initializers.orthogonal()(
        k, (8, 8))))).lower(keys).as_text()
    assert "while" in hlo


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_actions"):
        mlp_actor(0)
    with pytest.raises(ValueError, match="hidden_sizes"):
        mlp_actor_critic(2, (64, 0))
    with pytest.raises(ValueError, match="activation"):
        mlp_actor(2, activation="gelu")
