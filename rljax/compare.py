"""``rljax compare``: a statistics report (markdown + PNGs) from finished runs' results tables.

Usage::

    rljax compare DIR [DIR ...] --metric NAME [--out OUT] [--last-k K] [--reps R]
    rljax compare --atari100k [--out OUT]

How runs become score arrays (kept simple on purpose):

* A run DIR holds ``config.json`` (``"experiment"``, ``"config"``) and ``results.parquet``:
  one row per seed x logged step, columns ``seed`` (int), ``step`` (int), metric columns.
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
  over its last ``K`` logged steps (``--last-k K``).
* Sample-efficiency curves use the steps logged by every seed of an algorithm.

``--atari100k`` instead loads the published Atari 100k scores shipped with rljax (SPR,
DrQ(eps), CURL: 100 runs; IRIS, SimPLe: 5 runs; 26 games), human-normalises them and
reports IQM, mean, median and optimality gap with intervals, probability of improvement
(SPR vs DrQ(eps) and every other pair), per-game Welch tests with Holm and
Benjamini-Hochberg corrections, and performance profiles.

Exit status: 0 on success; 2 with one line ``error: ...`` on stderr for bad input.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import warnings
from pathlib import Path

import jax
import numpy as np

from rljax import plots, stats

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
    missing = [c for c in ("seed", "step", metric) if c not in table.columns]
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


def load_scores(dirs, metric: str, *, last_k: int = 1, group_by=None):
    """Reads run DIRs into score arrays (see the module docstring for the rules).

    Returns:
      ``(finals, curves, info)``: ``finals[algorithm] = [num_seeds, num_tasks]`` final
      scores, ``curves[algorithm] = (steps [K], scores [num_seeds, num_tasks, K])`` and
      per-algorithm descriptions.
    """
    if last_k < 1:
        raise CompareError(f"--last-k must be >= 1, got {last_k}")
    finals, curves, info = {}, {}, {}
    task_sets = {}
    for path in dirs:
        config, table = _load_run(path, metric)
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
                    + "; name the columns that tell them apart with --group-by")
            tasks = sorted(group["task"].unique()) if "task" in group.columns else [metric]
            task_sets[label] = tasks
            rows, seeds = [], sorted(group["seed"].unique())
            steps_common = None
            per_task = []
            for task in tasks:
                part = group[group["task"] == task] if "task" in group.columns else group
                by_seed = {s: g.sort_values("step") for s, g in part.groupby("seed")}
                per_task.append(by_seed)
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
                           "seeds": len(seeds), "tasks": tasks}
    first = next(iter(task_sets.values()))
    for label, tasks in task_sets.items():
        if tasks != first:
            raise CompareError(
                f"algorithm {label!r} has tasks {tasks} but {next(iter(task_sets))!r} has "
                f"{first}; all algorithms must share the task set"
            )
    return finals, curves, info


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
        "* Probability of improvement P(X > Y) is the Mann-Whitney probability that a run "
        "of X beats a run of Y (ties count 1/2), averaged over tasks; its interval "
        "resamples X and Y independently within each task.\n"
        "* Per-task tests: Welch's t-test and the Mann-Whitney U test (two-sided, scipy) on "
        "the final per-seed scores, with Holm (family-wise error) and Benjamini-Hochberg "
        "(false discovery rate) corrections over all tests in the table. Effect sizes: "
        "Hedges' g and Cliff's delta.\n"
        "* Power: seeds per algorithm for Welch's test to detect the observed mean "
        "difference with 80% power at alpha = 0.05, from the observed per-seed standard "
        "deviations (noncentral t, Welch-Satterthwaite df).\n"
        "* Performance profiles: fraction of runs with final score above each threshold, "
        "with pointwise bands from one stratified bootstrap. Sample-efficiency curves show "
        "the IQM at every logged step with pointwise bands; a resample draws each task's "
        "runs once and follows them across all steps (unlike rliable, which resamples each "
        "step independently).\n" + nan_note
    )


def _report(args, finals, curves, info, *, title: str, score_label: str, taus=None,
            main_pair=None) -> str:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    key = jax.random.key(args.seed)
    nan_policy = "omit" if any(np.isnan(v).any() for v in finals.values()) else "raise"
    nan_note = ("* Some seeds lack a task's result; they are treated as missing runs "
                "(`nan_policy='omit'`).\n" if nan_policy == "omit" else "")
    common = dict(key=key, reps=args.reps, confidence=args.confidence, method=args.method)
    names = list(finals)
    lines = [f"# {title}\n"]
    lines.append("| algorithm | runs | tasks | source |\n|---|---|---|---|")
    for name in names:
        lines.append(f"| {name} | {finals[name].shape[0]} | {finals[name].shape[1]} | "
                     f"{info.get(name, {}).get('dir', info.get(name, {}).get('source', ''))} |")
    lines.append(f"\nScores: {score_label}.\n")

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
    pairs = list(itertools.combinations(names, 2))
    if main_pair is not None:
        pairs = [main_pair] + [p for p in pairs if set(p) != set(main_pair)]
    poi = {}
    if pairs:
        lines.append("## Probability of improvement\n")
        lines.append("| X | Y | P(X > Y) |\n|---|---|---|")
        for x, y in pairs:
            fx, fy = finals[x], finals[y]
            if nan_policy == "omit":
                keep_x, keep_y = ~np.isnan(fx).any(1), ~np.isnan(fy).any(1)
                fx, fy = fx[keep_x], fy[keep_y]
            poi[(x, y)] = stats.probability_of_improvement_ci(fx, fy, **common)
            lines.append(f"| {x} | {y} | {_fmt(poi[(x, y)])} |")
        plots.plot_probability_of_improvement(poi).savefig(out / "probability_of_improvement.png",
                                                           dpi=120)
        lines.append("\n![probability of improvement](probability_of_improvement.png)\n")

    # Per-task tests, effect sizes and power.
    test_pairs = [main_pair] if main_pair is not None else pairs
    rows = []
    for x, y in test_pairs:
        tasks = info.get(x, {}).get("tasks") or [str(t) for t in range(finals[x].shape[1])]
        for t, task in enumerate(tasks):
            a, b = finals[x][:, t], finals[y][:, t]
            a, b = a[~np.isnan(a)], b[~np.isnan(b)]
            if min(a.size, b.size) < 2:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                welch = stats.welch_ttest(a, b)
                mwu = stats.mann_whitney_u(a, b)
                g = stats.hedges_g(a, b) if (np.var(a) + np.var(b)) > 0 else float("nan")
            delta = a.mean() - b.mean()
            sd = np.sqrt((np.var(a, ddof=1) + np.var(b, ddof=1)) / 2)
            try:
                seeds = stats.welch_seeds(delta, max(np.std(a, ddof=1), 1e-12),
                                          sd_y=max(np.std(b, ddof=1), 1e-12)) if (
                                              delta != 0 and sd > 0) else None
            except ValueError:
                seeds = None
            rows.append((x, y, task, welch, mwu, g, stats.cliffs_delta(a, b), seeds))
    if rows:
        welch_p = np.array([r[3].pvalue for r in rows])
        welch_p = np.where(np.isnan(welch_p), 1.0, welch_p)
        holm = stats.holm(welch_p)
        bh = stats.benjamini_hochberg(welch_p)
        lines.append("## Tests per task (final scores)\n")
        lines.append("| X | Y | task | Welch t | Welch p | Holm p | BH p | Mann-Whitney p | "
                     "Hedges g | Cliff's delta | seeds for 80% power |\n"
                     "|---|---|---|---|---|---|---|---|---|---|---|")
        for i, (x, y, task, welch, mwu, g, delta, seeds) in enumerate(rows):
            lines.append(
                f"| {x} | {y} | {task} | {welch.statistic:.3g} | {welch.pvalue:.3g} | "
                f"{holm.adjusted[i]:.3g} | {bh.adjusted[i]:.3g} | {mwu.pvalue:.3g} | "
                f"{g:.3g} | {delta:.3g} | {seeds if seeds is not None else 'n/a'} |"
            )
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

    lines.append(_procedure(args, nan_note))
    text = "\n".join(lines)
    (out / "report.md").write_text(text)
    return text


def _atari(args) -> str:
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
