"""The study pages' text as the figure pins read it (tests/test_study_figures.py and
tests/test_study_env_figures.py): whitespace flattened, a study's page and its row of the
studies table."""

from __future__ import annotations

import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STUDIES = ROOT / "docs" / "studies"


def flat(text: str) -> str:
    """``text`` with every run of whitespace (line breaks included) read as one space."""
    return " ".join(text.split())


@functools.cache
def page(study: str) -> str:
    """The study's page, ``docs/studies/STUDY.md``, whitespace flattened."""
    return flat((STUDIES / f"{study}.md").read_text())


@functools.cache
def index_row(study: str) -> str:
    """The study's row of the studies table in ``docs/studies/index.md``."""
    rows = [line for line in (STUDIES / "index.md").read_text().splitlines()
            if line.startswith(f"| [`{study}`]({study}.md) |")]
    assert len(rows) == 1, f"docs/studies/index.md has {len(rows)} rows for {study}"
    return flat(rows[0])


class InIndex(str):
    """A figure quoted both on the study's page and in its row of the studies table."""
