"""Write the tutorial notebooks of ``experiments/notebooks/`` from the sources below.

The notebooks are kept in git without outputs (execution counts null); this script is
their source of truth, so a change to a notebook is a change here followed by::

    python scripts/make_notebooks.py            # rewrite experiments/notebooks/*.ipynb
    python scripts/make_notebooks.py --check    # exit 1 if a notebook differs from here

Cell ids are fixed (``<notebook>-<index>``), so rewriting an unchanged notebook leaves the
file byte-for-byte the same. ``tests/test_notebooks.py`` executes every notebook.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "experiments" / "notebooks"


def md(text: str) -> tuple[str, str]:
    return ("markdown", textwrap.dedent(text).strip("\n"))


def code(text: str) -> tuple[str, str]:
    return ("code", textwrap.dedent(text).strip("\n"))


# --------------------------------------------------------------------------------------
# 01 quickstart: the ORM-vs-PRM sweep and its statistics
# --------------------------------------------------------------------------------------

QUICKSTART = [
    md("""
    # rljax quickstart: outcome vs process rewards over 1024 seeds

    This notebook re-runs the `orm-vs-prm` study in miniature and reads its statistics the
    way rljax's reports do. The claim under test: *"a process reward model (PRM) reaches
    50 % success in roughly half the episodes an outcome reward model (ORM) needs"*.

    * **Task.** `rljax.envs.ChainMDP`: 5 steps, at each step action 1 is correct; an
      episode succeeds when all 5 steps are correct (1/32 for the uniform start policy).
    * **Learner.** A tabular softmax policy trained by REINFORCE with an EMA baseline and
      plain SGD (learning rate 0.1). Under **ORM** every step is credited with the final
      outcome; under **PRM** each step is credited with its own correctness.
    * **Seeds.** 1024 per reward mode, 400 episodes each (the study's setting; the
      study itself uses 4096 seeds: `rljax run orm-vs-prm`).

    Everything runs on the CPU in a few seconds: the whole sweep is one compiled program.
    """),
    code("""
    import jax
    import jax.numpy as jnp
    import matplotlib.pyplot as plt
    import numpy as np

    import rljax
    from experiments.chain_training import make_chain_train  # the study's own train(key)
    from rljax import stats

    print("rljax", rljax.__version__, "| jax", jax.__version__, "|", jax.devices())
    """),
    md("""
    ## One seed is one pure function; a sweep is `jit(vmap(train))`

    `make_chain_train(mode=...)` returns `train(key) -> {"success": bool [episodes], ...}`:
    one seed's whole run (rollouts, REINFORCE updates, optimizer) as a `lax.scan`, built
    from the library's layers (`ChainMDP`, `tabular_softmax`, `reinforce`,
    `episode_rollout`). `rljax.Sweep` vmaps it over seeds in fixed blocks: seed `i` always
    gets the key `fold_in(key(base_seed), i)` and is computed inside a block of the same
    shape, so its result is bitwise the same whether you run 1024 seeds or 4096. Both
    modes use the same seed keys, so the comparison is paired.
    """),
    code("""
    SEEDS, EPISODES, BLOCK_SIZE = 1024, 400, 1024

    success = {}
    for mode in ("orm", "prm"):
        sweep = rljax.Sweep(make_chain_train(mode=mode, episodes=EPISODES),
                            base_seed=0, block_size=BLOCK_SIZE)
        result = sweep.run(SEEDS, progress=False)
        success[mode] = result.outputs["success"]  # bool [seeds, episodes]
        print(f"{mode.upper()}: outputs {success[mode].shape}, compile "
              f"{result.compile_seconds:.2f} s, training {result.run_seconds:.2f} s "
              f"({SEEDS * EPISODES / result.run_seconds:,.0f} episodes/s)")
    """),
    md("""
    ## Learning curves with 95 % bootstrap bands

    The success rate of a seed at episode `t` is its mean success over the trailing window
    of 30 episodes. `stats.sample_efficiency_curves` takes scores `[runs, tasks,
    checkpoints]` (rliable's layout; here one task) and returns the metric at every
    checkpoint with a pointwise 95 % percentile-bootstrap band, resampling whole runs, so
    each bootstrap replicate is a coherent set of learning curves.
    """),
    code("""
    WINDOW = 30

    def trailing_success_rate(success, window=WINDOW):
        \"\"\"[seeds, episodes] -> mean success over the last `window` episodes (fewer at the
        start: then the window holds whatever episodes exist).\"\"\"
        s = np.asarray(success, np.float64)
        total = np.cumsum(s, axis=1)
        total = np.concatenate([total[:, :window], total[:, window:] - total[:, :-window]], 1)
        return total / np.minimum(np.arange(1, s.shape[1] + 1), window)

    rates = {mode: trailing_success_rate(s) for mode, s in success.items()}
    checkpoints = np.arange(WINDOW - 1, EPISODES, 10)  # full windows only
    curves = stats.sample_efficiency_curves(
        {mode: r[:, None, checkpoints] for mode, r in rates.items()}, "mean",
        key=jax.random.key(1), reps=1000)

    fig, ax = plt.subplots(figsize=(7, 3.8))
    for mode, curve in curves.items():
        ax.plot(checkpoints + 1, curve.point, label=mode.upper())
        ax.fill_between(checkpoints + 1, curve.low, curve.high, alpha=0.3)
    ax.axhline(0.5, color="grey", lw=0.8, ls="--")
    ax.set(xlabel="episode", ylabel=f"success rate (last {WINDOW} episodes)",
           title=f"mean over {SEEDS} seeds, 95 % bootstrap bands")
    ax.legend()
    plt.show()
    """),
    md("""
    The bands are thin: with 1024 seeds the uncertainty of the *mean curve* is small. The
    interesting spread is between seeds, which the next statistics look at.

    ## Episodes to 50 % success: IQM with 95 % intervals

    For each seed, the first episode whose (full, 30-episode) trailing success rate reaches
    50 %. A seed that never gets there within 400 episodes is *censored*; we give it the
    value 401. The **interquartile mean** (IQM: the mean of the middle 50 % of seeds,
    Agarwal et al. 2021) ignores the top and bottom quarters, so as long as fewer than
    25 % of seeds are censored the made-up value 401 cannot move it. The interval comes
    from the stratified bootstrap in `stats.interval_estimates`; the ratio ORM / PRM gets
    a *paired* bootstrap (`stats.bootstrap_ci(..., paired=True)`, the same seeds
    resampled on both sides, since both modes ran on the same keys).
    """),
    code("""
    THRESHOLD = 0.5

    def episodes_to_threshold(rate, threshold=THRESHOLD, window=WINDOW):
        \"\"\"First episode (1-based) with a full window at >= threshold; inf if never.\"\"\"
        hit = rate >= threshold
        hit[:, : window - 1] = False
        first = np.argmax(hit, axis=1) + 1.0
        first[~hit.any(axis=1)] = np.inf
        return first

    ep50 = {mode: episodes_to_threshold(r) for mode, r in rates.items()}
    never = {mode: float(np.mean(np.isinf(e))) for mode, e in ep50.items()}
    assert max(never.values()) < 0.25, "too many censored seeds for the IQM to ignore them"
    censored = {mode: np.minimum(e, EPISODES + 1)[:, None] for mode, e in ep50.items()}

    iqm = stats.interval_estimates(censored, "iqm", key=jax.random.key(2), reps=2000)
    for mode, ci in iqm.items():
        print(f"{mode.upper()}: IQM episodes to 50 % = {ci.point:.1f} "
              f"[{ci.low:.1f}, {ci.high:.1f}]; never reached: {never[mode]:.1%}")

    def iqm_ratio(a, b):
        def iqm_1d(x):
            n = x.shape[0]
            return jnp.mean(jnp.sort(x)[n // 4: n - n // 4])
        return iqm_1d(a) / iqm_1d(b)

    ratio = stats.bootstrap_ci(iqm_ratio, censored["orm"][:, 0], censored["prm"][:, 0],
                               key=jax.random.key(3), reps=2000, paired=True)
    print(f"ORM / PRM ratio of IQMs = {ratio.point:.2f} [{ratio.low:.2f}, {ratio.high:.2f}]")
    """),
    md("""
    ## Probability of improvement

    The probability that a randomly drawn PRM seed does better than a randomly drawn ORM
    seed (ties count one half), with a bootstrap interval. For episodes to 50 % "better"
    means *fewer*, so we pass the negated counts. We also compare the final success rate
    (mean over the last 30 episodes).
    """),
    code("""
    poi_speed = stats.probability_of_improvement_ci(
        -censored["prm"], -censored["orm"], key=jax.random.key(4), reps=2000)
    final = {mode: s[:, -WINDOW:].mean(axis=1, keepdims=True) for mode, s in success.items()}
    poi_final = stats.probability_of_improvement_ci(
        final["prm"], final["orm"], key=jax.random.key(5), reps=2000)
    final_iqm = stats.interval_estimates(final, "iqm", key=jax.random.key(6), reps=2000)

    print(f"P(PRM reaches 50 % sooner than ORM) = {poi_speed.point:.3f} "
          f"[{poi_speed.low:.3f}, {poi_speed.high:.3f}]")
    print(f"  slowest PRM seed: {np.max(censored['prm']):.0f} episodes; "
          f"fastest ORM seed: {np.min(censored['orm']):.0f}")
    print(f"P(PRM final success > ORM final success) = {poi_final.point:.3f} "
          f"[{poi_final.low:.3f}, {poi_final.high:.3f}]")
    for mode, ci in final_iqm.items():
        print(f"{mode.upper()}: IQM final success rate = {ci.point:.3f} "
              f"[{ci.low:.3f}, {ci.high:.3f}]")
    """),
    md("""
    ## Reading

    PRM needs far fewer episodes than ORM, and the gap is not a matter of a few lucky
    seeds: the probability of improvement is (close to) 1. The claim's *direction* holds,
    but "roughly half" understates it: the ratio is nearer 4 than 2 on this chain (the
    study's 4096-seed run reports a ratio of medians of 3.70 [3.69, 3.75]).

    Where to go next: `rljax run orm-vs-prm` writes the full report (medians of the
    censored distribution, the "as written" window variant, plots) to
    `results/orm-vs-prm/`; `02_custom_advantage.ipynb` shows how to plug a new advantage
    estimator into GRPO and decide whether it helps.
    """),
    code("""
    print(f"summary: IQM episodes to 50 %: ORM {iqm['orm'].point:.1f} vs PRM "
          f"{iqm['prm'].point:.1f}; ratio {ratio.point:.2f} [{ratio.low:.2f}, {ratio.high:.2f}]; "
          f"P(PRM sooner) {poi_speed.point:.3f}")
    print(f"PRM reaches 50 % faster: {bool(ratio.low > 1.0)}")
    """),
]


# --------------------------------------------------------------------------------------
# 02 custom advantage estimator
# --------------------------------------------------------------------------------------

CUSTOM_ADVANTAGE = [
    md("""
    # A new advantage estimator in ten lines, and how to decide if it helps

    `rljax.grpo` is a factory (like `optax.adam`): its hyperparameters and its advantage
    estimator are arguments. `advantage=` takes a name (`"group_relative"` for GRPO,
    `"group_mean"` for Dr. GRPO, `"leave_one_out"` for RLOO) **or any function
    `rewards [P, G] -> advantages [P, G]`** (P prompts, G sampled answers per prompt). So
    trying an idea is: write the function, pass it in, sweep seeds, read the statistics.

    Here the idea is a **rank-based group advantage**, then a head-to-head against GRPO and
    RLOO on a small bandit, decided with IQM, probability of improvement and a power
    analysis.
    """),
    code("""
    import jax
    import jax.numpy as jnp
    import matplotlib.pyplot as plt
    import numpy as np
    import optax

    import rljax
    from rljax import stats
    from rljax.policies import categorical_log_prob, sample_categorical
    """),
    md("""
    ## The estimator

    Within each group, replace every reward by its centred rank, scaled to [-1, 1]:

    $$A_i = \\frac{\\operatorname{rank}_i - (G-1)/2}{(G-1)/2}, \\qquad
    \\operatorname{rank}_i = \\#\\{j: r_j < r_i\\}
      + \\tfrac12\\left(\\#\\{j: r_j = r_i\\} - 1\\right)$$

    Ties share their mean rank, so a group whose rewards are all equal gets all-zero
    advantages (no signal, as in GRPO). Ranks are invariant to any increasing transform of
    the reward and bounded, so a single outlier reward cannot dominate an update (the
    idea behind rank-based fitness shaping in evolution strategies); the price is that the
    *size* of a reward gap is thrown away.
    """),
    code("""
    def rank_advantages(rewards):
        \"\"\"Centred within-group ranks in [-1, 1]; tied rewards share their mean rank.

        rewards: [P, G] (any leading axes; the group is the last axis) -> [P, G].
        \"\"\"
        r_i, r_j = rewards[..., :, None], rewards[..., None, :]
        rank = jnp.sum(r_j < r_i, axis=-1) + 0.5 * (jnp.sum(r_j == r_i, axis=-1) - 1)
        half = (rewards.shape[-1] - 1) / 2
        return (rank - half) / half

    examples = jnp.array([[1.0, 0.0, 0.0, 1.0],     # binary rewards
                          [0.1, 0.5, 0.2, 0.9],     # graded rewards
                          [0.1, 0.5, 0.2, 90.0],    # one outlier
                          [0.3, 0.3, 0.3, 0.3]])    # no signal
    np.set_printoptions(precision=3, suppress=True)
    print("rewards\\n", np.asarray(examples))
    print("rank (ours)\\n", np.asarray(rank_advantages(examples)))
    print("GRPO (group_relative)\\n", np.asarray(rljax.group_relative_advantages(examples)))
    print("RLOO (leave_one_out)\\n", np.asarray(rljax.leave_one_out_advantages(examples)))
    """),
    md("""
    ## The toy: a graded 8-answer bandit over 16 prompts

    Each seed draws its own task: 16 prompts with 8 answers each, answer qualities
    uniform in [0, 1] (the reward of an answer is its quality). A tabular softmax policy
    starts uniform; every step samples a group of G = 8 answers for every prompt and
    applies one GRPO update (`rljax.grpo`, clip 0.2, no KL) with Adam at learning rate
    0.1 for 30 steps.

    Why Adam: the three estimators give advantages of different overall *scale* (RLOO's
    are in reward units, GRPO's have unit standard deviation, ranks lie in [-1, 1]). With
    plain SGD the comparison would mostly be a comparison of effective learning rates;
    Adam normalises each parameter's step, so what remains is the *shape* of the
    advantages.

    The score of a policy is the fraction of the possible improvement it has realised,
    averaged over prompts: $(\\mathbb{E}_\\pi[r] - \\bar r) / (\\max r - \\bar r)$, 0 for
    the uniform policy and 1 for always picking the best answer.
    """),
    code("""
    PROMPTS, ANSWERS, GROUP, STEPS, LEARNING_RATE = 16, 8, 8, 30, 0.1
    policy = rljax.tabular_softmax(PROMPTS, ANSWERS)

    def make_train(advantage):
        rl = rljax.grpo(policy.apply, group_size=GROUP, advantage=advantage, kl_beta=0.0)
        optimizer = optax.adam(LEARNING_RATE)
        obs = jnp.broadcast_to(jnp.arange(PROMPTS)[:, None, None], (PROMPTS, GROUP, 1))

        def train(key):
            key_task, key_run = jax.random.split(key)
            quality = jax.random.uniform(key_task, (PROMPTS, ANSWERS))
            params = policy.init(key_task, None)

            def score(params):
                expected = jnp.sum(jax.nn.softmax(params["logits"]) * quality, axis=-1)
                gain = (expected - quality.mean(-1)) / (quality.max(-1) - quality.mean(-1))
                return jnp.mean(gain)

            def step(carry, key):
                params, opt_state = carry
                logits = policy.apply(params, obs)              # [P, G, 1, K]
                answers = sample_categorical(key, logits)       # [P, G, 1]
                log_probs = categorical_log_prob(logits, answers)
                batch = rljax.GroupBatch(
                    obs=obs, actions=answers, mask=jnp.ones_like(log_probs),
                    rewards=jnp.take_along_axis(quality, answers[..., 0], axis=1),  # [P, G]
                    old_log_probs=log_probs, ref_log_probs=log_probs)
                grads, _, _ = rl.update(params, (), batch)
                updates, opt_state = optimizer.update(grads, opt_state, params)
                params = optax.apply_updates(params, updates)
                return (params, opt_state), score(params)

            _, curve = jax.lax.scan(step, (params, optimizer.init(params)),
                                    jax.random.split(key_run, STEPS))
            return {"score": curve}  # [STEPS]

        return train
    """),
    md("""
    ## Sweep: 512 seeds per estimator

    The three sweeps share `base_seed`, so seed `i` draws the same task and starts from the
    same key under every estimator. The only change between them is one argument.
    """),
    code("""
    SEEDS = 512
    ESTIMATORS = {"rank (ours)": rank_advantages, "GRPO": "group_relative",
                  "RLOO": "leave_one_out"}

    scores = {}
    for name, advantage in ESTIMATORS.items():
        result = rljax.Sweep(make_train(advantage), base_seed=0, block_size=SEEDS).run(
            SEEDS, progress=False)
        scores[name] = result.outputs["score"]  # [seeds, steps]
        print(f"{name:12s} compile {result.compile_seconds:.1f} s, "
              f"run {result.run_seconds:.2f} s")

    curves = stats.sample_efficiency_curves(
        {name: s[:, None, :] for name, s in scores.items()}, "mean",
        key=jax.random.key(1), reps=500)
    fig, ax = plt.subplots(figsize=(7, 3.8))
    steps = np.arange(1, STEPS + 1)
    for name, curve in curves.items():
        ax.plot(steps, curve.point, label=name)
        ax.fill_between(steps, curve.low, curve.high, alpha=0.3)
    ax.set(xlabel="GRPO step", ylabel="fraction of possible improvement",
           title=f"mean over {SEEDS} seeds, 95 % bootstrap bands")
    ax.legend()
    plt.show()
    """),
    md("""
    ## Deciding

    The decision rule, fixed before looking: compare the final score of the rank estimator
    with the better of the two baselines.

    * **adopt** if the probability of improvement P(rank > baseline) has its whole 95 %
      interval above 0.5;
    * **reject** if the whole interval is below 0.5;
    * otherwise **inconclusive**.

    Beside it: the IQM of each estimator with its interval, the paired mean difference
    (same seeds, same tasks), and a power analysis: how many seeds a Welch test needs to
    detect the observed difference with 80 % power at α = 0.05 (`stats.welch_seeds`,
    which assumes normal scores), checked by simulation: draw that many seeds with
    replacement from the observed ones, test, repeat (`stats.simulated_power`;
    `stats.simulated_seeds` scans a grid of seed counts the same way). A tiny difference
    that needs tens of thousands of seeds is not worth acting on even if it is real.
    """),
    code("""
    final = {name: s[:, -1:] for name, s in scores.items()}  # [seeds, 1]
    iqm = stats.interval_estimates(final, "iqm", key=jax.random.key(2), reps=2000)
    for name, ci in iqm.items():
        print(f"{name:12s} IQM final score {ci.point:.4f} [{ci.low:.4f}, {ci.high:.4f}]")

    baseline = max(("GRPO", "RLOO"), key=lambda name: iqm[name].point)
    ours, theirs = final["rank (ours)"][:, 0], final[baseline][:, 0]
    poi = stats.probability_of_improvement_ci(ours, theirs, key=jax.random.key(3), reps=2000)
    diff = stats.bootstrap_ci(lambda a, b: jnp.mean(a - b), ours, theirs,
                              key=jax.random.key(4), reps=2000, paired=True)
    welch = stats.welch_ttest(ours, theirs)
    print(f"\\nP(rank > {baseline}) = {poi.point:.3f} [{poi.low:.3f}, {poi.high:.3f}]")
    print(f"paired mean difference = {diff.point:+.4f} [{diff.low:+.4f}, {diff.high:+.4f}]; "
          f"Welch p = {welch.pvalue:.3g}")
    """),
    code("""
    delta = float(ours.mean() - theirs.mean())
    sd_ours, sd_theirs = float(ours.std(ddof=1)), float(theirs.std(ddof=1))
    analytic = stats.welch_seeds(delta, sd_ours, sd_y=sd_theirs, power=0.8)
    print(f"observed difference {delta:+.4f} (per-seed sd {sd_ours:.4f} / {sd_theirs:.4f})")
    print(f"seeds per estimator for 80 % power (Welch, normal scores): {analytic}")
    if analytic <= 4096:  # check the normal approximation by resampling these seeds
        simulated = stats.simulated_power(ours, theirs, n=analytic, key=jax.random.key(5),
                                          sims=1000)
        print(f"power at {analytic} seeds, simulated from the observed scores: {simulated:.2f}")

    if poi.low > 0.5:
        decision = f"adopt: rank beats {baseline}"
    elif poi.high < 0.5:
        decision = f"reject: {baseline} beats rank"
    else:
        decision = f"inconclusive at {SEEDS} seeds (about {analytic} needed for 80 % power)"
    print(f"\\ndecision: {decision}")
    """),
    md("""
    ## Reading

    On this toy all three learn quickly and the differences are small. RLOO, whose
    advantages are raw reward differences, is slowest here, plausibly because the gaps
    between the answers an improving policy still samples shrink while Adam's running
    scale still remembers the larger early gaps. In our run the rank estimator came out
    slightly ahead of GRPO: a clear but small effect (well under one percent of the
    possible improvement) that 512 seeds resolve and a sweep of a handful of seeds would
    usually miss. The power analysis says how many seeds a difference of this size needs:
    read it before planning a bigger sweep. To try your own
    estimator, change `rank_advantages` (keep the `[P, G] -> [P, G]` signature) and rerun.
    A harder test would use a shared-parameter policy (the LM of `04_lm_grpo.ipynb`,
    whose trainer takes `advantage=` by name) where per-prompt scales do interact.
    """),
]


# --------------------------------------------------------------------------------------
# 03 search
# --------------------------------------------------------------------------------------

SEARCH = [
    md("""
    # MCTS on "solve for x"

    `rljax.search` has the call signature of DeepMind's `mctx` (`import rljax.search as
    mctx` works for `muzero_policy` and `gumbel_muzero_policy`), runs with `lax` loops
    inside `jit`, and adds what step-wise reasoning tasks need: invalid actions at interior
    nodes and terminal states.

    The task is `rljax.envs.EquationEnv`: an equation `a x + b = c x + d` with an integer
    solution; 60 moves (subtract a constant, subtract a multiple of x, divide by a common
    divisor, state the answer `d`). The search uses no training at all: a **flat prior**
    (`rljax.policies.uniform_prior`) and a **heuristic value** `1 - phi / 3`
    (`rljax.policies.heuristic_value`, with `phi` the number of terms still to remove),
    and it plans with the exact environment as its model.

    This notebook builds the search, measures accuracy against the number of simulations,
    and draws one search tree.
    """),
    code("""
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
        \"\"\"Readable name of move `a` (see the EquationEnv docstring for the layout).\"\"\"
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
    """),
    md("""
    ## The model: `recurrent_fn` steps the environment

    As in mctx, a search needs a root (`RootFnOutput`: prior logits, value, embedding) and
    `recurrent_fn(params, key, action [B], embedding) -> (RecurrentFnOutput, embedding)`.
    The embedding here is the environment state itself. The rljax extensions used:
    `invalid_actions` (division only by a common divisor) at every node, and `terminal`
    (answered, or out of moves), below which nothing is expanded.
    """),
    code("""
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
        \"\"\"A batch of problems, one per entry of `levels` (0 = easiest .. 3).\"\"\"
        keys = jax.random.split(key, levels.shape[0])
        return jax.vmap(lambda k, lv: env.reset(
            k, EquationParams(level=lv, max_steps=MAX_STEPS)))(keys, levels)
    """),
    md("""
    ## Solving with search, over seeds and budgets

    To solve a problem the agent runs one Gumbel MuZero search per move and plays the
    search's action, for at most 8 moves; it is right if it states the right answer. One
    seed of the sweep is a fresh set of 16 problems (4 per difficulty level) and fresh
    search randomness, solved at 4, 16 and 64 simulations per move; 8 seeds give 128
    problems per budget. The sweep also keeps the first search tree of one level-2
    problem, to look at below. Each budget is a separate compiled search (the number of
    simulations fixes the loop), and compiling them is most of this notebook's run time.
    """),
    code("""
    SIMULATIONS = (4, 16, 64)  # per move
    PER_LEVEL, SEEDS = 4, 8
    SHOW = 2 * PER_LEVEL       # the first level-2 problem: its first tree is kept

    def solve(key, obs, state, num_simulations):
        \"\"\"Play a batch of problems, one search per move.

        Returns correctness [B] and the first move's search tree of problem SHOW.
        \"\"\"
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
    """),
    md("""
    ## One search tree

    The tree is a struct of `[B, num_nodes, ...]` arrays (mctx's `Tree` fields):
    `children_index` links nodes, `children_visits` and the Q-values are per edge, and
    `embeddings` holds each node's environment state. Here is the first search (64
    simulations) on one level-2 equation of seed 0: the root's visited children (visit
    counts and Q-values), and the whole tree drawn with plain matplotlib (each node
    labelled with its visit count, each edge with its move).
    """),
    code("""
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
        \"\"\"Leaves left to right, parents centred over their children.\"\"\"
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
    """),
    md("""
    ## Accuracy vs simulations

    Accuracy per budget with a 95 % bootstrap interval over seeds (each seed's accuracy is
    the mean over its 16 problems), and per difficulty level.
    """),
    code("""
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
    """),
    md("""
    ## Reading

    More search is not automatically better here. With 16 simulations per move and 16
    considered root actions, Gumbel MuZero gives each considered move one visit: a
    one-step lookahead on the heuristic value, which is a good greedy rule for this
    equation family. With 64 simulations the search also descends below the root's
    children, where the flat prior proposes moves that mostly undo progress. A node's Q
    is the *mean* of the values backed up through it, so the Q of a good first move sinks
    towards that of a useless one as its subtree fills with such moves: compare the
    Q-values of the most visited root children in the tree above. (We also saw fewer
    problems reach the solved form `x = d` at 64 simulations than at 16.) A trained
    policy prior changes the picture: the `rl-then-search` study
    (`rljax run rl-then-search`) fine-tunes the policy with GRPO first, and
    `rljax run test-time-search` compares MCTS with best-of-N, majority voting and
    verifier-guided beam search at equal compute.
    """),
]


# --------------------------------------------------------------------------------------
# 04 LM + GRPO
# --------------------------------------------------------------------------------------

LM_GRPO = [
    md("""
    # A tiny language model learns addition with GRPO

    The same GRPO transform used on bandits trains a language model: `rljax.TinyLM` (a
    flax decoder-only transformer with a KV cache) on `rljax.ArithmeticTask`, whose
    rewards are programs (is the completion a well-formed integer? is it the right one?)
    so no reward model is involved. The trainer in `rljax.training.lm`
    splits one seed's run into `init` (initialise, supervised warm-up, evaluate),
    `advance` (a chunk of GRPO steps, then an evaluation) and `finish`: the pieces
    `rljax.ChunkedSweep` vmaps over seeds and checkpoints. Here we vmap them ourselves.

    **Held out means disjoint.** The task assigns every problem, once and for all, to a
    training or an evaluation split by a fixed hash of the problem; training draws only
    training problems and the evaluation set is drawn from the other side. One-digit
    addition (`"3+4="` -> `"7"`) has only 100 problems, too few for the library to split
    by default (`min_split_problems=1000`: its evaluation would otherwise be *training*
    accuracy); to keep this notebook fast *and* honest we split it anyway
    (`min_split_problems=100`, the default `eval_fraction=0.2`): 85 problems to train on,
    15 never seen in training to evaluate on.

    To run in seconds, everything is tiny: one transformer layer of width 32, a 50-step
    warm-up and 50 GRPO steps of 16 prompts x 8 completions, 5 seeds in one vmapped
    program. XLA compilation of the trainer's two programs (`init` and `advance`) takes
    most of this notebook's time.
    """),
    code("""
    import jax
    import matplotlib.pyplot as plt
    import numpy as np

    import rljax
    from rljax.stats.reported import reported_interval
    from rljax.training.lm import LMTrainConfig, make_lm_trainer

    config = LMTrainConfig(
        levels=(0,),                          # one-digit addition: 100 distinct problems
        min_split_problems=100,               # split it anyway: 85 train / 15 held out
        width=32, num_layers=1, num_heads=2,  # the study uses width 64, 2 layers, 4 heads
        sft_steps=50, sft_batch=64,           # a short supervised warm-up on correct answers
        rl_steps=50, steps_per_chunk=25,      # GRPO: 2 chunks of 25 steps
        prompts_per_step=16, group_size=8,    # 16 prompts x 8 sampled completions per step
        learning_rate=1e-3, advantage="group_relative", kl_beta=0.0,
        eval_prompts=100)                     # 100 i.i.d. draws from the held-out side
    trainer = make_lm_trainer(config)
    task = trainer.task
    print(f"split of level 0: {task.split_size(0, 'train')} training problems, "
          f"{task.split_size(0, 'eval')} held out; evaluation prompts held out: "
          f"{bool(np.all(trainer.eval_held_out()))}")
    num_params = sum(x.size for x in jax.tree_util.tree_leaves(
        jax.eval_shape(trainer.policy.init, jax.random.key(0))))
    print(f"TinyLM: {num_params:,} parameters, context {config.lm_config().context_length} "
          f"tokens; {config.num_chunks} chunks x {config.steps_per_chunk} GRPO steps")
    """),
    md("""
    ## Before GRPO: after the warm-up

    `trainer.init(key)` initialises the model, runs the supervised warm-up (cross-entropy on
    correct solutions of *training* problems) and evaluates greedy decoding on the
    evaluation set: 100 draws from the 15 held-out problems, the same for every seed, each
    prompt's correctness kept. We look at a few greedy completions on held-out problems,
    decoded with `rljax.CharTokenizer`.
    """),
    code("""
    SEEDS = 5
    init, advance = jax.jit(jax.vmap(trainer.init)), jax.jit(jax.vmap(trainer.advance))
    tokenizer = rljax.CharTokenizer()
    show = task.sample(jax.random.key(123), 8, split="eval")

    @jax.jit
    def greedy(params):
        return trainer.policy.generate(params, show.prompt, show.prompt_mask,
                                       jax.random.key(0), max_new_tokens=config.max_new_tokens,
                                       temperature=0.0).tokens

    def print_completions(params, label):
        texts = tokenizer.decode_batch(np.asarray(greedy(params)))
        rows = [f"{tokenizer.decode(p)}{t or '(empty)'}{' ok' if t == str(int(a)) else ''}"
                for p, t, a in zip(np.asarray(show.prompt), texts, np.asarray(show.answer),
                                   strict=True)]
        print(f"{label}: " + "   ".join(rows))

    def seed(tree, i):
        return jax.tree_util.tree_map(lambda x: x[i], tree)

    state = init(jax.random.split(jax.random.key(0), SEEDS))
    print_completions(seed(state.params, 0), "seed 0 before GRPO")
    print("held-out greedy accuracy after warm-up, per seed:",
          np.round(np.asarray(state.start_accuracy), 2))
    """),
    md("""
    ## GRPO

    Each step samples 16 training prompts and 8 completions of each (temperature 1),
    scores them with the accuracy program (1 for the right integer, else 0), turns the
    rewards of each group into GRPO advantages `(r - mean) / std` and applies the clipped
    policy-gradient loss with Adam. A group where all 8 completions are equally right or
    wrong carries no signal. After each chunk of 25 steps the trainer evaluates greedy
    decoding on the held-out prompts.
    """),
    code("""
    held_out, sampled = [np.asarray(state.start_accuracy)], []
    for _ in range(config.num_chunks):
        state, logs = advance(state)
        held_out.append(np.asarray(logs["eval_accuracy"]))
        sampled.append(np.asarray(logs["accuracy"]))
    held_out = np.stack(held_out, axis=1)       # [seeds, chunks + 1]
    sampled = np.concatenate(sampled, axis=1)   # [seeds, steps]
    print_completions(seed(state.params, 0), "seed 0 after GRPO ")

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.5))
    window = 10
    smooth = np.array([np.convolve(s, np.ones(window) / window, "valid") for s in sampled])
    ax1.plot(np.arange(window, config.rl_steps + 1), smooth.T, lw=0.8)
    ax1.set(xlabel="GRPO step", ylabel="accuracy of sampled completions",
            title=f"training batches ({window}-step mean), one line per seed")
    ax2.plot(np.arange(config.num_chunks + 1) * config.steps_per_chunk, held_out.T, marker="o")
    ax2.set(xlabel="GRPO step", ylabel="held-out greedy accuracy", title="evaluation")
    plt.tight_layout()
    plt.show()
    """),
    md("""
    ## Before and after, with an interval that includes the prompts' error

    The evaluation set is one sample of prompts, and its own sampling error is as real
    as the seeds': with 100 prompts an accuracy near 0.3 has a standard error near 0.05
    from the prompts alone. So we keep every (seed, prompt) correctness and use the
    *two-way* interval of `rljax.stats.reported.reported_interval("two_way_mean", ...)`,
    which resamples seeds and prompts; the gain is the two-way interval of the (after -
    before) matrix on the same prompts and seeds. The interval's `note` states the
    method and its measured coverage (from `rljax run interval-coverage`) at this number
    of seeds; five seeds are few, and the note says so when no method reaches 0.93.
    """),
    code("""
    before = np.asarray(state.start_correct)    # [seeds, prompts], 0/1
    after = np.asarray(state.eval_correct)
    gain = reported_interval("two_way_mean", after - before, key=jax.random.key(1), reps=2000)
    first, last = sampled[:, :20].mean(axis=1), sampled[:, -20:].mean(axis=1)
    print("held-out greedy accuracy per seed: before", np.round(before.mean(axis=1), 2),
          "after", np.round(after.mean(axis=1), 2))
    print(f"held-out greedy accuracy: {before.mean():.3f} -> {after.mean():.3f}, "
          f"gain {gain.point:+.3f} [{gain.low:+.3f}, {gain.high:+.3f}] "
          f"({SEEDS} seeds x {before.shape[1]} prompts)")
    print(f"interval: {gain.note}")
    print(f"sampled-completion accuracy on training prompts (first vs last 20 steps): "
          f"{first.mean():.3f} -> {last.mean():.3f}")
    """),
    md("""
    ## What the full study measures

    At this size the numbers are noisy: 15 held-out problems, five seeds, and a short
    warm-up that leaves the model weak enough that GRPO has a lot of room.
    `rljax run lm-grpo` uses a width-64, 2-layer model on one-digit addition *and*
    two-digit addition/subtraction, a 150-step warm-up, 200 GRPO steps and 8 seeds in one
    vmapped program per arm. Two-digit addition/subtraction (20 000 problems) is split
    with the default settings, so its evaluation prompts are held out; one-digit addition
    is not split there and its accuracy is reported as *training* accuracy. It reports
    both with two-way intervals; GRPO on the *format* reward alone (reward hacking: the
    format stays perfect while accuracy does not rise); PPO with a same-size critic on
    the same completions; and XLA's memory of one GRPO step vs one PPO step (dropping the
    critic nearly halves it).
    """),
]


NOTEBOOKS = {
    "01_quickstart.ipynb": QUICKSTART,
    "02_custom_advantage.ipynb": CUSTOM_ADVANTAGE,
    "03_search.ipynb": SEARCH,
    "04_lm_grpo.ipynb": LM_GRPO,
}


def build(name: str, cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    """The notebook ``name`` from ``(kind, source)`` cells, without outputs."""
    stem = name.split("_", 1)[0]
    nb = new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    for index, (kind, source) in enumerate(cells):
        make = new_markdown_cell if kind == "markdown" else new_code_cell
        cell = make(source)
        cell.id = f"nb{stem}-{index:02d}"
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def render(nb: nbformat.NotebookNode) -> str:
    return nbformat.writes(nb) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a notebook on disk differs from its source here")
    args = parser.parse_args()
    NOTEBOOK_DIR.mkdir(parents=True, exist_ok=True)
    stale = []
    for name, cells in NOTEBOOKS.items():
        path = NOTEBOOK_DIR / name
        text = render(build(name, cells))
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print("out of date (run python scripts/make_notebooks.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
