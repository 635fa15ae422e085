"""The off-policy trainers' configurations: :class:`DQNTrainConfig`, :class:`PQNTrainConfig`
and :class:`SACTrainConfig`, every hyperparameter declared once with
:func:`rljax.config.param` (``--set``, ``--grid``, validation, ``config.json`` and the docs'
tables read the declarations), plus the pieces the three trainers share: the traced values
(:func:`resolve_values`), the exploration schedule (:func:`linear_epsilon`) and the
optimizer (:func:`offpolicy_optimizer`).

Defaults are the peers' published configurations (each class's docstring cites its file):
rejax's ``configs/gymnax/cartpole.yaml`` (DQN), purejaxql's
``purejaxql/config/alg/pqn_cartpole.yaml`` (PQN) and rejax's
``configs/gymnax/pendulum.yaml`` (SAC). Other rows are in
:mod:`rljax.training.offpolicy_presets`.

An *update* of the replay trainers (DQN, SAC) is one iteration: each of the ``N``
environments steps once (``N`` transitions into the buffer), then ``num_epochs`` gradient
steps on minibatches drawn from it (none before ``learning_starts`` environment steps), as
in rejax's ``train_iteration``; so a run has ``total_steps // N`` updates. An update of PQN
is a ``[T, N]`` rollout and ``num_epochs x num_minibatches`` gradient steps, as in PPO.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import jax.numpy as jnp
import optax

from rljax.config import (
    ConfigError,
    check_fields,
    param,
    resolve_traced_hparams,
    traced_fields,
    traced_values,
    with_defaults,
)
from rljax.policies.mlp import ACTIVATIONS
from rljax.training.chunking import MAX_TOTAL_STEPS

#: The values of ``grad_clip``: ``optax.clip_by_global_norm`` or ``optax.clip``.
GRAD_CLIPS = ("global_norm", "elementwise")
#: The values of ``optimizer``: ``optax.adam`` or ``optax.radam`` (purejaxql's PQN).
OPTIMIZERS = ("adam", "radam")
#: The values of :attr:`DQNTrainConfig.loss`.
TD_LOSSES = ("huber", "squared")

REJAX_CARTPOLE = "https://github.com/keraJLi/rejax/blob/main/configs/gymnax/cartpole.yaml"
REJAX_PENDULUM = "https://github.com/keraJLi/rejax/blob/main/configs/gymnax/pendulum.yaml"
PUREJAXQL_CARTPOLE = ("https://github.com/mttga/purejaxql/blob/main/purejaxql/config/alg/"
                      "pqn_cartpole.yaml")


@dataclass(frozen=True)
class OffPolicyTrainConfig:
    """The fields every off-policy trainer has (a base class; use :class:`DQNTrainConfig`,
    :class:`PQNTrainConfig` or :class:`SACTrainConfig`)."""

    num_envs: int = param(10, "N parallel environments per seed", low=1)
    total_steps: int = param(100_000, "environment steps per seed in all", low=1,
                             high=MAX_TOTAL_STEPS)
    learning_rate: float = param(1e-3, "the optimizer's (initial) step size", traced=True,
                                 low=0.0, low_open=True)
    anneal_lr: bool = param(False, "anneal the step size linearly to 0 over all gradient "
                            "steps")
    optimizer: str = param("adam", "'adam' or 'radam' (purejaxql's PQN)", choices=OPTIMIZERS)
    adam_eps: float = param(1e-8, "Adam's epsilon", traced=True, low=0.0, low_open=True)
    max_grad_norm: float | None = param(10.0, "the gradient clip's bound (global norm, or "
                                        "each entry with grad_clip='elementwise'); None: no "
                                        "clip", traced=True, low=0.0, low_open=True)
    grad_clip: str = param("global_norm", "'global_norm' (optax.clip_by_global_norm) or "
                           "'elementwise' (optax.clip, rejax)", choices=GRAD_CLIPS)
    gamma: float = param(0.99, "discount", traced=True, low=0.0, high=1.0)
    hidden_size: int = param(64, "width of each hidden layer", low=1, high=2**16)
    hidden_layers: int = param(2, "hidden layers of each network", low=1, high=64)
    activation: str = param("swish", "the hidden layers' activation",
                            choices=tuple(ACTIVATIONS))
    bootstrap_truncations: bool = param(True, "bootstrap time-limit truncations from "
                                        "info['final_obs'] (False: end them like "
                                        "terminations, as rejax and purejaxql do)")

    #: The class whose fields :meth:`train_config` keeps (set by each trainer's class).
    TRAIN_CLASS: ClassVar[type | None] = None

    @property
    def num_updates(self) -> int:
        """Updates in a run (see the module docstring)."""
        return self.total_steps // self.steps_per_update

    @property
    def steps_per_update(self) -> int:
        """Environment steps per update: ``N`` (one per env; PQN: ``N T``)."""
        return self.num_envs

    #: The fields whose product :attr:`steps_per_update` is (for messages).
    update_fields: ClassVar[str] = "num_envs"

    @property
    def gradient_steps(self) -> int:
        """Gradient steps in a run (the length of an annealed step size)."""
        return self.num_updates * self.num_epochs

    def replace(self, **changes: Any) -> Any:
        """A copy with ``changes`` (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    def train_config(self) -> Any:
        """This config's trainer fields as a plain trainer config (what a study config
        that extends it hands the trainer)."""
        cls = type(self).TRAIN_CLASS or type(self)
        return cls(**{f.name: getattr(self, f.name) for f in dataclasses.fields(cls)})

    def hparams(self) -> dict[str, Any]:
        """``{field: value}`` of the traced fields: this config's row of a sweep."""
        return traced_values(self.train_config())

    def validate(self) -> None:
        """Raise a one-line :class:`~rljax.config.ConfigError` naming the first invalid
        field: each against its declaration, then the sizes against each other."""
        check_fields(self)
        if self.num_updates < 1:
            raise ConfigError(f"total_steps: must be >= {self.update_fields} = "
                              f"{self.steps_per_update} (one update), got {self.total_steps}")


@dataclass(frozen=True)
class ReplayTrainConfig(OffPolicyTrainConfig):
    """The replay-buffer fields DQN and SAC share (a base class)."""

    buffer_size: int = param(50_000, "the replay buffer's capacity (transitions)", low=1)
    learning_starts: int = param(5_000, "environment steps of uniform-random actions "
                                 "before the first gradient step", low=0)
    batch_size: int = param(100, "transitions per gradient step", low=1)
    num_epochs: int = param(5, "gradient steps per update (after each env step of the N "
                            "envs)", low=1)
    tau: float = param(0.02, "the target network's Polyak step (1: a hard copy)",
                       traced=True, low=0.0, high=1.0, low_open=True)

    def validate(self) -> None:
        """As :meth:`OffPolicyTrainConfig.validate`, and the buffer's sizes."""
        super().validate()
        if self.batch_size > self.buffer_size:
            raise ConfigError(f"batch_size: must be <= buffer_size = {self.buffer_size}, "
                              f"got {self.batch_size}")
        if self.num_envs > self.buffer_size:
            raise ConfigError(f"num_envs: must be <= buffer_size = {self.buffer_size}, got "
                              f"{self.num_envs}")


@dataclass(frozen=True)
class ExplorationConfig:
    """Epsilon-greedy exploration (DQN, PQN; a mixin)."""

    eps_start: float = param(1.0, "epsilon-greedy's first epsilon", low=0.0, high=1.0)
    eps_end: float = param(0.05, "epsilon after the exploration phase", low=0.0, high=1.0)
    exploration_fraction: float = param(0.5, "the fraction of total_steps over which "
                                        "epsilon decays linearly", low=0.0, high=1.0)


@dataclass(frozen=True)
class DQNTrainConfig(ExplorationConfig, with_defaults(ReplayTrainConfig, grad_clip="elementwise")):
    """Hyperparameters of :func:`rljax.training.dqn.make_dqn_train` (defaults: rejax's DQN
    row of ``configs/gymnax/cartpole.yaml``: 10 envs, buffer 50,000 filled for 5,000 steps,
    batch 100, 5 gradient steps per iteration, lr 1e-3, elementwise clip 10, Polyak 0.98
    once per iteration, double DQN, squared loss, dueling swish 64x64, epsilon 1 -> 0.05
    over half the run, 100,000 steps).

    rejax moves its target once per iteration; here the transform counts gradient steps,
    so ``target_update_period = num_epochs`` (5) is the same schedule.
    """

    double_q: bool = param(True, "double DQN: pick the bootstrap action with the online "
                           "network")
    loss: str = param("squared", "the TD loss: 'squared' (x^2 / 2) or 'huber'",
                      choices=TD_LOSSES)
    target_update_period: int = param(5, "gradient steps between target moves", low=1)
    dueling: bool = param(True, "the dueling head V + A - mean(A)")
    layer_norm: bool = param(False, "LayerNorm in the hidden layers")


@dataclass(frozen=True)
class PQNTrainConfig(
        with_defaults(ExplorationConfig, eps_end=0.2, exploration_fraction=0.2),
        with_defaults(OffPolicyTrainConfig, num_envs=32, total_steps=500_000,
                      learning_rate=1e-4, anneal_lr=True, optimizer="radam",
                      hidden_size=256, activation="relu")):
    """Hyperparameters of :func:`rljax.training.pqn.make_pqn_train` (defaults: purejaxql's
    ``pqn_cartpole.yaml``: 32 envs x 64 steps, 4 epochs x 16 minibatches, RAdam lr 1e-4
    annealed, global-norm clip 10, lambda 0.95, rewards x 0.1, LayerNorm ReLU 256x256,
    epsilon 1 -> 0.2 over the first 20 % of updates, 500,000 steps)."""

    num_steps: int = param(64, "T steps per environment per update (a [T, N] rollout)",
                           low=1)
    num_epochs: int = param(4, "passes over each N T rollout per update", low=1)
    num_minibatches: int = param(16, "minibatches per pass (must divide N T)", low=1)
    lam: float = param(0.95, "Q(lambda)'s trace parameter", traced=True, low=0.0, high=1.0)
    reward_scale: float = param(0.1, "rewards are multiplied by this in the targets "
                                "(purejaxql's REW_SCALE); returns are reported unscaled",
                                traced=True, low=0.0, low_open=True)
    layer_norm: bool = param(True, "LayerNorm in the hidden layers (PQN's stabiliser)")

    @property
    def steps_per_update(self) -> int:
        """Environment steps per update, ``N T``."""
        return self.num_envs * self.num_steps

    update_fields: ClassVar[str] = "num_envs * num_steps"

    @property
    def gradient_steps(self) -> int:
        """Gradient steps in a run."""
        return self.num_updates * self.num_epochs * self.num_minibatches

    def validate(self) -> None:
        """As the base class, and ``num_minibatches`` dividing ``N T``."""
        super().validate()
        if self.steps_per_update % self.num_minibatches:
            raise ConfigError(f"num_minibatches: must divide num_envs * num_steps = "
                              f"{self.steps_per_update}, got {self.num_minibatches}")


@dataclass(frozen=True)
class SACTrainConfig(with_defaults(ReplayTrainConfig, num_envs=1, total_steps=10_000,
                                   buffer_size=10_000, learning_starts=256, batch_size=256,
                                   num_epochs=1, learning_rate=1e-2, max_grad_norm=None)):
    """Hyperparameters of :func:`rljax.training.sac.make_sac_train` (defaults: rejax's SAC
    row of ``configs/gymnax/pendulum.yaml``: 1 env, buffer 10,000 filled for 256 steps,
    batch 256, one gradient step per env step, Adam lr 1e-2 on actor, critics and
    temperature, no gradient clip, Polyak 0.98, twin swish 64x64 critics, target entropy
    -A, 10,000 steps; observations normalised, the study's ``normalize_observations``).
    """

    target_entropy: float | None = param(None, "the temperature's entropy target; None: "
                                         "-A (A action dimensions)", traced=True)
    num_critics: int = param(2, "critics the target's minimum is over (2: clipped "
                             "double-Q)", low=1, high=16)
    log_std_min: float = param(-10.0, "the actor's log-std lower clip (rejax -10)")
    log_std_max: float = param(2.0, "the actor's log-std upper clip")

    def validate(self) -> None:
        """As the base classes, and ``log_std_min < log_std_max``."""
        super().validate()
        if not self.log_std_min < self.log_std_max:
            raise ConfigError(f"log_std_min: must be < log_std_max = {self.log_std_max}, "
                              f"got {self.log_std_min}")


for _cls in (DQNTrainConfig, PQNTrainConfig, SACTrainConfig):
    _cls.TRAIN_CLASS = _cls


def check_config(config: Any, cls: type) -> None:
    """Raise a one-line ``ValueError`` unless ``config`` is a valid ``cls``."""
    if not isinstance(config, cls):
        raise ValueError(f"config: must be a {cls.__name__}, got {type(config).__name__}")
    config.validate()


def resolve_values(config: Any, hparams: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{name: value}`` for every traced field of ``config``'s trainer class: the
    ``hparams`` scalar (cast to float32, may be traced) where given, else the constant
    (:func:`rljax.config.resolve_traced_hparams`; a name that cannot be traced is a
    one-line ``ValueError``)."""
    return resolve_traced_hparams(type(config).TRAIN_CLASS or type(config), config, hparams)


def linear_epsilon(config: Any, env_steps: Any) -> Any:
    """Epsilon after ``env_steps`` environment steps: linear from ``eps_start`` to
    ``eps_end`` over ``exploration_fraction * total_steps`` steps, then ``eps_end``
    (rejax's ``epsilon_schedule``; purejaxql's, counted in updates, is the same line)."""
    horizon = max(1, int(config.exploration_fraction * config.total_steps))
    fraction = jnp.minimum(jnp.asarray(env_steps, jnp.float32) / horizon, 1.0)
    return config.eps_start + fraction * (config.eps_end - config.eps_start)


def offpolicy_optimizer(config: Any, values: Mapping[str, Any]) -> optax.GradientTransformation:
    """The gradient clip (``max_grad_norm``, global norm or elementwise; none when
    ``None``) then Adam or RAdam with ``values["learning_rate"]``, annealed linearly to 0
    over ``config.gradient_steps`` when ``anneal_lr``. ``values`` from
    :func:`resolve_values`."""
    rate = values["learning_rate"]
    if config.anneal_lr:
        rate = optax.linear_schedule(rate, 0.0, config.gradient_steps)
    step = (optax.radam(rate, eps=values["adam_eps"]) if config.optimizer == "radam"
            else optax.adam(rate, eps=values["adam_eps"]))
    if config.max_grad_norm is None:
        return step
    clip = optax.clip if config.grad_clip == "elementwise" else optax.clip_by_global_norm
    return optax.chain(clip(values["max_grad_norm"]), step)


__all__ = ["DQNTrainConfig", "PQNTrainConfig", "SACTrainConfig", "OffPolicyTrainConfig",
           "check_config", "resolve_values", "linear_epsilon", "offpolicy_optimizer",
           "traced_fields", "GRAD_CLIPS", "OPTIMIZERS", "TD_LOSSES"]
