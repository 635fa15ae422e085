"""The lm-variants study: the recipe's defaults, the shared warm start, the tuning protocol
and its grid extension, paired differences, Holm, the two verdicts (on synthetic runs whose
answer is known), a tiny real run through the CLI, bad input."""

import json

import numpy as np
import pandas as pd
import pytest

from experiments import lm_variants
from rljax.advantages import overlong_penalty
from rljax.cli import main
from rljax.envs.arithmetic import WIDEST_SOLUTION_TOKENS
from rljax.stats import holm
from rljax.training.lm import (
    EQUATION_PROMPT_LENGTH,
    EQUATION_RECIPE,
    LMTrainConfig,
    check_lm_trainer,
    make_lm_trainer,
)
from rljax.training.lm_config import LMDecoderConfig, LMGRPOConfig
from rljax.training.lm_warm_start import warm_start_fingerprint

TINY = ("sft_steps=0", "rl_steps=2", "steps_per_chunk=1", "prompts_per_step=2",
        "group_size=2", "width=16", "num_layers=1", "num_heads=2", "eval_prompts=8",
        "bootstrap_reps=50", "arms=grpo", "lr_grid=1e-3,3e-3", "tuning_seeds=2",
        "max_grid_extensions=1", "mu=1", "lr_warmup_steps=0")


@pytest.mark.slow  # end to end (~40 s CPU: 3 rates compiled); lm-grpo covers the trainer
@pytest.mark.timeout(300)
def test_tiny_study_through_the_cli(tmp_path):
    out = tmp_path / "lmv"
    args = ["run", "lm-variants", "--out", str(out), "--seeds", "2", "--block-size", "2"]
    for s in TINY:
        args += ["--set", s]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["arms"] == ["grpo"]  # the arms' statistics: the synthetic tests below
    per = summary["per_arm"]["grpo"]
    low, high = per["accuracy_ci"]
    assert low <= per["accuracy"] <= high
    # a two-rate grid's winner is at an edge: one rate beyond it was tuned
    assert per["grid_extensions"] == 1 and len(per["lr_grid"]) == 3
    assert set(per["lr_grid"]) > {1e-3, 3e-3} and per["learning_rate"] in per["lr_grid"]
    assert len(per["tuning_means"]) == 3
    assert per["grid_position"] in ("lowest", "interior", "highest")
    warm = summary["warm_start"]  # one cache, computed before the arms, for every seed
    assert (out / "warm_start" / warm["file"]).is_file() and warm["seeds"] >= 2 + 2 + 2
    for metric in ("entropy", "response_length_incorrect", "accuracy"):
        assert f"{metric}_first" in per, metric  # the trainer logs what the claims need
    table = pd.read_parquet(out / "results.parquet")
    assert set(table["arm"]) == {"grpo"}
    assert sorted(set(table["seed"])) == [2, 3]  # evaluation seeds follow the tuning seeds
    assert len(table) == 2 * 2
    assert {"entropy", "response_length_incorrect", "eval_held_out_accuracy"} <= set(table)
    for name in ("report.md", "accuracy.png", "config.json"):
        assert (out / name).exists(), name


@pytest.mark.parametrize("setting, field", [
    ("arms=grpo,ppo", "arms"), ("arms=dr_grpo", "arms"), ("arms=grpo,grpo", "arms"),
    ("lr_grid=0,1e-3", "lr_grid"), ("lr_grid=fast", "lr_grid"), ("levels=0", "levels"),
    ("tuning_seeds=1", "tuning_seeds"), ("overlong_cache=99", "overlong_cache"),
    ("group_size=1", "group_size"), ("architecture=gpt2", "architecture"),
    ("checkpoint=/no/such/dir", "checkpoint"),  # needs architecture=decoder
    ("num_kv_heads=2", "num_kv_heads"),  # a decoder field, needs architecture=decoder
    ("dapo_overlong_cache=12", "dapo_overlong_cache"),  # < max_new_tokens = 12
    ("max_grid_extensions=-1", "max_grid_extensions"), ("lr_grid=1e-4,1e-4", "lr_grid"),
    ("learning_rate=1e-3", "learning_rate"),  # tuned over lr_grid, not read
])
def test_bad_settings_are_one_line_errors(tmp_path, capsys, setting, field):
    out = tmp_path / "bad"
    assert main(["run", "lm-variants", "--out", str(out), "--set", setting]) == 2
    err = capsys.readouterr().err.strip()
    assert field in err and "\n" not in err
    assert not out.exists()


@pytest.mark.parametrize("study", ["lm-variants", "lm-grpo"])
def test_a_missing_checkpoint_is_a_one_line_error(tmp_path, capsys, study):
    out = tmp_path / "bad"
    assert main(["run", study, "--out", str(out), "--set", "architecture=decoder",
                 "--set", f"checkpoint={tmp_path / 'none'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: checkpoint:") and "none" in err and "\n" not in err
    assert not out.exists()


def test_studies_forward_the_architecture_and_the_checkpoint():
    from experiments import lm_grpo

    expected = LMDecoderConfig(num_kv_heads=1, checkpoint="/ckpt")
    for arm in lm_variants.ARMS:
        config = lm_variants.Config(architecture="decoder", num_kv_heads=1, checkpoint="/ckpt")
        assert config.trainer_args(arm)[2] == expected
        assert lm_variants.Config().trainer_args(arm)[2] is None  # TinyLM
    for run in lm_grpo.ARMS:
        config = lm_grpo.Config(architecture="decoder", num_kv_heads=1, checkpoint="/ckpt")
        assert config.trainer_args(run)[2] == expected
        assert lm_grpo.Config().trainer_args(run)[2] is None


def test_every_arm_builds_its_published_settings():
    config = lm_variants.Config()
    args = {arm: config.trainer_args(arm, 1e-4) for arm in lm_variants.ARMS}
    shared = {arm: a[0] for arm, a in args.items()}
    grpo = {arm: a[1] for arm, a in args.items()}
    assert grpo["grpo"].aggregation == "sequence-mean-token-mean"
    assert grpo["dr_grpo"].advantage == "group_mean"
    assert grpo["dr_grpo"].aggregation == "sequence-mean-token-sum-norm"
    assert (shared["dapo"].clip_epsilon_high, shared["dapo_sym_clip"].clip_epsilon_high) == (
        0.28, 0.2)
    for arm in ("dapo", "dapo_sym_clip"):
        assert grpo[arm].dynamic_sampling and grpo[arm].aggregation == "token-mean"
        assert shared[arm].overlong_max_length == config.max_new_tokens
        assert shared[arm].overlong_cache == config.dapo_overlong_cache
    for arm in ("grpo", "dr_grpo", "gspo", "rloo", "reinforce_pp"):
        assert (shared[arm].overlong_max_length, shared[arm].overlong_cache) == (0, 0)
        assert not grpo[arm].dynamic_sampling
    assert grpo["gspo"].sequence_ratio and shared["gspo"].clip_epsilon == 3e-4
    assert grpo["rloo"].advantage == "leave_one_out"
    assert grpo["reinforce_pp"].advantage == "reinforce_pp"
    # equal rollouts, no KL and the same task in every arm
    for cfg, algorithm, decoder, task in args.values():
        assert (cfg.prompts_per_step, cfg.group_size, cfg.mu, cfg.kl_beta) == (32, 8, 2, 0.0)
        assert cfg.learning_rate == 1e-4
        assert type(cfg) is LMTrainConfig and type(algorithm) is LMGRPOConfig
        assert decoder is None and task == config.task()
        check_lm_trainer(cfg, algorithm, decoder, task)


def test_the_defaults_are_the_library_recipe_with_mu_2():
    config = lm_variants.Config()
    for name, value in EQUATION_RECIPE.items():
        assert getattr(config, name) == value, name
    assert config.mu == 2 and config.prompt_length == EQUATION_PROMPT_LENGTH
    rates = config.learning_rates()
    assert rates[0] < EQUATION_RECIPE["learning_rate"] < rates[-1]  # centred on the recipe
    assert config.seeds >= 6 and config.tuning_seeds >= 2 and config.max_grid_extensions == 2
    assert config.trainer_args("dapo", 3e-4)[0].lr_warmup_steps == 20
    # DAPO's overlong shaping never penalises a correct solution at 12 tokens
    dapo = config.trainer_args("dapo")[0]
    widest = WIDEST_SOLUTION_TOKENS[4]
    assert widest == config.max_new_tokens  # the widest solution fills the budget
    assert np.all(np.asarray(overlong_penalty(np.arange(1, widest + 1),
                                              dapo.overlong_max_length,
                                              dapo.overlong_cache)) == 0)


def test_every_arm_and_rate_shares_the_warm_start():
    """One cache serves every arm: what the warm start depends on (the model, the task,
    the warm-up fields, the label bank) is the same for every arm at every rate."""
    config = lm_variants.Config()
    trainers = [make_lm_trainer(*config.trainer_args(arm, rate))
                for arm in lm_variants.ARMS for rate in (1e-5, 1e-3)]
    first = trainers[0]
    for trainer in trainers[1:]:
        assert trainer.policy.config == first.policy.config and trainer.task == first.task
        for name in ("sft_steps", "sft_batch", "sft_learning_rate", "label_bank"):
            assert getattr(trainer.config, name) == getattr(first.config, name), name
    prints = {warm_start_fingerprint(t, num_seeds=10, base_seed=0, block_size=2)
              for t in trainers}
    assert len(prints) == 1


# ----------------------------------------------------------------------------- synthetic


def _fake_outputs(rng, seeds, chunks, k, prompts, held_out, accuracy, length_slope,
                  entropy_slope):
    """One winner's outputs with known trends (per step) and per-prompt correctness."""
    steps = np.arange(chunks * k).reshape(chunks, k)
    length = 8.0 + length_slope * steps[None] + rng.normal(0, 0.05, (seeds, chunks, k))
    entropy = 1.0 + entropy_slope * steps[None] + rng.normal(0, 0.005, (seeds, chunks, k))
    incorrect = length.copy()
    incorrect[:, 0, 0] = np.nan  # a step without an incorrect completion
    correct = (rng.random((seeds, prompts)) < accuracy).astype(np.float32)
    start = (rng.random((seeds, prompts)) < 0.3).astype(np.float32)
    logs = {"eval_held_out_accuracy": np.tile(correct[:, held_out].mean(1)[:, None], chunks),
            "accuracy": np.full((seeds, chunks, k), accuracy), "entropy": entropy,
            "response_length_correct": np.full((seeds, chunks, k), 8.0),
            "response_length_incorrect": incorrect, "length": length}
    return {"logs": logs, "final": {"eval_correct": correct, "start_correct": start}}


def _synthetic_run(tmp_path, monkeypatch, trends, accuracy_by_lr, extra=None):
    """lm_variants.run with the training replaced by ``_fake_outputs``: arm ``a`` at the
    grid's rate ``i`` has accuracy ``accuracy_by_lr[a][i]`` (a rate added beyond the grid:
    ``extra[a]["%.3g" % rate]``, else 0.1) and the given length/entropy trends."""
    seeds, tuning, chunks, k, prompts = 12, 4, 3, 4, 16
    held_out = np.arange(prompts) % 2 == 0
    grid = (1e-4, 3e-4, 1e-3)
    calls, warm = [], []

    def accuracy(arm, rate):
        for i, r in enumerate(grid):
            if np.isclose(rate, r, rtol=1e-9):
                return accuracy_by_lr[arm][i]
        return (extra or {}).get(arm, {}).get(f"{rate:.3g}", 0.1)

    def fake_runner(config, arm, held, store, warm_start, options=None):
        assert warm and warm_start is warm[0]["cache"]  # computed first, passed to every arm
        store.update(seconds=0.0, evaluation=[])

        def run_rates(rates, first_seed, num_seeds):
            phase = "evaluation" if first_seed == tuning else "tuning"
            calls.append((arm, phase, tuple(float(r) for r in rates), first_seed, num_seeds))
            outputs = []
            for rate in rates:
                rng = np.random.default_rng([first_seed, int(rate * 1e9), len(arm)])
                outputs.append(_fake_outputs(rng, num_seeds, chunks, k, prompts, held,
                                             accuracy(arm, rate), *trends[arm]))
            if phase == "evaluation":
                store["evaluation"] += outputs
            store["seconds"] += 1.0
            return np.stack([lm_variants.held_out_scores(o["final"]["eval_correct"], held)
                             for o in outputs])
        return run_rates

    class FakeTrainer:
        def eval_held_out(self):
            return held_out

    class FakeCache:
        path, num_seeds = tmp_path / "warm_start" / "0123.npz", seeds + tuning + 2

    def fake_cache(trainer, directory, **kwargs):
        warm.append({"directory": directory, "cache": FakeCache(), **kwargs})
        return warm[-1]["cache"]

    monkeypatch.setattr(lm_variants, "_runner", fake_runner)
    monkeypatch.setattr(lm_variants, "make_lm_trainer", lambda *args: FakeTrainer())
    monkeypatch.setattr(lm_variants, "cached_warm_start", fake_cache)
    config = lm_variants.Config(seeds=seeds, tuning_seeds=tuning, rl_steps=chunks * k,
                                steps_per_chunk=k, arms=",".join(trends),
                                lr_grid=",".join(map(str, grid)), bootstrap_reps=200)
    monkeypatch.setattr(lm_variants.Config, "validate", lambda self: None)
    summary = lm_variants.run(config, tmp_path)
    assert len(warm) == 1 and warm[0]["directory"] == tmp_path / "warm_start"
    assert (warm[0]["num_seeds"], warm[0]["base_seed"], warm[0]["block_size"]) == (
        tuning + seeds + config.block_size, config.base_seed, config.block_size)
    assert summary["warm_start"]["file"] == "0123.npz"
    return summary, calls


ALL_ARMS = ("grpo", "dr_grpo", "dapo", "dapo_sym_clip", "gspo", "rloo", "reinforce_pp")


def test_claims_supported_when_the_synthetic_data_say_so(tmp_path, monkeypatch):
    trends = {a: (0.0, 0.0) for a in ALL_ARMS}
    trends["grpo"] = (0.2, 0.0)            # incorrect completions grow 0.2 tokens / step
    trends["dapo_sym_clip"] = (0.0, -0.02)  # entropy collapses without clip-higher
    trends["dapo"] = (0.0, 0.0)
    accuracy = {a: (0.2, 0.5, 0.3) for a in ALL_ARMS}
    accuracy["rloo"] = (0.9, 0.2, 0.2)     # rloo's best rate is the grid's lowest ...
    accuracy["reinforce_pp"] = (0.2, 0.3, 0.6)  # reinforce_pp's the highest, twice over
    extra = {"reinforce_pp": {"0.00333": 0.7, "0.0111": 0.8}}  # ... rloo's 1e-4 / 3: 0.1
    summary, calls = _synthetic_run(tmp_path, monkeypatch, trends, accuracy, extra)
    claims = summary["claims"]
    assert claims["dr_grpo_length"]["verdict"] == "supported"
    growth = claims["dr_grpo_length"]["grpo_change"]["point"]
    # last chunk's mean step (9.5) - first chunk's (2: its step 0 has no incorrect one)
    assert growth == pytest.approx(0.2 * 7.5, abs=0.05)
    assert claims["dapo_entropy"]["verdict"] == "supported"
    per = summary["per_arm"]
    assert per["grpo"]["learning_rate"] == 3e-4 and per["rloo"]["learning_rate"] == 1e-4
    # each arm: all K rates on the tuning seeds, one more beyond an edge winner (at most
    # max_grid_extensions = 2), then only its winner on fresh seeds
    extended = {"rloo": [(1e-4 / 3,)], "reinforce_pp": [(1e-3 * 10 / 3,), (1e-3 * 100 / 9,)]}
    for arm in ALL_ARMS:
        mine = [c for c in calls if c[0] == arm]
        assert mine[0][1:] == ("tuning", (1e-4, 3e-4, 1e-3), 0, 4)
        added = extended.get(arm, [])
        assert len(mine) == 2 + len(added)
        for call, rates in zip(mine[1:-1], added, strict=True):
            assert call[1:2] + call[3:] == ("tuning", 0, 4)
            assert call[2] == pytest.approx(rates)
        assert mine[-1][1] == "evaluation" and mine[-1][3:] == (4, 12)
        assert mine[-1][2] == (per[arm]["learning_rate"],)
    assert per["grpo"]["lr_grid"] == [1e-4, 3e-4, 1e-3]
    assert (per["grpo"]["grid_position"], per["grpo"]["grid_extensions"]) == ("interior", 0)
    assert per["rloo"]["lr_grid"] == pytest.approx([1e-4 / 3, 1e-4, 3e-4, 1e-3])
    assert (per["rloo"]["grid_position"], per["rloo"]["grid_extensions"]) == ("interior", 1)
    pp = per["reinforce_pp"]
    assert pp["lr_grid"] == pytest.approx([1e-4, 3e-4, 1e-3, 1e-3 * 10 / 3, 1e-3 * 100 / 9])
    assert (pp["grid_position"], pp["grid_extensions"]) == ("highest", 2)
    assert pp["learning_rate"] == pytest.approx(1e-3 * 100 / 9)
    assert len(pp["tuning_means"]) == 5 and pp["tuning_means"][-1] > pp["tuning_means"][-2]
    assert summary["protocol"]["lr_grid"] == [1e-4, 3e-4, 1e-3]
    # paired differences and Holm over the six other arms
    others = [a for a in ALL_ARMS if a != "grpo"]
    raw = [per[a]["p_value"] for a in others]
    assert [per[a]["p_holm"] for a in others] == pytest.approx(holm(raw).adjusted.tolist())
    d = per["rloo"]
    assert d["difference"] == pytest.approx(
        np.mean(np.asarray(per["rloo"]["evaluation_scores"])
                - np.asarray(per["grpo"]["evaluation_scores"])))
    assert d["difference_ci"][0] > 0  # 0.9 vs 0.5 accuracy
    report = (tmp_path / "report.md").read_text()
    assert "Verdict: **supported**" in report
    assert "| 0.0111 | at the highest edge after 2 extensions |" in report
    assert "| 0.0001 | interior after 1 extension |" in report
    assert "The tuned rate of reinforce_pp is still at an edge" in report
    assert "The grid of rloo was extended until the tuned rate was interior" in report
    for name in ("accuracy.png", "entropy.png", "length_incorrect.png", "results.parquet"):
        assert (tmp_path / name).exists(), name


def test_claims_not_observed_and_no_collapse(tmp_path, monkeypatch):
    trends = {a: (0.0, 0.0) for a in ("grpo", "dr_grpo", "dapo", "dapo_sym_clip")}
    accuracy = {a: (0.3, 0.3, 0.3) for a in trends}
    summary, _ = _synthetic_run(tmp_path, monkeypatch, trends, accuracy)
    assert summary["claims"]["dr_grpo_length"]["verdict"] == "not observed"
    assert summary["claims"]["dapo_entropy"]["verdict"] == "no collapse"


def test_claims_contradicted(tmp_path, monkeypatch):
    trends = {"grpo": (0.1, 0.0), "dr_grpo": (0.3, 0.0), "dapo": (0.0, -0.04),
              "dapo_sym_clip": (0.0, -0.01)}
    accuracy = {a: (0.3, 0.3, 0.3) for a in trends}
    summary, _ = _synthetic_run(tmp_path, monkeypatch, trends, accuracy)
    assert summary["claims"]["dr_grpo_length"]["verdict"] == "contradicted"
    assert summary["claims"]["dapo_entropy"]["verdict"] == "contradicted"


def test_chunk_means_ignore_nan_steps():
    logs = {"m": np.array([[[1.0, np.nan, 3.0], [np.nan, np.nan, np.nan]]])}
    means = lm_variants.chunk_means(logs, "m")
    assert means[0, 0] == 2.0 and np.isnan(means[0, 1])
