"""Shared test settings.

* Every test has a timeout (pyproject: [tool.pytest.ini_options]).
* XLA compilation dominates this suite on 2 cores, and several tests compile the same
  program (the same trainer config, a sweep rebuilt for a resume). A per-session
  persistent compilation cache lets identical programs compile once. It is keyed on the
  program, so results are the same as without it.
"""

import tempfile

import jax

_CACHE = tempfile.mkdtemp(prefix="rljax-test-xla-cache-")
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
