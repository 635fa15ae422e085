"""A tiny decoder-only transformer language model (flax.linen) with a KV cache.

Architecture (GPT-2 style, Radford et al., 2019, at toy size; float32 throughout)::

    x_0 = E_tok[tokens] + E_pos[positions]                           [B, T, W]
    x   = x + Attn(LN(x))     (pre-LayerNorm, num_heads heads)      } num_layers times
    x   = x + MLP(LN(x))      (Dense(mlp_ratio W) -> GELU -> Dense(W))}
    out = Dense(LN(x))        untied head: [B, T, V] logits, or a scalar value [B, T]
                              when ``config.value_head`` (a value model)

Weights are ``N(0, 0.02^2)``; the two residual projections of each block are
``N(0, (0.02 / sqrt(2 num_layers))^2)``; biases zero, LayerNorm scale one. Only normal
draws, no decomposition (a vmapped orthogonal init can hang a 2-core CPU, DESIGN.md), so
``jax.vmap(lm.init)(keys)`` is safe. Position embeddings are learned, one per slot of
``context_length``.

Padding, positions, the prompt / completion layout, the KV cache (:class:`KVCache`, here
``[L, B, C, H, Dh]`` with ``Dh = W / H`` and ``C = context_length``) and sampling vs
scoring are shared with :class:`~rljax.policies.decoder.Decoder` and described in
:mod:`rljax.policies.lm_common`, which holds the model-agnostic methods (:class:`CausalLM`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax.numpy as jnp
from flax import linen as nn

from rljax.policies.lm_common import (
    CachedTransformer,
    CausalLM,
    Completion,
    KVCache,
    attention,
    is_int,
    num_parameters,
)
from rljax.tokenizer import NUM_SPECIAL, CharTokenizer
from rljax.types import Array

INIT_STDDEV = 0.02
LAYER_NORM_EPSILON = 1e-5


@dataclass(frozen=True)
class LMConfig:
    """Sizes of a :class:`TinyLM`.

    Attributes:
      vocab_size: V, ``CharTokenizer().vocab_size`` (19) by default.
      context_length: C, the most prompt + completion tokens (learned positions).
      num_layers: L transformer blocks.
      width: W, the residual width.
      num_heads: H attention heads (W must be divisible by H).
      mlp_ratio: hidden width of the MLP as a multiple of W.
      value_head: True: a scalar head (a value model) instead of the vocabulary head.
    """

    vocab_size: int = CharTokenizer().vocab_size
    context_length: int = 32
    num_layers: int = 2
    width: int = 64
    num_heads: int = 4
    mlp_ratio: int = 4
    value_head: bool = False

    def validate(self) -> None:
        """Raise a one-line ``ValueError`` naming the first bad field."""
        minimums = {"vocab_size": NUM_SPECIAL, "context_length": 1, "num_layers": 1,
                    "width": 1, "num_heads": 1, "mlp_ratio": 1}
        for name, minimum in minimums.items():
            value = getattr(self, name)
            if not is_int(value) or value < minimum:
                raise ValueError(f"{name}: must be an integer >= {minimum}, got {value!r}")
        if self.width % self.num_heads:
            raise ValueError(f"width: must be divisible by num_heads={self.num_heads}, got "
                             f"{self.width}")
        if not isinstance(self.value_head, bool):
            raise ValueError(f"value_head: must be a bool, got {self.value_head!r}")

    @property
    def head_dim(self) -> int:
        """Dh = W / H."""
        return self.width // self.num_heads


class _Block(nn.Module):
    """Pre-LayerNorm transformer block, split at the attention so a cache can be used."""

    config: LMConfig

    def setup(self):
        c = self.config
        normal = nn.initializers.normal(INIT_STDDEV)
        residual = nn.initializers.normal(INIT_STDDEV / math.sqrt(2 * c.num_layers))
        self.attention_norm = nn.LayerNorm(epsilon=LAYER_NORM_EPSILON)
        self.qkv = nn.Dense(3 * c.width, kernel_init=normal)
        self.attention_out = nn.Dense(c.width, kernel_init=residual)
        self.mlp_norm = nn.LayerNorm(epsilon=LAYER_NORM_EPSILON)
        self.mlp_in = nn.Dense(c.mlp_ratio * c.width, kernel_init=normal)
        self.mlp_out = nn.Dense(c.width, kernel_init=residual)

    def project(self, x: Array, positions: Array) -> tuple[Array, Array, Array]:
        """``x [B, T, W] -> q, k, v [B, T, H, Dh]`` (``positions`` unused: learned
        position embeddings are added at the input)."""
        b, t, _ = x.shape
        qkv = self.qkv(self.attention_norm(x))
        qkv = qkv.reshape(b, t, 3, self.config.num_heads, self.config.head_dim)
        return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]

    def finish(self, x: Array, q: Array, keys: Array, values: Array, attend: Array) -> Array:
        """The residual updates of the block given its queries and the keys to read."""
        x = x + self.attention_out(attention(q, keys, values, attend))
        return x + self.mlp_out(nn.gelu(self.mlp_in(self.mlp_norm(x))))


class _Transformer(CachedTransformer):
    config: LMConfig

    def setup(self):
        c = self.config
        normal = nn.initializers.normal(INIT_STDDEV)
        self.token_embed = nn.Embed(c.vocab_size, c.width, embedding_init=normal)
        self.position_embed = self.param("position_embed", normal,
                                         (c.context_length, c.width))
        self.blocks = [_Block(c) for _ in range(c.num_layers)]
        self.final_norm = nn.LayerNorm(epsilon=LAYER_NORM_EPSILON)
        self.head = nn.Dense(1 if c.value_head else c.vocab_size, kernel_init=normal)

    def embed(self, tokens: Array, positions: Array) -> Array:
        """``E_tok[tokens] + E_pos[positions]``: ``[B, T] -> [B, T, W]``."""
        return self.token_embed(tokens) + jnp.take(self.position_embed, positions, axis=0)

    def stack(self) -> list[_Block]:
        """The blocks, in order."""
        return self.blocks

    def output(self, x: Array) -> Array:
        """``Dense(LN(x))``: ``[B, T, W] -> [B, T, V or 1]``."""
        return self.head(self.final_norm(x))


@dataclass(frozen=True)
class TinyLM(CausalLM):
    """A tiny causal transformer LM as pure functions of a parameter pytree.

    Hashable (a frozen dataclass), so it can be closed over by jitted functions, and every
    method is pure: ``jax.vmap`` over a seed axis of ``params`` and keys works. The methods
    (``init``, ``logits``, ``apply``, ``values``, ``completion_log_probs``,
    ``completion_values``, ``prefill``, ``decode_step``, ``generate``) are
    :class:`~rljax.policies.lm_common.CausalLM`'s.

    Shapes: tokens are int ``[B, T]`` with a mask ``[B, T]`` (``T <= context_length``);
    :meth:`logits` gives float32 ``[B, T, V]`` (``V = vocab_size``), :meth:`values`
    float32 ``[B, T]``; :meth:`generate` samples a :class:`Completion` of ``[B, N]`` arrays.

    Attributes:
      config: the sizes (:class:`LMConfig`), validated on construction.
    """

    config: LMConfig = LMConfig()

    def __post_init__(self):
        if not isinstance(self.config, LMConfig):
            raise ValueError(f"config: must be an LMConfig, got {type(self.config).__name__}")
        self.config.validate()

    @property
    def module(self) -> _Transformer:
        """The flax module."""
        return _Transformer(self.config)


__all__ = ["LMConfig", "TinyLM", "Completion", "KVCache", "num_parameters"]
