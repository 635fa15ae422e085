"""``rljax bench grid``: the grid side and the loop side compute the same runs (bitwise,
measured), the loop side's extrapolation is what the table says, and the result and the
table have the documented structure (tiny sizes)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import orm_vs_prm
from experiments.benchmarks import grid as bench
from rljax.grid import ConfigTable

TINY = {"config_counts": (1, 3), "seeds": 4, "episodes": 12, "block_size": 8,
        "loop_sample": 2, "rounds": 2, "compile_rounds": 1, "big_configs": 3, "big_seeds": 5}


def test_config_rows_start_at_the_default_and_are_float32_exact():
    rows = bench.config_rows(5)
    default = orm_vs_prm.Config()
    for name in ("learning_rate", "baseline_init", "baseline_rate"):
        assert np.float32(rows[0][name]) == np.float32(getattr(default, name)), name
    assert bench.config_rows(3) == rows[:3]  # K configs are a prefix of any larger K
    assert len({r["learning_rate"] for r in rows}) == 5
    for row in rows[1:]:
        assert 0.02 <= row["learning_rate"] <= 0.5 and 0.01 <= row["baseline_rate"] <= 0.2
        for value in row.values():
            assert float(np.float32(value)) == value


@pytest.mark.timeout(60)
def test_grid_train_is_the_study_program():
    """The grid side times the study's own make_train (plus its final logits)."""
    rows = bench.config_rows(3)
    table = ConfigTable.from_rows(rows)
    hp = {k: jnp.asarray(v) for k, v in table.columns.items()}
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jnp.arange(3))
    ours = jax.jit(jax.vmap(bench.grid_train(episodes=60)))(keys, hp)
    study = jax.jit(jax.vmap(orm_vs_prm.make_train(orm_vs_prm.Config(episodes=60), "orm")))(
        keys, hp)
    np.testing.assert_array_equal(ours["success"], study["success"])
    assert ours["final_logits"].shape == (3, 5, 2)
    assert len({np.asarray(x).tobytes() for x in ours["final_logits"]}) == 3


@pytest.mark.timeout(120)
def test_measure_agrees_and_has_the_documented_structure():
    result = bench.measure(**TINY)
    assert set(result["rows"]) == {"1", "3"}
    one, three = result["rows"]["1"], result["rows"]["3"]
    assert not one["loop_extrapolated"] and one["loop_configs_timed"] == 1
    assert three["loop_extrapolated"] and three["loop_configs_timed"] == 2
    assert one["grid_block_size"] == 4 and three["grid_block_size"] == 8
    # the loop's times are the sampled configs' scaled by K / sample
    np.testing.assert_allclose(three["loop_compile_seconds"],
                               sum(three["loop_compile_seconds_sampled"]) * 3 / 2)
    low, high = three["ratio_ci"]  # the extrapolation's interval, from the sampled configs
    assert low <= three["ratio"] <= high and "sampled configurations" in three["interval_note"]
    assert "ratio_ci" not in one
    for row in result["rows"].values():
        agree = row["agreement"]
        assert agree["configs_compared"] == row["loop_configs_timed"]
        # measured bitwise: traced values and baked-in constants give the same bits here
        assert agree["success_equal"] and agree["pairs_bitwise_equal"] == 1.0
        assert agree["logits_max_abs_diff"] == 0.0
        total = row["loop_compile_seconds"] + row["loop_run_seconds"]
        np.testing.assert_allclose(row["ratio"], total / (row["grid_compile_seconds"]
                                                          + row["grid_run_seconds"]))
        assert row["grid_compile_seconds"] > 0 and row["grid_run_seconds"] > 0
    assert result["ratio"] == three["ratio"] and result["configs"] == 3
    big = result["big"]
    assert big["runs"] == 15 and big["programs"] == 1 and big["alone_bitwise_equal"]
    assert big["output_bytes_per_run"] == 12 + 4  # success bool [12] + int32 non-finite step
    assert big["largest_runs_estimate"] > 0
    text = bench.table(result)
    assert "| K | grid block |" in text and "2 of 3, extrapolated" in text
    assert "| 1 | 4 |" in text and "all 1" in text and "3 configs x 5 seeds" in text
