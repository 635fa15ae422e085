"""Sphinx configuration of rljax's documentation site.

Build it with ``pip install -e '.[docs]'`` and
``python -m sphinx -W -b html docs docs/_build/html``; ``tests/test_docs_site.py`` builds it
the same way in CI. Pages are MyST Markdown; the config tables and each study's committed
figures are rendered from the code and ``experiments/figures/`` by ``_ext/rljax_docs.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent))  # the studies' configs (experiments.*) for their tables

project = "rljax"
author = "the rljax authors"
copyright = "2026, the rljax authors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "rljax_docs",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "figures/**/report.md", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "dollarmath", "deflist"]
myst_heading_anchors = 4  # `[text](page.md#a-heading)` links resolve and are checked

autodoc_default_options: dict = {}  # each section names its members (rljax_docs.APIReference)
autodoc_typehints = "description"
autodoc_member_order = "bysource"
autosummary_generate = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_use_ivar = True
nitpicky = False
# Google-style "Returns: low, high: ..." makes napoleon read `low` as a type, which then
# matches several attributes named low; those ambiguous type links are dropped, not errors.
suppress_warnings = ["ref.python"]

html_theme = "sphinx_book_theme"
html_title = "rljax"
html_theme_options = {"repository_url": "https://github.com/rljax/rljax",
                      "use_repository_button": False, "show_toc_level": 2}
