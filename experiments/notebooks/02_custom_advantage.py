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
# # A new advantage estimator in ten lines, and how to decide if it helps
#
# `rljax.grpo` is a factory (like `optax.adam`): its hyperparameters and its advantage
# estimator are arguments. `advantage=` takes a name (`"group_relative"` for GRPO,
# `"group_mean"` for Dr. GRPO, `"leave_one_out"` for RLOO) **or any function
# `rewards [P, G] -> advantages [P, G]`** (P prompts, G sampled answers per prompt). So
# trying an idea is: write the function, pass it in, sweep seeds, read the statistics.
#
# Here the idea is a **rank-based group advantage**, then a head-to-head against GRPO and
# RLOO on a small bandit, run on the same seeds and decided with paired statistics: IQM,
# probability of improvement over seed pairs, paired tests and a power analysis.

# %%
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax

import rljax
from rljax import stats
from rljax.policies import categorical_log_prob, sample_categorical

# %% [markdown]
# ## The estimator
#
# Within each group, replace every reward by its centred rank, scaled to [-1, 1]:
#
# $$A_i = \frac{\operatorname{rank}_i - (G-1)/2}{(G-1)/2}, \qquad
# \operatorname{rank}_i = \#\{j: r_j < r_i\}
#   + \tfrac12\left(\#\{j: r_j = r_i\} - 1\right)$$
#
# Ties share their mean rank, so a group whose rewards are all equal gets all-zero
# advantages (no signal, as in GRPO). Ranks are invariant to any increasing transform of
# the reward and bounded, so a single outlier reward cannot dominate an update (the
# idea behind rank-based fitness shaping in evolution strategies); the price is that the
# *size* of a reward gap is thrown away.

# %%
def rank_advantages(rewards):
    """Centred within-group ranks in [-1, 1]; tied rewards share their mean rank.

    rewards: [P, G] (any leading axes; the group is the last axis) -> [P, G].
    """
    r_i, r_j = rewards[..., :, None], rewards[..., None, :]
    rank = jnp.sum(r_j < r_i, axis=-1) + 0.5 * (jnp.sum(r_j == r_i, axis=-1) - 1)
    half = (rewards.shape[-1] - 1) / 2
    return (rank - half) / half

examples = jnp.array([[1.0, 0.0, 0.0, 1.0],     # binary rewards
                      [0.1, 0.5, 0.2, 0.9],     # graded rewards
                      [0.1, 0.5, 0.2, 90.0],    # one outlier
                      [0.3, 0.3, 0.3, 0.3]])    # no signal
np.set_printoptions(precision=3, suppress=True)
print("rewards\n", np.asarray(examples))
print("rank (ours)\n", np.asarray(rank_advantages(examples)))
print("GRPO (group_relative)\n", np.asarray(rljax.group_relative_advantages(examples)))
print("RLOO (leave_one_out)\n", np.asarray(rljax.leave_one_out_advantages(examples)))

# %% [markdown]
# ## The toy: a graded 8-answer bandit over 16 prompts
#
# Each seed draws its own task: 16 prompts with 8 answers each, answer qualities
# uniform in [0, 1] (the reward of an answer is its quality). A tabular softmax policy
# starts uniform; every step samples a group of G = 8 answers for every prompt and
# applies one GRPO update (`rljax.grpo`, clip 0.2, no KL) with Adam at learning rate
# 0.1 for 30 steps.
#
# Why Adam: the three estimators give advantages of different overall *scale* (RLOO's
# are in reward units, GRPO's have unit standard deviation, ranks lie in [-1, 1]). With
# plain SGD the comparison would mostly be a comparison of effective learning rates;
# Adam normalises each parameter's step, so what remains is the *shape* of the
# advantages.
#
# The score of a policy is the fraction of the possible improvement it has realised,
# averaged over prompts: $(\mathbb{E}_\pi[r] - \bar r) / (\max r - \bar r)$, 0 for
# the uniform policy and 1 for always picking the best answer.

# %%
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


# %% [markdown]
# ## Sweep: 512 seeds per estimator
#
# The three sweeps share `base_seed`, so seed `i` draws the same task and starts from the
# same key under every estimator. The only change between them is one argument.

# %%
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

# %% [markdown]
# ## Deciding
#
# The three sweeps ran on the same seeds with the same `base_seed`: seed `i` drew the same
# task and the same keys under every estimator. The comparison is therefore **paired**:
# every statistic below works on seed pairs, which cancels the seed-to-seed variation (the
# task draw) that an unpaired comparison would count as noise.
#
# The decision rule, fixed before looking: compare the final score of the rank estimator
# with the better of the two baselines.
#
# * **adopt** if the probability of improvement P(rank > baseline) has its whole 95 %
#   interval above 0.5 (paired bootstrap: each resample draws seeds and keeps each seed's
#   pair of scores together, `paired=True`);
# * **reject** if the whole interval is below 0.5;
# * otherwise **inconclusive**.
#
# Beside it: the IQM of each estimator with its interval, the mean paired difference
# with its paired t interval, the paired t-test and the Wilcoxon signed-rank test, and a
# power analysis: how many seed pairs a paired t-test needs to detect the observed
# difference with 80 % power at α = 0.05 (`stats.paired_t_seeds`, from the standard
# deviation of the per-seed differences, which assumes normal differences), checked by
# simulation: draw that many seed pairs with replacement from the observed ones, test,
# repeat. A tiny difference that needs tens of thousands of seeds is not worth acting on
# even if it is real.

# %%
final = {name: s[:, -1:] for name, s in scores.items()}  # [seeds, 1]
iqm = stats.interval_estimates(final, "iqm", key=jax.random.key(2), reps=2000)
for name, ci in iqm.items():
    print(f"{name:12s} IQM final score {ci.point:.4f} [{ci.low:.4f}, {ci.high:.4f}]")

baseline = max(("GRPO", "RLOO"), key=lambda name: iqm[name].point)
ours, theirs = final["rank (ours)"][:, 0], final[baseline][:, 0]  # row i = seed i in both
poi = stats.probability_of_improvement_ci(ours, theirs, key=jax.random.key(3), reps=2000,
                                          paired=True)
unpaired = stats.probability_of_improvement_ci(ours, theirs, key=jax.random.key(3),
                                               reps=2000)
diff = stats.paired_t_interval(ours, theirs)
ttest = stats.paired_ttest(ours, theirs)
wilcoxon = stats.wilcoxon_signed_rank(ours, theirs)
print(f"\nP(rank > {baseline}) = {poi.point:.3f} [{poi.low:.3f}, {poi.high:.3f}] "
      f"(paired bootstrap over {SEEDS} seeds)")
print(f"  the same interval resampling the two estimators independently (ignoring the "
      f"pairing): [{unpaired.low:.3f}, {unpaired.high:.3f}]")
print(f"paired mean difference = {diff.point:+.4f} [{diff.low:+.4f}, {diff.high:+.4f}]; "
      f"paired t p = {ttest.pvalue:.3g}, Wilcoxon signed-rank p = {wilcoxon.pvalue:.3g}")

# %%
differences = ours - theirs
delta, sd_diff = float(differences.mean()), float(differences.std(ddof=1))
analytic = stats.paired_t_seeds(delta, sd_diff, power=0.8)
print(f"observed mean paired difference {delta:+.4f} (sd of the per-seed differences "
      f"{sd_diff:.4f}; per-seed sd {ours.std(ddof=1):.4f} / {theirs.std(ddof=1):.4f})")
print(f"seed pairs for 80 % power (paired t, normal differences): {analytic}")
unpaired_seeds = stats.welch_seeds(delta, float(ours.std(ddof=1)),
                                   sd_y=float(theirs.std(ddof=1)), power=0.8)
print(f"seeds per estimator an unpaired Welch test would need: {unpaired_seeds}")
if analytic <= 4096:  # check the normal approximation by resampling these seed pairs
    draws = differences[np.asarray(stats.resample_indices(jax.random.key(5), SEEDS,
                                                          (1000, max(analytic, 2))))]
    simulated = np.mean([stats.paired_ttest(d, np.zeros_like(d)).pvalue <= 0.05
                         for d in draws])
    print(f"power at {analytic} seed pairs, simulated from the observed pairs: "
          f"{simulated:.2f}")

if poi.low > 0.5:
    decision = f"adopt: rank beats {baseline}"
elif poi.high < 0.5:
    decision = f"reject: {baseline} beats rank"
else:
    decision = f"inconclusive at {SEEDS} seeds (about {analytic} needed for 80 % power)"
print(f"\ndecision: {decision}")

# %% [markdown]
# ## Reading
#
# On this toy all three learn quickly and the differences are small. RLOO, whose
# advantages are raw reward differences, is slowest here, plausibly because the gaps
# between the answers an improving policy still samples shrink while Adam's running
# scale still remembers the larger early gaps. In our run the rank estimator came out
# slightly ahead of GRPO: a clear but small effect (well under one percent of the
# possible improvement) that 512 seeds resolve and a sweep of a handful of seeds would
# usually miss. The power analysis says how many seeds a difference of this size needs:
# read it before planning a bigger sweep. Pairing matters here: each seed's task moves
# both estimators' scores together, so the per-seed differences vary less than the
# scores, the paired probability-of-improvement interval is little more than half as
# wide as the one that resamples the estimators independently, and a paired t-test needs
# about a quarter of the seeds an unpaired Welch test would. To try your own
# estimator, change `rank_advantages` (keep the `[P, G] -> [P, G]` signature) and rerun.
# A harder test would use a shared-parameter policy (the LM of `04_lm_grpo.py`,
# whose trainer takes `advantage=` by name) where per-prompt scales do interact.
