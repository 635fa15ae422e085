"""How the sweeps of a run behave: checkpoints, resume, NaN debugging, progress, logging.

A study's ``run(config, out_dir)`` builds its sweeps and calls ``Sweep.run`` /
``ChunkedSweep.run`` with plain arguments; what the *command line* asked for --
``--checkpoint-every``, ``--resume``, ``--debug-nans``, ``--tensorboard`` -- reaches
those calls through :func:`sweep_options`, a context the CLI opens around the study::

    with sweep_options(checkpoint_dir=out / "checkpoints", resume=True,
                       metadata={"config": asdict(config)}) as opts:
        summary = study.run(config, out)
    opts.nonfinite      # [{"sweep": "01-orm", "seed": 3, "step": 57}, ...]

Each sweep run inside the context gets a stable name, ``NN-<desc>`` in the order the
sweeps start (a study builds its sweeps in a fixed order), and keeps its checkpoints in
``checkpoint_dir/<name>/``. Outside any context the defaults apply: no checkpoints, a
progress bar only on a terminal.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class SweepOptions:
    """Options every sweep in the context follows.

    Attributes:
      checkpoint_dir: where sweeps keep checkpoints (``None``: no checkpoints). A
        :class:`~rljax.sweep.Sweep` saves each finished round; a
        :class:`~rljax.sweep.ChunkedSweep` also saves within a round every
        ``checkpoint_every`` chunks.
      checkpoint_every: chunks between in-round checkpoints (``None``: only at round
        boundaries).
      resume: continue from the checkpoints in ``checkpoint_dir``.
      metadata: JSON-able facts a checkpoint must match to be resumed (config, code
        version); a mismatch is refused naming the first differing key.
      debug_seed: re-run only this seed of every sweep, op by op with
        ``jax_debug_nans``; the first operation that makes a NaN raises
        :class:`~rljax.sweep.NonFiniteFound`.
      progress: show progress bars (``None``: only on a terminal).
      tensorboard_dir: write per-chunk aggregates across seeds here (only a
        ``ChunkedSweep`` does; the CLI refuses ``--tensorboard`` for a study that does not
        declare ``SUPPORTS_TENSORBOARD = True``, see :func:`rljax.cli.supports_tensorboard`).
      nonfinite: filled by the sweeps: one record per flagged seed,
        ``{"sweep", "seed", "step"}`` (``step`` -1 when the run does not report it).
    """

    checkpoint_dir: Path | None = None
    checkpoint_every: int | None = None
    resume: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    debug_seed: int | None = None
    progress: bool | None = None
    tensorboard_dir: Path | None = None
    nonfinite: list[dict[str, Any]] = field(default_factory=list)
    _names: list[str] = field(default_factory=list, repr=False)

    def next_name(self, desc: str | None) -> str:
        """The next sweep's name: ``NN-<desc>`` (desc made file-name safe)."""
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", desc or "sweep").strip("-") or "sweep"
        name = f"{len(self._names) + 1:02d}-{slug}"
        self._names.append(name)
        return name


_DEFAULT = SweepOptions()
_CURRENT: contextvars.ContextVar[SweepOptions | None] = contextvars.ContextVar(
    "rljax_sweep_options", default=None)


def current_options() -> SweepOptions:
    """The innermost :func:`sweep_options` in effect, or the defaults."""
    opts = _CURRENT.get()
    return _DEFAULT if opts is None else opts


def in_context() -> bool:
    """Whether a :func:`sweep_options` context is open."""
    return _CURRENT.get() is not None


@contextlib.contextmanager
def sweep_options(**kwargs: Any) -> Iterator[SweepOptions]:
    """Open a context in which every sweep follows :class:`SweepOptions` (``kwargs``);
    yields the options object, whose ``nonfinite`` list the sweeps fill."""
    opts = SweepOptions(**kwargs)
    if opts.checkpoint_dir is not None:
        opts.checkpoint_dir = Path(opts.checkpoint_dir)
    token = _CURRENT.set(opts)
    try:
        yield opts
    finally:
        _CURRENT.reset(token)


def code_version(*modules: Any) -> str:
    """A fingerprint of the code a run executes: SHA-256 (first 16 hex digits) of the
    source files of the ``rljax`` package and of ``modules`` (e.g. the study's module),
    by path and content. A checkpoint written by other code is refused on resume."""
    import rljax

    files = sorted(Path(rljax.__file__).parent.rglob("*.py"))
    files += [Path(m.__file__) for m in modules if getattr(m, "__file__", None)]
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
