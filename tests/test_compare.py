"""Tests for `rljax compare` (rljax.compare.main) on tiny fake runs and the Atari 100k data."""

import json

import numpy as np
import pandas as pd
import pytest

from rljax import compare

pytestmark = pytest.mark.timeout(180)


def _make_run(path, *, shift=0.0, seeds=6, modes=("orm", "prm"), task=False):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"experiment": "orm-vs-prm", "config": {}}))
    rng = np.random.default_rng(seeds)
    rows = []
    for i, mode in enumerate(modes):
        for seed in range(seeds):
            for step in (0, 10, 20):
                for t in ("a", "b") if task else (None,):
                    row = {"seed": seed, "step": step, "mode": mode,
                           "success": step / 40 + 0.1 * i + shift + rng.normal(0, 0.05)}
                    if t is not None:
                        row["task"] = t
                    rows.append(row)
    pd.DataFrame(rows).to_parquet(path / "results.parquet")
    return path


def test_report_on_two_runs(tmp_path, capsys):
    r1 = _make_run(tmp_path / "r1")
    r2 = _make_run(tmp_path / "r2", shift=0.2)
    out = tmp_path / "out"
    assert compare.main([str(r1), str(r2), "--metric", "success", "--out", str(out),
                         "--reps", "200"]) == 0
    report = (out / "report.md").read_text()
    for needle in ("r1/mode=orm", "r2/mode=prm", "IQM", "Optimality gap", "P(X > Y)",
                   "Holm p", "Statistical procedure", "stratified-bootstrap"):
        assert needle in report
    for png in ("intervals.png", "probability_of_improvement.png", "performance_profiles.png",
                "sample_efficiency.png"):
        assert (out / png).stat().st_size > 1000


def test_finals_follow_last_k_and_task_column(tmp_path):
    run = _make_run(tmp_path / "r", task=True, modes=("x",))
    table = pd.read_parquet(run / "results.parquet")
    finals, curves, info = compare.load_scores([run], "success", last_k=2)
    (label,) = finals
    assert label == "mode=x" and info[label]["tasks"] == ["a", "b"]
    want = (table[table.step >= 10].groupby(["seed", "task"])["success"].mean()
            .unstack().to_numpy())
    np.testing.assert_allclose(finals[label], want)
    steps, cube = curves[label]
    assert list(steps) == [0, 10, 20] and cube.shape == (6, 2, 3)


def test_atari100k_report(tmp_path):
    out = tmp_path / "atari"
    assert compare.main(["--atari100k", "--out", str(out), "--reps", "100"]) == 0
    report = (out / "report.md").read_text()
    assert "| SPR | DrQ(eps) |" in report and "human-normalised" in report
    assert "| SPR | 100 | 26 |" in report and "| IRIS | 5 | 26 |" in report


@pytest.mark.parametrize("argv,match", [
    (["--metric", "success"], "give at least one run DIR"),
    (["/nonexistent/dir", "--metric", "success"], "is not a directory"),
    (["{run}"], "--metric NAME is required"),
    (["{run}", "--metric", "nope"], "lacks column(s) ['nope']"),
    (["{run}", "--metric", "success", "--confidence", "2"], "--confidence must be"),
    (["{run}", "--metric", "success", "--bogus"], "unrecognized arguments: --bogus"),
    (["{run}", "--atari100k"], "either run DIRs or --atari100k"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, argv, match):
    run = _make_run(tmp_path / "r")
    code = compare.main([a.replace("{run}", str(run)) for a in argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: ") and match in err and err.count("\n") == 1
