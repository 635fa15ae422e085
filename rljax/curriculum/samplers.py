"""Prompt and rollout allocation for GRPO on a bank of ``P`` prompts.

A sampler is an ``(init, select, update)`` triple of pure functions (optax's shape)::

    state = sampler.init()                      # or init(difficulty_state)
    selection = sampler.select(state, key)      # [M] ids, [M] rollouts, [M, N] mask
    rewards = ...                               # [M, N] 0/1, ignored where ~mask
    state, info = sampler.update(state, selection, rewards)

Shapes are fixed: ``M`` rows, ``N = n_max`` rollout slots per row; row ``i`` uses slots
``j < rollouts[i]``. ``update`` must get the same ``state`` that ``select`` saw. Every
sampler's state has a ``difficulty: DifficultyState`` field, updated with
``successes_i = #{j : mask_ij and rewards_ij > 0.5}`` and ``attempts_i = rollouts_i``.

Samplers:

* ``uniform_sampler``: ``M`` prompts uniform with replacement, ``G`` rollouts each.
* ``dynamic_sampler`` + ``dynamic_filter``: DAPO's dynamic sampling (Yu et al., 2025,
  arXiv:2503.14476, §3.2): over-sample ``oversample * M`` candidate groups and keep the
  first ``M`` whose rewards are not all equal (a group of equal rewards has zero
  group-relative advantage). Every examined group was generated and is paid for.
* ``prompt_gdro_sampler``: Prompt-GDRO, group distributionally robust optimisation
  (Sagawa et al., 2020, "Distributionally Robust Neural Networks", ICLR) over difficulty
  bins as groups, in the spirit of recent GDRO curricula for RL of LLM reasoning: an
  adversary keeps a multiplicative-weights distribution ``q`` over bins (Hedge: Freund &
  Schapire, 1997) fed by importance-weighted bandit feedback (EXP3: Auer et al., 2002) and
  up-weights bins where the policy's loss is high. Per step, with ``B`` bins, ``M`` rows::

      q        = softmax(log_weights)
      q_mix    = (1 - exploration) * q + exploration / B                  (used to sample)
      p_eff_b  = P(a row's prompt lies in bin b)
               = q_mix_b + (sum_{empty b'} q_mix_b') * |b| / P   if |b| > 0, else 0
      l_i      = 1 - mean_{j : mask_ij} rewards_ij                         (loss of row i)
      Lhat_b   = sum_{i : bin(i) = b} l_i / (M * p_eff_b)    (0 where p_eff_b = 0)
      loss_ema = (1 - ema) * loss_ema + ema * Lhat                       (every bin, every step)
      log_weights = log_softmax(log_weights + step_size * loss_ema)

  ``Lhat_b`` is unbiased for bin ``b``'s mean loss (``E[#rows in b] = M p_eff_b`` and those
  rows' prompts are uniform in the bin). Bins not observed in a step therefore enter with
  ``Lhat_b = 0``: skipping them instead would condition on being observed and bias the EMA
  upward for rarely drawn bins. ``p_eff`` differs from ``q_mix`` only when a bin is empty
  (its rows fall back to uniform prompts). ``loss_ema`` starts at 0 and ``log_weights``
  at ``-log B`` (uniform).
* ``rollout_gdro_sampler``: Rollout-GDRO: prompts uniform, the number of rollouts per row
  chosen per bin by the square-root rule. With bin weights ``w_b`` (share of rows), bin
  success probability ``p_b`` and ``sigma_b = sqrt(p_b (1 - p_b))``, the variance of a
  row's group-mean reward (the GRPO baseline / advantage centre) is ``sigma_b^2 / n_b``.
  Minimise the total variance at a fixed mean number of rollouts ``budget``::

      min_n  sum_b w_b sigma_b^2 / n_b   s.t.  sum_b w_b n_b = budget
      L(n, lambda) = sum_b w_b sigma_b^2 / n_b + lambda (sum_b w_b n_b - budget)
      dL/dn_b = -w_b sigma_b^2 / n_b^2 + lambda w_b = 0   =>   n_b = sigma_b / sqrt(lambda)

  (``sqrt(lambda) = sum_b w_b sigma_b / budget`` without bounds). The problem is convex
  and separable, so with box constraints ``n_min <= n_b <= n_max`` the KKT point is
  ``n_b = clip(sigma_b / sqrt(lambda), n_min, n_max)`` for the ``lambda`` meeting the
  budget. Instead of solving for ``lambda`` each step, the shadow price is kept in the
  state as ``log_price = log(lambda)`` and adjusted by an integral controller::

      log_price <- log_price + price_step_size * (mean_i rollouts_i - budget) / budget

  on the realised allocation. Summed over ``T`` steps this telescopes:
  ``mean_t mean_i rollouts = budget + budget * (log_price_T - log_price_0) /
  (price_step_size * T)``, so the long-run mean allocation equals the budget whenever the
  price stays bounded. Here ``p_b`` is the mean estimate of the prompts in bin ``b``,
  ``sigma_b = max(sqrt(p_b (1 - p_b)), 0.05)`` (solved or hopeless bins still get
  ``n_min``) and the continuous ``n_b`` is rounded at random,
  ``floor(n_b) + Bernoulli(n_b - floor(n_b))``, so the expected allocation is exact.
  ``log_price`` starts at ``2 log(mean_p sigma_p / budget)`` (the unclipped solution for
  the initial estimates).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
from flax import struct

from rljax.curriculum.difficulty import DifficultyClassifier, DifficultyState
from rljax.types import Array, PRNGKey

SIGMA_FLOOR = 0.05


@struct.dataclass
class Selection:
    """One step's rows.

    Attributes:
      prompt_ids: ``[M]`` int32 prompt of each row.
      rollouts: ``[M]`` int32 in ``[1, n_max]``: rollouts granted to each row.
      mask: ``[M, n_max]`` bool: slot ``j`` of row ``i`` is used iff ``j < rollouts[i]``.
    """

    prompt_ids: Array
    rollouts: Array
    mask: Array


class Sampler(NamedTuple):
    """``init(difficulty_state=None) -> state``; ``select(state, key) -> Selection``;
    ``update(state, selection, rewards [M, n_max]) -> (state, info)``."""

    init: Callable[..., Any]
    select: Callable[[Any, PRNGKey], Selection]
    update: Callable[[Any, Selection, Array], tuple[Any, dict[str, Array]]]


@struct.dataclass
class UniformState:
    """State of ``uniform_sampler`` and ``dynamic_sampler``: the classifier's
    :class:`DifficultyState` (per-prompt arrays ``[P]`` and ring buffers ``[P, W]``)."""

    difficulty: DifficultyState


@struct.dataclass
class PromptGDROState:
    """State of ``prompt_gdro_sampler``: ``log_weights``, ``loss_ema`` are ``[num_bins]``."""

    difficulty: DifficultyState
    log_weights: Array
    loss_ema: Array


@struct.dataclass
class RolloutGDROState:
    """State of ``rollout_gdro_sampler``: ``log_price`` is a scalar ``log(lambda)``."""

    difficulty: DifficultyState
    log_price: Array


# --------------------------------------------------------------------------------------
# Shared pieces.
# --------------------------------------------------------------------------------------


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name}: must be an int >= {low}, got {value!r}")


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _full_selection(prompt_ids: Array, group_size: int) -> Selection:
    m = prompt_ids.shape[0]
    return Selection(prompt_ids=prompt_ids.astype(jnp.int32),
                     rollouts=jnp.full((m,), group_size, jnp.int32),
                     mask=jnp.ones((m, group_size), bool))


def _uniform_ids(key: PRNGKey, num_rows: int, num_prompts: int) -> Array:
    return jax.random.randint(key, (num_rows,), 0, num_prompts, dtype=jnp.int32)


def _check_rewards(selection: Selection, rewards: Array) -> None:
    chex.assert_rank(rewards, 2)
    chex.assert_equal_shape([rewards, selection.mask])


def _record(classifier: DifficultyClassifier, difficulty: DifficultyState,
            selection: Selection, rewards: Array, valid: Array | None = None
            ) -> DifficultyState:
    """Classifier update with ``successes = #(mask & rewards > 0.5)``, ``attempts = rollouts``."""
    successes = jnp.sum(selection.mask & (rewards > 0.5), axis=1).astype(jnp.int32)
    return classifier.update(difficulty, selection.prompt_ids, successes, selection.rollouts,
                             valid)


def _init_difficulty(classifier: DifficultyClassifier,
                     difficulty_state: DifficultyState | None) -> DifficultyState:
    return classifier.init() if difficulty_state is None else difficulty_state


# --------------------------------------------------------------------------------------
# Uniform and DAPO dynamic sampling.
# --------------------------------------------------------------------------------------


def uniform_sampler(classifier: DifficultyClassifier, prompts_per_step: int,
                    group_size: int) -> Sampler:
    """``M = prompts_per_step`` prompts uniform with replacement, ``group_size`` rollouts each.

    ``select`` gives a :class:`Selection` with ``prompt_ids [M]``, ``rollouts [M]`` (all
    ``group_size``) and ``mask [M, group_size]``; ``update`` takes rewards
    ``[M, group_size]``. ``info`` is empty.
    """
    _check_int("prompts_per_step", prompts_per_step, 1)
    _check_int("group_size", group_size, 1)

    def init(difficulty_state=None):
        return UniformState(difficulty=_init_difficulty(classifier, difficulty_state))

    def select(state, key):
        del state
        ids = _uniform_ids(key, prompts_per_step, classifier.num_prompts)
        return _full_selection(ids, group_size)

    def update(state, selection, rewards):
        _check_rewards(selection, rewards)
        return UniformState(_record(classifier, state.difficulty, selection, rewards)), {}

    return Sampler(init, select, update)


def _has_signal(rewards: Array, mask: Array) -> Array:
    """``[R, G] -> [R]``: the row's masked rewards are not all equal (needs 2 used slots)."""
    used = jnp.where(mask, rewards, jnp.nan)
    return jnp.any(mask, axis=1) & (jnp.nanmax(used, axis=1) > jnp.nanmin(used, axis=1))


def _filter(rewards: Array, mask: Array, prompts_per_step: int):
    chex.assert_rank([rewards, mask], 2)
    chex.assert_equal_shape([rewards, mask])
    mask = mask.astype(bool)
    signal = _has_signal(rewards, mask)
    seen = jnp.cumsum(signal.astype(jnp.int32))  # rows with signal among rows 0..i
    keep = signal & (seen <= prompts_per_step)
    filled = seen[-1] >= prompts_per_step
    # examined: rows up to and including the prompts_per_step-th row with signal.
    examined = jnp.where(filled, (seen - signal) < prompts_per_step, True)
    rollouts_used = jnp.sum(jnp.where(examined, jnp.sum(mask, axis=1), 0)).astype(jnp.int32)
    return keep, rollouts_used, filled, examined


def dynamic_filter(rewards: Array, mask: Array, prompts_per_step: int
                   ) -> tuple[Array, Array, Array]:
    """DAPO's dynamic-sampling filter (Yu et al., 2025, arXiv:2503.14476, §3.2).

    Rows are examined in order, as if drawn one after another from a queue. A row has
    signal when its masked rewards are not all equal (a row with fewer than two used slots
    has none). ``keep`` marks the first ``prompts_per_step`` rows with signal; sampling
    stops after the last of them, so ``rollouts_used`` counts the used slots of all rows up
    to and including it (of all rows, with ``filled`` False, when fewer rows have signal).

    Args:
      rewards: ``[Mc, G]`` rewards (ignored where ``~mask``).
      mask: ``[Mc, G]`` bool used slots.
      prompts_per_step: static int ``M >= 1``.

    Returns:
      ``keep [Mc] bool``, ``rollouts_used`` int32 scalar, ``filled`` bool scalar.
    """
    _check_int("prompts_per_step", prompts_per_step, 1)
    keep, rollouts_used, filled, _ = _filter(rewards, mask, prompts_per_step)
    return keep, rollouts_used, filled


def dynamic_sampler(classifier: DifficultyClassifier, prompts_per_step: int, group_size: int,
                    oversample: int = 4) -> Sampler:
    """DAPO dynamic sampling: ``oversample * prompts_per_step`` uniform candidate rows.

    ``select`` returns ``Mc = oversample * M`` rows of ``group_size`` rollouts; the trainer
    keeps ``dynamic_filter(rewards, mask, M)``'s rows. ``update`` records every examined
    row in the classifier (they were generated) and returns ``info`` = ``{"rollouts_used":
    int32, "filled": bool, "kept": [Mc] bool}`` (``dynamic_filter``'s outputs).
    """
    _check_int("prompts_per_step", prompts_per_step, 1)
    _check_int("group_size", group_size, 1)
    _check_int("oversample", oversample, 1)
    # the candidates are drawn exactly as a uniform sampler of oversample * M rows
    candidates = uniform_sampler(classifier, oversample * prompts_per_step, group_size)

    def update(state, selection, rewards):
        _check_rewards(selection, rewards)
        keep, used, filled, examined = _filter(rewards, selection.mask, prompts_per_step)
        difficulty = _record(classifier, state.difficulty, selection, rewards, examined)
        return UniformState(difficulty), {"rollouts_used": used, "filled": filled,
                                          "kept": keep}

    return Sampler(candidates.init, candidates.select, update)


# --------------------------------------------------------------------------------------
# Prompt-GDRO.
# --------------------------------------------------------------------------------------


def _bin_counts(classifier: DifficultyClassifier, bins: Array) -> Array:
    return jnp.zeros((classifier.num_bins,), jnp.int32).at[bins].add(1, mode="drop")


def _uniform_in_bin(key: PRNGKey, bins: Array, row_bins: Array, num_bins: int) -> Array:
    """For each row, a prompt uniform among those with ``bins == row_bins[i]`` (uniform over
    all prompts where that bin is empty)."""
    num_prompts = bins.shape[0]
    order = jnp.argsort(bins, stable=True).astype(jnp.int32)  # prompts grouped by bin
    counts = jnp.zeros((num_bins,), jnp.int32).at[bins].add(1)
    starts = jnp.cumsum(counts) - counts
    count = counts[row_bins]
    u = jax.random.uniform(key, row_bins.shape)
    size = jnp.where(count > 0, count, num_prompts)
    offset = jnp.minimum(jnp.floor(u * size).astype(jnp.int32), size - 1)
    return jnp.where(count > 0, order[starts[row_bins] + offset], offset)


def prompt_gdro_sampler(classifier: DifficultyClassifier, prompts_per_step: int,
                        group_size: int, *, step_size: float = 0.1, ema: float = 0.2,
                        exploration: float = 0.1) -> Sampler:
    """Prompt-GDRO: a Hedge/EXP3 adversary over difficulty bins chooses where prompts come
    from (exact rule in the module docstring).

    ``select`` draws each row's bin from ``q_mix`` and a prompt uniformly in that bin (over
    all prompts if the bin is empty), ``group_size`` rollouts each. ``info`` =
    ``{"bin_weights": q_mix [B] used for this step's selection, "bin_loss": updated
    loss_ema [B]}``.

    Args:
      classifier: the difficulty classifier (defines the bins).
      prompts_per_step: ``M``.
      group_size: rollouts per row.
      step_size: Hedge step size ``> 0``.
      ema: EMA rate of the loss estimate, in ``(0, 1]``.
      exploration: uniform mixing in ``[0, 1)``.
    """
    _check_int("prompts_per_step", prompts_per_step, 1)
    _check_int("group_size", group_size, 1)
    if _is_number(step_size) and not step_size > 0:
        raise ValueError(f"step_size: must be > 0, got {step_size!r}")
    if _is_number(ema) and not 0.0 < ema <= 1.0:
        raise ValueError(f"ema: must be in (0, 1], got {ema!r}")
    if _is_number(exploration) and not 0.0 <= exploration < 1.0:
        raise ValueError(f"exploration: must be in [0, 1), got {exploration!r}")
    num_bins = classifier.num_bins

    def mixture(state):
        q = jax.nn.softmax(state.log_weights)
        return (1.0 - exploration) * q + exploration / num_bins

    def init(difficulty_state=None):
        return PromptGDROState(
            difficulty=_init_difficulty(classifier, difficulty_state),
            log_weights=jnp.full((num_bins,), -jnp.log(num_bins), jnp.float32),
            loss_ema=jnp.zeros((num_bins,), jnp.float32),
        )

    def select(state, key):
        bin_key, prompt_key = jax.random.split(key)
        q_mix = mixture(state)
        row_bins = jax.random.categorical(bin_key, jnp.log(q_mix), shape=(prompts_per_step,))
        ids = _uniform_in_bin(prompt_key, state.difficulty.bin, row_bins, num_bins)
        return _full_selection(ids, group_size)

    def update(state, selection, rewards):
        _check_rewards(selection, rewards)
        mask = selection.mask
        q_mix = mixture(state)
        counts = _bin_counts(classifier, state.difficulty.bin)
        empty = counts == 0
        empty_mass = jnp.sum(jnp.where(empty, q_mix, 0.0))
        p_eff = jnp.where(empty, 0.0, q_mix + empty_mass * counts / classifier.num_prompts)
        used = jnp.maximum(jnp.sum(mask, axis=1), 1)
        row_loss = 1.0 - jnp.sum(jnp.where(mask, rewards, 0.0), axis=1) / used
        row_bins = state.difficulty.bin[selection.prompt_ids]
        loss_sum = jnp.zeros((num_bins,), jnp.float32).at[row_bins].add(row_loss)
        m = selection.prompt_ids.shape[0]
        loss_hat = jnp.where(p_eff > 0, loss_sum / (m * jnp.where(p_eff > 0, p_eff, 1.0)), 0.0)
        loss_ema = (1.0 - ema) * state.loss_ema + ema * loss_hat
        log_weights = jax.nn.log_softmax(state.log_weights + step_size * loss_ema)
        new_state = PromptGDROState(
            difficulty=_record(classifier, state.difficulty, selection, rewards),
            log_weights=log_weights, loss_ema=loss_ema)
        return new_state, {"bin_weights": q_mix, "bin_loss": loss_ema}

    return Sampler(init, select, update)


# --------------------------------------------------------------------------------------
# Rollout-GDRO.
# --------------------------------------------------------------------------------------


def _sigma(p: Array) -> Array:
    return jnp.maximum(jnp.sqrt(jnp.clip(p * (1.0 - p), 0.0, None)), SIGMA_FLOOR)


def rollout_gdro_sampler(classifier: DifficultyClassifier, prompts_per_step: int, *,
                         n_min: int, n_max: int, budget: float,
                         price_step_size: float = 0.5) -> Sampler:
    """Rollout-GDRO: uniform prompts, per-bin rollouts by the square-root rule with a
    shadow-price controller (derivation and exact rules in the module docstring).

    ``n_b = clip(sigma_b * exp(-log_price / 2), n_min, n_max)``, randomly rounded per row;
    rows have ``n_max`` slots. ``info`` = ``{"bin_rollouts": [B] mean rollouts of this
    step's rows in each bin (0 for bins without rows), "mean_rollouts": scalar mean over
    rows, "log_price": the updated price}``.

    Args:
      classifier: the difficulty classifier (defines the bins and ``p_b``).
      prompts_per_step: ``M``.
      n_min: fewest rollouts per row, ``>= 1``.
      n_max: most rollouts per row (static: the width of the mask), ``>= n_min``.
      budget: target mean rollouts per row, in ``[n_min, n_max]``.
      price_step_size: controller gain ``> 0``.
    """
    _check_int("prompts_per_step", prompts_per_step, 1)
    _check_int("n_min", n_min, 1)
    if isinstance(n_max, bool) or not isinstance(n_max, numbers.Integral) or n_min > n_max:
        raise ValueError(f"n_min: must be <= n_max (an int), got n_min={n_min!r}, "
                         f"n_max={n_max!r}")
    if _is_number(budget) and not n_min <= budget <= n_max:
        raise ValueError(f"budget: must be in [n_min, n_max] = [{n_min}, {n_max}], "
                         f"got {budget!r}")
    if _is_number(price_step_size) and not price_step_size > 0:
        raise ValueError(f"price_step_size: must be > 0, got {price_step_size!r}")
    num_bins = classifier.num_bins

    def bin_rollouts(state):
        """Continuous ``n_b`` ``[B]``."""
        difficulty = state.difficulty
        counts = _bin_counts(classifier, difficulty.bin)
        total = jnp.zeros((num_bins,), jnp.float32).at[difficulty.bin].add(difficulty.estimate)
        p = jnp.where(counts > 0, total / jnp.maximum(counts, 1), classifier.prior)
        n = _sigma(p) * jnp.exp(-0.5 * state.log_price)
        return jnp.clip(n, n_min, n_max)

    def init(difficulty_state=None):
        difficulty = _init_difficulty(classifier, difficulty_state)
        sigma = jnp.mean(_sigma(difficulty.estimate))
        return RolloutGDROState(difficulty=difficulty,
                                log_price=(2.0 * jnp.log(sigma / budget)).astype(jnp.float32))

    def select(state, key):
        prompt_key, round_key = jax.random.split(key)
        ids = _uniform_ids(prompt_key, prompts_per_step, classifier.num_prompts)
        n = bin_rollouts(state)[state.difficulty.bin[ids]]
        base = jnp.floor(n)
        extra = jax.random.uniform(round_key, n.shape) < (n - base)
        rollouts = jnp.clip(base.astype(jnp.int32) + extra, n_min, n_max).astype(jnp.int32)
        mask = jnp.arange(n_max)[None, :] < rollouts[:, None]
        return Selection(prompt_ids=ids, rollouts=rollouts, mask=mask)

    def update(state, selection, rewards):
        _check_rewards(selection, rewards)
        rollouts = selection.rollouts.astype(jnp.float32)
        mean_rollouts = jnp.mean(rollouts)
        log_price = state.log_price + price_step_size * (mean_rollouts - budget) / budget
        row_bins = state.difficulty.bin[selection.prompt_ids]
        per_bin = jnp.zeros((num_bins,), jnp.float32).at[row_bins].add(rollouts)
        rows = jnp.zeros((num_bins,), jnp.float32).at[row_bins].add(1.0)
        new_state = RolloutGDROState(
            difficulty=_record(classifier, state.difficulty, selection, rewards),
            log_price=log_price.astype(jnp.float32))
        info = {"bin_rollouts": jnp.where(rows > 0, per_bin / jnp.maximum(rows, 1.0), 0.0),
                "mean_rollouts": mean_rollouts, "log_price": new_state.log_price}
        return new_state, info

    return Sampler(init, select, update)
