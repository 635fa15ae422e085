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

**Every method's learning rate is tuned with the same budget** (``rljax.tune``; the
protocol of Patterson et al. 2024, "Empirical design in reinforcement learning", JMLR 25,
Sec. 5): each method runs the same ``K`` configurations (the rates of ``lr_grid``, or of
``--grid learning_rate=...``) on the same *tuning seeds* (ids ``0 .. tuning_seeds - 1``);
the configuration with the highest mean pass@8 there is re-run on fresh *evaluation
seeds* (ids ``tuning_seeds .. tuning_seeds + seeds - 1``; with per-seed banks these are
fresh banks as well) and only those scores are reported, with the selection's optimism
(tuning minus evaluation score) and the paired difference from uniform's winner on the
same evaluation seeds (p-values Holm-adjusted over the comparisons). The learning rate
and the two samplers' step sizes are *traced* (declared ``traced=True``: read from
``hparams``, so one compiled program runs every rate of a method, vmapped with the seeds);
the method is *structural* (one compiled program per method, ``--grid
method=uniform,prompt_gdro`` to choose them). A method with rate ``r`` alone is bitwise
its cell inside any grid (fixed blocks, seed ``i``'s key from ``i`` alone).

Reported per seed: exact pass@8 of the final policy over all prompts and over the hardest
prompts (initial success probability below ``hard_p0``), the signal fraction of each
step, the samplers' bin weights / rollout allocations over training, and the bank's
mean initial success and number of hard prompts.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd
import scipy.stats

from rljax import io, stats
from rljax.algorithms import GroupBatch, grpo
from rljax.config import ConfigError, check_fields, param, traced_fields
from rljax.curriculum import (
    DifficultyClassifier,
    dynamic_filter,
    dynamic_sampler,
    prompt_gdro_sampler,
    rollout_gdro_sampler,
    uniform_sampler,
)
from rljax.envs import PromptBank
from rljax.grid import ConfigTable
from rljax.nonfinite import NONFINITE_STEP, all_finite, first_nonfinite_step
from rljax.report import Figure, figures_table, format_number
from rljax.stats.reported import measured_coverage, recommended_method, reported_interval
from rljax.sweep import MAX_SEEDS, Sweep

NAME = "gdro"
DESCRIPTION = ("Uniform GRPO vs dynamic sampling vs Prompt-GDRO vs Rollout-GDRO at equal "
               "rollouts on a heavy-tailed prompt bank: pass@8 overall and on hard prompts")

METHODS = ("uniform", "dynamic", "prompt_gdro", "rollout_gdro")
BANK_MODES = ("per_seed", "fixed")
#: A seed's pass@8 is an average over 256 prompts (continuous, near-symmetric over seeds):
#: intervals are held to the coverage measured on symmetric data
#: (rljax.stats.coverage.DATA_KINDS; the note gives the worst case over all kinds).
DATA_KIND = "symmetric"
#: Each method's score over seeds: the mean (the paired differences are of means too).
STATISTIC = "mean"
BOOTSTRAP_METHODS = ("percentile", "basic", "bca")
#: ``fold_in`` data of the per-seed bank's key (the bytes "bank"; far from the small
#: counters ``split`` uses, so the bank's stream is not one of the step keys').
BANK_STREAM = int.from_bytes(b"bank", "big")


@dataclass(frozen=True)
class Config:
    """The study's knobs (``rljax run gdro --set name=value``)."""

    method: str = param("all", "the four METHODS, or one of them",
                        choices=("all", *METHODS))
    lr_grid: str = param("0.5,2,8,32,128,512,2048,8192",
                         "rates each method is tuned over (empty: learning_rate alone)",
                         sweep=False)
    tuning_seeds: int = param(128, "seed ids 0 .. tuning_seeds - 1 pick each method's rate",
                              sweep=False, low=2)
    seeds: int = param(256, "fresh evaluation seeds, ids tuning_seeds .. tuning_seeds + "
                       "seeds - 1", sweep=False, low=2)
    block_size: int = param(256, "seeds per compiled block", sweep=False, low=1)
    base_seed: int = param(0, "the sweep's base seed (32-bit keys, + small offsets)",
                           sweep=False, low=0, high=2**31 - 1)
    bank: str = param("per_seed", 'a bank per seed, or "fixed": one bank from bank_seed '
                      "for every seed", sweep=False, choices=BANK_MODES)
    bank_seed: int = param(2024, "the fixed bank's seed", sweep=False, low=0,
                           high=2**31 - 1)
    num_prompts: int = param(256, "prompts in the bank", sweep=False, low=1)
    num_answers: int = param(8, "answers per prompt (one correct)", sweep=False, low=2)
    prompts_per_step: int = param(16, "prompt rows per step", sweep=False, low=1)
    group_size: int = param(8, "rollouts per prompt row", sweep=False, low=2)
    budget_steps: int = param(150, "steps of the equal rollout budget", sweep=False, low=1)
    learning_rate: float = param(8.0, "one-rate runs (lr_grid empty); the fixed-rate "
                                 "reference", traced=True, low=0.0, low_open=True)
    oversample: int = param(4, "dynamic sampling's oversampling factor", sweep=False, low=1)
    n_min: int = param(2, "Rollout-GDRO's fewest rollouts per prompt", sweep=False)
    n_max: int = param(16, "Rollout-GDRO's most rollouts per prompt", sweep=False)
    gdro_step_size: float = param(0.1, "Prompt-GDRO's multiplicative-weights step",
                                  traced=True, low=0.0, low_open=True)
    price_step_size: float = param(0.5, "Rollout-GDRO's shadow-price step", traced=True,
                                   low=0.0, low_open=True)
    bin_edges: str = param("0.25,0.75", "difficulty bin edges in (0, 1), comma-separated",
                           sweep=False)
    window: int = param(4, "the difficulty classifier's window", sweep=False, low=1)
    hard_p0: float = param(0.1, "a prompt is hard below this initial success probability",
                           sweep=False, low=0.0, high=1.0, low_open=True)
    pass_k: int = param(8, "k of the reported pass@k", sweep=False, low=1)
    bootstrap_reps: int = param(2000, "bootstrap resamples", sweep=False, low=1)

    def edges(self) -> tuple[float, ...]:
        """The bin edges of ``bin_edges``."""
        try:
            return tuple(float(v) for v in self.bin_edges.split(",") if v.strip())
        except ValueError:
            raise ConfigError(f"bin_edges: must be comma-separated increasing numbers in "
                              f"(0, 1), got {self.bin_edges!r}") from None

    @property
    def budget(self) -> int:
        """Rollouts per seed for every method."""
        return self.budget_steps * self.prompts_per_step * self.group_size

    def rates(self) -> tuple[float, ...]:
        """The learning rates of a plain run: ``lr_grid``'s, or ``(learning_rate,)`` when
        ``lr_grid`` is empty."""
        text = self.lr_grid.strip()
        if not text:
            return (self.learning_rate,)
        message = (f"lr_grid: must be comma-separated distinct finite numbers > 0 (or empty "
                   f"for learning_rate alone), got {self.lr_grid!r}")
        try:
            rates = tuple(float(v) for v in text.split(","))
        except ValueError:
            raise ConfigError(message) from None
        if (len(set(rates)) != len(rates)
                or not all(math.isfinite(r) and r > 0 for r in rates)):
            raise ConfigError(message)
        return rates

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first invalid field: each against its
        declaration, then the lists, the seed ids, ``group_size`` within ``[n_min, n_max]``
        and the samplers built from the config (``bin_edges``, ``n_min``, ``n_max``)."""
        check_fields(self)
        self.rates()
        if self.tuning_seeds + self.seeds > MAX_SEEDS:  # the evaluation ids follow the tuning ids
            raise ConfigError(f"seeds: tuning_seeds + seeds must be <= {MAX_SEEDS} (int32 seed "
                              f"ids), got {self.tuning_seeds} + {self.seeds}")
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


#: The fields the trainer reads from ``hparams`` (one compiled program runs any value).
TRACED = traced_fields(Config)


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
    without momentum (``scale_by_learning_rate`` then ``apply_updates``), built with the
    rate as an argument so one compiled program runs any rate (bitwise the same result as
    ``optax.sgd`` for the same float32 rate; tests/test_gdro_study.py).

    Args:
      params: a pytree of float arrays.
      grads: the same structure and shapes as ``params``.
      learning_rate: a scalar (Python float or a traced float32 array).

    Returns:
      The updated ``params``.
    """
    sgd = optax.sgd(learning_rate)  # optax takes a traced rate; plain SGD keeps no state
    updates, _ = sgd.update(grads, sgd.init(params), params)
    return optax.apply_updates(params, updates)


def make_train(config: Config):
    """``train(key, hparams) -> outputs`` of one seed for ``config.method`` (module docstring).

    ``config.method`` (structural) picks the sampler; the traced fields
    (:data:`TRACED`: learning rate, Prompt-GDRO and Rollout-GDRO step sizes) are read
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


def _interval(statistic, *samples, key, config: Config) -> Any:
    return reported_interval(statistic, *samples, key=key, reps=config.bootstrap_reps,
                             data=DATA_KIND)


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


@dataclass(frozen=True)
class Plan:
    """What a run compares (built by :func:`plan`).

    Attributes:
      methods: the methods, in the order they first appear.
      rows: ``{method: [K] traced rows}`` (``{field: value}`` of ``TRACED``); every method
        gets the same number ``K`` (the equal tuning budget).
      index: ``{method: [K] positions}`` of those configurations in the run's list of
        configurations (the ``config`` column of results.parquet; a grid's own order).
    """

    methods: tuple[str, ...]
    rows: dict[str, list[dict[str, Any]]]
    index: dict[str, list[int]]

    @property
    def num_configs(self) -> int:
        """``K``: configurations per method."""
        return len(self.rows[self.methods[0]])


def plan(config: Config, grid: Any = None) -> Plan:
    """The methods and the configurations each is tuned over.

    The rates come from a ``--grid learning_rate=...`` (or ``--sample``) when the grid
    sweeps ``learning_rate``, else from ``config.rates()`` (``lr_grid``; empty:
    ``learning_rate`` alone), crossed with the grid's other rows. The methods come from a
    ``--grid method=...`` (structural: one compiled program per method), else from
    ``config.method`` (``"all"``: the four). The grid is a product, so every method gets
    the same configurations; a sampled method (which would not) or ``"all"`` inside a
    method grid raises :class:`ConfigError` naming ``method``.

    Args:
      config: the run's config.
      grid: a :class:`rljax.grid.Grid` or None (a plain run).

    Returns:
      :class:`Plan`.
    """
    fields = tuple(grid.fields) if grid is not None else ()
    if grid is not None and "method" in grid.spec.get("sample", {}):
        raise ConfigError("method: give the methods with --grid method=...; a sampled method "
                          "would not give every method the same configurations")
    settings = [dict(r) for r in grid.rows] if grid is not None else [{}]
    if "learning_rate" not in fields:
        settings = [{**s, "learning_rate": r} for s in settings for r in config.rates()]
    if "method" not in fields:
        methods = METHODS if config.method == "all" else (config.method,)
        settings = [{"method": m, **s} for m in methods for s in settings]
    elif any(s["method"] == "all" for s in settings):
        raise ConfigError(f"method: a grid over method lists the methods themselves "
                          f"({', '.join(METHODS)}), not 'all'")
    rows: dict[str, list[dict[str, Any]]] = {}
    index: dict[str, list[int]] = {}
    for c, s in enumerate(settings):
        full = dataclasses.replace(config, **s)
        rows.setdefault(full.method, []).append({f: getattr(full, f) for f in TRACED})
        index.setdefault(full.method, []).append(c)
    return Plan(methods=tuple(rows), rows=rows, index=index)


def _runner(config: Config, method: str, rows: list[dict[str, Any]], split: Any,
            store: dict[str, Any], options: Any = None) -> Any:
    """``run_configs(indices, first_seed, num_seeds) -> pass@8 [len(indices), num_seeds]``
    for :func:`rljax.tune.tune`: one compiled program for ``method`` (built once, reused
    for the tuning and the evaluation seeds), its rates vmapped with the seeds. Every
    call's outputs are kept in ``store[phase]`` with the config indices."""
    sweep = Sweep(make_train(dataclasses.replace(config, method=method)),
                  base_seed=config.base_seed, block_size=config.block_size)

    def run_configs(indices, first_seed, num_seeds):
        indices = np.asarray(indices, np.int64)
        phase = "evaluation" if first_seed == split.evaluation_first else "tuning"
        start = time.perf_counter()
        result = sweep.run(int(num_seeds), first_seed=int(first_seed),
                           configs=ConfigTable.from_rows([rows[int(i)] for i in indices]),
                           desc=f"{NAME}:{method}:{phase}", options=options)
        store[phase] = {"indices": indices, "first_seed": int(first_seed),
                        "outputs": result.outputs,
                        "seconds": time.perf_counter() - start}
        return np.asarray(result.outputs["pass8"], np.float64)

    return run_configs


def run(config: Config, out_dir: Path, grid: Any = None,
        options: Any = None) -> dict[str, Any]:
    """Tune every method's rate on the tuning seeds, evaluate the winners on fresh seeds.

    Each method gets the same configurations (``K`` rates) and the same tuning seeds
    (ids ``0 .. tuning_seeds - 1``); the configuration with the highest mean pass@8 there
    is re-run on the evaluation seeds (ids ``tuning_seeds ..``; their banks are fresh
    draws too) and compared with uniform's winner on those seeds, pairwise
    (:func:`rljax.tune.equal_budget`). Writes results.parquet, summary.json, report.md,
    sensitivity.png and curriculum.png.

    Args:
      config: the study's config.
      out_dir: the run directory.
      grid: a :class:`rljax.grid.Grid` (``rljax run gdro --grid ...``) or None.

    Returns:
      The summary dict.
    """
    from rljax.tune import equal_budget, seed_split, tune

    the_plan = plan(config, grid)
    split = seed_split(tuning_seeds=config.tuning_seeds, evaluation_seeds=config.seeds,
                       first_seed=0)
    stores = {m: {} for m in the_plan.methods}
    runners = {m: _runner(config, m, the_plan.rows[m], split, stores[m], options)
               for m in the_plan.methods}
    keys = iter(jax.random.split(jax.random.key(config.base_seed + 5), 64))
    k = the_plan.num_configs
    reference = "uniform" if "uniform" in the_plan.methods else the_plan.methods[0]
    common = dict(split=split, statistic=STATISTIC, key=next(keys), reps=config.bootstrap_reps,
                  data=DATA_KIND)
    if len(the_plan.methods) > 1:
        cmp = equal_budget(runners, num_configs={m: k for m in the_plan.methods},
                           reference=reference, **common)
        results, differences = cmp.results, cmp.differences
    else:
        m = the_plan.methods[0]
        results, differences = {m: tune(runners[m], num_configs=k, **common)}, {}
    summary = _summarise(config, grid, the_plan, split, results, differences, stores,
                         reference, keys)
    io.write_parquet(out_dir / "results.parquet", _table(the_plan, split, stores))
    io.write_json(out_dir / "summary.json", summary)
    _plots(config, the_plan, results, stores, keys, out_dir)
    io.atomic_write_text(out_dir / "report.md", report_markdown(summary, config))
    return summary


def _winner(stores: dict[str, Any], m: str) -> dict[str, np.ndarray]:
    """Method ``m``'s winner on the evaluation seeds: ``{output: [E, ...]}``."""
    return {name: np.asarray(v)[0] for name, v in stores[m]["evaluation"]["outputs"].items()}


def _fixed_rate(config: Config, the_plan: Plan, results: dict[str, Any], reference: str,
                keys: Any) -> dict[str, Any] | None:
    """The configuration of ``config``'s own traced values (the old shared rate 8.0 by
    default) on the tuning seeds, where every method ran it: not selected, so its
    tuning-seed scores are unbiased. None when some method's grid lacks it."""
    own = {f: getattr(config, f) for f in TRACED}
    at = {}
    for m in the_plan.methods:
        hits = [c for c, row in enumerate(the_plan.rows[m])
                if all(np.float32(row[f]) == np.float32(own[f]) for f in TRACED)]
        if not hits:
            return None
        at[m] = np.asarray(results[m].tuning_scores, np.float64)[hits[0]]
    out: dict[str, Any] = {"learning_rate": config.learning_rate, "seeds": "tuning",
                           "pass8": {}, "pass8_ci": {}, "pass8_diff": {}, "pass8_diff_ci": {}}
    for m in the_plan.methods:
        iv = _interval(STATISTIC, at[m], key=next(keys), config=config)
        out["pass8"][m], out["pass8_ci"][m] = iv.point, [iv.low, iv.high]
        if m != reference:
            d = _interval("paired_difference", at[m], at[reference], key=next(keys),
                          config=config)
            out["pass8_diff"][m], out["pass8_diff_ci"][m] = d.point, [d.low, d.high]
    return out


def _summarise(config, grid, the_plan, split, results, differences, stores, reference,
               keys) -> dict[str, Any]:
    methods = the_plan.methods
    others = [m for m in methods if m != reference]
    won = {m: _winner(stores, m) for m in methods}
    scores = {m: np.asarray(results[m].evaluation_scores, np.float64) for m in methods}
    hard = {m: np.asarray(won[m]["hard_pass8"], np.float64) for m in methods}
    hard_iv = {m: _interval(STATISTIC, hard[m], key=next(keys), config=config) for m in methods}
    pvalues = {m: float(scipy.stats.ttest_rel(scores[m], scores[reference]).pvalue)
               for m in others}
    holm = (dict(zip(others, stats.holm([pvalues[m] for m in others]).adjusted.tolist(),
                     strict=True)) if others else {})
    rel = {m: _relative_gain(scores[m], scores[reference], key=next(keys), config=config)
           for m in others}
    rel_hard = {m: _relative_gain(hard[m], hard[reference], key=next(keys), config=config)
                for m in others}
    chosen = {m: the_plan.rows[m][results[m].best] for m in methods}
    mean_p0 = np.asarray(won[reference]["bank_mean_p0"], np.float64)
    hard_count = np.asarray(won[reference]["bank_hard_prompts"], np.float64)
    first = results[reference]
    diff_note = next(iter(differences.values())).note.rstrip(".") if differences else None
    return {
        "experiment": NAME,
        "methods": list(methods),
        "reference": reference,
        "protocol": {
            "statistic": STATISTIC,
            "selection": "highest mean pass@8 over the tuning seeds (ties: the lowest index)",
            "configs_per_method": {m: len(the_plan.rows[m]) for m in methods},
            "tuning_seed_ids": [split.tuning_first, split.tuning_first + split.tuning_count - 1],
            "evaluation_seed_ids": [split.evaluation_first,
                                    split.evaluation_first + split.evaluation_count - 1],
            "tuning_seeds": split.tuning_count, "evaluation_seeds": split.evaluation_count,
            "learning_rates": {m: [r["learning_rate"] for r in the_plan.rows[m]]
                               for m in methods},
            "grid": grid.record() if grid is not None else None,
            "holm": "Holm-adjusted over the comparisons with the reference",
        },
        "budget_rollouts_per_seed": config.budget,
        "bank": {"mode": config.bank,
                 "bank_seed": config.bank_seed if config.bank == "fixed" else None,
                 "prompts": config.num_prompts, "answers": config.num_answers,
                 "seeds": "evaluation",
                 "distinct_banks": int(np.unique(mean_p0).size),
                 "mean_p0": float(mean_p0.mean()),
                 "mean_p0_range": [float(mean_p0.min()), float(mean_p0.max())],
                 "hard_prompts": float(hard_count.mean()),
                 "hard_prompts_range": [int(hard_count.min()), int(hard_count.max())],
                 "hard_p0": config.hard_p0},
        "chosen_learning_rate": {m: chosen[m]["learning_rate"] for m in methods},
        "chosen_config": chosen,
        "tuning_pass8": {m: float(results[m].tuning_point) for m in methods},
        "pass8": {m: float(results[m].evaluation.point) for m in methods},
        "pass8_ci": {m: [float(results[m].evaluation.low), float(results[m].evaluation.high)]
                     for m in methods},
        "optimism": {m: float(results[m].optimism.point) for m in methods},
        "optimism_ci": {m: [float(results[m].optimism.low), float(results[m].optimism.high)]
                        for m in methods},
        "pass8_diff": {m: float(differences[m].point) for m in others},
        "pass8_diff_ci": {m: [float(differences[m].low), float(differences[m].high)]
                          for m in others},
        "pass8_diff_p": pvalues,
        "pass8_diff_p_holm": holm,
        "rel_gain": {m: rel[m]["point"] for m in others},
        "rel_gain_ci": {m: rel[m]["ci"] for m in others},
        "hard_pass8": {m: hard_iv[m].point for m in methods},
        "hard_pass8_ci": {m: [hard_iv[m].low, hard_iv[m].high] for m in methods},
        "hard_rel_gain": {m: rel_hard[m]["point"] for m in others},
        "hard_rel_gain_ci": {m: rel_hard[m]["ci"] for m in others},
        "tuning_curve": {m: {"learning_rate": [r["learning_rate"] for r in the_plan.rows[m]],
                             "pass8": np.asarray(results[m].tuning_scores, np.float64)
                             .mean(axis=1).tolist()} for m in methods},
        "fixed_rate": _fixed_rate(config, the_plan, results, reference, keys),
        "intervals": {
            "evaluation": {"method": first.evaluation.method,
                           "coverage": first.evaluation.coverage,
                           "note": first.evaluation.note.rstrip(".")},
            "optimism": {"method": first.optimism.method,
                         "note": str(first.optimism.note).rstrip(".")},
            "paired_difference": {"note": diff_note},
            "rel_gain": ({"method": rel[others[0]]["method"],
                          "coverage": rel[others[0]]["coverage"],
                          "coverage_of": "paired_difference"} if others else None),
            "hard": {"note": hard_iv[reference].note.rstrip(".")},
        },
        "rollouts_total": {m: float(np.mean(won[m]["rollouts"])) for m in methods},
        "updates": {m: float(np.mean(won[m]["updates"])) for m in methods},
        "signal_fraction": {m: float(np.nanmean(won[m]["signal"])) for m in methods},
        "seconds": {m: {p: stores[m][p]["seconds"] for p in ("tuning", "evaluation")}
                    for m in methods},
    }


def _table(the_plan: Plan, split: Any, stores: dict[str, Any]) -> pd.DataFrame:
    """results.parquet: one row per (phase, method, configuration, seed)."""
    parts = []
    for m in the_plan.methods:
        for phase in ("tuning", "evaluation"):
            entry = stores[m][phase]
            out = entry["outputs"]
            k, s = np.asarray(out["pass8"]).shape
            cols: dict[str, Any] = {
                "phase": np.full(k * s, phase),
                "method": np.full(k * s, m),
                "config": np.repeat([the_plan.index[m][int(i)] for i in entry["indices"]], s),
                "seed": np.tile(np.arange(entry["first_seed"], entry["first_seed"] + s), k),
            }
            for f in TRACED:
                cols[f] = np.repeat([the_plan.rows[m][int(i)][f] for i in entry["indices"]], s)
            for name in ("pass8", "hard_pass8", "rollouts", "updates", "bank_mean_p0",
                         "bank_hard_prompts"):
                cols[name] = np.asarray(out[name]).reshape(k * s)
            parts.append(pd.DataFrame(cols))
    return pd.concat(parts, ignore_index=True)


def _plots(config: Config, the_plan: Plan, results: dict[str, Any], stores: dict[str, Any],
           keys: Any, out_dir: Path) -> None:
    with warnings.catch_warnings():  # steps after every seed's budget ran out are NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        _draw_sensitivity(config, the_plan, results, keys, out_dir)
        _draw_curriculum({m: _winner(stores, m) for m in the_plan.methods}, config, out_dir)


def _draw_sensitivity(config: Config, the_plan: Plan, results: dict[str, Any], keys: Any,
                      out_dir: Path) -> None:
    """sensitivity.png: mean pass@8 over the tuning seeds against the learning rate (the
    other traced fields at each method's winner), one line and 95 % band per method."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    from rljax.tune import plot_sensitivity, sensitivity_curve, slice_at

    curves = {}
    for m in the_plan.methods:
        rows = the_plan.rows[m]
        mask = slice_at(rows, "learning_rate", rows[results[m].best])
        curves[m] = sensitivity_curve(
            np.asarray(results[m].tuning_scores, np.float64),
            np.asarray([r["learning_rate"] for r in rows], np.float64), mask=mask,
            statistic=STATISTIC, key=next(keys), reps=config.bootstrap_reps, data=DATA_KIND)
    fig = MplFigure(figsize=(6, 4), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    plot_sensitivity(ax, curves, xlabel="learning rate", log_x=True,
                     ylabel=f"pass@{config.pass_k} (mean over {config.tuning_seeds} tuning seeds)")
    ax.set_title("learning-rate sensitivity (tuning seeds)")
    io.write_figure(out_dir / "sensitivity.png", fig)


def _draw_curriculum(won: dict[str, Any], config: Config, out_dir: Path) -> None:
    """curriculum.png: signal fraction and the samplers' allocations over training (the
    winners, mean over the evaluation seeds)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    panels = [(m, key, ylabel, title) for m, key, ylabel, title in (
        ("prompt_gdro", "bin_weights", "sampling probability",
         "Prompt-GDRO bin weights (0 = hardest)"),
        ("rollout_gdro", "bin_rollouts", "rollouts per prompt", "Rollout-GDRO allocation"),
    ) if m in won]
    fig = MplFigure(figsize=(4 * (1 + len(panels)), 3.8), layout="constrained")
    FigureCanvasAgg(fig)
    axes = np.atleast_1d(fig.subplots(1, 1 + len(panels)))
    for m, out in won.items():
        axes[0].plot(np.nanmean(out["signal"], axis=0), label=m)
    axes[0].set(xlabel="step", ylabel="share of rows with signal", title="signal fraction")
    axes[0].legend(fontsize=8)
    edges = (0.0, *config.edges(), 1.0)
    names = [f"[{edges[b]:g}, {edges[b + 1]:g})" for b in range(len(edges) - 1)]
    for ax, (method, key, ylabel, title) in zip(axes[1:], panels, strict=True):
        per_bin = np.nanmean(won[method][key], axis=0)  # [steps, bins], mean over seeds
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
    return (f"a bank of {shape} drawn per seed ({bank['distinct_banks']} distinct banks on "
            f"the evaluation seeds; mean initial success {format_number(bank['mean_p0'])}, "
            f"range {format_number(lo)}-{format_number(hi)}; {bank['hard_prompts']:.1f} "
            f"prompts with p0 < {config.hard_p0} on average, {hlo}-{hhi})")


def _signed(x: float, digits: int = 4) -> str:
    return f"{x:+.{digits}f}"


def reading(summary: dict[str, Any], config: Config) -> str:
    """A short plain-language reading that follows from the summary's numbers: each
    method's tuned rate, its difference from the reference on the evaluation seeds
    (called a difference only where the Holm-adjusted p-value is below 0.05) and the
    selection's optimism."""
    ref = summary["reference"]
    methods = summary["methods"]
    rates = ", ".join(f"{m} {format_number(summary['chosen_learning_rate'][m])}"
                      for m in methods)
    k = summary["protocol"]["configs_per_method"][methods[0]]
    parts = [f"With {k} configurations per method on the same "
             f"{summary['protocol']['tuning_seeds']} tuning seeds, the tuned learning "
             f"rates are {rates}."]
    verdicts = []
    for m in summary["pass8_diff"]:
        d, (lo, hi) = summary["pass8_diff"][m], summary["pass8_diff_ci"][m]
        p = summary["pass8_diff_p_holm"][m]
        if p < 0.05:
            word = "above" if d > 0 else "below"
            verdicts.append(f"{m} is {word} {ref} by {_signed(d)} [{_signed(lo)}, "
                            f"{_signed(hi)}] (Holm-adjusted p = {p:.2g})")
        else:
            verdicts.append(f"{m} differs from {ref} by {_signed(d)} [{_signed(lo)}, "
                            f"{_signed(hi)}], not detectably (Holm-adjusted p = {p:.2g})")
    if verdicts:
        parts.append(f"On the {summary['protocol']['evaluation_seeds']} fresh evaluation "
                     f"seeds (fresh banks too), pass@{config.pass_k} of the tuned winners: "
                     + "; ".join(verdicts) + ".")
    opt = summary["optimism_ci"]
    lo = min(v[0] for v in opt.values())
    hi = max(v[1] for v in opt.values())
    parts.append(f"The selection's optimism (tuning-seed score minus evaluation score of "
                 f"the winner) lies within [{_signed(lo)}, {_signed(hi)}] for every method.")
    fixed = summary["fixed_rate"]
    if fixed is not None and fixed["pass8_diff"]:
        at = "; ".join(f"{m} {_signed(fixed['pass8_diff'][m])} "
                       f"[{_signed(fixed['pass8_diff_ci'][m][0])}, "
                       f"{_signed(fixed['pass8_diff_ci'][m][1])}]"
                       for m in fixed["pass8_diff"])
        chosen = summary["chosen_learning_rate"].values()
        low, high = (x / fixed["learning_rate"] for x in (min(chosen), max(chosen)))
        parts.append(f"At the one shared rate {format_number(fixed['learning_rate'])} of the "
                     f"earlier protocol (the tuned rates are {format_number(low)}-"
                     f"{format_number(high)} times it; tuning seeds) the differences from "
                     f"{ref} were: {at}.")
    parts.append("These figures are about this implementation of the samplers on this "
                 "toy (a tabular policy: the prompts share no parameters), not about the "
                 "papers' language models.")
    return " ".join(parts)


def report_markdown(summary: dict[str, Any], config: Config) -> str:
    """report.md: the equal-budget table, the reading and the procedure."""
    ref = summary["reference"]
    figures = []
    for m in summary["methods"]:
        rate = format_number(summary["chosen_learning_rate"][m])
        figures.append(Figure(f"{m}: pass@{config.pass_k}, evaluation seeds (rate {rate})",
                              summary["pass8"][m], *summary["pass8_ci"][m],
                              f"tuning seeds {format_number(summary['tuning_pass8'][m])}; "
                              f"{summary['updates'][m]:.0f} updates"))
        figures.append(Figure(f"{m}: selection optimism", summary["optimism"][m],
                              *summary["optimism_ci"][m], "tuning minus evaluation score"))
        figures.append(Figure(f"{m}: hard-prompt pass@{config.pass_k}",
                              summary["hard_pass8"][m], *summary["hard_pass8_ci"][m],
                              f"p0 < {config.hard_p0}, evaluation seeds"))
    for m in summary["pass8_diff"]:
        figures.append(Figure(f"{m} minus {ref}", summary["pass8_diff"][m],
                              *summary["pass8_diff_ci"][m],
                              f"paired, evaluation seeds; Holm-adjusted p = "
                              f"{summary['pass8_diff_p_holm'][m]:.2g}"))
        figures.append(Figure(f"{m}: relative gain over {ref}", summary["rel_gain"][m],
                              *summary["rel_gain_ci"][m], "ratio of means - 1, paired"))
    fixed = summary["fixed_rate"]
    if fixed is not None:
        for m in summary["methods"]:
            figures.append(Figure(f"{m} at rate {format_number(fixed['learning_rate'])}",
                                  fixed["pass8"][m], *fixed["pass8_ci"][m], "tuning seeds"))
    iv = summary["intervals"]
    proto = summary["protocol"]
    curve = "\n".join(
        f"| {m} | " + " | ".join(format_number(v) for v in summary["tuning_curve"][m]["pass8"])
        + " |" for m in summary["methods"])
    rates = summary["tuning_curve"][summary["methods"][0]]["learning_rate"]
    rel = iv["rel_gain"]
    rel_text = "" if rel is None else (
        f" Relative gains (ratio of means - 1): paired {rel['method']} bootstrap "
        f"({config.bootstrap_reps} resamples); the coverage that applies is the paired "
        f"difference's, measured {format_number(rel['coverage'])}.")
    return "\n".join([
        f"# {NAME}", "", DESCRIPTION + ".", "",
        f"Equal tuning budget: every method tried the same {proto['configs_per_method'][ref]} "
        f"configurations on the same tuning seeds (ids {proto['tuning_seed_ids'][0]}-"
        f"{proto['tuning_seed_ids'][1]}); each winner was re-run on fresh evaluation seeds "
        f"(ids {proto['evaluation_seed_ids'][0]}-{proto['evaluation_seed_ids'][1]}). "
        f"{_bank_sentence(summary, config).capitalize()}; budget "
        f"{summary['budget_rollouts_per_seed']:,} rollouts per seed for every method.", "",
        figures_table(figures), "",
        "Mean pass@8 on the tuning seeds per learning rate (sensitivity.png):", "",
        "| method | " + " | ".join(format_number(r) for r in rates) + " |",
        "|---|" + "---|" * len(rates), curve, "",
        "## Reading", "", reading(summary, config), "",
        "## Procedure", "",
        f"Selection: {proto['selection']}. Evaluation scores: {iv['evaluation']['note']}. "
        f"Optimism: {iv['optimism']['note']}. Paired differences from {ref} on the "
        f"evaluation seeds (the same seed ids, so the same banks): "
        f"{iv['paired_difference']['note']}; p-values are paired t-tests, "
        f"{proto['holm']}. Hard prompts: {iv['hard']['note']}.{rel_text} pass@k is exact "
        "for the tabular policy, 1 - (1 - p_i)^k averaged over prompts. Dynamic sampling's "
        "dropped groups count against its budget. curriculum.png: the winners' signal "
        "fraction, Prompt-GDRO bin weights and Rollout-GDRO allocation.", "",
    ])
