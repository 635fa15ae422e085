"""The ``rljax`` command starts without JAX: ``import rljax`` is lazy (PEP 562), ``--help``,
``list`` and the argument errors the command line alone shows import no JAX, and every
public name still resolves as if imported eagerly.

No timing is asserted (timings are noisy on shared machines); the tests check what is
imported, which is what makes the start-up fast.
"""

import ast
import json
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import rljax
from rljax import cli

INIT = Path(rljax.__file__)

# Each argv, and the exit status main() returns (or SystemExit's code for --help).
NO_JAX_COMMANDS = [
    (["--help"], 0),
    ([], 2),
    (["list"], 0),
    (["run", "--help"], 0),
    (["run", "orm-vs-prm", "--help"], 0),
    (["run", "nope"], 2),
    (["run", "orm-vs-prm", "--bogus"], 2),
    (["run", "orm-vs-prm", "--seeds", "abc"], 2),
    (["run", "orm-vs-prm", "--block-size", "1.5"], 2),
    (["run", "orm-vs-prm", "--samples", "x"], 2),
    (["run", "orm-vs-prm", "--processes", "0"], 2),
    (["run", "orm-vs-prm", "--resume", "--overwrite"], 2),
    (["run", "orm-vs-prm", "--local-devices", "2"], 2),
    (["run", "orm-vs-prm", "--resume", "--out", "{missing}"], 2),
    (["run", "orm-vs-prm", "--out", "{full}"], 2),
    (["bench", "nope"], 2),
    (["export", "somewhere"], 2),
]

DRIVER = """
import contextlib, io, json, sys
from rljax import cli

results = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exit:
            code = exit.code
    results.append([argv, code, err.getvalue().strip().splitlines()[-1:]])
print(json.dumps({"results": results,
                  "heavy": sorted(m for m in ("jax", "jaxlib", "optax", "flax",
                                              "experiments.orm_vs_prm") if m in sys.modules)}))
"""


def test_import_rljax_and_its_cli_import_no_jax():
    code = ("import sys, rljax, rljax.cli; "
            "print(sorted(m for m in ('jax', 'numpy', 'rljax.envs') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_help_list_and_argument_errors_import_no_jax(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("precious")
    paths = {"{missing}": str(tmp_path / "missing"), "{full}": str(full)}
    argvs = [[paths.get(a, a) for a in argv] for argv, _ in NO_JAX_COMMANDS]
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(argvs)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    for (argv, code, last), (_, expected) in zip(report["results"], NO_JAX_COMMANDS,
                                                 strict=True):
        assert code == expected, (argv, code, last)
        if expected == 2 and argv:
            assert last and last[0].startswith("error: "), (argv, last)
    assert report["heavy"] == [], report["heavy"]  # neither JAX nor a study's module
    assert not (tmp_path / "missing").exists()
    assert sorted(p.name for p in full.iterdir()) == ["mine.txt"]


def test_every_public_name_resolves_lazily():
    import rljax.rollout

    assert set(rljax.__all__) <= set(dir(rljax))
    for name in rljax.__all__:
        assert getattr(rljax, name) is not None, name
    from rljax import CartPole, SweepOptions, make_ppo_train, rollout_steps  # noqa: F401

    assert rljax.rollout_steps is rljax.rollout.rollout
    assert rljax.envs.CartPole is CartPole
    assert rljax.config.ConfigError  # any submodule, re-exported or not
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        rljax.no_such_name  # noqa: B018
    assert not hasattr(rljax, "no_such_name")


def test_type_checking_imports_match_the_lazy_table():
    """The ``if TYPE_CHECKING:`` imports (what readers and type checkers see) and the
    table ``__getattr__`` reads name the same objects."""
    tree = ast.parse(INIT.read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If)
                 and getattr(node.test, "id", None) == "TYPE_CHECKING")
    static = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom)
        for alias in node.names:
            where = ("module", alias.name) if node.module == "rljax" else (
                node.module.removeprefix("rljax."), alias.name)
            static[alias.asname or alias.name] = where
    lazy = {**{m: ("module", m) for m in rljax._SUBMODULES}, **rljax._EXPORTS}
    assert static == lazy
    assert set(rljax.__all__) == set(lazy)


def test_list_reads_every_description_without_importing_it():
    for name, ep in cli.registry(cli.EXPERIMENT_GROUP).items():
        literal = cli._literal_description(ep)
        assert literal is not None, f"{name}: DESCRIPTION is not one top-level string literal"
        assert literal == ep.load().DESCRIPTION, name


@pytest.mark.parametrize("source, expected, imported", [
    ('DESCRIPTION = "read " "statically"\n', "read statically", False),
    ('PART = "computed"\nDESCRIPTION = PART + " on import"\n', "computed on import", True),
    ('DESCRIPTION = "first"\nDESCRIPTION = "second"\n', "second", True),
    ("X = 1\n", "", True),
    ('import no_such_module_here\nDESCRIPTION = "broken"\n', "broken", False),
])
def test_description_literal_or_imported(tmp_path, monkeypatch, source, expected, imported):
    name = f"study_desc_{abs(hash(source))}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = EntryPoint(name="x", value=name, group=cli.EXPERIMENT_GROUP)
    assert cli.study_description(ep) == expected
    assert (name in sys.modules) is imported
    sys.modules.pop(name, None)


def test_description_of_an_unimportable_study_says_why():
    ep = EntryPoint(name="x", value="no_such_study_module", group=cli.EXPERIMENT_GROUP)
    assert cli.study_description(ep).startswith("(cannot be imported: ")


def test_study_and_benchmark_work_runs_with_one_blas_thread(tmp_path, monkeypatch):
    """The one-BLAS-thread limit (:mod:`rljax.cpu_threads`, which imports JAX) is entered
    around a command's XLA work, after its arguments are checked, not around the whole
    command: a study's ``run`` and a benchmark's ``run`` see one thread, the limit is
    restored after."""
    import dataclasses
    import types

    from threadpoolctl import threadpool_limits

    from rljax.cpu_threads import current_blas_threads

    seen = []

    @dataclasses.dataclass(frozen=True)
    class Config:
        def validate(self):
            pass

    study = types.ModuleType("probe_study")
    study.Config = Config
    study.run = (lambda config, out_dir, options=None:
                 seen.append(("study", current_blas_threads())) or {})
    bench = types.ModuleType("probe_bench")
    bench.run = lambda: seen.append(("bench", current_blas_threads())) or {}
    bench.table = lambda result: "table"
    real = cli.registry

    class Loads:
        def __init__(self, module):
            self.module = module

        def load(self):
            return self.module

    def registry(group):
        known = dict(real(group))
        known["probe"] = Loads(study if group == cli.EXPERIMENT_GROUP else bench)
        return known

    monkeypatch.setattr(cli, "registry", registry)
    with threadpool_limits(limits=2, user_api="blas"):
        assert cli.main(["run", "probe", "--out", str(tmp_path / "run")]) == 0
        assert cli.main(["bench", "probe"]) == 0
        assert current_blas_threads() == 2
    assert seen == [("study", 1), ("bench", 1)]
    assert (tmp_path / "run" / "config.json").is_file()
