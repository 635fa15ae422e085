"""Markdown reports: a table of named figures with 95 % intervals, plus prose; and the
small conversions every study's summary and report repeat (JSON-safe numbers, a
reported interval as a dict, ``point [low, high]`` text, a headless pyplot)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Figure:
    """One reported number: ``point`` with an optional interval ``[low, high]``."""

    name: str
    point: float | None
    low: float | None = None
    high: float | None = None
    note: str = ""


def format_number(value: float | None, digits: int = 3) -> str:
    """Compact rendering: ``None``/NaN -> ``n/a``, inf -> ``never``, else ``digits`` sig. figs."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float) and math.isinf(value):
        return "never" if value > 0 else "-inf"
    if float(value).is_integer() and abs(value) < 1e9:
        return str(int(value))
    return f"{value:.{digits}g}"


def figures_table(figures: Sequence[Figure], confidence: float = 0.95) -> str:
    """A markdown table: figure | value | CI | note."""
    pct = f"{100 * confidence:g} % CI"
    lines = [f"| figure | value | {pct} | note |", "|---|---|---|---|"]
    for f in figures:
        ci = (
            f"[{format_number(f.low)}, {format_number(f.high)}]"
            if f.low is not None or f.high is not None
            else ""
        )
        lines.append(f"| {f.name} | {format_number(f.point)} | {ci} | {f.note} |")
    return "\n".join(lines)


def finite_or_none(value: float) -> float | None:
    """``float(value)``, or ``None`` where it is not finite (JSON has no inf or NaN)."""
    value = float(value)
    return value if math.isfinite(value) else None


def interval_dict(interval: Any) -> dict[str, Any]:
    """A :class:`rljax.stats.reported.ReportedInterval` as a summary entry: ``point``,
    ``low``, ``high``, ``method``, ``n``, ``coverage`` and ``note`` (its final period
    dropped, so a report can join notes into one sentence)."""
    return {"point": interval.point, "low": interval.low, "high": interval.high,
            "method": interval.method, "n": interval.n, "coverage": interval.coverage,
            "note": interval.note.rstrip(".")}


def format_interval(point: float | None, low: float | None, high: float | None) -> str:
    """``"point [low, high]"``, each number by :func:`format_number`."""
    return f"{format_number(point)} [{format_number(low)}, {format_number(high)}]"


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the headless Agg backend (a study's plots never show)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
