"""NaN isolation: a seed that goes non-finite is flagged with its first step, the other
seeds' results are untouched, and ``--debug-nans`` names the operation."""

import dataclasses
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax import cli
from rljax.nonfinite import (
    NONFINITE_STEP,
    all_finite,
    first_nonfinite_step,
    nonfinite_seeds,
    track_nonfinite,
)
from rljax.sweep import ChunkedSweep, NonFiniteFound, Sweep, SweepOptions, seed_key

STEPS = 12


def _threshold(key):
    """Seed's threshold c in [0, 2 * STEPS): sqrt(c - t) goes NaN from step c + 1."""
    return jnp.floor(jax.random.uniform(key) * 2 * STEPS)


def fault_train(key, *, track=True):
    """``y_t = sqrt(c - t)`` accumulated: NaN from step ``c + 1`` when ``c < STEPS - 1``."""
    c = _threshold(key)

    def step(carry, t):
        total, first = carry
        y = jnp.sqrt(c - t)
        total = total + y
        first = track_nonfinite(first, t, total)
        return (total, first), y

    (total, first), ys = jax.lax.scan(step, (jnp.float32(0), jnp.int32(-1)),
                                      jnp.arange(STEPS, dtype=jnp.float32))
    out = {"y": ys, "total": total}
    if track:
        out[NONFINITE_STEP] = first
    return out


def reference_first_steps(base_seed, num_seeds):
    """Numpy loop: the first step at which the running total is non-finite."""
    flagged = {}
    for i in range(num_seeds):
        c = float(_threshold(seed_key(base_seed, i)))
        total = np.float32(0)
        for t in range(STEPS):
            with np.errstate(invalid="ignore"):
                total = total + np.sqrt(np.float32(c - t))
            if not math.isfinite(total):
                flagged[i] = t
                break
    return flagged


def test_helpers_against_numpy():
    finite = jnp.array([[True, True, False, False], [True] * 4, [False] * 4])
    np.testing.assert_array_equal(jax.jit(first_nonfinite_step)(finite), [2, -1, 0])
    assert bool(all_finite({"a": jnp.ones(3), "n": jnp.int32(7)}))
    assert not bool(all_finite((jnp.ones(2), jnp.array([1.0, jnp.inf]))))
    steps = jax.vmap(track_nonfinite)(jnp.array([-1, 4, -1]), jnp.array([7, 7, 7]),
                                      jnp.array([jnp.nan, jnp.nan, 1.0]))
    np.testing.assert_array_equal(steps, [7, 4, -1])
    assert nonfinite_seeds({"x": np.array([[1.0, np.nan], [1, 2]])}, np.array([5, 6])) == {5: -1}


@pytest.mark.parametrize("scale", [1.0, 3e38])
def test_all_finite_against_numpy_under_jit_and_vmap(scale):
    """float32 / bfloat16 / complex64 leaves, one bad entry per case in seed 2 only. At
    ``scale=3e38`` every value is finite but a plain sum of a leaf overflows to inf: the
    check must still say finite (it reduces ``x * 0``, not ``x``)."""
    from rljax import nonfinite

    rng = np.random.default_rng(0)
    trees = []
    for bad in [None, ("w", np.nan), ("b", np.inf), ("h", -np.inf), ("c", np.nan)]:
        tree = {"w": (scale * (0.5 + 0.5 * rng.random(size=(4, 3, 2)))).astype(np.float32),
                "b": rng.normal(size=(4, 5)).astype(np.float32),
                "h": rng.normal(size=(4, 2)).astype(jnp.bfloat16),
                "c": (rng.normal(size=(4, 3)) + 1j).astype(np.complex64),
                "n": np.arange(4, dtype=np.int32)}  # integer leaves are ignored
        if bad is not None:
            name, value = bad
            tree[name][2].flat[-1] = value  # seed 2 only
        trees.append(tree)
    for tree in trees:
        expected = [all(np.isfinite(np.asarray(tree[k][i], np.complex128)).all()
                        for k in ("w", "b", "h", "c")) for i in range(4)]
        got = jax.jit(jax.vmap(nonfinite.all_finite))(tree)
        np.testing.assert_array_equal(np.asarray(got), expected)
        one = {k: v[2] for k, v in tree.items()}
        assert bool(jax.jit(nonfinite.all_finite)(one)) == expected[2]
    with np.errstate(over="ignore"):  # at 3e38 the overflow of a plain sum is real
        assert np.isinf(np.sum(trees[0]["w"][0], dtype=np.float32)) == (scale > 1.0)
    assert bool(nonfinite.all_finite({"n": jnp.int32(1)}))  # no inexact leaf


def test_flagged_seeds_and_steps_match_numpy_and_others_are_untouched():
    num_seeds = 40
    result = Sweep(fault_train, base_seed=3, block_size=16).run(num_seeds, progress=False)
    expected = reference_first_steps(3, num_seeds)
    assert 0 < len(expected) < num_seeds  # some seeds diverge, some do not
    assert result.nonfinite == expected
    np.testing.assert_array_equal(result.finite, [i not in expected for i in range(num_seeds)])
    # the finite seeds' results are bitwise those of a run of only finite seeds' blocks
    alone = Sweep(lambda k: fault_train(k), base_seed=3, block_size=16).run(
        num_seeds, progress=False)
    keep = result.finite
    np.testing.assert_array_equal(result.outputs["y"][keep], alone.outputs["y"][keep])
    assert np.isfinite(result.outputs["total"][keep]).all()


def test_untracked_outputs_are_flagged_with_unknown_step():
    result = Sweep(lambda k: fault_train(k, track=False), base_seed=3, block_size=16).run(
        24, progress=False)
    expected = reference_first_steps(3, 24)
    assert result.nonfinite == {seed: -1 for seed in expected}


def test_chunked_sweep_flags_from_finish():
    def init(key):
        return {"c": _threshold(key), "t": jnp.float32(0), "first": jnp.int32(-1)}

    def advance(state):
        y = jnp.sqrt(state["c"] - state["t"])
        first = track_nonfinite(state["first"], state["t"].astype(jnp.int32), y)
        return {**state, "t": state["t"] + 1, "first": first}, {"y": y}

    def finish(state):
        return {NONFINITE_STEP: state["first"]}

    sweep = ChunkedSweep(init, advance, finish, num_chunks=STEPS, base_seed=3, block_size=8)
    result = sweep.run(16, progress=False)
    expected = {s: t - 0 for s, t in reference_first_steps(3, 16).items()}
    # the running total in the numpy reference goes NaN at the same step as y itself
    assert result.nonfinite == expected


# ------------------------------------------------------------------ --debug-nans via the CLI


@dataclasses.dataclass(frozen=True)
class FaultConfig:
    seeds: int = 40
    block_size: int = 16
    base_seed: int = 3

    def validate(self):
        pass


class FaultStudy:
    """A study whose seeds with a small threshold take sqrt of a negative number."""

    Config = FaultConfig
    DESCRIPTION = "test study with a NaN"

    @staticmethod
    def run(config, out_dir: Path, options=None):
        result = Sweep(fault_train, base_seed=config.base_seed,
                       block_size=config.block_size).run(config.seeds, desc="fault",
                                                          options=options)
        from rljax import io

        io.write_json(out_dir / "summary.json", {"finite": int(result.finite.sum())})
        return {"finite": int(result.finite.sum())}


@pytest.fixture
def fault_registry(monkeypatch):
    real = cli.registry

    class EntryPoint:
        name = "fault"

        def load(self):
            return FaultStudy

    def registry(group):
        known = dict(real(group))
        if group == cli.EXPERIMENT_GROUP:
            known["fault"] = EntryPoint()
        return known

    monkeypatch.setattr(cli, "registry", registry)


def test_run_reports_nonfinite_seeds_and_keeps_the_rest(fault_registry, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["run", "fault", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    expected = reference_first_steps(3, 40)
    assert f"{len(expected)} seed run(s) went non-finite" in err
    from rljax import io

    records = io.read_json(out / "nonfinite.json")
    assert {r["seed"]: r["step"] for r in records} == expected
    assert {r["sweep"] for r in records} == {"01-fault"}
    assert io.read_json(out / "summary.json")["finite"] == 40 - len(expected)
    assert not (out / "checkpoints").exists()


def test_debug_nans_names_the_operation(fault_registry, tmp_path, capsys):
    bad_seed = min(reference_first_steps(3, 40))
    good_seed = next(i for i in range(40) if i not in reference_first_steps(3, 40))
    assert cli.main(["run", "fault", "--debug-nans", str(bad_seed)]) == 1
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"seed {bad_seed}, sweep '01-fault': first non-finite value from ")
    assert "sqrt" in line and "test_nonfinite.py" in line and "in step" in line
    assert cli.main(["run", "fault", "--debug-nans", str(good_seed)]) == 0
    assert f"seed {good_seed} stayed finite" in capsys.readouterr().out
    assert cli.main(["run", "fault", "--debug-nans", "40"]) == 2
    assert "--debug-nans: seed must be in 0..39" in capsys.readouterr().err


def test_nonfinite_found_from_the_sweep_api():
    bad_seed = min(reference_first_steps(3, 40))
    with pytest.raises(NonFiniteFound) as info:
        Sweep(fault_train, base_seed=3, block_size=16).run(
            40, desc="api", options=SweepOptions(debug_seed=bad_seed))
    assert info.value.seed == bad_seed and "sqrt" in info.value.operation
