"""rljax.cpu_threads: one BLAS thread while sweeps and commands run, with the same bits."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg  # noqa: F401  (loads the OpenBLAS jaxlib's LAPACK kernels call)
from threadpoolctl import threadpool_info, threadpool_limits

from rljax.cpu_threads import blas_threads, current_blas_threads
from rljax.policies import mlp_actor_critic
from rljax.sweep import ChunkedSweep, Sweep


def _reads_threads(key):
    """A one-seed program whose output is the BLAS thread count while it executes."""
    count = jax.pure_callback(lambda: np.int32(current_blas_threads()),
                              jax.ShapeDtypeStruct((), jnp.int32))
    return {"threads": count + 0 * jax.random.bits(key, (), jnp.uint32).astype(jnp.int32)}


def test_orthogonal_init_bits_do_not_depend_on_blas_threads():
    net = mlp_actor_critic(6)  # orthogonal initialisers, a sequential vmap over seeds
    keys = jax.random.split(jax.random.key(3), 16)
    init = jax.jit(jax.vmap(lambda k: net.init(k, jnp.zeros(400)))).lower(keys).compile()
    with threadpool_limits(limits=2, user_api="blas"):
        two = jax.block_until_ready(init(keys))
    with blas_threads(1):
        assert current_blas_threads() == 1
        one = jax.block_until_ready(init(keys))
    for a, b in zip(jax.tree_util.tree_leaves(two), jax.tree_util.tree_leaves(one),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_sweeps_run_with_one_blas_thread_and_restore_the_limit():
    with threadpool_limits(limits=2, user_api="blas"):
        assert current_blas_threads() == 2
        out = Sweep(_reads_threads, block_size=2).run(3, progress=False).outputs
        np.testing.assert_array_equal(out["threads"], [1, 1, 1])
        assert current_blas_threads() == 2

        def init(key):
            return {"key": key}

        def advance(state):
            logs = _reads_threads(state["key"])
            return state, logs

        def finish(state):
            return _reads_threads(state["key"])

        chunked = ChunkedSweep(init, advance, finish, num_chunks=2, block_size=2)
        result = chunked.run(2, progress=False).outputs
        np.testing.assert_array_equal(result["final"]["threads"], [1, 1])
        np.testing.assert_array_equal(result["logs"]["threads"], [[1, 1], [1, 1]])
        assert current_blas_threads() == 2


def test_current_blas_threads_is_threadpoolctls_largest_blas_count():
    with threadpool_limits(limits=2, user_api="blas"):
        counts = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
        assert counts and current_blas_threads() == max(counts) == 2


def test_bad_threads_is_one_line():
    with pytest.raises(ValueError, match=r"^threads: must be an integer >= 1 or None, got 0$"):
        with blas_threads(0):
            pass
    with blas_threads(None):  # None changes nothing
        pass
