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


def _run_result(seeds, finals, config=None):
    per_seed = {str(s): {"final": f, "curve": [f], "curve_steps": [1], "seconds": 1.0}
                for s, f in zip(seeds, finals, strict=True)}
    return blines.summarise("Pendulum-v1", config or {"lr_begin": 5e-4}, per_seed)


def test_extend_keeps_both_runs_seeds_and_recomputes_the_iqm_over_all():
    rng = np.random.default_rng(1)
    first = list(-300.0 + 50.0 * rng.standard_normal(6))
    later = list(-250.0 + 50.0 * rng.standard_normal(5))
    merged = blines.extend_run(_run_result(range(6), first),
                               _run_result(range(6, 11), later))
    assert merged["seeds"] == list(range(11))
    assert merged["finals"] == first + later
    # the same as one run over all eleven seeds, whichever run came first
    whole = _run_result(range(11), first + later)
    assert merged["final_iqm"] == whole["final_iqm"]
    assert merged["final_ci"] == whole["final_ci"]
    swapped = blines.extend_run(_run_result(range(6, 11), later), _run_result(range(6), first))
    assert swapped["seeds"] == list(range(11)) and swapped["finals"] == first + later
    # the IQM of the eleven, not of either run alone (a 25 %-trimmed mean, numpy reference)
    values = np.sort(np.asarray(first + later))
    assert merged["final_iqm"] != _run_result(range(6), first)["final_iqm"]
    assert values[0] <= merged["final_iqm"] <= values[-1]


def test_extend_refuses_another_env_config_or_a_shared_seed(tmp_path, capsys):
    a = _run_result(range(3), [-300.0, -250.0, -280.0])
    with pytest.raises(ValueError, match="--extend: seeds 2 are in both runs"):
        blines.extend_run(a, _run_result([2, 3], [-200.0, -210.0]))
    with pytest.raises(ValueError, match="--extend: its train_config differs"):
        blines.extend_run(a, _run_result([3], [-200.0], config={"lr_begin": 1e-3}))
    with pytest.raises(ValueError, match="--extend: its env is Acrobot-v1"):
        blines.extend_run({**a, "env": "Acrobot-v1"}, _run_result([3], [-200.0]))
    # the CLI refuses overlapping seeds before it trains anything (no gymnax-blines needed)
    earlier = tmp_path / "earlier.json"
    earlier.write_text(__import__("json").dumps(a))
    (tmp_path / "agents").mkdir()
    with pytest.raises(SystemExit) as exit_info:
        blines.main(["run", "--source", str(tmp_path), "--env", "Pendulum-v1", "--seeds", "2",
                     "--first-seed", "1", "--extend", str(earlier)])
    assert exit_info.value.code == 2
    assert "--extend: seeds [1, 2] are in" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        blines.main(["run", "--source", str(tmp_path), "--env", "Pendulum-v1",
                     "--first-seed", "-1"])
    assert exit_info.value.code == 2


def test_poi_coverage_is_near_nominal_and_its_truths_are_exact():
    rng = np.random.default_rng(2)
    ours = np.round(-230.0 + 40.0 * rng.standard_normal(12))  # rounded: ties happen
    theirs = np.round(-300.0 + 80.0 * rng.standard_normal(10))
    cov = blines.poi_coverage(ours, theirs, trials=150, reps=400)
    pairs = ours[:, None] - theirs[None, :]
    assert cov["truth_observed"] == np.mean(pairs > 0) + 0.5 * np.mean(pairs == 0)
    assert cov["truth_normal"] == cov["truth_observed"]
    assert cov["trials"] == 150
    # 95 % intervals: 150 trials put a correct coverage within about +-0.05 of 0.95
    assert 0.85 <= cov["observed"] <= 1.0 and 0.85 <= cov["normal"] <= 1.0
    # compare carries it when asked, and only then
    summary = {"env": "Pendulum-v1", "eval_returns_sampled": list(ours),
               "eval_return_sampled_iqm": -230.0, "eval_return_sampled_ci": [-250.0, -210.0]}
    run = {"env": "Pendulum-v1", "finals": list(theirs)}
    assert "coverage" not in blines.compare(summary, run, reps=200)["probability_of_improvement"]
    with_cov = blines.compare(summary, run, reps=200, coverage_trials=5)
    assert with_cov["probability_of_improvement"]["coverage"]["trials"] == 5


def test_poi_coverage_fails_an_interval_that_misses(monkeypatch):
    """The measurement is not vacuous: an interval shifted off the estimate covers nothing."""
    from rljax import stats

    real = stats.probability_of_improvement_ci

    def shifted(*args, **kwargs):
        ci = real(*args, **kwargs)
        return ci._replace(low=ci.low + 1.01, high=ci.high + 1.01)  # above any probability

    monkeypatch.setattr(stats, "probability_of_improvement_ci", shifted)
    rng = np.random.default_rng(3)
    cov = blines.poi_coverage(rng.standard_normal(8) + 0.3, rng.standard_normal(8), trials=30,
                              reps=200)
    assert cov["observed"] == 0.0 and cov["normal"] == 0.0


def test_written_json_is_readable_as_the_umask_allows_and_never_silently_replaced(tmp_path):
    path = tmp_path / "cmp.json"
    old_mask = os.umask(0o022)
    try:
        blines._write_json(str(path), {"a": 1}, overwrite=False)
    finally:
        os.umask(old_mask)
    assert path.stat().st_mode & 0o777 == 0o644  # not mkstemp's 0600
    assert __import__("json").loads(path.read_text()) == {"a": 1}
    with pytest.raises(SystemExit, match="--out: .* exists; pass --overwrite"):
        blines._write_json(str(path), {"a": 2}, overwrite=False)
    blines._write_json(str(path), {"a": 2}, overwrite=True)
    assert __import__("json").loads(path.read_text()) == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["cmp.json"]  # no temp file left


def test_compare_refuses_a_negative_coverage_trials(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        blines.main(["compare", "--rljax", str(tmp_path / "a.json"), "--blines",
                     str(tmp_path / "b.json"), "--coverage-trials", "-1"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == "--coverage-trials: must be >= 0, got -1"
