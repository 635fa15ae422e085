"""LM training (warm-up, GRPO, PPO), chunked sweeps with checkpoints, and step memory."""

import dataclasses
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.checkpoint import Checkpointer, CheckpointError
from rljax.sweep import ChunkedSweep
from rljax.training.lm import (
    LMGRPOConfig,
    LMPPOConfig,
    LMTrainConfig,
    LMTrainer,
    arithmetic_task,
    make_lm_trainer,
    training_step_memory,
    tree_bytes,
)

TINY = LMTrainConfig(width=16, num_layers=1, num_heads=2, sft_steps=3, sft_batch=8,
                     rl_steps=4, steps_per_chunk=2, prompts_per_step=2, group_size=4,
                     eval_prompts=8)
# the format reward gives this barely warmed-up model groups with signal
STEP_CONFIG = dataclasses.replace(TINY, kl_beta=0.04, reward_format=1.0, sft_steps=20)
ALGORITHMS = {"grpo": LMGRPOConfig(), "ppo": LMPPOConfig()}


def step_trainer(algorithm: str) -> LMTrainer:
    """The trainer of STEP_CONFIG with ``algorithm`` on level 1 (two-digit add/sub)."""
    return make_lm_trainer(STEP_CONFIG, ALGORITHMS[algorithm],
                           task=arithmetic_task(STEP_CONFIG, (1,)))


def _leaves_equal(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("field, value", [
    ("group_size", 1), ("rl_steps", 5), ("mu", 0), ("learning_rate", 0.0),
    ("kl_beta", -1.0), ("max_new_tokens", 0),
])
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"^{field}: ") as error:
        make_lm_trainer(dataclasses.replace(TINY, **{field: value}))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("field, value", [
    ("aggregation", "sum"), ("advantage", "z"), ("kl_estimator", "k4"),
])
def test_grpo_config_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"^{field}: ") as error:
        make_lm_trainer(TINY, LMGRPOConfig(**{field: value}))
    assert "\n" not in str(error.value)


def test_the_algorithm_is_a_config_not_a_name():
    with pytest.raises(ValueError, match="^algorithm: must be an LMGRPOConfig, an "
                                         "LMPPOConfig or an LMSFTConfig, got str$"):
        make_lm_trainer(TINY, "dpo")


def test_training_draws_are_disjoint_from_the_evaluation_set():
    """Warm-up / RL problems come from the training split, the evaluation set from the
    eval split (levels in turn); level 0 cannot be split and is flagged as not held out."""
    config = dataclasses.replace(TINY, eval_prompts=64)
    task = arithmetic_task(config, (0, 1))
    trainer = make_lm_trainer(config, task=task)
    evals = jax.device_get(trainer.eval_problems())
    np.testing.assert_array_equal(evals.level, np.tile([0, 1], 32))
    held_out = np.asarray(trainer.eval_held_out())
    np.testing.assert_array_equal(held_out, evals.level == 1)
    train = jax.jit(jax.vmap(lambda k: trainer.sample_problems(k, 256)))(
        jax.random.split(jax.random.key(0), 8))
    flat = jax.tree_util.tree_map(lambda x: x.reshape(-1, *x.shape[2:]), train)
    assert not np.asarray(trainer.task.is_held_out(flat)).any()
    assert set(np.asarray(flat.level).tolist()) == {0, 1}
    # the evaluation set is one fixed draw: the same for every trainer of the config
    again = make_lm_trainer(config, task=task)
    np.testing.assert_array_equal(again.eval_problems().operands, evals.operands)
    with pytest.raises(ValueError, match="eval_fraction"):
        make_lm_trainer(TINY, task=arithmetic_task(TINY, eval_fraction=1.5))


def test_warm_up_lowers_the_supervised_loss():
    trainer = make_lm_trainer(dataclasses.replace(TINY, sft_steps=30))
    params = trainer.policy.init(jax.random.key(0))
    # jitted: op-by-op, the draw compiles each of its small ops (~8 CPU s)
    problems = jax.jit(trainer.sample_problems, static_argnums=1)(jax.random.key(1), 64)
    loss = jax.jit(trainer.sft_loss)
    before = float(loss(params, problems))
    after = float(loss(jax.jit(trainer.warm_up)(params, jax.random.key(2)), problems))
    assert after < before - 0.3


class NaNRewardTrainer(LMTrainer):
    """Every reward NaN (as from a broken user reward program)."""

    def score(self, problems, completion):
        reward, parts = super().score(problems, completion)
        return jnp.full_like(reward, jnp.nan), parts


# ppo's value-model path also runs in test_lm_trainer_variants; its run here is slow (~15 s)
@pytest.mark.parametrize("algorithm", ["grpo", pytest.param("ppo", marks=pytest.mark.slow)])
def test_rl_step_trains_on_rewards_and_never_on_nan_rewards(algorithm):
    config = STEP_CONFIG
    trainer = step_trainer(algorithm)
    state = jax.jit(trainer.init)(jax.random.key(1))  # a seed whose groups have signal
    new, metrics = jax.jit(trainer.rl_step)(state)
    assert int(new.step) == 1
    assert float(metrics["zero_signal_fraction"]) < 1.0
    for name in ("reward", "accuracy", "format", "process", "length", "zero_signal_fraction",
                 "kl", "clip_fraction", "loss"):
        assert np.isfinite(float(metrics[name])), name
    assert int(metrics["nan_rewards"]) == 0
    moved = jax.tree_util.tree_map(lambda a, b: bool(jnp.any(a != b)), state.params, new.params)
    assert any(jax.tree_util.tree_leaves(moved))
    _leaves_equal(state.reference, new.reference)  # the reference stays frozen
    # NaN rewards: counted, and the update leaves the policy where it was
    nan_trainer = NaNRewardTrainer(**vars(trainer))
    new, metrics = jax.jit(nan_trainer.rl_step)(state)
    assert int(metrics["nan_rewards"]) == config.prompts_per_step * config.group_size
    assert np.isfinite(float(metrics["loss"]))
    policy = trainer.policy_params
    _leaves_equal(policy(state.params), policy(new.params))


@pytest.mark.slow  # suite time (~20 s); the sweep engine's resume tests stay fast
def test_chunked_sweep_is_per_seed_resumes_bitwise_and_checks_config(tmp_path):
    """3 seeds in blocks of 2, 2 chunks of 2 RL steps, warm-up included (its per-seed
    draws are part of what must be per seed and resumable)."""
    config = TINY
    trainer = make_lm_trainer(config)
    sweep = ChunkedSweep(trainer.init, trainer.advance, trainer.finish,
                         num_chunks=config.num_chunks, block_size=2)
    meta = {"config": dataclasses.asdict(config)}
    directory = tmp_path / "a"
    full = sweep.run(3, checkpointer=Checkpointer(directory, metadata=meta))
    assert full.outputs["logs"]["reward"].shape == (3, 2, 2)
    assert full.outputs["final"]["eval_accuracy"].shape == (3,)
    # per-prompt correctness: [seeds, eval_prompts], its mean is the accuracy
    final = full.outputs["final"]
    assert final["eval_correct"].shape == final["start_correct"].shape == (3, 8)
    np.testing.assert_allclose(final["eval_correct"].mean(axis=1), final["eval_accuracy"],
                               rtol=1e-6)
    np.testing.assert_allclose(final["start_correct"].mean(axis=1), final["start_accuracy"],
                               rtol=1e-6)
    held_out = np.asarray(trainer.eval_held_out())
    np.testing.assert_allclose(full.outputs["logs"]["eval_held_out_accuracy"][:, -1],
                               final["eval_correct"][:, held_out].mean(axis=1), rtol=1e-6)
    assert Checkpointer(directory).steps() == [1, 4]  # chunk 1 of round 0, of round 1
    # Interrupted after chunk 1 of round 1 (seeds 2-3): drop what came later, resume.
    shutil.rmtree(directory / "rounds" / "1")
    resumed = sweep.run(3, checkpointer=Checkpointer(directory, metadata=meta), resume=True)
    _leaves_equal(full.outputs, resumed.outputs)
    # A seed's result does not depend on the number of seeds in the sweep.
    alone = sweep.run(1)
    _leaves_equal(jax.tree_util.tree_map(lambda x: x[:1], full.outputs), alone.outputs)
    # A checkpoint of another config is refused, naming the field.
    other = {"config": {**meta["config"], "width": 32}}
    shutil.rmtree(directory / "rounds" / "1")
    with pytest.raises(CheckpointError, match="width"):
        sweep.run(3, checkpointer=Checkpointer(directory, metadata=other), resume=True)


def test_step_memory_counts_the_critic():
    grpo = training_step_memory(step_trainer("grpo"))
    ppo_trainer = step_trainer("ppo")
    ppo = training_step_memory(ppo_trainer)
    policy_bytes = tree_bytes(ppo_trainer.policy.init(jax.random.key(0)))
    value_bytes = tree_bytes(ppo_trainer.value.init(jax.random.key(0)))
    assert grpo["param_bytes"] == policy_bytes
    assert ppo["param_bytes"] == policy_bytes + value_bytes
    assert grpo["reference_bytes"] == ppo["reference_bytes"] == policy_bytes
    assert ppo["optimizer_bytes"] > grpo["optimizer_bytes"]
    assert grpo["temp_bytes"] > 0
    assert grpo["total_bytes"] < ppo["total_bytes"]


def test_prompt_gdro_curriculum_over_levels():
    """A curriculum sampler picks the levels (difficulty = level) and learns from the
    groups; the level mix it drew is reported. No warm-up (``sft_steps=0``): the sampler's
    bookkeeping does not depend on it, and it would only add its compile."""
    config = dataclasses.replace(TINY, prompts_per_step=4, group_size=2, sft_steps=0)
    task = arithmetic_task(config, (0, 1))
    trainer = make_lm_trainer(config, LMGRPOConfig(curriculum="prompt_gdro"), task=task)
    state = jax.jit(trainer.init)(jax.random.key(0))
    new, metrics = jax.jit(trainer.rl_step)(state)
    assert 0.0 <= float(metrics["mean_level"]) <= 1.0
    attempts = np.asarray(new.curriculum.difficulty.attempts).sum()
    assert attempts == config.prompts_per_step * config.group_size
    assert np.asarray(state.curriculum.difficulty.attempts).sum() == 0
    # a curriculum is GRPO's: a PPO run has no such field
    with pytest.raises(TypeError, match="curriculum"):
        LMPPOConfig(curriculum="prompt_gdro")
    with pytest.raises(ValueError, match="^curriculum: must be one of none, uniform, "
                                         "prompt_gdro, got 'hard-first'$"):
        make_lm_trainer(config, LMGRPOConfig(curriculum="hard-first"), task=task)
