"""``rljax bench scaling``: compile time, throughput and peak memory against the seed count.

Workloads (one seed's run each, written for one seed; the sweep adds the seed axis):

* **orm-vs-prm**: the study's default per-seed run,
  ``rljax.training.chain.make_chain_train(mode="orm", episodes=400)``: 400 episodes
  of tabular REINFORCE on the 5-step ChainMDP. Outputs per seed: ``success`` bool
  ``[400]`` and ``final_logits`` ``[5, 2]``. Throughput in episodes/s. (PRM mode is the
  same program with another discount, so its shapes and memory are the same.)
* **ppo-cartpole**: ``make_ppo_train(CartPole(), mlp_actor_critic(2, (64, 64)), config)``
  with the ``ppo-cartpole`` study's hyperparameters (``Config().train_config()``: 4 envs
  x 128 steps per update, 4 epochs x 4 minibatches, ...) but ``PPO_UPDATES`` updates per
  seed (8 = 4096 env steps) instead of the study's 5e5 steps, so that thousands of seeds
  finish in minutes. Outputs per seed: per-update logs ``[U]``. Throughput in env
  steps/s. The updates are one ``lax.scan`` whose body is one update's program, so the
  per-step cost and the memory (but for the ``[U]`` logs) do not depend on the run
  length; only the one-time start (network init, env reset) is amortised over fewer
  steps than in the study. Checked at 1 and 16 seeds: 32 updates instead of 8 give the
  same XLA temp bytes (+0.05 %), compile time and env steps/s within the noise.

Method. For each seed count ``n`` in ``SEED_COUNTS`` (ascending), one block of ``n`` seeds
on one device, built exactly as ``rljax.sweep.Sweep(train, block_size=n)`` builds its
round program (seed ``i``'s key ``fold_in(key(0), i)``, ``jit(vmap(train))`` with the
1-D ``"seeds"`` sharding; a test checks the outputs are bitwise the sweep's):

1. **Compile**: ``jax.jit(block).lower(int32[n]).compile()`` on a fresh function, timed.
   Nothing else is cached unless the caller configured JAX's persistent compilation
   cache (the result records ``compilation_cache_dir``; the CLI sets none). After all
   runs, ``COMPILE_ROUNDS - 1`` more compile-only rounds alternate over the sizes (the
   skipped ones too) and the table shows the median, so load drift hits every size alike.
2. **XLA memory**: ``compiled.memory_analysis()`` -- argument + output + temp (+ generated
   code) bytes of the block program. Temp is XLA's buffer assignment, a static plan
   made before the program runs, not a measurement.
3. **Predict, then maybe skip**: the predicted peak is the larger of XLA's bytes and a
   linear fit of the RSS peaks measured at the smaller sizes. If it exceeds the memory
   ``psutil`` reports available, or the process's RSS plus it exceeds
   ``MEMORY_BUDGET_BYTES`` (24 GiB), the size is skipped with the reason and the larger
   sizes are not tried.
4. **Run**: one warm-up call, then ``ROUNDS`` timed calls (only one if the warm-up took
   over ``LONG_ROUND_SECONDS``); each call includes putting the ids on the device and
   ``block_until_ready``, not fetching outputs to numpy. Throughput = ``n`` x units per
   seed / median seconds.
5. **Measured memory**: a background thread samples the process RSS every 2 ms during
   each call (warm-up included); the peak RSS delta is the largest (peak - RSS just
   before the call) over the calls. It is noisy: the allocator keeps and reuses pages,
   the sampler can miss a short peak, a first call also maps thread pools and code, and
   below a few MB it is mostly noise. ``ru_maxrss`` growth over each size (compile
   included) is recorded in the JSON too.

Largest sweep. Memory should be ``a + b n``. XLA's bytes and the RSS deltas are each
fitted by ordinary least squares over the sizes that ran (the largest sizes dominate the
fit, which is what an extrapolation needs); the XLA fit's relative residual at every size
shows how linear it is (a 1-seed program carries a fixed few kB that a larger block
amortises, so the smallest sizes sit above the line). The largest single block that fits
is ``floor((budget - base - a) / b)`` with ``base`` the process's own RSS (Python, JAX
runtime) before the first compile; it is reported for the 24 GiB budget and for this
machine's physical memory, by both fits. The XLA budget figure is then checked by
compiling (not running) a block of that size: if XLA's bytes plus ``base`` exceed the
budget, the size is scaled down by the overshoot and checked again (XLA's bytes/seed at
millions of seeds can sit a fraction of a percent above the fitted slope). More seeds than
that still run, in successive rounds of a smaller block (``rljax run --block-size``); only
one block has to fit.

Claims checked: compile time should not grow with the seed count (the ratio of the
largest compiled size's median compile time to the smallest's, and the compile time of
the largest fitting block); memory should grow linearly (residuals above, bytes/seed per
size). Timings on the shared 2-core machine vary by up to 70 % back to back.
"""

from __future__ import annotations

import gc
import math
import resource
import statistics
import threading
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import psutil
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from experiments import ppo_cartpole
from rljax.envs import CartPole
from rljax.policies import mlp_actor_critic
from rljax.sweep import SEED_AXIS
from rljax.training.chain import make_chain_train
from rljax.training.ppo import make_ppo_train

WORKLOADS = ("orm-vs-prm", "ppo-cartpole")
SEED_COUNTS = (1, 16, 256, 4096, 65536)
ROUNDS = 3
COMPILE_ROUNDS = 3  # fresh compiles per size (the first before its runs)
LONG_ROUND_SECONDS = 20.0  # a warm-up call longer than this: one timed round only
MEMORY_BUDGET_BYTES = 24 * 2**30
CHAIN_MODE = "orm"
CHAIN_EPISODES = 400
PPO_STUDY = ppo_cartpole.Config()  # hyperparameters of the ppo-cartpole study
PPO_UPDATES = 8  # per seed in this benchmark (the study runs 976)
VERIFY_LARGEST = True  # compile (not run) the largest fitting block to check XLA's bytes
RSS_SAMPLE_SECONDS = 0.002
BASE_SEED = 0

GB = 1e9


# --------------------------------------------------------------------------------------
# Workloads and the block program.


def make_workload(name: str) -> dict[str, Any]:
    """``{"train", "units_per_seed", "unit", "description"}`` of workload ``name``."""
    if name == "orm-vs-prm":
        return {
            "train": make_chain_train(mode=CHAIN_MODE, episodes=CHAIN_EPISODES),
            "units_per_seed": CHAIN_EPISODES,
            "unit": "episodes",
            "description": f"ChainMDP(5, {CHAIN_MODE!r}) tabular REINFORCE, "
            f"{CHAIN_EPISODES} episodes/seed",
        }
    if name == "ppo-cartpole":
        study = PPO_STUDY
        batch = study.num_envs * study.num_steps
        config = study.train_config().replace(total_steps=PPO_UPDATES * batch)
        network = mlp_actor_critic(2, (study.hidden_size, study.hidden_size))
        return {
            "train": make_ppo_train(CartPole(), network, config),
            "units_per_seed": PPO_UPDATES * batch,
            "unit": "env steps",
            "description": f"PPO CartPole, {study.num_envs} envs x {study.num_steps} steps x "
            f"{PPO_UPDATES} updates = {PPO_UPDATES * batch} env steps/seed, "
            f"MLP {study.hidden_size}x{study.hidden_size}",
        }
    raise ValueError(f"workload: must be one of {', '.join(WORKLOADS)}, got {name!r}")


def _sharding() -> NamedSharding:
    mesh = Mesh(np.asarray(jax.local_devices()[:1]), (SEED_AXIS,))
    return NamedSharding(mesh, PartitionSpec(SEED_AXIS))


def compile_block(train, num_seeds: int, base_seed: int = BASE_SEED):
    """Compile the sweep's block program for ``num_seeds`` seeds on one device, as
    ``rljax.sweep.Sweep.compile`` does; returns ``(compiled, seconds)``.

    ``compiled(ids)`` maps seed ids ``int32 [n]`` to ``vmap(train)`` outputs ``[n, ...]``.
    A fresh function is traced every call, so JAX's in-memory caches never answer.
    """
    base_key = jax.random.key(base_seed)
    sharding = _sharding()

    def train_block(seed_ids):
        keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(base_key, seed_ids)
        return jax.vmap(train)(keys)

    jitted = jax.jit(train_block, in_shardings=sharding, out_shardings=sharding)
    start = time.perf_counter()
    compiled = jitted.lower(
        jax.ShapeDtypeStruct((num_seeds,), jnp.int32, sharding=sharding)).compile()
    return compiled, time.perf_counter() - start


def xla_bytes(compiled) -> dict[str, int]:
    """XLA's memory analysis of a compiled program: ``argument``, ``output``, ``temp``,
    ``generated_code`` and their ``total`` (bytes)."""
    stats = compiled.memory_analysis()
    out = {
        "argument": int(stats.argument_size_in_bytes),
        "output": int(stats.output_size_in_bytes),
        "temp": int(stats.temp_size_in_bytes),
        "generated_code": int(stats.generated_code_size_in_bytes),
    }
    out["total"] = sum(out.values())
    return out


def run_block(compiled, num_seeds: int):
    """One call of the block program on seeds ``0 .. n-1``, blocked until ready."""
    ids = jax.device_put(np.arange(num_seeds, dtype=np.int32), _sharding())
    return jax.block_until_ready(compiled(ids))


# --------------------------------------------------------------------------------------
# Memory.


def rss_bytes() -> int:
    """The process's resident set size now."""
    return int(psutil.Process().memory_info().rss)


def maxrss_bytes() -> int:
    """The process's peak RSS so far (``ru_maxrss``, KiB on Linux)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


class PeakRSS:
    """Context manager sampling the process RSS every ``interval`` seconds in a thread;
    ``.baseline`` is the RSS on entry, ``.peak`` the largest sample (entry and exit
    included) and ``.delta = peak - baseline``."""

    def __init__(self, interval: float = RSS_SAMPLE_SECONDS):
        self.interval = interval
        self._process = psutil.Process()
        self._stop = threading.Event()
        self.baseline = self.peak = 0

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def __enter__(self) -> PeakRSS:
        self.baseline = self.peak = self._process.memory_info().rss
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.peak = max(self.peak, self._process.memory_info().rss)
        self._stop.set()
        self._thread.join()

    @property
    def delta(self) -> int:
        return int(self.peak - self.baseline)


def fit_linear(ns, ys) -> tuple[float, float]:
    """Ordinary least-squares line ``y = a + b n`` through the points; returns ``(a, b)``.
    One point (or one distinct ``n``) gives the line through the origin."""
    n = np.asarray(ns, np.float64)
    y = np.asarray(ys, np.float64)
    if n.shape != y.shape or n.size == 0:
        raise ValueError(f"ns, ys: need equal non-empty lengths, got {n.size}, {y.size}")
    if np.all(n == n[0]):
        return 0.0, float(y.mean() / n[0]) if n[0] else 0.0
    design = np.stack([np.ones_like(n), n], axis=1)
    (a, b), *_ = np.linalg.lstsq(design, y, rcond=None)
    return float(a), float(b)


def relative_residuals(ns, ys, a: float, b: float) -> list[float]:
    """``(y - (a + b n)) / y`` at each point."""
    n = np.asarray(ns, np.float64)
    y = np.asarray(ys, np.float64)
    return [float(r) for r in (y - (a + b * n)) / np.abs(y)]


def largest_fitting(a: float, b: float, budget: float) -> int | None:
    """The largest ``n`` with ``a + b n <= budget`` (``floor((budget - a) / b)``); 0 if
    not even one seed fits; ``None`` if ``b <= 0`` (no per-seed growth resolved)."""
    if b <= 0:
        return None
    return max(0, math.floor((budget - a) / b))


# --------------------------------------------------------------------------------------
# Measurement.


def measure_workload(name: str, seed_counts=None) -> dict[str, Any]:
    """Compile, check memory and time one workload at each seed count (ascending); see
    the module docstring. Returns a JSON-able dict with ``rows``, ``skipped``, ``fit``."""
    seed_counts = sorted(SEED_COUNTS if seed_counts is None else seed_counts)
    workload = make_workload(name)
    train, units = workload["train"], workload["units_per_seed"]
    gc.collect()
    base_rss = rss_bytes()
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for n in seed_counts:
        maxrss_before = maxrss_bytes()
        compiled, compile_s = compile_block(train, n)
        xla = xla_bytes(compiled)
        predicted, basis = xla["total"], "XLA"
        rss_prediction = None
        if len(rows) >= 2:
            a, b = fit_linear([r["seeds"] for r in rows], [r["rss_peak_delta"] for r in rows])
            rss_prediction = max(0.0, a + b * n)
            if rss_prediction > predicted:
                predicted, basis = rss_prediction, "RSS fit"
        available = int(psutil.virtual_memory().available)
        current = rss_bytes()
        limit = min(available, MEMORY_BUDGET_BYTES - current)
        if predicted > limit:
            skipped.append({
                "seeds": n, "compile_seconds": [compile_s], "xla_bytes": xla,
                "predicted_bytes": int(predicted), "rss_fit_prediction": rss_prediction,
                "available_bytes": available, "process_rss_bytes": current,
                "budget_bytes": MEMORY_BUDGET_BYTES,
                "reason": f"skipped: predicted {predicted / GB:.1f} GB ({basis}; XLA "
                f"{xla['total'] / GB:.1f} GB) > {limit / GB:.1f} GB (available "
                f"{available / GB:.1f} GB; budget {MEMORY_BUDGET_BYTES / GB:.1f} GB - "
                f"process {current / GB:.1f} GB)",
            })
            del compiled
            break
        peaks, times = [], []
        with PeakRSS() as rss:
            start = time.perf_counter()
            out = run_block(compiled, n)  # warm-up
            warm_s = time.perf_counter() - start
        peaks.append(rss.delta)
        del out
        rounds = 1 if warm_s > LONG_ROUND_SECONDS else ROUNDS
        for _ in range(rounds):
            gc.collect()
            with PeakRSS() as rss:
                start = time.perf_counter()
                out = run_block(compiled, n)
                times.append(time.perf_counter() - start)
            peaks.append(rss.delta)
            del out
        run_s = statistics.median(times)
        rows.append({
            "seeds": n,
            "compile_seconds": [compile_s],
            "warmup_seconds": warm_s,
            "run_seconds": run_s,
            "run_seconds_all": times,
            "rounds": rounds,
            "throughput": n * units / run_s,
            "xla_bytes": xla,
            "rss_peak_delta": int(max(peaks)),
            "rss_peak_deltas": [int(p) for p in peaks],
            "maxrss_growth": maxrss_bytes() - maxrss_before,
            "xla_bytes_per_seed": xla["total"] / n,
        })
        del compiled
        gc.collect()
    # More compile-only rounds, alternating over the sizes (skipped ones included: they
    # need no memory to compile), so that load drift on the machine hits every size alike.
    for _ in range(COMPILE_ROUNDS - 1):
        for entry in rows + skipped:
            entry["compile_seconds"].append(compile_block(train, entry["seeds"])[1])
    for entry in rows + skipped:
        entry["compile_seconds_median"] = statistics.median(entry["compile_seconds"])
    return {
        "workload": name,
        "description": workload["description"],
        "unit": workload["unit"],
        "units_per_seed": units,
        "base_rss_bytes": base_rss,
        "rows": rows,
        "skipped": skipped,
        "fit": fit_summary(rows, skipped, base_rss, train),
    }


def fit_summary(rows: list[dict[str, Any]], skipped: list[dict[str, Any]], base_rss: int,
                train=None) -> dict[str, Any]:
    """The memory fits, the largest fitting blocks and the compile-time ratio.

    With ``train`` and ``VERIFY_LARGEST``, the largest block that fits the budget by the
    XLA fit is compiled (not run) and XLA's bytes checked; if they exceed the budget, the
    size is scaled down by the overshoot and checked again (at most three times).
    """
    if not rows:
        return {}
    ns = [r["seeds"] for r in rows]
    xla = [r["xla_bytes"]["total"] for r in rows]
    rss = [r["rss_peak_delta"] for r in rows]
    xa, xb = fit_linear(ns, xla)
    ra, rb = fit_linear(ns, rss)
    machine = int(psutil.virtual_memory().total)
    budget = MEMORY_BUDGET_BYTES - base_rss
    compiled_sizes = rows + skipped
    compile_s = [r["compile_seconds_median"] for r in compiled_sizes]
    out = {
        "xla_fit": {"a": xa, "b": xb, "relative_residuals": relative_residuals(ns, xla, xa, xb)},
        "rss_fit": {"a": ra, "b": rb},
        "rss_over_xla_at_largest": rss[-1] / xla[-1],
        "budget_bytes": MEMORY_BUDGET_BYTES,
        "machine_bytes": machine,
        "base_rss_bytes": base_rss,
        "largest_block_budget_xla": largest_fitting(xa, xb, budget),
        "largest_block_budget_rss": largest_fitting(ra, rb, budget),
        "largest_block_machine_xla": largest_fitting(xa, xb, machine - base_rss),
        "largest_block_machine_rss": largest_fitting(ra, rb, machine - base_rss),
        "compile_sizes": [r["seeds"] for r in compiled_sizes],
        "compile_ratio_largest_smallest": compile_s[-1] / compile_s[0],
        "compile_seconds_min": min(compile_s),
        "compile_seconds_max": max(compile_s),
        "verified": [],
    }
    if not (VERIFY_LARGEST and train is not None):
        return out
    n_max = out["largest_block_budget_xla"]
    for _ in range(3):
        if not n_max or n_max >= 2**31:
            break
        compiled, seconds = compile_block(train, n_max)
        total = xla_bytes(compiled)["total"]
        del compiled
        fits = total + base_rss <= MEMORY_BUDGET_BYTES
        out["verified"].append({"seeds": n_max, "compile_seconds": seconds, "xla_total": total,
                                "with_base": total + base_rss, "fits_budget": fits})
        if fits:
            out["largest_block_budget_xla"] = n_max
            break
        # Scale down in proportion (conservative for a >= 0), one seed to spare.
        n_max = math.floor(n_max * budget / total) - 1
    return out


def run() -> dict:
    """The full benchmark (about 10 minutes on 2 cores, mostly PPO at 4096 seeds)."""
    return {
        "device": str(jax.devices()[0]),
        "seed_counts": list(SEED_COUNTS),
        "rounds": ROUNDS,
        "compile_rounds": COMPILE_ROUNDS,
        "memory_budget_bytes": MEMORY_BUDGET_BYTES,
        "machine_bytes": int(psutil.virtual_memory().total),
        "compilation_cache_dir": jax.config.jax_compilation_cache_dir,
        "workloads": [measure_workload(name) for name in WORKLOADS],
    }


# --------------------------------------------------------------------------------------
# Table.


def _bytes(x: float | None) -> str:
    if x is None:
        return "-"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.3g} {unit}"
    return f"{x:.0f} B"


def _count(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def table(result: dict) -> str:
    """A markdown table of the result of :func:`run`, then the fits and skipped sizes."""
    budget, machine = result["memory_budget_bytes"], result["machine_bytes"]
    lines = [
        f"rljax bench scaling on {result['device']}: one block of n seeds per size; run s = "
        f"median of up to {result['rounds']} calls after a warm-up; compile s = median of "
        f"{result.get('compile_rounds', 1)} fresh compiles; memory budget "
        f"{budget / 2**30:.0f} GiB = {budget / GB:.1f} GB (machine {machine / GB:.1f} GB); "
        "GB = 1e9 bytes",
        "",
        "| workload | seeds | compile s | run s (median) | throughput | XLA bytes | "
        "peak RSS delta | bytes/seed (XLA) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for w in result["workloads"]:
        for r in w["rows"]:
            lines.append(
                f"| {w['workload']} | {r['seeds']:,} | {r['compile_seconds_median']:.2f} | "
                f"{r['run_seconds']:.4g} | {r['throughput']:,.0f} {w['unit']}/s | "
                f"{_bytes(r['xla_bytes']['total'])} | {_bytes(r['rss_peak_delta'])} | "
                f"{_bytes(r['xla_bytes_per_seed'])} |")
        for s in w["skipped"]:
            lines.append(
                f"| {w['workload']} | {s['seeds']:,} | {s['compile_seconds_median']:.2f} | "
                f"skipped | - | {_bytes(s['xla_bytes']['total'])} | - | "
                f"{_bytes(s['xla_bytes']['total'] / s['seeds'])} |")
    lines.append("")
    for w in result["workloads"]:
        f = w["fit"]
        lines.append(f"{w['workload']}: {w['description']}")
        if not f:
            lines.append("  no size ran")
            continue
        xf, rf = f["xla_fit"], f["rss_fit"]
        residuals = ", ".join(f"{r['seeds']:,}: {100 * e:+.2g} %" for r, e in
                              zip(w["rows"], xf["relative_residuals"], strict=True))
        lines.append(
            f"  memory, least squares: XLA {_bytes(xf['a'])} + {_bytes(xf['b'])}/seed "
            f"(relative residuals {residuals}); RSS {_bytes(rf['a'])} + "
            f"{_bytes(rf['b'])}/seed; RSS/XLA at the largest size "
            f"{f['rss_over_xla_at_largest']:.2f}")
        lines.append(
            f"  largest sweep in one block (memory minus the process's own "
            f"{_bytes(f['base_rss_bytes'])}): {budget / 2**30:.0f} GiB budget "
            f"{_count(f['largest_block_budget_xla'])} seeds by XLA, "
            f"{_count(f['largest_block_budget_rss'])} by RSS; this machine's "
            f"{machine / GB:.1f} GB {_count(f['largest_block_machine_xla'])} by XLA, "
            f"{_count(f['largest_block_machine_rss'])} by RSS")
        for v in f["verified"]:
            lines.append(
                f"  compiled a block of {v['seeds']:,} seeds: XLA {_bytes(v['xla_total'])} + "
                f"process {_bytes(f['base_rss_bytes'])} = {_bytes(v['with_base'])} "
                f"({'fits' if v['fits_budget'] else 'does NOT fit'} the budget), compile "
                f"{v['compile_seconds']:.2f} s")
        sizes = w["rows"] + w["skipped"]
        beyond_one = ""
        if len(sizes) >= 3 and sizes[0]["seeds"] == 1:  # 1 seed: degenerate batch axis
            ratio = sizes[-1]["compile_seconds_median"] / sizes[1]["compile_seconds_median"]
            beyond_one = f"; from {sizes[1]['seeds']:,} seeds on {ratio:.2f}x"
        lines.append(
            f"  compile time: largest/smallest size {f['compile_ratio_largest_smallest']:.2f}x"
            f" (range {f['compile_seconds_min']:.2f}-{f['compile_seconds_max']:.2f} s over "
            f"{_count(f['compile_sizes'][0])}-{_count(f['compile_sizes'][-1])} seeds"
            f"{beyond_one})")
        for s in w["skipped"]:
            lines.append(f"  {s['seeds']:,} seeds {s['reason']}; larger sizes not tried")
        if not w["skipped"]:
            lines.append("  no size skipped")
    lines.append(
        "Throughput counts training only (outputs stay on the device); per-step cost is "
        "independent of run length (the run is a scan over one update's program). XLA bytes "
        "= argument + output + temp, a static plan; RSS deltas are sampled every 2 ms and "
        "noisy below a few MB. More seeds than one block holds run in successive rounds.")
    if result.get("compilation_cache_dir"):
        lines.append(f"note: a persistent compilation cache was configured "
                     f"({result['compilation_cache_dir']}); compile times may be cache hits")
    return "\n".join(lines)
