"""Run a peer library's own test suite against rljax's drop-in for it (not part of CI).

rljax claims that some of its objects can stand in for a peer library's (``GymnaxEnv``
for a gymnax environment, ...). The strongest check of such a claim is the peer's own
tests, run unchanged while the peer's factory hands out rljax's object instead::

    python scripts/peer_tests.py gymnax                    # pip-downloads gymnax's sdist
    python scripts/peer_tests.py gymnax --sdist DIR_OR_TAR # a downloaded sdist instead
    python scripts/peer_tests.py gymnax -k differentiability
    python scripts/peer_tests.py rliable --source DIR      # tests from a source checkout

``--source DIR`` takes the tests from a checkout of the peer's repository instead of its
sdist (rliable's sdist ships no tests), e.g. from a git mirror::

    mkdir /tmp/rliable-src
    git -C MIRROR archive HEAD tests | tar -x -C /tmp/rliable-src
    python scripts/peer_tests.py rliable --source /tmp/rliable-src

What it does, for peer ``NAME`` (an entry of :data:`PEERS`):

1. gets the peer's source distribution: ``pip download --no-binary :all: --no-deps
   REQUIREMENT`` into a temporary folder (or ``--sdist``: a ``.tar.gz`` or a folder
   holding one). The tests come from there, never from this repository;
2. extracts only the sdist's test folder into a temporary folder (not the package
   itself, so the tests import the *installed* peer, which the patch reaches);
3. runs pytest on it in a subprocess with this file loaded as a plugin (``-p
   peer_tests``); its ``pytest_configure`` applies the peer's ``patch`` before any test
   module is imported (for gymnax: ``gymnax.make`` returns ``(GymnaxEnv(env, params),
   params)``);
4. prints ``NAME: N passed, M failed (K skipped)``, lists the failures, and exits 1 if any
   test failed (errors count as failures) or none passed.

A new peer (mctx, rliable, ...) is one more :class:`Peer` in :data:`PEERS`: the pip
requirement of its sdist, the folder of its tests inside the sdist, and a ``patch``
function.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
PEER_ENV_VAR = "RLJAX_PEER_TESTS_PEER"  # which peer's patch the plugin applies


# ----------------------------------------------------------------------------- patches
# Each runs inside the pytest subprocess, before the peer's test modules are imported.


def patch_gymnax() -> None:
    """``gymnax.make(id, **kw)`` returns ``(GymnaxEnv(env, params), params)``."""
    import gymnax
    import gymnax.registration

    from rljax.envs import GymnaxEnv

    gymnax_make = gymnax.registration.make

    def make(env_id, **env_kwargs):
        env, params = gymnax_make(env_id, **env_kwargs)
        return GymnaxEnv(env, params), params

    gymnax.make = gymnax.registration.make = make


def patch_rliable() -> None:
    """``rliable.library`` and ``rliable.metrics`` are ``rljax.stats.rliable``'s modules
    (rliable's package ``__init__`` imports nothing, so arch is never imported)."""
    import types

    from rljax.stats.rliable import library, metrics

    try:
        import rliable as package
    except ImportError:  # the drop-in needs no rliable at all
        package = sys.modules["rliable"] = types.ModuleType("rliable")
    package.library, package.metrics = library, metrics
    sys.modules["rliable.library"], sys.modules["rliable.metrics"] = library, metrics


def patch_mctx() -> None:
    """``import mctx`` is ``rljax.search``, and ``mctx._src.<module>`` (which mctx's tests
    import for private helpers) is rljax's module of the same role: ``base``,
    ``action_selection``, ``search`` (rljax's ``loop``), ``policies``, ``qtransforms``,
    ``seq_halving``, ``tree``."""
    import types

    import rljax.search
    from rljax.search import (
        action_selection,
        base,
        loop,
        policies,
        qtransforms,
        seq_halving,
        tree,
    )

    src = types.ModuleType("mctx._src")
    src.__path__ = []  # a package: ``from mctx._src import policies`` looks here
    modules = {"base": base, "action_selection": action_selection, "search": loop,
               "policies": policies, "qtransforms": qtransforms, "seq_halving": seq_halving,
               "tree": tree}
    for name, module in modules.items():
        setattr(src, name, module)
        sys.modules[f"mctx._src.{name}"] = module
    rljax.search._src = src  # only in this pytest process
    sys.modules["mctx"], sys.modules["mctx._src"] = rljax.search, src


# ----------------------------------------------------------------------------- table


class Peer(NamedTuple):
    """A peer library whose own tests rljax's drop-in must pass."""

    requirement: str  # what pip downloads the sdist of, pinned: "gymnax==1.0.1"
    tests_dir: str  # the tests' folder inside the sdist's top folder
    patch: Callable[[], None]  # run in the pytest process before collection
    drop_in: str  # one line for the report: what stands in for what
    needs_source: bool = False  # the sdist has no tests: --source DIR is required
    workdir: str = "."  # pytest's working folder, relative to the sdist's top folder


PEERS: dict[str, Peer] = {
    "gymnax": Peer(
        requirement="gymnax==1.0.1",
        tests_dir="tests",
        patch=patch_gymnax,
        drop_in="gymnax.make -> (rljax.envs.GymnaxEnv(env, params), params)",
    ),
    "rliable": Peer(
        requirement="rliable==1.2.0",
        tests_dir="tests",
        patch=patch_rliable,
        drop_in="rliable.library, rliable.metrics -> rljax.stats.rliable.library, .metrics",
        needs_source=True,
    ),
    "mctx": Peer(
        requirement="mctx==0.0.71",
        tests_dir="mctx/_src/tests",
        patch=patch_mctx,
        drop_in="import mctx -> rljax.search; mctx._src.<module> -> rljax.search.<module>",
        workdir="run",  # its tree tests open "../mctx/_src/tests/test_data/*.json"
    ),
}


def pytest_configure(config) -> None:
    """pytest hook (this file is loaded with ``-p peer_tests``): apply the patch of the
    peer named by ``$RLJAX_PEER_TESTS_PEER`` (nothing when unset)."""
    del config
    name = os.environ.get(PEER_ENV_VAR)
    if name:
        PEERS[name].patch()


# ----------------------------------------------------------------------------- steps


def download_sdist(requirement: str, dest: Path, timeout: float = 300.0) -> Path:
    """``pip download`` the source distribution of ``requirement`` into ``dest``.

    Raises:
      RuntimeError: one line when pip fails, times out, or leaves no ``.tar.gz``.
    """
    cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
           "--quiet", requirement, "-d", str(dest)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as error:
        raise RuntimeError(f"pip download {requirement}: no answer in {timeout:.0f} s") from error
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"pip download {requirement} failed: {last}")
    return find_sdist(dest)


def find_sdist(path: Path) -> Path:
    """``path`` if it is a ``.tar.gz``, else the one ``.tar.gz`` inside the folder ``path``."""
    path = Path(path)
    if path.is_file():
        return path
    found = sorted(path.glob("*.tar.gz"))
    if len(found) != 1:
        raise RuntimeError(f"{path}: expected one .tar.gz sdist, found {len(found)}")
    return found[0]


def extract_tests(sdist: Path, tests_dir: str, dest: Path) -> Path:
    """Extract only ``<top>/<tests_dir>/`` of the sdist into ``dest``; returns
    ``dest / tests_dir``."""
    with tarfile.open(sdist) as archive:
        members = []
        for member in archive.getmembers():
            top, _, rest = member.name.partition("/")
            if rest == tests_dir or rest.startswith(tests_dir + "/"):
                member.name = rest
                members.append(member)
        if not any(m.isfile() for m in members):
            raise RuntimeError(f"{sdist.name}: no files under {tests_dir}/")
        archive.extractall(dest, members=members, filter="data")
    return dest / tests_dir


class Result(NamedTuple):
    """Counts from pytest's junit XML; ``failures`` are ``"test id - message"`` lines."""

    passed: int
    failed: int
    skipped: int
    failures: list[str]
    returncode: int

    def summary(self, name: str) -> str:
        return f"{name}: {self.passed} passed, {self.failed} failed ({self.skipped} skipped)"

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.passed > 0 and self.returncode in (0, 1)


def parse_junit(path: Path, returncode: int) -> Result:
    """Count a pytest ``--junitxml`` report (errors count as failures)."""
    passed = failed = skipped = 0
    failures = []
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            failed += 1
            message = (problem.get("message") or "").strip().splitlines()
            failures.append(f"{test_id} - {message[0] if message else problem.tag}")
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    return Result(passed, failed, skipped, failures, returncode)


def run_tests(name: str, tests: Path, keyword: str | None = None, patched: bool = True,
              quiet: bool = False) -> Result:
    """Run pytest on the folder ``tests`` with peer ``name``'s patch applied (none when
    ``patched`` is False); ``quiet`` hides pytest's own output.

    The run is isolated from this repository's pytest configuration (an empty
    ``pytest.ini`` in the folder holding the peer's ``tests_dir``, which is also the
    working directory unless the peer names a ``workdir`` in it) and imports rljax from
    this checkout.
    """
    run_dir = tests.parents[len(Path(PEERS[name].tests_dir).parts) - 1]
    work_dir = run_dir / PEERS[name].workdir
    work_dir.mkdir(parents=True, exist_ok=True)
    ini = run_dir / "pytest.ini"
    ini.write_text("[pytest]\n")
    report = run_dir / "report.xml"
    cmd = [sys.executable, "-m", "pytest", str(tests), "-c", str(ini), "--rootdir",
           str(run_dir), "-p", "peer_tests", "-p", "no:cacheprovider", "-q", "-rfEs",
           f"--junitxml={report}"]
    if keyword:
        cmd += ["-k", keyword]
    python_path = [str(Path(__file__).resolve().parent), str(REPO)]
    if os.environ.get("PYTHONPATH"):
        python_path.append(os.environ["PYTHONPATH"])
    env = {**os.environ, PEER_ENV_VAR: name if patched else "",
           "PYTHONPATH": os.pathsep.join(python_path)}
    output = subprocess.DEVNULL if quiet else None
    proc = subprocess.run(cmd, cwd=work_dir, env=env, stdout=output, stderr=output)
    if not report.exists():
        return Result(0, 0, 0, [f"pytest exited {proc.returncode} without a report"],
                      proc.returncode)
    return parse_junit(report, proc.returncode)


def installed_version(requirement: str) -> str | None:
    """The installed version of the requirement's distribution (None if absent)."""
    dist = requirement.split("==")[0].strip()
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("peer", choices=sorted(PEERS))
    parser.add_argument("--sdist", type=Path,
                        help="a downloaded sdist (.tar.gz, or a folder holding one) "
                             "instead of pip download")
    parser.add_argument("--source", type=Path,
                        help="a checkout of the peer's repository: its tests folder is "
                             "used instead of the sdist's (required by rliable)")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression")
    parser.add_argument("--unpatched", action="store_true",
                        help="run the tests on the peer itself (no patch): tells failures "
                             "of this environment from failures of the drop-in")
    args = parser.parse_args(argv)
    peer = PEERS[args.peer]

    installed = installed_version(peer.requirement)
    wanted = peer.requirement.partition("==")[2]
    if installed != wanted:
        print(f"warning: the tests are {peer.requirement}'s; installed is "
              f"{args.peer} {installed}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix=f"rljax-peer-{args.peer}-") as tmp:
        tmp = Path(tmp)
        if args.source is not None:
            origin = args.source / peer.tests_dir
            if not origin.is_dir():
                raise SystemExit(f"--source {args.source}: no {peer.tests_dir}/ folder")
            tests = Path(shutil.copytree(origin, tmp / "run" / peer.tests_dir))
            origin = f"{args.source} (source checkout)"
        elif peer.needs_source:
            raise SystemExit(f"{args.peer}'s sdist has no tests: pass --source DIR, a "
                             "checkout of its repository (see this script's docstring)")
        else:
            sdist = find_sdist(args.sdist) if args.sdist is not None else download_sdist(
                peer.requirement, tmp / "sdist")
            tests = extract_tests(sdist, peer.tests_dir, tmp / "run")
            origin = sdist.name
        what = "unpatched" if args.unpatched else peer.drop_in
        print(f"{args.peer}: running the tests of {origin} ({what})", flush=True)
        result = run_tests(args.peer, tests, args.keyword, patched=not args.unpatched)
    print(result.summary(args.peer))
    for line in result.failures:
        print(f"  FAILED {line}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
