"""The code's structure, checked from its own imports and declarations (issue 32):

* no import circle among the modules of ``rljax/`` and ``experiments/`` (every import
  counted, lazy ones inside functions included; ``if TYPE_CHECKING:`` blocks are not
  imports), so the modules have a bottom-up order and no arrow runs back up it;
* ``rljax/`` never imports ``experiments/``, and no module of ``rljax/`` imports the
  package ``rljax`` itself (an arrow to the top) other than its submodules;
* no study imports another registered study;
* no study re-declares a trainer's field: a study config that shares fields with a
  trainer's config extends it, and those fields are the trainer's declarations;
* no config class declares more than 30 fields, and no library config has more than 30;
* ``experiments/`` does not grow back (a ceiling at today's line count).
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from rljax.cli import EXPERIMENT_GROUP, registry

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rljax", "experiments")
MAX_FIELDS = 30


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "notebooks" not in path.parts:
                found[_module_name(path)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module file ``name`` lives in (its longest known prefix)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"


def _imports(module: str) -> set[str]:
    """The known modules ``module`` imports anywhere in its body (``from pkg import sub``
    names the submodule ``pkg.sub`` where one exists)."""
    tree = ast.parse(MODULES[module].read_text())
    skip = {id(n) for node in ast.walk(tree) if _is_type_checking(node)
            for n in ast.walk(node)}
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                prefix = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(prefix + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                     for a in node.names]
        else:
            continue
        for name in names:
            target = _resolve(name)
            if target is not None and target != module:
                out.add(target)
    return out


GRAPH = {m: _imports(m) for m in MODULES}


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return out


def test_the_graph_is_read():
    """The import reader sees the arrows it should (so the checks below can fail)."""
    assert "rljax.training.ppo_config" in GRAPH["rljax.training.ppo"]
    assert "rljax.grid" in GRAPH["experiments.ppo_cartpole"]
    assert "rljax.training.episode_returns" in GRAPH["experiments.ppo_env"]


def test_no_import_circles():
    assert _cycles() == []


def test_the_library_never_imports_studies_nor_its_own_top():
    for module, targets in GRAPH.items():
        if module.startswith("rljax"):
            assert not any(t.startswith("experiments") for t in targets), module
            if module != "rljax":
                assert "rljax" not in targets, f"{module} imports the package rljax itself"


STUDIES = {name: ep.value for name, ep in registry(EXPERIMENT_GROUP).items()}


def test_no_study_imports_another_study():
    modules = set(STUDIES.values())
    for name, module in STUDIES.items():
        assert not (GRAPH[module] & modules), f"study {name} imports {GRAPH[module] & modules}"


def _trainer_configs() -> list[type]:
    """The trainers' config classes (``rljax.training``'s ``*Config`` dataclasses)."""
    import rljax.training as training

    return [getattr(training, n) for n in dir(training) if n.endswith("Config")
            and isinstance(getattr(training, n), type)
            and dataclasses.is_dataclass(getattr(training, n))]


def _copies(tree: ast.AST, names: set[str]) -> list[str]:
    """``k=<anything>.k`` keywords of calls to ``names`` (a trainer config built from a
    study config's same-named fields) or to ``replace``: a field copied by name."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = getattr(node.func, "id", getattr(node.func, "attr", None))
        if func not in names and func != "replace":
            continue
        out += [k.arg for k in node.keywords
                if isinstance(k.value, ast.Attribute) and k.value.attr == k.arg
                and getattr(k.value.value, "id", None) in ("self", "config", "c", "cfg")]
    return out


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_no_study_redeclares_a_trainers_field(name):
    """A study's config extends the trainer's config it drives (its fields are the
    trainer's declarations, the same ``Field`` objects or ``with_defaults``' copies with
    the same metadata) and builds no trainer config by copying same-named fields."""
    module = registry(EXPERIMENT_GROUP)[name].load()
    trainers = _trainer_configs()
    copied = _copies(ast.parse(Path(module.__file__).read_text()),
                     {t.__name__ for t in trainers})
    assert not copied, f"study {name} copies trainer fields by name: {copied}"
    fields = {f.name: f for f in dataclasses.fields(module.Config)}
    for trainer in trainers:
        if issubclass(module.Config, trainer):
            for f in dataclasses.fields(trainer):
                assert fields[f.name].metadata == f.metadata, (name, f.name)


def test_the_copy_check_can_fail():
    tree = ast.parse("PPOTrainConfig(num_envs=self.num_envs, gamma=0.9)\n"
                     "dataclasses.replace(base, lam=config.lam)")
    assert _copies(tree, {"PPOTrainConfig"}) == ["num_envs", "lam"]


def _declared_counts(cls: type) -> dict[str, int]:
    """Fields each class of ``cls``'s dataclass MRO declares itself (a class made by
    ``rljax.config.with_defaults`` only changes defaults and declares none)."""
    out = {}
    for klass in cls.__mro__:
        if dataclasses.is_dataclass(klass):
            annotations = klass.__dict__.get("__annotations__", {})
            bases = {f.name for b in klass.__bases__ if dataclasses.is_dataclass(b)
                     for f in dataclasses.fields(b)}
            out[klass.__qualname__] = len([a for a in annotations if a not in bases])
    return out


def test_no_config_declares_more_than_30_fields():
    import rljax.training as training

    library = [getattr(training, n) for n in dir(training) if n.endswith("Config")
               and isinstance(getattr(training, n), type)]
    for cls in library:
        assert len(dataclasses.fields(cls)) <= MAX_FIELDS, cls.__name__
    for name in STUDIES:
        config = registry(EXPERIMENT_GROUP)[name].load().Config
        for klass, count in _declared_counts(config).items():
            assert count <= MAX_FIELDS, f"{name}: {klass} declares {count} fields"


#: ``experiments/``'s line count may fall, never rise past this: 11,993 before issue 32
#: (studies 8,430, benchmarks 2,589, notebooks 974), 10,253 after it (studies 6,693).
#: Issue 33 raised it once, to 10,621: lm-grpo's eight new measurements (+269 lines) and
#: lm-variants' grid-extension report (+98);
#: their generic pieces went to the library (rljax.curriculum.difficulty.pass_at_k_curve
#: and zero_signal_probability, rljax.training.lm_warm_start, rljax.search.lm_search).
#: Issue 35 raised it to 10,968: `rljax bench lm-scale` (+314: LoRA memory at four sizes,
#: the padded sampler, the 8-device sharding check; the sharding and the trainer's LoRA
#: mode live in the library) and lm-grpo's `task` knob with a checkpoint's tokenizer (+33).
#: Issue 36 raised it to 12,214: the dqn / pqn / sac studies (+88, three Config lines over
#: one harness, experiments/offpolicy_env.py +429: run shape, presets, figures, paired
#: grid, report), offpolicy-compare (+240: tuning on tuning seeds, fresh-seed report,
#: pairs) and `rljax bench offpolicy` (+490 against rejax's DQN, PQN and SAC); the
#: trainers, their configs, presets and chunking live in the library (rljax.training).
EXPERIMENTS_CEILING = 12_214


def test_experiments_do_not_grow():
    lines = sum(len(p.read_text().splitlines()) for p in (ROOT / "experiments").rglob("*.py"))
    assert lines <= EXPERIMENTS_CEILING, lines
