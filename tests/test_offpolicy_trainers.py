"""The off-policy trainers (DQN, PQN, SAC) as programs: chunks run bitwise the whole run,
time-limit truncations are stored with their true final observation, traced hparams are
bitwise the constant config, bad inputs are one-line errors, the exploration and optimizer
pieces against closed forms, and the greedy test episodes against a slow episode loop.

Tiny configs (hidden 8, one layer, 2 envs, a few dozen updates), each program compiled
once (module fixtures shared by the tests). Learning itself is not tested here.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rljax.config import ConfigError
from rljax.contracts import TruncationBootstrapWarning
from rljax.envs import CartPole
from rljax.envs.batched import vmap_env
from rljax.envs.registry import make_env
from rljax.nonfinite import NONFINITE_STEP
from rljax.policies import mlp_q_network
from rljax.policies.qnetwork import QNetwork
from rljax.policies.sac_networks import mlp_sac_networks
from rljax.training.dqn import make_dqn_chunks, make_dqn_train
from rljax.training.offpolicy import env_transition
from rljax.training.offpolicy_config import (
    DQNTrainConfig,
    PQNTrainConfig,
    SACTrainConfig,
    linear_epsilon,
    offpolicy_optimizer,
    resolve_values,
)
from rljax.training.pqn import make_pqn_chunks, make_pqn_train
from rljax.training.sac import make_sac_chunks, make_sac_train

# 10-step episodes: each of the 2 envs truncates at least twice in DQN's 24 steps.
CARTPOLE = CartPole(max_steps_in_episode=10)
PENDULUM = make_env("Pendulum-v1")
PENDULUM_PARAMS = PENDULUM.default_params.replace(max_steps_in_episode=5)  # truncates often

# 24 updates of 2 env steps; gradient steps from update 4 on
DQN = DQNTrainConfig(num_envs=2, total_steps=48, buffer_size=64, batch_size=8,
                     learning_starts=8, num_epochs=2, target_update_period=2, hidden_size=8,
                     hidden_layers=1)
# 8 updates of a [4, 2] rollout, 2 epochs x 2 minibatches
PQN = PQNTrainConfig(num_envs=2, num_steps=4, total_steps=64, num_epochs=2, num_minibatches=2,
                     hidden_size=8, hidden_layers=1)
# 24 updates of 2 env steps; gradient steps from update 4 on
SAC = SACTrainConfig(num_envs=2, total_steps=48, buffer_size=64, batch_size=8,
                     learning_starts=8, hidden_size=8, hidden_layers=1)

KEY = jax.random.key(7)
# DQN's chunks run with the config's own learning rate traced (bitwise the constant run)
DQN_HPARAMS = {"learning_rate": jnp.float32(DQN.learning_rate)}
SUMMED = ("return_sum", "episodes")


def _one_line(err):
    assert "\n" not in str(err.value), str(err.value)


def _chunked(chunks, hparams, init, advance):
    state = init(KEY, hparams)
    rows = []
    for _ in range(chunks.num_chunks):
        state, logs = advance(state, hparams)
        rows.append(logs)
    return state, {name: np.concatenate([np.asarray(r[name]) for r in rows]) for name in rows[0]}


def _run(make_train, make_chunks, env, config, env_params, hparams=None, **chunk_kwargs):
    """One seed's ``train(key)`` and its chunked run, each program jitted alone (not
    vmapped: see test_chunks_are_bitwise_the_whole_run): ``{"whole": train's logs,
    "chunks", "logs": the advances' logs concatenated, "final": the last chunk state,
    "run": run(hparams) -> (final state, logs), the same compiled chunks}``."""
    whole = jax.tree.map(np.asarray, jax.jit(make_train(env, config, env_params))(KEY))
    chunks = make_chunks(env, config, env_params, **chunk_kwargs)
    init, advance = jax.jit(chunks.init), jax.jit(chunks.advance)
    final, logs = _chunked(chunks, hparams, init, advance)
    return {"whole": whole, "chunks": chunks, "logs": logs, "final": final,
            "run": lambda hp: _chunked(chunks, hp, init, advance)}


# DQN and SAC: log_every=1; PQN: log_every=2 (windows of the whole run's logs)
@pytest.fixture(scope="module")
def dqn_run():
    return _run(make_dqn_train, make_dqn_chunks, CARTPOLE, DQN, None, DQN_HPARAMS,
                updates_per_chunk=6)


@pytest.fixture(scope="module")
def pqn_run():
    return _run(make_pqn_train, make_pqn_chunks, CARTPOLE, PQN, None, updates_per_chunk=4,
                log_every=2)


@pytest.fixture(scope="module")
def sac_run():
    return _run(make_sac_train, make_sac_chunks, PENDULUM, SAC, PENDULUM_PARAMS,
                updates_per_chunk=6)


# ---------------------------------------------------------------------------------------
# 1. chunks == the whole run, bitwise


@pytest.mark.parametrize("algo", ["dqn", "sac"])
def test_chunks_are_bitwise_the_whole_run(algo, request):
    """``init`` + ``advance`` x k (log_every=1) gives exactly ``train(key)``'s logs (DQN's
    chunks with the config's own learning rate traced through ``hparams``), and
    ``finish`` the same first non-finite update. One seed, each function jitted alone:
    under ``jax.vmap`` over seeds the separately jitted programs were measured to differ
    from the whole run in the last float32 bit of DQN's ``loss`` / ``q`` (episodes and
    returns equal), as tests/test_ppo.py records for PPO (XLA compiles the update loop
    differently when the parameters enter as arguments)."""
    run = request.getfixturevalue(f"{algo}_run")
    whole, logs = run["whole"], run["logs"]
    config = {"dqn": DQN, "sac": SAC}[algo]
    assert set(logs) == set(whole) - {NONFINITE_STEP}
    for name, x in logs.items():
        assert x.shape == (config.num_updates,) and x.dtype == whole[name].dtype, name
        np.testing.assert_array_equal(x, whole[name], err_msg=name)
    assert int(logs["episodes"].sum()) > 0  # the runs end episodes
    assert np.any(logs["loss"] != 0)        # and take gradient steps
    hparams = DQN_HPARAMS if algo == "dqn" else None
    final = jax.jit(run["chunks"].finish)(run["final"], hparams)
    assert set(final) == {NONFINITE_STEP}
    np.testing.assert_array_equal(final[NONFINITE_STEP], whole[NONFINITE_STEP])
    assert int(final[NONFINITE_STEP]) == -1
    assert int(run["final"].update) == config.num_updates


def test_chunks_pass_hparams_to_every_update(dqn_run):
    """The same compiled chunks with 3 lr: every update from the first gradient step on
    logs another loss (a chunk that dropped ``hparams`` would repeat the constant's)."""
    _, moved = dqn_run["run"]({"learning_rate": jnp.float32(3 * DQN.learning_rate)})
    first = DQN.learning_starts // DQN.num_envs
    np.testing.assert_array_equal(moved["loss"][:first], 0.0)
    assert np.all(moved["loss"][first:] != dqn_run["logs"]["loss"][first:])


def test_windowed_chunks_sum_and_average_the_whole_runs_logs(pqn_run):
    """log_every=W=2: ``return_sum`` / ``episodes`` summed over each window, the rest
    averaged; bitwise a numpy reshape of the whole run's logs (a sum or mean of two
    float32 numbers is one correctly rounded operation)."""
    whole, logs = pqn_run["whole"], pqn_run["logs"]
    assert set(logs) == set(whole) - {NONFINITE_STEP}
    for name, x in logs.items():
        rows = whole[name].reshape(-1, 2)
        expected = rows.sum(axis=1, dtype=rows.dtype) if name in SUMMED else rows.mean(axis=1)
        assert x.shape == (PQN.num_updates // 2,) and x.dtype == whole[name].dtype, name
        np.testing.assert_array_equal(x, expected, err_msg=name)
    assert np.any(logs["episodes"] > 0)
    assert len(set(whole["loss"].tolist())) == PQN.num_updates  # each update's loss differs
    assert int(pqn_run["final"].update) == PQN.num_updates


# ---------------------------------------------------------------------------------------
# 2. truncation semantics


def _transitions(bootstrap, num_steps=30):
    """``num_steps`` steps of 4 CartPoles: envs 0, 1 always push left (they fall over:
    terminations), envs 2, 3 alternate (they reach the 10-step limit: truncations).
    Returns per step the raw vmapped step's outputs, env_transition's result on those
    outputs (jitted; its ``step`` hands them back) and the running returns before."""
    reset, step = vmap_env(CARTPOLE)
    params = CARTPOLE.default_params
    raw = jax.jit(step)

    @jax.jit
    def moved(outputs, state, actions, keys, episode_return):
        def replay(*args):  # env_transition's step: check its arguments, give `outputs`
            assert all(a is b for a, b in zip(args, (keys, state, actions, params),
                                              strict=True))
            return outputs
        return env_transition(replay, params, state, actions, keys, episode_return,
                              bootstrap=bootstrap, has_raw_reward=False)

    obs, state = reset(jax.random.split(jax.random.key(0), 4), params)
    episode_return = jnp.zeros((4,), jnp.float32)
    out = []
    for t in range(num_steps):
        actions = jnp.asarray([0, 0, t % 2, (t + 1) % 2], jnp.int32)
        keys = jax.random.split(jax.random.key(100 + t), 4)
        outputs = raw(keys, state, actions, params)
        result = moved(outputs, state, actions, keys, episode_return)
        out.append((jax.tree.map(np.asarray, outputs), jax.tree.map(np.asarray, result),
                    np.asarray(episode_return)))
        state, episode_return = outputs[1], result.episode_return
    return out


@pytest.mark.parametrize("bootstrap", [True, False])
def test_env_transition_bootstraps_truncations_from_final_obs(bootstrap):
    truncations = terminations = 0
    for (next_obs, env_state, reward, terminated, truncated, info), moved, before in \
            _transitions(bootstrap):
        done = terminated | truncated
        truncations += int(np.sum(truncated & ~terminated))
        terminations += int(np.sum(terminated))
        np.testing.assert_array_equal(moved.next_obs, next_obs)
        jax.tree.map(np.testing.assert_array_equal, moved.env_state, env_state)
        np.testing.assert_array_equal(moved.reward, reward)
        np.testing.assert_array_equal(moved.done, done)
        if bootstrap:
            np.testing.assert_array_equal(moved.terminated, terminated)
            expected = np.where(truncated[:, None], info["final_obs"], next_obs)
        else:
            np.testing.assert_array_equal(moved.terminated, done)
            expected = next_obs
        np.testing.assert_array_equal(moved.bootstrap_obs, expected)
        if bootstrap and truncated.any():  # the final obs is not the reset one
            assert not np.array_equal(moved.bootstrap_obs[truncated], next_obs[truncated])
        # returns: the finished episodes' sums, running returns restart at 0
        np.testing.assert_allclose(moved.return_sum, np.sum(np.where(done, before + reward, 0)),
                                   rtol=1e-6)
        assert int(moved.episodes) == int(done.sum())
        np.testing.assert_array_equal(moved.episode_return, np.where(done, 0.0, before + reward))
    assert truncations >= 4 and terminations >= 2, (truncations, terminations)


def _per_env(experience, num_updates, num_envs):
    """Buffer leaves ``[1, capacity, ...]`` -> ``[N, U, ...]`` (the ``N`` transitions of
    update ``u`` sit in slots ``u N .. u N + N - 1``; the buffer never wrapped)."""
    return jax.tree.map(lambda x: np.swapaxes(np.asarray(x)[0, :num_updates * num_envs]
                                              .reshape(num_updates, num_envs, *x.shape[2:]),
                                              0, 1), experience)


def test_dqn_buffer_stores_the_final_obs_at_truncations(dqn_run):
    """Each stored non-terminal ``next_obs`` is the Euler continuation of its ``obs``
    (``x' = x + tau x_dot``, ``theta' = theta + tau theta_dot``), truncations included:
    the final observation, not the reset one, with ``terminated`` False."""
    buffer_state = dqn_run["final"].carry.buffer_state
    assert int(buffer_state.current_index) == DQN.total_steps
    stored = _per_env(buffer_state.experience, DQN.num_updates, DQN.num_envs)
    tau = CARTPOLE.default_params.tau
    truncations = 0
    for env in range(DQN.num_envs):
        obs, next_obs = stored.obs[env], stored.next_obs[env]
        terminated = np.asarray(stored.terminated[env], bool)
        live = ~terminated
        for i in (0, 2):  # x and theta
            np.testing.assert_allclose(next_obs[live, i], obs[live, i] + tau * obs[live, i + 1],
                                       rtol=0, atol=1e-6)
        # a truncation: next_obs is not the next transition's (reset) obs
        cut = np.any(next_obs[:-1] != obs[1:], axis=-1) & live[:-1]
        truncations += int(cut.sum())
    assert truncations >= 2 * DQN.num_envs, truncations


def _angle_step(obs, next_obs, dt):
    """``(theta' - theta - dt theta_dot') mod 2 pi`` in ``(-pi, pi]``, 0 for a true
    Pendulum step (gymnax: ``theta' = theta + dt theta_dot'``)."""
    theta = np.arctan2(obs[..., 1], obs[..., 0])
    next_theta = np.arctan2(next_obs[..., 1], next_obs[..., 0])
    return np.angle(np.exp(1j * (next_theta - theta - dt * next_obs[..., 2])))


def test_sac_buffer_stores_the_final_obs_at_truncations(sac_run):
    buffer_state = sac_run["final"].carry.buffer_state
    stored = _per_env(buffer_state.experience, SAC.num_updates, SAC.num_envs)
    np.testing.assert_array_equal(stored.terminated, 0.0)  # Pendulum only truncates
    err = _angle_step(stored.obs, stored.next_obs, PENDULUM_PARAMS.dt)
    np.testing.assert_allclose(err, 0.0, atol=1e-4)
    cut = np.any(stored.next_obs[:, :-1] != stored.obs[:, 1:], axis=-1)
    # 24 steps per env, 5-step episodes: truncations after steps 5, 10, 15, 20
    np.testing.assert_array_equal(cut, np.broadcast_to(np.arange(23) % 5 == 4, cut.shape))


class NoFinalObs:
    """An env whose step info lacks ``final_obs`` (what an env without it gives)."""

    def __init__(self, env):
        self.env = env
        self.default_params = env.default_params
        self.name = f"NoFinalObs({env.name})"

    def __getattr__(self, name):
        return getattr(self.env, name)

    def reset(self, key, params):
        return self.env.reset(key, params)

    def step(self, key, state, action, params):
        *out, info = self.env.step(key, state, action, params)
        return (*out, {k: v for k, v in info.items() if k != "final_obs"})


@pytest.mark.parametrize("make_train, env, config", [
    (make_dqn_train, CARTPOLE, DQN), (make_pqn_train, CARTPOLE, PQN),
    (make_sac_train, PENDULUM, SAC)], ids=["dqn", "pqn", "sac"])
def test_env_without_final_obs_warns_unless_truncations_are_ended(make_train, env, config):
    with pytest.warns(TruncationBootstrapWarning, match=r"NoFinalObs.*'final_obs'"):
        make_train(NoFinalObs(env), config)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TruncationBootstrapWarning)
        make_train(NoFinalObs(env), config.replace(bootstrap_truncations=False))
        make_train(env, config)


# ---------------------------------------------------------------------------------------
# 3. traced hparams


def test_traced_learning_rate_is_bitwise_the_constant(dqn_run):
    """``train(key, {"learning_rate": lr})`` with the config's own rate (a traced float32)
    is bitwise ``train(key)``; 3 lr through the same program moves the run. (One seed:
    ``jax.vmap`` over the rates is another program, measured to differ from the unbatched
    one in the last bit of a few losses.)"""
    train = jax.jit(make_dqn_train(CARTPOLE, DQN))
    constant = dqn_run["whole"]
    for rate, same in ((DQN.learning_rate, True), (3 * DQN.learning_rate, False)):
        traced = jax.tree.map(np.asarray, train(KEY, {"learning_rate": jnp.float32(rate)}))
        assert set(traced) == set(constant)
        if same:
            for name, x in traced.items():
                np.testing.assert_array_equal(x, constant[name], err_msg=name)
        else:  # the traced value is not ignored
            assert not np.array_equal(traced["loss"], constant["loss"])


@pytest.mark.parametrize("make_train, env, config, params, name", [
    (make_dqn_train, CARTPOLE, DQN, None, "lam"),   # PQN's, not DQN's
    (make_pqn_train, CARTPOLE, PQN, None, "tau"),   # DQN's, not PQN's
    (make_sac_train, PENDULUM, SAC, PENDULUM_PARAMS, "bogus"),
    (make_sac_train, PENDULUM, SAC, PENDULUM_PARAMS, "max_grad_norm"),  # None in SAC
], ids=["dqn-lam", "pqn-tau", "sac-bogus", "sac-None"])
def test_untraceable_hparams_are_one_line_errors(make_train, env, config, params, name):
    train = make_train(env, config, params)
    with pytest.raises(ValueError, match=f"^hparams: .*{name}") as err:
        jax.eval_shape(train, KEY, {name: 0.5, "learning_rate": 0.1})
    _one_line(err)


def test_chunks_finish_refuses_untraceable_hparams(dqn_run):
    with pytest.raises(ValueError, match="^hparams: cannot trace bogus") as err:
        dqn_run["chunks"].finish(dqn_run["final"], {"bogus": 1.0})
    _one_line(err)


# ---------------------------------------------------------------------------------------
# 4. bad input


def _squeezed_q(params, obs):  # Q-values [N] instead of [N, 2]
    return mlp_q_network(2, (8,)).apply(params, obs)[..., 0]


@pytest.mark.parametrize("make_train, config", [(make_dqn_train, DQN), (make_pqn_train, PQN)],
                         ids=["dqn", "pqn"])
def test_q_network_that_does_not_fit_the_actions_is_a_one_line_error(make_train, config):
    with pytest.raises(ValueError, match=r"^mlp_q_network\.apply \(Q-network\): Q-values "
                       r"have 3 actions.*Discrete\(2\)") as err:
        make_train(CARTPOLE, config, network=mlp_q_network(3, (8,)))
    _one_line(err)
    squeezed = QNetwork(mlp_q_network(2, (8,)).init, _squeezed_q, 2)
    with pytest.raises(ValueError, match=r"^_squeezed_q .*shape \[2\].*\[2, A\]") as err:
        make_train(CARTPOLE, config, network=squeezed)
    _one_line(err)


def test_sac_actor_that_does_not_fit_the_box_is_a_one_line_error():
    networks = mlp_sac_networks([-2.0, -2.0], [2.0, 2.0], (8,))  # 2 dims, Pendulum has 1
    with pytest.raises(ValueError, match=r"^mlp_sac_networks\.actor .*\[2\].*Box.*\(1,\)") \
            as err:
        make_sac_train(PENDULUM, SAC, PENDULUM_PARAMS, networks=networks)
    _one_line(err)


@pytest.mark.parametrize("make_train, env, config, pattern", [
    (make_dqn_train, PENDULUM, DQN, r"^Pendulum-v1: DQN needs Discrete"),
    (make_pqn_train, PENDULUM, PQN, r"^Pendulum-v1: PQN needs Discrete"),
    (make_sac_train, CARTPOLE, SAC, r"^CartPole: SAC needs Box.*Discrete\(2\)"),
], ids=["dqn", "pqn", "sac"])
def test_wrong_action_space_names_the_env(make_train, env, config, pattern):
    with pytest.raises(ValueError, match=pattern) as err:
        make_train(env, config)
    _one_line(err)


@pytest.mark.parametrize("make_train, env, config, field", [
    (make_dqn_train, CARTPOLE, DQN.replace(batch_size=65), "batch_size"),
    (make_sac_train, PENDULUM, SAC.replace(batch_size=65), "batch_size"),
    (make_dqn_train, CARTPOLE, DQN.replace(num_envs=65, total_steps=65), "num_envs"),
    (make_pqn_train, CARTPOLE, PQN.replace(num_minibatches=3), "num_minibatches"),
    (make_sac_train, PENDULUM, SAC.replace(log_std_min=2.0), "log_std_min"),
    (make_sac_train, PENDULUM, SAC.replace(log_std_min=3.0), "log_std_min"),
    (make_dqn_train, CARTPOLE, DQN.replace(total_steps=1), "total_steps"),
    (make_pqn_train, CARTPOLE, PQN.replace(total_steps=7), "total_steps"),
    (make_dqn_train, CARTPOLE, DQN.replace(tau=0.0), "tau"),
], ids=["dqn-batch_size", "sac-batch_size", "dqn-num_envs", "pqn-num_minibatches",
        "sac-log_std_min-equal", "sac-log_std_min-above", "dqn-total_steps", "pqn-total_steps",
        "dqn-tau"])
def test_invalid_config_names_the_field(make_train, env, config, field):
    with pytest.raises(ConfigError, match=f"^{field}:") as err:
        config.validate()  # the config's own check (replay_buffer / mlp_sac_networks
    _one_line(err)         # repeat some of them with other words)
    with pytest.raises(ValueError, match=f"^{field}:") as err:
        make_train(env, config)
    _one_line(err)


def test_config_of_another_trainer_is_refused():
    with pytest.raises(ValueError, match="^config: must be a DQNTrainConfig, got PQN"):
        make_dqn_train(CARTPOLE, PQN)


# ---------------------------------------------------------------------------------------
# 5. exploration schedule and optimizer


def _epsilon_reference(config, steps):
    horizon = max(1, int(config.exploration_fraction * config.total_steps))
    return np.interp(steps, [0, horizon], [config.eps_start, config.eps_end])


@pytest.mark.parametrize("fraction", [0.3, 0.0, 1.0])
def test_linear_epsilon_matches_the_closed_form_under_jit_and_vmap(fraction):
    config = DQN.replace(total_steps=1000, exploration_fraction=fraction, eps_start=0.9,
                         eps_end=0.1)
    steps = np.asarray([0, 1, 150, 299, 300, 301, 500, 999, 1000, 5000])
    expected = _epsilon_reference(config, steps)
    got = jax.jit(jax.vmap(lambda s: linear_epsilon(config, s)))(steps)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    np.testing.assert_allclose(linear_epsilon(config, 10**6), config.eps_end, atol=1e-7)
    assert float(linear_epsilon(config, 0)) == pytest.approx(config.eps_start)


def test_logged_epsilon_follows_the_schedule(dqn_run, pqn_run):
    steps = np.arange(DQN.num_updates) * DQN.num_envs
    expected = np.where(steps < DQN.learning_starts, 1.0, _epsilon_reference(DQN, steps))
    np.testing.assert_allclose(dqn_run["whole"]["epsilon"], expected, atol=1e-6)
    steps = np.arange(PQN.num_updates) * PQN.steps_per_update
    np.testing.assert_allclose(pqn_run["whole"]["epsilon"], _epsilon_reference(PQN, steps),
                               atol=1e-6)


def _updates(optimizer, grads):
    params = {"w": jnp.zeros(2, jnp.float32)}
    state = optimizer.init(params)
    out = []
    for g in grads:
        update, state = optimizer.update({"w": jnp.asarray(g, jnp.float32)}, state, params)
        out.append(np.asarray(update["w"]))
    return np.stack(out)


def test_annealed_learning_rate_reaches_zero_at_the_last_gradient_step():
    config = DQN.replace(anneal_lr=True, max_grad_norm=None, learning_rate=0.01)
    steps = config.gradient_steps
    assert steps == DQN.num_updates * DQN.num_epochs
    g = np.asarray([1.0, -2.0], np.float32)
    got = _updates(offpolicy_optimizer(config, resolve_values(config, None)), [g] * (steps + 2))
    # Adam on a constant gradient moves -lr_k g / (|g| + eps); lr_k = lr (1 - k / G)
    rate = config.learning_rate * np.clip(1 - np.arange(steps + 2) / steps, 0, None)
    expected = -rate[:, None] * g / (np.abs(g) + config.adam_eps)
    # (rtol: Adam's float32 bias correction 1 - 0.999^k cancels digits at small k)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-12)
    assert np.all(got[steps - 1] != 0)
    np.testing.assert_array_equal(got[steps:], 0.0)


BIG_GRADS = [[1000.0, 1.0], [1.0, -1000.0], [-5.0, 3.0]]  # magnitudes change over time


@pytest.mark.parametrize("optimizer, reference", [("adam", optax.adam), ("radam", optax.radam)])
def test_max_grad_norm_none_is_the_plain_optimizer(optimizer, reference):
    config = SAC.replace(optimizer=optimizer, learning_rate=0.01)
    assert config.max_grad_norm is None
    got = _updates(offpolicy_optimizer(config, resolve_values(config, None)), BIG_GRADS)
    plain = _updates(reference(0.01, eps=config.adam_eps), BIG_GRADS)
    np.testing.assert_array_equal(got, plain)
    for clip, grad_clip in ((optax.clip_by_global_norm, "global_norm"),
                            (optax.clip, "elementwise")):
        clipped = config.replace(max_grad_norm=10.0, grad_clip=grad_clip)
        got = _updates(offpolicy_optimizer(clipped, resolve_values(clipped, None)), BIG_GRADS)
        expected = _updates(optax.chain(clip(10.0), reference(0.01, eps=config.adam_eps)),
                            BIG_GRADS)
        np.testing.assert_array_equal(got, expected)
        assert not np.allclose(got, plain, rtol=1e-3)  # the clip shows on these gradients


# ---------------------------------------------------------------------------------------
# 7. greedy test episodes


def test_greedy_evaluation_matches_an_episode_loop(dqn_run):
    """``finish``'s ``E`` test episodes (``eval_return_mode``, ``eval_finished_mode``,
    ``[E]``) equal a Python loop that resets CartPole with the same keys and steps it with
    ``argmax_a Q(s, a)`` of the trained parameters. The run is DQN's above (10-step
    episodes); its final state is handed to the ``finish`` of chunks over CartPole with a
    40-step limit, played for at most 25 steps (``finish`` reads only the parameters, the
    env state's moments and the run key): the greedy episodes then last 11 to 25 steps,
    some unfinished."""
    env = CartPole(max_steps_in_episode=40)
    num_episodes, max_steps = 8, 25
    chunks = make_dqn_chunks(env, DQN, updates_per_chunk=6, eval_episodes=num_episodes,
                             eval_max_steps=max_steps)
    state = dqn_run["final"]
    out = jax.jit(chunks.finish)(state)
    returns, finished = np.asarray(out["eval_return_mode"]), np.asarray(out["eval_finished_mode"])
    assert returns.shape == finished.shape == (num_episodes,)
    assert returns.dtype == np.float32 and finished.dtype == bool

    network = mlp_q_network(2, (DQN.hidden_size,) * DQN.hidden_layers,
                            activation=DQN.activation, dueling=DQN.dueling)
    q_values = jax.jit(network.apply)
    params = env.default_params
    step = jax.jit(lambda s, a: env.step(jax.random.key(0), s, a, params))  # deterministic
    # evaluate_policy's keys: fold_in(run_key, U) -> (resets, steps, noise)
    reset_key = jax.random.split(jax.random.fold_in(state.run_key, DQN.num_updates), 3)[0]
    expected, ended = [], []
    for key in jax.random.split(reset_key, num_episodes):
        obs, env_state = env.reset(key, params)
        total, done = 0.0, False
        for _ in range(max_steps):
            action = int(np.argmax(np.asarray(q_values(state.carry.params, obs[None]))[0]))
            obs, env_state, reward, terminated, truncated, _ = step(env_state,
                                                                    jnp.int32(action))
            total += float(reward)
            done = bool(terminated) or bool(truncated)
            if done:
                break
        expected.append(total)
        ended.append(done)
    np.testing.assert_array_equal(returns, np.asarray(expected, np.float32))
    np.testing.assert_array_equal(finished, ended)
    assert 0 < sum(ended) < num_episodes and len(set(expected)) > 3  # a telling case


def test_pqn_rollout_batch_bootstraps_truncations_only_when_asked():
    """The PQN trainer's rollout -> PQNBatch: a truncation (done, not terminated) is marked
    truncated with its true final observation, so q_lambda_targets bootstraps it; with
    bootstrapping off, nothing is marked (terminated already holds every end)."""
    from rljax.training.pqn import rollout_to_batch

    done = np.array([[True, False], [False, True], [True, True]])
    terminated = np.array([[True, False], [False, False], [False, True]])
    obs = np.arange(3 * 2 * 4, dtype=np.float32).reshape(3, 2, 4)
    final = -obs
    batch = rollout_to_batch(obs, np.zeros((3, 2), np.int32), np.ones((3, 2)), terminated,
                             done, final, obs[-1], bootstrap=True)
    np.testing.assert_array_equal(batch.truncated, done & ~terminated)
    np.testing.assert_array_equal(batch.final_obs, final)
    np.testing.assert_array_equal(batch.terminated, terminated)
    off = rollout_to_batch(obs, np.zeros((3, 2), np.int32), np.ones((3, 2)), done, done,
                           obs, obs[-1], bootstrap=False)
    assert off.truncated is None and off.final_obs is None


def test_pqn_targets_from_the_acting_q_values_are_the_recomputed_ones(pqn_run, monkeypatch):
    """The PQN trainer hands q_lambda_targets the max-Q it acted on (no second forward
    pass over the rollout): a run whose targets recompute max_a Q(s_t, a) from the stored
    observations under the same parameters logs the same losses and Q-values (float32
    tolerance: the per-step and the batched matmul may round differently)."""
    import rljax.training.pqn as pqn_trainer

    targets = pqn_trainer.q_lambda_targets

    def recomputed(q_apply, params, batch, *, gamma, lam, max_q=None):
        assert max_q is not None and max_q.shape == batch.rewards.shape
        return targets(q_apply, params, batch, gamma=gamma, lam=lam)

    monkeypatch.setattr(pqn_trainer, "q_lambda_targets", recomputed)
    logs = jax.tree.map(np.asarray, jax.jit(make_pqn_train(CARTPOLE, PQN))(KEY))
    for name in ("loss", "q"):
        np.testing.assert_allclose(pqn_run["whole"][name], logs[name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    np.testing.assert_array_equal(pqn_run["whole"]["return_sum"], logs["return_sum"])


def test_sac_networks_match_a_numpy_forward_pass_under_jit_and_vmap():
    """mlp_sac_networks: the actor is swish MLP -> (mean, log_std clipped to [min, max]),
    each of the N stacked critics a swish MLP of concat(obs, action) -> q, checked against
    a numpy forward pass of the same parameters; log_alpha starts at 0."""
    import jax

    low, high = np.array([-2.0, 0.0]), np.array([2.0, 1.0])
    nets = mlp_sac_networks(low, high, (5, 3), num_critics=3, log_std_min=-0.1,
                            log_std_max=0.1)
    obs = np.random.default_rng(0).normal(size=(4, 6)).astype(np.float32) * 3.0
    action = np.random.default_rng(1).uniform(-1, 1, size=(4, 2)).astype(np.float32)
    keys = jax.random.split(jax.random.key(0), 2)
    params = jax.vmap(nets.init, in_axes=(0, None))(keys, obs[0])  # a seed axis [2]

    def swish(x):
        return x / (1.0 + np.exp(-x))

    def mlp(layers, x):
        for layer in layers:
            x = swish(x @ np.asarray(layer["kernel"]) + np.asarray(layer["bias"]))
        return x

    def np_actor(p):
        p = p["params"]
        h = mlp([p["Dense_0"], p["Dense_1"]], obs)
        mean = h @ np.asarray(p["mean"]["kernel"]) + np.asarray(p["mean"]["bias"])
        log_std = h @ np.asarray(p["log_std"]["kernel"]) + np.asarray(p["log_std"]["bias"])
        return mean, np.clip(log_std, -0.1, 0.1)

    def np_critic(p):
        p = p["params"]
        h = mlp([p["Dense_0"], p["Dense_1"]], np.concatenate([obs, action], -1))
        return (h @ np.asarray(p["Dense_2"]["kernel"]) + np.asarray(p["Dense_2"]["bias"]))[:, 0]

    actor = jax.jit(jax.vmap(nets.actor, in_axes=(0, None)))(params["actor"], obs)
    critics = jax.jit(jax.vmap(jax.vmap(nets.critic, in_axes=(0, None, None)),
                               in_axes=(0, None, None)))(params["critic"], obs, action)
    assert critics.shape == (2, 3, 4) and np.all(np.asarray(params["log_alpha"]) == 0.0)
    for s in range(2):
        one = jax.tree.map(lambda x, s=s: np.asarray(x[s]), params)
        mean, log_std = np_actor(one["actor"])
        np.testing.assert_allclose(actor[0][s], mean, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(actor[1][s], log_std, rtol=1e-5, atol=1e-5)
        assert np.any(np.abs(log_std) == 0.1)  # the clip binds somewhere
        for n in range(3):
            np.testing.assert_allclose(
                critics[s, n], np_critic(jax.tree.map(lambda x, n=n: x[n], one["critic"])),
                rtol=1e-5, atol=1e-5)
    assert nets.distribution.name == "tanh_gaussian"
