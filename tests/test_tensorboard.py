"""AggregateWriter: the scalars read back from the event file (parsed here from the TFRecord
framing, no TensorBoard needed) equal numpy's nan-aware aggregates and rljax.stats' IQM;
chunk logs land at the right steps; one-line errors; a clear ImportError without
tensorboardX."""

import json
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorboardX  # noqa: F401  (a dev dependency: a missing one fails, never skips)

from rljax.stats import aggregate_iqm
from rljax.tensorboard import AggregateWriter, seed_aggregates, write_chunk_logs


def read_scalars(logdir):
    """``{(tag, step): value}`` of every scalar in the event files under ``logdir``.

    A TFRecord is ``uint64 length, uint32 masked CRC of the length, data, uint32 masked
    CRC of the data`` (little-endian); each ``data`` is an ``Event`` proto."""
    from tensorboardX.proto.event_pb2 import Event

    scalars = {}
    files = sorted(logdir.glob("events.out.tfevents.*"))
    assert files, list(logdir.iterdir())
    for path in files:
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack_from("<Q", data, offset)
            offset += 12
            event = Event.FromString(data[offset:offset + length])
            offset += length + 4
            for value in event.summary.value:
                scalars[(value.tag, event.step)] = value.simple_value
    return scalars


def expected(values):
    finite = values[np.isfinite(values)]
    return {"mean": np.mean(finite), "median": np.median(finite),
            "iqm": aggregate_iqm(finite[:, None]), "q25": np.percentile(finite, 25),
            "q75": np.percentile(finite, 75), "finite_seeds": finite.size}


def test_aggregates_read_back_equal_numpy_and_stats_iqm(tmp_path):
    rng = np.random.default_rng(0)
    returns = rng.normal(100.0, 30.0, size=13)
    returns[[2, 7]] = [np.nan, np.inf]  # two diverged seeds
    episodes = rng.integers(0, 5, size=13).astype(np.int32)
    with AggregateWriter(tmp_path) as writer:
        writer.write(40, {"return": returns, "stats": {"episodes": episodes}})
    scalars = read_scalars(tmp_path)
    assert len(scalars) == 2 * 6
    for name, values in (("return", returns), ("stats/episodes", episodes.astype(float))):
        for statistic, value in expected(values).items():
            got = scalars[(f"{name}/{statistic}", 40)]  # stored as float32
            np.testing.assert_allclose(got, value, rtol=1e-6, err_msg=statistic)
    assert scalars[("return/finite_seeds", 40)] == 11
    # against numpy's nan-aware functions where the only non-finite values are NaN
    no_inf = np.where(np.isinf(returns), np.nan, returns)
    np.testing.assert_allclose(scalars[("return/mean", 40)], np.nanmean(no_inf), rtol=1e-6)
    np.testing.assert_allclose(scalars[("return/median", 40)], np.nanmedian(no_inf), rtol=1e-6)
    np.testing.assert_allclose(scalars[("return/q75", 40)], np.nanpercentile(no_inf, 75),
                               rtol=1e-6)


def test_iqm_is_the_middle_half_mean():
    values = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 100.0])
    assert seed_aggregates(values)["iqm"] == pytest.approx(np.mean([2.0, 3.0, 4.0, 5.0]))


def test_no_finite_seed_writes_only_the_count(tmp_path):
    assert seed_aggregates(np.array([np.nan, np.inf])) == {"finite_seeds": 0.0}
    with AggregateWriter(tmp_path) as writer:
        writer.write(0, {"loss": np.array([np.nan, np.nan])})
    assert read_scalars(tmp_path) == {("loss/finite_seeds", 0): 0.0}


def test_chunk_logs_row_by_row(tmp_path):
    rng = np.random.default_rng(1)
    logs = {"return_sum": rng.normal(size=(5, 3)), "ppo": {"loss": rng.normal(size=(5, 3))}}
    with AggregateWriter(tmp_path) as writer:
        write_chunk_logs(writer, logs, first_step=1024, steps_per_row=512)
    scalars = read_scalars(tmp_path)
    assert {step for _, step in scalars} == {1024, 1536, 2048}
    for i, step in enumerate((1024, 1536, 2048)):
        for name, values in (("return_sum", logs["return_sum"]), ("ppo/loss",
                                                                   logs["ppo"]["loss"])):
            want = expected(values[:, i])
            for statistic in ("mean", "median", "iqm"):
                np.testing.assert_allclose(scalars[(f"{name}/{statistic}", step)],
                                           want[statistic], rtol=1e-6, atol=1e-7)


def test_bad_inputs_fail_with_one_line(tmp_path):
    with AggregateWriter(tmp_path) as writer:
        cases = [
            (lambda: writer.write(-1, {"x": np.ones(3)}), "^step:"),
            (lambda: writer.write(1.5, {"x": np.ones(3)}), "^step:"),
            (lambda: writer.write(0, {"x": np.ones((3, 2))}), "^x:"),
            (lambda: writer.write(0, {"x": np.ones(0)}), "^x:"),
            (lambda: write_chunk_logs(writer, {"x": np.ones(3)}, 0, 1), "^x:"),
            (lambda: write_chunk_logs(writer, {"x": np.ones((3, 2)), "y": np.ones((3, 1))},
                                      0, 1), "^y:"),
            (lambda: write_chunk_logs(writer, {"x": np.ones((3, 2))}, 0, 0),
             "^steps_per_row:"),
            (lambda: write_chunk_logs(writer, {"x": np.ones((3, 2))}, -4, 1), "^first_step:"),
        ]
        for call, match in cases:
            with pytest.raises(ValueError, match=match) as err:
                call()
            assert "\n" not in str(err.value)


def test_missing_tensorboardx_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # import now fails
    with pytest.raises(ImportError, match=r"pip install 'rljax\[tensorboard\]'") as err:
        AggregateWriter(tmp_path)
    assert "\n" not in str(err.value)


def test_cli_tensorboard_writes_per_chunk_aggregates(tmp_path, monkeypatch):
    """``rljax run ... --tensorboard DIR`` on a chunked study: one point per chunk, each the
    aggregate over seeds of that chunk's logs (mean over the chunk's rows)."""
    sys.path.insert(0, str(Path(__file__).parent / "helpers"))
    import chunked_study

    from rljax import cli

    real = cli.registry

    class EntryPoint:
        def load(self):
            return chunked_study

    monkeypatch.setattr(cli, "registry", lambda group: {
        **real(group), **({"chunked-test": EntryPoint()} if group == cli.EXPERIMENT_GROUP
                          else {})})
    board = tmp_path / "tb"
    args = ["run", "chunked-test", "--out", str(tmp_path / "out"), "--tensorboard", str(board),
            "--set", "chunks=3", "--set", "width=8"]
    assert cli.main(args) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    got = read_scalars(board / "01-walk")
    for chunk in range(3):
        values = np.array([row[chunk] for row in summary["x0"]], np.float32)
        for name, value in expected(values).items():
            assert got[(f"x0/{name}", chunk + 1)] == pytest.approx(float(value), rel=1e-6)


def test_cli_tensorboard_on_a_study_that_cannot_write_it_exits_2(tmp_path, capsys,
                                                                  monkeypatch):
    """``--tensorboard`` on a study that does not declare ``SUPPORTS_TENSORBOARD`` (it runs
    no ``ChunkedSweep``) is refused: exit 2, one line naming the flag, nothing written, the
    study never run. Without the flag the same study runs."""
    import types

    sys.path.insert(0, str(Path(__file__).parent / "helpers"))
    import chunked_study

    from rljax import cli

    calls = []
    plain = types.ModuleType("plain_study")
    plain.Config, plain.DESCRIPTION = chunked_study.Config, "test: a Sweep-only study"

    def run(config, out_dir, options=None):
        calls.append(out_dir)
        return {"ok": 1}

    plain.run = run

    class EntryPoint:
        def load(self):
            return plain

    real = cli.registry
    monkeypatch.setattr(cli, "registry", lambda group: {
        **real(group), **({"plain-test": EntryPoint()} if group == cli.EXPERIMENT_GROUP
                          else {})})
    out, board = tmp_path / "out", tmp_path / "tb"
    capsys.readouterr()
    code = cli.main(["run", "plain-test", "--out", str(out), "--tensorboard", str(board)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: --tensorboard:") and "plain-test" in err
    assert err.count("\n") == 1
    assert not out.exists() and not board.exists() and calls == []
    assert cli.main(["run", "plain-test", "--out", str(out)]) == 0 and len(calls) == 1


def test_supports_tensorboard_is_declared_exactly_by_chunked_studies():
    """Every registered study declares ``SUPPORTS_TENSORBOARD = True`` iff its source runs a
    ``ChunkedSweep`` (the only sweep that writes TensorBoard logs), directly or through
    ``rljax.grid.run_grid`` over a trainer's chunked programs (``make_ppo_chunks``, the
    off-policy ``make_*_chunks``)."""
    import ast
    import inspect

    from rljax import cli

    chunked_makers = ("ChunkedSweep", "make_ppo_chunks", "make_dqn_chunks", "make_pqn_chunks",
                      "make_sac_chunks")

    def calls_chunked_sweep(module):
        """The source calls or hands on a chunked program's maker (the off-policy studies
        pass theirs to experiments.offpolicy_env, whose make_chunks a study may import)."""
        tree = ast.parse(inspect.getsource(module))
        named = any(getattr(node, "id", getattr(node, "attr", None)) in chunked_makers
                    for node in ast.walk(tree) if isinstance(node, ast.Name | ast.Attribute))
        imported = any(isinstance(node, ast.ImportFrom) and node.module ==
                       "experiments.offpolicy_env" and any(a.name == "make_chunks"
                                                           for a in node.names)
                       for node in ast.walk(tree))
        return named or imported

    studies = {name: ep.load() for name, ep in cli.registry(cli.EXPERIMENT_GROUP).items()}
    declared = {n for n, m in studies.items() if cli.supports_tensorboard(m)}
    chunked = {n for n, m in studies.items() if calls_chunked_sweep(m)}
    assert declared == chunked, {n: studies[n].__file__ for n in declared ^ chunked}
    assert {"ppo-cartpole", "lm-grpo"} <= declared and "orm-vs-prm" not in declared
