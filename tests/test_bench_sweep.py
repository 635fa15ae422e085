"""``rljax bench sweep``: the library, the hand-fused reference and the numpy reference
implement the same algorithm, and the benchmark's result has the documented keys."""

import jax.numpy as jnp
import numpy as np
import pytest

from experiments.benchmarks import sweep as bench
from rljax.sweep import Sweep
from rljax.training.chain import make_chain_train

SEEDS = 256
NUMPY_SEEDS = 128  # numpy runs ~50 k episodes/s: keep the test fast
LAST = 30  # final success rate = mean over the last LAST episodes


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["orm", "prm"])
def test_library_fused_and_numpy_agree(mode):
    lib = Sweep(make_chain_train(mode=mode), block_size=SEEDS).run(SEEDS, progress=False)
    lib = np.asarray(lib.outputs["success"])
    fused = np.asarray(bench.make_fused(mode)(jnp.arange(SEEDS, dtype=jnp.int32)))
    ref = bench.numpy_sweep(NUMPY_SEEDS, mode)  # its own generator: agreement is statistical
    assert lib.shape == fused.shape == (SEEDS, bench.EPISODES)
    assert ref.shape == (NUMPY_SEEDS, bench.EPISODES)
    rates = {name: x[:, -LAST:].mean(axis=1) for name, x in
             [("library", lib), ("fused", fused), ("numpy", ref)]}
    for a, b in [("library", "numpy"), ("fused", "numpy"), ("library", "fused")]:
        se = np.sqrt(rates[a].var(ddof=1) / len(rates[a]) + rates[b].var(ddof=1) / len(rates[b]))
        assert abs(rates[a].mean() - rates[b].mean()) < 4 * se + 1e-3, (a, b, rates)
    # the learning curves agree too (first vs last 30 episodes, both well resolved)
    for x in (lib, fused):
        assert abs(x[:, :LAST].mean() - ref[:, :LAST].mean()) < 0.05
    assert rates["library"].mean() > 0.6  # it learns
    # The fused reference draws the library's uniforms (same keys and rows), so the two
    # take the same actions except where float rounding differs on a knife edge.
    assert (lib == fused).mean() > 0.99
    # The hand-written step-by-step reference is the same algorithm with the same draws.
    stepwise = np.asarray(bench.make_stepwise(mode)(jnp.arange(SEEDS, dtype=jnp.int32)))
    assert (stepwise == fused).mean() > 0.99


@pytest.mark.timeout(60)
def test_measure_has_the_documented_keys():
    result = bench.measure(seed_counts=(1, 4), rounds={1: 1, 4: 1}, numpy_seeds=1,
                           episodes=10, block_size=4)
    for key in ("library_episodes_per_s", "numpy_episodes_per_s", "fused_episodes_per_s",
                "speedup_vs_numpy", "ratio_vs_fused", "compile_seconds", "block_size",
                "rows", "stepwise_episodes_per_s", "ratio_vs_stepwise"):
        assert key in result
    assert set(result["rows"]) == {"1", "4"}
    assert result["rows"]["1"]["block_size"] == 1 and result["block_size"] == 4
    for row in result["rows"].values():
        assert row["library_episodes_per_s"] > 0 and row["fused_episodes_per_s"] > 0
    assert result["ratio_vs_fused"] == result["rows"]["4"]["ratio_vs_fused"]
    text = bench.table(result)
    assert "ratio_vs_fused" in text and "block_size=1" in text
