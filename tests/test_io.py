"""Atomic writes: a failed write leaves the old file and no temp file."""

import os

import pytest

from rljax import io


def test_atomic_write_keeps_old_file_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    io.write_json(path, {"a": 1})

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        io.write_json(path, {"a": 2})
    monkeypatch.undo()
    assert io.read_json(path) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_check_output_dir(tmp_path):
    assert io.check_output_dir(tmp_path / "new", overwrite=False) == tmp_path / "new"
    assert not (tmp_path / "new").exists()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(io.OutputExistsError, match="--overwrite"):
        io.check_output_dir(tmp_path / "full", overwrite=False)
    io.check_output_dir(tmp_path / "full", overwrite=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(io.OutputExistsError, match="not a directory"):
        io.check_output_dir(tmp_path / "file", overwrite=True)
