"""Every public name of rljax has a docstring, and every one that handles arrays documents shapes.

The public API is every name in ``rljax.__all__`` and, for each module listed there, every
name in its ``__all__`` (or, for a module without one, its public functions and classes
defined in that module). For each name:

(a) **A docstring.** Functions and classes need their own ``__doc__`` (not the
    ``Name(field, ...)`` text that dataclasses and NamedTuples generate), of at least
    three words. Constants (tuples, dicts, floats, type aliases) cannot carry ``__doc__``;
    they need a string literal right after their assignment in the defining module, the
    variable docstring Sphinx autodoc renders (docs/reference/api.md). Public methods and
    properties that rljax defines on those classes need a docstring too, their own or one
    inherited from a base class (autodoc shows the inherited one).

(b) **Shapes.** The docstring of every public function and class documents shapes: it
    contains a bracketed shape (``[]``, ``[N]``, ``[B, T]``, ``[S, ...]``,
    ``[num_states, num_actions]``, ``[G - 1]``: names, numbers, ``...`` and simple
    arithmetic between commas) or the word "shape(s)" or "scalar(s)". Exempt are
    exceptions and the names in :data:`NO_ARRAYS` below, which take and return no arrays;
    the test checks that each of those is also not *array-typed* (see below), so the list
    cannot hide an array API. Methods and properties need shapes when they are
    array-typed.

**Array-typed**: an annotation of a parameter or of the return names ``Array``,
``ArrayLike``, ``ndarray``, ``PRNGKey``, ``Numeric`` or ``Params`` (also inside
``Callable[...]``, ``tuple[...]``, ...), or a positional parameter has no annotation
(rljax annotates everything except array-likes such as the score arrays of
``rljax.stats``).
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
import types
from functools import cache

import pytest

import rljax

# Names that take and return no arrays, so need no shapes; each with the reason. Keys are
# the defining module's dotted name (``rljax.io``: the whole module) or ``module.qualname``.
NO_ARRAYS = {
    # files: paths, bytes, JSON, DataFrames, figures
    "rljax.io": "file I/O of paths, bytes, JSON, DataFrames and figures",
    # run-time options, a context manager, and the code fingerprint
    "rljax.study": "the run protocol: output directory, run record, resume, config.json",
    # argument validators run at build time on Python values
    "rljax.losses.check_clip": "validates clip hyperparameters at build time",
    "rljax.losses.check_aggregation": "validates an aggregation-mode string",
    "rljax.losses.check_kl_estimator": "validates a KL-estimator name",
    "rljax.sweep.check_sweep_args": "validates the seed count and block size",
    "rljax.policies.distributions.check_supports": "validates a head against a space",
    "rljax.envs.registry.is_brax": "whether an env name string starts with brax:",
    "rljax.training.lm.LMTrainConfig": "a frozen dataclass of Python settings",
    "rljax.training.ppo_config.PPOTrainConfig": "a frozen dataclass of Python settings",
    "rljax.training.offpolicy_config.DQNTrainConfig": "a frozen dataclass of Python settings",
    "rljax.training.offpolicy_config.PQNTrainConfig": "a frozen dataclass of Python settings",
    "rljax.training.offpolicy_config.SACTrainConfig": "a frozen dataclass of Python settings",
    "rljax.sweep.SweepOptions": "a run's options: paths, flags, the sweeps' names",
    "rljax.sensitivity.Score": "what a score is: name, support, cap (Python floats)",
    "rljax.sensitivity.write_plot": "draws a summary's curves (lists) to a PNG",
    "rljax.sensitivity.report_markdown": "markdown text from a summary dict",
    "rljax.sensitivity.reading": "plain-language text from a summary dict",
    "rljax.contracts.env_function_names": "names of a user's env methods, for messages",
    "rljax.contracts.function_name": "a user's callable's name, for messages",
    "rljax.contracts.warn_no_final_obs": "a warning naming an env",
    # static-only parameter structs (every field pytree_node=False)
    "rljax.envs.base.EnvParams": "one static int (the episode-length limit), no leaves",
    "rljax.envs.chain.ChainParams": "one static int (the chain length), no leaves",
    # statistics on Python floats
    "rljax.stats.comparisons.TestResult": "a test's statistic, p-value and df: Python floats",
    "rljax.stats.power.welch_power": "closed-form power from Python floats and ints",
    "rljax.stats.power.welch_seeds": "closed-form seed count from Python floats",
    "rljax.stats.data.atari100k_games": "a list of game names",
    # configuration grids built from Python values (names, typed scalars, dataclasses)
    "rljax.config": "config declarations and checks of Python values (names, bounds)",
    "rljax.grid.single_grid": "a Grid of one config's Python values",
    "rljax.grid.parse_grid": "parses --grid strings into typed Python values",
    "rljax.grid.Sampler": "one --sample axis; draws Python scalars",
    "rljax.grid.parse_sample": "parses a --sample string",
    "rljax.grid.make_grid": "builds a Grid of validated Python values from CLI strings",
    # process setup
    "rljax.distributed.initialize": "starts jax.distributed from addresses and counts",
    "rljax.distributed.is_primary": "whether this is process 0",
}

ARRAY_ANNOTATION = re.compile(r"\b(Array|ArrayLike|ndarray|PRNGKey|Numeric|Params)\b")
_DIM = r"(?:\.\.\.|[A-Za-z_]\w*|\d+)(?:\s*[-+*/]\s*(?:[A-Za-z_]\w*|\d+))*"
SHAPE = re.compile(
    rf"\[\s*\]|\[\s*{_DIM}(?:\s*,\s*{_DIM})*\s*\]|\bshapes?\b|\bscalars?\b", re.IGNORECASE
)


def _public_api() -> list[tuple[str, object]]:
    """``(public name, object)`` for every public name, first name of each object kept."""
    names: list[tuple[str, object]] = []
    modules = []
    for name in rljax.__all__:
        obj = getattr(rljax, name)
        if isinstance(obj, types.ModuleType):
            modules.append(obj)
        else:
            names.append((f"rljax.{name}", obj))
    for module in modules:
        exported = getattr(module, "__all__", None)
        if exported is None:
            exported = [
                n for n, o in vars(module).items()
                if not n.startswith("_") and (inspect.isfunction(o) or inspect.isclass(o))
                and getattr(o, "__module__", None) == module.__name__
            ]
        names.extend((f"{module.__name__}.{n}", getattr(module, n)) for n in exported)
    seen: set[int] = set()
    unique = []
    for name, obj in names:
        if id(obj) not in seen:
            seen.add(id(obj))
            unique.append((name, obj))
    return unique


API = _public_api()
# a type alias of ``typing.Any`` (``RecurrentState = Any``, as in mctx) is a class on Python
# 3.11+; it is documented like a constant, by the string literal after its assignment
ROUTINES = [(n, o) for n, o in API if (inspect.isroutine(o) or inspect.isclass(o))
            and getattr(o, "__module__", None) != "typing"]
CONSTANTS = [(n, o) for n, o in API if (n, o) not in ROUTINES]


def _location(obj) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def _is_exempt(obj) -> bool:
    return obj.__module__ in NO_ARRAYS or _location(obj) in NO_ARRAYS


def _own_doc(obj) -> str:
    doc = vars(obj).get("__doc__") if inspect.isclass(obj) else obj.__doc__
    if not doc:
        return ""
    doc = inspect.cleandoc(doc)
    if inspect.isclass(obj) and doc.startswith(f"{obj.__name__}("):
        return ""  # generated by dataclass / NamedTuple: no documentation
    return doc


def _non_trivial(doc: str) -> bool:
    return len(doc.split()) >= 3


def _annotation_text(annotation) -> str:
    return annotation if isinstance(annotation, str) else repr(annotation)


def _array_typed(fn) -> bool:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    for parameter in signature.parameters.values():
        if parameter.name in ("self", "cls") or parameter.kind is parameter.VAR_KEYWORD:
            continue
        if parameter.annotation is parameter.empty:
            return True
        if ARRAY_ANNOTATION.search(_annotation_text(parameter.annotation)):
            return True
    returns = signature.return_annotation
    return returns is not signature.empty and bool(
        ARRAY_ANNOTATION.search(_annotation_text(returns))
    )


def _members(cls) -> list[tuple[str, object]]:
    """Public methods and properties rljax defines on ``cls`` (not inherited ones)."""
    found = []
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        elif isinstance(member, property):
            member = member.fget
        if inspect.isfunction(member) and member.__module__.startswith("rljax"):
            found.append((name, member))
    return found


def _inherited_doc(cls, name: str) -> str:
    """The docstring autodoc shows for ``cls.name``: its own, else the nearest base's."""
    for base in cls.__mro__:
        member = vars(base).get(name)
        if member is None:
            continue
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        elif isinstance(member, property):
            member = member.fget
        if getattr(member, "__doc__", None):
            return inspect.cleandoc(member.__doc__)
    return ""


@cache
def _variable_docstrings(module_name: str) -> dict[str, str]:
    """``{name: docstring}`` of module-level assignments followed by a string literal."""
    module = sys.modules[module_name]
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError):
        return {}
    docs = {}
    body = tree.body
    for statement, following in zip(body, body[1:], strict=False):
        if isinstance(statement, ast.Assign):
            targets = [t.id for t in statement.targets if isinstance(t, ast.Name)]
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            targets = [statement.target.id]
        else:
            continue
        if (isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)):
            for target in targets:
                docs[target] = inspect.cleandoc(following.value.value)
    return docs


def _constant_doc(public_name: str, obj) -> str:
    """The variable docstring of a constant, from whichever rljax module assigns it."""
    short = public_name.rpartition(".")[2]
    for module_name, module in list(sys.modules.items()):
        if module_name.split(".")[0] != "rljax" or module is None:
            continue
        if vars(module).get(short) is obj and short in _variable_docstrings(module_name):
            return _variable_docstrings(module_name)[short]
    return ""


def test_the_walk_covers_the_api():
    assert len(ROUTINES) > 150 and CONSTANTS
    for key in NO_ARRAYS:  # the allowlist names real places
        assert key in sys.modules or any(
            _location(o) == key for _, o in ROUTINES), f"NO_ARRAYS names nothing: {key}"


MODULES = [rljax] + [getattr(rljax, n) for n in rljax.__all__
                    if isinstance(getattr(rljax, n), types.ModuleType)]


@pytest.mark.parametrize("module", MODULES, ids=[m.__name__ for m in MODULES])
def test_module_has_docstring(module):
    assert _non_trivial(inspect.cleandoc(module.__doc__ or "")), module.__name__


@pytest.mark.parametrize("name,obj", ROUTINES, ids=[n for n, _ in ROUTINES])
def test_has_docstring(name, obj):
    doc = _own_doc(obj)
    assert _non_trivial(doc), f"{name} ({_location(obj)}) has no docstring of its own"


@pytest.mark.parametrize("name,obj", CONSTANTS, ids=[n for n, _ in CONSTANTS])
def test_constant_has_docstring(name, obj):
    doc = _constant_doc(name, obj)
    assert _non_trivial(doc), (
        f"{name}: add a docstring (a string literal) right after its assignment")


@pytest.mark.parametrize("name,obj", ROUTINES, ids=[n for n, _ in ROUTINES])
def test_documents_shapes(name, obj):
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        return
    if _is_exempt(obj):
        assert not _array_typed(obj), (
            f"{name} is in NO_ARRAYS but its signature handles arrays; document its shapes "
            "and drop it from the list")
        return
    assert SHAPE.search(_own_doc(obj)), (
        f"{name} ({_location(obj)}): the docstring documents no shapes (e.g. `[B, T]`, "
        "`[]`, 'scalar')")


CLASSES = [(n, o) for n, o in ROUTINES if inspect.isclass(o)]


@pytest.mark.parametrize("name,cls", CLASSES, ids=[n for n, _ in CLASSES])
def test_methods_are_documented(name, cls):
    problems = []
    for member_name, fn in _members(cls):
        doc = _inherited_doc(cls, member_name)
        if not _non_trivial(doc):
            problems.append(f"{member_name}: no docstring")
        elif _array_typed(fn) and not SHAPE.search(doc):
            problems.append(f"{member_name}: takes or returns arrays, documents no shapes")
    assert not problems, f"{name}: " + "; ".join(problems)
