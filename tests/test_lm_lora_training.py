"""The LM trainer's LoRA mode: only adapters train, the base is the frozen KL reference,
and the adapters' gradients are the chain rule of the full model's."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.config import ConfigError
from rljax.policies.lora import init_lora
from rljax.training.lm import (
    LMDecoderConfig,
    LMGRPOConfig,
    LMPPOConfig,
    LMTrainConfig,
    arithmetic_task,
    make_lm_trainer,
)

CONFIG = LMTrainConfig(width=16, num_layers=1, num_heads=2, sft_steps=0, sft_batch=8,
                       rl_steps=2, steps_per_chunk=2, prompts_per_step=2, group_size=4,
                       eval_prompts=4, kl_beta=0.04, reward_format=1.0,
                       learning_rate=3e-2)
LORA = LMDecoderConfig(lora_rank=2, lora_alpha=4.0, lora_targets="all")


def _trainer(algorithm=None, decoder=LORA):
    return make_lm_trainer(CONFIG, algorithm, decoder,
                           task=arithmetic_task(CONFIG, (1,)))


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def test_grpo_trains_only_the_adapters_on_a_frozen_base():
    """GRPO in LoRA mode, one jitted init: ``params`` and Adam's state hold only the
    adapters (every projection of the layer) and the merged policy starts as the base (B =
    0). With a non-zero B, the adapters' gradients on a GRPO batch are the full
    transform's gradient ``G`` of each adapted kernel mapped through ``W' = W + s A B``
    (``dA = s G B^T``, ``dB = s A^T G``), and one RL step moves the adapters and the
    merged policy while the reference (the base) stays bitwise."""
    trainer = _trainer()
    assert trainer.lora is not None and trainer.lora.scale == 2.0
    state = jax.jit(trainer.init)(jax.random.key(0))
    adapters = state.params
    assert set(adapters["layers_0"]["self_attn"]) == {"q_proj", "k_proj", "v_proj", "o_proj"}
    assert set(adapters["layers_0"]["mlp"]) == {"gate_proj", "up_proj", "down_proj"}
    # Adam's moments mirror the adapters only: no leaf of the base's size
    adapter_shapes = sorted(x.shape for x in jax.tree_util.tree_leaves(adapters))
    moments = [x.shape for x in jax.tree_util.tree_leaves(state.opt_state) if x.ndim == 2]
    assert sorted(moments) == sorted(adapter_shapes * 2)
    tokens = jnp.asarray([[1, 4, 5, 6, 7]])

    @jax.jit
    def logits(state):
        return (trainer.policy.logits(trainer.current_policy(state), tokens, tokens > 0),
                trainer.policy.logits(state.reference, tokens, tokens > 0))

    adapted, base = logits(state)
    np.testing.assert_allclose(adapted, base, rtol=1e-6, atol=1e-7)  # B = 0: the base

    key = jax.random.key(2)
    state = state.replace(params=jax.tree_util.tree_map(
        lambda x: x + 0.1 * jax.random.normal(key, x.shape), adapters))
    full = dataclasses.replace(trainer, lora=None)

    @jax.jit
    def grads(state):
        _, problem_key, sample_key, update_key = jax.random.split(state.key, 4)
        batch, _, _ = trainer.grpo_batch(state, problem_key, sample_key)
        lora_grads = trainer.grpo_transform(state.reference).update(
            state.params, (), batch, update_key)[0]
        full_grads = full.grpo_transform(state.reference).update(
            trainer.current_policy(state), (), batch, update_key)[0]
        return lora_grads, full_grads

    lora_grads, full_grads = grads(state)
    s = trainer.lora.scale
    checked = 0
    for layer, blocks in state.params.items():
        for block, projections in blocks.items():
            for proj, ab in projections.items():
                g = np.asarray(full_grads["params"][layer][block][proj]["kernel"], np.float64)
                a, b = np.asarray(ab["a"], np.float64), np.asarray(ab["b"], np.float64)
                got = lora_grads[layer][block][proj]
                np.testing.assert_allclose(got["a"], s * g @ b.T, rtol=2e-3, atol=1e-6)
                np.testing.assert_allclose(got["b"], s * a.T @ g, rtol=2e-3, atol=1e-6)
                checked += 1
    assert checked == 7
    assert any(np.abs(np.asarray(x)).max() > 0 for x in jax.tree_util.tree_leaves(lora_grads))

    new, metrics = jax.jit(trainer.rl_step)(state)
    assert np.isfinite(float(metrics["loss"]))
    for x, y in zip(_leaves(new.reference), _leaves(state.reference), strict=True):
        np.testing.assert_array_equal(x, y)
    assert any(not np.array_equal(x, y) for x, y in zip(_leaves(new.params),
                                                        _leaves(state.params), strict=True))
    before, _ = logits(state)
    after, _ = logits(new)
    assert np.abs(np.asarray(after - before)).max() > 1e-5  # the adapted policy moved


def test_ppo_trains_policy_adapters_and_the_value_model():
    """One jitted RL step in LoRA mode (PPO): the policy part is adapters (the value model
    trains in full), they move, and the base stays bitwise."""
    trainer = _trainer(LMPPOConfig())
    state = jax.jit(trainer.init)(jax.random.key(3))
    assert set(state.params["policy"]) == {"layers_0"}
    assert "lm_head" in state.params["value"]["params"]
    new, metrics = jax.jit(trainer.rl_step)(state)
    assert np.all(np.isfinite(np.asarray(metrics["loss"])))
    for x, y in zip(_leaves(new.reference), _leaves(state.reference), strict=True):
        np.testing.assert_array_equal(x, y)
    moved = [not np.array_equal(x, y) for x, y in zip(
        _leaves(new.params["policy"]), _leaves(state.params["policy"]), strict=True)]
    assert any(moved)


def test_policy_params_merge_the_adapters_into_the_base():
    """``policy_params`` is ``merge_lora`` of the base: a non-zero B changes exactly the
    adapted kernels, by ``s A B``; it refuses to guess the base."""
    trainer = _trainer(LMGRPOConfig(), dataclasses.replace(LORA, lora_targets="attention"))
    base = trainer.policy.init(jax.random.key(4))
    adapters = init_lora(jax.random.key(5), base, trainer.lora)
    adapters = jax.tree_util.tree_map(lambda x: x + 0.5, adapters)
    merged = trainer.policy_params(adapters, base)
    ab = adapters["layers_0"]["self_attn"]["q_proj"]
    np.testing.assert_allclose(
        merged["params"]["layers_0"]["self_attn"]["q_proj"]["kernel"],
        base["params"]["layers_0"]["self_attn"]["q_proj"]["kernel"] + 2.0 * ab["a"] @ ab["b"],
        rtol=1e-6)
    np.testing.assert_array_equal(merged["params"]["layers_0"]["mlp"]["up_proj"]["kernel"],
                                  base["params"]["layers_0"]["mlp"]["up_proj"]["kernel"])
    assert jax.tree_util.tree_structure(merged) == jax.tree_util.tree_structure(base)
    with pytest.raises(ValueError, match="^reference: "):
        trainer.policy_params(adapters)


@pytest.mark.parametrize("fields, match", [
    ({"lora_alpha": 8.0}, "^lora_alpha: a LoRA setting, needs lora_rank >= 1"),
    ({"lora_targets": "mlp"}, "^lora_targets: a LoRA setting"),
    ({"lora_rank": 2, "lora_targets": "heads"}, "^lora_targets: "),
    ({"lora_rank": -1}, "^lora_rank: "),
    ({"lora_rank": 2, "lora_alpha": 0.0}, "^lora_alpha: "),
])
def test_lora_fields_are_checked(fields, match):
    with pytest.raises(ConfigError, match=match) as error:
        make_lm_trainer(CONFIG, None, LMDecoderConfig(**fields))
    assert "\n" not in str(error.value)


def test_full_fine_tuning_is_unchanged_without_lora():
    trainer = _trainer(decoder=LMDecoderConfig())
    assert trainer.lora is None
    params = {"params": {"x": jnp.ones(2)}}
    assert trainer.policy_params(params) is params
