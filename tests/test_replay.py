"""The replay buffer's contract (rljax.replay over flashbax): circular insertion,
uniform sampling among the filled slots only, bitwise determinism, independent seeds
under vmap; and the Q-network and epsilon-greedy of rljax.policies.qnetwork."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.policies import epsilon_greedy, mlp_q_network
from rljax.replay import replay_buffer

EXAMPLE = {"obs": jnp.zeros(2), "action": jnp.zeros((), jnp.int32)}


def items(values):
    values = jnp.asarray(values, jnp.int32)
    return {"obs": jnp.stack([values, -values], -1).astype(jnp.float32), "action": values}


def test_circular_insertion_wraps_around_and_overwrites_the_oldest():
    buffer = replay_buffer(capacity=4, batch_size=4)
    state = buffer.add(buffer.init(EXAMPLE), items([0, 1, 2]))
    assert int(buffer.size(state)) == 3
    state = buffer.add(state, items([3, 4, 5]))
    assert int(buffer.size(state)) == 4 and bool(buffer.can_sample(state))
    # slots 0..3 after writing 0,1,2 then 3 (slot 3), 4 (slot 0), 5 (slot 1)
    np.testing.assert_array_equal(state.experience["action"][0], [4, 5, 2, 3])
    np.testing.assert_array_equal(state.experience["obs"][0, :, 1], [-4, -5, -2, -3])
    drawn = jax.jit(jax.vmap(buffer.sample, (None, 0)))(
        state, jax.random.split(jax.random.key(0), 64))
    assert set(np.asarray(drawn["action"]).ravel()) == {2, 3, 4, 5}
    np.testing.assert_array_equal(drawn["obs"][..., 0], drawn["action"])  # rows stay whole


def test_sampling_is_uniform_over_the_filled_slots_only():
    buffer = replay_buffer(capacity=16, batch_size=8, min_size=4)
    state = buffer.add(buffer.init(EXAMPLE), items([7, 8, 9]))
    assert not bool(buffer.can_sample(state))
    drawn = jax.jit(jax.vmap(buffer.sample, (None, 0)))(
        state, jax.random.split(jax.random.key(1), 300))["action"]
    counts = np.bincount(np.asarray(drawn).ravel(), minlength=10)[7:]
    assert counts.sum() == 2400  # nothing from the 13 unwritten slots (zeros)
    # uniform: each of 3 values ~ Binomial(2400, 1/3), sd ~ 23
    assert np.all(np.abs(counts - 800) < 100), counts


def test_determinism_and_independent_seeds_under_vmap():
    buffer = replay_buffer(capacity=8, batch_size=5)

    def run(key):
        fill_key, sample_key = jax.random.split(key)
        values = jax.random.randint(fill_key, (6,), 0, 1000)
        state = buffer.add(buffer.init(EXAMPLE), items(values))
        state = buffer.add(state, items(values[:4] + 1000))
        return buffer.sample(state, sample_key)

    keys = jax.random.split(jax.random.key(2), 4)
    batched = jax.jit(jax.vmap(run))(keys)
    for s in range(4):
        alone = jax.jit(run)(keys[s])
        np.testing.assert_array_equal(batched["action"][s], alone["action"])  # bitwise
        np.testing.assert_array_equal(batched["obs"][s], alone["obs"])
    again = jax.jit(jax.vmap(run))(keys)
    np.testing.assert_array_equal(again["action"], batched["action"])
    rows = {tuple(np.asarray(r)) for r in batched["action"]}
    assert len(rows) == 4  # each seed its own buffer and draws


def test_replay_arguments_are_refused():
    for kwargs, name in [({"capacity": 0, "batch_size": 1}, "capacity"),
                         ({"capacity": 4, "batch_size": 5}, "batch_size"),
                         ({"capacity": 4, "batch_size": 2, "min_size": 5}, "min_size")]:
        with pytest.raises(ValueError, match=name):
            replay_buffer(**kwargs)
    buffer = replay_buffer(capacity=2, batch_size=1)
    with pytest.raises(ValueError, match="capacity"):
        buffer.add(buffer.init(EXAMPLE), items([1, 2, 3]))


def test_q_network_heads_under_jit_and_vmap_over_seeds():
    obs = jnp.arange(6.0).reshape(2, 3)
    plain = mlp_q_network(4, (5,))
    dueling = mlp_q_network(4, (5,), layer_norm=True, dueling=True)
    keys = jax.random.split(jax.random.key(3), 3)
    params = jax.jit(jax.vmap(dueling.init, (0, None)))(keys, obs[0])
    assert params["params"]["advantage"]["kernel"].shape == (3, 5, 4)
    assert "LayerNorm_0" in params["params"]
    q = jax.jit(jax.vmap(dueling.apply, (0, None)))(params, obs)
    assert q.shape == (3, 2, 4)
    assert not np.allclose(q[0], q[1])  # seeds initialise differently
    for s in range(3):  # Q = V + A - mean(A), by hand from the parameters
        p = jax.tree.map(lambda x, s=s: np.asarray(x[s]), params["params"])
        h = obs @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"]
        h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-6)
        h = np.maximum(h * p["LayerNorm_0"]["scale"] + p["LayerNorm_0"]["bias"], 0)
        v = h @ p["value"]["kernel"] + p["value"]["bias"]
        adv = h @ p["advantage"]["kernel"] + p["advantage"]["bias"]
        np.testing.assert_allclose(q[s], v + adv - adv.mean(-1, keepdims=True), rtol=1e-5,
                                   atol=1e-5)
    plain_shapes = jax.eval_shape(plain.init, keys[0], obs[0])["params"]
    assert set(plain_shapes) == {"Dense_0", "q"} and plain_shapes["q"]["kernel"].shape == (5, 4)


def test_epsilon_greedy():
    q = jnp.array([[0.0, 2.0, 1.0]] * 400)
    act = jax.jit(epsilon_greedy)  # epsilon traced: one compile
    greedy = act(jax.random.key(4), q, 0.0)
    assert np.all(np.asarray(greedy) == 1)
    explore = act(jax.random.key(5), q, 1.0)
    counts = np.bincount(np.asarray(explore), minlength=3)
    assert np.all(counts > 90), counts  # ~133 each
