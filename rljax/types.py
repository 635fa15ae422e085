"""Type aliases shared across rljax.

Everything inside training is a pure function of (params, state, key, data); these
aliases name the pieces so that signatures read as documentation.
"""

from __future__ import annotations

from typing import Any

import jax

Array = jax.Array
PRNGKey = jax.Array  # a typed key from ``jax.random.key``
Params = Any  # a pytree of arrays
Grads = Any  # a pytree shaped like Params
RLState = Any  # a pytree: baselines, counters, curriculum weights
Metrics = dict[str, Array]

__all__ = ["Array", "PRNGKey", "Params", "Grads", "RLState", "Metrics"]
