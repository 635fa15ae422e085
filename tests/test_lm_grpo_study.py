"""The lm-grpo study: its arms' settings, its analysis pieces against closed forms, bad
input, and (slow) a quick end-to-end run with every summary key the report needs."""

import dataclasses
import json

import numpy as np
import pytest

from experiments import lm_grpo
from rljax.cli import main
from rljax.training.lm_config import LMGRPOConfig, LMSFTConfig

DONE_WHEN_KEYS = ("heldout_greedy_start", "heldout_greedy_grpo", "heldout_gain",
                  "heldout_gain_ci", "sft_control_heldout", "limited_label_gain_grpo",
                  "limited_label_gain_sft", "signal_fraction_by_bin", "pass_at_k_start",
                  "pass_at_k_grpo", "search_majority_at_n", "search_prm_beam",
                  "memory_ratio")


@pytest.mark.slow  # ~2-3 min: every arm and analysis at QUICK's sizes
@pytest.mark.timeout(600)
def test_quick_run_writes_every_figure(tmp_path):
    out = tmp_path / "lm"
    assert main(["run", "lm-grpo", "--out", str(out), "--set", "quick=true"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    for key in DONE_WHEN_KEYS:
        assert key in summary, key
    low, high = summary["heldout_gain_ci"]
    assert low <= summary["heldout_gain"] <= high
    assert len(summary["pass_at_k_start"]) == lm_grpo.QUICK["pass_samples"]
    assert len(summary["signal_fraction_by_bin"]) == len(lm_grpo.BINS)
    for row in summary["signal_fraction_by_bin"]:  # an interval wherever 2+ seeds have data
        assert (row["delta_p_ci"] is not None) == (row["delta_p_seeds"] >= 2)
    assert "delta_p_low_minus_mid" in summary["signal"]
    arms = summary["arms"]
    assert set(arms) == set(lm_grpo.ARMS)
    q = lm_grpo.QUICK
    pg = q["prompts_per_step"] * q["group_size"]
    assert arms["grpo"]["rollouts_per_seed"] == q["rl_steps"] * pg
    assert arms["dapo_updates"]["rollouts_per_seed"] == 2 * q["rl_steps"] * pg
    assert arms["dapo_rollouts"]["rollouts_per_seed"] == q["rl_steps"] * pg
    assert arms["sft"]["rollouts_per_seed"] == 0
    assert len(list((out / "warm_start").glob("*.npz"))) == 2  # full and bank, shared
    for name in ("report.md", "accuracy.png", "pass_at_k.png", "results.parquet"):
        assert (out / name).exists(), name


def test_arms_build_their_settings():
    config = lm_grpo.Config()
    args = {arm: config.trainer_args(arm) for arm in lm_grpo.ARMS}
    assert isinstance(args["grpo"][1], LMGRPOConfig) and args["grpo"][0].label_bank == 0
    assert isinstance(args["sft"][1], LMSFTConfig)
    assert args["sft"][0].rl_steps == config.sft_steps_per_rl_step * config.rl_steps
    assert args["grpo_bank"][0].label_bank == args["sft_bank"][0].label_bank == 512
    assert args["sft"][0].label_bank == 0
    for arm in ("dapo_updates", "dapo_rollouts"):
        algorithm = args[arm][1]
        assert algorithm.dynamic_sampling and algorithm.oversample == 2
    assert args["dapo_updates"][0].rl_steps == config.rl_steps
    assert args["dapo_rollouts"][0].rl_steps == config.rl_steps // 2
    # every arm shares the warm-up, the RL rate and its warm-up, and the task
    for cfg, _, decoder, task in args.values():
        assert (cfg.sft_steps, cfg.sft_learning_rate, cfg.lr_warmup_steps) == (
            config.sft_steps, config.sft_learning_rate, config.lr_warmup_steps)
        assert decoder is None and task == config.build_task() and task.levels == (4,)
    assert config.resolved() is config
    quick = dataclasses.replace(config, quick=True).resolved()
    assert quick.seeds == 2 and not quick.quick


@pytest.mark.parametrize("setting, field", [
    ("arms=sft", "arms"), ("arms=grpo,nope", "arms"), ("refill_oversample=3", "refill_oversample"),
    ("levels=0", "levels"), ("temperature=0", "temperature"), ("oversample=2", "oversample"),
])
def test_bad_settings_are_one_line_errors(tmp_path, capsys, setting, field):
    out = tmp_path / "bad"
    assert main(["run", "lm-grpo", "--out", str(out), "--set", setting]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {field}:") and "\n" not in err, err
    assert not out.exists()


def test_bins_cover_zero_quarters_and_one():
    p = np.array([0.0, 0.01, 0.25, 0.26, 0.5, 0.74, 0.75, 0.99, 1.0])
    assert lm_grpo.bin_index(p).tolist() == [0, 1, 1, 2, 2, 3, 3, 4, 5]


def test_sequence_passes_closed_form():
    config = lm_grpo.Config()
    pg = config.prompts_per_step * config.group_size
    assert lm_grpo.sequence_passes(config.trainer("grpo")) == pg + pg + 3 * pg
    assert lm_grpo.sequence_passes(config.trainer("dapo_updates")) == 2 * pg + pg + 3 * pg
    assert lm_grpo.sequence_passes(config.trainer("sft")) == 3 * config.sft_batch


def test_word_problems_use_a_checkpoints_own_tokenizer(tmp_path):
    """``task=word-problems`` tokenizes with the shipped BPE, or with the tokenizer.json of
    the ``checkpoint`` directory when it has one (here a smaller BPE trained on the same
    corpus, so its vocabulary differs from the shipped one)."""
    from itertools import islice

    from rljax.envs.text_problems import bpe_corpus
    from rljax.policies.hf_checkpoint import save_hf_tokenizer
    from rljax.text_tokenizer import load_bpe_tokenizer, train_bpe

    own = train_bpe(islice(bpe_corpus(), 400), vocab_size=300)
    save_hf_tokenizer(tmp_path, own)
    shipped = lm_grpo.Config(task="word-problems").resolved().build_task()
    assert shipped.tokenizer.vocab_size == load_bpe_tokenizer().vocab_size
    config = lm_grpo.Config(task="word-problems", architecture="decoder",
                            checkpoint=str(tmp_path), prompt_length=96).resolved()
    task = config.build_task()
    assert task.tokenizer.vocab_size == own.vocab_size != shipped.tokenizer.vocab_size
