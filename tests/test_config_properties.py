"""Input hardening, property-based (hypothesis), over every registered study and the CLI.

For every field of every registered study's ``Config`` (found through the ``rljax.experiments``
entry points, so fields and studies added later are covered without touching this file), any
command-line text either builds a valid config or is refused with a :class:`ConfigError` whose
message is one line naming the field (``"<field>: ..."``, or a field it conflicts with that
names it back). ``rljax run`` turns such input into one ``error: ...`` line on stderr, exit
status 2, nothing on stdout and no output directory.

No study ever runs here: the CLI is only called with input that ``build_config`` already
refused, and a module-wide guard replaces every study's ``run`` with one that fails the test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import re
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rljax.cli import EXPERIMENT_GROUP, main, registry
from rljax.config import ConfigError, build_config, field_types, parse_overrides, parse_value

STUDIES = {name: ep.load() for name, ep in registry(EXPERIMENT_GROUP).items()}
CASES = [(name, field) for name, module in STUDIES.items()
         for field in field_types(module.Config)]
FLOAT_CASES = [(name, field) for name, field in CASES
               if field_types(STUDIES[name].Config)[field] is float]
SEED_FLAGS = {"--seeds": "seeds", "--block-size": "block_size", "--base-seed": "base_seed"}
# Largest base seed: jax.random.key keeps 32 bits without x64 (key(2**32) == key(0)) and the
# studies derive analysis keys from base_seed + small offsets.
MAX_SEED = 2**31 - 1

# Deterministic (derandomize): CI sees the same examples every run. 8 examples per field
# (was 40): every field of every study is one test, so the per-field count is the suite's
# cost (about 0.12 s per field at 40); the strategies aim at each kind of field, so the
# first examples already carry the bad kinds.
FIELD_SETTINGS = settings(max_examples=8, deadline=None, derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
CLI_SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                        suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------------------
# Value strategies: command-line text, generic and aimed at each kind of field.
# --------------------------------------------------------------------------------------

ODD_TEXT = ["", " ", "\n", "1\n2", "\r", "\x00", "\u2028", "é", "٣", "１０", "0x10", "1_000",
            "1e3", "1.5", "-0", "+1", " 7 ", "none", "None", "null", "[]", "=", "a=b", ",", ",,",
            "1,", ",1", "1,,2", "nan", "inf", "-inf", "true", "--x", "'", '"', "\\n"]
BIG_INTS = [0, 1, -1, 2, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64, 10**30,
            -(10**30)]
FLOAT_TEXT = ["nan", "NaN", "-nan", "inf", "-inf", "+inf", "Infinity", "-Infinity", "infinity",
              "1e308", "-1e308", "1e309", "-0.0", "0.0", "5e-324", "1e-320", "0.5", "1", "2",
              "-1", "0.999999", "1.0000001"]
BOOL_TEXT = ["true", "false", "True", "FALSE", "yes", "no", "on", "off", "1", "0", " yes ",
             "y", "n", "t", "f", "2", "-1", "enabled", ""]

ints_text = st.one_of(st.integers().map(str), st.sampled_from(BIG_INTS).map(str),
                      st.integers(-3, 70).map(str))
floats_text = st.one_of(st.floats().map(repr), st.sampled_from(FLOAT_TEXT),
                        st.floats(-2.0, 2.0).map(str), st.integers(-5, 5).map(str))
bools_text = st.sampled_from(BOOL_TEXT)
odd_text = st.one_of(st.text(), st.sampled_from(ODD_TEXT))


def list_text(default: str) -> st.SearchStrategy[str]:
    """Comma-separated lists: well-formed ones (the default's own items, small integers,
    sorted or unsorted fractions), where range and cross-item limits bite, and messy ones
    (numbers of any size, junk, case changes)."""
    items = [item for item in default.split(",") if item.strip()] or [default]
    fractions = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=4)
    clean = st.one_of(
        st.lists(st.sampled_from(items), min_size=1, max_size=4),
        st.lists(st.integers(-1, 6).map(str), min_size=1, max_size=4),
        fractions.map(lambda xs: [repr(x) for x in xs]),
        fractions.map(lambda xs: [repr(x) for x in sorted(xs)]),
    )
    item = st.one_of(st.sampled_from(items), ints_text, floats_text, odd_text,
                     st.sampled_from(items).map(str.upper))
    return st.one_of(clean, st.lists(item, max_size=6)).map(",".join)


def value_text(kind: type, default) -> st.SearchStrategy[str]:
    """Text for a field of type ``kind``: aimed at the type, plus anything at all."""
    aimed = {int: ints_text, float: floats_text, bool: bools_text}.get(kind)
    if kind is int:  # also around the default, where cross-field limits bite
        aimed = st.one_of(aimed, st.integers(min(0, default), max(2 * default, 16)).map(str))
    if kind is float:
        aimed = st.one_of(aimed, st.floats(0.0, max(2 * abs(default), 1.0)).map(repr))
    if kind is str:
        aimed = list_text(default)
    return st.one_of(aimed, odd_text) if aimed is not None else odd_text


def default_of(config_cls, field: str):
    return {f.name: f.default for f in dataclasses.fields(config_cls)}[field]


# --------------------------------------------------------------------------------------
# Helpers.
# --------------------------------------------------------------------------------------


def attempt(config_cls, field: str, text: str):
    """The built config, or the :class:`ConfigError`; any other exception propagates."""
    try:
        return build_config(config_cls, parse_overrides(config_cls, [f"{field}={text}"]))
    except ConfigError as err:
        return err


def assert_names_field(message: str, config_cls, field: str) -> None:
    """One line, ``"<f>: ..."`` with ``f`` a field of the config, and ``f`` is ``field`` or
    the message names ``field`` too (a cross-field conflict)."""
    assert message.splitlines() == [message], f"not one line: {message!r}"
    head = message.split(":", 1)[0]
    names = set(field_types(config_cls))
    assert head in names, f"{field}: message does not start with a field name: {message!r}"
    assert head == field or re.search(rf"\b{re.escape(field)}\b", message), (
        f"{field}: message names {head!r} but not {field!r}: {message!r}")


def assert_sane(config, field: str) -> None:
    """What every accepted config must satisfy."""
    value = getattr(config, field)
    if isinstance(value, float):
        assert math.isfinite(value), f"{field}={value!r} accepted"
    # config.json is strict JSON (no NaN/inf anywhere).
    json.dumps(dataclasses.asdict(config), allow_nan=False)
    for name, seed in dataclasses.asdict(config).items():
        if name.endswith("_seed"):
            assert 0 <= seed <= MAX_SEED, f"{name}={seed!r} accepted (keys keep 32 bits)"


@contextlib.contextmanager
def captured():
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield out, err


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    with captured() as (out, err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()


def assert_refused(status: int, out: str, err: str, *names: str) -> None:
    """Exit 2, nothing on stdout, exactly one ``error: `` line naming one of ``names``."""
    assert status == 2, (status, out, err)
    assert out == "", out
    assert err.endswith("\n") and err[:-1].splitlines() == [err[:-1]], repr(err)
    assert err.startswith("error: "), repr(err)
    assert "Traceback" not in err
    if names:
        assert any(name in err for name in names), (names, err)


@pytest.fixture(scope="module", autouse=True)
def no_study_runs():
    """Every study's ``run`` fails the test: nothing here may start a study."""

    def refuse(*args, **kwargs):
        raise AssertionError("a study was started by a test that must not run one")

    with pytest.MonkeyPatch.context() as mp:
        for module in STUDIES.values():
            mp.setattr(module, "run", refuse)
        yield


@pytest.fixture(scope="module")
def out_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cli_out")


def fresh_out(root: Path) -> Path:
    """A path that does not exist yet, two levels below ``root`` (hypothesis reuses
    fixtures, so every example needs its own)."""
    return root / uuid.uuid4().hex / "out"


# --------------------------------------------------------------------------------------
# 1. Every field of every Config: accepted and sane, or refused with one line naming it.
# --------------------------------------------------------------------------------------


def test_every_study_is_covered():
    assert {"orm-vs-prm", "ppo-cartpole", "gdro", "lm-grpo"} <= set(STUDIES)
    for name, module in STUDIES.items():
        build_config(module.Config)  # the defaults are valid
        assert field_types(module.Config), name


@pytest.mark.parametrize("name, field", CASES, ids=[f"{n}.{f}" for n, f in CASES])
@FIELD_SETTINGS
@given(data=st.data())
def test_field_values_are_accepted_sanely_or_refused_naming_the_field(name, field, data):
    config_cls = STUDIES[name].Config
    kind = field_types(config_cls)[field]
    text = data.draw(value_text(kind, default_of(config_cls, field)), label="text")
    result = attempt(config_cls, field, text)
    if isinstance(result, ConfigError):
        assert_names_field(str(result), config_cls, field)
    else:
        assert_sane(result, field)


@pytest.mark.parametrize("name, field", FLOAT_CASES, ids=[f"{n}.{f}" for n, f in FLOAT_CASES])
def test_non_finite_floats_are_refused(name, field):
    config_cls = STUDIES[name].Config
    for text in ("nan", "inf", "-inf", "1e309"):
        result = attempt(config_cls, field, text)
        assert isinstance(result, ConfigError), f"{name}: {field}={text} accepted"
        assert str(result).startswith(f"{field}:"), str(result)


# Holes these properties found (kept as fixed examples; head None = a cross-field check
# that may name another field, as long as it names this one too).
FOUND = [
    ("orm-vs-prm", "base_seed", str(2**31), "base_seed"),  # key(2**32) == key(0)
    ("gdro", "bank_seed", str(2**63), "bank_seed"),  # OverflowError in jax.random.key
    ("gdro", "gdro_step_size", "inf", "gdro_step_size"),  # accepted
    ("gdro", "gdro_step_size", "0", "gdro_step_size"),  # named 'step_size'
    ("gdro", "price_step_size", "inf", "price_step_size"),  # accepted
    ("gdro", "group_size", "17", "group_size"),  # named 'budget'
    ("gdro", "n_min", "9", None),  # named 'budget'
    ("gdro", "bin_edges", "0.01,0.5", "bin_edges"),  # named 'hysteresis'
    ("gdro", "num_prompts", str(10**12), None),  # validate() allocated num_prompts floats
    ("lm-grpo", "levels", "7", "levels"),  # named 'level' (not a study field)
    ("lm-grpo", "levels", "0", "levels"),  # no held-out split: nothing to evaluate on
    ("ppo-cartpole", "num_envs", "10000", None),  # 'total_steps: ...' without num_envs
    ("ppo-cartpole", "total_steps", "600", None),  # 'curve_points: ...' without total_steps
]


@pytest.mark.parametrize("name, field, text, head", FOUND)
def test_found_holes_stay_closed(name, field, text, head):
    config_cls = STUDIES[name].Config
    result = attempt(config_cls, field, text)
    if field == "num_prompts":  # a size: accepted, without allocating anything
        assert not isinstance(result, ConfigError)
        return
    assert isinstance(result, ConfigError), f"{name}: {field}={text!r} accepted"
    assert_names_field(str(result), config_cls, field)
    if head is not None:
        assert str(result).startswith(f"{head}:"), str(result)


# --------------------------------------------------------------------------------------
# 2. The CLI turns every refused value into one line, exit 2, no output directory.
# --------------------------------------------------------------------------------------


@CLI_SETTINGS
@given(data=st.data())
def test_cli_refuses_bad_values_in_one_line_without_output(out_root, data):
    name, field = data.draw(st.sampled_from(CASES), label="case")
    config_cls = STUDIES[name].Config
    kind = field_types(config_cls)[field]
    text = data.draw(value_text(kind, default_of(config_cls, field)), label="text")
    result = attempt(config_cls, field, text)
    if not isinstance(result, ConfigError):
        return  # a valid value would start the study
    out = fresh_out(out_root)
    spelling = data.draw(st.sampled_from([field, field.replace("_", "-")]), label="key")
    status, stdout, stderr = run_cli(["run", name, "--set", f"{spelling}={text}",
                                      "--out", str(out)])
    assert_refused(status, stdout, stderr, field)
    assert stderr == f"error: {result}\n"
    assert not out.exists() and not out.parent.exists()


# --------------------------------------------------------------------------------------
# 3. The seed flags, unknown keys, --set without '=', unknown studies.
# --------------------------------------------------------------------------------------


@CLI_SETTINGS
@given(data=st.data())
def test_seed_flags_refuse_bad_text_in_one_line(out_root, data):
    flag = data.draw(st.sampled_from(sorted(SEED_FLAGS)), label="flag")
    field = SEED_FLAGS[flag]
    name = data.draw(st.sampled_from(sorted(n for n, m in STUDIES.items()
                                            if field in field_types(m.Config))), label="study")
    text = data.draw(st.one_of(ints_text, floats_text, odd_text), label="text")
    config_cls = STUDIES[name].Config
    try:
        build_config(config_cls, {field: parse_value(field, text, int)})
    except ConfigError as err:
        assert_names_field(str(err), config_cls, field)
    else:
        assert_sane(build_config(config_cls, {field: int(text)}), field)
        return  # valid: would start the study
    out = fresh_out(out_root)
    status, stdout, stderr = run_cli(["run", name, f"{flag}={text}", "--out", str(out)])
    assert_refused(status, stdout, stderr, field)
    assert not out.exists() and not out.parent.exists()


def test_seed_flags_on_a_study_without_that_field_are_refused(tmp_path):
    for name, module in STUDIES.items():
        for flag, field in SEED_FLAGS.items():
            if field in field_types(module.Config):
                continue
            out = fresh_out(tmp_path)
            status, stdout, stderr = run_cli(["run", name, flag, "4", "--out", str(out)])
            assert_refused(status, stdout, stderr, flag)
            assert "no " + field in stderr
            assert not out.parent.exists()


def test_seed_flags_with_a_separate_argument(tmp_path):
    for flag, field in SEED_FLAGS.items():
        for text in ("0", "-1", "x", "1.5", "", " ", "2**4", str(10**30)):
            try:
                build_config(STUDIES["orm-vs-prm"].Config, {field: parse_value(field, text, int)})
            except ConfigError:
                out = fresh_out(tmp_path)
                status, stdout, stderr = run_cli(["run", "orm-vs-prm", flag, text,
                                                  "--out", str(out)])
                assert_refused(status, stdout, stderr, field)
                assert not out.parent.exists()


@CLI_SETTINGS
@given(data=st.data())
def test_unknown_set_keys_are_refused_in_one_line(out_root, data):
    name = data.draw(st.sampled_from(sorted(STUDIES)), label="study")
    known = set(field_types(STUDIES[name].Config))
    key = data.draw(st.text().filter(lambda k: "=" not in k and not k.startswith("-")
                                     and k.strip().replace("-", "_") not in known), label="key")
    out = fresh_out(out_root)
    status, stdout, stderr = run_cli(["run", name, "--set", f"{key}=1", "--out", str(out)])
    assert_refused(status, stdout, stderr, "--set")
    assert "unknown key" in stderr
    assert not out.exists() and not out.parent.exists()


@CLI_SETTINGS
@given(data=st.data())
def test_set_without_equals_is_refused_in_one_line(out_root, data):
    name = data.draw(st.sampled_from(sorted(STUDIES)), label="study")
    pair = data.draw(st.text().filter(lambda p: "=" not in p and not p.startswith("-")),
                     label="pair")
    out = fresh_out(out_root)
    status, stdout, stderr = run_cli(["run", name, "--set", pair, "--out", str(out)])
    assert_refused(status, stdout, stderr, "--set")
    assert not out.exists() and not out.parent.exists()


@CLI_SETTINGS
@given(name=st.one_of(st.text(), st.sampled_from(sorted(STUDIES)).map(str.upper),
                      st.sampled_from(sorted(STUDIES)).map(lambda n: n.replace("-", "_"))))
def test_unknown_study_names_are_refused_in_one_line(out_root, name):
    if name in STUDIES or name.startswith("-"):
        return  # a real study would run; "-..." is an option to argparse (tested below)
    out = fresh_out(out_root)
    status, stdout, stderr = run_cli(["run", name, "--out", str(out)])
    assert_refused(status, stdout, stderr, "unknown experiment")
    assert not out.exists() and not out.parent.exists()


def test_argparse_errors_are_one_line():
    for argv in (["run"], ["run", "--bogus"], ["run", "orm-vs-prm", "--seeds"],
                 ["run", "orm-vs-prm", "--set"], ["run", "orm-vs-prm", "extra", "args"],
                 ["nope"]):
        status, out, err = run_cli(argv)
        assert_refused(status, out, err)


# --------------------------------------------------------------------------------------
# 4. An existing output directory is refused before the study starts, and left untouched.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_non_empty_output_dir_is_refused_untouched(tmp_path, name):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("precious")
    (out / "sub").mkdir()
    (out / "sub" / "results.parquet").write_bytes(b"\x00old")
    status, stdout, stderr = run_cli(["run", name, "--out", str(out)])  # a valid config
    assert_refused(status, stdout, stderr, "--out")
    assert "--overwrite" in stderr
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        "mine.txt", "sub", "sub/results.parquet"]
    assert (out / "mine.txt").read_text() == "precious"
    assert (out / "sub" / "results.parquet").read_bytes() == b"\x00old"


def test_output_path_that_is_a_file_is_refused_untouched(tmp_path):
    out = tmp_path / "out"
    out.write_text("a file")
    status, stdout, stderr = run_cli(["run", "orm-vs-prm", "--out", str(out), "--overwrite"])
    assert_refused(status, stdout, stderr, "--out")
    assert out.read_text() == "a file"
