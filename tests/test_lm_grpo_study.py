"""A tiny config of the lm-grpo study through the CLI: files, summary keys, bad input."""

import json

import numpy as np
import pandas as pd
import pytest

from rljax.cli import main

TINY = ("sft_steps=0", "rl_steps=4", "steps_per_chunk=2", "prompts_per_step=2",
        "group_size=2", "width=16", "num_layers=1", "num_heads=2", "eval_prompts=8",
        "bootstrap_reps=50", "run_format_only=false", "run_ppo=false",
        "measure_memory=false")


@pytest.mark.slow  # suite time (~17 s); the arms' summary test below is fast
@pytest.mark.timeout(200)
def test_tiny_study_writes_files_and_keys(tmp_path):
    out = tmp_path / "lm"
    args = ["run", "lm-grpo", "--out", str(out), "--seeds", "2", "--block-size", "2"]
    for s in TINY:
        args += ["--set", s]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    for key in ("accuracy_start", "accuracy_grpo", "accuracy_grpo_ci", "format_rate",
                "zero_signal_fraction", "grpo_step_bytes", "ppo_step_bytes", "memory_ratio",
                "accuracy_gain_ci", "training_accuracy_grpo", "eval_set", "interval_notes"):
        assert key in summary, key
    low, high = summary["accuracy_grpo_ci"]
    assert low <= summary["accuracy_grpo"] <= high
    assert summary["accuracy_is_held_out"] is True
    assert summary["eval_set"]["held_out_prompts"] == summary["eval_set"]["training_prompts"] == 4
    assert summary["memory_ratio"] is None  # measured in test_summary_of_all_three_arms
    table = pd.read_parquet(out / "results.parquet")
    assert set(table["arm"]) == {"grpo"}
    assert len(table) == 2 * 4
    for name in ("report.md", "accuracy.png", "completion_length.png", "zero_signal.png",
                 "config.json"):
        assert (out / name).exists(), name


@pytest.mark.parametrize("setting, field", [
    ("group_size=1", "group_size"), ("levels=7", "levels"), ("rl_steps=5", "rl_steps"),
    ("learning_rate=-1", "learning_rate"), ("levels=a", "levels"),
])
def test_bad_settings_are_one_line_errors(tmp_path, capsys, setting, field):
    out = tmp_path / "bad"
    assert main(["run", "lm-grpo", "--out", str(out), "--set", setting]) == 2
    err = capsys.readouterr().err.strip()
    assert field in err and "\n" not in err
    assert not out.exists()


def test_summary_of_all_three_arms(tmp_path, monkeypatch):
    """The aggregation, report and plots for the grpo, format-only and PPO arms, on
    synthetic per-seed logs (training itself is covered in test_lm_training)."""
    from experiments import lm_grpo

    rng = np.random.default_rng(0)
    seeds, chunks, k = 4, 3, 2
    prompts = lm_grpo.Config().eval_prompts
    level = np.tile([0, 1], prompts // 2)  # the evaluation set takes the levels in turn

    def fake_run(config, run, options=None):
        logs = {name: rng.random((seeds, chunks, k)).astype(np.float32)
                for name in ("reward", "accuracy", "format", "process", "length",
                             "zero_signal_fraction", "kl", "clip_fraction", "loss")}
        logs["nan_rewards"] = np.zeros((seeds, chunks, k), np.int32)
        logs["eval_accuracy"] = rng.random((seeds, chunks)).astype(np.float32)
        logs["eval_format"] = rng.random((seeds, chunks)).astype(np.float32)
        logs["eval_held_out_accuracy"] = rng.random((seeds, chunks)).astype(np.float32)
        # level 0 (training problems) always right; held-out level 1: 0.2 -> ~0.5
        start = np.where(level == 0, 1.0, np.arange(prompts) % 10 < 4).astype(np.float32)
        end = np.where(level == 0, 1.0, rng.random((seeds, prompts)) < 0.5)
        final = {"start_accuracy": start.mean() * np.ones(seeds, np.float32),
                 "start_format": np.full(seeds, 0.9, np.float32),
                 "eval_accuracy": end.mean(axis=1).astype(np.float32),
                 "eval_format": logs["eval_format"][:, -1],
                 "start_correct": np.broadcast_to(start, (seeds, prompts)),
                 "eval_correct": end.astype(np.float32)}
        return {"logs": logs, "final": final, "first_chunk_seconds": 1.0, "run_seconds": 2.0}

    def fake_memory(trainer):
        scale = 2 if trainer.is_ppo else 1
        fields = ("param_bytes", "reference_bytes", "optimizer_bytes", "temp_bytes",
                  "argument_bytes", "output_bytes", "alias_bytes", "total_bytes")
        return {f: 1000 * scale for f in fields}

    monkeypatch.setattr(lm_grpo, "train_run", fake_run)
    monkeypatch.setattr(lm_grpo, "training_step_memory", fake_memory)
    config = lm_grpo.Config(seeds=seeds, rl_steps=chunks * k, steps_per_chunk=k,
                            bootstrap_reps=50)
    summary = lm_grpo.run(config, tmp_path)
    for key in ("format_only_accuracy", "format_only_accuracy_gain_ci",
                "format_only_format_rate", "accuracy_ppo", "accuracy_ppo_ci",
                "accuracy_ppo_gain_ci"):
        assert key in summary, key
    assert summary["memory_ratio"] == 0.5
    # The headline is the held-out prompts alone; level 0 is reported as training accuracy.
    assert summary["accuracy_start"] == pytest.approx(0.4, abs=0.01)
    assert summary["training_accuracy_start"] == summary["training_accuracy_grpo"] == 1.0
    assert 0.4 < summary["accuracy_grpo"] < 0.6
    assert summary["eval_set"]["held_out_levels"] == [1]
    assert summary["eval_set"]["training_only_levels"] == [0]
    assert summary["accuracy_by_level"]["0"]["held_out"] is False
    assert summary["accuracy_by_level"]["1"]["held_out"] is True
    low, high = summary["accuracy_gain_ci"]
    assert low < summary["accuracy_gain"] < high
    table = pd.read_parquet(tmp_path / "results.parquet")
    assert set(table["arm"]) == {"grpo", "format_only", "ppo"}
    assert len(table) == 3 * seeds * chunks * k
    report = (tmp_path / "report.md").read_text()
    assert "format reward alone" in report and "| total_bytes | 1,000 | 2,000 |" in report
    procedure = report.split("## Procedure", 1)[1]
    assert "training accuracy" in procedure and "seeds AND prompts" in procedure
    assert "eval_seed 12345" in procedure
    assert summary["interval_notes"]["accuracy_gain"] in procedure
    assert "two-way" in summary["interval_notes"]["accuracy_gain"]
