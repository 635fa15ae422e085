"""Sweep determinism: seed i's bits depend only on (base seed, i, block size).

The guarantee is tested on ``helpers.shape_sensitive.train``, a workload whose bits move
with the batch shape XLA CPU compiles for (``tests/test_fixed_blocks.py`` checks that it
does), so a sweep that ran seeds at their natural batch size would fail here.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
from helpers.shape_sensitive import blocked_reference, plain_vmap
from helpers.shape_sensitive import train as shape_sensitive_train

from rljax.sweep import Sweep, run_sweep, seed_key
from rljax.training.chain import make_chain_train

REPO = Path(__file__).resolve().parents[1]


def small_train():
    return make_chain_train(mode="orm", episodes=40)


def test_seed_counts_do_not_change_a_seeds_bits():
    sweep = Sweep(shape_sensitive_train, block_size=256)
    big = sweep.run(2048, progress=False)
    small = sweep.run(512, progress=False)
    odd = sweep.run(263, progress=False)  # padded last block of 7 seeds
    assert big.outputs["r"].shape == (2048,)
    np.testing.assert_array_equal(big.outputs["r"][:512], small.outputs["r"])
    np.testing.assert_array_equal(big.outputs["r"][:263], odd.outputs["r"])
    np.testing.assert_array_equal(odd.outputs["r"], blocked_reference(263, 256))
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
    sys.path.insert(0, "tests")
    from helpers.shape_sensitive import train
    from rljax.sweep import Sweep
    block, seeds, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    result = Sweep(train, block_size=block).run(seeds, progress=False)
    np.save(out, result.outputs["r"])
    print(json.dumps({"devices": jax.device_count(), "rounds": result.num_rounds}))
    """
)


def run_with_devices(num_devices, block, seeds, out):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = (f"{env.get('XLA_FLAGS', '')} "
                        f"--xla_force_host_platform_device_count={num_devices}")
    proc = subprocess.run(
        [sys.executable, "-c", DEVICE_SCRIPT, str(block), str(seeds), str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(300)
def test_one_vs_eight_devices_bitwise(tmp_path):
    """8 devices x block 4 (rounds of 32, the second padded) give the bits of 1 device x
    block 4 (10 rounds), which are not the bits of one unblocked batch of 40."""
    eight = run_with_devices(8, 4, 40, tmp_path / "eight.npy")
    assert eight == {"devices": 8, "rounds": 2}
    one = Sweep(shape_sensitive_train, block_size=4).run(40, progress=False)
    assert one.num_rounds == 10
    np.testing.assert_array_equal(np.load(tmp_path / "eight.npy"), one.outputs["r"])
    assert np.any(one.outputs["r"] != plain_vmap(np.arange(40)))


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


def test_chunked_advance_donates_the_state_it_replaces(tmp_path):
    """ChunkedSweep's advance program donates its input state, so a chunk's new state
    reuses the old one's memory (a replay buffer is not copied at every chunk): the states
    handed to the checkpointer after chunks 1 and 2 are deleted once the next chunk has
    run, and the donated run's bits are the run without checkpoints'."""
    import jax.numpy as jnp

    from rljax.checkpoint import Checkpointer
    from rljax.sweep import ChunkedSweep

    saved = []

    class Recording(Checkpointer):
        def save(self, step, state, **kwargs):
            saved.append(state["state"])
            return super().save(step, state, **kwargs)

    def init(key):
        return {"buffer": jnp.zeros((512,)), "key": key}

    def advance(state):
        key, sub = jax.random.split(state["key"])
        buffer = state["buffer"] + jax.random.normal(sub, state["buffer"].shape)
        return {"buffer": buffer, "key": key}, {"mean": buffer.mean()}

    def finish(state):
        return {"total": state["buffer"].sum()}

    sweep = ChunkedSweep(init, advance, finish, num_chunks=3, block_size=2)
    kept = sweep.run(2, checkpointer=Recording(tmp_path), checkpoint_every=1, progress=False)
    assert len(saved) == 2
    assert [s["buffer"].is_deleted() for s in saved] == [True, True]
    plain = sweep.run(2, progress=False)
    for name in ("logs", "final"):
        jax.tree.map(np.testing.assert_array_equal, kept.outputs[name], plain.outputs[name])
