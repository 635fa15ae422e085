"""The LM step on a device mesh (rljax.training.lm_sharding): partition rules, shardings
of the whole train state, per-device bytes, and one GRPO step on 8 forced CPU devices
against the single-device step.

The rules and byte counts are checked in this one-device process on an ``AbstractMesh``
(the layout of 8 devices, nothing placed); the step itself runs in one subprocess started
with ``--xla_force_host_platform_device_count=8`` (JAX reads it only at start-up)."""

import jax
import numpy as np
import pytest
from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec

from rljax.policies.lora import LORA_TARGETS, LoRAConfig, init_lora
from rljax.training.lm_sharding import (
    data_parallel,
    lm_mesh,
    partition_spec,
    run_sharding_figures,
    sharded_rl_step,
    sharded_step_memory,
    sharding_trainer,
    state_shardings,
    tree_shardings,
)

FSDP8 = AbstractMesh((8, 1), ("fsdp", "tp"))
FSDP4_TP2 = AbstractMesh((4, 2), ("fsdp", "tp"))


@pytest.fixture(scope="module")
def shapes():
    """The train state's shapes of the figures' trainer (width 64, 2 layers, V = 19)."""
    return jax.eval_shape(sharding_trainer().init, jax.random.key(0))


def _named(path):
    return "/".join(str(getattr(e, "key", getattr(e, "name", getattr(e, "idx", e))))
                    for e in path)


def _check_divides(tree, shardings, mesh):
    """Every leaf has a spec of its rank (or none), each named axis divides its dim."""
    specs = {}
    for (path, leaf), sharding in zip(jax.tree_util.tree_flatten_with_path(tree)[0],
                                      jax.tree_util.tree_leaves(shardings), strict=True):
        assert isinstance(sharding, NamedSharding)
        spec = tuple(sharding.spec)
        assert len(spec) in (0, leaf.ndim), (_named(path), spec, leaf.shape)
        for axes, dim in zip(spec, leaf.shape, strict=False):
            axes = (axes,) if isinstance(axes, str) else axes or ()
            size = int(np.prod([mesh.shape[a] for a in axes]))
            assert dim % size == 0, (_named(path), spec, leaf.shape)
        specs[_named(path)] = spec
    return specs


@pytest.mark.parametrize("mesh", [FSDP8, FSDP4_TP2], ids=["fsdp8", "fsdp4-tp2"])
def test_rules_cover_every_leaf_and_divide_its_dims(shapes, mesh):
    """Every leaf of the state has a sharding; params, reference and both Adam moments
    follow the same rule leaf by leaf; every matrix is split over fsdp, vectors and
    scalars replicated; tp splits columns of q/k/v/gate/up and rows of o/down."""
    shardings = state_shardings(shapes, mesh)
    assert (jax.tree_util.tree_structure(shardings)
            == jax.tree_util.tree_structure(shapes))
    specs = _check_divides(shapes, shardings, mesh)
    params = {k[len("params/"):]: v for k, v in specs.items() if k.startswith("params/")}
    adam = [k for k in specs if k.endswith("/count")]
    assert len(adam) == 1 and specs[adam[0]] == ()
    for name, spec in params.items():
        assert specs[f"reference/{name}"] == spec
        for moment in ("mu", "nu"):
            [mirror] = [v for k, v in specs.items() if k.startswith("opt_state/")
                        and k.endswith(f"/{moment}/{name}")]
            assert mirror == spec, name
        if name.endswith(("scale", "bias")):
            assert spec == (), name
        else:
            assert "fsdp" in jax.tree_util.tree_leaves(spec), name
    tp = mesh.shape["tp"] > 1
    every = ("fsdp", "tp") if tp else "fsdp"  # a leaf tp does not split: over all devices
    assert params["params/embed_tokens/embedding"] == (None, every)  # V = 19 does not
    assert params["params/lm_head/kernel"] == (every, None)  # divide: W is split
    assert params["params/layers_0/self_attn/q_proj/kernel"] == (
        ("fsdp", "tp") if tp else ("fsdp", None))  # [64, 64]: the first of equal dims
    assert params["params/layers_1/mlp/down_proj/kernel"] == (
        ("tp", "fsdp") if tp else ("fsdp", None))
    for name in ("key", "step", "eval_correct", "nonfinite_step"):
        assert specs[name] == ()


def test_replicated_fallback_and_lora_adapters():
    """A dim no axis divides stays whole (19 x 7: replicated); tp is skipped where the
    projection's split dim does not divide; a leaf tp does not split is stored over both
    axes where a dim divides 8, else over fsdp; LoRA's adapters follow the projection
    they adapt (B [r, out] by columns, A [in, r] by rows)."""
    key = jax.tree_util.DictKey
    q = [key("layers_0"), key("self_attn"), key("q_proj"), key("kernel")]
    assert partition_spec(q, (19, 7), FSDP8) == PartitionSpec(None, None)
    assert partition_spec(q, (64, 5), FSDP4_TP2) == PartitionSpec(("fsdp", "tp"), None)
    assert partition_spec(q, (64, 6), FSDP4_TP2) == PartitionSpec("fsdp", "tp")
    assert partition_spec(q, (64,), FSDP4_TP2) == PartitionSpec()
    assert partition_spec([key("norm"), key("scale")], (64, 64), FSDP4_TP2) == \
        PartitionSpec(("fsdp", "tp"), None)  # not a projection: over all 8 devices
    assert partition_spec([key("norm"), key("scale")], (4, 12), FSDP4_TP2) == \
        PartitionSpec(None, "fsdp")  # no dim divides 8: fsdp alone, on the larger
    policy = sharding_trainer().policy
    lora = LoRAConfig(rank=8, alpha=16.0, targets=LORA_TARGETS)
    adapters = jax.eval_shape(lambda: init_lora(jax.random.key(1),
                                                policy.init(jax.random.key(0)), lora))
    specs = _check_divides(adapters, tree_shardings(adapters, FSDP4_TP2), FSDP4_TP2)
    assert specs["layers_0/self_attn/q_proj/b"] == ("fsdp", "tp")  # [8, 64]
    assert specs["layers_0/self_attn/q_proj/a"] == (("fsdp", "tp"), None)  # [64, 8]
    assert specs["layers_0/mlp/down_proj/a"] == ("tp", "fsdp")  # [176, 8]
    assert specs["layers_0/mlp/down_proj/b"] == (None, ("fsdp", "tp"))  # [8, 64]


def test_per_device_bytes_fall_to_about_an_eighth(shapes):
    """Parameters + Adam's state per device at fsdp = 8, from the shard shapes: only the
    norm scales and Adam's count stay whole, so the ratio is near 1/8 (<= 0.2, the
    issue's bar); replicating everything gives 1."""
    trainer = sharding_trainer()
    figures = sharded_step_memory(trainer, FSDP8, xla=False)
    whole = sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(
        (shapes.params, shapes.opt_state)))
    vectors = sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(
        (shapes.params, shapes.opt_state)) if x.ndim < 2)
    assert figures["replicated_bytes"] == whole
    assert figures["sharded_bytes_per_device"] == (whole - vectors) // 8 + vectors
    assert 1 / 8 < figures["fsdp_memory_per_device_ratio"] <= 0.2
    one = sharded_step_memory(trainer, AbstractMesh((1, 1), ("fsdp", "tp")), xla=False)
    assert one["fsdp_memory_per_device_ratio"] == 1.0


@pytest.mark.parametrize("kwargs, field", [
    (dict(fsdp=0), "fsdp"), (dict(fsdp=2), "fsdp"), (dict(tp=2), "tp"),
    (dict(tp=True), "tp"), (dict(fsdp=1.5), "fsdp")])
def test_bad_mesh_arguments_name_the_field(kwargs, field):
    """One device here: a mesh that needs more, or a size that is not a positive int, is a
    one-line ValueError naming the field."""
    with pytest.raises(ValueError, match=f"^{field}: ") as err:
        lm_mesh(**kwargs, devices=jax.devices()[:1])
    assert "\n" not in str(err.value)
    assert lm_mesh(devices=jax.devices()[:1]).shape == {"fsdp": 1, "tp": 1}


@pytest.mark.timeout(240)
def test_sharded_step_equals_single_device_step_on_8_devices():
    """One GRPO step (sampling, scoring, the update) on 8 forced CPU devices, fsdp = 8,
    from the single-device step's state and key: the same tokens, Adam's moments and
    metrics within float round-off, params within a tenth of the learning rate (Adam's
    first step is lr g / (|g| + eps): a gradient that is 0 on one side and 1e-10 of
    round-off on the other moves a coordinate by a few percent of lr), and per-device
    parameter + Adam bytes <= 0.2 of the replicated figure by the shard shapes and by
    XLA's memory analysis of the compiled steps."""
    figures = run_sharding_figures(devices=8)
    assert (figures["devices"], figures["fsdp"], figures["tp"]) == (8, 8, 1)
    assert figures["sampled_tokens_equal"]
    assert figures["sampled_rows_axis"] == "fsdp"  # the sampler is data parallel
    assert figures["adam_max_abs_diff"] <= 1e-7
    assert figures["metrics_max_abs_diff"] <= 1e-5
    assert figures["params_max_abs_diff"] <= 3e-5  # learning_rate 3e-4
    assert figures["fsdp_memory_per_device_ratio"] <= 0.2
    xla_ratio = figures["xla_argument_bytes_per_device"] / figures["xla_argument_bytes_single"]
    assert xla_ratio <= 0.2
    assert figures["xla_temp_bytes_per_device"] < figures["xla_temp_bytes_single"]
    assert np.isclose(figures["sharded_bytes_per_device"] / figures["replicated_bytes"],
                      figures["fsdp_memory_per_device_ratio"])


def test_the_sharded_step_is_the_data_parallel_trainers_step():
    """``sharded_rl_step`` jits ``rl_step`` of :func:`data_parallel` (the batch split over
    ``"fsdp"``; the 8-device test checks that its sampler's rows are), not the plain
    trainer's, whose batch XLA would leave whole on every device."""
    trainer = sharding_trainer()
    mesh = lm_mesh(devices=jax.devices()[:1])
    step = sharded_rl_step(trainer, mesh)
    assert step.__wrapped__.__self__ == data_parallel(trainer, mesh)
    assert data_parallel(trainer, mesh).config == trainer.config
