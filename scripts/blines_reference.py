"""gymnax-blines' published PPO figures, read from its logs and re-run by its own code.

gymnax's README quotes one return per environment with a link to gymnax-blines (Lange,
https://github.com/RobertTLange/gymnax-blines), e.g. Pendulum-v1 "PPO, ES (R: -130)" and
Breakout-MinAtar "PPO (R: 28)". Beside each ``agents/<env>/<algo>.yaml`` the repository
keeps the run's log, ``agents/<env>/<algo>.pkl`` (``log_steps``, ``log_return``: the mean
return of 164 sampled test rollouts at each evaluation, one seed, ``seed_id`` 0). This
script reads those logs and re-runs the PPO configuration with gymnax-blines' own code
over several seeds, so the ``ppo`` study compares against what the configuration
actually gives, not against one quoted number. Nothing of gymnax-blines is copied here;
both commands take a checkout of its repository (not on PyPI)::

    git clone https://github.com/RobertTLange/gymnax-blines /tmp/gymnax-blines
    python scripts/blines_reference.py logs --source /tmp/gymnax-blines
    python scripts/blines_reference.py run --source /tmp/gymnax-blines --env Pendulum-v1 \
        --seeds 8 --out docs/figures/blines_ppo_Pendulum-v1.json
    python scripts/blines_reference.py run --source /tmp/gymnax-blines --env Pendulum-v1 \
        --seeds 8 --first-seed 8 --extend docs/figures/blines_ppo_Pendulum-v1.json --out FILE

``logs`` prints, per ``agents/*/*.pkl``, the final, best and last-five-mean evaluation
return and the configuration's learning rate. The pickles are read with an unpickler
that only rebuilds numpy arrays and ``OrderedDict``; every other class they name
(``dotmap.DotMap``, flax's ``FrozenDict``) becomes a plain dict and nothing else is
imported or called.

``run`` imports ``utils/ppo.py`` and ``utils/models.py`` from the checkout and calls their
``get_model_ready`` and ``train_ppo`` (seeded as its ``train.py`` does:
``PRNGKey(seed)``, split once for the init) with the yaml's ``train_config``; per seed the
last evaluation (164 sampled test rollouts of the final parameters) is the final return.
Shims, all outside gymnax-blines' files: ``evosax`` (imported by ``utils/models.py``, used
only by its ES agents) is a stub, and ``gymnax.make`` hands out the env wrapped in gymnax
1.0.1's ``LegacyStepAPIWrapper`` (gymnax-blines unpacks the five-value step of gymnax <
1.0; the wrapper folds ``truncated`` into ``done``, which is what gymnax < 1.0 returned).
Needs ``tfp-nightly`` (its JAX substrate, for gymnax-blines' distributions) and
``pyyaml``. The summary holds every seed's final return and learning curve, and their IQM
with the interval of :func:`rljax.stats.reported.reported_interval`. ``--first-seed`` and
``--extend`` add seeds to an earlier run of the same config: the written summary keeps
its seeds' records as they were and recomputes the IQM over all (overlapping seeds are
refused before anything trains).

``compare`` sets a ``ppo`` study run (its ``summary.json``) beside such a re-run::

    python scripts/blines_reference.py compare --rljax results/ppo/summary.json \
        --blines docs/figures/blines_ppo_Pendulum-v1.json --out FILE

Both finals are the same kind (per seed, the mean return of sampled test rollouts of the
final policy: gymnax-blines' 164, the study's ``eval_episodes``); the seeds of the two
are unrelated, so the comparison is unpaired: the probability that a random rljax seed
beats a random gymnax-blines seed with its stratified-bootstrap interval
(:func:`rljax.stats.probability_of_improvement_ci`), the two-sided Mann-Whitney U test, and
each side's IQM interval.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np

#: Globals the log unpickler rebuilds; any other becomes a :class:`_Placeholder`.
_ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"), ("numpy", "dtype"), ("collections", "OrderedDict"),
}


class _Placeholder(dict):
    """Stands in for a class of a log pickle that is not allowed (kept as its state)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def __setstate__(self, state: Any) -> None:
        self.update(state if isinstance(state, dict) else {"state": state})


class _LogUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED_GLOBALS:
            return super().find_class(module, name)
        return _Placeholder


def read_log(path: str | os.PathLike) -> dict[str, Any]:
    """One gymnax-blines log pickle as plain data.

    Args:
      path: an ``agents/<env>/<algo>.pkl`` file.

    Returns:
      ``{"steps": int64 [E], "returns": float64 [E], "train_config": dict}``: the env steps
      and mean evaluation return of each of the ``E`` evaluations, and the run's
      configuration (a dict; empty if the pickle holds none).

    Raises:
      ValueError: one line naming the file if it holds no ``log_steps`` / ``log_return``.
    """
    with open(path, "rb") as f:
        data = _LogUnpickler(f).load()
    if not isinstance(data, dict) or "log_return" not in data or "log_steps" not in data:
        raise ValueError(f"{path}: not a gymnax-blines log (needs log_steps and log_return)")
    config = data.get("train_config", {})
    return {"steps": np.asarray(data["log_steps"], np.int64),
            "returns": np.asarray(data["log_return"], np.float64),
            "train_config": {k: v for k, v in dict(config).items() if not k.startswith("_")}}


def log_summary(path: str | os.PathLike) -> dict[str, Any]:
    """``{"final", "best", "last5_mean", "steps", "evaluations", "learning_rate",
    "seed_id"}`` of one log (:func:`read_log`)."""
    log = read_log(path)
    returns = log["returns"]
    config = log["train_config"]
    return {"final": float(returns[-1]), "best": float(returns.max()),
            "last5_mean": float(returns[-5:].mean()), "steps": int(log["steps"][-1]),
            "evaluations": int(returns.size), "learning_rate": config.get("lr_begin"),
            "seed_id": config.get("seed_id")}


def all_logs(source: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """:func:`log_summary` of every ``agents/*/*.pkl`` with a log, keyed
    ``"<env>/<file>"`` (``speed.pkl`` files, which hold timings, are skipped)."""
    out = {}
    for path in sorted(Path(source, "agents").glob("*/*.pkl")):
        try:
            out[f"{path.parent.name}/{path.name}"] = log_summary(path)
        except ValueError:
            continue
    return out


def _install_shims() -> None:
    """Stub ``evosax``; make ``gymnax.make`` return the five-value legacy wrapper."""
    import gymnax
    from gymnax.wrappers import LegacyStepAPIWrapper

    sys.modules.setdefault("evosax", types.SimpleNamespace(NetworkMapper={}))
    if getattr(gymnax.make, "_rljax_legacy", False):
        return
    gymnax_make = gymnax.make

    class Legacy(LegacyStepAPIWrapper):
        def __deepcopy__(self, memo):
            return self

    def make(env_id, **kwargs):
        env, params = gymnax_make(env_id, **kwargs)
        return Legacy(env), params

    make._rljax_legacy = True
    gymnax.make = make


def run_ppo(source: str | os.PathLike, env: str, seeds: list[int],
            steps: int | None = None) -> dict[str, Any]:
    """gymnax-blines' PPO (its own code, from ``source``) on ``env`` for each seed.

    Args:
      source: a gymnax-blines checkout (``utils/``, ``agents/<env>/ppo.yaml``).
      env: a gymnax id with an ``agents/<env>/ppo.yaml``.
      seeds: the ``seed_id`` values.
      steps: overrides ``num_train_steps`` (default: the yaml's).

    Returns:
      a JSON-able dict: the config, per seed ``final`` (last evaluation), ``curve``,
      ``curve_steps`` and ``seconds``, and the finals' IQM with its interval.

    Raises:
      ValueError: one line when ``source`` has no ``agents/<env>/ppo.yaml``.
    """
    import jax
    import yaml

    config_path = Path(source, "agents", env, "ppo.yaml")
    if not config_path.is_file():
        have = sorted(p.parent.name for p in Path(source, "agents").glob("*/ppo.yaml"))
        raise ValueError(f"env: {config_path} does not exist; gymnax-blines has PPO configs "
                         f"for {', '.join(have)}")
    _install_shims()
    sys.path.insert(0, str(Path(source).resolve()))
    from utils.models import get_model_ready
    from utils.ppo import train_ppo

    train_config = yaml.safe_load(config_path.read_text())["train_config"]
    if steps is not None:
        train_config["num_train_steps"] = steps
    per_seed = {}
    for seed in seeds:
        config = types.SimpleNamespace(**train_config, seed_id=seed)
        rng = jax.random.PRNGKey(seed)
        rng, rng_init = jax.random.split(rng)
        model, params = get_model_ready(rng_init, config)
        start = time.perf_counter()
        log_steps, log_return, _ = train_ppo(rng, config, model, params, None)
        per_seed[str(seed)] = {"final": float(log_return[-1]),
                               "curve": [float(x) for x in log_return],
                               "curve_steps": [int(s) for s in log_steps],
                               "seconds": time.perf_counter() - start}
        print(f"seed {seed}: final {per_seed[str(seed)]['final']:.1f} "
              f"({per_seed[str(seed)]['seconds']:.0f} s)", flush=True)
    return summarise(env, train_config, per_seed)


def extend_run(earlier: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    """One summary of two ``run`` results of the same env and configuration over disjoint
    seeds (e.g. seeds 0..15, then 16..31): every seed's record kept as it was, the IQM and
    its interval recomputed over all of them.

    Raises:
      ValueError: one line when the envs or configurations differ or a seed is in both.
    """
    if earlier["env"] != later["env"]:
        raise ValueError(f"--extend: its env is {earlier['env']}, this run's {later['env']}")
    if earlier["train_config"] != later["train_config"]:
        raise ValueError("--extend: its train_config differs from this run's (same yaml and "
                         "--steps needed)")
    both = shared_seeds(earlier, map(int, later["per_seed"]))
    if both:
        raise ValueError(f"--extend: seeds {', '.join(map(str, both))} are in both runs; "
                         "pick --first-seed past its last seed")
    per_seed = {**earlier["per_seed"], **later["per_seed"]}
    return summarise(later["env"], later["train_config"], per_seed)


def shared_seeds(run: dict[str, Any], seeds: Any) -> list[int]:
    """The seeds of ``seeds`` (ints) that ``run`` (a ``run`` result) already holds, sorted."""
    return sorted(set(map(int, run.get("per_seed", {}))) & set(seeds))


def summarise(env: str, train_config: dict[str, Any],
              per_seed: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The JSON-able result of :func:`run_ppo` from its per-seed records (keys: the seeds
    as strings): seeds in increasing order, their finals, and with two or more the finals'
    IQM with its interval."""
    import jax

    per_seed = {k: per_seed[k] for k in sorted(per_seed, key=int)}
    finals = np.array([r["final"] for r in per_seed.values()])
    out: dict[str, Any] = {"env": env, "source": "gymnax-blines utils/ppo.py (train_ppo), "
                           f"agents/{env}/ppo.yaml", "train_config": train_config,
                           "seeds": [int(k) for k in per_seed], "per_seed": per_seed,
                           "finals": finals.tolist()}
    if finals.size >= 2:
        from rljax.stats.reported import reported_interval

        ci = reported_interval("iqm", finals, key=jax.random.key(0), reps=2000)
        out.update(final_iqm=float(ci.point), final_ci=[float(ci.low), float(ci.high)],
                   interval_note=ci.note)
    return out


def compare(rljax_summary: dict[str, Any], blines_run: dict[str, Any],
            reps: int = 2000, coverage_trials: int = 0) -> dict[str, Any]:
    """The unpaired comparison of a ``ppo`` study summary's sampled test returns with a
    :func:`run_ppo` result (module docstring).

    Args:
      rljax_summary: a ``ppo`` study ``summary.json`` (with ``eval_returns_sampled``).
      blines_run: a :func:`run_ppo` result (``finals``).
      reps: bootstrap resamples.
      coverage_trials: when > 0, also measure the probability-of-improvement interval's
        coverage at these sample sizes (:func:`poi_coverage`; ``"coverage"`` in it).

    Returns:
      ``{"env", "rljax": {"seeds", "iqm", "ci"}, "blines": {...},`` (each side's IQM
      interval as its file states it),
      "probability_of_improvement": {"point", "low", "high"}, "mann_whitney_p"}``.

    Raises:
      ValueError: one line when the envs differ or the summary has no test returns.
    """
    import jax

    from rljax import stats
    from rljax.stats.reported import reported_interval

    if rljax_summary.get("env") != blines_run.get("env"):
        raise ValueError(f"--blines: its env {blines_run.get('env')!r} is not the run's "
                         f"{rljax_summary.get('env')!r}")
    if not rljax_summary.get("eval_returns_sampled"):
        raise ValueError("--rljax: the summary has no eval_returns_sampled (run the study "
                         "with eval_episodes > 0)")
    ours = np.asarray(rljax_summary["eval_returns_sampled"], np.float64)
    theirs = np.asarray(blines_run["finals"], np.float64)
    out: dict[str, Any] = {"env": rljax_summary["env"],
                           "rljax_hyperparameters": rljax_summary.get("hyperparameters"),
                           "blines_source": blines_run.get("source")}
    # each side's IQM interval as its own file states it (the study's, the re-run's)
    out["rljax"] = {"seeds": int(ours.size), "iqm": rljax_summary["eval_return_sampled_iqm"],
                    "ci": rljax_summary["eval_return_sampled_ci"]}
    if "final_iqm" not in blines_run:
        ci = reported_interval("iqm", theirs, key=jax.random.key(2), reps=reps)
        blines_run = {**blines_run, "final_iqm": float(ci.point),
                      "final_ci": [float(ci.low), float(ci.high)]}
    out["blines"] = {"seeds": int(theirs.size), "iqm": blines_run["final_iqm"],
                     "ci": blines_run["final_ci"]}
    poi = stats.probability_of_improvement_ci(ours, theirs, key=jax.random.key(3), reps=reps)
    out["probability_of_improvement"] = {"point": float(poi.point), "low": float(poi.low),
                                         "high": float(poi.high)}
    out["mann_whitney_p"] = float(stats.mann_whitney_u(ours, theirs).pvalue)
    if coverage_trials:
        out["probability_of_improvement"]["coverage"] = poi_coverage(
            ours, theirs, coverage_trials, reps)
    return out


def poi_coverage(ours: np.ndarray, theirs: np.ndarray, trials: int,
                 reps: int = 2000) -> dict[str, Any]:
    """How often :func:`compare`'s probability-of-improvement interval covers the truth at
    these sample sizes (``m = ours.size``, ``n = theirs.size``), on two kinds of data whose
    truth is exact:

    * ``observed``: ``m`` and ``n`` draws with replacement from the two observed samples;
      the truth is their empirical ``P(X > Y) + P(X = Y) / 2`` over all ``m n`` pairs;
    * ``normal``: ``N(d, 1)`` against ``N(0, 1)`` with ``d = sqrt(2) Phi^-1(p)``, ``p`` the
      observed point estimate, so the truth is ``p`` itself.

    Returns ``{"trials", "observed", "normal", "truth_observed", "truth_normal"}``
    (coverages in [0, 1]; Monte Carlo standard error about ``sqrt(0.05 0.95 / trials)``).
    """
    import jax
    from scipy import stats as scipy_stats

    from rljax import stats

    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    diff = ours[:, None] - theirs[None, :]
    truth_observed = float(np.mean(diff > 0) + 0.5 * np.mean(diff == 0))
    point = truth_observed
    shift = float(np.sqrt(2.0) * scipy_stats.norm.ppf(np.clip(point, 1e-6, 1 - 1e-6)))
    rng = np.random.default_rng(0)
    kinds = {"observed": (lambda: rng.choice(ours, ours.size), lambda: rng.choice(theirs,
                                                                               theirs.size),
                          truth_observed),
             "normal": (lambda: rng.normal(shift, 1.0, ours.size),
                        lambda: rng.normal(0.0, 1.0, theirs.size), point)}
    out: dict[str, Any] = {"trials": int(trials), "truth_observed": truth_observed,
                           "truth_normal": point}
    for name, (draw_ours, draw_theirs, truth) in kinds.items():
        hits = 0
        for trial in range(trials):
            ci = stats.probability_of_improvement_ci(draw_ours(), draw_theirs(),
                                                     key=jax.random.key(trial), reps=reps)
            hits += int(float(ci.low) <= truth <= float(ci.high))
        out[name] = hits / trials
    return out


def _write_json(path: str, data: dict[str, Any], overwrite: bool) -> None:
    """Write ``data`` to ``path`` atomically (:func:`rljax.io.write_json`: a temp file
    replaced into place, readable as the umask allows), refusing an existing file unless
    ``overwrite``."""
    from rljax.io import write_json

    if os.path.exists(path) and not overwrite:
        raise SystemExit(f"--out: {path} exists; pass --overwrite to replace it")
    write_json(path, data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    logs = sub.add_parser("logs", help="summarise agents/*/*.pkl")
    logs.add_argument("--source", required=True, help="a gymnax-blines checkout")
    run = sub.add_parser("run", help="re-run a PPO config with gymnax-blines' code")
    run.add_argument("--source", required=True, help="a gymnax-blines checkout")
    run.add_argument("--env", required=True)
    run.add_argument("--seeds", type=int, default=8,
                     help="how many seeds: FIRST .. FIRST + N - 1 (>= 1)")
    run.add_argument("--first-seed", type=int, default=0, help="FIRST (>= 0; default 0)")
    run.add_argument("--extend", default=None,
                     help="an earlier `run` JSON (same env and config, other seeds) whose "
                          "seeds the written summary keeps beside these")
    run.add_argument("--steps", type=int, default=None)
    run.add_argument("--out", default=None, help="JSON file to write (atomically)")
    run.add_argument("--overwrite", action="store_true")
    cmp = sub.add_parser("compare", help="a ppo study run vs a gymnax-blines re-run")
    cmp.add_argument("--rljax", required=True, help="a ppo study summary.json")
    cmp.add_argument("--blines", required=True, help="a JSON written by `run`")
    cmp.add_argument("--out", default=None, help="JSON file to write (atomically)")
    cmp.add_argument("--coverage-trials", type=int, default=0,
                     help="also measure the P(rljax > gymnax-blines) interval's coverage at "
                          "these sample sizes over K simulated comparisons (0: skip)")
    cmp.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "compare":
        try:
            if args.coverage_trials < 0:
                raise ValueError(f"--coverage-trials: must be >= 0, got {args.coverage_trials}")
            result = compare(json.loads(Path(args.rljax).read_text()),
                             json.loads(Path(args.blines).read_text()),
                             coverage_trials=args.coverage_trials)
        except (OSError, ValueError) as err:
            parser.exit(2, f"{err}\n")
        poi = result["probability_of_improvement"]
        print(f"{result['env']}: rljax IQM {result['rljax']['iqm']:.4g} "
              f"{result['rljax']['ci']}, gymnax-blines IQM {result['blines']['iqm']:.4g} "
              f"{result['blines']['ci']}; P(rljax > gymnax-blines) {poi['point']:.2f} "
              f"[{poi['low']:.2f}, {poi['high']:.2f}], Mann-Whitney p "
              f"{result['mann_whitney_p']:.3g}")
        if "coverage" in poi:
            cov = poi["coverage"]
            print(f"that interval's coverage over {cov['trials']} simulated comparisons of "
                  f"the same sizes: {cov['observed']:.3f} (resampling the observed), "
                  f"{cov['normal']:.3f} (normal, same P)")
        if args.out:
            _write_json(args.out, result, args.overwrite)
        return 0
    if not Path(args.source, "agents").is_dir():
        parser.exit(2, f"--source: {args.source} is not a gymnax-blines checkout (no agents/)\n")
    if args.command == "logs":
        for name, s in all_logs(args.source).items():
            print(f"{name}: final {s['final']:.4g}, best {s['best']:.4g}, last-5 mean "
                  f"{s['last5_mean']:.4g} at {s['steps']:,} steps (lr {s['learning_rate']}, "
                  f"seed {s['seed_id']})")
        return 0
    if args.seeds < 1:
        parser.exit(2, f"--seeds: must be >= 1, got {args.seeds}\n")
    if args.first_seed < 0:
        parser.exit(2, f"--first-seed: must be >= 0, got {args.first_seed}\n")
    earlier = None
    if args.extend is not None:
        try:
            earlier = json.loads(Path(args.extend).read_text())
        except (OSError, ValueError) as err:
            parser.exit(2, f"--extend: {err}\n")
        clash = shared_seeds(earlier, range(args.first_seed, args.first_seed + args.seeds))
        if clash:  # refused before hours of training (extend_run checks the result again)
            parser.exit(2, f"--extend: seeds {clash} are in {args.extend} already; "
                           "pick --first-seed past its last seed\n")
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    try:
        result = run_ppo(args.source, args.env, seeds, args.steps)
        if earlier is not None:
            result = extend_run(earlier, result)
    except ValueError as err:
        parser.exit(2, f"{err}\n")
    if "final_iqm" in result:
        low, high = result["final_ci"]
        print(f"{args.env}: final return IQM {result['final_iqm']:.4g} [{low:.4g}, {high:.4g}] "
              f"over {len(result['seeds'])} seeds")
    if args.out:
        _write_json(args.out, result, args.overwrite)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
