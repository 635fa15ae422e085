"""Configs declared once: frozen dataclasses whose fields carry their own metadata.

A trainer's or study's config is a frozen dataclass of plain ``int``, ``float``, ``str``
and ``bool`` values (``float | None`` where ``None`` switches a feature off). Each field
is declared with :func:`param`: its default, one line of help, whether a sweep may
*trace* it (read from ``hparams`` inside one compiled program), whether a grid may vary
it at all, and its bounds or choices. Everything else reads that declaration:
:func:`check_fields` (validation), :func:`traced_fields` / :func:`structural_fields`
(the grid, ``--grid`` / ``--sample``), :func:`parse_overrides` (``--set``),
:func:`fields_markdown` (the docs' tables). A study's config *extends* its trainer's
(``class Config(PPOTrainConfig)``, or :func:`with_defaults` for other defaults) and never
re-declares a trainer's field.

Errors are :class:`ConfigError` (a ``ValueError``) with a message of the form
``"<field>: <what is allowed>, got <value>"`` so the CLI can print it as one line.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: Texts ``--set`` reads as ``None`` for a ``float | None`` field (a feature switched off).
NONE_TEXTS = ("none", "off", "null")


class ConfigError(ValueError):
    """A config value is invalid; the message names the field and what is allowed."""


def param(default: Any, help: str, *, traced: bool = False, sweep: bool = True,
          low: float | None = None, high: float | None = None, low_open: bool = False,
          high_open: bool = False, choices: Sequence[Any] | None = None) -> Any:
    """A config field declared once: ``dataclasses.field`` with metadata.

    Args:
      default: the field's default.
      help: one line: what the field sets (the docs' tables and ``rljax run --help``).
      traced: a sweep may pass it as a traced ``hparams`` scalar (one program for every
        value); otherwise it is structural (one program per value).
      sweep: a grid may vary it (``False`` for a run's shape: seeds, block size, the
        report's settings).
      low, high: bounds of a number (inclusive unless ``low_open`` / ``high_open``).
      choices: the allowed values of a string field.
    """
    metadata = {"help": help, "traced": traced, "sweep": sweep, "low": low, "high": high,
                "low_open": low_open, "high_open": high_open,
                "choices": None if choices is None else tuple(choices)}
    return dataclasses.field(default=default, metadata=metadata)


def declared_fields(config_cls: type) -> list[dataclasses.Field]:
    """The fields of ``config_cls`` declared with :func:`param`, in declaration order."""
    return [f for f in dataclasses.fields(config_cls) if "help" in f.metadata]


def _base_type(kind: Any) -> tuple[type, bool]:
    """``(type, accepts None)`` of an annotation (``float | None`` -> ``(float, True)``)."""
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(kind))
    return kind, False


def check_fields(config: Any) -> None:
    """Check every :func:`param` field of ``config`` against its declaration (type,
    bounds, choices); raise a one-line :class:`ConfigError` naming the first bad one."""
    types_ = field_types(type(config))
    for f in declared_fields(type(config)):
        value = getattr(config, f.name)
        kind, optional = _base_type(types_[f.name])
        if value is None and optional:
            continue
        m = f.metadata
        try:
            if kind is bool:
                if not isinstance(value, bool):
                    raise ConfigError(f"{f.name}: must be a boolean (true or false), got "
                                      f"{value!r}")
            elif kind is int:
                low = None if m["low"] is None else int(m["low"]) + int(m["low_open"])
                high = None if m["high"] is None else int(m["high"]) - int(m["high_open"])
                require_int(f.name, value, low, high)
            elif kind is float:
                require_float(f.name, value, low=m["low"], high=m["high"],
                              low_inclusive=not m["low_open"],
                              high_inclusive=not m["high_open"])
            elif m["choices"] is not None:
                require_choice(f.name, value, m["choices"])
            elif kind is str and not isinstance(value, str):
                raise ConfigError(f"{f.name}: must be a string, got {value!r}")
        except ConfigError as err:
            if optional:
                raise ConfigError(f"{err} (or none: off)") from None
            raise


def traced_fields(config_cls: type) -> tuple[str, ...]:
    """The fields a sweep traces: declared ``traced`` (or, for a config written without
    :func:`param`, listed in its ``TRACED`` class attribute)."""
    declared = tuple(f.name for f in declared_fields(config_cls) if f.metadata["traced"])
    return declared + tuple(n for n in getattr(config_cls, "TRACED", ()) if n not in declared)


def structural_fields(config_cls: type) -> tuple[str, ...]:
    """The fields a grid may vary by compiling one program per value: declared with
    ``sweep=True`` and not traced (or listed in a ``STRUCTURAL`` class attribute)."""
    declared = tuple(f.name for f in declared_fields(config_cls)
                     if f.metadata["sweep"] and not f.metadata["traced"])
    return declared + tuple(n for n in getattr(config_cls, "STRUCTURAL", ())
                            if n not in declared)


def traced_values(config: Any) -> dict[str, Any]:
    """``{field: value}`` of ``config``'s traced fields (a ``None``, a feature switched
    off, is structural and left out): this config's row of a grid."""
    return {name: getattr(config, name) for name in traced_fields(type(config))
            if getattr(config, name) is not None}


def check_traced_hparams(config_cls: type, config: Any,
                         hparams: Mapping[str, Any] | None) -> None:
    """Raise a one-line ``ValueError`` if ``hparams`` names a field that cannot be traced.

    Allowed names are the traced fields of ``config_cls`` (:func:`traced_fields`), each
    only when ``config``'s value is a number: ``None`` (a feature switched off) is
    structural, it removes a branch from the program. Values are not checked (they may be
    traced); a sweep validates each configuration before it runs.
    """
    if hparams is None:
        return
    traceable = traced_fields(config_cls)
    unknown = sorted(set(hparams) - set(traceable))
    if unknown:
        raise ValueError(f"hparams: cannot trace {', '.join(unknown)}; traceable fields: "
                         f"{', '.join(traceable)}")
    for name in sorted(hparams):
        if getattr(config, name) is None:
            raise ValueError(f"hparams: {name} is traced but config.{name} is None (off is "
                             f"structural); set config.{name} to a number")


def resolve_traced_hparams(config_cls: type, config: Any,
                           hparams: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{name: value}`` for every traced field of ``config_cls``: ``hparams[name]`` (a
    scalar, possibly traced, cast to float32) where given, else ``config``'s constant.

    Raises:
      ValueError: as :func:`check_traced_hparams`, or for a value that is not a scalar.
    """
    import jax.numpy as jnp

    check_traced_hparams(config_cls, config, hparams)
    values = {name: getattr(config, name) for name in traced_fields(config_cls)}
    for name, value in (hparams or {}).items():
        if jnp.ndim(value) != 0:
            raise ValueError(f"hparams: {name} must be a scalar (one run's value), got shape "
                             f"{jnp.shape(value)}")
        values[name] = jnp.asarray(value, jnp.float32)
    return values


def with_defaults(base: type, **defaults: Any) -> type:
    """A frozen subclass of the dataclass ``base`` whose fields named in ``defaults`` have
    those defaults (their declarations, metadata and order kept): how a study starts from
    other trainer defaults without re-declaring a field."""
    known = {f.name: f for f in dataclasses.fields(base)}
    unknown = sorted(set(defaults) - set(known))
    if unknown:
        raise TypeError(f"with_defaults: {base.__name__} has no field {', '.join(unknown)}")
    hints = typing.get_type_hints(base)
    namespace: dict[str, Any] = {"__annotations__": {}, "__module__": base.__module__,
                                 "__doc__": base.__doc__}
    for name, value in defaults.items():
        namespace["__annotations__"][name] = hints[name]
        namespace[name] = dataclasses.field(default=value, metadata=known[name].metadata)
    return dataclasses.dataclass(frozen=True)(type(base.__name__, (base,), namespace))


def fields_markdown(config_cls: type) -> str:
    """The docs' table of ``config_cls``'s declared fields: name, type, default, kind
    (traced / structural / run), allowed values and help, one row per field."""
    types_ = field_types(config_cls)
    rows = ["| field | type | default | kind | allowed | what it sets |",
            "|---|---|---|---|---|---|"]
    for f in declared_fields(config_cls):
        m = f.metadata
        kind = "traced" if m["traced"] else ("structural" if m["sweep"] else "run")
        base, optional = _base_type(types_[f.name])
        if m["choices"] is not None:
            allowed = ", ".join(f"`{c}`" for c in m["choices"])
        elif m["low"] is not None or m["high"] is not None:
            lo = "(-inf" if m["low"] is None else ("(" if m["low_open"] else "[") + f"{m['low']:g}"
            hi = "inf)" if m["high"] is None else f"{m['high']:g}" + (")" if m["high_open"]
                                                                       else "]")
            allowed = f"{lo}, {hi}"
        else:
            allowed = "any"
        if optional:
            allowed += " or `None` (off)"
        type_name = base.__name__ + (" \\| None" if optional else "")  # a pipe, escaped
        rows.append(f"| `{f.name}` | {type_name} | `{f.default!r}` | {kind} | {allowed} | "
                    f"{m['help']} |")
    return "\n".join(rows)


def field_types(config_cls: type) -> dict[str, type]:
    """``{field name: type}`` of a config dataclass (string annotations resolved)."""
    hints = typing.get_type_hints(config_cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(config_cls)}


def parse_value(name: str, text: str, kind: type) -> Any:
    """Parse ``text`` as a value of ``kind`` (int, float, str, bool, or ``X | None``, where
    ``none`` / ``off`` is ``None``) for field ``name``."""
    kind, optional = _base_type(kind)
    if optional and text.strip().lower() in NONE_TEXTS:
        return None
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
