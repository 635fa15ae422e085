"""The grid analysis of ``rljax run ppo-cartpole --grid ...``: how the final return
depends on the swept hyperparameters.

**Score.** Per configuration ``c`` and seed ``i``, the study's final return: the mean
return of the episodes that finished in the last ``final_updates`` updates
(:func:`experiments.ppo_cartpole.final_returns`), a ``[K, S]`` matrix.

**Per configuration:** the mean over seeds with a 95 % interval
(``rljax.stats.reported.reported_interval("mean", ..., data=DATA_KIND)``: Student-t),
clipped to ``[0, 500]`` (a return's support, so clipping cannot lower coverage), the IQM,
and the fraction of seeds at the 500-step cap with an exact Clopper-Pearson interval.
Returns pile up at the cap, and where every seed sits there the t interval is ``[500,
500]``: the ceiling, not precision. So the report states the t interval's measured
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
from rljax.grid import Grid, grid_columns
from rljax.report import format_number
from rljax.stats.reported import measured_coverage, reported_interval
from rljax.tune import SensitivityCurve, plot_sensitivity, select_best, sensitivity_curve

#: The kind of data that picks the interval method (``reported_interval(data=...)``): it
#: selects the Student-t interval, which keeps the all-seeds-at-the-cap case finite
#: ([500, 500]); :data:`COVERAGE_KINDS` are the kinds whose measured coverage is reported.
DATA_KIND = "symmetric"
COVERAGE_KINDS = ("symmetric", "skewed", "any")
STATISTIC = "mean"
RETURN_RANGE = (0.0, 500.0)  # CartPole-v1: an episode's return is in [0, 500]
LABELS = {"learning_rate": "learning rate", "clip_epsilon": "clip ε",
          "entropy_coef": "entropy coefficient", "value_coef": "value coefficient",
          "gamma": "γ", "lam": "GAE λ", "max_grad_norm": "max grad norm"}


def grid_scores(configs: list[Any], runs: list[dict]) -> np.ndarray:
    """``[K, S]`` float64 final returns (NaN where a seed finished no episode in the final
    window or its run went non-finite)."""
    from rljax.training import final_returns

    rows = []
    for config, run in zip(configs, runs, strict=True):
        logs = run["logs"]
        score = final_returns(logs, last=config.final_updates // config.log_every)
        rows.append(np.where(run["first_nonfinite"] >= 0, np.nan, score))
    return np.stack(rows)


def x_field(fields: tuple[str, ...]) -> str:
    """The main panel's x axis: ``learning_rate`` if swept, else the first field."""
    return "learning_rate" if "learning_rate" in fields else fields[0]


def _log_x(values: np.ndarray) -> bool:
    values = np.asarray(values, np.float64)
    return bool(np.all(values > 0) and values.max() / values.min() >= 10)


def _fmt(value: Any) -> str:
    return format_number(float(value), 3) if not isinstance(value, bool) else str(value)


def curves(grid: Grid, scores: np.ndarray, best: int, key: jax.Array, reps: int
           ) -> list[dict[str, Any]]:
    """The panels: ``[{"field", "lines": {label: SensitivityCurve}, "log_x"}]``.

    Panel 0 varies :func:`x_field`, one line per value of the next field (other fields at
    the best configuration's); then one panel per other field, sliced at the best.
    """
    rows = list(grid.rows)
    fields = grid.fields
    x = x_field(fields)
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
                reps=reps, data=DATA_KIND))
    else:
        lines["all configurations"] = clipped(sensitivity_curve(
            scores, values[x], statistic=STATISTIC, key=key, reps=reps, data=DATA_KIND))
    panels.append({"field": x, "lines": lines, "log_x": _log_x(values[x])})
    for j, f in enumerate(others):
        mask = np.all([at_best[g] for g in fields if g != f], axis=0)
        anchor = ", ".join(f"{LABELS.get(g, g)} {_fmt(rows[best][g])}" for g in fields if g != f)
        curve = clipped(sensitivity_curve(scores, values[f], mask, statistic=STATISTIC,
                                          key=jax.random.fold_in(key, 1000 + j), reps=reps,
                                          data=DATA_KIND))
        panels.append({"field": f, "lines": {f"at the best {anchor}": curve},
                       "log_x": _log_x(values[f])})
    return panels


def clipped(curve: SensitivityCurve) -> SensitivityCurve:
    """The curve with its band clipped to :data:`RETURN_RANGE` (the score's support)."""
    return dataclasses.replace(curve, low=np.clip(curve.low, *RETURN_RANGE),
                               high=np.clip(curve.high, *RETURN_RANGE))


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
    x = x_field(fields)
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
    others = [f for f in fields if f != x_field(fields)]
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


def analyse(configs: list[Any], grid: Grid, runs: list[dict], timing: dict[str, Any],
            out_dir: Path, base: Any = None) -> dict[str, Any]:
    """Score, intervals, curves and paired differences of a grid run; writes
    ``results.parquet`` (one row per config x seed x logged row, with a ``config`` column
    and one column per swept field), ``scores.parquet`` (config x seed final returns),
    ``summary.json``, ``report.md`` and ``sensitivity.png``; returns the summary.

    ``base`` is the config the grid was applied to (default: the first configuration);
    its value of the line field is the reference of the along-line differences."""
    from experiments.ppo_cartpole import AT_CAP, NAME, clopper_pearson, results_table

    base = configs[0] if base is None else base
    scores = grid_scores(configs, runs)
    finite = np.isfinite(scores)
    best = select_best(scores, STATISTIC)
    key = jax.random.key(base.base_seed + 2)
    config_key, diff_key, curve_key = jax.random.split(key, 3)
    per_config = []
    for c, row in enumerate(grid.rows):
        ok = scores[c][finite[c]]
        at_cap = int(np.sum(ok >= AT_CAP))
        entry: dict[str, Any] = {"config": c, **row,
                                 "finite_seeds": int(ok.size), "seeds_at_cap": at_cap}
        if ok.size >= 2:
            entry["final_return"] = _interval(STATISTIC, ok, key=jax.random.fold_in(
                config_key, c), reps=base.bootstrap_reps, support=RETURN_RANGE)
            entry["final_return_iqm"] = float(_iqm(ok))
        if ok.size >= 1:
            entry["fraction_at_cap"] = at_cap / ok.size
            entry["fraction_at_cap_ci"] = list(clopper_pearson(at_cap, int(ok.size)))
        per_config.append(entry)
    paired = []
    for c in range(len(configs)):
        both = finite[best] & finite[c]
        if c == best or both.sum() < 2:
            continue
        paired.append({"config": c, **grid.rows[c], **_interval(
            "paired_difference", scores[best][both], scores[c][both],
            key=jax.random.fold_in(diff_key, c), reps=base.bootstrap_reps)})
    along, steps_x = [], []
    for out, pairs, offset in ((along, reference_pairs(grid, base), 10_000),
                               (steps_x, neighbour_pairs(grid), 20_000)):
        for c, r in pairs:
            both = finite[r] & finite[c]
            if both.sum() >= 2:
                out.append({"config": c, "reference": r, **grid.rows[c], **_interval(
                    "paired_difference", scores[c][both], scores[r][both],
                    key=jax.random.fold_in(diff_key, offset + c), reps=base.bootstrap_reps)})
    tied = [c for c in range(len(configs)) if c != best and finite[c].all()
            and finite[best].all() and np.array_equal(scores[c], scores[best])]
    panels = curves(grid, scores, best, curve_key, base.bootstrap_reps)
    steps = [c.num_updates * c.num_envs * c.num_steps for c in configs]
    summary = {
        "experiment": NAME,
        "grid": grid.record(),
        "fields": list(grid.fields),
        "num_configs": len(configs),
        "seeds": base.seeds,
        "block_size": base.block_size,
        "env_steps_per_seed": steps[0] if len(set(steps)) == 1 else steps,
        "final_updates": base.final_updates,
        "statistic": STATISTIC,
        "data_kind": DATA_KIND,
        "best": {"config": best, **grid.rows[best],
                 "final_return": per_config[best].get("final_return"),
                 "tied_on_every_seed": tied},
        "configs": per_config,
        "paired_vs_best": paired,
        "paired_along_lines": along,
        "paired_steps_in_x": steps_x,
        "curves": [{"field": p["field"], "log_x": p["log_x"],
                    "lines": {k: _curve_record(v) for k, v in p["lines"].items()}}
                   for p in panels],
        "nonfinite_runs": int(np.sum([np.sum(r["first_nonfinite"] >= 0) for r in runs])),
        "programs": timing["programs"],
        "compile_seconds": timing["compile_seconds"],
        "run_seconds": timing["run_seconds"],
        "env_steps_per_second": (timing["timed_steps"] / max(timing["run_seconds"], 1e-9)
                                 if timing["timed_steps"] > 0 else None),
    }
    columns = grid_columns(configs, grid.fields)
    tables = []
    for c, (config, run) in enumerate(zip(configs, runs, strict=True)):
        table = results_table(run["logs"], config.num_envs * config.num_steps,
                              config.log_every)
        lead = pd.DataFrame({name: np.repeat(col[c:c + 1], len(table))
                             for name, col in columns.items()})
        tables.append(pd.concat([lead, table], axis=1))
    io.write_parquet(out_dir / "results.parquet", pd.concat(tables, ignore_index=True))
    io.write_parquet(out_dir / "scores.parquet", scores_table(scores, columns))
    io.write_json(out_dir / "summary.json", summary)
    write_plot(panels, base, out_dir / "sensitivity.png")
    io.atomic_write_text(out_dir / "report.md", report_markdown(summary))
    return summary


def _iqm(x: np.ndarray) -> float:
    from scipy.stats import trim_mean

    return float(trim_mean(x, 0.25))


def scores_table(scores: np.ndarray, columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """``[K, S]`` scores as a tidy table: ``config``, the swept fields, ``seed``,
    ``final_return``."""
    k, s = scores.shape
    table = {name: np.repeat(col, s) for name, col in columns.items()}
    table["seed"] = np.tile(np.arange(s, dtype=np.int32), k)
    table["final_return"] = scores.reshape(-1)
    return pd.DataFrame(table)


def write_plot(panels: list[dict[str, Any]], config: Any, path: Path) -> None:
    """One axes per panel (``rljax.tune.plot_sensitivity``), side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
        field = panel["field"]
        plot_sensitivity(ax, panel["lines"], xlabel=LABELS.get(field, field),
                         ylabel=f"final return (mean over {config.seeds} seeds)",
                         log_x=panel["log_x"])
        ax.axhline(500, color="grey", linestyle="--", linewidth=1)
        ticks = sorted({float(v) for c in panel["lines"].values() for v in c.values})
        if len(ticks) <= 8:
            ax.set_xticks(ticks, [_fmt(v) for v in ticks])
            ax.minorticks_off()
    fig.suptitle(f"PPO on CartPole-v1: final return after {config.total_steps:,} steps, "
                 "95 % pointwise intervals")
    fig.tight_layout()
    io.write_figure(path, fig)


def _ci(d: dict[str, Any] | None) -> str:
    if not d:
        return "n/a"
    return (f"{format_number(d['point'])} [{format_number(d['low'])}, "
            f"{format_number(d['high'])}]")


def _named(entry: dict[str, Any], fields: list[str]) -> str:
    return ", ".join(f"{f} {_fmt(entry[f])}" for f in fields)


def report_markdown(summary: dict[str, Any]) -> str:
    """The grid report: per-config table, paired differences, a reading, the procedure."""
    fields = summary["fields"]
    cols = " | ".join(fields)
    lines = [f"# {summary['experiment']}: sensitivity over {', '.join(fields)}", "",
             f"{summary['num_configs']} configurations x {summary['seeds']} seeds (the same "
             f"seeds in every configuration), {summary['env_steps_per_seed']} environment "
             "steps per run; score = mean return of the episodes finished in the last "
             f"{summary['final_updates']} updates.", "", "![sensitivity](sensitivity.png)", "",
             f"| config | {cols} | mean final return [95 % CI] | IQM | seeds at the cap "
             "[95 % CI, exact] |", "|" + "---|" * (len(fields) + 4)]
    for e in summary["configs"]:
        cap = (f"{e['seeds_at_cap']} of {e['finite_seeds']} [{e['fraction_at_cap_ci'][0]:.2f}, "
               f"{e['fraction_at_cap_ci'][1]:.2f}]" if "fraction_at_cap_ci" in e else "n/a")
        lines.append(f"| {e['config']} | " + " | ".join(_fmt(e[f]) for f in fields)
                     + f" | {_ci(e.get('final_return'))} | "
                     f"{format_number(e.get('final_return_iqm'))} | {cap} |")
    for title, rows, what in (
            ("Paired differences: best - config", summary["paired_vs_best"], "best - config"),
            ("Paired differences along the lines: config - reference",
             summary["paired_along_lines"], "config - reference"),
            (f"Paired differences of each step in {x_field(tuple(fields))}: config - "
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
    best = summary["best"]
    rows = {e["config"]: e for e in summary["configs"]}
    text = (f"The highest mean final return on these seeds is configuration {best['config']} "
            f"({_named(best, fields)}): {_ci(best['final_return'])}")
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
                 f"{x_field(tuple(fields))}, {len(up)} raise the score and {len(down)} lower "
                 "it with a paired interval excluding 0")
    at_cap = [e for e in summary["configs"] if e.get("fraction_at_cap") == 1.0]
    if at_cap:
        text += (f". {len(at_cap)} configuration(s) have every seed at the 500-step cap: "
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
    intervals = [e["final_return"] for e in summary["configs"] if e.get("final_return")]
    diffs = (summary["paired_vs_best"] + summary["paired_along_lines"]
             + summary["paired_steps_in_x"])
    return (
        "All configurations ran in one sweep per compiled program "
        f"({len(summary['programs'])} program(s); the traced fields vmapped with the seeds, "
        "`rljax.sweep.ChunkedSweep` with a `ConfigTable`), seed i with seed i's key in every "
        "configuration (common random numbers), so configurations are compared seed by seed."
        " Means over seeds: " + _coverage_text(intervals) + "; intervals clipped to "
        f"[{RETURN_RANGE[0]:g}, {RETURN_RANGE[1]:g}]. Paired differences (mean of per-seed "
        "differences): " + _coverage_text(diffs) + ". The coverages are those of the "
        "interval-coverage study (`rljax.stats.reported`) on each kind of simulated data "
        "('any': the worst over all of them, single Bernoulli(0.9) trials, i.e. mostly-equal "
        "seeds); returns piled at the 500 cap are between those kinds, so the nominal 95 % "
        "is not guaranteed at this n. Seeds at the cap: exact Clopper-Pearson intervals "
        "(coverage >= 95 % by construction). Curve bands: the same per-value t intervals "
        "(`rljax.tune.sensitivity_curve`), pointwise, not simultaneous."
    )
