# ---
# jupyter:
#   jupytext:
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # AlphaZero self-play on Connect Four, over seeds in one program
#
# This notebook trains a tiny AlphaZero agent on [pgx](https://github.com/sotetsuk/pgx)'s
# Connect Four and measures its win rate against two fixed players, with an interval over
# seeds. It is the `alphazero` study in miniature (`rljax run alphazero` runs the full
# one: 16 seeds x 50 iterations, about 90 s on a 2-core CPU).
#
# * **Search.** Every self-play move is chosen by `rljax.search.gumbel_muzero_policy`
#   (Danihelka et al. 2022; mctx's API) over the *true* game: the `recurrent_fn` steps pgx,
#   gives the mover reward +1 for a winning move, discount -1 between the alternating
#   players, and masks full columns at every node.
# * **Learning.** A small MLP is fitted to the search's improved policy (its
#   `action_weights`) and to the games' outcomes from the mover's side (Silver et al.
#   2017/2018), from a replay of recent positions.
# * **Seeds.** `train(key) -> results` is one pure function; `rljax.sweep.Sweep` vmaps it
#   over seeds, evaluation included, so the whole experiment is one compiled program.
# * **Opponents.** A uniformly random player and a depth-2 minimax player (takes a win in
#   one, else avoids moves that let the opponent win in one). Both colours are played
#   equally, so a player scores 1/2 against itself.

# %%
import jax
import numpy as np
import pgx

from rljax.stats.reported import reported_interval
from rljax.sweep import Sweep
from rljax.training.alphazero import AlphaZeroConfig, make_alphazero_train

env = pgx.make("connect_four")
config = AlphaZeroConfig(iterations=6, eval_every=3, num_games=16, window=42,
                         num_simulations=8, replay_windows=3, updates=8, batch_size=64,
                         hidden_size=32, num_layers=1, eval_games=16)
train = make_alphazero_train(env, config)

# %% [markdown]
# One program for 8 seeds: each seed plays 6 iterations of 16 games x 42 plies of
# self-play, and is evaluated before training and every 3 iterations.

# %%
result = Sweep(train, base_seed=0, block_size=8).run(8, desc="alphazero")
scores = {k: np.asarray(v) for k, v in result.outputs.items()}
print("outputs:", sorted(k for k in scores if k.startswith("score/")))
print("score per seed and checkpoint, search vs random:")
print(scores["score/search/random"].round(2))

# %% [markdown]
# The final score of each seed is one sample; the interval over seeds uses the method the
# interval-coverage study recommends at n = 8 and states its measured coverage.

# %%
key = jax.random.key(1)
for i, matchup in enumerate(["search/random", "search/depth2", "network/random",
                             "network/depth2"]):
    final = scores[f"score/{matchup}"][:, -1]
    r = reported_interval("mean", final, key=jax.random.fold_in(key, i), reps=2000)
    print(f"{matchup} final score = {r.point:.3f} [{r.low:.3f}, {r.high:.3f}]")
print("interval:", r.note)
claim = reported_interval("mean", scores["score/search/random"][:, -1], key=key, reps=2000)
print(f"search agent beats random (interval above 0.5): {bool(claim.low > 0.5)}")

# %% [markdown]
# Learning shows against the depth-2 player: an untrained network with search already
# beats the random player (search finds wins a few plies deep), but not depth-2 minimax.

# %%
curve = scores["score/search/depth2"].mean(axis=0)
steps = [c * config.eval_every for c in range(config.checkpoints)]
print("search vs depth-2, mean over seeds by iteration:",
      ", ".join(f"{s}: {v:.3f}" for s, v in zip(steps, curve, strict=True)))
print(f"compile {result.compile_seconds:.1f} s, run {result.run_seconds:.1f} s")
