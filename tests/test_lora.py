"""LoRA adapters (rljax.policies.lora): the merge against its closed form in numpy, the
start at the base model, gradients that reach only the adapters (chain rule written out),
the PEFT layout on disk and back, init under jit and vmap over seeds, and one-line errors."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

from rljax.policies import Decoder, DecoderConfig
from rljax.policies.lora import (
    LORA_TARGETS,
    LoRAConfig,
    adapted_kernels,
    init_lora,
    load_peft_adapters,
    merge_lora,
    num_adapter_parameters,
    save_peft_adapters,
)

CONFIG = DecoderConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=16)
MODEL = Decoder(CONFIG)
LORA = LoRAConfig(rank=4, alpha=8.0, targets=("q_proj", "v_proj", "down_proj"))


@pytest.fixture(scope="module")
def base():
    return jax.jit(MODEL.init)(jax.random.key(0))


def random_adapters(base, config, seed=1):
    """Adapters with nonzero B (init's B is zero, under which A's gradient vanishes)."""
    adapters = init_lora(jax.random.key(seed), base, config)
    return jax.tree_util.tree_map_with_path(
        lambda path, x: (0.1 * jax.random.normal(jax.random.key(seed + 7), x.shape)
                         if jax.tree_util.keystr(path).endswith("['b']") else x), adapters)


def test_init_starts_at_the_base_model(base):
    adapters = init_lora(jax.random.key(1), base, LORA)
    kernels = adapted_kernels(base, LORA)
    assert len(kernels) == 2 * 3
    for (layer, block, proj), kernel in kernels.items():
        ab = adapters[layer][block][proj]
        assert ab["a"].shape == (kernel.shape[0], 4) and ab["b"].shape == (4, kernel.shape[1])
        assert np.all(np.asarray(ab["b"]) == 0)
        assert np.abs(np.asarray(ab["a"])).max() <= (1 / kernel.shape[0]) ** 0.5
    merged = merge_lora(base, adapters, LORA)
    for a, b in zip(jax.tree_util.tree_leaves(merged), jax.tree_util.tree_leaves(base),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    assert num_adapter_parameters(adapters) == sum(
        4 * (k.shape[0] + k.shape[1]) for k in kernels.values())


def test_merge_is_w_plus_scaled_ab(base):
    adapters = random_adapters(base, LORA)
    merged = jax.jit(lambda p, a: merge_lora(p, a, LORA))(base, adapters)
    inner, merged_inner = base["params"], merged["params"]
    for layer in ("layers_0", "layers_1"):
        for block, proj in (("self_attn", "q_proj"), ("self_attn", "v_proj"),
                            ("mlp", "down_proj")):
            ab = adapters[layer][block][proj]
            expected = (np.asarray(inner[layer][block][proj]["kernel"], np.float64)
                        + 2.0 * np.asarray(ab["a"], np.float64) @ np.asarray(ab["b"], np.float64))
            np.testing.assert_allclose(merged_inner[layer][block][proj]["kernel"], expected,
                                       rtol=1e-5, atol=1e-6)
        # projections outside the targets are the base's, bit for bit
        np.testing.assert_array_equal(merged_inner[layer]["self_attn"]["k_proj"]["kernel"],
                                      inner[layer]["self_attn"]["k_proj"]["kernel"])
    np.testing.assert_array_equal(merged_inner["lm_head"]["kernel"],
                                  inner["lm_head"]["kernel"])


def test_gradients_reach_only_the_adapters_by_the_chain_rule(base):
    adapters = random_adapters(base, LORA)
    tokens = jnp.asarray([[1, 5, 6, 7, 8, 9]])
    mask = jnp.ones_like(tokens)

    def loss_of_params(params):
        return jnp.sum(jax.nn.log_softmax(MODEL.logits(params, tokens, mask))[..., 3])

    grads = jax.jit(jax.grad(lambda a: loss_of_params(merge_lora(base, a, LORA))))(adapters)
    kernel_grads = jax.jit(jax.grad(loss_of_params))(merge_lora(base, adapters, LORA))["params"]
    for layer, blocks in adapters.items():
        for block, projections in blocks.items():
            for proj, ab in projections.items():
                g_w = np.asarray(kernel_grads[layer][block][proj]["kernel"], np.float64)
                a, b = np.asarray(ab["a"], np.float64), np.asarray(ab["b"], np.float64)
                np.testing.assert_allclose(grads[layer][block][proj]["a"], 2.0 * g_w @ b.T,
                                           rtol=1e-4, atol=1e-6)
                np.testing.assert_allclose(grads[layer][block][proj]["b"], 2.0 * a.T @ g_w,
                                           rtol=1e-4, atol=1e-6)
                assert np.abs(np.asarray(grads[layer][block][proj]["a"])).max() > 0


def test_peft_layout_round_trip(base, tmp_path):
    adapters = random_adapters(base, LORA)
    path = save_peft_adapters(tmp_path / "adapter", adapters, LORA, base_model="tiny")
    tensors = load_file(str(path / "adapter_model.safetensors"))
    name = "base_model.model.model.layers.1.mlp.down_proj.lora_{}.weight"
    assert tensors[name.format("A")].shape == (48, 4)[::-1]  # [r, in]
    assert tensors[name.format("B")].shape == (32, 4)  # [out, r]
    assert len(tensors) == 2 * 2 * 3
    peft = json.loads((path / "adapter_config.json").read_text())
    assert peft["peft_type"] == "LORA" and peft["r"] == 4 and peft["lora_alpha"] == 8.0
    assert peft["target_modules"] == ["q_proj", "v_proj", "down_proj"]
    loaded, config = load_peft_adapters(path)
    assert config == LORA
    for x, y in zip(jax.tree_util.tree_leaves(loaded), jax.tree_util.tree_leaves(adapters),
                    strict=True):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError, match="path:"):
        save_peft_adapters(path, adapters, LORA)  # not overwritten unasked


def test_init_under_jit_and_vmap_over_seeds(base):
    keys = jax.random.split(jax.random.key(3), 3)
    batched = jax.jit(jax.vmap(lambda k: init_lora(k, base, LORA)))(keys)
    for s in range(3):
        one = init_lora(keys[s], base, LORA)
        for x, y in zip(jax.tree_util.tree_leaves(batched), jax.tree_util.tree_leaves(one),
                        strict=True):
            np.testing.assert_array_equal(x[s], y)


@pytest.mark.parametrize("kwargs,message", [
    ({"rank": 0}, "rank:"), ({"rank": 2.0}, "rank:"), ({"alpha": 0.0}, "alpha:"),
    ({"alpha": float("nan")}, "alpha:"), ({"targets": ()}, "targets:"),
    ({"targets": ("qkv",)}, "targets:"), ({"targets": ("q_proj", "q_proj")}, "targets:"),
])
def test_config_errors_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message) as error:
        LoRAConfig(**kwargs)
    assert "\n" not in str(error.value)
    assert set(LORA_TARGETS) >= set(LoRAConfig().targets)
