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
# # MCTS on "solve for x"
#
# `rljax.search` has the call signature of DeepMind's `mctx` (`import rljax.search as
# mctx` works for `muzero_policy` and `gumbel_muzero_policy`), runs with `lax` loops
# inside `jit`, and adds what step-wise reasoning tasks need: invalid actions at interior
# nodes and terminal states.
#
# The task is `rljax.envs.EquationEnv`: an equation `a x + b = c x + d` with an integer
# solution; 60 moves (subtract a constant, subtract a multiple of x, divide by a common
# divisor, state the answer `d`). The search uses no training at all: a **flat prior**
# (`rljax.policies.uniform_prior`) and a **heuristic value** `1 - phi / 3`
# (`rljax.policies.heuristic_value`, with `phi` the number of terms still to remove),
# and it plans with the exact environment as its model.
#
# This notebook builds the search, measures accuracy against the number of simulations,
# and draws one search tree.

# %%
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import rljax
from rljax import search, stats
from rljax.envs import EquationEnv, EquationParams
from rljax.policies import heuristic_value, masked_logits, uniform_prior

MAX_STEPS = 8
env = EquationEnv()
env_params = EquationParams(max_steps=MAX_STEPS)
K = env.k  # operands in {-K..K}
DIVISORS = [q for q in range(-K, K + 1) if q not in (0, 1)]

def action_name(a):
    """Readable name of move `a` (see the EquationEnv docstring for the layout)."""
    a = int(a)
    if a < 2 * K:
        return f"{-int(env.operands[a]):+d}"            # add the constant -k
    if a < 4 * K:
        return f"{-int(env.operands[a - 2 * K]):+d}x"   # add the term -m x
    if a < env.answer_action:
        return f"/{DIVISORS[a - 4 * K]}"
    return "answer"

def equation_text(coeffs):
    a, b, c, d = (int(v) for v in coeffs)
    def side(m, k):
        x_term = {1: "x", -1: "-x"}.get(m, f"{m}x")
        terms = ([x_term] if m else []) + ([str(k)] if k or not m else [])
        return " + ".join(terms).replace("+ -", "- ")
    return f"{side(a, b)} = {side(c, d)}"


# %% [markdown]
# ## The model: `recurrent_fn` steps the environment
#
# As in mctx, a search needs a root (`RootFnOutput`: prior logits, value, embedding) and
# `recurrent_fn(params, key, action [B], embedding) -> (RecurrentFnOutput, embedding)`.
# The embedding here is the environment state itself. The rljax extensions used:
# `invalid_actions` (division only by a common divisor) at every node, and `terminal`
# (answered, or out of moves), below which nothing is expanded.

# %%
def recurrent_fn(params, key, action, state):
    step = jax.vmap(lambda s, a: env.step_env(key, s, a, env_params))
    obs, state, reward, terminated, truncated, _ = step(state, action)
    valid = jax.vmap(env.action_mask)(state)
    done = terminated | truncated
    out = search.RecurrentFnOutput(
        reward=reward, discount=jnp.where(done, 0.0, 1.0),
        prior_logits=masked_logits(uniform_prior(obs), valid),
        value=jnp.where(done, 0.0, heuristic_value(obs)),
        invalid_actions=~valid, terminal=done)
    return out, state

def root_fn(obs, state):
    valid = jax.vmap(env.action_mask)(state)
    root = search.RootFnOutput(prior_logits=masked_logits(uniform_prior(obs), valid),
                               value=heuristic_value(obs), embedding=state)
    return root, ~valid

def reset(key, levels):
    """A batch of problems, one per entry of `levels` (0 = easiest .. 3)."""
    keys = jax.random.split(key, levels.shape[0])
    return jax.vmap(lambda k, lv: env.reset(
        k, EquationParams(level=lv, max_steps=MAX_STEPS)))(keys, levels)


# %% [markdown]
# ## Solving with search, over seeds and budgets
#
# To solve a problem the agent runs one Gumbel MuZero search per move and plays the
# search's action, for at most 8 moves; it is right if it states the right answer. One
# seed of the sweep is a fresh set of 16 problems (4 per difficulty level) and fresh
# search randomness, solved at 4, 16 and 64 simulations per move; 8 seeds give 128
# problems per budget. The sweep also keeps the first search tree of one level-2
# problem, to look at below. Each budget is a separate compiled search (the number of
# simulations fixes the loop), and compiling them is most of this notebook's run time.

# %%
SIMULATIONS = (4, 16, 64)  # per move
PER_LEVEL, SEEDS = 4, 8
SHOW = 2 * PER_LEVEL       # the first level-2 problem: its first tree is kept

def solve(key, obs, state, num_simulations):
    """Play a batch of problems, one search per move.

    Returns correctness [B] and the first move's search tree of problem SHOW.
    """
    def move(carry, key):
        obs, state, done, correct = carry
        root, invalid = root_fn(obs, state)
        out = search.gumbel_muzero_policy(None, key, root, recurrent_fn, num_simulations,
                                          invalid_actions=invalid)
        step = jax.vmap(lambda s, a: env.step_env(key, s, a, env_params))
        obs_n, state_n, reward, terminated, truncated, _ = step(state, out.action)
        live = ~done
        correct = jnp.where(live & terminated, reward, correct)
        keep = lambda new, old: jnp.where(  # noqa: E731  (finished problems stay put)
            live.reshape(live.shape + (1,) * (new.ndim - 1)), new, old)
        shown = jax.tree_util.tree_map(lambda x: x[SHOW:SHOW + 1], out.search_tree)
        return (keep(obs_n, obs), jax.tree_util.tree_map(keep, state_n, state),
                done | terminated | truncated, correct), shown

    batch = obs.shape[0]
    carry = (obs, state, jnp.zeros(batch, bool), jnp.zeros(batch))
    (_, _, _, correct), trees = jax.lax.scan(move, carry,
                                             jax.random.split(key, MAX_STEPS))
    return correct, jax.tree_util.tree_map(lambda x: x[0], trees)

def train(key):  # "train" is the sweep's name for one seed's function
    key_problems, key_search = jax.random.split(key)
    obs, state = reset(key_problems, jnp.repeat(jnp.arange(4), PER_LEVEL))
    runs = [solve(jax.random.fold_in(key_search, i), obs, state, n)
            for i, n in enumerate(SIMULATIONS)]
    return {"correct": jnp.stack([c for c, _ in runs]), "tree": runs[-1][1]}

result = rljax.Sweep(train, base_seed=0, block_size=SEEDS).run(SEEDS, progress=False)
correct = result.outputs["correct"]  # [seeds, budgets, problems]
print(f"compile {result.compile_seconds:.1f} s, run {result.run_seconds:.2f} s")

# %% [markdown]
# ## One search tree
#
# The tree is a struct of `[B, num_nodes, ...]` arrays (mctx's `Tree` fields):
# `children_index` links nodes, `children_visits` and the Q-values are per edge, and
# `embeddings` holds each node's environment state. Here is the first search (64
# simulations) on one level-2 equation of seed 0: the root's visited children (visit
# counts and Q-values), and the whole tree drawn with plain matplotlib (each node
# labelled with its visit count, each edge with its move).

# %%
tree = jax.tree_util.tree_map(lambda x: x[0], result.outputs["tree"])  # seed 0, [1, N, ...]
summary = tree.summary()
visits, q = np.asarray(summary.visit_counts[0]), np.asarray(summary.qvalues[0])
print("equation:", equation_text(tree.embeddings.coeffs[0, 0]),
      "| solution x =", int(tree.embeddings.solution[0, 0]))
print("most visited first move:", action_name(np.argmax(visits)),
      "| root value", round(float(summary.value[0]), 3))

visited = np.flatnonzero(visits)
order = visited[np.argsort(-visits[visited], kind="stable")]
fig, (ax_bar, ax_tree) = plt.subplots(1, 2, figsize=(12, 4.2),
                                      gridspec_kw={"width_ratios": [1, 2]})
ax_bar.bar(range(len(order)), visits[order], color="tab:blue")
ax_bar.set_xticks(range(len(order)), [action_name(a) for a in order], rotation=90)
ax_bar.set_ylabel("root visits", color="tab:blue")
ax_q = ax_bar.twinx()
ax_q.plot(range(len(order)), q[order], "o", color="tab:red")
ax_q.set_ylabel("Q value", color="tab:red")
ax_bar.set_title("root children")

children = np.asarray(tree.children_index[0])
node_visits = np.asarray(tree.node_visits[0])

def layout(node, depth, x_next, pos):
    """Leaves left to right, parents centred over their children."""
    kids = [int(c) for c in children[node] if c >= 0]
    for kid in kids:
        x_next = layout(kid, depth + 1, x_next, pos)
    if kids:
        pos[node] = (np.mean([pos[k][0] for k in kids]), -depth)
    else:
        pos[node], x_next = (x_next, -depth), x_next + 1
    return x_next

pos = {}
layout(0, 0, 0, pos)
for node, (x, y) in pos.items():
    parent = int(tree.parents[0, node])
    if parent >= 0:
        px, py = pos[parent]
        ax_tree.plot([px, x], [py, y], color="grey", lw=0.8, zorder=1)
        if node_visits[node] > 1:  # name the moves the search came back to
            ax_tree.text(x, y + 0.3, action_name(tree.action_from_parent[0, node]),
                         fontsize=7, ha="center", va="bottom", color="dimgrey")
    terminal = bool(tree.terminal[0, node])
    ax_tree.scatter(x, y, s=60 + 10 * node_visits[node], zorder=2,
                    c="tab:green" if terminal else "tab:orange", edgecolors="k")
    ax_tree.text(x, y, str(node_visits[node]), fontsize=6, ha="center", va="center",
                 zorder=3)
ax_tree.set_axis_off()
ax_tree.set_title("search tree (node: visits; green: terminal; moves named where "
                  "visited more than once)")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Accuracy vs simulations
#
# Accuracy per budget with a 95 % bootstrap interval over seeds (each seed's accuracy is
# the mean over its 16 problems), and per difficulty level.

# %%
per_seed = correct.mean(axis=2)  # [seeds, budgets]
accuracy = [stats.interval_estimate(per_seed[:, [j]], "mean", key=jax.random.key(j))
            for j in range(len(SIMULATIONS))]
by_level = correct.reshape(SEEDS, len(SIMULATIONS), 4, PER_LEVEL).mean(axis=(0, 3))
for n, ci, levels in zip(SIMULATIONS, accuracy, by_level, strict=True):
    print(f"{n:3d} simulations/move ({n * MAX_STEPS:4d} per problem): accuracy "
          f"{ci.point:.3f} [{ci.low:.3f}, {ci.high:.3f}]; by level "
          + " / ".join(f"{v:.2f}" for v in levels))

fig, ax = plt.subplots(figsize=(6, 3.5))
ax.errorbar(SIMULATIONS, [c.point for c in accuracy],
            yerr=[[c.point - c.low for c in accuracy], [c.high - c.point for c in accuracy]],
            marker="o", capsize=4)
ax.set_xscale("log", base=2)
ax.set(xlabel="simulations per move", ylabel="accuracy (all levels)",
       title=f"Gumbel MuZero, flat prior: {SEEDS} seeds x {4 * PER_LEVEL} problems, 95 % CI")
plt.show()

# %% [markdown]
# ## Reading
#
# More search is not automatically better here. With 16 simulations per move and 16
# considered root actions, Gumbel MuZero gives each considered move one visit: a
# one-step lookahead on the heuristic value, which is a good greedy rule for this
# equation family. With 64 simulations the search also descends below the root's
# children, where the flat prior proposes moves that mostly undo progress. A node's Q
# is the *mean* of the values backed up through it, so the Q of a good first move sinks
# towards that of a useless one as its subtree fills with such moves: compare the
# Q-values of the most visited root children in the tree above. (We also saw fewer
# problems reach the solved form `x = d` at 64 simulations than at 16.) A trained
# policy prior changes the picture: the `rl-then-search` study
# (`rljax run rl-then-search`) fine-tunes the policy with GRPO first, and
# `rljax run test-time-search` compares MCTS with best-of-N, majority voting and
# verifier-guided beam search at equal compute.
