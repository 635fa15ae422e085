"""``scripts/gpu_figures.py`` (called by ``scripts/gpu_figures.sh`` on a GPU): its presets
name real benchmark constants, the gpu preset fits in 10 minutes, and a tiny run on the CPU
writes the documented JSON."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_figures  # noqa: E402

pytestmark = pytest.mark.timeout(240)


def test_every_benchmark_has_both_presets_and_their_constants_exist():
    registered = {e.name for e in importlib.metadata.entry_points(group="rljax.benchmarks")}
    for name, preset in gpu_figures.PRESETS.items():
        assert set(preset) == registered, name
        for bench, setting in preset.items():
            module = gpu_figures.benchmark_module(bench)
            for attr in setting.attrs:
                assert hasattr(module, attr), f"{name}/{bench}: {attr}"


def test_gpu_preset_fits_ten_minutes_with_room():
    budgets = [p.budget_s for p in gpu_figures.GPU.values()]
    assert sum(budgets) <= 590 - 20  # the shell script's timeout, minus start-up


def test_apply_preset_refuses_an_unknown_constant():
    module = gpu_figures.benchmark_module("stats")
    with pytest.raises(ValueError, match="no constant 'NOT_A_CONSTANT'"):
        gpu_figures.apply_preset(module, gpu_figures.BenchPreset(attrs={"NOT_A_CONSTANT": 1}))


def test_tiny_run_writes_one_json_and_refuses_to_overwrite(tmp_path):
    out = tmp_path / "figures.json"
    cmd = [sys.executable, str(ROOT / "scripts" / "gpu_figures.py"), "--preset", "tiny",
           "--only", "stats", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["preset"] == "tiny" and set(report["benchmarks"]) == {"stats"}
    entry = report["benchmarks"]["stats"]
    assert entry["status"] == "ok", entry
    assert entry["overrides"]["REPS"] == 50
    assert set(entry["result"]["iqm_ci_ratio"]) == {"10"}  # the tiny sizes were applied
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "--out:" in again.stderr and "--overwrite" in again.stderr
