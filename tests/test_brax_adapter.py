"""The Brax adapter against Brax itself: step by step equal to a raw Brax env under Brax's
own ``EpisodeWrapper`` (jit + vmap), terminated vs truncated (Brax's ``done`` vs its
``truncation`` flag, the coincident step included), ``final_obs`` before the auto-reset,
rljax's reset semantics (a fresh ``env.reset(split(key)[1])``, not Brax's replayed first
state), action repeat, spaces, bad input, and a few PPO updates on a Brax env.

Pipeline: ``inverted_pendulum`` on MJX (the adapter's default backend), the cheapest Brax env
to compile here (about 6 s for a jitted rollout)."""

import brax  # a dev dependency: a missing one fails, never skips
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from brax.envs.wrappers.training import EpisodeWrapper

from rljax.envs import BraxEnv, BraxParams, from_brax
from rljax.training.evaluation import episode_limit

pytestmark = pytest.mark.timeout(600)

NAME, EPISODE_LENGTH, T = "inverted_pendulum", 4, 16


def _actions(num_steps):
    """``[4, T, 1]``: per env a pattern that produces one kind of episode end on MJX's
    inverted pendulum with a time limit of 4 steps -- zeros (the pole stays up: every end
    is a truncation), full push (the pole falls on step 2: a termination before the limit),
    and ``0, 0, +-1, +-1`` (the pole falls on step 4, the limit: both conditions at once)."""
    pattern = jnp.tile(jnp.array([0.0, 0.0, 1.0, 1.0]), num_steps // 4)
    return jnp.stack([jnp.zeros(num_steps), jnp.ones(num_steps), pattern, -pattern])[..., None]


def _assert_trees_equal(a, b, err_msg=""):
    leaves_a, tree_a = jax.tree_util.tree_flatten(a)
    leaves_b, tree_b = jax.tree_util.tree_flatten(b)
    assert tree_a == tree_b, err_msg
    for x, y in zip(leaves_a, leaves_b, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=err_msg)


@pytest.fixture(scope="module")
def env():
    return from_brax(NAME, episode_length=EPISODE_LENGTH)


@pytest.fixture(scope="module")
def rollouts(env):
    """One compiled program (jit of vmap over 4 envs): rljax's rollout, the reference built
    from Brax directly (raw env under Brax's ``EpisodeWrapper``, auto-reset by hand from
    ``reset(key_data(split(key)[1]))``), and ``env.reset(split(key)[1])`` for every step's
    key. (Brax's own ``AutoResetWrapper``, which restarts every episode from the first
    state, is not compiled here: a third MJX rollout cost a third of the suite's slowest
    fixture, and the adapter's fresh resets are checked without it.) rljax is given the
    actions times 3: out of the box ``[-1, 1]``, so equality with the reference also shows
    the clipping."""
    raw = env.brax_env
    episode = EpisodeWrapper(raw, EPISODE_LENGTH, 1)

    def ours(key, actions):
        reset_key, step_key = jax.random.split(key)
        obs0, state = env.reset(reset_key)
        keys = jax.random.split(step_key, T)

        def body(state, inputs):
            key, action = inputs
            obs, state, reward, terminated, truncated, info = env.step(key, state, 3 * action)
            return state, dict(obs=obs, state=state, reward=reward, terminated=terminated,
                               truncated=truncated, final_obs=info["final_obs"])

        _, out = jax.lax.scan(body, state, (keys, actions))
        reset_keys = jax.vmap(lambda k: jax.random.split(k)[1])(keys)
        out["reset_obs"], out["reset_state"] = jax.vmap(env.reset)(reset_keys)
        return obs0, out

    def reference(key, actions):
        reset_key, step_key = jax.random.split(key)
        state = episode.reset(jax.random.key_data(reset_key))
        obs0 = state.obs

        def body(state, inputs):
            key, action = inputs
            stepped = episode.step(state, action)
            done = stepped.done > 0
            truncation = stepped.info["truncation"] > 0
            restarted = episode.reset(jax.random.key_data(jax.random.split(key)[1]))
            state = jax.tree_util.tree_map(lambda r, s: jnp.where(done, r, s), restarted,
                                           stepped)
            return state, dict(obs=state.obs, reward=stepped.reward,
                               terminated=done & ~truncation, truncated=truncation,
                               final_obs=stepped.obs, pipeline_state=state.pipeline_state)

        _, out = jax.lax.scan(body, state, (jax.random.split(step_key, T), actions))
        return obs0, out

    def run(keys, actions):
        return jax.vmap(ours)(keys, actions), jax.vmap(reference)(keys, actions)

    keys = jax.random.split(jax.random.key(0), 4)
    return jax.jit(run)(keys, _actions(T))


def test_steps_equal_brax_under_jit_and_vmap(rollouts):
    (obs0, ours), (ref_obs0, ref) = rollouts
    np.testing.assert_array_equal(np.asarray(obs0), np.asarray(ref_obs0))
    for name in ("obs", "reward", "terminated", "truncated", "final_obs"):
        np.testing.assert_array_equal(np.asarray(ours[name]), np.asarray(ref[name]),
                                      err_msg=name)
    # the whole physics state follows Brax's, across auto-resets too: q, qd bit for bit;
    # derived leaves (positions of bodies, contacts) to float32 rounding, since XLA fuses
    # the two programs' arithmetic differently (measured: 3 of 576 entries, 1 ulp apart)
    state, ref_state = ours["state"].brax_state.pipeline_state, ref["pipeline_state"]
    for leaf in ("q", "qd"):
        np.testing.assert_array_equal(np.asarray(getattr(state, leaf)),
                                      np.asarray(getattr(ref_state, leaf)), err_msg=leaf)
    jax.tree_util.tree_map(
        lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6,
                                                atol=1e-9), state, ref_state)
    assert ours["obs"].shape == (4, T, 4) and ours["obs"].dtype == jnp.float32
    assert ours["reward"].dtype == jnp.float32
    assert ours["terminated"].dtype == ours["truncated"].dtype == jnp.bool_


def test_terminated_is_physics_truncated_is_time_limit(rollouts):
    (_, ours), _ = rollouts
    terminated, truncated = np.asarray(ours["terminated"]), np.asarray(ours["truncated"])
    time = np.asarray(ours["state"].time)
    every_fourth = (np.arange(T) % 4) == 3
    # env 0: the pole stays up, every 4th step is a time-limit truncation, never terminated
    np.testing.assert_array_equal(truncated[0], every_fourth)
    assert not terminated[0].any()
    # env 1: the pole falls every 2nd step, before the limit: terminated, never truncated
    np.testing.assert_array_equal(terminated[1], (np.arange(T) % 2) == 1)
    assert not truncated[1].any()
    # envs 2, 3: the pole falls on the limit step: a termination, not a truncation
    for i in (2, 3):
        np.testing.assert_array_equal(terminated[i], every_fourth)
        assert not truncated[i].any()
    assert not (terminated & truncated).any()
    # time counts steps within the episode and restarts at 0 after either end
    done = terminated | truncated
    np.testing.assert_array_equal(time[0], np.where(every_fourth, 0, np.arange(T) % 4 + 1))
    assert (time[done] == 0).all()


def test_final_obs_is_the_observation_before_reset(rollouts):
    (_, ours), (_, ref) = rollouts
    done = np.asarray(ours["terminated"] | ours["truncated"])
    obs, final = np.asarray(ours["obs"]), np.asarray(ours["final_obs"])
    np.testing.assert_array_equal(obs[~done], final[~done])  # no reset: the same obs
    assert not np.isclose(obs[done], final[done]).all(axis=-1).any()
    # a terminating step's final obs is past the angle limit (0.2 rad): Brax's own end
    assert (np.abs(final[np.asarray(ours["terminated"])][:, 1]) > 0.2).all()
    np.testing.assert_array_equal(final, np.asarray(ref["final_obs"]))


def test_reset_is_fresh_from_the_step_key_not_brax_first_state(rollouts):
    (obs0, ours), _ = rollouts
    done = np.asarray(ours["terminated"] | ours["truncated"])
    # after an episode end the state IS env.reset(split(step key)[1]) (every leaf)
    _assert_trees_equal(
        jax.tree_util.tree_map(lambda x: np.asarray(x)[done], ours["state"]),
        jax.tree_util.tree_map(lambda x: np.asarray(x)[done], ours["reset_state"]))
    np.testing.assert_array_equal(np.asarray(ours["obs"])[done],
                                  np.asarray(ours["reset_obs"])[done])
    # so successive episodes of one env start from different states (Brax's
    # AutoResetWrapper would restart each from the env's first state)
    for i in range(4):
        starts = np.concatenate([np.asarray(obs0)[i:i + 1], np.asarray(ours["obs"])[i][done[i]]])
        assert len(starts) >= 4
        assert len(np.unique(starts, axis=0)) == len(starts)


def test_action_repeat_equals_brax_episode_wrapper(env):
    repeat, length = 2, 5  # episodes of ceil(5 / 2) = 3 agent steps
    ours_env = BraxEnv(env.brax_env, episode_length=length, action_repeat=repeat, name=NAME)
    episode = EpisodeWrapper(env.brax_env, length, repeat)
    actions = jnp.zeros((6, 1))
    # the limit in agent steps, as the evaluation reads it from the params
    assert ours_env.default_params.max_steps_in_episode == 3 == episode_limit(
        ours_env, ours_env.default_params)
    assert env.default_params.max_steps_in_episode == EPISODE_LENGTH

    def run(key):
        _, state = ours_env.reset(key)
        ref = episode.reset(jax.random.key_data(key))

        def body(carry, action):
            state, ref = carry
            _, state, reward, terminated, truncated, info = ours_env.step(
                jax.random.key(1), state, action)
            ref = episode.step(ref, action)
            return (state, ref), (reward, terminated, truncated, info["final_obs"],
                                  ref.reward, ref.done, ref.info["truncation"], ref.obs)

        return jax.lax.scan(body, (state, ref), actions)[1]

    reward, terminated, truncated, final, ref_reward, ref_done, ref_trunc, ref_obs = (
        jax.jit(run)(jax.random.key(3)))
    # the first episode is compared (Brax's wrapper alone does not reset)
    np.testing.assert_array_equal(np.asarray(reward)[:3], np.asarray(ref_reward)[:3])
    np.testing.assert_array_equal(np.asarray(final)[:3], np.asarray(ref_obs)[:3])
    np.testing.assert_array_equal(np.asarray(truncated)[:3], np.asarray(ref_trunc)[:3] > 0)
    ref_terminated = (np.asarray(ref_done) > 0) & ~(np.asarray(ref_trunc) > 0)
    np.testing.assert_array_equal(np.asarray(terminated)[:3], ref_terminated[:3])
    np.testing.assert_array_equal(np.asarray(truncated), [False, False, True] * 2)
    np.testing.assert_array_equal(np.asarray(reward), np.full(6, 2.0, np.float32))


def test_spaces_and_names(env):
    assert isinstance(env, BraxEnv) and env.name == NAME and env.backend == "mjx"
    assert env.default_params == BraxParams(episode_length=EPISODE_LENGTH, action_repeat=1)
    space = env.action_space()
    assert space.shape == (1,) and space.dtype == jnp.float32
    np.testing.assert_array_equal(space.low, [-1.0]) and np.testing.assert_array_equal(
        space.high, [1.0])
    obs_space = env.observation_space(env.default_params)
    assert obs_space.shape == (4,) and obs_space.dtype == jnp.float32
    obs, _ = jax.eval_shape(env.reset, jax.random.key(0))
    assert obs.shape == obs_space.shape and obs.dtype == obs_space.dtype
    with pytest.raises(ValueError, match="num_actions"):
        _ = env.num_actions


def test_bad_input(env):
    with pytest.raises(ValueError, match=r"unknown Brax environment 'inverted_pendulam'; "
                                         r"did you mean inverted_pendulum"):
        from_brax("inverted_pendulam")
    with pytest.raises(ValueError, match="backend: must be one of mjx"):
        from_brax(NAME, backend="physx")
    with pytest.raises(ValueError, match="episode_length: must be an integer >= 1"):
        from_brax(NAME, episode_length=0)
    with pytest.raises(ValueError, match="action_repeat: must be an integer >= 1"):
        from_brax(NAME, action_repeat=0)
    with pytest.raises(TypeError, match="raw Brax environment"):
        BraxEnv(EpisodeWrapper(env.brax_env, 10, 1))
    with pytest.raises(TypeError, match="expected a Brax environment"):
        BraxEnv(object())
    assert brax.__version__ == "0.14.2"


def test_ppo_bootstraps_a_brax_envs_truncations(env):
    """The PPO trainer finds final_obs in a Brax env's step (so it bootstraps truncations);
    the few-updates training run below is in CI_SLOW, this is its fast guard."""
    from rljax.training.ppo import _has_final_obs

    pendulum = BraxEnv(env.brax_env, episode_length=16, name=NAME)
    assert _has_final_obs(pendulum, pendulum.default_params)


def test_ppo_trains_a_brax_env_for_a_few_updates(env):
    from rljax.nonfinite import NONFINITE_STEP
    from rljax.policies import actor_critic_for
    from rljax.training import PPOTrainConfig, make_ppo_train
    from rljax.training.ppo import _has_final_obs

    pendulum = BraxEnv(env.brax_env, episode_length=16, name=NAME)
    assert _has_final_obs(pendulum, pendulum.default_params)  # truncations are bootstrapped
    config = PPOTrainConfig(num_envs=4, num_steps=32, total_steps=3 * 4 * 32, num_epochs=2,
                            num_minibatches=2, learning_rate=3e-4)
    logs = jax.jit(make_ppo_train(pendulum, actor_critic_for(pendulum), config))(
        jax.random.key(0))
    assert logs["loss"].shape == logs["return_sum"].shape == (3,)
    assert int(logs[NONFINITE_STEP]) == -1
    for name in ("loss", "policy_loss", "value_loss", "entropy", "return_sum"):
        assert np.isfinite(np.asarray(logs[name])).all(), name
    episodes = np.asarray(logs["episodes"])
    assert (episodes > 0).all()
    # reward 1 per step and episodes of 1..16 steps: mean episode return in [1, 16]
    mean_return = np.asarray(logs["return_sum"]) / episodes
    assert ((mean_return >= 1.0) & (mean_return <= 16.0)).all()
