"""The "solve for x" environment: generation, moves, masks, verifiers, a greedy solver."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.envs.equation import (
    HOLDOUT_MODULUS,
    NUM_LEVELS,
    EquationEnv,
    EquationParams,
    distance_to_solved,
    enumerate_equations,
    is_held_out,
    sample_equation,
    sample_split_equation,
)

ENV = EquationEnv()
K = ENV.k


def action_sub_const(k):
    return (k + K) if k < 0 else (k + K - 1)


def action_sub_term(m):
    return 2 * K + action_sub_const(m)


def action_divide(q):
    divisors = [v for v in range(-K, K + 1) if v not in (0, 1)]
    return 4 * K + divisors.index(q)


def greedy(coeffs):
    """Slow obvious solver in Python: move x terms left, constants right, divide, answer."""
    a, b, c, d = coeffs
    if c != 0:
        return action_sub_term(c)
    if b != 0:
        return action_sub_const(b)
    if a != 1:
        return action_divide(a)
    return ENV.answer_action


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_generated_equations_have_integer_solutions(level):
    keys = jax.random.split(jax.random.key(level), 500)
    coeffs, x = jax.jit(jax.vmap(lambda k: sample_equation(k, jnp.int32(level))))(keys)
    a, b, c, d = np.asarray(coeffs).T
    x = np.asarray(x)
    assert np.all(a * x + b == c * x + d) and np.all(a != c)
    if level < 2:
        assert np.all(c == 0)
    if level == 0:
        assert np.all(a == 1)


def test_moves_match_python_arithmetic():
    coeffs = jnp.array([6, 4, 2, -8], jnp.int32)
    np.testing.assert_array_equal(ENV.apply_move(coeffs, action_sub_const(4)), [6, 0, 2, -12])
    np.testing.assert_array_equal(ENV.apply_move(coeffs, action_sub_term(2)), [4, 4, 0, -8])
    np.testing.assert_array_equal(ENV.apply_move(coeffs, action_divide(2)), [3, 2, 1, -4])
    np.testing.assert_array_equal(ENV.apply_move(coeffs, action_divide(-2)), [-3, -2, -1, 4])
    state = ENV.reset(jax.random.key(0))[1].replace(coeffs=coeffs)
    mask = np.asarray(ENV.action_mask(state))
    assert mask.shape == (60,) and mask[action_divide(2)] and mask[action_divide(-2)]
    assert not mask[action_divide(3)] and not mask[action_divide(4)]
    assert mask[: 4 * K].all() and mask[ENV.answer_action]


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_greedy_solver_solves_with_full_process_reward(level):
    params = EquationParams(level=jnp.int32(level))
    step = jax.jit(ENV.step)
    for seed in range(20):
        obs, state = ENV.reset(jax.random.key(seed), params)
        x_star = int(state.solution)
        for t in range(params.max_steps):
            action = greedy(np.asarray(state.coeffs).tolist())
            assert bool(ENV.action_mask(state)[action])
            obs, new_state, reward, term, trunc, info = step(jax.random.key(t), state,
                                                             jnp.int32(action), params)
            assert float(info["process_reward"]) == 1.0
            if bool(term):
                assert float(reward) == 1.0 and int(state.coeffs[3]) == x_star
                break
            state = new_state
        else:
            raise AssertionError("greedy did not finish")
        assert t + 1 <= {0: 2, 1: 3, 2: 4, 3: 4}[level]


def test_wrong_answer_useless_move_and_truncation():
    params = EquationParams(level=jnp.int32(2), max_steps=3)
    _, state = ENV.reset(jax.random.key(3), params)
    # answering before solved form is wrong
    _, _, reward, term, _, info = ENV.step(jax.random.key(0), state, jnp.int32(ENV.answer_action),
                                           params)
    assert bool(term) and float(reward) == 0.0 and float(info["process_reward"]) == 0.0
    # a useless move keeps the solution set but makes no progress
    useless = action_sub_const(7)
    _, s1, r, term, trunc, info = ENV.step(jax.random.key(0), state, jnp.int32(useless), params)
    assert float(info["process_reward"]) == 0.0 and not bool(term)
    a, b, c, d = np.asarray(s1.coeffs)
    x = int(s1.solution)
    assert a * x + b == c * x + d
    # three useless moves: truncated, not terminated
    s = state
    for t in range(3):
        _, s, _, term, trunc, _ = ENV.step(jax.random.key(t), s, jnp.int32(useless), params)
    assert bool(trunc) and not bool(term)


def test_invalid_move_is_a_no_op_and_vmap_over_levels():
    coeffs = jnp.array([3, 1, 0, 7], jnp.int32)
    _, state = ENV.reset(jax.random.key(0))
    state = state.replace(coeffs=coeffs, solution=jnp.int32(2))
    _, s1, r, _, _, info = ENV.step(jax.random.key(0), state, jnp.int32(action_divide(2)))
    np.testing.assert_array_equal(s1.coeffs, coeffs)
    assert not bool(info["valid"]) and float(info["process_reward"]) == 0.0
    params = jax.vmap(lambda lv: EquationParams(level=lv))(jnp.arange(4, dtype=jnp.int32))
    obs, states = jax.jit(jax.vmap(ENV.reset))(jax.random.split(jax.random.key(1), 4), params)
    assert obs.shape == (4, 8)
    assert np.all(np.asarray(jax.vmap(distance_to_solved)(states.coeffs)) >= 1)


def _reference_hash_held_out(a, b, c, d, modulus):
    """Slow obvious reference of the split: the uint32 hash in Python integers."""
    h = 0
    for v in (a, b, c, d):
        h = ((h ^ (v & 0xFFFFFFFF)) * 0x9E3779B1) & 0xFFFFFFFF
        h ^= h >> 15
    return h % modulus == 0


@pytest.mark.parametrize("level", range(NUM_LEVELS))
def test_split_partitions_the_whole_problem_space_and_samplers_respect_it(level):
    space = enumerate_equations(level)
    coeffs = space[:, :4]
    a, b, c, d, x = space.T
    np.testing.assert_array_equal(a * x + b, c * x + d)
    assert len({tuple(r) for r in coeffs.tolist()}) == len(space)  # distinct problems
    held = np.asarray(jax.jit(is_held_out)(jnp.asarray(coeffs)))
    rows = np.arange(len(space))[:: max(1, len(space) // 500)]
    assert [bool(held[i]) for i in rows] == [
        _reference_hash_held_out(*map(int, coeffs[i]), HOLDOUT_MODULUS) for i in rows]
    held_set = {tuple(r) for r in coeffs[held].tolist()}
    train_set = {tuple(r) for r in coeffs[~held].tolist()}
    # Disjoint, covering the space, both sides non-empty (about a fifth held out).
    assert not held_set & train_set and len(held_set) + len(train_set) == len(space)
    assert 0.1 < len(held_set) / len(space) < 0.3
    # Plain draws lie in the enumerated space; split draws on their side only.
    keys = jax.random.split(jax.random.key(level), 2000)
    drawn, _ = jax.jit(jax.vmap(lambda k: sample_equation(k, jnp.int32(level))))(keys)
    assert {tuple(r) for r in np.asarray(drawn).tolist()} <= held_set | train_set
    for side, allowed in ((True, held_set), (False, train_set)):
        got, sol = jax.jit(jax.vmap(
            lambda k, s=side: sample_split_equation(k, jnp.int32(level), HOLDOUT_MODULUS, s)
        ))(keys[:500])
        got = {tuple(r) for r in np.asarray(got).tolist()}
        assert got <= allowed, (side, len(got - allowed))
        assert len(got) > min(10, len(allowed) // 2)


def test_enumerate_equations_rejects_bad_level():
    with pytest.raises(ValueError, match="level"):
        enumerate_equations(4)
