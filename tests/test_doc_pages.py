"""The documentation's snippets run and its commands match the real CLI.

Every page is checked: ``README.md`` and every MyST page under ``docs/`` (``docs/**/*.md``
except the Sphinx output ``docs/_build/``, the pdoc output ``docs/api/`` and the studies'
committed reports under ``docs/figures/``). A test's id names the block's language, its
page and the line of its opening fence: ``python@docs/concepts/seeds.md:12``.

* Every ```python block of the pages in ``EXECUTED`` (the README, ``docs/tutorials/``,
  ``docs/concepts/`` and the pages cut from the README) is executed as written (``exec``
  in this process), each in a fresh namespace (the blocks are written to stand alone) and
  in a temporary working directory (a snippet that writes files leaves nothing in the
  repository). The ```python blocks of the other pages (the guides) are compiled, not run
  (the comment above ``EXECUTED`` says why).
* Every ``rljax ...`` command of a ```bash block is parsed with ``rljax.cli.build_parser()``
  (``rljax compare`` with its own parser) and checked without running a study:
  ``rljax run NAME ...`` loads the study and builds its config from the flags
  (``parse_overrides`` / ``build_config``), ``rljax list`` runs for real, ``rljax bench
  NAME`` must name a registered benchmark. ``pip install``, ``python -m pytest`` and
  ``python -m sphinx`` lines are skipped with the reason, ``python scripts/x.py`` must
  name a script that exists, and a launcher (``srun``) and leading ``NAME=value``
  assignments are stripped; any other command fails until it has a rule or a skip mark.
* The synopsis blocks (a fence without a language whose text starts with ``rljax``) and
  the ``rljax ...`` code spans of the prose are checked too: every flag they name exists;
  a synopsis of one command over several lines (``rljax run``'s) names every flag its
  subcommand has; a prose command is also checked as a command, with its placeholders
  (``NAME``, ``SEED``, ...) filled in, unless it is a usage pattern (see ``_concrete``).
* A ```toml block's entry-point groups are the ones the CLI reads.

A block that cannot run as written is marked by an HTML comment on the line before its
fence, ``<!-- readme-test: skip (reason) -->``; it is reported as skipped with that reason.
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

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# not pages of the site: Sphinx's and pdoc's output, the studies' committed reports
NOT_PAGES = {"_build", "api", "figures"}
# Pages whose python blocks are executed (a page path, or a folder ending in "/"). The
# guides' blocks (the other docs/*.md) are only compiled: run one by one on the shared
# 2-core CPU, their 24 blocks took 744 s in all (docs/stats.md's first 460 s before it
# stopped at a placeholder name, docs/lm.md's first 169 s, docs/alphazero.md's 69 s), and
# 16 of them are fragments or need a downloaded checkpoint (marked skip). Some guides'
# code runs in their own tests (tests/test_contracts.py: docs/envs.md's template;
# tests/test_study.py: docs/writing_a_study.md).
EXECUTED = ("README.md", "docs/getting_started.md", "docs/tutorials/", "docs/concepts/",
            "docs/api_tour.md",
            "docs/extending.md", "docs/interop.md", "docs/benchmarks.md", "docs/notebooks.md")
# pages holding the code that moved out of the README: each keeps executed python blocks
MOVED_CODE = ("docs/concepts/seeds.md", "docs/concepts/grids.md", "docs/api_tour.md",
              "docs/extending.md", "docs/interop.md")

SKIP_MARK = re.compile(r"<!--\s*readme-test:\s*skip\s*(?:\((?P<reason>.*)\))?\s*-->")
FENCE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")  # NAME, SEED, SHARED_DIR, ...
# what a placeholder of a prose command stands for when the command is checked
PLACEHOLDER_VALUES = {"SEED": "0", "DIR": "out", "SHARED_DIR": "out", "FILE": "out.json",
                      "N": "2", "K": "2", "B": "8", "S": "0"}
LAUNCHERS = {"srun"}  # `srun rljax run ...`: the rljax command is checked
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def doc_pages() -> list[Path]:
    """README.md, then every page under docs/ in path order."""
    pages = [README]
    for path in sorted(DOCS.rglob("*.md")):
        parts = path.relative_to(DOCS).parts
        if parts[0] in NOT_PAGES or any(p.startswith(".") for p in parts):
            continue
        pages.append(path)
    return pages


def page_name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def executed(page: str) -> bool:
    return any(page == p or (p.endswith("/") and page.startswith(p)) for p in EXECUTED)


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root: README.md, docs/concepts/seeds.md
    lang: str  # the info string's first word: python, bash, toml, {toctree}, "" (none)
    line: int  # 1-based line of the opening fence
    end: int  # 1-based line of the closing fence (the page's last line if unclosed)
    text: str
    skip: str | None  # the reason, when marked <!-- readme-test: skip (...) -->
    closed: bool = True

    @property
    def id(self) -> str:
        return f"{self.lang or 'text'}@{self.page}:{self.line}"


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= len(fence) and set(stripped) == {fence[0]}


def page_blocks(text: str, page: str = "README.md") -> list[Block]:
    """The fenced code blocks of ``text`` in order (indented fences in lists included;
    ``` and ~~~ fences of any length, MyST directives such as ```{toctree} too)."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening or (opening["fence"][0] == "`" and "`" in opening["info"]):
            i += 1
            continue
        fence, info = opening["fence"], opening["info"].strip()
        start = i
        i += 1
        body = []
        while i < len(lines) and not _closes(lines[i], fence):
            body.append(lines[i])
            i += 1
        previous = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        mark = SKIP_MARK.search(previous)
        skip = (mark["reason"] or "marked skip on the page") if mark else None
        lang = info.split()[0] if info else ""
        blocks.append(Block(page, lang, start + 1, min(i + 1, len(lines)),
                            textwrap.dedent("\n".join(body)), skip, closed=i < len(lines)))
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


def inline_commands(text: str, blocks: list[Block]) -> list[str]:
    """``rljax ...`` code spans of the prose (outside fenced blocks)."""
    fenced = {n for b in blocks for n in range(b.line, b.end + 1)}
    prose = "\n".join(line for n, line in enumerate(text.splitlines(), 1) if n not in fenced)
    return [" ".join(span.split()) for span in re.findall(r"`(rljax(?:\s[^`]*)?)`", prose)]


PAGES = {page_name(path): path.read_text() for path in doc_pages()}
BLOCKS = [b for page, text in PAGES.items() for b in page_blocks(text, page)]
PYTHON = [b for b in BLOCKS if b.lang == "python"]
PYTHON_RUN = [b for b in PYTHON if executed(b.page)]
PYTHON_PARSE = [b for b in PYTHON if not executed(b.page)]
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


def _example_studies() -> set[str]:
    """Study names a page registers in a ```toml example (the reader's own package)."""
    names = set()
    for block in TOML:
        names.update(entry_point_groups(block).get(cli.EXPERIMENT_GROUP, {}))
    return names


def _subparsers() -> dict:
    parser = cli.build_parser()
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return action.choices


def _options(subcommand: str | None) -> set[str]:
    """The flags of ``rljax SUBCOMMAND`` (of ``rljax`` itself for ``None``)."""
    if subcommand == "compare":
        from rljax.compare import _parser

        parser = _parser()
    elif subcommand is None:
        parser = cli.build_parser()
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
        raise AssertionError(f"tests/test_doc_pages.py: no check for `rljax {args.command}`")


def check_run(args) -> None:
    """What ``rljax run`` does before any work: load the study, build its config."""
    if args.name in _example_studies():
        return  # a page's example of a user's own study, not installed here
    known = cli.registry(cli.EXPERIMENT_GROUP)
    assert args.name in known, f"unknown study {args.name!r}; known: {', '.join(known)}"
    module = known[args.name].load()
    overrides = parse_overrides(module.Config, args.set or [])
    for field in ("seeds", "block_size", "base_seed"):
        if getattr(args, field) is not None:
            overrides[field] = parse_value(field, getattr(args, field), int)
    if getattr(args, "env", None) is not None:  # --env NAME is the study's env field
        overrides["env"] = args.env
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
# the pages and their python blocks


def test_every_fence_is_closed():
    unclosed = [b.id for b in BLOCKS if not b.closed]
    assert not unclosed, f"fences never closed (the rest of the page reads as code): {unclosed}"


@pytest.mark.parametrize("block", PYTHON_RUN, ids=[b.id for b in PYTHON_RUN])
def test_python_block_runs(block, tmp_path, monkeypatch):
    if block.skip:
        pytest.skip(block.skip)
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__readme__"}
    # dont_inherit: the snippet runs as a reader's script would, without this module's
    # ``from __future__ import annotations``
    exec(compile(block.text, block.id, "exec", dont_inherit=True), namespace)  # noqa: S102


@pytest.mark.parametrize("block", PYTHON_PARSE, ids=[b.id for b in PYTHON_PARSE])
def test_python_block_compiles(block):
    """A guide page's block is compiled, not run (see ``EXECUTED``); a block marked skip
    is compiled too: a ```python fence promises Python syntax."""
    compile(block.text, block.id, "exec", dont_inherit=True)


def test_the_moved_code_is_executed():
    """The pages holding the code cut from the README run it (a page dropped from
    ``EXECUTED`` or a block marked skip by mistake would silently stop running it)."""
    for page in MOVED_CODE:
        running = [b for b in PYTHON_RUN if b.page == page and not b.skip]
        assert running, f"{page}: no executed python block"


# ---------------------------------------------------------------------------------------
# bash blocks


BASH_COMMANDS = [(b, c) for b in BASH for c in shell_commands(b)]


def _strip_prefix(command: list[str]) -> list[str]:
    """``NAME=value ... [srun [-opts]] cmd ...`` -> ``cmd ...``."""
    while command and ENV_ASSIGNMENT.match(command[0]):
        command = command[1:]
    if command and command[0] in LAUNCHERS:
        command = command[1:]
        while command and command[0].startswith("-"):
            command = command[1:]
    return command


@pytest.mark.parametrize(
    "block,command", BASH_COMMANDS, ids=[f"{b.id}:{' '.join(c)}" for b, c in BASH_COMMANDS])
def test_bash_command(block, command, capsys):
    if block.skip:
        pytest.skip(block.skip)
    command = _strip_prefix(command)
    assert command, f"{block.id}: an empty command"
    if command[0] == "pip":
        pytest.skip("pip install: changes the environment")
    if command[:3] == ["python", "-m", "pytest"]:
        pytest.skip("python -m pytest: runs the suite this test belongs to")
    if command[:3] == ["python", "-m", "sphinx"]:
        pytest.skip("python -m sphinx: builds the documentation site (tests/test_docs_site.py)")
    if command[0] == "python" and len(command) > 1 and command[1].endswith(".py"):
        assert (ROOT / command[1]).is_file(), f"no such script: {command[1]}"
        return
    assert command[0] == "rljax", (
        f"{block.id}: no rule for `{' '.join(command)}`; teach tests/test_doc_pages.py or "
        "mark the block <!-- readme-test: skip (reason) -->")
    check_rljax_command(command[1:], capsys)


# ---------------------------------------------------------------------------------------
# synopses and prose


def _flags(words: list[str]) -> set[str]:
    return {w.split("=")[0] for w in re.findall(r"--[\w-]+(?:=\S*)?", " ".join(words))}


def _usage_lines(block: Block) -> list[list[str]]:
    """The ``rljax ...`` usage lines of a synopsis block, continuation lines (indented)
    joined to their command; other lines (a command's printed output) are dropped."""
    commands: list[list[str]] = []
    for line in block.text.splitlines():
        if line.startswith("rljax "):
            commands.append(line.split())
        elif line[:1].isspace() and line.strip() and commands:
            commands[-1].extend(line.split())
        else:
            commands.append([])  # output: ends the command above
    return [c for c in commands if c]


def _is_full_synopsis(block: Block) -> bool:
    """One command over several lines, continuation lines indented: the synopsis of a
    subcommand (``rljax run``'s), which names every flag."""
    lines = [line for line in block.text.strip("\n").splitlines() if line.strip()]
    return len(lines) > 1 and all(line[:1].isspace() for line in lines[1:])


@pytest.mark.parametrize("block", SYNOPSES, ids=[b.id for b in SYNOPSES])
def test_synopsis_matches_cli(block):
    if block.skip:
        pytest.skip(block.skip)
    for words in _usage_lines(block):
        subcommand = words[1]
        assert subcommand in _subparsers(), f"unknown subcommand `rljax {subcommand}`"
        options = _options(subcommand) - {"-h", "--help"}
        named = _flags(words)
        assert named <= options, f"the synopsis names flags the CLI lacks: {named - options}"
        if _is_full_synopsis(block):
            assert options <= named, (
                f"the synopsis omits flags of `rljax {subcommand}`: {options - named}")


INLINE = list(dict.fromkeys(
    (page, span) for page, text in PAGES.items()
    for span in inline_commands(text, [b for b in BLOCKS if b.page == page])))


SWEEP_FLAGS = {"--set", "--grid", "--sample", "--samples", "--sample-seed"}
READERS_PATH = re.compile(r"^[\w.-]+=(/|~)")  # --set checkpoint=/data/...: the reader's files


def _is_placeholder(word: str) -> bool:
    """``NAME``, or a ``key=VALUE`` / ``a:B`` word with a placeholder part."""
    return any(PLACEHOLDER.match(part) for part in re.split(r"[=,:]", word) if part)


def _concrete(subcommand: str, words: list[str]) -> list[str] | None:
    """``words`` with placeholders filled in (the NAME after ``run`` / ``bench``: the
    first registered study or benchmark), or ``None`` for a usage pattern: optional parts
    (``[...]``), an ellipsis, a placeholder with no value here, or a ``--set`` value naming
    the reader's files (an absolute or ``~`` path). Where NAME stands for any study, the
    sweep flags' keys (``--set k=v``) belong to that study and are dropped."""
    if any("[" in w or "..." in w or "\N{HORIZONTAL ELLIPSIS}" in w or READERS_PATH.match(w)
           for w in words):
        return None
    names = {"run": cli.EXPERIMENT_GROUP, "bench": cli.BENCHMARK_GROUP}
    any_study = words[1:2] == ["NAME"] and subcommand == "run"
    filled: list[str] = []
    for i, word in enumerate(words):
        if word == "NAME" and i == 1 and subcommand in names:
            word = next(iter(cli.registry(names[subcommand])))
        elif word in PLACEHOLDER_VALUES:
            word = PLACEHOLDER_VALUES[word]
        elif _is_placeholder(word):
            return None
        filled.append(word)
    if any_study:
        kept, drop_next = [], False
        for word in filled:
            if drop_next or word.split("=")[0] in SWEEP_FLAGS:
                drop_next = word in SWEEP_FLAGS  # `--set k=v`: the value goes too
                continue
            kept.append(word)
        filled = kept
    return filled


@pytest.mark.parametrize("page,span", INLINE, ids=[f"{page}:{span}" for page, span in INLINE])
def test_inline_command(page, span, capsys):
    words = span.split()[1:]
    if not words:
        return
    subcommand = words[0]
    if subcommand.startswith("-"):  # `rljax --help`: the top-level parser's flags
        unknown = _flags(words) - _options(None)
        assert not unknown, f"{page}: `{span}`: unknown flags {unknown}"
        return
    assert subcommand in _subparsers(), f"{page}: `{span}`: unknown subcommand"
    unknown = _flags(words) - _options(subcommand)
    assert not unknown, f"{page}: `{span}`: unknown flags {unknown}"
    concrete = _concrete(subcommand, words)
    if concrete is None or (len(concrete) < 2 and subcommand != "list"):
        return  # a usage pattern or a bare subcommand: its flags are the check
    if subcommand == "compare":
        from rljax.compare import _parser

        args = _parser().parse_args(concrete[1:])
        if not args.dirs and not args.atari100k:
            return  # a flag of `rljax compare` named in prose, not a command
    check_rljax_command(concrete, capsys)


@pytest.mark.parametrize("block", TOML, ids=[b.id for b in TOML])
def test_toml_entry_point_groups(block):
    groups = entry_point_groups(block)
    assert groups, f"{block.id}: no [project.entry-points.\"...\"] table"
    assert set(groups) <= {cli.EXPERIMENT_GROUP, cli.BENCHMARK_GROUP}, set(groups)


def test_the_pages_have_snippets():
    assert "README.md" in PAGES and len(PAGES) > 1, sorted(PAGES)
    assert PYTHON_RUN and PYTHON_PARSE and BASH and SYNOPSES and INLINE and TOML


# ---------------------------------------------------------------------------------------
# CI runs the documented test command


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


TEST_COMMAND = "pip install -e '.[dev]' && python -m pytest -q -n 2"
# where a reader finds the test command: the README's quick start or the getting-started page
TEST_COMMAND_PAGES = ("README.md", "docs/getting_started.md")


def test_ci_run_is_the_readme_command_and_propagates_pytest_status(tmp_path):
    assert any(TEST_COMMAND in PAGES.get(page, "") for page in TEST_COMMAND_PAGES), (
        f"neither of {TEST_COMMAND_PAGES} shows {TEST_COMMAND!r}")
    code, _, argv = _fake_ci(tmp_path, "1 failed, 3 passed\n", 1)
    assert code == 1  # pytest's status survives the log (tee)
    assert argv[:len(QUICKSTART_TEST)] == QUICKSTART_TEST  # the README line, plus flags


@pytest.mark.parametrize("skip_line, fails", [
    ("SKIPPED [1] tests/test_x.py:3: could not import 'mctx': No module named 'mctx'", True),
    ("SKIPPED [2] tests/test_doc_pages.py:230: pip install: changes the environment", False),
])
def test_ci_run_fails_on_a_skip_for_a_missing_module(tmp_path, skip_line, fails):
    code, output, _ = _fake_ci(tmp_path, f"...s\n{skip_line}\n3 passed, 1 skipped\n", 0)
    assert code == (1 if fails else 0), output
    assert ("skipped for a missing module" in output) == fails
