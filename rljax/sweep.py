"""Seed sweeps: ``jit(vmap(train))`` over fixed blocks of seeds, sharded over devices.

One seed's whole training run is a pure function ``train(key) -> outputs``. A sweep runs
it for seeds ``0 .. num_seeds-1``:

* **Keys.** Seed ``i`` gets ``fold_in(key(base_seed), i)``: a function of
  ``(base_seed, i)`` alone.
* **Fixed blocks.** XLA compiles a different program for each batch shape, and on CPU
  the vectorised code for one shape can differ from another's in the last bits of a
  seed's result (measured here on the ORM-vs-PRM study: batch 4096 vs 256 moved about
  10 % of seeds' final logits by up to 5e-7; see the README). So the sweep compiles **one** program
  for a block of ``block_size`` seeds per device and runs every seed inside such a
  block; the last round is padded with the next seed ids, whose results are dropped.
  Seed ``i``'s result is then bitwise the same for any number of seeds, devices or
  processes at a given block size. ``block_size`` is part of a run's config.
* **Devices.** A round is ``block_size * num_devices`` seeds, sharded along the seed axis
  with ``jax.sharding.NamedSharding`` (a 1-D mesh named ``"seeds"``); every device runs
  the same per-block program. On CPU,
  ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` gives 8 devices.
* **Progress.** A ``tqdm`` bar counts seeds as rounds finish (round ``r+1`` is dispatched
  before round ``r`` is fetched, so the host never idles the devices).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rljax.types import PRNGKey

DEFAULT_BLOCK_SIZE = 1024
SEED_AXIS = "seeds"


def seed_key(base_seed: int | jax.Array, seed_id: int | jax.Array) -> PRNGKey:
    """The key of seed ``seed_id``: ``fold_in(jax.random.key(base_seed), seed_id)``."""
    return jax.random.fold_in(jax.random.key(base_seed), seed_id)


@dataclass(frozen=True)
class SweepResult:
    """What :func:`run_sweep` returns.

    Attributes:
      outputs: the pytree returned by ``train``, as numpy arrays with a leading seed axis
        ``[num_seeds, ...]`` (seed ``i`` in row ``i``).
      seed_ids: ``[num_seeds]`` int64, the seed ids (``0 .. num_seeds-1``).
      compile_seconds: time to lower and compile the block program.
      run_seconds: wall time of all rounds (excluding compilation).
      block_size: seeds per device per round.
      num_devices: devices the seed axis was sharded over.
      num_rounds: rounds run (``ceil(num_seeds / (block_size * num_devices))``).
    """

    outputs: Any
    seed_ids: np.ndarray
    compile_seconds: float
    run_seconds: float
    block_size: int
    num_devices: int
    num_rounds: int

    @property
    def num_seeds(self) -> int:
        return int(self.seed_ids.shape[0])


def check_sweep_args(num_seeds: Any, block_size: Any) -> None:
    """Raise a one-line ``ValueError`` naming ``seeds`` or ``block_size`` if invalid."""
    if isinstance(num_seeds, bool) or not isinstance(num_seeds, int | np.integer) or num_seeds < 1:
        raise ValueError(f"seeds: must be an integer >= 1, got {num_seeds!r}")
    if (
        isinstance(block_size, bool)
        or not isinstance(block_size, int | np.integer)
        or block_size < 1
    ):
        raise ValueError(f"block_size: must be an integer >= 1, got {block_size!r}")


def _set_blocks(sweep: Any, base_seed: int, block_size: int,
                devices: Sequence[jax.Device] | None) -> None:
    """Validate ``block_size``; set a sweep's seed, block, devices, 1-D mesh sharding and
    round size (``block_size * num_devices``)."""
    check_sweep_args(1, block_size)
    sweep.base_seed = base_seed
    sweep.block_size = int(block_size)
    sweep.devices = list(jax.local_devices() if devices is None else devices)
    mesh = Mesh(np.asarray(sweep.devices), (SEED_AXIS,))
    sweep.sharding = NamedSharding(mesh, PartitionSpec(SEED_AXIS))
    sweep.round_size = sweep.block_size * len(sweep.devices)


class Sweep:
    """A compiled seed sweep of one ``train(key)`` function (see the module docstring).

    Build it once, then run it for any number of seeds; the block program is compiled on
    the first :meth:`run` (or an explicit :meth:`compile`) and reused::

        sweep = Sweep(train, block_size=1024)
        result = sweep.run(4096)          # outputs [4096, ...]

    Args:
      train: one seed's run, ``train(key) -> pytree of arrays``; written for one seed.
      base_seed: the sweep's base seed; seed ``i``'s key is ``seed_key(base_seed, i)``.
      block_size: seeds per device per round; fixes the compiled program (and so the
        bits of every result).
      devices: devices to shard the seed axis over (default: all local devices).
    """

    def __init__(
        self,
        train: Callable[[PRNGKey], Any],
        *,
        base_seed: int = 0,
        block_size: int = DEFAULT_BLOCK_SIZE,
        devices: Sequence[jax.Device] | None = None,
    ):
        self.train = train
        _set_blocks(self, base_seed, block_size, devices)
        self._compiled = None
        self.compile_seconds: float | None = None

    def compile(self) -> float:
        """Lower and compile the per-round program (once); returns the seconds it took."""
        if self._compiled is None:
            base_key = jax.random.key(self.base_seed)
            train = self.train

            def train_block(seed_ids):
                keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(base_key, seed_ids)
                return jax.vmap(train)(keys)

            jitted = jax.jit(train_block, in_shardings=self.sharding, out_shardings=self.sharding)
            start = time.perf_counter()
            self._compiled = jitted.lower(
                jax.ShapeDtypeStruct((self.round_size,), jnp.int32, sharding=self.sharding)
            ).compile()
            self.compile_seconds = time.perf_counter() - start
        return float(self.compile_seconds)

    def run_round(self, first_seed: int) -> Any:
        """Dispatch one round: seeds ``first_seed .. first_seed + round_size - 1``.

        Returns the (asynchronous, device-resident) outputs ``[round_size, ...]``.
        """
        self.compile()
        ids = np.arange(first_seed, first_seed + self.round_size, dtype=np.int32)
        return self._compiled(jax.device_put(ids, self.sharding))

    def run(
        self, num_seeds: int, *, progress: bool | None = None, desc: str | None = None
    ) -> SweepResult:
        """Run seeds ``0 .. num_seeds-1``; returns a :class:`SweepResult` (numpy outputs).

        Args:
          num_seeds: how many seeds (>= 1).
          progress: show a tqdm bar (default: only on a terminal).
          desc: label of the progress bar.
        """
        check_sweep_args(num_seeds, self.block_size)
        compile_seconds = self.compile()
        num_rounds = math.ceil(num_seeds / self.round_size)

        from tqdm.auto import tqdm

        bar = tqdm(total=num_seeds, desc=desc, unit="seed", disable=_progress_disabled(progress))
        start = time.perf_counter()
        host_outputs = []
        pending = None
        for r in range(num_rounds):
            out = self.run_round(r * self.round_size)
            if pending is not None:
                host_outputs.append(_fetch(pending, bar, num_seeds))
            pending = (r, out)
        host_outputs.append(_fetch(pending, bar, num_seeds))
        run_seconds = time.perf_counter() - start
        bar.close()

        outputs = jax.tree_util.tree_map(
            lambda *xs: np.concatenate(xs, axis=0)[:num_seeds], *host_outputs
        )
        return SweepResult(
            outputs=outputs,
            seed_ids=np.arange(num_seeds, dtype=np.int64),
            compile_seconds=compile_seconds,
            run_seconds=run_seconds,
            block_size=self.block_size,
            num_devices=len(self.devices),
            num_rounds=num_rounds,
        )


def run_sweep(
    train: Callable[[PRNGKey], Any],
    num_seeds: int,
    *,
    base_seed: int = 0,
    block_size: int = DEFAULT_BLOCK_SIZE,
    devices: Sequence[jax.Device] | None = None,
    progress: bool | None = None,
    desc: str | None = None,
) -> SweepResult:
    """Compile and run a :class:`Sweep` in one call (arguments as there).

    Returns:
      :class:`SweepResult` with outputs ``[num_seeds, ...]`` as numpy arrays.
    """
    check_sweep_args(num_seeds, block_size)
    sweep = Sweep(train, base_seed=base_seed, block_size=block_size, devices=devices)
    return sweep.run(num_seeds, progress=progress, desc=desc)


def _fetch(pending: tuple[int, Any], bar: Any, num_seeds: int) -> Any:
    r, out = pending
    host = jax.device_get(out)
    round_size = jax.tree_util.tree_leaves(host)[0].shape[0]
    done_before = r * round_size
    bar.update(max(0, min(num_seeds, done_before + round_size) - done_before))
    return host


def _progress_disabled(progress: bool | None) -> bool | None:
    if progress is None:
        return None  # tqdm: disable when not writing to a terminal
    return not progress


class ChunkedSweep:
    """A seed sweep of a training run cut into chunks, with checkpoints between chunks.

    One seed's run is ``init(key) -> state``, then ``num_chunks`` times
    ``advance(state) -> (state, logs)``, then ``finish(state) -> outputs``; all three are
    pure, written for one seed, and vmapped over a fixed block of seeds per device exactly
    like :class:`Sweep` (same keys: seed ``i`` gets ``seed_key(base_seed, i)``). Between
    chunks the host may save the block's state; because every key lives in the state,
    a run resumed from a checkpoint is bitwise the run that was never interrupted (the
    same compiled chunk program runs on the same state).

    Args:
      init: ``init(key) -> state`` (pytree of arrays).
      advance: ``advance(state) -> (state, logs)``; ``logs`` a pytree of arrays.
      finish: ``finish(state) -> outputs``.
      num_chunks: chunks per run (>= 1).
      base_seed, block_size, devices: as for :class:`Sweep`.
    """

    def __init__(
        self,
        init: Callable[[PRNGKey], Any],
        advance: Callable[[Any], tuple[Any, Any]],
        finish: Callable[[Any], Any],
        *,
        num_chunks: int,
        base_seed: int = 0,
        block_size: int = DEFAULT_BLOCK_SIZE,
        devices: Sequence[jax.Device] | None = None,
    ):
        if isinstance(num_chunks, bool) or not isinstance(num_chunks, int) or num_chunks < 1:
            raise ValueError(f"num_chunks: must be an integer >= 1, got {num_chunks!r}")
        self.num_chunks = num_chunks
        _set_blocks(self, base_seed, block_size, devices)
        base_key = jax.random.key(base_seed)

        def init_block(seed_ids):
            keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(base_key, seed_ids)
            return jax.vmap(init)(keys)

        shard = dict(out_shardings=self.sharding)
        self._init = jax.jit(init_block, in_shardings=self.sharding, **shard)
        self._advance = jax.jit(jax.vmap(advance), in_shardings=self.sharding, **shard)
        self._finish = jax.jit(jax.vmap(finish), in_shardings=self.sharding, **shard)
        self.compile_seconds = 0.0

    def _ids(self, r: int) -> jax.Array:
        ids = np.arange(r * self.round_size, (r + 1) * self.round_size, dtype=np.int32)
        return jax.device_put(ids, self.sharding)

    def run(
        self,
        num_seeds: int,
        *,
        checkpointer: Any = None,
        checkpoint_every: int = 1,
        resume: bool = False,
        progress: bool | None = None,
        desc: str | None = None,
    ) -> SweepResult:
        """Run seeds ``0 .. num_seeds-1``.

        Args:
          num_seeds: how many seeds (>= 1).
          checkpointer: a :class:`rljax.checkpoint.Checkpointer` (or anything with its
            ``save``/``restore``/``latest_step``); ``None`` saves nothing. Its directory
            gets one checkpoint per ``checkpoint_every`` chunks (the round's state and
            logs so far) and, under ``rounds/``, each finished round's outputs.
          checkpoint_every: save every this many chunks (>= 1).
          resume: continue from the newest checkpoint (finished rounds are read back,
            the interrupted round continues from its saved chunk).
          progress, desc: tqdm bar over seeds x chunks.

        Returns:
          :class:`SweepResult` whose ``outputs`` are ``{"logs": [S, num_chunks, ...],
          "final": finish's outputs [S, ...]}``; ``compile_seconds`` is the time of the
          first round's first calls (compilation included), ``run_seconds`` the rest.
        """
        check_sweep_args(num_seeds, self.block_size)
        if (isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int)
                or checkpoint_every < 1):
            raise ValueError(f"checkpoint_every: must be an integer >= 1, got "
                             f"{checkpoint_every!r}")
        if resume and checkpointer is None:
            raise ValueError("resume: needs a checkpointer")
        num_rounds = math.ceil(num_seeds / self.round_size)
        rounds_store = None
        if checkpointer is not None:
            from rljax.checkpoint import Checkpointer

            rounds_store = Checkpointer(Path(checkpointer.directory) / "rounds",
                                        metadata=checkpointer.metadata, keep=2**31 - 1)

        from tqdm.auto import tqdm

        bar = tqdm(total=num_seeds * self.num_chunks, desc=desc, unit="seed-chunk",
                   disable=_progress_disabled(progress))
        start = time.perf_counter()
        first_call_end = None
        host_rounds = []
        for r in range(num_rounds):
            state_shape = jax.eval_shape(self._init, self._ids(r))
            if resume and r in rounds_store.steps():
                template = {"logs": jax.tree_util.tree_map(
                                lambda s: jax.ShapeDtypeStruct(
                                    (s.shape[1], s.shape[0], *s.shape[2:]), s.dtype),
                                self._logs_shape(state_shape)),
                            "final": jax.eval_shape(self._finish, state_shape)}
                template = jax.tree_util.tree_map(
                    lambda s: np.zeros(s.shape, s.dtype), template)
                host_rounds.append(rounds_store.restore(template, r))
                bar.update(self._seeds_in(r, num_seeds) * self.num_chunks)
                continue
            state, logs, done = None, None, 0
            if resume:
                saved = [s for s in checkpointer.steps() if s // (self.num_chunks + 1) == r]
                if saved:
                    template = {"state": state_shape,
                                "logs": jax.tree_util.tree_map(
                                    lambda s: np.zeros(s.shape, s.dtype),
                                    self._logs_shape(state_shape))}
                    restored = checkpointer.restore(template, max(saved))
                    state = jax.device_put(restored["state"], self.sharding)
                    logs = restored["logs"]
                    done = max(saved) % (self.num_chunks + 1)
            if state is None:
                state = self._init(self._ids(r))
            if logs is None:
                logs = jax.tree_util.tree_map(
                    lambda s: np.zeros(s.shape, s.dtype), self._logs_shape(state_shape))
            bar.update(self._seeds_in(r, num_seeds) * done)
            for c in range(done, self.num_chunks):
                state, chunk_logs = self._advance(state)
                chunk_logs = jax.device_get(chunk_logs)
                logs = jax.tree_util.tree_map(lambda buf, x, c=c: _set_row(buf, c, x), logs,
                                              chunk_logs)
                if first_call_end is None:
                    first_call_end = time.perf_counter()
                bar.update(self._seeds_in(r, num_seeds))
                if checkpointer is not None and (
                    (c + 1) % checkpoint_every == 0 and c + 1 < self.num_chunks
                ):
                    checkpointer.save(r * (self.num_chunks + 1) + c + 1,
                                      {"state": state, "logs": logs})
            final = jax.device_get(self._finish(state))
            round_out = {"logs": jax.tree_util.tree_map(lambda x: np.swapaxes(x, 0, 1), logs),
                         "final": final}
            if rounds_store is not None:
                rounds_store.save(r, round_out)
            host_rounds.append(round_out)
        bar.close()
        end = time.perf_counter()
        first_call_end = end if first_call_end is None else first_call_end
        outputs = jax.tree_util.tree_map(
            lambda *xs: np.concatenate(xs, axis=0)[:num_seeds], *host_rounds)
        return SweepResult(
            outputs=outputs,
            seed_ids=np.arange(num_seeds, dtype=np.int64),
            compile_seconds=first_call_end - start,
            run_seconds=end - first_call_end,
            block_size=self.block_size,
            num_devices=len(self.devices),
            num_rounds=num_rounds,
        )

    def _seeds_in(self, r: int, num_seeds: int) -> int:
        return max(0, min(num_seeds, (r + 1) * self.round_size) - r * self.round_size)

    def _logs_shape(self, state_shape: Any) -> Any:
        """``[num_chunks, round_size, ...]`` shapes of the logs buffer."""
        _, logs = jax.eval_shape(self._advance, state_shape)
        return jax.tree_util.tree_map(
            lambda s: jax.ShapeDtypeStruct((self.num_chunks, *s.shape), s.dtype), logs)


def _set_row(buffer: np.ndarray, row: int, value: Any) -> np.ndarray:
    buffer = np.array(buffer, copy=True)
    buffer[row] = value
    return buffer
