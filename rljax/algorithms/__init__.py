"""Policy-gradient algorithms as optax-style transforms (factories -> RLTransform).

The trainers that drive them over environments and language models are in
:mod:`rljax.training`."""

from rljax.algorithms.base import AsOptaxState, RLTransform, as_optax
from rljax.algorithms.grpo import GroupBatch, grpo
from rljax.algorithms.loops import multi_step_update
from rljax.algorithms.ppo import PPOBatch, ppo
from rljax.algorithms.reinforce import EpisodeBatch, ReinforceState, reinforce

__all__ = [
    "RLTransform",
    "AsOptaxState",
    "as_optax",
    "reinforce",
    "EpisodeBatch",
    "ReinforceState",
    "grpo",
    "GroupBatch",
    "multi_step_update",
    "ppo", "PPOBatch",
]
