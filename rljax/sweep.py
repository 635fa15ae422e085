"""Seed sweeps: ``jit(vmap(train))`` over fixed blocks of seeds, sharded over devices.

One seed's whole training run is a pure function ``train(key) -> outputs``. A sweep runs
it for seeds ``0 .. num_seeds-1``:

* **Keys.** Seed ``i`` gets ``fold_in(key(base_seed), i)``: a function of
  ``(base_seed, i)`` alone.
* **Fixed blocks.** XLA compiles a different program for each batch shape, and on CPU
  the vectorised code for one shape can differ from another's in the last bits of a
  seed's result (measured here on the ORM-vs-PRM study: batch 4096 vs 256 moved about
  10 % of seeds' final logits by up to 5e-7; see docs/concepts/seeds.md). So the sweep
  compiles **one** program for a block of ``block_size`` seeds per device and runs every
  seed inside such a block; the last round is padded with the next seed ids, whose
  results are dropped. Seed ``i``'s result is then bitwise the same for any number of
  seeds, devices or processes at a given block size. ``block_size`` is part of a run's config.
* **Devices and processes.** A round is ``block_size * num_devices`` seeds, sharded along
  the seed axis with ``jax.sharding.NamedSharding`` (a 1-D mesh named ``"seeds"`` over
  ``jax.devices()``, i.e. all devices of all processes); every device runs the same
  per-block program. On CPU, ``XLA_FLAGS=--xla_force_host_platform_device_count=8``
  gives 8 devices. With several JAX processes (``rljax.distributed.initialize``) each
  process computes its own devices' blocks and the outputs are gathered to every
  process (``process_allgather``); process 0 writes.
* **Checkpoints.** Given a :class:`rljax.checkpoint.Checkpointer` (or a checkpoint
  directory in the run's :class:`SweepOptions`, which :func:`rljax.study.run_study`
  passes down), a sweep
  saves every finished round's outputs (process 0) and a :class:`ChunkedSweep` also its
  block state every ``checkpoint_every`` chunks; ``resume`` reads finished rounds back
  and continues an interrupted one from its newest state, bitwise as if never stopped.
* **Non-finite seeds.** Every round's outputs are checked per seed; a seed whose run
  went NaN/inf is listed in ``SweepResult.nonfinite`` with its first bad step (from
  ``rljax.nonfinite.NONFINITE_STEP`` in the outputs). Seeds never mix in a vmapped
  run, so the others' results are exactly what they would have been.
* **Configurations.** ``run(num_seeds, configs=table)`` runs every (config, seed) pair
  of a :class:`rljax.grid.ConfigTable` of traced hyperparameters: ``train(key, hparams)``
  gets config ``c``'s row as a dict of scalars, vmapped together with the seeds in the
  same compiled program (one per table *structure*, i.e. names and dtypes, whatever the
  values or ``K``). Blocks are fixed over pairs (config-major: pair ``p`` is config
  ``p // S``, seed ``first_seed + p % S``), so config ``c``, seed ``i`` is bitwise the
  same alone, inside a grid of any size or order, and on any number of devices. Config
  ``c``, seed ``i`` uses seed ``i``'s key (common random numbers: comparisons across
  configs are paired); ``Sweep(..., paired=False)`` folds a number made from the
  config's values (:meth:`rljax.grid.ConfigTable.salt`) into the key instead, still
  independent of the config's position. Outputs are ``[K, S, ...]``.
* **Progress.** A ``tqdm`` bar with ETA counts seeds as rounds finish (round ``r+1`` is
  dispatched before round ``r`` is fetched, so the host never idles the devices), or
  seeds x chunks for a :class:`ChunkedSweep`.
* **CPU threads.** ``run`` executes inside :func:`rljax.cpu_threads.blas_threads` ``(1)``:
  on the CPU backend the LAPACK calls of orthogonal initialisation no longer compete with
  XLA's thread pool (3x faster initialisation at 128 seeds, same bits).
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rljax.contracts import check_array_outputs
from rljax.cpu_threads import one_blas_thread
from rljax.distributed import global_array, is_primary, to_host
from rljax.nonfinite import NONFINITE_STEP, nonfinite_seeds
from rljax.types import PRNGKey

DEFAULT_BLOCK_SIZE = 1024
SEED_AXIS = "seeds"
MAX_SEEDS = 2**31 - 1 - 2**20  # seed ids are int32, with room for a padded last round


def seed_key(base_seed: int | jax.Array, seed_id: int | jax.Array) -> PRNGKey:
    """The key of seed ``seed_id``: ``fold_in(jax.random.key(base_seed), seed_id)``.

    Scalar ints in, one typed key ``[]`` out (vmap over ``seed_id`` ``[N]`` for keys ``[N]``).
    """
    return jax.random.fold_in(jax.random.key(base_seed), seed_id)


@dataclass(frozen=True)
class SweepResult:
    """What :func:`run_sweep` returns.

    Attributes:
      outputs: the pytree returned by ``train``, as numpy arrays with a leading seed axis
        ``[num_seeds, ...]`` (seed ``i`` in row ``i``).
      seed_ids: ``[num_seeds]`` int64, the seed ids (``first_seed .. first_seed +
        num_seeds - 1``; ``first_seed`` is 0 unless the run asked otherwise).
      compile_seconds: time to lower and compile the block program.
      run_seconds: wall time of all rounds (excluding compilation).
      block_size: seeds per device per round.
      num_devices: devices the seed axis was sharded over.
      num_rounds: rounds run (``ceil(num_seeds / (block_size * num_devices))``).
      nonfinite: ``{seed id: first non-finite step}`` of the seeds whose run went
        NaN/inf (step -1 when the run does not report it); their rows are kept in
        ``outputs`` -- the other seeds are unaffected -- and analyses should drop them.
      timed_fraction: the share of the run's work (seeds, or seeds x chunks) that
        ``run_seconds`` covers: rounds read back on resume and, for a
        :class:`ChunkedSweep`, the first chunk (timed with compilation) are not in it.
        Throughput = total work x ``timed_fraction`` / ``run_seconds``.
      configs: the :class:`rljax.grid.ConfigTable` run, or ``None`` for a plain seed
        sweep. With configs, ``outputs`` are ``[K, num_seeds, ...]`` and ``nonfinite``
        is keyed by ``(config, seed id)``.
    """

    outputs: Any
    seed_ids: np.ndarray
    compile_seconds: float
    run_seconds: float
    block_size: int
    num_devices: int
    num_rounds: int
    nonfinite: dict[Any, int] = field(default_factory=dict)
    timed_fraction: float = 1.0
    configs: Any = None

    @property
    def num_seeds(self) -> int:
        """Number of seeds run: the length of ``seed_ids`` ``[N]``."""
        return int(self.seed_ids.shape[0])

    @property
    def num_configs(self) -> int:
        """Configurations run (1 for a plain seed sweep)."""
        return 1 if self.configs is None else len(self.configs)

    @property
    def finite(self) -> np.ndarray:
        """``[num_seeds]`` bool (``[K, num_seeds]`` with configs): the runs that stayed
        finite."""
        first = int(self.seed_ids[0]) if self.num_seeds else 0
        if self.configs is None:
            mask = np.ones(self.num_seeds, bool)
            mask[[s - first for s in self.nonfinite]] = False
            return mask
        mask = np.ones((self.num_configs, self.num_seeds), bool)
        for c, seed in self.nonfinite:
            mask[c, seed - first] = False
        return mask


def check_sweep_args(num_seeds: Any, block_size: Any) -> None:
    """Raise a one-line ``ValueError`` naming ``seeds`` or ``block_size`` if invalid."""
    if (isinstance(num_seeds, bool) or not isinstance(num_seeds, int | np.integer)
            or not 1 <= num_seeds <= MAX_SEEDS):
        raise ValueError(f"seeds: must be an integer in [1, {MAX_SEEDS}] (int32 seed ids), "
                         f"got {num_seeds!r}")
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
    sweep.devices = list(jax.devices() if devices is None else devices)
    mesh = Mesh(np.asarray(sweep.devices), (SEED_AXIS,))
    sweep.sharding = NamedSharding(mesh, PartitionSpec(SEED_AXIS))
    sweep.round_size = sweep.block_size * len(sweep.devices)


class NonFiniteFound(RuntimeError):
    """``--debug-nans``: the first operation that made a NaN (or inf) in one seed's run.

    Attributes: ``sweep`` (its name), ``seed``, ``operation`` (the message of JAX's
    ``FloatingPointError``, e.g. ``invalid value (nan) encountered in log``) and
    ``location`` (``file:line in function`` of the innermost frame outside JAX).
    """

    def __init__(self, sweep: str, seed: int, error: FloatingPointError):
        self.sweep, self.seed = sweep, seed
        self.operation = str(error).strip().splitlines()[0] if str(error).strip() else "nan"
        self.location = _user_frame(error)
        super().__init__(f"sweep {sweep!r}, seed {seed}: {self.operation} at {self.location}")


def _user_frame(error: BaseException) -> str:
    """``file:line in function`` of the innermost traceback frame outside jax/numpy."""
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    skip = (f"{os.sep}jax{os.sep}", f"{os.sep}jaxlib{os.sep}", f"{os.sep}numpy{os.sep}",
            f"{os.sep}rljax{os.sep}sweep.py")
    for frame in reversed(frames):
        if not any(part in frame.filename for part in skip):
            return f"{frame.filename}:{frame.lineno} in {frame.name}"
    return "(no frame outside jax)"


def _run_debug_seed(name: str, seed: int, run_one: Callable[[], Any]) -> Any:
    """Run one seed op by op (``jax.disable_jit``) with ``jax_debug_nans`` on; raise
    :class:`NonFiniteFound` at the first operation that makes a NaN."""
    with jax.disable_jit(), jax.debug_nans(True):
        try:
            return jax.device_get(run_one())
        except FloatingPointError as err:
            raise NonFiniteFound(name, seed, err) from None


def _debug_result(outputs: Any, pairs: Any, block_size: int) -> SweepResult:
    """A :class:`SweepResult` whose every row is the one debugged run's outputs (so the
    study can go on to its next sweep)."""
    lead = ((pairs.num_seeds,) if pairs.table is None
            else (pairs.num_configs, pairs.num_seeds))
    tiled = jax.tree_util.tree_map(
        lambda x: np.broadcast_to(np.asarray(x), (*lead, *np.shape(x))), outputs)
    return SweepResult(outputs=tiled,
                       seed_ids=np.arange(pairs.first_seed, pairs.first_seed + pairs.num_seeds,
                                          dtype=np.int64),
                       compile_seconds=0.0, run_seconds=0.0, block_size=block_size,
                       num_devices=1, num_rounds=1, configs=pairs.table)


def _host_template(shapes: Any) -> Any:
    """Numpy zeros shaped like ``shapes`` (``ShapeDtypeStruct`` leaves): a restore
    template that brings leaves back as numpy arrays (typed keys stay abstract)."""
    def leaf(s):
        if jnp.issubdtype(s.dtype, jax.dtypes.prng_key):
            return s
        return np.zeros(s.shape, s.dtype)
    return jax.tree_util.tree_map(leaf, shapes)


class _Pairs:
    """Which (config, seed) pair sits in each slot of each round (config-major).

    Pair ``p`` of ``K * S`` is config ``p // S``, seed ``first_seed + p % S``; slots past
    the last pair (the padded end of the last round) take the last config and the next
    seed ids, and their results are dropped.
    """

    def __init__(self, num_seeds: int, first_seed: int, table: Any):
        check_sweep_args(num_seeds, 1)
        if (isinstance(first_seed, bool) or not isinstance(first_seed, int | np.integer)
                or first_seed < 0 or first_seed + num_seeds > MAX_SEEDS):
            raise ValueError(f"first_seed: must be an integer >= 0 with first_seed + seeds <= "
                             f"{MAX_SEEDS}, got {first_seed!r}")
        if table is not None and len(table) < 1:
            raise ValueError("configs: need at least one configuration, got none")
        self.num_seeds, self.first_seed, self.table = int(num_seeds), int(first_seed), table
        self.num_configs = 1 if table is None else len(table)
        self.total = self.num_configs * self.num_seeds
        self.salts = (None if table is None else
                      np.asarray([table.salt(c) for c in range(len(table))], np.int32))

    def slots(self, first: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        """``(seed ids int32 [size], config ids int64 [size])`` of slots ``first ..``."""
        p = np.arange(first, first + size, dtype=np.int64)
        config = np.minimum(p // self.num_seeds, self.num_configs - 1)
        offset = np.where(p < self.total, p % self.num_seeds, self.num_seeds + p - self.total)
        return (self.first_seed + offset).astype(np.int32), config

    def label(self, p: int) -> Any:
        """The pair's name in ``nonfinite``: seed id, or ``(config, seed id)``."""
        seed = self.first_seed + p % self.num_seeds
        return seed if self.table is None else (int(p // self.num_seeds), int(seed))

    def record(self) -> dict[str, Any]:
        """What a checkpoint of this layout must match on resume."""
        rec: dict[str, Any] = {"first_seed": self.first_seed}
        if self.table is not None:
            rec["configs"] = self.table.to_lists()
            rec["num_configs"] = self.num_configs
        return rec


@dataclass
class SweepOptions:
    """What every sweep of one study run follows (passed down as an argument).

    Attributes:
      checkpoint_dir: where sweeps keep checkpoints (``None``: no checkpoints). A
        :class:`~rljax.sweep.Sweep` saves each finished round; a
        :class:`~rljax.sweep.ChunkedSweep` also saves within a round every
        ``checkpoint_every`` chunks.
      checkpoint_every: chunks between in-round checkpoints (``None``: only at round
        boundaries).
      resume: continue from the checkpoints in ``checkpoint_dir``.
      metadata: JSON-able facts a checkpoint must match to be resumed (config, code
        version); a mismatch is refused naming the first differing key.
      debug_seed: re-run only this seed of every sweep, op by op with
        ``jax_debug_nans``; the first operation that makes a NaN raises
        :class:`~rljax.sweep.NonFiniteFound`.
      progress: show progress bars (``None``: only on a terminal).
      tensorboard_dir: write per-chunk aggregates across seeds here (only a
        ``ChunkedSweep`` does; a study declares ``SUPPORTS_TENSORBOARD = True``).
      nonfinite: filled by the sweeps: one record per flagged seed,
        ``{"sweep", "seed", "step"}`` (``step`` -1 when the run does not report it).
      names: the sweeps' names so far, ``NN-<desc>`` in the order they started (a study
        starts its sweeps in a fixed order, so a resumed run finds its checkpoints).
    """

    checkpoint_dir: Path | None = None
    checkpoint_every: int | None = None
    resume: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    debug_seed: int | None = None
    progress: bool | None = None
    tensorboard_dir: Path | None = None
    nonfinite: list[dict[str, Any]] = field(default_factory=list)
    names: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.checkpoint_dir is not None:
            self.checkpoint_dir = Path(self.checkpoint_dir)
        if self.tensorboard_dir is not None:
            self.tensorboard_dir = Path(self.tensorboard_dir)

    def next_name(self, desc: str | None) -> str:
        """The next sweep's name: ``NN-<desc>`` (desc made file-name safe)."""
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", desc or "sweep").strip("-") or "sweep"
        name = f"{len(self.names) + 1:02d}-{slug}"
        self.names.append(name)
        return name



class _Setup:
    """What a sweep's ``run`` resolves from its arguments and its
    the run's :class:`SweepOptions`."""

    def __init__(self, sweep: Any, pairs: _Pairs, desc: str | None, progress: bool | None,
                 checkpointer: Any, resume: bool | None, checkpoint_every: int | None,
                 options: Any = None):
        check_sweep_args(pairs.num_seeds, sweep.block_size)
        opts = SweepOptions() if options is None else options
        self.opts = opts
        self.pairs = pairs
        self.name = opts.next_name(desc) if options is not None else (desc or "sweep")
        self.progress = opts.progress if progress is None else progress
        self.resume = opts.resume if resume is None else bool(resume)
        self.debug_seed = opts.debug_seed
        explicit = checkpointer is not None
        if checkpointer is None and opts.checkpoint_dir is not None:
            from rljax.checkpoint import Checkpointer

            meta = {**opts.metadata, "sweep": {"name": self.name,
                                               "base_seed": sweep.base_seed,
                                               "block_size": sweep.block_size,
                                               "round_size": sweep.round_size,
                                               **pairs.record()}}
            checkpointer = Checkpointer(opts.checkpoint_dir / self.name, metadata=meta)
        if self.resume and checkpointer is None:
            raise ValueError("resume: needs a checkpointer (or options with a "
                             "checkpoint_dir, rljax.study.SweepOptions)")
        if checkpoint_every is None:
            checkpoint_every = opts.checkpoint_every if not explicit else 1
        if checkpoint_every is not None and (
                isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int)
                or checkpoint_every < 1):
            raise ValueError(f"checkpoint_every: must be an integer >= 1, got "
                             f"{checkpoint_every!r}")
        self.checkpointer = checkpointer
        self.checkpoint_every = checkpoint_every
        self.rounds = None
        if checkpointer is not None:
            from rljax.checkpoint import Checkpointer

            self.rounds = Checkpointer(Path(checkpointer.directory) / "rounds",
                                       metadata={**checkpointer.metadata,
                                                 "pairs": pairs.record()},
                                       keep=2**31 - 1)
        self.num_rounds = math.ceil(pairs.total / sweep.round_size)
        self.num_seeds = pairs.num_seeds
        self.round_size = sweep.round_size
        self.nonfinite: dict[Any, int] = {}

    def finished_rounds(self) -> set[int]:
        return set(self.rounds.steps()) if (self.resume and self.rounds is not None) else set()

    def seeds_in(self, r: int) -> int:
        """Real (config, seed) pairs in round ``r`` (the padding excluded)."""
        return max(0, min(self.pairs.total, (r + 1) * self.round_size) - r * self.round_size)

    def finish_round(self, r: int, host: Any, *, save: bool, flag_source: Any = None) -> None:
        """Save round ``r``'s host outputs (process 0) and flag its non-finite pairs."""
        if save and self.rounds is not None and is_primary():
            self.rounds.save(r, host)
        ids = np.arange(r * self.round_size, (r + 1) * self.round_size)
        flagged = nonfinite_seeds(host if flag_source is None else flag_source, ids)
        for p, step in flagged.items():
            if p < self.pairs.total:
                label = self.pairs.label(p)
                self.nonfinite[label] = step
                record = {"sweep": self.name, "seed": label, "step": step}
                if isinstance(label, tuple):
                    record = {"sweep": self.name, "config": label[0], "seed": label[1],
                              "step": step}
                self.opts.nonfinite.append(record)

    def bar(self, total: int, unit: str) -> Any:
        disable = True if not is_primary() else _progress_disabled(self.progress)
        if disable is True:  # tqdm.auto would warn in a kernel without ipywidgets
            from tqdm import tqdm
        else:
            from tqdm.auto import tqdm
        return tqdm(total=total, desc=self.name, unit=unit, disable=disable,
                    smoothing=0.1, dynamic_ncols=True)

    def result(self, host_rounds: list[Any], sweep: Any, compile_seconds: float,
               run_seconds: float, timed_fraction: float) -> SweepResult:
        pairs = self.pairs

        def gather(*xs):
            x = np.concatenate(xs, axis=0)[:pairs.total]
            if pairs.table is None:
                return x
            return x.reshape(pairs.num_configs, pairs.num_seeds, *x.shape[1:])

        return SweepResult(
            outputs=jax.tree_util.tree_map(gather, *host_rounds),
            seed_ids=np.arange(pairs.first_seed, pairs.first_seed + pairs.num_seeds,
                               dtype=np.int64),
            compile_seconds=compile_seconds,
            run_seconds=run_seconds,
            block_size=sweep.block_size,
            num_devices=len(sweep.devices),
            num_rounds=self.num_rounds,
            nonfinite=dict(sorted(self.nonfinite.items())),
            timed_fraction=timed_fraction,
            configs=pairs.table,
        )


def _keys(base_key: PRNGKey, seed_ids: jax.Array, salts: jax.Array | None) -> PRNGKey:
    """``[R]`` keys: ``fold_in(base_key, seed_id)``, then ``fold_in(., salt)`` if salted."""
    keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(base_key, seed_ids)
    if salts is not None:
        keys = jax.vmap(jax.random.fold_in)(keys, salts)
    return keys


def _round_inputs(sweep: Any, pairs: _Pairs, first: int) -> tuple[Any, Any, Any]:
    """Slots ``first .. first + round_size - 1`` as global arrays ``(seed ids [R],
    hparams {name: [R]} or None, salts [R] or None)``; salts only for an unpaired sweep."""
    seed_ids, config_ids = pairs.slots(first, sweep.round_size)
    hparams = salts = None
    if pairs.table is not None:
        hparams = {name: global_array(v, sweep.sharding)
                   for name, v in pairs.table.take(config_ids).items()}
        if not sweep.paired:
            salts = global_array(pairs.salts[config_ids], sweep.sharding)
    return global_array(seed_ids, sweep.sharding), hparams, salts


def _debug_inputs(sweep: Any, pairs: _Pairs, seed: int) -> tuple[PRNGKey, tuple[Any, ...]]:
    """The debugged run's key and extra arguments: seed ``seed`` of the first config
    (``(hparams,)`` with configs, ``()`` without)."""
    key = seed_key(sweep.base_seed, pairs.first_seed + seed)
    if pairs.table is None:
        return key, ()
    if not sweep.paired:
        key = jax.random.fold_in(key, pairs.table.salt(0))
    return key, ({k: jnp.asarray(v) for k, v in pairs.table.row(0).items()},)


class Sweep:
    """A compiled seed sweep of one ``train(key)`` function (see the module docstring).

    Build it once, then run it for any number of seeds; the block program is compiled on
    the first :meth:`run` (or an explicit :meth:`compile`) and reused::

        sweep = Sweep(train, block_size=1024)
        result = sweep.run(4096)          # outputs [4096, ...]

    With a configuration axis, ``train(key, hparams)`` reads its traced hyperparameters
    from ``hparams`` (a dict of scalars) and every (config, seed) pair runs in the same
    compiled program::

        table = ConfigTable.from_rows([{"lr": 0.1}, {"lr": 0.3}])
        result = Sweep(train, block_size=256).run(64, configs=table)  # outputs [2, 64, ...]

    Args:
      train: one seed's run, ``train(key) -> pytree of arrays`` (``train(key, hparams)``
        when run with ``configs``); written for one seed. If it returns a dict with
        ``rljax.nonfinite.NONFINITE_STEP``, a run whose value is ``>= 0`` is flagged with
        that step in ``SweepResult.nonfinite``; otherwise a run is flagged (step -1) where
        any float output is NaN/inf.
      base_seed: the sweep's base seed; seed ``i``'s key is ``seed_key(base_seed, i)``.
      block_size: (config, seed) pairs per device per round; fixes the compiled program
        (and so the bits of every result).
      devices: devices to shard the pair axis over (default: all devices of all
        processes, ``jax.devices()``).
      paired: with configs, whether config ``c``, seed ``i`` uses seed ``i``'s key
        (``True``: common random numbers, comparisons across configs are paired) or a key
        decorrelated by the config's values (``False``).
    """

    def __init__(
        self,
        train: Callable[..., Any],
        *,
        base_seed: int = 0,
        block_size: int = DEFAULT_BLOCK_SIZE,
        devices: Sequence[jax.Device] | None = None,
        paired: bool = True,
    ):
        self.train = train
        self.paired = bool(paired)
        _set_blocks(self, base_seed, block_size, devices)
        self._base_key = jax.random.key(self.base_seed)
        self._ids_shape = jax.ShapeDtypeStruct((self.round_size,), jnp.int32,
                                               sharding=self.sharding)
        self._programs: dict[Any, dict[str, Any]] = {}
        self.compile_seconds: float | None = None

    def _program(self, table: Any) -> dict[str, Any]:
        """The jitted block program for ``table``'s structure (``None``: no configs)."""
        structure = None if table is None else table.structure()
        if structure in self._programs:
            return self._programs[structure]
        base_key, user_train = self._base_key, self.train

        def train(*args):  # the user's outputs checked once, at trace time
            out = user_train(*args)
            check_array_outputs("train=", user_train, out)
            return out

        shard = dict(out_shardings=self.sharding)
        if table is None:
            def block(seed_ids):
                return jax.vmap(train)(_keys(base_key, seed_ids, None))

            jitted = jax.jit(block, in_shardings=self.sharding, **shard)
            args = (self._ids_shape,)
        else:
            hp_shape = {name: jax.ShapeDtypeStruct((self.round_size,), dtype,
                                                   sharding=self.sharding)
                        for name, dtype in structure}
            if self.paired:
                def block(seed_ids, hparams):
                    return jax.vmap(train)(_keys(base_key, seed_ids, None), hparams)

                args = (self._ids_shape, hp_shape)
            else:
                def block(seed_ids, hparams, salts):
                    return jax.vmap(train)(_keys(base_key, seed_ids, salts), hparams)

                args = (self._ids_shape, hp_shape, self._ids_shape)
            jitted = jax.jit(block, in_shardings=self.sharding, **shard)
        program = {"jitted": jitted, "args": args, "compiled": None, "seconds": None}
        self._programs[structure] = program
        return program

    @property
    def _compiled(self) -> Any:
        """The compiled program of a plain seed sweep (after :meth:`compile`)."""
        return self._programs.get(None, {}).get("compiled")

    @property
    def _jitted(self) -> Any:
        return self._program(None)["jitted"]

    def compile(self, configs: Any = None) -> float:
        """Lower and compile the per-round program for ``configs``' structure (once per
        structure); returns the seconds it took."""
        program = self._program(configs)
        if program["compiled"] is None:
            start = time.perf_counter()
            program["compiled"] = program["jitted"].lower(*program["args"]).compile()
            program["seconds"] = time.perf_counter() - start
            self.compile_seconds = program["seconds"]
        return float(program["seconds"])

    def _round_inputs(self, pairs: _Pairs, first: int) -> tuple[Any, ...]:
        """The block program's arguments for the slots from ``first``."""
        ids, hparams, salts = _round_inputs(self, pairs, first)
        if pairs.table is None:
            return (ids,)
        return (ids, hparams) if self.paired else (ids, hparams, salts)

    def run_round(self, first_seed: int, configs: Any = None,
                  pairs: _Pairs | None = None) -> Any:
        """Dispatch one round: slots ``first_seed .. first_seed + round_size - 1`` (seed
        ids of a plain sweep; pair indices with ``pairs``).

        Returns the (asynchronous, device-resident) outputs ``[round_size, ...]``.
        """
        if pairs is None:
            pairs = _Pairs(MAX_SEEDS - self.round_size, 0, configs)
        self.compile(pairs.table)
        program = self._program(pairs.table)
        return program["compiled"](*self._round_inputs(pairs, first_seed))

    @one_blas_thread
    def run(
        self,
        num_seeds: int,
        *,
        configs: Any = None,
        first_seed: int = 0,
        checkpointer: Any = None,
        resume: bool | None = None,
        progress: bool | None = None,
        desc: str | None = None,
        options: Any = None,
    ) -> SweepResult:
        """Run seeds ``first_seed .. first_seed + num_seeds - 1`` (of every config).

        Args:
          num_seeds: how many seeds (>= 1).
          configs: a :class:`rljax.grid.ConfigTable` of ``K`` configurations; ``train``
            is then called as ``train(key, hparams)`` and outputs are ``[K, S, ...]``.
          first_seed: the first seed id (e.g. evaluation seeds after the tuning seeds);
            seed ``i``'s key depends on ``i`` alone, never on ``first_seed``.
          checkpointer: a :class:`rljax.checkpoint.Checkpointer`; each finished round's
            outputs are saved under its ``rounds/`` (default: from ``options``, else
            none).
          resume: read finished rounds back instead of running them (default:
            ``options``').
          progress: show a tqdm bar with ETA (default: ``options``', else only on a
            terminal).
          desc: the sweep's name (progress label and checkpoint directory).
          options: a study run's the run's :class:`SweepOptions` (checkpoint
            directory, resume, debug seed, TensorBoard; the sweep is then named
            ``NN-<desc>`` and records non-finite seeds there); ``None``: defaults.
        """
        pairs = _Pairs(num_seeds, first_seed, configs)
        setup = _Setup(self, pairs, desc, progress, checkpointer, resume, None, options)
        if setup.debug_seed is not None:
            seed = _check_debug_seed(setup.debug_seed, num_seeds)
            key, extra = _debug_inputs(self, pairs, seed)
            out = _run_debug_seed(setup.name, seed, lambda: self.train(key, *extra))
            return _debug_result(out, pairs, self.block_size)
        compile_seconds = self.compile(configs)
        program = self._program(configs)
        done = setup.finished_rounds()
        template = None
        bar = setup.bar(pairs.total, "seed" if configs is None else "run")
        start = time.perf_counter()
        host_rounds: list[Any] = [None] * setup.num_rounds
        pending = None
        for r in range(setup.num_rounds):
            if r in done:
                if template is None:
                    template = _host_template(jax.eval_shape(program["jitted"],
                                                             *program["args"]))
                host_rounds[r] = setup.rounds.restore(template, r)
                setup.finish_round(r, host_rounds[r], save=False)
                bar.update(setup.seeds_in(r))
                continue
            out = program["compiled"](*self._round_inputs(pairs, r * self.round_size))
            if pending is not None:
                self._collect(setup, bar, host_rounds, *pending)
            pending = (r, out)
        if pending is not None:
            self._collect(setup, bar, host_rounds, *pending)
        run_seconds = time.perf_counter() - start
        bar.close()
        computed = sum(setup.seeds_in(r) for r in range(setup.num_rounds) if r not in done)
        return setup.result(host_rounds, self, compile_seconds, run_seconds,
                            computed / pairs.total)

    @staticmethod
    def _collect(setup: _Setup, bar: Any, host_rounds: list[Any], r: int, out: Any) -> None:
        host_rounds[r] = to_host(out)
        setup.finish_round(r, host_rounds[r], save=True)
        bar.update(setup.seeds_in(r))
        if setup.nonfinite:
            bar.set_postfix(nonfinite=len(setup.nonfinite), refresh=False)


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


def _check_debug_seed(seed: int, num_seeds: int) -> int:
    if not 0 <= seed < num_seeds:
        raise ValueError(f"debug_nans: seed must be in 0..{num_seeds - 1} (this run's "
                         f"seeds), got {seed}")
    return int(seed)


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
    same compiled chunk program runs on the same state). The progress bar counts
    seeds x chunks, so its ETA moves within a round.

    The block's state is donated to each ``advance`` call: the new state reuses the old
    one's memory, so a large state (a replay buffer) is not copied at every chunk. A
    checkpointer's ``save`` must therefore have read the state when it returns (as
    :class:`rljax.checkpoint.Checkpointer`'s does).

    Args:
      init: ``init(key) -> state`` (pytree of arrays).
      advance: ``advance(state) -> (state, logs)``; ``logs`` a pytree of arrays (keep it
        small -- e.g. aggregates over the chunk -- since ``[seeds, num_chunks, ...]``
        of it is kept on the host).
      finish: ``finish(state) -> outputs``; a dict with
        ``rljax.nonfinite.NONFINITE_STEP`` flags seeds with their first bad step.
      num_chunks: chunks per run (>= 1).
      base_seed, block_size, devices, paired: as for :class:`Sweep`.

    Run with ``configs`` (a :class:`rljax.grid.ConfigTable`), the three functions take
    the pair's traced hyperparameters as a second argument: ``init(key, hparams)``,
    ``advance(state, hparams)``, ``finish(state, hparams)``.
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
        paired: bool = True,
    ):
        if isinstance(num_chunks, bool) or not isinstance(num_chunks, int) or num_chunks < 1:
            raise ValueError(f"num_chunks: must be an integer >= 1, got {num_chunks!r}")
        self.num_chunks = num_chunks
        self.init, self.advance, self.finish = init, advance, finish
        self.paired = bool(paired)
        _set_blocks(self, base_seed, block_size, devices)
        self._base_key = jax.random.key(base_seed)
        self._programs: dict[Any, tuple[Any, Any, Any]] = {}
        self.compile_seconds = 0.0

    def _program(self, table: Any) -> tuple[Any, Any, Any]:
        """Jitted ``(init, advance, finish)`` block programs for ``table``'s structure.

        Each takes the round's inputs ``(seed ids [R], hparams, salts)`` (the last two
        ``None`` without configs / when paired) after its own first argument.
        """
        structure = None if table is None else table.structure()
        if structure in self._programs:
            return self._programs[structure]
        base_key = self._base_key
        init, advance, finish = (_checked(name, fn) for name, fn in (
            ("init=", self.init), ("advance=", self.advance), ("finish=", self.finish)))
        with_hp = table is not None

        def init_block(seed_ids, hparams, salts):
            keys = _keys(base_key, seed_ids, salts)
            return jax.vmap(init)(keys, hparams) if with_hp else jax.vmap(init)(keys)

        def advance_block(state, hparams):
            return jax.vmap(advance)(state, hparams) if with_hp else jax.vmap(advance)(state)

        def finish_block(state, hparams):
            return jax.vmap(finish)(state, hparams) if with_hp else jax.vmap(finish)(state)

        shard = dict(in_shardings=self.sharding, out_shardings=self.sharding)
        programs = (jax.jit(init_block, **shard),
                    jax.jit(advance_block, donate_argnums=0, **shard),
                    jax.jit(finish_block, **shard))
        self._programs[structure] = programs
        return programs

    def _inputs(self, pairs: _Pairs, r: int) -> tuple[Any, Any, Any]:
        """Round ``r``'s ``(seed ids, hparams, salts)`` as global arrays."""
        return _round_inputs(self, pairs, r * self.round_size)

    @one_blas_thread
    def run(
        self,
        num_seeds: int,
        *,
        configs: Any = None,
        first_seed: int = 0,
        checkpointer: Any = None,
        checkpoint_every: int | None = None,
        resume: bool | None = None,
        progress: bool | None = None,
        desc: str | None = None,
        options: Any = None,
    ) -> SweepResult:
        """Run seeds ``first_seed .. first_seed + num_seeds - 1`` (of every config).

        Args:
          num_seeds: how many seeds (>= 1).
          configs, first_seed: as for :meth:`Sweep.run` (outputs gain a leading config
            axis ``[K, S, ...]``).
          checkpointer: a :class:`rljax.checkpoint.Checkpointer` (or anything with its
            ``save``/``restore``/``steps``); ``None`` takes ``options``' checkpoint
            directory, else saves nothing. Its directory
            gets one checkpoint per ``checkpoint_every`` chunks (the round's state and
            logs so far) and, under ``rounds/``, each finished round's outputs.
          checkpoint_every: save every this many chunks (>= 1; default 1 with an
            explicit checkpointer, else ``options``', ``None`` = only finished
            rounds). In-round checkpoints hold device state, so they need one process.
          resume: continue from the newest checkpoints (finished rounds are read back,
            the interrupted round continues from its saved chunk).
          progress, desc: tqdm bar over seeds x chunks; the sweep's name.
          options: as for :meth:`Sweep.run`.

        Returns:
          :class:`SweepResult` whose ``outputs`` are ``{"logs": [S, num_chunks, ...],
          "final": finish's outputs [S, ...]}``; ``compile_seconds`` is the time of the
          first round's first calls (compilation included), ``run_seconds`` the rest.
        """
        pairs = _Pairs(num_seeds, first_seed, configs)
        setup = _Setup(self, pairs, desc, progress, checkpointer, resume, checkpoint_every,
                       options)
        if setup.debug_seed is not None:
            return self._debug(setup, pairs)
        init_block, advance_block, finish_block = self._program(configs)
        in_round = setup.checkpointer is not None and setup.checkpoint_every is not None
        if in_round and jax.process_count() > 1:
            raise ValueError("checkpoint_every: in-round checkpoints need one process; with "
                             "several, checkpoints are taken when a round finishes")
        done_rounds = setup.finished_rounds()
        bar = setup.bar(pairs.total * self.num_chunks,
                        "seed-chunk" if configs is None else "run-chunk")
        start = time.perf_counter()
        first_call_end = None
        timed_work = 0
        host_rounds = []
        tb = _tensorboard(setup)
        for r in range(setup.num_rounds):
            ids, hparams, salts = self._inputs(pairs, r)
            state_shape = jax.eval_shape(init_block, ids, hparams, salts)
            logs_shape = self._logs_shape(advance_block, state_shape, hparams)
            if r in done_rounds:
                template = _host_template({
                    "logs": jax.tree_util.tree_map(
                        lambda s: jax.ShapeDtypeStruct((s.shape[1], s.shape[0], *s.shape[2:]),
                                                       s.dtype), logs_shape),
                    "final": jax.eval_shape(finish_block, state_shape, hparams)})
                round_out = setup.rounds.restore(template, r)
                setup.finish_round(r, round_out, save=False, flag_source=_flag_source(round_out))
                host_rounds.append(round_out)
                bar.update(setup.seeds_in(r) * self.num_chunks)
                continue
            state, logs, done = None, None, 0
            if setup.resume:
                saved = [s for s in setup.checkpointer.steps()
                         if s // (self.num_chunks + 1) == r]
                if saved:
                    restored = setup.checkpointer.restore(
                        {"state": state_shape, "logs": _host_template(logs_shape)}, max(saved))
                    state = jax.device_put(restored["state"], self.sharding)
                    logs = restored["logs"]
                    done = max(saved) % (self.num_chunks + 1)
            if state is None:
                state = init_block(ids, hparams, salts)
            if logs is None:
                logs = _host_template(logs_shape)
            bar.update(setup.seeds_in(r) * done)
            for c in range(done, self.num_chunks):
                state, chunk_logs = advance_block(state, hparams)
                chunk_logs = to_host(chunk_logs)
                logs = jax.tree_util.tree_map(lambda buf, x, c=c: _set_row(buf, c, x), logs,
                                              chunk_logs)
                if first_call_end is None:
                    first_call_end = time.perf_counter()
                else:
                    timed_work += setup.seeds_in(r)
                if tb is not None and setup.num_rounds == 1:
                    tb.write_chunk(c, chunk_logs, setup.seeds_in(r))
                bar.update(setup.seeds_in(r))
                if in_round and (c + 1) % setup.checkpoint_every == 0 and c + 1 < self.num_chunks:
                    setup.checkpointer.save(r * (self.num_chunks + 1) + c + 1,
                                            {"state": state, "logs": logs})
            final = to_host(finish_block(state, hparams))
            round_out = {"logs": jax.tree_util.tree_map(lambda x: np.swapaxes(x, 0, 1), logs),
                         "final": final}
            setup.finish_round(r, round_out, save=True, flag_source=_flag_source(round_out))
            if setup.nonfinite:
                bar.set_postfix(nonfinite=len(setup.nonfinite), refresh=False)
            host_rounds.append(round_out)
        bar.close()
        end = time.perf_counter()
        first_call_end = end if first_call_end is None else first_call_end
        result = setup.result(host_rounds, self, first_call_end - start, end - first_call_end,
                              timed_work / (pairs.total * self.num_chunks))
        if tb is not None:
            if setup.num_rounds > 1:
                for c in range(self.num_chunks):
                    tb.write_chunk(c, jax.tree_util.tree_map(
                        lambda x, c=c: _chunk_column(x, c, configs is not None),
                        result.outputs["logs"]), pairs.total)
            tb.close()
        return result

    def _debug(self, setup: _Setup, pairs: _Pairs) -> SweepResult:
        seed = _check_debug_seed(setup.debug_seed, pairs.num_seeds)
        key, extra = _debug_inputs(self, pairs, seed)

        def run_one():
            state = self.init(key, *extra)
            chunks = []
            for _ in range(self.num_chunks):
                state, logs = self.advance(state, *extra)
                chunks.append(logs)
            logs = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *chunks)
            return {"logs": logs, "final": self.finish(state, *extra)}

        return _debug_result(_run_debug_seed(setup.name, seed, run_one), pairs,
                             self.block_size)

    def _logs_shape(self, advance_block: Any, state_shape: Any, hparams: Any) -> Any:
        """``[num_chunks, round_size, ...]`` shapes of the logs buffer."""
        _, logs = jax.eval_shape(advance_block, state_shape, hparams)
        return jax.tree_util.tree_map(
            lambda s: jax.ShapeDtypeStruct((self.num_chunks, *s.shape), s.dtype), logs)


def _checked(what: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with its outputs checked at trace time
    (:func:`rljax.contracts.check_array_outputs`)."""

    def checked(*args):
        out = fn(*args)
        check_array_outputs(what, fn, out)
        return out

    return checked


def _chunk_column(logs: np.ndarray, chunk: int, with_configs: bool) -> np.ndarray:
    """Chunk ``chunk``'s logs of every run: ``[runs, ...]`` from ``[S, C, ...]`` (or
    ``[K, S, C, ...]`` with configs, runs flattened config-major)."""
    if with_configs:
        logs = logs.reshape(-1, *logs.shape[2:])
    return logs[:, chunk]


def _flag_source(round_out: dict[str, Any]) -> Any:
    """Where a chunked round's non-finite seeds are read: ``final`` if it carries
    ``NONFINITE_STEP``, else logs and final together."""
    final = round_out["final"]
    if isinstance(final, dict) and NONFINITE_STEP in final:
        return final
    return round_out


class _ChunkBoard:
    """Per-chunk aggregates across seeds to TensorBoard (``rljax.tensorboard``)."""

    def __init__(self, directory: Path):
        from rljax.tensorboard import AggregateWriter

        self.writer = AggregateWriter(str(directory))

    def write_chunk(self, chunk: int, logs: Any, num_seeds: int) -> None:
        flat = {}
        for path, leaf in jax.tree_util.tree_flatten_with_path(logs)[0]:
            leaf = np.asarray(leaf)[:num_seeds]
            if leaf.ndim >= 1 and np.issubdtype(leaf.dtype, np.number):
                name = "/".join(str(getattr(p, "key", getattr(p, "idx", p))) for p in path)
                flat[name or "value"] = leaf.reshape(leaf.shape[0], -1).mean(axis=1)
        if flat:
            self.writer.write(chunk + 1, flat)

    def close(self) -> None:
        self.writer.close()


def _tensorboard(setup: _Setup) -> _ChunkBoard | None:
    directory = setup.opts.tensorboard_dir
    if directory is None or not is_primary():
        return None
    return _ChunkBoard(Path(directory) / setup.name)


def _set_row(buffer: np.ndarray, row: int, value: Any) -> np.ndarray:
    buffer = np.array(buffer, copy=True)
    buffer[row] = value
    return buffer
