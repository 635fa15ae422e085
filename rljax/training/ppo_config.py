"""PPO's trainer configuration: :class:`PPOTrainConfig`, its checks, the traced
hyperparameters a sweep may vary inside one program (:data:`TRACEABLE_HPARAMS`) and the
optimizer a config builds (:func:`ppo_optimizer`).

:mod:`rljax.training.ppo` (the trainer) and :mod:`rljax.training.recurrent_ppo` read these;
``rljax.training.ppo`` re-exports every name, so ``from rljax.training.ppo import
PPOTrainConfig`` keeps working.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax.numpy as jnp
import optax

from rljax.algorithms.ppo import check_ppo_args


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class PPOTrainConfig(NamedTuple):
    """Hyperparameters of :func:`make_ppo_train` (defaults: CleanRL ``ppo.py`` CartPole).

    Attributes:
      num_envs: N parallel environments.
      num_steps: T steps per environment per update (a ``[T, N]`` rollout).
      total_steps: environment steps in all; ``total_steps // (N T)`` updates.
      num_epochs, num_minibatches: passes over each ``N T`` batch and minibatches per
        pass.
      gamma, lam: GAE's discount and lambda, in ``[0, 1]``.
      learning_rate: Adam's initial step size.
      anneal_lr: anneal linearly to 0 over all gradient steps.
      adam_eps: Adam's epsilon.
      max_grad_norm: the gradient clip's bound: the global norm
        (``optax.clip_by_global_norm``, CleanRL, PureJaxRL, gymnax-blines) or, with
        ``grad_clip="elementwise"``, each gradient entry (``optax.clip``, rejax).
      grad_clip: ``"global_norm"`` (default) or ``"elementwise"``.
      clip_epsilon, value_coef, entropy_coef, value_clip, normalize_advantages: of
        :func:`ppo` (``value_clip=None`` switches value clipping off).
      bootstrap_truncations: bootstrap a time-limit truncation from the value of the
        episode's true final observation (``info["final_obs"]``, gymnax >= 1.0
        semantics; default). ``False`` ends it like a termination (gymnax < 1.0,
        gymnax-blines, rejax), which also skips the critic pass over the rollout's final
        observations. Without ``final_obs`` in the env's info it is always ``False``.
    """

    num_envs: int = 4
    num_steps: int = 128
    total_steps: int = 500_000
    num_epochs: int = 4
    num_minibatches: int = 4
    gamma: float = 0.99
    lam: float = 0.95
    learning_rate: float = 2.5e-4
    anneal_lr: bool = True
    adam_eps: float = 1e-5
    max_grad_norm: float = 0.5
    clip_epsilon: float = 0.2
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    value_clip: float | None = 0.2
    normalize_advantages: bool = True
    grad_clip: str = "global_norm"
    bootstrap_truncations: bool = True

    @property
    def batch_size(self) -> int:
        """Samples per update, ``N T``."""
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        """Updates in a run, ``total_steps // (N T)``."""
        return self.total_steps // self.batch_size


#: The :class:`PPOTrainConfig` fields :func:`train_config_from` copies.
_COPIED_FIELDS = ("num_envs", "num_steps", "total_steps", "num_epochs", "num_minibatches",
                  "gamma", "lam", "learning_rate", "anneal_lr", "max_grad_norm",
                  "clip_epsilon", "value_coef", "entropy_coef")


def train_config_from(fields: Any) -> PPOTrainConfig:
    """A :class:`PPOTrainConfig` from an object with the same-named attributes (a study's
    frozen ``Config``): every field of ``_COPIED_FIELDS``, and ``value_clip`` with ``<= 0``
    meaning value clipping off (``None``); the others keep their defaults. Python values
    only (no arrays)."""
    values = {name: getattr(fields, name) for name in _COPIED_FIELDS}
    value_clip = fields.value_clip
    return PPOTrainConfig(**values, value_clip=value_clip if value_clip > 0 else None)


def check_train_config(config: PPOTrainConfig) -> None:
    """Raise a one-line ``ValueError`` naming the first invalid field of ``config``."""
    for name in ("num_envs", "num_steps", "total_steps", "num_epochs", "num_minibatches"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")
    if config.num_updates < 1:
        raise ValueError(f"total_steps: must be >= num_envs * num_steps = {config.batch_size}, "
                         f"got {config.total_steps}")
    if config.batch_size % config.num_minibatches:
        raise ValueError(f"num_minibatches: must divide num_envs * num_steps = "
                         f"{config.batch_size}, got {config.num_minibatches}")
    for name in ("gamma", "lam"):
        value = getattr(config, name)
        if not _is_number(value) or not 0.0 <= value <= 1.0:
            raise ValueError(f"{name}: must be in [0, 1], got {value!r}")
    for name in ("learning_rate", "adam_eps", "max_grad_norm"):
        value = getattr(config, name)
        if not _is_number(value) or not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name}: must be a finite number > 0, got {value!r}")
    check_ppo_args(config.clip_epsilon, None, None, config.value_coef, config.entropy_coef,
                   config.value_clip)
    if config.grad_clip not in GRAD_CLIPS:
        raise ValueError(f"grad_clip: must be one of {', '.join(GRAD_CLIPS)}, got "
                         f"{config.grad_clip!r}")
    if not isinstance(config.bootstrap_truncations, bool):
        raise ValueError(f"bootstrap_truncations: must be True or False, got "
                         f"{config.bootstrap_truncations!r}")


#: The values of :attr:`PPOTrainConfig.grad_clip`.
GRAD_CLIPS = ("global_norm", "elementwise")


#: The :class:`PPOTrainConfig` fields a training run may read from a traced ``hparams``
#: dict instead of the config (the others fix shapes, counts or choices, so the program).
TRACEABLE_HPARAMS = ("learning_rate", "adam_eps", "max_grad_norm", "clip_epsilon",
                     "value_coef", "entropy_coef", "value_clip", "gamma", "lam")


def check_hparams(config: PPOTrainConfig, hparams: Mapping[str, Any] | None) -> None:
    """Raise a one-line ``ValueError`` if ``hparams`` names a field that cannot be traced.

    Allowed names are :data:`TRACEABLE_HPARAMS`; ``value_clip`` only when
    ``config.value_clip`` is a number (``None``, value clipping off, is structural: it
    removes the clipped branch from the program). Values are not checked (they may be
    traced); a sweep validates each configuration before it runs.
    """
    if hparams is None:
        return
    unknown = sorted(set(hparams) - set(TRACEABLE_HPARAMS))
    if unknown:
        raise ValueError(f"hparams: cannot trace {', '.join(unknown)}; traceable fields: "
                         f"{', '.join(TRACEABLE_HPARAMS)}")
    if "value_clip" in hparams and config.value_clip is None:
        raise ValueError("hparams: value_clip is traced but config.value_clip is None (value "
                         "clipping off is structural); set config.value_clip to a number")


def resolve_hparams(config: PPOTrainConfig,
                    hparams: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{name: value}`` for every name of :data:`TRACEABLE_HPARAMS`: ``hparams[name]``
    (a scalar, possibly traced, cast to float32) where given, else the config's constant.

    Raises:
      ValueError: as :func:`check_hparams`.
    """
    check_hparams(config, hparams)
    values = {name: getattr(config, name) for name in TRACEABLE_HPARAMS}
    for name, value in (hparams or {}).items():
        if jnp.ndim(value) != 0:
            raise ValueError(f"hparams: {name} must be a scalar (one run's value), got shape "
                             f"{jnp.shape(value)}")
        values[name] = jnp.asarray(value, jnp.float32)
    return values


def ppo_optimizer(config: PPOTrainConfig,
                  hparams: Mapping[str, Any] | None = None) -> optax.GradientTransformation:
    """``clip_by_global_norm(max_grad_norm)`` (``optax.clip(max_grad_norm)`` with
    ``config.grad_clip == "elementwise"``) then Adam with a linearly annealed step size
    (from ``learning_rate`` to 0 over ``num_updates * num_epochs * num_minibatches``
    gradient steps) or a constant one.

    ``learning_rate``, ``adam_eps`` and ``max_grad_norm`` come from ``hparams`` where it
    names them (traced scalars; see :func:`resolve_hparams`), else from ``config``. The
    optimizer state's structure depends only on ``anneal_lr`` (a schedule keeps a step
    count), never on the values.
    """
    values = resolve_hparams(config, hparams)
    if config.anneal_lr:
        steps = config.num_updates * config.num_epochs * config.num_minibatches
        learning_rate = optax.linear_schedule(values["learning_rate"], 0.0, steps)
    else:
        learning_rate = values["learning_rate"]
    clip = (optax.clip if config.grad_clip == "elementwise" else optax.clip_by_global_norm)
    return optax.chain(clip(values["max_grad_norm"]),
                       optax.adam(learning_rate, eps=values["adam_eps"]))
