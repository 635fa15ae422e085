"""Results tables to rliable's score dict: checked with rliable itself, a round trip of the
published Atari 100k scores, and one-line errors naming the column."""

import jax
import numpy as np
import pandas as pd
import pytest
from helpers.rliable_import import import_rliable

from rljax import stats

pytestmark = pytest.mark.timeout(120)


rly, rmetrics = import_rliable()


def _table(seed=0):
    """A shuffled tidy table: 2 algorithms (7 and 4 runs) x 3 tasks, plus an extra column."""
    rng = np.random.default_rng(seed)
    rows = []
    for algo, runs, shift in (("ppo", 7, 0.0), ("grpo", 4, 0.5)):
        for task in ("chain", "bandit", "cartpole"):
            for s in rng.permutation(runs) * 10:  # run ids 0, 10, 20, ...
                rows.append({"algo": algo, "env": task, "seed": int(s), "step": 100,
                             "final_return": float(rng.gamma(2.0) + shift)})
    return pd.DataFrame(rows).sample(frac=1.0, random_state=seed).reset_index(drop=True)


COLUMNS = {"algorithm": "algo", "task": "env", "run": "seed", "score": "final_return"}


def test_layout_follows_the_table():
    table = _table()
    scores = stats.to_rliable_scores(table, **COLUMNS, tasks=["chain", "bandit", "cartpole"])
    assert list(scores) == ["grpo", "ppo"]  # sorted by default
    assert scores["ppo"].shape == (7, 3) and scores["grpo"].shape == (4, 3)
    assert scores["ppo"].dtype == np.float64
    for algo, array in scores.items():
        for j, task in enumerate(["chain", "bandit", "cartpole"]):
            part = table[(table.algo == algo) & (table.env == task)].sort_values("seed")
            np.testing.assert_array_equal(array[:, j], part.final_return.to_numpy())
    chosen = stats.to_rliable_scores(table, **COLUMNS, tasks=["cartpole"], algorithms=["ppo"])
    assert list(chosen) == ["ppo"]
    np.testing.assert_array_equal(chosen["ppo"][:, 0], scores["ppo"][:, 2])


def test_rliable_on_the_export_equals_rljax_iqm():
    table = _table(1)
    scores = stats.to_rliable_scores(table, **COLUMNS)
    iqm = lambda x: np.array([rmetrics.aggregate_iqm(x)])  # noqa: E731
    point, interval = rly.get_interval_estimates(scores, iqm, reps=200)
    ours = stats.interval_estimates(scores, "iqm", key=jax.random.key(0), reps=200)
    for algo in ("ppo", "grpo"):
        # rljax's IQM of the same data, laid out by hand ([runs, tasks] via a pivot)
        by_hand = table[table.algo == algo].pivot(index="seed", columns="env",
                                                  values="final_return")
        assert stats.aggregate_iqm(by_hand.to_numpy()) == pytest.approx(
            float(point[algo][0]), rel=1e-12)
        assert ours[algo].point == pytest.approx(float(point[algo][0]), rel=1e-12)
        low, high = interval[algo][:, 0]
        assert low <= point[algo][0] <= high
        assert ours[algo].low <= ours[algo].point <= ours[algo].high


def test_atari100k_round_trip():
    games = stats.atari100k_games()
    published = stats.atari100k_scores()
    table = stats.from_rliable_scores(published, games)
    assert list(table.columns) == ["algorithm", "task", "seed", "score"]
    assert len(table) == sum(a.size for a in published.values())
    shuffled = table.sample(frac=1.0, random_state=0)
    back = stats.to_rliable_scores(shuffled, tasks=games, algorithms=list(published))
    assert list(back) == list(published)
    for algo, array in published.items():
        np.testing.assert_array_equal(back[algo], array)
    assert back["SPR"].shape == (100, 26) and back["IRIS"].shape == (5, 26)
    assert stats.aggregate_iqm(back["SPR"]) == pytest.approx(
        float(rmetrics.aggregate_iqm(published["SPR"])), rel=1e-12)


def test_nan_scores_are_kept():
    table = _table()
    table.loc[0, "final_return"] = np.nan
    scores = stats.to_rliable_scores(table, **COLUMNS)
    assert np.isnan(scores[table.loc[0, "algo"]]).sum() == 1


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.drop(columns="env"), r"no column 'env' \(the task column\)"),
    (lambda t: t.drop(columns="final_return"), r"no column 'final_return' \(the score column\)"),
    (lambda t: pd.concat([t, t.iloc[:1]]), r"duplicate \(algo, env, seed\) rows"),
    (lambda t: t.drop(index=t.index[(t.algo == "ppo") & (t.env == "chain")][0]),
     r"algo 'ppo': tasks have different numbers of runs \(column 'seed'\)"),
    (lambda t: t[~((t.algo == "grpo") & (t.env == "bandit"))],
     "algo 'grpo' has no rows for env 'bandit'"),
    (lambda t: t.assign(final_return="x"), r"column 'final_return' \(score\) must be numeric"),
    (lambda t: t.assign(seed=t.seed.where(t.index > 0)), "column 'seed' has missing values"),
])
def test_one_line_errors_name_the_column(edit, message):
    with pytest.raises(ValueError, match=message) as info:
        stats.to_rliable_scores(edit(_table()), **COLUMNS)
    assert "\n" not in str(info.value)


def test_argument_errors():
    table = _table()
    with pytest.raises(ValueError, match="no rows with algo == 'sac'"):
        stats.to_rliable_scores(table, **COLUMNS, algorithms=["ppo", "sac"])
    with pytest.raises(ValueError, match="tasks lists 'chain' twice"):
        stats.to_rliable_scores(table, **COLUMNS, tasks=["chain", "chain"])
    with pytest.raises(ValueError, match="must be a pandas DataFrame"):
        stats.to_rliable_scores({"algo": []})
    with pytest.raises(ValueError, match="tasks has 2 names for 3 task columns"):
        stats.from_rliable_scores({"a": np.zeros((2, 3))}, ["x", "y"])
    with pytest.raises(ValueError, match="share num_tasks"):
        stats.from_rliable_scores({"a": np.zeros((2, 3)), "b": np.zeros((2, 4))})
