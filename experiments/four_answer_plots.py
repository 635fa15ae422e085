"""The four-answer study's figures and report (``report.md``) from its summary."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from experiments.four_answer_claim import CLAIM, p4
from rljax import io
from rljax.report import Figure, figures_table, format_number, pyplot


def _panels(cells: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """``{(optimizer, clip): {"rates": [...], "betas": [...], "median": [R, B]}}``."""
    out: dict[tuple, dict[str, Any]] = {}
    for key in sorted({(c["optimizer"], c["clip_epsilon"]) for c in cells},
                      key=lambda k: (k[0] != "sgd", k)):
        mine = [c for c in cells if (c["optimizer"], c["clip_epsilon"]) == key]
        rates = sorted({c["learning_rate"] for c in mine})
        betas = sorted({c["kl_beta"] for c in mine})
        grid = np.full((len(rates), len(betas)), np.nan)
        status = np.full(grid.shape, "", dtype=object)
        for c in mine:
            i, j = rates.index(c["learning_rate"]), betas.index(c["kl_beta"])
            grid[i, j] = c["median"]
            status[i, j] = c["vs_0.99"] if c["kl_beta"] == 0 else c["vs_0.94"]
        out[key] = {"rates": rates, "betas": betas, "median": grid, "status": status}
    return out


def _short(m: float) -> str:
    if math.isnan(m):
        return "n/a"
    text = f"{m:.4f}"
    if text.startswith("0"):
        return text[1:]
    return ">.9999" if m < 1 else "1.0"


def heatmap(cells: list[dict[str, Any]], path: Path) -> None:
    """Rate x beta heat map of the median final p(correct), one panel per optimizer.

    Colour is ``1 - median`` on a log scale (so 0.9, 0.99, 0.999 are equally spaced and
    the ceiling stays readable); each cell shows its median to four decimals without the
    leading 0 (``.9903``; ``>.9999`` below 1 that rounds up, ``1.0`` when it is 1 in
    float32); a cell matching the claim
    (0.99 at beta = 0, 0.94 at beta > 0, within the tolerance) is outlined.
    """
    from matplotlib.colors import LogNorm

    plt = pyplot()
    panels = _panels(cells)
    fig, axes = plt.subplots(1, len(panels), figsize=(7.2 * len(panels), 5.4), squeeze=False,
                             layout="constrained")
    norm = LogNorm(vmin=1e-4, vmax=1.0)
    image = None
    for ax, ((opt, clip), p) in zip(axes[0], panels.items(), strict=True):
        gap = np.clip(1.0 - p["median"], 1e-4, 1.0)
        image = ax.imshow(gap, norm=norm, cmap="viridis_r", aspect="auto", origin="lower")
        for (i, j), m in np.ndenumerate(p["median"]):
            text = _short(m)
            ax.text(j, i, text, ha="center", va="center", fontsize=6.5,
                    color="white" if gap[i, j] > 0.03 else "black")
            if p["status"][i, j] == "matches":
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False,
                                           edgecolor="red", linewidth=1.6))
        ax.set_xticks(range(len(p["betas"])), [f"{b:g}" for b in p["betas"]])
        ax.set_yticks(range(len(p["rates"])), [f"{r:g}" for r in p["rates"]])
        ax.set_xlabel("KL beta")
        ax.set_ylabel("learning rate")
        ax.set_title(f"{opt} (clip {clip:g}): median p(correct)")
    fig.colorbar(image, ax=axes[0].tolist(), label="1 - median p(correct) (log)")
    fig.suptitle(f"red: matches the claim ({CLAIM['p_no_kl']:g} at beta 0, "
                 f"{CLAIM['p_kl']:g} at beta > 0)")
    io.write_figure(path, fig)


def _picked(summary: dict[str, Any], config: Any) -> list[tuple[int, str]]:
    """Curves to draw: the reference pair and, per optimizer, the beta = 0 cell nearest
    0.99 with that setting's cell nearest 0.94."""
    cells = summary["cells"]
    picked = []
    for beta in (0.0, config.kl_beta):
        for c in cells:
            if (c["optimizer"], c["learning_rate"], c["kl_beta"], c["clip_epsilon"]) == (
                    config.optimizer, config.learning_rate, beta, config.clip_epsilon):
                picked.append((c["config"], f"{c['optimizer']} lr {c['learning_rate']:g}, "
                                            f"beta {beta:g}"))
    for opt in sorted({c["optimizer"] for c in cells}):
        zero = [c for c in cells if c["optimizer"] == opt and c["kl_beta"] == 0
                and not math.isnan(c["median"])]
        if not zero:
            continue
        best = min(zero, key=lambda c: abs(c["median"] - CLAIM["p_no_kl"]))
        same = [c for c in cells if c["optimizer"] == opt and c["kl_beta"] > 0
                and c["learning_rate"] == best["learning_rate"]
                and c["clip_epsilon"] == best["clip_epsilon"] and not math.isnan(c["median"])]
        for c in [best] + ([min(same, key=lambda c: abs(c["median"] - CLAIM["p_kl"]))]
                           if same else []):
            picked.append((c["config"], f"{opt} lr {c['learning_rate']:g}, "
                                        f"beta {c['kl_beta']:g}"))
    seen, out = set(), []
    for c, label in picked:
        if c not in seen:
            seen.add(c)
            out.append((c, label))
    return out


def write_plots(summary: dict[str, Any], curves: np.ndarray, err: np.ndarray, config: Any,
                out_dir: Path) -> None:
    """mc_gradient_error.png, grpo_p_correct.png (``curves`` ``[K, S, steps + 1]``) and
    grpo_heatmap.png."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(err, bins=60)
    ax.axvline(config.tolerance, color="red", linestyle="--", label=f"{config.tolerance:g}")
    ax.set_xlabel(f"max |MC gradient - exact| over 4 logits ({config.samples} samples)")
    ax.set_ylabel("seeds")
    ax.legend()
    io.write_figure(out_dir / "mc_gradient_error.png", fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    steps = np.arange(curves.shape[2])
    for c, label in _picked(summary, config):
        q25, med, q75 = np.quantile(curves[c], [0.25, 0.5, 0.75], axis=0)
        ax.plot(steps, med, label=label)
        ax.fill_between(steps, q25, q75, alpha=0.2)
    for level in (CLAIM["p_no_kl"], CLAIM["p_kl"]):
        ax.axhline(level, color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("p(correct answer)")
    ax.set_title("median and interquartile range over seeds")
    ax.legend(fontsize=7)
    io.write_figure(out_dir / "grpo_p_correct.png", fig)
    heatmap(summary["cells"], out_dir / "grpo_heatmap.png")


def _sweep_tables(cells: list[dict[str, Any]]) -> list[str]:
    lines = []
    for (opt, clip), p in _panels(cells).items():
        lines += [f"### {opt}, clip {clip:g}: median final p(correct) (rows: learning rate, "
                  "columns: KL beta; **bold**: matches the claim, 0.99 at beta 0 and 0.94 "
                  "at beta > 0)", "",
                  "| lr \\ beta | " + " | ".join(f"{b:g}" for b in p["betas"]) + " |",
                  "|---" * (len(p["betas"]) + 1) + "|"]
        for i, rate in enumerate(p["rates"]):
            row = []
            for j in range(len(p["betas"])):
                m = p["median"][i, j]
                text = "n/a" if math.isnan(m) else p4(m)
                row.append(f"**{text}**" if p["status"][i, j] == "matches" else text)
            lines.append(f"| {rate:g} | " + " | ".join(row) + " |")
        lines.append("")
    return lines


def _kl_reading(s: dict[str, Any], config: Any) -> str:
    """What beta = ``config.kl_beta`` does at the settings that reach 0.99 without KL."""
    reach = {(e["optimizer"], e["learning_rate"], e["clip_epsilon"])
             for e in s["verdict_details"]["no_kl"] if e["status"] in ("matches", "above")}
    at = [c["median"] for c in s["cells"] if c["kl_beta"] == config.kl_beta
          and (c["optimizer"], c["learning_rate"], c["clip_epsilon"]) in reach]
    if not at or math.isnan(min(at)):
        return ""
    return (f"At the {len(at)} settings that reach 0.99 without KL, beta {config.kl_beta:g} "
            f"ends at medians {min(at):.4f} to {max(at):.4f}.")


def report_markdown(summary: dict[str, Any], config: Any) -> str:
    """The study's report.md from its summary."""
    s = summary
    figures = [
        Figure("exact gradient dJ/dz", None, note=str(s["exact_gradient"])),
        Figure(f"max abs error of the MC gradient, {config.samples} samples (median)",
               s["mc_grad_max_abs_err_median"], *s["mc_grad_max_abs_err_median_ci"],
               f"{100 * s['mc_grad_within_tolerance_fraction']:.1f} % of seeds within "
               f"{config.tolerance:g}"),
        Figure("variance of g_correct, no baseline (empirical)", s["var_no_baseline"],
               *s["var_no_baseline_ci"], f"exact {s['var_no_baseline_exact']:.4f}"),
        Figure(f"variance of g_correct, baseline {config.baseline:g} (empirical)",
               s["var_with_baseline"], *s["var_with_baseline_ci"],
               f"exact {s['var_with_baseline_exact']:.4f}"),
    ]
    if "grpo_kl_gap" in s:
        ref = f"{s['grpo_optimizer']} lr {s['grpo_learning_rate']:g}"
        for name, beta in (("no_kl", 0.0), ("kl", s["grpo_kl_beta"])):
            lo, hi = s[f"grpo_p_correct_{name}_spread"]
            figures.append(Figure(
                f"GRPO p(correct) after {config.grpo_steps} steps, {ref}, beta {beta:g} "
                "(median)", s[f"grpo_p_correct_{name}"], *s[f"grpo_p_correct_{name}_ci"],
                f"2.5-97.5 % of seeds: {format_number(lo)}-{format_number(hi)}"))
        figures.append(Figure(f"GRPO p(correct), {ref}: beta 0 minus beta "
                              f"{s['grpo_kl_beta']:g} (mean paired difference)",
                              s["grpo_kl_gap"], *s["grpo_kl_gap_ci"], "same seeds"))
    adv_rows = "\n".join(
        f"| {g} | {', '.join(f'{x:.4f}' for x in row)} |"
        for g, row in zip(s["advantage_groups"], s["advantage_table"], strict=True))
    clip_rows = "\n".join(
        f"| {c['advantage']:+g} | {c['ratio']:g} | {c['objective']:+.3f} |"
        for c in s["clip_examples"])
    notes = s["interval_notes"]
    gap_note = (f"; the beta 0 minus beta {s['grpo_kl_beta']:g} gap: "
                f"{notes['paired_difference']}" if "paired_difference" in notes else "")
    if "paired_difference_any" in notes:
        gap_note += ("; the beta 0 minus beta (0.94) gaps of the verdict: "
                     f"{notes['paired_difference_any']}")
    g = s["grid"]
    return "\n".join([
        "# four-answer", "",
        "Policy-gradient derivation on a four-answer toy: exact vs sampled gradients, GRPO.", "",
        f"{config.seeds} seeds (Monte Carlo check, and each GRPO cell). Policy (0.4, 0.3, "
        "0.2, 0.1) as softmax logits; only answer 3 (p = 0.2) is rewarded.", "",
        figures_table(figures), "",
        "## Claim and verdict", "",
        f"Claim (the post): {s['claim']}.", "",
        f"Verdict: {s['verdict']}", "",
        f"## The sweep: {g['num_configs']} configurations x {g['seeds_per_config']} seeds, "
        f"{len(g['programs'])} compiled program(s)", "",
        "Heat map: `grpo_heatmap.png`; every (config, seed) final p(correct) in "
        "`results.parquet`, median curves in `curves.parquet`.", "",
        *_sweep_tables(s["cells"]),
        "## GRPO advantages, groups of 4 (population std, epsilon 1e-6)", "",
        "| rewards | advantages |", "|---|---|", adv_rows, "",
        f"## PPO clipped objective, epsilon {config.clip_epsilon:g}", "",
        "| A | r | min(rA, clip(r)A) |", "|---|---|---|", clip_rows, "",
        "## Reading", "",
        f"The single-sample estimator is unbiased, but one sample is noisy: the variance of the "
        f"correct logit's estimate is {format_number(s['var_no_baseline'])} without a baseline "
        f"(exact {s['var_no_baseline_exact']:.4f}) and {format_number(s['var_with_baseline'])} "
        f"with the baseline {config.baseline:g} (exact {s['var_with_baseline_exact']:.4f}). "
        f"Averaged over {config.samples} samples the worst of the four logits is off by "
        f"{format_number(s['mc_grad_max_abs_err_median'])} in the median seed; only "
        f"{100 * s['mc_grad_within_tolerance_fraction']:.1f} % of seeds are within "
        f"{config.tolerance:g}, below the Monte Carlo standard error "
        f"(sqrt(0.1024 / {config.samples}) = {math.sqrt(0.1024 / config.samples):.4f}); "
        f"meeting it on most keys needs about {s['mc_samples_for_tolerance_on_most_keys']:,} "
        "samples.", "",
        f"GRPO: groups of {config.group_size}, {config.grpo_steps} steps, one inner iteration "
        "(so the clip never binds), a k3 KL penalty to the starting policy; SGD and Adam "
        "(optax defaults) at a traced learning rate. " + _kl_reading(s, config), "",
        "## Procedure", "",
        "Every cell runs the same seeds (common random numbers: seed i's sampling keys are "
        "the same in every configuration), so differences between cells are paired. "
        "Intervals over seeds (`rljax.stats.reported.reported_interval`): medians (errors, "
        f"each cell's final p(correct)): {notes['median']}; means (variances): "
        f"{notes['mean']}{gap_note} ({config.bootstrap_reps} resamples where the method "
        "resamples). Claim figures are compared with a cell's median interval within "
        f"{s['claim_tolerance']:g} (half a unit of the claim's two decimals); brackets "
        "between grid points interpolate linearly (in log rate for rates) and carry no "
        "interval. Empirical variances use ddof = 1 within each seed's samples.", "",
    ])
