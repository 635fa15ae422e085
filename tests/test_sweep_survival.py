"""Sweeps that survive: SIGKILL then --resume gives the uninterrupted bits, and two JAX
processes x two CPU devices give a single process's bits. Real subprocesses of the
real CLI; small configs."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import pandas as pd
import pytest

from rljax import cli

REPO = Path(__file__).resolve().parents[1]
CHUNKED = REPO / "tests" / "helpers" / "chunked_study.py"
# a grid of two learning rates x 48 seeds: 96 (config, seed) runs per mode
ORM = ["orm-vs-prm", "--seeds", "48", "--block-size", "8", "--grid",
       "learning_rate=0.1,0.05", "--set", "episodes=40", "--set", "bootstrap_reps=50"]


def _env(**extra):
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    cache = jax.config.jax_compilation_cache_dir  # share the suite's compiled programs
    if cache:
        env["JAX_COMPILATION_CACHE_DIR"] = cache
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.5"
    env.update(extra)
    return env


def _rljax(*args, script=None):
    cmd = [sys.executable, str(script)] if script else [sys.executable, "-m", "rljax.cli"]
    return cmd + list(args)


def _start(args, tmp_path):
    """The CLI as a child process, its stderr kept in ``tmp_path/child-stderr.txt`` (a file,
    not a pipe nobody reads, which a chatty child could fill and block on)."""
    path = tmp_path / "child-stderr.txt"
    with open(path, "w") as stderr:
        proc = subprocess.Popen(args, cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL,
                                stderr=stderr)
    proc.stderr_path = path
    return proc


def _stderr_tail(proc, chars=2000):
    path = getattr(proc, "stderr_path", None)
    return path.read_text()[-chars:] if path is not None else "(not kept)"


def _kill_when(proc, ready, timeout=240):
    """SIGKILL ``proc`` as soon as ``ready()`` holds; fail if it finished first, quoting
    the end of its stderr (e.g. a missing ``pip install -e .``: no module named rljax)."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            raise AssertionError(f"the run finished (exit {proc.returncode}) before it could "
                                 f"be killed; its stderr ends:\n{_stderr_tail(proc)}")
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL


def _steps(directory):
    return sorted(int(p.name) for p in Path(directory).glob("[0-9]*")) if Path(
        directory).is_dir() else []


@pytest.fixture(scope="module")
def orm_reference(tmp_path_factory):
    """The uninterrupted single-process run (in this process)."""
    out = tmp_path_factory.mktemp("orm") / "reference"
    assert cli.main(["run", *ORM, "--out", str(out)]) == 0
    return pd.read_parquet(out / "results.parquet")


@pytest.mark.timeout(400)
def test_sigkill_at_a_round_boundary_then_resume_is_bitwise(tmp_path, orm_reference):
    out = tmp_path / "run"
    proc = _start(_rljax("run", *ORM, "--out", str(out)), tmp_path)
    rounds = out / "checkpoints" / "01-orm" / "rounds"
    _kill_when(proc, lambda: len(_steps(rounds)) >= 2)
    assert not (out / "config.json").exists() and len(_steps(rounds)) < 12
    # another config is refused, naming the field; the interrupted run is untouched
    bad = subprocess.run(_rljax("run", *ORM[:-2], "--set", "bootstrap_reps=51", "--out",
                                str(out), "--resume"), cwd=tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.strip() == (f"error: --resume: {out} was started with "
                                  "bootstrap_reps=50, not 51; resume with the same config")
    done = subprocess.run(_rljax("run", "orm-vs-prm", "--out", str(out), "--resume"),
                          cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    resumed = pd.read_parquet(out / "results.parquet")
    pd.testing.assert_frame_equal(resumed, orm_reference, check_exact=True)
    counts = resumed.groupby(["mode", "config", "seed"]).size()
    assert len(counts) == 2 * 2 * 48 and (counts == 40).all()  # no run missing or duplicated
    assert json.loads((out / "config.json").read_text())["grid"]["fields"] == ["learning_rate"]
    assert json.loads((out / "config.json").read_text())["resumed"] is True
    assert not (out / "checkpoints").exists()


@pytest.mark.slow  # multi-process; run by `python -m pytest -m slow`
@pytest.mark.timeout(400)
def test_sigkill_within_a_round_then_resume_is_bitwise(tmp_path):
    reference = tmp_path / "reference"
    ok = subprocess.run(_rljax("run", "chunked-test", "--out", str(reference), script=CHUNKED),
                        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr[-2000:]
    out = tmp_path / "run"
    proc = _start(_rljax("run", "chunked-test", "--out", str(out), "--checkpoint-every", "2",
                         script=CHUNKED), tmp_path)
    states = out / "checkpoints" / "01-walk"
    # round 1's state checkpoints are steps 26.. (round r, chunk c: r * 25 + c + 1)
    _kill_when(proc, lambda: any(s > 25 for s in _steps(states)))
    assert _steps(states / "rounds") == [0]  # round 0 finished, round 1 part-way
    # a truncated state checkpoint is refused, saying so
    newest = max(_steps(states))
    victim = max((p for p in (states / str(newest)).rglob("*") if p.is_file()),
                 key=lambda p: p.stat().st_size)
    original = victim.read_bytes()
    victim.write_bytes(original[: len(original) // 2])
    bad = subprocess.run(_rljax("run", "chunked-test", "--out", str(out), "--resume",
                                script=CHUNKED), cwd=tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1, bad.stderr  # one line, no orbax/tensorstore noise after it
    assert lines[0].startswith(
        f"error: checkpoint: {states / str(newest)} is corrupted or unreadable")
    victim.write_bytes(original)
    done = subprocess.run(_rljax("run", "chunked-test", "--out", str(out), "--resume",
                                 script=CHUNKED), cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads((out / "summary.json").read_text())
    want = json.loads((reference / "summary.json").read_text())
    assert got == want  # floats round-trip exactly through JSON
    assert len(got["x"]) == 6 and len(got["sum"][0]) == 24


@pytest.mark.slow  # multi-process; run by `python -m pytest -m slow`
@pytest.mark.timeout(400)
def test_two_processes_of_two_devices_match_one_process(tmp_path, orm_reference):
    out = tmp_path / "two"
    proc = subprocess.run(_rljax("run", *ORM, "--out", str(out), "--processes", "2",
                                 "--local-devices", "2"),
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    meta = json.loads((out / "config.json").read_text())["metadata"]
    summary = json.loads((out / "summary.json").read_text())
    assert meta["process_count"] == 2 and summary["num_devices"] == 4
    assert summary["num_rounds"] == 3  # 96 (config, seed) runs / (8 per device x 4 devices)
    two = pd.read_parquet(out / "results.parquet")
    pd.testing.assert_frame_equal(two, orm_reference, check_exact=True)
