"""The README's snippets run and its commands match the real CLI.

* Every ```python block is executed as written (``exec`` in this process), each in a
  fresh namespace (the blocks are written to stand alone) and in a temporary working
  directory (a snippet that writes files leaves nothing in the repository).
* Every ``rljax ...`` command of a ```bash block is parsed with ``rljax.cli.build_parser()``
  (``rljax compare`` with its own parser) and checked without running a study:
  ``rljax run NAME ...`` loads the study and builds its config from the flags
  (``parse_overrides`` / ``build_config``), ``rljax list`` runs for real, ``rljax bench
  NAME`` must name a registered benchmark. ``pip install`` and ``python -m pytest`` lines
  are skipped with the reason.
* The synopsis blocks (a fence without a language whose text starts with ``rljax``) and
  the ``rljax ...`` code spans of the prose are checked too: every flag they name exists,
  and the ``rljax run`` synopsis names every flag ``rljax run`` has; a prose command is
  also checked as a command, with its placeholders (``NAME``, ``SEED``, ...) filled in.
* A ```toml block's entry-point groups are the ones the CLI reads.

A block that cannot run as written is marked in the README by an HTML comment on the
line before its fence, ``<!-- readme-test: skip (reason) -->``; it is reported as
skipped with that reason.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from rljax import cli
from rljax.config import build_config, parse_overrides, parse_value

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = None

README = Path(__file__).resolve().parent.parent / "README.md"
SKIP_MARK = re.compile(r"<!--\s*readme-test:\s*skip\s*(?:\((?P<reason>.*)\))?\s*-->")
FENCE = re.compile(r"^[ \t]*```(?P<lang>[\w+-]*)\s*$")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")  # NAME, SEED, SHARED_DIR, ...
# what a placeholder of a prose command stands for when the command is checked
PLACEHOLDER_VALUES = {"SEED": "0", "DIR": "out", "SHARED_DIR": "out", "FILE": "out.json",
                      "N": "2", "K": "2", "B": "8", "S": "0"}


@dataclass(frozen=True)
class Block:
    lang: str
    line: int  # 1-based line of the opening fence
    text: str
    skip: str | None  # the reason, when marked <!-- readme-test: skip (...) -->

    @property
    def id(self) -> str:
        return f"{self.lang or 'text'}@README.md:{self.line}"


def readme_blocks(text: str) -> list[Block]:
    """The fenced code blocks of ``text`` in order (indented fences in lists included)."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        start = i
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        previous = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        mark = SKIP_MARK.search(previous)
        skip = (mark["reason"] or "marked skip in the README") if mark else None
        blocks.append(Block(opening["lang"], start + 1, textwrap.dedent("\n".join(body)), skip))
        i += 1
    return blocks


def shell_commands(block: Block) -> list[list[str]]:
    """Commands of a bash block: continuation lines joined, comments dropped, ``&&`` and
    ``;`` split into separate commands."""
    commands = []
    for line in block.text.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        current: list[str] = []
        for word in words + ["&&"]:
            if word in ("&&", ";", "||"):
                if current:
                    commands.append(current)
                current = []
            else:
                current.append(word)
    return commands


def inline_commands(text: str) -> list[str]:
    """``rljax ...`` code spans of the prose (outside fenced blocks)."""
    prose = re.sub(r"^[ \t]*```.*?^[ \t]*```[ \t]*$", "", text, flags=re.M | re.S)
    return re.findall(r"`(rljax(?: [^`]*)?)`", prose)


TEXT = README.read_text()
BLOCKS = readme_blocks(TEXT)
PYTHON = [b for b in BLOCKS if b.lang == "python"]
BASH = [b for b in BLOCKS if b.lang in ("bash", "sh", "shell", "console")]
SYNOPSES = [b for b in BLOCKS if b.lang == "" and b.text.lstrip().startswith("rljax ")]
TOML = [b for b in BLOCKS if b.lang == "toml"]


def entry_point_groups(block: Block) -> dict[str, dict[str, str]]:
    """``{group: {name: module}}`` of the ``[project.entry-points."group"]`` tables."""
    if tomllib is not None:
        return tomllib.loads(block.text).get("project", {}).get("entry-points", {})
    groups: dict[str, dict[str, str]] = {}  # Python 3.10: the two line forms used here
    current = None
    for line in block.text.splitlines():
        header = re.match(r'^\[project\.entry-points\."([^"]+)"\]', line.strip())
        pair = re.match(r'^([\w.-]+)\s*=\s*"([^"]*)"', line.strip())
        if header:
            current = groups.setdefault(header[1], {})
        elif pair and current is not None:
            current[pair[1]] = pair[2]
    return groups


def _readme_example_studies() -> set[str]:
    """Study names the README registers in a ```toml example (the reader's own package)."""
    names = set()
    for block in TOML:
        names.update(entry_point_groups(block).get(cli.EXPERIMENT_GROUP, {}))
    return names


def _subparsers() -> dict:
    parser = cli.build_parser()
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return action.choices


def _options(subcommand: str) -> set[str]:
    if subcommand == "compare":
        from rljax.compare import _parser

        parser = _parser()
    else:
        parser = _subparsers()[subcommand]
    return {o for a in parser._actions if a.help != "==SUPPRESS==" for o in a.option_strings}


# ---------------------------------------------------------------------------------------
# checking one concrete command


def check_rljax_command(argv: list[str], capsys=None) -> None:
    """Validate ``rljax <argv>`` against the real CLI without running a study."""
    assert argv, "a bare `rljax`"
    if argv[0] == "compare":
        from rljax.compare import _parser, _validate

        _validate(_parser().parse_args(argv[1:]))
        return
    args = cli.build_parser().parse_args(argv)
    if args.command == "list":
        assert cli.main(["list"]) == 0
        if capsys is not None:
            listed = capsys.readouterr().out
            for name in cli.registry(cli.EXPERIMENT_GROUP):
                assert name in listed, f"`rljax list` does not list {name}"
    elif args.command == "bench":
        known = cli.registry(cli.BENCHMARK_GROUP)
        assert args.name in known, f"unknown benchmark {args.name!r}; known: {', '.join(known)}"
    elif args.command == "run":
        check_run(args)
    elif args.command == "export":
        from rljax.trackers import check_tracker

        check_tracker(args.to)
    else:  # pragma: no cover - a new subcommand needs a rule here
        raise AssertionError(f"tests/test_readme.py: no check for `rljax {args.command}`")


def check_run(args) -> None:
    """What ``rljax run`` does before any work: load the study, build its config."""
    if args.name in _readme_example_studies():
        return  # the README's example of a user's own study, not installed here
    known = cli.registry(cli.EXPERIMENT_GROUP)
    assert args.name in known, f"unknown study {args.name!r}; known: {', '.join(known)}"
    module = known[args.name].load()
    overrides = parse_overrides(module.Config, args.set or [])
    for field in ("seeds", "block_size", "base_seed"):
        if getattr(args, field) is not None:
            overrides[field] = parse_value(field, getattr(args, field), int)
    build_config(module.Config, overrides)
    if args.grid or args.sample or args.samples is not None:
        from rljax.grid import make_grid

        samples = None if args.samples is None else parse_value("--samples", args.samples, int)
        make_grid(module.Config, overrides, grid=args.grid or [], sample=args.sample or [],
                  samples=samples, sample_seed=int(args.sample_seed or 0))
    for flag in ("processes", "local_devices", "checkpoint_every", "debug_nans"):
        if getattr(args, flag) is not None:
            parse_value(f"--{flag.replace('_', '-')}", getattr(args, flag), int)
    assert not (args.resume and args.overwrite), "--resume and --overwrite together"


# ---------------------------------------------------------------------------------------
# python blocks


@pytest.mark.parametrize("block", PYTHON, ids=[b.id for b in PYTHON])
def test_python_block_runs(block, tmp_path, monkeypatch):
    if block.skip:
        pytest.skip(block.skip)
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__readme__"}
    # dont_inherit: the snippet runs as a reader's script would, without this module's
    # ``from __future__ import annotations``
    exec(compile(block.text, block.id, "exec", dont_inherit=True), namespace)  # noqa: S102


# ---------------------------------------------------------------------------------------
# bash blocks


BASH_COMMANDS = [(b, c) for b in BASH for c in shell_commands(b)]


@pytest.mark.parametrize(
    "block,command", BASH_COMMANDS, ids=[f"{b.id}:{' '.join(c)}" for b, c in BASH_COMMANDS])
def test_bash_command(block, command, capsys):
    if block.skip:
        pytest.skip(block.skip)
    if command[0] == "pip":
        pytest.skip("pip install: changes the environment")
    if command[:3] == ["python", "-m", "pytest"]:
        pytest.skip("python -m pytest: runs the suite this test belongs to")
    if command[0] == "python" and len(command) > 1 and command[1].endswith(".py"):
        assert (README.parent / command[1]).is_file(), f"no such script: {command[1]}"
        return
    assert command[0] == "rljax", (
        f"{block.id}: no rule for `{' '.join(command)}`; teach tests/test_readme.py")
    check_rljax_command(command[1:], capsys)


# ---------------------------------------------------------------------------------------
# synopses and prose


def _flags(words: list[str]) -> set[str]:
    return {w.split("=")[0] for w in re.findall(r"--[\w-]+(?:=\S*)?", " ".join(words))}


@pytest.mark.parametrize("block", SYNOPSES, ids=[b.id for b in SYNOPSES])
def test_synopsis_matches_cli(block):
    words = block.text.split()
    subcommand = words[1]
    assert subcommand in _subparsers(), f"unknown subcommand `rljax {subcommand}`"
    options = _options(subcommand) - {"-h", "--help"}
    named = _flags(words)
    assert named <= options, f"the synopsis names flags the CLI lacks: {named - options}"
    assert options <= named, f"the synopsis omits flags of `rljax {subcommand}`: {options - named}"


INLINE = list(dict.fromkeys(inline_commands(TEXT)))


def _concrete(subcommand: str, words: list[str]) -> list[str] | None:
    """``words`` with placeholders filled in (NAME: the first registered study or
    benchmark), or ``None`` for a usage pattern with optional parts (``[...]``)."""
    if any("[" in w for w in words):
        return None
    names = {"run": cli.EXPERIMENT_GROUP, "bench": cli.BENCHMARK_GROUP}
    filled = []
    for word in words:
        if word == "NAME" and subcommand in names:
            word = next(iter(cli.registry(names[subcommand])))
        elif PLACEHOLDER.match(word):
            if word not in PLACEHOLDER_VALUES:
                return None
            word = PLACEHOLDER_VALUES[word]
        filled.append(word)
    return filled


@pytest.mark.parametrize("span", INLINE, ids=INLINE)
def test_inline_command(span, capsys):
    words = span.split()[1:]
    if not words:
        return
    subcommand = words[0]
    assert subcommand in _subparsers(), f"`{span}`: unknown subcommand"
    unknown = _flags(words) - _options(subcommand)
    assert not unknown, f"`{span}`: unknown flags {unknown}"
    concrete = _concrete(subcommand, words)
    if concrete is not None and (len(concrete) > 1 or subcommand == "list"):
        check_rljax_command(concrete, capsys)


@pytest.mark.parametrize("block", TOML, ids=[b.id for b in TOML])
def test_toml_entry_point_groups(block):
    groups = entry_point_groups(block)
    assert groups, f"{block.id}: no [project.entry-points.\"...\"] table"
    assert set(groups) <= {cli.EXPERIMENT_GROUP, cli.BENCHMARK_GROUP}, set(groups)


def test_the_readme_has_snippets():
    assert PYTHON and BASH and SYNOPSES and INLINE


# ---------------------------------------------------------------------------------------
# CI runs the README's test command


CI_RUN = README.parent / ".ci" / "run"


def _fake_ci(tmp_path, pytest_output: str, pytest_status: int):
    """Run ``.ci/run`` in a copy of the repository layout with ``pip`` and ``python``
    replaced by stubs: ``python`` prints ``pytest_output`` and exits ``pytest_status``.
    Returns ``(exit status, stdout + stderr, the arguments python got)``."""
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_text(CI_RUN.read_text())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "out.txt").write_text(pytest_output)
    for name, body in (("pip", "exit 0"),
                       ("python", f'echo "$@" > "{tmp_path}/argv"; cat "{tmp_path}/out.txt"; '
                                  f"exit {pytest_status}")):
        stub = bin_dir / name
        stub.write_text(f"#!/usr/bin/env bash\n{body}\n")
        stub.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], env=env,
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout + proc.stderr, (tmp_path / "argv").read_text().split()


QUICKSTART_TEST = ["-m", "pytest", "-q", "-n", "2"]


def test_ci_run_is_the_readme_command_and_propagates_pytest_status(tmp_path):
    assert "pip install -e '.[dev]' && python -m pytest -q -n 2" in TEXT
    code, _, argv = _fake_ci(tmp_path, "1 failed, 3 passed\n", 1)
    assert code == 1  # pytest's status survives the log (tee)
    assert argv[:len(QUICKSTART_TEST)] == QUICKSTART_TEST  # the README line, plus flags


@pytest.mark.parametrize("skip_line, fails", [
    ("SKIPPED [1] tests/test_x.py:3: could not import 'mctx': No module named 'mctx'", True),
    ("SKIPPED [2] tests/test_readme.py:230: pip install: changes the environment", False),
])
def test_ci_run_fails_on_a_skip_for_a_missing_module(tmp_path, skip_line, fails):
    code, output, _ = _fake_ci(tmp_path, f"...s\n{skip_line}\n3 passed, 1 skipped\n", 0)
    assert code == (1 if fails else 0), output
    assert ("skipped for a missing module" in output) == fails
