"""The Jumanji adapter against Jumanji itself: Snake-v1 step by step equal to Jumanji's own
``step``/``reset`` under jit + vmap (flattened observation, reward, episode ends,
``final_obs``, fresh resets from the step key), and the mapping of Jumanji's
``termination`` / ``truncation`` time steps and rljax's own time limit on a tiny Jumanji env
written here."""

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import jumanji  # a dev dependency: a missing one fails, never skips
import numpy as np
import pytest
from jumanji import specs
from jumanji.types import restart, termination, transition, truncation

from rljax.envs import Discrete, JumanjiEnv, JumanjiParams, from_jumanji

pytestmark = pytest.mark.timeout(600)

N, T, EPISODE_LENGTH = 4, 32, 8


@pytest.fixture(scope="module")
def snake():
    return from_jumanji("Snake-v1", episode_length=EPISODE_LENGTH)


@pytest.fixture(scope="module")
def snake_rollouts(snake):
    """rljax's rollout and the reference from Jumanji directly (its ``step``, observation
    flattened by hand, auto-reset by hand from ``reset(key_data(split(key)[1]))``), in one
    program, under uniformly random actions."""
    raw = snake.jumanji_env

    def flat(observation):
        return jnp.concatenate([observation.grid.ravel(), observation.step_count[None],
                                observation.action_mask]).astype(jnp.float32)

    def ours(key, actions):
        reset_key, step_key = jax.random.split(key)
        obs0, state = snake.reset(reset_key)

        def body(state, inputs):
            key, action = inputs
            obs, state, reward, terminated, truncated, info = snake.step(key, state, action)
            return state, dict(obs=obs, reward=reward, terminated=terminated,
                               truncated=truncated, final_obs=info["final_obs"], time=state.time)

        return obs0, jax.lax.scan(body, state, (jax.random.split(step_key, T), actions))[1]

    def reference(key, actions):
        reset_key, step_key = jax.random.split(key)
        state, timestep = raw.reset(jax.random.key_data(reset_key))

        def body(carry, inputs):
            state, time = carry
            key, action = inputs
            state, timestep = raw.step(state, action)
            time = time + 1
            last = timestep.step_type == jumanji.types.StepType.LAST
            terminated = last & (timestep.discount == 0)
            truncated = (time >= EPISODE_LENGTH) & ~terminated
            done = terminated | truncated
            fresh, fresh_step = raw.reset(jax.random.key_data(jax.random.split(key)[1]))
            state = jax.tree_util.tree_map(lambda r, s: jnp.where(done, r, s), fresh, state)
            obs = jnp.where(done, flat(fresh_step.observation), flat(timestep.observation))
            return (state, jnp.where(done, 0, time)), dict(
                obs=obs, reward=timestep.reward, terminated=terminated, truncated=truncated,
                final_obs=flat(timestep.observation), time=jnp.where(done, 0, time))

        out = jax.lax.scan(body, (state, jnp.int32(0)),
                           (jax.random.split(step_key, T), actions))[1]
        return flat(timestep.observation), out

    keys = jax.random.split(jax.random.key(0), N)
    actions = jax.random.randint(jax.random.key(1), (N, T), 0, 4)
    return jax.jit(lambda k, a: (jax.vmap(ours)(k, a), jax.vmap(reference)(k, a)))(keys,
                                                                                   actions)


def test_snake_equals_jumanji_step_by_step_under_jit_and_vmap(snake_rollouts):
    (obs0, ours), (ref_obs0, ref) = snake_rollouts
    np.testing.assert_array_equal(np.asarray(obs0), np.asarray(ref_obs0))
    for name in ("obs", "reward", "terminated", "truncated", "final_obs", "time"):
        np.testing.assert_array_equal(np.asarray(ours[name]), np.asarray(ref[name]),
                                      err_msg=name)
    assert ours["obs"].shape == (N, T, 725) and ours["obs"].dtype == jnp.float32
    terminated, truncated = np.asarray(ours["terminated"]), np.asarray(ours["truncated"])
    assert terminated.any() and truncated.any() and not (terminated & truncated).any()
    done = terminated | truncated
    obs, final = np.asarray(ours["obs"]), np.asarray(ours["final_obs"])
    np.testing.assert_array_equal(obs[~done], final[~done])
    assert not (obs[done] == final[done]).all(axis=-1).any()  # reset: a new snake


def test_snake_spaces_and_layout(snake):
    assert snake.name == "Snake-v1" and snake.action_space() == Discrete(4)
    assert snake.observation_layout == (("grid", (12, 12, 5)), ("step_count", ()),
                                        ("action_mask", (4,)))
    assert snake.observation_space().shape == (725,)
    assert snake.default_params == JumanjiParams(episode_length=EPISODE_LENGTH)
    grid_only = from_jumanji("Snake-v1", observation_fields=["grid"])
    assert grid_only.observation_space().shape == (720,)
    with pytest.raises(ValueError, match="has no field 'board'; fields: grid, step_count"):
        from_jumanji("Snake-v1", observation_fields=["board"])
    with pytest.raises(ValueError, match="unknown Jumanji environment 'Snake-v2'; did you "
                                         "mean Snake-v1"):
        from_jumanji("Snake-v2")
    with pytest.raises(ValueError, match="episode_length: must be None or an integer >= 1"):
        from_jumanji("Snake-v1", episode_length=0)


class _Obs(NamedTuple):
    position: chex.Array  # [2] float32
    mask: chex.Array  # [3] bool


@chex.dataclass
class _State:
    key: chex.PRNGKey
    count: chex.Array


class _Counter(jumanji.Environment):
    """Counts steps from a random start: action 1 ends the episode with ``termination``
    (discount 0); the third step ends it with ``truncation`` (discount 1)."""

    def reset(self, key):
        start = jax.random.uniform(key, ())
        state = _State(key=key, count=jnp.int32(0))
        return state, restart(self._obs(state, start))

    def _obs(self, state, start=0.0):
        return _Obs(position=jnp.stack([jnp.float32(state.count), jnp.float32(start)]),
                    mask=jnp.array([True, False, True]))

    def step(self, state, action):
        state = _State(key=state.key, count=state.count + 1)
        obs, reward = self._obs(state), jnp.float32(1.0)
        stepped = [transition(reward, obs), truncation(reward, obs), termination(reward, obs)]
        which = jnp.where(action == 1, 2, jnp.where(state.count >= 3, 1, 0))
        return state, jax.tree_util.tree_map(lambda *x: jnp.stack(x)[which], *stepped)

    @property
    def observation_spec(self):
        return specs.Spec(_Obs, "Observation",
                          position=specs.Array((2,), jnp.float32, "position"),
                          mask=specs.Array((3,), bool, "mask"))

    @property
    def action_spec(self):
        return specs.DiscreteArray(2, name="action")


def _flags(env, actions):
    def run(key):
        _, state = env.reset(key)

        def body(state, action):
            obs, state, reward, terminated, truncated, info = env.step(
                jax.random.key(7), state, action)
            return state, (terminated, truncated, info["final_obs"])

        return jax.lax.scan(body, state, jnp.asarray(actions))[1]

    terminated, truncated, final = jax.jit(run)(jax.random.key(0))
    return np.asarray(terminated), np.asarray(truncated), np.asarray(final)


def test_termination_and_truncation_time_steps_map_to_the_two_flags():
    env = JumanjiEnv(_Counter(), name="counter")
    assert env.observation_layout == (("position", (2,)), ("mask", (3,)))
    # 0 0 0 | 0 1 | 1 | 0 0 0: truncation (Jumanji's discount 1) on step 3, termination
    # (discount 0) on action 1, time restarts after each end
    terminated, truncated, final = _flags(env, [0, 0, 0, 0, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(truncated, [0, 0, 1, 0, 0, 0, 0, 0, 1])
    np.testing.assert_array_equal(terminated, [0, 0, 0, 0, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(final[:, 0], [1, 2, 3, 1, 2, 1, 1, 2, 3])  # count
    np.testing.assert_array_equal(final[:, 2:], np.tile([1.0, 0.0, 1.0], (9, 1)))  # mask
    # rljax's own limit of 2 steps: a truncation, unless the step terminates
    limited = JumanjiEnv(_Counter(), episode_length=2, name="counter")
    terminated, truncated, _ = _flags(limited, [0, 0, 0, 1, 1, 0, 0])
    np.testing.assert_array_equal(truncated, [0, 1, 0, 0, 0, 0, 1])
    np.testing.assert_array_equal(terminated, [0, 0, 0, 1, 1, 0, 0])


def test_resets_are_fresh_from_the_step_key():
    env = JumanjiEnv(_Counter(), name="counter")
    key = jax.random.key(5)
    _, state = env.reset(jax.random.key(0))
    obs, state, *_ = jax.jit(env.step)(key, state, jnp.int32(1))  # terminates
    reset_obs, reset_state = env.reset(jax.random.split(key)[1])
    np.testing.assert_array_equal(np.asarray(obs), np.asarray(reset_obs))
    np.testing.assert_array_equal(np.asarray(reset_state.jumanji_state.key),
                                  np.asarray(state.jumanji_state.key))
    assert int(state.time) == 0
    # a second episode's start differs from the first one's
    first_obs, _ = env.reset(jax.random.key(0))
    assert not np.array_equal(np.asarray(first_obs), np.asarray(obs))


def test_refuses_non_discrete_actions():
    class _Box(_Counter):
        @property
        def action_spec(self):
            return specs.BoundedArray((2,), jnp.float32, -1.0, 1.0, "action")

    with pytest.raises(ValueError, match="DiscreteArray action spec, got BoundedArray"):
        JumanjiEnv(_Box(), name="box")
    with pytest.raises(TypeError, match="expected a Jumanji environment"):
        JumanjiEnv(object())
