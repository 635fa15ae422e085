"""Matplotlib figures for :mod:`rljax.stats` results, with confidence intervals and bands.

Every function builds a ``matplotlib.figure.Figure`` directly (Agg canvas, no pyplot, no
global state, never ``show``) and returns it; save with ``fig.savefig(path)``. Layouts
follow the figures of Agarwal et al., "Deep RL at the Edge of the Statistical Precipice"
(NeurIPS 2021): interval estimates as horizontal bars per metric, performance profiles and
sample-efficiency curves as lines with shaded pointwise bands, probability of improvement
as one bar per pair.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rljax.stats.bootstrap import Interval

METRIC_LABELS = {"mean": "Mean", "median": "Median", "iqm": "IQM",
                 "optimality_gap": "Optimality gap"}


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _colors(names: Sequence[str]) -> dict[str, tuple]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return {name: cmap(i % 10) for i, name in enumerate(names)}


def plot_interval_estimates(estimates: Mapping[str, Mapping[str, Interval]], *,
                            xlabel: str = "Score", title: str | None = None) -> Figure:
    """Interval estimates: one panel per metric, one horizontal bar (CI) per algorithm.

    Args:
      estimates: ``{metric: {algorithm: Interval}}`` with scalar intervals.
      xlabel: x-axis label shared by the panels.
      title: optional figure title.

    Returns:
      The figure.
    """
    metrics = list(estimates)
    algorithms = list(dict.fromkeys(a for m in metrics for a in estimates[m]))
    colors = _colors(algorithms)
    fig = _figure(2.6 * max(1, len(metrics)) + 1.2, 0.45 * len(algorithms) + 1.2)
    axes = fig.subplots(1, max(1, len(metrics)), sharey=True, squeeze=False)[0]
    for ax, metric in zip(axes, metrics, strict=False):
        for row, algo in enumerate(algorithms):
            if algo not in estimates[metric]:
                continue
            iv = estimates[metric][algo]
            ax.barh(row, iv.high - iv.low, left=iv.low, height=0.6, color=colors[algo],
                    alpha=0.75)
            ax.vlines(iv.point, row - 0.3, row + 0.3, color="black", linewidth=1.5)
        ax.set_title(METRIC_LABELS.get(metric, metric))
        ax.set_yticks(range(len(algorithms)), algorithms)
        ax.grid(axis="x", alpha=0.3)
        ax.set_xlabel(xlabel)
    axes[0].invert_yaxis()
    if title:
        fig.suptitle(title)
    return fig


def plot_performance_profiles(taus, profiles: Mapping[str, Interval], *,
                              xlabel: str = r"Score threshold $\tau$",
                              ylabel: str = r"Fraction of runs with score $> \tau$",
                              title: str | None = None) -> Figure:
    """Performance profiles with pointwise confidence bands.

    Args:
      taus: ``[T]`` thresholds.
      profiles: ``{algorithm: Interval(point [T], low [T], high [T])}``.
      xlabel, ylabel, title: labels.

    Returns:
      The figure.
    """
    taus = np.asarray(taus)
    colors = _colors(list(profiles))
    fig = _figure(5.5, 3.8)
    ax = fig.subplots()
    for algo, iv in profiles.items():
        ax.plot(taus, iv.point, color=colors[algo], label=algo, linewidth=2)
        ax.fill_between(taus, iv.low, iv.high, color=colors[algo], alpha=0.2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    if title:
        ax.set_title(title)
    return fig


def plot_probability_of_improvement(pairs: Mapping[tuple[str, str], Interval], *,
                                    title: str | None = None) -> Figure:
    """Probability of improvement ``P(X > Y)`` per pair, with confidence intervals.

    Args:
      pairs: ``{(X, Y): Interval}``.
      title: optional title.

    Returns:
      The figure.
    """
    labels = [f"P({x} > {y})" for x, y in pairs]
    fig = _figure(6.0, 0.45 * len(labels) + 1.3)
    ax = fig.subplots()
    for row, iv in enumerate(pairs.values()):
        ax.barh(row, iv.high - iv.low, left=iv.low, height=0.6, color="tab:blue", alpha=0.7)
        ax.vlines(iv.point, row - 0.3, row + 0.3, color="black", linewidth=1.5)
    ax.axvline(0.5, color="gray", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("Probability of improvement")
    ax.grid(axis="x", alpha=0.3)
    if title:
        ax.set_title(title)
    return fig


def plot_sample_efficiency(steps, curves: Mapping[str, Interval], *, xlabel: str = "Step",
                           ylabel: str = "Score", title: str | None = None) -> Figure:
    """Sample-efficiency curves (metric per checkpoint) with pointwise confidence bands.

    Args:
      steps: ``[K]`` checkpoint steps.
      curves: ``{algorithm: Interval(point [K], low [K], high [K])}``.
      xlabel, ylabel, title: labels.

    Returns:
      The figure.
    """
    steps = np.asarray(steps)
    colors = _colors(list(curves))
    fig = _figure(5.5, 3.8)
    ax = fig.subplots()
    for algo, iv in curves.items():
        ax.plot(steps, iv.point, color=colors[algo], label=algo, linewidth=2, marker=".")
        ax.fill_between(steps, iv.low, iv.high, color=colors[algo], alpha=0.2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    if title:
        ax.set_title(title)
    return fig
