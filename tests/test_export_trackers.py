"""``rljax export DIR --to mlflow|wandb|tensorboard``: each export read back with the
tracker's own reader (MLflow's ``MlflowClient``, wandb's transaction-log reader ``wandb
leet inspect``, TensorBoard's event records) equals the run directory's table: one tracker
run per (config, seed), params = config, metric history = curve at its steps, the study
figures as summary; refusals are one line, exit 2, nothing written; no network."""

import json
import os
import socket
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

import mlflow  # noqa: F401  (dev dependencies: a missing one fails, never skips)
import numpy as np
import pandas as pd
import pytest
import tensorboardX  # noqa: F401
import wandb  # noqa: F401

from rljax import io
from rljax.cli import main
from rljax.grid import grid_columns

STUDY = "orm-vs-prm"
SEEDS = (0, 3)  # not 0..S-1: a run keyed by position instead of seed id reads wrong
RATES = (0.01, 0.1)  # float32 in the table: labels and params must still read 0.01
STEPS = (1, 2, 4, 8)
CONFIG = {"seeds": 2, "episodes": 8, "learning_rate": 0.05, "modes": "orm",
          "schedule": [1, 2], "nested": {"depth": 3}}
SUMMARY = {"experiment": STUDY, "seeds": 2, "ep50_ratio": 1.5, "ep50_ratio_ci": [1.0, 2.0],
           "timing": {"run_seconds": 0.25}, "label": "text",
           "configs": [{"config": 0, "learning_rate": 0.01, "orm_ep50_median": 4.0},
                       {"config": 1, "learning_rate": 0.1, "orm_ep50_median": 7.0}]}


@dataclass(frozen=True)
class _Cfg:
    learning_rate: float


def _write_run_dir(path: Path) -> pd.DataFrame:
    """A finished grid run of orm-vs-prm, written the way the study writes it: its own
    ``results_table`` with ``rljax.grid.grid_columns`` (``config``, the swept field), plus a
    float metric with a NaN; rows shuffled so the exporter must sort by step."""
    from experiments.orm_vs_prm import results_table

    rng = np.random.default_rng(0)
    success = rng.random((len(RATES), len(SEEDS), len(STEPS))) < 0.5
    columns = grid_columns([_Cfg(r) for r in RATES], ["learning_rate"])
    columns["learning_rate"] = columns["learning_rate"].astype(np.float32)
    table = results_table({"orm": success}, columns)
    table["seed"] = np.asarray(SEEDS, np.int32)[table["seed"].to_numpy()]
    table["step"] = np.asarray(STEPS, np.int32)[table["step"].to_numpy() - 1]
    table["loss"] = rng.normal(size=len(table))
    table.loc[5, "loss"] = np.nan
    table = table.sample(frac=1.0, random_state=1).reset_index(drop=True)
    io.write_parquet(path / "results.parquet", table)
    io.write_json(path / "summary.json", SUMMARY)
    io.write_json(path / "config.json", {
        "experiment": STUDY, "config": CONFIG, "metadata": {"jax": "x"},
        "grid": {"grid": {"learning_rate": list(RATES)}, "fields": ["learning_rate"],
                 "num_configs": len(RATES)}})
    return table


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("exp") / "run"
    path.mkdir()
    return path, _write_run_dir(path)


def expected_runs(table):
    """``{(config, seed): (steps, {metric: values}, params, figures)}`` from the table by
    plain pandas (the obvious reference)."""
    out = {}
    for (config, seed), rows in table.groupby(["config", "seed"]):
        rows = rows.sort_values("step")
        rate = RATES[config]
        params = {"seeds": 2, "episodes": 8, "learning_rate": rate, "modes": "orm",
                  "schedule": [1, 2], "nested.depth": 3, "config": int(config),
                  "mode": "orm", "seed": int(seed)}
        figures = {"summary/seeds": 2.0, "summary/ep50_ratio": 1.5,
                   "summary/timing/run_seconds": 0.25,
                   "summary/config/learning_rate": rate,
                   "summary/config/orm_ep50_median": SUMMARY["configs"][config][
                       "orm_ep50_median"]}
        curves = {"success": rows["success"].to_numpy(np.float64),
                  "loss": rows["loss"].to_numpy(np.float64)}
        out[(int(config), int(seed))] = (rows["step"].to_numpy(), curves, params, figures)
    assert len(out) == len(RATES) * len(SEEDS)
    return out


def label(config):
    return f"config={config},learning_rate={RATES[config]},mode=orm"


@pytest.fixture
def no_network(monkeypatch):
    """Any connection or name lookup other than loopback / unix sockets fails the test."""
    real_connect = socket.socket.connect
    local = {"127.0.0.1", "::1", "localhost"}

    def connect(self, address):
        if isinstance(address, tuple) and address[0] not in local:
            raise AssertionError(f"network connection to {address}")
        return real_connect(self, address)

    real_lookup = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if host not in local and host is not None:
            raise AssertionError(f"name lookup of {host}")
        return real_lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    for name in ("WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(Path(os.environ.get("TMPDIR", "/tmp")) / "rljax-wandb"))


def export(run_path, tracker, out, *extra):
    assert main(["export", str(run_path), "--to", tracker, "--out", str(out), *extra]) == 0
    return out


def assert_curve_equal(got_steps, got_values, steps, values, rtol=0.0):
    np.testing.assert_array_equal(np.asarray(got_steps), steps)
    np.testing.assert_allclose(np.asarray(got_values, np.float64), values, rtol=rtol)


# ----------------------------------------------------------------------------- MLflow


def test_mlflow_store_read_back_by_mlflow_client(run_dir, tmp_path, monkeypatch, no_network):
    from mlflow.tracking import MlflowClient

    path, table = run_dir
    out = export(path, "mlflow", tmp_path / "store")
    assert "MLFLOW_ALLOW_FILE_STORE" not in os.environ  # the exporter restored the env
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    client = MlflowClient(tracking_uri=out.as_uri())
    experiment = client.get_experiment_by_name(STUDY)
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    want = expected_runs(table)
    assert len(runs) == len(want)
    for run in runs:
        config, seed = int(run.data.params["config"]), int(run.data.tags["rljax.seed"])
        steps, curves, params, figures = want[(config, seed)]
        assert run.data.tags["rljax.config"] == label(config)
        assert run.info.run_name == f"{label(config)}/seed={seed}"
        assert run.info.status == "FINISHED"
        assert run.data.params == {k: json.dumps(v) if isinstance(v, list) else str(v)
                                   for k, v in params.items()}
        for name, values in curves.items():
            history = sorted(client.get_metric_history(run.info.run_id, name),
                             key=lambda m: m.step)
            assert_curve_equal([m.step for m in history], [m.value for m in history],
                               steps, values)
        for name, value in figures.items():
            (metric,) = client.get_metric_history(run.info.run_id, name)
            assert metric.step == steps[-1] and metric.value == pytest.approx(value)
        assert set(run.data.metrics) == {*curves, *figures}
        assert run.info.artifact_uri.startswith(out.resolve().as_uri())  # not the temp dir
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left


# ----------------------------------------------------------------------------- W&B


def inspect_wandb(run_dir):
    """The records of a W&B offline run, read by wandb's own transaction-log reader (the
    ``wandb leet inspect --json`` command, i.e. ``wandb-core leet inspect``)."""
    from wandb.util import get_core_path

    (log,) = run_dir.glob("run-*.wandb")
    proc = subprocess.run([get_core_path(), "leet", "inspect", "--no-observability", "--json",
                           "--run-file", str(log), str(run_dir.parent)],
                          capture_output=True, text=True, timeout=60, check=True)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def descendant_names():
    """Command names of this process's live descendants (from /proc, Linux)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:]
        state, ppid = rest.split()[:2]
        if state != "Z":
            parents[int(stat.parent.name)] = (int(ppid), name)
    found, frontier = [], {os.getpid()}
    while frontier:
        children = {pid for pid, (ppid, _) in parents.items() if ppid in frontier}
        found += [parents[pid][1] for pid in children]
        frontier = children
    return found


def _number(value):
    return float("nan") if value == "NaN" else float(value)


def test_wandb_offline_runs_read_back_by_wandb_reader(run_dir, tmp_path, no_network):
    path, table = run_dir
    out = export(path, "wandb", tmp_path / "wb")
    assert "WANDB_MODE" not in os.environ
    assert not [name for name in descendant_names() if "wandb" in name]  # service shut down
    want = expected_runs(table)
    run_dirs = sorted((out / "wandb").glob("offline-run-*"))
    assert len(run_dirs) == len(want)
    seen = set()
    for run_path in run_dirs:
        records = inspect_wandb(run_path)
        (run,) = [r["run"] for r in records if r["type"] == "run"]
        config = {k: v for k, v in run["config"]["update"].items() if k != "_wandb"}
        key = (config["config"], config["seed"])
        steps, curves, params, figures = want[key]
        seen.add(key)
        assert run["run_group"] == STUDY and run["project"] == "rljax"
        assert run["job_type"] == label(key[0])
        assert run["display_name"] == f"{label(key[0])}/seed={key[1]}"
        assert config == params
        history = [r["history"]["item"] for r in records if r["type"] == "history"]
        got_steps = [h["_step"] for h in history]
        for name, values in curves.items():
            assert_curve_equal(got_steps, [_number(h[name]) for h in history], steps, values)
        summary = {}
        for r in records:
            if r["type"] == "summary":
                summary.update(r["summary"]["update"])
        for name, value in {**figures, **{n: v[-1] for n, v in curves.items()}}.items():
            np.testing.assert_allclose(_number(summary[name]), value, err_msg=name)
        assert [r["exit"]["exit_code"] for r in records if r["type"] == "exit"] == [0]
    assert seen == set(want)


# ----------------------------------------------------------------------------- TensorBoard


def read_events(logdir):
    """``({(tag, step): value}, {hparam: value})`` of the event files in ``logdir``, read
    from the TFRecord framing (``uint64 length, uint32 CRC, data, uint32 CRC``) as
    ``Event`` protos, as tests/test_tensorboard.py does."""
    from google.protobuf.json_format import MessageToDict
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData

    scalars, hparams = {}, {}
    files = sorted(logdir.glob("events.out.tfevents.*"))
    assert len(files) == 1, list(logdir.iterdir())
    data = files[0].read_bytes()
    offset = 0
    while offset < len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        offset += 12
        event = Event.FromString(data[offset:offset + length])
        offset += length + 4
        for value in event.summary.value:
            if value.tag == "_hparams_/session_start_info":
                plugin = HParamsPluginData.FromString(value.metadata.plugin_data.content)
                hparams = MessageToDict(plugin.session_start_info)["hparams"]
            elif not value.tag.startswith("_hparams_"):
                scalars[(value.tag, event.step)] = value.simple_value
    return scalars, hparams


def test_tensorboard_events_one_subdirectory_per_run(run_dir, tmp_path, no_network):
    path, table = run_dir
    out = export(path, "tensorboard", tmp_path / "tb")
    want = expected_runs(table)
    subdirs = {p.parent.relative_to(out).as_posix() for p in out.rglob("events.out.*")}
    assert subdirs == {f"{label(c)}/seed={s}" for c, s in want}
    for (config, seed), (steps, curves, params, figures) in want.items():
        scalars, hparams = read_events(out / label(config) / f"seed={seed}")
        for name, values in curves.items():
            got = sorted((step, v) for (tag, step), v in scalars.items() if tag == name)
            assert_curve_equal([s for s, _ in got], [v for _, v in got], steps,
                               values.astype(np.float32), rtol=1e-7)
        for name, value in figures.items():
            assert scalars[(name, steps[-1])] == pytest.approx(value, rel=1e-6)
        assert len(scalars) == len(curves) * len(steps) + len(figures)
        assert hparams == {k: json.dumps(v) if isinstance(v, list) else v
                           for k, v in params.items()}


# ----------------------------------------------------------------------------- refusals


def _listing(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


@pytest.mark.parametrize("args, message", [
    (["--to", "neptune"], "error: --to: must be one of mlflow, wandb, tensorboard, got "
                          "'neptune'"),
    ([], "--to"),
    (["--to", "tensorboard", "--step", "nope"], "error: --step: "),
    (["--to", "tensorboard", "--step", "loss"], "error: --step: column 'loss' must hold "
                                                "integers >= 0"),
])
def test_bad_arguments_one_line_exit_2_nothing_written(run_dir, tmp_path, capsys, args,
                                                       message):
    path, _ = run_dir
    before = _listing(path.parent)
    assert main(["export", str(path), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert _listing(path.parent) == before


def test_not_a_finished_run_and_missing_tracker_exit_2(run_dir, tmp_path, capsys,
                                                       monkeypatch):
    from rljax import trackers

    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    io.write_parquet(unfinished / "results.parquet", pd.DataFrame({"seed": [0], "x": [1.0]}))
    for argv, message in (
            ([str(unfinished)], f"error: DIR: {unfinished} is not a finished run (no "
                                "config.json"),
            ([str(tmp_path / "absent")], "error: DIR: "),
    ):
        assert main(["export", *argv, "--to", "tensorboard"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(message), err
    monkeypatch.setitem(trackers.REQUIREMENTS, "wandb", ("wandb_is_not_installed", "wandb"))
    path, _ = run_dir
    assert main(["export", str(path), "--to", "wandb", "--out", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert err == ("error: --to: wandb needs the wandb package, which is not installed "
                   "(pip install wandb)\n")
    assert _listing(tmp_path) == ["unfinished", "unfinished/results.parquet"]


def test_existing_output_needs_force_and_a_failed_export_changes_nothing(
        run_dir, tmp_path, capsys, monkeypatch):
    from rljax.trackers import default_out, tensorboard_events

    path, _ = run_dir
    out = tmp_path / "tb"
    out.mkdir()
    (out / "mine.txt").write_text("precious")
    assert main(["export", str(path), "--to", "tensorboard", "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"error: --out: {out} exists; pass --force to replace it\n"
    assert _listing(out) == ["mine.txt"]

    def failing(finished, work, final):  # writes part of the output, then fails
        (work / "half").write_text("x")
        raise RuntimeError("disk full")

    monkeypatch.setattr(tensorboard_events, "write_tensorboard", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        main(["export", str(path), "--to", "tensorboard", "--out", str(out), "--force"])
    assert _listing(tmp_path) == ["tb", "tb/mine.txt"]  # old output kept, no temp left
    monkeypatch.undo()
    assert main(["export", str(path), "--to", "tensorboard", "--out", str(out),
                 "--force"]) == 0
    assert "mine.txt" not in _listing(out) and len(list(out.rglob("events.out.*"))) == 4
    assert default_out(path, "wandb") == path.resolve().with_name("run.wandb")
    before = _listing(path.parent)
    for where, message in ((path.parent, "holds the run directory"),
                           (path / "tb", "is inside the run directory")):
        assert main(["export", str(path), "--to", "tensorboard", "--out", str(where),
                     "--force"]) == 2  # --force never replaces the run itself
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    assert _listing(path.parent) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


# ----------------------------------------------------------------------------- reader rules


def test_reader_identity_step_and_summary_rules(tmp_path):
    """String columns tell configurations apart; a table without a step column has one row
    per run (logged at step 0) or needs ``--step``; ``--step`` picks the x-axis."""
    from rljax.trackers import RunDirError, read_run_dir

    io.write_json(tmp_path / "config.json", {"experiment": "toy", "config": {"a": 1}})
    io.write_json(tmp_path / "summary.json", {"mean_r": 2.5, "configs": 3})
    io.write_parquet(tmp_path / "results.parquet", pd.DataFrame({
        "seed": np.array([1, 0, 1, 0], np.int32), "arm": ["b", "b", "a", "a"],
        "r": [1.0, 2.0, 3.0, 4.0]}))
    finished = read_run_dir(tmp_path)
    assert finished.identity_columns == ["arm"] and finished.step_column is None
    assert [(r.name, r.steps.tolist(), r.curves["r"].tolist()) for r in finished.runs] == [
        ("arm=b/seed=0", [0], [2.0]), ("arm=b/seed=1", [0], [1.0]),
        ("arm=a/seed=0", [0], [4.0]), ("arm=a/seed=1", [0], [3.0])]
    assert finished.runs[0].params == {"a": 1, "arm": "b", "seed": 0}
    assert finished.runs[0].summary == {"summary/mean_r": 2.5, "summary/configs": 3.0}

    io.write_parquet(tmp_path / "results.parquet", pd.DataFrame({
        "seed": np.zeros(3, np.int32), "update": [20, 10, 30], "r": [1.0, 2.0, 3.0]}))
    with pytest.raises(RunDirError, match=r"^--step: .*several rows per \(seed\) and no "
                                          r"'step' column.*\['update'\]"):
        read_run_dir(tmp_path)
    (run,) = read_run_dir(tmp_path, step_column="update").runs
    assert run.steps.tolist() == [10, 20, 30] and run.curves["r"].tolist() == [2.0, 1.0, 3.0]
    io.write_parquet(tmp_path / "results.parquet", pd.DataFrame({
        "seed": np.zeros(2, np.int32), "step": [1, 1], "r": [1.0, 2.0]}))
    with pytest.raises(RunDirError, match=r"^--step: .*several rows per \(seed, step\)"):
        read_run_dir(tmp_path)


def test_offline_environment_while_writing_and_restored_after(run_dir, tmp_path, monkeypatch):
    """Each writer runs with its tracker's offline variables set (the API key and server
    URLs of the user's environment hidden) and the environment is restored afterwards."""
    from rljax import trackers
    from rljax.trackers import mlflow_store, wandb_offline

    path, _ = run_dir
    monkeypatch.setenv("WANDB_API_KEY", "secret")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking.example")
    for name in ("WANDB_MODE", "WANDB_BASE_URL", "WANDB_ERROR_REPORTING", "DO_NOT_TRACK",
                 "MLFLOW_DISABLE_TELEMETRY", "MLFLOW_ALLOW_FILE_STORE"):
        monkeypatch.delenv(name, raising=False)
    before = dict(os.environ)
    seen = {}

    def recorder(tracker):
        def write(finished, work, final):
            seen[tracker] = {k: os.environ.get(k) for k in (
                "WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_ERROR_REPORTING",
                "MLFLOW_TRACKING_URI", "MLFLOW_DISABLE_TELEMETRY", "MLFLOW_ALLOW_FILE_STORE",
                "DO_NOT_TRACK")}
            return 0
        return write

    monkeypatch.setattr(mlflow_store, "write_mlflow", recorder("mlflow"))
    monkeypatch.setattr(wandb_offline, "write_wandb", recorder("wandb"))
    for tracker in ("mlflow", "wandb"):
        trackers.export_run(path, tracker, out=tmp_path / tracker)
        assert dict(os.environ) == before
    assert seen["mlflow"] == {"WANDB_MODE": None, "WANDB_API_KEY": "secret",
                              "WANDB_BASE_URL": None, "WANDB_ERROR_REPORTING": None,
                              "MLFLOW_TRACKING_URI": None, "MLFLOW_DISABLE_TELEMETRY": "true",
                              "MLFLOW_ALLOW_FILE_STORE": "true", "DO_NOT_TRACK": "true"}
    assert seen["wandb"] == {"WANDB_MODE": "offline", "WANDB_API_KEY": None,
                             "WANDB_BASE_URL": None, "WANDB_ERROR_REPORTING": "false",
                             "MLFLOW_TRACKING_URI": "http://tracking.example",
                             "MLFLOW_DISABLE_TELEMETRY": None, "MLFLOW_ALLOW_FILE_STORE": None,
                             "DO_NOT_TRACK": "true"}


def test_stepless_table_with_a_crossed_factor_is_one_run_per_value_and_seed(tmp_path,
                                                                           no_network):
    """A study with no training step whose table has one row per (seed, probability), as
    grpo-signal writes it: the float column crossed with the seeds joins the identity, each
    (p, seed) is a tracker run holding its values at step 0; an integer column crossed with
    the seeds stays an x-axis to name with --step, and one seed cannot tell a factor from a
    metric."""
    from rljax.trackers import RunDirError, read_run_dir

    run = tmp_path / "signal"
    run.mkdir()
    probs, seeds = (0.05, 0.5, 0.95), (0, 1, 2, 3)
    rng = np.random.default_rng(0)
    table = pd.DataFrame({"seed": np.repeat(np.asarray(seeds, np.int32), len(probs)),
                          "p": np.tile(probs, len(seeds)),
                          "signal": rng.random(len(seeds) * len(probs)) < 0.5,
                          "rate": rng.random(len(seeds) * len(probs))})
    io.write_parquet(run / "results.parquet", table.sample(frac=1.0, random_state=0))
    io.write_json(run / "config.json", {"experiment": "grpo-signal",
                                        "config": {"seeds": 4, "base_seed": 0}})
    finished = read_run_dir(run)
    assert finished.identity_columns == ["p"] and finished.step_column is None
    assert finished.metric_columns == ["signal", "rate"]
    got = {(r.params["p"], r.seed): r for r in finished.runs}
    assert len(got) == len(finished.runs) == len(probs) * len(seeds)
    for row in table.itertuples():
        r = got[(row.p, row.seed)]
        assert r.name == f"p={row.p}/seed={row.seed}" and r.steps.tolist() == [0]
        assert r.curves == {"signal": [float(row.signal)], "rate": [row.rate]}
    out = export(run, "tensorboard", tmp_path / "tb")
    scalars, hparams = read_events(out / "p=0.5" / "seed=2")
    row = table[(table.p == 0.5) & (table.seed == 2)].iloc[0]
    assert scalars == {("signal", 0): float(row.signal),
                       ("rate", 0): pytest.approx(row.rate, rel=1e-7)}
    assert hparams["p"] == 0.5 and hparams["seed"] == 2

    io.write_parquet(run / "results.parquet", table.assign(p=(table.p * 100).astype(int)))
    with pytest.raises(RunDirError, match=r"^--step: .*several rows per \(seed\) and no "
                                          r"'step' column.*\['p'\]"):
        read_run_dir(run)
    io.write_parquet(run / "results.parquet", table[table.seed == 0])
    with pytest.raises(RunDirError, match=r"several rows per \(seed\) and no 'step'"):
        read_run_dir(run)
