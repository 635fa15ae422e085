"""Record a study run's figures for its page: ``experiments/figures/NAME.json``.

    python scripts/record_figures.py results/orm-vs-prm [results/gdro ...]

Each file holds the run's ``config`` (the study's Config as run), the code that ran it
(``git_commit``, ``code_version``) and its ``summary`` (``summary.json``). The study
pages' figures (``docs/studies/NAME.md``) are checked against these files by
``tests/test_study_figures.py``: every quoted figure must be the committed summary's value
at the page's rounding, and the committed config must be the study's current default, so
a figure cannot outlive the config that produced it. ``scripts/regenerate_figures.py``
re-runs the studies and checks that the committed summaries come out again.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "experiments" / "figures"


def record(run_dir: Path) -> Path:
    """Writes ``experiments/figures/NAME.json`` from a finished run directory."""
    config = json.loads((run_dir / "config.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    name = config["experiment"]
    meta = config.get("metadata", {})
    record = {
        "experiment": name,
        "config": config["config"],
        "git_commit": meta.get("git_commit"),
        "code_version": meta.get("code_version"),
        "wall_seconds": config.get("wall_seconds"),
        "summary": summary,
    }
    FIGURES.mkdir(parents=True, exist_ok=True)
    out = FIGURES / f"{name}.json"
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    tmp.replace(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    for run_dir in args.run_dirs:
        if not (run_dir / "summary.json").is_file() or not (run_dir / "config.json").is_file():
            print(f"error: run_dirs: {run_dir} has no summary.json/config.json", file=sys.stderr)
            return 2
        print(record(run_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
