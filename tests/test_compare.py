"""Tests for `rljax compare` (rljax.compare.main) on tiny fake runs and the Atari 100k data."""

import json
import zlib

import jax
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


# ----------------------------------------------------------------------------- pairing


def _seed_effects(seeds, base_seed):
    """Per-seed effects shared by every run with this base seed (as seed keys are)."""
    return np.random.default_rng(1000 + base_seed).normal(0.0, 1.0, max(seeds) + 1)[
        np.asarray(seeds)]


def _make_stepless_run(path, *, shifts, base_seed=0, seeds=range(8), grid=False, noise=0.05,
                       extra=None):
    """A finished run without a step column: one row per (variant, seed) holding
    ``seed effect + shift + small noise``, so variants are strongly correlated by seed.
    ``shifts``: ``{variant value: shift}`` (a grid's ``learning_rate`` column with
    ``grid=True``, else a string ``arm`` column)."""
    path.mkdir(parents=True)
    seeds = list(seeds)
    effect = _seed_effects(seeds, base_seed)
    rng = np.random.default_rng(zlib.crc32(path.name.encode()))
    column = "learning_rate" if grid else "arm"
    rows = []
    for c, (value, shift) in enumerate(shifts.items()):
        for seed, e in zip(seeds, effect, strict=True):
            row = {column: value, "seed": np.int32(seed),
                   "score": e + shift + rng.normal(0, noise)}
            if grid:
                row["config"] = np.int32(c)
            rows.append({**row, **(extra or {})})
    record = {"experiment": "toy", "config": {"seeds": len(seeds), "base_seed": base_seed,
                                              "block_size": 8}}
    if grid:
        record["grid"] = {"grid": {column: list(shifts)}, "fields": [column],
                          "num_configs": len(shifts)}
    (path / "config.json").write_text(json.dumps(record))
    pd.DataFrame(rows).to_parquet(path / "results.parquet")
    return path


def _run(argv, tmp_path, capsys):
    out = tmp_path / "out"
    code = compare.main([*map(str, argv), "--metric", "score", "--out", str(out),
                         "--reps", "300"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return (out / "report.md").read_text(), captured.err


def test_grid_configs_are_compared_paired(tmp_path, capsys):
    """Configs of one grid share seed keys: paired differences, paired t, Wilcoxon and the
    paired probability of improvement, with the report saying why; a step-less table's
    final score is its value per seed, and the curves are skipped."""
    from rljax import stats

    run = _make_stepless_run(tmp_path / "g", shifts={0.01: 0.0, 0.1: 0.2}, grid=True)
    report, err = _run([run], tmp_path, capsys)
    finals, curves, info = compare.load_scores([run], "score")
    assert curves == {} and info["learning_rate=0.01"]["seed_ids"] == list(range(8))
    a, b = finals["learning_rate=0.01"][:, 0], finals["learning_rate=0.1"][:, 0]
    assert ("* learning_rate=0.01 vs learning_rate=0.1: paired: configs of one grid share "
            "seed keys (common random numbers)") in report
    assert ("Final score: the metric's value per seed (the table has no step column; "
            "sample-efficiency curves skipped).") in report
    assert "Skipped for learning_rate=0.01, learning_rate=0.1: the table has no step" in report
    assert not (tmp_path / "out" / "sample_efficiency.png").exists()
    ttest, rank = stats.paired_ttest(a, b), stats.wilcoxon_signed_rank(a, b)
    diff = stats.paired_t_interval(a, b)
    row = next(line for line in report.splitlines()
               if line.startswith("| learning_rate=0.01 | learning_rate=0.1 | score | 8 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4] == compare._fmt(diff)
    assert cells[5:7] == [f"{ttest.statistic:.3g}", f"{ttest.pvalue:.3g}"]
    assert cells[9:11] == [f"{rank.statistic:g}", f"{rank.pvalue:.3g}"]
    assert ttest.pvalue < 0.01  # the shared seed effects cancel ...
    assert stats.welch_ttest(a, b).pvalue > 0.5  # ... which an unpaired test cannot see
    assert "## Unpaired tests" not in report and "Welch p" not in report
    poi = stats.probability_of_improvement_ci(finals["learning_rate=0.01"],
                                              finals["learning_rate=0.1"],
                                              key=jax.random.key(0), reps=300, paired=True)
    assert (f"| learning_rate=0.01 | learning_rate=0.1 | {compare._fmt(poi)} | paired (8 seed "
            "pairs) |") in report
    assert ("Measured coverage of the paired 95% percentile interval at 5 seed pairs (the "
            "largest simulated n <= 8): 0.530, the minimum over correlations (at 0.9); the "
            "best paired method there is basic (0.794)") in report
    assert "**Below 0.93**" in report and "use --method basic or more seeds" in report
    assert err == ""


def test_runs_sharing_a_base_seed_are_paired_others_not(tmp_path, capsys):
    a = _make_stepless_run(tmp_path / "a", shifts={"x": 0.0})
    b = _make_stepless_run(tmp_path / "b", shifts={"x": 0.1})
    c = _make_stepless_run(tmp_path / "c", shifts={"x": 0.1}, base_seed=1)
    report, err = _run([a, b, c], tmp_path, capsys)
    assert ("* a/arm=x vs b/arm=x: paired: runs a and b share base seed 0 and seeds 0-7 "
            "(common random numbers)") in report
    assert ("* a/arm=x vs c/arm=x: unpaired: runs a and c use different seeds (base seed 0 "
            "vs 1)") in report
    assert "| a/arm=x | b/arm=x | score | 8 |" in report  # the paired table
    assert "| a/arm=x | c/arm=x | score | 8/8 |" in report  # the unpaired table
    assert "| a/arm=x | c/arm=x |" in report and "unpaired (8 and 8 runs) |" in report
    assert "Holm and BH over all 3 comparisons of both tables" in report
    assert err == ""  # different base seeds promise nothing: no warning


def test_shared_keys_on_different_seeds_fall_back_to_unpaired_with_a_warning(tmp_path,
                                                                              capsys):
    a = _make_stepless_run(tmp_path / "a", shifts={"x": 0.0}, seeds=range(8))
    b = _make_stepless_run(tmp_path / "b", shifts={"x": 0.1}, seeds=range(4, 12))
    report, err = _run([a, b], tmp_path, capsys)
    reason = ("unpaired: a/arm=x and b/arm=x share seed keys but not all seeds (0-7 vs "
              "4-11); a paired comparison needs every seed in both")
    assert f"* a/arm=x vs b/arm=x: {reason}" in report
    assert err == f"warning: a/arm=x vs b/arm=x: {reason}\n"
    assert "Welch p" in report and "| paired (" not in report


def test_variants_of_one_run_pair_only_with_a_recorded_base_seed(tmp_path, capsys):
    run = _make_stepless_run(tmp_path / "r", shifts={"x": 0.0, "y": 0.1})
    report, _ = _run([run], tmp_path, capsys)
    assert ("* arm=x vs arm=y: paired: variants of one run (r) share seed keys (base seed 0: "
            "seed i's key depends on the base seed and i alone)") in report
    record = json.loads((run / "config.json").read_text())
    del record["config"]["base_seed"]
    (run / "config.json").write_text(json.dumps(record))
    report, err = _run([run], tmp_path, capsys)
    reason = ("unpaired: run r records no base_seed in config.json, so whether its variants "
              "share seed keys is unknown")
    assert f"* arm=x vs arm=y: {reason}" in report and err == f"warning: arm=x vs arm=y: {reason}\n"


def test_pairing_rules_without_arrays():
    def entry(d, base, seeds, grid=False):
        return {"dir": d, "base_seed": base, "seed_ids": list(seeds), "grid": grid}

    info = {"g1": entry("/r/g", 3, range(4), grid=True), "g2": entry("/r/g", 3, range(4), True),
            "h": entry("/r/h", 3, range(4)), "i": entry("/r/i", 3, range(4, 8)),
            "atari": {"source": "published"}}
    assert compare.pairing(info, "g1", "g2").paired
    info["g1"]["base_seed"] = info["g2"]["base_seed"] = None  # a grid is paired by design
    assert compare.pairing(info, "g1", "g2") == compare.Pairing(
        True, "paired: configs of one grid share seed keys (common random numbers)")
    info["g1"]["base_seed"] = info["g2"]["base_seed"] = 3
    assert compare.pairing(info, "g1", "h") == compare.Pairing(
        True, "paired: runs g and h share base seed 3 and seeds 0-3 (common random numbers)")
    assert compare.pairing(info, "h", "i") == compare.Pairing(
        False, "unpaired: h and i ran on different seeds (0-3 vs 4-7)")
    assert not compare.pairing(info, "atari", "g1").paired


def test_stepless_table_with_several_rows_per_seed_is_refused_then_grouped(tmp_path, capsys):
    run = _make_stepless_run(tmp_path / "s", shifts={"x": 0.0})
    table = pd.read_parquet(run / "results.parquet")
    table = pd.concat([table.assign(p=0.25), table.assign(p=0.75, score=table.score + 0.1)])
    table.to_parquet(run / "results.parquet")
    out = str(tmp_path / "o")
    assert compare.main([str(run), "--metric", "score", "--out", out]) == 2
    err = capsys.readouterr().err
    assert err == ("error: algorithm 'arm=x' has several rows per seed (they differ in ['p']) "
                   "and the table has no step column; name the columns that tell them apart "
                   "with --group-by\n")
    assert compare.main([str(run), "--metric", "score", "--out", out, "--last-k", "2"]) == 2
    assert "--last-k 2: " in capsys.readouterr().err
    finals, _, _ = compare.load_scores([run], "score", group_by=["p"])
    assert list(finals) == ["p=0.25", "p=0.75"]
    np.testing.assert_allclose(finals["p=0.75"] - finals["p=0.25"], 0.1)
