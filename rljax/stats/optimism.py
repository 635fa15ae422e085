"""The optimism of a tuned configuration: how much its tuning seeds flattered it.

Let ``b`` be the configuration that won on ``T`` tuning seeds, ``t_b`` its tuning-seed
statistic and ``theta_b`` its true value. :func:`optimism_interval` gives an interval for
``t_b - theta_b`` (the realized optimism) from the winner's tuning scores and its scores on
``E`` disjoint evaluation seeds; it also covers the expected optimism given the winner,
``E[t_b - theta_b | b won]``. The two samples are independent, but the winner's tuning
seeds are selected: when low scores come from a long lower tail (seeds that fail), the
winner is the configuration whose tuning seeds avoided it, so their spread understates the
configuration's and plain Welch under-covers (measured 0.86 at ``T = E = 8``, ``K = 20``,
negated lognormal). So for the mean the interval is Welch's t interval with the tuning
variance floored at the evaluation variance (the evaluation seeds are not selected)::

    d = mean(t) - mean(e),   a = max(s_t^2, s_e^2) / T,   b = s_e^2 / E
    d +- t_{0.975, nu} sqrt(a + b),   nu = (a + b)^2 / (a^2 / (T - 1) + b^2 / (E - 1))

(Welch 1947, Biometrika 34; the floor is ours). The median and IQM use a percentile
bootstrap resampling the two samples independently (Efron & Tibshirani 1993, Ch. 13).
Coverage measured by simulation in ``tests/test_tune.py``: :data:`OPTIMISM_COVERAGE`.
:mod:`rljax.tune` uses it for every tuning run.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rljax.stats._validation import check_confidence, check_key, check_reps
from rljax.stats.bootstrap import resample_indices

STATISTICS = ("mean", "median", "iqm")
"""Statistics a tuning run can select on and report (one sample of seeds each)."""

OPTIMISM_COVERAGE: dict[str, dict[str, dict[int, float]]] = {
    "mean": {"symmetric": {8: 0.962, 16: 0.958}, "skewed": {8: 0.828, 16: 0.854}},
    "median": {"symmetric": {8: 0.954, 16: 0.964}},
    "iqm": {"symmetric": {8: 0.951, 16: 0.955}},
}
"""Measured coverage of the 95 % :func:`optimism_interval` at ``T = E = n``:
``{statistic: {data kind: {n: coverage}}}``, the minimum over the simulated settings of
that kind (symmetric: normal and Student-t3 noise; skewed: lognormal, negated lognormal
and 10 % failing seeds) and over both targets (realized and expected optimism). Checked
against a fresh simulation by ``tests/test_tune.py``."""

_METHODS = {"mean": "floored_welch_t", "median": "percentile", "iqm": "percentile"}
_LABELS = {"floored_welch_t": "Welch t interval with the tuning variance floored at the "
                              "evaluation variance",
           "percentile": "percentile bootstrap of the difference (samples resampled "
                         "independently, {reps} resamples)"}

def check_statistic(statistic: Any) -> str:
    if statistic not in STATISTICS:
        raise ValueError(f"statistic: must be one of {', '.join(STATISTICS)}, got "
                         f"{statistic!r}")
    return statistic

def statistic_np(statistic: str, x: np.ndarray) -> np.ndarray:
    """Statistic over the last axis (``[..., n] -> [...]``); IQM trims ``n // 4`` each side."""
    if statistic == "mean":
        return x.mean(-1)
    if statistic == "median":
        return np.median(x, -1)
    n = x.shape[-1]
    return np.sort(x, -1)[..., n // 4:n - n // 4].mean(-1)



class Optimism(NamedTuple):
    """How much the tuning seeds flattered the winner, with an interval.

    Every field is a Python scalar or string.

    Attributes:
      point: winner's tuning statistic minus its evaluation statistic (negated when lower
        is better, so positive means optimistic).
      low, high: the interval (see the module docstring for what it covers).
      method: ``"floored_welch_t"`` (mean) or ``"percentile"`` (bootstrap).
      note: one sentence for a report: statistic, seed counts, method, measured coverage.
    """

    point: float
    low: float
    high: float
    method: str
    note: str


def _floored_welch_bounds(tuning: np.ndarray, evaluation: np.ndarray,
                          confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Welch bounds of ``mean(t) - mean(e)`` with ``s_t^2`` floored at ``s_e^2``.

    ``tuning [..., T]``, ``evaluation [..., E]`` -> ``(low [...], high [...])``, vectorised
    over the leading axes (the coverage simulation calls it on ``[sims, n]`` arrays).
    """
    import scipy.stats as sps

    n_t, n_e = tuning.shape[-1], evaluation.shape[-1]
    var_e = evaluation.var(-1, ddof=1)
    a = np.maximum(tuning.var(-1, ddof=1), var_e) / n_t
    b = var_e / n_e
    with np.errstate(invalid="ignore", divide="ignore"):
        df = (a + b) ** 2 / (a ** 2 / (n_t - 1) + b ** 2 / (n_e - 1))
        half = np.where(a + b > 0, sps.t.ppf(0.5 + confidence / 2, df) * np.sqrt(a + b), 0.0)
    d = tuning.mean(-1) - evaluation.mean(-1)
    return d - half, d + half


def _rank_window(statistic: str, n: int) -> tuple[int, int]:
    """The ranks ``(lo, hi]`` (0-based, sorted) a statistic averages over ``n`` values."""
    if statistic == "mean":
        return 0, n
    if statistic == "median":
        return (n - 1) // 2, n // 2 + 1
    return n // 4, n - n // 4


def _resampled_statistic(sorted_x: jax.Array, index: jax.Array, statistic: str) -> jax.Array:
    """``[R]`` statistic of the resamples ``sorted_x[index]`` (``index [R, n]``), without
    sorting them: the mean of ranks ``(lo, hi]`` of a resample weights each sorted value by
    how many of its copies land in those ranks (copies of ``sorted_x[j]`` hold ranks
    ``(C_{j-1}, C_j]``, ``C`` the cumulative counts)."""
    reps, n = index.shape
    lo, hi = _rank_window(statistic, n)
    counts = jnp.zeros((reps, n), jnp.int32).at[jnp.arange(reps)[:, None], index].add(1)
    upper = jnp.cumsum(counts, -1)
    weight = jnp.clip(jnp.minimum(upper, hi) - jnp.maximum(upper - counts, lo), 0, None)
    return (weight * sorted_x).sum(-1) / (hi - lo)


@functools.partial(jax.jit, static_argnames=("statistic", "reps", "confidence"))
def _bootstrap_bounds(tuning: jax.Array, evaluation: jax.Array, key: jax.Array,
                      statistic: str, reps: int, confidence: float) -> jax.Array:
    """``[2]`` percentile bounds of ``stat(t*) - stat(e*)``, ``t* [reps, T]`` and
    ``e* [reps, E]`` drawn independently with replacement (vmappable over samples/keys)."""
    key_t, key_e = jax.random.split(key)
    n_t, n_e = tuning.shape[0], evaluation.shape[0]
    replicates = (
        _resampled_statistic(jnp.sort(tuning), resample_indices(key_t, n_t, (reps, n_t)),
                             statistic)
        - _resampled_statistic(jnp.sort(evaluation),
                               resample_indices(key_e, n_e, (reps, n_e)), statistic))
    alpha = (1.0 - confidence) / 2.0
    return jnp.quantile(replicates, jnp.array([alpha, 1.0 - alpha]))


def _sample(x: Any, name: str) -> np.ndarray:
    try:
        array = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name}: must be a numeric 1-D array of seeds") from err
    if array.ndim != 1 or array.shape[0] < 2:
        raise ValueError(f"{name}: must be 1-D with at least 2 seeds, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"{name}: has a non-finite value at index "
                         f"{int(np.argmin(np.isfinite(array)))}")
    return array


def optimism_interval(winner_tuning: Any, winner_evaluation: Any, *, statistic: str = "mean",
                      confidence: float = 0.95, key: jax.Array | None = None,
                      reps: int = 2000) -> tuple[float, float, float, str]:
    """Interval of the winner's optimism ``stat(tuning) - stat(evaluation)``.

    For the mean: Welch's t interval with the tuning variance floored at the evaluation
    variance (formula in the module docstring; Welch 1947). For ``"median"`` and
    ``"iqm"``: a percentile bootstrap of the difference, resampling the two samples
    independently (Efron & Tibshirani 1993, Ch. 13). Coverage: :data:`OPTIMISM_COVERAGE`.

    Args:
      winner_tuning: ``[T]`` the winner's scores on the tuning seeds (``T >= 2``).
      winner_evaluation: ``[E]`` its scores on the disjoint evaluation seeds (``E >= 2``).
      statistic: ``"mean"``, ``"median"`` or ``"iqm"``.
      confidence: nominal coverage in (0, 1) (coverage was measured at 0.95).
      key: JAX PRNG key, required for the bootstrap statistics.
      reps: bootstrap resamples.

    Returns:
      ``(point, low, high, method)``: Python floats and the method name.
    """
    statistic = check_statistic(statistic)
    confidence = check_confidence(confidence)
    tuning = _sample(winner_tuning, "winner_tuning")
    evaluation = _sample(winner_evaluation, "winner_evaluation")
    point = float(statistic_np(statistic, tuning) - statistic_np(statistic, evaluation))
    method = _METHODS[statistic]
    if method == "floored_welch_t":
        low, high = _floored_welch_bounds(tuning, evaluation, confidence)
    else:
        if key is None:
            raise ValueError(f"key: the {statistic} optimism interval is a bootstrap; pass "
                             "key=jax.random.key(seed)")
        low, high = np.asarray(_bootstrap_bounds(
            jnp.asarray(tuning, jnp.float32), jnp.asarray(evaluation, jnp.float32),
            check_key(key), statistic, check_reps(reps), confidence), np.float64)
    return point, float(low), float(high), method


def optimism_note(statistic: str, method: str, n_tuning: int, n_evaluation: int,
                   data: str, confidence: float, reps: int) -> str:
    head = (f"optimism ({statistic} of the winner on {n_tuning} tuning seeds minus on "
            f"{n_evaluation} fresh evaluation seeds): {_LABELS[method].format(reps=reps)}")
    by_kind = OPTIMISM_COVERAGE[statistic]
    n = min(n_tuning, n_evaluation)
    sizes = sorted({k for cells in by_kind.values() for k in cells if k <= n})
    if not math.isclose(confidence, 0.95) or not sizes:
        return head + "; coverage not measured at this confidence or n (measured at 95 %, " \
            "T = E = 8 and 16)."
    n_sim = sizes[-1]
    kinds = list(by_kind) if data == "any" else [data]
    known = {k: by_kind[k][n_sim] for k in kinds if k in by_kind and n_sim in by_kind[k]}
    if not known:
        measured = ", ".join(f"{k} {v[n_sim]:.3f}" for k, v in by_kind.items())
        return head + f"; coverage not measured on {data} data (measured at n = {n_sim}: " \
            f"{measured})."
    kind, coverage = min(known.items(), key=lambda kv: kv[1])
    tail = (f"; measured coverage {coverage:.3f} of the realized and the expected optimism "
            f"(min over simulated {kind} settings at T = E = {n_sim}, tests/test_tune.py)")
    if coverage < 0.93:
        tail += "; below 0.93, so run more seeds"
    return head + tail + "."
