"""scripts/peer_tests.py, the runner of a peer library's own tests against rljax's
drop-in: sdist extraction (tests only), the gymnax patch on a tiny synthetic test file
(patched and unpatched), the mctx patch and working folder, the summary line and exit
status -- all offline. One test runs a few of gymnax 1.0.1's real tests when PyPI answers
within a timeout (skipped, with the reason, when it does not)."""

import io
import tarfile
import textwrap
from pathlib import Path

import pytest
from script_module import load_script

pytestmark = pytest.mark.timeout(240)





peer_tests = load_script("peer_tests")

PROBE_TESTS = '''
import gymnax
import pytest

from rljax.envs import GymnaxEnv


def test_make_returns_the_adapter():
    env, params = gymnax.make("CartPole-v1")
    assert isinstance(env, GymnaxEnv), type(env)
    assert env.default_params is params


def test_fails_on_purpose():
    assert 1 == 2, "on purpose"


def test_skips_on_purpose():
    pytest.skip("on purpose")
'''


def _write_sdist(path: Path, files: dict[str, str]) -> Path:
    """A ``.tar.gz`` whose members are ``files`` (name -> text) under ``peer-0.1/``."""
    with tarfile.open(path, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"peer-0.1/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_extract_tests_takes_only_the_tests_folder(tmp_path):
    sdist = _write_sdist(tmp_path / "peer-0.1.tar.gz", {
        "peer/__init__.py": "raise ImportError('the sdist package must not be extracted')",
        "tests/test_a.py": "def test_a(): pass\n",
        "tests/sub/data.txt": "x",
        "tests_other/test_b.py": "",
    })
    tests = peer_tests.extract_tests(sdist, "tests", tmp_path / "run")
    found = sorted(p.relative_to(tmp_path / "run").as_posix()
                   for p in (tmp_path / "run").rglob("*") if p.is_file())
    assert tests == tmp_path / "run" / "tests"
    assert found == ["tests/sub/data.txt", "tests/test_a.py"]
    assert peer_tests.find_sdist(tmp_path) == sdist  # a folder holding one sdist
    with pytest.raises(RuntimeError, match="no files under docs/"):
        peer_tests.extract_tests(sdist, "docs", tmp_path / "run2")


def test_gymnax_patch_summary_and_exit_status(tmp_path, capfd):
    """The whole script on a synthetic sdist: with the patch ``gymnax.make`` hands out a
    ``GymnaxEnv`` (1 passed), the failing test is listed, the exit status is 1; without
    it (``--unpatched``) the probe fails too."""
    sdist = _write_sdist(tmp_path / "peer-0.1.tar.gz",
                         {"tests/test_probe.py": textwrap.dedent(PROBE_TESTS)})
    status = peer_tests.main(["gymnax", "--sdist", str(sdist)])
    out = capfd.readouterr().out
    assert status == 1
    assert "gymnax: 1 passed, 1 failed (1 skipped)" in out
    assert "FAILED tests.test_probe::test_fails_on_purpose - AssertionError: on purpose" in out

    status = peer_tests.main(["gymnax", "--sdist", str(sdist), "--unpatched", "-k",
                              "returns_the_adapter"])
    out = capfd.readouterr().out
    assert status == 1 and "gymnax: 0 passed, 1 failed (0 skipped)" in out
    assert "test_make_returns_the_adapter" in out


MCTX_PROBE_TESTS = '''
import json

import mctx
from mctx._src import policies, qtransforms, search, seq_halving, tree

import rljax.search


def test_mctx_and_its_private_modules_are_rljax_search():
    assert mctx is rljax.search
    assert (policies, search, tree) == (rljax.search.policies, rljax.search.loop,
                                        rljax.search.tree)
    assert callable(policies._apply_temperature) and callable(policies._mask_invalid_actions)
    assert callable(qtransforms._compute_mixed_value)
    assert seq_halving.get_sequence_of_considered_visits(2, 3) == (0, 0, 1)


def test_test_data_opens_from_the_working_folder():  # as mctx's tree_test.py opens it
    with open("../mctx/_src/tests/test_data/probe.json") as fd:
        assert json.load(fd) == {"ok": 1}
'''


def test_mctx_patch_and_working_folder(tmp_path, capfd):
    """mctx's tests import ``mctx`` and ``mctx._src.<module>`` and open their data from
    ``../mctx/_src/tests/test_data``: with the patch both probes pass (offline, on a
    synthetic sdist laid out like mctx 0.0.71's); the pin is the version rljax.search
    reproduces."""
    import rljax.search

    sdist = _write_sdist(tmp_path / "mctx-0.0.71.tar.gz", {
        "mctx/__init__.py": "raise ImportError('the sdist package must not be extracted')",
        "mctx/_src/tests/probe_test.py": textwrap.dedent(MCTX_PROBE_TESTS),
        "mctx/_src/tests/test_data/probe.json": '{"ok": 1}',
    })
    status = peer_tests.main(["mctx", "--sdist", str(sdist)])
    out = capfd.readouterr().out
    assert "mctx: 2 passed, 0 failed (0 skipped)" in out, out
    assert status == 0
    assert peer_tests.PEERS["mctx"].requirement == f"mctx=={rljax.search.__version__}"


def test_result_is_ok_only_with_passes_and_no_failures(tmp_path):
    report = tmp_path / "report.xml"
    report.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="t" name="a"/>'
        '<testcase classname="t" name="b"><error message="boom&#10;more"/></testcase>'
        '<testcase classname="t" name="c"><skipped message="s"/></testcase>'
        '</testsuite></testsuites>')
    result = peer_tests.parse_junit(report, 1)
    assert (result.passed, result.failed, result.skipped) == (1, 1, 1)
    assert result.failures == ["t::b - boom"] and not result.ok
    assert peer_tests.Result(2, 0, 0, [], 0).ok
    assert not peer_tests.Result(0, 0, 3, [], 5).ok  # nothing ran


@pytest.mark.slow  # downloads gymnax's sdist from PyPI and runs part of its suite (~10 s)
def test_real_gymnax_tests_subset_when_pypi_answers(tmp_path):
    """gymnax 1.0.1's own tests of what its users found broken through the adapter (the
    transition-gradient API, step_env's five values), downloaded from PyPI. Needs the
    network: skipped with pip's reason when the download fails or takes over 60 s."""
    peer = peer_tests.PEERS["gymnax"]
    try:
        sdist = peer_tests.download_sdist(peer.requirement, tmp_path / "sdist", timeout=60)
    except RuntimeError as error:
        pytest.skip(f"gymnax sdist not downloadable here: {error}")
    tests = peer_tests.extract_tests(sdist, peer.tests_dir, tmp_path / "run")
    keyword = ("rejects_transition_gradients or capability_is_read_only or "
               "configured_copy or time_limit_returns_distinct")
    result = peer_tests.run_tests("gymnax", tests, keyword, quiet=True)
    assert result.failures == []
    assert (result.passed, result.failed) == (4, 0)
