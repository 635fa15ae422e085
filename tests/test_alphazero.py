"""AlphaZero self-play on Connect Four (rljax.training.alphazero, board_players) and the
``alphazero`` study's config.

Fast tests: the depth-2 player's rules on hand-built boards and against a Python loop over
pgx steps, the match's win-rate accounting on a hand-computed case, the value targets
against a numpy loop, self-play's policy targets against the search's ``action_weights``
(under jit + vmap over seeds, deterministic), and the Config's bad input. The whole
training run under ``Sweep`` (determinism, block-fixed seeds) and a small study run
compile the full program (a minute on 2 cores): ``@pytest.mark.slow``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pgx
import pytest

from experiments import alphazero as study
from rljax.cli import main
from rljax.config import ConfigError
from rljax.sweep import Sweep
from rljax.training import board_players
from rljax.training.alphazero import (
    AlphaZeroConfig,
    BoardNetwork,
    make_alphazero_train,
    search_move,
    self_play,
    value_targets,
)

ENV = pgx.make("connect_four")
STEP = jax.jit(ENV.step)


def board(moves: list[int], key: int = 0):
    """An unbatched pgx state after ``moves`` from the start."""
    state = ENV.init(jax.random.key(key))
    for a in moves:
        state = STEP(state, jnp.int32(a))
    assert not bool(state.terminated)
    return state


def batch(state, n: int):
    return jax.tree_util.tree_map(lambda x: jnp.stack([x] * n), state)


@pytest.fixture(scope="module")
def depth2():
    return jax.jit(board_players.depth2_player(ENV))


# --------------------------------------------------------------------------------------
# Players.


def test_depth2_takes_a_win(depth2):
    # X: column 0 three high; O: 1, 1, 2 (no threat). X to move wins at 0.
    state = batch(board([0, 1, 0, 1, 0, 2]), 16)
    actions = depth2(jax.random.key(1), state)
    np.testing.assert_array_equal(np.asarray(actions), 0)


def test_depth2_blocks_a_loss(depth2):
    # X: bottom row 0, 2, 4 (no win in one); O: column 1 three high. X must block at 1.
    state = batch(board([0, 1, 2, 1, 4, 1]), 16)
    actions = depth2(jax.random.key(2), state)
    np.testing.assert_array_equal(np.asarray(actions), 1)
    # the random player does not (it is uniform over the 7 legal columns)
    random_actions = board_players.random_player(jax.random.key(3), batch(board([0, 1]), 64))
    assert len(np.unique(np.asarray(random_actions))) > 3


def reference_two_ply(state) -> np.ndarray:
    """Python loop over pgx steps: win in one -> +1; else -1 if some reply wins; else 0."""
    me = int(state.current_player)
    values = np.full(7, -np.inf)
    for a in range(7):
        if not bool(state.legal_action_mask[a]):
            continue
        child = STEP(state, jnp.int32(a))
        if bool(child.terminated):
            values[a] = float(child.rewards[me])
            continue
        values[a] = 0.0
        for b in range(7):
            if bool(child.legal_action_mask[b]):
                grandchild = STEP(child, jnp.int32(b))
                if bool(grandchild.terminated) and float(grandchild.rewards[1 - me]) > 0:
                    values[a] = -1.0
    return values


def test_two_ply_values_match_python_loop():
    positions = [board([0, 1, 2, 1, 4, 1]), board([0, 1, 0, 1, 0, 2]),
                 board([3, 3, 4, 4, 2, 6, 0, 0, 0, 0, 0, 0])]
    values = jax.jit(jax.vmap(board_players.two_ply_values, in_axes=(None, 0)),
                     static_argnums=0)(ENV, jax.tree_util.tree_map(
                         lambda *x: jnp.stack(x), *positions))
    for position, got in zip(positions, np.asarray(values), strict=True):
        np.testing.assert_array_equal(got, reference_two_ply(position))


# --------------------------------------------------------------------------------------
# Matches.


def column_player(column: int):
    def player(key, state):
        return jnp.full(state.current_player.shape, column, jnp.int32)
    return player


def test_match_accounting_hand_computed():
    # Stackers on columns 0 and 1: whoever moves first completes four on ply 7.
    # Games 0-1 the agent moves first (wins), games 2-3 second (loses): score 1/2.
    # Two blocks: the same four games twice.
    match = jax.jit(lambda key: board_players.play_match(
        key, ENV, column_player(0), column_player(1), 4, num_blocks=2))(jax.random.key(0))
    np.testing.assert_array_equal(np.asarray(match.outcome), [1, 1, -1, -1] * 2)
    np.testing.assert_array_equal(np.asarray(match.agent_first), [True, True, False, False] * 2)
    np.testing.assert_array_equal(np.asarray(match.num_moves), 7)
    assert float(match.score) == 0.5
    # the accounting of one block by hand: wins + draws / 2 over games
    mixed = board_players.MatchResult(outcome=jnp.array([1.0, 0.0, -1.0, 1.0]),
                                      agent_first=jnp.ones(4, bool),
                                      num_moves=jnp.ones(4, jnp.int32))
    assert float(mixed.score) == pytest.approx((2 + 0.5) / 4)


def test_match_bad_input():
    with pytest.raises(ValueError, match="^num_games: must be an even int"):
        board_players.play_match(jax.random.key(0), ENV, column_player(0), column_player(1), 3)
    with pytest.raises(ValueError, match="^num_blocks"):
        board_players.play_match(jax.random.key(0), ENV, column_player(0), column_player(1), 2,
                                 num_blocks=0)


# --------------------------------------------------------------------------------------
# Targets.


def reference_value_targets(reward: np.ndarray, terminated: np.ndarray):
    steps, games = reward.shape
    z = np.zeros((steps, games), np.float32)
    finished = np.zeros((steps, games), bool)
    for n in range(games):
        for t in range(steps):
            # walk forward to the end of this position's game
            sign, s = 1.0, t
            while s < steps and not terminated[s, n]:
                sign, s = -sign, s + 1
            if s < steps:
                z[t, n] = sign * reward[s, n]
                finished[t, n] = True
    return z, finished


def test_value_targets_match_loop_under_vmap():
    rng = np.random.default_rng(0)
    terminated = rng.random((3, 9, 5)) < 0.25
    reward = np.where(terminated, rng.choice([-1.0, 0.0, 1.0], size=terminated.shape), 0.0)
    z, finished = jax.jit(jax.vmap(value_targets))(jnp.asarray(reward, jnp.float32),
                                                   jnp.asarray(terminated))
    for i in range(3):
        want_z, want_f = reference_value_targets(reward[i], terminated[i])
        np.testing.assert_array_equal(np.asarray(finished[i]), want_f)
        np.testing.assert_allclose(np.asarray(z[i]), want_z)


TINY = AlphaZeroConfig(iterations=2, num_games=4, window=2, num_simulations=4,
                       replay_windows=2, updates=2, batch_size=8, hidden_size=16,
                       num_layers=1, eval_every=1, eval_games=2)


def test_self_play_targets_are_search_weights():
    net = BoardNetwork(ENV.num_actions, TINY.hidden_size, TINY.num_layers)
    keys = jax.random.split(jax.random.key(5), 2)
    full_column = batch(board([0] * 6), TINY.num_games)  # column 0 full: illegal

    def one_seed(key):
        init_key, play_key = jax.random.split(key)
        params = net.init(init_key, full_column.observation[0])
        _, window = self_play(params, play_key, full_column, ENV, net.apply, TINY)
        # self_play's first ply: key split over the window, then (search, reset)
        search_key, _ = jax.random.split(jax.random.split(play_key, TINY.window)[0])
        direct = search_move(params, search_key, full_column, ENV, net.apply,
                             TINY.num_simulations, TINY.max_considered_actions)
        return window, direct

    run = jax.jit(jax.vmap(one_seed))
    window, direct = run(keys)
    targets = np.asarray(window.policy_target)  # [seeds, T, N, A]
    # the same search (inlined in a scan, so XLA may fuse it differently: last bits)
    np.testing.assert_allclose(targets[:, 0], np.asarray(direct.action_weights), rtol=1e-5,
                               atol=1e-7)
    np.testing.assert_allclose(targets.sum(-1), 1.0, rtol=1e-5)
    assert np.all(targets[:, 0, :, 0] == 0)  # the full column has no weight
    assert np.all(targets[:, 0, :, 1:] > 0)
    # the stored observation is the root's; the seeds' targets differ (own keys)
    np.testing.assert_array_equal(np.asarray(window.observation[:, 0]),
                                  np.broadcast_to(full_column.observation,
                                                  window.observation[:, 0].shape))
    assert not np.array_equal(targets[0], targets[1])
    # deterministic: the same keys give the same bits
    again = run(keys)[0]
    np.testing.assert_array_equal(targets, np.asarray(again.policy_target))


# --------------------------------------------------------------------------------------
# Config.


@pytest.mark.parametrize("field, value, message", [
    ("eval_every", 7, "^eval_every: must divide iterations"),
    ("eval_games", 3, "^eval_games: must be even"),
    ("max_considered_actions", 8, "^max_considered_actions: must be an integer in"),
    ("learning_rate", 0.0, "^learning_rate: must be"),
    ("num_simulations", 0, "^num_simulations: must be an integer in"),
    ("seeds", 1, "^seeds: must be an integer in"),
])
def test_config_bad_input(field, value, message):
    config = study.Config(**{field: value})
    with pytest.raises(ConfigError, match=message) as info:
        config.validate()
    assert "\n" not in str(info.value)


def test_trainer_config_bad_input():
    with pytest.raises(ValueError, match="^eval_every: must divide"):
        AlphaZeroConfig(iterations=5, eval_every=2).validate()
    with pytest.raises(ValueError, match="^window: must be an int >= 1"):
        AlphaZeroConfig(window=0).validate()
    assert study.Config().trainer_config() == AlphaZeroConfig(
        **{f: getattr(study.Config(), f) for f in study.TRAINER_FIELDS})


def test_cli_refuses_bad_config(tmp_path, capsys):
    out = tmp_path / "az"
    assert main(["run", "alphazero", "--out", str(out), "--set", "eval_games=3"]) == 2
    assert "eval_games" in capsys.readouterr().err
    assert not out.exists()


# --------------------------------------------------------------------------------------
# Whole runs (slow: they compile the full program).


@pytest.mark.slow
def test_training_deterministic_and_block_fixed():
    train = make_alphazero_train(ENV, TINY)
    sweep = Sweep(train, base_seed=3, block_size=2)
    first = sweep.run(3).outputs
    again = sweep.run(3).outputs
    alone = sweep.run(1).outputs
    for name, value in first.items():
        np.testing.assert_array_equal(np.asarray(value), np.asarray(again[name]), err_msg=name)
        np.testing.assert_array_equal(np.asarray(value)[:1], np.asarray(alone[name]),
                                      err_msg=name)
    assert first["score/search/random"].shape == (3, TINY.checkpoints)
    assert first["loss"].shape == (3, TINY.iterations)
    assert np.all(np.isfinite(np.asarray(first["loss"])))


@pytest.mark.slow
def test_study_small(tmp_path):
    from helpers.study_runs import run_study

    out, s = run_study(tmp_path, "alphazero", "seeds=2", "iterations=2", "eval_every=1",
                       "num_games=4", "window=8", "num_simulations=4", "eval_games=4",
                       "bootstrap_reps=100", block_size=2)
    for name in study.MATCHUPS:
        r = s[f"{name.replace('/', '_vs_')}_final"]
        assert r["low"] <= r["point"] <= r["high"] and "coverage" in r["note"]
    assert len(s["search_vs_random_curve"]["mean"]) == 3
    for name in ["results.parquet", "training.parquet", "summary.json", "report.md",
                 "learning_curves.png", "final_scores.png", "config.json"]:
        assert (out / name).exists(), name
