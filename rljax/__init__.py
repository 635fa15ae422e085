"""rljax: pure-functional RL in JAX, policy-gradient transforms, seed sweeps, statistics.

The public API, re-exported here (nothing else should import from deep paths)::

    import rljax
    env = rljax.envs.ChainMDP(5, "prm")
    policy = rljax.policies.tabular_softmax(env.num_states, env.num_actions)
    rl = rljax.reinforce(policy.apply, baseline=rljax.advantages.ema_baseline(0.5, 0.05))
    result = rljax.sweep.run_sweep(train, num_seeds=4096, block_size=1024)

Every name is loaded on first use (PEP 562 module ``__getattr__``): ``import rljax`` itself
imports neither JAX nor any submodule, so the ``rljax`` command answers ``--help``,
``list`` and argument errors without paying JAX's start-up. ``rljax.envs``,
``from rljax import make_ppo_train`` and ``dir(rljax)`` work as if everything had been
imported eagerly; :data:`_EXPORTS` is the one table of where each name lives.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Submodules re-exported as ``rljax.<name>``.
_SUBMODULES = (
    "advantages",
    "algorithms",
    "checkpoint",
    "contracts",
    "curriculum",
    "distributed",
    "envs",
    "grid",
    "io",
    "losses",
    "nonfinite",
    "policies",
    "replay",
    "rollout",
    "search",
    "sensitivity",
    "stats",
    "study",
    "sweep",
    "trackers",
    "training",
    "tune",
)

#: ``{public name: (submodule, attribute)}`` of every re-exported object.
_EXPORTS: dict[str, tuple[str, str]] = {
    # rljax.advantages
    "Baseline": ("advantages", "Baseline"),
    "discounted_returns": ("advantages", "discounted_returns"),
    "ema_baseline": ("advantages", "ema_baseline"),
    "generalized_advantage_estimation": ("advantages", "generalized_advantage_estimation"),
    "group_mean_advantages": ("advantages", "group_mean_advantages"),
    "group_mean_baseline": ("advantages", "group_mean_baseline"),
    "group_relative_advantages": ("advantages", "group_relative_advantages"),
    "leave_one_out_advantages": ("advantages", "leave_one_out_advantages"),
    "leave_one_out_baseline": ("advantages", "leave_one_out_baseline"),
    "make_baseline": ("advantages", "make_baseline"),
    "no_baseline": ("advantages", "no_baseline"),
    "process_supervision_advantages": ("advantages", "process_supervision_advantages"),
    # rljax.algorithms
    "AS_OPTAX_UPDATES": ("algorithms", "AS_OPTAX_UPDATES"),
    "EpisodeBatch": ("algorithms", "EpisodeBatch"),
    "GroupBatch": ("algorithms", "GroupBatch"),
    "LossAux": ("algorithms", "LossAux"),
    "PPOBatch": ("algorithms", "PPOBatch"),
    "RLTransform": ("algorithms", "RLTransform"),
    "as_optax": ("algorithms", "as_optax"),
    "grpo": ("algorithms", "grpo"),
    "dqn": ("algorithms", "dqn"),
    "pqn": ("algorithms", "pqn"),
    "TransitionBatch": ("algorithms", "TransitionBatch"),
    "PQNBatch": ("algorithms", "PQNBatch"),
    "multi_step_update": ("algorithms", "multi_step_update"),
    "ppo": ("algorithms", "ppo"),
    "reinforce": ("algorithms", "reinforce"),
    "SACBatch": ("algorithms", "SACBatch"),
    "sac": ("algorithms", "sac"),
    "update_from_loss": ("algorithms", "update_from_loss"),
    # rljax.checkpoint
    "Checkpointer": ("checkpoint", "Checkpointer"),
    "CheckpointError": ("checkpoint", "CheckpointError"),
    # rljax.envs
    "ArithmeticTask": ("envs", "ArithmeticTask"),
    "CartPole": ("envs", "CartPole"),
    "ChainMDP": ("envs", "ChainMDP"),
    "Environment": ("envs", "Environment"),
    "EquationEnv": ("envs", "EquationEnv"),
    "KAnswerBandit": ("envs", "KAnswerBandit"),
    "TokenizedTask": ("envs", "TokenizedTask"),
    "arithmetic_text_task": ("envs", "arithmetic_text_task"),
    "word_problem_task": ("envs", "word_problem_task"),
    # rljax.grid
    "ConfigTable": ("grid", "ConfigTable"),
    "Grid": ("grid", "Grid"),
    "GridResult": ("grid", "GridResult"),
    "run_grid": ("grid", "run_grid"),
    # rljax.policies
    "LMConfig": ("policies", "LMConfig"),
    "Policy": ("policies", "Policy"),
    "TinyLM": ("policies", "TinyLM"),
    "mlp_actor": ("policies", "mlp_actor"),
    "mlp_actor_critic": ("policies", "mlp_actor_critic"),
    "tabular_softmax": ("policies", "tabular_softmax"),
    # rljax.rollout
    "Trajectory": ("rollout", "Trajectory"),
    "episode_rollout": ("rollout", "episode_rollout"),
    "rollout_steps": ("rollout", "rollout"),
    # rljax.study
    "run_study": ("study", "run_study"),
    # rljax.sweep
    "ChunkedSweep": ("sweep", "ChunkedSweep"),
    "SweepOptions": ("sweep", "SweepOptions"),
    "NonFiniteFound": ("sweep", "NonFiniteFound"),
    "Sweep": ("sweep", "Sweep"),
    "SweepResult": ("sweep", "SweepResult"),
    "run_sweep": ("sweep", "run_sweep"),
    "seed_key": ("sweep", "seed_key"),
    # rljax.tokenizer
    "CharTokenizer": ("tokenizer", "CharTokenizer"),
    # rljax.text_tokenizer
    "HFTokenizer": ("text_tokenizer", "HFTokenizer"),
    "load_bpe_tokenizer": ("text_tokenizer", "load_bpe_tokenizer"),
    # rljax.training
    "PPOTrainConfig": ("training", "PPOTrainConfig"),
    "make_ppo_chunks": ("training", "make_ppo_chunks"),
    "make_ppo_train": ("training", "make_ppo_train"),
}

__all__ = [
    "advantages",
    "algorithms",
    "checkpoint",
    "contracts",
    "curriculum",
    "envs",
    "grid",
    "io",
    "losses",
    "policies",
    "replay",
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
    "sensitivity",
    "study",
    "run_study",
    "SweepOptions",
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
    "HFTokenizer",
    "load_bpe_tokenizer",
    "TokenizedTask",
    "word_problem_task",
    "arithmetic_text_task",
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
    "dqn",
    "pqn",
    "TransitionBatch",
    "PQNBatch",
    "sac",
    "SACBatch",
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


def __getattr__(name: str) -> Any:
    """Import a re-exported name (or any submodule ``rljax.<name>``) on first use.

    The value is cached in the module's namespace, so this runs once per name.

    Args:
      name: the attribute asked for.

    Returns:
      The submodule or the object it names.

    Raises:
      AttributeError: ``name`` is neither re-exported here nor a submodule of ``rljax``.
    """
    if name in _EXPORTS:
        module, attribute = _EXPORTS[name]
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
    elif not name.startswith("__"):
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":  # the submodule exists; an import in it failed
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names with every re-exported one, loaded or not."""
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))


if TYPE_CHECKING:  # what the names are, for type checkers and readers (never run)
    from rljax import (
        advantages,
        algorithms,
        checkpoint,
        contracts,
        curriculum,
        distributed,
        envs,
        grid,
        io,
        losses,
        nonfinite,
        policies,
        replay,
        rollout,
        search,
        sensitivity,
        stats,
        study,
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
        PQNBatch,
        RLTransform,
        SACBatch,
        TransitionBatch,
        as_optax,
        dqn,
        grpo,
        multi_step_update,
        ppo,
        pqn,
        reinforce,
        sac,
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
        TokenizedTask,
        arithmetic_text_task,
        word_problem_task,
    )
    from rljax.grid import ConfigTable, Grid, GridResult, run_grid
    from rljax.policies import (
        LMConfig,
        Policy,
        TinyLM,
        mlp_actor,
        mlp_actor_critic,
        tabular_softmax,
    )
    from rljax.rollout import Trajectory, episode_rollout
    from rljax.rollout import rollout as rollout_steps
    from rljax.study import run_study
    from rljax.sweep import (
        ChunkedSweep,
        NonFiniteFound,
        Sweep,
        SweepOptions,
        SweepResult,
        run_sweep,
        seed_key,
    )
    from rljax.text_tokenizer import HFTokenizer, load_bpe_tokenizer
    from rljax.tokenizer import CharTokenizer
    from rljax.training import PPOTrainConfig, make_ppo_chunks, make_ppo_train
