"""The search studies (test-time-search, rl-then-search): held-out problems, paired
comparisons with Holm's correction, and the 2 x 2 interaction on three scales."""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.study_runs import run_study

from experiments import rl_then_search, test_time_search
from rljax.cli import main
from rljax.envs.equation import HOLDOUT_MODULUS, NUM_LEVELS, EquationEnv, enumerate_equations
from rljax.envs.equation import is_held_out as split_fn
from rljax.training.equation import EquationTrainConfig, training_problems


def _sides():
    """Per level: (held-out set, training set) of coefficient tuples, enumerated."""
    sides = []
    for level in range(NUM_LEVELS):
        coeffs = enumerate_equations(level)[:, :4]
        held = np.asarray(split_fn(jnp.asarray(coeffs), HOLDOUT_MODULUS))
        sides.append(({tuple(r) for r in coeffs[held].tolist()},
                      {tuple(r) for r in coeffs[~held].tolist()}))
    return sides


# ------------------------------------------------------------------------ held-out problems


def test_training_draws_only_training_side_and_studies_only_held_out_side():
    sides = _sides()
    # Training: the draw every GRPO update makes (all levels, equal weights).
    config = EquationTrainConfig(level_weights=(1.0, 1.0, 1.0, 1.0))
    levels, coeffs, _ = jax.jit(lambda k1, k2: training_problems(k1, k2, config, 2000))(
        jax.random.key(0), jax.random.key(1))
    for lv, row in zip(np.asarray(levels).tolist(), np.asarray(coeffs).tolist(), strict=True):
        assert tuple(row) in sides[lv][1], (lv, row)
    assert set(np.asarray(levels).tolist()) == set(range(NUM_LEVELS))
    # test-time-search: every seed's problems come from the held-out side.
    obs, state = jax.jit(lambda k: test_time_search.make_problems(k, EquationEnv(), 64, 8))(
        jax.random.key(2))
    tts_levels = np.repeat(np.arange(NUM_LEVELS), 64)
    for lv, row in zip(tts_levels, np.asarray(state.coeffs).tolist(), strict=True):
        assert tuple(row) in sides[lv][0], (lv, row)
    np.testing.assert_allclose(np.asarray(obs[:, :4]), np.asarray(state.coeffs) / 10.0)
    # rl-then-search's evaluation problems too.
    cfg = rl_then_search.Config(problems_per_level=64)
    levels, coeffs, _ = jax.jit(lambda k: rl_then_search.evaluation_problems(k, cfg))(
        jax.random.key(3))
    for lv, row in zip(np.asarray(levels).tolist(), np.asarray(coeffs).tolist(), strict=True):
        assert tuple(row) in sides[lv][0], (lv, row)


# ------------------------------------------------------------- paired comparisons and Holm


def _exact_sign_flip(d):
    d = np.asarray(d, float)
    obs = abs(d.mean())
    hits = [abs(np.mean(np.asarray(s) * d)) >= obs - 1e-12
            for s in itertools.product((-1.0, 1.0), repeat=d.size)]
    return float(np.mean(hits))


def _holm_reference(p):
    """Holm (1979) by the definition: step down through the sorted p-values."""
    p = list(p)
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def test_sign_flip_test_exact_and_monte_carlo_against_enumeration():
    d = np.array([0.1, 0.3, -0.05, 0.2, 0.0, 0.15, -0.1, 0.25])
    assert test_time_search.paired_sign_flip_test(d, key=jax.random.key(0)) == pytest.approx(
        _exact_sign_flip(d))
    d16 = np.random.default_rng(0).normal(0.2, 1.0, 16)
    mc = test_time_search.paired_sign_flip_test(d16, key=jax.random.key(1), n_resamples=4000)
    assert mc == pytest.approx(_exact_sign_flip(d16), abs=0.03)
    assert test_time_search.paired_sign_flip_test(np.zeros(5), key=jax.random.key(0)) == 1.0


def test_paired_comparisons_holm_against_reference():
    # 8 seeds, one budget, three methods: A beats C on every seed (exact p = 2/256); A - B
    # and B - C are marginal (raw p < 0.05 but not after Holm over the 3 comparisons).
    a = np.array([0.60, 0.55, 0.70, 0.65, 0.50, 0.62, 0.58, 0.66])
    b = a - np.array([0.05, 0.04, 0.06, -0.02, 0.03, 0.05, 0.02, 0.01])  # exact p 1/32
    c = b - np.array([0.02, 0.05, -0.02, 0.06, 0.04, 0.03, 0.05, 0.01])  # the same values
    outputs = {name: v[:, None, None] for name, v in (("A", a), ("B", b), ("C", c))}
    config = test_time_search.Config(budgets="4", methods="greedy,best_of_n,prm_beam",
                                     bootstrap_reps=500)
    res = test_time_search.paired_comparisons(outputs, config, jax.random.key(0))
    table = res["paired_differences"]["4"]
    assert set(table) == {"A - B", "A - C", "B - C"}
    pairs = {"A - B": a - b, "A - C": a - c, "B - C": b - c}
    raw = [_exact_sign_flip(pairs[k]) for k in sorted(pairs)]
    for k, p in zip(sorted(pairs), raw, strict=True):
        assert table[k]["p"] == pytest.approx(p)
        assert table[k]["diff"] == pytest.approx(float(np.mean(pairs[k])))
    assert raw[0] < 0.05 and raw[2] < 0.05  # significant without a correction ...
    for k, ph in zip(sorted(pairs), _holm_reference(raw), strict=True):
        assert table[k]["p_holm"] == pytest.approx(ph)
    # ... but after Holm only A - C is, and it is ranked; A and B tie, as do B and C.
    assert [table[k]["significant"] for k in sorted(pairs)] == [False, True, False]
    assert table["A - C"]["low"] > 0
    assert res["ranking"]["4"] == [["A", "B"], ["C"]]
    fam = res["paired_family"]
    assert fam["comparisons"] == 3 and fam["interval_confidence"] == pytest.approx(1 - 0.05 / 3)


def test_rank_tiers_groups_ties():
    point = {"a": 0.5, "b": 0.4, "c": 0.3, "d": 0.1}
    assert test_time_search.rank_tiers(list(point), point, set()) == [["a", "b", "c", "d"]]
    better = {("a", "c"), ("a", "d"), ("b", "d"), ("c", "d")}
    assert test_time_search.rank_tiers(list(point), point, better) == [["a", "b"], ["c"], ["d"]]


# --------------------------------------------------------- the 2 x 2 on three scales


def test_scale_effects_against_hand_computation():
    n = 10
    counts = {"untrained_greedy": [0, 1], "untrained_mcts": [2, 4],
              "trained_greedy": [8, 10], "trained_mcts": [9, 10]}
    correct = {c: np.array([[1.0] * k + [0.0] * (n - k) for k in ks]) for c, ks in counts.items()}
    eff = rl_then_search.scale_effects(correct)
    for s in range(2):
        ug, um, tg, tm = (counts[c][s] for c in rl_then_search.CONDITIONS)

        def err(k):
            return (n - k + 0.5) / (n + 1)

        def logit(k):
            return math.log((k + 0.5) / (n - k + 0.5))

        assert eff["accuracy_interaction"][s] == pytest.approx((tm - tg) / n - (um - ug) / n)
        assert eff["error_ratio_gain_trained"][s] == pytest.approx(math.log(err(tm) / err(tg)))
        assert eff["error_ratio_interaction"][s] == pytest.approx(
            math.log(err(tm) / err(tg)) - math.log(err(um) / err(ug)))
        assert eff["logit_interaction"][s] == pytest.approx(
            (logit(tm) - logit(tg)) - (logit(um) - logit(ug)))
    # Seed 0: raw interaction -0.1 (forced by the ceiling), yet on the error scale search
    # removes a larger share of the trained policy's errors (negative log-ratio interaction).
    assert eff["accuracy_interaction"][0] == pytest.approx(-0.1)
    assert eff["error_ratio_interaction"][0] < -0.2


def test_analyse_reads_the_ceiling_and_below_ceiling_levels():
    rng = np.random.default_rng(0)
    s, p = 8, 40
    acc = {"untrained_greedy": [0.0, 0.0, 0.0, 0.0], "untrained_mcts": [0.4, 0.2, 0.1, 0.05],
           "trained_greedy": [1.0, 1.0, 0.98, 0.6], "trained_mcts": [1.0, 1.0, 1.0, 0.8]}
    out = {c: (rng.random((s, NUM_LEVELS, p)) < np.asarray(v)[None, :, None]).astype(float)
           for c, v in acc.items()}
    config = rl_then_search.Config(seeds=s, problems_per_level=p, bootstrap_reps=300)
    summary = rl_then_search.analyse(out, config)
    tg = summary["accuracy_by_level"]["trained_greedy"]
    assert summary["ceiling_levels"] == [lv for lv in range(4) if tg[lv] >= 0.95]
    assert 3 in summary["below_ceiling_levels"] and 0 in summary["ceiling_levels"]
    below = rl_then_search.scale_effects(
        {c: out[c][:, summary["below_ceiling_levels"], :].reshape(s, -1) for c in out})
    for scale in rl_then_search.SCALES:
        assert summary["effects"]["below_ceiling"][f"{scale}_interaction"]["point"] == (
            pytest.approx(float(below[f"{scale}_interaction"].mean())))
        for key in ("all_levels", "level_3"):
            e = summary["effects"][key][f"{scale}_interaction"]
            assert e["low"] <= e["point"] <= e["high"], (key, scale)
    report = rl_then_search.report_markdown(summary, config)
    assert "error ratio" in report and "logit" in report and "below the ceiling" in report
    assert "do not add up" not in report


# ------------------------------------------------------------------- small study runs


@pytest.mark.slow  # suite time (~11 s); the held-out draw test below stays fast
@pytest.mark.timeout(240)
def test_test_time_search_small(tmp_path):
    out, s = run_study(tmp_path, "test-time-search", "seeds=4", "problems_per_level=1",
                       "budgets=16", "methods=majority_vote,prm_beam,mcts_gumbel",
                       "bootstrap_reps=100", block_size=4)
    assert set(s["accuracy"]) == {"majority_vote", "prm_beam", "mcts_gumbel"}
    for method, table in s["accuracy"].items():
        assert set(table) == {"16"} and 0.0 <= table["16"] <= 1.0
        assert len(s["accuracy_ci"][method]["16"]) == 2
    assert len(s["paired_differences"]["16"]) == 3 and s["paired_family"]["comparisons"] == 3
    for row in s["paired_differences"]["16"].values():
        assert {"diff", "low", "high", "p", "p_holm", "significant"} <= set(row)
        assert row["p_holm"] >= row["p"]
    assert sorted(m for tier in s["ranking"]["16"] for m in tier) == sorted(s["accuracy"])
    assert "held-out split" in s["problems"]
    assert "Holm" in (out / "report.md").read_text()
    assert (out / "accuracy_vs_compute.png").exists()


def test_test_time_search_bad_method(capsys):
    assert main(["run", "test-time-search", "--set", "methods=greedy,oracle"]) == 2
    assert "methods" in capsys.readouterr().err


def test_test_time_search_bad_alpha(capsys):
    assert main(["run", "test-time-search", "--set", "alpha=1.5"]) == 2
    assert "alpha" in capsys.readouterr().err


@pytest.mark.slow  # end to end through the CLI (~12 s); its statistics are tested above
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
    for scale in rl_then_search.SCALES:
        assert f"{scale}_interaction" in s["effects"]["all_levels"]
    assert set(s["ceiling_levels"]) | set(s["below_ceiling_levels"]) == set(range(4))
