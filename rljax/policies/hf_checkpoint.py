"""Hugging Face-layout checkpoints and tokenizers for :class:`~rljax.policies.decoder.Decoder`.

A checkpoint directory in the layout ``transformers`` reads and writes for
``LlamaForCausalLM`` / ``Qwen2ForCausalLM``::

    config.json                       architectures, model_type, sizes, torch_dtype
    model.safetensors                 every tensor in one file, or
    model.safetensors.index.json      {"weight_map": {tensor name: shard file}} and
    model-00001-of-0000N.safetensors  the N shard files it names
    tokenizer.json                    (optional) a ``tokenizers`` tokenizer
    tokenizer_config.json             (optional) bos_token / eos_token / pad_token

Tensor names and shapes (HF ``torch.nn.Linear`` stores ``weight [out, in]``; flax's
``Dense`` stores ``kernel [in, out]``, so every projection is transposed, marked (T)), with
``W = hidden_size``, ``V = vocab_size``, ``F = intermediate_size``, ``H`` query heads and
``KV`` key/value heads of ``Dh = head_dim``; rljax leaves are under ``params``, layer ``i``
as ``layers_{i}``::

    model.embed_tokens.weight                  [V, W]      embed_tokens/embedding
    model.layers.{i}.input_layernorm.weight    [W]         input_layernorm/scale
    model.layers.{i}.self_attn.q_proj.weight   [H Dh, W]   self_attn/q_proj/kernel    (T)
    model.layers.{i}.self_attn.k_proj.weight   [KV Dh, W]  self_attn/k_proj/kernel    (T)
    model.layers.{i}.self_attn.v_proj.weight   [KV Dh, W]  self_attn/v_proj/kernel    (T)
    model.layers.{i}.self_attn.q_proj.bias     [H Dh]      self_attn/q_proj/bias      qwen2
    model.layers.{i}.self_attn.{k,v}_proj.bias [KV Dh]     self_attn/{k,v}_proj/bias  qwen2
    model.layers.{i}.self_attn.o_proj.weight   [W, H Dh]   self_attn/o_proj/kernel    (T)
    model.layers.{i}.post_attention_layernorm.weight [W]   post_attention_layernorm/scale
    model.layers.{i}.mlp.gate_proj.weight      [F, W]      mlp/gate_proj/kernel       (T)
    model.layers.{i}.mlp.up_proj.weight        [F, W]      mlp/up_proj/kernel         (T)
    model.layers.{i}.mlp.down_proj.weight      [W, F]      mlp/down_proj/kernel       (T)
    model.norm.weight                          [W]         norm/scale
    lm_head.weight (untied only)               [V, W]      lm_head/kernel             (T)

With ``tie_word_embeddings`` the head is
the embedding: a file may omit ``lm_head.weight`` (as HF writes tied models) or carry it;
it is then ignored. Tensors are read with ``safetensors.numpy`` (no torch) in bfloat16,
float16 or float32 and become float32 params; saving writes any of the three.

Everything is checked before anything is returned or written; each failure is one line
naming the file, field or tensor and what was expected. docs/hf_checkpoints.md has the
refused features and why.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import ml_dtypes
import numpy as np

from rljax.policies.decoder import Decoder, DecoderConfig

# the tokenizer wrapper lives below envs and policies (the text tasks use it); these names
# stay importable from here
from rljax.text_tokenizer import (  # noqa: F401
    SPECIAL_TOKENS_MAP_FILE,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
    HFTokenizer,
    _read_json,
    load_hf_tokenizer,
)
from rljax.tokenizer import NUM_SPECIAL, CharTokenizer
from rljax.types import Params

CONFIG_FILE = "config.json"
"""The model's hyperparameters (HF ``PretrainedConfig.to_json_file``)."""
WEIGHTS_FILE = "model.safetensors"
"""All tensors in one safetensors file."""
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
"""``{"weight_map": {tensor name: shard file}}`` of a sharded checkpoint."""

ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}
"""model_type -> the HF ``architectures`` entry of the supported decoders."""

_DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
_SAFETENSORS_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}
# HF buffers some old checkpoints carry; transformers drops them on load, so do we.
_IGNORED_SUFFIXES = (".self_attn.rotary_emb.inv_freq",)


# ----------------------------------------------------------------------------- config


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _config_error(message: str) -> ValueError:
    return ValueError(f"{CONFIG_FILE}: {message}")


def _model_type(hf: Mapping[str, Any]) -> str:
    """``llama`` / ``qwen2`` from ``model_type`` and ``architectures`` (which must agree)."""
    by_architecture = {arch: kind for kind, arch in ARCHITECTURES.items()}
    model_type = hf.get("model_type")
    if model_type is not None and model_type not in ARCHITECTURES:
        raise _config_error(f"model_type: {model_type!r} is not supported; rljax loads "
                            f"{sorted(ARCHITECTURES)}")
    architectures = hf.get("architectures")
    if architectures is not None:
        if (not isinstance(architectures, list) or len(architectures) != 1
                or architectures[0] not in by_architecture):
            raise _config_error(f"architectures: {architectures!r} is not supported; rljax "
                                f"loads one of {sorted(by_architecture)}")
        from_architecture = by_architecture[architectures[0]]
        if model_type is not None and model_type != from_architecture:
            raise _config_error(f"model_type: {model_type!r} disagrees with architectures "
                                f"{architectures!r}")
        return from_architecture
    if model_type is None:
        raise _config_error("model_type: missing (and no architectures); expected 'llama' or "
                            "'qwen2'")
    return model_type


def _rope_theta(hf: Mapping[str, Any]) -> float:
    """``rope_theta``; refuses any RoPE scaling (rope_scaling / rope_parameters)."""
    theta = hf.get("rope_theta", 10000.0)
    for field in ("rope_scaling", "rope_parameters"):
        rope = hf.get(field)
        if rope is None:
            continue
        kind = rope.get("rope_type", rope.get("type")) if isinstance(rope, Mapping) else rope
        if kind != "default":
            raise _config_error(f"{field}: {rope!r} is not supported; rljax implements plain "
                                f"RoPE only (null or rope_type 'default')")
        theta = rope.get("rope_theta", theta)
    if not _is_number(theta) or theta <= 0:
        raise _config_error(f"rope_theta: must be a number > 0, got {theta!r}")
    return float(theta)


def config_from_hf(hf: Mapping[str, Any]) -> DecoderConfig:
    """An HF ``config.json`` dict -> a validated :class:`DecoderConfig` (no arrays, no shapes).

    Refuses what the decoder does not implement, naming the field: an unknown model type,
    RoPE scaling, a sliding window, ``mlp_bias``, a Llama ``attention_bias`` (HF adds an
    ``o_proj`` bias too), an activation other than ``silu``.

    Raises:
      ValueError: one line, ``config.json: <field>: ...``.
    """
    if not isinstance(hf, Mapping):
        raise _config_error(f"must hold a JSON object, got {type(hf).__name__}")
    model_type = _model_type(hf)
    hidden_act = hf.get("hidden_act", "silu")
    if hidden_act != "silu":
        raise _config_error(f"hidden_act: {hidden_act!r} is not supported; rljax's MLP is "
                            f"SwiGLU ('silu')")
    if hf.get("mlp_bias", False) is not False:
        raise _config_error(f"mlp_bias: {hf['mlp_bias']!r} is not supported; rljax's MLP has "
                            f"no biases")
    if hf.get("use_sliding_window", False) is not False:
        raise _config_error(f"use_sliding_window: {hf['use_sliding_window']!r} is not "
                            f"supported; rljax attends to the full causal context")
    layer_types = hf.get("layer_types")
    if layer_types is not None and any(kind != "full_attention" for kind in layer_types):
        raise _config_error(f"layer_types: {sorted(set(layer_types))} is not supported; rljax "
                            f"has full-attention layers only")
    if model_type == "qwen2":
        attention_bias = True  # Qwen2 always has q/k/v biases (and none on o_proj)
    else:
        attention_bias = hf.get("attention_bias", False)
        if attention_bias is not False:
            raise _config_error(f"attention_bias: {attention_bias!r} is not supported for "
                                f"llama (HF then biases o_proj too; rljax does not)")
    required_ints = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads")
    for field in required_ints:
        if field not in hf:
            raise _config_error(f"{field}: missing")
    ints = {field: hf[field] for field in required_ints}
    kv_heads = hf.get("num_key_value_heads")  # absent or null: multi-head attention
    ints["num_key_value_heads"] = hf["num_attention_heads"] if kv_heads is None else kv_heads
    ints["max_position_embeddings"] = hf.get(
        "max_position_embeddings", 2048 if model_type == "llama" else 32768)
    for field, value in ints.items():
        if not _is_int(value) or value < 1:
            raise _config_error(f"{field}: must be an integer >= 1, got {value!r}")
    head_dim = hf.get("head_dim")
    if head_dim is not None and (not _is_int(head_dim) or head_dim < 1):
        raise _config_error(f"head_dim: must be null or an integer >= 1, got {head_dim!r}")
    ints["head_dim"] = head_dim
    floats = {"rms_norm_eps": hf.get("rms_norm_eps", 1e-6),
              "initializer_range": hf.get("initializer_range", 0.02)}
    for field, value in floats.items():
        if not _is_number(value) or value <= 0:
            raise _config_error(f"{field}: must be a number > 0, got {value!r}")
    tie = hf.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise _config_error(f"tie_word_embeddings: must be true or false, got {tie!r}")
    config = DecoderConfig(
        **ints, rope_theta=_rope_theta(hf), rms_norm_eps=float(floats["rms_norm_eps"]),
        initializer_range=float(floats["initializer_range"]),
        tie_word_embeddings=tie, attention_bias=attention_bias, model_type=model_type,
        value_head=False,
    )
    try:
        config.validate()
    except ValueError as error:
        raise _config_error(str(error)) from None
    return config


def _head_dim(config: DecoderConfig) -> int:
    if config.head_dim is not None:
        return config.head_dim
    return config.hidden_size // config.num_attention_heads


def _check_representable(config: DecoderConfig) -> None:
    """Refuse a config HF's Llama / Qwen2 cannot express (before anything is written)."""
    if config.value_head:
        raise ValueError("value_head: a value model has no HF causal-LM layout; save only "
                         "language models (value_head=False)")
    if config.model_type not in ARCHITECTURES:
        raise ValueError(f"model_type: {config.model_type!r} has no HF layout; expected one of "
                         f"{sorted(ARCHITECTURES)}")
    expected_bias = config.model_type == "qwen2"
    if config.attention_bias != expected_bias:
        raise ValueError(f"attention_bias: {config.model_type} in HF has "
                         f"attention_bias={expected_bias} (q/k/v biases only for qwen2), got "
                         f"{config.attention_bias}")


def config_to_hf(config: DecoderConfig, *, dtype: str = "float32") -> dict[str, Any]:
    """A :class:`DecoderConfig` -> the ``config.json`` dict HF writes (no arrays, no shapes).

    Raises:
      ValueError: a value model, or a config HF's Llama / Qwen2 cannot express.
    """
    _check_representable(config)
    hf: dict[str, Any] = {
        "architectures": [ARCHITECTURES[config.model_type]],
        "model_type": config.model_type,
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_key_value_heads,
        "head_dim": _head_dim(config),
        "max_position_embeddings": config.max_position_embeddings,
        "rope_theta": config.rope_theta,
        "rope_scaling": None,
        "rms_norm_eps": config.rms_norm_eps,
        "hidden_act": "silu",
        "initializer_range": config.initializer_range,
        "tie_word_embeddings": config.tie_word_embeddings,
        "torch_dtype": dtype,
    }
    if config.model_type == "llama":
        hf.update(attention_bias=False, mlp_bias=False)
    else:
        hf.update(use_sliding_window=False)
    return hf


# ----------------------------------------------------------------------------- mapping


@dataclass(frozen=True)
class _Entry:
    hf_name: str
    leaf: tuple[str, ...]  # path under params["params"]
    shape: tuple[int, ...]  # the rljax leaf's shape
    transpose: bool

    @property
    def hf_shape(self) -> tuple[int, ...]:
        return self.shape[::-1] if self.transpose else self.shape


def _mapping(config: DecoderConfig) -> list[_Entry]:
    """Every tensor of ``config``'s checkpoint: HF name, rljax leaf, shape, transposed?"""
    width, vocab, ffn = config.hidden_size, config.vocab_size, config.intermediate_size
    head_dim = _head_dim(config)
    q_dim = config.num_attention_heads * head_dim
    kv_dim = config.num_key_value_heads * head_dim
    entries = [_Entry("model.embed_tokens.weight", ("embed_tokens", "embedding"),
                      (vocab, width), False)]
    for i in range(config.num_hidden_layers):
        hf, ours = f"model.layers.{i}", f"layers_{i}"
        entries.append(_Entry(f"{hf}.input_layernorm.weight",
                              (ours, "input_layernorm", "scale"), (width,), False))
        for proj, out in (("q_proj", q_dim), ("k_proj", kv_dim), ("v_proj", kv_dim)):
            entries.append(_Entry(f"{hf}.self_attn.{proj}.weight",
                                  (ours, "self_attn", proj, "kernel"), (width, out), True))
            if config.attention_bias:
                entries.append(_Entry(f"{hf}.self_attn.{proj}.bias",
                                      (ours, "self_attn", proj, "bias"), (out,), False))
        entries.append(_Entry(f"{hf}.self_attn.o_proj.weight",
                              (ours, "self_attn", "o_proj", "kernel"), (q_dim, width), True))
        entries.append(_Entry(f"{hf}.post_attention_layernorm.weight",
                              (ours, "post_attention_layernorm", "scale"), (width,), False))
        for proj, shape in (("gate_proj", (width, ffn)), ("up_proj", (width, ffn)),
                            ("down_proj", (ffn, width))):
            entries.append(_Entry(f"{hf}.mlp.{proj}.weight", (ours, "mlp", proj, "kernel"),
                                  shape, True))
    entries.append(_Entry("model.norm.weight", ("norm", "scale"), (width,), False))
    if not config.tie_word_embeddings:
        entries.append(_Entry("lm_head.weight", ("lm_head", "kernel"), (width, vocab), True))
    return entries


def hf_tensor_shapes(config: DecoderConfig) -> dict[str, tuple[int, ...]]:
    """HF tensor name -> its shape (``[out, in]`` for projections) for ``config``.

    E.g. ``model.embed_tokens.weight: [V, W]``; the module docstring has the full table.
    """
    return {entry.hf_name: entry.hf_shape for entry in _mapping(config)}


def _flat_leaves(tree: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> dict:
    leaves = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            leaves.update(_flat_leaves(value, prefix + (str(key),)))
        else:
            leaves[prefix + (str(key),)] = value
    return leaves


def _inner_params(params: Any) -> Mapping[str, Any]:
    """The tree under ``"params"``; a tree without that key is taken as the inner tree."""
    if not isinstance(params, Mapping):
        raise ValueError(f"params: expected a dict of arrays, got {type(params).__name__}")
    if "params" in params:
        if len(params) != 1:
            raise ValueError(f"params: ambiguous, holds 'params' next to "
                             f"{sorted(k for k in params if k != 'params')}; pass "
                             f"{{'params': ...}} alone")
        params = params["params"]
        if not isinstance(params, Mapping):
            raise ValueError(f"params['params']: expected a dict of arrays, got "
                             f"{type(params).__name__}")
    return params


def params_to_hf(config: DecoderConfig, params: Params, *,
                 dtype: str = "float32") -> dict[str, np.ndarray]:
    """Decoder params (``{"params": tree}`` or the tree) -> HF tensors (numpy, ``dtype``).

    Each projection kernel ``[in, out]`` becomes weight ``[out, in]``; shapes follow
    :func:`hf_tensor_shapes`.

    Raises:
      ValueError: a missing, unexpected or wrongly shaped leaf (named with both shapes).
    """
    _check_representable(config)
    if dtype not in _DTYPES:
        raise ValueError(f"dtype: expected one of {sorted(_DTYPES)}, got {dtype!r}")
    leaves = _flat_leaves(_inner_params(params))
    entries = _mapping(config)
    expected = {entry.leaf for entry in entries}
    extra = sorted("/".join(leaf) for leaf in leaves if leaf not in expected)
    if extra:
        raise ValueError(f"params: unexpected leaf {extra[0]!r} for this config "
                         f"({len(extra)} in all)")
    tensors = {}
    for entry in entries:
        if entry.leaf not in leaves:
            raise ValueError(f"params: missing leaf {'/'.join(entry.leaf)!r} "
                             f"(shape {list(entry.shape)})")
        value = np.asarray(leaves[entry.leaf], np.float32)
        if value.shape != entry.shape:
            raise ValueError(f"params: {'/'.join(entry.leaf)} has shape {list(value.shape)}, "
                             f"expected {list(entry.shape)} from the config")
        if entry.transpose:
            value = value.T
        tensors[entry.hf_name] = np.ascontiguousarray(value.astype(_DTYPES[dtype]))
    return tensors


# ----------------------------------------------------------------------------- loading


def _tensor_files(directory: Path) -> tuple[dict[str, Path], Path]:
    """(tensor name -> the safetensors file holding it, the weights file or index read)."""
    from safetensors import safe_open

    single = directory / WEIGHTS_FILE
    if single.is_file():
        files = [single]
        weight_map = None
        source = single
    else:
        index_path = source = directory / WEIGHTS_INDEX_FILE
        if not index_path.is_file():
            raise FileNotFoundError(f"{single}: missing (and no {WEIGHTS_INDEX_FILE})")
        index = _read_json(index_path)
        weight_map = index.get("weight_map") if isinstance(index, Mapping) else None
        if not isinstance(weight_map, Mapping) or not weight_map:
            raise ValueError(f"{index_path}: expected a non-empty 'weight_map' object")
        files = []
        for shard in dict.fromkeys(weight_map.values()):
            if not isinstance(shard, str) or Path(shard).name != shard:
                raise ValueError(f"{index_path}: shard {shard!r} is not a file name")
            path = directory / shard
            if not path.is_file():
                raise FileNotFoundError(f"{path}: missing (named in {WEIGHTS_INDEX_FILE})")
            files.append(path)
    located: dict[str, Path] = {}
    for path in files:
        try:
            with safe_open(path, framework="np") as handle:
                names = list(handle.keys())
        except Exception as error:  # safetensors raises its own error types
            raise ValueError(f"{path}: not a readable safetensors file ({error})") from None
        for name in names:
            if name in located:
                raise ValueError(f"{path}: tensor {name} is also in {located[name].name}")
            located[name] = path
    if weight_map is not None:
        for name, shard in weight_map.items():
            if name not in located:
                raise ValueError(f"{directory / shard}: missing tensor {name} (named in "
                                 f"{WEIGHTS_INDEX_FILE})")
            if located[name].name != shard:
                raise ValueError(f"{WEIGHTS_INDEX_FILE}: tensor {name} is in "
                                 f"{located[name].name}, not {shard}")
        for name, path in located.items():
            if name not in weight_map:
                raise ValueError(f"{path}: tensor {name} is not in {WEIGHTS_INDEX_FILE}")
    return located, source


def load_hf_checkpoint(path: str | os.PathLike) -> tuple[Decoder, Params]:
    """Read an HF Llama / Qwen2 checkpoint directory -> ``(Decoder(config), params)``.

    ``params`` is ``{"params": tree}`` of float32 arrays with the decoder's shapes, e.g.
    ``embed_tokens/embedding [V, W]`` and ``layers_{i}/self_attn/q_proj/kernel [W, H Dh]``
    (the HF weight ``[H Dh, W]`` transposed); the module docstring has the whole table.
    Reads ``config.json`` and ``model.safetensors`` (or ``model.safetensors.index.json``
    and its shards), tensors in bfloat16, float16 or float32. Nothing is downloaded.

    Raises:
      FileNotFoundError: the directory, config.json, the weights or a shard is missing
        (one line naming the file).
      ValueError: one line naming the field or tensor: an unsupported or bad config field,
        a tensor whose shape does not match the config (both shapes), a missing or an
        unexpected tensor, an unsupported dtype.
    """
    from safetensors import safe_open

    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no such checkpoint directory")
    config = config_from_hf(_read_json(directory / CONFIG_FILE))
    located, source = _tensor_files(directory)
    entries = _mapping(config)
    expected = {entry.hf_name for entry in entries}
    ignored = {name for name in located if name.endswith(_IGNORED_SUFFIXES)}
    checks = [(entry.hf_name, entry.hf_shape) for entry in entries]
    if config.tie_word_embeddings and "lm_head.weight" in located:
        ignored.add("lm_head.weight")  # HF ties it to the embedding; only its shape is checked
        checks.append(("lm_head.weight", (config.vocab_size, config.hidden_size)))
    extra = sorted(set(located) - expected - ignored)
    if extra:
        raise ValueError(f"{located[extra[0]]}: unexpected tensor {extra[0]} for this "
                         f"config.json ({len(extra)} unexpected in all)")
    for entry in entries:
        if entry.hf_name not in located:
            raise ValueError(f"{source}: missing tensor {entry.hf_name} "
                             f"(shape {list(entry.hf_shape)})")
    with contextlib.ExitStack() as stack:
        handles = {file: stack.enter_context(safe_open(file, framework="np"))
                   for file in dict.fromkeys(located.values())}
        # Every shape and dtype first (headers only), then the data.
        for name, shape in checks:
            tensor_slice = handles[located[name]].get_slice(name)
            found = tuple(tensor_slice.get_shape())
            if found != tuple(shape):
                raise ValueError(f"{located[name]}: tensor {name} has shape {list(found)}, "
                                 f"expected {list(shape)} from config.json")
            stored = tensor_slice.get_dtype()
            if stored not in _SAFETENSORS_DTYPES:
                raise ValueError(f"{located[name]}: tensor {name} has dtype {stored}, expected "
                                 f"one of {sorted(_SAFETENSORS_DTYPES)}")
        tree: dict[str, Any] = {}
        for entry in entries:
            value = np.asarray(handles[located[entry.hf_name]].get_tensor(entry.hf_name),
                               np.float32)
            node = tree
            for key in entry.leaf[:-1]:
                node = node.setdefault(key, {})
            node[entry.leaf[-1]] = jnp.asarray(value.T if entry.transpose else value)
    return Decoder(config), {"params": tree}


# ----------------------------------------------------------------------------- saving


def _check_destination(directory: Path, overwrite: bool) -> None:
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{directory}: exists and is not a directory")
    if directory.is_dir() and any(directory.iterdir()) and not overwrite:
        raise ValueError(f"{directory}: exists and is not empty; pass overwrite=True to "
                         f"replace it")


def _write_atomically(directory: Path, files: Mapping[str, Any], overwrite: bool) -> None:
    """Write ``files`` (name -> bytes, or a callable writing to a path) into a temp dir beside
    ``directory``, then rename it into place (the old directory is removed only after)."""
    _check_destination(directory, overwrite)
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    old = None
    try:
        for name, content in files.items():
            target = staging / name
            if callable(content):
                content(target)
            else:
                target.write_bytes(content)
        _check_destination(directory, overwrite)  # again: it may have appeared meanwhile
        if directory.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old-", dir=directory.parent))
            os.replace(directory, old / directory.name)
        os.replace(staging, directory)
    except BaseException:
        if old is not None and not directory.exists():
            os.replace(old / directory.name, directory)
        shutil.rmtree(staging, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _json_bytes(value: Any) -> bytes:
    return (json.dumps(value, indent=2) + "\n").encode("utf-8")


def save_hf_checkpoint(path: str | os.PathLike, model: Decoder | DecoderConfig, params: Params,
                       *, dtype: str = "float32", overwrite: bool = False,
                       tokenizer: CharTokenizer | HFTokenizer | None = None) -> Path:
    """Write ``params`` as an HF checkpoint directory ``path`` (config.json + model.safetensors).

    ``params`` is ``{"params": tree}`` or the tree itself with the decoder's shapes (e.g.
    ``embed_tokens/embedding [V, W]``); kernels ``[in, out]`` are written as HF weights
    ``[out, in]`` in ``dtype`` (``float32``, ``bfloat16`` or ``float16``; ``torch_dtype``
    in config.json). With ``tokenizer`` (a :class:`~rljax.tokenizer.CharTokenizer` or an
    :class:`HFTokenizer`) the directory also gets tokenizer.json and tokenizer_config.json,
    so it is complete for ``transformers``' ``AutoModelForCausalLM`` / ``AutoTokenizer``.

    Atomic: everything is checked and converted first, written into a temp directory beside
    ``path`` and renamed into place, so a failure leaves no partial checkpoint.

    Returns:
      The directory written.

    Raises:
      ValueError: one line: ``path`` exists and is not empty (without ``overwrite``), a value
        model or a config HF cannot express, a bad dtype, a missing / unexpected / wrongly
        shaped leaf, or a tokenizer larger than ``vocab_size``.
    """
    from safetensors.numpy import save_file

    config = model.config if isinstance(model, Decoder) else model
    if not isinstance(config, DecoderConfig):
        raise ValueError(f"model: expected a Decoder or DecoderConfig, got "
                         f"{type(model).__name__}")
    directory = Path(path).expanduser()
    _check_destination(directory, overwrite)
    hf_config = config_to_hf(config, dtype=dtype)
    tensors = params_to_hf(config, params, dtype=dtype)
    files: dict[str, Any] = {
        CONFIG_FILE: _json_bytes(hf_config),
        WEIGHTS_FILE: lambda target: save_file(tensors, target, metadata={"format": "pt"}),
    }
    if tokenizer is not None:
        check_tokenizer_matches(tokenizer, config)
        files.update(_tokenizer_files(tokenizer))
        hf_tokenizer = (char_tokenizer_to_hf(tokenizer) if isinstance(tokenizer, CharTokenizer)
                        else tokenizer)
        hf_config.update(bos_token_id=hf_tokenizer.bos_id, eos_token_id=hf_tokenizer.eos_id,
                         pad_token_id=hf_tokenizer.pad_id)
        files[CONFIG_FILE] = _json_bytes(hf_config)
    _write_atomically(directory, files, overwrite)
    return directory


# ----------------------------------------------------------------------------- tokenizers


def check_tokenizer_matches(tokenizer: CharTokenizer | HFTokenizer,
                            config: Decoder | DecoderConfig) -> None:
    """Refuse a tokenizer whose ids do not all fit the model's embedding ``[V, W]``.

    A tokenizer smaller than ``vocab_size`` is fine (HF pads embeddings, e.g. Qwen2.5).

    Raises:
      ValueError: one line naming both sizes.
    """
    config = config.config if isinstance(config, Decoder) else config
    if tokenizer.vocab_size > config.vocab_size:
        raise ValueError(f"tokenizer: {tokenizer.vocab_size} tokens, more than the model's "
                         f"vocab_size {config.vocab_size}")


_CHAR_SPECIALS = ("<|pad|>", "<|bos|>", "<|eos|>")  # ids PAD_ID, BOS_ID, EOS_ID


def char_tokenizer_to_hf(tokenizer: CharTokenizer) -> HFTokenizer:
    """A :class:`~rljax.tokenizer.CharTokenizer` as a ``tokenizers`` WordLevel tokenizer.

    One token per character with the same ids (``<|pad|> <|bos|> <|eos|>`` are 0, 1, 2,
    then the alphabet), so ``encode`` gives the same int32 ids ``[L]``; decoding joins the
    characters without spaces.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {token: i for i, token in enumerate(_CHAR_SPECIALS)}
    vocab.update({char: NUM_SPECIAL + i for i, char in enumerate(tokenizer.alphabet)})
    hf = Tokenizer(models.WordLevel(vocab))
    hf.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    hf.decoder = decoders.Fuse()
    hf.add_special_tokens([AddedToken(token, special=True, normalized=False)
                           for token in _CHAR_SPECIALS])
    return HFTokenizer(hf, pad_id=tokenizer.pad_id, bos_id=tokenizer.bos_id,
                       eos_id=tokenizer.eos_id)


def _tokenizer_files(tokenizer: CharTokenizer | HFTokenizer) -> dict[str, bytes]:
    if isinstance(tokenizer, CharTokenizer):
        tokenizer = char_tokenizer_to_hf(tokenizer)
    if not isinstance(tokenizer, HFTokenizer):
        raise ValueError(f"tokenizer: expected a CharTokenizer or HFTokenizer, got "
                         f"{type(tokenizer).__name__}")

    def token(token_id):
        return None if token_id is None else tokenizer.tokenizer.id_to_token(token_id)

    tokenizer_config = {"tokenizer_class": "PreTrainedTokenizerFast",
                        "bos_token": token(tokenizer.bos_id),
                        "eos_token": token(tokenizer.eos_id),
                        "pad_token": token(tokenizer.pad_id)}
    if tokenizer.chat_template is not None:
        tokenizer_config["chat_template"] = tokenizer.chat_template
    return {TOKENIZER_FILE: tokenizer.tokenizer.to_str().encode("utf-8"),
            TOKENIZER_CONFIG_FILE: _json_bytes(tokenizer_config)}


def save_hf_tokenizer(path: str | os.PathLike, tokenizer: CharTokenizer | HFTokenizer, *,
                      overwrite: bool = False) -> Path:
    """Write tokenizer.json + tokenizer_config.json into directory ``path`` (e.g. beside a
    checkpoint); a :class:`~rljax.tokenizer.CharTokenizer` is exported as WordLevel.

    No arrays (ids are ``[L]`` int32 when encoded). Returns the directory.

    Raises:
      ValueError: tokenizer.json already there (without ``overwrite``).
    """
    directory = Path(path).expanduser()
    files = _tokenizer_files(tokenizer)
    if not overwrite:
        for name in files:
            if (directory / name).exists():
                raise ValueError(f"{directory / name}: exists; pass overwrite=True to "
                                 f"replace it")
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        staging = directory / f".{name}.tmp"
        staging.write_bytes(content)
        os.replace(staging, directory / name)
    return directory


__all__ = [
    "load_hf_checkpoint",
    "save_hf_checkpoint",
    "load_hf_tokenizer",
    "save_hf_tokenizer",
    "check_tokenizer_matches",
    "char_tokenizer_to_hf",
    "HFTokenizer",
    "config_from_hf",
    "config_to_hf",
    "params_to_hf",
    "hf_tensor_shapes",
    "ARCHITECTURES",
    "CONFIG_FILE",
    "WEIGHTS_FILE",
    "WEIGHTS_INDEX_FILE",
    "TOKENIZER_FILE",
    "TOKENIZER_CONFIG_FILE",
]
