"""ChainMDP rewards, auto-reset and errors, checked against hand-computed episodes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.envs import ChainMDP


def run_actions(env, actions):
    """Step the env through ``actions`` (a Python list) with jit; returns per-step outputs."""
    step = jax.jit(env.step)
    obs, state = env.reset(jax.random.key(0))
    out = []
    for t, a in enumerate(actions):
        obs_before = int(obs)
        obs, state, r, term, trunc, info = step(jax.random.key(t + 1), state, jnp.int32(a))
        out.append((obs_before, float(r), bool(term), bool(trunc),
                    {k: float(v) for k, v in info.items()}))
    return out


@pytest.mark.parametrize("actions", [[1, 1, 1, 1, 1], [1, 0, 1, 1, 1], [0, 0, 0, 0, 0]])
def test_orm_and_prm_rewards(actions):
    n = len(actions)
    orm = run_actions(ChainMDP(n, "orm"), actions)
    prm = run_actions(ChainMDP(n, "prm"), actions)
    all_correct = all(a == 1 for a in actions)
    for t, a in enumerate(actions):
        last = t == n - 1
        obs, r_orm, term, trunc, info = orm[t]
        assert obs == t
        assert term == last and not trunc
        assert r_orm == (1.0 if (last and all_correct) else 0.0)
        assert info["outcome_reward"] == r_orm
        assert info["process_reward"] == float(a == 1)
        assert info["correct_fraction"] == pytest.approx(sum(actions[: t + 1]) / n)
        assert prm[t][1] == float(a == 1)


def test_auto_reset_starts_a_new_episode():
    env = ChainMDP(3, "orm")
    out = run_actions(env, [1, 1, 1, 1, 0, 1])
    assert [o[0] for o in out] == [0, 1, 2, 0, 1, 2]
    assert [o[1] for o in out] == [0, 0, 1, 0, 0, 0]
    assert out[4][4]["correct_fraction"] == pytest.approx(1 / 3)  # counter was reset


def test_vmap_over_states_and_actions():
    env = ChainMDP(5, "prm")
    obs, state = env.reset(jax.random.key(0))
    states = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (4,)), state)
    actions = jnp.array([0, 1, 1, 0])
    keys = jax.random.split(jax.random.key(1), 4)
    _, new_states, r, *_ = jax.jit(jax.vmap(env.step))(keys, states, actions)
    np.testing.assert_array_equal(r, [0.0, 1.0, 1.0, 0.0])
    np.testing.assert_array_equal(new_states.num_correct, [0, 1, 1, 0])


@pytest.mark.parametrize("length", [0, -1, 2.5, True])
def test_bad_length(length):
    with pytest.raises(ValueError, match="chain length"):
        ChainMDP(length)


def test_bad_reward_mode():
    with pytest.raises(ValueError, match="reward_mode"):
        ChainMDP(5, "dense")
