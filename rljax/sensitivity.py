"""How a final score depends on a grid's hyperparameters, paired over shared seeds: the
analysis behind ``rljax run ppo-cartpole --grid ...`` (and any study's grid of ``[K, S]``
scores, configs x seeds, every config on the same seeds and keys).

**Score.** Per configuration ``c`` and seed ``i``, the study's score (e.g. PPO's final
return: the mean return of the episodes that finished in the last ``final_updates``
updates, :func:`rljax.training.final_returns`), a ``[K, S]`` matrix; NaN for a seed
with nothing to report or a run that went non-finite.

**Per configuration:** the mean over seeds with a 95 % interval
(``rljax.stats.reported.reported_interval("mean", ..., data=DATA_KIND)``: Student-t),
clipped to the score's ``support`` when it has one (e.g. ``[0, 500]`` for CartPole-v1's
return; clipping cannot lower coverage), the IQM, and, for a score with a ceiling
``cap``, the fraction of seeds at the cap with an exact Clopper-Pearson interval.
Scores pile up at a cap, and where every seed sits there the t interval is ``[cap,
cap]``: the ceiling, not precision. So the report states the t interval's measured
coverage at this n on each kind of simulated data (symmetric, skewed, and the worst case,
Bernoulli(0.9): mostly-equal seeds, as a cap makes them), not only the nominal 95 %.

**Curves** (``rljax.tune.sensitivity_curve``, pointwise intervals of the mean): the main
panel is the score against the x field (``learning_rate`` when swept, else the first
field; log-x when its values span a factor >= 10), one line per value of the second field
with any further fields at the best configuration's values; then, per other field, the
score against it with every other field at the best configuration's values
(``rljax.tune.slice_at``). With ``learning_rate x clip_epsilon``: score vs learning rate
per clip, and score vs clip at the best rate.

**Paired differences.** Every configuration runs on the same seeds with the same keys
(common random numbers), so configurations are compared seed by seed: ``best - c`` with a
``paired_difference`` interval for every ``c``. The best configuration is picked on these
same seeds (``rljax.tune.select_best``, the mean), so its lead is optimistic; the
differences say which configurations these seeds cannot tell apart from it, not a tuned
result (``rljax.tune.tune`` evaluates a winner on fresh seeds). Configurations whose score
equals the best's on every seed are listed as tied with it. Along the main panel's lines,
each line value is also compared, paired, with the reference line (the base config's
value, e.g. the default clip 0.2) at the same x.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pandas as pd

from rljax import io
from rljax.grid import Grid
from rljax.report import format_number
from rljax.stats.reported import measured_coverage, reported_interval
from rljax.stats.small_sample import clopper_pearson
from rljax.tune import SensitivityCurve, plot_sensitivity, select_best, sensitivity_curve

__all__ = ["Score", "analyse", "scores_table", "write_plot", "report_markdown", "reading"]

#: The kind of data that picks the interval method (``reported_interval(data=...)``): it
#: selects the Student-t interval, which keeps the all-seeds-at-the-cap case finite
#: ([500, 500]); :data:`COVERAGE_KINDS` are the kinds whose measured coverage is reported.
DATA_KIND = "symmetric"
COVERAGE_KINDS = ("symmetric", "skewed", "any")
STATISTIC = "mean"
LABELS = {"learning_rate": "learning rate", "clip_epsilon": "clip ε",
          "entropy_coef": "entropy coefficient", "value_coef": "value coefficient",
          "gamma": "γ", "lam": "GAE λ", "max_grad_norm": "max grad norm"}


@dataclasses.dataclass(frozen=True)
class Score:
    """What the analysis knows of the score.

    Attributes:
      name: what it is, in the report (e.g. ``"final return"``).
      support: ``(low, high)`` the score cannot leave (intervals are clipped to it), or
        ``None``.
      cap: a ceiling many seeds reach (e.g. CartPole-v1's 500-step episode limit): a seed
        at ``>= cap - cap_tolerance`` counts as at the cap; ``None``: no cap.
      cap_tolerance: see ``cap``.
      title: the plot's title.
      key: the summary's name for it (e.g. ``"final_return"``).
    """

    name: str = "score"
    support: tuple[float, float] | None = None
    cap: float | None = None
    cap_tolerance: float = 0.5
    title: str = ""
    key: str = "score"


def x_field(fields: tuple[str, ...], rows: Any = ()) -> str:
    """The main panel's x axis: ``learning_rate`` if swept, else the first field with a
    number in every row (a ``None``, a feature off, has no place on a number line)."""
    if "learning_rate" in fields:
        return "learning_rate"
    numeric = [f for f in fields if all(r[f] is not None for r in rows)]
    return (numeric or list(fields))[0]


def _log_x(values: np.ndarray) -> bool:
    if any(v is None for v in np.asarray(values, object).ravel()):
        return False
    values = np.asarray(values, np.float64)
    return bool(np.all(values > 0) and values.max() / values.min() >= 10)


def _fmt(value: Any) -> str:
    if value is None or isinstance(value, bool | str):
        return str(value)
    return format_number(float(value), 3)


def curves(grid: Grid, scores: np.ndarray, best: int, key: jax.Array, reps: int,
           score: Score = Score()) -> list[dict[str, Any]]:
    """The panels: ``[{"field", "lines": {label: SensitivityCurve}, "log_x"}]``.

    Panel 0 varies :func:`x_field`, one line per value of the next field (other fields at
    the best configuration's); then one panel per other field, sliced at the best.
    """
    rows = list(grid.rows)
    fields = grid.fields
    x = x_field(fields, rows)
    others = [f for f in fields if f != x]
    values = {f: np.asarray([r[f] for r in rows]) for f in fields}
    at_best = {f: np.asarray([r[f] == rows[best][f] for r in rows]) for f in fields}
    panels = []
    lines: dict[str, SensitivityCurve] = {}
    if others:
        line_field, rest = others[0], others[1:]
        fixed = np.all([at_best[f] for f in rest], axis=0) if rest else np.ones(len(rows), bool)
        for i, v in enumerate(dict.fromkeys(values[line_field].tolist())):
            mask = fixed & (values[line_field] == v)
            lines[f"{LABELS.get(line_field, line_field)} = {_fmt(v)}"] = clipped(sensitivity_curve(
                scores, values[x], mask, statistic=STATISTIC, key=jax.random.fold_in(key, i),
                reps=reps, data=DATA_KIND), score)
    else:
        lines["all configurations"] = clipped(sensitivity_curve(
            scores, values[x], statistic=STATISTIC, key=key, reps=reps, data=DATA_KIND), score)
    panels.append({"field": x, "lines": lines, "log_x": _log_x(values[x])})
    for j, f in enumerate(others):
        if any(r[f] is None for r in rows):  # a switch (None = off): a line, not an axis
            continue
        mask = np.all([at_best[g] for g in fields if g != f], axis=0)
        anchor = ", ".join(f"{LABELS.get(g, g)} {_fmt(rows[best][g])}" for g in fields if g != f)
        curve = clipped(sensitivity_curve(scores, values[f], mask, statistic=STATISTIC,
                                          key=jax.random.fold_in(key, 1000 + j), reps=reps,
                                          data=DATA_KIND), score)
        panels.append({"field": f, "lines": {f"at the best {anchor}": curve},
                       "log_x": _log_x(values[f])})
    return panels


def clipped(curve: SensitivityCurve, score: Score) -> SensitivityCurve:
    """The curve with its band clipped to the score's support (if it has one)."""
    if score.support is None:
        return curve
    return dataclasses.replace(curve, low=np.clip(curve.low, *score.support),
                               high=np.clip(curve.high, *score.support))


def _curve_record(curve: SensitivityCurve) -> dict[str, Any]:
    return {"values": curve.values.tolist(), "point": curve.point.tolist(),
            "low": curve.low.tolist(), "high": curve.high.tolist(), "n": curve.n.tolist(),
            "method": curve.method}


def _interval(statistic: str, *samples: np.ndarray, key: jax.Array, reps: int,
              support: tuple[float, float] | None = None) -> dict:
    iv = reported_interval(statistic, *samples, key=key, reps=reps, data=DATA_KIND)
    low, high = float(iv.low), float(iv.high)
    if support is not None:
        low, high = float(np.clip(low, *support)), float(np.clip(high, *support))
    coverage = {kind: measured_coverage(iv.method, statistic, int(iv.n), kind)
                for kind in COVERAGE_KINDS}
    return {"point": float(iv.point), "low": low, "high": high, "n": int(iv.n),
            "method": iv.method, "coverage": coverage, "note": iv.note.rstrip(".")}


def neighbour_pairs(grid: Grid) -> list[tuple[int, int]]:
    """``[(c, p)]``: configuration ``c`` and ``p``, equal except that ``p`` has the next
    smaller value of the main panel's x field (the steps along each line)."""
    fields = grid.fields
    x = x_field(fields, grid.rows)
    xs = sorted(set(r[x] for r in grid.rows))
    index = {tuple(r[f] for f in fields): c for c, r in enumerate(grid.rows)}
    pairs = []
    for c, row in enumerate(grid.rows):
        i = xs.index(row[x])
        if i > 0:
            p = index.get(tuple(xs[i - 1] if f == x else row[f] for f in fields))
            if p is not None:
                pairs.append((c, p))
    return pairs


def reference_pairs(grid: Grid, base: Any) -> list[tuple[int, int]]:
    """``[(c, r)]``: along the main panel's line field, each configuration ``c`` and the
    configuration ``r`` equal to it except that the line field has the base config's value
    (the first listed value if the base's is not in the grid). Empty for one field."""
    fields = grid.fields
    others = [f for f in fields if f != x_field(fields, grid.rows)]
    if not others:
        return []
    line = others[0]
    listed = list(dict.fromkeys(r[line] for r in grid.rows))
    ref_value = getattr(base, line) if getattr(base, line) in listed else listed[0]
    index = {tuple(r[f] for f in fields): c for c, r in enumerate(grid.rows)}
    pairs = []
    for c, row in enumerate(grid.rows):
        if row[line] != ref_value:
            r = index.get(tuple(ref_value if f == line else row[f] for f in fields))
            if r is not None:
                pairs.append((c, r))
    return pairs


def analyse(scores: np.ndarray, grid: Grid, base: Any, *, key: jax.Array, reps: int,
            score: Score = Score()) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Intervals, paired differences and curves of a grid's ``[K, S]`` scores.

    Args:
      scores: ``[K, S]`` float64, config x seed (NaN: nothing to report).
      grid: the :class:`rljax.grid.Grid` the configs came from (``K`` rows).
      base: the config the grid was applied to; its value of the line field is the
        reference of the along-line differences.
      key: the bootstrap's key (curves and intervals draw from its splits).
      reps: bootstrap resamples where a method uses them.
      score: what the score is (:class:`Score`: support, cap).

    Returns:
      ``(summary, panels)``: ``summary`` holds ``fields``, ``num_configs``, ``statistic``,
      ``data_kind``, ``best`` (with ``tied_on_every_seed``), ``configs`` (per config: the
      swept values, ``finite_seeds``, ``<score.key>`` interval and IQM, at the cap),
      ``paired_vs_best``, ``paired_along_lines``, ``paired_steps_in_x`` and ``curves``;
      ``panels`` are the plot's (:func:`write_plot`).
    """
    finite = np.isfinite(scores)
    best = select_best(scores, STATISTIC)
    config_key, diff_key, curve_key = jax.random.split(key, 3)
    per_config = []
    for c, row in enumerate(grid.rows):
        ok = scores[c][finite[c]]
        entry: dict[str, Any] = {"config": c, **row, "finite_seeds": int(ok.size)}
        at_cap = 0
        if score.cap is not None:
            at_cap = int(np.sum(ok >= score.cap - score.cap_tolerance))
            entry["seeds_at_cap"] = at_cap
        if ok.size >= 2:
            entry[score.key] = _interval(STATISTIC, ok, key=jax.random.fold_in(
                config_key, c), reps=reps, support=score.support)
            entry[f"{score.key}_iqm"] = float(_iqm(ok))
        if ok.size >= 1 and score.cap is not None:
            entry["fraction_at_cap"] = at_cap / ok.size
            entry["fraction_at_cap_ci"] = list(clopper_pearson(at_cap, int(ok.size)))
        per_config.append(entry)
    paired = []
    for c in range(len(grid.rows)):
        both = finite[best] & finite[c]
        if c == best or both.sum() < 2:
            continue
        paired.append({"config": c, **grid.rows[c], **_interval(
            "paired_difference", scores[best][both], scores[c][both],
            key=jax.random.fold_in(diff_key, c), reps=reps)})
    along, steps_x = [], []
    for out, pairs, offset in ((along, reference_pairs(grid, base), 10_000),
                               (steps_x, neighbour_pairs(grid), 20_000)):
        for c, r in pairs:
            both = finite[r] & finite[c]
            if both.sum() >= 2:
                out.append({"config": c, "reference": r, **grid.rows[c], **_interval(
                    "paired_difference", scores[c][both], scores[r][both],
                    key=jax.random.fold_in(diff_key, offset + c), reps=reps)})
    tied = [c for c in range(len(grid.rows)) if c != best and finite[c].all()
            and finite[best].all() and np.array_equal(scores[c], scores[best])]
    panels = curves(grid, scores, best, curve_key, reps, score)
    summary = {
        "fields": list(grid.fields),
        "num_configs": len(grid.rows),
        "statistic": STATISTIC,
        "data_kind": DATA_KIND,
        "score": dataclasses.asdict(score),
        "x_field": x_field(grid.fields, grid.rows),
        "best": {"config": best, **grid.rows[best],
                 score.key: per_config[best].get(score.key),
                 "tied_on_every_seed": tied},
        "configs": per_config,
        "paired_vs_best": paired,
        "paired_along_lines": along,
        "paired_steps_in_x": steps_x,
        "curves": [{"field": p["field"], "log_x": p["log_x"],
                    "lines": {k: _curve_record(v) for k, v in p["lines"].items()}}
                   for p in panels],
    }
    return summary, panels


def _iqm(x: np.ndarray) -> float:
    from scipy.stats import trim_mean

    return float(trim_mean(x, 0.25))


def scores_table(scores: np.ndarray, columns: dict[str, np.ndarray],
                 key: str = "score", first_seed: int = 0) -> pd.DataFrame:
    """``[K, S]`` scores as a tidy table: ``config``, the swept fields, ``seed`` (ids from
    ``first_seed``) and the score (column ``key``)."""
    k, s = scores.shape
    table = {name: np.repeat(col, s) for name, col in columns.items()}
    table["seed"] = np.tile(np.arange(first_seed, first_seed + s, dtype=np.int32), k)
    table[key] = scores.reshape(-1)
    return pd.DataFrame(table)


def write_plot(panels: list[dict[str, Any]], score: Score, seeds: int, path: Path) -> None:
    """One axes per panel (``rljax.tune.plot_sensitivity``), side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
        field = panel["field"]
        plot_sensitivity(ax, panel["lines"], xlabel=LABELS.get(field, field),
                         ylabel=f"{score.name} (mean over {seeds} seeds)",
                         log_x=panel["log_x"])
        if score.cap is not None:
            ax.axhline(score.cap, color="grey", linestyle="--", linewidth=1)
        ticks = sorted({float(v) for c in panel["lines"].values() for v in c.values})
        if len(ticks) <= 8:
            ax.set_xticks(ticks, [_fmt(v) for v in ticks])
            ax.minorticks_off()
    fig.suptitle(f"{score.title}{': ' if score.title else ''}95 % pointwise intervals")
    fig.tight_layout()
    io.write_figure(path, fig)


def _ci(d: dict[str, Any] | None) -> str:
    if not d:
        return "n/a"
    return (f"{format_number(d['point'])} [{format_number(d['low'])}, "
            f"{format_number(d['high'])}]")


def _named(entry: dict[str, Any], fields: list[str]) -> str:
    return ", ".join(f"{f} {_fmt(entry[f])}" for f in fields)


def report_markdown(summary: dict[str, Any], what: str = "") -> str:
    """The grid report: per-config table, paired differences, a reading, the procedure.

    ``summary`` is :func:`analyse`'s plus ``experiment`` and ``seeds`` (and ``programs``
    when known); ``what`` is one sentence on the runs and the score."""
    fields = summary["fields"]
    score = summary["score"]
    cols = " | ".join(fields)
    capped = score["cap"] is not None
    lines = [f"# {summary['experiment']}: sensitivity over {', '.join(fields)}", "",
             f"{summary['num_configs']} configurations x {summary['seeds']} seeds (the same "
             f"seeds in every configuration). {what}", "", "![sensitivity](sensitivity.png)",
             "", f"| config | {cols} | mean {score['name']} [95 % CI] | IQM |"
             + (" seeds at the cap [95 % CI, exact] |" if capped else ""),
             "|" + "---|" * (len(fields) + 3 + capped)]
    for e in summary["configs"]:
        cap = (f"{e['seeds_at_cap']} of {e['finite_seeds']} [{e['fraction_at_cap_ci'][0]:.2f}, "
               f"{e['fraction_at_cap_ci'][1]:.2f}]" if "fraction_at_cap_ci" in e else "n/a")
        lines.append(f"| {e['config']} | " + " | ".join(_fmt(e[f]) for f in fields)
                     + f" | {_ci(e.get(score['key']))} | "
                     f"{format_number(e.get(score['key'] + '_iqm'))} |"
                     + (f" {cap} |" if capped else ""))
    for title, rows, what in (
            ("Paired differences: best - config", summary["paired_vs_best"], "best - config"),
            ("Paired differences along the lines: config - reference",
             summary["paired_along_lines"], "config - reference"),
            (f"Paired differences of each step in {summary.get('x_field', fields[0])}: config - "
             "reference (the next smaller value)", summary["paired_steps_in_x"],
             "config - reference")):
        if not rows:
            continue
        ref = " | reference" if "reference" in rows[0] else ""
        lines += ["", f"## {title}", "", f"| config | {cols}{ref} | {what} [95 % CI] |",
                  "|" + "---|" * (len(fields) + 2 + bool(ref))]
        for d in rows:
            lines.append(f"| {d['config']} | " + " | ".join(_fmt(d[f]) for f in fields)
                         + (f" | {d['reference']}" if ref else "") + f" | {_ci(d)} |")
    lines += ["", "## Reading", "", reading(summary), "", "## Procedure", "",
              _procedure(summary), ""]
    return "\n".join(lines)


def reading(summary: dict[str, Any]) -> str:
    """What the paired intervals separate, on these seeds (no ranking beyond that)."""
    fields = summary["fields"]
    score = summary["score"]
    best = summary["best"]
    rows = {e["config"]: e for e in summary["configs"]}
    text = (f"The highest mean {score['name']} on these seeds is configuration "
            f"{best['config']} ({_named(best, fields)}): {_ci(best[score['key']])}")
    if best["tied_on_every_seed"]:
        text += (", tied seed for seed with " + "; ".join(
            _named(rows[c], fields) for c in best["tied_on_every_seed"])
            + " (the lowest-numbered of equal configurations is listed as the best)")
    worse = [d for d in summary["paired_vs_best"] if d["low"] > 0]
    open_ = [d for d in summary["paired_vs_best"] if d["low"] <= 0
             and d["config"] not in best["tied_on_every_seed"]]
    text += (f". Paired over the same seeds, {len(worse)} of "
             f"{len(summary['paired_vs_best'])} other configurations score lower (interval of "
             "best - config above 0)")
    if open_:
        text += ("; these the seeds cannot separate from it: " + "; ".join(
            f"{_named(d, fields)} ({_ci(d)})" for d in open_))
    along = summary["paired_along_lines"]
    if along:
        moved = [d for d in along if d["low"] > 0 or d["high"] < 0]
        text += (f". Along the lines, {len(moved)} of {len(along)} paired differences from "
                 "the reference line at the same x exclude 0")
        if moved:
            text += ": " + "; ".join(f"{_named(d, fields)} ({_ci(d)})" for d in moved)
    steps = summary["paired_steps_in_x"]
    if steps:
        up = [d for d in steps if d["low"] > 0]
        down = [d for d in steps if d["high"] < 0]
        text += (f". Of the {len(steps)} steps to the next larger "
                 f"{summary.get('x_field', fields[0])}, {len(up)} raise the score and "
                 f"{len(down)} lower it with a paired interval excluding 0")
    at_cap = [e for e in summary["configs"] if e.get("fraction_at_cap") == 1.0]
    if at_cap:
        text += (f". {len(at_cap)} configuration(s) have every seed at the cap "
                 f"({score['cap']:g}): "
                 "their interval is the ceiling, not precision, and this budget cannot rank "
                 "them")
    text += (". The best was picked on the same seeds, so its lead is optimistic; a claim "
             "about the best setting needs fresh evaluation seeds (`rljax.tune.tune`).")
    return text


def _coverage_text(entries: list[dict[str, Any]]) -> str:
    found = {(e["method"], e["n"], tuple(sorted(e["coverage"].items()))) for e in entries}
    parts = []
    for method, n, coverage in sorted(found):
        cov = ", ".join(f"{kind} {'n/a' if c is None else f'{c:.3f}'}" for kind, c in coverage)
        parts.append(f"{method} at n = {n}: measured coverage {cov}")
    return "; ".join(parts)


def _procedure(summary: dict[str, Any]) -> str:
    score = summary["score"]
    intervals = [e[score["key"]] for e in summary["configs"] if e.get(score["key"])]
    diffs = (summary["paired_vs_best"] + summary["paired_along_lines"]
             + summary["paired_steps_in_x"])
    programs = summary.get("programs")
    support = score["support"]
    return (
        "All configurations ran in one sweep per compiled program"
        + (f" ({len(programs)} program(s)" if programs else " (")
        + ("; " if programs else "") + "the traced fields vmapped with the seeds, a "
        "`ConfigTable`), seed i with seed i's key in every "
        "configuration (common random numbers), so configurations are compared seed by seed."
        " Means over seeds: " + _coverage_text(intervals)
        + (f"; intervals clipped to [{support[0]:g}, {support[1]:g}]" if support else "")
        + ". Paired differences (mean of per-seed "
        "differences): " + _coverage_text(diffs) + ". The coverages are those of the "
        "interval-coverage study (`rljax.stats.reported`) on each kind of simulated data "
        "('any': the worst over all of them, single Bernoulli(0.9) trials, i.e. mostly-equal "
        "seeds)"
        + ("; scores piled at a cap are between those kinds, so the nominal 95 % "
           "is not guaranteed at this n. Seeds at the cap: exact Clopper-Pearson intervals "
           "(coverage >= 95 % by construction)" if score["cap"] is not None else "")
        + ". Curve bands: the same per-value t intervals "
        "(`rljax.tune.sensitivity_curve`), pointwise, not simultaneous."
    )
