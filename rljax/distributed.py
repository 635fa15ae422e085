"""Many JAX processes: start-up, the global seed axis, and gathering results.

A sweep over several processes (hosts, or local processes for testing) shards its seed
axis over *all* devices of all processes: round ``r``'s seed ids form one global array
``[round_size]`` sharded along the 1-D ``"seeds"`` mesh, each process computes the
blocks on its own devices, and the outputs are gathered to every process with
``multihost_utils.process_allgather`` (results are written by process 0). Every device
runs the same per-block program as in a single process, so seed ``i``'s result is
bitwise the same however the seeds are split.

Start-up must happen before any JAX computation::

    rljax.distributed.initialize()                    # SLURM / Open MPI: auto-detected
    rljax.distributed.initialize("host0:1234", 4, 2)  # or explicit

On CPU the cross-process collectives use gloo (``jax_cpu_collectives_implementation``).
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np

# environment variables the local launcher (`rljax run --processes N`) sets for a child
ENV_COORDINATOR = "RLJAX_COORDINATOR"
ENV_NUM_PROCESSES = "RLJAX_NUM_PROCESSES"
ENV_PROCESS_ID = "RLJAX_PROCESS_ID"


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None) -> None:
    """``jax.distributed.initialize`` with gloo CPU collectives.

    With no arguments, the launcher's ``RLJAX_*`` variables are used if set, else JAX
    auto-detects the cluster (SLURM, Open MPI, Kubernetes). Call it once, first.
    """
    if coordinator_address is None and os.environ.get(ENV_COORDINATOR):
        coordinator_address = os.environ[ENV_COORDINATOR]
        num_processes = int(os.environ[ENV_NUM_PROCESSES])
        process_id = int(os.environ[ENV_PROCESS_ID])
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address, num_processes, process_id)


def is_primary() -> bool:
    """Whether this is process 0 (the one that writes results)."""
    return jax.process_index() == 0


def global_array(values: np.ndarray, sharding: jax.sharding.Sharding) -> jax.Array:
    """A global array with ``values`` (the same on every process) laid out by
    ``sharding``; each process places only its own devices' shards.

    The result has the full shape of ``values`` (e.g. a round's seed ids ``[R]``).
    """
    values = np.asarray(values)
    return jax.make_array_from_callback(values.shape, sharding, lambda index: values[index])


def to_host(tree: Any) -> Any:
    """Numpy copy of a pytree of (possibly multi-process) arrays, whole on every process
    (``process_allgather`` over processes, ``device_get`` in one process).

    Each leaf keeps its global shape (e.g. ``[R, ...]`` for a round of ``R`` seeds).
    """
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        return multihost_utils.process_allgather(tree, tiled=True)
    return jax.device_get(tree)
