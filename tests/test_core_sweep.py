"""Sweep determinism: seed i's bits depend only on (base seed, i, block size)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

from experiments.chain_training import make_chain_train
from rljax.sweep import Sweep, run_sweep, seed_key

REPO = Path(__file__).resolve().parents[1]


def small_train():
    return make_chain_train(mode="orm", episodes=40)


def test_seed_counts_do_not_change_a_seeds_bits():
    sweep = Sweep(small_train(), block_size=256)
    big = sweep.run(2048, progress=False)
    small = sweep.run(512, progress=False)
    odd = sweep.run(300, progress=False)  # padded last block
    assert big.outputs["success"].shape == (2048, 40)
    np.testing.assert_array_equal(big.outputs["success"][:512], small.outputs["success"])
    np.testing.assert_array_equal(big.outputs["success"][:300], odd.outputs["success"])
    assert big.num_rounds == 8 and odd.num_rounds == 2


def test_seed_key_is_fold_in_of_base_seed():
    def train(key):
        return {"bits": jax.random.bits(key, (4,))}

    result = run_sweep(train, 5, base_seed=7, block_size=2, progress=False)
    for i in range(5):
        np.testing.assert_array_equal(result.outputs["bits"][i],
                                      jax.random.bits(seed_key(7, i), (4,)))


@pytest.mark.parametrize("bad", [0, -3, 1.5, True])
def test_bad_sweep_args(bad):
    with pytest.raises(ValueError, match="seeds"):
        run_sweep(lambda k: {"x": jax.random.uniform(k)}, bad, progress=False)
    with pytest.raises(ValueError, match="block_size"):
        run_sweep(lambda k: {"x": jax.random.uniform(k)}, 4, block_size=bad, progress=False)


DEVICE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import jax
    from experiments.chain_training import make_chain_train
    from rljax.sweep import Sweep
    block, seeds, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    result = Sweep(make_chain_train(mode="prm", episodes=40), block_size=block).run(
        seeds, progress=False)
    np.save(out, result.outputs["success"])
    print(json.dumps({"devices": jax.device_count(), "rounds": result.num_rounds}))
    """
)


def run_with_devices(num_devices, block, seeds, out):
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={num_devices}"
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "-c", DEVICE_SCRIPT, str(block), str(seeds), str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(300)
def test_one_vs_eight_devices_bitwise(tmp_path):
    one = run_with_devices(1, 64, 520, tmp_path / "one.npy")
    eight = run_with_devices(8, 64, 520, tmp_path / "eight.npy")
    assert one == {"devices": 1, "rounds": 9}
    assert eight == {"devices": 8, "rounds": 2}
    np.testing.assert_array_equal(np.load(tmp_path / "one.npy"), np.load(tmp_path / "eight.npy"))


def test_round_checkpoints_resume_and_timed_fraction(tmp_path):
    """Finished rounds are saved; a resume reads them back (same bits) and its throughput
    share says that none of the work was timed."""
    from rljax.checkpoint import Checkpointer

    sweep = Sweep(small_train(), block_size=16)
    meta = {"study": "test"}
    full = sweep.run(40, checkpointer=Checkpointer(tmp_path, metadata=meta), progress=False)
    assert full.timed_fraction == 1.0
    assert sorted(int(p.name) for p in (tmp_path / "rounds").iterdir()) == [0, 1, 2]
    again = sweep.run(40, checkpointer=Checkpointer(tmp_path, metadata=meta), resume=True,
                      progress=False)
    assert again.timed_fraction == 0.0
    for name in full.outputs:
        np.testing.assert_array_equal(again.outputs[name], full.outputs[name])
