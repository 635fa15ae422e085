"""Published off-policy configurations, the defaults of ``rljax run dqn|pqn|sac --env NAME``.

A trainer config's class defaults are one published row each (rejax's DQN CartPole row,
purejaxql's PQN CartPole config, rejax's SAC Pendulum row; see
:mod:`rljax.training.offpolicy_config`); :data:`PRESETS` adds the rows for other envs and
says what rljax runs differently. :func:`preset_for` picks an env's row: the first whose
``envs`` match (a name, or a suffix such as ``-MinAtar``), else the algorithm's default
row, named as such in the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rljax.training.offpolicy_config import (
    PUREJAXQL_CARTPOLE,
    REJAX_CARTPOLE,
    REJAX_PENDULUM,
)

PUREJAXQL_MINATAR = ("https://github.com/mttga/purejaxql/blob/main/purejaxql/config/alg/"
                     "pqn_minatar.yaml")


@dataclass(frozen=True)
class OffPolicyPreset:
    """One published configuration.

    Attributes:
      name: the row's name (``--set preset=NAME``).
      source: the file it is copied from.
      envs: env names (or ``-Suffix`` patterns) it is for; empty: the default row.
      values: ``{field: value}`` that differ from the trainer config's class defaults.
      note: what rljax runs differently from the source.
    """

    name: str
    source: str
    envs: tuple[str, ...] = ()
    values: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    def matches(self, env: str) -> bool:
        """Whether the row is for ``env``."""
        return any(env == e or (e.startswith("-") and env.endswith(e)) for e in self.envs)


_REJAX = "rejax does not bootstrap time-limit truncations (rljax does, from info['final_obs'])"
PRESETS: dict[str, tuple[OffPolicyPreset, ...]] = {
    "dqn": (OffPolicyPreset("rejax", REJAX_CARTPOLE, note=_REJAX),),
    "pqn": (
        OffPolicyPreset("purejaxql", PUREJAXQL_CARTPOLE,
                        note="purejaxql does not bootstrap time-limit truncations (rljax "
                             "does)"),
        OffPolicyPreset(
            "purejaxql-minatar", PUREJAXQL_MINATAR, envs=("-MinAtar",),
            values=dict(num_envs=128, num_steps=32, total_steps=10_000_000, num_epochs=2,
                        num_minibatches=32, learning_rate=5e-4, lam=0.65, eps_end=0.05,
                        exploration_fraction=0.1, reward_scale=1.0, hidden_size=128,
                        hidden_layers=2),
            note="purejaxql's MinAtar network is a 16-filter 3x3 convolution then Dense 128 "
                 "(LayerNorm, ReLU) on observations / 255; rljax's is a LayerNorm MLP "
                 "128x128 on the flattened observations; no truncation bootstrap there"),
    ),
    "sac": (OffPolicyPreset(
        "rejax", REJAX_PENDULUM,
        note="rejax normalises observations when a minibatch is drawn, with the current "
             "statistics; rljax's normaliser sits in the env, so stored transitions keep "
             "the statistics of their time, which diverged at rejax's 10,000 steps (Pendulum "
             "test return IQM over 16 seeds -579 against -140 raw, 8 seeds below -500), so "
             "the row leaves observations raw; rejax acts with the policy from the "
             "first step, rljax uniformly for learning_starts steps; " + _REJAX),),
}


def preset_names(algorithm: str) -> tuple[str, ...]:
    """``("auto", *row names)`` of ``algorithm``: what ``--set preset=`` accepts."""
    return ("auto", *(p.name for p in PRESETS[algorithm]))


def preset_for(algorithm: str, env: str, name: str = "auto") -> OffPolicyPreset:
    """The row ``name`` of ``algorithm`` or (``"auto"``) the first row for ``env``, else the
    default row.

    Raises:
      ValueError: one line naming ``preset`` and the rows there are.
    """
    rows = PRESETS[algorithm]
    if name == "auto":
        return next((p for p in rows if p.matches(env)), rows[0])
    for row in rows:
        if row.name == name:
            return row
    raise ValueError(f"preset: {algorithm} has rows {', '.join(preset_names(algorithm))}, "
                     f"got {name!r}")
