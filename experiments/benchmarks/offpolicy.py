"""``rljax bench offpolicy``: DQN, PQN and SAC, rljax vs rejax 0.1.3, in the same run: env
steps/s at 1, 16 and 128 seeds, and final returns at the full preset budget.

**Configurations** (both sides get the same numbers; rljax's defaults,
:mod:`rljax.training.offpolicy_config`):

* ``dqn`` on CartPole-v1: rejax's DQN row of ``configs/gymnax/cartpole.yaml`` (10 envs,
  buffer 50,000 filled for 5,000 steps, batch 100, 5 gradient steps per iteration, lr 1e-3,
  elementwise clip 10, Polyak 0.98 once per iteration, double DQN, dueling swish 64x64,
  epsilon 1 -> 0.05 over half the run, 100,000 steps);
* ``pqn`` on CartPole-v1: purejaxql's ``pqn_cartpole.yaml`` (32 envs x 64 steps, 4 epochs x
  16 minibatches, RAdam lr 1e-4 annealed, clip 10, lambda 0.95, rewards x 0.1, LayerNorm
  ReLU 256x256, epsilon 1 -> 0.2 over the first 20 %, 500,000 steps), run by rejax's
  ``PQN`` (itself adapted from purejaxql) with the same sizes: rejax hard-codes a 64x64
  network, so its agent is cloned with 256x256 hidden layers after ``PQN.create``;
* ``sac`` on Pendulum-v1: rejax's SAC row of ``configs/gymnax/pendulum.yaml`` (1 env,
  buffer 10,000 filled for 256 steps, batch 256, one gradient step per env step, lr 1e-2,
  no clip, Polyak 0.98, twin swish 64x64 critics, observations normalised, 10,000 steps).

**Throughput**: each side is one ``jax.jit(jax.vmap(train))`` over ``S`` seeds in {1, 16,
128}, timed end to end on device-resident keys (compile timed separately,
``lower().compile()``), for the reduced number of updates of :data:`TIMED_STEPS` (a timed
run lasts about a second or a few here), with ``learning_starts`` scaled by the same
fraction so that the share of updates without gradient steps is the full run's. Buffer
sizes stay the preset's (rejax draws each minibatch over the whole buffer). The sides
alternate over ``ROUNDS`` rounds; ``ratio`` is rejax's median time over rljax's (> 1:
rljax faster), ``ratio_rounds_median`` the median of the rounds' own ratios with its exact
95 % order-statistic interval (:func:`experiments.benchmarks.ppo._median_interval`).
A third side, ``rljax_matched``, runs rljax with rejax's choices where rljax has a switch
(:data:`MATCHED`), timed in the same rounds (``ratio_matched``).

**Returns**: each side trains ``RETURN_SEEDS`` (16) seeds for the preset's full
``total_steps``; the final return of a seed is the mean return of the *training*
episodes (exploration included, epsilon at its final value for DQN / PQN, SAC's sampled
actions) that finished in the final window: the last 2 % of updates, at least the updates
of one time-limited episode per env (the ``ppo`` bench's rule). On rejax's side a wrapper
counts them in the env state (:func:`experiments.benchmarks.ppo._final_window_wrapper`).
IQM over seeds with :func:`rljax.stats.reported.reported_interval`. The sides do not share
keys in a meaningful way (rljax's typed keys and rejax's raw ones feed different
programs), so the comparison is **unpaired**: an unpaired bootstrap interval of the
difference of IQMs (:func:`rljax.stats.comparisons.unpaired_difference`) and whether each
IQM sits inside the other's interval.

**rejax's arithmetic, where it differs** (the ``rljax_matched`` side removes the ones
rljax has switches for): rejax does not bootstrap time-limit truncations (gymnax's
five-value ``done``); it clips gradients elementwise (``optax.clip``; rljax's DQN does too,
its PQN and SAC default to the global norm or none); Adam eps 1e-8 (also rljax's
default); SAC's actor, critics and temperature take three sequential steps with separate
Adam states (the critics' targets drawn from the just-updated actor), rljax's one step of
one Adam over the whole tree from one loss; rejax's SAC acts with its policy from the
first step, rljax's uniformly before ``learning_starts`` (256 steps); its PQN uses Adam
(not RAdam), no learning-rate annealing and no reward scale (purejaxql's REW_SCALE 0.1);
it draws replay minibatches without replacement (``jax.random.choice`` with a fill mask,
a Gumbel top-k over the whole buffer per gradient step); its SAC normalises observations
(the row's ``normalize_observations: true``; rljax's SAC row leaves them raw, see
:data:`RLJAX_NORMALIZE_OBSERVATIONS`) inside the algorithm (raw observations in the
buffer, normalised with the current
statistics when sampled), rljax's in the env wrapper (``NormalizeObservation``); its
epsilon-greedy evaluation policy uses epsilon 0.005, which never runs here: its
evaluation callback is replaced by a no-op and ``skip_initial_evaluation=True``, so only
training is timed, and the returns are training episodes on both sides.

**Snags worked around**, as in :mod:`experiments.benchmarks.ppo`: rejax 0.1.3 unpacks
five values from gymnax 1.0's six-value ``step``, so the gymnax env is wrapped in
gymnax's ``LegacyStepAPIWrapper``, made ``copy.deepcopy``-safe, before
``Algorithm.create`` (rejax's ``create`` deep-copies its config; SAC's
``normalize_observations`` then puts rejax's ``FloatObsWrapper`` around it); rejax's side
returns a sum of its final parameters, without which XLA removes its last update as
dead code.

**Published PQN figure**: purejaxql's README shows CartPole only as a plot
(``docs/cart_pole_time.png``: test returns against wall-clock seconds, reaching 500, with
no seed count, hardware or number in the text), so no published number is in the table.

Requires the ``bench`` extra (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import os
import statistics
import time
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from experiments.benchmarks.ppo import (
    _compile,
    _final_window_wrapper,
    _median_interval,
    _param_checksum,
    _time,
)
from rljax.cpu_threads import blas_threads, current_blas_threads

ALGORITHMS = ("dqn", "pqn", "sac")
#: The env each algorithm runs (its preset's).
ENVS = {"dqn": "CartPole-v1", "pqn": "CartPole-v1", "sac": "Pendulum-v1"}
#: Observation normalisation of each preset (rejax's Pendulum SAC row normalises).
NORMALIZE_OBSERVATIONS = {"dqn": False, "pqn": False, "sac": True}
"""Whether rejax normalises observations (its rows' ``normalize_observations``)."""
RLJAX_NORMALIZE_OBSERVATIONS = {"dqn": False, "pqn": False, "sac": False}
"""Whether rljax does: its ``sac`` row leaves Pendulum's observations raw (its normaliser
sits in the env and diverged at 10,000 steps; :mod:`rljax.training.offpolicy_presets`)."""
#: The preset each default config is (for the table).
SOURCES = {"dqn": "rejax configs/gymnax/cartpole.yaml (dqn)",
           "pqn": "purejaxql purejaxql/config/alg/pqn_cartpole.yaml",
           "sac": "rejax configs/gymnax/pendulum.yaml (sac)"}
SEED_COUNTS = (1, 16, 128)
#: Env steps per seed of a timed run, per algorithm and seed count (rounded down to whole
#: updates): about 0.5-3 s a run per side on 2 CPU cores.
TIMED_STEPS = {
    "dqn": {1: 5_000, 16: 500, 128: 50},
    "pqn": {1: 16_384, 16: 2_048, 128: 2_048},
    "sac": {1: 2_000, 16: 200, 128: 25},
}
ROUNDS = 9
RETURN_SEEDS = 16

#: rejax's choices that rljax has switches for (the ``rljax_matched`` side), per algorithm.
MATCHED = {
    "dqn": {"bootstrap_truncations": False, "grad_clip": "elementwise", "adam_eps": 1e-8},
    "pqn": {"bootstrap_truncations": False, "grad_clip": "elementwise", "adam_eps": 1e-8,
            "optimizer": "adam", "anneal_lr": False, "reward_scale": 1.0},
    "sac": {"bootstrap_truncations": False, "grad_clip": "elementwise", "adam_eps": 1e-8},
}


def default_config(algorithm: str) -> Any:
    """rljax's default config of ``algorithm`` (the preset the bench runs)."""
    from rljax.training.offpolicy_config import DQNTrainConfig, PQNTrainConfig, SACTrainConfig

    return {"dqn": DQNTrainConfig, "pqn": PQNTrainConfig, "sac": SACTrainConfig}[algorithm]()


def _steps_per_env(config: Any) -> int:
    """Env steps of each env per update (1 for DQN / SAC, ``num_steps`` for PQN)."""
    return config.steps_per_update // config.num_envs


def _sized(config: Any, num_updates: int) -> Any:
    """``config`` cut to ``num_updates`` updates, ``learning_starts`` scaled by the same
    fraction (so the share of updates before the first gradient step is the full run's)."""
    total = num_updates * config.steps_per_update
    changes: dict[str, Any] = {"total_steps": total}
    if hasattr(config, "learning_starts") and total < config.total_steps:
        changes["learning_starts"] = config.learning_starts * total // config.total_steps
    return config.replace(**changes)


def _rljax_train(algorithm: str, config: Any):
    """``train(key) -> logs`` (leaves ``[U]``) of rljax's trainer of ``algorithm``."""
    from rljax.envs import registry

    env = registry.make_env(ENVS[algorithm],
                            normalize_observations=RLJAX_NORMALIZE_OBSERVATIONS[algorithm])
    if algorithm == "dqn":
        from rljax.training.dqn import make_dqn_train as make
    elif algorithm == "pqn":
        from rljax.training.pqn import make_pqn_train as make
    else:
        from rljax.training.sac import make_sac_train as make
    return make(env, config)


def _rejax_algo(algorithm: str, config: Any, final_updates: int = 0) -> Any:
    """rejax's ``DQN`` / ``PQN`` / ``SAC`` with ``config``'s numbers, its env wrapped to
    count the returns of the episodes finished in the last ``final_updates`` updates, its
    evaluation a no-op."""
    try:
        import gymnax
        from gymnax.wrappers import LegacyStepAPIWrapper
        from rejax import DQN, PQN, SAC
    except ImportError as err:
        raise RuntimeError("rljax bench offpolicy needs rejax and gymnax: "
                           "pip install -e '.[bench]'") from err

    c = config
    num_updates = c.num_updates
    start = (num_updates - final_updates) * _steps_per_env(c)  # env steps before the window
    gymnax_env, env_params = gymnax.make(ENVS[algorithm])
    env = _final_window_wrapper(LegacyStepAPIWrapper)(gymnax_env, start)
    total = num_updates * c.steps_per_update  # rejax runs ceil(total / per update)
    max_grad_norm = float("inf") if c.max_grad_norm is None else c.max_grad_norm
    common = {"env": env, "env_params": env_params, "total_timesteps": total,
              "eval_freq": total, "skip_initial_evaluation": True,
              "learning_rate": c.learning_rate, "gamma": c.gamma, "num_envs": c.num_envs,
              "max_grad_norm": max_grad_norm,
              "normalize_observations": NORMALIZE_OBSERVATIONS[algorithm]}
    hidden = (c.hidden_size,) * c.hidden_layers
    if algorithm == "dqn":
        algo = DQN.create(
            **common, agent="DuelingQNetwork" if c.dueling else "QNetwork",
            agent_kwargs={"activation": c.activation}, buffer_size=c.buffer_size,
            fill_buffer=c.learning_starts, batch_size=c.batch_size, num_epochs=c.num_epochs,
            target_update_freq=1, polyak=1.0 - c.tau, eps_start=c.eps_start,
            eps_end=c.eps_end, exploration_fraction=c.exploration_fraction, ddqn=c.double_q)
        algo = algo.replace(agent=algo.agent.clone(hidden_layer_sizes=hidden))
    elif algorithm == "pqn":
        algo = PQN.create(
            **common, num_steps=c.num_steps, num_epochs=c.num_epochs,
            num_minibatches=c.num_minibatches, td_lambda=c.lam, eps_start=c.eps_start,
            eps_end=c.eps_end, exploration_fraction=c.exploration_fraction)
        algo = algo.replace(agent=algo.agent.clone(hidden_layer_sizes=hidden))
    else:
        algo = SAC.create(
            **common, agent_kwargs={"activation": c.activation}, hidden_layer_sizes=hidden,
            buffer_size=c.buffer_size, fill_buffer=c.learning_starts,
            batch_size=c.batch_size, num_epochs=c.num_epochs, target_update_freq=1,
            polyak=1.0 - c.tau)
    return algo.replace(eval_callback=lambda algo, ts, rng: jnp.zeros(()))


def _rejax_train(algorithm: str, config: Any, final_updates: int = 0):
    """``train(raw key) -> (return_sum [], episodes [], parameter sum [])`` of
    :func:`_rejax_algo`: the returns of the episodes its envs finished in the last
    ``final_updates`` updates, and a sum of its final parameters
    (:func:`experiments.benchmarks.ppo._param_checksum`)."""
    algo = _rejax_algo(algorithm, config, final_updates)

    def train(key):
        train_state, _ = algo.train(key)
        counts = train_state.env_state  # the wrapper's (FloatObsWrapper keeps it)
        params = [getattr(train_state, name).params
                  for name in ("q_ts", "actor_ts", "critic_ts", "alpha_ts")
                  if hasattr(train_state, name)]
        return jnp.sum(counts.return_sum), jnp.sum(counts.episodes), _param_checksum(params)

    return train


def _final_updates(config: Any, env_name: str) -> int:
    """The final window in updates: the last 2 % of updates, at least the updates that
    span one time-limited episode per env (``ceil(max_steps_in_episode / steps per env
    per update)``), at most all of them."""
    from rljax.envs import registry

    env = registry.make_env(env_name)
    limit = int(getattr(env.default_params, "max_steps_in_episode", 0))
    episode_updates = max(1, -(-limit // _steps_per_env(config)))
    return min(config.num_updates, max(config.num_updates // 50, episode_updates))


def _side_returns(sums: np.ndarray, counts: np.ndarray, seconds: float, key_index: int,
                  reps: int) -> dict:
    """Per-seed final returns (NaN without a finished episode) and their IQM interval."""
    from rljax.stats.reported import reported_interval

    with np.errstate(invalid="ignore", divide="ignore"):
        per_seed = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    ok = per_seed[~np.isnan(per_seed)]
    ci = (reported_interval("iqm", ok, key=jax.random.key(key_index), reps=reps)
          if ok.size >= 2 else None)
    return {"iqm": float(ci.point) if ci else None,
            "ci": [float(ci.low), float(ci.high)] if ci else [None, None],
            "interval_note": ci.note.rstrip(".") if ci else "fewer than 2 seeds",
            "per_seed": [None if np.isnan(x) else float(x) for x in per_seed],
            "episodes": [int(x) for x in counts],
            "wall_seconds_with_compile": seconds}


def _unpaired(ours: dict, theirs: dict, reps: int) -> dict | None:
    """The unpaired comparison of the two sides' per-seed final returns (they share no
    keys): rljax's probability of improvement over rejax with its unpaired BCa bootstrap
    interval, and a two-sided Mann-Whitney U test."""
    from rljax.stats.comparisons import mann_whitney_u, probability_of_improvement_ci

    x = np.asarray([v for v in ours["per_seed"] if v is not None], np.float64)
    y = np.asarray([v for v in theirs["per_seed"] if v is not None], np.float64)
    if min(x.size, y.size) < 2:
        return None
    method = "bca"  # measured coverage about 0.93 or more from 16 seeds
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        poi = probability_of_improvement_ci(x, y, key=jax.random.key(4), reps=reps,
                                            method=method, paired=False)
    if not (np.isfinite(poi.low) and np.isfinite(poi.high)):  # BCa undefined (e.g. P = 1)
        method = "percentile"
        poi = probability_of_improvement_ci(x, y, key=jax.random.key(4), reps=reps,
                                            method=method, paired=False)
    test = mann_whitney_u(x, y)
    return {"paired": False, "probability_of_improvement": float(poi.point),
            "ci": [float(poi.low), float(poi.high)], "method": method,
            "mann_whitney_u": float(test.statistic), "pvalue": float(test.pvalue)}


def _returns(algorithm: str, config: Any, num_seeds: int, reps: int = 2000) -> dict:
    """Both sides trained ``num_seeds`` seeds with ``config`` (the full budget): per-seed
    final returns, IQMs with intervals, and their unpaired comparison."""
    final_updates = _final_updates(config, ENVS[algorithm])
    keys = jax.random.split(jax.random.key(1), num_seeds)
    start = time.perf_counter()
    logs = jax.jit(jax.vmap(_rljax_train(algorithm, config)))(keys)
    ours = (np.asarray(logs["return_sum"])[:, -final_updates:].sum(axis=1),
            np.asarray(logs["episodes"])[:, -final_updates:].sum(axis=1))
    our_seconds = time.perf_counter() - start
    start = time.perf_counter()
    theirs = jax.jit(jax.vmap(_rejax_train(algorithm, config, final_updates)))(
        jax.random.key_data(keys))
    theirs = tuple(np.asarray(x) for x in theirs[:2])
    their_seconds = time.perf_counter() - start
    out: dict[str, Any] = {"seeds": num_seeds, "env_steps_per_seed": config.total_steps,
                           "updates": config.num_updates, "final_updates": final_updates,
                           "rljax": _side_returns(*ours, our_seconds, 2, reps),
                           "rejax": _side_returns(*theirs, their_seconds, 3, reps)}
    a, b = out["rljax"], out["rejax"]
    both = a["iqm"] is not None and b["iqm"] is not None
    out["each_within_other"] = (
        bool(b["ci"][0] <= a["iqm"] <= b["ci"][1] and a["ci"][0] <= b["iqm"] <= a["ci"][1])
        if both else None)
    out["intervals_overlap"] = (bool(a["ci"][0] <= b["ci"][1] and b["ci"][0] <= a["ci"][1])
                                if both else None)
    out["comparison"] = _unpaired(a, b, reps)
    return out


def _timed(algorithm: str, config: Any, num_seeds: int, num_updates: int,
           rounds: int) -> dict:
    """One cell of the throughput table: the three sides compiled, then timed over
    ``rounds`` alternating rounds."""
    sized = _sized(config, num_updates)
    matched = sized.replace(**MATCHED[algorithm])
    ours, our_keys, our_compile = _compile(_rljax_train(algorithm, sized), num_seeds, True)
    same, same_keys, _ = _compile(_rljax_train(algorithm, matched), num_seeds, True)
    theirs, their_keys, their_compile = _compile(_rejax_train(algorithm, sized), num_seeds,
                                                 False)
    _time(ours, our_keys)  # warm-up: first-call allocations
    _time(same, same_keys)
    _time(theirs, their_keys)
    our_times, matched_times, their_times = [], [], []
    for _ in range(rounds):
        our_times.append(_time(ours, our_keys))
        their_times.append(_time(theirs, their_keys))
        matched_times.append(_time(same, same_keys))
    steps = num_seeds * sized.total_steps
    our_median = statistics.median(our_times)
    their_median = statistics.median(their_times)
    matched_median = statistics.median(matched_times)
    ratio_rounds = [t / o for t, o in zip(their_times, our_times, strict=True)]
    matched_rounds = [t / m for t, m in zip(their_times, matched_times, strict=True)]
    return {
        "seeds": num_seeds, "updates": num_updates, "env_steps": steps,
        "learning_starts": getattr(sized, "learning_starts", None),
        "ratio": their_median / our_median,
        "ratio_rounds": ratio_rounds, "ratio_rounds_median": _median_interval(ratio_rounds),
        "ratio_matched": their_median / matched_median,
        "ratio_matched_rounds": matched_rounds,
        "ratio_matched_rounds_median": _median_interval(matched_rounds),
        "rljax_seconds": our_times, "rejax_seconds": their_times,
        "rljax_matched_seconds": matched_times,
        "rljax_steps_per_second": steps / our_median,
        "rejax_steps_per_second": steps / their_median,
        "rljax_matched_steps_per_second": steps / matched_median,
        "rljax_compile_seconds": our_compile, "rejax_compile_seconds": their_compile,
    }


def _algorithm(algorithm: str, seed_counts: tuple[int, ...], timed_steps: dict | None,
               rounds: int, return_seeds: int, config: Any | None) -> dict:
    config = default_config(algorithm) if config is None else config
    steps = (timed_steps or TIMED_STEPS[algorithm])
    out: dict[str, Any] = {"env": ENVS[algorithm], "preset_source": SOURCES[algorithm],
                           "normalize_observations": NORMALIZE_OBSERVATIONS[algorithm],
                           "rljax_normalize_observations":
                               RLJAX_NORMALIZE_OBSERVATIONS[algorithm],
                           "steps_per_update": config.steps_per_update,
                           "config": _config_dict(config),
                           "matched": dict(MATCHED[algorithm]), "sizes": []}
    try:
        for num_seeds in seed_counts:
            num_updates = max(1, steps[num_seeds] // config.steps_per_update)
            out["sizes"].append(_timed(algorithm, config, num_seeds, num_updates, rounds))
        out["min_ratio"] = min(s["ratio"] for s in out["sizes"]) if out["sizes"] else None
        out["min_ratio_matched"] = (min(s["ratio_matched"] for s in out["sizes"])
                                    if out["sizes"] else None)
        out["returns"] = _returns(algorithm, config, return_seeds) if return_seeds else None
    except Exception as err:  # a side that cannot run here: recorded, not fatal
        out["error"] = f"{type(err).__name__}: {err}"
    return out


def _config_dict(config: Any) -> dict:
    import dataclasses

    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}


def run(*, algorithms: tuple[str, ...] = ALGORITHMS,
        seed_counts: tuple[int, ...] = SEED_COUNTS,
        timed_steps: dict[str, dict[int, int]] | None = None, rounds: int | None = None,
        return_seeds: int | None = None, configs: dict[str, Any] | None = None) -> dict:
    """Per algorithm: compile the three sides per seed count, time alternating rounds,
    then train rljax's and rejax's for the returns; a JSON-able dict.

    Args:
      algorithms: any of ``dqn``, ``pqn``, ``sac``.
      seed_counts: the S of the throughput table.
      timed_steps: ``{algorithm: {S: env steps per seed of a timed run}}`` (default
        :data:`TIMED_STEPS`).
      rounds: alternating timed rounds (default ``RLJAX_BENCH_ROUNDS`` or 9).
      return_seeds: seeds of the returns at the config's full budget (default
        ``RLJAX_BENCH_RETURN_SEEDS`` or 16); 0 skips the returns.
      configs: ``{algorithm: config}`` replacing the default config (e.g. a smaller
        ``total_steps`` for a quick check).

    Raises:
      ValueError: an unknown algorithm name.
    """
    unknown = sorted(set(algorithms) - set(ALGORITHMS))
    if unknown:
        raise ValueError(f"algorithms: unknown {unknown}; choose from {list(ALGORITHMS)}")
    if rounds is None:
        rounds = int(os.environ.get("RLJAX_BENCH_ROUNDS", ROUNDS))
    if return_seeds is None:
        return_seeds = int(os.environ.get("RLJAX_BENCH_RETURN_SEEDS", RETURN_SEEDS))
    configs = configs or {}
    with blas_threads(1):  # as every rljax command runs (rljax.cpu_threads)
        result: dict[str, Any] = {"blas_threads": current_blas_threads(), "rounds": rounds,
                                  "algorithms": {}}
        for name in algorithms:
            result["algorithms"][name] = _algorithm(
                name, seed_counts, (timed_steps or {}).get(name), rounds, return_seeds,
                configs.get(name))
    return result


def _fmt_interval(value: float | None, ci) -> str:
    if value is None:
        return "n/a"
    return f"{value:.4g} [{ci[0]:.4g}, {ci[1]:.4g}]"


def table(result: dict) -> str:
    """Markdown tables of the ratios (rejax's median time over rljax's; > 1: rljax
    faster) and of both sides' final returns, per algorithm."""
    lines = [f"Off-policy trainers, rljax vs rejax 0.1.3: env steps/s including training "
             f"(median of {result['rounds']} alternating rounds; compile seconds "
             "separately)", "",
             "| algorithm | env | seeds | updates | rljax steps/s | rejax steps/s | ratio | "
             "ratio, rejax's semantics | rljax / rejax compile s |",
             "|---|---|---|---|---|---|---|---|---|"]

    def with_rounds(s, name):
        low, high = s[f"{name}_rounds_median"]["ci"]
        return f"{s[name]:.2f} ({s[f'{name}_rounds_median']['median']:.2f} [{low:.2f}, {high:.2f}])"

    notes = []
    for name, algo in result["algorithms"].items():
        for s in algo["sizes"]:
            lines.append(
                f"| {name} | {algo['env']} | {s['seeds']} | {s['updates']} | "
                f"{s['rljax_steps_per_second']:,.0f} | {s['rejax_steps_per_second']:,.0f} | "
                f"{with_rounds(s, 'ratio')} | {with_rounds(s, 'ratio_matched')} | "
                f"{s['rljax_compile_seconds']:.1f} / {s['rejax_compile_seconds']:.1f} |")
        if "error" in algo:
            notes.append(f"{name}: could not run: {algo['error']}")
    lines += ["", "ratio: of the median times, rejax's over rljax's (> 1: rljax faster); in "
              "brackets the median of the rounds' own ratios with its exact 95 % "
              "order-statistic interval. rejax's semantics: rljax with "
              + "; ".join(f"{n} {a['matched']}" for n, a in result["algorithms"].items())]
    lines += notes
    rows = [(n, a) for n, a in result["algorithms"].items() if a.get("returns")]
    if rows:
        lines += ["", "Final return: mean return of the training episodes finished in the final "
                  "window, per seed; IQM over seeds [95 % interval]; unpaired comparison "
                  "(no shared keys)", "",
                  "| algorithm | env | seeds | steps per seed | final window (updates) | "
                  "rljax IQM | rejax IQM | each IQM in the other's interval | P(rljax > "
                  "rejax) [95 % CI] | Mann-Whitney p |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for name, algo in rows:
            r = algo["returns"]
            c = r["comparison"]
            poi = (f"{c['probability_of_improvement']:.2f} [{c['ci'][0]:.2f}, "
                   f"{c['ci'][1]:.2f}]" if c else "n/a")
            pvalue = f"{c['pvalue']:.3g}" if c else "n/a"
            lines.append(
                f"| {name} | {algo['env']} | {r['seeds']} | {r['env_steps_per_seed']:,} | "
                f"{r['final_updates']:,} of {r['updates']:,} | "
                f"{_fmt_interval(r['rljax']['iqm'], r['rljax']['ci'])} | "
                f"{_fmt_interval(r['rejax']['iqm'], r['rejax']['ci'])} | "
                f"{r['each_within_other']} | {poi} | {pvalue} |")
    if "pqn" in result["algorithms"]:
        lines += ["", "purejaxql's published PQN CartPole result: a plot only (README, "
                  "docs/cart_pole_time.png: test returns reach 500 within seconds); no "
                  "number is published in its text"]
    return "\n".join(lines)
