"""``rljax.study.run_study``: the run protocol, with every option an argument, is the same
from Python as from ``rljax run`` (the CLI calls it): same files, same numbers, the same
checkpoints and resume; nothing reaches a sweep through global or context state."""

import json

import pandas as pd
import pytest

from experiments import ppo_cartpole
from rljax import checkpoint, cli
from rljax.study import CHECKPOINTS, RUN_RECORD, RunRefused, run_study

# 2 seeds x 4 updates of 4 envs x 128 steps, one update per chunk: 4 chunks, a few seconds
SETS = {"total_steps": 2048, "chunk_updates": 1, "curve_points": 2, "final_updates": 1,
        "seeds": 2, "block_size": 2, "bootstrap_reps": 20}
TIMING = {"compile_seconds", "run_seconds", "env_steps_per_second"}


def _config():
    config = ppo_cartpole.Config(**SETS)
    config.validate()
    return config


def _cli(out, *extra):
    args = [f"{k}={v}" for k, v in SETS.items() if k not in ("seeds", "block_size")]
    argv = ["run", "ppo-cartpole", "--out", str(out), "--seeds", "2", "--block-size", "2"]
    for pair in args:
        argv += ["--set", pair]
    return cli.main(argv + list(extra))


def _same_run(a, b):
    pd.testing.assert_frame_equal(pd.read_parquet(a / "results.parquet"),
                                  pd.read_parquet(b / "results.parquet"), check_exact=True)
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    assert {k: v for k, v in sa.items() if k not in TIMING} == {
        k: v for k, v in sb.items() if k not in TIMING}
    ca, cb = (json.loads((d / "config.json").read_text()) for d in (a, b))
    assert ca["config"] == cb["config"] and ca["experiment"] == cb["experiment"]
    assert ca["metadata"]["code_version"] == cb["metadata"]["code_version"]
    assert not (a / CHECKPOINTS).exists() and not (b / CHECKPOINTS).exists()


@pytest.mark.timeout(300)
def test_python_run_with_checkpoints_is_the_cli_run(tmp_path, monkeypatch):
    """The same study, config and checkpoint options from Python and from the CLI: the
    same files and bits, and the sweeps checkpoint every chunk in both (counted)."""
    saves = {"n": 0}
    real_save = checkpoint.Checkpointer.save

    def counting_save(self, step, state, **kw):
        saves["n"] += 1
        return real_save(self, step, state, **kw)

    monkeypatch.setattr(checkpoint.Checkpointer, "save", counting_save)
    assert _cli(tmp_path / "cli", "--checkpoint-every", "1") == 0
    cli_saves, saves["n"] = saves["n"], 0
    outcome = run_study(ppo_cartpole, _config(), tmp_path / "py", checkpoint_every=1)
    assert saves["n"] == cli_saves >= 4  # one per chunk and one per finished round
    _same_run(tmp_path / "cli", tmp_path / "py")
    assert outcome.summary == json.loads((tmp_path / "py" / "summary.json").read_text())
    assert outcome.record["experiment"] == "ppo-cartpole" and outcome.nonfinite == []


@pytest.mark.timeout(300)
def test_python_run_interrupted_then_resumed_is_bitwise_the_whole_run(tmp_path, monkeypatch):
    """Interrupted after its second checkpoint, a Python run keeps its checkpoints and run
    record; ``resume=True`` finishes it with the uninterrupted run's bits; the options
    are checked as the CLI checks them."""
    run_study(ppo_cartpole, _config(), tmp_path / "whole")
    real_save = checkpoint.Checkpointer.save
    saves = {"n": 0}

    def interrupting_save(self, step, state, **kw):
        path = real_save(self, step, state, **kw)
        saves["n"] += 1
        if saves["n"] == 2:
            raise KeyboardInterrupt
        return path

    monkeypatch.setattr(checkpoint.Checkpointer, "save", interrupting_save)
    out = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        run_study(ppo_cartpole, _config(), out, checkpoint_every=1)
    assert (out / CHECKPOINTS / RUN_RECORD).is_file() and not (out / "config.json").exists()
    assert cli.saved_checkpoints(out)  # what `rljax run --resume` would continue from
    monkeypatch.setattr(checkpoint.Checkpointer, "save", real_save)
    with pytest.raises(RunRefused, match="was started with seeds=2, not 3"):
        run_study(ppo_cartpole, ppo_cartpole.Config(**{**SETS, "seeds": 3}), out,
                  resume=True)
    outcome = run_study(ppo_cartpole, _config(), out, resume=True, checkpoint_every=1)
    _same_run(tmp_path / "whole", out)
    assert json.loads((out / "config.json").read_text())["resumed"] is True
    assert outcome.summary["final_return_iqm"] == json.loads(
        (tmp_path / "whole" / "summary.json").read_text())["final_return_iqm"]


def test_output_directory_and_options_are_refused_in_one_line(tmp_path):
    from rljax.io import OutputExistsError

    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match="--overwrite"):
        run_study(ppo_cartpole, _config(), tmp_path / "full")
    assert (tmp_path / "full" / "x.txt").read_text() == "mine"
    with pytest.raises(RunRefused, match="no checkpoints of an interrupted run"):
        run_study(ppo_cartpole, _config(), tmp_path / "none", resume=True)
    with pytest.raises(RunRefused, match="choose one"):
        run_study(ppo_cartpole, _config(), tmp_path / "none", resume=True, overwrite=True)


def test_a_study_whose_run_takes_no_options_is_refused(tmp_path):
    """Its sweeps could not receive checkpoints or a debug seed: refused, not ignored."""
    import types

    study = types.ModuleType("old_study")
    study.NAME = "old-study"
    study.run = lambda config, out_dir: {}
    with pytest.raises(TypeError, match="old-study: run.*must take options"):
        run_study(study, _config(), tmp_path / "x")


def test_the_library_holds_no_context_state():
    """No ``ContextVar`` (nor the old ``rljax.runtime``) anywhere in the package."""
    from pathlib import Path

    import rljax

    root = Path(rljax.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert "ContextVar" not in text and "contextvars" not in text, path
    assert not (root / "runtime.py").exists()


@pytest.mark.timeout(300)
def test_the_docs_page_runs(tmp_path, monkeypatch):
    """docs/writing_a_study.md's code blocks run as written (in a scratch directory)."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "writing_a_study.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert len(blocks) == 2
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    for block in blocks:
        exec(compile(block, "docs/writing_a_study.md", "exec"), scope)
    assert scope["Config"]().hparams()["learning_rate"] == 2.5e-4
    assert (tmp_path / "results" / "pc" / "config.json").is_file()
