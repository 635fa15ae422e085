"""Run a registered study in-process at a small config (shared by the study tests)."""

from __future__ import annotations

import json

from rljax.cli import main


def run_study(tmp_path, name, *sets, block_size=32):
    """``rljax run NAME --out tmp/NAME --block-size B --set ...``; returns (out, summary)."""
    out = tmp_path / name
    args = ["run", name, "--out", str(out), "--block-size", str(block_size)]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0
    return out, json.loads((out / "summary.json").read_text())
