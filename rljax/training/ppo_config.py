"""PPO's trainer configuration: :class:`PPOTrainConfig`, its checks, the traced
hyperparameters a sweep may vary inside one program (:data:`TRACEABLE_HPARAMS`) and the
optimizer a config builds (:func:`ppo_optimizer`).

:mod:`rljax.training.ppo` (the trainer) and :mod:`rljax.training.recurrent_ppo` read these;
``rljax.training.ppo`` re-exports every name, so ``from rljax.training.ppo import
PPOTrainConfig`` keeps working.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jax.numpy as jnp
import optax

from rljax.algorithms.ppo import check_ppo_args


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _field(default: Any, help: str, *, traced: bool = False) -> Any:
    """A :class:`PPOTrainConfig` field: its default, its one-line ``help`` and whether a
    sweep may trace it (``metadata``; read by :func:`config_fields` and the docs)."""
    return field(default=default, metadata={"help": help, "traced": traced})


@dataclass(frozen=True)
class PPOTrainConfig:
    """Hyperparameters of :func:`make_ppo_train` (defaults: CleanRL ``ppo.py`` CartPole).

    A frozen dataclass: ``dataclasses.fields(PPOTrainConfig)`` lists the fields, each
    with ``metadata["help"]`` (the line below) and ``metadata["traced"]`` (whether a
    configuration sweep may pass it as a traced ``hparams`` value,
    :data:`TRACEABLE_HPARAMS`); :meth:`replace` returns a changed copy. Every field is
    checked by :func:`check_train_config` when a trainer is built (a one-line
    ``ValueError`` naming the field).

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
        observations. Every :class:`~rljax.envs.Environment` gives ``final_obs``; for an
        env whose ``step`` does not, the trainer warns
        (:class:`rljax.contracts.TruncationBootstrapWarning`) and ends truncations like
        terminations.
    """

    num_envs: int = _field(4, "N parallel environments per seed")
    num_steps: int = _field(128, "T steps per environment per update (a [T, N] rollout)")
    total_steps: int = _field(500_000, "environment steps in all; total_steps // (N T) "
                              "updates")
    num_epochs: int = _field(4, "passes over each N T batch per update")
    num_minibatches: int = _field(4, "minibatches per pass (must divide N T)")
    gamma: float = _field(0.99, "discount, in [0, 1]", traced=True)
    lam: float = _field(0.95, "GAE lambda, in [0, 1]", traced=True)
    learning_rate: float = _field(2.5e-4, "Adam's (initial) step size, > 0", traced=True)
    anneal_lr: bool = _field(True, "anneal the step size linearly to 0 over all gradient "
                             "steps")
    adam_eps: float = _field(1e-5, "Adam's epsilon, > 0", traced=True)
    max_grad_norm: float = _field(0.5, "the gradient clip's bound (global norm, or each "
                                  "entry with grad_clip='elementwise'), > 0", traced=True)
    clip_epsilon: float = _field(0.2, "PPO's ratio clip range, > 0", traced=True)
    value_coef: float = _field(0.5, "weight of the value loss, >= 0", traced=True)
    entropy_coef: float = _field(0.01, "weight of the entropy bonus, >= 0", traced=True)
    value_clip: float | None = _field(0.2, "clip range of the value update around the old "
                                      "values, > 0; None switches value clipping off",
                                      traced=True)
    normalize_advantages: bool = _field(True, "normalise advantages per minibatch")
    grad_clip: str = _field("global_norm", "'global_norm' (optax.clip_by_global_norm) or "
                            "'elementwise' (optax.clip)")
    bootstrap_truncations: bool = _field(True, "bootstrap time-limit truncations from "
                                         "info['final_obs'] (False: end them like "
                                         "terminations)")

    @property
    def batch_size(self) -> int:
        """Samples per update, ``N T``."""
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        """Updates in a run, ``total_steps // (N T)``."""
        return self.total_steps // self.batch_size

    def replace(self, **changes: Any) -> PPOTrainConfig:
        """A copy with ``changes`` (``dataclasses.replace``; an unknown name is a
        ``TypeError``)."""
        return dataclasses.replace(self, **changes)


def config_fields() -> dict[str, dict[str, Any]]:
    """``{name: {"default", "help", "traced"}}`` for every :class:`PPOTrainConfig` field,
    in declaration order (what the docs' field table and the CLI's help read)."""
    return {f.name: {"default": f.default, "help": f.metadata["help"],
                     "traced": f.metadata["traced"]}
            for f in dataclasses.fields(PPOTrainConfig)}


def fields_markdown() -> str:
    """The docs' table of :class:`PPOTrainConfig`'s fields (name, default, traced, help),
    rendered from the field declarations (:func:`config_fields`), one row per field."""
    rows = ["| field | default | traced | what it sets |", "|---|---|---|---|"]
    for name, spec in config_fields().items():
        traced = "yes" if spec["traced"] else "no"
        rows.append(f"| `{name}` | `{spec['default']!r}` | {traced} | {spec['help']} |")
    return "\n".join(rows)


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
#: dict instead of the config (the others fix shapes, counts or choices, so the program):
#: those whose field metadata says ``traced``.
TRACEABLE_HPARAMS = tuple(f.name for f in dataclasses.fields(PPOTrainConfig)
                          if f.metadata["traced"])


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
