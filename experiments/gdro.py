"""Study ``gdro``: difficulty-aware GRPO under equal compute on a prompt bank.

A bank of ``P`` prompts (``rljax.envs.PromptBank``: ``K`` answers each, one correct; a
heavy-tailed difficulty mixture of many easy prompts and a long tail of hard ones) is
learned by a tabular softmax policy started at the bank's prior logits. Every step a
sampler (``rljax.curriculum``) picks prompt rows and how many rollouts each row gets; the
rollouts are scored (1 if correct), turned into group-relative advantages over each
row's rollouts (``(r - mean) / (std + 1e-6)``, 0 for rows whose rewards are all equal;
masked for rows with fewer rollouts) and applied through ``rljax.grpo`` (token-mean loss,
no KL) with plain SGD on the logits.

Four samplers, **the same total number of rollouts** per seed
(``budget_steps * prompts_per_step * group_size``; a method stops updating once the next
step would exceed it):

* ``uniform`` -- GRPO as published: prompts uniform, ``G`` rollouts each.
* ``dynamic`` -- DAPO's dynamic sampling: groups without signal are dropped and refilled;
  every generated rollout counts against the budget, so it takes fewer update steps.
* ``prompt_gdro`` -- multiplicative weights over difficulty bins (up-weights high-loss bins).
* ``rollout_gdro`` -- per-bin rollout counts by the square-root rule with a shadow price
  keeping the mean at ``G``.

**The bank is drawn per seed** (``bank="per_seed"``, the default): seed ``i``'s bank comes
from ``fold_in(key_i, BANK_STREAM)``, so an interval over seeds covers the variation over
banks as well as over training noise, and every method sees the same bank on the same
seed (comparisons stay paired). ``bank="fixed"`` draws one bank from ``bank_seed`` for
every seed; its intervals then speak for that one bank only (review of issue 14: Prompt-
GDRO's gain over uniform was +5.5 %, +6.1 % and +6.75 % on three fixed banks, with
non-overlapping intervals, so a fixed bank understates the uncertainty about the method).

Reported per seed: exact pass@8 of the final policy over all prompts and over the hardest
prompts (initial success probability below ``hard_p0``), the signal fraction of each
step, the samplers' bin weights / rollout allocations over training, and the bank's
mean initial success and number of hard prompts.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd

from rljax import io, stats
from rljax.algorithms import GroupBatch, grpo
from rljax.config import ConfigError, require_choice, require_float, require_int
from rljax.curriculum import (
    DifficultyClassifier,
    dynamic_filter,
    dynamic_sampler,
    prompt_gdro_sampler,
    rollout_gdro_sampler,
    uniform_sampler,
)
from rljax.envs import PromptBank
from rljax.nonfinite import NONFINITE_STEP, all_finite, first_nonfinite_step
from rljax.report import Figure, figures_table, format_number
from rljax.stats.reported import measured_coverage, recommended_method, reported_interval
from rljax.sweep import Sweep

NAME = "gdro"
DESCRIPTION = ("Uniform GRPO vs dynamic sampling vs Prompt-GDRO vs Rollout-GDRO at equal "
               "rollouts on a heavy-tailed prompt bank: pass@8 overall and on hard prompts")

METHODS = ("uniform", "dynamic", "prompt_gdro", "rollout_gdro")
BANK_MODES = ("per_seed", "fixed")
#: A seed's pass@8 is an average over 256 prompts (continuous, near-symmetric over seeds):
#: intervals are held to the coverage measured on symmetric data
#: (rljax.stats.coverage.DATA_KINDS; the note gives the worst case over all kinds).
DATA_KIND = "symmetric"
BOOTSTRAP_METHODS = ("percentile", "basic", "bca")
#: ``fold_in`` data of the per-seed bank's key (the bytes "bank"; far from the small
#: counters ``split`` uses, so the bank's stream is not one of the step keys').
BANK_STREAM = int.from_bytes(b"bank", "big")


#: Numeric fields the trainer reads from ``hparams`` (one program runs any value).
TRACED = ("learning_rate", "gdro_step_size", "price_step_size")


@dataclass(frozen=True)
class Config:
    """The study's knobs (``rljax run gdro --set name=value``)."""

    TRACED: ClassVar[tuple[str, ...]] = TRACED
    STRUCTURAL: ClassVar[tuple[str, ...]] = ("method",)

    method: str = "all"  # or one of METHODS
    lr_grid: str = "0.5,1,2,4,8,16,32,64"
    tuning_seeds: int = 64
    seeds: int = 256
    block_size: int = 256
    base_seed: int = 0
    bank: str = "per_seed"  # or "fixed": one bank from bank_seed for every seed
    bank_seed: int = 2024
    num_prompts: int = 256
    num_answers: int = 8
    prompts_per_step: int = 16
    group_size: int = 8
    budget_steps: int = 150
    learning_rate: float = 8.0
    oversample: int = 4
    n_min: int = 2
    n_max: int = 16
    gdro_step_size: float = 0.1
    price_step_size: float = 0.5
    bin_edges: str = "0.25,0.75"
    window: int = 4
    hard_p0: float = 0.1
    pass_k: int = 8
    bootstrap_reps: int = 2000

    def edges(self) -> tuple[float, ...]:
        try:
            return tuple(float(v) for v in self.bin_edges.split(",") if v.strip())
        except ValueError:
            raise ConfigError(f"bin_edges: must be comma-separated increasing numbers in "
                              f"(0, 1), got {self.bin_edges!r}") from None

    @property
    def budget(self) -> int:
        """Rollouts per seed for every method."""
        return self.budget_steps * self.prompts_per_step * self.group_size

    def validate(self) -> None:
        require_int("seeds", self.seeds, 2)
        for name in ("block_size", "num_prompts", "prompts_per_step", "budget_steps",
                     "oversample", "window", "pass_k", "bootstrap_reps"):
            require_int(name, getattr(self, name), 1)
        require_int("base_seed", self.base_seed, 0, 2**31 - 1)  # 32-bit keys, + offsets
        require_choice("bank", self.bank, BANK_MODES)
        require_int("bank_seed", self.bank_seed, 0, 2**31 - 1)
        require_int("num_answers", self.num_answers, 2)
        require_int("group_size", self.group_size, 2)
        require_float("learning_rate", self.learning_rate, low=0.0, low_inclusive=False)
        require_float("hard_p0", self.hard_p0, low=0.0, high=1.0, low_inclusive=False)
        require_float("gdro_step_size", self.gdro_step_size, low=0.0, low_inclusive=False)
        require_float("price_step_size", self.price_step_size, low=0.0, low_inclusive=False)
        if self.n_min <= self.n_max and not self.n_min <= self.group_size <= self.n_max:
            raise ConfigError(f"group_size: must be in [n_min, n_max] = [{self.n_min}, "
                              f"{self.n_max}] (Rollout-GDRO's mean rollouts per prompt), "
                              f"got {self.group_size}")
        try:
            build_methods(self)
        except ValueError as err:
            message = str(err)
            if message.startswith("hysteresis:"):  # the classifier's fixed band at each edge
                h = DifficultyClassifier.hysteresis
                message = (f"bin_edges: must be > {h:g} from 0 and 1 and > {2 * h:g} apart "
                           f"(the difficulty classifier's hysteresis), got {self.bin_edges!r}")
            raise ConfigError(message) from None


def build_methods(config: Config, hparams: Any = None) -> dict[str, Any]:
    """The four samplers (raises ValueError naming a bad field when built).

    Args:
      config: the study's config (structural fields).
      hparams: ``{"gdro_step_size", "price_step_size"}`` scalars (traced inside
        ``train``), or None for the config's own values (validation).
    """
    hp = {f: getattr(config, f) for f in TRACED} if hparams is None else hparams
    classifier = DifficultyClassifier(config.num_prompts, bin_edges=config.edges(),
                                      window=config.window)
    m, g = config.prompts_per_step, config.group_size
    return {
        "uniform": uniform_sampler(classifier, m, g),
        "dynamic": dynamic_sampler(classifier, m, g, oversample=config.oversample),
        "prompt_gdro": prompt_gdro_sampler(classifier, m, g, step_size=hp["gdro_step_size"]),
        "rollout_gdro": rollout_gdro_sampler(classifier, m, n_min=config.n_min,
                                             n_max=config.n_max, budget=float(g),
                                             price_step_size=hp["price_step_size"]),
    }


def masked_group_advantages(rewards: jax.Array, mask: jax.Array,
                            epsilon: float = 1e-6) -> jax.Array:
    """Group-relative advantages over each row's used rollouts.

    ``A_ij = (r_ij - mean_i) / (std_i + epsilon)`` over ``{j : mask_ij}`` (population std),
    0 where the row's used rewards are all equal or ``mask_ij`` is False.

    Args:
      rewards: ``[M, N]``.
      mask: ``[M, N]`` bool.

    Returns:
      ``[M, N]``.
    """
    m = mask.astype(rewards.dtype)
    count = jnp.maximum(jnp.sum(m, axis=1, keepdims=True), 1.0)
    mean = jnp.sum(rewards * m, axis=1, keepdims=True) / count
    std = jnp.sqrt(jnp.sum(jnp.square(rewards - mean) * m, axis=1, keepdims=True) / count)
    big = jnp.finfo(rewards.dtype).max
    spread = (jnp.max(jnp.where(mask, rewards, -big), axis=1, keepdims=True)
              > jnp.min(jnp.where(mask, rewards, big), axis=1, keepdims=True))
    return jnp.where(spread & mask, (rewards - mean) / (std + epsilon), 0.0)


def bank_key(config: Config, key: jax.Array) -> jax.Array:
    """The key of seed ``key``'s prompt bank.

    ``fold_in(key, BANK_STREAM)`` when ``config.bank == "per_seed"`` (a bank per seed, the
    same for every method on that seed), ``key(bank_seed)`` when ``"fixed"``.

    Args:
      config: the study's config.
      key: the seed's key (a scalar typed key).

    Returns:
      A scalar typed key.
    """
    if config.bank == "fixed":
        return jax.random.key(config.bank_seed)
    return jax.random.fold_in(key, BANK_STREAM)


def traced_sgd(params: Any, grads: Any, learning_rate: jax.Array) -> Any:
    """One plain SGD step with a (possibly traced) learning rate.

    ``params <- params + (-learning_rate) * grads`` per leaf: ``optax.sgd(learning_rate)``
    without momentum (``scale_by_learning_rate`` then ``apply_updates``), written with the
    rate as an argument so one compiled program runs any rate (bitwise the same result as
    ``optax.sgd`` for the same float32 rate; tests/test_gdro_study.py).

    Args:
      params: a pytree of float arrays.
      grads: the same structure and shapes as ``params``.
      learning_rate: a scalar (Python float or a traced float32 array).

    Returns:
      The updated ``params``.
    """
    updates = jax.tree_util.tree_map(lambda g: -learning_rate * g, grads)
    return optax.apply_updates(params, updates)


def make_train(config: Config):
    """``train(key, hparams) -> outputs`` of one seed for ``config.method`` (module docstring).

    ``config.method`` (structural) picks the sampler; the traced fields
    (``Config.TRACED``: learning rate, Prompt-GDRO and Rollout-GDRO step sizes) are read
    from ``hparams`` (a dict of scalars), never from ``config``, so one compiled program
    runs every rate.
    """
    method = config.method
    if method not in METHODS:
        raise ConfigError(f"method: make_train needs one of {', '.join(METHODS)}, got "
                          f"{method!r}")
    bank = PromptBank(num_prompts=config.num_prompts, num_answers=config.num_answers)
    budget = config.budget
    num_steps = math.ceil(config.budget_steps * 1.25)

    def apply(policy, obs):
        return policy["logits"][obs]

    def train(key, hparams):
        sampler = build_methods(config, hparams)[method]
        learning_rate = hparams["learning_rate"]
        params = bank.sample_params(bank_key(config, key))
        hard = params.p0 < config.hard_p0
        policy = {"logits": params.prior_logits}
        state = sampler.init(None)

        def step(carry, step_key):
            policy, state, used = carry
            select_key, answer_key = jax.random.split(step_key)
            selection = sampler.select(state, select_key)
            ids, mask = selection.prompt_ids, selection.mask
            logits = policy["logits"][ids]  # [M, K]
            u = jax.random.uniform(answer_key, mask.shape)
            cdf = jnp.cumsum(jax.nn.softmax(logits, axis=-1), axis=-1)
            answers = jnp.sum(cdf[:, None, :-1] <= u[..., None], axis=-1)
            rewards = bank.reward(params, jnp.broadcast_to(ids[:, None], mask.shape), answers)
            if method == "dynamic":
                keep, cost, _ = dynamic_filter(rewards, mask, config.prompts_per_step)
                train_mask = mask & keep[:, None]
            else:
                cost = jnp.sum(mask)
                train_mask = mask
            active = used + cost <= budget
            train_mask = train_mask & active
            advantages = masked_group_advantages(rewards, train_mask)
            old = jax.nn.log_softmax(logits, axis=-1)
            batch = GroupBatch(
                obs=jnp.broadcast_to(ids[:, None, None], (*mask.shape, 1)),
                actions=answers[..., None], mask=train_mask[..., None].astype(jnp.float32),
                rewards=rewards,
                old_log_probs=jnp.take_along_axis(old, answers, axis=-1)[..., None],
                ref_log_probs=jnp.zeros((*mask.shape, 1)), advantages=advantages[..., None])
            grads, _, _ = transform(mask.shape[1]).update(policy, (), batch)
            policy = jax.tree_util.tree_map(lambda new, old: jnp.where(active, new, old),
                                            traced_sgd(policy, grads, learning_rate), policy)
            new_state, info = sampler.update(state, selection, rewards)
            state = jax.tree_util.tree_map(lambda new, old: jnp.where(active, new, old),
                                           new_state, state)
            rows = jnp.any(train_mask, axis=1)
            signal = jnp.sum(jnp.any(advantages != 0, axis=1)) / jnp.maximum(jnp.sum(rows), 1)
            # NaN marks steps past the budget in these logs; divergence is tracked apart
            log = {"active": active, "signal": jnp.where(active, signal, jnp.nan),
                   "finite": all_finite(policy)}
            for name in ("bin_weights", "bin_rollouts"):
                if name in info:
                    log[name] = jnp.where(active, info[name], jnp.nan)
            return (policy, state, used + jnp.where(active, cost, 0)), log

        carry = (policy, state, jnp.zeros((), jnp.int32))
        (policy, _, used), logs = jax.lax.scan(step, carry, jax.random.split(key, num_steps))
        p = bank.success_probability(params, policy["logits"])
        passk = 1.0 - (1.0 - p) ** config.pass_k
        return {
            "pass8": jnp.mean(passk),
            "hard_pass8": jnp.sum(jnp.where(hard, passk, 0.0)) / jnp.maximum(jnp.sum(hard), 1),
            "rollouts": used,
            "updates": jnp.sum(logs["active"]),
            "bank_mean_p0": jnp.mean(params.p0),
            "bank_hard_prompts": jnp.sum(hard),
            NONFINITE_STEP: first_nonfinite_step(logs.pop("finite")),
            **logs,
        }

    def transform(n):
        return grpo(apply, group_size=n, kl_beta=0.0, aggregation="token-mean")

    return train


def _rel_gain(a, b):
    return jnp.mean(a) / jnp.mean(b) - 1.0


def _interval(statistic, *samples, key, config: Config) -> dict[str, Any]:
    iv = reported_interval(statistic, *samples, key=key, reps=config.bootstrap_reps,
                           data=DATA_KIND)
    return {"point": float(iv.point), "ci": [float(iv.low), float(iv.high)],
            "method": iv.method, "coverage": iv.coverage, "note": iv.note.rstrip(".")}


def _relative_gain(a, b, *, key, config: Config) -> dict[str, Any]:
    """Paired bootstrap of ``mean(a) / mean(b) - 1`` with the method recommended for the
    paired difference of means at this n (a smooth function of two paired means, the
    closest listed statistic) -- or, when that method is not a bootstrap, the bootstrap
    method with the highest measured coverage there; that coverage is the one reported."""
    n = a.shape[0]
    method = recommended_method("paired_difference", n, DATA_KIND)
    if method not in BOOTSTRAP_METHODS:  # e.g. "t": no bootstrap analogue for a ratio, so
        # the bootstrap method with the highest measured coverage at this n and kind
        method = max(BOOTSTRAP_METHODS, key=lambda m: measured_coverage(
            m, "paired_difference", n, DATA_KIND) or -1.0)
    iv = stats.bootstrap_ci(_rel_gain, a, b, key=key, reps=config.bootstrap_reps,
                            paired=True, method=method)
    return {"point": float(iv.point), "ci": [float(iv.low), float(iv.high)],
            "method": method,
            "coverage": measured_coverage(method, "paired_difference", n, DATA_KIND)}


def run(config: Config, out_dir: Path) -> dict[str, Any]:
    """Run the study; writes results.parquet, summary.json, report.md and figures."""
    outputs, seconds = {}, {}
    for method in METHODS:
        train = make_train(config, method)
        result = Sweep(train, base_seed=config.base_seed,
                       block_size=config.block_size).run(config.seeds, desc=f"{NAME}:{method}")
        outputs[method] = result.outputs
        seconds[method] = result.compile_seconds + result.run_seconds
    keys = iter(jax.random.split(jax.random.key(config.base_seed + 5), 64))
    scores = {m: np.asarray(outputs[m]["pass8"], np.float64) for m in METHODS}
    hard_scores = {m: np.asarray(outputs[m]["hard_pass8"], np.float64) for m in METHODS}
    iqm = {m: _interval("iqm", scores[m], key=next(keys), config=config) for m in METHODS}
    hard_iqm = {m: _interval("iqm", hard_scores[m], key=next(keys), config=config)
                for m in METHODS}
    rel, rel_hard, diff = {}, {}, {}
    for m in METHODS[1:]:
        rel[m] = _relative_gain(scores[m], scores["uniform"], key=next(keys), config=config)
        rel_hard[m] = _relative_gain(hard_scores[m], hard_scores["uniform"], key=next(keys),
                                     config=config)
        diff[m] = _interval("paired_difference", scores[m], scores["uniform"], key=next(keys),
                            config=config)
    mean_p0 = np.asarray(outputs["uniform"]["bank_mean_p0"], np.float64)
    hard_count = np.asarray(outputs["uniform"]["bank_hard_prompts"], np.float64)
    summary: dict[str, Any] = {
        "experiment": NAME,
        "seeds": config.seeds,
        "budget_rollouts_per_seed": config.budget,
        "bank": {"mode": config.bank,
                 "bank_seed": config.bank_seed if config.bank == "fixed" else None,
                 "prompts": config.num_prompts, "answers": config.num_answers,
                 "distinct_banks": int(np.unique(mean_p0).size),
                 "mean_p0": float(mean_p0.mean()),
                 "mean_p0_range": [float(mean_p0.min()), float(mean_p0.max())],
                 "hard_prompts": float(hard_count.mean()),
                 "hard_prompts_range": [int(hard_count.min()), int(hard_count.max())],
                 "hard_p0": config.hard_p0},
        "pass8": {m: iqm[m]["point"] for m in METHODS},
        "pass8_ci": {m: iqm[m]["ci"] for m in METHODS},
        "hard_pass8": {m: hard_iqm[m]["point"] for m in METHODS},
        "hard_pass8_ci": {m: hard_iqm[m]["ci"] for m in METHODS},
        "rel_gain": {m: rel[m]["point"] for m in rel},
        "rel_gain_ci": {m: rel[m]["ci"] for m in rel},
        "hard_rel_gain": {m: rel_hard[m]["point"] for m in rel_hard},
        "hard_rel_gain_ci": {m: rel_hard[m]["ci"] for m in rel_hard},
        "pass8_diff": {m: diff[m]["point"] for m in diff},
        "pass8_diff_ci": {m: diff[m]["ci"] for m in diff},
        "intervals": {
            "iqm": {"method": iqm["uniform"]["method"],
                    "coverage": iqm["uniform"]["coverage"], "note": iqm["uniform"]["note"]},
            "paired_difference": {"method": diff["dynamic"]["method"],
                                  "coverage": diff["dynamic"]["coverage"],
                                  "note": diff["dynamic"]["note"]},
            "rel_gain": {"method": rel["dynamic"]["method"],
                         "coverage": rel["dynamic"]["coverage"],
                         "coverage_of": "paired_difference"},
        },
        "rollouts_total": {m: float(np.mean(outputs[m]["rollouts"])) for m in METHODS},
        "updates": {m: float(np.mean(outputs[m]["updates"])) for m in METHODS},
        "signal_fraction": {m: float(np.nanmean(outputs[m]["signal"])) for m in METHODS},
        "seconds": seconds,
    }
    io.write_parquet(out_dir / "results.parquet", pd.DataFrame([
        {"method": m, "seed": s, "pass8": float(outputs[m]["pass8"][s]),
         "hard_pass8": float(outputs[m]["hard_pass8"][s]),
         "rollouts": int(outputs[m]["rollouts"][s]), "updates": int(outputs[m]["updates"][s]),
         "bank_mean_p0": float(outputs[m]["bank_mean_p0"][s]),
         "bank_hard_prompts": int(outputs[m]["bank_hard_prompts"][s])}
        for m in METHODS for s in range(config.seeds)]))
    io.write_json(out_dir / "summary.json", summary)
    _plots(outputs, config, out_dir)
    io.atomic_write_text(out_dir / "report.md", report_markdown(summary, config))
    return summary


def _plots(outputs: dict[str, Any], config: Config, out_dir: Path) -> None:
    with warnings.catch_warnings():  # steps after every seed's budget ran out are NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        _draw(outputs, config, out_dir)


def _draw(outputs: dict[str, Any], config: Config, out_dir: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(12, 3.8), layout="constrained")
    FigureCanvasAgg(fig)
    ax_signal, ax_weights, ax_rollouts = fig.subplots(1, 3)
    for m in METHODS:
        ax_signal.plot(np.nanmean(outputs[m]["signal"], axis=0), label=m)
    ax_signal.set(xlabel="step", ylabel="share of rows with signal", title="signal fraction")
    ax_signal.legend(fontsize=8)
    edges = (0.0, *config.edges(), 1.0)
    names = [f"[{edges[b]:g}, {edges[b + 1]:g})" for b in range(len(edges) - 1)]
    for ax, method, key, ylabel, title in (
        (ax_weights, "prompt_gdro", "bin_weights", "sampling probability",
         "Prompt-GDRO bin weights (0 = hardest)"),
        (ax_rollouts, "rollout_gdro", "bin_rollouts", "rollouts per prompt",
         "Rollout-GDRO allocation"),
    ):
        per_bin = np.nanmean(outputs[method][key], axis=0)  # [steps, bins], mean over seeds
        for b, name in enumerate(names):
            ax.plot(per_bin[:, b], label=f"bin {name}")
        ax.set(xlabel="step", ylabel=ylabel, title=title)
        ax.legend(fontsize=8)
    io.write_figure(out_dir / "curriculum.png", fig)


def _bank_sentence(summary: dict[str, Any], config: Config) -> str:
    bank = summary["bank"]
    shape = f"{bank['prompts']} prompts x {bank['answers']} answers"
    if bank["mode"] == "fixed":
        return (f"one fixed bank (bank_seed {bank['bank_seed']}) of {shape} for every seed "
                f"(mean initial success {format_number(bank['mean_p0'])}, "
                f"{bank['hard_prompts']:.0f} prompts with p0 < {config.hard_p0})")
    lo, hi = bank["mean_p0_range"]
    hlo, hhi = bank["hard_prompts_range"]
    return (f"a bank of {shape} drawn per seed ({bank['distinct_banks']} distinct banks; "
            f"mean initial success {format_number(bank['mean_p0'])}, range "
            f"{format_number(lo)}-{format_number(hi)}; {bank['hard_prompts']:.1f} prompts "
            f"with p0 < {config.hard_p0} on average, {hlo}-{hhi})")


def reading(summary: dict[str, Any], config: Config) -> str:
    """A short plain-language reading: what this implementation measures on this toy."""
    def gain(m):
        low, high = summary["rel_gain_ci"][m]
        return (f"{100 * summary['rel_gain'][m]:+.1f} % [{100 * low:+.1f}, "
                f"{100 * high:+.1f}]")

    scope = ("banks drawn per seed, so the intervals cover the variation over banks"
             if summary["bank"]["mode"] == "per_seed" else
             "one fixed bank, so the intervals speak for that bank only, not for the "
             "method over banks")
    return (
        f"On this toy (a tabular policy: the prompts share no parameters, so nothing learnt "
        f"on one prompt helps another; {scope}) this implementation of Prompt-GDRO changes "
        f"pass@{config.pass_k} over uniform GRPO by {gain('prompt_gdro')}, Rollout-GDRO by "
        f"{gain('rollout_gdro')} and DAPO dynamic sampling by {gain('dynamic')} at equal "
        "rollouts. These figures are about this implementation of the samplers on this "
        "bank distribution; they neither confirm nor refute the papers' figures, which come "
        "from language models whose prompts share parameters.")


def report_markdown(summary: dict[str, Any], config: Config) -> str:
    figures = []
    for m in METHODS:
        figures.append(Figure(f"{m}: pass@{config.pass_k} (IQM)", summary["pass8"][m],
                              *summary["pass8_ci"][m],
                              f"{summary['rollouts_total'][m]:,.0f} rollouts, "
                              f"{summary['updates'][m]:.0f} updates"))
    for m in METHODS:
        figures.append(Figure(f"{m}: hard-prompt pass@{config.pass_k} (IQM)",
                              summary["hard_pass8"][m], *summary["hard_pass8_ci"][m],
                              f"p0 < {config.hard_p0}"))
    for m in METHODS[1:]:
        figures.append(Figure(f"{m}: relative gain over uniform", summary["rel_gain"][m],
                              *summary["rel_gain_ci"][m], "ratio of means - 1, paired"))
        figures.append(Figure(f"{m}: relative gain on hard prompts",
                              summary["hard_rel_gain"][m], *summary["hard_rel_gain_ci"][m],
                              "ratio of means - 1, paired"))
        figures.append(Figure(f"{m}: pass@{config.pass_k} minus uniform's",
                              summary["pass8_diff"][m], *summary["pass8_diff_ci"][m],
                              "mean paired difference"))
    iv = summary["intervals"]
    rel_cov = iv["rel_gain"]["coverage"]
    rel_cov_text = "not measured" if rel_cov is None else f"{rel_cov:.3f}"
    bank_procedure = (
        f"Each seed draws its own bank (key fold_in(seed key, {BANK_STREAM})); every method "
        "sees the same bank on the same seed, so the paired comparisons pair banks too."
        if config.bank == "per_seed" else
        f"The bank is held fixed across seeds (bank_seed {config.bank_seed}): the intervals "
        "cover training noise on that one bank, not the variation over banks.")
    return "\n".join([
        f"# {NAME}", "", DESCRIPTION + ".", "",
        f"{config.seeds} seeds; {_bank_sentence(summary, config)}; budget "
        f"{summary['budget_rollouts_per_seed']:,} rollouts per seed for every method "
        f"({config.budget_steps} steps x {config.prompts_per_step} prompts x "
        f"{config.group_size} rollouts for uniform).", "",
        figures_table(figures), "",
        "Signal fraction (mean over training): " + ", ".join(
            f"{m} {format_number(v)}" for m, v in summary["signal_fraction"].items()) + ".", "",
        "## Reading", "",
        reading(summary, config), "",
        "## Procedure", "",
        "pass@k is exact for the tabular policy, 1 - (1 - p_i)^k averaged over prompts. "
        f"{bank_procedure} IQM intervals: {iv['iqm']['note']}. Paired differences: "
        f"{iv['paired_difference']['note']}. Relative gains (ratio of means - 1): paired "
        f"{iv['rel_gain']['method']} bootstrap ({config.bootstrap_reps} resamples); the "
        "coverage that applies is the paired difference's at this n, measured "
        f"{rel_cov_text} for {iv['rel_gain']['method']}. Dynamic "
        "sampling's dropped groups count against its budget. See curriculum.png for the "
        "signal fraction, the Prompt-GDRO bin weights and the Rollout-GDRO allocation.", "",
    ])
