"""CartPole: physics against a slow numpy re-implementation of gym's equations,
termination, truncation and auto-reset, under jit and vmap (and gymnax, when installed)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.envs import CartPole, CartPoleState

GRAVITY, MASSCART, MASSPOLE, LENGTH, FORCE, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
THETA_LIMIT = 12 * 2 * math.pi / 360


def numpy_step(s, action):
    """gym's CartPoleEnv.step (euler), float64, written out term by term."""
    x, x_dot, theta, theta_dot = s
    force = FORCE if action == 1 else -FORCE
    total_mass = MASSCART + MASSPOLE
    polemass_length = MASSPOLE * LENGTH
    costheta, sintheta = math.cos(theta), math.sin(theta)
    temp = (force + polemass_length * theta_dot**2 * sintheta) / total_mass
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        LENGTH * (4.0 / 3.0 - MASSPOLE * costheta**2 / total_mass))
    xacc = temp - polemass_length * thetaacc * costheta / total_mass
    x = x + TAU * x_dot
    x_dot = x_dot + TAU * xacc
    theta = theta + TAU * theta_dot
    theta_dot = theta_dot + TAU * thetaacc
    terminated = x < -2.4 or x > 2.4 or theta < -THETA_LIMIT or theta > THETA_LIMIT
    return np.array([x, x_dot, theta, theta_dot]), terminated


def state_from(values, time=0):
    v = [jnp.float32(a) for a in values]
    return CartPoleState(x=v[0], x_dot=v[1], theta=v[2], theta_dot=v[3], time=jnp.int32(time))


def test_physics_matches_numpy_reference_under_jit():
    env = CartPole()
    step = jax.jit(env.step)
    obs, state = jax.jit(env.reset)(jax.random.key(0))
    s = np.asarray(obs, np.float64)
    rng = np.random.default_rng(0)
    for t in range(60):
        action = int(rng.integers(2))
        expected, terminated = numpy_step(s, action)
        obs, state, reward, term, trunc, info = step(jax.random.key(t), state, jnp.int32(action))
        assert bool(term) == terminated
        assert float(reward) == 1.0 and not bool(trunc)
        np.testing.assert_allclose(info["final_obs"], expected, rtol=1e-5, atol=1e-6)
        assert obs.dtype == jnp.float32 and obs.shape == (4,)
        if terminated:
            assert int(state.time) == 0 and np.all(np.abs(np.asarray(obs)) <= 0.05)
        else:
            np.testing.assert_array_equal(obs, info["final_obs"])
            assert int(state.time) > 0
        s = np.asarray(obs, np.float64)  # continue from the env's float32 state


@pytest.mark.parametrize("values, action", [
    ([2.39, 1.0, 0.0, 0.0], 1),         # cart leaves the track on the right
    ([-2.39, -1.0, 0.0, 0.0], 0),       # ... on the left
    ([0.0, 0.0, 0.205, 1.0], 1),        # pole beyond 12 degrees
    ([0.0, 0.0, -0.205, -1.0], 0),
])
def test_termination_and_auto_reset(values, action):
    env = CartPole()
    obs, state, reward, term, trunc, info = jax.jit(env.step)(
        jax.random.key(1), state_from(values, time=7), jnp.int32(action))
    expected, terminated = numpy_step(np.array(values, np.float64), action)
    assert terminated and bool(term) and not bool(trunc) and float(reward) == 1.0
    np.testing.assert_allclose(info["final_obs"], expected, rtol=1e-5)
    assert int(state.time) == 0 and np.all(np.abs(np.asarray(obs)) <= 0.05)


def test_truncation_at_500_steps_is_flagged_and_resets():
    env = CartPole()
    start = [0.01, 0.0, 0.0, 0.0]
    obs, state, _, term, trunc, info = jax.jit(env.step)(
        jax.random.key(2), state_from(start, time=499), jnp.int32(1))
    assert bool(trunc) and not bool(term)
    np.testing.assert_allclose(info["final_obs"], numpy_step(np.array(start), 1)[0], rtol=1e-5)
    assert int(state.time) == 0
    _, state, _, _, trunc, _ = env.step(jax.random.key(3), state_from(start, time=498),
                                        jnp.int32(1))
    assert not bool(trunc) and int(state.time) == 499
    short = CartPole(max_steps_in_episode=3)
    _, state = short.reset(jax.random.key(0))
    flags = []
    for t in range(6):
        _, state, _, _, trunc, _ = short.step(jax.random.key(t), state, jnp.int32(t % 2))
        flags.append(bool(trunc))
    assert flags == [False, False, True, False, False, True]


def test_reset_is_uniform_in_the_box_and_vmaps():
    env = CartPole()
    obs, state = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.key(0), 2000))
    obs = np.asarray(obs)
    assert obs.shape == (2000, 4) and obs.dtype == np.float32
    assert np.all(np.abs(obs) <= 0.05) and np.all(np.asarray(state.time) == 0)
    np.testing.assert_allclose(obs.mean(axis=0), 0.0, atol=0.003)
    np.testing.assert_allclose(obs.std(axis=0), 0.1 / math.sqrt(12), rtol=0.05)


def test_vmapped_step_equals_single_steps():
    env = CartPole()
    keys = jax.random.split(jax.random.key(5), 8)
    obs, states = jax.vmap(env.reset)(keys)
    actions = jnp.arange(8) % 2
    out = jax.jit(jax.vmap(env.step))(keys, states, actions)
    single_step = jax.jit(env.step)
    for i in (0, 5):
        state_i = jax.tree_util.tree_map(lambda x, i=i: x[i], states)
        single = single_step(keys[i], state_i, actions[i])
        np.testing.assert_allclose(out[0][i], single[0], rtol=1e-6)
        assert bool(out[3][i]) == bool(single[3])


def test_matches_gymnax_cartpole():
    import gymnax

    ref, ref_params = gymnax.make("CartPole-v1")
    env = CartPole()
    obs, state = env.reset(jax.random.key(0))
    ref_state = ref.reset(jax.random.key(0), ref_params)[1].replace(
        x=state.x, x_dot=state.x_dot, theta=state.theta, theta_dot=state.theta_dot)
    rng = np.random.default_rng(1)
    for t in range(40):
        a = jnp.int32(rng.integers(2))
        ref_out = ref.step_env(jax.random.key(t), ref_state, a, ref_params)
        out = env.step_env(jax.random.key(t), state, a, env.default_params)
        np.testing.assert_allclose(out[0], ref_out[0], rtol=1e-5, atol=1e-6)
        assert bool(out[3]) == bool(ref_out[3])
        if bool(out[3]):
            break
        state, ref_state = out[1], ref_out[1]


def test_bad_time_limit():
    with pytest.raises(ValueError, match="max_steps_in_episode"):
        CartPole(max_steps_in_episode=0)
