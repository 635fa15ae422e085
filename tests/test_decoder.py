"""Decoder (Llama / Qwen2 family): the parameter layout; logits against a slow float64
numpy implementation written here (loops over rows, layers and heads; explicit
rotate_half; grouped heads by index) under jit and vmap over seeds, with left padding;
padding invariance; cached vs uncached generation and scoring; the value head; errors."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.policies import Decoder, DecoderConfig, KVCache, LMConfig, TinyLM
from rljax.policies.lm_common import CausalLM
from rljax.tokenizer import CharTokenizer

TOKENIZER = CharTokenizer()
V = TOKENIZER.vocab_size
# initializer_range 0.25 sharpens attention and logits (varied tokens); a large
# rms_norm_eps makes the epsilon matter at float32 tolerance.
LLAMA = DecoderConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=16, rms_norm_eps=0.05, initializer_range=0.25)
QWEN2 = DecoderConfig(hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=1, head_dim=12,
                      max_position_embeddings=16, rope_theta=1000.0, model_type="qwen2",
                      attention_bias=True, tie_word_embeddings=True, initializer_range=0.25)
CONFIGS = {"llama": LLAMA, "qwen2": QWEN2}
PROMPTS = ["12+3=", "4*5=", "x", "7-2=1;"]
P = 8  # prompt columns
N = 6  # new tokens


@pytest.fixture(scope="module")
def prompts():
    prompt, mask = TOKENIZER.encode_prompts(PROMPTS, P)
    return jnp.asarray(prompt), jnp.asarray(mask)


def perturb(params, seed=0, std=0.3):
    """Nonzero biases and non-unit norm scales (init gives 0 and 1, under which a dropped
    bias or scale would go unseen). In numpy: nothing to compile."""
    rng = np.random.default_rng(seed)

    def leaf(path, x):
        name = jax.tree_util.keystr(path)
        x = np.array(x)
        if name.endswith("['bias']") or name.endswith("['scale']"):
            x = x + std * rng.standard_normal(x.shape).astype(x.dtype)
        return jnp.asarray(x)

    return jax.tree_util.tree_map_with_path(leaf, params)


# ------------------------------------------------------------------ numpy reference


def reference_head(params, config, tokens, mask):
    """Slow and obvious float64 forward of one seed's params: ``[B, T] -> [B, T, V or 1]``.

    HF's LlamaForCausalLM / Qwen2ForCausalLM written out: a loop over rows, layers and
    query heads; query head ``h`` reads kv head ``h // (H / KV)``; RoPE with an explicit
    rotate_half; positions ``clip(cumsum(mask) - 1, 0)``; a key is read if it is not later
    than the query and is real (or is the query itself).
    """
    p = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float64), params["params"])
    c = config
    heads, kv_heads, dh = c.num_attention_heads, c.num_key_value_heads, c.head_dim
    tokens, mask = np.asarray(tokens), np.asarray(mask)
    b_size, t_size = tokens.shape

    def rms_norm(x, scale):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + c.rms_norm_eps) * scale

    def dense(x, layer):
        return x @ layer["kernel"] + (layer["bias"] if "bias" in layer else 0.0)

    def rotate_half(x):
        return np.concatenate([-x[:, dh // 2:], x[:, :dh // 2]], axis=-1)

    def rope(x, positions):  # x [T, Dh]
        inv_freq = 1.0 / c.rope_theta ** (np.arange(0, dh, 2) / dh)
        angles = positions[:, None] * np.concatenate([inv_freq, inv_freq])[None, :]
        return x * np.cos(angles) + rotate_half(x) * np.sin(angles)

    out = []
    for b in range(b_size):
        positions = np.maximum(np.cumsum(mask[b]) - 1, 0).astype(np.float64)
        allowed = np.array([[s <= t and (mask[b, s] == 1 or s == t) for s in range(t_size)]
                            for t in range(t_size)])
        x = p["embed_tokens"]["embedding"][tokens[b]]  # [T, W]
        for layer in range(c.num_hidden_layers):
            lp = p[f"layers_{layer}"]
            attn = lp["self_attn"]
            h = rms_norm(x, lp["input_layernorm"]["scale"])
            q = dense(h, attn["q_proj"]).reshape(t_size, heads, dh)
            k = dense(h, attn["k_proj"]).reshape(t_size, kv_heads, dh)
            v = dense(h, attn["v_proj"]).reshape(t_size, kv_heads, dh)
            outputs = []
            for head in range(heads):
                j = head // (heads // kv_heads)
                scores = rope(q[:, head], positions) @ rope(k[:, j], positions).T / np.sqrt(dh)
                scores = np.where(allowed, scores, -np.inf)
                weights = np.exp(scores - scores.max(-1, keepdims=True))
                weights /= weights.sum(-1, keepdims=True)
                outputs.append(weights @ v[:, j])
            x = x + dense(np.concatenate(outputs, axis=-1), attn["o_proj"])
            h = rms_norm(x, lp["post_attention_layernorm"]["scale"])
            gate = dense(h, lp["mlp"]["gate_proj"])
            x = x + dense(gate / (1 + np.exp(-gate)) * dense(h, lp["mlp"]["up_proj"]),
                          lp["mlp"]["down_proj"])
        h = rms_norm(x, p["norm"]["scale"])
        head_kernel = (p["lm_head"]["kernel"] if "lm_head" in p
                       else p["embed_tokens"]["embedding"].T)
        out.append(h @ head_kernel)
    return np.stack(out)


# ---------------------------------------------------------------------- layout


def expected_shapes(c: DecoderConfig) -> dict:
    w, f, dh = c.hidden_size, c.intermediate_size, c.head_dim
    q, kv = c.num_attention_heads * dh, c.num_key_value_heads * dh

    def proj(n_in, n_out, bias):
        return {"kernel": (n_in, n_out), **({"bias": (n_out,)} if bias else {})}

    layer = {"input_layernorm": {"scale": (w,)},
             "self_attn": {"q_proj": proj(w, q, c.attention_bias),
                           "k_proj": proj(w, kv, c.attention_bias),
                           "v_proj": proj(w, kv, c.attention_bias),
                           "o_proj": proj(q, w, False)},
             "post_attention_layernorm": {"scale": (w,)},
             "mlp": {"gate_proj": proj(w, f, False), "up_proj": proj(w, f, False),
                     "down_proj": proj(f, w, False)}}
    tree = {"embed_tokens": {"embedding": (c.vocab_size, w)}, "norm": {"scale": (w,)},
            **{f"layers_{i}": layer for i in range(c.num_hidden_layers)}}
    if c.value_head:
        tree["lm_head"] = {"kernel": (w, 1)}
    elif not c.tie_word_embeddings:
        tree["lm_head"] = {"kernel": (w, c.vocab_size)}
    return {"params": tree}


@pytest.mark.parametrize("config", [
    DecoderConfig(), LLAMA, QWEN2,
    dataclasses.replace(QWEN2, value_head=True),
    dataclasses.replace(LLAMA, tie_word_embeddings=True),
], ids=["default", "llama", "qwen2", "qwen2-value", "llama-tied"])
def test_parameter_tree_is_the_hf_layout(config):
    shapes = jax.eval_shape(Decoder(config).init, jax.random.key(0))  # nothing to compile
    got = jax.tree_util.tree_map(lambda x: x.shape, shapes)
    assert got == expected_shapes(config)
    assert DecoderConfig().head_dim == 16 and LLAMA.head_dim == 8 and QWEN2.head_dim == 12


def test_init_statistics_and_seed_axis():
    keys = jax.random.split(jax.random.key(0), 3)
    params = jax.jit(jax.vmap(Decoder(QWEN2).init))(keys)["params"]
    attn = params["layers_0"]["self_attn"]
    assert attn["q_proj"]["kernel"].shape == (3, 32, 48)
    np.testing.assert_array_equal(attn["k_proj"]["bias"], 0.0)
    np.testing.assert_array_equal(params["layers_1"]["post_attention_layernorm"]["scale"], 1.0)
    np.testing.assert_array_equal(params["norm"]["scale"], 1.0)
    kernel = np.asarray(params["layers_0"]["mlp"]["gate_proj"]["kernel"])
    assert abs(kernel.std() - 0.25) < 0.02 and abs(kernel.mean()) < 0.02
    assert not np.array_equal(kernel[0], kernel[1])  # one draw per seed


# ---------------------------------------------------------------- forward vs numpy


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_logits_match_numpy_reference_under_jit_and_vmap(name, prompts):
    config = CONFIGS[name]
    model = Decoder(config)
    keys = jax.random.split(jax.random.key(1), 2)
    params = perturb(jax.jit(jax.vmap(model.init))(keys))
    prompt, mask = prompts
    got = jax.jit(jax.vmap(model.logits, in_axes=(0, None, None)))(params, prompt, mask)
    assert got.shape == (2, len(PROMPTS), P, V) and got.dtype == jnp.float32
    assert np.asarray(mask).min() == 0  # left padding is exercised
    for seed in range(2):
        one = jax.tree_util.tree_map(lambda x, s=seed: x[s], params)
        expected = reference_head(one, config, prompt, mask)
        np.testing.assert_allclose(got[seed], expected, rtol=2e-4, atol=2e-4)
    assert np.std(np.asarray(got)) > 0.5  # sharp enough that the comparison means something


def test_padding_invariance_and_apply():
    model = Decoder(LLAMA)
    params = perturb(jax.jit(model.init)(jax.random.key(2)))
    ids = jnp.asarray(TOKENIZER.encode("12+3=4", add_bos=True))[None]  # [1, 7], no padding
    t = ids.shape[1]
    unpadded = jax.jit(model.apply)(params, ids)
    np.testing.assert_allclose(unpadded, reference_head(params, LLAMA, ids, np.ones_like(ids)),
                               rtol=2e-4, atol=2e-4)
    logits_fn = jax.jit(model.logits)
    rng = np.random.default_rng(0)
    for pad in (1, 4, 9):
        tokens = np.concatenate([rng.integers(0, V, (1, pad)), np.asarray(ids)], axis=1)
        mask = np.concatenate([np.zeros((1, pad), int), np.ones((1, t), int)], axis=1)
        padded = logits_fn(params, jnp.asarray(tokens), jnp.asarray(mask))  # junk in pads
        np.testing.assert_allclose(padded[:, pad:], unpadded, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------- generation


def test_cached_and_uncached_generation_agree_and_match_scoring(prompts):
    model = Decoder(QWEN2)
    params = perturb(jax.jit(model.init)(jax.random.key(3)))
    prompt, mask = prompts

    @jax.jit
    def run(params, key):
        cached = model.generate(params, prompt, mask, key, max_new_tokens=N)
        uncached = model.generate(params, prompt, mask, key, max_new_tokens=N,
                                  use_cache=False)
        scored = model.completion_log_probs(params, prompt, mask, cached.tokens, cached.mask)
        _, cache = model.prefill(params, prompt, mask)
        return cached, uncached, scored, cache

    for seed in (0, 1):
        cached, uncached, scored, cache = run(params, jax.random.key(10 + seed))
        np.testing.assert_array_equal(cached.tokens, uncached.tokens)
        np.testing.assert_array_equal(cached.mask, uncached.mask)
        np.testing.assert_allclose(cached.log_probs, uncached.log_probs, atol=1e-5)
        np.testing.assert_allclose(cached.log_probs, scored, atol=1e-5)
        assert len(np.unique(np.asarray(cached.tokens))) >= 4  # varied samples
    assert isinstance(cache, KVCache)
    assert cache.keys.shape == cache.values.shape == (2, len(PROMPTS), 16, 1, 12)  # KV once
    assert int(cache.index) == P
    np.testing.assert_array_equal(cache.positions, np.asarray(mask).sum(1))
    # the scored log-probs are the numpy reference's, prefix by prefix
    tokens = np.concatenate([np.asarray(prompt), np.asarray(cached.tokens)], axis=1)
    full_mask = np.concatenate([np.asarray(mask), np.asarray(cached.mask)], axis=1)
    logits = reference_head(params, QWEN2, tokens, full_mask)[:, P - 1:-1]
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, np.asarray(cached.tokens)[..., None], -1)[..., 0]
    np.testing.assert_allclose(scored, np.where(full_mask[:, P:] == 1, picked, 0.0),
                               atol=2e-4)


def test_same_methods_as_tiny_lm():
    for name in ("init", "apply", "logits", "values", "completion_log_probs",
                 "completion_values", "prefill", "decode_step", "generate"):
        assert getattr(Decoder, name) is getattr(TinyLM, name) is getattr(CausalLM, name)
    assert hash(Decoder(LLAMA)) == hash(Decoder(LLAMA))
    assert Decoder(LLAMA).context_length == 16 and TinyLM().context_length == 32


# ---------------------------------------------------------------------- value head


def test_value_head(prompts):
    config = dataclasses.replace(QWEN2, value_head=True)  # tied embeddings: head not tied
    model = Decoder(config)
    params = perturb(jax.jit(model.init)(jax.random.key(4)))
    prompt, mask = prompts
    completion, completion_mask = map(jnp.asarray, TOKENIZER.encode_completions(
        ["15;", "20", "x=4;0", ""], N))
    tokens = jnp.concatenate([prompt, completion], 1)
    tokens_mask = jnp.concatenate([mask, completion_mask], 1)

    @jax.jit
    def run(p):
        return (model.values(p, tokens, tokens_mask),
                model.completion_values(p, prompt, mask, completion, completion_mask))

    full, got = map(np.asarray, run(params))
    assert full.shape == (len(PROMPTS), P + N) and got.shape == (len(PROMPTS), N)
    np.testing.assert_allclose(full, reference_head(params, config, tokens, tokens_mask)[..., 0],
                               rtol=2e-4, atol=2e-4)
    real = np.asarray(completion_mask) == 1
    np.testing.assert_array_equal(got, np.where(real, full[:, P - 1:-1], 0.0))
    with pytest.raises(ValueError, match="^value_head: logits needs a policy model"):
        model.logits(params, prompt, mask)
    with pytest.raises(ValueError, match="^value_head: generate needs a policy model"):
        model.generate(params, prompt, mask, jax.random.key(0), max_new_tokens=2)


# -------------------------------------------------------------------------- errors


@pytest.mark.parametrize("field, kwargs, message", [
    ("vocab_size", {"vocab_size": 2}, "must be an integer >= 3, got 2"),
    ("hidden_size", {"hidden_size": 0}, "must be an integer >= 1"),
    ("intermediate_size", {"intermediate_size": 8.0}, "must be an integer >= 1"),
    ("num_hidden_layers", {"num_hidden_layers": True}, "must be an integer >= 1"),
    ("num_attention_heads", {"num_attention_heads": 0}, "must be an integer >= 1"),
    ("num_key_value_heads", {"num_key_value_heads": 3},
     "must divide num_attention_heads=4, got 3"),
    ("head_dim", {"head_dim": 7}, r"must be even \(rotary embeddings rotate halves\), got 7"),
    ("max_position_embeddings", {"max_position_embeddings": 0}, "must be an integer >= 1"),
    ("rope_theta", {"rope_theta": 0.0}, "must be a finite number > 0"),
    ("rms_norm_eps", {"rms_norm_eps": -1e-6}, "must be a finite number > 0"),
    ("initializer_range", {"initializer_range": float("nan")}, "must be a finite number"),
    ("tie_word_embeddings", {"tie_word_embeddings": 1}, "must be a bool, got 1"),
    ("value_head", {"value_head": "yes"}, "must be a bool"),
    ("model_type", {"model_type": "gpt2"}, "must be one of llama, qwen2, got 'gpt2'"),
    ("attention_bias", {"model_type": "qwen2"}, "must be True for model_type='qwen2'"),
    ("attention_bias", {"attention_bias": True}, "must be False for model_type='llama'"),
])
def test_config_errors_name_the_field(field, kwargs, message):
    with pytest.raises(ValueError, match=f"^{field}: {message}") as error:
        Decoder(DecoderConfig(**kwargs))
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="^config: must be a DecoderConfig, got LMConfig$"):
        Decoder(LMConfig())


def test_lengths_beyond_the_context_are_rejected(prompts):
    model = Decoder(LLAMA)
    params = jax.eval_shape(model.init, jax.random.key(0))  # shapes suffice: raised early
    long = jnp.ones((2, 17), jnp.int32)
    with pytest.raises(ValueError,
                       match="^tokens: length 17 exceeds max_position_embeddings 16$"):
        model.apply(params, long)
    with pytest.raises(ValueError,
                       match="^prompt: length 17 exceeds max_position_embeddings 16$"):
        model.prefill(params, long, long)
    prompt, mask = prompts
    with pytest.raises(ValueError, match=r"^max_new_tokens: prompt length 8 \+ max_new_tokens "
                                         "9 exceeds max_position_embeddings 16$"):
        model.generate(params, prompt, mask, jax.random.key(0), max_new_tokens=9)
    completion = jnp.ones((len(PROMPTS), 9), jnp.int32)
    with pytest.raises(ValueError, match=r"^completion: prompt length 8 \+ completion length "
                                         "9 exceeds max_position_embeddings 16$"):
        model.completion_log_probs(params, prompt, mask, completion, completion)
