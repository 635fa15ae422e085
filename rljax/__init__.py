"""rljax: pure-functional RL in JAX, policy-gradient transforms, seed sweeps, statistics.

The public API, re-exported here (nothing else should import from deep paths)::

    import rljax
    env = rljax.envs.ChainMDP(5, "prm")
    policy = rljax.policies.tabular_softmax(env.num_states, env.num_actions)
    rl = rljax.reinforce(policy.apply, baseline=rljax.advantages.ema_baseline(0.5, 0.05))
    result = rljax.sweep.run_sweep(train, num_seeds=4096, block_size=1024)
"""

from rljax import (
    advantages,
    algorithms,
    checkpoint,
    curriculum,
    distributed,
    envs,
    grid,
    io,
    losses,
    nonfinite,
    policies,
    rollout,
    runtime,
    search,
    stats,
    sweep,
    trackers,
    training,
    tune,
)
from rljax.advantages import (
    Baseline,
    discounted_returns,
    ema_baseline,
    generalized_advantage_estimation,
    group_mean_advantages,
    group_mean_baseline,
    group_relative_advantages,
    leave_one_out_advantages,
    leave_one_out_baseline,
    make_baseline,
    no_baseline,
    process_supervision_advantages,
)
from rljax.algorithms import (
    AS_OPTAX_UPDATES,
    EpisodeBatch,
    GroupBatch,
    LossAux,
    PPOBatch,
    RLTransform,
    as_optax,
    grpo,
    multi_step_update,
    ppo,
    reinforce,
    update_from_loss,
)
from rljax.checkpoint import Checkpointer, CheckpointError
from rljax.envs import (
    ArithmeticTask,
    CartPole,
    ChainMDP,
    Environment,
    EquationEnv,
    KAnswerBandit,
)
from rljax.grid import ConfigTable, Grid, GridResult, run_grid
from rljax.policies import LMConfig, Policy, TinyLM, mlp_actor, mlp_actor_critic, tabular_softmax
from rljax.rollout import Trajectory, episode_rollout
from rljax.rollout import rollout as rollout_steps
from rljax.runtime import sweep_options
from rljax.sweep import ChunkedSweep, NonFiniteFound, Sweep, SweepResult, run_sweep, seed_key
from rljax.tokenizer import CharTokenizer
from rljax.training import PPOTrainConfig, make_ppo_chunks, make_ppo_train

__version__ = "0.1.0"

__all__ = [
    "advantages",
    "algorithms",
    "checkpoint",
    "curriculum",
    "envs",
    "grid",
    "io",
    "losses",
    "policies",
    "rollout",
    "search",
    "stats",
    "sweep",
    "tune",
    "trackers",
    "training",
    "PPOTrainConfig",
    "make_ppo_train",
    "make_ppo_chunks",
    "distributed",
    "nonfinite",
    "runtime",
    "sweep_options",
    "NonFiniteFound",
    "generalized_advantage_estimation",
    "group_mean_advantages",
    "group_relative_advantages",
    "leave_one_out_advantages",
    "process_supervision_advantages",
    "GroupBatch",
    "PPOBatch",
    "grpo",
    "multi_step_update",
    "ppo",
    "CartPole",
    "ArithmeticTask",
    "TinyLM",
    "LMConfig",
    "CharTokenizer",
    "ChunkedSweep",
    "Checkpointer",
    "CheckpointError",
    "EquationEnv",
    "KAnswerBandit",
    "mlp_actor",
    "mlp_actor_critic",
    "Baseline",
    "discounted_returns",
    "ema_baseline",
    "group_mean_baseline",
    "leave_one_out_baseline",
    "make_baseline",
    "no_baseline",
    "EpisodeBatch",
    "RLTransform",
    "as_optax",
    "AS_OPTAX_UPDATES",
    "LossAux",
    "update_from_loss",
    "reinforce",
    "ChainMDP",
    "Environment",
    "Policy",
    "tabular_softmax",
    "Trajectory",
    "episode_rollout",
    "rollout_steps",
    "Sweep",
    "SweepResult",
    "run_sweep",
    "seed_key",
    "ConfigTable",
    "Grid",
    "GridResult",
    "run_grid",
]
