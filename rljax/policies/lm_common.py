"""The model-agnostic half of rljax's causal language-model policies.

:class:`~rljax.policies.lm.TinyLM` (GPT-2 style) and
:class:`~rljax.policies.decoder.Decoder` (Llama / Qwen2 family) differ only in their flax
module; everything a trainer calls — checks, scoring, the KV cache bookkeeping, sampling
and the ``generate`` loop — lives here, in :class:`CausalLM`, so the two models honour the
same contract and a trainer can take either.

Padding and positions. ``mask`` is 1 on real tokens. A pad token is never attended to as
a key (it still attends to itself, so no attention row is empty), and the position of
every token is ``clip(cumsum(mask) - 1, 0)``: left padding moves neither the positions nor
the attention of the real tokens, so a prompt gives the same logits at any padding.

Layout (:mod:`rljax.tokenizer`): a prompt ``[B, P]`` is ``[BOS, chars]`` **left**-padded,
so every prompt ends at column ``P - 1``; a completion ``[B, N]`` is ``[chars, EOS]``
**right**-padded. Scoring concatenates them to ``[B, P + N]``, and completion token ``t``
is predicted by the output at column ``P - 1 + t``. ``P + N <= C`` (the context length).

KV cache (:class:`KVCache`), for ``L`` layers, ``K`` cached heads of width ``Dh``
(``K = H`` for TinyLM, ``K = num_key_value_heads`` for a grouped-query Decoder) and
capacity ``C``:

* ``keys``, ``values``: ``[L, B, C, K, Dh]``; slot ``s`` holds the key/value of the token
  written at column ``s`` (the prompt fills slots ``0 .. P - 1``, decoded tokens follow);
* ``valid``: bool ``[B, C]``, True where the slot holds a token to attend to (a real prompt
  token, or any decoded token); empty and pad slots are False;
* ``index``: int32 ``[]``, the next slot to write (the same for every row);
* ``positions``: int32 ``[B]``, the position id of the next token (``sum(prompt_mask)``
  after prefill, then + 1 per decoded token).

Sampling vs scoring. :meth:`CausalLM.generate` draws all its noise in one generator call
(``u = uniform(key, [B, N])``) and samples token ``t`` by inverse CDF from ``u[:, t]``
inside a ``lax.scan``; its ``log_probs`` are under the **sampling** distribution
(temperature and top-k applied; 0 for greedy, a point mass).
:meth:`CausalLM.completion_log_probs` scores a completion at **temperature 1** with one
full forward, the quantity policy gradients need; the two agree when sampling at
temperature 1 without top-k.

A model plugs in by subclassing :class:`CausalLM` (a frozen dataclass with a ``config``
field that has ``vocab_size`` and ``value_head``) and giving a :class:`CachedTransformer`
module whose layers have ``project(x, positions) -> q, k, v`` and
``finish(x, q, keys, values, attend) -> x``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from flax import struct

from rljax.policies.sampling import (
    MASKED_LOGIT,
    categorical_from_uniform,
    categorical_log_prob,
    sampling_logits,
)
from rljax.tokenizer import EOS_ID, PAD_ID
from rljax.types import Array, Params, PRNGKey


def is_int(x: Any) -> bool:
    """True for a Python ``int`` that is not a ``bool``."""
    return isinstance(x, int) and not isinstance(x, bool)


@struct.dataclass
class Completion:
    """Sampled completions.

    Attributes:
      tokens: int32 ``[B, N]`` sampled tokens; PAD after the first EOS.
      mask: int32 ``[B, N]``, 1 up to and including the first EOS, 0 after.
      log_probs: float32 ``[B, N]`` log-probability of each token under the sampling
        distribution (temperature and top-k applied; 0 when greedy, a point mass); 0 where
        ``mask == 0``.
    """

    tokens: Array
    mask: Array
    log_probs: Array


@struct.dataclass
class KVCache:
    """Keys and values of the tokens seen so far (layout in the module docstring).

    Attributes:
      keys: float32 ``[L, B, C, K, Dh]`` (``K`` cached heads: ``H``, or the
        ``num_key_value_heads`` of a grouped-query model).
      values: float32 ``[L, B, C, K, Dh]``.
      valid: bool ``[B, C]``, True where the slot holds a token to attend to.
      index: int32 ``[]``, the next slot to write.
      positions: int32 ``[B]``, the position id of the next token.
    """

    keys: Array
    values: Array
    valid: Array
    index: Array
    positions: Array


def attention(q: Array, keys: Array, values: Array, attend: Array) -> Array:
    """``softmax(q k^T / sqrt(Dh) + mask) v`` per head.

    Args:
      q: ``[B, T, H, Dh]`` queries.
      keys, values: ``[B, S, H, Dh]``.
      attend: bool ``[B, T, S]``, True where query ``t`` may read key ``s``.

    Returns:
      ``[B, T, H * Dh]``.
    """
    b, t, h, dh = q.shape
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, keys) / math.sqrt(dh)
    scores = jnp.where(attend[:, None], scores, MASKED_LOGIT)
    weights = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, values).reshape(b, t, h * dh)


def positions_from_mask(mask: Array) -> Array:
    """``clip(cumsum(mask) - 1, 0)`` along the last axis, int32 (``[B, T] -> [B, T]``)."""
    return jnp.maximum(jnp.cumsum(mask.astype(jnp.int32), axis=-1) - 1, 0)


def full_attend(mask: Array) -> Array:
    """bool ``[B, T, T]`` from a mask ``[B, T]``: causal, and only real keys (each token
    also sees itself)."""
    t = mask.shape[-1]
    causal = jnp.tril(jnp.ones((t, t), bool))
    return causal & (mask.astype(bool)[:, None, :] | jnp.eye(t, dtype=bool))


class CachedTransformer(nn.Module):
    """A stack of layers run in full or one token at a time against a :class:`KVCache`.

    A subclass gives ``embed(tokens, positions) -> x [B, T, W]``, ``stack()`` (its layers,
    each with ``project(x, positions) -> q [B, T, H, Dh], k, v [B, T, K, Dh]`` and
    ``finish(x, q, keys, values, attend) -> x``) and ``output(x) -> [B, T, V or 1]``.
    """

    def embed(self, tokens: Array, positions: Array) -> Array:
        raise NotImplementedError

    def stack(self) -> Sequence[nn.Module]:
        raise NotImplementedError

    def output(self, x: Array) -> Array:
        raise NotImplementedError

    def __call__(self, tokens: Array, positions: Array, attend: Array
                 ) -> tuple[Array, Array, Array]:
        """Full forward: ``[B, T]`` -> (head ``[B, T, V or 1]``, keys, values
        ``[L, B, T, K, Dh]``)."""
        x = self.embed(tokens, positions)
        all_keys, all_values = [], []
        for layer in self.stack():
            q, k, v = layer.project(x, positions)
            x = layer.finish(x, q, k, v, attend)
            all_keys.append(k)
            all_values.append(v)
        return self.output(x), jnp.stack(all_keys), jnp.stack(all_values)

    def decode(self, tokens: Array, positions: Array, cache: KVCache
               ) -> tuple[Array, Array, Array, Array]:
        """One token per row against the cache: ``[B, 1]`` -> (head ``[B, 1, V or 1]``,
        keys, values ``[L, B, C, K, Dh]``, valid ``[B, C]``) with the token written at
        ``cache.index``."""
        x = self.embed(tokens, positions)
        valid = jax.lax.dynamic_update_index_in_dim(
            cache.valid, jnp.ones(tokens.shape, bool), cache.index, axis=1)
        all_keys, all_values = [], []
        for index, layer in enumerate(self.stack()):
            q, k, v = layer.project(x, positions)
            keys = jax.lax.dynamic_update_slice_in_dim(cache.keys[index], k, cache.index, axis=1)
            values = jax.lax.dynamic_update_slice_in_dim(cache.values[index], v, cache.index,
                                                         axis=1)
            x = layer.finish(x, q, keys, values, valid[:, None, :])
            all_keys.append(keys)
            all_values.append(values)
        return self.output(x), jnp.stack(all_keys), jnp.stack(all_values), valid


class CausalLM:
    """A causal LM as pure functions of a parameter pytree (the shared methods).

    A subclass is a frozen dataclass (hashable, so jitted functions can close over it)
    with a ``config`` field (``vocab_size``, ``value_head`` and the context length named by
    ``context_field``) and a ``module`` property giving its :class:`CachedTransformer`.
    Every method is pure: ``jax.vmap`` over a seed axis of ``params`` and keys works.

    Shapes: tokens are int ``[B, T]`` with a mask ``[B, T]`` (``T <= C``); :meth:`logits`
    gives float32 ``[B, T, V]`` (``V = vocab_size``), :meth:`values` float32 ``[B, T]``;
    :meth:`generate` samples a :class:`Completion` of ``[B, N]`` arrays.
    """

    config: Any
    context_field = "context_length"
    """The config field holding ``C``, the most prompt + completion tokens."""

    @property
    def module(self) -> CachedTransformer:
        """The flax module (built from ``config``)."""
        raise NotImplementedError

    @property
    def context_length(self) -> int:
        """``C``: the most prompt + completion tokens, and the KV cache's capacity."""
        return getattr(self.config, self.context_field)

    # ----------------------------------------------------------------------------- checks

    def _require(self, value_head: bool, what: str) -> None:
        if self.config.value_head != value_head:
            kind = "a value model (value_head=True)" if value_head else "a policy model " \
                "(value_head=False)"
            raise ValueError(f"value_head: {what} needs {kind}, got "
                             f"value_head={self.config.value_head}")

    def _check_tokens(self, tokens: Array, mask: Array, name: str) -> None:
        chex.assert_rank([tokens, mask], 2)
        chex.assert_equal_shape([tokens, mask])
        chex.assert_type(tokens, int)
        if tokens.shape[1] > self.context_length:
            raise ValueError(f"{name}: length {tokens.shape[1]} exceeds {self.context_field} "
                             f"{self.context_length}")

    def _check_completion(self, prompt, prompt_mask, completion, completion_mask) -> None:
        self._check_tokens(prompt, prompt_mask, "prompt")
        self._check_tokens(completion, completion_mask, "completion")
        chex.assert_equal_shape_prefix([prompt, completion], 1)
        p, n = prompt.shape[1], completion.shape[1]
        if p + n > self.context_length:
            raise ValueError(f"completion: prompt length {p} + completion length {n} exceeds "
                             f"{self.context_field} {self.context_length}")

    # ---------------------------------------------------------------------------- forward

    def init(self, key: PRNGKey) -> Params:
        """Fresh parameters (normal draws only; vmap over keys for a seed axis).

        ``key`` is a typed key ``[]``; vmapped over keys ``[S]``, every parameter leaf
        gets a leading seed axis ``[S, ...]``. Runs as one compiled program (cached per
        config), also when called eagerly."""
        return _init_params(self, key)

    def _forward(self, params: Params, tokens: Array, mask: Array) -> Array:
        out, _, _ = self.module.apply(params, tokens, positions_from_mask(mask),
                                      full_attend(mask))
        return out

    def logits(self, params: Params, tokens: Array, mask: Array) -> Array:
        """Next-token logits at every column (one causal forward).

        Args:
          params: from :meth:`init`.
          tokens: int ``[B, T]``, ``T <= C``.
          mask: ``[B, T]``, 1 on real tokens, 0 on padding.

        Returns:
          float32 ``[B, T, V]``; column ``t`` predicts the token after column ``t``.
        """
        self._require(False, "logits")
        self._check_tokens(tokens, mask, "tokens")
        return self._forward(params, tokens, mask)

    def apply(self, params: Params, tokens: Array) -> Array:
        """Logits of unpadded sequences: :meth:`logits` with every token real.

        Args:
          params: from :meth:`init`.
          tokens: int ``[B, T]``, ``T <= C``, at positions ``0 .. T - 1``.

        Returns:
          float32 ``[B, T, V]``.
        """
        return self.logits(params, tokens, jnp.ones(jnp.shape(tokens), jnp.int32))

    def values(self, params: Params, tokens: Array, mask: Array) -> Array:
        """The value head at every column (a value model, ``config.value_head``).

        Args:
          params: from :meth:`init`.
          tokens: int ``[B, T]``.
          mask: ``[B, T]``, 1 on real tokens.

        Returns:
          float32 ``[B, T]``: the value of the state after reading columns ``0..t``.
        """
        self._require(True, "values")
        self._check_tokens(tokens, mask, "tokens")
        return self._forward(params, tokens, mask)[..., 0]

    def _completion_head(self, params, prompt, prompt_mask, completion, completion_mask
                         ) -> Array:
        """The head at columns ``P - 1 .. P + N - 2`` of ``[prompt, completion]``:
        ``[B, N, V or 1]``."""
        self._check_completion(prompt, prompt_mask, completion, completion_mask)
        p, n = prompt.shape[1], completion.shape[1]
        tokens = jnp.concatenate([prompt, completion.astype(prompt.dtype)], axis=1)
        mask = jnp.concatenate([prompt_mask.astype(jnp.int32),
                                completion_mask.astype(jnp.int32)], axis=1)
        return self._forward(params, tokens, mask)[:, p - 1 : p + n - 1]

    def completion_log_probs(self, params: Params, prompt: Array, prompt_mask: Array,
                             completion: Array, completion_mask: Array,
                             temperature: float | Array = 1.0, top_k: int | None = None
                             ) -> Array:
        """``log pi_{T,k}(y_t | x, y_<t)`` from one forward over ``[x, y]``: the
        log-probability under the distribution :meth:`generate` samples from at
        ``temperature`` and ``top_k`` (:func:`~rljax.policies.sampling.sampling_logits`;
        the defaults are the model's own distribution).

        Args:
          params: from :meth:`init`.
          prompt: int ``[B, P]`` left-padded prompts ``x``.
          prompt_mask: ``[B, P]``.
          completion: int ``[B, N]`` right-padded completions ``y``.
          completion_mask: ``[B, N]``, 1 up to and including EOS.
          temperature: > 0 (a Python number or a scalar array), as in :meth:`generate`.
          top_k: ``None`` or an int in ``[1, V]``, as in :meth:`generate` (a token
            outside the top k scores ``MASKED_LOGIT``, i.e. probability 0).

        Returns:
          float32 ``[B, N]`` (the logits at column ``P - 1 + t`` scored at ``y_t``); 0 where
          ``completion_mask == 0``.
        """
        self._require(False, "completion_log_probs")
        logits = self._completion_head(params, prompt, prompt_mask, completion,
                                       completion_mask)
        logits = sampling_logits(logits, temperature, top_k)
        log_probs = categorical_log_prob(logits, completion)
        return jnp.where(completion_mask.astype(bool), log_probs, 0.0)

    def completion_values(self, params: Params, prompt: Array, prompt_mask: Array,
                          completion: Array, completion_mask: Array) -> Array:
        """``V(x, y_<t)``, the value of the state before emitting ``y_t`` (value model).

        Args:
          params: from :meth:`init` of a ``value_head`` model.
          prompt, prompt_mask: ``[B, P]``, as in :meth:`completion_log_probs`.
          completion, completion_mask: ``[B, N]``.

        Returns:
          float32 ``[B, N]``: the head at column ``P - 1 + t``; 0 where the mask is 0.
        """
        self._require(True, "completion_values")
        values = self._completion_head(params, prompt, prompt_mask, completion,
                                       completion_mask)[..., 0]
        return jnp.where(completion_mask.astype(bool), values, 0.0)

    # ------------------------------------------------------------------------ KV cache

    def prefill(self, params: Params, prompt: Array, prompt_mask: Array
                ) -> tuple[Array, KVCache]:
        """Read the prompts into a cache of capacity ``C``.

        Args:
          params: from :meth:`init`.
          prompt: int ``[B, P]`` left-padded prompts.
          prompt_mask: ``[B, P]``.

        Returns:
          ``(logits [B, V] at column P - 1, cache)`` with ``cache.index == P`` and
          ``keys``, ``values`` ``[L, B, C, K, Dh]``.
        """
        self._require(False, "prefill")
        self._check_tokens(prompt, prompt_mask, "prompt")
        capacity = self.context_length
        b, p = prompt.shape
        mask = prompt_mask.astype(jnp.int32)
        logits, keys, values = self.module.apply(params, prompt, positions_from_mask(mask),
                                                 full_attend(mask))
        shape = keys.shape[:2] + (capacity,) + keys.shape[3:]
        cache = KVCache(
            keys=jnp.zeros(shape, keys.dtype).at[:, :, :p].set(keys),
            values=jnp.zeros(shape, values.dtype).at[:, :, :p].set(values),
            valid=jnp.zeros((b, capacity), bool).at[:, :p].set(mask.astype(bool)),
            index=jnp.asarray(p, jnp.int32),
            positions=jnp.sum(mask, axis=1),
        )
        return logits[:, -1], cache

    def decode_step(self, params: Params, token: Array, cache: KVCache
                    ) -> tuple[Array, KVCache]:
        """Append one token per row and return the next-token logits.

        The token is written at slot ``cache.index`` and attended to (valid) whatever its
        id. The caller keeps ``cache.index < C`` (:meth:`generate` does).

        Args:
          params: from :meth:`init`.
          token: int ``[B]``.
          cache: from :meth:`prefill` or a previous step.

        Returns:
          ``(logits [B, V], cache)`` with ``index`` and ``positions`` advanced by one.
        """
        self._require(False, "decode_step")
        chex.assert_rank(token, 1)
        chex.assert_type(token, int)
        chex.assert_equal_shape([token, cache.positions])
        logits, keys, values, valid = self.module.apply(
            params, token[:, None], cache.positions[:, None], cache, method="decode")
        cache = KVCache(keys=keys, values=values, valid=valid, index=cache.index + 1,
                        positions=cache.positions + 1)
        return logits[:, 0], cache

    # -------------------------------------------------------------------------- sampling

    def _check_generate(self, prompt_length: int, max_new_tokens: Any, temperature: Any,
                        top_k: Any) -> None:
        c, context, field = self.config, self.context_length, self.context_field
        if prompt_length > context:
            raise ValueError(f"prompt: length {prompt_length} exceeds {field} {context}")
        if not is_int(max_new_tokens) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens: must be an integer >= 1, got {max_new_tokens!r}")
        if prompt_length + max_new_tokens > context:
            raise ValueError(f"max_new_tokens: prompt length {prompt_length} + max_new_tokens "
                             f"{max_new_tokens} exceeds {field} {context}")
        if isinstance(temperature, bool) or (
                isinstance(temperature, (int, float)) and not temperature >= 0):
            raise ValueError(f"temperature: must be a number >= 0, got {temperature!r}")
        if not isinstance(temperature, (int, float)) and jnp.ndim(temperature) != 0:
            raise ValueError(f"temperature: must be a scalar, got shape "
                             f"{jnp.shape(temperature)}")
        if top_k is not None and (not is_int(top_k) or not 1 <= top_k <= c.vocab_size):
            raise ValueError(f"top_k: must be None or an integer in [1, vocab_size="
                             f"{c.vocab_size}], got {top_k!r}")

    @staticmethod
    def _sample(logits: Array, u: Array, done: Array, temperature: Any, top_k: int | None,
                stop_ids: tuple[int, ...] = (EOS_ID,), pad_id: int = PAD_ID
                ) -> tuple[Array, Array, Array, Array]:
        """One token per row from ``[B, V]`` logits; rows already ``done`` emit ``pad_id``.

        Returns:
          ``(token, mask, log_prob, done)``, each ``[B]``; a row is done after it samples
          one of ``stop_ids`` (that token is kept, with mask 1).
        """
        greedy = isinstance(temperature, (int, float)) and temperature == 0
        if greedy:
            token = jnp.argmax(logits, axis=-1).astype(jnp.int32)
            log_prob = jnp.zeros(token.shape, logits.dtype)  # a point mass
        else:
            logits = sampling_logits(logits, temperature, top_k)
            token = categorical_from_uniform(u, logits)
            log_prob = categorical_log_prob(logits, token)
        token = jnp.where(done, pad_id, token)
        mask = (~done).astype(jnp.int32)
        log_prob = jnp.where(done, 0.0, log_prob)
        stopped = functools.reduce(jnp.logical_or, [token == s for s in stop_ids])
        return token, mask, log_prob, done | stopped

    def _check_stop(self, stop_ids: Sequence[int], pad_id: int) -> tuple[int, ...]:
        vocab = self.config.vocab_size
        stop = tuple(stop_ids) if isinstance(stop_ids, (tuple, list)) else None
        if not stop or not all(is_int(s) and 0 <= s < vocab for s in stop):
            raise ValueError(f"stop_ids: must be a non-empty tuple of token ids in [0, "
                             f"vocab_size={vocab}), got {stop_ids!r}")
        if not is_int(pad_id) or not 0 <= pad_id < vocab:
            raise ValueError(f"pad_id: must be a token id in [0, vocab_size={vocab}), got "
                             f"{pad_id!r}")
        return stop

    @staticmethod
    def _uniforms(key: PRNGKey, b: int, n: int) -> Array:
        """``[N, B]`` uniforms: from one key, or one row per key of ``[B]`` keys."""
        key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
        typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
        batch_shape = key.shape if typed else key.shape[:-1]
        if batch_shape == ():
            return jax.random.uniform(key, (b, n)).T
        if batch_shape != (b,):
            raise ValueError(f"key: must be one key or [{b}] keys (one per row), got keys "
                             f"of shape {batch_shape}")
        return jax.vmap(lambda k: jax.random.uniform(k, (n,)))(key).T

    def generate(self, params: Params, prompt: Array, prompt_mask: Array, key: PRNGKey, *,
                 max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 use_cache: bool = True, stop_ids: Sequence[int] = (EOS_ID,),
                 pad_id: int = PAD_ID, row_max_new_tokens: Array | None = None
                 ) -> Completion:
        """Sample up to ``max_new_tokens`` tokens after each prompt.

        All noise comes from one call ``u = uniform(key, [B, N])`` (or, with one key per
        row, ``u[b] = uniform(key[b], [N])``, so a row's tokens do not depend on the other
        rows of the batch); token ``t`` is the inverse-CDF draw from ``u[:, t]``
        (:func:`categorical_from_uniform`) of the logits divided by the temperature, then
        cut to the top k. The loop is a ``lax.scan``. With ``use_cache=False`` each step
        recomputes the full forward over a ``[B, P + N]`` buffer and reads the current
        column: the same tokens, slower. Prompts of different lengths are left-padded
        (``prompt_mask`` 0 on the padding): positions count real tokens only and pads are
        never attended to, so a row's completion is the one its unpadded prompt gives
        alone (tested, for rotary and learned positions).

        Args:
          params: from :meth:`init`.
          prompt: int ``[B, P]`` left-padded prompts (``[BOS, chars]``).
          prompt_mask: ``[B, P]``.
          key: a PRNG key, or ``[B]`` keys, one per row.
          max_new_tokens: N >= 1, with ``P + N <= C``.
          temperature: >= 0; 0 is greedy (argmax). A Python number, or a scalar array > 0
            (e.g. swept under vmap; it then cannot select greedy).
          top_k: keep only the ``k`` largest logits (ties at the k-th kept); None keeps all.
          use_cache: decode with the KV cache (default) or by full recomputation.
          stop_ids: token ids that end a row (kept in the completion with mask 1; a real
            tokenizer's end-of-sequence and end-of-turn ids); default the character
            tokenizer's EOS.
          pad_id: the token a finished row emits (mask 0).
          row_max_new_tokens: optional int ``[B]`` budgets in ``[1, N]``: row ``b`` stops
            after ``row_max_new_tokens[b]`` tokens (its later tokens are ``pad_id``, mask 0).

        Returns:
          :class:`Completion` of ``[B, N]`` arrays.

        Raises:
          ValueError: one line naming ``prompt``, ``max_new_tokens``, ``temperature``,
            ``top_k``, ``stop_ids``, ``key`` or ``row_max_new_tokens`` when out of range
            (checked at trace time).
        """
        self._require(False, "generate")
        if isinstance(temperature, np.generic):  # a numpy scalar is a Python number here
            temperature = temperature.item()
        chex.assert_rank([prompt, prompt_mask], 2)
        chex.assert_equal_shape([prompt, prompt_mask])
        chex.assert_type(prompt, int)
        b, p = prompt.shape
        self._check_generate(p, max_new_tokens, temperature, top_k)
        n = max_new_tokens
        stop_ids = self._check_stop(stop_ids, pad_id)
        prompt = prompt.astype(jnp.int32)
        prompt_mask = prompt_mask.astype(jnp.int32)
        u = self._uniforms(key, b, n)  # [N, B]
        done = jnp.zeros((b,), bool)
        budget = None
        if row_max_new_tokens is not None:
            budget = jnp.asarray(row_max_new_tokens)
            if budget.shape != (b,) or not jnp.issubdtype(budget.dtype, jnp.integer):
                raise ValueError(f"row_max_new_tokens: must be int [{b}] (one budget per "
                                 f"row), got {budget.dtype} {budget.shape}")
            budget = jnp.clip(budget, 1, n)

        def sample(logits, u_t, done, t):
            token, mask, log_prob, done = self._sample(logits, u_t, done, temperature, top_k,
                                                       stop_ids, pad_id)
            if budget is not None:  # row b has written t + 1 tokens
                done = done | (t + 1 >= budget)
            return token, mask, log_prob, done

        if use_cache:
            logits, cache = self.prefill(params, prompt, prompt_mask)
            token, mask, log_prob, done = sample(logits, u[0], done, 0)

            def cached_step(carry, inputs):
                token, cache, done = carry
                t, u_t = inputs
                logits, cache = self.decode_step(params, token, cache)
                token, mask, log_prob, done = sample(logits, u_t, done, t)
                return (token, cache, done), (token, mask, log_prob)

            _, (tokens, masks, log_probs) = jax.lax.scan(
                cached_step, (token, cache, done), (jnp.arange(1, n), u[1:]))
            tokens = jnp.concatenate([token[None], tokens])
            masks = jnp.concatenate([mask[None], masks])
            log_probs = jnp.concatenate([log_prob[None], log_probs])
        else:
            buffer = jnp.concatenate([prompt, jnp.zeros((b, n), jnp.int32)], axis=1)
            buffer_mask = jnp.concatenate([prompt_mask, jnp.zeros((b, n), jnp.int32)], axis=1)

            def full_step(carry, inputs):
                buffer, buffer_mask, done = carry
                t, u_t = inputs
                logits = self._forward(params, buffer, buffer_mask)
                logits = jax.lax.dynamic_index_in_dim(logits, p - 1 + t, axis=1,
                                                      keepdims=False)
                token, mask, log_prob, done = sample(logits, u_t, done, t)
                buffer = jax.lax.dynamic_update_index_in_dim(buffer, token, p + t, axis=1)
                buffer_mask = jax.lax.dynamic_update_index_in_dim(
                    buffer_mask, jnp.ones_like(token), p + t, axis=1)
                return (buffer, buffer_mask, done), (token, mask, log_prob)

            _, (tokens, masks, log_probs) = jax.lax.scan(
                full_step, (buffer, buffer_mask, done), (jnp.arange(n), u))
        return Completion(tokens=tokens.T, mask=masks.T, log_probs=log_probs.T)


def num_parameters(params: Params) -> int:
    """The number of scalars in a parameter pytree."""
    return sum(int(x.size) for x in jax.tree_util.tree_leaves(params))


@functools.partial(jax.jit, static_argnums=0)
def _init_params(lm: CausalLM, key: PRNGKey) -> Params:
    tokens = jnp.zeros((1, 1), jnp.int32)
    return lm.module.init(key, tokens, tokens, jnp.ones((1, 1, 1), bool))


__all__ = ["CausalLM", "CachedTransformer", "Completion", "KVCache", "attention",
           "full_attend", "positions_from_mask", "num_parameters", "is_int"]
