"""The documentation site builds warning-free and covers what it must.

One build (``python -m sphinx -W --keep-going -b html docs OUT``, the command the README
and docs/contributing.md give; about 25 s on 2 cores), then these checks, in one test:

* the build has no warning (``-W``: an unresolved cross-reference or heading anchor, a
  page outside every toctree, a malformed docstring all fail it);
* the inventory (``objects.inv``) has every public name: ``rljax.__all__`` and the
  ``__all__`` (or public functions and classes) of every public module, each under its
  own dotted name or, for a re-export, the name where it is documented;
* every registered study (``rljax list``) has its page, ``docs/studies/NAME.md``, in the
  studies toctree;
* every link between the built pages resolves: its file exists and its ``#anchor`` is
  an ``id`` there;
* the configuration reference has a table for every config class, rendered from the
  declarations (every field of ``PPOTrainConfig`` and of each study's ``Config``);
* the site explains what a user meets first: ``max_steps_in_episode``, ``final_obs`` and
  truncation bootstrapping, ``--resume``.

The pages' code blocks are executed by tests/test_doc_pages.py, not by this build.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import posixpath
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import sphinx  # noqa: F401  (the docs extra is in dev: a missing Sphinx fails, never skips)
from sphinx.util.inventory import InventoryFile

from rljax.cli import EXPERIMENT_GROUP, registry

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))
import rljax_docs  # noqa: E402  (docs/_ext, the site's own extension)


def build_site(out: Path) -> None:
    """``sphinx -W`` into ``out``; fails with Sphinx's messages on any warning."""
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(out / ".doctrees"), str(DOCS), str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"sphinx -W failed:\n{done.stderr[-6000:]}"
    assert not done.stderr.strip(), f"sphinx printed warnings:\n{done.stderr[-6000:]}"


def inventory_names(site: Path) -> set[str]:
    with open(site / "objects.inv", "rb") as f:
        inventory = InventoryFile.load(f, "", posixpath.join)
    data = inventory.data if hasattr(inventory, "data") else inventory
    return {name for entries in data.values() for name in entries}


def _public_api() -> dict[str, list[str]]:
    """``{module: public names}`` computed here, not by the extension: ``rljax.__all__``,
    and for each module it lists (and ``rljax.config``) its ``__all__`` or else the
    functions and classes it defines whose names do not start with ``_``."""
    import rljax

    api = {"rljax": [n for n in rljax.__all__ if not inspect.ismodule(getattr(rljax, n))]}
    modules = [n for n in rljax.__all__ if inspect.ismodule(getattr(rljax, n))] + ["config"]
    for short in modules:
        mod = importlib.import_module(f"rljax.{short}")
        names = getattr(mod, "__all__", None) or [
            n for n, o in vars(mod).items() if not n.startswith("_")
            and (inspect.isclass(o) or inspect.isfunction(o)) and o.__module__ == mod.__name__]
        api[mod.__name__] = [n for n in names if not inspect.ismodule(getattr(mod, n))]
    return api


def check_every_public_name_is_in_the_inventory(site):
    names = inventory_names(site)
    api = _public_api()
    assert len(api) >= 20 and len(api["rljax"]) >= 50
    documented_objects = set()  # ids of the objects documented under one of their names
    for module, public in api.items():
        mod = importlib.import_module(module)
        documented_objects |= {id(getattr(mod, n)) for n in public if f"{module}.{n}" in names}
    missing = []
    for module, public in api.items():
        assert module in names, f"module {module} has no entry"
        mod = importlib.import_module(module)
        for name in public:
            obj = getattr(mod, name)
            if f"{module}.{name}" in names:
                continue
            # a re-exported class or function: documented once, under another name of it
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and id(obj) in documented_objects:
                continue
            missing.append(f"{module}.{name}")
    assert not missing, f"{len(missing)} public names are not documented: {missing[:20]}"


def check_every_study_has_its_page(site):
    studies = sorted(registry(EXPERIMENT_GROUP))
    assert len(studies) >= 13
    index = (site / "studies" / "index.html").read_text()
    for name in studies:
        assert (DOCS / "studies" / f"{name}.md").is_file(), f"no docs/studies/{name}.md"
        page = site / "studies" / f"{name}.html"
        assert page.is_file(), f"studies/{name}.html was not built"
        assert f'href="{name}.html"' in index, f"the studies index does not link {name}"
        text = page.read_text()
        assert f"rljax run {name}" in re.sub(r"<[^>]+>", "", text), (
            f"the {name} page does not show its command")


def check_committed_figures_are_rendered_on_study_pages(site):
    figures = sorted(p.stem for p in (ROOT / "experiments" / "figures").glob("*.json"))
    for name in figures:
        if not (DOCS / "studies" / f"{name}.md").is_file():
            continue  # a record of a study without its own page is checked above
        source = (DOCS / "studies" / f"{name}.md").read_text()
        if "{study-figures}" not in source:
            continue
        text = (site / "studies" / f"{name}.html").read_text()
        assert f"experiments/figures/{name}.json" in text, name


def _links(html: str) -> list[str]:
    return re.findall(r'<a [^>]*href="([^"]+)"', html)


def check_every_link_inside_the_site_resolves(site):
    pages = [p for p in site.rglob("*.html") if "_static" not in p.parts
             and "_modules" not in p.parts]
    ids_cache: dict[Path, set[str]] = {}
    broken = []
    for page in pages:
        for href in _links(page.read_text()):
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or href.startswith("mailto:"):
                continue
            target = page if not parts.path else (page.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(site)} -> {href}")
                continue
            if parts.fragment and target.suffix == ".html":
                if target not in ids_cache:
                    ids_cache[target] = set(re.findall(r'id="([^"]+)"', target.read_text()))
                if unquote(parts.fragment) not in ids_cache[target]:
                    broken.append(f"{page.relative_to(site)} -> {href} (no such anchor)")
    assert not broken, f"{len(broken)} broken links: {broken[:20]}"


def check_config_reference_is_rendered_from_the_declarations(site):
    from rljax.config import declared_fields
    from rljax.training import PPOTrainConfig

    text = (site / "reference" / "config.html").read_text()
    classes = rljax_docs.config_classes()
    assert "rljax.training.ppo_config.PPOTrainConfig" in classes
    assert {f"{ep.value}.Config" for ep in registry(EXPERIMENT_GROUP).values()
            if hasattr(ep.load(), "Config")} <= set(classes)
    for dotted in classes:
        assert f'id="{rljax_docs.nodes.make_id(dotted)}"' in text, dotted
    for field in declared_fields(PPOTrainConfig):
        assert f"<code class=\"docutils literal notranslate\"><span class=\"pre\">{field.name}" \
               f"</span></code>" in text, field.name
    # a default is the declaration's, not typed in
    default = dataclasses.fields(PPOTrainConfig)[0].default
    assert f"{default!r}" in text


def check_the_site_explains_what_a_new_user_meets(site):
    text = " ".join(re.sub(r"<[^>]+>", " ", p.read_text()) for p in site.rglob("*.html")
                    if "_static" not in p.parts)
    for phrase in ("max_steps_in_episode", "final_obs", "--resume", "bootstrap"):
        assert phrase in text, phrase
    tutorials = [p for p in (DOCS / "tutorials").glob("*.md") if p.stem != "index"]
    assert len(tutorials) >= 5, [p.name for p in tutorials]


def check_readme_links_into_the_site_resolve(site):
    """The README's relative links name existing pages of docs/, and their anchors exist
    in the built page (GitHub renders the same Markdown headings to the same slugs)."""
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(((?!https?:)[^)\s]+)\)", readme)
    assert len(links) >= 20, links
    broken = []
    for link in links:
        path, _, fragment = link.partition("#")
        if not (ROOT / path).is_file():
            broken.append(link)
            continue
        if fragment and path.startswith("docs/") and path.endswith(".md"):
            built = site / Path(path).relative_to("docs").with_suffix(".html")
            if f'id="{fragment}"' not in built.read_text():
                broken.append(f"{link} (no such anchor)")
    assert not broken, broken


CHECKS = [check_every_public_name_is_in_the_inventory, check_every_study_has_its_page,
          check_committed_figures_are_rendered_on_study_pages,
          check_every_link_inside_the_site_resolves,
          check_config_reference_is_rendered_from_the_declarations,
          check_the_site_explains_what_a_new_user_meets,
          check_readme_links_into_the_site_resolve]


@pytest.mark.timeout(600)
def test_the_site_builds_and_covers_what_it_must(tmp_path):
    """One build (about 25 s), then every check above; all of them run and every failure
    is reported (one test, so the build occupies one xdist worker while the other goes
    on)."""
    build_site(tmp_path)
    failures = []
    for check in CHECKS:
        try:
            check(tmp_path)
        except AssertionError as error:
            failures.append(f"{check.__name__}: {error}")
    assert not failures, "\n".join(failures)


def test_every_check_is_run():
    defined = {f for name, f in globals().items() if name.startswith("check_")}
    assert defined == set(CHECKS)
