"""Run configs: frozen dataclasses, ``--set key=value`` parsing, one-line errors.

Every study has a frozen ``Config`` dataclass whose fields are plain ``int``, ``float``,
``str`` or ``bool`` values and a ``validate()`` method. Errors are :class:`ConfigError`
(a ``ValueError``) with a message of the form ``"<field>: <what is allowed>, got <value>"``
so the CLI can print it as one line.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Iterable, Sequence
from typing import Any


class ConfigError(ValueError):
    """A config value is invalid; the message names the field and what is allowed."""


def field_types(config_cls: type) -> dict[str, type]:
    """``{field name: type}`` of a config dataclass (string annotations resolved)."""
    hints = typing.get_type_hints(config_cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(config_cls)}


def parse_value(name: str, text: str, kind: type) -> Any:
    """Parse ``text`` as a value of ``kind`` (int, float, str, bool) for field ``name``."""
    if kind is bool:
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name}: must be a boolean (true/false), got {text!r}")
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"{name}: must be an integer, got {text!r}") from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"{name}: must be a number, got {text!r}") from None
    if kind is str:
        return text
    raise ConfigError(f"{name}: cannot be set from the command line")


def parse_overrides(config_cls: type, pairs: Iterable[str]) -> dict[str, Any]:
    """Turn ``["key=value", ...]`` into typed overrides for ``config_cls``.

    Unknown keys and values of the wrong type raise :class:`ConfigError`.
    """
    types = field_types(config_cls)
    overrides: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--set: expected key=value, got {pair!r}")
        key, text = pair.split("=", 1)
        key = key.strip().replace("-", "_")
        if key not in types:
            raise ConfigError(f"--set: unknown key {key!r}; known keys: {', '.join(sorted(types))}")
        overrides[key] = parse_value(key, text, types[key])
    return overrides


def build_config(config_cls: type, overrides: dict[str, Any] | None = None) -> Any:
    """Instantiate ``config_cls`` with ``overrides`` and run its ``validate()``."""
    config = config_cls(**(overrides or {}))
    validate = getattr(config, "validate", None)
    if validate is not None:
        validate()
    return config


def require_int(name: str, value: Any, minimum: int | None = None,
                maximum: int | None = None) -> None:
    """``value`` is an int (not bool), ``>= minimum`` and ``<= maximum``."""
    ok = isinstance(value, int) and not isinstance(value, bool)
    if (not ok or (minimum is not None and value < minimum)
            or (maximum is not None and value > maximum)):
        if maximum is None:
            allowed = "an integer" + (f" >= {minimum}" if minimum is not None else "")
        elif minimum is None:
            allowed = f"an integer <= {maximum}"
        else:
            allowed = f"an integer in [{minimum}, {maximum}]"
        raise ConfigError(f"{name}: must be {allowed}, got {value!r}")


def require_float(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> None:
    """``value`` is a finite real number inside the given interval."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low is not None:
        ok = value >= low if low_inclusive else value > low
    if ok and high is not None:
        ok = value <= high if high_inclusive else value < high
    if not ok:
        lo = "(-inf" if low is None else ("[" if low_inclusive else "(") + f"{low:g}"
        hi = "inf)" if high is None else f"{high:g}" + ("]" if high_inclusive else ")")
        raise ConfigError(f"{name}: must be a finite number in {lo}, {hi}, got {value!r}")


def require_choice(name: str, value: Any, choices: Sequence[str]) -> None:
    """``value`` is one of ``choices``."""
    if value not in choices:
        raise ConfigError(f"{name}: must be one of {', '.join(choices)}, got {value!r}")


def config_to_dict(config: Any) -> dict[str, Any]:
    """A config dataclass as a plain JSON-able dict."""
    return dataclasses.asdict(config)
