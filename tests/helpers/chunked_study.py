"""A tiny chunked study for the SIGKILL/resume test: every chunk draws from the key in
its state, so a resume that lost or replayed a chunk would change the bits."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from rljax import cli, io
from rljax.sweep import ChunkedSweep

SUPPORTS_TENSORBOARD = True  # its ChunkedSweep writes `rljax run --tensorboard DIR` logs
DESCRIPTION = "test: chunked random-walk study"


@dataclasses.dataclass(frozen=True)
class Config:
    seeds: int = 6
    block_size: int = 4
    base_seed: int = 0
    chunks: int = 24
    width: int = 96

    def validate(self):
        pass


def run(config: Config, out_dir: Path, options=None):
    width = config.width

    def init(key):
        return {"key": key, "w": jnp.eye(width) * 0.5, "x": jnp.zeros(width)}

    def advance(state):
        key, sub = jax.random.split(state["key"])
        noise = jax.random.normal(sub, (64, width))

        def body(w, row):  # some work per chunk so the run takes a few seconds
            w = jnp.tanh(w @ w + row[:, None] * 1e-3)
            return w, jnp.sum(w)

        w, sums = jax.lax.scan(body, state["w"], noise)
        x = state["x"] + noise.mean(axis=0)
        return {"key": key, "w": w, "x": x}, {"sum": sums[-1], "x0": x[0]}

    def finish(state):
        return {"x": state["x"]}

    result = ChunkedSweep(init, advance, finish, num_chunks=config.chunks,
                          base_seed=config.base_seed, block_size=config.block_size).run(
        config.seeds, desc="walk", options=options)
    io.write_json(out_dir / "summary.json", {
        "sum": np.asarray(result.outputs["logs"]["sum"]).tolist(),
        "x0": np.asarray(result.outputs["logs"]["x0"]).tolist(),
        "x": np.asarray(result.outputs["final"]["x"]).tolist(),
    })
    return {"seeds": config.seeds}


def main(argv):
    """``python chunked_study.py ARGS``: ``rljax ARGS`` with this study known as
    ``chunked-test``."""
    real = cli.registry

    class EntryPoint:
        def load(self):
            return sys.modules[__name__]

    def registry(group):
        known = dict(real(group))
        if group == cli.EXPERIMENT_GROUP:
            known["chunked-test"] = EntryPoint()
        return known

    cli.registry = registry
    return cli.main(argv)


if __name__ == "__main__":
    from rljax.cli import exit_with

    exit_with(main(sys.argv[1:]))
