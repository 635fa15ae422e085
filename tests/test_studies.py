"""Small configs of the studies: the files and summary keys the issues name."""

import json

import numpy as np
import pytest

from experiments import four_answer, grpo_signal
from rljax.cli import main


def run_study(tmp_path, name, *sets, block_size=32):
    out = tmp_path / name
    args = ["run", name, "--out", str(out), "--block-size", str(block_size)]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0
    return out, json.loads((out / "summary.json").read_text())


def test_four_answer_small(tmp_path):
    out, s = run_study(tmp_path, "four-answer", "seeds=64", "samples=4000", "grpo_steps=20",
                       "bootstrap_reps=200")
    for key in ["mc_grad_max_abs_err_median", "var_no_baseline", "var_with_baseline",
                "var_no_baseline_exact", "var_with_baseline_exact", "grpo_p_correct_no_kl",
                "grpo_p_correct_no_kl_ci", "grpo_p_correct_kl", "grpo_p_correct_kl_ci",
                "advantage_table", "clip_examples"]:
        assert key in s, key
    assert s["var_no_baseline_exact"] == pytest.approx(0.1024)
    assert s["var_with_baseline_exact"] == pytest.approx(0.0576)
    assert s["var_no_baseline"] == pytest.approx(0.1024, abs=0.01)
    np.testing.assert_allclose(s["exact_gradient"], [-0.08, -0.06, 0.16, -0.02], atol=1e-6)
    assert len(s["advantage_table"]) == 4 and s["advantage_table"][2] == [0.0] * 4
    np.testing.assert_allclose(s["advantage_table"][0], [1, -1, -1, 1], atol=1e-5)
    assert [c["objective"] for c in s["clip_examples"]] == pytest.approx([1.2, -0.8, -1.5])
    assert s["grpo_p_correct_no_kl"] > 0.2
    for name in ["results.parquet", "mc.parquet", "report.md", "mc_gradient_error.png",
                 "grpo_p_correct.png", "config.json"]:
        assert (out / name).exists(), name


def test_exact_variance_closed_form():
    assert four_answer.exact_variance(0.0) == pytest.approx(0.1024)
    assert four_answer.exact_variance(0.2) == pytest.approx(0.0576)


def test_grpo_signal_small(tmp_path):
    out, s = run_study(tmp_path, "grpo-signal", "seeds=4096", "bootstrap_reps=200")
    table = s["signal_fraction"]
    assert set(table) == {"0.0", "0.05", "0.25", "0.5", "0.75", "0.95", "1.0"}
    for p, v in table.items():
        assert v["analytic"] == pytest.approx(1 - float(p) ** 8 - (1 - float(p)) ** 8)
        assert abs(v["empirical"] - v["analytic"]) < 5 * np.sqrt(0.25 / 4096) + 1e-9
    assert table["0.0"]["empirical"] == 0.0 and table["1.0"]["empirical"] == 0.0
    assert (out / "signal_fraction.png").exists() and (out / "report.md").exists()


def test_grpo_signal_bad_probabilities(capsys):
    assert main(["run", "grpo-signal", "--set", "probabilities=0.5,1.5"]) == 2
    assert "probabilities" in capsys.readouterr().err
    assert grpo_signal.analytic_signal_fraction(0.5, 2) == pytest.approx(0.5)


@pytest.mark.timeout(240)
def test_test_time_search_small(tmp_path):
    out, s = run_study(tmp_path, "test-time-search", "seeds=4", "problems_per_level=1",
                       "budgets=16", "methods=majority_vote,prm_beam,mcts_gumbel",
                       "bootstrap_reps=100", block_size=4)
    assert set(s["accuracy"]) == {"majority_vote", "prm_beam", "mcts_gumbel"}
    for method, table in s["accuracy"].items():
        assert set(table) == {"16"} and 0.0 <= table["16"] <= 1.0
        assert len(s["accuracy_ci"][method]["16"]) == 2
    assert (out / "accuracy_vs_compute.png").exists()


def test_test_time_search_bad_method(capsys):
    assert main(["run", "test-time-search", "--set", "methods=greedy,oracle"]) == 2
    assert "methods" in capsys.readouterr().err


@pytest.mark.timeout(240)
def test_rl_then_search_small(tmp_path):
    out, s = run_study(tmp_path, "rl-then-search", "seeds=2", "updates=5",
                       "problems_per_level=2", "mcts_budget=8", "bootstrap_reps=50",
                       block_size=2)
    assert set(s["accuracy"]) == {"untrained_greedy", "untrained_mcts", "trained_greedy",
                                  "trained_mcts"}
    for key in s["accuracy"]:
        assert len(s["accuracy_ci"][key]) == 2 and len(s["accuracy_by_level"][key]) == 4
    assert "interaction" in s and (out / "accuracy_2x2.png").exists()
