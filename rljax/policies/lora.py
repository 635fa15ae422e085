"""LoRA adapters for the Decoder's projections (Hu et al., 2021, arXiv:2106.09685).

A frozen kernel ``W [in, out]`` (flax ``Dense`` layout) is adapted as

    W' = W + (alpha / r) A B,     A [in, r],  B [r, out]

with ``A`` drawn like PEFT's default (Kaiming-uniform, bound ``sqrt(1 / in)``) and ``B``
zero, so the adapted model starts as the base model exactly. The adapters are a separate
pytree with the base's path to each adapted kernel (``layers_0/self_attn/q_proj``) holding
``{"a": A, "b": B}``: an optimizer sees only them, and the base parameters, never
differentiated, double as the frozen reference of a KL penalty (adapters off: no second
copy of the model).

:func:`merge_lora` gives the adapted parameters in the base's layout, so every method of
:class:`~rljax.policies.decoder.Decoder` (logits, scoring, ``generate``) takes them as
they are; the LM trainer trains through it (the merged kernels are temporaries of the
step; applying ``x W + (x A) B`` unmerged was measured and used more memory under XLA,
docs/lm_scale.md). :func:`save_peft_adapters` writes the adapters in PEFT's layout
(``adapter_model.safetensors`` with ``base_model.model.model.layers.{i}.self_attn.q_proj.
lora_A.weight [r, in]`` and ``lora_B.weight [out, r]``, and ``adapter_config.json``), which
Hugging Face's ``peft`` reads; :func:`load_peft_adapters` reads it back.

The LM trainer's LoRA mode (``LMDecoderConfig.lora_rank``,
:class:`rljax.training.lm.LMTrainer`) trains only the adapters with GRPO or PPO; ``rljax
bench lm-scale`` measures its memory against full fine-tuning.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax.types import Array, Params, PRNGKey

#: The Decoder's projections LoRA may adapt (HF's module names).
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_BLOCK = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn",
          "o_proj": "self_attn", "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"


@dataclasses.dataclass(frozen=True)
class LoRAConfig:
    """Which projections get adapters, and their rank and scale (scalars: no arrays).

    Attributes:
      rank: r >= 1, the adapters' inner width.
      alpha: > 0; the update is scaled by ``alpha / rank`` (PEFT's ``lora_alpha``).
      targets: a non-empty subset of :data:`LORA_TARGETS`.
    """

    rank: int = 8
    alpha: float = 16.0
    targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")

    def __post_init__(self):
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(f"rank: must be an integer >= 1, got {self.rank!r}")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not (
                math.isfinite(self.alpha) and self.alpha > 0):
            raise ValueError(f"alpha: must be a finite number > 0, got {self.alpha!r}")
        targets = tuple(self.targets) if isinstance(self.targets, (tuple, list)) else ()
        if not targets or not set(targets) <= set(LORA_TARGETS) or len(set(targets)) < len(
                targets):
            raise ValueError(f"targets: must be distinct names among {LORA_TARGETS}, got "
                             f"{self.targets!r}")
        object.__setattr__(self, "targets", targets)

    @property
    def scale(self) -> float:
        """``alpha / rank``, the factor on ``A B``."""
        return self.alpha / self.rank


def _inner(params: Params) -> Mapping[str, Any]:
    return params["params"] if "params" in params else params


def _layer_names(params: Params) -> list[str]:
    names = [n for n in _inner(params) if re.fullmatch(r"layers_\d+", n)]
    if not names:
        raise ValueError("params: no decoder layers (layers_0, ...) found; LoRA adapts a "
                         "Decoder's parameters")
    return sorted(names, key=lambda n: int(n.split("_")[1]))


def adapted_kernels(params: Params, config: LoRAConfig) -> dict[tuple[str, str, str], Array]:
    """``{(layer, block, projection): kernel [in, out]}`` of the kernels ``config`` adapts."""
    inner = _inner(params)
    return {(layer, _BLOCK[t], t): inner[layer][_BLOCK[t]][t]["kernel"]
            for layer in _layer_names(params) for t in config.targets}


def init_lora(key: PRNGKey, params: Params, config: LoRAConfig) -> Params:
    """Adapters for ``params`` (a Decoder's): ``A [in, r]`` Kaiming-uniform with bound
    ``sqrt(1 / in)`` (PEFT's default), ``B [r, out]`` zero.

    Args:
      key: PRNG key (one fold per adapted kernel, in layer and target order).
      params: the base parameters (``{"params": tree}`` or the tree).
      config: rank, alpha, targets.

    Returns:
      ``{layer: {block: {projection: {"a": [in, r], "b": [r, out]}}}}``.
    """
    adapters: dict[str, Any] = {}
    for i, ((layer, block, proj), kernel) in enumerate(adapted_kernels(params, config).items()):
        fan_in, fan_out = kernel.shape
        bound = math.sqrt(1.0 / fan_in)
        a = jax.random.uniform(jax.random.fold_in(key, i), (fan_in, config.rank),
                               kernel.dtype, -bound, bound)
        b = jnp.zeros((config.rank, fan_out), kernel.dtype)
        adapters.setdefault(layer, {}).setdefault(block, {})[proj] = {"a": a, "b": b}
    return adapters


def merge_lora(params: Params, adapters: Params, config: LoRAConfig) -> Params:
    """The adapted parameters, in the base's layout: each adapted kernel becomes
    ``W + (alpha / r) A B``; every other leaf is the base's.

    Args:
      params: the base parameters.
      adapters: from :func:`init_lora` (or trained).
      config: the adapters' config.

    Returns:
      A pytree like ``params`` (each kernel keeps its shape ``[in, out]``).
    """
    wrapped = "params" in params
    merged = jax.tree_util.tree_map(lambda x: x, dict(_inner(params)))
    for layer, blocks in adapters.items():
        merged[layer] = {**merged[layer]}
        for block, projections in blocks.items():
            merged[layer][block] = {**merged[layer][block]}
            for proj, ab in projections.items():
                kernel = merged[layer][block][proj]["kernel"]
                update = config.scale * (ab["a"] @ ab["b"])
                merged[layer][block][proj] = {**merged[layer][block][proj],
                                              "kernel": kernel + update.astype(kernel.dtype)}
    return {"params": merged} if wrapped else merged


def num_adapter_parameters(adapters: Params) -> int:
    """The number of scalars in an adapter pytree."""
    return sum(int(x.size) for x in jax.tree_util.tree_leaves(adapters))


def _peft_name(layer: str, block: str, proj: str, which: str) -> str:
    index = int(layer.split("_")[1])
    return f"base_model.model.model.layers.{index}.{block}.{proj}.lora_{which}.weight"


def save_peft_adapters(path: str | os.PathLike, adapters: Params, config: LoRAConfig, *,
                       base_model: str = "", overwrite: bool = False) -> Path:
    """Write ``adapters`` as a PEFT adapter directory (``adapter_model.safetensors`` +
    ``adapter_config.json``): ``lora_A.weight [r, in]`` and ``lora_B.weight [out, r]``
    (PyTorch's ``[out, in]`` convention), float32. Atomic (a temp directory renamed into
    place).

    Returns:
      The directory written.

    Raises:
      ValueError: ``path`` exists and is not empty (without ``overwrite``).
    """
    from safetensors.numpy import save_file

    directory = Path(path).expanduser()
    if directory.exists() and any(directory.iterdir()) and not overwrite:
        raise ValueError(f"path: {directory} exists and is not empty; pass overwrite=True")
    tensors = {}
    for layer, blocks in adapters.items():
        for block, projections in blocks.items():
            for proj, ab in projections.items():
                tensors[_peft_name(layer, block, proj, "A")] = np.ascontiguousarray(
                    np.asarray(ab["a"], np.float32).T)
                tensors[_peft_name(layer, block, proj, "B")] = np.ascontiguousarray(
                    np.asarray(ab["b"], np.float32).T)
    peft_config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": config.rank,
                   "lora_alpha": config.alpha, "target_modules": list(config.targets),
                   "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False,
                   "base_model_name_or_path": base_model, "inference_mode": True}
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        save_file(tensors, str(staging / ADAPTER_WEIGHTS), metadata={"format": "pt"})
        (staging / ADAPTER_CONFIG).write_text(json.dumps(peft_config, indent=2) + "\n")
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(staging, directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return directory


_PEFT_KEY = re.compile(r"base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\."
                       r"(\w+)\.lora_(A|B)\.weight")


def load_peft_adapters(path: str | os.PathLike) -> tuple[Params, LoRAConfig]:
    """Read a PEFT adapter directory written by :func:`save_peft_adapters` (or by ``peft``
    for a Llama / Qwen2 model without biases or dropout in the adapters).

    Returns:
      ``(adapters, config)`` in :func:`init_lora`'s layout (``a [in, r]``, ``b [r, out]``).

    Raises:
      ValueError: a missing file, a non-LoRA config, or a tensor name outside the layout.
    """
    from safetensors.numpy import load_file

    directory = Path(path).expanduser()
    for name in (ADAPTER_WEIGHTS, ADAPTER_CONFIG):
        if not (directory / name).is_file():
            raise ValueError(f"path: {directory} has no {name}")
    peft = json.loads((directory / ADAPTER_CONFIG).read_text())
    if peft.get("peft_type") != "LORA":
        raise ValueError(f"path: {ADAPTER_CONFIG} has peft_type {peft.get('peft_type')!r}, "
                         "not 'LORA'")
    config = LoRAConfig(rank=int(peft["r"]), alpha=float(peft["lora_alpha"]),
                        targets=tuple(peft["target_modules"]))
    adapters: dict[str, Any] = {}
    for key, value in load_file(str(directory / ADAPTER_WEIGHTS)).items():
        match = _PEFT_KEY.fullmatch(key)
        if match is None:
            raise ValueError(f"path: unexpected tensor {key!r} in {ADAPTER_WEIGHTS}")
        index, block, proj, which = match.groups()
        entry = adapters.setdefault(f"layers_{index}", {}).setdefault(block, {}).setdefault(
            proj, {})
        entry["a" if which == "A" else "b"] = jnp.asarray(value.T)
    return adapters, config


__all__ = ["LoRAConfig", "LORA_TARGETS", "init_lora", "merge_lora", "adapted_kernels",
           "num_adapter_parameters", "save_peft_adapters", "load_peft_adapters"]
