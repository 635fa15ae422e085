"""A tiny config of the ppo-cartpole study through the CLI (chunked, logged every 2
updates): the files and summary keys the issue names, the helpers that turn logged rows
into curves, and the config checks of chunks and rows."""

import json

import numpy as np
import pandas as pd
import pytest

from experiments import ppo_cartpole
from rljax import stats
from rljax.cli import main
from rljax.training import final_returns
from rljax.training.episode_returns import PPO_METRICS, ppo_results_table


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


def _summary(iqm, ci, at_cap, seeds_at_cap):
    return {
        "final_return_iqm": iqm, "final_return_ci": ci, "final_return_at_cap": at_cap,
        "final_return_mean": iqm, "final_return_median": iqm,
        "final_return_interval_note": "iqm over n = 16: some interval, measured coverage 0.95",
        "fraction_seeds_final_500": seeds_at_cap / 16,
        "fraction_seeds_final_500_ci": list(stats.clopper_pearson(seeds_at_cap, 16)),
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
    np.testing.assert_allclose(final_returns({"return_sum": sums, "episodes": counts}, last=2),
                               [265.0])
    assert np.isnan(final_returns({"return_sum": sums[:, :2], "episodes": counts[:, :2]})[0])


def test_results_table_rows_of_several_updates():
    logs = {"return_sum": np.array([[20.0, 0.0], [30.0, 500.0]], np.float32),
            "episodes": np.array([[1, 0], [2, 1]], np.int32)}
    logs.update({name: np.ones((2, 2), np.float32) for name in PPO_METRICS})
    table = ppo_results_table(logs, steps_per_update=128, log_every=3)
    assert table["seed"].tolist() == [0, 0, 1, 1]
    assert table["update"].tolist() == [3, 6, 3, 6]
    assert table["env_steps"].tolist() == [384, 768, 384, 768]
    np.testing.assert_allclose(table["episode_return"], [20.0, np.nan, 15.0, 500.0])


def test_default_config_is_16_chunks_of_61_updates():
    config = ppo_cartpole.Config()
    config.validate()
    assert config.chunk_updates == 0 and config.chunk_size == 61  # derived
    assert config.num_updates == 976 and config.num_updates // config.chunk_size == 16
    assert config.num_rows == 976


def test_chunks_are_derived_when_total_steps_changes_and_a_bad_size_lists_good_ones(capsys):
    config = ppo_cartpole.Config(total_steps=977 * 512)  # a prime number of updates
    config.validate()
    assert config.num_updates == 977 and config.chunk_size == 1
    config = ppo_cartpole.Config(total_steps=1000 * 512, log_every=4)
    config.validate()
    assert config.chunk_size == 40 and config.chunk_size % 4 == 0  # <= 1000 / 16 = 62
    assert main(["run", "ppo-cartpole", "--set", "total_steps=512000", "--set",
                 "chunk_updates=61"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: chunk_updates: must divide the number of updates total_steps // "
                   "(num_envs * num_steps) = 1000 and be a multiple of log_every = 1, got 61; "
                   "values that work: 1, 2, 4, 5, 8, 10, 20, 25, 40, 50, 100, 125, ... (or 0: "
                   "automatic, 50)")


def test_bad_config_names_the_field(capsys):
    assert main(["run", "ppo-cartpole", "--set", "gamma=1.5"]) == 2
    assert "gamma" in capsys.readouterr().err
    assert main(["run", "ppo-cartpole", "--set", "clip_epsilon=0"]) == 2
    assert "clip_epsilon" in capsys.readouterr().err


@pytest.mark.parametrize("overrides, field", [
    (["chunk_updates=100"], "chunk_updates"),  # does not divide 976 updates
    (["chunk_updates=-1"], "chunk_updates"),
    (["chunk_updates=61", "log_every=2"], "log_every"),  # does not divide 61
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


# ------------------------------------------------------------------------------ grids

TINY = ("total_steps=256", "num_steps=32", "num_epochs=1", "num_minibatches=1",
        "hidden_size=8", "chunk_updates=1", "curve_points=2", "final_updates=1",
        "bootstrap_reps=50")
GRID = ("learning_rate=0.001,0.03", "clip_epsilon=0.1,0.2")


def _grid_run(tmp_path, name, grids, sets=()):
    out = tmp_path / name
    args = ["run", "ppo-cartpole", "--out", str(out), "--seeds", "3", "--block-size", "4"]
    swept = {g.split("=")[0] for g in grids}
    for s in (*TINY, *sets):
        if s.split("=")[0] not in swept:
            args += ["--set", s]
    for g in grids:
        args += ["--grid", g]
    assert main(args) == 0
    return out, json.loads((out / "summary.json").read_text())


@pytest.mark.slow  # suite time (~14 s); the tiny study and the grid-field tests stay fast
@pytest.mark.timeout(300)
def test_tiny_grid_writes_columns_curves_and_plot(tmp_path):
    """lr x clip in one program: the tables gain the swept columns, the curves and paired
    differences are the per-config scores'; and config (0.03, 0.2), the last of the grid,
    is bitwise the same config run inside a structural grid (its own program, its own
    constants) -- so the chunk program reads lr and clip from hparams, not the config."""
    out, summary = _grid_run(tmp_path, "grid", GRID)
    assert summary["num_configs"] == 4 and len(summary["programs"]) == 1
    table = pd.read_parquet(out / "results.parquet")
    assert list(table.columns[:3]) == ["config", "learning_rate", "clip_epsilon"]
    assert len(table) == 4 * 3 * 2  # configs x seeds x logged rows
    assert table.groupby("config")[["learning_rate", "clip_epsilon"]].first().values.tolist() \
        == [[0.001, 0.1], [0.001, 0.2], [0.03, 0.1], [0.03, 0.2]]
    scores = pd.read_parquet(out / "scores.parquet")
    matrix = scores.pivot(index="config", columns="seed", values="final_return").to_numpy()
    last = table[table["update"] == 2]
    np.testing.assert_allclose(matrix.reshape(-1), last["return_sum"] / last["episodes"],
                               rtol=1e-6)
    for entry, row in zip(summary["configs"], matrix, strict=True):
        assert entry["final_return"]["point"] == pytest.approx(row.mean())
        assert entry["final_return"]["low"] <= row.mean() <= entry["final_return"]["high"]
    best = summary["best"]["config"]
    assert best == int(np.argmax(matrix.mean(axis=1)))
    diffs = {d["config"]: d for d in summary["paired_vs_best"]}
    assert sorted(diffs) == [c for c in range(4) if c != best]
    for c, d in diffs.items():
        assert d["point"] == pytest.approx((matrix[best] - matrix[c]).mean())
    lr_panel, clip_panel = summary["curves"]
    assert lr_panel["field"] == "learning_rate" and lr_panel["log_x"]
    assert sorted(lr_panel["lines"]) == ["clip ε = 0.1", "clip ε = 0.2"]
    np.testing.assert_allclose(lr_panel["lines"]["clip ε = 0.2"]["point"],
                               matrix[[1, 3]].mean(axis=1))
    (label, line), = clip_panel["lines"].items()
    best_lr = summary["best"]["learning_rate"]
    assert clip_panel["field"] == "clip_epsilon" and str(best_lr) in label
    rows = [0, 1] if best_lr == 0.001 else [2, 3]
    np.testing.assert_allclose(line["point"], matrix[rows].mean(axis=1))
    assert (out / "sensitivity.png").stat().st_size > 10_000
    report = (out / "report.md").read_text()
    assert "## Paired differences" in report and "optimistic" in report
    assert json.loads((out / "config.json").read_text())["grid"]["num_configs"] == 4
    # hidden_size is structural: 2 programs, grid order kept; its hidden 8 config is (0.03,
    # 0.2) alone in a program whose constants are its own
    out2, summary2 = _grid_run(tmp_path, "structural", ["hidden_size=16,8"],
                               ["learning_rate=0.03", "clip_epsilon=0.2"])
    assert [p["structural"] for p in summary2["programs"]] == [{"hidden_size": 16},
                                                               {"hidden_size": 8}]
    alone = pd.read_parquet(out2 / "results.parquet")
    alone = alone[alone["hidden_size"] == 8].drop(columns=["config", "hidden_size"])
    inside = table[table["config"] == 3].drop(columns=["config", "learning_rate",
                                                       "clip_epsilon"])
    pd.testing.assert_frame_equal(alone.reset_index(drop=True), inside.reset_index(drop=True),
                                  check_exact=True)
    assert not np.array_equal(table[table["config"] == 0]["loss"], inside["loss"])


def test_the_study_config_extends_the_trainers_and_reads_its_declarations():
    """No field of PPOTrainConfig is re-declared: the study's config *is* one (its fields,
    defaults and metadata are the trainer's); the traced set is the trainer's
    declaration, and value_clip=None (off) is structural."""
    import dataclasses

    from rljax.config import structural_fields, traced_fields
    from rljax.training import PPOTrainConfig

    trainer = {f.name: f for f in dataclasses.fields(PPOTrainConfig)}
    study = {f.name: f for f in dataclasses.fields(ppo_cartpole.Config)}
    assert issubclass(ppo_cartpole.Config, PPOTrainConfig)
    for name, f in trainer.items():
        assert study[name] is f, name  # the trainer's declaration itself, not a copy
    assert traced_fields(ppo_cartpole.Config) == traced_fields(PPOTrainConfig)
    assert {"hidden_size", "num_envs", "anneal_lr"} <= set(
        structural_fields(ppo_cartpole.Config))
    assert not {"seeds", "block_size", "curve_points"} & set(
        structural_fields(ppo_cartpole.Config) + traced_fields(ppo_cartpole.Config))
    assert ppo_cartpole.Config().hparams() == {
        "learning_rate": 2.5e-4, "adam_eps": 1e-5, "clip_epsilon": 0.2,
        "entropy_coef": 0.01, "value_coef": 0.5, "value_clip": 0.2, "gamma": 0.99,
        "lam": 0.95, "max_grad_norm": 0.5}
    assert "value_clip" not in ppo_cartpole.Config(value_clip=None).hparams()


@pytest.mark.parametrize("args, field", [
    (["--grid", "seeds=1,2"], "seeds"),  # not sweepable
    (["--grid", "clip_epsilon=0,0.2"], "clip_epsilon"),  # invalid value in the grid
    (["--grid", "learning_rate=1e-3", "--set", "learning_rate=1e-3"], "learning_rate"),
    (["--grid", "gamma=0.9,1.5"], "gamma"),
    (["--grid", "total_steps=512,1024", "--set", "num_steps=32", "--set",
      "chunk_updates=3", "--set", "curve_points=1", "--set", "final_updates=1"],
     "chunk_updates"),  # 3 divides neither 4 nor 8 updates
])
def test_bad_grid_names_the_field(capsys, args, field):
    assert main(["run", "ppo-cartpole", *args]) == 2
    err = capsys.readouterr().err
    assert field in err and len(err.strip().splitlines()) == 1, err


def _fake_runs(means):
    """Logged rows whose final window holds one episode of return ``means[c][s]``."""
    runs = []
    for m in means:
        m = np.asarray(m, np.float32)
        logs = {"return_sum": np.stack([np.zeros_like(m), m], axis=1),
                "episodes": np.ones((m.shape[0], 2), np.int32)}
        logs.update({k: np.zeros((m.shape[0], 2), np.float32)
                     for k in PPO_METRICS})
        runs.append({"logs": logs, "first_nonfinite": np.full(m.shape[0], -1)})
    return runs


def test_analysis_against_direct_means(tmp_path):
    """Three fields: the main panel's lines hold the third field at the best's value; the
    slices and paired differences are the per-config means of a known score matrix; a
    non-finite run is left out of its config and never picked as the best."""
    from rljax import sensitivity
    from rljax.grid import make_grid

    sets = {"total_steps": 1024, "num_steps": 128, "chunk_updates": 1, "curve_points": 1,
            "final_updates": 1, "seeds": 4, "bootstrap_reps": 50}
    grid = make_grid(ppo_cartpole.Config, sets, grid=[
        "learning_rate=1e-4,1e-3,1e-2", "clip_epsilon=0.1,0.3", "entropy_coef=0,0.01"])
    configs = grid.configs(ppo_cartpole.Config(**sets))
    rng = np.random.default_rng(0)
    means = rng.uniform(50, 450, (12, 4))
    means[7] = [470.0, 480.0, 490.0, 495.0]  # lr 1e-3, clip 0.3, entropy 0.01: the best
    means[11] = 1000.0  # would win, but one of its seeds diverges
    means[9] = means[7]  # tied with the best on every seed
    means[10] = [500.0, 500.0, 500.0, 20.0]  # t's upper bound > 500: clipped to the cap
    runs = _fake_runs(means)
    runs[11]["first_nonfinite"][2] = 1
    timing = {"programs": [], "compile_seconds": 0.0, "run_seconds": 1.0, "timed_steps": 0}
    summary = ppo_cartpole.analyse_grid(configs, grid, runs, timing, tmp_path)
    scores = means.astype(np.float32).astype(np.float64)
    scores[11, 2] = np.nan
    assert summary["best"]["config"] == 7 and summary["best"]["tied_on_every_seed"] == [9]
    assert summary["configs"][11]["finite_seeds"] == 3
    assert summary["configs"][10]["final_return"]["high"] == 500.0
    assert summary["configs"][10]["seeds_at_cap"] == 3
    np.testing.assert_allclose(summary["configs"][10]["fraction_at_cap_ci"],
                               stats.clopper_pearson(3, 4))
    lines = summary["curves"][0]["lines"]
    # lines per clip, entropy fixed at the best's 0.01: configs (lr, clip, ent) order
    ent = np.array([c.entropy_coef for c in configs])
    clip = np.array([c.clip_epsilon for c in configs])
    for value in (0.1, 0.3):
        rows = np.flatnonzero((ent == 0.01) & (clip == value))
        np.testing.assert_allclose(lines[f"clip ε = {value:g}"]["point"],
                                   [np.nanmean(scores[r]) for r in rows])
    # slice over clip at lr 1e-3, entropy 0.01 (rows 5, 7); over entropy at (1e-3, 0.3)
    np.testing.assert_allclose(summary["curves"][1]["lines"].popitem()[1]["point"],
                               scores[[5, 7]].mean(axis=1))
    np.testing.assert_allclose(summary["curves"][2]["lines"].popitem()[1]["point"],
                               scores[[6, 7]].mean(axis=1))
    for d in summary["paired_vs_best"]:
        ok = np.isfinite(scores[d["config"]])
        assert d["point"] == pytest.approx(np.mean(scores[7][ok] - scores[d["config"]][ok]))
    # along the clip lines: the base clip 0.2 is not in the grid, so 0.1 is the reference
    along = {d["config"]: d for d in summary["paired_along_lines"]}
    assert sorted(along) == [c for c in range(12) if clip[c] == 0.3]
    for c, d in along.items():
        assert d["reference"] == c - 2
        ok = np.isfinite(scores[c])
        assert d["point"] == pytest.approx(np.mean(scores[c][ok] - scores[c - 2][ok]))
    # steps in the learning rate: (1e-3 vs 1e-4) and (1e-2 vs 1e-3) for each clip x entropy
    steps = {d["config"]: d["reference"] for d in summary["paired_steps_in_x"]}
    assert steps == {c: c - 4 for c in range(4, 12)}
    for d in summary["paired_steps_in_x"]:
        ok = np.isfinite(scores[d["config"]])
        assert d["point"] == pytest.approx(np.mean(scores[d["config"]][ok]
                                                   - scores[d["reference"]][ok]))
    worse = sum(d["low"] > 0 for d in summary["paired_vs_best"])
    assert f"{worse} of 11 other configurations" in sensitivity.reading(summary)
    assert set(pd.read_parquet(tmp_path / "results.parquet").columns[:4]) == {
        "config", "learning_rate", "clip_epsilon", "entropy_coef"}
