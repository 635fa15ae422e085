"""``rljax bench scaling``: the fit arithmetic, the block program is the sweep's, memory
grows with seeds, sizes that would not fit are skipped with the reason, and the table has
its rows. Tiny sizes only; no timing is asserted."""

import dataclasses

import numpy as np
import pytest

from experiments import ppo_cartpole
from experiments.benchmarks import scaling
from rljax.sweep import Sweep


def test_fit_linear_hand_computed():
    # Ordinary least squares through (0, 1), (1, 3), (2, 4): mean n = 1, mean y = 8/3,
    # b = sum (n - 1)(y - 8/3) / sum (n - 1)^2 = (5/3 + 4/3) / 2 = 3/2, a = 8/3 - 3/2 = 7/6.
    a, b = scaling.fit_linear([0, 1, 2], [1, 3, 4])
    assert a == pytest.approx(7 / 6) and b == pytest.approx(1.5)
    # Residuals -1/6, 1/3, -1/6, relative -1/6, 1/9, -1/24.
    assert scaling.relative_residuals([0, 1, 2], [1, 3, 4], a, b) == pytest.approx(
        [-1 / 6, 1 / 9, -1 / 24])
    # An exact line is recovered, residuals 0.
    ns = [1, 16, 256, 4096]
    ys = [3000 + 1000 * n for n in ns]
    a, b = scaling.fit_linear(ns, ys)
    assert a == pytest.approx(3000) and b == pytest.approx(1000)
    assert scaling.relative_residuals(ns, ys, a, b) == pytest.approx([0] * 4, abs=1e-9)
    # One point: the line through the origin.
    assert scaling.fit_linear([4], [100]) == (0.0, 25.0)


def test_largest_fitting():
    # (100 - 10) / 3 = 30 exactly; (101 - 10) / 3 = 30.33 -> 30; nothing fits below a + b.
    assert scaling.largest_fitting(10, 3, 100) == 30
    assert scaling.largest_fitting(10, 3, 101) == 30
    assert scaling.largest_fitting(10, 3, 12) == 0
    assert scaling.largest_fitting(10, 0, 100) is None


def test_block_program_is_the_sweeps(monkeypatch):
    monkeypatch.setattr(scaling, "CHAIN_EPISODES", 12)
    train = scaling.make_workload("orm-vs-prm")["train"]
    compiled, _ = scaling.compile_block(train, 4)
    ours = scaling.run_block(compiled, 4)
    theirs = Sweep(train, block_size=4).run(4, progress=False).outputs
    for key in theirs:
        np.testing.assert_array_equal(np.asarray(ours[key]), theirs[key])


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setattr(scaling, "SEED_COUNTS", (1, 4))
    monkeypatch.setattr(scaling, "ROUNDS", 1)
    monkeypatch.setattr(scaling, "COMPILE_ROUNDS", 1)
    monkeypatch.setattr(scaling, "CHAIN_EPISODES", 12)
    monkeypatch.setattr(scaling, "PPO_UPDATES", 2)
    monkeypatch.setattr(scaling, "PPO_STUDY", dataclasses.replace(
        ppo_cartpole.Config(), num_envs=2, num_steps=8, num_epochs=1, num_minibatches=1,
        hidden_size=8))
    monkeypatch.setattr(scaling, "VERIFY_LARGEST", False)


@pytest.mark.slow  # both workloads end to end (~15 s); the next test runs measure_workload
@pytest.mark.timeout(120)
def test_run_and_table(tiny):
    result = scaling.run()
    names = [w["workload"] for w in result["workloads"]]
    assert names == ["orm-vs-prm", "ppo-cartpole"]
    for w in result["workloads"]:
        assert [r["seeds"] for r in w["rows"]] == [1, 4] and w["skipped"] == []
        small, large = (r["xla_bytes"]["total"] for r in w["rows"])
        assert large > small > 0  # bytes grow with seeds
        assert w["rows"][1]["xla_bytes"]["output"] > w["rows"][0]["xla_bytes"]["output"]
        for r in w["rows"]:
            assert all(isinstance(r[k], float) for k in ("throughput", "compile_seconds_median"))
            assert r["rounds"] == 1
        assert w["fit"]["xla_fit"]["b"] > 0
        assert w["fit"]["largest_block_budget_xla"] > 4
    assert result["workloads"][1]["units_per_seed"] == 2 * 2 * 8
    text = scaling.table(result)
    rows = [line for line in text.splitlines() if line.startswith("| orm-vs-prm |")
            or line.startswith("| ppo-cartpole |")]
    assert len(rows) == 4
    assert "episodes/s" in text and "env steps/s" in text
    assert "largest sweep in one block" in text and "compile time: largest/smallest" in text
    assert "relative residuals 1: " in text and "no size skipped" in text


@pytest.mark.timeout(60)
def test_size_over_budget_is_skipped(tiny, monkeypatch):
    monkeypatch.setattr(scaling, "SEED_COUNTS", (1, 4, 16))
    train = scaling.make_workload("orm-vs-prm")["train"]
    one, four = (scaling.xla_bytes(scaling.compile_block(train, n)[0])["total"]
                 for n in (1, 4))
    # A budget between 1 seed's and 4 seeds' bytes (the process's own RSS left out).
    monkeypatch.setattr(scaling, "MEMORY_BUDGET_BYTES", (one + four) // 2)
    monkeypatch.setattr(scaling, "rss_bytes", lambda: 0)
    monkeypatch.setattr(scaling, "COMPILE_ROUNDS", 2)
    w = scaling.measure_workload("orm-vs-prm")
    assert [r["seeds"] for r in w["rows"]] == [1]
    # the skipped size is still compiled in the compile-only rounds
    assert len(w["skipped"][0]["compile_seconds"]) == 2
    assert [s["seeds"] for s in w["skipped"]] == [4]  # and 16 is not tried
    assert w["skipped"][0]["reason"].startswith("skipped: predicted")
    assert w["skipped"][0]["predicted_bytes"] == four
    assert w["fit"]["compile_sizes"] == [1, 4]
    text = scaling.table({"device": "cpu", "rounds": 1, "memory_budget_bytes": 1,
                          "machine_bytes": 2**30, "workloads": [w]})
    assert "4 seeds skipped: predicted" in text and "larger sizes not tried" in text


def test_largest_block_is_checked_by_compiling(monkeypatch):
    # Rows on the line 100 + 10 n; the "compiled" program really takes 100 + 10 n + n^2/100
    # bytes, so the fit's 100 seeds (budget 1100) overshoot; the check scales
    # down by the overshoot: floor(100 * 1100 / 1200) - 1 = 90 seeds, 1081 bytes, fits.
    def fake_compile(train, n):
        return n, 0.0

    monkeypatch.setattr(scaling, "compile_block", fake_compile)
    monkeypatch.setattr(scaling, "xla_bytes", lambda n: {"total": 100 + 10 * n + n * n / 100})
    monkeypatch.setattr(scaling, "MEMORY_BUDGET_BYTES", 1100)
    monkeypatch.setattr(scaling, "VERIFY_LARGEST", True)
    rows = [{"seeds": n, "xla_bytes": {"total": 100 + 10 * n}, "rss_peak_delta": 10 * n,
             "compile_seconds_median": 1.0} for n in (1, 4)]
    out = scaling.fit_summary(rows, [], 0, train=object())
    checked = out["verified"]
    assert checked[0] == {"seeds": 100, "compile_seconds": 0.0, "xla_total": 1200.0,
                          "with_base": 1200.0, "fits_budget": False}
    assert checked[1] == {"seeds": 90, "compile_seconds": 0.0, "xla_total": 1081.0,
                          "with_base": 1081.0, "fits_budget": True}
    assert len(checked) == 2 and out["largest_block_budget_xla"] == 90
    assert out["largest_block_budget_rss"] == 110  # (1100 - 0) / 10
