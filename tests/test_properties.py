"""Property-based tests (hypothesis) of invariants that must hold for any input."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from experiments.orm_vs_prm import Config, episodes_to_threshold, trailing_success_rate
from rljax.advantages import group_relative_advantages, leave_one_out_advantages
from rljax.config import ConfigError, build_config

finite32 = st.floats(-1e6, 1e6, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None)
# four shapes (groups x group size), each a compile; the values vary freely
@given(arrays(np.float32, st.sampled_from([(1, 2), (2, 3), (3, 8), (4, 9)]),
              elements=finite32))
def test_group_advantages_are_finite_centred_and_zero_for_equal_groups(rewards):
    adv = np.asarray(jax.jit(group_relative_advantages)(jnp.asarray(rewards)))
    assert np.all(np.isfinite(adv))
    scale = np.maximum(1.0, np.abs(adv).max())
    assert np.all(np.abs(adv.sum(-1)) <= 1e-3 * scale * rewards.shape[-1])
    equal = rewards.max(-1) == rewards.min(-1)
    assert np.all(adv[equal] == 0.0)
    loo = np.asarray(leave_one_out_advantages(jnp.asarray(rewards)))
    assert np.all(loo[equal] == 0.0) and np.all(np.isfinite(loo))


@settings(max_examples=60, deadline=None)
@given(arrays(np.bool_, st.tuples(st.integers(1, 5), st.integers(1, 70))),
       st.integers(1, 40))
def test_trailing_rate_matches_a_loop(success, window):
    rate, full = trailing_success_rate(success, window)
    for s in range(success.shape[0]):
        for t in range(success.shape[1]):
            lo = max(0, t - window + 1)
            assert np.isclose(rate[s, t], success[s, lo:t + 1].mean())
            assert full[t] == (t + 1 >= window)
    ep = episodes_to_threshold(success, window, 0.5, True)
    for s in range(success.shape[0]):
        hits = [t for t in range(success.shape[1]) if full[t] and rate[s, t] >= 0.5]
        assert ep[s] == (hits[0] + 1 if hits else np.inf)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(["seeds", "block_size", "episodes", "chain_length", "window"]),
       st.integers(-10**6, 0))
def test_non_positive_sizes_are_refused_naming_the_field(field, value):
    try:
        build_config(Config, {field: value})
    except ConfigError as err:
        assert str(err).startswith(f"{field}:") and "\n" not in str(err)
    else:
        raise AssertionError(f"{field}={value} was accepted")
