"""Every ``rljax bench`` benchmark at accelerator sizes, in one run, into one JSON file.

``scripts/gpu_figures.sh`` calls this on the day a GPU is lent (see the README, "GPU
figures"); the suite runs it on the CPU at tiny sizes (``--preset tiny``)::

    python scripts/gpu_figures.py --out figures.json                 # preset gpu
    python scripts/gpu_figures.py --preset tiny --out tiny.json      # a CPU smoke run
    python scripts/gpu_figures.py --preset tiny --only stats --out s.json

What it does: for each benchmark of :data:`PRESETS` (``rljax.benchmarks`` entry points by
name, imported as ``experiments.benchmarks.NAME`` so no install is needed), a child process
(``--one NAME``) sets the preset's module constants (sizes, rounds) and environment
variables, calls the benchmark's ``run(**kwargs)`` and writes its JSON-able result. Each
child has its own wall-clock budget (:attr:`BenchPreset.budget_s`); a child that runs over
it is killed and recorded as ``"status": "timeout"``, one that fails as ``"error"`` with
its last line, one whose peer library is missing as ``"missing"``, so one broken benchmark
never costs the others their figures. The gpu preset's budgets sum to under 10 minutes.

The output: ``{"preset", "device", "jax_version", "started", "wall_seconds",
"benchmarks": {NAME: {"status", "seconds", "budget_s", "overrides", "result" | "error"}}}``,
written atomically (``rljax.io.write_json``). An existing ``--out`` is refused unless
``--overwrite``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class BenchPreset:
    """How one benchmark runs under a preset.

    Attributes:
      attrs: module constants of ``experiments.benchmarks.NAME`` to replace (each must
        exist on the module).
      kwargs: keyword arguments of the benchmark's ``run``.
      env: environment variables for the child process.
      budget_s: the child's wall-clock limit in seconds.
    """

    attrs: dict[str, Any] = field(default_factory=dict)
    kwargs: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    budget_s: float = 60.0


# Accelerator sizes: 65,536 seeds for the sweep-shaped workloads, batch 1,024 search, the
# 10 M-parameter decoder, the ~0.5 B one's steps, the off-policy trainers against rejax;
# budgets sum to 570 s (the script's whole run stays in 10 min).
GPU = {
    "sweep": BenchPreset(attrs={"SEED_COUNTS": (1, 16384, 65536), "BLOCK_SIZE": 65536,
                                "ROUNDS": {1: 5, 16384: 5, 65536: 5}}, budget_s=60),
    "scaling": BenchPreset(attrs={"SEED_COUNTS": (1, 256, 4096, 65536), "ROUNDS": 3,
                                  "COMPILE_ROUNDS": 1, "MEMORY_BUDGET_BYTES": 100 * 2**30},
                           budget_s=75),
    "mcts": BenchPreset(attrs={"BATCHES": (1, 1024), "SIMULATIONS": (16, 64, 256)},
                        budget_s=60),
    "lm": BenchPreset(env={"RLJAX_BENCH_LM_QUICK": "0"}, kwargs={"quick": False},
                      budget_s=80),
    "ppo": BenchPreset(kwargs={"seed_counts": (1, 128, 4096),
                               "updates": {1: 20, 128: 5, 4096: 2}, "rounds": 3,
                               "return_seeds": 8}, budget_s=80),
    "stats": BenchPreset(attrs={"SIZES": (100, 1000, 10000),
                                "ROUNDS": {100: (5, 3), 1000: (5, 2), 10000: (3, 1)}},
                         budget_s=35),
    "grid": BenchPreset(attrs={"CONFIG_COUNTS": (1, 16, 256, 1024), "SEEDS": 64,
                               "ROUNDS": 3, "COMPILE_ROUNDS": 1}, budget_s=35),
    # the ~0.5 B Qwen2-shaped decoder's full and LoRA GRPO steps run (tokens/s, step
    # time, memory), beside the 10 M one; the FSDP check runs on 8 forced CPU devices
    "lm-scale": BenchPreset(attrs={"RUN_STEPS": True, "STEP_ROUNDS": 3, "ROUNDS": 3,
                                   "SIZE_NAMES": ("10M", "0.5B")},
                            kwargs={"quick": False}, budget_s=100),
    # DQN / PQN / SAC against rejax at 1, 128 and 4,096 seeds, timing only (returns are
    # the CPU run's, docs/offpolicy_bench.md)
    "offpolicy": BenchPreset(kwargs={"seed_counts": (1, 128, 4096), "rounds": 3,
                                     "return_seeds": 0,
                                     "timed_steps": {"dqn": {1: 2_000, 128: 200, 4096: 50},
                                                     "pqn": {1: 4_096, 128: 2_048,
                                                             4096: 2_048},
                                                     "sac": {1: 1_000, 128: 100, 4096: 25}}},
                             budget_s=45),
}

# CPU smoke sizes: the same code paths, seconds each.
TINY = {
    "sweep": BenchPreset(attrs={"SEED_COUNTS": (1, 4), "BLOCK_SIZE": 4, "EPISODES": 10,
                                "NUMPY_SEEDS": 2, "ROUNDS": {1: 1, 4: 1}}, budget_s=120),
    "scaling": BenchPreset(attrs={"SEED_COUNTS": (1, 4), "ROUNDS": 1, "COMPILE_ROUNDS": 1,
                                  "CHAIN_EPISODES": 12, "PPO_UPDATES": 2,
                                  "VERIFY_LARGEST": False, "WORKLOADS": ("orm-vs-prm",)},
                           budget_s=120),
    "mcts": BenchPreset(attrs={"BATCHES": (2,), "SIMULATIONS": (4,), "ROUNDS": 1},
                        budget_s=120),
    "lm": BenchPreset(kwargs={"quick": True}, budget_s=180),
    "ppo": BenchPreset(kwargs={"env": "Pendulum-v1", "seed_counts": (1,),
                               "updates": {1: 1}, "rounds": 1, "return_seeds": 0},
                       budget_s=180),
    "stats": BenchPreset(attrs={"SIZES": (10,), "REPS": 50, "ROUNDS": {10: (1, 1)}},
                         budget_s=120),
    "grid": BenchPreset(env={"RLJAX_BENCH_GRID_QUICK": "1"}, budget_s=120),
    "lm-scale": BenchPreset(kwargs={"quick": True}, budget_s=180),
    "offpolicy": BenchPreset(kwargs={"algorithms": ("dqn",), "seed_counts": (1,),
                                     "timed_steps": {"dqn": {1: 20}}, "rounds": 1,
                                     "return_seeds": 0}, budget_s=180),
}

PRESETS: dict[str, dict[str, BenchPreset]] = {"gpu": GPU, "tiny": TINY}

#: the peer library a benchmark needs (a child that cannot import it reports "missing")
PEER_OF = {"mcts": "mctx", "stats": "rliable", "ppo": "rejax", "offpolicy": "rejax"}


def benchmark_module(name: str):
    """``experiments.benchmarks.NAME`` (imported from the checkout, no install needed)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return importlib.import_module(f"experiments.benchmarks.{name.replace('-', '_')}")


def apply_preset(module, preset: BenchPreset) -> None:
    """Replace the module constants named by ``preset.attrs``.

    Raises:
      ValueError: one line for a name the module does not define (a preset out of date).
    """
    for attr, value in preset.attrs.items():
        if not hasattr(module, attr):
            raise ValueError(f"preset: {module.__name__} has no constant {attr!r}")
        setattr(module, attr, value)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def run_one(name: str, preset_name: str, out: Path) -> int:
    """Child process: run benchmark ``name`` under the preset, write its result to ``out``."""
    preset = PRESETS[preset_name][name]
    peer = PEER_OF.get(name)
    if peer is not None:
        try:
            importlib.import_module(peer)
        except ImportError as err:
            out.write_text(json.dumps({"status": "missing", "error": f"{peer}: {err}"}))
            return 0
    module = benchmark_module(name)
    apply_preset(module, preset)
    result = module.run(**preset.kwargs)
    out.write_text(json.dumps({"status": "ok", "result": _jsonable(result)}))
    return 0


def run_all(preset_name: str, only: list[str] | None = None) -> dict[str, Any]:
    """Run the preset's benchmarks one child process each; the combined JSON-able dict."""
    import jax

    preset = PRESETS[preset_name]
    names = list(preset) if not only else only
    started = time.time()
    report: dict[str, Any] = {
        "preset": preset_name,
        "device": str(jax.devices()[0]),
        "device_kind": jax.devices()[0].device_kind,
        "jax_version": jax.__version__,
        "cpu_count": os.cpu_count(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "benchmarks": {},
    }
    for name in names:
        bench = preset[name]
        with tempfile.TemporaryDirectory() as tmp:
            result_file = Path(tmp) / "result.json"
            cmd = [sys.executable, str(Path(__file__).resolve()), "--one", name,
                   "--preset", preset_name, "--out", str(result_file)]
            env = {**os.environ, **bench.env, "PYTHONPATH": os.pathsep.join(
                [str(REPO), os.environ.get("PYTHONPATH", "")])}
            start = time.perf_counter()
            entry: dict[str, Any] = {"budget_s": bench.budget_s,
                                     "overrides": _jsonable({**bench.attrs, **bench.kwargs,
                                                             **bench.env})}
            try:
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                      timeout=bench.budget_s)
                if proc.returncode == 0 and result_file.exists():
                    entry.update(json.loads(result_file.read_text()))
                else:
                    last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
                    entry.update(status="error", error=last[-500:])
            except subprocess.TimeoutExpired:
                entry.update(status="timeout",
                             error=f"ran past its budget of {bench.budget_s:.0f} s")
            entry["seconds"] = round(time.perf_counter() - start, 2)
        report["benchmarks"][name] = entry
        print(f"{name}: {entry['status']} in {entry['seconds']:.1f} s"
              + (f" ({entry['error']})" if "error" in entry else ""), flush=True)
    report["wall_seconds"] = round(time.time() - started, 2)
    return report


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="gpu", choices=sorted(PRESETS))
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="run only this benchmark (repeatable)")
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # child process: one benchmark
    args = parser.parse_args(argv)
    if args.one:
        return run_one(args.one, args.preset, Path(args.out))
    for name in args.only or []:
        if name not in PRESETS[args.preset]:
            parser.error(f"--only: unknown benchmark {name!r}; allowed: "
                         f"{', '.join(PRESETS[args.preset])}")
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        parser.error(f"--out: {out} exists; pass --overwrite to replace it")
    report = run_all(args.preset, args.only)
    sys.path.insert(0, str(REPO))
    from rljax import io

    io.write_json(out, report)
    print(f"wrote {out}")
    failed = [n for n, e in report["benchmarks"].items() if e["status"] != "ok"]
    return 1 if failed and len(failed) == len(report["benchmarks"]) else 0


if __name__ == "__main__":
    sys.exit(main())
