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


def _make_grid_run(path, axes, *, seeds=5, float32=False):
    """A hand-written grid run: config.json's "grid" record and results.parquet with the
    ``config`` index and one numeric column per swept field, as ``rljax run --grid``
    writes them."""
    import itertools

    path.mkdir(parents=True)
    fields = list(axes)
    rows_of_grid = [dict(zip(fields, combo, strict=True))
                    for combo in itertools.product(*axes.values())]
    (path / "config.json").write_text(json.dumps({
        "experiment": "toy", "config": {},
        "grid": {"grid": axes, "fields": fields, "num_configs": len(rows_of_grid)}}))
    rng = np.random.default_rng(0)
    rows = []
    for c, grid_row in enumerate(rows_of_grid):
        for seed in range(seeds):
            for step in (0, 10):
                rows.append({"config": c, **grid_row, "seed": seed, "step": step,
                             "success": 10 * c + step + rng.normal(0, 0.1)})
    table = pd.DataFrame(rows)
    if float32:
        table = table.astype({f: np.float32 for f in fields if table[f].dtype == float})
    table.to_parquet(path / "results.parquet")
    return path, table


def test_grid_fields_are_variants(tmp_path):
    run, table = _make_grid_run(tmp_path / "g", {"learning_rate": [0.01, 0.1]}, float32=True)
    finals, curves, _ = compare.load_scores([run], "success")
    assert list(finals) == ["learning_rate=0.01", "learning_rate=0.1"]
    for c, label in enumerate(finals):
        want = table[(table.config == c) & (table.step == 10)].sort_values("seed")["success"]
        np.testing.assert_allclose(finals[label][:, 0], want.to_numpy())
        assert curves[label][1].shape == (5, 1, 2)


def test_two_field_grid_and_explicit_group_by(tmp_path, capsys):
    run, table = _make_grid_run(tmp_path / "g", {"learning_rate": [0.001, 0.01],
                                                 "kl_beta": [0.0, 0.5]})
    finals, _, _ = compare.load_scores([run], "success")
    assert list(finals) == ["learning_rate=0.001,kl_beta=0", "learning_rate=0.001,kl_beta=0.5",
                            "learning_rate=0.01,kl_beta=0", "learning_rate=0.01,kl_beta=0.5"]
    by_config, _, _ = compare.load_scores([run], "success", group_by=["config"])
    assert list(by_config) == ["config=0", "config=1", "config=2", "config=3"]
    np.testing.assert_array_equal(by_config["config=3"],
                                  finals["learning_rate=0.01,kl_beta=0.5"])
    with pytest.raises(compare.CompareError, match=r"several rows per seed/step \(they differ "
                                                   r"in \['config', 'kl_beta'\]\)"):
        compare.load_scores([run], "success", group_by=["learning_rate"])
    out = tmp_path / "out"
    assert compare.main([str(run), "--metric", "success", "--out", str(out), "--reps",
                         "100"]) == 0
    assert "| learning_rate=0.01,kl_beta=0.5 | 5 | 1 |" in (out / "report.md").read_text()


def test_grid_field_missing_from_results_is_one_line(tmp_path, capsys):
    run, table = _make_grid_run(tmp_path / "g", {"learning_rate": [0.01, 0.1]})
    table.drop(columns="learning_rate").to_parquet(run / "results.parquet")
    assert compare.main([str(run), "--metric", "success", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "lists grid field(s) ['learning_rate'] but results.parquet" in err
    assert err.count("\n") == 1
