"""A tiny study on the config axis, for CLI tests of ``--grid`` / ``--sample``.

``a`` and ``b`` are traced (``train(key, hparams)`` reads them), ``width`` (the number of
draws) is structural: a grid over it compiles one program per value.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from rljax import io
from rljax.config import require_float, require_int
from rljax.grid import grid_columns, run_grid, single_grid

NAME = "toy-grid"
DESCRIPTION = "toy study on the config axis (tests)"


@dataclass(frozen=True)
class Config:
    TRACED: ClassVar[tuple[str, ...]] = ("a", "b")
    STRUCTURAL: ClassVar[tuple[str, ...]] = ("width",)
    seeds: int = 6
    block_size: int = 8
    base_seed: int = 0
    a: float = 0.5
    b: float = 1.0
    width: int = 64
    label: str = "x"

    def validate(self) -> None:
        require_int("seeds", self.seeds, 1)
        require_int("block_size", self.block_size, 1)
        require_int("base_seed", self.base_seed, 0)
        require_float("a", self.a, low=-2.0, high=2.0)
        require_float("b", self.b, low=0.0, low_inclusive=False)
        require_int("width", self.width, 1, 4096)


def make_train(config: Config):
    def train(key, hp):
        x = jax.random.normal(key, (config.width,))
        r = jnp.sum(jnp.exp(hp["a"] * x) * jnp.tanh(hp["b"] * x))
        return {"r": r + 0.0 * jnp.log(hp["a"] + 1.5)}  # NaN for a <= -1.5
    return train


def run(config: Config, out_dir: Path, grid: Any = None, options: Any = None) -> dict[str, Any]:
    grid = grid if grid is not None else single_grid(config, Config.TRACED)
    configs = grid.configs(config)
    result = run_grid(make_train, configs, Config.TRACED, config.seeds,
                      base_seed=config.base_seed, block_size=config.block_size, desc=NAME,
                      options=options)
    r = np.asarray(result.outputs["r"])
    k, s = r.shape
    cols = {name: np.repeat(v, s) for name, v in grid_columns(configs, grid.fields).items()}
    frame = pd.DataFrame({**cols, "seed": np.tile(result.seed_ids, k), "r": r.reshape(-1)})
    io.write_parquet(out_dir / "results.parquet", frame)
    summary = {"experiment": NAME, "configs": k, "programs": len(result.programs),
               "mean_r": float(np.nanmean(r))}
    io.write_json(out_dir / "summary.json", summary)
    return summary
