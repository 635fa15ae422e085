"""Per-prompt difficulty: unbiased pass@k and a windowed, hysteretic difficulty classifier.

``pass_at_k(n, c, k)`` is the unbiased pass@k estimator of Chen et al. (2021, "Evaluating
Large Language Models Trained on Code", arXiv:2107.03374, eq. 1)::

    pass@k = 1 - C(n - c, k) / C(n, k)
           = 1 - prod_{i=n-c+1}^{n} (1 - k / i)          (Chen et al.'s stable form)
           = 1 - prod_{j=0}^{k-1} (1 - c / (n - j))      (the form computed here)

The last two products are the same ratio of falling factorials; the last has ``k`` factors
(``k`` is a static Python int), so ``n`` and ``c`` may vary per element and be traced.

``DifficultyClassifier`` keeps, for each of ``P`` prompts, a ring buffer of the last
``window`` groups (correct count, group size). After each ``update`` it re-estimates the
touched prompts as pooled pass@k over the window,
``estimate_p = pass_at_k(sum_w attempts[p, w], sum_w successes[p, w], k)``, and re-bins them
with hysteresis: bin ``b`` covers ``[e_{b-1}, e_b)`` of the estimate (``e_{-1} = -inf``,
``e_{B-1} = +inf``; bin 0 is the hardest) and a prompt in bin ``b`` stays there while

    e_{b-1} - hysteresis <= estimate < e_b + hysteresis,

otherwise it moves to the plain bin of its estimate (``hysteresis = 0`` is plain binning).
"""

from __future__ import annotations

import numbers
import operator
from dataclasses import dataclass
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rljax.types import Array


def _concrete(x) -> np.ndarray | None:
    """``np.asarray(x)`` when ``x`` is concrete, ``None`` when it is traced."""
    try:
        return np.asarray(x)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return None


def _check_k(k) -> int:
    try:
        k = operator.index(k)
    except TypeError:
        raise ValueError(f"k: must be a Python int >= 1, got {k!r}") from None
    if k < 1:
        raise ValueError(f"k: must be >= 1, got {k}")
    return k


def pass_at_k(n, c, k: int) -> Array:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct (Chen et al., 2021).

        pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{j=0}^{k-1} (1 - c / (n - j))

    (equal to Chen et al.'s ``1 - prod_{i=n-c+1}^{n} (1 - k / i)``; both are products of
    factors in ``[0, 1]``, so no binomial coefficient is ever formed). Computed as
    ``-expm1(sum_j log1p(-c / (n - j)))``, accurate also for small pass@k. The result is exactly
    1 when ``n - c < k`` (every ``k``-subset holds a correct sample). Elementwise over
    broadcast ``n`` and ``c``; jit- and vmap-able, ``O(k)`` work per element.

    Args:
      n: integer array (any shape): samples drawn.
      c: integer array broadcastable with ``n``: correct samples, ``0 <= c <= n``.
      k: static Python int ``>= 1``.

    Returns:
      float32 array of the broadcast shape. Where ``n`` or ``c`` are traced, elements with
      ``n < k`` or ``c`` outside ``[0, n]`` are NaN.

    Raises:
      ValueError: ``k < 1`` (or not an int); for concrete ``n``/``c``: any ``n < k``
        (message names ``k``) or any ``c`` outside ``[0, n]`` (names ``c``).
    """
    k = _check_k(k)
    n_np, c_np = _concrete(n), _concrete(c)
    if n_np is not None and n_np.size and np.any(n_np < k):
        raise ValueError(f"k: must be <= n for every element, got k={k}, min n={n_np.min()}")
    if n_np is not None and c_np is not None:
        n_b, c_b = np.broadcast_arrays(n_np, c_np)
        if c_b.size and (np.any(c_b < 0) or np.any(c_b > n_b)):
            raise ValueError("c: must satisfy 0 <= c <= n for every element")
    return _pass_at_k(n, c, k)



def pass_at_k_curve(correct: Any) -> np.ndarray:
    """pass@k for every ``k = 1 .. n`` from per-sample correctness (numpy, host side).

    Args:
      correct: ``[..., n]`` 0/1 correctness of ``n`` independent samples per item.

    Returns:
      float ``[..., n]``: entry ``k - 1`` is :func:`pass_at_k` ``(n, c, k)`` with ``c``
      the item's correct count (entry 0 is the mean, pass@1).
    """
    correct = np.asarray(correct)
    n = correct.shape[-1]
    c = correct.sum(axis=-1).astype(np.int64)
    return np.stack([np.asarray(pass_at_k(n, c, k), np.float64) for k in range(1, n + 1)],
                    axis=-1)


def zero_signal_probability(n, c, group_size: int) -> Array:
    """Unbiased estimate of ``p^G + (1 - p)^G`` -- the chance that a group of ``G``
    samples is all correct or all wrong, i.e. that a group-relative advantage is zero
    everywhere -- from ``c`` correct of ``n`` independent samples:

        (C(c, G) + C(n - c, G)) / C(n, G) = (1 - pass@G(n, c)) + (1 - pass@G(n, n - c))

    (a U-statistic: its expectation over ``c ~ Binomial(n, p)`` is exactly
    ``p^G + (1 - p)^G``; the plug-in ``p_hat^G + ...`` is biased). Elementwise like
    :func:`pass_at_k`; ``group_size <= n``.
    """
    return (1.0 - pass_at_k(n, c, group_size)) + (1.0 - pass_at_k(n, np.asarray(n) - c,
                                                                     group_size))

def _pass_at_k(n, c, k: int) -> Array:
    """``pass_at_k`` without the concrete-value checks (NaN where undefined)."""
    n = jnp.asarray(n).astype(jnp.float32)
    c = jnp.asarray(c).astype(jnp.float32)
    n, c = jnp.broadcast_arrays(n, c)

    def body(j, log_prod):
        remaining = n - j  # > 0 wherever n >= k
        ratio = jnp.clip(c / jnp.where(remaining > 0, remaining, 1.0), 0.0, 1.0)
        return log_prod + jnp.log1p(-ratio)  # -inf once a factor is 0

    log_prod = jax.lax.fori_loop(0, k, body, jnp.zeros_like(n), unroll=min(k, 8))
    defined = (n >= k) & (c >= 0) & (c <= n)
    return jnp.where(defined, -jnp.expm1(log_prod), jnp.nan)


@struct.dataclass
class DifficultyState:
    """Per-prompt difficulty record (all arrays; a seed axis can be added by vmap).

    Attributes:
      successes: ``[P, W]`` int32 ring buffer: correct count of each of the last ``W``
        groups of every prompt.
      attempts: ``[P, W]`` int32 ring buffer: size of those groups (0 = empty slot).
      cursor: ``[P]`` int32: next ring slot of every prompt.
      estimate: ``[P]`` float32 windowed pooled pass@k estimate; the prior (or the initial
        estimate) until the window holds at least ``k`` attempts.
      bin: ``[P]`` int32 difficulty bin: 0 = hardest (lowest estimate) ... ``num_bins - 1``
        = easiest.
    """

    successes: Array
    attempts: Array
    cursor: Array
    estimate: Array
    bin: Array


@dataclass(frozen=True)
class DifficultyClassifier:
    """Windowed pass@k difficulty estimate per prompt, binned with hysteresis.

    Attributes:
      num_prompts: ``P``, prompts in the bank (ids ``0 .. P-1``).
      bin_edges: interior edges ``e_0 < ... < e_{B-2}``, each in ``(0, 1)``;
        ``num_bins = B = len(bin_edges) + 1``.
      window: ``W``, groups remembered per prompt (older groups are forgotten).
      k: the pass@k estimated (1 = success rate).
      hysteresis: ``h >= 0``; a prompt in bin ``b`` stays while
        ``e_{b-1} - h <= estimate < e_b + h``. Must be below half the smallest gap between
        interior edges and below ``e_0`` and ``1 - e_{B-2}`` (so every bin stays reachable).
      prior: estimate of a prompt without data (in ``[0, 1]``).
    """

    num_prompts: int
    bin_edges: tuple[float, ...] = (0.25, 0.75)
    window: int = 4
    k: int = 1
    hysteresis: float = 0.05
    prior: float = 0.5

    def __post_init__(self):
        for name in ("num_prompts", "window", "k"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"{name}: must be an int >= 1, got {value!r}")
            object.__setattr__(self, name, int(value))
        try:
            edges = tuple(float(e) for e in self.bin_edges)
        except (TypeError, ValueError):
            raise ValueError(f"bin_edges: must be a sequence of floats, got "
                             f"{self.bin_edges!r}") from None
        if any(not 0.0 < e < 1.0 for e in edges) or any(
                b <= a for a, b in zip(edges, edges[1:], strict=False)):
            raise ValueError(f"bin_edges: must be strictly increasing and inside (0, 1), got "
                             f"{self.bin_edges!r}")
        object.__setattr__(self, "bin_edges", edges)
        h = float(self.hysteresis)
        limit = min([*(b - a for a, b in zip(edges, edges[1:], strict=False))], default=2.0) / 2
        limit = min([limit, *([edges[0], 1.0 - edges[-1]] if edges else [])])
        if not 0.0 <= h < limit:
            raise ValueError(f"hysteresis: must be in [0, {limit:g}) for bin_edges={edges} "
                             f"(below half the smallest gap between edges and the outer edges' "
                             f"distance to 0 and 1), "
                             f"got {self.hysteresis!r}")
        if not 0.0 <= float(self.prior) <= 1.0:
            raise ValueError(f"prior: must be in [0, 1], got {self.prior!r}")

    @property
    def num_bins(self) -> int:
        """``len(bin_edges) + 1``."""
        return len(self.bin_edges) + 1

    def bin_of(self, estimate: Array) -> Array:
        """Plain bin (no hysteresis): ``#{b : e_b <= estimate}``, int32, same shape.

        Equal to ``searchsorted(bin_edges, estimate, side="right")``: 0 = hardest.
        """
        estimate = jnp.asarray(estimate, jnp.float32)
        edges = jnp.asarray(self.bin_edges, jnp.float32)
        return jnp.sum(estimate[..., None] >= edges, axis=-1).astype(jnp.int32)

    def init(self, initial_estimate: Array | None = None) -> DifficultyState:
        """Empty windows; ``estimate`` = ``initial_estimate`` (``[P]``) or the prior.

        Bins are the plain bins of the initial estimate (no hysteresis at init).
        """
        p, w = self.num_prompts, self.window
        if initial_estimate is None:
            estimate = jnp.full((p,), self.prior, jnp.float32)
        else:
            estimate = jnp.asarray(initial_estimate, jnp.float32)
            chex.assert_shape(estimate, (p,))
        return DifficultyState(
            successes=jnp.zeros((p, w), jnp.int32),
            attempts=jnp.zeros((p, w), jnp.int32),
            cursor=jnp.zeros((p,), jnp.int32),
            estimate=estimate,
            bin=self.bin_of(estimate),
        )

    def update(self, state: DifficultyState, prompt_ids: Array, successes: Array,
               attempts: Array, valid: Array | None = None) -> DifficultyState:
        """Record one group per valid row, then re-estimate and re-bin the touched prompts.

        Row ``i`` is the group (``successes[i]`` correct of ``attempts[i]``) of prompt
        ``prompt_ids[i]``; it is ignored when ``valid[i]`` is False, ``attempts[i] <= 0`` or
        the id is outside ``[0, P)``. A prompt may appear in several rows: its rows are
        written, in row order, to consecutive ring slots from its cursor (when one call
        holds more than ``W`` of them, only the last ``W`` stay, as if written one by one).
        ``successes`` is clipped to ``[0, attempts]``.

        A touched prompt's estimate becomes the pooled window pass@k when the window holds
        ``>= k`` attempts (else it keeps its previous estimate); its bin follows the
        hysteresis rule of the module docstring. Untouched prompts are unchanged.

        Args:
          state: the current ``DifficultyState``.
          prompt_ids: ``[M]`` int.
          successes: ``[M]`` int, correct samples per row.
          attempts: ``[M]`` int, samples per row.
          valid: optional ``[M]`` bool.

        Returns:
          The new ``DifficultyState``.
        """
        chex.assert_rank([prompt_ids, successes, attempts], 1)
        chex.assert_equal_shape([prompt_ids, successes, attempts])
        p, w = self.num_prompts, self.window
        m = prompt_ids.shape[0]
        prompt_ids = jnp.asarray(prompt_ids, jnp.int32)
        attempts = jnp.asarray(attempts, jnp.int32)
        successes = jnp.clip(jnp.asarray(successes, jnp.int32), 0, jnp.maximum(attempts, 0))
        ok = (attempts > 0) & (prompt_ids >= 0) & (prompt_ids < p)
        if valid is not None:
            chex.assert_shape(valid, (m,))
            ok = ok & valid.astype(bool)

        # Rank of each row among the valid rows of the same prompt (stable sort by id).
        key = jnp.where(ok, prompt_ids, p)
        order = jnp.argsort(key, stable=True)
        sorted_key = key[order]
        first = jnp.searchsorted(sorted_key, sorted_key, side="left")
        last = jnp.searchsorted(sorted_key, sorted_key, side="right")
        rank = jnp.zeros((m,), jnp.int32).at[order].set(
            (jnp.arange(m) - first).astype(jnp.int32))
        count = jnp.zeros((m,), jnp.int32).at[order].set((last - first).astype(jnp.int32))

        safe_ids = jnp.where(ok, prompt_ids, 0)
        write = ok & (rank >= count - w)  # only the last W groups of a prompt survive
        row = jnp.where(write, prompt_ids, p)  # out of range -> dropped
        slot = (state.cursor[safe_ids] + rank) % w
        new_successes = state.successes.at[row, slot].set(successes, mode="drop")
        new_attempts = state.attempts.at[row, slot].set(attempts, mode="drop")
        added = jnp.zeros((p,), jnp.int32).at[jnp.where(ok, prompt_ids, p)].add(
            1, mode="drop")
        cursor = (state.cursor + added) % w

        total_attempts = jnp.sum(new_attempts, axis=1)
        total_successes = jnp.sum(new_successes, axis=1)
        fresh = _pass_at_k(total_attempts, total_successes, self.k)
        touched = (added > 0) & (total_attempts >= self.k)
        estimate = jnp.where(touched, fresh, state.estimate)
        return DifficultyState(
            successes=new_successes,
            attempts=new_attempts,
            cursor=cursor,
            estimate=estimate,
            bin=jnp.where(touched, self._rebin(state.bin, estimate), state.bin),
        )

    def _rebin(self, bins: Array, estimate: Array) -> Array:
        """Hysteresis rule: keep ``bins`` while ``e_{b-1} - h <= estimate < e_b + h``."""
        edges = jnp.asarray((-np.inf, *self.bin_edges, np.inf), jnp.float32)
        lower, upper = edges[bins], edges[bins + 1]
        stay = (estimate >= lower - self.hysteresis) & (estimate < upper + self.hysteresis)
        return jnp.where(stay, bins, self.bin_of(estimate)).astype(jnp.int32)
