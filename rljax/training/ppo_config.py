"""PPO's trainer configuration: :class:`PPOTrainConfig` (every hyperparameter declared
once, with its metadata), the traced values a sweep may vary inside one program
(:func:`resolve_hparams`) and the optimizer a config builds (:func:`ppo_optimizer`).

:mod:`rljax.training.ppo` (the trainer) and :mod:`rljax.training.recurrent_ppo` read these;
``rljax.training.ppo`` re-exports every name, so ``from rljax.training.ppo import
PPOTrainConfig`` keeps working. A study's config extends :class:`PPOTrainConfig`
(``class Config(PPOTrainConfig)``); adding a hyperparameter is one :func:`param` line here
(plus the code that reads it).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import optax

from rljax.algorithms.base import RLTransform
from rljax.algorithms.ppo import check_ppo_args, ppo
from rljax.config import (
    ConfigError,
    check_fields,
    check_traced_hparams,
    param,
    resolve_traced_hparams,
    traced_values,
)
from rljax.training.chunking import MAX_TOTAL_STEPS

#: The values of :attr:`PPOTrainConfig.grad_clip`.
GRAD_CLIPS = ("global_norm", "elementwise")


@dataclass(frozen=True)
class PPOTrainConfig:
    """Hyperparameters of :func:`make_ppo_train` (defaults: CleanRL ``ppo.py`` CartPole).

    A frozen dataclass whose fields are declared once with :func:`rljax.config.param`:
    ``metadata["help"]``, ``["traced"]`` (a configuration sweep may pass it as a traced
    ``hparams`` value), ``["sweep"]`` and the bounds; :meth:`validate` checks them all (a
    one-line :class:`~rljax.config.ConfigError` naming the field), the grid, ``--set`` and
    the docs' table (:func:`rljax.config.fields_markdown`) read them. :meth:`replace`
    returns a changed copy.

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
      clip_epsilon, clip_epsilon_high, value_coef, entropy_coef, value_clip,
        normalize_advantages: of :func:`ppo` (``None`` switches value clipping off, or
        makes the ratio clip symmetric).
      bootstrap_truncations: bootstrap a time-limit truncation from the value of the
        episode's true final observation (``info["final_obs"]``, gymnax >= 1.0
        semantics; default). ``False`` ends it like a termination (gymnax < 1.0,
        gymnax-blines, rejax), which also skips the critic pass over the rollout's final
        observations. Every :class:`~rljax.envs.Environment` gives ``final_obs``; for an
        env whose ``step`` does not, the trainer warns
        (:class:`rljax.contracts.TruncationBootstrapWarning`) and ends truncations like
        terminations.
    """

    num_envs: int = param(4, "N parallel environments per seed", low=1)
    num_steps: int = param(128, "T steps per environment per update (a [T, N] rollout)",
                           low=1)
    total_steps: int = param(500_000, "environment steps in all; total_steps // (N T) "
                             "updates", low=1, high=MAX_TOTAL_STEPS)
    num_epochs: int = param(4, "passes over each N T batch per update", low=1)
    num_minibatches: int = param(4, "minibatches per pass (must divide N T)", low=1)
    gamma: float = param(0.99, "discount", traced=True, low=0.0, high=1.0)
    lam: float = param(0.95, "GAE lambda", traced=True, low=0.0, high=1.0)
    learning_rate: float = param(2.5e-4, "Adam's (initial) step size", traced=True,
                                 low=0.0, low_open=True)
    anneal_lr: bool = param(True, "anneal the step size linearly to 0 over all gradient "
                            "steps")
    adam_eps: float = param(1e-5, "Adam's epsilon", traced=True, low=0.0, low_open=True)
    max_grad_norm: float = param(0.5, "the gradient clip's bound (global norm, or each "
                                 "entry with grad_clip='elementwise')", traced=True,
                                 low=0.0, low_open=True)
    clip_epsilon: float = param(0.2, "PPO's ratio clip range", traced=True, low=0.0,
                                low_open=True)
    clip_epsilon_high: float | None = param(None, "DAPO's clip-higher: the ratio's upper "
                                            "clip 1 + clip_epsilon_high; None: symmetric",
                                            traced=True, low=0.0, low_open=True)
    value_coef: float = param(0.5, "weight of the value loss", traced=True, low=0.0)
    entropy_coef: float = param(0.01, "weight of the entropy bonus", traced=True, low=0.0)
    value_clip: float | None = param(0.2, "clip range of the value update around the old "
                                     "values; None switches value clipping off (structural)",
                                     traced=True, low=0.0, low_open=True)
    normalize_advantages: bool = param(True, "normalise advantages per minibatch")
    grad_clip: str = param("global_norm", "'global_norm' (optax.clip_by_global_norm) or "
                           "'elementwise' (optax.clip)", choices=GRAD_CLIPS)
    bootstrap_truncations: bool = param(True, "bootstrap time-limit truncations from "
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

    def train_config(self) -> PPOTrainConfig:
        """This config's trainer fields as a plain :class:`PPOTrainConfig` (what a study
        config that extends it hands the trainer)."""
        names = [f.name for f in dataclasses.fields(PPOTrainConfig)]
        return PPOTrainConfig(**{name: getattr(self, name) for name in names})

    def hparams(self) -> dict[str, Any]:
        """``{field: value}`` of the traced fields (``value_clip`` only when on): this
        config's row of a configuration sweep."""
        return traced_values(self.train_config())

    def validate(self) -> None:
        """Raise a one-line :class:`~rljax.config.ConfigError` naming the first invalid
        field: each field against its declaration, then the sizes against each other."""
        check_fields(self)
        checked = inspect.signature(check_ppo_args).parameters  # the transform's own checks
        try:
            check_ppo_args(**{n: getattr(self, n) for n in checked if hasattr(self, n)})
        except ValueError as err:
            raise ConfigError(str(err)) from None
        if self.num_updates < 1:
            raise ConfigError(f"total_steps: must be >= num_envs * num_steps = "
                              f"{self.batch_size}, got {self.total_steps}")
        if self.batch_size % self.num_minibatches:
            raise ConfigError(f"num_minibatches: must divide num_envs * num_steps = "
                              f"{self.batch_size}, got {self.num_minibatches}")


def check_train_config(config: PPOTrainConfig) -> None:
    """Raise a one-line ``ValueError`` naming the first invalid field of ``config``
    (:meth:`PPOTrainConfig.validate`)."""
    if not isinstance(config, PPOTrainConfig):
        raise ValueError(f"config: must be a PPOTrainConfig, got {type(config).__name__}")
    config.validate()


def check_hparams(config: PPOTrainConfig, hparams: Mapping[str, Any] | None) -> None:
    """Raise a one-line ``ValueError`` if ``hparams`` names a field that cannot be traced:
    :func:`rljax.config.check_traced_hparams` over :class:`PPOTrainConfig`'s traced fields
    (``None``, e.g. ``value_clip=None``, value clipping off, is structural)."""
    check_traced_hparams(PPOTrainConfig, config, hparams)


def resolve_hparams(config: PPOTrainConfig,
                    hparams: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{name: value}`` for every traced field of :class:`PPOTrainConfig`: ``hparams[name]``
    (a scalar, possibly traced, cast to float32) where given, else the config's constant
    (:func:`rljax.config.resolve_traced_hparams`).

    Raises:
      ValueError: as :func:`check_hparams`.
    """
    return resolve_traced_hparams(PPOTrainConfig, config, hparams)


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


#: The arguments of :func:`rljax.algorithms.ppo.ppo` a config field of the same name sets.
PPO_ARGUMENTS = tuple(name for name in inspect.signature(ppo).parameters
                      if name not in ("actor_critic_apply", "distribution"))


def ppo_transform(apply: Callable, config: PPOTrainConfig, values: Mapping[str, Any],
                  distribution: Any) -> RLTransform:
    """The PPO transform a config builds: :func:`~rljax.algorithms.ppo.ppo` with every
    :class:`PPOTrainConfig` field that is one of its arguments (:data:`PPO_ARGUMENTS`),
    a traced one from ``values`` (:func:`resolve_hparams`), the others from ``config``.

    So a new hyperparameter of the loss is one :func:`~rljax.config.param` line in
    :class:`PPOTrainConfig`, named as the transform's argument: both PPO trainers, the
    grid, ``--set`` and the docs read it from there.

    Args:
      apply: ``apply(params, obs) -> (dist_params, value)`` (see :func:`ppo`).
      config: the trainer's config.
      values: the traced fields' values, ``{name: scalar}`` (possibly traced arrays).
      distribution: the policy head's distribution.
    """
    kwargs = {f.name: values[f.name] if f.name in values else getattr(config, f.name)
              for f in dataclasses.fields(PPOTrainConfig) if f.name in PPO_ARGUMENTS}
    return ppo(apply, **kwargs, distribution=distribution)
