"""Markdown reports: a table of named figures with 95 % intervals, plus prose."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


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
