"""Rollouts written with ``lax.scan``: one seed, explicit keys, fixed length.

Shapes (one seed): a rollout of ``T`` steps in one environment returns a
:class:`Trajectory` whose leaves are ``[T, ...]``; vmap it for ``[N, T, ...]`` parallel
environments or ``[G, T, ...]`` group members.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.extend.random import threefry2x32_p

from rljax.envs.base import Environment
from rljax.policies.sampling import categorical_from_uniform
from rljax.types import Array, Params, PRNGKey


@struct.dataclass
class Trajectory:
    """One rollout; every leaf has a leading time axis ``[T]``.

    Attributes:
      obs: ``[T, ...]`` observation the action was taken in.
      action: ``[T]`` int32 actions.
      reward: ``[T]`` float32 rewards returned by ``env.step``.
      terminated: ``[T]`` bool, the episode ended at this step (no bootstrap).
      truncated: ``[T]`` bool, the episode was cut by a time limit (bootstrap).
      info: dict of ``[T, ...]`` per-step extras from the environment
        (e.g. ``process_reward``).
    """

    obs: Array
    action: Array
    reward: Array
    terminated: Array
    truncated: Array
    info: dict[str, Array]


def rollout(
    key: PRNGKey,
    env: Environment,
    env_params: Any,
    policy_apply: Callable[[Params, Array], Array],
    policy_params: Params,
    obs: Array,
    env_state: Any,
    num_steps: int,
    *,
    sample_fn: Callable[[Array, Array], Array] = categorical_from_uniform,
    unroll: int | bool = 1,
    env_key: PRNGKey | None = None,
    row: int | Array | None = None,
) -> tuple[Trajectory, tuple[Array, Any]]:
    """Run ``num_steps`` steps of ``policy`` in ``env`` from ``(obs, env_state)``.

    Episodes that end inside the window are auto-reset by the environment. The policy's
    randomness comes from one generator call on ``key`` (see
    :func:`draw_uniforms_and_keys`): ``T`` uniforms that pick the actions by inverse CDF,
    plus one environment key that is split into the ``T`` step keys. A deterministic
    environment never reads its keys, so XLA drops that split entirely and the rollout
    costs one generator call; the trajectory is a pure function of the inputs.

    Args:
      key: typed PRNG key.
      env, env_params: the environment and its parameters.
      policy_apply: ``apply(params, obs) -> logits [A]``.
      policy_params: the policy's parameters.
      obs, env_state: where to start (e.g. from ``env.reset``).
      num_steps: T, static.
      sample_fn: ``(u, logits) -> action`` from a uniform ``u`` in ``[0, 1)``;
        inverse-CDF categorical by default.
      unroll: passed to ``lax.scan`` (``True`` fully unrolls short episodes).
      env_key: optional key for the environment's randomness; ``key`` then draws only
        the ``T`` policy uniforms (a caller with a deterministic environment passes a
        key nothing reads, so XLA drops it, and the generator call hashes ``T`` words
        instead of ``T + 2``).
      row: optional row index: the policy's words are row ``row`` of one 2-D draw on
        ``key`` (see :func:`draw_uniforms_and_keys`), so a loop over episodes can pass
        the same ``key`` with ``row=episode`` instead of splitting a key per episode.

    Returns:
      ``(trajectory, (last_obs, last_env_state))`` with trajectory leaves ``[T, ...]``.
    """
    if num_steps < 1:
        raise ValueError(f"num_steps: must be >= 1, got {num_steps}")
    policy_noise, env_key = _policy_noise_and_env_key(key, num_steps, env_key, row)
    env_keys = jax.random.split(env_key, num_steps)
    return _scan_steps(
        policy_noise, env_keys, env, env_params, policy_apply, policy_params, obs, env_state,
        sample_fn=sample_fn, unroll=unroll,
    )


def _scan_steps(
    policy_noise, env_keys, env, env_params, policy_apply, policy_params, obs, env_state,
    *, sample_fn, unroll,
):
    def body(carry, inputs):
        obs_t, state_t = carry
        noise_t, key_t = inputs
        logits = policy_apply(policy_params, obs_t)
        action = sample_fn(noise_t, logits)
        next_obs, next_state, reward, terminated, truncated, info = env.step(
            key_t, state_t, action, env_params
        )
        transition = Trajectory(
            obs=obs_t,
            action=action,
            reward=jnp.asarray(reward, jnp.float32),
            terminated=jnp.asarray(terminated, bool),
            truncated=jnp.asarray(truncated, bool),
            info=info,
        )
        return (next_obs, next_state), transition

    (last_obs, last_state), trajectory = jax.lax.scan(
        body, (obs, env_state), (policy_noise, env_keys), unroll=unroll
    )
    return trajectory, (last_obs, last_state)


def episode_rollout(
    key: PRNGKey,
    env: Environment,
    env_params: Any,
    policy_apply: Callable[[Params, Array], Array],
    policy_params: Params,
    num_steps: int,
    *,
    sample_fn: Callable[[Array, Array], Array] = categorical_from_uniform,
    unroll: int | bool = 1,
    env_key: PRNGKey | None = None,
    row: int | Array | None = None,
) -> Trajectory:
    """Reset ``env`` and roll out ``num_steps`` steps (one fixed-length episode).

    The ``T`` action uniforms (and, unless ``env_key`` is given, one environment key)
    come from one generator call on ``key`` (row ``row`` of a 2-D draw if given); the
    environment key is split into the reset key and the ``T`` step keys (dropped by XLA
    when the environment is deterministic). Returns a :class:`Trajectory` with leaves
    ``[T, ...]``; see :func:`rollout` for the arguments.
    """
    if num_steps < 1:
        raise ValueError(f"num_steps: must be >= 1, got {num_steps}")
    policy_noise, env_key = _policy_noise_and_env_key(key, num_steps, env_key, row)
    env_keys = jax.random.split(env_key, num_steps + 1)
    obs, state = env.reset(env_keys[0], env_params)
    trajectory, _ = _scan_steps(
        policy_noise, env_keys[1:], env, env_params, policy_apply, policy_params, obs, state,
        sample_fn=sample_fn,
        unroll=unroll,
    )
    return trajectory


def _policy_noise_and_env_key(key, num_steps, env_key, row):
    if env_key is None:
        policy_noise, (env_key,) = draw_uniforms_and_keys(key, num_steps, ((),), row=row)
        return policy_noise, env_key
    policy_noise, _ = draw_uniforms_and_keys(key, num_steps, row=row)
    return policy_noise, env_key


def draw_uniforms_and_keys(
    key: PRNGKey,
    num_uniforms: int,
    key_shapes: tuple[tuple[int, ...], ...] = (),
    *,
    row: int | Array | None = None,
) -> tuple[Array, tuple[PRNGKey, ...]]:
    """Draw ``num_uniforms`` float32 uniforms in ``[0, 1)`` and key arrays of the given
    shapes from **one** call of the generator on ``key``.

    On CPU every call of JAX's threefry generator (``split``, ``uniform``, ``fold_in``)
    is a loop of its own, and inside a per-episode scan each loop's fixed cost dominates
    the arithmetic. Drawing all random words of a rollout at once keeps one loop per
    episode: the ``W = U + (key words)`` words are split into uniforms
    (``(w >> 9) | 0x3F800000`` reinterpreted as a float in ``[1, 2)``, minus 1 -- the
    mapping ``jax.random.uniform`` uses) and key data (``jax.random.wrap_key_data``;
    random words are valid threefry key material, exactly what ``split`` produces).

    **Rows.** With ``row=i`` (an int or traced int32 scalar) the words are row ``i`` of
    the 2-D draw ``jax.random.bits(key, (R, W))`` for any ``R > i``, computed alone: one
    key then serves a whole loop (row ``i`` in iteration ``i``) with no per-iteration
    key at all. Splitting a key per iteration instead -- ``split(key, (E, ...))`` ahead
    of a scan over ``E`` episodes -- is a large, memory-bound generator call of its own:
    measured on the ORM-vs-PRM training at 4096 seeds, the per-episode keys cost about
    as much as everything else in the episode. For JAX's default generator (threefry
    with ``jax_threefry_partitionable``, the default since JAX 0.5) the row is computed
    directly from the counters ``i * W + j``, bit-identical to the 2-D draw (needs
    ``(i + 1) * W <= 2**32``); for other generators it is
    ``jax.random.bits(jax.random.fold_in(key, i), (W,))``.

    Args:
      key: typed PRNG key (not reused afterwards, except for other rows).
      num_uniforms: how many uniforms, U.
      key_shapes: shapes of the key arrays wanted, e.g. ``((T,),)``.
      row: optional row index ``i`` (see above).

    Returns:
      ``(uniforms [U], keys)`` with ``keys[i]`` of shape ``key_shapes[i]``.
    """
    key_data_shape = jax.random.key_data(key).shape
    words_per_key = int(np.prod(key_data_shape, dtype=np.int64))
    counts = [int(np.prod(shape, dtype=np.int64)) * words_per_key for shape in key_shapes]
    num_words = num_uniforms + sum(counts)
    if row is None:
        bits = jax.random.bits(key, (num_words,), jnp.uint32)
    else:
        bits = _row_bits(key, row, num_words)
    mantissa = (bits[:num_uniforms] >> jnp.uint32(9)) | jnp.uint32(0x3F800000)
    uniforms = jax.lax.bitcast_convert_type(mantissa, jnp.float32) - jnp.float32(1.0)
    keys = []
    offset = num_uniforms
    impl = jax.random.key_impl(key)
    for shape, count in zip(key_shapes, counts, strict=True):
        data = bits[offset : offset + count].reshape(*shape, *key_data_shape)
        keys.append(jax.random.wrap_key_data(data, impl=impl))
        offset += count
    return uniforms, tuple(keys)


@functools.cache
def _threefry() -> Any:
    """The threefry key implementation (looked up on first use: computing a key at
    import time would start the XLA backend before ``jax.distributed.initialize``)."""
    return jax.random.key_impl(jax.random.key(0, impl="threefry2x32"))


def _row_bits(key: PRNGKey, row: int | Array, num_words: int) -> Array:
    """Row ``row`` of ``jax.random.bits(key, (R, num_words), uint32)`` (see above)."""
    if jax.random.key_impl(key) != _threefry() or not jax.config.jax_threefry_partitionable:
        return jax.random.bits(jax.random.fold_in(key, row), (num_words,), jnp.uint32)
    # Partitionable threefry: word k of a draw hashes the counter pair (k >> 32, k & ~0)
    # and returns the XOR of the two output words.
    data = jax.random.key_data(key)
    counters = jnp.asarray(row, jnp.uint32) * jnp.uint32(num_words) + jnp.arange(
        num_words, dtype=jnp.uint32
    )
    # The primitive's CPU lowering needs the counters to have the full (batched) shape:
    # ``zero`` depends on both the key and the row, so the counters below do too.
    zero = (counters ^ counters) + (data[0] ^ data[0])
    high, low = threefry2x32_p.bind(data[0], data[1], zero, counters + zero)
    return high ^ low
