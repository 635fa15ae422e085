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
# 04 is the slowest notebook and its printed figures depend on the CPU's instruction set
# (XLA's bits for its vmapped sampled GRPO steps): it runs with `python -m pytest -m slow`.
RUNS = [pytest.param(p, marks=pytest.mark.slow) if p.name == "04_lm_grpo.ipynb" else p
        for p in NOTEBOOKS]

NUMBER = r"([-+]?\d+(?:\.\d+)?)"


def _numbers(pattern: str, text: str, name: str) -> list[float]:
    """The numbers captured by ``pattern`` (``NUMBER`` groups) on the line it matches."""
    match = re.search(pattern, text, re.M)
    assert match, f"{name}: no line matches {pattern!r}"
    return [float(v) for v in match.groups()]


def _interval(label: str) -> str:
    """``label point [low, high]`` with three captured numbers."""
    return rf"{label} {NUMBER} \[{NUMBER}, {NUMBER}\]"


def check_quickstart(text: str) -> None:
    """01: PRM reaches 50 % success faster than ORM, by a ratio near the study's 3.7."""
    orm = _numbers(_interval(r"^ORM: IQM episodes to 50 % ="), text, "01")
    prm = _numbers(_interval(r"^PRM: IQM episodes to 50 % ="), text, "01")
    assert prm[0] < orm[0] / 2, f"01: PRM {prm[0]} episodes is not under half ORM's {orm[0]}"
    assert prm[2] < orm[1], "01: the PRM and ORM intervals overlap"
    ratio = _numbers(_interval(r"^ORM / PRM ratio of IQMs ="), text, "01")
    assert 2.5 < ratio[0] < 5.0 and ratio[1] > 1.0, f"01: ORM / PRM ratio {ratio}"
    assert re.search(r"^PRM reaches 50 % faster: True$", text, re.M), "01: not faster"


def check_custom_advantage(text: str) -> None:
    """02: the rank advantage beats the best baseline with probability ~0.64 (interval
    above 0.5), and the decision says adopt."""
    poi = _numbers(_interval(r"^P\(rank > (?:GRPO|RLOO)\) ="), text, "02")
    assert 0.55 < poi[0] < 0.75 and poi[1] > 0.5, f"02: P(rank > baseline) = {poi}"
    assert poi[1] <= poi[0] <= poi[2]
    assert re.search(r"^decision: adopt\b", text, re.M), "02: the decision is not adopt"


def check_search(text: str) -> None:
    """03: 16 simulations per move beat 4 by a wide margin, and 64 do not beat 16 (the
    flat prior's deeper search undoes progress: the notebook's reading)."""
    acc = {int(n): _numbers(_interval(rf"^ *{n} simulations/move .*accuracy"), text, "03")
           for n in (4, 16, 64)}
    assert acc[16][0] > acc[4][0] + 0.1 and acc[16][1] > acc[4][2], f"03: {acc}"
    assert acc[64][0] < acc[16][0], f"03: 64 simulations beat 16: {acc}"


def check_lm_grpo(text: str) -> None:
    """04: held-out (disjoint) accuracy rises by more than 0.05 under GRPO, and the
    interval's method and coverage are printed."""
    assert re.search(r"evaluation prompts held out: True$", text, re.M), "04: not held out"
    before, after, gain, low, high = _numbers(
        rf"^held-out greedy accuracy: {NUMBER} -> {NUMBER}, gain {NUMBER} "
        rf"\[{NUMBER}, {NUMBER}\]", text, "04")
    assert after > before + 0.05, f"04: held-out accuracy {before} -> {after}"
    assert low <= gain <= high and gain == pytest.approx(after - before, abs=2e-3)
    assert re.search(r"^interval: two-way mean over \d+ seeds x \d+ prompts: .*coverage",
                     text, re.M), "04: the interval's method and coverage are not stated"


# Figures the README's Notebooks table quotes from each notebook: each must appear both in
# that table row and in the notebook's executed output (README arrows and minus signs
# read as the notebook's "->" and "-"), so the README cannot outlive the notebook.
README_QUOTES = {
    "01_quickstart.ipynb": ["239.8 [236.1, 243.9]", "64.9 [64.3, 65.6]"],
    "02_custom_advantage.ipynb": ["0.637 [0.603, 0.672]"],
    "03_search.ipynb": [],
    "04_lm_grpo.ipynb": ["0.110 -> 0.276", "+0.166 [-0.066, +0.398]"],
}


def readme_row(name: str) -> str:
    """The README's Notebooks-table row of notebook ``name``, arrows and minus signs
    normalised."""
    stem = name.removesuffix(".ipynb")
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith(f"| `{stem}` |"):
            return line.replace("\N{RIGHTWARDS ARROW}", "->").replace("\N{MINUS SIGN}", "-")
    raise AssertionError(f"README's Notebooks table has no row for {stem}")


@pytest.mark.parametrize("name", sorted(README_QUOTES))
def test_readme_quotes_are_listed_in_the_row(name):
    row = readme_row(name)
    for quote in README_QUOTES[name]:
        assert quote in row, f"README's {name} row does not quote {quote!r}: {row}"


# What each notebook's printed output must show (checked on its code cells' text).
EXPECTED = {
    "01_quickstart.ipynb": check_quickstart,
    "02_custom_advantage.ipynb": check_custom_advantage,
    "03_search.ipynb": check_search,
    "04_lm_grpo.ipynb": check_lm_grpo,
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
            elif "data" in output:  # a rich output is a line of its own
                parts.append(f"\n{output['data'].get('text/plain', '')}\n")
    return "".join(parts)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.name)
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
    missing = [q for q in README_QUOTES[path.name] if q not in text]
    assert not missing, (f"README quotes {missing} from {path.name}, which its run no longer "
                         f"prints; output ends with:\n{text[-2000:]}")
    try:
        EXPECTED[path.name](text)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{path.name}'s output ends with:\n{text[-2000:]}") from None


def test_notebooks_match_their_generator():
    """The stored notebooks are exactly what ``scripts/make_notebooks.py`` writes (a
    notebook edited by hand, or a source edited without regenerating, fails here)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_notebooks.py"),
                           "--check"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name, text, fragment", [
    ("01_quickstart.ipynb", "ORM: IQM episodes to 50 % = 60.0 [59.0, 61.0]; never\n"
     "PRM: IQM episodes to 50 % = 64.9 [64.3, 65.6]; never\n"
     "ORM / PRM ratio of IQMs = 0.92 [0.90, 0.95]\nPRM reaches 50 % faster: False\n", "half"),
    ("02_custom_advantage.ipynb", "P(rank > GRPO) = 0.450 [0.410, 0.490]\n"
     "decision: reject: GRPO beats rank\n", "P(rank"),
    ("03_search.ipynb", "  4 simulations/move (  32 per problem): accuracy 0.300 [0.250, 0.350];\n"
     " 16 simulations/move ( 128 per problem): accuracy 0.301 [0.246, 0.355];\n"
     " 64 simulations/move ( 512 per problem): accuracy 0.109 [0.066, 0.152];\n", "03"),
    ("04_lm_grpo.ipynb", "evaluation prompts held out: True\n"
     "held-out greedy accuracy: 0.300 -> 0.280, gain -0.020 [-0.060, +0.020] (5 seeds)\n"
     "interval: two-way mean over 5 seeds x 100 prompts: t; measured coverage 0.9\n", "0.28"),
    ("04_lm_grpo.ipynb", "evaluation prompts held out: True\n"
     "held-out greedy accuracy: 0.100 -> 0.300, gain +0.200 [+0.100, +0.300] (5 seeds)\n",
     "method"),
])
def test_checks_reject_a_wrong_result(name, text, fragment):
    """Each notebook's check fails on a printed result that contradicts its claim (a drop,
    a loss, a reversal, or a missing statement of the interval's method)."""
    with pytest.raises(AssertionError, match=re.escape(fragment)):
        EXPECTED[name](text)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_checks_accept_the_recorded_result(name):
    """The checks pass on output in the notebooks' own format with the measured figures."""
    EXPECTED[name](RECORDED[name])


RECORDED = {
    "01_quickstart.ipynb": (
        "ORM: IQM episodes to 50 % = 239.8 [236.1, 243.9]; never reached: 1.4%\n"
        "PRM: IQM episodes to 50 % = 64.9 [64.3, 65.6]; never reached: 0.0%\n"
        "ORM / PRM ratio of IQMs = 3.69 [3.63, 3.76]\nPRM reaches 50 % faster: True\n"),
    "02_custom_advantage.ipynb": ("P(rank > GRPO) = 0.637 [0.603, 0.672]\n"
                                  "decision: adopt: rank beats GRPO\n"),
    "03_search.ipynb": (
        "  4 simulations/move (  32 per problem): accuracy 0.039 [0.016, 0.066]; by level\n"
        " 16 simulations/move ( 128 per problem): accuracy 0.301 [0.246, 0.355]; by level\n"
        " 64 simulations/move ( 512 per problem): accuracy 0.109 [0.066, 0.152]; by level\n"),
    "04_lm_grpo.ipynb": (
        "split of level 0: 75 training problems, 25 held out; evaluation prompts held out: "
        "True\nheld-out greedy accuracy: 0.090 -> 0.280, gain +0.190 [+0.120, +0.260] "
        "(5 seeds x 100 prompts)\ninterval: two-way mean over 5 seeds x 100 prompts: "
        "two-way t interval; measured coverage 0.950 (min over 6 simulated distributions)\n"),
}
