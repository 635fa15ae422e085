"""Tuning that does not fool itself: tuning seeds, fresh evaluation seeds, equal budgets.

Picking the best of ``K`` configurations on ``T`` seeds and reporting its score on the same
seeds overstates it: the winner is partly the configuration whose seeds happened to be
lucky (the winner's curse; Patterson et al. 2024, "Empirical design in reinforcement
learning", JMLR 25, Sec. 5). The protocol here:

1. :func:`seed_split` cuts the seed ids into **tuning** seeds and disjoint **evaluation**
   seeds.
2. :func:`tune` runs every configuration on the tuning seeds, :func:`select_best` picks the
   winner on them, and only the winner is run again on the evaluation seeds. Its reported
   score is the evaluation-seed statistic with the interval of
   :func:`rljax.stats.reported.reported_interval` (method and coverage from the measured
   table).
3. The **optimism** ``tuning statistic - evaluation statistic`` of the winner (sign flipped
   when lower is better, so that positive always means "tuning flattered the winner") is
   reported with :func:`optimism_interval`.
4. :func:`equal_budget` tunes several algorithms with the same number of configurations
   and seeds and compares the winners on the same evaluation seeds with a paired interval.
5. :func:`sensitivity_curve` / :func:`plot_sensitivity` draw score against one
   hyperparameter with 95 % bands, one line per algorithm (Patterson et al. 2024, Sec. 6).

**What the optimism interval covers** (formula, coverage): see
:mod:`rljax.stats.optimism` (re-exported here). It targets the winner's realized optimism
``t_b - theta_b`` and the expected optimism given the winner; the note of every
:class:`Optimism` quotes its measured coverage (:data:`OPTIMISM_COVERAGE`). On skewed data
the mean's coverage is 0.83 at ``T = E = 8`` and 0.85 at 16: with 10 % failing seeds, 8
fresh seeds see no failure 43 % of the time, and no interval from them can see a tail they
did not sample (run more seeds).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

import jax
import numpy as np

from rljax.stats._validation import check_key, check_reps
from rljax.stats.optimism import (
    OPTIMISM_COVERAGE,
    STATISTICS,
    Optimism,
    check_statistic,
    optimism_interval,
    optimism_note,
    statistic_np,
)
from rljax.stats.reported import ReportedInterval, reported_interval


def _check_count(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise ValueError(f"{name}: must be an integer >= {low}, got {value!r}")
    return int(value)


# ----------------------------------------------------------------------------- seeds


@dataclass(frozen=True)
class SeedSplit:
    """Tuning seeds and disjoint evaluation seeds, as two ranges of seed ids.

    Attributes:
      tuning_first, tuning_count: tuning seed ids ``tuning_first .. + tuning_count - 1``.
      evaluation_first, evaluation_count: evaluation seed ids likewise.

    The properties :attr:`tuning_ids` and :attr:`evaluation_ids` give ``[T]`` and ``[E]``
    int64 arrays. Overlapping ranges are refused (``ValueError``).
    """

    tuning_first: int
    tuning_count: int
    evaluation_first: int
    evaluation_count: int

    def __post_init__(self):
        for name in ("tuning_first", "evaluation_first"):
            _check_count(name, getattr(self, name), 0)
        for name in ("tuning_count", "evaluation_count"):
            _check_count(name, getattr(self, name), 2)
        t0, t1 = self.tuning_first, self.tuning_first + self.tuning_count
        e0, e1 = self.evaluation_first, self.evaluation_first + self.evaluation_count
        if t0 < e1 and e0 < t1:
            raise ValueError(f"evaluation_first: evaluation seeds {e0}..{e1 - 1} overlap the "
                             f"tuning seeds {t0}..{t1 - 1}; they must be disjoint")

    @property
    def tuning_ids(self) -> np.ndarray:
        """``[T]`` int64 tuning seed ids."""
        return np.arange(self.tuning_first, self.tuning_first + self.tuning_count,
                         dtype=np.int64)

    @property
    def evaluation_ids(self) -> np.ndarray:
        """``[E]`` int64 evaluation seed ids."""
        return np.arange(self.evaluation_first, self.evaluation_first + self.evaluation_count,
                         dtype=np.int64)


def seed_split(tuning_seeds: int, evaluation_seeds: int, first_seed: int = 0) -> SeedSplit:
    """Seeds ``first_seed .. + T - 1`` for tuning, the next ``E`` for evaluation.

    Args:
      tuning_seeds: ``T >= 2``.
      evaluation_seeds: ``E >= 2``.
      first_seed: the first tuning seed id (``>= 0``).

    Returns:
      :class:`SeedSplit` with ``[T]`` tuning and ``[E]`` evaluation ids, disjoint.
    """
    tuning_seeds = _check_count("tuning_seeds", tuning_seeds, 2)
    evaluation_seeds = _check_count("evaluation_seeds", evaluation_seeds, 2)
    first_seed = _check_count("first_seed", first_seed, 0)
    return SeedSplit(first_seed, tuning_seeds, first_seed + tuning_seeds, evaluation_seeds)


# ----------------------------------------------------------------------------- selection


def _scores(scores: Any, name: str = "scores") -> np.ndarray:
    try:
        array = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name}: must be a numeric [K, S] array") from err
    if array.ndim != 2 or 0 in array.shape:
        raise ValueError(f"{name}: must be a [K configs, S seeds] array, got shape "
                         f"{array.shape}")
    return array


def select_best(scores: Any, statistic: str = "mean", higher_is_better: bool = True) -> int:
    """The configuration with the best statistic over its seeds.

    Args:
      scores: ``[K, S]`` per-configuration, per-seed scores.
      statistic: ``"mean"``, ``"median"`` or ``"iqm"`` (25 % trimmed mean) over seeds.
      higher_is_better: pick the largest (else the smallest) statistic.

    Returns:
      The index in ``0 .. K - 1`` (a Python int). Ties go to the lowest index. A
      configuration with a non-finite score on any seed (a diverged run) is never picked;
      if every one has one, ``ValueError``.
    """
    statistic = check_statistic(statistic)
    x = _scores(scores)
    finite = np.isfinite(x).all(axis=1)
    if not finite.any():
        raise ValueError("scores: every configuration has a non-finite score; nothing to "
                         "select")
    values = statistic_np(statistic, np.where(np.isfinite(x), x, 0.0))
    if not higher_is_better:
        values = -values
    return int(np.argmax(np.where(finite, values, -np.inf)))


# ----------------------------------------------------------------------------- tune


@dataclass(frozen=True)
class TuningResult:
    """What :func:`tune` returns.

    Attributes:
      best: index of the winning configuration (a Python int).
      tuning_scores: ``[K, T]`` every configuration on the tuning seeds.
      evaluation_scores: ``[E]`` the winner on the evaluation seeds.
      tuning_point: the winner's statistic on the tuning seeds (a Python float).
      evaluation: :class:`rljax.stats.reported.ReportedInterval` of the winner on the
        evaluation seeds: the figure to report.
      optimism: :class:`Optimism` (``tuning_point - evaluation.point``, sign flipped when
        lower is better).
      split: the :class:`SeedSplit` used.
      statistic: ``"mean"``, ``"median"`` or ``"iqm"``.
    """

    best: int
    tuning_scores: np.ndarray
    evaluation_scores: np.ndarray
    tuning_point: float
    evaluation: ReportedInterval
    optimism: Optimism
    split: SeedSplit
    statistic: str


RunConfigs = Callable[[np.ndarray, int, int], Any]
"""``run_configs(config_indices [k], first_seed, num_seeds) -> [k, num_seeds]`` scores."""


def _call(run_configs: RunConfigs, indices: np.ndarray, first: int, count: int) -> np.ndarray:
    out = np.asarray(run_configs(indices, first, count), dtype=np.float64)
    if out.shape != (indices.shape[0], count):
        raise ValueError(f"run_configs: returned shape {out.shape} for {indices.shape[0]} "
                         f"configs x {count} seeds; expected [num_configs, num_seeds]")
    return out


def tune(run_configs: RunConfigs, num_configs: int, split: SeedSplit, *,
         statistic: str = "mean", key: jax.Array, reps: int = 2000, data: str = "any",
         higher_is_better: bool = True) -> TuningResult:
    """Select on the tuning seeds, report on the evaluation seeds, measure the optimism.

    Calls ``run_configs(np.arange(K), split.tuning_first, split.tuning_count)`` (all
    configurations, ``[K, T]``), picks the winner with :func:`select_best`, then calls
    ``run_configs(np.array([best]), split.evaluation_first, split.evaluation_count)``
    (``[1, E]``). With :func:`rljax.grid.run_grid` (fixed blocks) the winner's seed ``i``
    is bitwise what it would be inside the full grid.

    Args:
      run_configs: ``(config_indices [k] int, first_seed, num_seeds) -> [k, num_seeds]``.
      num_configs: ``K >= 1``.
      split: :class:`SeedSplit` (disjoint tuning and evaluation ids).
      statistic: ``"mean"``, ``"median"`` or ``"iqm"`` (selection, report and optimism).
      key: JAX PRNG key for the intervals.
      reps: bootstrap resamples.
      data: kind of per-seed data for :func:`rljax.stats.reported.reported_interval`
        (``"any"``, ``"symmetric"``, ``"skewed"``, ...); also picks the optimism coverage.
      higher_is_better: direction of selection.

    Returns:
      :class:`TuningResult`.
    """
    statistic = check_statistic(statistic)
    num_configs = _check_count("num_configs", num_configs, 1)
    if not isinstance(split, SeedSplit):
        raise ValueError(f"split: must be a SeedSplit (rljax.tune.seed_split), got "
                         f"{type(split).__name__}")
    key = check_key(key)
    reps = check_reps(reps)
    tuning = _call(run_configs, np.arange(num_configs), split.tuning_first, split.tuning_count)
    best = select_best(tuning, statistic, higher_is_better)
    evaluation = _call(run_configs, np.array([best]), split.evaluation_first,
                       split.evaluation_count)[0]
    reported = reported_interval(statistic, evaluation, key=jax.random.fold_in(key, 0),
                                 reps=reps, data=data)
    point, low, high, method = optimism_interval(
        tuning[best], evaluation, statistic=statistic, key=jax.random.fold_in(key, 1),
        reps=reps)
    if not higher_is_better:
        point, low, high = -point, -high, -low
    note = optimism_note(statistic, method, split.tuning_count, split.evaluation_count,
                          data, 0.95, reps)
    return TuningResult(best=best, tuning_scores=tuning, evaluation_scores=evaluation,
                        tuning_point=float(statistic_np(statistic, tuning[best])),
                        evaluation=reported, optimism=Optimism(point, low, high, method, note),
                        split=split, statistic=statistic)


# ----------------------------------------------------------------------------- equal budget


@dataclass(frozen=True)
class EqualBudget:
    """What :func:`equal_budget` returns.

    Attributes:
      results: ``{algorithm: TuningResult}`` (each with ``[K, T]`` tuning scores).
      differences: ``{algorithm: ReportedInterval}`` of the paired difference
        ``mean(winner - reference winner)`` over the ``[E]`` shared evaluation seeds, for
        every algorithm but the reference.
      budget: ``{"configs": K, "tuning_seeds": T, "evaluation_seeds": E}``.
      reference: the reference algorithm's name.
    """

    results: dict[str, TuningResult]
    differences: dict[str, ReportedInterval]
    budget: dict[str, int]
    reference: str


def equal_budget(runners: Mapping[str, RunConfigs], num_configs: Mapping[str, int],
                 split: SeedSplit, *, statistic: str = "mean", key: jax.Array,
                 reps: int = 2000, data: str = "any", reference: str | None = None,
                 higher_is_better: bool = True) -> EqualBudget:
    """Tune every algorithm with the same budget and compare the winners, paired.

    Each algorithm gets :func:`tune` with the same ``K`` configurations and the same
    :class:`SeedSplit`; the winners share the evaluation seed ids, so their difference is
    paired (exactly so when the runners derive seed ``i``'s key from ``i`` alone, as
    :class:`rljax.sweep.Sweep` does for one ``base_seed``): reported with
    ``reported_interval("paired_difference", winner, reference winner)`` (the mean of the
    per-seed differences, whatever ``statistic`` selected the winners).

    Args:
      runners: ``{algorithm: run_configs}``, each returning ``[k, num_seeds]`` scores (see
        :func:`tune`).
      num_configs: ``{algorithm: K}``: every ``K`` must be equal (else ``ValueError``).
      split: the shared :class:`SeedSplit`.
      statistic, key, reps, data, higher_is_better: as for :func:`tune`.
      reference: the algorithm the others are compared with (default: the first).

    Returns:
      :class:`EqualBudget` (``[E]`` evaluation scores per winner).
    """
    names = list(runners)
    if not names:
        raise ValueError("runners: need at least one algorithm, got none")
    if set(num_configs) != set(names):
        raise ValueError(f"num_configs: needs one count per algorithm {sorted(names)}, got "
                         f"{sorted(num_configs)}")
    counts = {name: num_configs[name] for name in names}
    if len(set(counts.values())) > 1:
        given = ", ".join(f"{n}={k}" for n, k in counts.items())
        raise ValueError(f"num_configs: an equal budget needs the same number of "
                         f"configurations for every algorithm, got {given}")
    reference = names[0] if reference is None else reference
    if reference not in runners:
        raise ValueError(f"reference: must be one of {', '.join(names)}, got {reference!r}")
    key = check_key(key)
    results = {name: tune(runners[name], counts[name], split, statistic=statistic,
                          key=jax.random.fold_in(key, i), reps=reps, data=data,
                          higher_is_better=higher_is_better)
               for i, name in enumerate(names)}
    base = results[reference].evaluation_scores
    differences = {
        name: reported_interval("paired_difference", results[name].evaluation_scores, base,
                                key=jax.random.fold_in(key, len(names) + i), reps=reps,
                                data=data)
        for i, name in enumerate(names) if name != reference}
    budget = {"configs": int(counts[reference]), "tuning_seeds": split.tuning_count,
              "evaluation_seeds": split.evaluation_count}
    return EqualBudget(results=results, differences=differences, budget=budget,
                       reference=reference)


# ----------------------------------------------------------------------------- sensitivity


@dataclass(frozen=True)
class SensitivityCurve:
    """Score against one hyperparameter's value, with pointwise intervals.

    Attributes:
      values: ``[V]`` sorted unique values of the field.
      point, low, high: ``[V]`` the statistic and its interval at each value.
      n: ``[V]`` seeds behind each value.
      method: the interval method(s) of :func:`rljax.stats.reported.reported_interval`.
    """

    values: np.ndarray
    point: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n: np.ndarray
    method: str


def extend_grid(grid: Any, winner: float) -> float | None:
    """The rate to add to ``grid`` when ``winner`` is at its edge, else ``None``.

    At the lowest rate ``r_1`` of the grid ``r_1 < r_2 < ...``: ``r_1 / (r_2 / r_1)``; at the
    highest ``r_K``: ``r_K * (r_K / r_{K-1})`` (the grid's spacing at that edge, carried one
    step further). ``None`` for an interior winner or a one-rate grid (no spacing).
    """
    rates = sorted(float(r) for r in grid)
    position = grid_position(rates, winner)
    if position == "lowest":
        return rates[0] * rates[0] / rates[1]
    if position == "highest":
        return rates[-1] * rates[-1] / rates[-2]
    return None


def grid_position(grid: Any, rate: float) -> str:
    """Where ``rate`` sits in ``grid``: ``"interior"`` (a grid rate on each side),
    ``"lowest"``, ``"highest"``, or ``"only"`` (a one-rate grid)."""
    rates = sorted(float(r) for r in grid)
    if len(rates) == 1:
        return "only"
    return ("lowest" if rate <= rates[0] else "highest" if rate >= rates[-1]
            else "interior")


def tune_extended(run_rates: Any, grid: tuple[float, ...], split: SeedSplit, *,
                  max_extensions: int, key: Any, reps: int
                  ) -> tuple[TuningResult, tuple[float, ...], int]:
    """Tune one rate (e.g. a learning rate) on ``grid``, extend the grid while its winner
    is at an edge, then run the winner on the evaluation seeds: a tuned value at the
    grid's edge is a bound, not an optimum, so the grid grows until it is interior (or
    ``max_extensions`` rates were added, which the caller reports).

    ``run_rates(rates [k], first_seed, num_seeds) -> [k, num_seeds]`` scores. Every rate
    runs on the tuning seeds; while the winner (:func:`select_best`, ties to
    the lower rate) is the grid's lowest or highest and fewer than ``max_extensions``
    rates were added, :func:`extend_grid`'s rate runs on the same seeds. The final choice
    goes through :func:`tune` over the final grid (its tuning scores reused), so
    the optimism is that of the choice among every rate tried.

    Returns:
      the :class:`TuningResult` (``best`` indexes the final grid), the final
      grid (ascending) and the number of extensions.
    """
    rates = sorted(grid)
    scores = np.asarray(run_rates(np.asarray(rates), split.tuning_first, split.tuning_count))
    extensions = 0
    while extensions < max_extensions:
        new = extend_grid(rates, rates[select_best(scores)])
        if new is None:
            break
        row = np.asarray(run_rates(np.asarray([new]), split.tuning_first, split.tuning_count))
        at = int(np.searchsorted(rates, new))
        rates.insert(at, new)
        scores = np.insert(scores, at, row[0], axis=0)
        extensions += 1

    def run_configs(indices, first_seed, num_seeds):
        if first_seed == split.tuning_first:
            return scores[np.asarray(indices)]
        return run_rates(np.asarray(rates)[np.asarray(indices)], first_seed, num_seeds)

    result = tune(run_configs, len(rates), split, key=key, reps=reps)
    return result, tuple(rates), extensions


def sensitivity_curve(scores: Any, values: Any, mask: Any = None, *, statistic: str = "mean",
                      key: jax.Array, reps: int = 2000, data: str = "any") -> SensitivityCurve:
    """The statistic over seeds at each value of one hyperparameter, with intervals.

    Configurations in ``mask`` that share a value are averaged per seed first (seeds are
    the independent units, and with common random numbers seed ``i`` is shared), so
    without a mask over a multi-field grid the curve is the average over the other fields;
    with ``mask=slice_at(configs, field, best)`` it is the slice through the best
    configuration (Patterson et al. 2024, Sec. 6). Seeds with a non-finite score at a
    value are left out of that value.

    Args:
      scores: ``[K, S]`` per-configuration, per-seed scores.
      values: ``[K]`` the field's value in each configuration.
      mask: optional ``[K]`` bool: the configurations that form the curve.
      statistic: ``"mean"``, ``"median"`` or ``"iqm"``.
      key: JAX PRNG key for the intervals (value ``v`` folds in its position).
      reps: bootstrap resamples.
      data: kind of per-seed data for ``reported_interval``.

    Returns:
      :class:`SensitivityCurve` with ``[V]`` arrays.
    """
    statistic = check_statistic(statistic)
    x = _scores(scores)
    v = np.asarray(values)
    if v.shape != (x.shape[0],):
        raise ValueError(f"values: must be [K] = [{x.shape[0]}] (one per configuration), got "
                         f"shape {v.shape}")
    keep = np.ones(x.shape[0], bool) if mask is None else np.asarray(mask)
    if keep.shape != (x.shape[0],) or keep.dtype != bool:
        raise ValueError(f"mask: must be a [K] = [{x.shape[0]}] bool array, got "
                         f"{keep.dtype} {keep.shape}")
    if not keep.any():
        raise ValueError("mask: selects no configuration")
    key = check_key(key)
    unique = np.unique(v[keep])
    rows, methods = [], []
    for i, value in enumerate(unique):
        per_seed = x[keep & (v == value)].mean(axis=0)
        per_seed = per_seed[np.isfinite(per_seed)]
        if per_seed.shape[0] < 2:
            raise ValueError(f"scores: value {value!r} has {per_seed.shape[0]} finite seed(s); "
                             "an interval needs at least 2")
        iv = reported_interval(statistic, per_seed, key=jax.random.fold_in(key, i), reps=reps,
                               data=data)
        rows.append((iv.point, iv.low, iv.high, iv.n))
        methods.append(iv.method)
    point, low, high, n = (np.asarray(c) for c in zip(*rows, strict=True))
    return SensitivityCurve(values=unique, point=point.astype(np.float64),
                            low=low.astype(np.float64), high=high.astype(np.float64),
                            n=n.astype(np.int64), method="/".join(dict.fromkeys(methods)))


def _as_mapping(config: Any) -> dict[str, Any]:
    if is_dataclass(config) and not isinstance(config, type):
        return {f.name: getattr(config, f.name) for f in fields(config)}
    if isinstance(config, Mapping):
        return dict(config)
    raise ValueError(f"configs: each must be a dataclass or a mapping, got "
                     f"{type(config).__name__}")


def slice_at(configs: Sequence[Any], field: str, anchor: Any) -> np.ndarray:
    """``[K]`` bool: the configurations whose fields other than ``field`` equal the anchor's.

    Args:
      configs: ``K`` configurations (dataclasses, e.g. ``GridResult.configs``, or dicts,
        e.g. ``Grid.rows``).
      field: the field the slice varies.
      anchor: an index into ``configs`` (e.g. ``TuningResult.best``) or a configuration.

    Returns:
      ``[K]`` bool mask for :func:`sensitivity_curve`.
    """
    rows = [_as_mapping(c) for c in configs]
    if not rows:
        raise ValueError("configs: need at least one configuration, got none")
    if field not in rows[0]:
        raise ValueError(f"field: {field!r} is not a field of the configs; they have "
                         f"{', '.join(rows[0])}")
    if isinstance(anchor, int | np.integer) and not isinstance(anchor, bool):
        if not 0 <= anchor < len(rows):
            raise ValueError(f"anchor: index must be in 0..{len(rows) - 1}, got {anchor}")
        ref = rows[int(anchor)]
    else:
        ref = _as_mapping(anchor)
    others = [f for f in rows[0] if f != field]
    return np.array([all(row.get(f) == ref.get(f) for f in others) for row in rows], bool)


def plot_sensitivity(ax: Any, curves: Mapping[str, SensitivityCurve], *,
                     xlabel: str = "value", ylabel: str = "score", log_x: bool = False) -> Any:
    """One line with markers and a shaded interval band per label, on a matplotlib axes.

    Args:
      ax: a matplotlib ``Axes``.
      curves: ``{label: SensitivityCurve}`` (``[V]`` arrays each).
      xlabel, ylabel: axis labels.
      log_x: log-scaled x axis (learning rates).

    Returns:
      ``ax``.
    """
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    for i, (label, curve) in enumerate(curves.items()):
        color = cmap(i % 10)
        ax.plot(curve.values, curve.point, marker="o", color=color, label=label)
        ax.fill_between(curve.values, curve.low, curve.high, color=color, alpha=0.2,
                        linewidth=0)
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if curves:
        ax.legend(frameon=False)
    return ax


__all__ = [
    "EqualBudget",
    "OPTIMISM_COVERAGE",
    "Optimism",
    "STATISTICS",
    "SeedSplit",
    "SensitivityCurve",
    "TuningResult",
    "equal_budget",
    "optimism_interval",
    "plot_sensitivity",
    "select_best",
    "seed_split",
    "sensitivity_curve",
    "slice_at",
    "tune",
]
