"""The tutorial notebooks of ``experiments/notebooks/``: stored without outputs, and they run.

Each notebook is executed top to bottom in a fresh ``python3`` kernel (nbclient) whose
working directory is a temporary folder, so nothing is written into the repository. The
notebooks are written by ``scripts/make_notebooks.py``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "experiments" / "notebooks").glob("*.ipynb"))

# A line each notebook must print (checked on the text outputs of its code cells).
EXPECTED = {
    "01_quickstart.ipynb": re.compile(r"^PRM reaches 50 % faster: True$", re.M),
    "02_custom_advantage.ipynb": re.compile(r"^decision: (adopt|reject|inconclusive)\b", re.M),
    "03_search.ipynb": re.compile(r"^ *16 simulations/move .*accuracy 0\.\d{3} ", re.M),
    "04_lm_grpo.ipynb": re.compile(r"^held-out greedy accuracy: 0\.\d{3} -> [01]\.\d{3}, "
                                   r"gain ", re.M),
}


def test_every_notebook_is_listed():
    assert NOTEBOOKS, "no notebooks found in experiments/notebooks/"
    assert {p.name for p in NOTEBOOKS} == set(EXPECTED)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        assert cell.get("outputs") == [], f"cell {index} of {path.name} has outputs"
        assert cell.get("execution_count") is None, (
            f"cell {index} of {path.name} has an execution count")


def _text_outputs(nb) -> str:
    parts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                parts.append(output.get("text", ""))
            elif "data" in output:
                parts.append(output["data"].get("text/plain", ""))
    return "".join(parts)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path, monkeypatch):
    # The kernel inherits this environment: CPU only; ipykernel's own (inline, headless)
    # matplotlib backend unless something set another one.
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.delenv("MPLBACKEND", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=180, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError naming the failing cell
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    text = _text_outputs(nb)
    assert EXPECTED[path.name].search(text), (
        f"{path.name} did not print the expected line; its output ends with:\n{text[-2000:]}")


def test_notebooks_match_their_generator():
    """The stored notebooks are exactly what ``scripts/make_notebooks.py`` writes (a
    notebook edited by hand, or a source edited without regenerating, fails here)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_notebooks.py"),
                           "--check"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
