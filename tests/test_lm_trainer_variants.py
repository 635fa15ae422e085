"""LM trainer: the decoder architecture, HF checkpoints as the initial policy, and the GRPO
variant knobs of the lm-variants study (each checked where it takes effect, against
``rljax.grpo`` called directly or a numpy reference).

Kept cheap: tiny models, no warm-up, states built by hand where ``init``'s evaluation
is not under test, and one compiled program per test where possible."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.advantages import overlong_penalty
from rljax.algorithms.grpo import GroupBatch, grpo
from rljax.config import ConfigError
from rljax.policies import Decoder, DecoderConfig, save_hf_checkpoint
from rljax.policies.lm_common import Completion
from rljax.tokenizer import ARITHMETIC_ALPHABET, EOS_ID, PAD_ID, CharTokenizer
from rljax.training.lm import (
    LMTrainConfig,
    LMTrainer,
    LMTrainState,
    _variant_metrics,
    arithmetic_task,
    has_signal,
    is_truncated,
    make_lm_trainer,
)
from rljax.training.lm_config import (
    LMArchitectureConfig,
    LMDecoderConfig,
    LMGRPOConfig,
    LMPPOConfig,
)

BASE = LMTrainConfig(width=16, num_layers=1, num_heads=2, sft_steps=0, sft_batch=8,
                     rl_steps=1, steps_per_chunk=1, prompts_per_step=2, group_size=4,
                     eval_prompts=4, reward_format=1.0)
TASK = arithmetic_task(BASE, (1,))
P, G, T = 3, 4, BASE.max_new_tokens
TRAIN_FIELDS = {f.name for f in dataclasses.fields(LMTrainConfig)}


def make(config=BASE, algorithm=None, decoder=None):
    """The trainer of ``config`` on level 1 (two-digit addition / subtraction)."""
    return make_lm_trainer(config, algorithm, decoder, TASK)


def split(settings: dict) -> tuple[LMTrainConfig, LMGRPOConfig]:
    """``settings`` (fields of either) as BASE with the shared ones and a GRPO config."""
    shared = {k: v for k, v in settings.items() if k in TRAIN_FIELDS}
    own = {k: v for k, v in settings.items() if k not in TRAIN_FIELDS}
    return dataclasses.replace(BASE, **shared), LMGRPOConfig(**own)
VARIANT_METRICS = ("entropy", "response_length_correct", "response_length_incorrect",
                   "truncated_fraction", "kept_group_fraction", "entropy_kept_fraction")


def _leaves_equal(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _state(trainer: LMTrainer, key) -> LMTrainState:
    """A state as ``init`` builds it, without its evaluation (not under test here)."""
    init_key, value_key = jax.random.split(key)
    policy = trainer.initial_policy(init_key)
    params = policy
    if trainer.is_ppo:
        params = {"policy": policy, "value": trainer.initial_value(value_key)}
    zero = jnp.zeros(())
    return LMTrainState(params=params, reference=policy,
                        opt_state=trainer.rl_optimizer().init(params), key=key,
                        step=jnp.zeros((), jnp.int32), eval_accuracy=zero, eval_format=zero,
                        start_accuracy=zero, start_format=zero, nonfinite_step=jnp.int32(-1))


# ------------------------------------------------------------------------ architecture


def test_decoder_grpo_steps_under_jit_and_vmap():
    """An ``LMDecoderConfig`` trains a Decoder sized by the config's fields (GQA, default
    SwiGLU width, tied head) per seed; the variant metrics are logged."""
    trainer = make(decoder=LMDecoderConfig(num_kv_heads=1, tie_embeddings=True))
    assert isinstance(trainer.policy, Decoder)
    def start_and_step(key):
        state = _state(trainer, key)
        return state, trainer.rl_step(state)

    before, (after, metrics) = jax.jit(jax.vmap(start_and_step))(
        jax.random.split(jax.random.key(0), 2))
    expected = Decoder(DecoderConfig(hidden_size=16, intermediate_size=48, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=1,
                                     max_position_embeddings=13, tie_word_embeddings=True))
    shapes = jax.tree_util.tree_map(lambda x: (2, *x.shape),
                                    jax.eval_shape(expected.init, jax.random.key(0)))
    assert jax.tree_util.tree_map(lambda x: x.shape, after.params) == shapes
    assert "lm_head" not in after.params["params"]  # tied
    leaves = jax.tree_util.tree_leaves(after.params)
    assert all(not np.array_equal(x[0], x[1]) for x in leaves if x.ndim > 2)  # per seed
    moved = jax.tree_util.tree_map(lambda a, b: bool(jnp.any(a != b)), before.params,
                                   after.params)
    assert any(jax.tree_util.tree_leaves(moved))
    assert np.all(np.isfinite(metrics["loss"]))
    for name in (*VARIANT_METRICS, "clipfrac_low", "clipfrac_high"):
        assert metrics[name].shape == (2,), name
    assert np.all(np.asarray(metrics["entropy"]) > 0)


# ------------------------------------------------------------------------- checkpoints

CKPT = DecoderConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=1,
                     max_position_embeddings=32, tie_word_embeddings=True)


def _save(directory, config=CKPT, tokenizer=None, seed=0):
    model = Decoder(config)
    params = model.init(jax.random.key(seed))
    save_hf_checkpoint(directory, model, params, tokenizer=tokenizer)
    return params


def test_checkpoint_starts_every_seed_and_ppo_value_model_runs(tmp_path):
    """The checkpoint's params (bitwise) are every seed's initial policy and reference;
    its sizes replace the config's; PPO's decoder value model starts from its trunk with
    a fresh head, and a PPO step runs."""
    saved = _save(tmp_path / "ckpt", tokenizer=CharTokenizer())
    trainer = make(dataclasses.replace(BASE, width=32), LMPPOConfig(),
                   LMDecoderConfig(checkpoint=str(tmp_path / "ckpt")))
    assert trainer.policy.config == dataclasses.replace(CKPT, max_position_embeddings=13)
    assert trainer.value.config.value_head
    state = jax.jit(jax.vmap(trainer.init))(jax.random.split(jax.random.key(0), 2))
    for seed in range(2):
        one = jax.tree_util.tree_map(lambda x, s=seed: x[s], state)
        _leaves_equal(one.params["policy"], saved)
        _leaves_equal(one.reference, saved)
        value = dict(one.params["value"]["params"])
        assert value.pop("lm_head")["kernel"].shape == (16, 1)
        _leaves_equal(value, saved["params"])
    heads = state.params["value"]["params"]["lm_head"]["kernel"]
    assert not np.array_equal(heads[0], heads[1])  # a fresh head per seed
    one = jax.tree_util.tree_map(lambda x: x[0], state)
    new, metrics = jax.jit(trainer.rl_step)(one)
    assert np.isfinite(float(metrics["loss"]))
    assert all(name in metrics for name in VARIANT_METRICS)
    moved = jax.tree_util.tree_map(lambda a, b: bool(jnp.any(a != b)), one.params["value"],
                                   new.params["value"])
    assert any(jax.tree_util.tree_leaves(moved))


def test_checkpoint_mismatches_are_one_line_errors(tmp_path):
    _save(tmp_path / "vocab", dataclasses.replace(CKPT, vocab_size=20))
    _save(tmp_path / "short", dataclasses.replace(CKPT, max_position_embeddings=12))
    reversed_chars = CharTokenizer(ARITHMETIC_ALPHABET[::-1])  # same size, other ids
    _save(tmp_path / "chars", tokenizer=reversed_chars)
    _save(tmp_path / "digits", tokenizer=CharTokenizer("0123456789"))  # fewer tokens
    _save(tmp_path / "plain")  # no tokenizer.json: the vocab size is checked instead
    cases = [("vocab", r"config.json: vocab_size 20"),
             ("short", r"config.json: max_position_embeddings 12 is shorter than "
                       r"prompt_length \+ max_new_tokens = 13"),
             ("chars", r"tokenizer.json: not the arithmetic task's character tokenizer"),
             ("digits", r"tokenizer.json: not the arithmetic task's character tokenizer")]
    for name, message in cases:
        with pytest.raises(ValueError, match=message) as error:
            make(decoder=LMDecoderConfig(checkpoint=str(tmp_path / name)))
        assert "\n" not in str(error.value)
    make(decoder=LMDecoderConfig(checkpoint=str(tmp_path / "plain")))
    # a checkpoint is a decoder's: TinyLM's config has no such field, and a flat
    # config that sets it with architecture="tiny" is refused in one line
    with pytest.raises(TypeError, match="checkpoint"):
        dataclasses.replace(BASE, checkpoint=str(tmp_path / "plain"))
    with pytest.raises(ConfigError, match="^checkpoint: a decoder setting, needs "
                                          "architecture='decoder'"):
        LMArchitectureConfig(checkpoint=str(tmp_path / "plain")).decoder()
    with pytest.raises(FileNotFoundError, match="missing"):
        make(decoder=LMDecoderConfig(checkpoint=str(tmp_path / "missing")))


# ------------------------------------------------------------------ knobs -> transform


def _crafted_batch(trainer: LMTrainer, params):
    """``P x G`` completions with EOS at chosen places (some none: truncated), rewards
    with spread, and old log-probs off the current ones (ratios != 1)."""
    rng = np.random.default_rng(0)
    n = P * G
    prompt = rng.integers(3, 19, (n, TASK.prompt_length)).astype(np.int32)
    prompt[:, 0] = 1  # BOS
    tokens = rng.integers(3, 19, (n, T)).astype(np.int32)
    eos_at = rng.integers(0, T + 2, n)  # >= T: no EOS, truncated
    mask = np.zeros((n, T), np.int32)
    for i, e in enumerate(eos_at):
        if e < T:
            tokens[i, e], tokens[i, e + 1:] = EOS_ID, PAD_ID
        mask[i, : min(e + 1, T)] = 1
    prompt_mask = np.ones_like(prompt)
    current = trainer.policy.completion_log_probs(params, prompt, prompt_mask, tokens, mask)
    old = (current + 0.3 * rng.standard_normal((n, T))) * mask
    group = lambda x: jnp.asarray(x).reshape(P, G, *np.shape(x)[1:])  # noqa: E731
    batch = GroupBatch(
        obs={"prompt": group(prompt), "prompt_mask": group(prompt_mask),
             "completion_mask": group(mask)},
        actions=group(tokens), mask=group(mask),
        rewards=jnp.asarray(rng.standard_normal((P, G)), jnp.float32),
        old_log_probs=group(old.astype(np.float32)), ref_log_probs=group(old),
        truncated=group(eos_at >= T))
    assert 0 < np.mean(eos_at >= T) < 1
    return batch


KNOBS = [
    {"advantage": "reinforce_pp"},
    {"scale_rewards": "batch"},
    {"sequence_ratio": True, "clip_epsilon": 3e-4, "clip_epsilon_high": 4e-4},
    {"mask_truncated": True},
    {"entropy_top_q": 0.5},
]
KNOB_FIELDS = ("advantage", "scale_rewards", "sequence_ratio", "mask_truncated",
               "entropy_top_q")


def test_each_grpo_knob_reaches_the_transform():
    """The trainer's transform with a knob gives the loss of ``grpo`` called directly with
    that argument (through ``policy_apply``, an independent path), which differs from the
    loss without it; the default config's transform is the pre-knob ``grpo`` call, loss
    and gradients bitwise."""
    base = make()
    params = base.policy.init(jax.random.key(0))
    batch = _crafted_batch(base, params)
    with_actions = batch.replace(obs={**batch.obs, "actions": batch.actions})

    def apply(p, obs):  # policy_apply: obs [N, ...] -> completion logits [N, T, V]
        return base.completion_logits(p, obs["prompt"], obs["prompt_mask"], obs["actions"],
                                      obs["completion_mask"])

    def log_prob_fn(p, obs, actions):
        return base.policy.completion_log_probs(p, obs["prompt"], obs["prompt_mask"],
                                                actions, obs["completion_mask"])

    shared = dict(group_size=G, clip_epsilon=0.2, kl_beta=0.0, aggregation="token-mean")

    @jax.jit
    def run(params):
        def loss(rl, data):  # the gradients are dead code, so XLA drops them
            return rl.update(params, (), data)[2]["loss"]

        out = {}
        for i, knob in enumerate(KNOBS):
            trainer = make(*split(knob))
            kwargs = {**shared, **knob}
            without = {k: v for k, v in kwargs.items() if k not in KNOB_FIELDS}
            out[str(i)] = (loss(trainer.grpo_transform(), batch),
                           loss(grpo(apply, **kwargs), with_actions),
                           loss(grpo(apply, **without), with_actions))
        pre_knob = grpo(log_prob_fn=log_prob_fn, group_size=G, advantage="group_relative",
                        clip_epsilon=0.2, clip_epsilon_high=None, kl_beta=0.0,
                        kl_estimator="k3", aggregation="token-mean")
        ours, _, metrics = make().grpo_transform().update(params, (), batch)
        pre, _, pre_metrics = pre_knob.update(params, (), batch)
        out["default"] = ((ours, metrics["loss"]), (pre, pre_metrics["loss"]))
        return out

    out = run(params)
    for i, knob in enumerate(KNOBS):
        ours, direct, without = (float(x) for x in out[str(i)])
        np.testing.assert_allclose(ours, direct, rtol=1e-5, atol=1e-7, err_msg=str(knob))
        assert abs(direct - without) > 1e-3 * max(abs(direct), 1e-2), knob
    _leaves_equal(*out["default"])


# ------------------------------------------------------- sampling: masks, flags, rewards

# [P * G] rewards of 4 groups: all equal (no signal), spread, all equal, one NaN
CRAFTED = np.array([0.5, 0.5, 0.5, 0.5, 0.0, 1.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0,
                    1.0, np.nan, 0.0, 1.0], np.float32)


class CraftedRewardTrainer(LMTrainer):
    """Rewards fixed to :data:`CRAFTED`, so the groups' signal is known."""

    def score(self, problems, completion):
        _, parts = super().score(problems, completion)
        return jnp.asarray(CRAFTED), parts


def _real_mask(tokens):
    """numpy: 1 up to and including the first EOS (all T without one)."""
    mask = np.zeros(tokens.shape, np.int32)
    for i, row in enumerate(tokens):
        eos = np.flatnonzero(row == EOS_ID)
        mask[i, : (eos[0] + 1 if eos.size else tokens.shape[1])] = 1
    return mask


def test_grpo_batch_drops_exactly_the_zero_signal_groups():
    """``dynamic_sampling`` masks the groups whose rewards are all equal and those with a
    NaN reward (numpy); ``truncated`` flags the completions without EOS; the old
    log-probs are ``completion_log_probs`` under the loss mask, bitwise."""
    config = dataclasses.replace(BASE, prompts_per_step=4)
    trainer = CraftedRewardTrainer(**vars(make(config, LMGRPOConfig(dynamic_sampling=True))))
    state = _state(trainer, jax.random.key(0))

    @jax.jit
    def sample(state):
        batch, metrics, _ = trainer.grpo_batch(state, jax.random.key(1), jax.random.key(2))
        flat = lambda x: x.reshape(16, *x.shape[2:])  # noqa: E731
        old = trainer.policy.completion_log_probs(
            state.params, flat(batch.obs["prompt"]), flat(batch.obs["prompt_mask"]),
            flat(batch.actions), flat(batch.mask))
        return batch, metrics, old

    batch, metrics, old = sample(state)
    tokens = np.asarray(batch.actions).reshape(16, T)
    real = _real_mask(tokens).reshape(4, 4, T)
    rewards = CRAFTED.reshape(4, 4)
    finite = ~np.isnan(rewards).any(axis=1)
    signal = np.array([len(set(r.tolist())) > 1 for r in np.nan_to_num(rewards)])
    keep = finite & signal
    np.testing.assert_array_equal(np.asarray(batch.mask), real * keep[:, None, None])
    assert keep.tolist() == [False, True, False, False]
    np.testing.assert_allclose(float(metrics["kept_group_fraction"]), keep.mean())
    assert int(metrics["nan_rewards"]) == 1
    np.testing.assert_array_equal(np.asarray(batch.truncated),
                                  ~np.any(tokens.reshape(4, 4, T) == EOS_ID, axis=-1))
    np.testing.assert_allclose(float(metrics["truncated_fraction"]),
                               np.mean(np.asarray(batch.truncated)))
    np.testing.assert_array_equal(np.asarray(batch.old_log_probs).reshape(16, T),
                                  np.asarray(old))
    np.testing.assert_array_equal(np.asarray(has_signal(jnp.asarray(np.nan_to_num(rewards)))),
                                  [False, True, False, True])


def test_truncated_flags_match_numpy():
    tokens = np.array([[5, 6, EOS_ID, PAD_ID, PAD_ID],   # terminated
                       [5, 6, 7, 8, 9],                   # truncated
                       [5, 6, 7, 8, EOS_ID],              # EOS on the last token
                       [EOS_ID, PAD_ID, PAD_ID, PAD_ID, PAD_ID],
                       [PAD_ID, 6, 7, 8, 9],              # PAD sampled mid-way: truncated
                       [5, 6, 7, EOS_ID, PAD_ID]], np.int32)
    mask = _real_mask(tokens)
    mask[5] = [1, 1, 1, 0, 0]  # cut before its EOS: unterminated
    expected = [not any(t == EOS_ID and m for t, m in zip(row, mrow, strict=True))
                for row, mrow in zip(tokens, mask, strict=True)]
    assert expected == [False, True, False, False, True, True]
    np.testing.assert_array_equal(np.asarray(jax.jit(is_truncated)(tokens, mask)), expected)


def test_overlong_shaping_adds_exactly_the_penalty():
    """``score`` adds DAPO's eq. 13 of each completion's length (numpy) to the reward."""
    shaped = make(dataclasses.replace(BASE, overlong_max_length=5, overlong_cache=2))
    plain = make()
    lengths = np.array([1, 2, 3, 4, 5, 5])
    tokens = np.full((6, T), 7, np.int32)
    for i, n in enumerate(lengths[:4]):
        tokens[i, n - 1], tokens[i, n:] = EOS_ID, PAD_ID
    mask = (np.arange(T)[None] < lengths[:, None]).astype(np.int32)
    completion = Completion(tokens=jnp.asarray(tokens), mask=jnp.asarray(mask),
                            log_probs=jnp.zeros((6, T)))

    @jax.jit
    def both(key):
        problems = plain.sample_problems(key, 6)
        return shaped.score(problems, completion)[0], plain.score(problems, completion)[0]

    with_penalty, without = both(jax.random.key(0))
    dapo = np.where(lengths <= 3, 0.0, np.where(lengths <= 5, (3.0 - lengths) / 2, -1.0))
    np.testing.assert_allclose(np.asarray(with_penalty) - np.asarray(without), dapo,
                               atol=1e-6)
    np.testing.assert_array_equal(np.asarray(overlong_penalty(lengths, 5, 2)), dapo)
    assert dapo.min() == -1.0 and dapo[3] == -0.5


def test_variant_metrics_match_numpy():
    """Entropy over the finite-reward completions' tokens; lengths split by the task's
    accuracy (not the shaped reward); NaN where a side is empty."""
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((4, T, 19)).astype(np.float32)
    tokens = np.full((4, T), 5, np.int32)
    mask = (np.arange(T)[None] < np.array([[2], [5], [3], [1]])).astype(np.int32)
    accuracy = np.array([1.0, 0.0, 1.0, 0.0], np.float32)
    finite = np.array([True, True, False, True])
    parts = type("Parts", (), {"accuracy": jnp.asarray(accuracy)})
    completion = Completion(tokens=tokens, mask=mask, log_probs=np.zeros((4, T)))
    out = _variant_metrics(parts, completion, jnp.asarray(logits), jnp.asarray(finite),
                           jnp.asarray([False, True, False, False]))
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    entropy = -(p * np.log(p)).sum(-1)
    weight = mask * finite[:, None]
    np.testing.assert_allclose(float(out["entropy"]), (entropy * weight).sum() / weight.sum(),
                               rtol=1e-5)
    np.testing.assert_allclose(float(out["response_length_correct"]), 2.5)
    np.testing.assert_allclose(float(out["response_length_incorrect"]), 3.0)
    assert float(out["truncated_fraction"]) == 0.25
    none_correct = type("Parts", (), {"accuracy": jnp.zeros(4)})
    out = _variant_metrics(none_correct, completion, jnp.asarray(logits), jnp.asarray(finite),
                           jnp.zeros(4, bool))
    assert np.isnan(float(out["response_length_correct"]))


# ------------------------------------------------------------------------- validation


@pytest.mark.parametrize("shared, grpo, decoder, field", [
    ({}, {"scale_rewards": "global"}, None, "scale_rewards"),
    ({}, {"scale_rewards": "batch", "advantage": "reinforce_pp"}, None, "scale_rewards"),
    ({}, {"advantage": "reinforce"}, None, "advantage"),
    ({}, {"sequence_ratio": 1}, None, "sequence_ratio"),
    ({}, {"mask_truncated": "yes"}, None, "mask_truncated"),
    ({}, {"dynamic_sampling": 0}, None, "dynamic_sampling"),
    ({}, {"entropy_top_q": 1.5}, None, "entropy_top_q"),
    ({}, {"entropy_top_q": -0.1}, None, "entropy_top_q"),
    ({}, {"entropy_top_q": True}, None, "entropy_top_q"),
    ({"overlong_max_length": -1}, {}, None, "overlong_max_length"),
    ({"overlong_max_length": 6}, {}, None, "overlong_max_length"),  # > max_new_tokens = 5
    ({"overlong_max_length": 4, "overlong_cache": 5}, {}, None, "overlong_cache"),
    ({"overlong_cache": 1}, {}, None, "overlong_cache"),  # shaping is off
    ({}, {}, {"num_kv_heads": -1}, "num_kv_heads"),
    ({}, {}, {"tie_embeddings": 1}, "tie_embeddings"),
    ({}, {}, {"checkpoint": None}, "checkpoint"),
    ({"num_heads": 4}, {}, {"num_kv_heads": 3}, "num_kv_heads"),
    ({"width": 12, "num_heads": 4}, {}, {}, "width"),  # odd head size
    ({"width": 18, "num_heads": 4}, {}, {}, "width"),
])
def test_fields_are_validated(shared, grpo, decoder, field):
    """Each config refuses a bad value of its own field, and the decoder's head sizes
    are checked against the shared width and heads: one line naming the field."""
    decoder = None if decoder is None else LMDecoderConfig(**decoder)
    with pytest.raises(ValueError, match=f"^{field}: ") as error:
        make(dataclasses.replace(BASE, **shared), LMGRPOConfig(**grpo), decoder)
    assert "\n" not in str(error.value)


GRPO_ONLY = ("advantage", "aggregation", "kl_estimator", "scale_rewards", "sequence_ratio",
             "mask_truncated", "entropy_top_q", "dynamic_sampling", "oversample", "curriculum")
DECODER_ONLY = ("num_kv_heads", "intermediate_size", "tie_embeddings", "checkpoint",
                "lora_rank", "lora_alpha", "lora_targets")


def test_invalid_combinations_cannot_be_written():
    """A GRPO knob on a PPO run, or a decoder field on TinyLM (the shared config), is
    not a value to refuse: the config has no such field (``TypeError`` on construction,
    as ``dataclasses.replace`` gives it); the pieces share no field."""
    grpo = {f.name for f in dataclasses.fields(LMGRPOConfig)}
    ppo = {f.name for f in dataclasses.fields(LMPPOConfig)}
    decoder = {f.name for f in dataclasses.fields(LMDecoderConfig)}
    assert grpo == set(GRPO_ONLY) and decoder == set(DECODER_ONLY)
    assert not (grpo & ppo) and not (grpo & TRAIN_FIELDS) and not (ppo & TRAIN_FIELDS)
    assert not (decoder & TRAIN_FIELDS) and not ({"algorithm", "architecture"} & TRAIN_FIELDS)
    for name in GRPO_ONLY:
        with pytest.raises(TypeError, match=name):
            LMPPOConfig(**{name: LMGRPOConfig.__dataclass_fields__[name].default})
    for name in DECODER_ONLY:
        with pytest.raises(TypeError, match=name):
            dataclasses.replace(BASE, **{name: LMDecoderConfig.__dataclass_fields__[name].default})


@pytest.mark.parametrize("changes, field", [
    ({"num_kv_heads": 2}, "num_kv_heads"),
    ({"intermediate_size": 32}, "intermediate_size"),
    ({"tie_embeddings": True}, "tie_embeddings"),
    ({"checkpoint": "some/dir"}, "checkpoint"),
    ({"lora_rank": 8}, "lora_rank"),
    ({"architecture": "gpt"}, "architecture"),
])
def test_a_flat_config_refuses_decoder_fields_on_tiny(changes, field):
    """The flat policy choice a study extends (``architecture`` plus the decoder's
    fields) refuses a decoder field with ``architecture="tiny"`` in one line; with
    ``"decoder"`` it gives the decoder config."""
    config = LMArchitectureConfig(**changes)
    with pytest.raises(ConfigError, match=f"^{field}: ") as error:
        config.validate()  # each field against its declaration
        config.decoder()
    assert "\n" not in str(error.value)
    if field != "architecture":
        flat = dataclasses.replace(config, architecture="decoder")
        assert flat.decoder() == LMDecoderConfig(**changes)


def test_study_arms_are_valid_configs():
    """Every arm of the lm-variants study is a GRPO config (with shared clip and overlong
    fields) that builds, with either policy."""
    arms = {
        "grpo": {"advantage": "group_relative", "aggregation": "sequence-mean-token-mean"},
        "dr_grpo": {"advantage": "group_mean", "aggregation": "sequence-mean-token-sum-norm"},
        "dapo": {"clip_epsilon": 0.2, "clip_epsilon_high": 0.28, "aggregation": "token-mean",
                 "dynamic_sampling": True, "overlong_max_length": 5, "overlong_cache": 2},
        "gspo": {"sequence_ratio": True, "clip_epsilon": 3e-4, "clip_epsilon_high": 4e-4},
        "rloo": {"advantage": "leave_one_out"},
        "reinforce_pp": {"advantage": "reinforce_pp"},
    }
    for arm, fields in arms.items():
        for decoder in (None, LMDecoderConfig()):
            trainer = make(*split(fields), decoder)
            assert trainer.grpo_transform() is not None, arm
