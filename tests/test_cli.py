"""The rljax command: listing, errors (one line, exit 2, nothing written), a small run."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from rljax.cli import main

SMALL = ["--seeds", "64", "--block-size", "64", "--set", "episodes=60",
         "--set", "bootstrap_reps=100"]


def test_list(capsys):
    assert main(["list"]) == 0
    assert "orm-vs-prm" in capsys.readouterr().out


def test_unknown_experiment_lists_known(capsys):
    assert main(["run", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown experiment 'nope'" in err and "orm-vs-prm" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args, field", [
    (["--seeds", "0"], "seeds"),
    (["--seeds", "abc"], "seeds"),
    (["--seeds", "-5"], "seeds"),
    (["--block-size", "0"], "block_size"),
    (["--set", "learning_rate=0"], "learning_rate"),
    (["--set", "learning_rate=-0.1"], "learning_rate"),
    (["--set", "learning_rate=nan"], "learning_rate"),
    (["--set", "learning_rate=fast"], "learning_rate"),
    (["--set", "chain_length=0"], "chain_length"),
    (["--set", "episodes=1.5"], "episodes"),
    (["--set", "modes=orm,dense"], "modes"),
    (["--set", "baseline=median"], "baseline"),
    (["--set", "baseline_rate=2"], "baseline_rate"),
    (["--set", "bogus=1"], "bogus"),
    (["--set", "noequals"], "--set"),
])
def test_bad_values_one_line_exit_2_no_output(tmp_path, capsys, args, field):
    out = tmp_path / "out"
    assert main(["run", "orm-vs-prm", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: ") and field in err
    assert "Traceback" not in err
    assert not out.exists()


def test_existing_output_needs_overwrite(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("precious")
    assert main(["run", "orm-vs-prm", "--out", str(out), *SMALL]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]


def test_small_run_writes_files_and_keys(tmp_path):
    out = tmp_path / "run"
    assert main(["run", "orm-vs-prm", "--out", str(out), *SMALL]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "results.parquet", "summary.json", "report.md",
            "learning_curves.png", "ep50_distribution.png"} <= names
    summary = json.loads((out / "summary.json").read_text())
    for key in ["seeds", "episodes", "orm_ep50_median_as_written", "prm_ep50_median_as_written",
                "orm_ep50_median", "prm_ep50_median", "ep50_ratio", "ep50_ratio_ci",
                "orm_final_success", "prm_final_success", "episodes_per_second"]:
        assert key in summary, key
    assert summary["seeds"] == 64 and summary["episodes"] == 60
    config = json.loads((out / "config.json").read_text())
    assert config["config"]["block_size"] == 64 and config["experiment"] == "orm-vs-prm"
    table = pd.read_parquet(out / "results.parquet")
    assert len(table) == 64 * 60 * 2
    assert set(table.columns) >= {"seed", "mode", "step", "success"}
    assert "95 % CI" in (out / "report.md").read_text()
    # a second run into the same directory is refused, then allowed with --overwrite
    assert main(["run", "orm-vs-prm", "--out", str(out), *SMALL]) == 2
    assert main(["run", "orm-vs-prm", "--out", str(out), "--overwrite", *SMALL]) == 0
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_console_script_error_has_no_traceback():
    proc = subprocess.run([sys.executable, "-m", "rljax.cli", "run", "orm-vs-prm",
                           "--seeds", "0"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: seeds: must be an integer >= 1, got 0"


def test_unknown_benchmark_and_no_command(capsys):
    assert main(["bench", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown benchmark 'nope'" in err and "sweep" in err
    assert main([]) == 2
