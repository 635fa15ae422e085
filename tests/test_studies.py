"""Small configs of the studies: the files and summary keys the issues name."""


import numpy as np
import pandas as pd
import pytest
from helpers.study_runs import run_study

from experiments import four_answer, grpo_signal
from rljax.cli import main


def test_four_answer_small(tmp_path):
    out, s = run_study(tmp_path, "four-answer", "seeds=64", "samples=4000", "grpo_steps=20",
                       "bootstrap_reps=200", "sgd_learning_rates=0.1,1",
                       "adam_learning_rates=0.1", "kl_betas=0,0.04,0.16")
    for key in ["mc_grad_max_abs_err_median", "var_no_baseline", "var_with_baseline",
                "var_no_baseline_exact", "var_with_baseline_exact", "grpo_p_correct_no_kl",
                "grpo_p_correct_no_kl_ci", "grpo_p_correct_kl", "grpo_p_correct_kl_ci",
                "grpo_kl_gap_ci", "cells", "advantage_table", "clip_examples"]:
        assert key in s, key
    assert s["var_no_baseline_exact"] == pytest.approx(0.1024)
    assert s["var_with_baseline_exact"] == pytest.approx(0.0576)
    assert s["var_no_baseline"] == pytest.approx(0.1024, abs=0.01)
    np.testing.assert_allclose(s["exact_gradient"], [-0.08, -0.06, 0.16, -0.02], atol=1e-6)
    assert len(s["advantage_table"]) == 4 and s["advantage_table"][2] == [0.0] * 4
    np.testing.assert_allclose(s["advantage_table"][0], [1, -1, -1, 1], atol=1e-5)
    assert [c["objective"] for c in s["clip_examples"]] == pytest.approx([1.2, -0.8, -1.5])
    # the default path sweeps each optimizer's rates x kl_betas, one program per optimizer
    assert [(c["optimizer"], c["learning_rate"], c["kl_beta"]) for c in s["cells"]] == [
        (o, r, b) for o, rates in (("sgd", (0.1, 1.0)), ("adam", (0.1,)))
        for r in rates for b in (0.0, 0.04, 0.16)]
    assert len(s["grid"]["programs"]) == 2 and s["grid"]["seeds_per_config"] == 64
    for c in s["cells"]:
        assert c["low"] <= c["median"] <= c["high"] and c["median"] > 0.2
    # the headline: sgd lr 0.1 (Config.learning_rate) at beta 0 and 0.04, paired gap
    assert s["grpo_learning_rate"] == 0.1 and s["grpo_kl_beta"] == 0.04
    assert s["grpo_p_correct_no_kl"] == s["cells"][0]["median"]
    low, high = s["grpo_kl_gap_ci"]
    assert low <= s["grpo_kl_gap"] <= high
    for name in ["results.parquet", "curves.parquet", "mc.parquet", "report.md",
                 "mc_gradient_error.png", "grpo_p_correct.png", "grpo_heatmap.png",
                 "config.json"]:
        assert (out / name).exists(), name
    frame = pd.read_parquet(out / "results.parquet")
    assert list(frame.columns) == ["config", "optimizer", "learning_rate", "kl_beta", "seed",
                                   "p_correct"] and len(frame) == 9 * 64
    # the post's claim and a verdict on it, in the summary and the report
    assert "0.99" in s["claim"] and "0.94" in s["claim"] and "60 steps" in s["claim"]
    assert s["claim_figures"] == {"steps": 60, "group_size": 8, "p_start": 0.2,
                                  "p_no_kl": 0.99, "p_kl": 0.94}
    assert s["claim_tolerance"] == four_answer.CLAIM_TOLERANCE
    details = s["verdict_details"]
    assert details["same_setting"] is False and "20 steps" in s["verdict"]  # grpo_steps=20
    assert [e["setting"] for e in details["no_kl"]] == ["sgd lr 0.1", "sgd lr 1",
                                                        "adam lr 0.1"]
    report = (out / "report.md").read_text()
    assert s["claim"] in report and s["verdict"] in report
    assert "coverage" in report.split("## Procedure")[1]
    assert "grpo_heatmap.png" in report


def test_exact_variance_closed_form():
    assert four_answer.exact_variance(0.0) == pytest.approx(0.1024)
    assert four_answer.exact_variance(0.2) == pytest.approx(0.0576)


# four-answer's sweep, verdict and bad input: tests/test_four_answer.py


def test_grpo_signal_small(tmp_path):
    out, s = run_study(tmp_path, "grpo-signal", "seeds=4096", "bootstrap_reps=200")
    table = s["signal_fraction"]
    assert set(table) == {"0.0", "0.05", "0.25", "0.5", "0.75", "0.95", "1.0"}
    for p, v in table.items():
        assert v["analytic"] == pytest.approx(1 - float(p) ** 8 - (1 - float(p)) ** 8)
        assert abs(v["empirical"] - v["analytic"]) < 5 * np.sqrt(0.25 / 4096) + 1e-9
    assert table["0.0"]["empirical"] == 0.0 and table["1.0"]["empirical"] == 0.0
    assert (out / "signal_fraction.png").exists() and (out / "report.md").exists()
    # the procedure names the interval method and its measured coverage at this n
    assert "n = 4096" in s["interval_note"] and s["interval_method"] in s["interval_note"]
    assert "coverage" in s["interval_note"]
    procedure = (out / "report.md").read_text().split("## Procedure")[1]
    assert s["interval_note"] in procedure


def test_grpo_signal_bad_probabilities(capsys):
    assert main(["run", "grpo-signal", "--set", "probabilities=0.5,1.5"]) == 2
    assert "probabilities" in capsys.readouterr().err
    assert grpo_signal.analytic_signal_fraction(0.5, 2) == pytest.approx(0.5)


# test-time-search and rl-then-search: tests/test_search_studies.py
