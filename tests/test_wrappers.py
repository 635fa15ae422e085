"""Environment wrappers against slow numpy references, under jit and vmap: LogWrapper's
episode statistics and validity flag, FlattenObservation, ClipAction, NormalizeObservation
and NormalizeReward (per env and merged over a vmapped batch with ``axis_name``), TimeLimit;
composition, pytree round trips, a vmap over seeds, forwarding, and the bad-input errors."""

import copy
import pickle

import gymnax  # a dev dependency: a missing one fails, never skips
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from rljax.envs import (
    ENV_AXIS,
    Box,
    CartPole,
    ChainMDP,
    ClipAction,
    Environment,
    FlattenObservation,
    LogWrapper,
    NormalizeObservation,
    NormalizeReward,
    TimeLimit,
    Wrapper,
    from_gymnax,
)

pytestmark = pytest.mark.timeout(300)

N, T = 3, 24  # envs, steps


# ----------------------------------------------------------------------------- test envs


@struct.dataclass
class PointState:
    pos: jax.Array
    vel: jax.Array
    time: jax.Array


@struct.dataclass
class PointParams:
    max_steps_in_episode: int = struct.field(pytree_node=False, default=7)


class PointMass(Environment):
    """1-D point mass: action ``[1]`` (Box(-2, 2), NOT clipped by the env), obs
    ``[pos, vel, time]`` reshaped to ``obs_shape``; terminated when ``|pos| > 1.5``,
    truncated after ``max_steps_in_episode`` steps; reward ``-pos^2 + a``."""

    def __init__(self, obs_shape=(3,), final_obs=True, max_steps=7):
        self.obs_shape, self.final_obs, self.max_steps = obs_shape, final_obs, max_steps

    @property
    def default_params(self):
        return PointParams(max_steps_in_episode=self.max_steps)

    def action_space(self, params=None):
        return Box(-2.0, 2.0, (1,))

    def _obs(self, s):
        return jnp.stack([s.pos, s.vel, s.time.astype(jnp.float32)]).reshape(self.obs_shape)

    def reset_env(self, key, params):
        pos, vel = jax.random.uniform(key, (2,), minval=-1.0, maxval=1.0)
        s = PointState(pos=pos, vel=vel, time=jnp.int32(0))
        return self._obs(s), s

    def step_env(self, key, state, action, params):
        a = action[0]
        vel = state.vel + 0.5 * a
        pos = state.pos + 0.3 * vel
        s = PointState(pos=pos, vel=vel, time=state.time + 1)
        terminated = jnp.abs(pos) > 1.5
        truncated = s.time >= params.max_steps_in_episode
        obs = self._obs(s)
        info = {"final_obs": obs, "extra": a} if self.final_obs else {"extra": a}
        return obs, s, -jnp.square(pos) + a, terminated, truncated, info


class DictObsEnv(Environment):
    """Observations are a dict (a pytree, not one array)."""

    num_actions = 2

    def reset_env(self, key, params):
        return {"a": jnp.zeros(2)}, PointState(jnp.float32(0), jnp.float32(0), jnp.int32(0))


def keys_for(seed, n=N, t=T):
    reset_key, step_key = jax.random.split(jax.random.key(seed))
    return jax.random.split(reset_key, n), jax.random.split(step_key, (t, n))


def actions_for(seed, n=N, t=T, low=-3.0, high=3.0):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.uniform(low, high, (t, n, 1)), jnp.float32)


def rollout(env, reset_keys, step_keys, actions, axis_name=None):
    """jit(vmap) reset + ``lax.scan`` of the vmapped step. Returns numpy ``obs0 [N, ...]``
    and the per-step ``(obs, reward, terminated, truncated, info, state)``, ``[T, N, ...]``."""

    def run(reset_keys, step_keys, actions):
        obs0, state = jax.vmap(env.reset, axis_name=axis_name)(reset_keys)

        def body(state, inputs):
            out = jax.vmap(env.step, axis_name=axis_name)(*inputs[:1], state, *inputs[1:])
            obs, state, reward, terminated, truncated, info = out
            return state, (obs, reward, terminated, truncated, info, state)

        _, outs = jax.lax.scan(body, state, (step_keys, actions))
        return obs0, outs

    obs0, outs = jax.jit(run)(reset_keys, step_keys, actions)
    return jax.tree_util.tree_map(np.asarray, (obs0, outs))


# ------------------------------------------------------------------- numpy references


def ref_log(rewards, dones):
    """Python loop: per step, (returned flag, return, length, valid) of each env."""
    t_len, n = rewards.shape
    out = {k: np.zeros((t_len, n)) for k in ("returns", "lengths", "valid")}
    for i in range(n):
        ret, length, last_ret, last_len, valid = 0.0, 0, 0.0, 0, False
        for t in range(t_len):
            ret += float(rewards[t, i])
            length += 1
            if dones[t, i]:
                last_ret, last_len, valid = ret, length, True
                ret, length = 0.0, 0
            out["returns"][t, i], out["lengths"][t, i], out["valid"][t, i] = (
                last_ret, last_len, valid)
    return out


def ref_normalize_obs(obs0, obs, final_obs, merged, eps=1e-8, clip=10.0):
    """Mean / var (np.mean, np.var, float64) of every observation seen so far: of all envs
    (``merged``) or of each env's own. Returns normalised (obs0, obs, final_obs)."""
    n = obs0.shape[0]
    seen = [[obs0[i].astype(np.float64)] for i in range(n)]

    def normalise(x, i):
        pool = [o for s in seen for o in s] if merged else seen[i]
        mean, var = np.mean(pool, axis=0), np.var(pool, axis=0)
        return np.clip((x - mean) / np.sqrt(var + eps), -clip, clip)

    exp0 = np.stack([normalise(obs0[i], i) for i in range(n)])
    exp, exp_final = np.zeros(obs.shape), np.zeros(final_obs.shape)
    for t in range(obs.shape[0]):
        for i in range(n):
            seen[i].append(obs[t, i].astype(np.float64))
        for i in range(n):
            exp[t, i] = normalise(obs[t, i], i)
            exp_final[t, i] = normalise(final_obs[t, i], i)
    return exp0, exp, exp_final


def ref_normalize_reward(rewards, dones, gamma, merged, eps=1e-8, clip=10.0):
    """gym 0.21 / CleanRL: G = gamma G (1 - done_prev) + r; r / sqrt(var(all G so far))."""
    t_len, n = rewards.shape
    g, done_prev = np.zeros(n), np.ones(n, bool)
    seen = [[] for _ in range(n)]
    out = np.zeros((t_len, n))
    for t in range(t_len):
        g = gamma * g * (1.0 - done_prev) + rewards[t].astype(np.float64)
        for i in range(n):
            seen[i].append(g[i])
        for i in range(n):
            pool = [x for s in seen for x in s] if merged else seen[i]
            out[t, i] = np.clip(rewards[t, i] / np.sqrt(np.var(pool) + eps), -clip, clip)
        done_prev = dones[t]
    return out


# ------------------------------------------------------------------------------ LogWrapper


def test_log_wrapper_matches_python_loop_and_validity_flag():
    env = PointMass()
    reset_keys, step_keys = keys_for(0)
    actions = actions_for(0)
    obs0, (obs, reward, term, trunc, info, state) = rollout(LogWrapper(env), reset_keys,
                                                           step_keys, actions)
    raw0, (raw_obs, raw_reward, raw_term, raw_trunc, raw_info, _) = rollout(
        env, reset_keys, step_keys, actions)
    for got, want in ((obs0, raw0), (obs, raw_obs), (reward, raw_reward), (term, raw_term),
                      (trunc, raw_trunc), (info["final_obs"], raw_info["final_obs"]),
                      (info["extra"], raw_info["extra"])):  # everything passes through
        np.testing.assert_array_equal(got, want)
    dones = raw_term | raw_trunc
    ref = ref_log(raw_reward, dones)
    np.testing.assert_array_equal(info["returned_episode"], dones)
    np.testing.assert_allclose(info["returned_episode_returns"], ref["returns"], rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_array_equal(info["returned_episode_lengths"], ref["lengths"])
    np.testing.assert_array_equal(info["returned_episode_valid"], ref["valid"].astype(bool))
    assert info["returned_episode_valid"].dtype == bool
    np.testing.assert_array_equal(state.returned_episode_valid, ref["valid"].astype(bool))
    # the test means something: episodes end at several lengths, and some env has not
    # finished one after its first steps (valid False there, not "a return of 0")
    assert dones.sum() >= 2 * N and len(np.unique(ref["lengths"][ref["valid"] > 0])) >= 2
    assert not ref["valid"][1].all() and ref["valid"][-1].all()


# ---------------------------------------------------------------------- FlattenObservation


def test_flatten_observation_under_jit_and_vmap():
    env = PointMass(obs_shape=(1, 3, 1))
    wrapped = FlattenObservation(env)
    assert wrapped.observation_space().shape == (3,)
    assert wrapped.observation_shape == (3,)
    reset_keys, step_keys = keys_for(1)
    actions = actions_for(1)
    obs0, (obs, reward, _, _, info, _) = rollout(wrapped, reset_keys, step_keys, actions)
    raw0, (raw_obs, raw_reward, _, _, raw_info, _) = rollout(env, reset_keys, step_keys,
                                                             actions)
    assert obs0.shape == (N, 3) and obs.shape == (T, N, 3) and info["final_obs"].shape == (T, N, 3)
    np.testing.assert_array_equal(obs0, raw0.reshape(N, 3))
    np.testing.assert_array_equal(obs, raw_obs.reshape(T, N, 3))
    np.testing.assert_array_equal(info["final_obs"], raw_info["final_obs"].reshape(T, N, 3))
    np.testing.assert_array_equal(reward, raw_reward)


def test_flatten_observation_of_gymnax_catch():
    env = FlattenObservation(from_gymnax("Catch-bsuite"))
    space = env.observation_space()
    assert isinstance(space, Box) and space.shape == (50,)
    obs, state = jax.jit(env.reset)(jax.random.key(0))
    obs2, _, _, _, _, info = jax.jit(env.step)(jax.random.key(1), state, jnp.int32(1))
    assert obs.shape == (50,) and obs2.shape == (50,) and info["final_obs"].shape == (50,)
    # scalar (int) observations become [1]
    chain = FlattenObservation(ChainMDP(3))
    assert chain.observation_space().shape == (1,)
    assert jax.jit(chain.reset)(jax.random.key(0))[0].shape == (1,)


# ------------------------------------------------------------------------------ ClipAction


def test_clip_action_equals_stepping_with_clipped_actions():
    env = PointMass()
    reset_keys, step_keys = keys_for(2)
    actions = actions_for(2)
    assert np.any(np.abs(np.asarray(actions)) > 2.0)
    clipped = jnp.clip(actions, -2.0, 2.0)
    _, (obs, reward, *_) = rollout(ClipAction(env), reset_keys, step_keys, actions)
    _, (ref_obs, ref_reward, *_) = rollout(env, reset_keys, step_keys, clipped)
    _, (raw_obs, *_) = rollout(env, reset_keys, step_keys, actions)
    np.testing.assert_array_equal(obs, ref_obs)
    np.testing.assert_array_equal(reward, ref_reward)
    assert not np.array_equal(obs, raw_obs)
    assert ClipAction(env).action_space() == Box(-2.0, 2.0, (1,))


def test_clip_action_on_gymnax_pendulum():
    env = from_gymnax("Pendulum-v1")
    wrapped = ClipAction(env)
    obs, state = env.reset(jax.random.key(0))
    out = jax.jit(wrapped.step)(jax.random.key(1), state, jnp.array([5.0]))
    ref = env.step(jax.random.key(1), state, jnp.array([2.0]))  # max_torque = 2
    np.testing.assert_allclose(out[0], ref[0], rtol=1e-6)
    np.testing.assert_allclose(out[2], ref[2], rtol=1e-6)


# -------------------------------------------------------------------- NormalizeObservation


@pytest.mark.parametrize("merged", [True, False], ids=["axis_name", "per_env"])
def test_normalize_observation_matches_numpy_moments(merged):
    env = PointMass()
    wrapped = NormalizeObservation(env, axis_name=ENV_AXIS if merged else None)
    reset_keys, step_keys = keys_for(3)
    actions = actions_for(3)
    axis = ENV_AXIS if merged else None
    obs0, (obs, reward, _, _, info, state) = rollout(wrapped, reset_keys, step_keys, actions,
                                                     axis_name=axis)
    raw0, (raw_obs, raw_reward, _, _, raw_info, _) = rollout(env, reset_keys, step_keys,
                                                             actions)
    exp0, exp, exp_final = ref_normalize_obs(raw0, raw_obs, raw_info["final_obs"], merged)
    assert obs.dtype == np.float32
    np.testing.assert_allclose(obs0, exp0, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(obs, exp, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(info["final_obs"], exp_final, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(reward, raw_reward)
    # the statistics themselves, after the last step
    moments = state.obs_moments
    all_obs = np.concatenate([raw0[None], raw_obs]).astype(np.float64)  # [T + 1, N, 3]
    if merged:
        pooled = all_obs.reshape(-1, 3)
        for i in range(N):  # every env holds the same merged statistics
            np.testing.assert_allclose(moments.mean[-1, i], pooled.mean(0), rtol=1e-5,
                                       atol=1e-6)
            np.testing.assert_allclose(moments.var[-1, i], pooled.var(0), rtol=1e-4)
        np.testing.assert_array_equal(moments.count[-1], np.full(N, N * (T + 1)))
    else:
        np.testing.assert_allclose(moments.mean[-1], all_obs.mean(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(moments.var[-1], all_obs.var(0), rtol=1e-4)
        np.testing.assert_array_equal(moments.count[-1], np.full(N, T + 1))
    # the test has teeth: episode ends happen (final_obs differs from obs)
    assert np.any(raw_info["final_obs"] != raw_obs)


def test_normalize_observation_clips_and_space():
    wrapped = NormalizeObservation(PointMass(), clip=0.5)
    assert wrapped.observation_space() == Box(-0.5, 0.5, (3,))
    reset_keys, step_keys = keys_for(4)
    _, (obs, *_) = rollout(wrapped, reset_keys, step_keys, actions_for(4))
    assert np.abs(obs).max() == pytest.approx(0.5)


# ------------------------------------------------------------------------- NormalizeReward


@pytest.mark.parametrize("merged", [True, False], ids=["axis_name", "per_env"])
def test_normalize_reward_matches_numpy_loop(merged):
    env = PointMass()
    gamma = 0.9
    wrapped = NormalizeReward(env, gamma=gamma, axis_name=ENV_AXIS if merged else None)
    reset_keys, step_keys = keys_for(5)
    actions = actions_for(5)
    _, (obs, reward, term, trunc, info, _) = rollout(
        wrapped, reset_keys, step_keys, actions, axis_name=ENV_AXIS if merged else None)
    _, (raw_obs, raw_reward, raw_term, raw_trunc, _, _) = rollout(env, reset_keys, step_keys,
                                                                  actions)
    np.testing.assert_array_equal(info["raw_reward"], raw_reward)
    np.testing.assert_array_equal(obs, raw_obs)
    dones = raw_term | raw_trunc
    assert dones[:-2].sum() >= N  # G must reset mid-run for the test to mean something
    expected = ref_normalize_reward(raw_reward, dones, gamma, merged)
    assert reward.dtype == np.float32
    np.testing.assert_allclose(reward, expected, rtol=1e-4, atol=1e-5)
    assert np.any(np.abs(expected[2:]) < 9.0)  # not all clipped


# ------------------------------------------------------------------------------- TimeLimit


def ref_time_limit(env, max_steps, reset_keys, step_keys, actions):
    """Python loop over envs and steps with the unwrapped env's jitted step / reset."""
    step, reset = jax.jit(env.step), jax.jit(env.reset)
    t_len, n = step_keys.shape
    out = {k: [[None] * n for _ in range(t_len)]
           for k in ("obs", "final", "term", "trunc", "time")}
    for i in range(n):
        _, state = reset(reset_keys[i])
        time = 0
        for t in range(t_len):
            step_key, reset_key = jax.random.split(step_keys[t, i])
            obs, state, _, term, trunc, info = step(step_key, state, actions[t, i])
            final = info.get("final_obs", obs)
            time += 1
            limit = time >= max_steps
            if limit and not (term or trunc):
                final = obs
                obs, state = reset(reset_key)
            if limit or term or trunc:
                time = 0
            for k, v in (("obs", obs), ("final", final), ("term", term),
                         ("trunc", bool(trunc) or limit), ("time", time)):
                out[k][t][i] = np.asarray(v)
    return {k: np.array(v) for k, v in out.items()}


@pytest.mark.parametrize("inner_limit,max_steps", [(100, 3), (3, 3), (2, 3)])
def test_time_limit_matches_python_loop(inner_limit, max_steps):
    env = PointMass(max_steps=inner_limit)
    wrapped = TimeLimit(env, max_steps)
    reset_keys, step_keys = keys_for(6, t=14)
    actions = actions_for(6, t=14)
    _, (obs, _, term, trunc, info, state) = rollout(wrapped, reset_keys, step_keys, actions)
    ref = ref_time_limit(env, max_steps, reset_keys, step_keys, actions)
    np.testing.assert_array_equal(obs, ref["obs"])
    np.testing.assert_array_equal(info["final_obs"], ref["final"])
    np.testing.assert_array_equal(term, ref["term"])
    np.testing.assert_array_equal(trunc, ref["trunc"])
    np.testing.assert_array_equal(state.time, ref["time"])
    assert ref["trunc"].any() and ref["term"].any()
    assert np.all(state.time < max_steps)


def test_time_limit_terminate_and_limit_together_and_no_inner_final_obs():
    # ChainMDP(3) terminates on its 3rd step and has no final_obs of its own
    both = TimeLimit(ChainMDP(3), 3)
    cut = TimeLimit(ChainMDP(3), 2)
    step_keys = jax.random.split(jax.random.key(0), (6, 1))
    ones = jnp.ones((6, 1), jnp.int32)
    _, (obs, _, term, trunc, info, _) = rollout(both, step_keys[0], step_keys, ones)
    np.testing.assert_array_equal(term[:, 0], [0, 0, 1, 0, 0, 1])
    np.testing.assert_array_equal(trunc[:, 0], [0, 0, 1, 0, 0, 1])  # gymnasium: both True
    np.testing.assert_array_equal(obs[:, 0], [1, 2, 0, 1, 2, 0])
    _, (obs, _, term, trunc, info, state) = rollout(cut, step_keys[0], step_keys, ones)
    assert not term.any()
    np.testing.assert_array_equal(trunc[:, 0], [0, 1, 0, 1, 0, 1])
    np.testing.assert_array_equal(obs[:, 0], [1, 0, 1, 0, 1, 0])
    np.testing.assert_array_equal(info["final_obs"][:, 0], [1, 2, 1, 2, 1, 2])  # pre-reset
    np.testing.assert_array_equal(state.time[:, 0], [1, 0, 1, 0, 1, 0])


# ----------------------------------------------------------------------------- composition


def full_stack(max_steps=4):
    inner = ClipAction(FlattenObservation(TimeLimit(PointMass(obs_shape=(1, 3)), max_steps)))
    env = NormalizeObservation(LogWrapper(inner), axis_name=ENV_AXIS)
    return inner, NormalizeReward(env, gamma=0.9, axis_name=ENV_AXIS)


def test_composed_stack_against_references():
    inner, env = full_stack()
    assert repr(env) == ("NormalizeReward(NormalizeObservation(LogWrapper(ClipAction("
                         "FlattenObservation(TimeLimit(PointMass))))))")
    reset_keys, step_keys = keys_for(7)
    actions = actions_for(7)
    obs0, (obs, reward, term, trunc, info, _) = rollout(env, reset_keys, step_keys, actions,
                                                        axis_name=ENV_AXIS)
    raw0, (raw_obs, raw_reward, raw_term, raw_trunc, raw_info, _) = rollout(
        inner, reset_keys, step_keys, actions)
    assert obs.shape == (T, N, 3)
    dones = raw_term | raw_trunc
    exp0, exp, exp_final = ref_normalize_obs(raw0, raw_obs, raw_info["final_obs"], True)
    np.testing.assert_allclose(obs, exp, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(info["final_obs"], exp_final, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(reward, ref_normalize_reward(raw_reward, dones, 0.9, True),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(info["raw_reward"], raw_reward)
    ref = ref_log(raw_reward, dones)  # LogWrapper inside NormalizeReward: true returns
    np.testing.assert_allclose(info["returned_episode_returns"], ref["returns"], rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_array_equal(info["returned_episode_valid"], ref["valid"].astype(bool))


def test_wrapped_state_round_trips_and_runs_under_vmap_over_seeds():
    _, env = full_stack()
    obs, state = jax.jit(jax.vmap(env.reset, axis_name=ENV_AXIS))(keys_for(8)[0])
    leaves, treedef = jax.tree_util.tree_flatten(state)
    rebuilt = jax.tree_util.tree_unflatten(treedef, leaves)
    assert type(rebuilt) is type(state) and type(rebuilt.env_state) is type(state.env_state)
    step = jax.jit(jax.vmap(env.step, axis_name=ENV_AXIS))
    keys = keys_for(8)[1][0]
    a = actions_for(8)[0]
    out_a, out_b = step(keys, state, a), step(keys, rebuilt, a)
    for x, y in zip(jax.tree_util.tree_leaves(out_a), jax.tree_util.tree_leaves(out_b),
                    strict=True):
        np.testing.assert_array_equal(x, y)

    def one_seed(seed_key, actions):  # one seed's N-env rollout: obs, rewards, log
        reset_key, step_key = jax.random.split(seed_key)
        _, state = jax.vmap(env.reset, axis_name=ENV_AXIS)(jax.random.split(reset_key, N))

        def body(state, inputs):
            keys, a = inputs
            obs, state, r, _, _, info = jax.vmap(env.step, axis_name=ENV_AXIS)(keys, state, a)
            return state, (obs, r, info["returned_episode_returns"])

        return jax.lax.scan(body, state, (jax.random.split(step_key, (8, N)), actions))

    seeds = jax.random.split(jax.random.key(9), 3)
    actions = jnp.stack([actions_for(s, t=8) for s in range(3)])
    batched = jax.jit(jax.vmap(one_seed))(seeds, actions)
    alone = jax.jit(one_seed)
    for s in range(3):
        single = alone(seeds[s], actions[s])
        for x, y in zip(jax.tree_util.tree_leaves(batched), jax.tree_util.tree_leaves(single),
                        strict=True):
            np.testing.assert_allclose(np.asarray(x)[s], np.asarray(y), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------ forwarding


def test_forwarding_and_copies():
    env = CartPole(max_steps_in_episode=50)
    wrapped = NormalizeObservation(LogWrapper(env))
    assert wrapped.name == "CartPole" and wrapped.num_actions == 2
    assert wrapped.default_params == env.default_params
    assert wrapped.max_steps_in_episode == 50  # unknown attributes go to the inner env
    assert wrapped.unwrapped is env and wrapped.env.env is env
    assert not hasattr(wrapped, "no_such_attribute")
    assert repr(wrapped) == "NormalizeObservation(LogWrapper(CartPole))"
    for clone in (copy.copy(wrapped), copy.deepcopy(wrapped),
                  pickle.loads(pickle.dumps(wrapped))):
        assert repr(clone) == repr(wrapped) and clone.max_steps_in_episode == 50
    gym_env = LogWrapper(from_gymnax("Pendulum-v1"))  # gymnax spaces become rljax spaces
    assert gym_env.action_space() == Box(-2.0, 2.0, (1,))
    assert isinstance(gym_env.observation_space(), Box)
    with pytest.raises(NotImplementedError, match="reset/step"):
        wrapped.step_env(jax.random.key(0), None, 0, None)
    plain = Wrapper(env)  # the base class forwards reset / step unchanged
    (obs, state), (ref_obs, ref_state) = plain.reset(jax.random.key(3)), env.reset(
        jax.random.key(3))
    np.testing.assert_array_equal(obs, ref_obs)
    out = plain.step(jax.random.key(4), state, jnp.int32(1))
    ref = env.step(jax.random.key(4), ref_state, jnp.int32(1))
    for x, y in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(ref), strict=True):
        np.testing.assert_array_equal(x, y)


# ------------------------------------------------------------------------------ bad input


def test_bad_inputs_raise_one_line_errors():
    cases = [
        (lambda: ClipAction(CartPole()), r"ClipAction\(CartPole\): needs a Box.*Discrete\(2\)"),
        (lambda: FlattenObservation(DictObsEnv()), r"FlattenObservation\(DictObsEnv\)"),
        (lambda: TimeLimit(CartPole(), 0), r"TimeLimit\(CartPole\): max_steps.*>= 1"),
        (lambda: TimeLimit(CartPole(), 2.5), "max_steps"),
        (lambda: TimeLimit(LogWrapper(CartPole()), 5), "inside LogWrapper"),
        (lambda: TimeLimit(FlattenObservation(NormalizeReward(CartPole())), 5),
         "inside NormalizeReward"),
        (lambda: NormalizeReward(CartPole(), gamma=1.5), r"gamma must be .*\[0, 1\]"),
        (lambda: NormalizeReward(CartPole(), gamma=-0.1), "gamma"),
        (lambda: NormalizeReward(CartPole(), epsilon=0.0), "epsilon must be"),
        (lambda: NormalizeObservation(CartPole(), clip=-1.0), "clip must be"),
        (lambda: NormalizeObservation(CartPole(), axis_name=3), "axis_name"),
        (lambda: NormalizeObservation(ChainMDP(3)), r"NormalizeObservation\(ChainMDP\).*float"),
        (lambda: NormalizeObservation(DictObsEnv()), "one float array"),
    ]
    for build, pattern in cases:
        with pytest.raises(ValueError, match=pattern) as error:
            build()
        assert "\n" not in str(error.value), str(error.value)
    with pytest.raises(TypeError, match="rljax Environment"):
        LogWrapper(gymnax.make("CartPole-v1")[0])
    # an axis_name no vmap binds: a clear error, not jax's NameError
    env = NormalizeObservation(CartPole(), axis_name=ENV_AXIS)
    with pytest.raises(ValueError, match="not bound.*jax.vmap"):
        env.reset(jax.random.key(0))
    env = NormalizeReward(CartPole(), axis_name=ENV_AXIS)
    _, state = env.reset(jax.random.key(0))
    with pytest.raises(ValueError, match="not bound"):
        env.step(jax.random.key(1), state, jnp.int32(0))
