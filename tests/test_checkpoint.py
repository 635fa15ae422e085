"""Checkpoints: bitwise round trips, pruning, atomicity, checked restores, resumption."""

import json
import os
import re
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rljax import checkpoint
from rljax.checkpoint import Checkpointer, CheckpointError

# A restore of a corrupted checkpoint fails on its first bad leaf; orbax then closes its
# event loop while tensorstore still completes the other reads, whose callbacks report
# "Event loop is closed" as unraisable exceptions. Harmless noise from the error path.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

NUM_SEEDS = 4


def _is_key(x):
    return jax.dtypes.issubdtype(getattr(x, "dtype", np.float32), jax.dtypes.prng_key)


def _bits(x):
    """Host bits of a leaf (typed keys as their key data) for bitwise comparison."""
    return np.asarray(jax.random.key_data(x) if _is_key(x) else x)


def assert_bitwise_equal(a, b):
    flat_a, tree_a = jax.tree_util.tree_flatten(a)
    flat_b, tree_b = jax.tree_util.tree_flatten(b)
    assert tree_a == tree_b
    for x, y in zip(flat_a, flat_b, strict=True):
        assert type(x) is type(y) or (isinstance(x, jax.Array) and isinstance(y, jax.Array))
        assert _is_key(x) == _is_key(y)
        if _is_key(x):
            assert x.dtype == y.dtype
        bx, by = _bits(x), _bits(y)
        assert bx.dtype == by.dtype and bx.shape == by.shape
        assert bx.tobytes() == by.tobytes()


def realistic_state(seed=0):
    """A seed sweep's training state: flax params, adam state, keys, counters."""
    keys = jax.random.split(jax.random.key(seed), NUM_SEEDS)
    model = nn.Dense(8)
    params = jax.vmap(lambda k: model.init(k, jnp.zeros((1, 5))))(keys)
    opt_state = jax.vmap(optax.adam(1e-3).init)(params)
    return {
        "params": params,
        "opt_state": opt_state,
        "key": jax.random.split(jax.random.key(seed + 1), NUM_SEEDS),
        "step": jnp.arange(NUM_SEEDS, dtype=jnp.int32),
        "returns": np.linspace(0.0, 1.0, 6, dtype=np.float32).reshape(2, 3),
        "episodes": 7,
    }


def _perturbed(state):
    """The same structure with different values (what training would produce)."""
    return jax.tree_util.tree_map(
        lambda x: x if _is_key(x) or not isinstance(x, jax.Array) else x + 1, state
    )


def test_round_trip_is_bitwise_and_placed_like_template(tmp_path):
    state = _perturbed(realistic_state(0))
    ckpt = Checkpointer(tmp_path / "ckpt", metadata={"config": {"width": 8}})
    path = ckpt.save(3, state)
    assert path == tmp_path / "ckpt" / "3"
    assert (path / "checkpoint.json").is_file()

    restored = Checkpointer(tmp_path / "ckpt", metadata={"config": {"width": 8}}).restore(
        realistic_state(1)
    )
    assert_bitwise_equal(restored, state)
    assert isinstance(restored["opt_state"][0], optax.ScaleByAdamState)
    assert isinstance(restored["opt_state"][1], optax.EmptyState)
    assert isinstance(restored["returns"], np.ndarray)
    assert type(restored["episodes"]) is int
    assert restored["key"].dtype == state["key"].dtype
    assert jax.random.key_impl(restored["key"]) == jax.random.key_impl(state["key"])
    # The restored keys draw the same numbers.
    draw = jax.vmap(lambda k: jax.random.normal(k, (3,)))
    np.testing.assert_array_equal(draw(restored["key"]), draw(state["key"]))


def test_restore_into_abstract_template(tmp_path):
    state = realistic_state(0)
    del state["episodes"], state["returns"]  # eval_shape templates hold arrays only
    ckpt = Checkpointer(tmp_path)
    ckpt.save(0, state)
    template = jax.eval_shape(lambda: realistic_state(5))
    del template["episodes"], template["returns"]
    restored = ckpt.restore(template)
    assert_bitwise_equal(restored, state)


def test_single_key_and_other_impl_round_trip(tmp_path):
    state = {"a": jax.random.key(3), "b": jax.random.key(4, impl="rbg")}
    ckpt = Checkpointer(tmp_path)
    ckpt.save(1, state)
    restored = ckpt.restore({"a": jax.random.key(0), "b": jax.random.key(0, impl="rbg")})
    assert_bitwise_equal(restored, state)
    with pytest.raises(CheckpointError, match=r"\['b'\]: key<rbg>\[\] there, key<fry>\[\] here"):
        ckpt.restore({"a": jax.random.key(0), "b": jax.random.key(0)})


def test_steps_latest_and_pruning(tmp_path):
    ckpt = Checkpointer(tmp_path / "ckpt", keep=2)
    assert ckpt.steps() == [] and ckpt.latest_step() is None
    state = {"x": jnp.zeros(3)}
    for step in (10, 20, 30):
        ckpt.save(step, {"x": state["x"] + step})
    assert ckpt.steps() == [20, 30]
    assert ckpt.latest_step() == 30
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["20", "30"]  # no temp dirs left
    np.testing.assert_array_equal(ckpt.restore(state)["x"], np.full(3, 30.0))
    np.testing.assert_array_equal(ckpt.restore(state, step=20)["x"], np.full(3, 20.0))
    # The checkpoint just written is never pruned, even when older than the others.
    ckpt.save(5, state)
    assert ckpt.steps() == [5, 30]
    # Unfinished saves (temp dirs) and stray files are not checkpoints.
    (tmp_path / "ckpt" / ".tmp-40-abc").mkdir()
    (tmp_path / "ckpt" / "notes.txt").write_text("x")
    assert Checkpointer(tmp_path / "ckpt", keep=1).steps() == [5, 30]


def test_refuses_to_overwrite_unless_asked(tmp_path):
    ckpt = Checkpointer(tmp_path)
    ckpt.save(4, {"x": jnp.zeros(2)})
    with pytest.raises(CheckpointError, match=r"4 already exists; pass overwrite=True"):
        ckpt.save(4, {"x": jnp.ones(2)})
    np.testing.assert_array_equal(ckpt.restore({"x": jnp.ones(2)})["x"], np.zeros(2))
    ckpt.save(4, {"x": jnp.ones(2)}, overwrite=True)
    np.testing.assert_array_equal(ckpt.restore({"x": jnp.zeros(2)})["x"], np.ones(2))
    assert sorted(os.listdir(tmp_path)) == ["4"]


def test_no_checkpoint(tmp_path):
    ckpt = Checkpointer(tmp_path / "empty")
    with pytest.raises(CheckpointError, match=r"^checkpoint: no finished checkpoint in .*empty$"):
        ckpt.restore({"x": jnp.zeros(2)})
    ckpt.save(1, {"x": jnp.zeros(2)})
    with pytest.raises(CheckpointError, match=r"no finished checkpoint .*2 \(finished steps: 1\)"):
        ckpt.restore({"x": jnp.zeros(2)}, step=2)


def test_metadata_mismatch_names_first_differing_key(tmp_path):
    meta = {"config": {"width": 32, "lr": 1e-3, "layers": (2, 2)}, "code_version": "abc"}
    Checkpointer(tmp_path, metadata=meta).save(40, {"x": jnp.zeros(2)})
    template = {"x": jnp.zeros(2)}
    # Tuples and lists are the same in JSON: the identical metadata restores.
    Checkpointer(tmp_path, metadata=meta).restore(template)

    def restore_with(metadata):
        return Checkpointer(tmp_path, metadata=metadata).restore(template)

    where = re.escape(str(tmp_path / "40"))
    with pytest.raises(
        CheckpointError,
        match=rf"^checkpoint: {where} was written by another run \(config or code version\): "
        r"'config.width' is 32 there, 64 here$",
    ):
        restore_with({**meta, "config": {**meta["config"], "width": 64}})
    with pytest.raises(CheckpointError, match=r"'code_version' is 'abc' there, 'def' here"):
        restore_with({**meta, "code_version": "def"})
    with pytest.raises(CheckpointError, match=r"'code_version' is 'abc' there, missing here"):
        restore_with({"config": meta["config"]})
    with pytest.raises(CheckpointError, match=r"'config.seed' is missing there, 0 here"):
        restore_with({**meta, "config": {**meta["config"], "seed": 0}})
    with pytest.raises(CheckpointError, match=r"'config.layers' is \[2, 2\] there, \[2, 3\] here"):
        restore_with({**meta, "config": {**meta["config"], "layers": [2, 3]}})


def test_structure_mismatch_names_the_leaf(tmp_path):
    state = realistic_state(0)
    ckpt = Checkpointer(tmp_path)
    ckpt.save(0, state)
    kernel = "\\['params'\\]\\['params'\\]\\['kernel'\\]"

    wider = realistic_state(0)
    wider["params"]["params"]["kernel"] = jnp.zeros((NUM_SEEDS, 5, 9))
    with pytest.raises(
        CheckpointError,
        match=rf"does not match the template at {kernel}: "
        r"float32\[4, 5, 8\] there, float32\[4, 5, 9\] here$",
    ):
        ckpt.restore(wider)

    other_dtype = realistic_state(0)
    other_dtype["step"] = other_dtype["step"].astype(jnp.float32)
    with pytest.raises(
        CheckpointError, match=r"at \['step'\]: int32\[4\] there, float32\[4\] here"
    ):
        ckpt.restore(other_dtype)

    extra = {**realistic_state(0), "baseline": jnp.zeros(4)}
    with pytest.raises(CheckpointError, match=r"template has leaf \['baseline'\], which it lacks"):
        ckpt.restore(extra)

    fewer = realistic_state(0)
    del fewer["episodes"]
    with pytest.raises(CheckpointError, match=r"it has leaf \['episodes'\], which the template"):
        ckpt.restore(fewer)


def _data_files(step_dir):
    """orbax's data files: the nodes and values in OCDBT's ``d/`` directories.

    Small arrays are stored inline in B-tree nodes that exist in two copies (the
    process's and the merged one), so each corruption below hits every data file.
    """
    files = [p for p in (step_dir / "state").rglob("*") if p.is_file() and p.parent.name == "d"]
    assert files
    return files


def _corrupt_garbage(step_dir):
    for path in _data_files(step_dir):
        path.write_bytes(os.urandom(path.stat().st_size))


def _corrupt_truncate(step_dir):
    for path in _data_files(step_dir):
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _corrupt_flip_bytes(step_dir):
    for path in _data_files(step_dir):
        data = bytearray(path.read_bytes())
        for i in range(len(data) // 3, len(data) // 3 + 8):
            data[i] ^= 0xFF
        path.write_bytes(bytes(data))


def _corrupt_delete_data(step_dir):
    for path in _data_files(step_dir):
        path.unlink()


def _corrupt_delete_ocdbt_manifest(step_dir):
    (step_dir / "state" / "manifest.ocdbt").unlink()


def _corrupt_manifest(step_dir):
    (step_dir / "checkpoint.json").write_text('{"format": 1, "ste')


def _corrupt_manifest_entry(step_dir):
    manifest = json.loads((step_dir / "checkpoint.json").read_text())
    manifest["leaves"][0]["stored_dtype"] = "no-such-dtype"
    (step_dir / "checkpoint.json").write_text(json.dumps(manifest))


def _delete_manifest(step_dir):
    (step_dir / "checkpoint.json").unlink()


@pytest.mark.parametrize(
    "corrupt",
    [
        _corrupt_garbage,
        _corrupt_truncate,
        _corrupt_flip_bytes,
        _corrupt_delete_data,
        _corrupt_delete_ocdbt_manifest,
        _corrupt_manifest,
        _corrupt_manifest_entry,
        _delete_manifest,
    ],
)
def test_corrupted_files_raise_checkpoint_error(tmp_path, corrupt):
    state = _perturbed(realistic_state(0))
    ckpt = Checkpointer(tmp_path)
    ckpt.save(40, state)
    assert_bitwise_equal(ckpt.restore(realistic_state(0)), state)  # nothing cached below
    corrupt(tmp_path / "40")
    where = re.escape(str(tmp_path / "40"))
    with pytest.raises(
        CheckpointError, match=rf"^checkpoint: {where} is corrupted or unreadable \(\w+"
    ) as info:
        ckpt.restore(realistic_state(0))
    assert "\n" not in str(info.value)


def test_checksum_catches_silently_wrong_values(tmp_path, monkeypatch):
    ckpt = Checkpointer(tmp_path)
    ckpt.save(2, {"w": jnp.arange(4.0)})
    real_restore = checkpoint._orbax_restore

    def bit_rot(path, target):
        arrays = real_restore(path, target)
        return {name: value + 1 for name, value in arrays.items()}

    monkeypatch.setattr(checkpoint, "_orbax_restore", bit_rot)
    with pytest.raises(
        CheckpointError, match=r"2 is corrupted .*ChecksumError: leaf \['w'\] does not match"
    ):
        ckpt.restore({"w": jnp.zeros(4)})


def test_failed_save_leaves_nothing_and_keeps_old_checkpoints(tmp_path, monkeypatch):
    ckpt = Checkpointer(tmp_path, keep=1)
    ckpt.save(1, {"w": jnp.zeros(3)})

    def disk_full(path, arrays):
        path.mkdir()
        (path / "half").write_bytes(b"x")
        raise OSError("No space left on device")

    monkeypatch.setattr(checkpoint, "_orbax_save", disk_full)
    for step, overwrite in ((2, False), (1, True)):
        with pytest.raises(CheckpointError, match=r"could not write .* \(OSError: No space left"):
            ckpt.save(step, {"w": jnp.ones(3)}, overwrite=overwrite)
    assert sorted(os.listdir(tmp_path)) == ["1"]
    np.testing.assert_array_equal(ckpt.restore({"w": jnp.ones(3)})["w"], np.zeros(3))


def test_invalid_arguments(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative directory, as users write it
    with pytest.raises(ValueError, match="keep must be an integer >= 1, got 0"):
        Checkpointer("unused", keep=0)
    with pytest.raises(ValueError, match="metadata is not JSON-able"):
        Checkpointer("unused", metadata={"f": object()})
    ckpt = Checkpointer("unused")
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="step must be a non-negative integer"):
            ckpt.save(bad, {"x": np.zeros(1)})
    with pytest.raises(ValueError, match="step must be a non-negative integer, got -2"):
        ckpt.restore({"x": np.zeros(1)}, step=-2)
    assert not os.path.exists("unused")
    with pytest.raises(CheckpointError, match=r"leaf \['x'\] is a str, not an array"):
        ckpt.save(0, {"x": "text"})
    assert ckpt.steps() == []
    ckpt.save(0, {"x": np.ones(1)})  # relative directories work
    np.testing.assert_array_equal(ckpt.restore({"x": np.zeros(1)})["x"], np.ones(1))


# ---------------------------------------------------------------------- resumption

CHUNK = 5


def init_walk(seed):
    keys = jax.random.split(jax.random.key(seed), NUM_SEEDS)
    return {"key": keys, "x": jnp.zeros(NUM_SEEDS), "step": jnp.zeros(NUM_SEEDS, jnp.int32)}


@jax.jit
def train_chunk(state):
    """CHUNK steps of a random walk per seed; the key lives in the state."""

    def one_seed(s):
        def body(_, s):
            key, sub = jax.random.split(s["key"])
            return {"key": key, "x": s["x"] + jax.random.normal(sub), "step": s["step"] + 1}

        return jax.lax.fori_loop(0, CHUNK, body, s)

    return jax.vmap(one_seed)(state)


def test_resume_is_bitwise_the_uninterrupted_run(tmp_path):
    meta = {"config": {"seed": 7, "chunk": CHUNK}}
    uninterrupted = init_walk(7)
    for _ in range(3):
        uninterrupted = train_chunk(uninterrupted)

    # First process: one chunk, checkpoint, "killed".
    state = train_chunk(init_walk(7))
    Checkpointer(tmp_path, metadata=meta).save(CHUNK, state)

    # Second process: a new Checkpointer, restore the latest, run the remaining chunks.
    ckpt = Checkpointer(tmp_path, metadata=meta)
    start = ckpt.latest_step()
    assert start == CHUNK
    resumed = ckpt.restore(init_walk(7))
    for step in range(start, 3 * CHUNK, CHUNK):
        resumed = train_chunk(resumed)
        ckpt.save(step + CHUNK, resumed)
    assert_bitwise_equal(resumed, uninterrupted)
    assert ckpt.steps() == [2 * CHUNK, 3 * CHUNK]
    np.testing.assert_array_equal(resumed["step"], np.full(NUM_SEEDS, 3 * CHUNK))


def test_save_and_restore_of_a_megabyte_is_fast(tmp_path):
    keys = jax.random.split(jax.random.key(0), NUM_SEEDS)
    params = jax.vmap(lambda k: {"w": jax.random.normal(k, (256, 256))})(keys)  # 1 MiB
    state = {"params": params, "key": keys}
    ckpt = Checkpointer(tmp_path, keep=1)
    ckpt.save(0, state)  # warm-up (imports, first write)
    start = time.perf_counter()
    for step in range(1, 4):
        ckpt.save(step, state)
        restored = ckpt.restore(state)
    per_round = (time.perf_counter() - start) / 3
    assert_bitwise_equal(restored, state)
    assert per_round < 1.0, f"save+restore of 1 MiB took {per_round:.3f} s"
