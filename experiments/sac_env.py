"""Study ``sac``: ``rljax run sac --env NAME`` (default Pendulum-v1), SAC (twin critics,
automatic temperature; rejax's row) on a gymnax env with Box actions, over many seeds; the
run, figures and report are :mod:`experiments.offpolicy_env`'s, the trainer
:func:`rljax.training.sac.make_sac_chunks`, the published rows
:mod:`rljax.training.offpolicy_presets` (``--set preset=NAME``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.offpolicy_env import run_study, study_config
from rljax.grid import Grid
from rljax.training.offpolicy_config import SACTrainConfig
from rljax.training.sac import box_actions, make_sac_chunks

NAME = "sac"
SUPPORTS_TENSORBOARD = True
DESCRIPTION = ("SAC (twin critics, automatic temperature; rejax's row) on a gymnax env with Box "
               "actions: test return IQM, training curve")

Config = study_config(SACTrainConfig, NAME, "Pendulum-v1", make_sac_chunks,
                      box_actions, __name__)


def run(config: Any, out_dir: Path, grid: Grid | None = None,
        options: Any = None) -> dict[str, Any]:
    """Run the study (:func:`experiments.offpolicy_env.run_study`)."""
    return run_study(NAME, config, out_dir, grid, options)
