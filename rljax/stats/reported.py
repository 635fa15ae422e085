"""Intervals a study reports: the method chosen for the statistic and n, with its coverage.

A study calls :func:`reported_interval` with a named statistic and its per-seed values.
The method comes from the measured coverage table ``rljax/data/interval_coverage.json``,
written by ``rljax run interval-coverage`` (:mod:`rljax.stats.coverage` simulates every
method on known truths: normal, skewed, heavy-tailed, Bernoulli, tied counts and censored
times; see that study for the design). For a statistic and ``n`` seeds:

* the table is read at the nearest simulated ``n`` **at or below** the given one (``n``
  beyond the largest simulated, 1000, uses 1000): coverage improves with ``n`` for every
  method measured, so this is conservative;
* a method's *measured coverage* is the **minimum over the simulated distributions** of
  its coverage at that ``n``;
* the *recommended method* is the first method, in a fixed order of preference
  (:data:`rljax.stats.coverage.PREFERENCE`: exact and closed-form methods first), whose
  measured coverage is ``>= 0.93`` with bounded intervals (the study's rule); where none
  qualifies the table says ``"none: run more seeds (...)"``, and :func:`reported_interval`
  then uses the method with the highest measured coverage and says so in its note.

**Kinds of data.** No interval for a mean holds its level over every distribution at a
fixed n (Bahadur & Savage 1956), so the minimum over *all* simulated distributions --
including single Bernoulli(0.9) trials and Pareto tails -- qualifies no method for a mean
below 1000 seeds. Every function here takes ``data``: ``"any"`` (default: the minimum over
all of a statistic's distributions) or a kind of :data:`rljax.stats.coverage.DATA_KINDS`
(``"symmetric"``, ``"skewed"``, ``"binary"``, ``"counts"``, ``"censored"``,
``"crossed"``), which restricts the minimum to the distributions that stand for that kind.
A study names the kind its per-seed values are (a per-seed accuracy over a set of problems
is a count of successes: ``"counts"``), and the note states both that coverage and the
worst case over all simulated distributions.

The interval itself is computed by :func:`rljax.stats.small_sample.interval_bounds`, the
same code whose coverage was measured.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rljax.stats._validation import check_confidence, check_key, check_reps
from rljax.stats.coverage import DATA_KINDS, recommend_methods
from rljax.stats.small_sample import METHODS_BY_STATISTIC, interval_bounds

STATISTICS = ("mean", "median", "iqm", "ratio_of_medians", "paired_difference",
              "two_way_mean")
TABLE_PATH = Path(__file__).resolve().parent.parent / "data" / "interval_coverage.json"
NONE_PREFIX = "none"
_TWO_SAMPLE = ("ratio_of_medians", "paired_difference")
_CENSORABLE = ("median", "ratio_of_medians")
_LABELS = {
    "percentile": "percentile bootstrap",
    "basic": "basic bootstrap",
    "bca": "BCa bootstrap",
    "t": "Student-t interval",
    "bootstrap_t": "bootstrap-t (studentized) interval",
    "trimmed_t": "Tukey-McLaughlin trimmed-t interval",
    "order_statistic": "exact order-statistic interval",
}


class ReportedInterval(NamedTuple):
    """A point estimate, its interval, the method used and that method's measured coverage.

    Every field is a Python scalar (or a string).

    Attributes:
      point, low, high: floats.
      method: the interval method (e.g. ``"t"``, ``"bca"``, ``"order_statistic"``).
      n: the sample size the interval was computed at (seeds).
      coverage: the measured coverage of ``method`` for this statistic at ``n`` (the
        minimum over the simulated distributions), or None when not measured.
      note: one sentence for a report's procedure stating method, n and coverage.
    """

    point: float
    low: float
    high: float
    method: str
    n: int
    coverage: float | None
    note: str


@functools.cache
def coverage_table() -> dict[str, Any]:
    """The committed ``interval-coverage`` summary (``coverage``, ``recommended_method``)."""
    import json

    with open(TABLE_PATH, encoding="utf-8") as f:
        return json.load(f)


def _check_statistic(statistic: Any) -> str:
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    return statistic


def _check_data(data: Any, statistic: str) -> str:
    if data == "any":
        return data
    if data not in DATA_KINDS:
        raise ValueError(f"data: must be 'any' or one of {', '.join(DATA_KINDS)}, got "
                         f"{data!r}")
    simulated = {d for by_stat in coverage_table()["coverage"].values()
                 for d in by_stat.get(statistic, {})}
    if not simulated & set(DATA_KINDS[data]):
        kinds = [k for k, names in DATA_KINDS.items() if simulated & set(names)]
        raise ValueError(f"data: {statistic} was not simulated on {data!r} data; its kinds "
                         f"are any, {', '.join(kinds)}")
    return data


def _distributions(data: str) -> tuple[str, ...] | None:
    return None if data == "any" else DATA_KINDS[data]


@functools.cache
def _recommendations(data: str) -> dict[str, dict[str, str]]:
    """The study's rule applied to the committed cells (for ``"any"`` this is the table's
    own ``recommended_method``)."""
    table = coverage_table()
    return recommend_methods(table["coverage"], threshold=table.get("threshold", 0.93),
                             distributions=_distributions(data))


def _check_n(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    return int(n)


def simulated_n(statistic: str, n: int) -> int | None:
    """The simulated sample size the table is read at: the largest one ``<= n`` (None when
    ``n`` is below every simulated size)."""
    _check_statistic(statistic)
    n = _check_n(n)
    sizes = set()
    for by_stat in coverage_table()["coverage"].values():
        for by_n in by_stat.get(statistic, {}).values():
            sizes.update(int(k) for k in by_n)
    below = [k for k in sizes if k <= n]
    return max(below) if below else None


def _worst_at(method: str, statistic: str, n_sim: int,
              data: str = "any") -> tuple[float, int, str] | None:
    """``(coverage, number of distributions, worst distribution)`` or None."""
    by_dist = coverage_table()["coverage"].get(method, {}).get(statistic)
    if not by_dist:
        return None
    keep = _distributions(data)
    values = [(v[str(n_sim)]["coverage"], d) for d, v in by_dist.items()
              if str(n_sim) in v and (keep is None or d in keep)]
    if not values:
        return None
    worst = min(values)
    return worst[0], len(values), worst[1]


def _coverage_at(method: str, statistic: str, n_sim: int,
                 data: str = "any") -> tuple[float, int] | None:
    found = _worst_at(method, statistic, n_sim, data)
    return None if found is None else found[:2]


def measured_coverage(method: str, statistic: str, n: int, data: str = "any") -> float | None:
    """Measured coverage (a Python scalar) of ``method`` for ``statistic`` at ``n`` seeds.

    The minimum over the simulated distributions of kind ``data`` (``"any"``: all of the
    statistic's distributions) at the nearest simulated ``n`` at or below the given one
    (``n > 1000`` uses 1000); None when the method was not simulated for the statistic or
    ``n`` is below the smallest simulated size (3).
    """
    _check_statistic(statistic)
    data = _check_data(data, statistic)
    n_sim = simulated_n(statistic, n)
    if n_sim is None:
        return None
    found = _coverage_at(method, statistic, n_sim, data)
    return None if found is None else found[0]


def recommended_method(statistic: str, n: int, data: str = "any") -> str:
    """The interval method for ``statistic`` at ``n`` seeds (a Python scalar) from the table.

    ``data`` restricts the rule to one kind of data (see the module docstring).

    Returns a method name (``"t"``, ``"bootstrap_t"``, ``"trimmed_t"``,
    ``"order_statistic"``, ``"percentile"``, ``"basic"``, ``"bca"``) or a string starting
    with ``"none: run more seeds"`` when no method qualifies at this ``n`` (including ``n``
    below the smallest simulated size).
    """
    _check_statistic(statistic)
    data = _check_data(data, statistic)
    n_sim = simulated_n(statistic, n)
    if n_sim is None:
        return f"{NONE_PREFIX}: run more seeds (the coverage study starts at n = 3)"
    for label, method in _recommendations(data)[statistic].items():
        start = int(label.split("-")[0].rstrip("+"))
        if start == n_sim:
            return method
    raise ValueError(f"n: no recommended-method entry for {statistic} at n = {n_sim}")


def _best_available(statistic: str, n: int, data: str = "any") -> str:
    """The method with the highest measured coverage at ``n`` (fallback when none
    qualifies); ``t``-type methods first at ``n`` below the table."""
    n_sim = simulated_n(statistic, n)
    methods = METHODS_BY_STATISTIC[statistic]
    if n_sim is None:
        return next(m for m in ("t", "order_statistic", "trimmed_t", "percentile")
                    if m in methods)
    scored = [(_coverage_at(m, statistic, n_sim, data) or (-1.0, 0))[0] for m in methods]
    return methods[int(np.argmax(scored))]


def _vector(x, position: int, statistic: str) -> np.ndarray:
    try:
        array = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"samples[{position}] must be a numeric array") from err
    if array.ndim != 1:
        raise ValueError(f"samples[{position}] must be 1-D [seeds] for {statistic}, got shape "
                         f"{array.shape}")
    if array.shape[0] < 2:
        raise ValueError(f"samples[{position}] must hold at least 2 seeds, got "
                         f"{array.shape[0]}")
    if np.isnan(array).any():
        raise ValueError(f"samples[{position}] has NaN at index "
                         f"{int(np.argwhere(np.isnan(array))[0, 0])}; drop missing seeds "
                         "(code right-censored ones as +inf for a median)")
    if statistic not in _CENSORABLE and np.isinf(array).any():
        raise ValueError(f"samples[{position}] has an infinite value at index "
                         f"{int(np.argwhere(np.isinf(array))[0, 0])}; {statistic} needs finite "
                         "values (censored seeds: use median or ratio_of_medians)")
    return array


def _point(statistic: str, arrays: list[np.ndarray]) -> float:
    with np.errstate(invalid="ignore", divide="ignore"):
        if statistic == "mean":
            return float(np.mean(arrays[0]))
        if statistic == "median":
            return float(np.median(arrays[0]))
        if statistic == "iqm":
            x = np.sort(arrays[0])
            g = x.shape[0] // 4
            return float(np.mean(x[g:x.shape[0] - g]))
        if statistic == "ratio_of_medians":
            return float(np.median(arrays[0]) / np.median(arrays[1]))
        if statistic == "paired_difference":
            return float(np.mean(arrays[0] - arrays[1]))
        return float(np.mean(arrays[0]))


@functools.partial(jax.jit, static_argnames=("statistic", "method", "reps", "confidence"))
def _bounds(samples, key, statistic, method, reps, confidence):
    return interval_bounds(statistic, (method,), samples, key, reps=reps,
                           confidence=confidence)[1][0]


def _describe(statistic: str, arrays: list[np.ndarray]) -> str:
    if statistic == "two_way_mean":
        seeds, prompts = arrays[0].shape
        return f"two-way mean over {seeds} seeds x {prompts} prompts"
    n = arrays[0].shape[0]
    if statistic in _TWO_SAMPLE:
        return f"{statistic.replace('_', ' ')} over n = {n} paired seeds"
    return f"{statistic} over n = {n} seeds"


def _label(statistic: str, method: str, reps: int) -> str:
    label = _LABELS[method]
    if method in ("percentile", "basic", "bca"):
        label += f" ({reps} resamples" + (", seeds and prompts resampled)"
                                          if statistic == "two_way_mean" else ")")
    if statistic == "two_way_mean" and method == "t":
        label = "two-way t interval (seed and prompt variance)"
    if statistic == "ratio_of_medians" and method == "order_statistic":
        label = "Bonferroni-combined exact order-statistic intervals of the two medians"
    return label


def reported_interval(statistic: str, *samples, key: jax.Array, reps: int = 2000,
                      confidence: float = 0.95, method: str | None = None,
                      data: str = "any") -> ReportedInterval:
    """Interval of a named statistic over seeds with the method the coverage study picked.

    Args:
      statistic: one of :data:`STATISTICS`: ``"mean"``, ``"median"``, ``"iqm"`` of one
        ``[n]`` sample; ``"ratio_of_medians"`` (``median(x) / median(y)``) and
        ``"paired_difference"`` (``mean(x - y)``) of ``x [n], y [n]`` on the same seeds;
        ``"two_way_mean"`` of one ``[S seeds, P prompts]`` matrix (mean over both,
        resampling seeds and prompts).
      *samples: the arrays above. ``+inf`` (a right-censored seed) is allowed for
        ``median`` and ``ratio_of_medians``; NaN never.
      key: JAX PRNG key (bootstrap methods; the same key gives the same interval).
      reps: bootstrap resamples (the table was measured at 499, 199 at n = 1000).
      confidence: nominal coverage (coverage figures exist for 0.95 only; other values
        report ``coverage=None``).
      method: override the recommended method (one of
        ``small_sample.METHODS_BY_STATISTIC[statistic]``).
      data: the kind of per-seed data (``"any"`` or a key of
        :data:`rljax.stats.coverage.DATA_KINDS`): the method and the coverage are those
        measured on that kind; the note also gives the worst case over all distributions.

    Returns:
      :class:`ReportedInterval` whose ``note`` is one sentence naming the statistic, n, the
      method and its measured coverage, for a report's procedure.
    """
    statistic = _check_statistic(statistic)
    data = _check_data(data, statistic)
    key = check_key(key)
    reps = check_reps(reps)
    confidence = check_confidence(confidence)
    want = 2 if statistic in _TWO_SAMPLE else 1
    if len(samples) != want:
        raise ValueError(f"samples: {statistic} takes {want} array(s), got {len(samples)}")
    if statistic == "two_way_mean":
        matrix = np.asarray(samples[0], dtype=np.float64)
        if matrix.ndim != 2 or min(matrix.shape) < 2:
            raise ValueError("samples[0] must be a [seeds, prompts] matrix with both >= 2 for "
                             f"two_way_mean, got shape {matrix.shape}")
        if not np.isfinite(matrix).all():
            raise ValueError("samples[0] must hold finite values for two_way_mean")
        arrays = [matrix]
    else:
        arrays = [_vector(s, i, statistic) for i, s in enumerate(samples)]
    if statistic == "paired_difference" and arrays[0].shape != arrays[1].shape:
        raise ValueError(f"samples: paired_difference needs x and y on the same seeds, got "
                         f"lengths {arrays[0].shape[0]} and {arrays[1].shape[0]}")
    n = min(a.shape[0] for a in arrays)
    recommended = recommended_method(statistic, n, data)
    qualified = not recommended.startswith(NONE_PREFIX)
    if method is None:
        method = recommended if qualified else _best_available(statistic, n, data)
    elif method not in METHODS_BY_STATISTIC[statistic]:
        raise ValueError(f"method: {statistic} supports "
                         f"{', '.join(METHODS_BY_STATISTIC[statistic])}, got {method!r}")
    low, high = np.asarray(_bounds(tuple(jnp.asarray(a, jnp.float32) for a in arrays), key,
                                   statistic, method, reps, confidence), np.float64)
    n_sim = simulated_n(statistic, n)
    found = None if n_sim is None else _coverage_at(method, statistic, n_sim, data)
    worst = None if n_sim is None else _worst_at(method, statistic, n_sim)
    coverage = found[0] if found is not None and math.isclose(confidence, 0.95) else None
    kind = "" if data == "any" else f" {data}"
    head = f"{_describe(statistic, arrays)}: {_label(statistic, method, reps)}"
    if found is None:
        tail = "coverage not measured at this n (the interval-coverage study starts at n = 3)"
    elif coverage is None:
        tail = (f"coverage measured only at 95 % (there: {found[0]:.3f}, min over {found[1]} "
                f"distributions at n = {n_sim})")
    else:
        plural = "s" if found[1] > 1 else ""
        tail = (f"measured coverage {coverage:.3f} (min over {found[1]} simulated{kind} "
                f"distribution{plural} at n = {n_sim}, interval-coverage study)")
        if data != "any" and worst is not None:
            tail += (f"; worst over all {worst[1]} simulated distributions {worst[0]:.3f} "
                     f"({worst[2]})")
    if not qualified:
        tail += (f"; no method reaches 0.93 coverage on{kind or ' all'} simulated data at this "
                 f"n in that study, so run more seeds "
                 f"({recommended.split('(', 1)[-1].rstrip(')')})")
    note = f"{head}; {tail}."
    return ReportedInterval(_point(statistic, arrays), float(low), float(high), method, n,
                            coverage, note)


__all__ = [
    "ReportedInterval",
    "STATISTICS",
    "coverage_table",
    "measured_coverage",
    "recommended_method",
    "reported_interval",
    "simulated_n",
]
