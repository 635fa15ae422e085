"""A drop-in for rliable 1.2.0's ``library`` and ``metrics`` modules.

``from rljax.stats.rliable import library as rly, metrics`` replaces ``from rliable import
library as rly, metrics``: the same functions, classes, call signatures and return types,
plus an explicit JAX ``key`` and a vectorised JAX back end for ``jnp`` metric functions.
See :mod:`rljax.stats.rliable.library` for where it differs from rliable (keys, BCa).
"""

from rljax.stats.rliable import library, metrics

__all__ = ["library", "metrics"]
