"""Shared test settings.

* Every test has a timeout (pyproject: [tool.pytest.ini_options]).
* XLA compilation dominates this suite on 2 cores, and several tests compile the same
  program (the same trainer config, a sweep rebuilt for a resume). A per-session
  persistent compilation cache lets identical programs compile once. It is keyed on the
  program, so results are the same as without it. Under pytest-xdist the workers of one
  run share it (``PYTEST_XDIST_TESTRUNUID``), and the subprocesses and notebook kernels
  the tests start are pointed at it too.
* The suite's programs are tiny and compiled once each, so XLA's CPU backend is told to
  skip LLVM's optimisation passes (``--xla_backend_optimization_level=0``, appended to
  ``XLA_FLAGS`` before the backend starts; subprocesses and notebook kernels inherit it):
  measured 40 % less wall time on the slowest tests. Results are the same programs'
  results (tests compare within one setting or with tolerances); studies and benchmarks
  run with XLA's defaults.
"""

import os
import tempfile
from pathlib import Path

_FAST_COMPILE = "--xla_backend_optimization_level=0"
if _FAST_COMPILE not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FAST_COMPILE}".strip()

import jax  # noqa: E402  (after XLA_FLAGS)

_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")
if _RUN:
    _CACHE = str(Path(tempfile.gettempdir()) / f"rljax-test-xla-cache-{_RUN}")
    os.makedirs(_CACHE, exist_ok=True)
else:
    _CACHE = tempfile.mkdtemp(prefix="rljax-test-xla-cache-")
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


# Longest first: pytest-xdist hands tests out in collection order, so a slow file collected
# last (notebooks, sweep survival: late in the alphabet) would leave one worker running it
# alone at the end. These files held the slowest tests of a full run (--durations, 2
# workers); they go first, the rest keep their order.
SLOW_FIRST = ("test_notebooks.py", "test_lm_training.py", "test_lm_grpo_study.py",
              "test_sweep_survival.py", "test_bench_lm.py", "test_ppo_traced.py",
              "test_mctx_import_swap.py", "test_ppo.py", "test_bench_scaling.py",
              "test_search_studies.py", "test_interval_coverage.py", "test_ppo_cartpole.py",
              "test_tune.py", "test_gdro_study.py", "test_mcts.py", "test_equation_training.py",
              "test_lm_trainer_variants.py", "test_lm_variants_study.py", "test_evaluation.py",
              "test_brax_adapter.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))
