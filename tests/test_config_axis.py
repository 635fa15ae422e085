"""The configuration axis of ``rljax.sweep``: (config, seed) pairs in fixed blocks.

The guarantee: config ``c``, seed ``i`` is bitwise the same run alone (a one-row table,
what ``--set`` gives), inside a grid of 2 or 500 configs, at any position, and on 1 or 4
devices, at one block size. Tested on ``helpers.shape_sensitive_hparams.train``, whose
bits move with the batch shape (checked first), so the test fails without the blocks.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.shape_sensitive_hparams import plain_vmap, table, train

from rljax.checkpoint import Checkpointer, CheckpointError
from rljax.grid import ConfigTable
from rljax.sweep import ChunkedSweep, Sweep, seed_key

REPO = Path(__file__).resolve().parents[1]
TARGET = (0.7, 1.3)


def _others(n, seed=0):
    rng = np.random.default_rng(seed)
    return [(float(a), float(b)) for a, b in zip(rng.uniform(0.1, 1.5, n),
                                                  rng.uniform(0.3, 2.0, n), strict=True)]


def test_workload_bits_depend_on_batch_shape():
    natural = plain_vmap(np.arange(7), *TARGET)
    in_block = plain_vmap(np.arange(256), *TARGET)[:7]
    np.testing.assert_allclose(natural, in_block, rtol=1e-5)
    assert np.sum(natural != in_block) >= 1, "workload no longer moves with the batch shape"


def test_config_alone_is_bitwise_the_config_inside_any_grid():
    sweep = Sweep(train, block_size=256)
    alone = sweep.run(7, configs=table([TARGET]), progress=False).outputs["r"]
    assert alone.shape == (1, 7)
    others = _others(499)
    grids = {"2": ([_others(1, 1)[0], TARGET], 1),
             "500": (others[:311] + [TARGET] + others[311:], 311),
             "500 reversed": ((others[:311] + [TARGET] + others[311:])[::-1], 499 - 311)}
    for name, (rows, at) in grids.items():
        out = sweep.run(7, configs=table(rows), progress=False).outputs["r"]
        assert out.shape == (len(rows), 7)
        np.testing.assert_array_equal(out[at], alone[0], err_msg=name)
    assert len(sweep._programs) == 1  # one compiled program for every grid size
    # not vacuous: the same 7 seeds as their own batch compute other bits
    assert np.any(alone[0] != plain_vmap(np.arange(7), *TARGET))


def test_grid_matches_a_slow_loop_over_configs_and_seeds():
    rows = [(0.3, 0.5), TARGET, (1.1, 2.0)]
    out = Sweep(train, block_size=4).run(5, configs=table(rows), progress=False).outputs["r"]
    for c, (a, b) in enumerate(rows):
        for i in range(5):
            one = train(seed_key(0, i), {"a": jnp.float32(a), "b": jnp.float32(b)})["r"]
            np.testing.assert_allclose(out[c, i], float(one), rtol=2e-5)


def test_first_seed_shifts_seed_ids_without_changing_a_seeds_result():
    sweep = Sweep(train, block_size=4)
    rows = table([TARGET, (0.2, 0.9)])
    full = sweep.run(9, configs=rows, progress=False)
    late = sweep.run(3, configs=rows, first_seed=6, progress=False)
    np.testing.assert_array_equal(late.seed_ids, [6, 7, 8])
    np.testing.assert_allclose(late.outputs["r"], full.outputs["r"][:, 6:], rtol=2e-5)
    with pytest.raises(ValueError, match="first_seed"):
        sweep.run(3, configs=rows, first_seed=-1)


def test_paired_configs_share_keys_and_unpaired_ones_do_not():
    rows = [TARGET, (0.2, 0.9), (0.2, 0.9)]
    same = ConfigTable.from_rows([{"a": 0.4, "b": 1.0}, {"a": 0.4, "b": 1.0}])

    def draws(key, hp):
        return {"x": jax.random.normal(key, ()) * hp["a"]}

    paired = Sweep(draws, block_size=4).run(6, configs=same, progress=False).outputs["x"]
    np.testing.assert_array_equal(paired[0], paired[1])
    unpaired = Sweep(draws, block_size=4, paired=False)
    u = unpaired.run(6, configs=table(rows), progress=False).outputs["x"]
    p = Sweep(draws, block_size=4).run(6, configs=table(rows), progress=False).outputs["x"]
    assert np.all(u[0] != p[0])
    np.testing.assert_array_equal(u[1], u[2])  # the salt is the config's values...
    alone = unpaired.run(6, configs=table([rows[1]]), progress=False).outputs["x"]
    np.testing.assert_array_equal(alone[0], u[1])  # ...not its position
    key = jax.random.fold_in(seed_key(0, 3), table(rows).salt(0))
    np.testing.assert_allclose(u[0, 3], float(draws(key, {"a": 0.7})["x"]), rtol=1e-6)


def test_nonfinite_is_flagged_per_config_and_seed_and_isolated():
    def fragile(key, hp):
        x = jax.random.normal(key, ())
        return {"y": jnp.where((hp["a"] < 0) & (x > 0), jnp.nan, x * hp["b"])}

    rows = [TARGET, (-1.0, 1.0), (0.2, 0.9)]
    result = Sweep(fragile, block_size=4).run(6, configs=table(rows), progress=False)
    x = np.asarray([float(jax.random.normal(seed_key(0, i), ())) for i in range(6)])
    assert set(result.nonfinite) == {(1, int(i)) for i in np.flatnonzero(x > 0)}
    assert result.finite.shape == (3, 6) and result.finite[0].all() and result.finite[2].all()
    clean = Sweep(fragile, block_size=4).run(6, configs=table([rows[0], rows[2]]),
                                             progress=False)
    np.testing.assert_array_equal(result.outputs["y"][[0, 2]], clean.outputs["y"])


def test_resume_reads_finished_rounds_back_and_refuses_another_grid(tmp_path):
    rows = table([TARGET, (0.2, 0.9), (1.0, 1.0)])
    ckpt = Checkpointer(tmp_path / "c", metadata={"run": "t"})
    first = Sweep(train, block_size=4).run(5, configs=rows, checkpointer=ckpt, progress=False)

    def zeros(key, hp):  # what a recomputed round would give
        return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype),
                                      jax.eval_shape(train, key, hp))

    again = Sweep(zeros, block_size=4)
    resumed = again.run(5, configs=rows, checkpointer=ckpt, resume=True, progress=False)
    np.testing.assert_array_equal(resumed.outputs["r"], first.outputs["r"])
    assert resumed.timed_fraction == 0.0
    with pytest.raises(CheckpointError, match="configs"):
        Sweep(train, block_size=4).run(5, configs=table([TARGET, (0.2, 0.9), (1.0, 2.0)]),
                                       checkpointer=ckpt, resume=True, progress=False)


def _chunked(num_chunks=3):
    def init(key, hp):
        return {"key": key, "x": jnp.zeros(()), "n": jnp.int32(0)}

    def advance(state, hp):
        key, sub = jax.random.split(state["key"])
        x = state["x"] + jnp.sum(jnp.exp(hp["a"] * jax.random.normal(sub, (400,))))
        return {"key": key, "x": x, "n": state["n"] + 1}, {"x": x}

    def finish(state, hp):
        return {"final": state["x"] * hp["b"]}

    return ChunkedSweep(init, advance, finish, num_chunks=num_chunks, block_size=256)


def test_chunked_sweep_config_alone_is_bitwise_inside_a_grid_and_matches_a_loop():
    sweep = _chunked()
    alone = sweep.run(7, configs=table([TARGET]), progress=False).outputs
    rows = _others(40) + [TARGET]
    grid = sweep.run(7, configs=table(rows), progress=False).outputs
    assert grid["logs"]["x"].shape == (41, 7, 3) and grid["final"]["final"].shape == (41, 7)
    np.testing.assert_array_equal(grid["final"]["final"][40], alone["final"]["final"][0])
    np.testing.assert_array_equal(grid["logs"]["x"][40], alone["logs"]["x"][0])
    key = seed_key(0, 2)
    x = 0.0
    for _ in range(3):
        key, sub = jax.random.split(key)
        x += float(jnp.sum(jnp.exp(0.7 * jax.random.normal(sub, (400,)))))
    np.testing.assert_allclose(alone["final"]["final"][0, 2], x * 1.3, rtol=1e-5)


DEVICE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import jax
    sys.path.insert(0, "tests")
    from helpers.shape_sensitive_hparams import table
    from helpers.shape_sensitive_hparams import train
    from rljax.sweep import Sweep
    rows = json.loads(sys.argv[2])
    sweep = Sweep(train, block_size=4)
    result = sweep.run(6, configs=table(rows), progress=False)
    np.save(sys.argv[1], result.outputs["r"])
    print(json.dumps({"devices": jax.device_count(), "rounds": result.num_rounds}))
    """
)


def test_one_vs_four_devices_bitwise(tmp_path):
    rows = _others(2, 5) + [TARGET]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4"
    proc = subprocess.run([sys.executable, "-c", DEVICE_SCRIPT, str(tmp_path / "four.npy"),
                           json.dumps(rows)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert info == {"devices": 4, "rounds": 2}  # 18 pairs in rounds of 4 x 4 = 16
    four = np.load(tmp_path / "four.npy")
    sweep = Sweep(train, block_size=4)
    one = sweep.run(6, configs=table(rows), progress=False)
    assert one.num_rounds == 5
    np.testing.assert_array_equal(four, one.outputs["r"])
    alone = sweep.run(6, configs=table([TARGET]), progress=False).outputs["r"]
    np.testing.assert_array_equal(four[2], alone[0])
    # not vacuous: the 18 pairs as one natural batch compute other bits
    seeds = np.tile(np.arange(6), 3)
    keys = jax.vmap(seed_key, in_axes=(None, 0))(0, jnp.asarray(seeds, jnp.int32))
    hp = {k: jnp.repeat(jnp.asarray(v), 6) for k, v in table(rows).columns.items()}
    natural = np.asarray(jax.jit(jax.vmap(train))(keys, hp)["r"]).reshape(3, 6)
    assert np.any(four != natural)
