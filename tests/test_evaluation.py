"""evaluate_policy: fresh test episodes against a per-episode Python loop; its use in
make_ppo_chunks' finish."""

import gymnax  # a dev dependency: a missing one fails, never skips
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.force_echo import PointMass

from rljax.envs import CartPole, NormalizeObservation, NormalizeReward, from_gymnax
from rljax.envs.wrappers import ENV_AXIS
from rljax.policies import actor_critic_for
from rljax.training.evaluation import Evaluation, evaluate_policy
from rljax.training.ppo import PPOTrainConfig, make_ppo_chunks

assert gymnax.make  # imported for from_gymnax


def _reference(env, net, params, key, num_episodes, max_steps, deterministic):
    """One episode at a time, stepping in Python and stopping at the first end; the keys
    are the ones evaluate_policy documents (resets, steps and noise split up front)."""
    reset_key, step_key, noise_key = jax.random.split(key, 3)
    reset_keys = jax.random.split(reset_key, num_episodes)
    noise = net.distribution.noise(noise_key, (max_steps, num_episodes))
    step_keys = jax.random.split(step_key, (max_steps, num_episodes))
    space = env.action_space(env.default_params)
    returns, lengths, finished = [], [], []
    for e in range(num_episodes):
        obs, state = env.reset(reset_keys[e], env.default_params)
        total, steps, ended = 0.0, 0, False
        for t in range(max_steps):
            dist_params, _ = net.apply(params, obs[None])
            if deterministic:
                action = net.distribution.mode(dist_params)[0]
            else:
                action = net.distribution.sample(noise[t, e][None], dist_params)[0]
            to_env = net.distribution.env_action(action)
            if hasattr(space, "low"):
                to_env = jnp.clip(to_env, space.low, space.high)
            obs, state, reward, terminated, truncated, info = env.step(
                step_keys[t, e], state, to_env, env.default_params)
            total += float(info.get("raw_reward", reward))
            steps += 1
            if bool(terminated) or bool(truncated):
                ended = True
                break
        returns.append(total)
        lengths.append(steps)
        finished.append(ended)
    return np.float32(returns), np.int32(lengths), np.asarray(finished)


def _trained_params(net, obs, key, scale=3.0):
    """Parameters whose policy is far from uniform (so greedy != sampled)."""
    params = net.init(key, obs)
    return jax.tree_util.tree_map(lambda x: x * scale, params)


@pytest.mark.parametrize("deterministic", [False, True])
def test_matches_episode_loop_cartpole(deterministic):
    env = CartPole(max_steps_in_episode=60)
    net = actor_critic_for(env, hidden_sizes=(16,))
    params = _trained_params(net, jnp.zeros(4), jax.random.key(1))
    key = jax.random.key(7)
    got = jax.jit(lambda p, k: evaluate_policy(env, net, p, k, num_episodes=3,
                                               deterministic=deterministic))(params, key)
    want = _reference(env, net, params, key, 3, 60, deterministic)
    np.testing.assert_allclose(got.returns, want[0], rtol=1e-6)
    np.testing.assert_array_equal(got.lengths, want[1])
    np.testing.assert_array_equal(got.finished, want[2])
    assert got.returns.shape == (3,) and got.returns.dtype == jnp.float32


def test_matches_episode_loop_pendulum_gaussian_and_raw_rewards():
    """A Box action (sample, env_action, clip) and NormalizeReward: raw rewards count."""
    raw = from_gymnax("Pendulum-v1")
    net = actor_critic_for(raw, hidden_sizes=(16,))
    params = _trained_params(net, jnp.zeros(3), jax.random.key(2))
    key = jax.random.key(3)
    want = _reference(raw, net, params, key, 2, 200, False)
    for env in (raw, NormalizeReward(raw, gamma=0.99, axis_name=ENV_AXIS)):
        got = evaluate_policy(env, net, params, key, num_episodes=2)
        np.testing.assert_allclose(got.returns, want[0], rtol=1e-5)
        np.testing.assert_array_equal(got.lengths, [200, 200])
        assert bool(np.all(got.finished))
    greedy = evaluate_policy(raw, net, params, key, num_episodes=2, deterministic=True)
    assert not np.allclose(greedy.returns, want[0])


def test_actions_are_clipped_to_the_box_only_in_the_env_step():
    """PointMass pays the force it received: a wide Gaussian's returns are bounded by
    the box (6 steps x 0.1), and equal the loop's clipped actions."""
    env = PointMass()
    net = actor_critic_for(env, hidden_sizes=(8,), log_std_init=2.0)
    params = net.init(jax.random.key(0), jnp.zeros(1))
    key = jax.random.key(1)
    got = evaluate_policy(env, net, params, key, num_episodes=6, max_steps=6)
    want = _reference(env, net, params, key, 6, 6, False)
    np.testing.assert_allclose(got.returns, want[0], rtol=1e-6)
    assert float(np.max(np.abs(got.returns))) <= 0.6 + 1e-6


def test_stops_counting_at_the_first_end_and_reports_unfinished():
    env = CartPole(max_steps_in_episode=500)
    net = actor_critic_for(env, hidden_sizes=(8,))
    params = net.init(jax.random.key(0), jnp.zeros(4))
    got = evaluate_policy(env, net, params, jax.random.key(1), num_episodes=8, max_steps=500)
    # CartPole pays 1 per step: the return is the episode's length, not the 500 steps run
    np.testing.assert_array_equal(got.returns, got.lengths.astype(np.float32))
    assert bool(np.all(got.finished)) and int(np.max(got.lengths)) < 500
    short = evaluate_policy(env, net, params, jax.random.key(1), num_episodes=8, max_steps=3)
    np.testing.assert_array_equal(short.lengths, 3)
    assert not bool(np.any(short.finished))


def test_vmap_over_seeds_equals_each_seed():
    env = CartPole(max_steps_in_episode=40)
    net = actor_critic_for(env, hidden_sizes=(8,))
    keys = jax.random.split(jax.random.key(4), 3)
    params = jax.vmap(lambda k: net.init(k, jnp.zeros(4)))(keys)
    run = lambda p, k: evaluate_policy(env, net, p, k, num_episodes=4)  # noqa: E731
    batched = jax.jit(jax.vmap(run))(params, keys)
    for s in range(3):
        one = run(jax.tree_util.tree_map(lambda x, s=s: x[s], params), keys[s])
        np.testing.assert_array_equal(batched.returns[s], one.returns)


def test_trained_observation_moments_are_used():
    env = NormalizeObservation(CartPole(max_steps_in_episode=30), axis_name=ENV_AXIS)
    net = actor_critic_for(env, hidden_sizes=(8,))
    params = _trained_params(net, jnp.zeros(4), jax.random.key(5))
    reset = jax.vmap(env.reset, in_axes=(0, None), axis_name=ENV_AXIS)
    _, trained = reset(jax.random.split(jax.random.key(6), 2), env.default_params)
    moments = trained.obs_moments.replace(
        mean=jnp.full((2, 4), 3.0), var=jnp.full((2, 4), 0.01), count=jnp.full((2,), 10**6))
    trained = trained.replace(obs_moments=moments)
    key = jax.random.key(8)
    fresh = evaluate_policy(env, net, params, key, num_episodes=4)
    carried = evaluate_policy(env, net, params, key, num_episodes=4, trained_env_state=trained)
    assert not np.array_equal(fresh.lengths, carried.lengths) or not np.allclose(
        fresh.returns, carried.returns)
    # with those moments (mean 3, std 0.1) every observation after the reset is clipped to
    # -10, so the policy sees one constant input from the first step on: a greedy policy
    # then repeats one action until CartPole falls
    greedy = evaluate_policy(env, net, params, key, num_episodes=4, deterministic=True,
                             trained_env_state=trained)
    assert int(np.max(greedy.lengths)) < 15


def test_bad_arguments_one_line():
    env = CartPole()
    net = actor_critic_for(env, hidden_sizes=(8,))
    params = net.init(jax.random.key(0), jnp.zeros(4))
    with pytest.raises(ValueError, match=r"^num_episodes: must be an integer >= 1, got 0$"):
        evaluate_policy(env, net, params, jax.random.key(0), num_episodes=0)
    with pytest.raises(ValueError, match=r"^max_steps: must be an integer >= 1"):
        evaluate_policy(env, net, params, jax.random.key(0), num_episodes=1, max_steps=0)


def test_ppo_chunks_finish_runs_the_evaluation():
    env = CartPole(max_steps_in_episode=50)
    net = actor_critic_for(env, hidden_sizes=(8,))
    config = PPOTrainConfig(num_envs=2, num_steps=8, total_steps=64, num_minibatches=2)
    chunks = make_ppo_chunks(env, net, config, updates_per_chunk=2, eval_episodes=3)
    state = chunks.init(jax.random.key(0))
    for _ in range(chunks.num_chunks):
        state, _ = chunks.advance(state)
    out = jax.jit(chunks.finish)(state)
    key = jax.random.fold_in(state.run_key, config.num_updates)
    for mode in ("sampled", "mode"):
        want: Evaluation = evaluate_policy(env, net, state.carry.params, key, num_episodes=3,
                                           deterministic=mode == "mode",
                                           trained_env_state=state.carry.env_state)
        np.testing.assert_array_equal(out[f"eval_return_{mode}"], want.returns)
        np.testing.assert_array_equal(out[f"eval_finished_{mode}"], want.finished)
    plain = make_ppo_chunks(env, net, config, updates_per_chunk=2)
    assert set(plain.finish(state)) == {"nonfinite_step"}
    with pytest.raises(ValueError, match=r"^eval_episodes: must be an integer >= 0"):
        make_ppo_chunks(env, net, config, updates_per_chunk=2, eval_episodes=-1)
