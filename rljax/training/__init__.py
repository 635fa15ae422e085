"""The trainers that drive the transforms of :mod:`rljax.algorithms`: PPO over
environments (:mod:`rljax.training.ppo`, discrete and continuous actions; its config,
checks and optimizer in :mod:`rljax.training.ppo_config`) and the
language-model trainer (:mod:`rljax.training.lm`: warm-up, GRPO, PPO, the SFT control;
the cached warm start of :mod:`rljax.training.lm_warm_start`; one step sharded over a
device mesh, :mod:`rljax.training.lm_sharding`); test-rollout
evaluation of a trained actor-critic (:mod:`rljax.training.evaluation`); per-seed final
returns from a PPO run's logs (:func:`final_returns`); the off-policy baselines DQN, PQN and
SAC (:mod:`rljax.training.dqn`, :mod:`~rljax.training.pqn`, :mod:`~rljax.training.sac`,
their configs in :mod:`rljax.training.offpolicy_config`)."""

from rljax.training.dqn import make_dqn_chunks, make_dqn_train
from rljax.training.episode_returns import final_returns
from rljax.training.evaluation import Evaluation, evaluate_policy
from rljax.training.lm import (
    LMDecoderConfig,
    LMGRPOConfig,
    LMPPOConfig,
    LMTrainConfig,
    make_lm_trainer,
)
from rljax.training.lm_config import LMSFTConfig
from rljax.training.lm_sharding import (
    data_parallel,
    lm_mesh,
    partition_spec,
    run_sharding_figures,
    shard_state,
    sharded_init,
    sharded_rl_step,
    sharded_step_memory,
    sharding_figures,
    state_shardings,
    tree_shardings,
)
from rljax.training.lm_warm_start import WarmStart, cached_warm_start
from rljax.training.offpolicy_config import DQNTrainConfig, PQNTrainConfig, SACTrainConfig
from rljax.training.ppo import ENV_AXIS, PPOChunks, PPOChunkState, make_ppo_chunks, make_ppo_train
from rljax.training.ppo_config import PPOTrainConfig, ppo_optimizer
from rljax.training.pqn import make_pqn_chunks, make_pqn_train
from rljax.training.recurrent_ppo import (
    SequenceObs,
    make_recurrent_ppo_train,
    recurrent_ppo_first_batch,
)
from rljax.training.sac import make_sac_chunks, make_sac_train

__all__ = [
    "ENV_AXIS",
    "PPOTrainConfig",
    "PPOChunks",
    "PPOChunkState",
    "make_ppo_train",
    "make_ppo_chunks",
    "ppo_optimizer",
    "make_recurrent_ppo_train",
    "recurrent_ppo_first_batch",
    "SequenceObs",
    "LMTrainConfig",
    "LMGRPOConfig",
    "LMPPOConfig",
    "LMDecoderConfig",
    "LMSFTConfig",
    "make_lm_trainer",
    "WarmStart",
    "cached_warm_start",
    "lm_mesh",
    "partition_spec",
    "tree_shardings",
    "state_shardings",
    "shard_state",
    "data_parallel",
    "sharded_init",
    "sharded_rl_step",
    "sharded_step_memory",
    "sharding_figures",
    "run_sharding_figures",
    "Evaluation",
    "evaluate_policy",
    "final_returns",
    "DQNTrainConfig",
    "PQNTrainConfig",
    "SACTrainConfig",
    "make_dqn_train",
    "make_dqn_chunks",
    "make_pqn_train",
    "make_pqn_chunks",
    "make_sac_train",
    "make_sac_chunks",
]
