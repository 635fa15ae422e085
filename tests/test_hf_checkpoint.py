"""HF-layout checkpoints and tokenizers (rljax.policies.hf_checkpoint).

Every checkpoint here is written into ``tmp_path`` by the test itself; nothing is
downloaded. Three kinds of check:

* round trips through our saver and loader (float32 bitwise, bf16 / fp16 within rounding,
  logits of the decoder equal);
* files built by hand with the exact HF tensor names (``safetensors.numpy.save_file``
  directly, not our saver), whose tensors must land on the right leaves, transposed; the
  sizes are chosen so that no projection is square (a missing transpose cannot pass), and
  the decoder's logits are compared with a numpy forward of HF's Llama / Qwen2 written
  from the HF tensors;
* every refusal is one line naming the file, field or tensor.
"""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import ml_dtypes
import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from rljax.policies import hf_checkpoint as hf
from rljax.policies.decoder import Decoder, DecoderConfig
from rljax.tokenizer import CharTokenizer

# Llama: untied head, grouped-query attention (4 query heads, 2 key/value heads), an explicit
# head_dim of 6 so q [16, 24], k / v [16, 12], o [24, 16], MLP [16, 20] / [20, 16] and the
# head [16, 23] are all non-square.
LLAMA = DecoderConfig(vocab_size=23, hidden_size=16, intermediate_size=20, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=6,
                      max_position_embeddings=32, rope_theta=10000.0, rms_norm_eps=1e-6,
                      tie_word_embeddings=False, attention_bias=False, model_type="llama",
                      initializer_range=0.02, value_head=False)
# Qwen2: q/k/v biases, tied head (no lm_head in the file), one key/value head; head_dim 8
# (not 12 / 2) so q [12, 16], k / v [12, 8] and o [16, 12] are non-square too.
QWEN2 = DecoderConfig(vocab_size=19, hidden_size=12, intermediate_size=28, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                      max_position_embeddings=32, rope_theta=1000000.0, rms_norm_eps=1e-6,
                      tie_word_embeddings=True, attention_bias=True, model_type="qwen2",
                      initializer_range=0.02, value_head=False)
TOKENS = np.array([[1, 5, 9, 3, 17, 2, 0], [4, 4, 8, 15, 6, 11, 12]], np.int32)


def _random_params(config: DecoderConfig, seed: int = 0):
    """Decoder params with every leaf random (norm scales and biases too, so a mix-up of any
    two leaves changes the values)."""
    params = Decoder(config).init(jax.random.key(seed))
    leaves, treedef = jax.tree.flatten(params)
    rng = np.random.default_rng(seed)
    leaves = [rng.normal(size=np.shape(leaf)).astype(np.float32) for leaf in leaves]
    return jax.tree.unflatten(treedef, leaves)


def _assert_trees_equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype == np.float32
        assert x.shape == y.shape
        np.testing.assert_array_equal(x, y)


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


def _logits(config, params):
    return np.asarray(Decoder(config).apply(params, TOKENS))


# ----------------------------------------------------------------------------- a numpy HF


def _hf_reference_logits(hf_config: dict, tensors: dict, tokens: np.ndarray) -> np.ndarray:
    """HF's LlamaForCausalLM / Qwen2ForCausalLM forward in float64 numpy, from HF tensors."""
    t = {name: np.asarray(value, np.float64) for name, value in tensors.items()}
    width, heads = hf_config["hidden_size"], hf_config["num_attention_heads"]
    kv_heads = hf_config["num_key_value_heads"]
    head_dim = hf_config.get("head_dim") or width // heads
    eps, theta = hf_config["rms_norm_eps"], hf_config["rope_theta"]
    batch, length = tokens.shape

    def rms_norm(x, weight):
        return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * weight

    def linear(x, name, bias=False):
        y = x @ t[f"{name}.weight"].T
        return y + t[f"{name}.bias"] if bias else y

    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2) / head_dim)
    angles = np.arange(length)[:, None] * inv_freq[None]
    angles = np.concatenate([angles, angles], -1)[None, :, None]  # [1, T, 1, Dh]

    def rope(x):  # HF's rotate_half convention
        half = head_dim // 2
        rotated = np.concatenate([-x[..., half:], x[..., :half]], -1)
        return x * np.cos(angles) + rotated * np.sin(angles)

    bias = hf_config["model_type"] == "qwen2"
    x = t["model.embed_tokens.weight"][tokens]
    causal = np.tril(np.ones((length, length), bool))
    for i in range(hf_config["num_hidden_layers"]):
        layer = f"model.layers.{i}"
        h = rms_norm(x, t[f"{layer}.input_layernorm.weight"])
        q = linear(h, f"{layer}.self_attn.q_proj", bias).reshape(batch, length, heads, head_dim)
        k = linear(h, f"{layer}.self_attn.k_proj", bias).reshape(batch, length, kv_heads,
                                                                 head_dim)
        v = linear(h, f"{layer}.self_attn.v_proj", bias).reshape(batch, length, kv_heads,
                                                                 head_dim)
        q, k = rope(q), rope(k)
        k = np.repeat(k, heads // kv_heads, axis=2)
        v = np.repeat(v, heads // kv_heads, axis=2)
        scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(head_dim)
        scores = np.where(causal, scores, -np.inf)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        attended = np.einsum("bhqk,bkhd->bqhd", weights, v).reshape(batch, length, -1)
        x = x + linear(attended, f"{layer}.self_attn.o_proj")
        h = rms_norm(x, t[f"{layer}.post_attention_layernorm.weight"])
        gate = linear(h, f"{layer}.mlp.gate_proj")
        x = x + linear(gate / (1 + np.exp(-gate)) * linear(h, f"{layer}.mlp.up_proj"),
                       f"{layer}.mlp.down_proj")
    x = rms_norm(x, t["model.norm.weight"])
    head = (t["model.embed_tokens.weight"] if hf_config.get("tie_word_embeddings")
            else t["lm_head.weight"])
    return x @ head.T


# ----------------------------------------------------------------------------- hand-built


def _hf_config_dict(config: DecoderConfig) -> dict:
    """config.json as transformers writes it (extra informational fields included)."""
    head_dim = config.head_dim or config.hidden_size // config.num_attention_heads
    common = {
        "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_key_value_heads,
        "max_position_embeddings": config.max_position_embeddings,
        "rope_theta": config.rope_theta, "rms_norm_eps": config.rms_norm_eps,
        "tie_word_embeddings": config.tie_word_embeddings, "hidden_act": "silu",
        "initializer_range": 0.02, "rope_scaling": None, "attention_dropout": 0.0,
        "bos_token_id": 1, "eos_token_id": 2, "use_cache": True,
        "transformers_version": "4.45.0", "torch_dtype": "bfloat16", "head_dim": head_dim,
    }
    if config.model_type == "llama":
        return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                "attention_bias": False, "mlp_bias": False,
                "pretraining_tp": 1, **common}
    return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
            "use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 21,
            **common}


def _hand_built_tensors(config: DecoderConfig, seed: int = 1) -> dict[str, np.ndarray]:
    """HF tensors written out name by name with HF's [out, in] shapes (not via the module)."""
    rng = np.random.default_rng(seed)
    width, vocab, ffn = config.hidden_size, config.vocab_size, config.intermediate_size
    head_dim = config.head_dim or width // config.num_attention_heads
    q_dim, kv_dim = config.num_attention_heads * head_dim, config.num_key_value_heads * head_dim

    def draw(*shape):
        return rng.normal(size=shape).astype(np.float32)

    tensors = {"model.embed_tokens.weight": draw(vocab, width),
               "model.norm.weight": 1 + 0.1 * draw(width)}
    for i in range(config.num_hidden_layers):
        layer = f"model.layers.{i}"
        tensors.update({
            f"{layer}.input_layernorm.weight": 1 + 0.1 * draw(width),
            f"{layer}.self_attn.q_proj.weight": 0.3 * draw(q_dim, width),
            f"{layer}.self_attn.k_proj.weight": 0.3 * draw(kv_dim, width),
            f"{layer}.self_attn.v_proj.weight": 0.3 * draw(kv_dim, width),
            f"{layer}.self_attn.o_proj.weight": 0.3 * draw(width, q_dim),
            f"{layer}.post_attention_layernorm.weight": 1 + 0.1 * draw(width),
            f"{layer}.mlp.gate_proj.weight": 0.3 * draw(ffn, width),
            f"{layer}.mlp.up_proj.weight": 0.3 * draw(ffn, width),
            f"{layer}.mlp.down_proj.weight": 0.3 * draw(width, ffn),
        })
        if config.attention_bias:
            tensors.update({f"{layer}.self_attn.q_proj.bias": draw(q_dim),
                            f"{layer}.self_attn.k_proj.bias": draw(kv_dim),
                            f"{layer}.self_attn.v_proj.bias": draw(kv_dim)})
    if not config.tie_word_embeddings:
        tensors["lm_head.weight"] = 0.3 * draw(vocab, width)
    return tensors


def _write_hand_built(directory, config: DecoderConfig, tensors=None, hf_config=None):
    directory.mkdir(parents=True, exist_ok=True)
    hf_config = _hf_config_dict(config) if hf_config is None else hf_config
    tensors = _hand_built_tensors(config) if tensors is None else tensors
    (directory / "config.json").write_text(json.dumps(hf_config))
    save_file(tensors, directory / "model.safetensors")
    return hf_config, tensors


def _expected_leaves(config: DecoderConfig, tensors: dict) -> dict:
    """The decoder's tree written out leaf by leaf from the HF names."""
    tree = {"embed_tokens": {"embedding": tensors["model.embed_tokens.weight"]},
            "norm": {"scale": tensors["model.norm.weight"]}}
    for i in range(config.num_hidden_layers):
        layer = f"model.layers.{i}"
        attention = {name: {"kernel": tensors[f"{layer}.self_attn.{name}.weight"].T}
                     for name in ("q_proj", "k_proj", "v_proj", "o_proj")}
        if config.attention_bias:
            for name in ("q_proj", "k_proj", "v_proj"):
                attention[name]["bias"] = tensors[f"{layer}.self_attn.{name}.bias"]
        tree[f"layers_{i}"] = {
            "input_layernorm": {"scale": tensors[f"{layer}.input_layernorm.weight"]},
            "self_attn": attention,
            "post_attention_layernorm": {
                "scale": tensors[f"{layer}.post_attention_layernorm.weight"]},
            "mlp": {name: {"kernel": tensors[f"{layer}.mlp.{name}.weight"].T}
                    for name in ("gate_proj", "up_proj", "down_proj")},
        }
    if not config.tie_word_embeddings:
        tree["lm_head"] = {"kernel": tensors["lm_head.weight"].T}
    return {"params": tree}


@pytest.mark.parametrize("config", [LLAMA, QWEN2], ids=["llama", "qwen2"])
def test_hand_built_hf_files_load_to_the_right_leaves(tmp_path, config):
    hf_config, tensors = _write_hand_built(tmp_path / "ckpt", config)
    model, params = hf.load_hf_checkpoint(tmp_path / "ckpt")
    assert model.config == config
    _assert_trees_equal(params, _expected_leaves(config, tensors))
    # The decoder on the loaded params computes HF's forward (written here from HF names).
    np.testing.assert_allclose(_logits(config, params),
                               _hf_reference_logits(hf_config, tensors, TOKENS),
                               rtol=1e-4, atol=1e-4)


def test_no_matrix_of_the_test_configs_is_square():
    """So a dropped transpose is a shape error, not a silent mix-up."""
    for config in (LLAMA, QWEN2):
        for name, shape in hf.hf_tensor_shapes(config).items():
            assert len(shape) == 1 or shape[0] != shape[1], name


def test_head_dim_defaults_to_width_over_heads():
    hf_config = _hf_config_dict(LLAMA)
    del hf_config["head_dim"]
    assert hf.config_from_hf(hf_config).head_dim == 16 // 4
    assert hf.config_from_hf(dict(hf_config, head_dim=None)).head_dim == 16 // 4


def test_a_transposed_tensor_is_refused_naming_it(tmp_path):
    tensors = _hand_built_tensors(LLAMA)
    name = "model.layers.1.mlp.down_proj.weight"
    tensors[name] = np.ascontiguousarray(tensors[name].T)
    _write_hand_built(tmp_path / "ckpt", LLAMA, tensors)
    with pytest.raises(ValueError) as error:
        hf.load_hf_checkpoint(tmp_path / "ckpt")
    message = _one_line(error)
    assert name in message and "[20, 16]" in message and "[16, 20]" in message


def test_a_tied_checkpoint_may_carry_lm_head(tmp_path):
    """HF tied checkpoints usually omit lm_head.weight; one that has it loads the same."""
    hf_config, tensors = _write_hand_built(tmp_path / "a", QWEN2)
    with_head = dict(tensors, **{"lm_head.weight": tensors["model.embed_tokens.weight"]})
    _write_hand_built(tmp_path / "b", QWEN2, with_head, hf_config)
    _, without = hf.load_hf_checkpoint(tmp_path / "a")
    _, with_ = hf.load_hf_checkpoint(tmp_path / "b")
    _assert_trees_equal(without, with_)
    assert "lm_head" not in with_["params"]


# ----------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("config", [LLAMA, QWEN2], ids=["llama", "qwen2"])
def test_round_trip_is_bitwise_and_gives_the_same_logits(tmp_path, config):
    params = _random_params(config)
    model = Decoder(config)
    written = hf.save_hf_checkpoint(tmp_path / "ckpt", model, params)
    assert written == tmp_path / "ckpt"
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]  # no temp directory left beside it
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["config.json", "model.safetensors"]
    hf_config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert hf_config["architectures"] == [hf.ARCHITECTURES[config.model_type]]
    assert hf_config["model_type"] == config.model_type
    assert hf_config["torch_dtype"] == "float32"
    names = set(load_file(tmp_path / "ckpt" / "model.safetensors"))
    assert names == set(hf.hf_tensor_shapes(config))
    assert ("lm_head.weight" in names) == (not config.tie_word_embeddings)
    assert any(name.endswith("k_proj.bias") for name in names) == config.attention_bias

    loaded_model, loaded = hf.load_hf_checkpoint(tmp_path / "ckpt")
    assert loaded_model.config == config
    _assert_trees_equal(params, loaded)
    np.testing.assert_array_equal(_logits(config, loaded), _logits(config, params))
    # And what we wrote is what HF's forward computes from the file.
    tensors = load_file(tmp_path / "ckpt" / "model.safetensors")
    np.testing.assert_allclose(_logits(config, loaded),
                               _hf_reference_logits(hf_config, tensors, TOKENS),
                               rtol=1e-4, atol=1e-4)


def test_saved_tensors_are_the_kernels_transposed(tmp_path):
    params = _random_params(LLAMA)
    hf.save_hf_checkpoint(tmp_path / "ckpt", LLAMA, params)
    tensors = load_file(tmp_path / "ckpt" / "model.safetensors")
    _assert_trees_equal(_expected_leaves(LLAMA, tensors), params)


def test_params_with_or_without_the_outer_key(tmp_path):
    params = _random_params(QWEN2)
    hf.save_hf_checkpoint(tmp_path / "inner", QWEN2, params["params"])
    _, loaded = hf.load_hf_checkpoint(tmp_path / "inner")
    _assert_trees_equal(params, loaded)
    with pytest.raises(ValueError) as error:
        hf.save_hf_checkpoint(tmp_path / "bad", QWEN2, {**params, "extra": {}})
    assert "ambiguous" in _one_line(error)
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("dtype,stored,numpy_dtype", [
    ("bfloat16", "BF16", ml_dtypes.bfloat16), ("float16", "F16", np.float16)])
def test_half_precision_round_trip_within_rounding(tmp_path, dtype, stored, numpy_dtype):
    params = _random_params(LLAMA)
    hf.save_hf_checkpoint(tmp_path / "ckpt", LLAMA, params, dtype=dtype)
    assert json.loads((tmp_path / "ckpt" / "config.json").read_text())["torch_dtype"] == dtype
    with safe_open(tmp_path / "ckpt" / "model.safetensors", framework="np") as file:
        assert {file.get_slice(name).get_dtype() for name in file.keys()} == {stored}
    _, loaded = hf.load_hf_checkpoint(tmp_path / "ckpt")
    relative = 2.0 ** -8 if dtype == "bfloat16" else 2.0 ** -11  # half an ulp
    for original, back in zip(jax.tree.leaves(params), jax.tree.leaves(loaded), strict=True):
        original, back = np.asarray(original), np.asarray(back)
        assert back.dtype == np.float32
        np.testing.assert_array_equal(back, original.astype(numpy_dtype).astype(np.float32))
        assert np.all(np.abs(back - original) <= relative * np.abs(original))


def test_sharded_checkpoint_loads(tmp_path):
    params = _random_params(LLAMA)
    hf.save_hf_checkpoint(tmp_path / "single", LLAMA, params)
    tensors = load_file(tmp_path / "single" / "model.safetensors")
    directory = tmp_path / "sharded"
    directory.mkdir()
    (directory / "config.json").write_bytes((tmp_path / "single" / "config.json").read_bytes())
    names = sorted(tensors)
    shards = [names[0::3], names[1::3], names[2::3]]
    weight_map = {}
    for k, shard in enumerate(shards, start=1):
        file = f"model-{k:05d}-of-00003.safetensors"
        save_file({name: tensors[name] for name in shard}, directory / file)
        weight_map.update({name: file for name in shard})
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    _, loaded = hf.load_hf_checkpoint(directory)
    _assert_trees_equal(params, loaded)

    os.remove(directory / "model-00002-of-00003.safetensors")
    with pytest.raises(FileNotFoundError) as error:
        hf.load_hf_checkpoint(directory)
    assert "model-00002-of-00003.safetensors" in _one_line(error)


# ----------------------------------------------------------------------------- refusals


def test_missing_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        hf.load_hf_checkpoint(tmp_path / "nowhere")
    assert "nowhere" in _one_line(error)
    _write_hand_built(tmp_path / "ckpt", LLAMA)
    os.remove(tmp_path / "ckpt" / "model.safetensors")
    with pytest.raises(FileNotFoundError) as error:
        hf.load_hf_checkpoint(tmp_path / "ckpt")
    assert "model.safetensors" in _one_line(error)
    os.remove(tmp_path / "ckpt" / "config.json")
    with pytest.raises(FileNotFoundError) as error:
        hf.load_hf_checkpoint(tmp_path / "ckpt")
    assert "config.json" in _one_line(error)


def test_missing_and_unexpected_tensors_are_named(tmp_path):
    tensors = _hand_built_tensors(LLAMA)
    missing = dict(tensors)
    del missing["model.layers.1.self_attn.v_proj.weight"]
    _write_hand_built(tmp_path / "missing", LLAMA, missing)
    with pytest.raises(ValueError) as error:
        hf.load_hf_checkpoint(tmp_path / "missing")
    message = _one_line(error)
    assert "missing tensor model.layers.1.self_attn.v_proj.weight" in message

    extra = dict(tensors, **{"model.layers.0.self_attn.o_proj.bias": np.zeros(16, np.float32)})
    _write_hand_built(tmp_path / "extra", LLAMA, extra)
    with pytest.raises(ValueError) as error:
        hf.load_hf_checkpoint(tmp_path / "extra")
    assert "unexpected tensor model.layers.0.self_attn.o_proj.bias" in _one_line(error)

    # An untied config whose file lacks the head (a tied file under an untied config.json).
    no_head = dict(tensors)
    del no_head["lm_head.weight"]
    _write_hand_built(tmp_path / "no_head", LLAMA, no_head)
    with pytest.raises(ValueError) as error:
        hf.load_hf_checkpoint(tmp_path / "no_head")
    assert "missing tensor lm_head.weight" in _one_line(error)


def test_a_shape_that_does_not_match_the_config_names_the_tensor(tmp_path):
    hf_config = dict(_hf_config_dict(LLAMA), vocab_size=30)  # the file's embedding has 23
    _write_hand_built(tmp_path / "ckpt", LLAMA, hf_config=hf_config)
    with pytest.raises(ValueError) as error:
        hf.load_hf_checkpoint(tmp_path / "ckpt")
    message = _one_line(error)
    assert "model.embed_tokens.weight" in message
    assert "[23, 16]" in message and "[30, 16]" in message


def test_an_unsupported_dtype_is_refused(tmp_path):
    tensors = _hand_built_tensors(LLAMA)
    tensors["model.norm.weight"] = tensors["model.norm.weight"].astype(np.float64)
    _write_hand_built(tmp_path / "ckpt", LLAMA, tensors)
    with pytest.raises(ValueError) as error:
        hf.load_hf_checkpoint(tmp_path / "ckpt")
    assert "model.norm.weight" in _one_line(error) and "F64" in str(error.value)


@pytest.mark.parametrize("change,field", [
    ({"model_type": "mistral", "architectures": None}, "model_type"),
    ({"architectures": ["MistralForCausalLM"]}, "architectures"),
    ({"model_type": "qwen2"}, "model_type"),  # disagrees with LlamaForCausalLM
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_scaling"),
    ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling"),
    ({"use_sliding_window": True}, "use_sliding_window"),
    ({"mlp_bias": True}, "mlp_bias"),
    ({"attention_bias": True}, "attention_bias"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"hidden_size": "16"}, "hidden_size"),
    ({"num_hidden_layers": 0}, "num_hidden_layers"),
    ({"vocab_size": None}, "vocab_size"),
    ({"rope_theta": -1.0}, "rope_theta"),
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings"),
])
def test_unsupported_or_bad_config_fields_are_named(tmp_path, change, field):
    hf_config = _hf_config_dict(LLAMA)
    for key, value in change.items():
        if value is None:
            del hf_config[key]
        else:
            hf_config[key] = value
    _write_hand_built(tmp_path / "ckpt", LLAMA, hf_config=hf_config)
    with pytest.raises(ValueError) as error:
        hf.load_hf_checkpoint(tmp_path / "ckpt")
    message = _one_line(error)
    assert message.startswith("config.json: ") and field in message


def test_plain_rope_spelled_out_is_accepted():
    hf_config = dict(_hf_config_dict(QWEN2), rope_scaling={"rope_type": "default"})
    assert hf.config_from_hf(hf_config) == QWEN2


def test_overwrite_is_refused_and_the_existing_files_are_untouched(tmp_path):
    directory = tmp_path / "ckpt"
    hf.save_hf_checkpoint(directory, LLAMA, _random_params(LLAMA, seed=0))
    before = {name: (directory / name).read_bytes() for name in os.listdir(directory)}
    stamps = {name: os.stat(directory / name).st_mtime_ns for name in before}
    with pytest.raises(ValueError) as error:
        hf.save_hf_checkpoint(directory, LLAMA, _random_params(LLAMA, seed=1))
    message = _one_line(error)
    assert str(directory) in message and "overwrite=True" in message
    assert {name: (directory / name).read_bytes() for name in os.listdir(directory)} == before
    assert {name: os.stat(directory / name).st_mtime_ns for name in before} == stamps
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]

    # overwrite=True replaces the whole directory (a stale file does not survive).
    (directory / "stale.txt").write_text("old")
    new_params = _random_params(LLAMA, seed=1)
    hf.save_hf_checkpoint(directory, LLAMA, new_params, overwrite=True)
    assert sorted(os.listdir(directory)) == ["config.json", "model.safetensors"]
    _assert_trees_equal(new_params, hf.load_hf_checkpoint(directory)[1])
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]

    # An existing empty directory is fine without overwrite.
    (tmp_path / "empty").mkdir()
    hf.save_hf_checkpoint(tmp_path / "empty", LLAMA, new_params)


def test_a_failed_write_leaves_nothing_behind(tmp_path, monkeypatch):
    import safetensors.numpy

    def failing_save_file(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.numpy, "save_file", failing_save_file)
    with pytest.raises(OSError):
        hf.save_hf_checkpoint(tmp_path / "ckpt", LLAMA, _random_params(LLAMA))
    assert os.listdir(tmp_path) == []  # neither the checkpoint nor a temp directory

    # With overwrite=True the old checkpoint survives a failed write.
    monkeypatch.undo()
    params = _random_params(LLAMA)
    hf.save_hf_checkpoint(tmp_path / "ckpt", LLAMA, params)
    monkeypatch.setattr(safetensors.numpy, "save_file", failing_save_file)
    with pytest.raises(OSError):
        hf.save_hf_checkpoint(tmp_path / "ckpt", LLAMA, _random_params(LLAMA, seed=3),
                              overwrite=True)
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]
    _assert_trees_equal(params, hf.load_hf_checkpoint(tmp_path / "ckpt")[1])


def test_save_refuses_what_hf_cannot_express(tmp_path):
    value_model = dataclasses.replace(LLAMA, value_head=True)
    with pytest.raises(ValueError) as error:
        hf.save_hf_checkpoint(tmp_path / "v", value_model, _random_params(LLAMA))
    assert "value_head" in _one_line(error)
    with pytest.raises(ValueError) as error:
        hf.save_hf_checkpoint(tmp_path / "d", LLAMA, _random_params(LLAMA), dtype="int8")
    assert "dtype" in _one_line(error)
    params = _random_params(LLAMA)
    del params["params"]["layers_1"]["mlp"]["up_proj"]
    with pytest.raises(ValueError) as error:
        hf.save_hf_checkpoint(tmp_path / "m", LLAMA, params)
    assert "layers_1/mlp/up_proj/kernel" in _one_line(error)
    params = _random_params(LLAMA)  # untied params under a tied config: lm_head is extra
    tied = dataclasses.replace(LLAMA, tie_word_embeddings=True)
    with pytest.raises(ValueError) as error:
        hf.save_hf_checkpoint(tmp_path / "t", tied, params)
    assert "lm_head/kernel" in _one_line(error)
    assert os.listdir(tmp_path) == []


# ----------------------------------------------------------------------------- tokenizers


def test_char_tokenizer_exports_as_a_complete_hf_directory(tmp_path):
    char = CharTokenizer()
    params = _random_params(QWEN2)  # vocab_size 19 == CharTokenizer().vocab_size
    hf.save_hf_checkpoint(tmp_path / "ckpt", QWEN2, params, tokenizer=char)
    assert sorted(os.listdir(tmp_path / "ckpt")) == [
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    hf_config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert (hf_config["pad_token_id"], hf_config["bos_token_id"],
            hf_config["eos_token_id"]) == (0, 1, 2)
    tokenizer = hf.load_hf_tokenizer(tmp_path / "ckpt")
    assert (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id) == (0, 1, 2)
    assert tokenizer.vocab_size == char.vocab_size
    hf.check_tokenizer_matches(tokenizer, hf.load_hf_checkpoint(tmp_path / "ckpt")[0])
    for text in ["12+34=46", "x*3-1=8;", "", "0"]:
        ids = tokenizer.encode(text, add_bos=True, add_eos=True)
        assert ids.dtype == np.int32
        np.testing.assert_array_equal(ids, char.encode(text, add_bos=True, add_eos=True))
        padded = np.concatenate([[0, 0], ids, [0, 5]])
        assert tokenizer.decode(padded) == char.decode(padded) == text
    with pytest.raises(ValueError) as error:
        tokenizer.encode("12a")
    _one_line(error)


def test_a_hand_built_hf_tokenizer_and_its_special_tokens(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "hello": 3, "world": 4, "!": 5}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens(["<s>", "</s>"])
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": {"__type": "AddedToken", "content": "<s>", "special": True},
        "eos_token": "</s>", "pad_token": None}))
    loaded = hf.load_hf_tokenizer(tmp_path)
    assert (loaded.bos_id, loaded.eos_id, loaded.pad_id) == (1, 2, None)
    np.testing.assert_array_equal(loaded.encode("hello world !", add_bos=True),
                                  [1, 3, 4, 5])
    assert loaded.decode([1, 3, 4, 2, 5]) == "hello world"
    with pytest.raises(ValueError) as error:
        loaded.decode([6])
    _one_line(error)

    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|end|>"}))
    with pytest.raises(ValueError) as error:
        hf.load_hf_tokenizer(tmp_path)
    assert "eos_token" in _one_line(error) and "<|end|>" in str(error.value)

    os.remove(tmp_path / "tokenizer.json")
    with pytest.raises(FileNotFoundError) as error:
        hf.load_hf_tokenizer(tmp_path)
    assert "tokenizer.json" in _one_line(error)


def test_a_tokenizer_larger_than_the_vocabulary_is_refused(tmp_path):
    big = CharTokenizer("0123456789+-*=x;abcdef")  # 25 tokens > QWEN2's 19
    with pytest.raises(ValueError) as error:
        hf.check_tokenizer_matches(big, QWEN2)
    message = _one_line(error)
    assert "25" in message and "19" in message
    with pytest.raises(ValueError) as error:
        hf.save_hf_checkpoint(tmp_path / "ckpt", QWEN2, _random_params(QWEN2), tokenizer=big)
    assert "vocab_size" in _one_line(error)
    assert os.listdir(tmp_path) == []
    hf.check_tokenizer_matches(CharTokenizer("0123"), QWEN2)  # smaller is fine
    hf.save_hf_tokenizer(tmp_path / "tok", big)
    assert hf.load_hf_tokenizer(tmp_path / "tok").vocab_size == 25
    with pytest.raises(ValueError) as error:
        hf.save_hf_tokenizer(tmp_path / "tok", big)
    assert "overwrite=True" in _one_line(error)
