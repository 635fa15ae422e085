"""rljax.training.chain: the run reports the first episode after which its
parameters went non-finite (-1 while finite), per seed, under jit and vmap."""

import numpy as np
import pytest

from rljax.nonfinite import NONFINITE_STEP
from rljax.sweep import Sweep
from rljax.training.chain import make_chain_train


@pytest.mark.timeout(120)
@pytest.mark.parametrize("learning_rate, first", [(0.1, -1), (float("nan"), 0)])
def test_nonfinite_step(learning_rate, first):
    train = make_chain_train(mode="orm", episodes=12, learning_rate=learning_rate)
    outputs = Sweep(train, block_size=4).run(3, progress=False).outputs
    assert outputs[NONFINITE_STEP].dtype == np.int32
    np.testing.assert_array_equal(outputs[NONFINITE_STEP], [first] * 3)
    assert np.isfinite(outputs["final_logits"]).all() == (first < 0)
    assert outputs["success"].shape == (3, 12)
