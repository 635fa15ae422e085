"""Study ``orm-vs-prm``: outcome vs process rewards on a 5-step chain.

Claim under test: "PRM reaches 50 % success in roughly half the episodes ORM needs".

Setup (issue #2): ChainMDP of 5 steps, action 1 correct at every step; tabular softmax
policy from zero logits; REINFORCE with plain SGD, ``lr = 0.1``,
``logit[s] += lr * (R - b) * (onehot(a) - pi(.|s))``; EMA baseline ``b`` from 0.5, rate
0.05, updated once per episode with that episode's reward (ORM: the outcome; PRM: the
fraction of correct steps); under ORM every step's ``R`` is the outcome, under PRM each
step's ``R`` is its own correctness; 400 episodes; success = all steps correct; success
rate = mean success over a trailing window of 30 episodes.

Episodes to 50 % success (``ep50``) are measured two ways: ``as_written`` (the window
counts whatever episodes exist so far, so a success in episode 1 reads 100 %) and
``full_window`` (only once 30 episodes exist). A seed that never reaches 50 % has
``ep50 = inf``: medians are taken over all seeds with that convention (a proper median of
the censored distribution) and the never-reached fraction is reported beside them.

Intervals come from ``rljax.stats.reported.reported_interval``: the medians of the
(tied, integer, right-censored) episode counts and their ratio use its exact
order-statistic interval (distribution-free, so it stays honest with ties and ``inf``,
where a percentile bootstrap of the median can exclude both tied neighbours of the
sample median); the final success rates use the method it recommends for a mean at n.
The report states each method's measured coverage.

On the config axis (``rljax run orm-vs-prm --grid learning_rate=0.05,0.1,0.3``):
``learning_rate``, ``baseline_init`` and ``baseline_rate`` are traced (``train(key,
hparams)`` reads them, so every value runs in one compiled program per reward mode);
``baseline`` and ``chain_length`` are structural (one program per value). ``episodes``
fixes the length of every result and ``window`` / ``threshold`` only enter the analysis,
so none of them can be swept in one run. A plain run is a one-row table of the traced
values, so ``--set learning_rate=x`` is bitwise the config ``learning_rate=x`` of any grid
(same block size). A grid run's ``results.parquet`` gains ``config`` and one column per
swept field, and ``summary.json`` holds the headline figures per configuration
(``configs``) instead of at its top level; a grid run draws no plots.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pandas as pd

from rljax import io, stats
from rljax.advantages import BASELINES
from rljax.config import ConfigError, check_fields, param, require_choice, traced_fields
from rljax.envs import REWARD_MODES
from rljax.grid import Grid, grid_columns, run_grid, single_grid
from rljax.nonfinite import NONFINITE_STEP
from rljax.report import (
    Figure,
    figures_table,
    finite_or_none,
    format_interval,
    format_number,
    pyplot,
)
from rljax.stats.reported import reported_interval
from rljax.sweep import DEFAULT_BLOCK_SIZE
from rljax.training.chain import make_chain_train

NAME = "orm-vs-prm"
DESCRIPTION = "Outcome vs process rewards on a 5-step chain: episodes to 50 % success (REINFORCE)"


@dataclass(frozen=True)
class Config:
    """Configuration of the study (every field settable with ``--set key=value``)."""

    seeds: int = param(4096, "seeds (ids 0 .. seeds - 1)", sweep=False, low=1)
    block_size: int = param(DEFAULT_BLOCK_SIZE, "seeds per compiled block", sweep=False,
                            low=1)
    base_seed: int = param(0, "the sweep's base seed (32-bit keys, + small offsets)",
                           sweep=False, low=0, high=2**31 - 1)
    modes: str = param("orm,prm", "the reward modes, comma-separated", sweep=False)
    chain_length: int = param(5, "steps of the chain", low=1)
    episodes: int = param(400, "episodes per seed", sweep=False, low=1)
    learning_rate: float = param(0.1, "SGD step size", traced=True, low=0.0, low_open=True)
    baseline: str = param("ema", "the REINFORCE baseline", choices=tuple(BASELINES))
    baseline_init: float = param(0.5, "the EMA baseline's start", traced=True)
    baseline_rate: float = param(0.05, "the EMA baseline's rate", traced=True, low=0.0,
                                 high=1.0, low_open=True)
    window: int = param(30, "episodes of the trailing success window", sweep=False, low=1)
    threshold: float = param(0.5, "the success rate counted as reached", sweep=False,
                             low=0.0, high=1.0)
    bootstrap_reps: int = param(2000, "bootstrap resamples", sweep=False, low=1)
    confidence: float = param(0.95, "the intervals' confidence", sweep=False, low=0.0,
                              high=1.0, low_open=True, high_open=True)

    def mode_list(self) -> list[str]:
        """The reward modes of ``modes``, in the order given."""
        return [m.strip() for m in self.modes.split(",") if m.strip()]

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first invalid field: each against its
        declaration, then ``modes`` and the ``baseline`` this study can run."""
        check_fields(self)
        modes = self.mode_list()
        if not modes or len(set(modes)) != len(modes):
            raise ConfigError(f"modes: must be distinct reward modes from {REWARD_MODES}, "
                              f"got {self.modes!r}")
        for mode in modes:
            require_choice("modes", mode, REWARD_MODES)
        if self.baseline in ("group_mean", "leave_one_out"):
            raise ConfigError(
                f"baseline: {self.baseline} needs groups of >= 2 episodes; this study runs one "
                "episode per update, use ema or none"
            )


def trailing_success_rate(success: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Trailing-window success rates.

    Args:
      success: ``[S, E]`` bool/0-1, seed x episode.
      window: W.

    Returns:
      ``(rate [S, E], full [E])``: ``rate[:, t]`` is the mean over episodes
      ``max(0, t-W+1) .. t`` (whatever exists, "as written"); ``full[t]`` says whether
      ``W`` episodes exist at ``t`` (``t + 1 >= W``).
    """
    s = np.asarray(success, dtype=np.float64)
    csum = np.concatenate([np.zeros((s.shape[0], 1)), np.cumsum(s, axis=1)], axis=1)
    t = np.arange(s.shape[1])
    start = np.maximum(0, t + 1 - window)
    sums = csum[:, t + 1] - csum[:, start]
    counts = (t + 1 - start).astype(np.float64)
    return sums / counts, (t + 1) >= window


def episodes_to_threshold(
    success: np.ndarray, window: int, threshold: float, full_window: bool
) -> np.ndarray:
    """First episode (1-based) whose trailing success rate is ``>= threshold``.

    Args:
      success: ``[S, E]``.
      window: trailing window W.
      threshold: success-rate threshold.
      full_window: count only episodes with a full window (``as_written`` if false).

    Returns:
      ``[S]`` float64 episode numbers; ``inf`` for seeds that never reach it.
    """
    rate, full = trailing_success_rate(success, window)
    hit = rate >= threshold
    if full_window:
        hit &= full[None, :]
    first = np.argmax(hit, axis=1).astype(np.float64) + 1.0
    first[~hit.any(axis=1)] = np.inf
    return first


#: Medians of episode counts (integers with heavy ties, +inf for censored seeds) and their
#: ratio always use the exact order-statistic interval: distribution-free, so its coverage
#: is >= nominal with ties and censoring whatever the table would pick as narrowest.
EXACT = {"median": "order_statistic", "ratio_of_medians": "order_statistic"}
#: The kind of per-seed data each interval is held to (rljax.stats.coverage.DATA_KINDS):
#: episodes to 50 % are right-censored times; a final success rate is a count of successes
#: over the window.
DATA_KINDS = {"median": "censored", "ratio_of_medians": "censored", "mean": "counts"}


def _interval(statistic: str, *samples, key, config: Config, notes: dict[str, str]):
    iv = reported_interval(statistic, *(np.asarray(x, np.float64) for x in samples), key=key,
                           reps=config.bootstrap_reps, confidence=config.confidence,
                           method=EXACT.get(statistic), data=DATA_KINDS[statistic])
    notes[statistic] = iv.note.rstrip(".")
    return iv


def analyse(success: dict[str, np.ndarray], config: Config, key: jax.Array) -> dict[str, Any]:
    """All figures of the study from per-mode success matrices ``[S, E]``."""
    out: dict[str, Any] = {}
    notes: dict[str, str] = {}
    keys = iter(jax.random.split(key, 32))
    ep50 = {}
    for mode, s in success.items():
        for variant, full in (("as_written", False), ("full_window", True)):
            e = episodes_to_threshold(s, config.window, config.threshold, full)
            ep50[(mode, variant)] = e
            ci = _interval("median", e, key=next(keys), config=config, notes=notes)
            suffix = "_as_written" if variant == "as_written" else ""
            out[f"{mode}_ep50_median{suffix}"] = finite_or_none(np.median(e))
            out[f"{mode}_ep50_median{suffix}_ci"] = [finite_or_none(ci.low),
                                                      finite_or_none(ci.high)]
            out[f"{mode}_never_reached{suffix}"] = float(np.mean(np.isinf(e)))
        final = np.asarray(s[:, -config.window:], np.float32).mean(axis=1)
        ci = _interval("mean", final, key=next(keys), config=config, notes=notes)
        out[f"{mode}_final_success"] = float(np.mean(final))
        out[f"{mode}_final_success_ci"] = [ci.low, ci.high]
    if "orm" in success and "prm" in success:
        for variant, suffix in (("full_window", ""), ("as_written", "_as_written")):
            a, b = ep50[("orm", variant)], ep50[("prm", variant)]
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = float(np.median(a) / np.median(b))
                ci = _interval("ratio_of_medians", a, b, key=next(keys), config=config,
                               notes=notes)
            out[f"ep50_ratio{suffix}"] = finite_or_none(ratio)
            out[f"ep50_ratio{suffix}_ci"] = [finite_or_none(ci.low), finite_or_none(ci.high)]
    out["interval_notes"] = notes
    return out


def make_train(config: Config, mode: str) -> Callable[..., dict[str, jax.Array]]:
    """One seed's training for reward ``mode``: ``train(key, hparams) -> {"success": bool
    [episodes], NONFINITE_STEP: int32 []}``.

    ``hparams`` holds the traced fields (``learning_rate``, ``baseline_init``,
    ``baseline_rate``, scalars); they are read from it, never from ``config``, so one
    compiled program runs any of their values. ``config`` supplies the structural fields
    (``baseline``, ``chain_length``) and ``episodes``. The run is
    :func:`rljax.training.chain.make_chain_train`'s (its final logits dropped, so
    configurations of different chain lengths have outputs of one shape).
    """

    def train(key: jax.Array, hparams: dict[str, jax.Array]) -> dict[str, jax.Array]:
        out = make_chain_train(
            mode=mode,
            chain_length=config.chain_length,
            episodes=config.episodes,
            learning_rate=hparams["learning_rate"],
            baseline=config.baseline,
            baseline_init=hparams["baseline_init"],
            baseline_rate=hparams["baseline_rate"],
        )(key)
        return {"success": out["success"], NONFINITE_STEP: out[NONFINITE_STEP]}

    return train


def run(config: Config, out_dir: Path, grid: Grid | None = None,
        options: Any = None) -> dict[str, Any]:
    """Run the study and write config-independent results into ``out_dir``.

    Writes ``results.parquet`` (seed x mode x step = episode: ``success``), ``summary.json``,
    ``report.md``, ``learning_curves.png`` and ``ep50_distribution.png``; returns the
    summary dict. With ``grid`` (a :class:`rljax.grid.Grid` over the traced and
    structural fields) every configuration runs on the same seeds (paired);
    ``results.parquet`` gains ``config`` and the swept fields, ``summary["configs"]`` lists
    each configuration's figures, and no plots are drawn. Without one, the traced values
    still go through a one-row table.
    """
    table = single_grid(config, traced_fields(Config)) if grid is None else grid
    configs = table.configs(config)
    success: dict[str, np.ndarray] = {}  # mode -> [K, S, E]
    compile_seconds = run_seconds = timed_episodes = 0.0
    num_rounds, programs, num_devices = 0, 0, len(jax.devices())
    for mode in config.mode_list():
        result = run_grid(lambda c, m=mode: make_train(c, m), configs, None,
                          config.seeds, base_seed=config.base_seed,
                          block_size=config.block_size, desc=mode, options=options)
        success[mode] = np.asarray(result.outputs["success"], dtype=bool)
        compile_seconds += result.compile_seconds
        run_seconds += result.run_seconds
        timed_episodes += len(configs) * config.seeds * config.episodes * result.timed_fraction
        num_rounds = sum(math.ceil(p["configs"] * config.seeds
                                   / (config.block_size * num_devices))
                         for p in result.programs)
        programs += len(result.programs)

    summary: dict[str, Any] = {
        "experiment": NAME,
        "seeds": config.seeds,
        "episodes": config.episodes,
        "block_size": config.block_size,
        "num_devices": num_devices,
        "num_rounds": num_rounds,
    }
    key = jax.random.key(config.base_seed + 1)
    if grid is None:
        summary.update(analyse({m: s[0] for m, s in success.items()}, config, key))
    else:
        rows = []
        for c, cfg in enumerate(configs):
            figures = analyse({m: s[c] for m, s in success.items()}, cfg, key)
            summary["interval_notes"] = figures.pop("interval_notes")
            rows.append({"config": c, **grid.rows[c], **figures})
        summary.update(grid=grid.record(), programs=programs, configs=rows)
    summary["episodes_per_second"] = timed_episodes / max(run_seconds, 1e-9)
    summary["compile_seconds"] = compile_seconds
    summary["run_seconds"] = run_seconds

    columns = None if grid is None else grid_columns(configs, grid.fields)
    io.write_parquet(out_dir / "results.parquet", results_table(success, columns))
    io.write_json(out_dir / "summary.json", summary)
    if grid is None:
        _write_plots({m: s[0] for m, s in success.items()}, config, out_dir)
        io.atomic_write_text(out_dir / "report.md", report_markdown(summary, config))
    else:
        io.atomic_write_text(out_dir / "report.md", grid_report_markdown(summary, config))
    return summary


def results_table(success: dict[str, np.ndarray],
                  columns: dict[str, np.ndarray] | None = None) -> pd.DataFrame:
    """Tidy table, one row per seed x mode x episode: ``seed, mode, step, success``
    (``step`` is the 1-based episode number, the study's logged step).

    Args:
      success: ``{mode: [S, E]}``, or ``{mode: [K, S, E]}`` with ``columns``.
      columns: for a grid, :func:`rljax.grid.grid_columns` (``config`` and the swept
        fields, ``[K]`` each); the table then gains these columns, rows ordered mode,
        config, seed, episode. Without it a ``[1, S, E]`` array counts as ``[S, E]``.
    """
    frames = []
    for mode, s in success.items():
        s = np.asarray(s)
        if columns is None and s.ndim == 3:
            s = s[0]
        lead = s.shape[0] if s.ndim == 3 else 1
        num_seeds, num_episodes = s.shape[-2:]
        per_config = num_seeds * num_episodes
        extra = {name: np.repeat(np.asarray(v), per_config)
                 for name, v in (columns or {}).items()}
        frames.append(pd.DataFrame({
            **extra,
            "seed": np.tile(np.repeat(np.arange(num_seeds, dtype=np.int32), num_episodes),
                            lead),
            "mode": pd.Categorical([mode] * (lead * per_config),
                                   categories=list(REWARD_MODES)),
            "step": np.tile(np.arange(1, num_episodes + 1, dtype=np.int32), lead * num_seeds),
            "success": s.reshape(-1),
        }))
    return pd.concat(frames, ignore_index=True)


def _write_plots(success: dict[str, np.ndarray], config: Config, out_dir: Path) -> None:
    plt = pyplot()
    stride = max(1, config.episodes // 100)
    checkpoints = np.arange(stride - 1, config.episodes, stride)
    rates = {mode: trailing_success_rate(s, config.window)[0][:, checkpoints]
             for mode, s in success.items()}
    bands = stats.sample_efficiency_curves(
        {mode: r[:, None, :] for mode, r in rates.items()}, "mean",
        key=jax.random.key(config.base_seed + 2), reps=config.bootstrap_reps,
        confidence=config.confidence)
    fig, ax = plt.subplots(figsize=(7, 4))
    for mode, band in bands.items():
        episodes = checkpoints + 1
        ax.plot(episodes, band.point, label=mode.upper())
        ax.fill_between(episodes, band.low, band.high, alpha=0.3)
    ax.axhline(config.threshold, color="grey", linestyle="--", linewidth=1)
    ax.axvline(config.window, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("episode")
    ax.set_ylabel(f"success rate (trailing {config.window})")
    ax.set_title(f"ORM vs PRM, {success[next(iter(success))].shape[0]} seeds "
                 f"(mean, {100 * config.confidence:g} % CI band)")
    ax.legend()
    io.write_figure(out_dir / "learning_curves.png", fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    bins = np.arange(0, config.episodes + 2, max(1, config.episodes // 80))
    for mode, s in success.items():
        e = episodes_to_threshold(s, config.window, config.threshold, True)
        ax.hist(e[np.isfinite(e)], bins=bins, alpha=0.5, label=f"{mode.upper()} "
                f"(never: {100 * np.mean(np.isinf(e)):.1f} %)")
    ax.set_xlabel("episodes to 50 % success (full window)")
    ax.set_ylabel("seeds")
    ax.legend()
    io.write_figure(out_dir / "ep50_distribution.png", fig)


def report_markdown(summary: dict[str, Any], config: Config) -> str:
    """The study's report: figures with intervals and a plain-language reading."""
    figures = []
    for mode in config.mode_list():
        m = mode.upper()
        for suffix, label in (("", "full window"), ("_as_written", "as written")):
            ci = summary[f"{mode}_ep50_median{suffix}_ci"]
            figures.append(Figure(
                f"{m} episodes to 50 % (median, {label})",
                _inf_if_none(summary[f"{mode}_ep50_median{suffix}"]),
                _inf_if_none(ci[0]), _inf_if_none(ci[1]),
                f"never reached: {100 * summary[f'{mode}_never_reached{suffix}']:.1f} % of seeds",
            ))
        ci = summary[f"{mode}_final_success_ci"]
        figures.append(Figure(f"{m} final success rate (last {config.window})",
                              summary[f"{mode}_final_success"], ci[0], ci[1]))
    if "ep50_ratio" in summary:
        for suffix, label in (("", "full window"), ("_as_written", "as written")):
            ci = summary[f"ep50_ratio{suffix}_ci"]
            figures.append(Figure(f"ORM / PRM episodes-to-50 % ratio ({label})",
                                  summary[f"ep50_ratio{suffix}"], ci[0], ci[1],
                                  "paired over seeds"))
    figures.append(Figure("episodes per second (training, all modes)",
                          summary["episodes_per_second"]))

    lines = [
        f"# {NAME}",
        "",
        DESCRIPTION + ".",
        "",
        f"{config.seeds} seeds x {config.episodes} episodes per reward mode, chain length "
        f"{config.chain_length}, learning rate {config.learning_rate:g}, baseline "
        f"{config.baseline} (start {config.baseline_init:g}, rate {config.baseline_rate:g}), "
        f"block size {config.block_size}.",
        "",
        figures_table(figures, config.confidence),
        "",
        "## Reading",
        "",
        reading(summary),
        "",
        "## Procedure",
        "",
        "Intervals over seeds (`rljax.stats.reported.reported_interval`, "
        f"{100 * config.confidence:g} %): medians of episodes to 50 %: "
        f"{_note(summary, 'median')}; the ORM / PRM ratio of medians: "
        f"{_note(summary, 'ratio_of_medians')} (ORM and PRM run on the same seed keys, so "
        "the pairs are paired); final success rates: "
        f"{_note(summary, 'mean')}. Seeds "
        "that never reach 50 % count as infinitely slow, so medians are of the censored "
        "distribution; 'as written' lets the trailing window count the episodes that exist "
        "so far (one early success reads as 100 %), 'full window' waits for 30 episodes. "
        "The learning-curve band is a pointwise bootstrap interval of the mean trailing "
        "success rate that resamples whole seeds jointly across episodes "
        "(`rljax.stats.sample_efficiency_curves`).",
        "",
    ]
    return "\n".join(lines)


def grid_report_markdown(summary: dict[str, Any], config: Config) -> str:
    """A grid run's report: per configuration, the medians of episodes to 50 % (full
    window), their ORM / PRM ratio and the final success rates, with intervals."""
    fields = summary["grid"]["fields"]
    modes = config.mode_list()
    paired = "orm" in modes and "prm" in modes
    head = ["config", *fields] + [f"{m.upper()} episodes to 50 %" for m in modes]
    head += (["ORM / PRM ratio"] if paired else []) + [f"{m.upper()} final success"
                                                     for m in modes]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in summary["configs"]:
        cells = [str(row["config"]), *(row[f] if isinstance(row[f], str)
                                       else format_number(row[f]) for f in fields)]
        cells += [_with_ci(row[f"{m}_ep50_median"], row[f"{m}_ep50_median_ci"]) for m in modes]
        if paired:
            cells.append(_with_ci(row["ep50_ratio"], row["ep50_ratio_ci"]))
        cells += [_with_ci(row[f"{m}_final_success"], row[f"{m}_final_success_ci"])
                  for m in modes]
        lines.append("| " + " | ".join(cells) + " |")
    notes = summary.get("interval_notes", {})
    text = [
        f"# {NAME} (grid)",
        "",
        DESCRIPTION + ".",
        "",
        f"{len(summary['configs'])} configurations ({', '.join(fields)}) x {config.seeds} "
        f"seeds x {config.episodes} episodes per reward mode, {summary['programs']} compiled "
        f"program(s), block size {config.block_size}; every configuration runs on the same "
        "seed keys.",
        "",
        "\n".join(lines),
        "",
        f"Episodes to 50 % use the full {config.window}-episode window (never: the median "
        f"seed never reaches it). Intervals ({100 * config.confidence:g} %, per "
        "configuration): medians: "
        f"{notes.get('median', 'not computed')}; ratio: "
        f"{notes.get('ratio_of_medians', 'not computed')}; final success: "
        f"{notes.get('mean', 'not computed')}. They are marginal per configuration: to rank "
        "two configurations, compare their paired per-seed results in results.parquet.",
        "",
    ]
    return "\n".join(text)


def _with_ci(point: float | None, ci: list[float | None]) -> str:
    return format_interval(*(_inf_if_none(x) for x in (point, *ci)))


def reading(summary: dict[str, Any]) -> str:
    """A short plain-language reading of the claim."""
    if "ep50_ratio" not in summary or summary["ep50_ratio"] is None:
        return "Only one reward mode was run (or a median is undefined); no ratio to read."
    ratio = summary["ep50_ratio"]
    low, high = summary["ep50_ratio_ci"]
    low_s, high_s = format_number(low), format_number(high)
    holds = low is not None and high is not None and low <= 2.5 and high >= 1.5
    verdict = "holds" if holds else "does not hold"
    text = (
        f"The claim \"PRM reaches 50 % success in roughly half the episodes ORM needs\" "
        f"{verdict} here (reading \"roughly half\" as an ORM/PRM ratio between 1.5 and 2.5): "
        f"with a full 30-episode window ORM needs {format_number(ratio)}x the episodes PRM "
        f"needs (95 % CI [{low_s}, {high_s}]); median "
        f"{format_number(summary['orm_ep50_median'])} vs "
        f"{format_number(summary['prm_ep50_median'])} episodes. "
    )
    aw = summary.get("ep50_ratio_as_written")
    if aw is not None:
        text += (
            f"Counting the window as written (partial windows allowed), the medians are "
            f"{format_number(summary['orm_ep50_median_as_written'])} vs "
            f"{format_number(summary['prm_ep50_median_as_written'])} (ratio "
            f"{format_number(aw)}): early lucky successes make both look faster. "
        )
    text += (
        f"After {summary['episodes']} episodes the success rate over the last episodes is "
        f"{format_number(summary['orm_final_success'])} (ORM) vs "
        f"{format_number(summary['prm_final_success'])} (PRM)."
    )
    return text


def _note(summary: dict[str, Any], statistic: str) -> str:
    return summary.get("interval_notes", {}).get(statistic, "not computed")


def _inf_if_none(x: float | None) -> float:
    return math.inf if x is None else x
