"""One LM training step on a device mesh: FSDP (and tensor parallelism) for the decoder.

A language model too big for one accelerator trains one seed's step on a 2-D
:class:`jax.sharding.Mesh` with axes ``("fsdp", "tp")`` (:func:`lm_mesh`):

* **Parameters, the KL reference and Adam's moments** carry named shardings
  (:func:`state_shardings`). Each leaf's :class:`~jax.sharding.PartitionSpec` comes from
  its path and shape alone (:func:`partition_spec`), so the same rules cover the policy,
  the reference, Adam's ``mu`` / ``nu`` (optax's state trees hold the parameter tree, so
  their paths end in the parameter's path), PPO's value model and LoRA adapters
  (``{"a": A [in, r], "b": B [r, out]}`` under the projection's path):

  ================================================  ========  ===============================
  leaf (kernels are ``[in, out]``)                  ``"tp"``  ``"fsdp"``
  ================================================  ========  ===============================
  ``q/k/v_proj``, ``gate/up_proj`` kernel; LoRA B   columns   the largest other dim it divides
  ``o_proj``, ``down_proj`` kernel; LoRA A          rows      the largest other dim it divides
  any other leaf of rank >= 2 (embedding, head,     --        the largest dim ``fsdp * tp``
  LoRA A of a column / B of a row projection)                 divides, over both axes; else
                                                              ``"fsdp"`` alone
  vectors, scalars (norm scales, biases, count)     --        -- (replicated)
  ================================================  ========  ===============================

  An axis goes on a dim only if its size divides the dim (the arithmetic vocabulary,
  ``V = 19``, divides nothing, so ``embed_tokens [V, W]`` and ``lm_head [W, V]`` are
  split along ``W``); a leaf no axis divides stays whole. Tensor parallelism is
  Megatron's (Shoeybi et al., 2019, arXiv:1909.08053): a column-parallel projection keeps
  whole heads (or MLP columns) on one ``tp`` shard and the row-parallel projection after
  it sums the shards' partial products, one all-reduce per block.
* **The batch** is data parallel over ``"fsdp"`` (:func:`data_parallel`): the step's
  prompts, the sampler's repeated prompts ``[P G, Lp]`` and its completions ``[P G, T]``
  are constrained to ``PartitionSpec("fsdp")`` (whole along ``"tp"``) inside the step,
  wherever ``"fsdp"`` divides their rows; XLA carries it on to the KV cache, the logits
  and the loss. With parameters and batch both split over ``"fsdp"``, XLA all-gathers
  each weight where it is used and reduce-scatters its gradient: fully sharded data
  parallelism (ZeRO-3, Rajbhandari et al., 2020, arXiv:1910.02054).
* **Everything else** in the state (key, step, evaluation arrays, a label bank, a
  curriculum's state) is replicated.

The sharded step is the trainer's own ``rl_step`` (GRPO, PPO or SFT), jitted with these
``in_shardings`` / ``out_shardings`` (:func:`sharded_rl_step`): one code path from 1 device
to many. Random draws do not depend on the layout (``jax_threefry_partitionable``, JAX's
default), so the sharded step samples the single-device step's prompts and tokens; only
the order of float reductions differs. :func:`sharding_figures` measures both claims on 8
forced CPU devices (:func:`run_sharding_figures`): the same tokens, the parameters, Adam's
state and the metrics within float tolerance of the single-device step, and per-device
bytes of parameters + Adam's state at about ``1 / N`` of the replicated figure.

**Seeds and the mesh.** The mesh is for *one seed's* step of a model too large to
replicate; seeds stay an outer axis: a sweep of such a model runs its seeds one after
another, each on the whole mesh (seed ``i``'s key is ``rljax.sweep.seed_key(base, i)``,
so its run does not depend on the others). Models that fit one device keep
:mod:`rljax.sweep`'s layout instead -- seeds vmapped, fixed blocks of seeds placed on
devices along the ``"seeds"`` axis, every parameter whole on its device -- which needs
no collectives and is bitwise independent of the device count. The two layouts are
alternatives, not nested axes: an FSDP step is float-close to the single-device step,
not bitwise, so nesting would give up the sweep's guarantee.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

from rljax.training.lm import LMTrainConfig, LMTrainer, LMTrainState, make_lm_trainer
from rljax.training.lm_config import LMDecoderConfig

__all__ = ["FSDP_AXIS", "TP_AXIS", "COLUMN_PARALLEL", "ROW_PARALLEL", "lm_mesh",
           "partition_spec", "tree_shardings", "state_shardings", "shard_state",
           "data_parallel", "sharded_init", "sharded_rl_step", "sharded_step_memory",
           "sharding_trainer", "sharding_figures", "run_sharding_figures"]

FSDP_AXIS = "fsdp"
"""The mesh axis that splits the batch and every large parameter (FSDP)."""

TP_AXIS = "tp"
"""The mesh axis that splits attention heads and the MLP width (tensor parallelism)."""

COLUMN_PARALLEL = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
"""Projections split along their output columns over ``"tp"``."""

ROW_PARALLEL = ("o_proj", "down_proj")
"""Projections split along their input rows over ``"tp"``."""

# the leaf names of a column- / row-parallel projection that carry its split dim
_COLUMN_LEAVES = ("kernel", "b")  # kernel [in, out]; LoRA's B [r, out]
_ROW_LEAVES = ("kernel", "a")  # kernel [in, out]; LoRA's A [in, r]
_STATE_PARAM_FIELDS = ("params", "reference", "opt_state")


def lm_mesh(fsdp: int | None = None, tp: int = 1,
            devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A ``[fsdp, tp]`` mesh with axes ``("fsdp", "tp")``.

    Args:
      fsdp: devices along ``"fsdp"`` (``None``: all devices not used by ``tp``).
      tp: devices along ``"tp"`` (1: no tensor parallelism).
      devices: the devices to use (default ``jax.devices()``); the first ``fsdp * tp``
        form the mesh, row-major (neighbouring devices share a ``tp`` group).

    Returns:
      the :class:`~jax.sharding.Mesh` of shape ``[fsdp, tp]``.

    Raises:
      ValueError: one line naming ``fsdp`` or ``tp`` when it is not a positive int or the
        mesh needs more devices than there are.
    """
    devices = list(jax.devices() if devices is None else devices)
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        raise ValueError(f"tp: must be an int >= 1, got {tp!r}")
    if tp > len(devices):
        raise ValueError(f"tp: {tp} devices along 'tp' but only {len(devices)} devices")
    if fsdp is None:
        fsdp = len(devices) // tp
    if not isinstance(fsdp, int) or isinstance(fsdp, bool) or fsdp < 1:
        raise ValueError(f"fsdp: must be an int >= 1 (or None), got {fsdp!r}")
    if fsdp * tp > len(devices):
        raise ValueError(f"fsdp: fsdp * tp = {fsdp} * {tp} devices but only "
                         f"{len(devices)} devices")
    grid = np.array(devices[: fsdp * tp], dtype=object).reshape(fsdp, tp)
    return Mesh(grid, (FSDP_AXIS, TP_AXIS))


def _key_names(path: Sequence[Any]) -> list[str]:
    """The dict keys / attribute names along a pytree path (sequence indices dropped)."""
    names = []
    for entry in path:
        name = getattr(entry, "key", getattr(entry, "name", None))
        if isinstance(name, str):
            names.append(name)
    return names


def _tp_dim(names: list[str], ndim: int) -> int | None:
    """The dim a leaf at ``names`` splits over ``"tp"`` (None: not tensor parallel)."""
    if ndim != 2 or len(names) < 2:
        return None
    leaf, owners = names[-1], names[:-1]
    if any(o in COLUMN_PARALLEL for o in owners) and leaf in _COLUMN_LEAVES:
        return 1
    if any(o in ROW_PARALLEL for o in owners) and leaf in _ROW_LEAVES:
        return 0
    return None


def partition_spec(path: Sequence[Any], shape: Sequence[int], mesh: Mesh | AbstractMesh
                   ) -> PartitionSpec:
    """The sharding rule (module docstring's table) of one parameter-like leaf.

    Args:
      path: the leaf's pytree path (``jax.tree_util.tree_flatten_with_path``), e.g.
        ``['params']['layers_0']['self_attn']['q_proj']['kernel']`` or the same path
        under Adam's ``mu``.
      shape: the leaf's shape, e.g. ``[W, H Dh]``.
      mesh: a mesh with axes ``"fsdp"`` and ``"tp"`` (:func:`lm_mesh`).

    Returns:
      a :class:`~jax.sharding.PartitionSpec` of ``len(shape)`` entries (``PartitionSpec()``
      for vectors and scalars), an entry being ``None``, ``"tp"``, ``"fsdp"`` or
      ``("fsdp", "tp")`` (both axes on one dim); the named axes' sizes divide the dim.
    """
    shape = tuple(int(s) for s in shape)
    if len(shape) < 2:
        return PartitionSpec()
    spec: list[Any] = [None] * len(shape)
    tp, fsdp = mesh.shape[TP_AXIS], mesh.shape[FSDP_AXIS]
    tp_dim = _tp_dim(_key_names(path), len(shape))
    if tp > 1 and tp_dim is not None and shape[tp_dim] % tp == 0:
        spec[tp_dim] = TP_AXIS
    # what "tp" does not split is stored over every device when a dim allows it
    choices = [(FSDP_AXIS, fsdp)] if TP_AXIS in spec or tp == 1 else [
        ((FSDP_AXIS, TP_AXIS), fsdp * tp), (FSDP_AXIS, fsdp)]
    for axes, size in choices:
        dims = [d for d in range(len(shape)) if spec[d] is None and shape[d] % size == 0]
        if size > 1 and dims:
            spec[max(dims, key=lambda d: (shape[d], -d))] = axes
            break
    return PartitionSpec(*spec)


def tree_shardings(tree: Any, mesh: Mesh | AbstractMesh) -> Any:
    """:class:`~jax.sharding.NamedSharding` of every leaf of a parameter-like ``tree``
    (params, a reference, an optax state; arrays or ``ShapeDtypeStruct``s) by
    :func:`partition_spec`, e.g. ``PartitionSpec(None, "fsdp")`` for ``embed_tokens
    [V, W]`` and ``PartitionSpec()`` for a scale ``[W]`` or a count ``[]``; the same
    structure as ``tree``."""
    return jax.tree_util.tree_map_with_path(
        lambda path, leaf: NamedSharding(mesh, partition_spec(path, np.shape(leaf), mesh)),
        tree)


def state_shardings(state: LMTrainState, mesh: Mesh | AbstractMesh) -> LMTrainState:
    """The :class:`~jax.sharding.NamedSharding` of every leaf of an
    :class:`~rljax.training.lm.LMTrainState` (arrays or the ``ShapeDtypeStruct``s of
    ``jax.eval_shape(trainer.init, key)``): ``params``, ``reference`` and ``opt_state``
    by :func:`tree_shardings`, every other field replicated (the key and step ``[]``,
    ``eval_correct [eval_prompts]``, a bank's rows)."""
    replicated = NamedSharding(mesh, PartitionSpec())
    fields = {f.name: jax.tree_util.tree_map(lambda _: replicated, getattr(state, f.name))
              for f in dataclasses.fields(state)}
    for name in _STATE_PARAM_FIELDS:
        fields[name] = tree_shardings(getattr(state, name), mesh)
    return type(state)(**fields)


def shard_state(state: LMTrainState, mesh: Mesh) -> LMTrainState:
    """``state`` placed on ``mesh`` by :func:`state_shardings` (``jax.device_put``; the
    values and shapes are unchanged, each device holds its shards)."""
    return jax.device_put(state, state_shardings(state, mesh))


@dataclasses.dataclass(frozen=True)
class _DataParallelTrainer(LMTrainer):
    """The trainer with its batch constrained to ``PartitionSpec("fsdp")``: the prompts it
    samples and the sampler's prompts and completions (rows ``[N, ...]``, when ``"fsdp"``
    divides ``N``). The step is otherwise the trainer's own."""

    mesh: Mesh | None = None

    def _rows(self, tree: Any) -> Any:
        batch = NamedSharding(self.mesh, PartitionSpec(FSDP_AXIS))
        fsdp = self.mesh.shape[FSDP_AXIS]

        def constrain(x):
            if jnp.ndim(x) == 0 or x.shape[0] % fsdp:
                return x
            return jax.lax.with_sharding_constraint(x, batch)

        return jax.tree_util.tree_map(constrain, tree)

    def sample_problems(self, key, num):
        return self._rows(super().sample_problems(key, num))

    def sample_completions(self, policy_params, problems, key):
        completion = super().sample_completions(policy_params, self._rows(problems), key)
        return self._rows(completion)


def data_parallel(trainer: LMTrainer, mesh: Mesh) -> LMTrainer:
    """``trainer`` with its batch split over ``mesh``'s ``"fsdp"`` axis (module
    docstring): the same fields and methods, whose sampled prompts ``[N, Lp]`` and
    completions ``[N, T]`` carry ``PartitionSpec("fsdp")`` inside a jitted step."""
    base = {f.name: getattr(trainer, f.name) for f in dataclasses.fields(LMTrainer)}
    return _DataParallelTrainer(**base, mesh=mesh)


def sharded_rl_step(trainer: LMTrainer, mesh: Mesh, donate: bool = False):
    """The trainer's ``rl_step`` jitted for ``mesh``: ``step(state) -> (state, metrics)``.

    The state's shardings (:func:`state_shardings`) are the step's ``in_shardings`` and
    ``out_shardings`` (so a loop of steps keeps its layout), the batch is data parallel
    over ``"fsdp"`` (:func:`data_parallel`), the metrics (scalars ``[]``) come back
    replicated. Pass a state from :func:`shard_state` (or any state: ``jit`` moves it).

    Args:
      trainer: an :class:`~rljax.training.lm.LMTrainer` (GRPO, PPO or SFT; full or any
        parameter tree the rules cover).
      mesh: from :func:`lm_mesh`.
      donate: donate the input state's buffers to the output (halves the state's peak
        memory in a loop; the input state is then unusable).

    Returns:
      the jitted step (its ``.lower(state)`` gives XLA's per-device memory analysis).
    """
    shapes = jax.eval_shape(trainer.init, jax.random.key(0))
    shardings = state_shardings(shapes, mesh)
    return jax.jit(data_parallel(trainer, mesh).rl_step, in_shardings=(shardings,),
                   out_shardings=(shardings, NamedSharding(mesh, PartitionSpec())),
                   donate_argnums=(0,) if donate else ())


def sharded_init(trainer: LMTrainer, mesh: Mesh):
    """``trainer.init`` jitted to write each leaf straight into its shards:
    ``init(key) -> LMTrainState`` for a key ``[]``, laid out by :func:`state_shardings`
    (each device holds e.g. ``[V, W / fsdp]`` of the embedding, never the whole model;
    the values are ``trainer.init``'s)."""
    shapes = jax.eval_shape(trainer.init, jax.random.key(0))
    return jax.jit(trainer.init, out_shardings=state_shardings(shapes, mesh))


def _bytes(tree: Any, shardings: Any = None) -> int:
    """Bytes of ``tree``'s leaves: whole, or one device's shard of each (``shardings``)."""
    leaves = jax.tree_util.tree_leaves(tree)
    shards = [None] * len(leaves) if shardings is None else jax.tree_util.tree_leaves(shardings)
    shapes = [leaf.shape if s is None else s.shard_shape(leaf.shape)
              for leaf, s in zip(leaves, shards, strict=True)]
    return int(sum(math.prod(shape) * jnp.dtype(leaf.dtype).itemsize
                   for leaf, shape in zip(leaves, shapes, strict=True)))


def _shard_bytes(shapes: LMTrainState, shardings: LMTrainState) -> dict[str, Any]:
    """Bytes of parameters + optimizer state, whole vs one device's shards."""
    replicated = _bytes((shapes.params, shapes.opt_state))
    per_device = _bytes((shapes.params, shapes.opt_state),
                        (shardings.params, shardings.opt_state))
    return {"replicated_bytes": replicated, "sharded_bytes_per_device": per_device,
            "fsdp_memory_per_device_ratio": per_device / replicated,
            "reference_bytes_per_device": _bytes(shapes.reference, shardings.reference)}


def _xla_memory(single: Any, sharded: Any) -> dict[str, int]:
    """XLA's per-device analysis of the compiled ``single`` and ``sharded`` steps."""
    one, many = single.memory_analysis(), sharded.memory_analysis()
    return {"xla_argument_bytes_single": int(one.argument_size_in_bytes),
            "xla_argument_bytes_per_device": int(many.argument_size_in_bytes),
            "xla_temp_bytes_single": int(one.temp_size_in_bytes),
            "xla_temp_bytes_per_device": int(many.temp_size_in_bytes)}


def sharded_step_memory(trainer: LMTrainer, mesh: Mesh | AbstractMesh, xla: bool = True
                        ) -> dict[str, Any]:
    """Per-device memory of the sharded step vs the single-device (replicated) step.
    Nothing is run: shapes come from ``jax.eval_shape(trainer.init, key)``.

    Args:
      trainer: the run.
      mesh: from :func:`lm_mesh`, or a :class:`~jax.sharding.AbstractMesh` with the same
        axes (e.g. ``AbstractMesh((8, 1), ("fsdp", "tp"))``, the layout of 8 devices
        on a machine with one) when ``xla=False``.
      xla: also compile the single-device and the sharded step for XLA's figures.

    Returns:
      ``replicated_bytes`` (parameters + optimizer state, whole: what every device holds
      when replicated), ``sharded_bytes_per_device`` (the same leaves' shards on one
      device, from each leaf's ``NamedSharding.shard_shape``; with even splits every
      device holds the same bytes), their ratio ``fsdp_memory_per_device_ratio`` and
      ``reference_bytes_per_device``. With ``xla``, XLA's ``memory_analysis`` of the two
      compiled steps, per device: ``xla_argument_bytes_single`` / ``_per_device`` (the
      whole state: reference, key and evaluation arrays included) and
      ``xla_temp_bytes_single`` / ``_per_device`` (activations, gradients, the KV cache).
      The ratio is read from the shard shapes because XLA's argument figure does not
      split the parameters from the rest of the state; the two ratios agree (tested).
    """
    shapes = jax.eval_shape(trainer.init, jax.random.key(0))
    figures = _shard_bytes(shapes, state_shardings(shapes, mesh))
    if xla:
        single = jax.jit(trainer.rl_step).lower(shapes).compile()
        sharded = sharded_rl_step(trainer, mesh).lower(shapes).compile()
        figures.update(_xla_memory(single, sharded))
    return figures


def sharding_trainer(width: int = 64, num_layers: int = 2, num_heads: int = 4,
                     prompts_per_step: int = 2, group_size: int = 4) -> LMTrainer:
    """A small GRPO trainer for the sharding figures: a decoder of ``width`` (MLP width
    ``8 width / 3`` rounded up to 16), ``num_heads`` query heads and half as many
    key/value heads, the arithmetic vocabulary ``V = 19``; no warm-up, ``P x G``
    completions of 4 tokens, rewards for accuracy and format (so groups have signal and
    the gradient is not round-off), KL to the reference on (so the step reads it). The
    defaults' large dims divide 8; seconds to compile on CPU."""
    config = LMTrainConfig(width=width, num_layers=num_layers, num_heads=num_heads,
                           sft_steps=0, eval_prompts=8, prompts_per_step=prompts_per_step,
                           group_size=group_size, max_new_tokens=4, rl_steps=1,
                           steps_per_chunk=1, kl_beta=0.04, reward_format=1.0)
    return make_lm_trainer(config, decoder=LMDecoderConfig(num_kv_heads=num_heads // 2))


def _max_abs_diff(a: Any, b: Any) -> float:
    """Largest ``|a - b|`` over the float leaves (NaN where both are NaN counts as 0)."""
    diffs = [0.0]
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        same_nan = np.isnan(x) & np.isnan(y)
        diffs.append(float(np.max(np.where(same_nan, 0.0, np.abs(x - y)), initial=0.0)))
    return max(diffs)


def sharding_figures(trainer: LMTrainer | None = None, fsdp: int | None = None, tp: int = 1,
                     seed: int = 0) -> dict[str, Any]:
    """One RL step on a ``[fsdp, tp]`` mesh vs on one device, from the same state and key.

    Run it in a process with at least ``fsdp * tp`` devices (on CPU,
    ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` before JAX starts:
    :func:`run_sharding_figures` starts such a process).

    Args:
      trainer: the run (default :func:`sharding_trainer`).
      fsdp, tp: the mesh (:func:`lm_mesh`; ``fsdp=None``: all devices).
      seed: the state's key, ``trainer.init(jax.random.key(seed))``.

    Returns:
      a dict of JSON values: ``params_max_abs_diff``, ``adam_max_abs_diff`` and
      ``metrics_max_abs_diff`` (largest ``|sharded - single|`` over the new params, Adam's
      state and the step's metrics; NaN on both sides counts as equal) and their maximum
      ``sharded_vs_single_max_abs_diff``; ``sampled_tokens_equal`` (the sampler on the
      mesh draws the single-device tokens ``[P G, T]`` for one key) and
      ``sampled_rows_axis`` (the mesh axis its rows are split over: ``"fsdp"``);
      ``devices``, ``fsdp``, ``tp``; and :func:`sharded_step_memory`'s figures.

    The params differ more than the gradients: Adam's first step moves each coordinate
    by ``lr g / (|g| + eps)``, so a gradient that is exactly 0 on one side and 1e-10 of
    round-off on the other (a reduction in another order) moves it by a few percent of
    ``lr`` (measured: ``lr = 3e-4``, params within 8e-6, Adam's moments within 2e-9).
    """
    trainer = sharding_trainer() if trainer is None else trainer
    mesh = lm_mesh(fsdp, tp)
    state = jax.jit(trainer.init)(jax.random.key(seed))
    shapes = jax.eval_shape(lambda s: s, state)
    single = jax.jit(trainer.rl_step).lower(state).compile()
    sharded = sharded_rl_step(trainer, mesh).lower(shapes).compile()
    one, one_metrics = single(state)
    many, many_metrics = sharded(shard_state(state, mesh))
    tokens_equal, tokens_axis = _sampled_tokens(trainer, mesh, state)
    diffs = {"params_max_abs_diff": _max_abs_diff(one.params, many.params),
             "adam_max_abs_diff": _max_abs_diff(one.opt_state, many.opt_state),
             "metrics_max_abs_diff": _max_abs_diff(one_metrics, many_metrics)}
    figures = {
        "sharded_vs_single_max_abs_diff": max(diffs.values()), **diffs,
        "sampled_tokens_equal": tokens_equal, "sampled_rows_axis": tokens_axis,
        "devices": int(mesh.size), "fsdp": int(mesh.shape[FSDP_AXIS]),
        "tp": int(mesh.shape[TP_AXIS]),
    }
    return {**figures, **_shard_bytes(shapes, state_shardings(shapes, mesh)),
            **_xla_memory(single, sharded)}


def _sampled_tokens(trainer: LMTrainer, mesh: Mesh, state: LMTrainState
                    ) -> tuple[bool, str | None]:
    """Whether the sampler on ``mesh`` (sharded state, data-parallel rows) draws the
    single-device tokens ``[P G, T]`` for one key, and the mesh axis its tokens' rows
    are split over (``"fsdp"`` when data parallel, None when replicated)."""
    cfg = trainer.config
    rows = cfg.prompts_per_step * cfg.group_size

    def sample(t, state, key):
        policy = t.current_policy(state)  # LoRA: the adapters merged into the base
        problems = t.sample_problems(jax.random.fold_in(key, 1), rows)
        return t.sample_completions(policy, problems, key).tokens

    key = jax.random.key(1)
    single = jax.jit(functools.partial(sample, trainer))(state, key)
    many = jax.jit(functools.partial(sample, data_parallel(trainer, mesh)))(
        shard_state(state, mesh), key)
    equal = bool(np.array_equal(np.asarray(single), np.asarray(many)))
    spec = tuple(many.sharding.spec)
    return equal, spec[0] if spec else None


def run_sharding_figures(devices: int = 8, fsdp: int | None = None, tp: int = 1,
                         timeout: float = 600.0, **sizes: int) -> dict[str, Any]:
    """:func:`sharding_figures` of :func:`sharding_trainer` in a fresh Python process with
    ``devices`` forced CPU devices, returned as its dict (JSON values).

    ``--xla_force_host_platform_device_count`` (appended to the caller's ``XLA_FLAGS``)
    is read only when JAX starts its backend, so the figures cannot be taken in a process
    whose JAX is already up with another device count; the child gets
    ``JAX_PLATFORMS=cpu``.

    Args:
      devices: forced CPU devices in the child.
      fsdp, tp: the mesh (:func:`lm_mesh`; ``fsdp=None``: ``devices // tp``).
      timeout: seconds before the child is stopped.
      **sizes: :func:`sharding_trainer`'s arguments (``width``, ``num_layers``, ...).

    Returns:
      :func:`sharding_figures`' dict of scalars (floats, ints, a bool, a str).

    Raises:
      RuntimeError: one line with the child's last error line if it fails.
    """
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = (f"{env.get('XLA_FLAGS', '')} "
                        f"--xla_force_host_platform_device_count={int(devices)}").strip()
    code = ("import json, sys; from rljax.training.lm_sharding import sharding_figures, "
            "sharding_trainer; a = json.loads(sys.argv[1]); print(json.dumps("
            "sharding_figures(sharding_trainer(**a['sizes']), a['fsdp'], a['tp'])))")
    arguments = json.dumps({"fsdp": fsdp, "tp": tp, "sizes": sizes})
    done = subprocess.run([sys.executable, "-c", code, arguments], env=env,
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"sharding figures on {devices} CPU devices failed: {last}")
    return json.loads(done.stdout.strip().splitlines()[-1])
