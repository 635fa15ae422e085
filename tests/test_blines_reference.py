"""scripts/blines_reference.py's log reader: gymnax-blines' ``agents/<env>/*.pkl`` logs are
read as plain data, classes it does not allow (``dotmap.DotMap``, a callable such as
``os.system``) are never imported or called, and the CLI refuses a folder that is not a
checkout. Synthetic pickles only; the real logs need a gymnax-blines checkout."""

import collections
import os
import pickle
import sys
import types

import numpy as np
import pytest
from script_module import load_script

blines = load_script("blines_reference")


class DotMap:
    """Pickled as ``dotmap.DotMap`` (a module the reader must not import)."""

    def __init__(self, **kw):
        self._map = collections.OrderedDict(kw)
        self.lr_begin = kw["lr_begin"]
        self.seed_id = 3


def _dotmap_like(**kw):
    """A :class:`DotMap` whose pickle names ``dotmap.DotMap``."""
    module = types.ModuleType("dotmap")
    module.DotMap = DotMap
    DotMap.__module__ = "dotmap"
    sys.modules["dotmap"] = module
    return DotMap(**kw)


class CallsSystem:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def _write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(path, "wb") as f:
            pickle.dump(obj, f)
    finally:
        sys.modules.pop("dotmap", None)


def test_reads_a_log_with_foreign_classes_as_plain_data(tmp_path):
    returns = np.array([-1500.0, -400.0, -200.5, -250.0, -210.0, -230.0], np.float32)
    steps = np.arange(1, 7) * 32_000
    path = tmp_path / "agents" / "Pendulum-v1" / "ppo.pkl"
    _write(path, {"log_steps": steps, "log_return": returns,
                  "network": {"w": np.ones(3)}, "train_config": _dotmap_like(lr_begin=5e-4)})
    assert "dotmap" not in sys.modules
    log = blines.read_log(path)
    np.testing.assert_array_equal(log["returns"], returns.astype(np.float64))
    np.testing.assert_array_equal(log["steps"], steps)
    assert log["train_config"]["lr_begin"] == 5e-4
    summary = blines.log_summary(path)
    assert summary == {"final": -230.0, "best": -200.5,
                       "last5_mean": pytest.approx(np.mean(returns[-5:])),
                       "steps": 192_000, "evaluations": 6, "learning_rate": 5e-4,
                       "seed_id": 3}


def test_never_calls_a_global_it_does_not_allow(tmp_path, monkeypatch):
    path = tmp_path / "agents" / "X" / "ppo.pkl"
    _write(path, {"log_steps": np.arange(2), "log_return": np.zeros(2),
                  "train_config": CallsSystem()})
    calls = []
    monkeypatch.setattr(os, "system", lambda *a: calls.append(a) or 0)
    log = blines.read_log(path)
    assert calls == []
    assert isinstance(log["train_config"], dict)


def test_all_logs_skips_files_without_a_log_and_the_cli_refuses_a_non_checkout(tmp_path,
                                                                              capsys):
    _write(tmp_path / "agents" / "Pendulum-v1" / "ppo.pkl",
           {"log_steps": np.arange(3), "log_return": np.array([-3.0, -2.0, -1.0])})
    _write(tmp_path / "agents" / "Pendulum-v1" / "speed.pkl", {"timings": [1.0]})
    assert list(blines.all_logs(tmp_path)) == ["Pendulum-v1/ppo.pkl"]
    assert blines.main(["logs", "--source", str(tmp_path)]) == 0
    assert "Pendulum-v1/ppo.pkl: final -1" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        blines.main(["logs", "--source", str(tmp_path / "nowhere")])
    assert exit_info.value.code == 2
    assert "--source" in capsys.readouterr().err
    with pytest.raises(ValueError, match="not a gymnax-blines log"):
        blines.read_log(tmp_path / "agents" / "Pendulum-v1" / "speed.pkl")


def test_run_refuses_an_env_without_a_ppo_config(tmp_path):
    (tmp_path / "agents" / "Pendulum-v1").mkdir(parents=True)
    (tmp_path / "agents" / "Pendulum-v1" / "ppo.yaml").write_text("train_config: {}\n")
    with pytest.raises(ValueError, match="env: .*Breakout-MinAtar.*configs for Pendulum-v1"):
        blines.run_ppo(tmp_path, "Breakout-MinAtar", [0])


def test_compare_is_unpaired_and_refuses_another_env():
    rng = np.random.default_rng(0)
    ours = list(-200.0 + 10.0 * rng.standard_normal(12))
    summary = {"env": "Pendulum-v1", "eval_returns_sampled": ours,
               "eval_return_sampled_iqm": -200.0, "eval_return_sampled_ci": [-205.0, -195.0]}
    worse = {"env": "Pendulum-v1", "finals": list(-400.0 + 10.0 * rng.standard_normal(8))}
    result = blines.compare(summary, worse, reps=200)
    assert result["probability_of_improvement"]["point"] == 1.0  # every pair: ours above
    assert result["mann_whitney_p"] < 1e-3
    assert result["rljax"] == {"seeds": 12, "iqm": -200.0, "ci": [-205.0, -195.0]}
    assert result["blines"]["seeds"] == 8 and result["blines"]["iqm"] < -380
    same = {"env": "Pendulum-v1", "finals": ours[:8]}
    even = blines.compare(summary, same, reps=200)["probability_of_improvement"]
    assert even["low"] < 0.5 < even["high"]
    with pytest.raises(ValueError, match="--blines: its env 'Acrobot-v1'"):
        blines.compare(summary, {**worse, "env": "Acrobot-v1"})
    with pytest.raises(ValueError, match="--rljax: the summary has no eval_returns_sampled"):
        blines.compare({"env": "Pendulum-v1"}, worse)
