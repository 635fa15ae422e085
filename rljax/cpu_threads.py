"""One BLAS thread while XLA's CPU programs run: the LAPACK calls inside them stop fighting
XLA's own thread pool for the cores.

On the CPU backend, ``jnp.linalg.qr`` (behind ``jax.nn.initializers.orthogonal``, the
usual initialiser of RL MLPs) runs as a LAPACK custom call into SciPy's OpenBLAS, which by
default starts a thread per core, while XLA's thread pool already keeps every core busy.
Measured on the 2-core CI machine (jaxlib 0.10.2, scipy-openblas): PPO's per-seed
orthogonal initialisation of a 400-input 64x64 actor-critic took 533 ms for 128 seeds with
OpenBLAS's default threads and 164 ms with one (a single 400 x 64 QR: 1.16 ms vs 0.34 ms);
the results are bitwise the same (``tests/test_cpu_threads.py``).

:func:`blas_threads` limits every loaded BLAS library (``threadpoolctl``) for the duration
of a block; :class:`rljax.sweep.Sweep` and :class:`rljax.sweep.ChunkedSweep` run their
programs inside it (:func:`one_blas_thread`), and so does the XLA work of ``rljax run``
and ``rljax bench``. On an
accelerator backend nothing is changed (LAPACK is not on the hot path there).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import jax

F = TypeVar("F", bound=Callable[..., Any])


@contextlib.contextmanager
def blas_threads(threads: int | None = 1) -> Iterator[None]:
    """Limit BLAS/LAPACK to ``threads`` threads inside the block, on the CPU backend.

    SciPy's OpenBLAS (the LAPACK jaxlib's CPU kernels call) is loaded first, so the limit
    reaches it even before the first decomposition ran; the previous limits are restored
    on exit (nesting is fine).

    Args:
      threads: threads per BLAS library (>= 1); ``None`` changes nothing.

    Raises:
      ValueError: ``threads`` not ``None`` or an integer >= 1.
    """
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise ValueError(f"threads: must be an integer >= 1 or None, got {threads!r}")
    if threads is None or jax.default_backend() != "cpu":
        yield
        return
    import scipy.linalg  # noqa: F401  (loads the OpenBLAS jaxlib's LAPACK kernels use)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=threads, user_api="blas"):
        yield


def current_blas_threads() -> int:
    """The largest thread count among the loaded BLAS libraries (``threadpoolctl``); 0 when
    none is loaded."""
    from threadpoolctl import threadpool_info

    return max((info["num_threads"] for info in threadpool_info()
                if info["user_api"] == "blas"), default=0)


def one_blas_thread(fn: F) -> F:
    """Decorate ``fn`` to run inside :func:`blas_threads` ``(1)``."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with blas_threads(1):
            return fn(*args, **kwargs)

    return wrapped  # type: ignore[return-value]
