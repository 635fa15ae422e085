"""The gymnax adapter against gymnax itself: the same numbers step by step (jit, vmap,
auto-reset, truncation), gymnax's legacy five-value API, a non-CartPole env, a PPO sweep
through the adapter, and the drop-in contract gymnax's own suite checks (gymnax's
``step_env``, the transition-gradient API, gradients, forwarding, every registered env)."""

import gymnax  # a dev dependency: a missing one fails, never skips
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.envs import CartPole, GymnaxEnv, as_rljax_space, from_gymnax  # noqa: E402
from rljax.policies import mlp_actor_critic  # noqa: E402
from rljax.sweep import Sweep  # noqa: E402
from rljax.training import PPOTrainConfig, make_ppo_train  # noqa: E402
from rljax.training.ppo import _has_final_obs  # noqa: E402  (what PPO checks)

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
    # step_env is gymnax's own (five values); transition is rljax's six, no auto-reset
    # (what beam search / best-of-n expand with)
    last = state.replace(time=params.max_steps_in_episode - 1)
    ref = raw.step_env(key, last, 1, params)
    _assert_trees_equal(env.step_env(key, last, 1, params), ref)
    out = env.transition(key, last, 1, params)
    assert len(out) == 6
    _assert_trees_equal(out[:4], ref[:4])
    assert not bool(out[3]) and bool(out[4])  # truncated, not terminated
    assert int(out[1].time) == params.max_steps_in_episode  # no auto-reset
    assert out[2].dtype == jnp.float32 and out[3].dtype == out[4].dtype == jnp.bool_
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


def test_num_actions_is_gymnax_s_and_bad_inputs_are_refused():
    """``num_actions`` is gymnax's (a Box env's action dimension: Pendulum's 1); only where
    gymnax has none (it raises ``NotImplementedError``) does the adapter derive it from a
    Discrete space or raise a one-line ``ValueError`` for a Box."""
    from gymnax.environments import environment, spaces

    env = from_gymnax("Pendulum-v1")
    assert env.num_actions == gymnax.make("Pendulum-v1")[0].num_actions == 1
    assert type(env.action_space()).__name__ == "Box"  # what rljax's trainer reads

    class NoNumActions(environment.Environment):
        def __init__(self, space):
            self.space = space

        def action_space(self, params=None):
            return self.space

    with pytest.raises(NotImplementedError):
        _ = NoNumActions(spaces.Discrete(3)).num_actions  # what gymnax does
    assert GymnaxEnv(NoNumActions(spaces.Discrete(3))).num_actions == 3
    with pytest.raises(ValueError, match="Discrete action spaces.*Box") as error:
        _ = GymnaxEnv(NoNumActions(spaces.Box(-1.0, 1.0, (2,)))).num_actions
    assert isinstance(error.value, NotImplementedError) and "\n" not in str(error.value)
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


# ---------------------------------------------------------------- the drop-in contract
# The behaviours gymnax 1.0.1's own suite checks (scripts/peer_tests.py runs that suite
# against the adapter), tested here on our side.


def test_step_env_is_gymnax_s_five_values_and_transition_rljax_s_six():
    raw, params = gymnax.make("Pendulum-v1")
    env = GymnaxEnv(raw, params.replace(max_steps_in_episode=1))
    params = env.default_params
    key = jax.random.key(3)
    _, state = env.reset(key)
    action = jnp.array([0.5])
    out = env.step_env(key, state, action)  # params default to the adapter's
    ref = raw.step_env(key, state, action, params)
    assert len(out) == 5
    _assert_trees_equal(out, ref)
    obs, next_state, reward, terminated, truncated, info = env.transition(key, state, action)
    _assert_trees_equal((obs, next_state, reward, terminated), ref[:4])
    assert bool(truncated) and not bool(terminated) and int(next_state.time) == 1
    np.testing.assert_array_equal(info["final_obs"], obs)


def test_native_transition_is_its_step_env():
    """``Environment.transition`` of a native env: its (six-value) ``step_env``, so no
    auto-reset at the time limit."""
    env = CartPole(max_steps_in_episode=3)
    key = jax.random.key(0)
    _, state = env.reset(key)
    state = state.replace(time=2)
    out = env.transition(key, state, 1)
    _assert_trees_equal(out, env.step_env(key, state, 1, env.default_params))
    assert bool(out[4]) and int(out[1].time) == 3


def test_transition_gradient_api_is_forwarded_and_stays_adapted():
    env = from_gymnax("Pendulum-v1")
    raw = env.gymnax_env
    assert env.supports_transition_gradients and not env.transition_gradients_enabled
    grad_env = env.with_transition_gradients()
    assert isinstance(grad_env, GymnaxEnv) and grad_env is not env
    assert grad_env.transition_gradients_enabled and grad_env.supports_transition_gradients
    assert not env.transition_gradients_enabled and not raw.transition_gradients_enabled
    assert grad_env.gymnax_env is not raw and type(grad_env.gymnax_env) is type(raw)
    assert grad_env.default_params is env.default_params
    cartpole = from_gymnax("CartPole-v1")
    assert not cartpole.supports_transition_gradients
    with pytest.raises(ValueError, match="CartPole-v1.*transition gradients"):
        cartpole.with_transition_gradients()
    for name in ("supports_transition_gradients", "transition_gradients_enabled"):
        with pytest.raises(AttributeError):  # read-only, as in gymnax
            setattr(cartpole, name, True)


def test_gradients_flow_through_the_adapter_as_through_gymnax():
    """Pendulum's Jacobian of the next observation (step, step_env, transition) and the
    gradient of the reward with respect to the action, under jit and vmap: gymnax's own
    numbers -- zero for the observation by default (gymnax stops transition gradients),
    non-zero once ``with_transition_gradients()`` is on."""
    raw, params = gymnax.make("Pendulum-v1")
    _, state = raw.reset(jax.random.key(0), params)
    key = jax.random.key(1)
    actions = jnp.array([[0.2], [-0.4]])

    def derivatives(env, adapted):
        def outputs(action):
            step = env.step(key, state, action, params)
            no_reset = env.transition if adapted else env.step_env
            return step[0], env.step_env(key, state, action, params)[0], \
                no_reset(key, state, action, params)[0]

        obs_jacobians = jax.vmap(jax.jacrev(outputs))(actions)
        reward_grads = jax.vmap(jax.grad(lambda a: env.step(key, state, a, params)[2]))(actions)
        return obs_jacobians, reward_grads

    for gradients_on in (False, True):
        inner = raw.with_transition_gradients() if gradients_on else raw
        ours = jax.jit(derivatives, static_argnums=(0, 1))(GymnaxEnv(inner, params), True)
        theirs = jax.jit(derivatives, static_argnums=(0, 1))(inner, False)
        _assert_trees_equal(ours, theirs)
        (step_jac, step_env_jac, transition_jac), reward_grad = ours
        assert step_jac.shape == (2, 3, 1)
        assert np.all(np.abs(reward_grad) > 0)
        for jacobian in (step_jac, step_env_jac, transition_jac):
            assert np.any(np.abs(jacobian) > 1e-7) == gradients_on


def test_other_attributes_are_the_inner_env_s_and_copies_work():
    import copy
    import pickle

    raw, params = gymnax.make("Breakout-MinAtar")
    env = GymnaxEnv(raw, params)
    for name in ("get_obs", "observe", "is_terminal", "is_terminated", "is_truncated",
                 "discount", "state_space"):
        assert getattr(env, name) == getattr(raw, name), name  # the inner env's methods
    assert env.obs_shape == raw.obs_shape  # an env-specific field
    assert type(env.state_space(params)).__name__ == "Dict"
    _, state = env.reset(jax.random.key(0))
    np.testing.assert_array_equal(env.get_obs(state, params), raw.get_obs(state, params))
    with pytest.raises(AttributeError, match="no_such_attribute"):
        _ = env.no_such_attribute
    for clone in (copy.copy(env), copy.deepcopy(env), pickle.loads(pickle.dumps(env))):
        assert isinstance(clone, GymnaxEnv) and clone.name == "Breakout-MinAtar"
        assert clone.obs_shape == raw.obs_shape
        _assert_trees_equal(clone.reset(jax.random.key(0)), env.reset(jax.random.key(0)))

    class SelfCopying(type(raw)):  # an inner env with a dunder of its own
        def __deepcopy__(self, memo):
            return self

    assert isinstance(copy.deepcopy(GymnaxEnv(SelfCopying(), params)), GymnaxEnv)


def test_unknown_env_id_is_one_line_naming_close_matches():
    with pytest.raises(ValueError) as error:
        from_gymnax("CartPol-v1")
    message = str(error.value)
    assert "'CartPol-v1'" in message and "CartPole-v1" in message and "\n" not in message
    with pytest.raises(ValueError, match="'Zzz'.*no close match"):
        from_gymnax("Zzz")


@pytest.fixture
def offline_mnist(monkeypatch):
    """MNISTBandit downloads MNIST when made; two blank digits instead (as gymnax's own
    reproduction-matrix test does), so the test runs offline."""
    from gymnax.environments.bsuite import mnist

    images, labels = np.zeros((2, 28, 28), np.uint8), np.array([0, 1], np.uint8)
    monkeypatch.setattr(mnist.load_mnist, "load_mnist",
                        lambda: ((images, labels), (images, labels)))


EVERY_STEPS = 3


@pytest.mark.parametrize("name", list(gymnax.registered_envs))
def test_every_registered_env_steps_through_the_adapter(name, offline_mnist):
    """Reset and a few steps of 2 envs with random actions from gymnax's action space, one
    jit(vmap(...)) program per env; shapes, dtypes and info keys as rljax reads them."""
    env = from_gymnax(name)
    action_space = env.action_space()
    rljax_space = as_rljax_space(action_space)  # what rljax's trainer does with it

    def one(key):
        reset_key, action_key, step_key = jax.random.split(key, 3)
        obs, state = env.reset(reset_key)
        actions = jax.vmap(action_space.sample)(jax.random.split(action_key, EVERY_STEPS))

        def body(state, inputs):
            key, action = inputs
            obs, state, reward, terminated, truncated, info = env.step(key, state, action)
            return state, (obs, reward, terminated, truncated, info["final_obs"],
                           info["final_observation"], rljax_space.contains(action))

        _, out = jax.lax.scan(body, state, (jax.random.split(step_key, EVERY_STEPS), actions))
        return obs, out

    first, (obs, reward, terminated, truncated, final, gymnax_final, valid) = jax.jit(
        jax.vmap(one))(jax.random.split(jax.random.key(0), 2))
    obs_shape = tuple(env.observation_space().shape)
    assert first.shape == (2, *obs_shape) and obs.shape == (2, EVERY_STEPS, *obs_shape)
    assert final.shape == obs.shape and reward.shape == (2, EVERY_STEPS)
    assert reward.dtype == jnp.float32
    assert terminated.dtype == truncated.dtype == jnp.bool_
    assert terminated.shape == truncated.shape == reward.shape
    np.testing.assert_array_equal(np.asarray(final), np.asarray(gymnax_final))
    assert np.all(np.asarray(valid))
    assert np.all(np.isfinite(np.asarray(reward)))
