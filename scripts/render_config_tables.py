"""Rewrite every config field table in docs/*.md from the code's declarations.

A table sits between ``<!-- fields:module.Class -->`` and ``<!-- /fields:module.Class -->``
and is ``rljax.config.fields_markdown(module.Class)``; ``tests/test_config_docs.py``
fails while one differs, so after adding or changing a field run::

    python scripts/render_config_tables.py
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

from rljax.config import fields_markdown

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!-- fields:(\w+(?:\.\w+)+) -->\n(.*?)<!-- /fields:\1 -->", re.DOTALL)


def config_class(dotted: str) -> type:
    """The class a marker names (``rljax.training.PPOTrainConfig``)."""
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def render(text: str) -> str:
    """``text`` with every marked table rendered from its class."""
    return MARKER.sub(lambda m: f"<!-- fields:{m[1]} -->\n"
                      f"{fields_markdown(config_class(m[1]))}\n<!-- /fields:{m[1]} -->", text)


def main() -> int:
    changed = []
    for path in sorted((ROOT / "docs").rglob("*.md")):
        text = path.read_text()
        new = render(text)
        if new != text:
            path.write_text(new)
            changed.append(path.relative_to(ROOT).as_posix())
    print("rewrote " + ", ".join(changed) if changed else "every config table is current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
