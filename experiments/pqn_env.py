"""Study ``pqn``: ``rljax run pqn --env NAME`` (default CartPole-v1), PQN (Q(lambda),
LayerNorm, no buffer; purejaxql's config) on a gymnax env with Discrete actions, over many
seeds; the run, figures and report are :mod:`experiments.offpolicy_env`'s, the trainer
:func:`rljax.training.pqn.make_pqn_chunks`, the published rows
:mod:`rljax.training.offpolicy_presets` (``--set preset=NAME``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.offpolicy_env import run_study, study_config
from rljax.grid import Grid
from rljax.training.dqn import discrete_actions
from rljax.training.offpolicy_config import PQNTrainConfig
from rljax.training.pqn import make_pqn_chunks

NAME = "pqn"
SUPPORTS_TENSORBOARD = True
DESCRIPTION = ("PQN (Q(lambda), LayerNorm, no buffer; purejaxql's config) on a gymnax env with "
               "Discrete actions: greedy test return IQM, training curve")

Config = study_config(PQNTrainConfig, NAME, "CartPole-v1", make_pqn_chunks,
                      lambda env, params: discrete_actions(env, params, "PQN"), __name__)


def run(config: Any, out_dir: Path, grid: Grid | None = None,
        options: Any = None) -> dict[str, Any]:
    """Run the study (:func:`experiments.offpolicy_env.run_study`)."""
    return run_study(NAME, config, out_dir, grid, options)
