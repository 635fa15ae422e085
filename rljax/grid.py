"""Configurations as a sweep axis: tables of hyperparameters, grids and random search.

A study's numeric hyperparameters (learning rate, clip epsilon, KL beta, ...) are
*traced*: ``train(key, hparams)`` reads them from ``hparams``, a dict of scalars, so one
compiled program runs any value and :class:`rljax.sweep.Sweep` vmaps them together with
the seeds. Its *structural* fields (shapes, counts, choices) fix the program, so a grid
over one compiles one program per distinct value.

A config declares which fields are which where it declares them
(:func:`rljax.config.param`)::

    @dataclass(frozen=True)
    class Config:
        learning_rate: float = param(0.1, "step size", traced=True, low=0, low_open=True)
        optimizer: str = param("adam", "the optimizer", choices=("adam", "sgd"))
        seeds: int = param(16, "seeds per configuration", sweep=False, low=1)

(a config written without :func:`~rljax.config.param` may list ``TRACED`` and
``STRUCTURAL`` names as class attributes instead).

The command line builds a :class:`Grid` from ``--grid key=v1,v2`` (the Cartesian
product, in the order given) or ``--sample key=loguniform:1e-4:1e-1 --samples K``
(random search from ``--sample-seed``); every configuration is validated as ``--set``
would validate it. :func:`split_structural` cuts a grid into one :class:`ConfigTable`
of traced values per distinct structural setting.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rljax.config import (
    ConfigError,
    build_config,
    field_types,
    parse_value,
    structural_fields,
    traced_fields,
)

#: A grid or sample of more (config, seed) pairs than this needs ``--yes``.
CONFIRM_PAIRS = 1_000_000
SAMPLERS = ("uniform", "loguniform", "choice", "intuniform")


def _dtype_of(values: Sequence[Any]) -> np.dtype:
    if all(isinstance(v, bool | np.bool_) for v in values):
        return np.dtype(bool)
    if all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in values):
        return np.dtype(np.int32)
    return np.dtype(np.float32)


@dataclass(frozen=True)
class ConfigTable:
    """``K`` configurations of traced hyperparameters, one column per name.

    Attributes:
      columns: ``{name: [K] array}`` (float32, int32 or bool), in a fixed name order.

    Row ``c`` is configuration ``c``; :meth:`row` gives it as the dict of scalars a
    ``train(key, hparams)`` receives. An empty table (no names) of ``K`` rows is allowed:
    it runs the same program ``K`` times (used when only structural fields vary).
    """

    columns: dict[str, np.ndarray]
    num_rows: int

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, Any]]) -> ConfigTable:
        """A table from ``K >= 1`` dicts with the same keys (Python scalars)."""
        rows = list(rows)
        if not rows:
            raise ConfigError("configs: need at least one configuration, got none")
        names = list(rows[0])
        for c, row in enumerate(rows):
            if list(row) != names:
                raise ConfigError(f"configs: row {c} has keys {sorted(row)}, row 0 has "
                                  f"{sorted(names)}")
        columns = {}
        for name in names:
            values = [row[name] for row in rows]
            columns[name] = np.asarray(values, _dtype_of(values))
        return cls(columns=columns, num_rows=len(rows))

    @classmethod
    def single(cls, values: Mapping[str, Any]) -> ConfigTable:
        """A one-row table (a run of one configuration, e.g. the defaults or ``--set``)."""
        return cls.from_rows([dict(values)])

    def __len__(self) -> int:
        return self.num_rows

    @property
    def names(self) -> tuple[str, ...]:
        """The traced names, in column order."""
        return tuple(self.columns)

    def row(self, c: int) -> dict[str, Any]:
        """Configuration ``c`` as ``{name: Python scalar}``."""
        return {name: col[c].item() for name, col in self.columns.items()}

    def take(self, index: np.ndarray) -> dict[str, np.ndarray]:
        """``{name: [R] array}``: the rows ``index [R]`` (e.g. a round's config ids)."""
        return {name: col[np.asarray(index)] for name, col in self.columns.items()}

    def salt(self, c: int) -> int:
        """A 31-bit number from configuration ``c``'s *values* (not its position):
        CRC-32 of ``name=repr(value)`` pairs. Decorrelated sweeps fold it into the seed's
        key, so a configuration draws the same keys wherever it sits in a grid."""
        text = ";".join(f"{name}={self.columns[name][c].item()!r}" for name in sorted(self.columns))
        return zlib.crc32(text.encode()) & 0x7FFFFFFF

    def structure(self) -> tuple[tuple[str, str], ...]:
        """``((name, dtype), ...)``: what fixes the compiled program."""
        return tuple((name, str(col.dtype)) for name, col in self.columns.items())

    def to_lists(self) -> dict[str, list[Any]]:
        """The table as JSON-able lists (for checkpoint metadata and ``config.json``)."""
        return {name: col.tolist() for name, col in self.columns.items()}


@dataclass(frozen=True)
class Grid:
    """A list of configurations over some of a study's fields.

    Attributes:
      fields: the swept field names, in the order the columns are written.
      rows: one ``{field: value}`` per configuration (validated values).
      spec: how the grid was made, for ``config.json``: ``{"grid": {field: [values]}}``
        or ``{"sample": {field: "loguniform:1e-4:1e-1"}, "samples": K, "sample_seed": S}``.
    """

    fields: tuple[str, ...]
    rows: tuple[dict[str, Any], ...]
    spec: dict[str, Any]

    def __len__(self) -> int:
        return len(self.rows)

    def configs(self, base: Any) -> list[Any]:
        """Each row applied to the dataclass ``base`` (``dataclasses.replace``)."""
        return [dataclasses.replace(base, **row) for row in self.rows]

    def record(self) -> dict[str, Any]:
        """JSON-able description: the spec, the fields and the number of configurations."""
        return {**self.spec, "fields": list(self.fields), "num_configs": len(self.rows)}


def single_grid(config: Any, fields: Iterable[str] = ()) -> Grid:
    """A grid of the one configuration ``config`` (its values of ``fields``)."""
    fields = tuple(fields)
    return Grid(fields=fields, rows=({f: getattr(config, f) for f in fields},),
                spec={"grid": {f: [getattr(config, f)] for f in fields}})


def _check_sweepable(config_cls: type, key: str, flag: str) -> str:
    types = field_types(config_cls)
    key = key.strip().replace("-", "_")
    if key not in types:
        raise ConfigError(f"{flag}: unknown key {key!r}; known keys: {', '.join(sorted(types))}")
    allowed = traced_fields(config_cls) + structural_fields(config_cls)
    if key not in allowed:
        can = ", ".join(allowed) if allowed else "none (it runs one configuration)"
        raise ConfigError(f"{flag}: this study cannot vary {key!r} in one run; fields it can "
                          f"sweep: {can}")
    return key


def parse_grid(config_cls: type, pairs: Iterable[str]) -> dict[str, list[Any]]:
    """``["key=v1,v2", ...]`` -> ``{key: [typed values]}`` (order kept, duplicates refused)."""
    types = field_types(config_cls)
    axes: dict[str, list[Any]] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--grid: expected key=v1,v2,..., got {pair!r}")
        key, text = pair.split("=", 1)
        key = _check_sweepable(config_cls, key, "--grid")
        if key in axes:
            raise ConfigError(f"--grid: {key} given twice; list all its values in one --grid")
        parts = [p.strip() for p in text.split(",")]
        if not text.strip() or any(not p for p in parts):
            raise ConfigError(f"--grid: {key} needs a comma-separated list of values, got "
                              f"{text!r}")
        values = [parse_value(key, p, types[key]) for p in parts]
        if len(set(map(repr, values))) != len(values):
            raise ConfigError(f"--grid: {key} lists a value twice, got {text!r}")
        axes[key] = values
    return axes


@dataclass(frozen=True)
class Sampler:
    """One ``--sample`` axis: ``kind`` in :data:`SAMPLERS` with its arguments."""

    field: str
    kind: str
    args: tuple[Any, ...]
    text: str

    def draw(self, rng: np.random.Generator, k: int) -> list[Any]:
        """``k`` values (Python scalars)."""
        if self.kind == "uniform":
            return [float(x) for x in rng.uniform(self.args[0], self.args[1], k)]
        if self.kind == "loguniform":
            lo, hi = math.log(self.args[0]), math.log(self.args[1])
            return [float(math.exp(x)) for x in rng.uniform(lo, hi, k)]
        if self.kind == "intuniform":
            return [int(x) for x in rng.integers(self.args[0], self.args[1] + 1, k)]
        return [self.args[int(i)] for i in rng.integers(0, len(self.args), k)]


def parse_sample(config_cls: type, text: str) -> Sampler:
    """``key=loguniform:LO:HI`` | ``uniform:LO:HI`` | ``intuniform:LO:HI`` |
    ``choice:v1:v2:...`` -> :class:`Sampler` (bounds checked: ``LO < HI``, ``LO > 0`` for
    loguniform, integers for intuniform)."""
    types = field_types(config_cls)
    if "=" not in text:
        raise ConfigError(f"--sample: expected key=kind:args (kinds: {', '.join(SAMPLERS)}), "
                          f"got {text!r}")
    key, spec = text.split("=", 1)
    key = _check_sweepable(config_cls, key, "--sample")
    kind, _, rest = spec.partition(":")
    kind = kind.strip()
    if kind not in SAMPLERS:
        raise ConfigError(f"--sample: {key} kind must be one of {', '.join(SAMPLERS)}, "
                          f"got {kind!r}")
    parts = [p.strip() for p in rest.split(":")] if rest else []
    if kind == "choice":
        if not parts or any(not p for p in parts):
            raise ConfigError(f"--sample: {key}=choice needs values choice:v1:v2:..., got "
                              f"{spec!r}")
        return Sampler(key, kind, tuple(parse_value(key, p, types[key]) for p in parts), spec)
    if len(parts) != 2:
        raise ConfigError(f"--sample: {key}={kind} needs two bounds {kind}:LO:HI, got {spec!r}")
    number = int if kind == "intuniform" else float
    if kind != "intuniform" and types[key] is not float:
        raise ConfigError(f"--sample: {key} is {types[key].__name__}; {kind} draws real "
                          "numbers (use intuniform or choice)")
    if kind == "intuniform" and types[key] is not int:
        raise ConfigError(f"--sample: {key} is {types[key].__name__}; intuniform draws integers")
    try:
        lo, hi = (number(p) for p in parts)
    except ValueError:
        raise ConfigError(f"--sample: {key} bounds must be {number.__name__}s, got "
                          f"{spec!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or not lo < hi:
        raise ConfigError(f"--sample: {key} needs finite bounds LO < HI, got {spec!r}")
    if kind == "loguniform" and lo <= 0:
        raise ConfigError(f"--sample: {key}=loguniform needs LO > 0, got {spec!r}")
    return Sampler(key, kind, (lo, hi), spec)


def make_grid(config_cls: type, base_overrides: Mapping[str, Any], *,
              grid: Iterable[str] = (), sample: Iterable[str] = (),
              samples: int | None = None, sample_seed: int = 0) -> Grid | None:
    """The :class:`Grid` the command line asks for, or ``None`` for a plain run.

    ``--grid`` axes form a Cartesian product (first axis slowest); ``--sample`` axes draw
    ``samples`` configurations from ``numpy.random.default_rng(sample_seed)``; both at
    once give every sampled row crossed with the grid. Every configuration is built and
    validated (``base_overrides`` + its row) like ``--set``, so a bad value names its
    field. A field swept and also ``--set`` is refused.
    """
    axes = parse_grid(config_cls, grid)
    samplers = [parse_sample(config_cls, s) for s in sample]
    if samples is not None and not samplers:
        raise ConfigError("--samples: needs at least one --sample key=kind:args")
    if samplers and samples is None:
        raise ConfigError("--sample: give the number of configurations with --samples K")
    if samples is not None and (isinstance(samples, bool) or samples < 1):
        raise ConfigError(f"--samples: must be an integer >= 1, got {samples!r}")
    names = list(axes) + [s.field for s in samplers]
    if len(set(names)) != len(names):
        raise ConfigError("--sample: a field is both gridded and sampled; pick one")
    for name in names:
        if name in base_overrides:
            raise ConfigError(f"--grid/--sample: {name} is also given with --set; pick one")
    if not names:
        return None
    grid_rows = [dict(zip(axes, combo, strict=True))
                 for combo in itertools.product(*axes.values())] or [{}]
    sample_rows = [{}]
    if samplers:
        rng = np.random.default_rng(sample_seed)
        drawn = {s.field: s.draw(rng, samples) for s in samplers}
        sample_rows = [{f: drawn[f][k] for f in drawn} for k in range(samples)]
    rows = tuple({**g, **s} for s in sample_rows for g in grid_rows)
    for row in rows:
        build_config(config_cls, {**dict(base_overrides), **row})
    spec: dict[str, Any] = {}
    if axes:
        spec["grid"] = {k: list(v) for k, v in axes.items()}
    if samplers:
        spec.update(sample={s.field: s.text for s in samplers}, samples=samples,
                    sample_seed=sample_seed)
    return Grid(fields=tuple(names), rows=rows, spec=spec)


@dataclass(frozen=True)
class ProgramGroup:
    """The configurations of a grid that share one compiled program.

    Attributes:
      structural: ``{field: value}`` of the structural fields in this group.
      config_ids: ``[K_g]`` positions of its configurations in the grid.
      table: their traced values (:class:`ConfigTable`, ``K_g`` rows).
    """

    structural: dict[str, Any]
    config_ids: np.ndarray
    table: ConfigTable


def split_structural(configs: Sequence[Any],
                     traced: Sequence[str] | None = None) -> list[ProgramGroup]:
    """Group full configs (dataclasses) by everything that is not traced.

    Returns one :class:`ProgramGroup` per distinct setting of the untraced fields, in the
    order each first appears; its ``structural`` holds the untraced fields that vary
    across ``configs``, its ``config_ids [K_g]`` the grid positions and its table the
    traced values of ``traced`` (``[K_g]`` columns; default: the configs' declared traced
    fields, :func:`rljax.config.traced_fields`). A traced field set to ``None`` (a
    feature switched off, e.g. ``value_clip``) is structural: it leaves the table and
    its configurations compile their own program.
    """
    if not configs:
        raise ConfigError("configs: need at least one configuration, got none")
    traced = tuple(traced_fields(type(configs[0])) if traced is None else traced)

    def off(config: Any) -> tuple[str, ...]:
        return tuple(f for f in traced if getattr(config, f) is None)

    fixed = [f.name for f in dataclasses.fields(configs[0]) if f.name not in traced]
    varying = [f for f in fixed if len({repr(getattr(c, f)) for c in configs}) > 1]
    groups: dict[str, list[int]] = {}
    for c, config in enumerate(configs):
        key = repr(([getattr(config, f) for f in fixed], off(config)))
        groups.setdefault(key, []).append(c)
    out = []
    for ids in groups.values():
        first = configs[ids[0]]
        names = [f for f in traced if f not in off(first)]
        rows = [{f: getattr(configs[c], f) for f in names} for c in ids]
        structural = {f: getattr(first, f) for f in varying}
        structural.update({f: None for f in off(first)
                           if any(getattr(c, f) is not None for c in configs)})
        out.append(ProgramGroup(structural=structural,
                                config_ids=np.asarray(ids, np.int64),
                                table=ConfigTable.from_rows(rows) if names
                                else ConfigTable(columns={}, num_rows=len(ids))))
    return out


@dataclass(frozen=True)
class GridResult:
    """What :func:`run_grid` returns: every configuration's outputs, in grid order.

    Attributes:
      outputs: pytree of numpy arrays ``[K, S, ...]`` (config ``c``, seed ``seed_ids[s]``);
        ``None`` when programs' outputs differ in shape (e.g. a grid over
        ``total_steps``): then read each config's with :meth:`config_outputs`.
      configs: the ``K`` full configurations (dataclasses), in grid order.
      seed_ids: ``[S]`` int64 seed ids.
      programs: one ``{"structural": {...}, "configs": K_g, "compile_seconds": float}``
        per compiled program (distinct structural setting).
      run_seconds: wall time of all groups' rounds (compilation excluded).
      nonfinite: ``{(config, seed id): first bad step}`` over the whole grid.
      timed_fraction: share of the work ``run_seconds`` covers (see
        :class:`rljax.sweep.SweepResult`).
      num_devices: devices the seeds were sharded over.
      parts: per program, ``(config_ids [K_g], outputs [K_g, S, ...])``.
      timed_fractions: per program, the share of its work its run time covers.
    """

    outputs: Any
    configs: tuple[Any, ...]
    seed_ids: np.ndarray
    programs: tuple[dict[str, Any], ...]
    run_seconds: float
    nonfinite: dict[tuple[int, int], int]
    timed_fraction: float
    num_devices: int = 1
    parts: tuple[tuple[np.ndarray, Any], ...] = ()
    timed_fractions: tuple[float, ...] = ()

    def config_outputs(self, c: int) -> Any:
        """Configuration ``c``'s outputs, a pytree of ``[S, ...]`` arrays."""
        for ids, outputs in self.parts:
            where = np.flatnonzero(ids == c)
            if where.size:
                return _tree_map(lambda x, j=int(where[0]): np.asarray(x[j]), outputs)
        raise IndexError(f"config: must be in 0..{len(self.configs) - 1}, got {c}")

    @property
    def compile_seconds(self) -> float:
        """Total compile time over the programs."""
        return float(sum(p["compile_seconds"] for p in self.programs))


def run_grid(make_train: Any, configs: Sequence[Any], traced: Sequence[str] | None,
             num_seeds: int, *, base_seed: int = 0, block_size: int = 1024,
             first_seed: int = 0, paired: bool = True, desc: str | None = None,
             progress: bool | None = None, devices: Any = None,
             options: Any = None) -> GridResult:
    """Run every (config, seed) pair of ``configs``: one compiled program per distinct
    setting of the untraced fields, the traced ones vmapped with the seeds.

    Args:
      make_train: ``make_train(config) -> train(key, hparams)`` (run by a
        :class:`rljax.sweep.Sweep`), or ``-> chunks`` with ``init`` / ``advance`` /
        ``finish`` / ``num_chunks`` (e.g. :func:`rljax.training.make_ppo_chunks`'s, run
        by a :class:`rljax.sweep.ChunkedSweep`: progress and checkpoints between
        chunks; outputs ``{"logs": [K, S, chunks, ...], "final": [K, S, ...]}``); called
        once per program group with the group's first config (it must read every traced
        field from ``hparams``, never from ``config``).
      configs: ``K`` full configurations (dataclasses), e.g. :meth:`Grid.configs`.
      traced: the traced field names (``None``: the configs' declared ones).
      num_seeds, base_seed, block_size, first_seed, paired, progress, devices, options:
        as for :class:`rljax.sweep.Sweep` and its ``run``.
      desc: sweep name; a group of a structural grid is named ``desc`` + its values.

    Returns:
      :class:`GridResult` (outputs ``[K, S, ...]``). Config ``c``, seed ``i`` is bitwise
      what a grid of config ``c`` alone gives (same block size).
    """
    from rljax.sweep import ChunkedSweep, Sweep

    configs = tuple(configs)
    groups = split_structural(configs, traced)
    parts, programs, run_seconds, timed, nonfinite = [], [], 0.0, 0.0, {}
    num_devices, fractions = 1, []
    for group in groups:
        name = desc
        if group.structural and desc is not None:
            name = desc + "-" + "-".join(f"{k}={v}" for k, v in group.structural.items())
        made = make_train(configs[int(group.config_ids[0])])
        if callable(made):
            sweep = Sweep(made, base_seed=base_seed, block_size=block_size, devices=devices,
                          paired=paired)
        else:
            sweep = ChunkedSweep(made.init, made.advance, made.finish,
                                 num_chunks=made.num_chunks, base_seed=base_seed,
                                 block_size=block_size, devices=devices, paired=paired)
        result = sweep.run(num_seeds, configs=group.table, first_seed=first_seed,
                           desc=name, progress=progress, options=options)
        parts.append(result.outputs)
        programs.append({"structural": dict(group.structural), "configs": len(group.table),
                         "compile_seconds": float(result.compile_seconds)})
        run_seconds += result.run_seconds
        num_devices = result.num_devices
        fractions.append(float(result.timed_fraction))
        timed += result.timed_fraction * len(group.table)
        for (c, seed), step in result.nonfinite.items():
            nonfinite[(int(group.config_ids[c]), seed)] = step
    order = np.concatenate([g.config_ids for g in groups])
    inverse = np.argsort(order, kind="stable")

    def gather(*xs):
        return np.concatenate(xs, axis=0)[inverse]

    try:
        outputs = _tree_map(gather, *parts)
    except ValueError:  # programs of different output shapes: read per config
        outputs = None
    return GridResult(outputs=outputs, configs=configs,
                      parts=tuple((g.config_ids, p) for g, p in zip(groups, parts, strict=True)),
                      seed_ids=np.arange(first_seed, first_seed + num_seeds, dtype=np.int64),
                      programs=tuple(programs), run_seconds=run_seconds,
                      nonfinite=dict(sorted(nonfinite.items())),
                      timed_fraction=timed / len(configs), num_devices=num_devices,
                      timed_fractions=tuple(fractions))


def _tree_map(fn: Any, *trees: Any) -> Any:
    """``jax.tree_util.tree_map`` (imported lazily: this module is read by the CLI)."""
    import jax

    return jax.tree_util.tree_map(fn, *trees)


def grid_columns(configs: Sequence[Any], fields: Sequence[str]) -> dict[str, np.ndarray]:
    """``{"config": [K] int, field: [K] values}``: the columns a results table gains per
    swept field (join on ``config``)."""
    out: dict[str, np.ndarray] = {"config": np.arange(len(configs), dtype=np.int32)}
    for f in fields:
        out[f] = np.asarray([getattr(c, f) for c in configs])
    return out
