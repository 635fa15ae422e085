"""Policy-gradient algorithms as optax-style transforms (factories -> RLTransform)."""

from rljax.algorithms.base import AsOptaxState, RLTransform, as_optax
from rljax.algorithms.grpo import GroupBatch, grpo
from rljax.algorithms.loops import multi_step_update
from rljax.algorithms.ppo import (
    PPOBatch,
    PPOChunks,
    PPOChunkState,
    PPOTrainConfig,
    make_ppo_chunks,
    make_ppo_train,
    ppo,
)
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
    "ppo", "PPOBatch", "PPOTrainConfig", "make_ppo_train",
    "make_ppo_chunks", "PPOChunks", "PPOChunkState",
]
