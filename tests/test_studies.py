"""Small configs of the studies: the files and summary keys the issues name."""


import numpy as np
import pytest
from helpers.study_runs import run_study

from experiments import four_answer, grpo_signal
from rljax.cli import main


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
    # the post's claim and a verdict on it, in the summary and the report
    assert "0.99" in s["claim"] and "0.94" in s["claim"] and "60 steps" in s["claim"]
    assert s["claim_figures"] == {"steps": 60, "group_size": 8, "p_start": 0.2,
                                  "p_no_kl": 0.99, "p_kl": 0.94}
    details = s["verdict_details"]
    assert details["same_setting"] is False and "20 steps" in s["verdict"]  # grpo_steps=20
    assert details["figures_reproduced"] is False and "not reproduced" in s["verdict"]
    low, high = s["grpo_kl_gap_ci"]
    assert low <= s["grpo_kl_gap"] <= high
    assert details["kl_ordering"] == ("holds" if low > 0 else "reversed" if high < 0
                                      else "unresolved")
    report = (out / "report.md").read_text()
    assert s["claim"] in report and s["verdict"] in report
    assert "coverage" in report.split("## Procedure")[1]


def test_four_answer_verdict_reads_the_figures():
    config = four_answer.Config()
    base = {"grpo_p_correct_no_kl": 0.867, "grpo_p_correct_kl": 0.856, "grpo_kl_gap": 0.011,
            "grpo_kl_gap_ci": [0.01, 0.012]}
    v = four_answer.verdict(base, config)
    assert v == {"figures_reproduced": False, "kl_ordering": "holds", "same_setting": True,
                 "text": v["text"]}
    assert "not reproduced" in v["text"] and "0.867" in v["text"]
    near = {**base, "grpo_p_correct_no_kl": 0.985, "grpo_p_correct_kl": 0.95,
            "grpo_kl_gap_ci": [-0.01, 0.03]}
    v = four_answer.verdict(near, config)
    assert v["figures_reproduced"] and v["kl_ordering"] == "unresolved"
    v = four_answer.verdict({**base, "grpo_kl_gap_ci": [-0.02, -0.01]}, config)
    assert v["kl_ordering"] == "reversed"


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
