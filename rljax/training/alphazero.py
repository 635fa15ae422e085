"""AlphaZero self-play with Gumbel MuZero search on a pgx two-player board game.

One seed's whole run is one pure function ``train(key) -> results``
(:func:`make_alphazero_train`), so :class:`rljax.sweep.Sweep` vmaps it over seeds. Each
iteration:

1. **Self-play** (:func:`self_play`): ``N`` games in parallel for ``T`` plies; at every ply
   the network's prior and value seed ``rljax.search.gumbel_muzero_policy`` (Danihelka et
   al. 2022), whose ``recurrent_fn`` steps the *true* game (:func:`make_recurrent_fn`:
   reward to the mover, discount ``-1`` between alternating players, ``0`` and
   ``terminal`` at the end of a game, illegal moves masked at every node). The move played
   is the search's Gumbel-sampled action; a finished game restarts at once (branch-free).
2. **Targets** (:func:`value_targets`): the policy target of a position is the search's
   improved policy ``softmax(logits + σ(completed q̂))`` (the ``action_weights``); the value
   target is the game's final outcome from the mover's side, ``z_t = r_t - z_{t+1}``
   within a game (``r_t`` the reward to the player who moved at ``t``; ``+1`` win,
   ``-1`` loss, ``0`` draw). Positions whose game has not ended inside the window have no
   outcome yet and are masked out.
3. **Replay and SGD**: the last ``replay_windows`` windows are kept; ``updates`` Adam steps
   on minibatches drawn uniformly from their finished positions (each mirrored left-right
   with probability 1/2, Connect Four's symmetry), loss

   ``L = E[-Σ_a π_a log p_θ(a|s)] + E[(v_θ(s) - z)^2]``

   (Silver et al. 2017, "Mastering the game of Go without human knowledge", and 2018, "A
   general reinforcement learning algorithm that masters chess, shogi and Go through
   self-play"; without the L2 term, optax's ``adamw`` weight decay standing in for it).

Every ``eval_every`` iterations (and before the first) the current network is scored
against a random and a depth-2 minimax player (:mod:`rljax.training.board_players`), as
the search player (network + search, no Gumbel noise) and as the network alone (greedy
policy head), over the same games for every checkpoint of a seed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

import rljax.search as search
from rljax.training import board_players

EVAL_PLAYERS = ("search", "network")
EVAL_OPPONENTS = ("random", "depth2")
LOG_NAMES = ("loss", "policy_loss", "value_loss", "finished_fraction", "games_ended")


class BoardNetwork(nn.Module):
    """Policy-value MLP over a board observation: ``obs [..., H, W, C] -> (logits [..., A],
    value [...])``, ``value = tanh(.)`` in ``[-1, 1]`` from the mover's side. Kernels use
    flax's default LeCun-normal init (no orthogonal init: its vmapped QR can hang on a
    2-core CPU, DESIGN.md)."""

    num_actions: int
    hidden_size: int = 128
    num_layers: int = 2

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = obs.reshape(obs.shape[:-3] + (-1,)).astype(jnp.float32)
        for _ in range(self.num_layers):
            x = nn.relu(nn.Dense(self.hidden_size)(x))
        logits = nn.Dense(self.num_actions)(x)
        value = jnp.tanh(nn.Dense(1)(x)[..., 0])
        return logits, value


@dataclasses.dataclass(frozen=True)
class AlphaZeroConfig:
    """Static sizes and settings of one AlphaZero run (all compile-time constants).

    Attributes:
      iterations: self-play + training iterations; a multiple of ``eval_every``.
      num_games: ``N``, games played in parallel during self-play.
      window: ``T``, plies per self-play window (42 fills a Connect Four board).
      num_simulations: search simulations per move (self-play and evaluation).
      max_considered_actions: Gumbel MuZero's ``m`` at the root.
      replay_windows: windows kept in the replay (the current one included).
      updates: Adam steps per iteration.
      batch_size: positions per step.
      learning_rate: Adam's step size.
      weight_decay: AdamW's decoupled weight decay.
      hidden_size: width of the network's hidden layers.
      num_layers: hidden layers.
      eval_every: iterations between evaluations.
      eval_games: games per matchup (even: half with each colour).
    """

    iterations: int = 50
    num_games: int = 32
    window: int = 42
    num_simulations: int = 16
    max_considered_actions: int = 16
    replay_windows: int = 4
    updates: int = 16
    batch_size: int = 128
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4
    hidden_size: int = 128
    num_layers: int = 2
    eval_every: int = 5
    eval_games: int = 32

    @property
    def checkpoints(self) -> int:
        """Evaluations per run: before training and after every ``eval_every`` iterations."""
        return self.iterations // self.eval_every + 1

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first invalid field."""
        for name in ("iterations", "num_games", "window", "num_simulations",
                     "max_considered_actions", "replay_windows", "updates", "batch_size",
                     "hidden_size", "num_layers", "eval_every", "eval_games"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: must be an int >= 1, got {value!r}")
        if self.iterations % self.eval_every:
            raise ValueError(f"eval_every: must divide iterations = {self.iterations}, got "
                             f"{self.eval_every}")
        if self.eval_games % 2:
            raise ValueError(f"eval_games: must be even (half the games with each colour), "
                             f"got {self.eval_games}")
        for name in ("learning_rate", "weight_decay"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value >= 0 or value == float("inf"):
                raise ValueError(f"{name}: must be a finite number >= 0, got {value!r}")


def make_recurrent_fn(env: Any, apply_fn: Callable[..., tuple[jax.Array, jax.Array]]
                      ) -> search.RecurrentFn:
    """A ``recurrent_fn`` that plays the true game (AlphaZero's perfect model).

    ``embedding`` is a batch of pgx states ``[B]``. For ``action [B]``:
    ``s' = env.step(s, a)``; ``reward = s'.rewards[mover]`` (``+1`` for a winning move,
    ``-1`` for a losing one, ``0`` else); ``discount = -1`` while the game goes on (the next
    value is the opponent's) and ``0`` once it ends; ``prior_logits, value = net(s'.obs)``
    with ``value = 0`` at a finished game; ``invalid_actions = ~s'.legal_action_mask``;
    ``terminal = s'.terminated`` (nothing is expanded below a finished game).

    Args:
      env: a pgx two-player zero-sum environment.
      apply_fn: ``apply_fn(params, obs [B, ...]) -> (logits [B, A], value [B])``.

    Returns:
      ``recurrent_fn(params, key, action [B], state [B]) -> (RecurrentFnOutput, state)``.
    """

    def recurrent_fn(params, key, action, state):
        del key
        batch = action.shape[0]
        mover = state.current_player
        next_state = jax.vmap(env.step)(state, action.astype(jnp.int32))
        reward = next_state.rewards[jnp.arange(batch), mover]
        logits, value = apply_fn(params, next_state.observation)
        done = next_state.terminated
        output = search.RecurrentFnOutput(
            reward=reward,
            discount=jnp.where(done, 0.0, -1.0),
            prior_logits=logits,
            value=jnp.where(done, 0.0, value),
            invalid_actions=~next_state.legal_action_mask,
            terminal=done,
        )
        return output, next_state

    return recurrent_fn


def search_move(params: Any, key: jax.Array, state: Any, env: Any, apply_fn: Callable,
                num_simulations: int, max_considered_actions: int,
                gumbel_scale: float = 1.0) -> search.PolicyOutput:
    """Gumbel MuZero search from a batch of live pgx states ``[B]``.

    Args:
      params: network parameters.
      key: PRNG key.
      state: pgx states ``[B]`` (not terminated).
      env: the pgx environment.
      apply_fn: as for :func:`make_recurrent_fn`.
      num_simulations: simulations per search.
      max_considered_actions: ``m`` at the root.
      gumbel_scale: 1 in self-play (sampled moves), 0 for deterministic evaluation.

    Returns:
      ``rljax.search.PolicyOutput``: ``action [B]`` and ``action_weights [B, A]`` (the
      improved policy, zero on illegal actions).
    """
    logits, value = apply_fn(params, state.observation)
    root = search.RootFnOutput(prior_logits=logits, value=value, embedding=state)
    return search.gumbel_muzero_policy(
        params, key, root, make_recurrent_fn(env, apply_fn), num_simulations,
        invalid_actions=~state.legal_action_mask,
        max_num_considered_actions=max_considered_actions, gumbel_scale=gumbel_scale)


@chex.dataclass(frozen=True)
class Window:
    """One self-play window of ``T`` plies x ``N`` games (time-major).

    Attributes:
      observation: ``[T, N, H, W, C]`` the mover's view before the move.
      policy_target: ``[T, N, A]`` the search's ``action_weights``.
      reward: ``[T, N]`` reward to the mover of the move played.
      terminated: ``[T, N]`` bool, the move ended the game.
    """

    observation: jax.Array
    policy_target: jax.Array
    reward: jax.Array
    terminated: jax.Array


def self_play(params: Any, key: jax.Array, state: Any, env: Any, apply_fn: Callable,
              config: AlphaZeroConfig) -> tuple[Any, Window]:
    """``T = config.window`` plies of ``N`` parallel games (finished games restart).

    Args:
      params: network parameters.
      key: PRNG key.
      state: pgx states ``[N]``, live (not terminated).
      env: the pgx environment.
      apply_fn: as for :func:`make_recurrent_fn`.
      config: sizes.

    Returns:
      ``(state [N], Window)``: the games to continue from next time, and the data.
    """
    num_games = state.current_player.shape[0]

    def ply(state, ply_key):
        search_key, reset_key = jax.random.split(ply_key)
        out = search_move(params, search_key, state, env, apply_fn, config.num_simulations,
                          config.max_considered_actions)
        mover = state.current_player
        next_state = jax.vmap(env.step)(state, out.action)
        reward = next_state.rewards[jnp.arange(num_games), mover]
        done = next_state.terminated
        fresh = jax.vmap(env.init)(jax.random.split(reset_key, num_games))
        next_state = jax.tree_util.tree_map(
            lambda new, old: jnp.where(done.reshape((-1,) + (1,) * (old.ndim - 1)), new, old),
            fresh, next_state)
        data = Window(observation=state.observation, policy_target=out.action_weights,
                      reward=reward, terminated=done)
        return next_state, data

    return jax.lax.scan(ply, state, jax.random.split(key, config.window))


def value_targets(reward: jax.Array, terminated: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Game outcomes from the mover's side, and which positions have one.

    Backwards over time: ``z_t = r_t`` if the move at ``t`` ended the game, else
    ``z_t = r_t - z_{t+1}`` (two players alternate, zero-sum: discount ``-1``); a position
    is *finished* if its game ends at or after ``t`` inside the window,
    ``f_t = d_t or f_{t+1}``, with ``f_T = 0`` (Silver et al. 2017: ``z`` is the game's
    winner from the mover's side).

    Args:
      reward: ``[T, N]`` reward to the mover of ply ``t``.
      terminated: ``[T, N]`` bool, ply ``t`` ended its game.

    Returns:
      ``(z [T, N] float32, finished [T, N] bool)``; ``z`` is 0 where not finished.
    """
    chex.assert_rank([reward, terminated], 2)
    chex.assert_equal_shape([reward, terminated])

    def back(carry, inputs):
        z_next, finished_next = carry
        r, d = inputs
        z = jnp.where(d, r, r - z_next)
        finished = d | finished_next
        return (z, finished), (jnp.where(finished, z, 0.0), finished)

    init = (jnp.zeros(reward.shape[1], jnp.float32), jnp.zeros(reward.shape[1], bool))
    _, (z, finished) = jax.lax.scan(back, init, (reward.astype(jnp.float32), terminated),
                                    reverse=True)
    return z, finished


def alphazero_loss(params: Any, apply_fn: Callable, observation: jax.Array,
                   policy_target: jax.Array, value_target: jax.Array,
                   weight: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """``L = Σ_i w_i [ -Σ_a π_ia log p_θ(a|s_i) + (v_θ(s_i) - z_i)^2 ] / max(Σ_i w_i, 1)``.

    Args:
      params: network parameters.
      apply_fn: as for :func:`make_recurrent_fn`.
      observation: ``[M, H, W, C]``.
      policy_target: ``[M, A]`` (rows sum to 1).
      value_target: ``[M]`` in ``[-1, 1]``.
      weight: ``[M]`` 0/1 (finished positions).

    Returns:
      ``(loss, {"policy_loss", "value_loss"})``.
    """
    logits, value = apply_fn(params, observation)
    chex.assert_equal_shape([logits, policy_target])
    log_p = jax.nn.log_softmax(logits)
    policy_term = -jnp.sum(jnp.where(policy_target > 0, policy_target * log_p, 0.0), axis=-1)
    value_term = jnp.square(value - value_target)
    total = jnp.maximum(jnp.sum(weight), 1.0)
    policy_loss = jnp.sum(weight * policy_term) / total
    value_loss = jnp.sum(weight * value_term) / total
    return policy_loss + value_loss, {"policy_loss": policy_loss, "value_loss": value_loss}


def make_alphazero_train(env: Any, config: AlphaZeroConfig) -> Callable[[jax.Array], dict]:
    """One seed's AlphaZero run on ``env`` as a pure function of its key.

    Args:
      env: a pgx two-player zero-sum environment (e.g. ``pgx.make("connect_four")``).
      config: :class:`AlphaZeroConfig`.

    Returns:
      ``train(key) -> results`` with ``results``:

      * ``"score/{player}/{opponent}"``: ``[C]`` score (wins + draws / 2) at each of the
        ``C = config.checkpoints`` evaluations, ``player`` in ``("search", "network")``,
        ``opponent`` in ``("random", "depth2")``;
      * ``"wins/..."``, ``"draws/..."``: ``[C]`` fractions of the same games;
      * ``"loss"``, ``"policy_loss"``, ``"value_loss"``: ``[I]`` mean over each
        iteration's updates; ``"finished_fraction"``: ``[I]`` share of the window's
        positions with an outcome; ``"games_ended"``: ``[I]`` games finished in the window.
    """
    config.validate()
    net = BoardNetwork(env.num_actions, config.hidden_size, config.num_layers)
    apply_fn = net.apply
    optimizer = optax.adamw(config.learning_rate, weight_decay=config.weight_decay)
    num_actions = env.num_actions
    size = config.window * config.num_games
    capacity = config.replay_windows * size
    obs_shape = tuple(env.observation_shape)
    depth2 = board_players.depth2_player(env)

    def evaluate(params, key):
        # all matchups in one match of 4 x G games (one compiled search and depth-2 player):
        # block (i, j) of G games pits player i against opponent j; every block uses the
        # same game starts and noise (the key), so checkpoints and players are paired
        players = [_search_player(params, env, apply_fn, config),
                   board_players.greedy_player(
                       lambda state: apply_fn(params, state.observation)[0])]
        opponents = [board_players.random_player, depth2]
        games = config.eval_games
        blocks = [(i, j) for i in range(len(players)) for j in range(len(opponents))]
        player_of = jnp.repeat(jnp.array([i for i, _ in blocks]), games)
        opponent_of = jnp.repeat(jnp.array([j for _, j in blocks]), games)

        def agent(key, state):
            actions = jnp.stack([p(key, state) for p in players])
            return jnp.take_along_axis(actions, player_of[None], axis=0)[0]

        def opponent(key, state):
            actions = jnp.stack([p(key, state) for p in opponents])
            return jnp.take_along_axis(actions, opponent_of[None], axis=0)[0]

        match = board_players.play_match(key, env, agent, opponent, games,
                                         num_blocks=len(blocks))
        outcome = match.outcome.reshape(len(blocks), games)
        out = {}
        for b, (i, j) in enumerate(blocks):
            name = f"{EVAL_PLAYERS[i]}/{EVAL_OPPONENTS[j]}"
            out[f"score/{name}"] = jnp.mean((outcome[b] + 1.0) / 2.0)
            out[f"wins/{name}"] = jnp.mean(outcome[b] > 0)
            out[f"draws/{name}"] = jnp.mean(outcome[b] == 0)
        return out

    def iteration(carry, key):
        params, opt_state, games, replay, step = carry
        play_key, sample_key = jax.random.split(key)
        games, window = self_play(params, play_key, games, env, apply_fn, config)
        z, finished = value_targets(window.reward, window.terminated)
        slot = (step % config.replay_windows) * size
        new = {"observation": window.observation.reshape((size,) + obs_shape),
               "policy_target": window.policy_target.reshape(size, num_actions),
               "value_target": z.reshape(size),
               "weight": finished.reshape(size).astype(jnp.float32)}
        replay = {k: jax.lax.dynamic_update_slice_in_dim(replay[k], new[k], slot, axis=0)
                  for k in replay}

        def update(carry, update_key):
            params, opt_state = carry
            index_key, flip_key = jax.random.split(update_key)
            weight = replay["weight"]
            total = jnp.sum(weight)
            probs = jnp.where(total > 0, weight / jnp.maximum(total, 1.0), 1.0 / capacity)
            index = jax.random.choice(index_key, capacity, (config.batch_size,), p=probs)
            flip = jax.random.bernoulli(flip_key, 0.5, (config.batch_size,))
            obs = replay["observation"][index]
            obs = jnp.where(flip[:, None, None, None], obs[:, :, ::-1], obs)
            target = replay["policy_target"][index]
            target = jnp.where(flip[:, None], target[:, ::-1], target)
            (loss, aux), grads = jax.value_and_grad(alphazero_loss, has_aux=True)(
                params, apply_fn, obs, target, replay["value_target"][index],
                weight[index])
            updates, opt_state = optimizer.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
            return (params, opt_state), {"loss": loss, **aux}

        (params, opt_state), logs = jax.lax.scan(
            update, (params, opt_state), jax.random.split(sample_key, config.updates))
        logs = {k: jnp.mean(v) for k, v in logs.items()}
        logs["finished_fraction"] = jnp.mean(finished)
        logs["games_ended"] = jnp.sum(window.terminated).astype(jnp.float32)
        return (params, opt_state, games, replay, step + 1), logs

    def train(key: jax.Array) -> dict[str, jax.Array]:
        init_key, games_key, eval_key, loop_key = jax.random.split(key, 4)
        params = net.init(init_key, jnp.zeros(obs_shape, jnp.float32))
        opt_state = optimizer.init(params)
        games = jax.vmap(env.init)(jax.random.split(games_key, config.num_games))
        replay = {"observation": jnp.zeros((capacity,) + obs_shape, jnp.bool_),
                  "policy_target": jnp.zeros((capacity, num_actions), jnp.float32),
                  "value_target": jnp.zeros((capacity,), jnp.float32),
                  "weight": jnp.zeros((capacity,), jnp.float32)}
        blank = {k: jnp.zeros(config.eval_every, jnp.float32) for k in LOG_NAMES}
        last = config.checkpoints - 1

        def checkpoint(carry, inputs):
            # evaluate, then train a chunk (not after the last evaluation); the predicate is
            # the scan index, shared by all seeds, so under vmap it stays a real branch
            index, chunk_key = inputs
            evals = evaluate(carry[0], eval_key)

            def train_chunk(carry):
                return jax.lax.scan(iteration, carry,
                                    jax.random.split(chunk_key, config.eval_every))

            carry, logs = jax.lax.cond(index < last, train_chunk,
                                       lambda carry: (carry, blank), carry)
            return carry, (evals, logs)

        carry = (params, opt_state, games, replay, jnp.int32(0))
        chunk_keys = jax.random.split(loop_key, config.checkpoints)
        _, (evals, logs) = jax.lax.scan(
            checkpoint, carry, (jnp.arange(config.checkpoints), chunk_keys))
        results = dict(evals)
        results.update({k: v[:last].reshape(-1) for k, v in logs.items()})
        return results

    return train


def _search_player(params: Any, env: Any, apply_fn: Callable,
                   config: AlphaZeroConfig) -> board_players.Player:
    """Network + search, no Gumbel noise: the search's action (deterministic)."""

    def player(key, state):
        # a finished game's root has every action legal (pgx); search it anyway, unused
        return search_move(params, key, state, env, apply_fn, config.num_simulations,
                           config.max_considered_actions, gumbel_scale=0.0).action

    return player


def search_player(params: Any, env: Any, config: AlphaZeroConfig) -> board_players.Player:
    """The trained agent as a :data:`~rljax.training.board_players.Player`: the network
    of ``config``'s shape with ``params`` and Gumbel MuZero search without Gumbel noise
    (``config.num_simulations`` simulations)."""
    net = BoardNetwork(env.num_actions, config.hidden_size, config.num_layers)
    return _search_player(params, env, net.apply, config)
