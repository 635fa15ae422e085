"""Policy-gradient and value-based algorithms as optax-style transforms (factories ->
RLTransform).

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
from rljax.algorithms.dqn import DQN_LOSSES, DQNState, TransitionBatch, dqn
from rljax.algorithms.grpo import GroupBatch, grpo
from rljax.algorithms.loops import multi_step_update
from rljax.algorithms.ppo import PPOBatch, ppo
from rljax.algorithms.pqn import PQNBatch, PQNState, pqn, q_lambda_returns, q_lambda_targets
from rljax.algorithms.reinforce import EpisodeBatch, ReinforceState, reinforce
from rljax.algorithms.sac import SACBatch, SACState, polyak_update, sac, sac_optimizer

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
    "dqn", "TransitionBatch", "DQNState", "DQN_LOSSES",
    "pqn", "PQNBatch", "PQNState", "q_lambda_returns", "q_lambda_targets",
    "sac", "SACBatch", "SACState", "sac_optimizer", "polyak_update",
]
