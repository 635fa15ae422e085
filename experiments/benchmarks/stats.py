"""``rljax bench stats``: rljax.stats vs rliable 1.2.0 on the same data, in the same run.

Two workloads on 8 tasks x {10, 100, 1000} runs with 2000 bootstrap resamples:

* IQM CI: ``rljax.stats.interval_estimates(..., "iqm")`` vs
  ``rliable.library.get_interval_estimates(..., aggregate_iqm)``;
* probability of improvement CI (two independent algorithms):
  ``rljax.stats.probability_of_improvement_ci`` vs rliable's
  ``get_interval_estimates`` over ``[x, y]`` with ``probability_of_improvement``.

Both sides are timed end to end (Python overhead included) after a warm-up call (rljax's
compile time is reported separately). The sides alternate over several rounds and the
ratio is of the medians, because back-to-back timings on this machine vary by up to 70 %.
rliable needs ~12 s per probability-of-improvement CI at 1000 runs, so that size uses
fewer rounds (see ``ROUNDS``). ``rng_fraction`` is the share of rljax's IQM CI time spent
only drawing the resample indices (the same indices, from the same chunked keys), the
floor no bootstrap algorithm can go below.

Requires the dev extra (rliable).
"""

from __future__ import annotations

import functools
import logging
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from rljax import stats
from rljax.stats.bootstrap import map_chunks
from rljax.stats.intervals import algorithm_key, stratified_flat_indices

SIZES = (10, 100, 1000)
TASKS = 8
REPS = 2000
# (IQM rounds, probability-of-improvement rounds) per number of runs.
ROUNDS = {10: (7, 4), 100: (7, 4), 1000: (5, 2)}


def _import_rliable():
    """Imports rliable 1.2.0 under pandas 3 (see tests/test_stats_vs_rliable.py)."""
    import pandas.util._decorators as decorators

    original = decorators.deprecate_kwarg

    def compatible(*args, **kwargs):
        if args and isinstance(args[0], str):
            args = (FutureWarning, *args)
        return original(*args, **kwargs)

    decorators.deprecate_kwarg = compatible
    try:
        from rliable import library, metrics
    except ImportError as err:
        raise RuntimeError("rljax bench stats needs rliable: pip install -e '.[dev]'") from err
    finally:
        decorators.deprecate_kwarg = original
    logging.getLogger("absl").setLevel(logging.WARNING)
    return library, metrics


@functools.partial(jax.jit, static_argnames=("num_runs", "num_tasks", "reps"))
def _draw_only(key, num_runs, num_tasks, reps):
    """Draws exactly the resample indices of the IQM CI and reduces them (materialised)."""

    def chunk_fn(chunk_key, chunk):
        flat = stratified_flat_indices(chunk_key, num_runs, num_tasks, chunk)
        return jnp.sum(flat, axis=(1, 2))

    return map_chunks(chunk_fn, key, reps, num_runs * num_tasks)


def _time(fn) -> float:
    start = time.perf_counter()
    out = fn()
    jax.block_until_ready(out) if isinstance(out, jax.Array) else None
    return time.perf_counter() - start


def run() -> dict:
    """Times both libraries; returns JSON-able figures (seconds, ratios rliable/rljax)."""
    rly, rmetrics = _import_rliable()
    rng = np.random.default_rng(0)
    key = jax.random.key(0)
    result = {"iqm_ci_ratio": {}, "poi_ratio": {}, "rng_fraction": {},
              "seconds": {}, "compile_seconds": {}, "rounds": {}, "tasks": TASKS, "reps": REPS,
              "devices": str(jax.devices()), "method": "median over alternating rounds"}

    def iqm_fn(scores):
        return np.array([rmetrics.aggregate_iqm(scores)])

    def poi_fn(a, b):
        return np.array([rmetrics.probability_of_improvement(a, b)])

    for n in SIZES:
        x = rng.normal(size=(n, TASKS))
        y = rng.normal(0.2, 1.0, size=(n, TASKS))
        iqm_rounds, poi_rounds = ROUNDS[n]
        ours = {
            "iqm": lambda x=x: stats.interval_estimates({"a": x}, "iqm", key=key, reps=REPS),
            "poi": lambda x=x, y=y: stats.probability_of_improvement_ci(x, y, key=key,
                                                                        reps=REPS),
            "rng": lambda n=n: _draw_only(algorithm_key(key, "a"), n, TASKS, REPS),
        }
        theirs = {
            "iqm": lambda x=x: rly.get_interval_estimates({"a": x}, iqm_fn, reps=REPS),
            "poi": lambda x=x, y=y: rly.get_interval_estimates({"p": [x, y]}, poi_fn,
                                                               reps=REPS),
        }
        compile_s = {name: _time(fn) for name, fn in ours.items()}  # first call compiles
        theirs["iqm"]()  # warm rliable/arch/scipy code paths too
        times = {f"rljax_{k}": [] for k in ours} | {f"rliable_{k}": [] for k in theirs}
        for r in range(max(iqm_rounds, poi_rounds)):
            for work, rounds in (("iqm", iqm_rounds), ("poi", poi_rounds)):
                if r >= rounds:
                    continue
                times[f"rljax_{work}"].append(_time(ours[work]))
                times[f"rliable_{work}"].append(_time(theirs[work]))
            times["rljax_rng"].append(_time(ours["rng"]))
        med = {k: statistics.median(v) for k, v in times.items()}
        s = str(n)
        result["iqm_ci_ratio"][s] = med["rliable_iqm"] / med["rljax_iqm"]
        result["poi_ratio"][s] = med["rliable_poi"] / med["rljax_poi"]
        result["rng_fraction"][s] = min(1.0, med["rljax_rng"] / med["rljax_iqm"])
        result["seconds"][s] = med
        result["compile_seconds"][s] = compile_s
        result["rounds"][s] = {"iqm": iqm_rounds, "poi": poi_rounds}
    return result


TARGETS = {"iqm_ci_ratio": {"10": 20, "100": 20, "1000": 2},
           "poi_ratio": {"10": 100, "100": 100, "1000": 20}}


def table(result: dict) -> str:
    """A printable table of the ratios, timings and targets."""
    lines = [
        f"rljax.stats vs rliable 1.2.0: {result['tasks']} tasks, reps={result['reps']}, "
        f"{result['method']}",
        f"{'runs':>6} {'IQM CI x':>9} {'(target)':>9} {'POI CI x':>9} {'(target)':>9} "
        f"{'rng share':>9} {'rljax IQM':>10} {'rliable IQM':>12} {'rljax POI':>10} "
        f"{'rliable POI':>12}",
    ]
    for s in result["iqm_ci_ratio"]:
        sec = result["seconds"][s]
        lines.append(
            f"{s:>6} {result['iqm_ci_ratio'][s]:>9.1f} {'>=' + str(TARGETS['iqm_ci_ratio'][s]):>9}"
            f" {result['poi_ratio'][s]:>9.1f} {'>=' + str(TARGETS['poi_ratio'][s]):>9}"
            f" {result['rng_fraction'][s]:>9.2f} {sec['rljax_iqm'] * 1e3:>8.1f}ms"
            f" {sec['rliable_iqm'] * 1e3:>10.1f}ms {sec['rljax_poi'] * 1e3:>8.1f}ms"
            f" {sec['rliable_poi'] * 1e3:>10.1f}ms"
        )
    rounds = ", ".join(f"{s} runs: {r['iqm']}/{r['poi']}" for s, r in result["rounds"].items())
    lines.append(f"rounds (IQM/POI): {rounds}")
    return "\n".join(lines)
