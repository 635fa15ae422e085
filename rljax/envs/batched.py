"""A batch of ``N`` environments of one seed as one function: the vmapped ``reset`` /
``step`` every trainer uses (PPO, recurrent PPO, test-rollout evaluation).

The batch axis is named :data:`ENV_AXIS`, so wrappers that keep running statistics
(``NormalizeObservation``, ``NormalizeReward``) merge them across the ``N`` envs with
``jax.lax`` collectives over that name.
"""

from __future__ import annotations

from collections.abc import Callable

import jax

ENV_AXIS = "env"
"""The ``vmap`` axis name of a batch of environments (``jax.vmap(..., axis_name=ENV_AXIS)``),
the ``axis_name`` the normalising wrappers merge their statistics over in the PPO trainer."""


def vmap_env(env) -> tuple[Callable, Callable]:
    """``(reset, step)`` of ``env`` over a batch of ``N`` environments sharing ``params``.

    * ``reset(keys [N], params) -> (obs [N, ...], state [N, ...])``
    * ``step(keys [N], state [N, ...], actions [N, ...], params) -> (obs [N, ...],
      state [N, ...], reward [N], terminated [N], truncated [N], info {k: [N, ...]})``

    Both are ``jax.vmap`` with ``axis_name=ENV_AXIS`` (``params`` not mapped), so they run
    under ``jit`` and under a further ``vmap`` over seeds.
    """
    reset = jax.vmap(env.reset, in_axes=(0, None), axis_name=ENV_AXIS)
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None), axis_name=ENV_AXIS)
    return reset, step
