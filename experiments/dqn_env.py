"""Study ``dqn``: ``rljax run dqn --env NAME`` (default CartPole-v1), DQN (double, dueling;
rejax's row) on a gymnax env with Discrete actions, over many seeds; the run, figures and
report are :mod:`experiments.offpolicy_env`'s, the trainer
:func:`rljax.training.dqn.make_dqn_chunks`, the published rows
:mod:`rljax.training.offpolicy_presets` (``--set preset=NAME``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.offpolicy_env import run_study, study_config
from rljax.grid import Grid
from rljax.training.dqn import discrete_actions, make_dqn_chunks
from rljax.training.offpolicy_config import DQNTrainConfig

NAME = "dqn"
SUPPORTS_TENSORBOARD = True
DESCRIPTION = ("DQN (double, dueling; rejax's row) on a gymnax env with Discrete actions: greedy "
               "test return IQM, training curve")

Config = study_config(DQNTrainConfig, NAME, "CartPole-v1", make_dqn_chunks,
                      lambda env, params: discrete_actions(env, params, "DQN"), __name__)


def run(config: Any, out_dir: Path, grid: Grid | None = None,
        options: Any = None) -> dict[str, Any]:
    """Run the study (:func:`experiments.offpolicy_env.run_study`)."""
    return run_study(NAME, config, out_dir, grid, options)
