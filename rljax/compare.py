"""``rljax compare``: a statistics report (markdown + PNGs) from finished runs' results tables.

Usage::

    rljax compare DIR [DIR ...] --metric NAME [--out OUT] [--last-k K] [--reps R]
    rljax compare --atari100k [--out OUT]

How runs become score arrays (kept simple on purpose):

* A run DIR holds ``config.json`` (``"experiment"``, ``"config"``) and ``results.parquet``:
  one row per seed [x logged step], columns ``seed`` (int), optionally ``step`` (int),
  metric columns.
* Algorithms: one per DIR; if the table has string columns (other than ``task``), e.g.
  orm-vs-prm's ``mode``, every value combination in a DIR is its own algorithm, labelled
  ``mode=orm`` (prefixed with the DIR name when several DIRs are given).
* Grid runs (``rljax run NAME --grid ...`` / ``--sample ...``): ``config.json`` has
  ``"grid": {"fields": [...], ...}`` and ``results.parquet`` one column per swept field;
  every combination of those fields (with any string columns) is its own algorithm,
  labelled ``learning_rate=0.01`` (values in their shortest round-trip form).
* ``--group-by COL`` picks the columns explicitly. Every algorithm must have one row per
  seed, step (and task): a ``--group-by`` that leaves several (e.g. one field of a
  two-field grid) is refused, naming the columns that tell the rows apart.
* Tasks: the values of a ``task`` column if there is one, else one task per run.
* Final score of a run (seed) on a task: the metric at its last logged step, or the mean
  over its last ``K`` logged steps (``--last-k K``). A table without a ``step`` column
  (four-answer, gdro, grpo-signal) holds one value per seed (and task, and variant): that
  value is the final score, and the report says so.
* Sample-efficiency curves use the steps logged by every seed of an algorithm (none for a
  table without a ``step`` column: the report says they are skipped).
* Pairing (:func:`pairing`): two algorithms are compared *paired*, by (seed, task), when
  their runs share seed keys and they hold the same seeds: the configurations of one grid
  (common random numbers), the variants of one run, or runs whose ``config.json`` record
  the same ``base_seed`` (seed ``i``'s key depends on the base seed and ``i`` alone).
  Then the report gives the mean paired difference with a paired t interval, the paired
  t and Wilcoxon signed-rank tests and the paired probability of improvement; otherwise
  the unpaired ones (Welch, Mann-Whitney, independent resampling). The report states the
  choice and its reason for every pair; runs that share keys but not the same seeds are
  compared unpaired with a warning on stderr.

``--atari100k`` instead loads the published Atari 100k scores shipped with rljax (SPR,
DrQ(eps), CURL: 100 runs; IRIS, SimPLe: 5 runs; 26 games), human-normalises them and
reports IQM, mean, median and optimality gap with intervals, probability of improvement
(SPR vs DrQ(eps) and every other pair), per-game Welch tests with Holm and
Benjamini-Hochberg corrections, and performance profiles (all unpaired: independent runs).

Exit status: 0 on success; 2 with one line ``error: ...`` on stderr for bad input.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np

AGGREGATES = ("iqm", "mean", "median", "optimality_gap")


class CompareError(Exception):
    """Bad input for ``rljax compare`` (reported as one line, exit status 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        raise CompareError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="rljax compare", description=__doc__.split("\n")[0])
    p.add_argument("dirs", nargs="*", type=Path, help="finished run directories")
    p.add_argument("--metric", help="metric column of results.parquet (e.g. success)")
    p.add_argument("--out", type=Path, default=Path("compare_report"), help="output directory")
    p.add_argument("--last-k", type=int, default=1,
                   help="final score = mean over each seed's last K logged steps (default 1)")
    p.add_argument("--group-by", action="append", default=None,
                   help="column(s) naming variants inside a DIR (default: string columns)")
    p.add_argument("--reps", type=int, default=2000, help="bootstrap resamples")
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--method", default="percentile", choices=("percentile", "basic", "bca"))
    p.add_argument("--gamma", type=float, default=1.0, help="optimality-gap target")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap key")
    p.add_argument("--atari100k", action="store_true",
                   help="report on the shipped Atari 100k scores instead of run DIRs")
    return p


# ----------------------------------------------------------------------------- loading


def _load_run(path: Path, metric: str):
    import pandas as pd

    if not path.is_dir():
        raise CompareError(f"{path} is not a directory")
    config_path, table_path = path / "config.json", path / "results.parquet"
    for needed in (config_path, table_path):
        if not needed.exists():
            raise CompareError(f"{path} has no {needed.name} (is it a finished run?)")
    try:
        config = json.loads(config_path.read_text())
    except json.JSONDecodeError as err:
        raise CompareError(f"{config_path} is not valid JSON: {err.msg}") from err
    try:
        table = pd.read_parquet(table_path)
    except Exception as err:  # noqa: BLE001 - any reader failure is bad input here
        raise CompareError(f"cannot read {table_path}: {err}".splitlines()[0]) from err
    missing = [c for c in ("seed", metric) if c not in table.columns]
    if missing:
        raise CompareError(
            f"{table_path} lacks column(s) {missing}; it has {list(table.columns)}"
        )
    if table[metric].dtype == bool:  # success flags: a 0/1 score
        table[metric] = table[metric].astype(np.float64)
    if not np.issubdtype(table[metric].dtype, np.number):
        raise CompareError(f"column {metric!r} of {table_path} is not numeric")
    return config, table


def _grid_fields(config, table) -> list[str]:
    """The swept fields of a grid run (``config["grid"]["fields"]``), checked against the
    table's columns; ``[]`` for a plain run."""
    grid = config.get("grid")
    if not isinstance(grid, dict):
        return []
    fields = grid.get("fields")
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        raise CompareError(f"config.json: grid.fields must be a list of field names, got "
                           f"{fields!r}")
    missing = [f for f in fields if f not in table.columns]
    if missing:
        raise CompareError(f"config.json lists grid field(s) {missing} but results.parquet "
                           f"has no such column; it has {list(table.columns)}")
    return fields


def _variant_columns(table, group_by, config=None):
    if group_by is not None:
        missing = [c for c in group_by if c not in table.columns]
        if missing:
            raise CompareError(f"--group-by column(s) {missing} not in {list(table.columns)}")
        return list(group_by)
    skip = {"seed", "step", "task"}
    strings = [c for c in table.columns
               if c not in skip and (table[c].dtype == object or str(table[c].dtype) in
                                     ("string", "str", "category"))]
    fields = _grid_fields(config or {}, table)
    return strings + [f for f in fields if f not in strings]


def _format_value(value, dtype) -> str:
    """A variant's value for its label: floats in the shortest form that round-trips in
    their column's precision, so ``0.01`` stored as float32 reads ``0.01``."""
    if (isinstance(dtype, np.dtype) and np.issubdtype(dtype, np.floating)
            and isinstance(value, float | np.floating)):
        return np.format_float_positional(np.dtype(dtype).type(value), trim="-")
    return str(value)


def _base_seed(config) -> int | None:
    """``config.json``'s ``config.base_seed`` (an int), or ``None`` if not recorded."""
    fields = config.get("config") if isinstance(config.get("config"), dict) else {}
    value = fields.get("base_seed")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def load_scores(dirs, metric: str, *, last_k: int = 1, group_by=None):
    """Reads run DIRs into score arrays (see the module docstring for the rules).

    Returns:
      ``(finals, curves, info)``: ``finals[algorithm] = [num_seeds, num_tasks]`` final
      scores (rows in ascending seed order), ``curves[algorithm] = (steps [K], scores
      [num_seeds, num_tasks, K])`` (only for tables with a ``step`` column) and
      per-algorithm descriptions: ``dir``, ``experiment``, ``seeds`` (count),
      ``seed_ids`` (``[num_seeds]`` ints), ``tasks``, ``base_seed`` (int or ``None``),
      ``grid`` (bool) and ``reduction`` (how a seed's rows became its final score).
    """
    if last_k < 1:
        raise CompareError(f"--last-k must be >= 1, got {last_k}")
    finals, curves, info = {}, {}, {}
    task_sets = {}
    for path in dirs:
        config, table = _load_run(path, metric)
        has_step = "step" in table.columns
        if not has_step and last_k != 1:
            raise CompareError(f"--last-k {last_k}: {path / 'results.parquet'} has no step "
                               "column (one value per seed); drop --last-k")
        if has_step:
            reduction = ("the metric at each seed's last logged step" if last_k == 1 else
                         f"the mean of the metric over each seed's last {last_k} logged "
                         "steps")
        else:
            reduction = ("the metric's value per seed (the table has no step column; "
                         "sample-efficiency curves skipped)")
        variants = _variant_columns(table, group_by, config)
        groups = table.groupby(variants, sort=True) if variants else [((), table)]
        for values, group in groups:
            values = values if isinstance(values, tuple) else (values,)
            label = ",".join(f"{c}={_format_value(v, table[c].dtype)}"
                             for c, v in zip(variants, values, strict=True))
            if len(dirs) > 1 or not label:
                label = f"{path.name}/{label}" if label else path.name
            if label in finals:
                raise CompareError(f"two inputs give the same algorithm label {label!r}")
            if group[metric].isna().all():
                raise CompareError(f"algorithm {label!r} has no values of {metric!r}")
            keys = [c for c in ("task", "seed", "step") if c in group.columns]
            if group.duplicated(keys).any():
                others = [c for c in table.columns if c not in {*keys, *variants, metric}
                          and group[c].nunique() > 1]
                raise CompareError(
                    f"algorithm {label!r} has several rows per {'/'.join(keys)}"
                    + (f" (they differ in {others})" if others else "")
                    + ("" if has_step else " and the table has no step column")
                    + "; name the columns that tell them apart with --group-by")
            tasks = sorted(group["task"].unique()) if "task" in group.columns else [metric]
            task_sets[label] = tasks
            rows, seeds = [], sorted(group["seed"].unique())
            steps_common = None
            per_task = []
            for task in tasks:
                part = group[group["task"] == task] if "task" in group.columns else group
                by_seed = {s: (g.sort_values("step") if has_step else g)
                           for s, g in part.groupby("seed")}
                per_task.append(by_seed)
                if has_step:
                    for g in by_seed.values():
                        steps = set(g["step"].tolist())
                        steps_common = steps if steps_common is None else steps_common & steps
            for seed in seeds:
                row = []
                for by_seed in per_task:
                    if seed not in by_seed:
                        row.append(np.nan)
                        continue
                    row.append(float(by_seed[seed][metric].iloc[-last_k:].mean()))
                rows.append(row)
            finals[label] = np.asarray(rows, dtype=np.float64)
            steps = np.array(sorted(steps_common or []))
            if steps.size >= 2:
                cube = np.stack([
                    np.stack([
                        by_seed[s].set_index("step").loc[steps, metric].to_numpy(np.float64)
                        if s in by_seed else np.full(steps.size, np.nan)
                        for by_seed in per_task
                    ], axis=0)
                    for s in seeds
                ])
                curves[label] = (steps, cube)
            info[label] = {"dir": str(path), "experiment": config.get("experiment", "?"),
                           "seeds": len(seeds), "seed_ids": [int(s) for s in seeds],
                           "tasks": tasks, "base_seed": _base_seed(config),
                           "grid": isinstance(config.get("grid"), dict),
                           "reduction": reduction}
    first = next(iter(task_sets.values()))
    for label, tasks in task_sets.items():
        if tasks != first:
            raise CompareError(
                f"algorithm {label!r} has tasks {tasks} but {next(iter(task_sets))!r} has "
                f"{first}; all algorithms must share the task set"
            )
    return finals, curves, info


# ----------------------------------------------------------------------------- pairing


class Pairing(NamedTuple):
    """How two algorithms are compared: ``paired`` (by seed and task) or not, the
    ``reason`` the report prints (``"paired: ..."`` / ``"unpaired: ..."``) and ``warn``:
    a pairing the runs' keys promised could not be used (also printed on stderr)."""

    paired: bool
    reason: str
    warn: bool = False


def _seed_text(seeds) -> str:
    """``0-15`` for a contiguous run of seed ids, else up to 8 of them."""
    seeds = sorted(seeds)
    if not seeds:
        return "none"
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    shown = ", ".join(map(str, seeds[:8]))
    return shown + (f", ... ({len(seeds)} seeds)" if len(seeds) > 8 else "")


def pairing(info, x: str, y: str) -> Pairing:
    """Whether algorithms ``x`` and ``y`` share seed keys on the same seeds (see the module
    docstring), from :func:`load_scores`' ``info`` (no arrays; Python values only)."""
    ix, iy = info.get(x, {}), info.get(y, {})
    if "seed_ids" not in ix or "seed_ids" not in iy:
        source = ix.get("source") or iy.get("source") or "no run directory"
        return Pairing(False, f"unpaired: the scores carry no seed ids ({source}); the runs "
                              "are treated as independent")
    sx, sy = set(ix["seed_ids"]), set(iy["seed_ids"])
    bx, by = ix.get("base_seed"), iy.get("base_seed")
    if ix["dir"] == iy["dir"]:
        run = Path(ix["dir"]).name
        if bx is None and not ix["grid"]:
            return Pairing(False, f"unpaired: run {run} records no base_seed in config.json, "
                                  "so whether its variants share seed keys is unknown",
                           warn=True)
        shared = ("configs of one grid share seed keys (common random numbers)" if ix["grid"]
                  else f"variants of one run ({run}) share seed keys (base seed {bx}: seed "
                       "i's key depends on the base seed and i alone)")
    else:
        rx, ry = Path(ix["dir"]).name, Path(iy["dir"]).name
        if bx is None or by is None:
            which = rx if bx is None else ry
            return Pairing(False, f"unpaired: run {which} records no base_seed in config.json, "
                                  "so its seed keys are unknown")
        if bx != by:
            return Pairing(False, f"unpaired: runs {rx} and {ry} use different seeds (base "
                                  f"seed {bx} vs {by})")
        shared = (f"runs {rx} and {ry} share base seed {bx} and seeds {_seed_text(sx)} "
                  "(common random numbers)")
    if sx == sy:
        return Pairing(True, f"paired: {shared}")
    if not sx & sy:
        return Pairing(False, f"unpaired: {x} and {y} ran on different seeds "
                              f"({_seed_text(sx)} vs {_seed_text(sy)})")
    return Pairing(False, f"unpaired: {x} and {y} share seed keys but not all seeds "
                          f"({_seed_text(sx)} vs {_seed_text(sy)}); a paired comparison needs "
                          "every seed in both", warn=True)


# ----------------------------------------------------------------------------- report


def _fmt(iv) -> str:
    return f"{iv.point:.4g} [{iv.low:.4g}, {iv.high:.4g}]"


def _procedure(args, nan_note: str) -> str:
    conf = f"{100 * args.confidence:g}%"
    return (
        "## Statistical procedure\n\n"
        f"* Point estimates are exact (float64) and match rliable 1.2.0. {conf} intervals "
        f"are stratified-bootstrap **{args.method}** intervals with {args.reps} resamples: "
        "every resample draws, for each task independently, as many runs as the algorithm "
        "has, with replacement (Agarwal et al., NeurIPS 2021). The bootstrap key is "
        f"`jax.random.key({args.seed})`; each algorithm folds in a hash of its name, so the "
        "report is reproducible bit for bit.\n"
        "* IQM is the 25% trimmed mean of all runs pooled over tasks; mean and median are "
        "over per-task mean scores; the optimality gap is "
        f"`gamma - mean(min(score, gamma))` with gamma = {args.gamma:g} (lower is better).\n"
        "* Pairing: two algorithms are compared paired, by (seed, task), when their runs "
        "share seed keys and hold the same seeds (configurations of one grid: common random "
        "numbers; variants of one run; runs recording the same base seed). The Pairing "
        "section gives the choice and its reason for every pair.\n"
        "* Probability of improvement P(X > Y) is the Mann-Whitney probability that a run "
        "of X beats a run of Y (ties count 1/2; every run of X against every run of Y), "
        "averaged over tasks. Its interval resamples the seed pairs jointly within each "
        "task when the pair is paired (the same seed indices for X and Y), else X and Y "
        "independently within each task.\n"
        "* Paired tests per task: the mean of the per-seed differences X - Y with a "
        f"{conf} paired t interval, the paired t-test and the Wilcoxon signed-rank test "
        "(two-sided, scipy); effect size d_z = mean / sd of the differences. Unpaired tests "
        "per task: Welch's t-test and the Mann-Whitney U test (two-sided, scipy); effect "
        "sizes Hedges' g and Cliff's delta. Holm (family-wise error) and Benjamini-Hochberg "
        "(false discovery rate) corrections run over all comparisons of both tables: "
        "\"Holm p\" and \"BH p\" adjust the t-tests (paired t or Welch), \"rank Holm p\" "
        "the rank tests (Wilcoxon or Mann-Whitney).\n"
        "* Power: seeds for the test to detect the observed mean difference with 80% power "
        "at alpha = 0.05: the paired t-test from the standard deviation of the differences, "
        "Welch's test from the per-seed standard deviations (noncentral t).\n"
        "* Performance profiles: fraction of runs with final score above each threshold, "
        "with pointwise bands from one stratified bootstrap. Sample-efficiency curves show "
        "the IQM at every logged step with pointwise bands; a resample draws each task's "
        "runs once and follows them across all steps (unlike rliable, which resamples each "
        "step independently).\n" + nan_note
    )


def _fmt_p(value: float) -> str:
    return "n/a" if np.isnan(value) else f"{value:.3g}"


def _seeds_for_power(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except ValueError:
        return None


def _paired_row(x, y, task, a, b, confidence):
    """Per-task paired statistics of ``a [n]``, ``b [n]`` (the same seeds, in order)."""
    from rljax import stats

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        ttest = stats.paired_ttest(a, b)
        rank = stats.wilcoxon_signed_rank(a, b)
        diff = stats.paired_t_interval(a, b, confidence=confidence)
    d = a - b
    sd = float(np.std(d, ddof=1))
    d_z = float(np.mean(d)) / sd if sd > 0 else float("nan")
    seeds = (_seeds_for_power(stats.paired_t_seeds, float(np.mean(d)), sd)
             if sd > 0 and np.mean(d) != 0 else None)
    return {"x": x, "y": y, "task": task, "n": a.size, "diff": diff, "test": ttest,
            "rank": rank, "effect": d_z, "seeds": seeds}


def _unpaired_row(x, y, task, a, b):
    from rljax import stats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        welch = stats.welch_ttest(a, b)
        mwu = stats.mann_whitney_u(a, b)
        g = stats.hedges_g(a, b) if (np.var(a) + np.var(b)) > 0 else float("nan")
    delta = a.mean() - b.mean()
    sd = np.sqrt((np.var(a, ddof=1) + np.var(b, ddof=1)) / 2)
    seeds = _seeds_for_power(stats.welch_seeds, delta, max(np.std(a, ddof=1), 1e-12),
                             sd_y=max(np.std(b, ddof=1), 1e-12)) if (
                                 delta != 0 and sd > 0) else None
    return {"x": x, "y": y, "task": task, "n": f"{a.size}/{b.size}", "test": welch,
            "rank": mwu, "effect": g, "cliff": stats.cliffs_delta(a, b), "seeds": seeds}


def _poi_coverage_note(method: str, n: int) -> str:
    """What the simulations of :data:`rljax.stats.coverage.POI_COVERAGE` say about the
    paired probability-of-improvement interval at ``n`` seed pairs."""
    from rljax.stats import coverage

    source = ("`rljax.stats.coverage.POI_COVERAGE`: normal seeds with within-seed "
              f"correlation 0, 0.5 or 0.9, {coverage.POI_COVERAGE_SIMS} simulated comparisons "
              "per cell")
    measured = coverage.poi_coverage("paired", method, n)
    if measured is None:
        smallest = min(coverage.POI_COVERAGE["paired"][method])
        return (f"Coverage of the paired {method} interval was not measured below "
                f"{smallest} seed pairs ({source}); at {n} pairs treat it with care.\n")
    size, value, rho = measured
    best = max(coverage.POI_COVERAGE["paired"],
               key=lambda m: coverage.poi_coverage("paired", m, n)[1])
    best_value = coverage.poi_coverage("paired", best, n)[1]
    text = (f"Measured coverage of the paired 95% {method} interval at {size} seed pairs "
            f"(the largest simulated n <= {n}): {value:.3f}, the minimum over correlations "
            f"(at {rho:g}); the best paired method there is {best} ({best_value:.3f}) "
            f"({source}).")
    if value < 0.93:
        text += (f" **Below 0.93**: at this many seeds the paired interval is too narrow "
                 f"when seeds are strongly correlated; use --method {best} or more seeds.")
    return text + "\n"


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _report(args, finals, curves, info, *, title: str, score_label: str, taus=None,
            main_pair=None) -> str:
    import jax

    from rljax import plots, stats

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    key = jax.random.key(args.seed)
    nan_policy = "omit" if any(np.isnan(v).any() for v in finals.values()) else "raise"
    nan_note = ("* Some seeds lack a task's result; they are treated as missing runs "
                "(`nan_policy='omit'`); a paired comparison uses the seeds complete in "
                "both.\n" if nan_policy == "omit" else "")
    common = dict(key=key, reps=args.reps, confidence=args.confidence, method=args.method)
    names = list(finals)
    lines = [f"# {title}\n"]
    lines.append("| algorithm | runs | tasks | source |\n|---|---|---|---|")
    for name in names:
        lines.append(f"| {name} | {finals[name].shape[0]} | {finals[name].shape[1]} | "
                     f"{info.get(name, {}).get('dir', info.get(name, {}).get('source', ''))} |")
    lines.append(f"\nScores: {score_label}.\n")
    reductions = {info.get(n, {}).get("reduction") for n in names} - {None}
    if len(reductions) == 1:
        lines.append(f"Final score: {next(iter(reductions))}.\n")
    elif reductions:
        lines.append("Final score:\n")
        lines += [f"* {n}: {info[n]['reduction']}" for n in names if "reduction" in info[n]]
        lines.append("")

    # Pairing of every compared pair.
    pairs = list(itertools.combinations(names, 2))
    if main_pair is not None:
        pairs = [main_pair] + [p for p in pairs if set(p) != set(main_pair)]
    pairings = {pair: pairing(info, *pair) for pair in pairs}
    if pairs:
        lines.append("## Pairing\n")
        by_reason: dict[str, list[str]] = {}
        for (x, y), how in pairings.items():
            by_reason.setdefault(how.reason, []).append(f"{x} vs {y}")
            if how.warn:
                _warn(f"{x} vs {y}: {how.reason}")
        for reason, compared in by_reason.items():
            which = (f"every pair ({len(pairs)})" if len(compared) == len(pairs) > 1
                     else ", ".join(compared))
            lines.append(f"* {which}: {reason}")
        lines.append("")

    # Aggregates.
    estimates = {}
    for metric in AGGREGATES:
        m = stats.optimality_gap_metric(args.gamma) if metric == "optimality_gap" else metric
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            estimates[metric] = stats.interval_estimates(finals, m, nan_policy=nan_policy,
                                                         **common)
    lines.append("## Aggregate performance\n")
    lines.append("| algorithm | " + " | ".join(plots.METRIC_LABELS[m] for m in AGGREGATES)
                 + " |\n|---|" + "---|" * len(AGGREGATES))
    for name in names:
        lines.append(f"| {name} | " + " | ".join(_fmt(estimates[m][name]) for m in AGGREGATES)
                     + " |")
    plots.plot_interval_estimates(estimates, xlabel=score_label).savefig(
        out / "intervals.png", dpi=120)
    lines.append("\n![interval estimates](intervals.png)\n")

    # Probability of improvement.
    poi, poi_sizes = {}, {}
    if pairs:
        lines.append("## Probability of improvement\n")
        lines.append("| X | Y | P(X > Y) | resampling |\n|---|---|---|---|")
        for x, y in pairs:
            fx, fy = finals[x], finals[y]
            paired = pairings[(x, y)].paired
            if paired:  # rows are the same seeds in the same (ascending) order
                keep = ~np.isnan(fx).any(1) & ~np.isnan(fy).any(1)
                fx, fy = fx[keep], fy[keep]
            elif nan_policy == "omit":
                keep_x, keep_y = ~np.isnan(fx).any(1), ~np.isnan(fy).any(1)
                fx, fy = fx[keep_x], fy[keep_y]
            poi[(x, y)] = stats.probability_of_improvement_ci(fx, fy, paired=paired, **common)
            poi_sizes[(x, y)] = fx.shape[0]
            how = (f"paired ({fx.shape[0]} seed pairs)" if paired else
                   f"unpaired ({fx.shape[0]} and {fy.shape[0]} runs)")
            lines.append(f"| {x} | {y} | {_fmt(poi[(x, y)])} | {how} |")
        paired_sizes = [poi_sizes[p] for p in pairs if pairings[p].paired]
        if paired_sizes:
            lines.append("\n" + _poi_coverage_note(args.method, min(paired_sizes)))
        plots.plot_probability_of_improvement(poi).savefig(out / "probability_of_improvement.png",
                                                           dpi=120)
        lines.append("\n![probability of improvement](probability_of_improvement.png)\n")

    # Per-task tests, effect sizes and power.
    test_pairs = [main_pair] if main_pair is not None else pairs
    rows = []
    for x, y in test_pairs:
        paired = pairings[(x, y)].paired
        tasks = info.get(x, {}).get("tasks") or [str(t) for t in range(finals[x].shape[1])]
        for t, task in enumerate(tasks):
            a, b = finals[x][:, t], finals[y][:, t]
            if paired:
                keep = ~np.isnan(a) & ~np.isnan(b)
                a, b = a[keep], b[keep]
            else:
                a, b = a[~np.isnan(a)], b[~np.isnan(b)]
            if min(a.size, b.size) < 2:
                continue
            rows.append(_paired_row(x, y, task, a, b, args.confidence) if paired
                        else _unpaired_row(x, y, task, a, b))
    if rows:
        test_p = np.array([r["test"].pvalue for r in rows])
        test_p = np.where(np.isnan(test_p), 1.0, test_p)
        rank_p = np.array([r["rank"].pvalue for r in rows])
        rank_p = np.where(np.isnan(rank_p), 1.0, rank_p)
        holm, bh = stats.holm(test_p), stats.benjamini_hochberg(test_p)
        rank_holm = stats.holm(rank_p)
        for i, r in enumerate(rows):
            r["holm"], r["bh"], r["rank_holm"] = (holm.adjusted[i], bh.adjusted[i],
                                                  rank_holm.adjusted[i])
        paired_rows = [r for r in rows if "diff" in r]
        unpaired_rows = [r for r in rows if "diff" not in r]
        family = (f"Holm and BH over all {len(rows)} comparisons"
                  + (" of both tables" if paired_rows and unpaired_rows else ""))
        if paired_rows:
            lines.append(f"## Paired tests per task (final scores; {family})\n")
            lines.append(f"| X | Y | task | seed pairs | mean X - Y [{100 * args.confidence:g}% "
                         "paired t] | paired t | paired t p | Holm p | BH p | Wilcoxon W+ | "
                         "Wilcoxon p | rank Holm p | d_z | seeds for 80% power |\n"
                         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
            for r in paired_rows:
                lines.append(
                    f"| {r['x']} | {r['y']} | {r['task']} | {r['n']} | {_fmt(r['diff'])} | "
                    f"{r['test'].statistic:.3g} | {_fmt_p(r['test'].pvalue)} | "
                    f"{r['holm']:.3g} | {r['bh']:.3g} | {r['rank'].statistic:g} | "
                    f"{_fmt_p(r['rank'].pvalue)} | {r['rank_holm']:.3g} | {r['effect']:.3g} | "
                    f"{r['seeds'] if r['seeds'] is not None else 'n/a'} |")
            lines.append("")
        if unpaired_rows:
            lines.append(f"## Unpaired tests per task (final scores; {family})\n")
            lines.append("| X | Y | task | runs | Welch t | Welch p | Holm p | BH p | "
                         "Mann-Whitney p | rank Holm p | Hedges g | Cliff's delta | "
                         "seeds for 80% power |\n"
                         "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
            for r in unpaired_rows:
                lines.append(
                    f"| {r['x']} | {r['y']} | {r['task']} | {r['n']} | "
                    f"{r['test'].statistic:.3g} | {_fmt_p(r['test'].pvalue)} | "
                    f"{r['holm']:.3g} | {r['bh']:.3g} | {_fmt_p(r['rank'].pvalue)} | "
                    f"{r['rank_holm']:.3g} | {r['effect']:.3g} | {r['cliff']:.3g} | "
                    f"{r['seeds'] if r['seeds'] is not None else 'n/a'} |")
            lines.append("")

    # Performance profiles.
    if taus is None:
        pooled = np.concatenate([v[~np.isnan(v)] for v in finals.values()])
        taus = np.linspace(pooled.min(), pooled.max(), 101) if np.ptp(pooled) > 0 else (
            np.linspace(pooled.min() - 1, pooled.max() + 1, 11))
    profile_scores = {k: v for k, v in finals.items() if not np.isnan(v).any()}
    if profile_scores:
        profiles = stats.performance_profiles(profile_scores, taus, **common)
        plots.plot_performance_profiles(
            taus, profiles, xlabel=f"{score_label} threshold").savefig(
            out / "performance_profiles.png", dpi=120)
        lines.append("## Performance profiles\n\n![performance profiles]"
                     "(performance_profiles.png)\n")

    # Sample-efficiency curves.
    complete = {k: v for k, v in curves.items() if not np.isnan(v[1]).any()}
    if complete:
        steps = next(iter(complete.values()))[0]
        same = {k: v[1] for k, v in complete.items() if np.array_equal(v[0], steps)}
        bands = stats.sample_efficiency_curves(same, "iqm", **common)
        plots.plot_sample_efficiency(steps, bands, ylabel=f"IQM of {score_label}").savefig(
            out / "sample_efficiency.png", dpi=120)
        lines.append("## Sample efficiency (IQM over runs per logged step)\n\n"
                     "![sample efficiency](sample_efficiency.png)\n")
    stepless = [n for n in names if "no step column" in info.get(n, {}).get("reduction", "")]
    if stepless:
        lines.append("## Sample efficiency\n\nSkipped for "
                     + ", ".join(stepless) + ": the table has no step column (one value per "
                     "seed).\n")

    lines.append(_procedure(args, nan_note))
    text = "\n".join(lines)
    (out / "report.md").write_text(text)
    return text


def _atari(args) -> str:
    from rljax import stats

    finals = stats.atari100k_scores(normalize=True)
    info = {k: {"source": "rljax/data/atari100k (Agarwal et al. 2021)",
                "tasks": stats.atari100k_games()} for k in finals}
    return _report(args, finals, {}, info, title="Atari 100k: published per-run scores",
                   score_label="human-normalised score", taus=np.linspace(0.0, 8.0, 81),
                   main_pair=("SPR", "DrQ(eps)"))


def _validate(args) -> None:
    if not 0.0 < args.confidence < 1.0:
        raise CompareError(f"--confidence must be strictly between 0 and 1, got {args.confidence}")
    if args.reps < 1:
        raise CompareError(f"--reps must be >= 1, got {args.reps}")
    if args.atari100k:
        if args.dirs:
            raise CompareError("give either run DIRs or --atari100k, not both")
        return
    if not args.dirs:
        raise CompareError("give at least one run DIR (or --atari100k)")
    if not args.metric:
        raise CompareError("--metric NAME is required with run DIRs")


def main(argv: list[str]) -> int:
    """Entry point of ``rljax compare``; returns the exit status."""
    try:
        args = _parser().parse_args(argv)
        _validate(args)
        if args.atari100k:
            _atari(args)
        else:
            finals, curves, info = load_scores(args.dirs, args.metric, last_k=args.last_k,
                                               group_by=args.group_by)
            _report(args, finals, curves, info,
                    title=f"Comparison of {', '.join(finals)} on {args.metric}",
                    score_label=args.metric)
    except SystemExit as exit_:  # --help
        return int(exit_.code or 0)
    except (CompareError, ValueError) as err:
        print(f"error: {str(err).splitlines()[0] if str(err) else type(err).__name__}",
              file=sys.stderr)
        return 2
    print(f"wrote {args.out / 'report.md'}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
