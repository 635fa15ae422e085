"""Benchmarks run by ``rljax bench NAME`` (entry-point group ``rljax.benchmarks``).

Each module exposes ``run() -> dict`` (JSON-able figures) and ``table(result) -> str``.
"""
