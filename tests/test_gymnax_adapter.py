"""The gymnax adapter against gymnax itself: the same numbers step by step (jit, vmap,
auto-reset, truncation), gymnax's legacy five-value API, a non-CartPole env, and a PPO
sweep through the adapter."""

import gymnax  # a dev dependency: a missing one fails, never skips
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.algorithms import PPOTrainConfig, make_ppo_train  # noqa: E402
from rljax.algorithms.ppo import _has_final_obs  # noqa: E402  (what PPO checks)
from rljax.envs import CartPole, GymnaxEnv, from_gymnax  # noqa: E402
from rljax.policies import mlp_actor_critic  # noqa: E402
from rljax.sweep import Sweep  # noqa: E402

pytestmark = pytest.mark.timeout(120)

NUM_ENVS, NUM_STEPS = 4, 80


def _rollouts(*envs, num_actions):
    """One compiled program: ``run(keys [N]) -> one tuple per env`` of ``(reset obs [N, ...],
    obs, reward, terminated, truncated, final_obs)``, each ``[N, T, ...]``, under the same
    uniformly random actions and keys. Each env is ``(env, params)``; ``env.step`` may be
    gymnax's (``final_observation``) or rljax's (``final_obs``)."""

    def one(env, params, key):
        reset_key, action_key, step_key = jax.random.split(key, 3)
        obs, state = env.reset(reset_key, params)
        actions = jax.random.randint(action_key, (NUM_STEPS,), 0, num_actions)
        keys = jax.random.split(step_key, NUM_STEPS)

        def body(state, inputs):
            key, action = inputs
            obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)
            final = info["final_obs"] if "final_obs" in info else info["final_observation"]
            return state, (obs, reward, terminated, truncated, final)

        _, out = jax.lax.scan(body, state, (keys, actions))
        return (obs, *out)

    def run(keys):
        return tuple(jax.vmap(lambda k, e=e, p=p: one(e, p, k))(keys) for e, p in envs)

    return jax.jit(run)


def _assert_trees_equal(a, b):
    """Leaf-by-leaf exact equality of two pytrees (obs, env states, flags)."""
    leaves_a, tree_a = jax.tree_util.tree_flatten(a)
    leaves_b, tree_b = jax.tree_util.tree_flatten(b)
    assert tree_a == tree_b
    for x, y in zip(leaves_a, leaves_b, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _keys(seed=0):
    return jax.random.split(jax.random.key(seed), NUM_ENVS)


def test_cartpole_equals_gymnax_step_by_step_under_jit_and_vmap():
    raw, params = gymnax.make("CartPole-v1")
    params = params.replace(max_steps_in_episode=25)  # truncations inside 80 steps
    env = GymnaxEnv(raw, params)
    assert env.num_actions == 2 and env.observation_shape == (4,) and env.name == "CartPole-v1"
    native = CartPole(max_steps_in_episode=25)
    ours, theirs, rljax_native = _rollouts((env, None), (raw, params),  # None: env's params
                                           (native, native.default_params), num_actions=2)(
        _keys())
    names = ("reset obs", "obs", "reward", "terminated", "truncated", "final obs")
    for name, a, b in zip(names, ours, theirs, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)
    _, obs, reward, terminated, truncated, final = ours
    assert obs.shape == (NUM_ENVS, NUM_STEPS, 4) and final.shape == obs.shape
    assert reward.dtype == jnp.float32 and terminated.dtype == truncated.dtype == jnp.bool_
    assert terminated.any() and truncated.any()  # both episode ends are exercised
    done = np.asarray(terminated | truncated)
    # auto-reset: where an episode ended, obs is a fresh one and final_obs the last one
    assert not np.allclose(np.asarray(obs)[done], np.asarray(final)[done])
    np.testing.assert_array_equal(np.asarray(obs)[~done], np.asarray(final)[~done])
    # same keys, same auto-reset key splitting: rljax's native CartPole follows it too
    for name, a, b in zip(names, ours, rljax_native, strict=True):
        if name in ("terminated", "truncated"):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)
        else:
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5,
                                       err_msg=name)


def test_single_steps_outside_jit():
    env = from_gymnax("CartPole-v1")
    raw, params = gymnax.make("CartPole-v1")
    key = jax.random.key(7)
    obs, state = env.reset(key)
    raw_obs, raw_state = raw.reset(key, params)
    np.testing.assert_array_equal(obs, raw_obs)
    for t in range(3):
        out = env.step(jax.random.fold_in(key, t), state, t % 2)
        ref = raw.step(jax.random.fold_in(key, t), raw_state, t % 2, params)
        _assert_trees_equal(out[:5], ref[:5])
        np.testing.assert_array_equal(out[5]["final_obs"], ref[5]["final_observation"])
        state, raw_state = out[1], ref[1]
    # step_env: no auto-reset (what beam search / best-of-n expand with)
    last = state.replace(time=params.max_steps_in_episode - 1)
    out = env.step_env(key, last, 1, params)
    ref = raw.step_env(key, last, 1, params)
    _assert_trees_equal(out[:4], ref[:4])
    assert bool(out[4]) and int(out[1].time) == params.max_steps_in_episode  # truncated
    np.testing.assert_array_equal(out[5]["final_obs"], out[0])
    _assert_trees_equal(env.reset_env(key, params), raw.reset_env(key, params))


def test_acrobot_steps_through_the_adapter():
    """A second classic-control env: 3 actions, 6-d observations, -1 reward per step."""
    raw, params = gymnax.make("Acrobot-v1")
    env = from_gymnax("Acrobot-v1")
    assert env.num_actions == 3 and env.observation_shape == (6,)
    ours, theirs = _rollouts((env, None), (raw, params), num_actions=3)(_keys(1))
    _assert_trees_equal(ours, theirs)
    assert ours[1].shape == (NUM_ENVS, NUM_STEPS, 6)
    assert set(np.unique(np.asarray(ours[2]))) <= {-1.0, 0.0}


def test_legacy_five_value_api_has_no_final_obs():
    """gymnax's ``LegacyStepAPIWrapper`` returns gymnax < 1.0's ``(obs, state, reward,
    done, info)``: ``terminated = done``, ``truncated = False``, no ``final_obs``."""
    from gymnax.wrappers import LegacyStepAPIWrapper

    raw, params = gymnax.make("CartPole-v1")
    params = params.replace(max_steps_in_episode=25)
    legacy = GymnaxEnv(LegacyStepAPIWrapper(raw), params)
    modern = GymnaxEnv(raw, params)
    assert _has_final_obs(modern, params) and not _has_final_obs(legacy, params)
    key = jax.random.key(2)
    _, state = legacy.reset(key)
    ends = set()
    for t in range(30):
        step_key = jax.random.fold_in(key, t)
        action = t % 2  # alternating keeps the pole up: a time-limit end at step 25
        obs, next_state, reward, terminated, truncated, info = legacy.step(step_key, state,
                                                                           action)
        ref = modern.step(step_key, state, action)
        np.testing.assert_array_equal(obs, ref[0])
        assert bool(terminated) == bool(ref[3] | ref[4]) and not bool(truncated)
        assert "final_obs" not in info
        ends |= {"terminated"} if bool(ref[3]) else {"truncated"} if bool(ref[4]) else set()
        state = next_state
    assert "truncated" in ends  # a time limit became a termination


def test_non_discrete_action_space_is_refused():
    env = from_gymnax("Pendulum-v1")
    with pytest.raises(ValueError, match="discrete action space"):
        _ = env.num_actions
    with pytest.raises(TypeError, match="gymnax environment"):
        GymnaxEnv(object())
    with pytest.raises(TypeError, match="make_kwargs"):
        from_gymnax(gymnax.make("CartPole-v1")[0], foo=1)


def test_ppo_sweep_runs_on_a_gymnax_env():
    env = from_gymnax("CartPole-v1")
    config = PPOTrainConfig(num_envs=4, num_steps=16, total_steps=4 * 16 * 3, num_epochs=1,
                            num_minibatches=2, learning_rate=1e-3)  # 3 updates
    train = make_ppo_train(env, mlp_actor_critic(env.num_actions, (16, 16)), config)
    result = Sweep(train, block_size=2).run(2)
    logs = result.outputs
    assert logs["return_sum"].shape == (2, 3) and logs["loss"].shape == (2, 3)
    for name, value in logs.items():
        assert np.all(np.isfinite(value)), name
    assert result.nonfinite == {}
    assert logs["episodes"].sum() > 0  # random-ish CartPole policies end episodes
