"""The fixed-block guarantee, on a workload whose bits DO move with the batch shape.

``rljax.sweep`` promises: seed ``i``'s result is bitwise the same for any number of seeds
and devices at a given ``block_size``, because every seed runs inside one compiled
program of ``block_size`` seeds per device (the last round padded). A test of that needs a
workload that ``jax.jit(jax.vmap(f))`` computes differently at two batch shapes, or it
would pass with the blocks removed; ``helpers.shape_sensitive.train`` is one (measured
first here, so the test says when it stops being meaningful).
"""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
from helpers.shape_sensitive import blocked_reference, plain_vmap, train

from rljax.sweep import Sweep

REPO = Path(__file__).resolve().parents[1]


def _entry_param_shapes(compiled):
    """The per-device parameter shapes of a compiled program's ENTRY computation."""
    entry = next(line for line in compiled.as_text().splitlines() if line.startswith("ENTRY"))
    params = entry[entry.index("(") + 1:entry.index(") ->")]
    return re.findall(r": (\w+\[[\d,]*\])", params)


def test_workload_bits_depend_on_batch_shape():
    """Without blocks the partial last block (7 seeds) computes other bits than inside a
    block of 256: the guarantee below is not vacuous for this workload."""
    natural = plain_vmap(np.arange(256, 263))
    in_block = plain_vmap(np.arange(256, 512))[:7]
    np.testing.assert_allclose(natural, in_block, rtol=1e-5)
    assert np.sum(natural != in_block) >= 1, "workload no longer moves with the batch shape"


def test_partial_last_block_is_bitwise_a_full_blocks():
    sweep = Sweep(train, block_size=256)
    odd = sweep.run(263, progress=False).outputs["r"]   # rounds: 256 + 7 padded to 256
    big = sweep.run(4096, progress=False).outputs["r"]  # 16 full rounds
    assert odd.shape == (263,) and big.shape == (4096,)
    np.testing.assert_array_equal(odd, big[:263])
    np.testing.assert_array_equal(odd, blocked_reference(263, 256))
    # and the last 7 seeds are NOT what an unpadded batch of 7 gives
    assert np.any(odd[256:] != plain_vmap(np.arange(256, 263)))


def test_compiled_program_takes_one_block_per_device():
    sweep = Sweep(train, block_size=256)
    sweep.compile()
    assert _entry_param_shapes(sweep._compiled) == ["s32[256]"]
    (sharding,), _ = sweep._compiled.input_shardings
    assert sharding.shard_shape((sweep.round_size,)) == (256,)


DEVICE_SCRIPT = textwrap.dedent(
    """
    import json, re, sys
    import numpy as np
    import jax
    sys.path.insert(0, "tests")
    from helpers.shape_sensitive import train
    from rljax.sweep import Sweep
    sweep = Sweep(train, block_size=4)
    result = sweep.run(22, progress=False)
    np.save(sys.argv[1], result.outputs["r"])
    entry = next(l for l in sweep._compiled.as_text().splitlines() if l.startswith("ENTRY"))
    params = entry[entry.index("(") + 1:entry.index(") ->")]
    print(json.dumps({"devices": jax.device_count(), "rounds": result.num_rounds,
                      "params": re.findall(r": (\\w+\\[[\\d,]*\\])", params),
                      "global": list(sweep._compiled.in_avals[0][0].shape)}))
    """
)


def test_one_vs_four_devices_bitwise(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4"
    proc = subprocess.run([sys.executable, "-c", DEVICE_SCRIPT, str(tmp_path / "four.npy")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    # 4 devices x block 4 = rounds of 16 seeds: 22 seeds are 2 rounds, the second padded;
    # each device's program still takes 4 seeds.
    assert info == {"devices": 4, "rounds": 2, "params": ["s32[4]"], "global": [16]}
    one = Sweep(train, block_size=4).run(22, progress=False)
    assert one.num_rounds == 6
    four = np.load(tmp_path / "four.npy")
    np.testing.assert_array_equal(four, one.outputs["r"])
    np.testing.assert_array_equal(four, blocked_reference(22, 4))
    # meaningful: the whole 22 as one batch (or 16-seed rounds unsharded) differ
    assert np.any(four != plain_vmap(np.arange(22)))
