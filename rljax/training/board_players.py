"""Players and matches for two-player board games with pgx's API (Connect Four).

A *player* is a pure function ``player(key, state) -> action``: ``state`` a batch of pgx
states (every leaf ``[B, ...]``), ``action`` ``[B]`` int32, a legal action of every live game.
:func:`play_match` plays an agent against an opponent over ``G`` games in parallel, the agent
moving first in the first half of the games and second in the other half, and scores each
game from the agent's side (win 1, draw 1/2, loss 0).

Reference players: :func:`random_player` (uniform over legal actions) and
:func:`depth2_player` (exhaustive two-ply minimax with pgx steps: it takes a win in one, else
avoids every move after which the opponent can win in one — which blocks a single threat —,
else plays at random). A depth-2 player beats the random player most of the time, so it
is a harder yardstick than the random one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp

Player = Callable[[jax.Array, Any], jax.Array]
"""``player(key, states [B]) -> actions [B]`` (int32 legal actions)."""


def _batch_size(state: Any) -> int:
    return int(state.current_player.shape[0])


def random_player(key: jax.Array, state: Any) -> jax.Array:
    """Uniform over each game's legal actions.

    Args:
      key: PRNG key.
      state: pgx states, leaves ``[B, ...]`` with ``legal_action_mask [B, A]``.

    Returns:
      ``[B]`` int32 actions, ``P(a) = 1 / #legal`` for each legal ``a``.
    """
    chex.assert_rank(state.legal_action_mask, 2)
    logits = jnp.where(state.legal_action_mask, 0.0, -jnp.inf)
    return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)


def greedy_player(logits_fn: Callable[[Any], jax.Array]) -> Player:
    """The legal action with the largest logit, ``argmax_{a legal} logits(state)_a``.

    Args:
      logits_fn: ``logits_fn(states [B]) -> [B, A]`` (e.g. a policy network's head).

    Returns:
      a deterministic :data:`Player` (its key is ignored).
    """

    def player(key: jax.Array, state: Any) -> jax.Array:
        del key
        logits = logits_fn(state)
        chex.assert_equal_shape([logits, state.legal_action_mask])
        masked = jnp.where(state.legal_action_mask, logits, -jnp.inf)
        return jnp.argmax(masked, axis=-1).astype(jnp.int32)

    return player


def one_ply_values(env: Any, state: Any) -> jax.Array:
    """The mover's outcome after each legal move, for one unbatched state.

    Returns ``[A]`` float32: ``+1`` if action ``a`` wins at once, ``0`` if the game goes on
    or is drawn, ``-inf`` for an illegal ``a``. One ``env.step`` per action (vmapped).
    """
    actions = jnp.arange(state.legal_action_mask.shape[-1], dtype=jnp.int32)
    children = jax.vmap(env.step, in_axes=(None, 0))(state, actions)
    mover = state.current_player
    value = children.rewards[:, mover]
    return jnp.where(state.legal_action_mask, value, -jnp.inf)


def two_ply_values(env: Any, state: Any) -> jax.Array:
    """Two-ply minimax values of one unbatched state, from the mover's side.

    ``V(a) = r(a)`` if ``a`` ends the game, else ``-max_b r'(a, b)`` with ``r'`` the
    opponent's immediate outcome of its legal reply ``b``: ``+1`` a win in one, ``0`` a
    move that keeps the game open (or draws), ``-1`` a move after which the opponent wins
    at once; ``-inf`` for an illegal ``a``. ``A + A^2`` pgx steps (vmapped).

    Args:
      env: a pgx environment (``step(state, action) -> state``).
      state: one pgx state (no batch axis), not terminated.

    Returns:
      ``[A]`` float32 values.
    """
    actions = jnp.arange(state.legal_action_mask.shape[-1], dtype=jnp.int32)
    children = jax.vmap(env.step, in_axes=(None, 0))(state, actions)
    mover = state.current_player
    immediate = children.rewards[:, mover]
    replies = jax.vmap(one_ply_values, in_axes=(None, 0))(env, children)  # [A, A]
    opponent_best = jnp.max(replies, axis=-1)
    value = jnp.where(children.terminated, immediate, -opponent_best)
    return jnp.where(state.legal_action_mask, value, -jnp.inf)


def depth2_player(env: Any) -> Player:
    """Two-ply minimax with random tie-breaking (:func:`two_ply_values`).

    Takes a move that wins at once when there is one; otherwise a move after which the
    opponent has no immediate win (so it blocks a single threat and does not play under
    one), chosen uniformly; if every move loses, any legal move.

    Args:
      env: a pgx environment.

    Returns:
      a :data:`Player` over batches of ``env``'s states.
    """

    def player(key: jax.Array, state: Any) -> jax.Array:
        chex.assert_rank(state.legal_action_mask, 2)
        values = jax.vmap(two_ply_values, in_axes=(None, 0))(env, state)  # [B, A]
        best = jnp.max(values, axis=-1, keepdims=True)
        logits = jnp.where(values >= best, 0.0, -jnp.inf)
        return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)

    return player


@chex.dataclass(frozen=True)
class MatchResult:
    """Outcome of :func:`play_match`, ``G`` games.

    Attributes:
      outcome: ``[G]`` float32, the agent's result: ``+1`` win, ``0`` draw, ``-1`` loss
        (``[K * G]`` with ``num_blocks = K``).
      agent_first: ``[G]`` bool, whether the agent made the first move.
      num_moves: ``[G]`` int32, plies played.
    """

    outcome: jax.Array
    agent_first: jax.Array
    num_moves: jax.Array

    @property
    def score(self) -> jax.Array:
        """Mean score, wins + draws / 2 over games: ``mean((outcome + 1) / 2)``."""
        return jnp.mean((self.outcome + 1.0) / 2.0, axis=-1)


def play_match(key: jax.Array, env: Any, agent: Player, opponent: Player, num_games: int,
               max_moves: int = 42, num_blocks: int = 1) -> MatchResult:
    """Play ``num_games`` games of ``env`` between ``agent`` and ``opponent``, in parallel.

    Games ``0 .. G/2 - 1`` have the agent move first, the others the opponent, so both
    colours are played equally (a player against itself scores exactly 1/2 in
    expectation). With ``num_blocks = K`` the match is ``K`` copies of those ``G`` games
    (``K * G`` in all, block-major, every block with the same starts): players that
    dispatch on the game index play ``K`` matchups in one program. Every ply both players
    are evaluated on every game and the mover's action is kept (branch-free); finished
    games are left unchanged.

    Args:
      key: PRNG key (game starts, both players' noise).
      env: a pgx two-player environment whose games end within ``max_moves`` plies.
      agent: :data:`Player` scored.
      opponent: :data:`Player`.
      num_games: ``G``, even, >= 2.
      max_moves: plies simulated (42 fills a Connect Four board).
      num_blocks: ``K`` copies of the ``G`` games.

    Returns:
      :class:`MatchResult`; ``result.score`` is the agent's score in ``[0, 1]``.
    """
    if not isinstance(num_games, int) or num_games < 2 or num_games % 2:
        raise ValueError(f"num_games: must be an even int >= 2, got {num_games!r}")
    if not isinstance(max_moves, int) or max_moves < 1:
        raise ValueError(f"max_moves: must be an int >= 1, got {max_moves!r}")
    if not isinstance(num_blocks, int) or num_blocks < 1:
        raise ValueError(f"num_blocks: must be an int >= 1, got {num_blocks!r}")
    init_key, play_key = jax.random.split(key)
    state = jax.vmap(env.init)(jax.random.split(init_key, num_games))
    agent_first = jnp.arange(num_games) < num_games // 2
    state, agent_first = jax.tree_util.tree_map(
        lambda x: jnp.concatenate([x] * num_blocks), (state, agent_first))
    num_games = num_games * num_blocks
    agent_id = jnp.where(agent_first, state.current_player, 1 - state.current_player)

    def ply(carry, ply_key):
        state, moves = carry
        agent_key, opponent_key = jax.random.split(ply_key)
        agent_action = agent(agent_key, state)
        opponent_action = opponent(opponent_key, state)
        chex.assert_shape([agent_action, opponent_action], (num_games,))
        action = jnp.where(state.current_player == agent_id, agent_action, opponent_action)
        live = ~state.terminated
        state = jax.vmap(env.step)(state, action.astype(jnp.int32))
        outcome = state.rewards[jnp.arange(num_games), agent_id]
        return (state, moves + live.astype(jnp.int32)), outcome

    (state, moves), outcomes = jax.lax.scan(
        ply, (state, jnp.zeros(num_games, jnp.int32)), jax.random.split(play_key, max_moves))
    # a finished game's rewards are nonzero on its last ply only (pgx zeroes them after)
    outcome = jnp.sum(outcomes, axis=0)
    return MatchResult(outcome=outcome, agent_first=agent_first, num_moves=moves)

