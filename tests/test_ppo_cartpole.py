"""A tiny config of the ppo-cartpole study through the CLI (chunked, logged every 2
updates): the files and summary keys the issue names, the helpers that turn logged rows
into curves, and the config checks of chunks and rows."""

import json

import numpy as np
import pandas as pd
import pytest

from experiments import ppo_cartpole
from rljax.cli import main


@pytest.mark.timeout(120)
def test_tiny_study_writes_files_and_keys(tmp_path):
    out = tmp_path / "ppo"
    args = ["run", "ppo-cartpole", "--out", str(out), "--seeds", "2", "--block-size", "2"]
    # 4 updates of 4 envs x 32 steps, in 2 chunks of 2 updates, one logged row per chunk
    for s in ("total_steps=512", "num_steps=32", "chunk_updates=2", "log_every=2",
              "curve_points=2", "final_updates=2", "bootstrap_reps=50"):
        args += ["--set", s]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    for key in ("final_return_iqm", "final_return_ci", "env_steps_per_second",
                "ppo_state_bytes", "grpo_state_bytes", "curve_iqm", "compile_seconds",
                "run_seconds", "nonfinite_seeds"):
        assert key in summary, key
    assert summary["updates"] == 4 and summary["chunks"] == 2 and summary["logged_rows"] == 2
    assert len(summary["curve_iqm"]) == 2 and summary["curve_env_steps"] == [256, 512]
    assert summary["nonfinite_seeds"] == 0 and summary["first_nonfinite_update"] == {}
    low, high = summary["final_return_ci"]
    assert low <= summary["final_return_iqm"] <= high
    assert summary["env_steps_per_second"] > 0
    table = pd.read_parquet(out / "results.parquet")
    assert len(table) == 2 * 2
    assert table["update"].tolist() == [2, 4, 2, 4]
    assert table["env_steps"].tolist() == [256, 512, 256, 512]
    assert {"seed", "update", "env_steps", "episodes", "episode_return", "entropy",
            "clip_fraction", "approx_kl"} <= set(table.columns)
    for name in ("report.md", "return_curve.png", "final_returns.png", "config.json"):
        assert (out / name).exists(), name
    assert "95 % CI" in (out / "report.md").read_text()
    low, high = summary["fraction_seeds_final_500_ci"]
    assert 0.0 <= low <= summary["fraction_seeds_final_500"] <= high <= 1.0
    procedure = (out / "report.md").read_text().split("## Procedure")[1]
    assert summary["final_return_interval_note"] in procedure and "coverage" in procedure


def test_clopper_pearson_matches_scipy_and_closed_forms():
    from scipy.stats import binomtest

    for x, n in ((0, 16), (3, 16), (15, 16), (16, 16), (1, 1), (37, 100)):
        ref = binomtest(x, n).proportion_ci(confidence_level=0.95, method="exact")
        np.testing.assert_allclose(ppo_cartpole.clopper_pearson(x, n), (ref.low, ref.high),
                                   rtol=1e-9, atol=1e-12)
    # x = n: [(alpha / 2)^(1 / n), 1]; x = 0: [0, 1 - (alpha / 2)^(1 / n)]
    assert ppo_cartpole.clopper_pearson(16, 16) == pytest.approx((0.025 ** (1 / 16), 1.0))
    assert ppo_cartpole.clopper_pearson(0, 16) == pytest.approx((0.0, 1 - 0.025 ** (1 / 16)))
    for bad, field in (((17, 16), "successes"), ((1, 0), "trials"), ((-1, 4), "successes")):
        with pytest.raises(ValueError, match=field):
            ppo_cartpole.clopper_pearson(*bad)


def _summary(iqm, ci, at_cap, seeds_at_cap):
    return {
        "final_return_iqm": iqm, "final_return_ci": ci, "final_return_at_cap": at_cap,
        "final_return_mean": iqm, "final_return_median": iqm,
        "final_return_interval_note": "iqm over n = 16: some interval, measured coverage 0.95",
        "fraction_seeds_final_500": seeds_at_cap / 16,
        "fraction_seeds_final_500_ci": list(ppo_cartpole.clopper_pearson(seeds_at_cap, 16)),
        "seeds_final_500": seeds_at_cap, "seeds_without_final_episode": 0,
        "env_steps_per_second": 1e5, "compile_seconds": 1.0, "env_steps_per_seed": 499_712,
        "updates": 976, "chunks": 16, "logged_rows": 976, "ppo_state_bytes": 2,
        "grpo_state_bytes": 1, "ppo_param_count": 2, "grpo_param_count": 1,
        "state_bytes_ratio": 2.0,
    }


def test_report_says_a_final_iqm_of_500_is_the_cap_not_precision():
    config = ppo_cartpole.Config()
    at_cap = _summary(500.0, [500.0, 500.0], True, 15)
    reading = ppo_cartpole.reading(at_cap, config)
    assert "at the 500-step cap" in reading and "not a precise estimate" in reading
    assert "15 of 16 seeds (94 %, 95 % CI [70, 100] %)" in reading
    text = ppo_cartpole.report_markdown(at_cap, config)
    row = next(line for line in text.splitlines() if line.startswith("| final return (IQM"))
    assert "at the 500-step cap" in row and "not precision" in row
    row = next(line for line in text.splitlines() if line.startswith("| fraction of seeds"))
    assert "[0.698, 0.998]" in row and "Clopper-Pearson" in row
    below = ppo_cartpole.report_markdown(_summary(310.0, [250.0, 400.0], False, 2), config)
    assert "cap:" not in below and "not precision" not in below
    assert "2 of 16 seeds (12 %, 95 % CI [2, 38] %)" in below


def test_state_bytes_count_params_and_adam_moments():
    b = ppo_cartpole.state_bytes(ppo_cartpole.Config())
    actor = 4 * 64 + 64 + 64 * 64 + 64 + 64 * 2 + 2
    critic = actor - 64 - 1
    assert b["grpo_param_count"] == actor and b["ppo_param_count"] == actor + critic
    # params + Adam's mu and nu, float32, plus int32 step counters
    assert 12 * actor <= b["grpo_state_bytes"] <= 12 * actor + 16
    assert 12 * (actor + critic) <= b["ppo_state_bytes"] <= 12 * (actor + critic) + 16


def test_binned_and_final_returns():
    sums = np.array([[20.0, 0.0, 30.0, 500.0]])
    counts = np.array([[1, 0, 1, 1]])
    np.testing.assert_allclose(ppo_cartpole.binned_returns(sums, counts, 2), [[20.0, 265.0]])
    np.testing.assert_allclose(ppo_cartpole.binned_returns(sums[:, 1:], counts[:, 1:], 3),
                               [[np.nan, 30.0, 500.0]])
    np.testing.assert_allclose(ppo_cartpole.final_returns(sums, counts, 2), [265.0])
    assert np.isnan(ppo_cartpole.final_returns(sums[:, :2], counts[:, :2], 1)[0])


def test_results_table_rows_of_several_updates():
    logs = {"return_sum": np.array([[20.0, 0.0], [30.0, 500.0]], np.float32),
            "episodes": np.array([[1, 0], [2, 1]], np.int32)}
    logs.update({name: np.ones((2, 2), np.float32) for name in ppo_cartpole.METRIC_COLUMNS})
    table = ppo_cartpole.results_table(logs, steps_per_update=128, log_every=3)
    assert table["seed"].tolist() == [0, 0, 1, 1]
    assert table["update"].tolist() == [3, 6, 3, 6]
    assert table["env_steps"].tolist() == [384, 768, 384, 768]
    np.testing.assert_allclose(table["episode_return"], [20.0, np.nan, 15.0, 500.0])


def test_default_config_is_16_chunks_of_61_updates():
    config = ppo_cartpole.Config()
    config.validate()
    assert config.num_updates == 976 and config.num_updates // config.chunk_updates == 16
    assert config.num_rows == 976


def test_bad_config_names_the_field(capsys):
    assert main(["run", "ppo-cartpole", "--set", "gamma=1.5"]) == 2
    assert "gamma" in capsys.readouterr().err
    assert main(["run", "ppo-cartpole", "--set", "clip_epsilon=0"]) == 2
    assert "clip_epsilon" in capsys.readouterr().err


@pytest.mark.parametrize("overrides, field", [
    (["chunk_updates=100"], "chunk_updates"),  # does not divide 976 updates
    (["chunk_updates=0"], "chunk_updates"),
    (["log_every=2"], "log_every"),  # does not divide 61
    (["log_every=61"], "curve_points"),  # 16 rows < 50 points
    (["log_every=61", "curve_points=16"], "final_updates"),  # 20 is not a multiple of 61
])
def test_bad_chunk_and_row_settings_name_the_field(capsys, overrides, field):
    args = ["run", "ppo-cartpole"]
    for s in overrides:
        args += ["--set", s]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert field in err and len(err.strip().splitlines()) == 1, err
