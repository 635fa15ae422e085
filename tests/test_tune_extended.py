"""rljax.tune's grid extension: a tuned rate at its grid's edge is a bound, so the grid
grows until the winner is interior (or a cap is reached), each added rate on the same
tuning seeds, and only the final winner runs on the evaluation seeds."""

import jax
import numpy as np
import pytest

from rljax.tune import extend_grid, grid_position, seed_split, tune_extended


@pytest.mark.parametrize("grid, winner, added", [
    ((1e-4, 3e-4, 1e-3), 1e-4, 1e-4 / 3),        # lowest: divide by its spacing
    ((1e-4, 3e-4, 1e-3), 1e-3, 1e-3 * 10 / 3),   # highest: multiply by its spacing
    ((1e-4, 3e-4, 1e-3), 3e-4, None),            # interior: nothing to add
    ((1e-3, 1e-4, 3e-4), 1e-4, 1e-4 / 3),        # any order
    ((2e-4, 1e-4), 2e-4, 4e-4),                  # two rates: the winner is at an edge
    ((1e-4,), 1e-4, None),                       # one rate: no spacing to carry
])
def test_extend_grid(grid, winner, added):
    new = extend_grid(grid, winner)
    assert new is None if added is None else new == pytest.approx(added, rel=1e-12)


def test_grid_position():
    grid = (3e-5, 1e-4, 3e-4)
    assert [grid_position(grid, r) for r in grid] == [
        "lowest", "interior", "highest"]
    assert grid_position((1e-4,), 1e-4) == "only"


@pytest.mark.parametrize("peak, max_extensions, grid, extensions, position", [
    (1e-4, 2, (3e-5, 1e-4, 3e-4), 0, "interior"),   # interior at once: no extension
    (2e-5, 2, (9e-6, 3e-5, 1e-4, 3e-4), 1, "interior"),  # one rate below, then interior
    (1e-7, 2, (2.7e-6, 9e-6, 3e-5, 1e-4, 3e-4), 2, "lowest"),  # capped: still an edge
    (6e-4, 2, (3e-5, 1e-4, 3e-4, 9e-4, 2.7e-3), 2, "interior"),  # two above, then interior
    (1e-2, 2, (3e-5, 1e-4, 3e-4, 9e-4, 2.7e-3), 2, "highest"),
    (1e-2, 0, (3e-5, 1e-4, 3e-4), 0, "highest"),  # extensions off
])
def test_tune_extended_adds_rates_until_the_winner_is_interior(peak, max_extensions, grid,
                                                               extensions, position):
    calls = []

    def run_rates(rates, first_seed, num_seeds):  # accuracy peaks at `peak` (log scale)
        calls.append((tuple(rates), first_seed))
        score = np.exp(-np.abs(np.log(np.asarray(rates) / peak)))
        return np.repeat(score[:, None], num_seeds, axis=1) + 0.01 * np.arange(num_seeds)

    split = seed_split(2, 3)
    result, rates, n = tune_extended(
        run_rates, (3e-5, 1e-4, 3e-4), split, max_extensions=max_extensions,
        key=jax.random.key(0), reps=50)
    assert rates == pytest.approx(grid, rel=1e-9) and n == extensions
    assert grid_position(rates, rates[result.best]) == position
    tuning = [c for c in calls if c[1] == 0]
    assert len(tuning) == 1 + extensions and all(len(c[0]) == 1 for c in tuning[1:])
    assert calls[-1] == ((rates[result.best],), 2)  # only the winner on the fresh seeds
    assert result.tuning_scores.shape == (len(grid), 2)
    assert result.tuning_scores[:, 0] == pytest.approx(
        np.exp(-np.abs(np.log(np.asarray(rates) / peak))))
