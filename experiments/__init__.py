"""rljax studies: one module per study (a frozen ``Config`` + ``run``), registered through
the ``rljax.experiments`` entry-point group in pyproject.toml."""
