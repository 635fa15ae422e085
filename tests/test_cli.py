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


@pytest.mark.parametrize("args, message", [
    (["--processes", "0"], "--processes: must be an integer >= 1, got '0'"),
    (["--processes", "two"], "--processes: must be an integer, got 'two'"),
    (["--checkpoint-every", "0"], "--checkpoint-every: must be an integer >= 1"),
    (["--debug-nans", "-1"], "--debug-nans: must be an integer >= 0"),
    (["--debug-nans", "64"], "--debug-nans: seed must be in 0..63"),
    (["--local-devices", "2"], "--local-devices: only with --processes N"),
    (["--processes", "2", "--checkpoint-every", "3"],
     "--checkpoint-every: in-round checkpoints need one process"),
    (["--processes", "2", "--debug-nans", "0"], "--debug-nans: re-runs one seed in one"),
    (["--resume", "--overwrite"], "--resume and --overwrite: choose one"),
    (["--processes", "2", "--distributed"], "--distributed: this command is one process"),
    (["--resume"], "has no checkpoints of an interrupted run"),
])
def test_survival_flags_one_line_exit_2_no_output(tmp_path, capsys, args, message):
    out = tmp_path / "out"
    assert main(["run", "orm-vs-prm", "--out", str(out), *SMALL, *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and message in err, err
    assert not out.exists()


def test_resume_refuses_finished_other_and_changed_runs(tmp_path, capsys):
    finished = tmp_path / "finished"
    finished.mkdir()
    (finished / "config.json").write_text("{}")
    assert main(["run", "orm-vs-prm", "--out", str(finished), "--resume"]) == 2
    assert "holds a finished run; nothing to resume" in capsys.readouterr().err

    other = tmp_path / "other"
    (other / "checkpoints").mkdir(parents=True)
    record = {"experiment": "four-answer", "config": {}, "code_version": "x"}
    (other / "checkpoints" / "run.json").write_text(json.dumps(record))
    assert main(["run", "orm-vs-prm", "--out", str(other), "--resume"]) == 2
    assert "holds a run of 'four-answer', not 'orm-vs-prm'" in capsys.readouterr().err

    from dataclasses import asdict

    from experiments.orm_vs_prm import Config

    changed = tmp_path / "changed"
    (changed / "checkpoints").mkdir(parents=True)
    record = {"experiment": "orm-vs-prm", "config": asdict(Config(seeds=64)),
              "code_version": "0123456789abcdef"}
    (changed / "checkpoints" / "run.json").write_text(json.dumps(record))
    assert main(["run", "orm-vs-prm", "--out", str(changed), "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --resume: {changed} was started by another code version "
                          "(0123456789abcdef there, ")
    assert main(["run", "orm-vs-prm", "--out", str(changed), "--resume", "--seeds", "65"]) == 2
    assert "was started with seeds=64, not 65" in capsys.readouterr().err
    assert sorted(p.name for p in changed.rglob("*")) == ["checkpoints", "run.json"]
