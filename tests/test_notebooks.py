"""The tutorial notebooks of ``experiments/notebooks/``: jupytext files that run.

The notebooks are kept as jupytext ``py:percent`` files (``NN_name.py``: ``# %%`` code
cells, ``# %% [markdown]`` cells, a jupytext header), so git stores text without outputs.
``jupytext --to ipynb experiments/notebooks/01_quickstart.py`` renders one to ``.ipynb``
on demand (the renders are git-ignored). Each notebook is executed top to bottom in a fresh
``python3`` kernel (nbclient) whose working directory is a temporary folder, so nothing is
written into the repository; a notebook with a check below must also print the figures its
check expects, and one without a check must still run without an error.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

import jupytext
import nbformat
import pytest
from jupytext.cli import jupytext as jupytext_cli
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "experiments" / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.py"))
# 04 is the slowest notebook and its printed figures depend on the CPU's instruction set
# (XLA's bits for its vmapped sampled GRPO steps): it runs with `python -m pytest -m slow`.
# 05: ~25 s of compiles (tests/test_alphazero.py is fast); 03: ~17 s, it quotes no figure
# in docs/notebooks.md (tests/test_search_*.py and test_mcts*.py are fast); 02: ~14 s, the
# tutorial docs/tutorials/own_advantage.md runs its estimator and paired test in the
# default run (tests/test_doc_pages.py); 01: ~10 s, the README's example (a REINFORCE sweep
# over 4096 seeds with its IQM interval) and tests/test_orm_vs_prm.py run its workload.
# The jupytext round trip and the quoted-figure rows of every notebook stay in the default
# run; `python -m pytest -m slow` executes them all.
SLOW = {"01_quickstart", "02_custom_advantage", "03_search", "04_lm_grpo", "05_alphazero"}
RUNS = [pytest.param(p, marks=pytest.mark.slow) if p.stem in SLOW else p for p in NOTEBOOKS]

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
    assert re.search(r"^P\(rank > (?:GRPO|RLOO)\) = .*\(paired\b", text, re.M), \
        "02: the probability of improvement is not the paired one (the arms share seeds)"


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


# Figures the docs' Notebooks table (docs/notebooks.md) quotes from each notebook: each must
# appear both in that table row and in the notebook's executed output (the table's arrows
# and minus signs read as the notebook's "->" and "-"), so the page cannot outlive the
# notebook.
NOTEBOOKS_PAGE = ROOT / "docs" / "notebooks.md"
PAGE_QUOTES = {
    "01_quickstart": ["239.8 [236.1, 243.9]", "64.9 [64.3, 65.6]"],
    "02_custom_advantage": ["0.637 [0.618, 0.656]"],
    "03_search": [],
    "04_lm_grpo": ["0.110 -> 0.276", "+0.166 [-0.066, +0.398]"],
}


def table_row(stem: str) -> str:
    """docs/notebooks.md's table row of notebook ``stem``, arrows and minus signs
    normalised."""
    for line in NOTEBOOKS_PAGE.read_text().splitlines():
        if line.startswith(f"| `{stem}` |"):
            return line.replace("\N{RIGHTWARDS ARROW}", "->").replace("\N{MINUS SIGN}", "-")
    raise AssertionError(f"docs/notebooks.md's table has no row for {stem}")


@pytest.mark.parametrize("name", sorted(PAGE_QUOTES))
def test_page_quotes_are_listed_in_the_row(name):
    row = table_row(name)
    for quote in PAGE_QUOTES[name]:
        assert quote in row, f"docs/notebooks.md's {name} row does not quote {quote!r}: {row}"


def test_every_notebook_has_a_row():
    """docs/notebooks.md lists every notebook."""
    for path in NOTEBOOKS:
        table_row(path.stem)


# What each notebook's printed output must show (checked on its code cells' text), by the
# notebook's file stem. A notebook without an entry must still run without an error.
EXPECTED = {
    "01_quickstart": check_quickstart,
    "02_custom_advantage": check_custom_advantage,
    "03_search": check_search,
    "04_lm_grpo": check_lm_grpo,
}


def test_every_check_names_a_notebook():
    """The notebooks are found, and every check and docs/notebooks.md quote is keyed by one of them
    (one keyed by a wrong name would silently never run)."""
    assert NOTEBOOKS, "no NN_name.py notebooks found in experiments/notebooks/"
    stems = {p.stem for p in NOTEBOOKS}
    assert set(EXPECTED) <= stems, f"checks for missing notebooks: {set(EXPECTED) - stems}"
    assert set(PAGE_QUOTES) <= stems, f"quotes of missing notebooks: {set(PAGE_QUOTES) - stems}"


def _cells(nb) -> list[tuple[str, str]]:
    return [(cell.cell_type, cell.source) for cell in nb.cells]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_a_jupytext_percent_file_that_round_trips(path):
    """The ``.py`` has jupytext's header (percent format, a python3 kernel) and is
    jupytext's own text of its notebook: py -> ipynb -> py gives the same text back."""
    text = path.read_text()
    nb = jupytext.reads(text, fmt="py:percent")
    representation = nb.metadata.get("jupytext", {}).get("text_representation", {})
    assert representation.get("format_name") == "percent", f"{path.name}: no percent header"
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3", path.name
    assert text.startswith("# ---\n") and "\n# %%" in text, path.name
    ipynb = jupytext.writes(nb, fmt="ipynb")
    back = jupytext.writes(jupytext.reads(ipynb, fmt="ipynb"), fmt="py:percent")
    if back != text:
        diff = difflib.unified_diff(text.splitlines(), back.splitlines(), "stored",
                                    "py -> ipynb -> py", lineterm="", n=1)
        raise AssertionError(f"{path.name} does not round-trip through jupytext:\n"
                             + "\n".join(list(diff)[:40]))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_rendered_notebook_has_the_same_cells_and_no_outputs(path, tmp_path):
    """``jupytext --to ipynb NN_name.py`` (the documented render) writes a valid notebook
    with the ``.py``'s cells, in order, and no outputs or execution counts."""
    source = tmp_path / path.name
    source.write_text(path.read_text())
    assert jupytext_cli(["--quiet", "--to", "ipynb", str(source)]) == 0
    rendered = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    nbformat.validate(rendered)
    assert _cells(rendered) == _cells(jupytext.read(path))
    kinds = {cell.cell_type for cell in rendered.cells}
    assert kinds <= {"code", "markdown"}, f"{path.name}: cell kinds {kinds}"
    for index, cell in enumerate(rendered.cells):
        if cell.cell_type != "code":
            continue
        assert cell.get("outputs") == [], f"cell {index} of {path.name} has outputs"
        assert cell.get("execution_count") is None, (
            f"cell {index} of {path.name} has an execution count")


def test_rendered_notebooks_are_ignored_by_git():
    """Renders next to their sources (``experiments/notebooks/*.ipynb``) stay out of git."""
    lines = (ROOT / ".gitignore").read_text().splitlines()
    assert "experiments/notebooks/*.ipynb" in lines


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
    nb = jupytext.read(path)
    client = NotebookClient(nb, timeout=180, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError naming the failing cell
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    text = _text_outputs(nb)
    missing = [q for q in PAGE_QUOTES.get(path.stem, []) if q not in text]
    assert not missing, (f"docs/notebooks.md quotes {missing} from {path.name}, which its run "
                         f"no longer prints; output ends with:\n{text[-2000:]}")
    check = EXPECTED.get(path.stem)
    if check is None:
        return  # no figures to check: running without an error is the test
    try:
        check(text)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{path.name}'s output ends with:\n{text[-2000:]}") from None


@pytest.mark.parametrize("name, text, fragment", [
    ("01_quickstart", "ORM: IQM episodes to 50 % = 60.0 [59.0, 61.0]; never\n"
     "PRM: IQM episodes to 50 % = 64.9 [64.3, 65.6]; never\n"
     "ORM / PRM ratio of IQMs = 0.92 [0.90, 0.95]\nPRM reaches 50 % faster: False\n", "half"),
    ("02_custom_advantage", "P(rank > GRPO) = 0.450 [0.410, 0.490]\n"
     "decision: reject: GRPO beats rank\n", "P(rank"),
    ("02_custom_advantage", "P(rank > GRPO) = 0.637 [0.603, 0.672] (unpaired bootstrap)\n"
     "decision: adopt: rank beats GRPO\n", "paired"),
    ("03_search", "  4 simulations/move (  32 per problem): accuracy 0.300 [0.250, 0.350];\n"
     " 16 simulations/move ( 128 per problem): accuracy 0.301 [0.246, 0.355];\n"
     " 64 simulations/move ( 512 per problem): accuracy 0.109 [0.066, 0.152];\n", "03"),
    ("04_lm_grpo", "evaluation prompts held out: True\n"
     "held-out greedy accuracy: 0.300 -> 0.280, gain -0.020 [-0.060, +0.020] (5 seeds)\n"
     "interval: two-way mean over 5 seeds x 100 prompts: t; measured coverage 0.9\n", "0.28"),
    ("04_lm_grpo", "evaluation prompts held out: True\n"
     "held-out greedy accuracy: 0.100 -> 0.300, gain +0.200 [+0.100, +0.300] (5 seeds)\n",
     "method"),
])
def test_checks_reject_a_wrong_result(name, text, fragment):
    """Each notebook's check fails on a printed result that contradicts its claim (a drop,
    a loss, a reversal, or a missing statement of the interval's method)."""
    with pytest.raises(AssertionError, match=re.escape(fragment)):
        EXPECTED[name](text)


RECORDED = {
    "01_quickstart": (
        "ORM: IQM episodes to 50 % = 239.8 [236.1, 243.9]; never reached: 1.4%\n"
        "PRM: IQM episodes to 50 % = 64.9 [64.3, 65.6]; never reached: 0.0%\n"
        "ORM / PRM ratio of IQMs = 3.69 [3.63, 3.76]\nPRM reaches 50 % faster: True\n"),
    "02_custom_advantage": ("P(rank > GRPO) = 0.637 [0.618, 0.656] (paired bootstrap over 512 "
                            "seeds)\n"
                            "decision: adopt: rank beats GRPO\n"),
    "03_search": (
        "  4 simulations/move (  32 per problem): accuracy 0.039 [0.016, 0.066]; by level\n"
        " 16 simulations/move ( 128 per problem): accuracy 0.301 [0.246, 0.355]; by level\n"
        " 64 simulations/move ( 512 per problem): accuracy 0.109 [0.066, 0.152]; by level\n"),
    "04_lm_grpo": (
        "split of level 0: 75 training problems, 25 held out; evaluation prompts held out: "
        "True\nheld-out greedy accuracy: 0.090 -> 0.280, gain +0.190 [+0.120, +0.260] "
        "(5 seeds x 100 prompts)\ninterval: two-way mean over 5 seeds x 100 prompts: "
        "two-way t interval; measured coverage 0.950 (min over 6 simulated distributions)\n"),
}


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_checks_accept_the_recorded_result(name):
    """The checks pass on output in the notebooks' own format with the measured figures."""
    EXPECTED[name](RECORDED[name])
