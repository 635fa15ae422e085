"""``rljax run NAME --grid / --sample``: grids, samplers, records, refusals.

Runs a toy study (``helpers.toy_grid_study``: ``a``, ``b`` traced, ``width`` structural)
through the real command-line code, registered in place of the entry points.
"""

import json
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest
from helpers import toy_grid_study

from rljax import cli
from rljax.config import ConfigError, require_float
from rljax.grid import ConfigTable, make_grid, split_structural


class _EntryPoint:
    def __init__(self, module):
        self.module = module

    def load(self):
        return self.module


@pytest.fixture
def toy(monkeypatch):
    real = cli.registry

    def registry(group):
        known = dict(real(group))
        if group == cli.EXPERIMENT_GROUP:
            known["toy-grid"] = _EntryPoint(toy_grid_study)
        return known

    monkeypatch.setattr(cli, "registry", registry)
    return toy_grid_study


def _run(out, *args):
    return cli.main(["run", "toy-grid", "--out", str(out), *args])


def test_grid_run_writes_swept_columns_and_records_the_grid(tmp_path, toy, capsys):
    out = tmp_path / "g"
    assert _run(out, "--grid", "a=0.1,0.5", "--grid", "b=1,2,3") == 0
    err = capsys.readouterr().err
    assert "6 configs x 6 seeds; traced fields (a, b) share each" in err
    frame = pd.read_parquet(out / "results.parquet")
    assert list(frame.columns) == ["config", "a", "b", "seed", "r"]
    assert len(frame) == 36
    # Cartesian product, first axis slowest
    firsts = frame.groupby("config")[["a", "b"]].first()
    np.testing.assert_allclose(firsts["a"], [0.1, 0.1, 0.1, 0.5, 0.5, 0.5])
    np.testing.assert_allclose(firsts["b"], [1, 2, 3, 1, 2, 3])
    record = json.loads((out / "config.json").read_text())
    assert record["grid"] == {"grid": {"a": [0.1, 0.5], "b": [1.0, 2.0, 3.0]},
                              "fields": ["a", "b"], "num_configs": 6}
    # config (a=0.5, b=2) alone with --set is bitwise the grid's cell
    alone = tmp_path / "alone"
    assert _run(alone, "--set", "a=0.5", "--set", "b=2") == 0
    one = pd.read_parquet(alone / "results.parquet")
    cell = frame[(frame.config == 4)]
    np.testing.assert_array_equal(one["r"].to_numpy(), cell["r"].to_numpy())


def test_structural_grid_compiles_one_program_per_value(tmp_path, toy, capsys):
    out = tmp_path / "s"
    assert _run(out, "--grid", "width=16,64", "--grid", "a=0.2,0.4") == 0
    assert "2 distinct value(s) of the structural field(s) width" in capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["programs"] == 2 and summary["configs"] == 4
    frame = pd.read_parquet(out / "results.parquet")
    assert list(frame.groupby("config")["width"].first()) == [16, 16, 64, 64]
    alone = tmp_path / "alone"
    assert _run(alone, "--set", "width=64", "--set", "a=0.2") == 0
    np.testing.assert_array_equal(pd.read_parquet(alone / "results.parquet")["r"],
                                  frame[frame.config == 2]["r"])


def test_random_search_is_reproducible_from_its_seed(tmp_path, toy):
    args = ["--sample", "a=uniform:-1:1", "--sample", "b=loguniform:0.01:10",
            "--samples", "5", "--sample-seed", "3"]
    assert _run(tmp_path / "x", *args) == 0
    assert _run(tmp_path / "y", *args) == 0
    x = pd.read_parquet(tmp_path / "x" / "results.parquet")
    y = pd.read_parquet(tmp_path / "y" / "results.parquet")
    pd.testing.assert_frame_equal(x, y)
    b = x.groupby("config")["b"].first().to_numpy()
    assert len(b) == 5 and np.all((b >= 0.01) & (b <= 10))
    spec = json.loads((tmp_path / "x" / "config.json").read_text())["grid"]
    assert spec["samples"] == 5 and spec["sample_seed"] == 3
    assert spec["sample"] == {"a": "uniform:-1:1", "b": "loguniform:0.01:10"}
    assert _run(tmp_path / "z", *args[:-1], "4") == 0
    z = pd.read_parquet(tmp_path / "z" / "results.parquet")
    assert not np.allclose(z.groupby("config")["b"].first(), b)


@pytest.mark.parametrize("args, field", [
    (["--grid", "bogus=1,2"], "bogus"),
    (["--grid", "a=0.1,fast"], "a"),
    (["--grid", "a=0.1,5"], "a"),            # out of range (validate)
    (["--grid", "a="], "a"),                 # empty grid
    (["--grid", "a=0.1,,0.2"], "a"),
    (["--grid", "a=0.1,0.1"], "a"),          # a value twice
    (["--grid", "noequals"], "--grid"),
    (["--grid", "label=x,y"], "label"),      # a field the study cannot vary
    (["--grid", "seeds=1,2"], "seeds"),
    (["--grid", "a=0.1", "--grid", "a=0.2"], "a"),
    (["--grid", "a=0.1,0.2", "--set", "a=0.3"], "a"),
    (["--sample", "b=loguniform:0:1", "--samples", "3"], "b"),
    (["--sample", "b=loguniform:2:1", "--samples", "3"], "b"),
    (["--sample", "b=uniform:1", "--samples", "3"], "b"),
    (["--sample", "b=normal:0:1", "--samples", "3"], "b"),
    (["--sample", "width=uniform:1:5", "--samples", "3"], "width"),
    (["--sample", "b=uniform:0.1:1"], "--samples"),
    (["--samples", "3"], "--samples"),
    (["--sample", "b=uniform:0.1:1", "--samples", "0"], "--samples"),
    (["--sample", "a=uniform:-3:3", "--samples", "20"], "a"),  # draws out of range
])
def test_bad_grid_one_line_exit_2_nothing_written(tmp_path, toy, capsys, args, field):
    out = tmp_path / "out"
    assert _run(out, *args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: ") and field in err, err
    assert not out.exists()


def test_a_study_without_a_config_axis_refuses_a_grid(tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["run", "interval-coverage", "--out", str(out),
                     "--grid", "reps=10,20"]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot vary 'reps'" in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_more_than_a_million_runs_needs_yes(tmp_path, toy, capsys, monkeypatch):
    out = tmp_path / "big"
    values = ",".join(f"{x:.4f}" for x in np.linspace(0.01, 1.0, 200))
    assert _run(out, "--seeds", "6000", "--grid", f"a={values}") == 2
    err = capsys.readouterr().err.strip()
    assert "1,200,000 runs" in err and "--yes" in err and not out.exists()
    monkeypatch.setattr(toy, "run",
                        lambda config, out_dir, grid=None, options=None: {"ran": len(grid)})
    assert _run(out, "--seeds", "6000", "--grid", f"a={values}", "--yes") == 0


def test_resume_rebuilds_the_grid_and_refuses_another(tmp_path, toy, capsys):
    out = tmp_path / "r"
    record = {"experiment": "toy-grid", "config": {}, "code_version": "x",
              "grid_args": {"grid": ["a=0.1,0.2"], "sample": [], "samples": None,
                            "sample_seed": 0, "fields": ["a"]}}
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "run.json").write_text(json.dumps(record))
    assert _run(out, "--resume", "--grid", "a=0.1,0.3") == 2
    assert "same --grid" in capsys.readouterr().err


@dataclass(frozen=True)
class _Cfg:
    TRACED: ClassVar[tuple[str, ...]] = ("lr",)
    STRUCTURAL: ClassVar[tuple[str, ...]] = ("opt",)
    lr: float = 0.1
    opt: str = "sgd"
    n: int = 3

    def validate(self):
        require_float("lr", self.lr, low=0.0, low_inclusive=False)


def test_split_structural_groups_by_untraced_fields_in_first_seen_order():
    grid = make_grid(_Cfg, {}, grid=["opt=adam,sgd", "lr=0.1,0.2,0.3"])
    groups = split_structural(grid.configs(_Cfg()), _Cfg.TRACED)
    assert [g.structural for g in groups] == [{"opt": "adam"}, {"opt": "sgd"}]
    assert [list(g.config_ids) for g in groups] == [[0, 1, 2], [3, 4, 5]]
    np.testing.assert_allclose(groups[1].table.columns["lr"], [0.1, 0.2, 0.3])
    assert groups[0].table.columns["lr"].dtype == np.float32


def test_config_table_rows_and_salts():
    table = ConfigTable.from_rows([{"lr": 0.1, "n": 2, "on": True}, {"lr": 0.2, "n": 3,
                                                                      "on": False}])
    assert table.structure() == (("lr", "float32"), ("n", "int32"), ("on", "bool"))
    assert table.row(1) == {"lr": pytest.approx(0.2), "n": 3, "on": False}
    same = ConfigTable.from_rows([{"lr": 0.2, "n": 3, "on": False}])
    assert table.salt(1) == same.salt(0) != table.salt(0)
    with pytest.raises(ConfigError, match="configs"):
        ConfigTable.from_rows([])
    with pytest.raises(ConfigError, match="row 1"):
        ConfigTable.from_rows([{"lr": 0.1}, {"b": 0.2}])



def test_nonfinite_runs_are_named_by_config_and_seed(tmp_path, toy, capsys):
    out = tmp_path / "nan"
    assert _run(out, "--grid", "a=0.5,-1.8") == 0
    err = capsys.readouterr().err
    assert "config 1 seed 0" in err and "config 0" not in err
    records = json.loads((out / "nonfinite.json").read_text())
    assert {(r["config"], r["seed"]) for r in records} == {(1, s) for s in range(6)}
    frame = pd.read_parquet(out / "results.parquet")
    assert frame[frame.config == 0]["r"].notna().all()


def test_debug_nans_on_a_grid_reruns_the_first_config(tmp_path, toy, capsys):
    out = tmp_path / "dbg"
    assert _run(out, "--grid", "a=-1.8,0.5", "--debug-nans", "2") == 1
    assert "seed 2, sweep '01-toy-grid': first non-finite value" in capsys.readouterr().out
    assert _run(out, "--grid", "a=0.5,-1.8", "--debug-nans", "2") == 0  # config 0 is finite
    assert "stayed finite" in capsys.readouterr().out
    assert not out.exists()


def test_a_traced_field_set_to_none_is_structural():
    """``value_clip=None`` (clipping off) removes a branch from the program: its configs
    get their own program, without the field in the traced table; the others keep it."""
    from rljax.config import traced_values
    from rljax.grid import split_structural
    from rljax.training import PPOTrainConfig

    configs = [PPOTrainConfig(value_clip=v, learning_rate=lr)
               for v in (None, 0.2) for lr in (1e-3, 2e-3)]
    groups = split_structural(configs)
    assert [g.config_ids.tolist() for g in groups] == [[0, 1], [2, 3]]
    assert groups[0].structural == {"value_clip": None}
    assert "value_clip" not in groups[0].table.names
    assert groups[1].table.columns["value_clip"].tolist() == pytest.approx([0.2, 0.2])
    assert groups[0].table.columns["learning_rate"].tolist() == pytest.approx([1e-3, 2e-3])
    assert "value_clip" not in traced_values(configs[0])
