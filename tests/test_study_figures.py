"""The study pages' figures are the committed summaries' figures.

Every study figure the documentation quotes is listed in ``FIGURES`` with the function that
formats it from ``experiments/figures/NAME.json`` (written by
``scripts/record_figures.py`` from a run at the study's defaults). The tests check that

* each figure's text appears on its study's page, ``docs/studies/NAME.md``, and is exactly
  the committed summary's value at the page's rounding (a figure typed in by hand, or left
  behind by a re-run, fails); a figure of the studies table (:class:`InIndex`) must also be
  in the study's row of ``docs/studies/index.md``. Text is compared with runs of
  whitespace read as one space, so re-wrapping a paragraph does not break a pin;
* each committed run used the study's *current* default config (a default changed after
  the run fails until the study is re-run and re-recorded);
* every registered study has its page, named after it, with a row and a toctree entry in
  the index, and the page shows its committed run (``study-figures``) where there is one;
* the committed summaries are what the code computes: ``scripts/regenerate_figures.py``
  re-runs the studies (minutes each, so not in CI); here the cheap studies are re-run at
  their full default config when they take seconds, and the others have their own small
  tests of the same code paths (tests/test_studies.py, test_search_studies.py, ...).

Benchmark timings on the pages are not pinned: they are measurements of this machine's
speed (see each benchmark's section), not results a test can reproduce. The figures of
the studies without a committed record (``ppo``, ``recurrent-ppo``) and of the benchmarks
are pinned by ``tests/test_study_env_figures.py``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.study_pages import InIndex, flat, index_row, page

from rljax.cli import EXPERIMENT_GROUP, registry

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ROOT / "docs" / "studies"
FIGURES_DIR = ROOT / "experiments" / "figures"


def committed(name: str) -> dict:
    """The committed record of study ``name`` (config + summary)."""
    return json.loads((FIGURES_DIR / f"{name}.json").read_text())


def ci(point: float, interval, digits: int = 3, sign: bool = False, scale: float = 1.0,
       suffix: str = "") -> str:
    """``point [low, high]`` at ``digits`` decimals, the pages' interval format."""
    fmt = f"{{:{'+' if sign else ''}.{digits}f}}"
    low, high = interval

    def num(x):
        return fmt.format(x * scale).replace("-", "\N{MINUS SIGN}")

    return f"{num(point)}{suffix} [{num(low)}, {num(high)}]"


def num(x: float, digits: int) -> str:
    """``x`` at ``digits`` decimals with the pages' minus sign."""
    return f"{x:.{digits}f}".replace("-", "\N{MINUS SIGN}")


def pct(x: float, digits: int = 1) -> str:
    return f"{100 * x:.{digits}f} %"


Figure = tuple[str, str, Callable[[dict], str]]


def _orm(s):
    return [
        f"{num(s['orm_ep50_median'], 0)} {ci_only(s['orm_ep50_median_ci'], 0)}",
        InIndex(f"{num(s['prm_ep50_median'], 0)} {ci_only(s['prm_ep50_median_ci'], 0)}"),
        f"{num(s['orm_ep50_median_as_written'], 0)} "
        f"{ci_only(s['orm_ep50_median_as_written_ci'], 0)}",
        f"{num(s['prm_ep50_median_as_written'], 0)} "
        f"{ci_only(s['prm_ep50_median_as_written_ci'], 0)}",
        f"| {pct(s['orm_never_reached'])} | {pct(s['prm_never_reached'])} |",
        ci(s["orm_final_success"], s["orm_final_success_ci"]),
        ci(s["prm_final_success"], s["prm_final_success_ci"]),
        f"**{ci(s['ep50_ratio'], s['ep50_ratio_ci'], 2)}** with a full window",
        f"{ci(s['ep50_ratio_as_written'], s['ep50_ratio_as_written_ci'], 2)}\nas written",
        InIndex(f"**{num(s['ep50_ratio'], 2)}× {ci_only(s['ep50_ratio_ci'], 2)}** "
                "the episodes PRM"),
    ]


def ci_only(interval, digits: int = 3) -> str:
    return f"[{num(interval[0], digits)}, {num(interval[1], digits)}]"


def _four_answer_cell(s, optimizer, learning_rate, kl_beta):
    """``median [low, high]`` (4 decimals) of the sweep's cell nearest to the given rate."""
    cells = [c for c in s["cells"] if c["optimizer"] == optimizer
             and abs(c["kl_beta"] - kl_beta) < 1e-6]
    cell = min(cells, key=lambda c: abs(c["learning_rate"] - learning_rate))
    assert abs(cell["learning_rate"] - learning_rate) / learning_rate < 0.01
    return ci(cell["median"], (cell["low"], cell["high"]), 4)


def _four_answer(s):
    gaps = {d["setting"]: d["kl_gap"]["mean_ci"] for d in s["verdict_details"]["kl_beta_for_0.94"]
            if "kl_gap" in d}
    return [
        InIndex(f"{num(s['var_no_baseline'], 5)} {ci_only(s['var_no_baseline_ci'], 5)} and "
                f"{num(s['var_with_baseline'], 5)} {ci_only(s['var_with_baseline_ci'], 5)}"),
        ci(s["grpo_p_correct_no_kl"], s["grpo_p_correct_no_kl_ci"]) + " without KL and "
        + ci(s["grpo_p_correct_kl"], s["grpo_p_correct_kl_ci"]),
        f"+{num(s['grpo_kl_gap'], 4)} {ci_only(s['grpo_kl_gap_ci'], 4)}",
        f"median {num(s['mc_grad_max_abs_err_median'], 5)}\n"
        f"{ci_only(s['mc_grad_max_abs_err_median_ci'], 5)}",
        f"only {100 * s['mc_grad_within_tolerance_fraction']:.0f} % of keys",
        f"about {round(s['mc_samples_for_tolerance_on_most_keys'], -3):,} samples",
        InIndex(f"SGD lr 0.562 gives {_four_answer_cell(s, 'sgd', 0.562, 0.0)} without KL and "
                f"{_four_answer_cell(s, 'sgd', 0.562, 0.2)} at β 0.2, Adam lr 0.1 gives "
                f"{_four_answer_cell(s, 'adam', 0.1, 0.0)} and "
                f"{_four_answer_cell(s, 'adam', 0.1, 0.2)}"),
        f"SGD lr 0.316 gives\n   {_four_answer_cell(s, 'sgd', 0.316, 0.0)}",
        f"Adam lr 0.0562 gives {_four_answer_cell(s, 'adam', 0.0562, 0.0)}",
        f"{ci(gaps['sgd lr 0.562'][0], gaps['sgd lr 0.562'][1:], 4)} and "
        f"{num(gaps['adam lr 0.1'][0], 4)}\n   {ci_only(gaps['adam lr 0.1'][1:], 4)}",
        "yes. SGD lr 0.562 and Adam lr 0.1" if set(s["verdict_details"]["both_figures"])
        == {"sgd lr 0.562", "adam lr 0.1"} else "(both figures at other settings)",
    ]


def _gdro(s):
    names = {"uniform": "uniform GRPO", "dynamic": "dynamic sampling",
             "prompt_gdro": "Prompt-GDRO", "rollout_gdro": "Rollout-GDRO"}
    out = []
    for m, label in names.items():
        row = [label, f"{s['chosen_learning_rate'][m]:g}", f"{s['tuning_pass8'][m]:.3f}",
               ci(s["pass8"][m], s["pass8_ci"][m]),
               ci(s["optimism"][m], s["optimism_ci"][m], 4, sign=True)]
        if m == "uniform":
            row += ["—", "—"]
        else:
            row += [ci(s["pass8_diff"][m], s["pass8_diff_ci"][m], 4, sign=True),
                    f"{s['pass8_diff_p_holm'][m]:.1g}".replace("-", "\N{MINUS SIGN}")]
        row += [ci(s["hard_pass8"][m], s["hard_pass8_ci"][m]), f"{s['updates'][m]:.0f}"]
        out.append("| " + " | ".join(row) + " |")
    for m in ("prompt_gdro", "rollout_gdro", "dynamic"):
        out.append(InIndex(ci(s["rel_gain"][m], s["rel_gain_ci"][m], 1, sign=True, scale=100,
                              suffix=" %")))
    for m in ("prompt_gdro", "rollout_gdro"):
        out.append(ci(s["hard_rel_gain"][m], s["hard_rel_gain_ci"][m], 1, sign=True,
                      scale=100, suffix=" %"))
    f = s["fixed_rate"]
    out.append(", ".join(f"{names[m]} {num(f['pass8'][m], 3)}" for m in names))
    for m in ("prompt_gdro", "rollout_gdro", "dynamic"):
        out.append(ci(f["pass8_diff"][m], f["pass8_diff_ci"][m], 4, sign=True))
    sig = s["signal_fraction"]
    out.append(f"uniform {sig['uniform']:.2f}, Prompt-GDRO {sig['prompt_gdro']:.2f}, "
               f"Rollout-GDRO {sig['rollout_gdro']:.2f}, dynamic {sig['dynamic']:.2f}")
    bank = s["bank"]
    out.append(f"mean initial success is {bank['mean_p0']:.3f} "
               f"({bank['mean_p0_range'][0]:.3f}–{bank['mean_p0_range'][1]:.3f})")
    out.append(InIndex(f"uniform {ci(s['pass8']['uniform'], s['pass8_ci']['uniform'])}; "
                       f"Prompt-GDRO **{100 * s['rel_gain']['prompt_gdro']:+.1f} %"))
    out.append(InIndex(f"(hard prompts **{100 * s['hard_rel_gain']['prompt_gdro']:+.1f} %**)"))
    out.append(InIndex(f"with {s['updates']['dynamic']:.0f} of {s['updates']['uniform']:.0f} "
                       "updates"))
    return out


def _grpo_signal(s):
    p95 = s["signal_fraction"]["0.95"]
    rows = [f"| {p} | {v['analytic']:.4f} | {ci(v['empirical'], v['empirical_ci'], 4)} |"
            for p, v in s["signal_fraction"].items()]
    return [InIndex(f"within {s['max_abs_gap']:.4f} of the closed form"),
            InIndex(f"p = 0.95 → {ci(p95['empirical'], p95['empirical_ci'])}"), *rows]


def _interval_coverage(s):
    c = s["coverage"]
    return [InIndex(f"percentile bootstrap of a normal mean at 8 seeds: "
                    f"{c['percentile']['mean']['normal']['8']['coverage']:.3f}; Student t: "
                    f"{c['t']['mean']['normal']['8']['coverage']:.3f}"),
            "| mean | t | " + " | ".join(
                f"{min(v[n]['coverage'] for v in c['t']['mean'].values()):.2f}"
                for n in ("3", "5", "8", "16", "64", "1000")) + " |",
            "| median | order_statistic | " + " | ".join(
                f"{min(v[n]['coverage'] for v in c['order_statistic']['median'].values()):.2f}"
                for n in ("3", "5", "8", "16", "64", "1000")) + " |"]


def _ppo_cartpole(s):
    low, high = s["fraction_seeds_final_500_ci"]
    return [f"{s['seeds_final_500']} of {s['seeds']} seeds, "
            f"{100 * s['fraction_seeds_final_500']:.0f} % [{100 * low:.0f}, {100 * high:.0f}] %",
            InIndex(f"PPO state {s['ppo_state_bytes']:,} B vs GRPO's actor alone "
                    f"{s['grpo_state_bytes']:,} B "
                    f"({s['grpo_state_bytes'] / s['ppo_state_bytes']:.2f}×)"),
            InIndex(f"{s['seeds_final_500']} of {s['seeds']} seeds at the 500-step cap in the "
                    f"final window ({100 * s['fraction_seeds_final_500']:.0f} %, 95 % CI "
                    f"[{100 * low:.0f}, {100 * high:.0f}] %"),
            f"| seeds at the cap in the final window | {s['seeds_final_500']} of {s['seeds']}, "
            f"{100 * s['fraction_seeds_final_500']:.0f} % [{100 * low:.0f}, {100 * high:.0f}] %",
            f"| mean final return | {s['final_return_mean']:.1f} |",
            f"| PPO state bytes (actor + critic params + Adam) | {s['ppo_state_bytes']:,} "
            f"({s['ppo_param_count']:,} parameters) |",
            f"| GRPO state bytes (the same actor + Adam, no critic) | {s['grpo_state_bytes']:,} "
            f"({s['grpo_param_count']:,} parameters) |"]


def _lm_grpo(s):
    def c(key, sign=False):
        return ci(s[key], s[f"{key}_ci"], sign=sign)

    return [
        f"held-out greedy accuracy {c('heldout_greedy_start')} → {c('heldout_greedy_grpo')}",
        f"gain **{c('heldout_gain', True)}**: the interval excludes 0",
        f"sampled accuracy (T = 1) gain {c('sampled_gain', True)}",
        f"pass@16 {s['pass_at_k_start'][-1]:.3f} → {s['pass_at_k_grpo'][-1]:.3f} "
        f"({c('pass_at_max_k_change', True)})",
        f"the SFT control {c('sft_control_heldout')}",
        InIndex(f"GRPO − SFT {c('limited_label_grpo_minus_sft', True)}"),
        f"majority@16 {c('search_majority_at_n')}",
        f"PRM beam {c('search_prm_beam')}",
        f"against pass@1 {c('search_pass_at_1')}",
        InIndex(f"GRPO / PPO **{s['memory_ratio']:.2f}**"),
        InIndex(f"held-out greedy gain **{c('heldout_gain', True)}** (8 seeds"),
        InIndex(f"pass@16 {c('pass_at_max_k_change', True)}"),
        InIndex(f"SFT with labels {c('sft_control_heldout')}"),
        "minus Δp for 0.5 < p ≤ 0.75 is " + ci(s["signal"]["delta_p_low_minus_mid"]["point"],
                                                s["signal"]["delta_p_low_minus_mid"]["ci"],
                                                sign=True),
    ]


def _test_time_search(s):
    acc, ci_ = s["accuracy"], s["accuracy_ci"]
    pairs = s["paired_differences"]["256"]

    def diff(pair):
        v = pairs[pair]
        return ci(v["diff"], (v["low"], v["high"]), sign=True).replace(
            f"[+{v['low']:.3f}", f"[{v['low']:.3f}").replace(f", +{v['high']:.3f}]",
                                                            f", {v['high']:.3f}]")

    out = [InIndex(f"{label} {ci(acc[m]['256'], ci_[m]['256'])}") for label, m in (
        ("MCTS-Gumbel", "mcts_gumbel"), ("PRM beam", "prm_beam"), ("MCTS-PUCT", "mcts_puct"),
        ("best-of-N", "best_of_n"))]
    out += [InIndex(f"Gumbel − PUCT {diff('mcts_gumbel - mcts_puct')}"),
            InIndex(f"above best-of-N ({diff('mcts_gumbel - best_of_n')}"),
            InIndex(f"PUCT − best-of-N {diff('mcts_puct - best_of_n')}, tied"),
            InIndex(f"majority vote {acc['majority_vote']['256']:.3f}, greedy "
                    f"{acc['greedy']['256']:g}")]
    assert not pairs["mcts_gumbel - mcts_puct"]["significant"]
    assert pairs["mcts_gumbel - best_of_n"]["significant"]
    assert not pairs["mcts_puct - best_of_n"]["significant"]
    budgets = ("1", "4", "16", "64", "256")
    # the page's accuracy table (method x budget) and its tiers of the paired comparisons
    out += [f"| {label} | " + " | ".join(f"{acc[m][b]:.3f}" for b in budgets) + " |"
            for m, label in SEARCH_LABELS.items()]

    def tiers(ranking):
        return " > ".join(SEARCH_LABELS[t[0]] if len(t) == 1 else
                          "{" + " ~ ".join(SEARCH_LABELS[m] for m in t) + "}" for t in ranking)

    out += [f"| {b} | {tiers(s['ranking'][b])} |" for b in budgets]
    return out


SEARCH_LABELS = {"greedy": "greedy", "best_of_n": "best-of-N", "majority_vote": "majority vote",
                 "prm_beam": "PRM beam", "mcts_puct": "MCTS-PUCT", "mcts_gumbel": "MCTS-Gumbel"}


def _rl_then_search(s):
    acc, ci_ = s["accuracy"], s["accuracy_ci"]
    eff = s["effects"]["all_levels"]
    removed = eff["errors_removed_trained"]
    inter = eff["error_ratio_interaction"]

    def effect(scope, name, digits):
        v = s["effects"][scope][name]
        return ci(v["point"], (v["low"], v["high"]), digits)

    removed_untrained = eff["errors_removed_untrained"]
    by_level = s["accuracy_by_level"]
    conditions = ("untrained_greedy", "untrained_mcts", "trained_greedy", "trained_mcts")
    return [
        InIndex(f"greedy accuracy {acc['untrained_greedy']:.3f} → "
                f"{ci(acc['trained_greedy'], ci_['trained_greedy'])} with GRPO"),
        InIndex(f"adds {ci(s['mcts_gain_untrained'], s['mcts_gain_untrained_ci'])} to the "
                "untrained"),
        InIndex(f"and {ci(s['mcts_gain_trained'], s['mcts_gain_trained_ci'])} to the trained one"),
        InIndex(f"raw interaction {ci(s['interaction'], s['interaction_ci'])} is forced"),
        InIndex(f"removes {100 * removed_untrained['point']:.0f} % "
                f"[{num(100 * removed_untrained['low'], 0)}, "
                f"{100 * removed_untrained['high']:.0f}] of the untrained policy's errors"),
        InIndex(f"{100 * removed['point']:.0f} % [{num(100 * removed['low'], 0)}, "
                f"{100 * removed['high']:.0f}] of the trained one's"),
        InIndex(f"(interaction {ci(inter['point'], (inter['low'], inter['high']), 2)}, "
                "consistent"),
        InIndex(f"logit interaction {effect('all_levels', 'logit_interaction', 1)}"),
        InIndex(f"accuracy {effect('below_ceiling', 'accuracy_interaction', 3)}, error ratio "
                f"{effect('below_ceiling', 'error_ratio_interaction', 2)}, logit "
                f"{effect('below_ceiling', 'logit_interaction', 1)}"),
        # the page's tables: the 2 x 2, accuracy per level, the interaction on each scale
        f"| untrained | {acc['untrained_greedy']:.3f} | "
        f"{ci(acc['untrained_mcts'], ci_['untrained_mcts'])} | "
        f"{ci(s['mcts_gain_untrained'], s['mcts_gain_untrained_ci'])} |",
        f"| GRPO-trained | {ci(acc['trained_greedy'], ci_['trained_greedy'])} | "
        f"{ci(acc['trained_mcts'], ci_['trained_mcts'])} | "
        f"{ci(s['mcts_gain_trained'], s['mcts_gain_trained_ci'])} |",
        *(f"| {level} | " + " | ".join(f"{by_level[c][level]:.3f}" for c in conditions) + " |"
          for level in range(len(by_level["trained_greedy"]))),
        f"| accuracy (raw) | {effect('all_levels', 'accuracy_interaction', 3)} | "
        f"{effect('below_ceiling', 'accuracy_interaction', 3)} |",
        f"| error ratio (log) | {effect('all_levels', 'error_ratio_interaction', 2)} | "
        f"{effect('below_ceiling', 'error_ratio_interaction', 2)} |",
        f"| logit | {effect('all_levels', 'logit_interaction', 2)} | "
        f"{effect('below_ceiling', 'logit_interaction', 2)} |",
        "| scale | all levels | below the ceiling "
        f"(level {', '.join(map(str, s['below_ceiling_levels']))}) |",
    ]


def _lm_variants(s):
    """The lm-variants page's table rows (rates tried, where the tuned rate sits), the two
    verdict lines and the headline's figures (page and index)."""
    per, ref = s["per_arm"], s["reference"]
    rows = []
    for arm in s["arms"]:
        p = per[arm]
        rates = ", ".join(f"{r:g} ({m:.3f})" for r, m in zip(p["lr_grid"], p["tuning_means"],
                                                              strict=True))
        n = p["grid_extensions"]
        where = p["grid_position"] + (f" after {n} extension{'s' * (n != 1)}" if n else "")
        diff = "—" if arm == ref else ci(p["difference"], p["difference_ci"], sign=True)
        holm = "—" if arm == ref else f"{p['p_holm']:.3f}"
        rows.append(f"| {arm} | {rates} | {p['learning_rate']:g}, {where} | "
                    f"{ci(p['accuracy'], p['accuracy_ci'])} | {diff} | {holm} |")
    d, e = s["claims"]["dr_grpo_length"], s["claims"]["dapo_entropy"]

    def change(v, digits):
        return ci(v["point"], v["ci"], digits, sign=True)

    rows.append(f"GRPO {change(d['grpo_change'], 2)}, Dr. GRPO "
                f"{change(d['dr_grpo_change'], 2)}, paired difference "
                f"{change(d['grpo_minus_dr_grpo'], 2)} tokens: **{d['verdict']}**")
    rows.append(f"symmetric clip {change(e['dapo_sym_clip_change'], 3)}, clip-higher "
                f"{change(e['dapo_change'], 3)}, paired difference "
                f"{change(e['dapo_minus_sym_clip'], 3)} nats: **{e['verdict']}**")
    accuracies = [per[a]["accuracy"] for a in s["arms"]]
    start = per[ref]["accuracy_start"]
    gspo = per["gspo"]
    rows += [
        InIndex(f"held-out accuracy after {s['protocol']['rl_steps']} steps "
                f"{min(accuracies):.3f}–{max(accuracies):.3f} for every arm from {start:.3f}"),
        InIndex(f"GSPO {ci(gspo['difference'], gspo['difference_ci'], sign=True)}, "
                f"Holm p {gspo['p_holm']:.3f}"),
        f"paired p {gspo['p_value']:.3f}",
    ]
    return rows


def _alphazero(s):
    """The alphazero page's table rows and the learning line."""
    rows = []
    for player, label in (("search", "search agent (Gumbel MuZero, 16 simulations)"),
                          ("network", "policy head alone (greedy)")):
        cells = []
        for opponent in ("random", "depth2"):
            v = s[f"{player}_vs_{opponent}_final"]
            start = s[f"{player}_vs_{opponent}_curve"]["mean"][0]
            cells.append(f"{start:.3f} → {ci(v['point'], (v['low'], v['high']))}")
        rows.append(f"| {label} | {cells[0]} | {cells[1]} |")
    imp = s["search_vs_depth2_improvement"]
    rows.append(f"against depth-2 by {ci(imp['point'], (imp['low'], imp['high']), sign=True)}")
    return rows


def _at_cap(s):
    """``**K of S seeds**`` at the largest test return and the exact interval of the
    fraction (the dqn and pqn pages)."""
    low, high = s["fraction_at_max_ci"]
    return [f"**{s['seeds_at_max']} of {s['seeds']} seeds**", f"[{low:.2f}, {high:.2f}]"]


def _offpolicy_run(s):
    """A dqn / pqn / sac page's test and training returns (0 decimals)."""
    return [ci(s["test_return_iqm"], s["test_return_ci"], 0),
            ci(s["train_return_iqm"], s["train_return_ci"], 0)]


def _dqn(s):
    return [*_at_cap(s), *_offpolicy_run(s)]


def _pqn(s):
    return [*_at_cap(s), *_offpolicy_run(s)]


def _sac(s):
    test, train = _offpolicy_run(s)
    return [f"**{test}**", train, InIndex(test)]


def _offpolicy_compare(s):
    """The comparison page's table cells, pairs and headline."""
    rep, tune = s["report"], s["tuning"]
    out = [" / ".join(f"{x:.0f}" for x in tune[m]["iqm"]) for m in ("ppo", "dqn", "pqn")]
    out += [f"| {ci(rep[m]['iqm'], rep[m]['ci'], 0)} |" for m in ("ppo", "dqn", "pqn")]
    pair = {(p["a"], p["b"]): p for p in s["pairs"]}
    for a, b in (("ppo", "dqn"), ("dqn", "pqn")):
        p = pair[(a, b)]
        out.append(ci(p["difference"], p["ci"], 0, sign=True))
    out.append(f"P(PPO > DQN) {pair[('ppo', 'dqn')]['p_a_better']:.2f}")
    out.append(InIndex(f"DQN {ci(rep['dqn']['iqm'], rep['dqn']['ci'], 0)}"))
    return out


MAKERS = {"orm-vs-prm": _orm, "lm-variants": _lm_variants, "rl-then-search": _rl_then_search,
          "test-time-search": _test_time_search, "lm-grpo": _lm_grpo,
          "ppo-cartpole": _ppo_cartpole, "four-answer": _four_answer, "gdro": _gdro,
          "grpo-signal": _grpo_signal, "interval-coverage": _interval_coverage,
          "alphazero": _alphazero, "dqn": _dqn, "pqn": _pqn, "sac": _sac,
          "offpolicy-compare": _offpolicy_compare}


def _nth(make: Callable[[dict], list[str]], index: int, summary: dict) -> str:
    return make(summary)[index]


FIGURES: list[Figure] = [
    (study, text, functools.partial(_nth, make, i))
    for study, make in MAKERS.items()
    for i, text in enumerate(make(committed(study)["summary"]))
]


@pytest.mark.parametrize("name", sorted(p.stem for p in FIGURES_DIR.glob("*.json")))
def test_committed_run_used_the_current_defaults(name):
    record = committed(name)
    module = registry(EXPERIMENT_GROUP)[name].load()
    defaults = json.loads(json.dumps(dataclasses.asdict(module.Config())))  # as recorded
    assert record["config"] == defaults, (
        f"experiments/figures/{name}.json was recorded with another config than the "
        f"study's defaults; re-run `rljax run {name}` and scripts/record_figures.py")
    assert record["summary"]["experiment"] == name


@pytest.mark.parametrize("study,text,make", FIGURES,
                         ids=[f"{s}:{t[:40]}" for s, t, _ in FIGURES])
def test_study_page_figure_is_the_committed_figure(study, text, make):
    assert flat(text) in page(study), (
        f"docs/studies/{study}.md no longer quotes {text!r}")
    if isinstance(text, InIndex):
        assert flat(text) in index_row(study), (
            f"docs/studies/index.md's row of {study} no longer quotes {text!r}")
    assert make(committed(study)["summary"]) == text, (
        f"docs/studies/{study}.md's {text!r} is not experiments/figures/{study}.json's "
        f"{make(committed(study)['summary'])!r}")


def test_every_study_with_page_figures_has_a_committed_record():
    studies = {s for s, _, _ in FIGURES}
    assert studies <= {p.stem for p in FIGURES_DIR.glob("*.json")}
    assert studies, "no study page figures are pinned"
    assert any(isinstance(t, InIndex) for _, t, _ in FIGURES)


@pytest.mark.parametrize("name", sorted(registry(EXPERIMENT_GROUP)))
def test_every_study_has_its_page_in_the_index(name):
    """``docs/studies/NAME.md`` exists and opens with ``# NAME: ...``; the index has a row
    linking it and lists it in its toctree; the page renders the committed run exactly
    when ``experiments/figures/NAME.json`` exists."""
    path = STUDIES / f"{name}.md"
    assert path.is_file(), f"study {name} has no page docs/studies/{name}.md"
    text = path.read_text()
    assert text.startswith(f"# {name}: "), f"{path.name} must open with '# {name}: <claim>'"
    index_row(name)
    index = (STUDIES / "index.md").read_text()
    toctree = index.split("```{toctree}", 1)[1].split("```", 1)[0].split()
    assert name in toctree, f"docs/studies/index.md's toctree lacks {name}"
    has_record = (FIGURES_DIR / f"{name}.json").is_file()
    shows_record = f"```{{study-figures}} {name}" in text
    assert shows_record == has_record, (
        f"{path.name}: a study-figures block for {name} "
        + ("is missing" if has_record else "names a record that does not exist"))


SENSITIVITY = ROOT / "docs" / "figures" / "ppo_cartpole_sensitivity.json"


def _rate_label(rate: float) -> str:
    mantissa, exponent = f"{rate:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def test_ppo_sensitivity_table_is_the_committed_grid_run():
    """The ppo-cartpole page's learning rate x clip table is the committed grid run's
    summary, and that run's command is the one the page shows."""
    record = json.loads(SENSITIVITY.read_text())
    s = record["summary"]
    text = page("ppo-cartpole")
    clips = record["grid"]["grid"]["clip_epsilon"]
    for rate in record["grid"]["grid"]["learning_rate"]:
        cells = []
        for clip in clips:
            (c,) = [c for c in s["configs"] if c["learning_rate"] == pytest.approx(rate)
                    and c["clip_epsilon"] == pytest.approx(clip)]
            f = c["final_return"]
            cells.append(f"{f['point']:.0f} [{f['low']:.0f}, {f['high']:.0f}] "
                         f"({c['seeds_at_cap']}/{c['finite_seeds']})")
        row = f"| {_rate_label(rate)} | " + " | ".join(cells) + " |"
        assert row in text, f"docs/studies/ppo-cartpole.md's sensitivity table lacks {row!r}"
    flags = record["command"].split("--out results/ppo-cartpole-sensitivity ")[1]
    raw = (STUDIES / "ppo-cartpole.md").read_text()
    assert flat(flags) in flat(raw.replace("\\\n", " "))
    assert record["config"]["total_steps"] == 102400 and s["seeds"] == 8
