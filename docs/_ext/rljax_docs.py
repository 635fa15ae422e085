"""Sphinx directives that render rljax's documentation from the code, so it cannot drift.

* ``config-fields``: one config class's field table (``rljax.config.fields_markdown``):
  every field's type, default, kind (traced / structural / run), allowed values and help.
* ``config-reference``: a section with that table for every config class of the library
  (:func:`config_classes`) and every registered study's ``Config``.
* ``study-figures``: a study's committed record (``experiments/figures/NAME.json``,
  written by ``scripts/record_figures.py`` from a run at the study's defaults): the command,
  the commit, the wall time and every summary figure that has a 95 % interval.

Tables are Markdown parsed by MyST inside the directive, so they look like the pages' own.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import json
import math
import pkgutil
import re
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive, directives
from docutils.statemachine import StringList

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "experiments" / "figures"


def _class(dotted: str) -> type:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def config_classes() -> list[str]:
    """Dotted names of every config class: a dataclass of ``rljax`` or of a registered
    study's module with fields declared by ``rljax.config.param``, where it is defined."""
    import rljax
    from rljax.cli import EXPERIMENT_GROUP, registry
    from rljax.config import declared_fields

    modules = [importlib.import_module(m.name) for m in
               pkgutil.walk_packages(rljax.__path__, "rljax.")]
    modules += [ep.load() for ep in registry(EXPERIMENT_GROUP).values()]
    found: dict[str, None] = {}
    for module in modules:
        for name, obj in sorted(vars(module).items()):
            if (isinstance(obj, type) and dataclasses.is_dataclass(obj)
                    and obj.__module__ == module.__name__ and declared_fields(obj)):
                found[f"{module.__name__}.{name}"] = None
    return sorted(found, key=lambda n: (not n.startswith("rljax."), n))


def _markdown(directive: Directive, text: str) -> list[nodes.Node]:
    """``text`` (MyST Markdown) parsed in the directive's context."""
    container = nodes.container()
    directive.state.nested_parse(StringList(text.splitlines(), "rljax_docs"),
                                 directive.content_offset, container)
    return container.children


class ConfigFields(Directive):
    """``{config-fields} rljax.training.PPOTrainConfig``: that class's field table."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        from rljax.config import fields_markdown

        return _markdown(self, fields_markdown(_class(self.arguments[0])))


class ConfigReference(Directive):
    """``{config-reference}``: a section per config class with its docstring's first line
    and its field table."""

    def run(self) -> list[nodes.Node]:
        from rljax.config import fields_markdown

        out = []
        for dotted in config_classes():
            cls = _class(dotted)
            section = nodes.section(ids=[nodes.make_id(dotted)], names=[dotted])
            section += nodes.title(text=dotted)
            doc = (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
            doc = re.sub(r":(\w+):`", r"{py:\1}`", doc)  # reST roles in MyST's syntax
            body = (f"{doc}\n\n" if doc else "") + fields_markdown(cls)
            section.extend(_markdown(self, body))
            out.append(section)
        return out


def _number(x: float) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return str(x)
    if float(x).is_integer() and abs(x) < 1e9:
        return f"{int(x)}"
    return f"{x:.4g}".replace("-", "\N{MINUS SIGN}")


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_interval(ci: object) -> bool:
    return isinstance(ci, list) and len(ci) == 2 and all(_is_number(c) for c in ci)


def _row(name: str, value: float, ci: list) -> tuple[str, str, str]:
    return name, _number(value), f"[{_number(ci[0])}, {_number(ci[1])}]"


def _paired_rows(name: str, value: object, ci: object) -> list[tuple[str, str, str]]:
    """Rows of ``value`` against its interval ``ci``: a number and a pair, or two dicts
    with the same keys (``accuracy`` beside ``accuracy_ci``), recursively."""
    if _is_number(value) and _is_interval(ci):
        return [_row(name, value, ci)]
    if isinstance(value, dict) and isinstance(ci, dict):
        return [row for k in value if k in ci
                for row in _paired_rows(f"{name}.{k}", value[k], ci[k])]
    return []


def interval_rows(summary: dict, prefix: str = "") -> list[tuple[str, str, str]]:
    """``(name, value, [low, high])`` for every figure of ``summary`` with a 95 % interval,
    at any depth (nested names joined with dots), in the summary's order: ``NAME`` beside
    ``NAME_ci`` (numbers, or dicts of them with the same keys), or a dict holding a
    ``point`` (or ``diff``) with ``ci`` or ``low`` and ``high``."""
    rows = []
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if key.endswith("_ci") and key[:-3] in summary:
            continue
        if f"{key}_ci" in summary:
            rows += _paired_rows(name, value, summary[f"{key}_ci"])
        elif isinstance(value, dict):
            point = next((value[k] for k in ("point", "diff") if _is_number(value.get(k))),
                         None)
            ci = value.get("ci", [value.get("low"), value.get("high")])
            if point is not None and _is_interval(ci):
                rows.append(_row(name, point, ci))
            else:
                rows += interval_rows(value, f"{name}.")
    return rows


class StudyFigures(Directive):
    """``{study-figures} NAME``: the committed run of study ``NAME`` and its figures with
    95 % intervals, read from ``experiments/figures/NAME.json``."""

    required_arguments = 1
    option_spec = {"limit": directives.nonnegative_int}

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        path = FIGURES / f"{name}.json"
        if not path.is_file():
            raise self.error(f"study-figures: no committed record {path.relative_to(ROOT)}")
        record = json.loads(path.read_text())
        env = self.state.document.settings.env
        env.note_dependency(str(path))
        rows = interval_rows(record["summary"])
        limit = self.options.get("limit", 80)
        shown = rows if limit is None else rows[:limit]
        wall = record.get("wall_seconds")
        lines = [
            f"Committed run (`experiments/figures/{name}.json`): `rljax run {name}` at the "
            f"study's defaults, commit `{record.get('git_commit', '?')[:10]}`, code version "
            f"`{record.get('code_version', '?')}`"
            + (f", {wall / 60:.1f} min wall" if isinstance(wall, (int, float)) else "")
            + f". Its {len(rows)} figures with a 95 % interval"
            + ("" if len(shown) == len(rows) else f" (the first {len(shown)})") + ":",
            "",
            "| figure | value | 95 % interval |",
            "|---|---|---|",
        ]
        lines += [f"| `{k}` | {v} | {ci} |" for k, v, ci in shown]
        if not rows:
            lines = lines[:1] + ["", "(this summary names no figure with an interval)"]
        return _markdown(self, "\n".join(lines))


def public_modules() -> list[str]:
    """``rljax`` and every public subpackage or module: the modules named in
    ``rljax.__all__``, and ``rljax.config`` (whose ``param`` every config uses)."""
    import rljax

    names = [f"rljax.{n}" for n in rljax.__all__ if inspect.ismodule(getattr(rljax, n))]
    return ["rljax"] + sorted(set(names) | {"rljax.config"})


def public_names(module: str) -> list[str]:
    """The public names of ``module``: its ``__all__`` (submodules left out: each has its
    own section), or else the functions and classes it defines whose names do not start
    with ``_``."""
    mod = importlib.import_module(module)
    if hasattr(mod, "__all__"):
        return [n for n in mod.__all__ if not inspect.ismodule(getattr(mod, n))]
    return [n for n, obj in vars(mod).items() if not n.startswith("_")
            and (inspect.isclass(obj) or inspect.isfunction(obj))
            and obj.__module__ == module]


def canonical_name(obj: object) -> str | None:
    """``module.qualname`` of a class or function (where it is defined), else ``None``."""
    if inspect.isclass(obj) or inspect.isfunction(obj):
        return f"{obj.__module__}.{obj.__qualname__}"
    return None


@functools.cache
def _library_modules() -> tuple:
    import rljax

    return tuple(importlib.import_module(m.name)
                 for m in pkgutil.walk_packages(rljax.__path__, "rljax."))


def attribute_doc(obj: object, name: str) -> str:
    """The docstring of constant ``name`` (the string literal after its assignment) in the
    module that defines it, found among the library's modules by identity; ``""`` if none."""
    from sphinx.pycode import ModuleAnalyzer

    for module in _library_modules():
        if vars(module).get(name) is obj:
            docs = ModuleAnalyzer.for_module(module.__name__).find_attr_docs()
            if ("", name) in docs:
                return "\n".join(docs["", name]).strip()
    return ""


def _data_directive(module: str, name: str, obj: object) -> list[str]:
    value = repr(obj)
    value = value if len(value) <= 70 else value[:67] + "..."
    doc = attribute_doc(obj, name) or "(a constant)"
    return ["", f".. py:data:: {name}", f"   :module: {module}",
            f"   :value: {value}", ""] + [f"   {line}" for line in doc.splitlines()]


class APIReference(Directive):
    """``{api-reference}``: a section per public module (:func:`public_modules`); each
    public class or function is documented once, in the first section that exports it
    (subpackages before the top level, which re-exports them), and listed with a link
    elsewhere; a constant is documented in every module that exports it, with the
    docstring of the module that defines it."""

    def run(self) -> list[nodes.Node]:
        modules = public_modules()
        documented: dict[str, str] = {}  # canonical name -> where documented
        plans = {}
        for module in modules[1:] + modules[:1]:
            mod = importlib.import_module(module)
            own, data, elsewhere = [], [], []
            for name in public_names(module):
                obj = getattr(mod, name)
                key = canonical_name(obj)
                if key is None:
                    data.append((name, obj))
                elif key in documented:
                    elsewhere.append((name, documented[key]))
                else:
                    documented[key] = f"{module}.{name}"
                    own.append(name)
            plans[module] = own, data, elsewhere
        blocks = []
        for module in modules:
            own, data, elsewhere = plans[module]
            blocks += [f"## `{module}`", "", "```{eval-rst}", f".. automodule:: {module}"]
            if own:
                blocks += [f"   :members: {', '.join(own)}"]
            for name, obj in data:
                blocks += _data_directive(module, name, obj)
            blocks += ["```", ""]
            if elsewhere:
                links = ", ".join(f"{{py:obj}}`{name} <{target}>`" for name, target in elsewhere)
                blocks += [f"Also exported here: {links}.", ""]
        return _markdown(self, "\n".join(blocks))


def setup(app):
    app.add_directive("api-reference", APIReference)
    app.add_directive("config-fields", ConfigFields)
    app.add_directive("config-reference", ConfigReference)
    app.add_directive("study-figures", StudyFigures)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
