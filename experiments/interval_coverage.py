"""Study ``interval-coverage``: which interval to trust at which number of seeds.

Claim under test: "a 95 % bootstrap interval over seeds covers the truth 95 % of the time".
At a handful of seeds it does not: the percentile bootstrap of a normal mean covers about
89 % at n = 8, and the bootstrap of a median of tied integer counts collapses to a point.

For every statistic a study reports (mean, median, IQM, ratio of medians, paired
difference, and the two-way mean of a seeds x prompts matrix), every interval method
(percentile, basic and BCa bootstrap; Student t, bootstrap-t, trimmed t; exact order
statistics) and every simulated population of :mod:`rljax.stats.coverage` (normal,
lognormal, Student t3, Pareto 2.5, Bernoulli 0.3 and 0.9, Poisson 3, right-censored
exponential times; crossed logit-normal Bernoulli designs), it draws ``sims`` datasets of
``n`` seeds, computes each interval and counts how often it holds the known truth. The
coverage table and the recommended method per statistic and n-range (the narrowest method
whose minimum coverage over the distributions is ``>= threshold``) are what
:mod:`rljax.stats.reported` reads (``rljax/data/interval_coverage.json`` is a copy of this
study's ``summary.json``).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rljax import io
from rljax.config import ConfigError, check_fields, param
from rljax.stats import coverage as cov
from rljax.stats.small_sample import METHODS_BY_STATISTIC

NAME = "interval-coverage"
DESCRIPTION = ("Measured coverage of interval methods (bootstrap, t, bootstrap-t, order "
               "statistics) per statistic, distribution and number of seeds")

STATISTICS = tuple(METHODS_BY_STATISTIC)
CLOSED_FORM = ("t", "trimmed_t", "order_statistic")
MAX_SIZE = 100_000
# Largest simulated array (datasets x seeds x prompts), in values: 2**27 float32 = 512 MB.
MAX_VALUES = 2**27


@dataclass(frozen=True)
class Config:
    """``sims`` datasets per (statistic, distribution, n) below ``large_n`` seeds,
    ``sims_large`` at and above it (``reps`` / ``reps_large`` bootstrap resamples each);
    the methods that resample nothing (t, trimmed t, order statistics, two-way t) use
    ``sims_closed_form`` datasets at and above ``large_n`` (they cost no resampling, and
    200 datasets leave a coverage's MC error at 0.015)."""

    sims: int = param(1000, "datasets per cell below large_n seeds", sweep=False, low=20,
                      high=10**6)
    reps: int = param(499, "bootstrap resamples per dataset below large_n", sweep=False,
                      low=19, high=10**5)
    sims_large: int = param(200, "datasets per cell at and above large_n", sweep=False,
                            low=20, high=10**6)
    reps_large: int = param(199, "bootstrap resamples per dataset at and above large_n",
                            sweep=False, low=19, high=10**5)
    large_n: int = param(1000, "the seeds from which sims_large / reps_large apply",
                         sweep=False, low=3, high=MAX_SIZE + 1)
    sims_closed_form: int = param(2000, "datasets per cell of the methods that resample "
                                  "nothing, at and above large_n", sweep=False, low=20,
                                  high=10**6)
    sizes: str = param("3,5,8,16,32,64,1000", "the simulated numbers of seeds, "
                       "comma-separated", sweep=False)
    statistics: str = param(",".join(STATISTICS), "the simulated statistics, "
                            "comma-separated", sweep=False)
    prompts: int = param(64, "prompts of the two-way (seeds x prompts) designs", sweep=False,
                         low=2, high=4096)
    confidence: float = param(0.95, "the intervals' nominal coverage", sweep=False, low=0.5,
                              high=1.0, low_open=True, high_open=True)
    threshold: float = param(0.93, "the coverage a recommended method must reach",
                             sweep=False, low=0.0, high=1.0, low_open=True, high_open=True)
    base_seed: int = param(0, "the simulations' seed", sweep=False, low=0, high=2**31 - 1)

    def size_list(self) -> list[int]:
        """The simulated sizes, sorted."""
        items = [s.strip() for s in self.sizes.split(",")]
        try:
            values = [int(s) for s in items]
        except ValueError:
            values = []
        if (not values or len(set(values)) != len(values)
                or any(v < 3 or v > MAX_SIZE for v in values)):
            raise ConfigError(f"sizes: must be distinct comma-separated integers in [3, "
                              f"{MAX_SIZE}], got {self.sizes!r}")
        return sorted(values)

    def statistic_list(self) -> list[str]:
        """The simulated statistics, in :data:`STATISTICS` order."""
        items = [s.strip() for s in self.statistics.split(",")]
        if not items or len(set(items)) != len(items) or any(s not in STATISTICS
                                                             for s in items):
            raise ConfigError(f"statistics: must be distinct comma-separated names from "
                              f"{', '.join(STATISTICS)}, got {self.statistics!r}")
        return [s for s in STATISTICS if s in items]

    def plan(self, n: int) -> tuple[int, int]:
        """``(sims, reps)`` at ``n`` seeds."""
        return (self.sims_large, self.reps_large) if n >= self.large_n else (self.sims,
                                                                              self.reps)

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first invalid field: each against its
        declaration, then the lists and the largest simulated array."""
        check_fields(self)
        sizes = self.size_list()
        statistics = self.statistic_list()
        for n in sizes:
            sims, _ = self.plan(n)
            if n >= self.large_n and self.sims_closed_form > sims:
                sims = self.sims_closed_form
            per = n * (self.prompts if "two_way_mean" in statistics else 2)
            if sims * per > MAX_VALUES:
                which = ("sims" if n < self.large_n else "sims_closed_form"
                         if self.sims_closed_form >= self.sims_large else "sims_large")
                raise ConfigError(f"{which}: {sims} datasets x {n} seeds (sizes) x "
                                  f"{self.prompts if 'two_way_mean' in statistics else 2} "
                                  f"(prompts) exceed {MAX_VALUES} simulated values; lower "
                                  f"{which}, sizes or prompts")


def run(config: Config, out_dir: Path, options: Any = None) -> dict[str, Any]:
    """Run the study; writes results.parquet, summary.json, report.md, coverage.png."""
    # no sweep: the coverage simulations are plain numpy/JAX calls (options unused)
    start = time.perf_counter()
    sizes = config.size_list()
    rows: list[dict[str, Any]] = []
    table: dict[str, Any] = {}
    for stat in config.statistic_list():
        for n in sizes:
            sims, reps = config.plan(n)
            for dist in cov.STATISTIC_DISTRIBUTIONS[stat]:
                methods = METHODS_BY_STATISTIC[stat]
                results = {}
                if n >= config.large_n:
                    closed = tuple(m for m in methods if m in CLOSED_FORM)
                    if closed:
                        results.update(cov.simulate_coverage(
                            stat, dist, n, methods=closed, sims=config.sims_closed_form,
                            reps=reps, confidence=config.confidence, seed=config.base_seed,
                            prompts=config.prompts))
                    methods = tuple(m for m in methods if m not in CLOSED_FORM)
                if methods:
                    results.update(cov.simulate_coverage(
                        stat, dist, n, methods=methods, sims=sims, reps=reps,
                        confidence=config.confidence, seed=config.base_seed,
                        prompts=config.prompts))
                results = {m: results[m] for m in METHODS_BY_STATISTIC[stat]}
                for method, r in results.items():
                    entry = r._asdict()
                    table.setdefault(method, {}).setdefault(stat, {}).setdefault(
                        dist, {})[str(n)] = entry
                    rows.append({"statistic": stat, "distribution": dist, "n": n,
                                 "method": method, "reps": reps,
                                 "truth": cov.truth(stat, dist), **entry})
            print(f"{NAME}: {stat}, n = {n} done ({time.perf_counter() - start:.0f} s)",
                  file=sys.stderr, flush=True)
    recommended = cov.recommend_methods(table, threshold=config.threshold)
    recommended_by_data = cov.recommend_methods_by_data(table, threshold=config.threshold)
    summary = {
        "experiment": NAME,
        "confidence": config.confidence,
        "threshold": config.threshold,
        "sizes": sizes,
        "plan": {str(n): {**dict(zip(("sims", "reps"), config.plan(n), strict=True)),
                          "sims_closed_form": (config.sims_closed_form if n >= config.large_n
                                               else config.plan(n)[0])}
                 for n in sizes},
        "prompts": config.prompts,
        "distributions": {s: list(cov.STATISTIC_DISTRIBUTIONS[s])
                          for s in config.statistic_list()},
        "coverage": table,
        "min_coverage": min_coverage(table),
        "recommended_method": recommended,
        "recommended_method_by_data": recommended_by_data,
        "data_kinds": {k: list(v) for k, v in cov.DATA_KINDS.items()},
        "wall_seconds": time.perf_counter() - start,
    }
    io.write_parquet(out_dir / "results.parquet", pd.DataFrame(rows))
    io.write_json(out_dir / "summary.json", summary)
    io.write_figure(out_dir / "coverage.png", heatmap(table, sizes, config.confidence))
    io.atomic_write_text(out_dir / "report.md", report_markdown(summary, config))
    return summary


def min_coverage(table: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{statistic: {method: {str(n): {"coverage", "distribution"}}}}``: the minimum over
    distributions and the distribution where it occurs."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for method, by_stat in table.items():
        for stat, by_dist in by_stat.items():
            sizes = sorted({int(n) for v in by_dist.values() for n in v})
            for n in sizes:
                worst = min(((v[str(n)]["coverage"], d) for d, v in by_dist.items()
                             if str(n) in v))
                out.setdefault(stat, {}).setdefault(method, {})[str(n)] = {
                    "coverage": worst[0], "distribution": worst[1]}
    return out


def heatmap(table: dict[str, Any], sizes: list[int], confidence: float):
    """Coverage heat map: one panel per statistic, rows method x distribution, columns n."""
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.figure import Figure

    stats = [s for s in STATISTICS if any(s in v for v in table.values())]
    panels = []
    for stat in stats:
        labels, grid = [], []
        for method in METHODS_BY_STATISTIC[stat]:
            for dist, by_n in table.get(method, {}).get(stat, {}).items():
                labels.append(f"{method} | {dist}")
                grid.append([by_n.get(str(n), {}).get("coverage", np.nan) for n in sizes])
        panels.append((stat, labels, np.array(grid, dtype=float)))
    heights = [max(1.5, 0.16 * len(p[1]) + 0.8) for p in panels]
    fig = Figure(figsize=(7.5, sum(heights)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), 1, gridspec_kw={"height_ratios": heights}, squeeze=False)
    norm = TwoSlopeNorm(vmin=0.75, vcenter=confidence, vmax=1.0)
    image = None
    for ax, (stat, labels, grid) in zip(axes[:, 0], panels, strict=True):
        image = ax.imshow(np.clip(grid, 0.75, 1.0), aspect="auto", cmap=colormaps["RdBu"],
                          norm=norm)
        ax.set_yticks(range(len(labels)), labels, fontsize=5)
        ax.set_xticks(range(len(sizes)), [str(n) for n in sizes], fontsize=7)
        ax.set_title(stat, fontsize=9)
        for i in range(grid.shape[0]):
            for j in range(grid.shape[1]):
                if np.isfinite(grid[i, j]):
                    ax.text(j, i, f"{100 * grid[i, j]:.0f}", ha="center", va="center",
                            fontsize=4.5)
    axes[-1, 0].set_xlabel("n (seeds)")
    if image is not None:
        fig.colorbar(image, ax=axes[:, 0].tolist(), shrink=0.3,
                     label=f"coverage (nominal {confidence:g})")
    return fig


def _pct(value: float) -> str:
    return f"{value:.3f}"


def report_markdown(summary: dict[str, Any], config: Config) -> str:
    """The report: recommended methods, minimum coverage per method and n, MC error."""
    sizes = summary["sizes"]
    plan = summary["plan"]
    lines = [f"# {NAME}", "", DESCRIPTION + ".", ""]
    lines += ["## Recommended method", "",
              f"The narrowest method whose coverage is >= {config.threshold:g} on every "
              "simulated distribution (and whose intervals are bounded on uncensored data); "
              "a size uses the nearest simulated n at or below it.", "",
              "| statistic | " + " | ".join(
                  next(iter(summary["recommended_method"].values())).keys()) + " |",
              "|---|" + "---|" * len(next(iter(summary["recommended_method"].values())))]
    for stat, by_range in summary["recommended_method"].items():
        lines.append(f"| {stat} | " + " | ".join(by_range.values()) + " |")
    lines += ["", "## Coverage (minimum over distributions)", ""]
    for stat, by_method in summary["min_coverage"].items():
        lines += [f"### {stat}", "",
                  f"Distributions: {', '.join(summary['distributions'][stat])}.", "",
                  "| method | " + " | ".join(f"n = {n}" for n in sizes) + " |",
                  "|---|" + "---|" * len(sizes)]
        for method, by_n in by_method.items():
            cells = [f"{_pct(by_n[str(n)]['coverage'])} ({by_n[str(n)]['distribution']})"
                     if str(n) in by_n else "" for n in sizes]
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
        lines.append("")
    worst_se = max(math.sqrt(0.95 * 0.05 / p["sims"]) for p in plan.values())
    plan_text = "; ".join(f"n = {n}: {p['sims']} datasets, {p['reps']} resamples"
                          for n, p in plan.items())
    lines += ["## Monte Carlo error", "",
              f"A coverage c measured over `sims` datasets has standard error sqrt(c (1 - c) "
              f"/ sims): at c = 0.95 that is {math.sqrt(0.95 * 0.05 / config.sims):.4f} with "
              f"{config.sims} datasets and {worst_se:.4f} with the fewest ({plan_text}). "
              "Every cell's own `mc_se` is in summary.json and results.parquet.", "",
              "## Procedure", "",
              "Each dataset is drawn with numpy from a known population (pairs through a "
              "Gaussian copula with correlation 0.5; two-way data as crossed seeds x "
              f"{config.prompts} prompts); each interval method runs on every dataset in one "
              "jitted program (lax.map over datasets, vmap within batches; the bootstrap "
              "methods share one set of resamples per dataset); coverage = fraction of "
              "datasets whose closed interval holds the truth, an undefined (NaN) interval "
              "counting as a miss. Per-cell widths, the fraction of unbounded intervals and "
              "of undefined ones are in results.parquet; coverage.png shows every cell.", ""]
    return "\n".join(lines)
