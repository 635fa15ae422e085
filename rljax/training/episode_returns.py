"""Per-seed returns from a PPO run's logs: what every user otherwise writes by hand from
``return_sum / episodes``.

The PPO trainers (:func:`rljax.training.make_ppo_train`, :func:`make_ppo_chunks`,
:func:`make_recurrent_ppo_train`) log, per update (or per row of ``log_every``
updates), ``return_sum`` (the summed returns of the episodes that finished) and
``episodes`` (how many finished). The mean return of the episodes that finished in the
last ``K`` rows is

    final_return = sum_{u > U - K} return_sum[u] / sum_{u > U - K} episodes[u]

(NaN when no episode finished there: a seed with nothing to report is never counted as
0). A sweep's outputs carry leading ``[configs, seeds]`` axes; the reduction is over the
last axis only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def final_returns(logs: Mapping[str, Any], *, last: int = 1) -> np.ndarray:
    """Mean return of the episodes that finished in the last ``last`` logged rows.

    Args:
      logs: a mapping with ``return_sum`` and ``episodes`` of shape ``[..., R]`` (R
        logged rows; e.g. ``Sweep(train).run(S).outputs``, ``[S, R]``, or a grid's
        ``[K, S, R]``).
      last: K, the rows to pool (1 <= K <= R).

    Returns:
      float64 ``[...]``: one return per seed (per config and seed); NaN where no episode
      finished in those rows.

    Raises:
      ValueError: one line naming ``logs`` (a missing key or mismatched shapes) or
        ``last``.

    Example::

        result = rljax.Sweep(make_ppo_train(env, net, config), block_size=8).run(8)
        rljax.training.final_returns(result.outputs, last=10)   # [8]
    """
    missing = [k for k in ("return_sum", "episodes") if k not in logs]
    if missing:
        raise ValueError(f"logs: needs return_sum and episodes (a PPO run's logs), missing "
                         f"{', '.join(missing)}")
    sums = np.asarray(logs["return_sum"], np.float64)
    counts = np.asarray(logs["episodes"], np.float64)
    if sums.shape != counts.shape or sums.ndim < 1:
        raise ValueError(f"logs: return_sum {list(sums.shape)} and episodes "
                         f"{list(counts.shape)} must have one shape [..., R]")
    rows = sums.shape[-1]
    if isinstance(last, bool) or not isinstance(last, int | np.integer) or not 1 <= last <= rows:
        raise ValueError(f"last: must be an integer in [1, {rows}] (the logged rows), got "
                         f"{last!r}")
    total = sums[..., -last:].sum(axis=-1)
    finished = counts[..., -last:].sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(finished > 0, total / finished, np.nan)
