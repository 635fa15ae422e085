"""Published PPO hyperparameters per environment, the defaults of ``rljax run ppo --env NAME``.

The fields of a row (:data:`PRESET_FIELDS`) are :class:`~rljax.training.PPOTrainConfig`
fields plus the MLP's (``hidden_size``, ``hidden_layers``, ``activation``,
``gaussian_scale``) and ``normalize_observations`` (of
:func:`rljax.envs.registry.make_env`); :func:`preset_for` picks an env's row. Each row is
one published configuration, copied field by field and citing its file:

* **gymnax-blines** (Lange, https://github.com/RobertTLange/gymnax-blines,
  ``agents/<env>/ppo.yaml``): the configurations linked from gymnax's README. Their
  published return is the one in the run's own log beside the yaml
  (``agents/<env>/ppo.pkl``: the mean of 164 sampled test rollouts at the last
  evaluation, one run, seed 0; ``python scripts/blines_reference.py logs``), not the
  README's figure: Pendulum-v1's "R: -130" is its ES agent's (``es.pkl``, final -130.2;
  the PPO log ends at -200.6), and Breakout-MinAtar's "R: 28" is the final of none of
  its logs (``ppo.pkl`` ends at 22.9, best 23.5). ``num_train_envs`` ->
  ``num_envs``, ``n_steps`` -> ``num_steps``, ``epoch_ppo`` x ``n_minibatch`` ->
  ``num_epochs`` x ``num_minibatches``, ``lr_begin == lr_end`` -> a constant step size,
  ``clip_eps`` also clips the value (their loss does), Adam eps 1e-5, separate
  ``num_hidden_layers`` x ``num_hidden_units`` ReLU MLPs (``utils/models.py``), and for
  continuous actions its state-dependent softplus scale (``gaussian_scale="softplus"``).
* **rejax** (Liesen et al., https://github.com/keraJLi/rejax, ``configs/gymnax/*.yaml`` and
  ``benchmark/*.yaml``): ``agent_kwargs.activation`` (rejax's default is swish), 64x64
  networks (rejax's default ``hidden_layer_sizes``), value clipped with ``clip_eps``.
* **cleanrl** (Huang et al., https://github.com/vwxyzjn/cleanrl, ``cleanrl/ppo.py``, the
  PureJaxRL CartPole defaults too): 4 envs x 128 steps, 4 x 4, lr 2.5e-4 annealed, 5e5
  steps, tanh 64x64; for continuous actions ``cleanrl/ppo_continuous_action.py`` (1 env x
  2048 steps, 10 x 32, lr 3e-4 annealed, no entropy bonus, 1e6 steps, observations
  normalised; its reward normalisation is not reproduced here).

What rljax cannot copy exactly (stated in every report through :attr:`Preset.note`):
rejax clips gradients elementwise (``optax.clip``; rljax clips the global norm) and uses
Adam eps 1e-8 (rljax 1e-5); gymnax-blines initialises differently (LeCun-normal kernels,
uniform biases); gymnax < 1.0 (both sources) does not bootstrap time-limit truncations
(rljax does, from ``info["final_obs"]``).

An env without a row gets :data:`GENERIC_DISCRETE` or :data:`GENERIC_CONTINUOUS` (CleanRL),
chosen by its action space.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GYMNAX_BLINES = "https://github.com/RobertTLange/gymnax-blines/blob/main/agents/{}/ppo.yaml"
REJAX = "https://github.com/keraJLi/rejax/blob/main/{}"
CLEANRL = "https://github.com/vwxyzjn/cleanrl/blob/master/cleanrl/{}"

PRESET_FIELDS = ("total_steps", "num_envs", "num_steps", "num_epochs", "num_minibatches",
                 "gamma", "lam", "learning_rate", "anneal_lr", "clip_epsilon", "value_clip",
                 "entropy_coef", "value_coef", "max_grad_norm", "hidden_size",
                 "hidden_layers", "activation", "normalize_observations", "gaussian_scale")
"""Fields a preset sets: :class:`~rljax.training.PPOTrainConfig` fields, the MLP's
(``hidden_size``, ``hidden_layers``, ``activation``, ``gaussian_scale``) and
``normalize_observations``; every one is a field of the ``ppo`` study's ``Config``."""

_BLINES_NOTE = ("gymnax-blines initialises with LeCun-normal kernels and uniform(0.05) "
                "biases (rljax: orthogonal, zeros); its gymnax < 1.0 did not bootstrap "
                "time-limit truncations (rljax does)")
_REJAX_NOTE = ("rejax clips gradients elementwise (rljax: global norm) with Adam eps 1e-8 "
               "(rljax 1e-5), and does not bootstrap time-limit truncations (rljax does)")


@dataclass(frozen=True)
class Preset:
    """One published configuration.

    Attributes:
      name: the preset's name (``gymnax-blines``, ``rejax``, ``cleanrl``).
      source: where it is published (a file URL).
      values: ``{field: value}`` for every name of :data:`PRESET_FIELDS`.
      note: what rljax runs differently from the source (empty if nothing).
      published: the return the source reports for this config, if any (e.g. gymnax's
        README), with ``published_source`` naming where.
    """

    name: str
    source: str
    values: dict[str, Any]
    note: str = ""
    published: float | None = None
    published_source: str = ""

    def __post_init__(self) -> None:
        missing = sorted(set(PRESET_FIELDS) - set(self.values))
        unknown = sorted(set(self.values) - set(PRESET_FIELDS))
        if missing or unknown:
            raise ValueError(f"preset {self.name}: missing {missing}, unknown {unknown}")


def _values(**kw: Any) -> dict[str, Any]:
    base = dict(gamma=0.99, lam=0.95, clip_epsilon=0.2, value_clip=0.2, entropy_coef=0.01,
                value_coef=0.5, hidden_layers=2, normalize_observations=False,
                anneal_lr=False, gaussian_scale="parameter")
    return {**base, **kw}


#: Where a gymnax-blines published return comes from (``{}``: the env).
BLINES_LOG = ("gymnax-blines agents/{}/ppo.pkl, the final evaluation (164 sampled test "
              "rollouts) of its one logged run, seed 0")


def _blines(env: str, published: float | None = None, **kw: Any) -> Preset:
    values = _values(num_epochs=4, learning_rate=5e-4, activation="relu",
                     gaussian_scale="softplus", **kw)
    return Preset("gymnax-blines", GYMNAX_BLINES.format(env), values, _BLINES_NOTE,
                  published, BLINES_LOG.format(env) if published is not None else "")


GENERIC_DISCRETE = Preset(
    "cleanrl", CLEANRL.format("ppo.py"),
    _values(total_steps=500_000, num_envs=4, num_steps=128, num_epochs=4, num_minibatches=4,
            learning_rate=2.5e-4, anneal_lr=True, max_grad_norm=0.5, hidden_size=64,
            activation="tanh"),
    "CleanRL ppo.py defaults (also PureJaxRL's CartPole config)")

GENERIC_CONTINUOUS = Preset(
    "cleanrl", CLEANRL.format("ppo_continuous_action.py"),
    _values(total_steps=1_000_000, num_envs=1, num_steps=2048, num_epochs=10,
            num_minibatches=32, learning_rate=3e-4, anneal_lr=True, max_grad_norm=0.5,
            entropy_coef=0.0, hidden_size=64, activation="tanh",
            normalize_observations=True),
    "CleanRL ppo_continuous_action.py defaults without its reward normalisation")

#: ``{env: {preset name: Preset}}``; the first preset of an env is its default.
PRESETS: dict[str, dict[str, Preset]] = {
    "Pendulum-v1": {
        "gymnax-blines": _blines("Pendulum-v1", -200.6, total_steps=1_000_000, num_envs=32,
                                 num_steps=16, num_minibatches=4, max_grad_norm=1.0,
                                 hidden_size=64),
        "rejax": Preset("rejax", REJAX.format("configs/gymnax/pendulum.yaml"), _values(
            total_steps=150_000, num_envs=100, num_steps=100, num_epochs=10,
            num_minibatches=10, learning_rate=1e-3, max_grad_norm=10.0, gamma=0.995,
            entropy_coef=0.0, hidden_size=64, activation="swish",
            normalize_observations=True), _REJAX_NOTE),
    },
    "MountainCarContinuous-v0": {
        "gymnax-blines": _blines("MountainCarContinuous-v0", total_steps=1_000_000,
                                 num_envs=32, num_steps=16, num_minibatches=4,
                                 max_grad_norm=1.0, hidden_size=64),
    },
    "Breakout-MinAtar": {
        "gymnax-blines": _blines("Breakout-MinAtar", 22.9, total_steps=10_000_000,
                                 num_envs=64, num_steps=128, num_minibatches=8,
                                 max_grad_norm=0.5, gamma=0.999, hidden_size=256),
        "rejax": Preset("rejax", REJAX.format("benchmark/breakout_1m.yaml"), _values(
            total_steps=1_000_000, num_envs=32, num_steps=32, num_epochs=4,
            num_minibatches=4, learning_rate=2.5674088686342003e-4, max_grad_norm=1.0,
            gamma=0.995, hidden_size=64, activation="tanh"), _REJAX_NOTE),
    },
    "CartPole-v1": {
        "cleanrl": GENERIC_DISCRETE,
        "gymnax-blines": _blines("CartPole-v1", total_steps=150_000, num_envs=8,
                                 num_steps=32, num_minibatches=4, max_grad_norm=0.5,
                                 hidden_size=64),
        "rejax": Preset("rejax", REJAX.format("configs/gymnax/cartpole.yaml"), _values(
            total_steps=100_000, num_envs=5, num_steps=100, num_epochs=5, num_minibatches=5,
            learning_rate=7.5e-4, max_grad_norm=0.5, hidden_size=64, activation="tanh"),
            _REJAX_NOTE),
    },
    "Acrobot-v1": {
        "cleanrl": GENERIC_DISCRETE,
        "gymnax-blines": _blines("Acrobot-v1", total_steps=500_000, num_envs=16,
                                 num_steps=32, num_minibatches=4, max_grad_norm=1.0,
                                 hidden_size=64),
        "rejax": Preset("rejax", REJAX.format("configs/gymnax/acrobot.yaml"), _values(
            total_steps=100_000, num_envs=5, num_steps=100, num_epochs=5, num_minibatches=5,
            learning_rate=7.5e-4, max_grad_norm=0.5, hidden_size=64, activation="tanh",
            normalize_observations=True), _REJAX_NOTE),
    },
    "Catch-bsuite": {
        "gymnax-blines": _blines("Catch-bsuite", total_steps=100_000, num_envs=16,
                                 num_steps=32, num_minibatches=4, max_grad_norm=1.0,
                                 hidden_size=64),
    },
}

#: Preset names a config may ask for (``preset=auto``: the env's first row).
PRESET_NAMES = ("auto", "gymnax-blines", "rejax", "cleanrl")


def preset_for(env: str, preset: str = "auto", continuous: bool = False) -> Preset:
    """The published configuration ``preset`` of ``env``.

    Args:
      env: an environment name (gymnax id, or ``brax:NAME``).
      preset: one of :data:`PRESET_NAMES`; ``"auto"`` is the env's first row, or the
        generic CleanRL row for an env without one.
      continuous: whether the env's actions are a ``Box`` (picks the generic row).

    Raises:
      ValueError: one line when ``env`` has no row named ``preset``.
    """
    rows = PRESETS.get(env, {})
    generic = GENERIC_CONTINUOUS if continuous else GENERIC_DISCRETE
    if preset == "auto":
        return next(iter(rows.values())) if rows else generic
    if preset in rows:
        return rows[preset]
    if preset == "cleanrl":
        return generic
    have = ", ".join(["auto", *rows, *([] if "cleanrl" in rows else ["cleanrl"])])
    raise ValueError(f"preset: {env} has no {preset!r} row; its presets: {have}")
