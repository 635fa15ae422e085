"""TinyLM: causal forward, left-padding invariance, cached vs uncached generation, scoring
against a slow prefix-by-prefix reference, EOS handling, value head, jit/vmap over seeds,
bad-input errors; and the CharTokenizer round trip."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.policies import Completion, KVCache, LMConfig, TinyLM
from rljax.policies.lm import num_parameters
from rljax.tokenizer import BOS_ID, EOS_ID, PAD_ID, CharTokenizer

TOKENIZER = CharTokenizer()
CONFIG = LMConfig(context_length=16, width=32, num_layers=2, num_heads=4)
LM = TinyLM(CONFIG)
PROMPTS = ["12+3=", "4*5=", "x", "7-2=1;"]
P = 8  # prompt columns
N = 6  # new tokens


def sharpen(params, eos_bias=0.0, scale=3.0):
    """Scale an initialisation up (peaked, position-dependent attention and logits: entropy
    about 2.4 nats of the 2.94 of uniform) and add ``eos_bias`` to the EOS logit, so the
    tests see varied tokens and early EOS. In numpy: nothing to compile."""
    params = jax.tree_util.tree_map(lambda x: np.array(x) * scale, params)
    if eos_bias:
        params["params"]["head"]["bias"][..., EOS_ID] += eos_bias
    return jax.tree_util.tree_map(jnp.asarray, params)


# Eager dispatch compiles every operation for every new shape (seconds for one forward),
# so the tests call the model only through these shared jitted functions.
init_fn = jax.jit(LM.init)
logits_fn = jax.jit(LM.logits)
score_fn = jax.jit(LM.completion_log_probs)


@functools.cache
def generate_fn(**kwargs):
    """A jitted ``generate`` with fixed keyword arguments (one compilation each)."""
    return jax.jit(lambda params, prompt, mask, key: LM.generate(
        params, prompt, mask, key, max_new_tokens=N, **kwargs))


@pytest.fixture(scope="module")
def params():
    return sharpen(init_fn(jax.random.key(0)))


@pytest.fixture(scope="module")
def prompts():
    prompt, mask = TOKENIZER.encode_prompts(PROMPTS, P)
    return jnp.asarray(prompt), jnp.asarray(mask)


def log_softmax(logits):
    logits = np.asarray(logits, np.float64)
    peak = logits.max(-1, keepdims=True)
    return logits - peak - np.log(np.exp(logits - peak).sum(-1, keepdims=True))


def reference_log_probs(params, prompt, prompt_mask, completion, completion_mask):
    """Slow and obvious: one forward per prefix ``[prompt, completion[:t]]``."""
    out = np.zeros(completion.shape, np.float64)
    for t in range(completion.shape[1]):
        tokens = jnp.concatenate([prompt, completion[:, :t]], axis=1)
        mask = jnp.concatenate([prompt_mask, completion_mask[:, :t]], axis=1)
        log_probs = log_softmax(logits_fn(params, tokens, mask)[:, -1])
        picked = np.take_along_axis(log_probs, np.asarray(completion[:, t:t + 1]), axis=1)
        out[:, t] = np.where(np.asarray(completion_mask[:, t]) == 1, picked[:, 0], 0.0)
    return out


# --------------------------------------------------------------------------- tokenizer


def test_tokenizer_round_trip_and_errors():
    rng = np.random.default_rng(0)
    alphabet = TOKENIZER.alphabet
    texts = ["".join(rng.choice(list(alphabet), size=rng.integers(0, 9))) for _ in range(50)]
    ids, mask = TOKENIZER.encode_prompts(texts, 10)
    assert ids.shape == mask.shape == (50, 10)
    assert TOKENIZER.decode_batch(ids) == texts
    np.testing.assert_array_equal(ids[:, -1] != PAD_ID, True)  # left-padded: ends at the edge
    np.testing.assert_array_equal(mask.sum(1), [len(t) + 1 for t in texts])  # BOS counted
    np.testing.assert_array_equal(ids[np.arange(50), 10 - mask.sum(1)], BOS_ID)
    comp, comp_mask = TOKENIZER.encode_completions(texts, 10)
    assert TOKENIZER.decode_batch(comp) == texts
    np.testing.assert_array_equal(comp[np.arange(50), comp_mask.sum(1) - 1], EOS_ID)
    assert TOKENIZER.vocab_size == CONFIG.vocab_size == 19
    with pytest.raises(ValueError, match=r"unknown character 'a' at position 2"):
        TOKENIZER.encode("12a")
    with pytest.raises(ValueError, match="prompt: '123456' needs 7 tokens"):
        TOKENIZER.encode_prompts(["1", "123456"], 6)


# ------------------------------------------------------------------------------ config


@pytest.mark.parametrize("field, kwargs", [
    ("width", {"width": 30}),
    ("vocab_size", {"vocab_size": 2}),
    ("context_length", {"context_length": 0}),
    ("num_layers", {"num_layers": 1.5}),
    ("num_heads", {"num_heads": 0}),
    ("mlp_ratio", {"mlp_ratio": True}),
    ("value_head", {"value_head": 1}),
])
def test_config_errors_name_the_field(field, kwargs):
    with pytest.raises(ValueError, match=f"^{field}: "):
        TinyLM(LMConfig(**kwargs))
    with pytest.raises(ValueError, match="width: must be divisible by num_heads=4, got 30"):
        LMConfig(width=30).validate()


def test_init_layout_and_parameter_count(params):
    c = LMConfig()
    shapes = jax.eval_shape(TinyLM(c).init, jax.random.key(0))  # nothing to compile
    w, f, v = c.width, c.mlp_ratio * c.width, c.vocab_size
    block = 2 * 2 * w + (w * 3 * w + 3 * w) + (w * w + w) + (w * f + f) + (f * w + w)
    expected = v * w + c.context_length * w + c.num_layers * block + 2 * w + (w * v + v)
    assert num_parameters(shapes) == expected == 104_595
    assert shapes["params"]["position_embed"].shape == (c.context_length, w)
    assert shapes["params"]["head"]["kernel"].shape == (w, v)
    base = init_fn(jax.random.key(0))["params"]
    np.testing.assert_allclose(np.std(base["blocks_0"]["mlp_in"]["kernel"]), 0.02, rtol=0.1)
    np.testing.assert_allclose(np.std(base["blocks_0"]["mlp_out"]["kernel"]), 0.01, rtol=0.1)
    np.testing.assert_array_equal(base["blocks_0"]["qkv"]["bias"], 0.0)
    assert hash(TinyLM()) == hash(TinyLM(LMConfig()))  # closable over by jit


# ----------------------------------------------------------------------------- forward


def test_causality(params, prompts):
    prompt, mask = prompts
    tokens = jnp.concatenate([prompt, jnp.full((len(PROMPTS), N), 7, jnp.int32)], 1)
    tokens_mask = jnp.concatenate([mask, jnp.ones((len(PROMPTS), N), jnp.int32)], 1)
    logits = logits_fn(params, tokens, tokens_mask)
    assert logits.shape == (len(PROMPTS), P + N, CONFIG.vocab_size)
    for j in (3, P, P + 3):
        changed = tokens.at[:, j].set(jnp.where(tokens[:, j] == 5, 6, 5))
        other = logits_fn(params, changed, tokens_mask.at[:, j].set(1))
        np.testing.assert_array_equal(other[:, :j], logits[:, :j])
        assert not np.allclose(other[:, j:], logits[:, j:])


def test_left_padding_invariance(params):
    completion, completion_mask = map(jnp.asarray, TOKENIZER.encode_completions(
        ["15;", "20", "x=4;0", ""], N))
    real = np.asarray(completion_mask, bool)
    scores, columns = [], []
    for length in (P, P + 2):
        prompt, mask = map(jnp.asarray, TOKENIZER.encode_prompts(PROMPTS, length))
        scores.append(score_fn(params, prompt, mask, completion, completion_mask))
        tokens = jnp.concatenate([prompt, completion], 1)
        logits = logits_fn(params, tokens, jnp.concatenate([mask, completion_mask], 1))
        columns.append(np.asarray(logits[:, length - 1:-1])[real])
    np.testing.assert_allclose(scores[0], scores[1], atol=1e-5)
    np.testing.assert_allclose(columns[0], columns[1], atol=1e-5)


def test_completion_log_probs_match_slow_reference(params, prompts):
    prompt, mask = prompts
    completion, completion_mask = map(jnp.asarray, TOKENIZER.encode_completions(
        ["15;", "20", "x=4;0", ""], N))
    got = score_fn(params, prompt, mask, completion, completion_mask)
    assert got.shape == (len(PROMPTS), N) and got.dtype == jnp.float32
    want = reference_log_probs(params, prompt, mask, completion, completion_mask)
    np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(got)[np.asarray(completion_mask) == 0], 0.0)
    assert np.all(np.asarray(got)[np.asarray(completion_mask) == 1] < 0)


def test_prefill_and_decode_match_full_forward(params, prompts):
    prompt, mask = prompts
    completion = jnp.asarray(np.random.default_rng(1).integers(3, 19, (len(PROMPTS), N)),
                             jnp.int32)
    tokens = jnp.concatenate([prompt, completion], 1)
    full = logits_fn(params, tokens, jnp.concatenate([mask, jnp.ones_like(completion)], 1))
    logits, cache = jax.jit(LM.prefill)(params, prompt, mask)
    assert isinstance(cache, KVCache)
    assert cache.keys.shape == (2, len(PROMPTS), 16, 4, 8) == cache.values.shape
    assert cache.valid.shape == (len(PROMPTS), 16) and int(cache.index) == P
    np.testing.assert_array_equal(cache.valid[:, :P], np.asarray(mask, bool))
    np.testing.assert_array_equal(cache.positions, np.asarray(mask).sum(1))
    step = jax.jit(LM.decode_step)
    for t in range(N):
        np.testing.assert_allclose(logits, full[:, P - 1 + t], atol=1e-5)
        logits, cache = step(params, completion[:, t], cache)
    assert int(cache.index) == P + N
    np.testing.assert_array_equal(cache.valid[:, P:P + N], True)
    np.testing.assert_array_equal(cache.valid[:, P + N:], False)


# -------------------------------------------------------------------------- generation


def sampling_reference(params, prompt, mask, completion, temperature, top_k):
    """Log-probs of sampled tokens under the sampling distribution, from one forward."""
    tokens = jnp.concatenate([prompt, completion.tokens], 1)
    logits = logits_fn(params, tokens, jnp.concatenate([mask, completion.mask], 1))
    logits = np.asarray(logits[:, P - 1:-1], np.float64) / temperature
    if top_k is not None:
        kth = np.sort(logits, -1)[..., -top_k][..., None]
        logits = np.where(logits >= kth, logits, -np.inf)
    log_probs = log_softmax(logits)
    picked = np.take_along_axis(log_probs, np.asarray(completion.tokens)[..., None], -1)
    return np.where(np.asarray(completion.mask) == 1, picked[..., 0], 0.0)


@pytest.mark.parametrize("temperature, top_k", [(1.0, None), (0.7, 5)])
def test_cached_and_uncached_generate_agree(params, prompts, temperature, top_k):
    prompt, mask = prompts
    cached = generate_fn(temperature=temperature, top_k=top_k)
    uncached = generate_fn(temperature=temperature, top_k=top_k, use_cache=False)
    distinct = set()
    for seed in range(4):
        key = jax.random.key(seed)
        a, b = cached(params, prompt, mask, key), uncached(params, prompt, mask, key)
        assert isinstance(a, Completion)
        assert a.tokens.shape == a.mask.shape == a.log_probs.shape == (len(PROMPTS), N)
        assert a.tokens.dtype == a.mask.dtype == jnp.int32
        np.testing.assert_array_equal(a.tokens, b.tokens)
        np.testing.assert_array_equal(a.mask, b.mask)
        np.testing.assert_allclose(a.log_probs, b.log_probs, atol=1e-5)
        np.testing.assert_allclose(
            a.log_probs, sampling_reference(params, prompt, mask, a, temperature, top_k),
            atol=1e-5)
        distinct.add(np.asarray(a.tokens).tobytes())
    assert len(distinct) == 4  # different keys, different samples


def test_generate_log_probs_are_completion_log_probs_at_temperature_one(params, prompts):
    prompt, mask = prompts
    out = generate_fn()(params, prompt, mask, jax.random.key(7))
    scored = score_fn(params, prompt, mask, out.tokens, out.mask)
    np.testing.assert_allclose(out.log_probs, scored, atol=1e-5)


def test_eos_handling(prompts):
    prompt, mask = prompts
    params = sharpen(init_fn(jax.random.key(3)), eos_bias=3.0)
    ended_early = 0
    for seed in range(3):
        out = generate_fn()(params, prompt, mask, jax.random.key(seed))
        out = jax.tree_util.tree_map(np.asarray, out)
        for tokens, row_mask, log_probs in zip(out.tokens, out.mask, out.log_probs,
                                               strict=True):
            eos = np.flatnonzero(tokens == EOS_ID)
            length = eos[0] + 1 if eos.size else N
            ended_early += length < N
            np.testing.assert_array_equal(row_mask, np.arange(N) < length)
            np.testing.assert_array_equal(tokens[length:], PAD_ID)
            np.testing.assert_array_equal(log_probs[length:], 0.0)
            assert np.all(log_probs[:length] < 0)
    assert ended_early >= 3


def test_greedy_is_top_k_one(params, prompts):
    prompt, mask = prompts
    greedy = generate_fn(temperature=0.0)(params, prompt, mask, jax.random.key(0))
    top1 = generate_fn(top_k=1)(params, prompt, mask, jax.random.key(2))
    np.testing.assert_array_equal(greedy.tokens, top1.tokens)
    np.testing.assert_array_equal(greedy.mask, top1.mask)
    np.testing.assert_array_equal(greedy.log_probs, 0.0)  # a point mass
    np.testing.assert_allclose(top1.log_probs, 0.0, atol=1e-6)
    tokens = jnp.concatenate([prompt, greedy.tokens], 1)
    logits = logits_fn(params, tokens, jnp.concatenate([mask, greedy.mask], 1))
    argmax = np.asarray(logits[:, P - 1:-1]).argmax(-1)
    real = np.asarray(greedy.mask, bool)
    np.testing.assert_array_equal(np.asarray(greedy.tokens)[real], argmax[real])


def test_jit_and_vmap_over_seeds(prompts):
    prompt, mask = prompts
    seeds = 3
    init_keys = jax.random.split(jax.random.key(5), seeds)
    keys = jax.random.split(jax.random.key(6), seeds)

    def one_seed(init_key, key):  # init, sample, score and differentiate: one seed
        params = jax.tree_util.tree_map(lambda x: 3.0 * x, LM.init(init_key))  # sharpen

        def loss(p):
            return LM.completion_log_probs(p, prompt, mask, out.tokens, out.mask).sum()

        out = LM.generate(params, prompt, mask, key, max_new_tokens=N)
        return params, out, jax.grad(loss)(params)

    batched_params, batched_out, batched_grads = jax.jit(jax.vmap(one_seed))(init_keys, keys)
    grad_fn = jax.jit(jax.grad(lambda p, tokens, tokens_mask: score_fn(
        p, prompt, mask, tokens, tokens_mask).sum()))
    for i in range(seeds):  # the per-seed loop, through the shared jitted functions
        params = sharpen(init_fn(init_keys[i]))
        for a, b in zip(jax.tree_util.tree_leaves(params),
                        jax.tree_util.tree_leaves(batched_params), strict=True):
            np.testing.assert_allclose(b[i], a, rtol=1e-6)
        out = generate_fn()(params, prompt, mask, keys[i])
        np.testing.assert_array_equal(batched_out.tokens[i], out.tokens)
        np.testing.assert_array_equal(batched_out.mask[i], out.mask)
        np.testing.assert_allclose(batched_out.log_probs[i], out.log_probs, atol=1e-5)
        grads = grad_fn(params, out.tokens, out.mask)
        for a, b in zip(jax.tree_util.tree_leaves(grads),
                        jax.tree_util.tree_leaves(batched_grads), strict=True):
            assert np.all(np.isfinite(a))
            np.testing.assert_allclose(b[i], a, atol=1e-4, rtol=1e-4)


def test_traced_temperature_under_vmap(params, prompts):
    prompt, mask = prompts
    key = jax.random.key(4)
    swept = jax.jit(jax.vmap(lambda temperature: LM.generate(
        params, prompt, mask, key, max_new_tokens=N, temperature=temperature, top_k=5)))(
            jnp.asarray([0.7, 3.0]))
    fixed = generate_fn(temperature=0.7, top_k=5)(params, prompt, mask, key)
    np.testing.assert_array_equal(swept.tokens[0], fixed.tokens)
    np.testing.assert_allclose(swept.log_probs[0], fixed.log_probs, atol=1e-5)
    assert not np.array_equal(swept.log_probs[0], swept.log_probs[1])


# --------------------------------------------------------------------------- value head


def test_value_head(params, prompts):
    lm = TinyLM(LMConfig(context_length=16, width=32, num_layers=2, num_heads=4,
                         value_head=True))
    value_params = sharpen(jax.jit(lm.init)(jax.random.key(0)))
    assert value_params["params"]["head"]["kernel"].shape == (32, 1)
    prompt, mask = prompts
    completion, completion_mask = map(jnp.asarray, TOKENIZER.encode_completions(
        ["15;", "20", "x=4;0", ""], N))
    tokens = jnp.concatenate([prompt, completion], 1)
    tokens_mask = jnp.concatenate([mask, completion_mask], 1)

    @jax.jit
    def run(p):
        return (lm.values(p, prompt, mask), lm.values(p, tokens, tokens_mask),
                lm.completion_values(p, prompt, mask, completion, completion_mask))

    prompt_values, full, got = map(np.asarray, run(value_params))
    assert prompt_values.shape == (len(PROMPTS), P) and full.shape == (len(PROMPTS), P + N)
    assert got.shape == (len(PROMPTS), N) and got.dtype == np.float32
    real = np.asarray(completion_mask) == 1
    np.testing.assert_array_equal(got, np.where(real, full[:, P - 1:-1], 0.0))
    np.testing.assert_array_equal(got[~real], 0.0)
    assert np.all(got[real] != 0)
    # V(prompt) at column P - 1 does not depend on the completion
    np.testing.assert_allclose(got[:, 0], prompt_values[:, -1], atol=1e-5)
    with pytest.raises(ValueError, match="^value_head: logits needs a policy model"):
        lm.logits(value_params, prompt, mask)
    with pytest.raises(ValueError, match="^value_head: generate needs a policy model"):
        lm.generate(value_params, prompt, mask, jax.random.key(0), max_new_tokens=2)
    with pytest.raises(ValueError, match="^value_head: values needs a value model"):
        LM.values(params, prompt, mask)
    with pytest.raises(ValueError, match="^value_head: completion_values needs a value"):
        LM.completion_values(params, prompt, mask, completion, completion_mask)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("kwargs, message", [
    ({"max_new_tokens": 0}, "^max_new_tokens: must be an integer >= 1, got 0"),
    ({"max_new_tokens": 2.0}, "^max_new_tokens: must be an integer >= 1"),
    ({"max_new_tokens": True}, "^max_new_tokens: must be an integer >= 1"),
    ({"max_new_tokens": 9}, r"^max_new_tokens: prompt length 8 \+ max_new_tokens 9 exceeds "
                            "context_length 16"),
    ({"max_new_tokens": 2, "temperature": -0.5}, "^temperature: must be a number >= 0"),
    ({"max_new_tokens": 2, "temperature": float("nan")}, "^temperature: "),
    ({"max_new_tokens": 2, "temperature": jnp.ones(2)}, "^temperature: must be a scalar"),
    ({"max_new_tokens": 2, "top_k": 0}, r"^top_k: must be None or an integer in \[1, "
                                        r"vocab_size=19\], got 0"),
    ({"max_new_tokens": 2, "top_k": 20}, "^top_k: "),
    ({"max_new_tokens": 2, "top_k": 2.0}, "^top_k: "),
])
def test_generate_bad_inputs(params, prompts, kwargs, message):
    prompt, mask = prompts
    with pytest.raises(ValueError, match=message):
        LM.generate(params, prompt, mask, jax.random.key(0), **kwargs)
    with pytest.raises(ValueError, match=message):  # raised at trace time under jit too
        jax.jit(lambda p: LM.generate(p, prompt, mask, jax.random.key(0), **kwargs))(params)


def test_lengths_beyond_the_context_are_rejected(params, prompts):
    long = jnp.ones((2, 17), jnp.int32)
    with pytest.raises(ValueError, match="^prompt: length 17 exceeds context_length 16$"):
        LM.generate(params, long, long, jax.random.key(0), max_new_tokens=1)
    with pytest.raises(ValueError, match="^prompt: length 17 exceeds context_length 16$"):
        LM.prefill(params, long, long)
    with pytest.raises(ValueError, match="^tokens: length 17 exceeds context_length 16$"):
        LM.logits(params, long, long)
    prompt, mask = prompts
    completion = jnp.ones((len(PROMPTS), 9), jnp.int32)
    with pytest.raises(ValueError, match=r"^completion: prompt length 8 \+ completion length "
                                         "9 exceeds context_length 16$"):
        LM.completion_log_probs(params, prompt, mask, completion, completion)
