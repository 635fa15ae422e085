"""rljax.training.chunking: chunk sizes derived from the run's length (and the error that
lists the ones that work), against a brute-force loop."""

from __future__ import annotations

import pytest

from rljax.training.chunking import auto_chunk_updates, chunk_size_error, chunk_sizes


@pytest.mark.parametrize("updates", [1, 2, 12, 61, 97, 976, 1000, 1024, 3600])
@pytest.mark.parametrize("log_every", [1, 2, 3, 4])
def test_chunk_sizes_and_auto_against_brute_force(updates, log_every):
    brute = [c for c in range(1, updates + 1) if updates % c == 0 and c % log_every == 0]
    assert chunk_sizes(updates, log_every) == brute
    target = max(1, updates // 16)
    fitting = [c for c in brute if c <= target]
    assert auto_chunk_updates(updates, log_every) == (max(fitting) if fitting else updates)
    for c in range(1, updates + 1):
        assert (chunk_size_error(c, updates, log_every) is None) == (c in brute)


def test_auto_chunk_examples_and_the_error_text():
    assert auto_chunk_updates(976) == 61 and auto_chunk_updates(977) == 1
    assert auto_chunk_updates(10, log_every=4) == 10  # no multiple of 4 divides 10: one chunk
    assert chunk_size_error(7, 24) == (
        "chunk_updates: must divide the number of updates total_steps // (num_envs * "
        "num_steps) = 24 and be a multiple of log_every = 1, got 7; values that work: 1, 2, "
        "3, 4, 6, 8, 12, 24 (or 0: automatic, 1)")
