"""The API reference builds with pdoc (scripts/build_api_docs.py) and covers the public API."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pdoc  # noqa: F401  (a dev dependency: a missing one fails, never skips)
import pytest
from script_module import load_script


@pytest.fixture(scope="module")
def api_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("api")
    before = set(sys.modules)
    assert load_script("build_api_docs").main(["--out", str(out)]) == 0
    # the reference documents rljax alone: building it imports no study
    imported = {n for n in set(sys.modules) - before if n.split(".")[0] == "experiments"}
    assert not imported, sorted(imported)
    return out


def test_index_and_module_pages(api_dir):
    import rljax

    assert (api_dir / "index.html").is_file()
    index = (api_dir / "rljax.html").read_text()
    modules = [n for n in rljax.__all__ if isinstance(getattr(rljax, n), type(rljax))]
    for name in modules:  # every public subpackage/module has its own page, linked
        assert (api_dir / "rljax" / f"{name}.html").is_file(), name
        assert f"rljax/{name}.html" in index, name
    sweep = (api_dir / "rljax" / "sweep.html").read_text()
    assert "ChunkedSweep" in sweep and "run_sweep" in sweep


def test_google_sections_are_rendered(api_dir):
    # docformat "google": "Args:" becomes a section, reST roles are resolved (outside the
    # <pre> blocks, which hold the shown source with its raw docstrings)
    page = (api_dir / "rljax" / "advantages.html").read_text()
    rendered = re.sub(r"<pre>.*?</pre>", "", page, flags=re.S)
    assert "generalized_advantage_estimation" in rendered
    assert "Arguments:" in rendered
    assert ":func:`" not in rendered and ":class:`" not in rendered
    assert '<a href="#Baseline">Baseline</a>' in rendered


def test_failure_is_one_line_and_nonzero(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert load_script("build_api_docs").main(["--out", str(blocker)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: build_api_docs:") and err.count("\n") == 1
