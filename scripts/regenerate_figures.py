"""Re-run studies at their committed configs and check the committed figures come out.

    python scripts/regenerate_figures.py [NAME ...] [--keep DIR]

For every ``experiments/figures/NAME.json`` (or the names given) the study is run with
the recorded config (``rljax run NAME --set field=value ...``) into a temporary
directory, and every number of the new ``summary.json`` is compared with the committed
one: equal within ``rtol=1e-6`` (the same key gives the same bits on the same machine
and jaxlib; the tolerance allows another CPU's last bits). Timing figures (keys naming
seconds, throughput or memory measured at run time) are skipped. Prints one line per
study, exits 1 if any differs. Not part of CI (the full studies take minutes each);
``tests/test_study_figures.py`` checks the study pages (``docs/studies/``) against the
committed files in CI.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "experiments" / "figures"
TIMING_WORDS = ("second", "wall", "throughput", "compile", "per_s", "timed")


def is_timing(path: str) -> bool:
    """True for summary keys that hold run-time measurements (not reproducible bits)."""
    return any(word in path.lower() for word in TIMING_WORDS)


def differences(old, new, path: str = "", rtol: float = 1e-6) -> list[str]:
    """Paths where two JSON trees differ (numbers compared with ``rtol``)."""
    if is_timing(path):
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        out = [f"{path}/{k}: missing in the new run" for k in old if k not in new]
        for k in old:
            if k in new:
                out += differences(old[k], new[k], f"{path}/{k}", rtol)
        return out
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{path}: length {len(old)} -> {len(new)}"]
        out = []
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            out += differences(a, b, f"{path}[{i}]", rtol)
        return out
    if isinstance(old, bool) or isinstance(new, bool) or not (
            isinstance(old, int | float) and isinstance(new, int | float)):
        return [] if old == new else [f"{path}: {old!r} -> {new!r}"]
    if math.isnan(old) and math.isnan(new):
        return []
    if old == new or math.isclose(old, new, rel_tol=rtol, abs_tol=1e-12):
        return []
    return [f"{path}: {old!r} -> {new!r}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--keep", type=Path, help="write the runs here instead of a temp dir")
    args = parser.parse_args(argv)
    names = args.names or sorted(p.stem for p in FIGURES.glob("*.json"))
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        for name in names:
            record = json.loads((FIGURES / f"{name}.json").read_text())
            out = base / name
            cmd = [sys.executable, "-m", "rljax.cli", "run", name, "--out", str(out),
                   "--overwrite"]
            for field, value in record["config"].items():
                cmd += ["--set", f"{field}={value}"]
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            if proc.returncode != 0:
                print(f"{name}: run failed: {proc.stderr.strip().splitlines()[-1:]}")
                failed += 1
                continue
            new = json.loads((out / "summary.json").read_text())
            diff = differences(record["summary"], new)
            print(f"{name}: {'same figures' if not diff else f'{len(diff)} differ'}")
            for line in diff[:20]:
                print(f"  {line}")
            failed += bool(diff)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
