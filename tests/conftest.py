"""Shared test settings: small configs, every test has a timeout (pyproject: timeout)."""

import os

# Keep XLA from grabbing every core for its intra-op pool in parallel test workers.
os.environ.setdefault("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
