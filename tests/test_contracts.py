"""Boundary contracts (rljax.contracts): a user's mistake is a one-line error naming the
function they wrote and both shapes, raised once at trace time -- never a silent wrong
result or a broadcasting error deep in a scan.

Each test below is one of the mistakes a new user made (issue 31): a policy head of the
wrong size, a step observation that differs from the reset's, a reward of shape [1], a
custom GRPO advantage of the wrong shape, an ``apply`` returning the wrong thing, a train
function returning a string. The env template's ``info == {}`` must bootstrap truncations.
"""

from __future__ import annotations

import re
import warnings
from contextlib import contextmanager

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import rljax
from rljax.algorithms import EpisodeBatch, GroupBatch, PPOBatch, grpo, ppo, reinforce
from rljax.contracts import ContractError, TruncationBootstrapWarning
from rljax.envs import TimeLimit
from rljax.envs.base import Environment, EnvParams, EnvState
from rljax.policies import Policy, mlp_actor_critic, mlp_gaussian_actor_critic
from rljax.training import PPOTrainConfig, make_ppo_chunks, make_ppo_train

SMALL = PPOTrainConfig(num_envs=2, num_steps=8, total_steps=2 * 8 * 2, num_epochs=1,
                       num_minibatches=1)


# ------------------------------------------------------------------- a user's gridworld


@struct.dataclass
class GridState(EnvState):
    position: jax.Array  # int32 [2]


class GridWorld(Environment):
    """A 5 x 5 grid, 4 moves, the goal in the far corner; observation: the one-hot
    position [25]. The class attributes below make the plausible mistakes."""

    step_obs_shape = (25,)   # (5, 5): the step's observation differs from the reset's
    reward_shape = ()        # (1,): a reward of shape [1]
    reward_dtype = jnp.float32

    @property
    def num_actions(self) -> int:
        return 4

    @property
    def default_params(self) -> EnvParams:
        return EnvParams(max_steps_in_episode=12)

    def _obs(self, position):
        return jax.nn.one_hot(position[0] * 5 + position[1], 25)

    def reset_env(self, key, params):
        position = jnp.zeros((2,), jnp.int32)
        return self._obs(position), GridState(time=jnp.int32(0), position=position)

    def step_env(self, key, state, action, params):
        moves = jnp.array([[0, 1], [1, 0], [0, -1], [-1, 0]], jnp.int32)
        position = jnp.clip(state.position + moves[action], 0, 4)
        terminated = jnp.all(position == 4)
        truncated = state.time + 1 >= params.max_steps_in_episode
        reward = jnp.broadcast_to(terminated.astype(self.reward_dtype), self.reward_shape)
        obs = self._obs(position).reshape(self.step_obs_shape)
        return (obs, GridState(time=state.time + 1, position=position), reward, terminated,
                truncated, {})


class SquareObsGridWorld(GridWorld):
    step_obs_shape = (5, 5)


class VectorRewardGridWorld(GridWorld):
    reward_shape = (1,)


class IntRewardGridWorld(GridWorld):
    reward_dtype = jnp.int32


@contextmanager
def one_line_error(pattern):
    """Expect a ContractError whose message (JAX's traceback note aside) is one line in
    which ``pattern`` is found (``re.search``; anchor it with ``^`` / ``$``)."""
    with pytest.raises(ContractError) as raised:
        yield
    message = str(raised.value)
    assert "\n" not in message, message
    assert re.search(pattern, message), message


def _make(env, policy, config=SMALL):
    return make_ppo_train(env, policy, config)


# ------------------------------------------------------------------------- policy head


@pytest.mark.parametrize("num_logits", [3, 5])
def test_policy_logits_that_do_not_match_the_action_space_are_named(num_logits):
    with pytest.raises(ContractError) as raised:
        _make(GridWorld(), mlp_actor_critic(num_logits, (8,)))
    message = str(raised.value)
    assert "\n" not in message
    assert f"logits have {num_logits} actions" in message
    assert "GridWorld's action_space is Discrete(4)" in message
    assert "mlp_actor_critic" in message  # the function that made the logits


def test_policy_logits_are_checked_in_the_chunked_trainer_too():
    with one_line_error(r"logits have 3 actions .*Discrete\(4\)"):
        make_ppo_chunks(GridWorld(), mlp_actor_critic(3, (8,)), SMALL, updates_per_chunk=1)


def test_a_hand_written_apply_is_named_by_its_own_name():
    net = mlp_actor_critic(4, (8,))

    def grid_apply(params, obs):
        logits, value = net.apply(params, obs)
        return logits[..., :2], value

    policy = Policy(init=net.init, apply=grid_apply)
    with one_line_error(r"^(\w+\.)?grid_apply \(policy\): logits have 2 actions but "
                        r"GridWorld's action_space is Discrete\(4\)$"):
        _make(GridWorld(), policy)


def test_an_apply_that_returns_only_logits_is_named():
    net = mlp_actor_critic(4, (8,))

    def logits_only(params, obs):
        return net.apply(params, obs)[0]

    with one_line_error(r"^(\w+\.)?logits_only \(actor-critic\): must return "
                        r"\(dist_params, value\), got \[2, 4\]$"):
        _make(GridWorld(), Policy(init=net.init, apply=logits_only))


def test_values_of_the_wrong_shape_are_named():
    net = mlp_actor_critic(4, (8,))

    def keepdims_value(params, obs):
        logits, value = net.apply(params, obs)
        return logits, value[:, None]

    with one_line_error(r"keepdims_value \(actor-critic\): returns values "
                        r"of shape \[2, 1\] for \[2\] observations"):
        _make(GridWorld(), Policy(init=net.init, apply=keepdims_value))


def test_a_gaussian_head_of_the_wrong_size_is_named():
    from helpers.force_echo import PointMass  # a Box((2,)) env

    net = mlp_gaussian_actor_critic(3, (8,))
    net = net._replace(distribution=mlp_gaussian_actor_critic(1).distribution)
    with one_line_error(r"mlp_gaussian_actor_critic.apply \(policy\): Gaussian mean \[3\] / "
                        r"log_std \[3\] per observation but PointMass's action_space is Box"):
        _make(PointMass(), net)


def test_the_recurrent_trainer_checks_its_head_too():
    from rljax.policies import gru_actor_critic
    from rljax.training import make_recurrent_ppo_train

    with one_line_error(r"^(\w+\.)?apply \(policy\): logits have 3 actions but GridWorld's "
                        r"action_space is Discrete\(4\)$"):
        make_recurrent_ppo_train(GridWorld(), gru_actor_critic(3, 8), SMALL)
    make_recurrent_ppo_train(GridWorld(), gru_actor_critic(4, 8), SMALL)


def test_the_matching_head_passes():
    _make(GridWorld(), mlp_actor_critic(4, (8,)))


# ------------------------------------------------------------------------ env contract


def test_step_observation_shape_that_differs_from_reset_is_named():
    with pytest.raises(ContractError) as raised:
        _make(SquareObsGridWorld(), mlp_actor_critic(4, (8,)))
    assert str(raised.value) == (
        "SquareObsGridWorld.step_env returns observations of shape [5, 5] but "
        "SquareObsGridWorld.reset_env returns [25]; both must return the same observation "
        "shape")


def test_step_observation_checked_on_a_single_env_step_too():
    env = SquareObsGridWorld()
    obs, state = env.reset(jax.random.key(0))
    with one_line_error(r"step_env returns observations of shape \[5, 5\]"):
        env.step(jax.random.key(1), state, jnp.int32(0))
    with one_line_error(r"step_env returns observations of shape \[5, 5\]"):
        jax.jit(jax.vmap(env.step))(jax.random.split(jax.random.key(1), 3),
                                    jax.tree_util.tree_map(lambda x: jnp.stack([x] * 3), state),
                                    jnp.zeros((3,), jnp.int32))


def test_reward_of_shape_one_is_named():
    with one_line_error(r"^VectorRewardGridWorld.step_env returns reward of "
                        r"shape \[1\]; it must be a float scalar \[\] per "
                        r"environment$"):
        _make(VectorRewardGridWorld(), mlp_actor_critic(4, (8,)))


def test_integer_reward_is_named():
    with one_line_error(r"reward of dtype int32; it must be floating"):
        _make(IntRewardGridWorld(), mlp_actor_critic(4, (8,)))


def test_a_duck_typed_env_is_checked_by_the_trainer():
    inner = GridWorld()

    class DuckGrid:  # no rljax base class: its step returns a [1] reward
        name = "DuckGrid"
        default_params = inner.default_params
        num_actions = 4

        def reset(self, key, params):
            return inner.reset(key, params)

        def step(self, key, state, action, params):
            obs, state, reward, terminated, truncated, info = inner.step(key, state, action,
                                                                         params)
            return obs, state, reward[None], terminated, truncated, info

    with one_line_error(r"^DuckGrid.step returns reward of shape \[1\]"):
        _make(DuckGrid(), mlp_actor_critic(4, (8,)))


def test_non_bool_termination_is_named():
    class IntDone(GridWorld):
        def step_env(self, key, state, action, params):
            out = list(super().step_env(key, state, action, params))
            out[3] = out[3].astype(jnp.int32)
            return tuple(out)

    with one_line_error(r"IntDone.step_env returns terminated of dtype "
                        r"int32; it must be bool"):
        IntDone().step(jax.random.key(0), IntDone().reset(jax.random.key(0))[1], jnp.int32(0))


# ----------------------------------------------------------------- truncation bootstrap


class LineWalk(Environment):
    """The README's template env: ``info == {}``, a time limit of 5 steps, no goal in
    reach within the limit, so every episode is truncated."""

    explicit_final_obs = False

    @property
    def num_actions(self) -> int:
        return 2

    @property
    def default_params(self) -> EnvParams:
        return EnvParams(max_steps_in_episode=5)

    def reset_env(self, key, params):
        return jnp.zeros((1,), jnp.float32), GridState(time=jnp.int32(0),
                                                        position=jnp.zeros((2,), jnp.int32))

    def step_env(self, key, state, action, params):
        position = state.position + jnp.array([2 * action - 1, 0], jnp.int32)
        terminated = position[0] >= 30
        truncated = state.time + 1 >= params.max_steps_in_episode
        obs = position[:1].astype(jnp.float32)
        reward = position[0].astype(jnp.float32) / 5.0
        info = {"final_obs": obs} if self.explicit_final_obs else {}
        return obs, GridState(time=state.time + 1, position=position), reward, terminated, \
            truncated, info


class LineWalkWithFinalObs(LineWalk):
    explicit_final_obs = True


def test_base_step_supplies_final_obs_before_auto_reset():
    env = LineWalk()
    obs, state = env.reset(jax.random.key(0))
    for t in range(5):
        obs, state, _, terminated, truncated, info = env.step(jax.random.key(t), state,
                                                              jnp.int32(1))
    assert bool(truncated) and not bool(terminated)
    np.testing.assert_array_equal(info["final_obs"], [5.0])  # before the reset
    np.testing.assert_array_equal(obs, [0.0])                 # after it


def test_template_env_with_empty_info_bootstraps_truncations():
    config = SMALL.replace(total_steps=2 * 8 * 3)
    net = mlp_actor_critic(2, (8,))
    key = jax.random.key(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TruncationBootstrapWarning)
        empty = jax.jit(make_ppo_train(LineWalk(), net, config))(key)
    explicit = jax.jit(make_ppo_train(LineWalkWithFinalObs(), net, config))(key)
    off = jax.jit(make_ppo_train(LineWalk(), net, config.replace(
        bootstrap_truncations=False)))(key)
    chex.assert_trees_all_equal(empty, explicit)
    assert not np.array_equal(empty["value_loss"], off["value_loss"])


def test_a_trainer_that_cannot_bootstrap_warns_once_naming_final_obs():
    class NoFinalObs:  # duck-typed: info without final_obs
        name = "NoFinalObs"
        default_params = LineWalk().default_params
        num_actions = 2

        def reset(self, key, params):
            return LineWalk().reset(key, params)

        def step(self, key, state, action, params):
            out = LineWalk().step(key, state, action, params)
            return (*out[:5], {})

    with pytest.warns(TruncationBootstrapWarning,
                      match=r"NoFinalObs: .*'final_obs'.*bootstrap_truncations"):
        make_ppo_train(NoFinalObs(), mlp_actor_critic(2, (8,)), SMALL)
    with warnings.catch_warnings():  # asked not to bootstrap: nothing to warn about
        warnings.simplefilter("error", TruncationBootstrapWarning)
        make_ppo_train(NoFinalObs(), mlp_actor_critic(2, (8,)),
                       SMALL.replace(bootstrap_truncations=False))


def test_time_limit_over_a_native_env_reports_the_exact_final_obs():
    env = TimeLimit(LineWalk(), 3)
    obs, state = env.reset(jax.random.key(0))
    for t in range(3):
        obs, state, _, _, truncated, info = env.step(jax.random.key(t), state, jnp.int32(1))
    assert bool(truncated)
    np.testing.assert_array_equal(info["final_obs"], [3.0])


# ------------------------------------------------------------------------- transforms


def _group_batch(p=2, g=4, t=3, a=5):
    return GroupBatch(obs=jnp.zeros((p, g, t, 2)), actions=jnp.zeros((p, g, t), jnp.int32),
                      mask=jnp.ones((p, g, t)), rewards=jnp.arange(p * g, dtype=jnp.float32
                                                                   ).reshape(p, g),
                      old_log_probs=jnp.full((p, g, t), -1.6),
                      ref_log_probs=jnp.full((p, g, t), -1.6))


def _logits(params, obs):
    return obs @ params  # [.., 2] @ [2, 5]


def test_custom_advantage_of_the_wrong_shape_is_named():
    def mean_only(rewards):
        return rewards.mean(axis=-1)  # [P] instead of [P, G]

    rl = grpo(_logits, group_size=4, advantage=mean_only)
    with one_line_error(r"^advantage=(\w+\.)?mean_only returned \[2\] for rewards "
                        r"\[2, 4\]; it must return \[2, 4\]$"):
        jax.jit(rl.loss)(jnp.zeros((2, 5)), (), _group_batch())


def test_custom_advantage_checked_under_vmap_and_with_several_rewards():
    rl = grpo(_logits, group_size=4, advantage=lambda r: r[..., :1])
    batch = _group_batch()
    stacked = jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), batch)
    with one_line_error(r"^advantage=(\w+\.)?<lambda> returned \[2, 1\]"):
        jax.vmap(rl.loss, in_axes=(None, None, 0))(jnp.zeros((2, 5)), (), stacked)
    rl = grpo(_logits, group_size=4, advantage=lambda r: r[..., :1], reward_weights=[1.0, 1.0])
    multi = batch.replace(rewards=jnp.stack([batch.rewards] * 2, axis=-1))
    with one_line_error(r"^advantage=(\w+\.)?<lambda> returned \[2, 1\]"):
        rl.loss(jnp.zeros((2, 5)), (), multi)


def test_a_custom_advantage_of_the_right_shape_gives_the_builtin_result():
    from rljax.advantages import group_relative_advantages

    builtin = grpo(_logits, group_size=4)
    custom = grpo(_logits, group_size=4, advantage=group_relative_advantages)
    params = jnp.ones((2, 5))
    chex.assert_trees_all_equal(jax.jit(builtin.loss)(params, (), _group_batch()),
                                jax.jit(custom.loss)(params, (), _group_batch()))


def test_grpo_policy_apply_and_log_prob_fn_outputs_are_named():
    def flat_logits(params, obs):
        return (obs @ params).reshape(obs.shape[0], -1)

    with one_line_error(r"^policy_apply=.*flat_logits returned \[8, 15\] "
                        r"for observations \[8, 3\]"):
        grpo(flat_logits, group_size=4).loss(jnp.zeros((2, 5)), (), _group_batch())

    def sequence_log_prob(params, obs, actions):
        return jnp.zeros(actions.shape[:1])

    with one_line_error(r"^log_prob_fn=.*sequence_log_prob returned \[8\] "
                        r"for actions \[8, 3\]; it must return \[8, 3\]$"):
        grpo(log_prob_fn=sequence_log_prob, group_size=4).loss(jnp.zeros((2, 5)), (),
                                                               _group_batch())


def test_ppo_transform_names_an_apply_that_returns_one_array():
    def logits_only(params, obs):
        return obs @ params

    batch = PPOBatch(obs=jnp.zeros((6, 2)), actions=jnp.zeros((6,), jnp.int32),
                     old_log_probs=jnp.zeros(6), advantages=jnp.zeros(6), returns=jnp.zeros(6),
                     old_values=jnp.zeros(6))
    with one_line_error(r"logits_only \(actor-critic\): must return "
                        r"\(dist_params, value\), got \[6, 5\]"):
        jax.jit(ppo(logits_only).loss)(jnp.zeros((2, 5)), (), batch)


def test_ppo_transform_names_a_gaussian_mean_that_does_not_match_the_actions():
    from rljax.policies.distributions import diagonal_gaussian

    def wide_mean(params, obs):
        mean = obs @ params  # [6, 3]
        return (mean, jnp.zeros_like(mean)), jnp.zeros(obs.shape[0])

    batch = PPOBatch(obs=jnp.zeros((6, 2)), actions=jnp.zeros((6, 2)),
                     old_log_probs=jnp.zeros(6), advantages=jnp.zeros(6), returns=jnp.zeros(6),
                     old_values=jnp.zeros(6))
    rl = ppo(wide_mean, distribution=diagonal_gaussian(2))
    with one_line_error(r"^(\w+\.)?wide_mean \(actor-critic\): Gaussian mean \[6, 3\] for "
                        r"actions \[6, 2\]; they must match$"):
        jax.jit(rl.loss)(jnp.zeros((2, 3)), (), batch)
    rl.loss(jnp.zeros((2, 2)), (), batch)  # [6, 2]: fine


def test_reinforce_names_policy_apply_and_baseline():
    batch = EpisodeBatch(obs=jnp.zeros((3, 4, 2)), actions=jnp.zeros((3, 4), jnp.int32),
                         rewards=jnp.zeros((3, 4)), mask=jnp.ones((3, 4)),
                         episode_reward=jnp.zeros(3))

    def pooled(params, obs):
        return (obs @ params).mean(axis=1)  # [G, A] instead of [G, T, A]

    rl = reinforce(pooled)
    with one_line_error(r"^policy_apply=.*pooled returned \[3, 5\] for "
                        r"observations \[3, 4\]"):
        jax.jit(rl.loss)(jnp.zeros((2, 5)), rl.init(None), batch)

    scalar = rljax.advantages.Baseline(init=lambda: (),
                                       update=lambda state, scores: (jnp.mean(scores), state))
    rl = reinforce(_logits, baseline=scalar)
    with one_line_error(r"^baseline=(\w+\.)?<lambda> returned \[\] for episode "
                        r"rewards \[3\]; it must return \[3\]$"):
        rl.loss(jnp.zeros((2, 5)), rl.init(None), batch)


# ------------------------------------------------------------------------------- sweeps


def test_sweep_names_a_train_function_that_returns_a_string():
    def my_train(key):
        return {"score": jax.random.uniform(key), "name": "run"}

    with one_line_error(r"^train=(\w+\.)?my_train returned a str at \['name'\]"):
        rljax.Sweep(my_train, block_size=2).run(2, progress=False)


def test_sweep_of_arrays_passes_the_check():
    result = rljax.Sweep(lambda key: {"x": jax.random.uniform(key)}, block_size=2).run(
        3, progress=False)
    assert result.outputs["x"].shape == (3,)


# ------------------------------------------------------------------------------- docs


def test_the_docs_env_template_trains_bootstraps_and_reports_final_returns():
    """The template in docs/envs.md, executed as written: its info is {} yet its
    truncations are bootstrapped (no warning), and final_returns gives one value per seed."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "envs.md").read_text()
    marker = "<!-- executed by tests/test_contracts.py -->\n```python\n"
    start = text.index(marker) + len(marker)
    code = text[start:text.index("```", start)]
    namespace: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", TruncationBootstrapWarning)
        exec(compile(code, "docs/envs.md", "exec"), namespace)  # noqa: S102
    assert namespace["final"].shape == (8,)
    env = namespace["env"]
    _, state = env.reset(jax.random.key(0))
    _, _, _, _, _, info = env.step(jax.random.key(1), state, jnp.int32(1))
    assert set(info) == {"final_obs"}


def test_lm_trainer_checks_the_policy_vocabulary():
    from rljax.policies import LMConfig, TinyLM
    from rljax.training.lm import TASK_TOKENIZER, check_policy_vocabulary

    vocab = TASK_TOKENIZER.vocab_size
    small = dict(context_length=8, num_layers=1, width=8, num_heads=2, mlp_ratio=1)
    with one_line_error(rf"^policy TinyLM: logits over {vocab + 4} tokens \(config.vocab_size\) "
                        rf"but the task's tokenizer has {vocab}$"):
        check_policy_vocabulary(TinyLM(LMConfig(vocab_size=vocab + 4, **small)), None, vocab)
    check_policy_vocabulary(TinyLM(LMConfig(vocab_size=vocab, **small)), None, vocab)


def test_every_mutant_text_occurs_exactly_once():
    """scripts/mutants.py's mutants target today's code: a refactor that strands one (its
    text gone, or made ambiguous) fails here, not silently in a script nobody runs."""
    from pathlib import Path

    from script_module import load_script

    mutants = load_script("mutants")
    repo = Path(__file__).resolve().parents[1]
    names = [m.name for m in mutants.MUTANTS]
    assert len(names) == len(set(names))
    for m in mutants.MUTANTS:
        text = (repo / m.file).read_text()
        assert text.count(m.old) == 1, f"{m.name}: {m.file} holds its text {text.count(m.old)}x"
        assert m.old != m.new, m.name
        for test in m.tests:
            assert (repo / test.split("::")[0]).is_file(), f"{m.name}: no {test}"
