"""``rljax.config``: a field declared once (``param``) is what validation, the grid, the
command line and the docs read."""

import dataclasses
from dataclasses import dataclass

import pytest

from rljax.config import (
    ConfigError,
    check_fields,
    declared_fields,
    fields_markdown,
    param,
    parse_overrides,
    structural_fields,
    traced_fields,
    traced_values,
    with_defaults,
)


@dataclass(frozen=True)
class Toy:
    rate: float = param(0.1, "a step size", traced=True, low=0.0, low_open=True)
    clip: float | None = param(0.2, "a clip; None: off", traced=True, low=0.0, low_open=True)
    width: int = param(8, "a width", low=1, high=64)
    mode: str = param("a", "a choice", choices=("a", "b"))
    flag: bool = param(False, "a switch")
    seeds: int = param(4, "seeds", sweep=False, low=2)


@pytest.mark.parametrize("change, message", [
    ({"rate": 0.0}, "rate: must be a finite number in (0, inf), got 0.0"),
    ({"rate": float("nan")}, "rate: must be a finite number"),
    ({"clip": -1.0}, "clip: must be a finite number in (0, inf), got -1.0 (or none: off)"),
    ({"width": 65}, "width: must be an integer in [1, 64], got 65"),
    ({"width": True}, "width: must be an integer in [1, 64], got True"),
    ({"mode": "c"}, "mode: must be one of a, b, got 'c'"),
    ({"flag": 1}, "flag: must be a boolean (true or false), got 1"),
    ({"seeds": 1}, "seeds: must be an integer >= 2, got 1"),
])
def test_check_fields_refuses_each_declared_bound_in_one_line(change, message):
    check_fields(Toy())
    with pytest.raises(ConfigError) as info:
        check_fields(Toy(**change))
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_none_switches_an_optional_field_off_and_leaves_the_traced_row():
    check_fields(Toy(clip=None))
    assert traced_values(Toy()) == {"rate": 0.1, "clip": 0.2}
    assert traced_values(Toy(clip=None)) == {"rate": 0.1}
    assert parse_overrides(Toy, ["clip=none", "rate=0.5"]) == {"clip": None, "rate": 0.5}
    with pytest.raises(ConfigError, match="rate: must be a number"):
        parse_overrides(Toy, ["rate=none"])  # not optional: none is not a value


def test_kinds_are_read_from_the_metadata():
    assert traced_fields(Toy) == ("rate", "clip")
    assert structural_fields(Toy) == ("width", "mode", "flag")
    assert [f.name for f in declared_fields(Toy)] == [f.name for f in dataclasses.fields(Toy)]


def test_with_defaults_changes_defaults_and_keeps_the_declarations():
    Other = with_defaults(Toy, width=16, mode="b")
    assert issubclass(Other, Toy) and Other().width == 16 and Other().mode == "b"
    assert Other().rate == 0.1 and Toy().width == 8
    assert [f.name for f in dataclasses.fields(Other)] == [f.name for f in dataclasses.fields(Toy)]
    for f, g in zip(dataclasses.fields(Other), dataclasses.fields(Toy), strict=True):
        assert f.metadata == g.metadata
    with pytest.raises(ConfigError, match="width"):
        check_fields(Other(width=0))
    with pytest.raises(TypeError, match="has no field nope"):
        with_defaults(Toy, nope=1)


def test_the_docs_table_has_a_row_per_field_with_kind_and_bounds():
    rows = fields_markdown(Toy).splitlines()
    assert rows[0] == "| field | type | default | kind | allowed | what it sets |"
    assert len(rows) == 2 + len(dataclasses.fields(Toy))
    assert rows[2] == "| `rate` | float | `0.1` | traced | (0, inf) | a step size |"
    assert rows[3].startswith("| `clip` | float \\| None | `0.2` | traced | (0, inf) or `None`")
    assert rows[4] == "| `width` | int | `8` | structural | [1, 64] | a width |"
    assert rows[5] == "| `mode` | str | `'a'` | structural | `a`, `b` | a choice |"
    assert rows[7] == "| `seeds` | int | `4` | run | [2, inf) | seeds |"
