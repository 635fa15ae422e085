"""Every config field table in docs/*.md is rendered from the code's declarations
(``rljax.config.fields_markdown``): a field added, renamed, re-bounded or re-documented
without ``python scripts/render_config_tables.py`` fails here."""

from pathlib import Path

import pytest
from script_module import load_script

ROOT = Path(__file__).resolve().parents[1]
render = load_script("render_config_tables")
TABLES = [(path, m[1]) for path in sorted((ROOT / "docs").rglob("*.md"))
          for m in render.MARKER.finditer(path.read_text())]


def test_the_config_classes_have_tables():
    names = {name for _, name in TABLES}
    assert "rljax.training.PPOTrainConfig" in names
    assert "experiments.ppo_cartpole.Config" in names
    assert {"rljax.training.LMTrainConfig", "rljax.training.LMGRPOConfig"} <= names


@pytest.mark.parametrize("path,name", TABLES, ids=[n for _, n in TABLES])
def test_table_is_rendered_from_the_declarations(path, name):
    from rljax.config import fields_markdown

    text = path.read_text()
    assert render.render(text) == text, (
        f"{path.name}'s table of {name} is stale; run python scripts/render_config_tables.py")
    table = fields_markdown(render.config_class(name))
    assert table in text and table.count("\n| `") >= 1
