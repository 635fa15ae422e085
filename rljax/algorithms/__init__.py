"""Policy-gradient algorithms as optax-style transforms (factories -> RLTransform).

The trainers that drive them over environments and language models are in
:mod:`rljax.training`."""

from rljax.algorithms.base import (
    AS_OPTAX_UPDATES,
    AsOptaxState,
    LossAux,
    RLTransform,
    as_optax,
    update_from_loss,
)
from rljax.algorithms.grpo import GroupBatch, grpo
from rljax.algorithms.loops import multi_step_update
from rljax.algorithms.ppo import PPOBatch, ppo
from rljax.algorithms.reinforce import EpisodeBatch, ReinforceState, reinforce

__all__ = [
    "RLTransform",
    "LossAux",
    "update_from_loss",
    "AsOptaxState",
    "AS_OPTAX_UPDATES",
    "as_optax",
    "reinforce",
    "EpisodeBatch",
    "ReinforceState",
    "grpo",
    "GroupBatch",
    "multi_step_update",
    "ppo", "PPOBatch",
]
