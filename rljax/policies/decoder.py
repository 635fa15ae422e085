"""A Llama / Qwen2-family decoder-only language model (flax.linen) with a KV cache.

The architecture of Hugging Face's ``LlamaForCausalLM`` and ``Qwen2ForCausalLM``, with
their config names (:class:`DecoderConfig`) and a parameter tree that maps one to one onto
their checkpoints. For ``L`` layers, width ``W``, ``H`` query heads and ``KV`` key/value
heads of width ``Dh``, MLP width ``F`` and vocabulary ``V``::

    x_0 = E[tokens]                                                     [B, T, W]
    for each layer:
      h   = RMSNorm(x)
      q_h = rope(h Wq_h + bq_h, pos),  k_j = rope(h Wk_j + bk_j, pos),  v_j = h Wv_j + bv_j
      x   = x + concat_h( softmax(q_h k_{j(h)}^T / sqrt(Dh) + mask) v_{j(h)} ) Wo
            with j(h) = h // (H / KV)                       (grouped-query attention)
      x   = x + W_down( silu(W_gate RMSNorm(x)) * W_up RMSNorm(x) )        (SwiGLU)
    out = RMSNorm(x) W_head    (or RMSNorm(x) E^T when tie_word_embeddings: [B, T, V];
                                [B, T, 1], a value, when value_head)

    RMSNorm(x) = x / sqrt(mean(x^2) + eps) * scale          (over W, computed in float32)
    rope(x, p) = x cos(p theta) + rotate_half(x) sin(p theta),
                 theta_i = rope_theta^(-2i / Dh) for i < Dh/2, repeated twice along Dh,
                 rotate_half([x1, x2]) = [-x2, x1]          (halves, not interleaved pairs)

The biases ``b`` exist only when ``attention_bias`` (Qwen2: q, k and v, never o).

Sources: Touvron et al. 2023, "LLaMA: Open and Efficient Foundation Language Models"
(pre-normalisation, SwiGLU, rotary embeddings); Su et al. 2021, "RoFormer: Enhanced
Transformer with Rotary Position Embedding" (HF's non-interleaved ``rotate_half`` form);
Ainslie et al. 2023, "GQA: Training Generalized Multi-Query Transformer Models from
Multi-Head Checkpoints"; Shazeer 2020, "GLU Variants Improve Transformer" (SwiGLU);
Zhang & Sennrich 2019, "Root Mean Square Layer Normalization"; Yang et al. 2024, "Qwen2
Technical Report" (biases on q/k/v, tied embeddings in the small models).

Parameter tree (HF's ``weight`` is ``kernel.T`` for every ``*_proj`` and ``lm_head``)::

    {"params": {
      "embed_tokens": {"embedding": [V, W]},
      "layers_0": {                                         # ... layers_{L-1}
        "input_layernorm": {"scale": [W]},
        "self_attn": {"q_proj": {"kernel": [W, H Dh], "bias": [H Dh]},    # bias: only
                      "k_proj": {"kernel": [W, KV Dh], "bias": [KV Dh]},  # when
                      "v_proj": {"kernel": [W, KV Dh], "bias": [KV Dh]},  # attention_bias
                      "o_proj": {"kernel": [H Dh, W]}},
        "post_attention_layernorm": {"scale": [W]},
        "mlp": {"gate_proj": {"kernel": [W, F]}, "up_proj": {"kernel": [W, F]},
                "down_proj": {"kernel": [F, W]}}},
      "norm": {"scale": [W]},
      "lm_head": {"kernel": [W, V]}}}    # absent when tied; [W, 1] when value_head

Initialisation as HF's ``_init_weights``: weights and embeddings ``N(0,
initializer_range^2)``, biases zero, norm scales one. Only normal draws (a vmapped
orthogonal init can hang a 2-core CPU, DESIGN.md), so ``jax.vmap(decoder.init)(keys)`` is
safe.

Padding, positions (``clip(cumsum(mask) - 1, 0)``, fed to the rotary embedding), the
prompt / completion layout, sampling vs scoring and the KV cache are
:class:`~rljax.policies.lm_common.CausalLM`'s, shared with
:class:`~rljax.policies.lm.TinyLM`; see :mod:`rljax.policies.lm_common`. The cache holds
the rotated keys and the values of the ``KV`` grouped heads once: ``[L, B, C, KV, Dh]``
with ``C = max_position_embeddings``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from flax import linen as nn

from rljax.policies.lm_common import CachedTransformer, CausalLM, attention, is_int
from rljax.tokenizer import NUM_SPECIAL, CharTokenizer
from rljax.types import Array

MODEL_TYPES = ("llama", "qwen2")


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@dataclass(frozen=True)
class DecoderConfig:
    """Sizes of a :class:`Decoder`, under Hugging Face's ``config.json`` names.

    Attributes:
      vocab_size: V, ``CharTokenizer().vocab_size`` (19) by default.
      hidden_size: W, the residual width.
      intermediate_size: F, the SwiGLU MLP's hidden width.
      num_hidden_layers: L decoder layers.
      num_attention_heads: H query heads.
      num_key_value_heads: KV key/value heads (divides H; KV < H is grouped-query
        attention, KV = 1 multi-query).
      head_dim: Dh, even (rotary embeddings rotate halves); None gives ``W // H``, resolved
        on construction as HF does.
      max_position_embeddings: C, also rljax's context length: the most prompt +
        completion tokens and the KV cache's capacity.
      rope_theta: the rotary base.
      rms_norm_eps: the RMSNorm epsilon.
      tie_word_embeddings: True: the vocabulary head is ``E^T`` (no ``lm_head``).
      attention_bias: biases on the q, k and v projections (none on o): True for qwen2,
        False for llama (HF's Llama with ``attention_bias`` would also bias o, which this
        tree does not hold, so it is refused).
      model_type: ``"llama"`` or ``"qwen2"``.
      initializer_range: the standard deviation of the normal initialiser.
      value_head: rljax's extension: a scalar head ``lm_head: [W, 1]`` (a value model, e.g.
        a PPO critic) instead of the vocabulary head; never tied.
    """

    vocab_size: int = CharTokenizer().vocab_size
    hidden_size: int = 64
    intermediate_size: int = 176
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int | None = None
    max_position_embeddings: int = 32
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    model_type: str = "llama"
    initializer_range: float = 0.02
    value_head: bool = False

    def __post_init__(self):
        if (self.head_dim is None and is_int(self.hidden_size)
                and is_int(self.num_attention_heads) and self.num_attention_heads > 0):
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)

    def validate(self) -> None:
        """Raise a one-line ``ValueError`` naming the first bad field and what is allowed."""
        minimums = {"vocab_size": NUM_SPECIAL, "hidden_size": 1, "intermediate_size": 1,
                    "num_hidden_layers": 1, "num_attention_heads": 1,
                    "num_key_value_heads": 1, "head_dim": 2, "max_position_embeddings": 1}
        for name, minimum in minimums.items():
            value = getattr(self, name)
            if not is_int(value) or value < minimum:
                raise ValueError(f"{name}: must be an integer >= {minimum}, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_key_value_heads: must divide num_attention_heads="
                             f"{self.num_attention_heads}, got {self.num_key_value_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim: must be even (rotary embeddings rotate halves), got "
                             f"{self.head_dim}")
        for name in ("rope_theta", "rms_norm_eps", "initializer_range"):
            value = getattr(self, name)
            if not _is_number(value) or value <= 0:
                raise ValueError(f"{name}: must be a finite number > 0, got {value!r}")
        for name in ("tie_word_embeddings", "attention_bias", "value_head"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: must be a bool, got {getattr(self, name)!r}")
        if self.model_type not in MODEL_TYPES:
            raise ValueError(f"model_type: must be one of {', '.join(MODEL_TYPES)}, got "
                             f"{self.model_type!r}")
        if self.attention_bias != (self.model_type == "qwen2"):
            raise ValueError(f"attention_bias: must be {self.model_type == 'qwen2'} for "
                             f"model_type={self.model_type!r} (qwen2 biases q/k/v; llama has "
                             f"no biases here), got {self.attention_bias}")


def rotate_half(x: Array) -> Array:
    """``[x1, x2] -> [-x2, x1]`` on the halves of the last axis (HF's convention).

    Args:
      x: ``[..., Dh]``, ``Dh`` even.

    Returns:
      ``[..., Dh]``.
    """
    half = x.shape[-1] // 2
    return jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def rotary_embedding(x: Array, positions: Array, theta: float) -> Array:
    """Rotate each head's features by its position (RoPE, Su et al. 2021; HF's layout).

    ``x cos(p f) + rotate_half(x) sin(p f)`` with ``f = [f_0 .. f_{Dh/2-1}]`` twice and
    ``f_i = theta^(-2i / Dh)``, computed in float32.

    Args:
      x: ``[B, T, heads, Dh]``.
      positions: int ``[B, T]`` position ids.
      theta: the rotary base (``rope_theta``).

    Returns:
      ``[B, T, heads, Dh]``, the dtype of ``x``.
    """
    dh = x.shape[-1]
    inv_freq = 1.0 / (theta ** (jnp.arange(0, dh, 2, dtype=jnp.float32) / dh))
    freqs = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, Dh/2]
    angles = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]  # [B, T, 1, Dh]
    rotated = x * jnp.cos(angles) + rotate_half(x) * jnp.sin(angles)
    return rotated.astype(x.dtype)


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x^2) + eps) * scale`` over the last axis (Zhang & Sennrich 2019),
    in float32 and cast back before the scale, as HF's ``LlamaRMSNorm``.

    Attributes:
      eps: the epsilon inside the square root.
    """

    eps: float

    @nn.compact
    def __call__(self, x: Array) -> Array:
        """``[..., W] -> [..., W]``; the parameter ``scale [W]`` starts at one."""
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],))
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return scale * normed.astype(x.dtype)


class _SelfAttention(nn.Module):
    """Grouped-query attention with rotary embeddings, split at the cache."""

    config: DecoderConfig

    def setup(self):
        c = self.config
        normal = nn.initializers.normal(c.initializer_range)
        heads, kv_heads, dh = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = nn.Dense(heads * dh, use_bias=c.attention_bias, kernel_init=normal)
        self.k_proj = nn.Dense(kv_heads * dh, use_bias=c.attention_bias, kernel_init=normal)
        self.v_proj = nn.Dense(kv_heads * dh, use_bias=c.attention_bias, kernel_init=normal)
        self.o_proj = nn.Dense(c.hidden_size, use_bias=False, kernel_init=normal)

    def project(self, h: Array, positions: Array) -> tuple[Array, Array, Array]:
        """``h [B, T, W]`` -> rotated ``q [B, T, H, Dh]``, rotated ``k`` and ``v``
        ``[B, T, KV, Dh]``."""
        c = self.config
        b, t, _ = h.shape
        q = self.q_proj(h).reshape(b, t, c.num_attention_heads, c.head_dim)
        k = self.k_proj(h).reshape(b, t, c.num_key_value_heads, c.head_dim)
        v = self.v_proj(h).reshape(b, t, c.num_key_value_heads, c.head_dim)
        return (rotary_embedding(q, positions, c.rope_theta),
                rotary_embedding(k, positions, c.rope_theta), v)

    def __call__(self, q: Array, keys: Array, values: Array, attend: Array) -> Array:
        """``q [B, T, H, Dh]`` reads ``keys, values [B, S, KV, Dh]`` (query head ``h``
        reads kv head ``h // (H / KV)``): ``[B, T, W]``."""
        group = self.config.num_attention_heads // self.config.num_key_value_heads
        keys = jnp.repeat(keys, group, axis=2)
        values = jnp.repeat(values, group, axis=2)
        return self.o_proj(attention(q, keys, values, attend))


class _MLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))`` (Shazeer 2020)."""

    config: DecoderConfig

    def setup(self):
        c = self.config
        normal = nn.initializers.normal(c.initializer_range)
        self.gate_proj = nn.Dense(c.intermediate_size, use_bias=False, kernel_init=normal)
        self.up_proj = nn.Dense(c.intermediate_size, use_bias=False, kernel_init=normal)
        self.down_proj = nn.Dense(c.hidden_size, use_bias=False, kernel_init=normal)

    def __call__(self, x: Array) -> Array:
        """``[B, T, W] -> [B, T, W]``."""
        return self.down_proj(nn.silu(self.gate_proj(x)) * self.up_proj(x))


class _DecoderLayer(nn.Module):
    """Pre-RMSNorm decoder layer, split at the attention so a cache can be used."""

    config: DecoderConfig

    def setup(self):
        c = self.config
        self.input_layernorm = RMSNorm(c.rms_norm_eps)
        self.self_attn = _SelfAttention(c)
        self.post_attention_layernorm = RMSNorm(c.rms_norm_eps)
        self.mlp = _MLP(c)

    def project(self, x: Array, positions: Array) -> tuple[Array, Array, Array]:
        """``x [B, T, W]`` -> ``q [B, T, H, Dh]``, ``k, v [B, T, KV, Dh]``."""
        return self.self_attn.project(self.input_layernorm(x), positions)

    def finish(self, x: Array, q: Array, keys: Array, values: Array, attend: Array) -> Array:
        """The residual updates of the layer given its queries and the keys to read."""
        x = x + self.self_attn(q, keys, values, attend)
        return x + self.mlp(self.post_attention_layernorm(x))


class _DecoderModel(CachedTransformer):
    config: DecoderConfig

    def setup(self):
        c = self.config
        normal = nn.initializers.normal(c.initializer_range)
        self.embed_tokens = nn.Embed(c.vocab_size, c.hidden_size, embedding_init=normal)
        self.layers = [_DecoderLayer(c) for _ in range(c.num_hidden_layers)]
        self.norm = RMSNorm(c.rms_norm_eps)
        if c.value_head or not c.tie_word_embeddings:
            self.lm_head = nn.Dense(1 if c.value_head else c.vocab_size, use_bias=False,
                                    kernel_init=normal)

    def embed(self, tokens: Array, positions: Array) -> Array:
        """``E[tokens]``: ``[B, T] -> [B, T, W]`` (positions enter through RoPE)."""
        return self.embed_tokens(tokens)

    def stack(self) -> list[_DecoderLayer]:
        """The layers, in order."""
        return self.layers

    def output(self, x: Array) -> Array:
        """``RMSNorm(x) W_head`` or, tied, ``RMSNorm(x) E^T``: ``[B, T, V or 1]``."""
        h = self.norm(x)
        if self.config.value_head or not self.config.tie_word_embeddings:
            return self.lm_head(h)
        return self.embed_tokens.attend(h)


@dataclass(frozen=True)
class Decoder(CausalLM):
    """A Llama / Qwen2-family causal LM as pure functions of a parameter pytree.

    The same methods and conventions as :class:`~rljax.policies.lm.TinyLM` (both are
    :class:`~rljax.policies.lm_common.CausalLM`), so a trainer can take either:
    ``init(key) -> params``; ``apply(params, tokens [B, T]) -> logits [B, T, V]`` (all
    tokens real, positions ``0 .. T - 1``); ``logits(params, tokens, mask) -> [B, T, V]``;
    ``values(params, tokens, mask) -> [B, T]`` (``value_head``);
    ``completion_log_probs`` / ``completion_values(params, prompt [B, P], prompt_mask,
    completion [B, N], completion_mask) -> [B, N]``; ``prefill(params, prompt,
    prompt_mask) -> (logits [B, V], KVCache)``; ``decode_step(params, token [B], cache)
    -> (logits [B, V], cache)``; ``generate(params, prompt, prompt_mask, key, *,
    max_new_tokens, temperature, top_k, use_cache) -> Completion`` of ``[B, N]`` arrays.
    Prompts are left-padded, completions right-padded; ``P + N <= max_position_embeddings``.
    Its :class:`~rljax.policies.lm_common.KVCache` holds ``[L, B, C, KV, Dh]`` keys and
    values (each grouped head once).

    Hashable (a frozen dataclass), so jitted functions can close over it; every method is
    pure, so ``jax.vmap`` over a seed axis of ``params`` and keys works.

    Attributes:
      config: the sizes (:class:`DecoderConfig`), validated on construction.
    """

    config: DecoderConfig = DecoderConfig()
    context_field = "max_position_embeddings"

    def __post_init__(self):
        if not isinstance(self.config, DecoderConfig):
            raise ValueError(f"config: must be a DecoderConfig, got "
                             f"{type(self.config).__name__}")
        self.config.validate()

    @property
    def module(self) -> _DecoderModel:
        """The flax module."""
        return _DecoderModel(self.config)


__all__ = ["DecoderConfig", "Decoder", "RMSNorm", "rotary_embedding", "rotate_half"]
