"""``rljax bench ppo [--env NAME]``: PPO, rljax vs rejax, in the same run: env steps/s
and final returns.

**CartPole-v1** (the default, today's benchmark): rljax's native
:class:`~rljax.envs.CartPole` vs rejax 0.1.3's ``PPO`` on gymnax 1.0.1's ``CartPole-v1``,
with the ppo-cartpole hyperparameters: 4 envs x 128 steps per update, 4 epochs x 4
minibatches, gamma 0.99, lambda 0.95, clip 0.2 (value clip 0.2), entropy 0.01, value 0.5,
gradient clip 0.5, lr 2.5e-4, tanh MLP 64x64 actor and critic.

**Any other gymnax env** (``--env Pendulum-v1``, ``--env Breakout-MinAtar``, ...): both sides
use the ``ppo`` study's published configuration of the env
(:mod:`rljax.training.ppo_presets`; :data:`BENCH_PRESETS` names the row where it is not the
env's first: Breakout-MinAtar runs rejax's own ``benchmark/breakout_1m.yaml``, since the
gymnax-blines 64 x 128-step, 256-wide config does not fit 128 seeds in a few minutes
here). rljax runs the env exactly as the study does (``from_gymnax``, flattened /
normalised where the study does; categorical or Gaussian head from the spaces); rejax gets
``env=NAME`` with the same numbers (``agent_kwargs`` activation and hidden sizes,
``normalize_observations``); rejax flattens observations inside its MLP and clips a
Gaussian sample to the box in the env step, as rljax does.

**A Brax env** (``--env brax:inverted_pendulum``, the small one: CleanRL's continuous
defaults, 1 env x 2048 steps per update, MJX physics): rejax 0.1.3's own Brax path
(``rejax.compat.brax2gymnax``) cannot run beside gymnax 1.0.1 -- its env inherits gymnax
1.0's ``step``, which reads ``state.time``, a field Brax states lack -- so both sides step
rljax's :class:`~rljax.envs.BraxEnv` (fresh resets, the same env code on both sides, as
with gymnax envs); rejax through the same five-value wrapper, its raw keys made typed.

**CPU threads**: the bench runs inside :func:`rljax.cpu_threads.blas_threads` ``(1)``, as
every ``rljax`` command does (one OpenBLAS thread: the LAPACK QR of rljax's orthogonal
initialisation stops competing with XLA's thread pool; rejax's LeCun-normal init calls no
LAPACK). ``rljax_init_seconds`` times rljax's initialisation alone at the largest seed
count with one BLAS thread and with one per core.

**Throughput**: each side is one ``jax.jit(jax.vmap(train))`` over ``S`` seeds in {1, 16,
128}, timed end to end on device-resident keys; ``S * updates * batch / seconds``,
training included (each side also sums the returns of the episodes it finishes). Compile
time is measured separately (``lower().compile()``). The sides alternate over ``ROUNDS``
rounds and the ratio is of the median times (timings on this machine vary by up to 70 %
back to back); ``ratio_rounds`` keeps each round's ratio of its own pair of runs, and
``ratio_rounds_median`` their median with an exact 95 % order-statistic interval (9
rounds: ranks 2 and 8, coverage 0.961). **Returns**: each side trains ``RETURN_SEEDS``
seeds for
``min(total_steps, RETURN_STEPS)`` steps (a smaller budget than the study's; the result
says which), and per seed the mean return of the training episodes that finished in the
last 2 % of updates (at least the updates of one time-limited episode) is taken (the
``ppo`` study's final return; on the rejax side a wrapper counts them in the env
state); IQM over seeds with the interval of ``rljax.stats.reported.reported_interval``.
Environment variables
``RLJAX_BENCH_ROUNDS``, ``RLJAX_BENCH_RETURN_SEEDS``, ``RLJAX_BENCH_RETURN_STEPS`` change
those sizes.

Differences that are rejax's, not the benchmark's: rejax keeps separate Adam states for
actor and critic, clips gradients elementwise (``optax.clip``), uses Adam eps 1e-8, does
not anneal the learning rate, does not bootstrap time-limit truncations (gymnax's five-value
``done``), and initialises with LeCun-normal weights (no orthogonal QR, so its
vmapped init cannot hang); its evaluation callback is replaced by a no-op and
``skip_initial_evaluation=True`` so only training is timed. The truncation bootstrap costs
rljax a critic pass over the rollout's final observations (``T N`` rows per update) and
their storage; the others change the arithmetic by a few elementwise operations per
gradient step.

**Matched semantics**: a third side, ``rljax_matched``, runs rljax with rejax's choices
where rljax has a switch for them (``bootstrap_truncations=False``,
``grad_clip="elementwise"``, ``adam_eps=1e-8``), timed in the same alternating rounds;
``ratio_matched`` is rejax's median time over its median time. ``ratio`` (rljax's defaults)
stays the headline figure.

Snags worked around (both documented in issue 4): rejax 0.1.3 unpacks five values from
``env.step`` while gymnax 1.0 returns six ("too many values to unpack"), so the gymnax
env is wrapped in gymnax's ``LegacyStepAPIWrapper``; that wrapper's ``__getattr__``
recurses forever under ``copy.deepcopy`` (which rejax's ``Algorithm.config`` calls through
``dataclasses.asdict``), so the wrapper is subclassed with a ``__deepcopy__`` that returns
itself and swapped in after ``PPO.create``.

Requires the ``bench`` extra (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax.cpu_threads import blas_threads, current_blas_threads
from rljax.envs import CartPole, registry
from rljax.policies import mlp_actor_critic
from rljax.training.ppo import PPOTrainConfig, make_ppo_train

ACCEPTS_ENV = True  # `rljax bench ppo --env NAME`
DEFAULT_ENV = "CartPole-v1"
SEED_COUNTS = (1, 16, 128)
# Env steps per timed run for each seed count (updates = steps / (S * batch); CartPole
# keeps UPDATES): 1-16 s a run on 2 CPU cores, long enough that the one-off costs
# (initialisation, the first reset) are a few per cent of a run, as in a real one. Until
# 2026-12 these were 51_200, 204_800 and 327_680: 2 updates per seed at 128 Breakout seeds,
# where rljax's orthogonal initialisation alone was 12 % of the timed run.
STEPS = {1: 102_400, 16: 409_600, 128: 1_048_576}
#: Smaller runs for the slow envs (MJX physics on CPU steps ~10x slower than gymnax).
ENV_STEPS = {"brax:inverted_pendulum": {1: 20_480, 16: 65_536, 128: 262_144}}
UPDATES = {1: 100, 16: 25, 128: 5}  # CartPole's (512 steps per update)
ROUNDS = 9
RETURN_SEEDS = 8
RETURN_STEPS = 100_000
CONFIG = PPOTrainConfig()
#: The study preset the bench runs where it is not the env's first row.
BENCH_PRESETS = {"Breakout-MinAtar": "rejax"}


@dataclass(frozen=True)
class Setup:
    """What both sides run: the env name, the trainer config (rljax's names), the network
    (hidden sizes, activation), observation normalisation, and where it comes from."""

    env: str
    config: PPOTrainConfig
    hidden_sizes: tuple[int, ...]
    activation: str
    normalize_observations: bool
    preset: str
    source: str


def setup_for(env: str = DEFAULT_ENV, preset: str | None = None) -> Setup:
    """The benchmark's configuration of ``env``: CartPole-v1's is ppo-cartpole's; any other
    env's is the ``ppo`` study's (:class:`experiments.ppo_env.Config`).

    Raises:
      ValueError: one line for an env the study refuses (unknown name, spaces).
    """
    if env == DEFAULT_ENV and preset is None:
        return Setup(env, CONFIG, (64, 64), "tanh", False, "ppo-cartpole",
                     "experiments/ppo_cartpole.py (CleanRL ppo.py defaults)")
    from experiments.ppo_env import Config
    from rljax.config import ConfigError

    study = Config(env=env, preset=preset or BENCH_PRESETS.get(env, "auto"))
    try:
        study.validate()
    except ConfigError as err:
        raise ValueError(str(err)) from None
    chosen = study.resolved_preset()
    return Setup(env, study.train_config(), (study.hidden_size,) * study.hidden_layers,
                 study.activation, study.normalize_observations, chosen.name, chosen.source)


def _updates(setup: Setup, num_seeds: int, updates: dict[int, int] | None) -> int:
    if updates is not None:
        return updates[num_seeds]
    if setup.env == DEFAULT_ENV and setup.preset == "ppo-cartpole":
        return UPDATES[num_seeds]
    steps = ENV_STEPS.get(setup.env, STEPS)[num_seeds]
    return max(1, round(steps / (num_seeds * setup.config.batch_size)))


#: rejax's choices that rljax has switches for (the ``rljax_matched`` side).
MATCHED = {"bootstrap_truncations": False, "grad_clip": "elementwise", "adam_eps": 1e-8}


def _rljax_train(num_updates: int, setup: Setup | None = None, matched: bool = False):
    """``train(key) -> logs`` (leaves ``[U]``) of rljax's PPO for ``num_updates`` updates
    (with ``matched``, under rejax's semantics :data:`MATCHED`)."""
    setup = setup_for() if setup is None else setup
    config = setup.config.replace(total_steps=num_updates * setup.config.batch_size,
                                   **(MATCHED if matched else {}))
    return make_ppo_train(*_rljax_env_network(setup), config)


def _rljax_env_network(setup: Setup) -> tuple[Any, Any]:
    """``(env, actor_critic)`` of rljax's side: the native CartPole and a 64x64 tanh MLP for
    ppo-cartpole, else the ``ppo`` study's env and network (:func:`_study`)."""
    if setup.preset == "ppo-cartpole":
        return CartPole(), mlp_actor_critic(2)
    from experiments.ppo_env import make_env, make_network

    study = _study(setup)
    env = make_env(study)
    return env, make_network(env, study)


def _study(setup: Setup, **overrides: Any):
    """The ``ppo`` study's config of the env as the bench runs it: the setup's network and
    observation normalisation, and a state-independent log-std (as rejax's
    ``GaussianPolicy``) for a Gaussian head."""
    from experiments.ppo_env import Config

    fields = {"normalize_observations": setup.normalize_observations,
              "hidden_size": setup.hidden_sizes[0], "hidden_layers": len(setup.hidden_sizes),
              "activation": setup.activation, "gaussian_scale": "parameter", **overrides}
    return Config(env=setup.env, **fields)


def _final_window_wrapper(legacy_cls):
    """gymnax's five-value wrapper that also counts, in the env state, the returns of the
    episodes ending at or after step ``start`` of each env (the final window)."""
    from flax import struct

    @struct.dataclass
    class CountedState:
        env_state: Any
        t: jax.Array
        episode_return: jax.Array
        return_sum: jax.Array
        episodes: jax.Array

    class FinalWindowReturns(legacy_cls):
        """Five-value ``step``, safe under ``copy.deepcopy``, counting final returns."""

        def __init__(self, env, start: int, typed_keys: bool = False):
            super().__init__(env)
            self.start = int(start)
            self.typed_keys = typed_keys  # rejax's raw keys made typed for an rljax env

        def __deepcopy__(self, memo):
            return self

        def _key(self, key):
            return jax.random.wrap_key_data(key) if self.typed_keys else key

        def reset(self, key, params=None):
            obs, state = self._env.reset(self._key(key), params)
            return obs, CountedState(state, jnp.int32(0), jnp.float32(0.0), jnp.float32(0.0),
                                     jnp.int32(0))

        def step(self, key, state, action, params=None):
            obs, env_state, reward, terminated, truncated, info = self._env.step(
                self._key(key), state.env_state, action, params)
            done = jnp.logical_or(terminated, truncated)
            episode_return = state.episode_return + jnp.asarray(reward, jnp.float32)
            counted = jnp.logical_and(done, state.t >= self.start)
            new = CountedState(env_state, state.t + 1,
                               jnp.where(done, 0.0, episode_return),
                               state.return_sum + jnp.where(counted, episode_return, 0.0),
                               state.episodes + counted.astype(jnp.int32))
            return obs, new, reward, done, info

    return FinalWindowReturns


def _rejax_train(num_updates: int, setup: Setup | None = None, final_updates: int = 0):
    """``train(raw key) -> (return_sum [], episodes [])`` of rejax's PPO: the returns of the
    episodes its envs finished in the last ``final_updates`` updates."""
    try:
        import gymnax  # noqa: F401
        from gymnax.wrappers import LegacyStepAPIWrapper
        from rejax import PPO
    except ImportError as err:
        raise RuntimeError("rljax bench ppo needs rejax and gymnax: "
                           "pip install -e '.[bench]'") from err

    setup = setup_for() if setup is None else setup
    c = setup.config
    kwargs = {"normalize_observations": True} if setup.normalize_observations else {}
    wrapper = _final_window_wrapper(LegacyStepAPIWrapper)
    start = (num_updates - final_updates) * c.num_steps  # steps per env before the window
    if registry.is_brax(setup.env):
        # rejax's own Brax path (rejax.compat.brax2gymnax) inherits gymnax 1.0's step,
        # which reads state.time, a field Brax states lack; both sides step rljax's
        # BraxEnv instead (the same env code, as on gymnax envs), rejax through the same
        # five-value wrapper with its raw keys made typed
        # rejax normalises observations itself (normalize_observations above)
        env = wrapper(registry.make_env(setup.env), start, typed_keys=True)
        kwargs["env_params"] = env.default_params
    else:
        env = None
    algo = PPO.create(
        env=setup.env if env is None else env, num_envs=c.num_envs, num_steps=c.num_steps,
        num_epochs=c.num_epochs, num_minibatches=c.num_minibatches,
        learning_rate=c.learning_rate, max_grad_norm=c.max_grad_norm,
        total_timesteps=num_updates * c.batch_size, eval_freq=num_updates * c.batch_size,
        gamma=c.gamma, gae_lambda=c.lam, clip_eps=c.clip_epsilon, ent_coef=c.entropy_coef,
        vf_coef=c.value_coef, skip_initial_evaluation=True,
        agent_kwargs={"activation": setup.activation,
                      "hidden_layer_sizes": tuple(setup.hidden_sizes)},
        **kwargs,
    )
    algo = algo.replace(env=wrapper(algo.env, start) if env is None else env,
                        eval_callback=lambda algo, ts, rng: jnp.zeros(()))

    def train(key):
        train_state, _ = algo.train(key)
        counts = train_state.env_state
        return (jnp.sum(counts.return_sum), jnp.sum(counts.episodes),
                _param_checksum((train_state.actor_ts.params, train_state.critic_ts.params)))

    return train


def _param_checksum(params) -> jax.Array:
    """``f32 []``: the sum of every parameter, an output that depends on the final update.

    Without it XLA removes rejax's last update as dead code (its outputs are only the env
    state's counts, and nothing reads the parameters that update writes), so rejax would be
    timed doing ``U - 1`` updates' gradient steps to rljax's ``U`` (rljax's logs and its
    finiteness check read every update). Measured on the Brax bench at 128 seeds and one
    update: rejax 2.55 s with its update removed, rljax 6.0 s with its update."""
    return sum(jnp.sum(leaf) for leaf in jax.tree_util.tree_leaves(params))


def _compile(train, num_seeds: int, typed_keys: bool):
    keys = jax.random.split(jax.random.key(0), num_seeds)
    if not typed_keys:
        keys = jax.random.key_data(keys)
    jitted = jax.jit(jax.vmap(train))
    start = time.perf_counter()
    compiled = jitted.lower(keys).compile()
    return compiled, keys, time.perf_counter() - start


def _time(compiled, keys) -> float:
    start = time.perf_counter()
    jax.block_until_ready(compiled(keys))
    return time.perf_counter() - start


def _median_interval(ratios: list[float]) -> dict:
    """The median of the per-round ratios with its exact distribution-free 95 % interval
    (order statistics, :func:`rljax.stats.small_sample.order_statistic_interval`; infinite
    ends below 6 rounds) and that interval's exact coverage."""
    from rljax.stats.small_sample import order_statistic_interval, order_statistic_ranks

    interval = order_statistic_interval(np.asarray(ratios, np.float64))
    coverage = order_statistic_ranks(len(ratios))[2]
    return {"median": float(interval.point), "ci": [float(interval.low), float(interval.high)],
            "coverage": coverage}


def _init_seconds(setup: Setup, num_seeds: int, rounds: int) -> dict:
    """Median seconds of rljax's per-seed parameter initialisation alone (``jit(vmap(
    actor_critic.init))`` over ``num_seeds`` seeds), with one BLAS thread and with one
    per core, alternating over ``rounds``: what :mod:`rljax.cpu_threads` saves."""
    env, network = _rljax_env_network(setup)
    obs = jnp.zeros(env.observation_space(env.default_params).shape, jnp.float32)
    keys = jax.random.split(jax.random.key(0), num_seeds)
    init = jax.jit(jax.vmap(lambda k: network.init(k, obs))).lower(keys).compile()
    per_core = os.cpu_count() or 1
    times: dict[str, list[float]] = {"one_thread": [], "one_per_core": []}
    _time(init, keys)
    for _ in range(rounds):
        for name, threads in (("one_thread", 1), ("one_per_core", per_core)):
            with blas_threads(threads):
                times[name].append(_time(init, keys))
    return {"seeds": num_seeds, "blas_threads_per_core": per_core,
            **{name: statistics.median(t) for name, t in times.items()}}


def _episode_updates(setup: Setup) -> int:
    """Updates that span one time-limited episode per env (``ceil(max_steps_in_episode /
    num_steps)``; 1 when the env declares no limit), so a final window holds an episode
    end of every env even for a fixed-length env such as Pendulum (200 steps)."""
    if setup.preset == "ppo-cartpole":
        return 1
    env = registry.make_env(setup.env, normalize_observations=setup.normalize_observations)
    limit = getattr(env.default_params, "max_steps_in_episode", 0)
    return max(1, -(-int(limit) // setup.config.num_steps))


def _returns(setup: Setup, num_seeds: int, total_steps: int, reps: int = 2000) -> dict:
    """Both sides trained ``num_seeds`` seeds for ``total_steps`` steps: per-seed final
    returns (last 2 % of updates), IQM with interval, and whether each IQM is inside the
    other's interval."""
    from rljax.stats.reported import reported_interval

    num_updates = max(1, total_steps // setup.config.batch_size)
    final_updates = min(num_updates, max(num_updates // 50, _episode_updates(setup)))
    keys = jax.random.split(jax.random.key(1), num_seeds)
    start = time.perf_counter()
    logs = jax.jit(jax.vmap(_rljax_train(num_updates, setup)))(keys)
    ours = (np.asarray(logs["return_sum"])[:, -final_updates:].sum(axis=1),
            np.asarray(logs["episodes"])[:, -final_updates:].sum(axis=1))
    our_seconds = time.perf_counter() - start
    start = time.perf_counter()
    theirs = jax.jit(jax.vmap(_rejax_train(num_updates, setup, final_updates)))(
        jax.random.key_data(keys))
    theirs = tuple(np.asarray(x) for x in theirs[:2])
    their_seconds = time.perf_counter() - start
    out: dict[str, Any] = {"seeds": num_seeds, "env_steps_per_seed":
                           num_updates * setup.config.batch_size, "updates": num_updates,
                           "final_updates": final_updates}
    for side, (sums, counts), seconds, k in (("rljax", ours, our_seconds, 2),
                                             ("rejax", theirs, their_seconds, 3)):
        with np.errstate(invalid="ignore", divide="ignore"):
            per_seed = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        ok = per_seed[~np.isnan(per_seed)]
        ci = (reported_interval("iqm", ok, key=jax.random.key(k), reps=reps)
              if ok.size >= 2 else None)
        out[side] = {"iqm": float(ci.point) if ci else None,
                     "ci": [float(ci.low), float(ci.high)] if ci else [None, None],
                     "interval_note": ci.note.rstrip(".") if ci else "fewer than 2 seeds",
                     "per_seed": [None if np.isnan(x) else float(x) for x in per_seed],
                     "wall_seconds_with_compile": seconds}
    a, b = out["rljax"], out["rejax"]
    out["each_within_other"] = (
        None if a["iqm"] is None or b["iqm"] is None else
        bool(b["ci"][0] <= a["iqm"] <= b["ci"][1] and a["ci"][0] <= b["iqm"] <= a["ci"][1]))
    out["intervals_overlap"] = (None if a["iqm"] is None or b["iqm"] is None else
                                bool(a["ci"][0] <= b["ci"][1] and b["ci"][0] <= a["ci"][1]))
    return out


def run(env: str = DEFAULT_ENV, *, seed_counts: tuple[int, ...] = SEED_COUNTS,
        updates: dict[int, int] | None = None, rounds: int | None = None,
        return_seeds: int | None = None, return_steps: int | None = None,
        preset: str | None = None) -> dict:
    """Compile both sides per seed count, time alternating rounds, then train both for
    the returns; a JSON-able dict.

    Args:
      env: a gymnax id (default CartPole-v1, with ppo-cartpole's config).
      seed_counts: the S of the throughput table.
      updates: ``{S: updates per timed run}`` (default from :data:`STEPS`).
      rounds: alternating timed rounds (default ``RLJAX_BENCH_ROUNDS`` or 9).
      return_seeds, return_steps: the returns' seeds and steps per seed (defaults
        ``RLJAX_BENCH_RETURN_SEEDS`` / ``_STEPS`` or 8 and ``min(total_steps, 1e5)``); 0
        seeds skips the returns.
      preset: the study preset (default :data:`BENCH_PRESETS` or the env's first row).

    Raises:
      ValueError: one line for an env the ``ppo`` study refuses.
    """
    setup = setup_for(env, preset)
    with blas_threads(1):  # as every rljax command runs (rljax.cpu_threads)
        return _run(setup, seed_counts, updates, rounds, return_seeds, return_steps)


def _run(setup: Setup, seed_counts: tuple[int, ...], updates: dict[int, int] | None,
         rounds: int | None, return_seeds: int | None, return_steps: int | None) -> dict:
    rounds = int(os.environ.get("RLJAX_BENCH_ROUNDS", ROUNDS)) if rounds is None else rounds
    if return_seeds is None:
        return_seeds = int(os.environ.get("RLJAX_BENCH_RETURN_SEEDS", RETURN_SEEDS))
    if return_steps is None:
        return_steps = int(os.environ.get("RLJAX_BENCH_RETURN_STEPS",
                                          min(setup.config.total_steps, RETURN_STEPS)))
    result: dict[str, Any] = {"env": setup.env, "preset": setup.preset,
                              "blas_threads": current_blas_threads(),
                              "preset_source": setup.source, "rounds": rounds,
                              "steps_per_update": setup.config.batch_size,
                              "config": {**setup.config._asdict(),
                                         "hidden_sizes": list(setup.hidden_sizes),
                                         "activation": setup.activation,
                                         "normalize_observations":
                                             setup.normalize_observations},
                              "sizes": []}
    for num_seeds in seed_counts:
        num_updates = _updates(setup, num_seeds, updates)
        ours, our_keys, our_compile = _compile(_rljax_train(num_updates, setup), num_seeds,
                                               True)
        matched, matched_keys, _ = _compile(_rljax_train(num_updates, setup, matched=True),
                                            num_seeds, True)
        theirs, their_keys, their_compile = _compile(_rejax_train(num_updates, setup),
                                                     num_seeds, False)
        _time(ours, our_keys)  # warm-up: first-call allocations
        _time(matched, matched_keys)
        _time(theirs, their_keys)
        our_times, matched_times, their_times = [], [], []
        for _ in range(rounds):
            our_times.append(_time(ours, our_keys))
            their_times.append(_time(theirs, their_keys))
            matched_times.append(_time(matched, matched_keys))
        steps = num_seeds * num_updates * setup.config.batch_size
        our_median = statistics.median(our_times)
        their_median = statistics.median(their_times)
        matched_median = statistics.median(matched_times)
        # per round (the sides alternate within a round): rejax's time over rljax's
        ratio_rounds = [t / o for t, o in zip(their_times, our_times, strict=True)]
        matched_rounds = [t / m for t, m in zip(their_times, matched_times, strict=True)]
        result["sizes"].append({
            "seeds": num_seeds,
            "ratio_rounds": ratio_rounds,
            "ratio_rounds_median": _median_interval(ratio_rounds),
            "ratio_matched_rounds": matched_rounds,
            "ratio_matched_rounds_median": _median_interval(matched_rounds),
            "updates": num_updates,
            "env_steps": steps,
            "rljax_seconds": our_times,
            "rejax_seconds": their_times,
            "rljax_steps_per_second": steps / our_median,
            "rejax_steps_per_second": steps / their_median,
            "ratio": their_median / our_median,
            "rljax_matched_seconds": matched_times,
            "rljax_matched_steps_per_second": steps / matched_median,
            "ratio_matched": their_median / matched_median,
            "rljax_compile_seconds": our_compile,
            "rejax_compile_seconds": their_compile,
        })
    result["rljax_init_seconds"] = _init_seconds(setup, max(seed_counts), rounds)
    result["min_ratio"] = min(s["ratio"] for s in result["sizes"])
    result["min_ratio_matched"] = min(s["ratio_matched"] for s in result["sizes"])
    result["matched"] = dict(MATCHED)
    result["returns"] = (_returns(setup, return_seeds, return_steps) if return_seeds
                         else None)
    return result


def table(result: dict) -> str:
    """Markdown table of the ratios (rljax env steps/s over rejax's; > 1: rljax faster) and
    of both sides' final returns."""
    env = result.get("env", DEFAULT_ENV)
    lines = [
        f"PPO on {env} ({result.get('preset', 'ppo-cartpole')} config), env steps/s "
        f"including training (median of {result['rounds']} alternating rounds); compile "
        "seconds separately",
        "",
        "| seeds | rljax steps/s | rejax steps/s | ratio | ratio, rejax's semantics | "
        "rljax compile s | rejax compile s |",
        "|---|---|---|---|---|---|---|",
    ]
    def with_rounds(s, name):
        if name not in s:
            return "n/a"
        per_round = s.get(f"{name}_rounds_median")
        if not per_round:
            return f"{s[name]:.2f}"
        low, high = per_round["ci"]
        return f"{s[name]:.2f} ({per_round['median']:.2f} [{low:.2f}, {high:.2f}])"

    for s in result["sizes"]:
        lines.append(
            f"| {s['seeds']} | {s['rljax_steps_per_second']:,.0f} | "
            f"{s['rejax_steps_per_second']:,.0f} | {with_rounds(s, 'ratio')} | "
            f"{with_rounds(s, 'ratio_matched')} | "
            f"{s['rljax_compile_seconds']:.1f} | {s['rejax_compile_seconds']:.1f} |"
        )
    lines.append("")
    lines.append("ratio: of the median times; in brackets the median of the rounds' own ratios "
                 "(each round times both sides back to back) with its exact 95 % order-statistic "
                 "interval")
    init = result.get("rljax_init_seconds")
    if init:
        lines.append(f"rljax's parameter initialisation alone at {init['seeds']} seeds: "
                     f"{init['one_thread']:.3f} s with one BLAS thread (as timed above), "
                     f"{init['one_per_core']:.3f} s with one per core")
    lines.append(f"minimum ratio: {result['min_ratio']:.2f} (target >= 1.0)")
    if "min_ratio_matched" in result:
        lines.append(f"minimum ratio with rejax's semantics ({result['matched']}): "
                     f"{result['min_ratio_matched']:.2f}")
    returns = result.get("returns")
    if returns:
        def fmt(side):
            r = returns[side]
            if r["iqm"] is None:
                return "n/a"
            return f"{r['iqm']:.4g} [{r['ci'][0]:.4g}, {r['ci'][1]:.4g}]"

        lines += ["", f"final return (IQM over {returns['seeds']} seeds, 95 % interval; "
                  f"{returns['env_steps_per_seed']:,} steps per seed, episodes of the last "
                  f"{returns['final_updates']} updates): rljax {fmt('rljax')}, rejax "
                  f"{fmt('rejax')}; each IQM inside the other's interval: "
                  f"{returns['each_within_other']}"]
    return "\n".join(lines)
