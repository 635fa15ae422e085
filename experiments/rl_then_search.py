"""Study ``rl-then-search``: does GRPO fine-tuning plus MCTS at inference add up?

Seed claim: "fine-tune with GRPO, then add MCTS at inference for hard problems". A 2 x 2
design per seed: the *untrained* MLP (the initialisation GRPO starts from) and the
*GRPO-trained* MLP (``rljax.training.equation``, outcome reward only), each played
greedily and with Gumbel MuZero search at a fixed budget of policy/model evaluations
per problem (``rljax.search.equation``). MCTS uses the verifier-based heuristic
value ``1 - phi / 3`` in both rows, so the policy factor changes only the prior.
Accuracy is measured on held-out equations (the coefficient-hash split of
:func:`rljax.envs.equation.is_held_out`; training draws only the other side) at each
difficulty level. "Gains add up" is asked on three scales, because the answer depends on
the scale: the raw accuracy interaction ``(TM - TG) - (UM - UG)``, the error-ratio
interaction ``log(e_TM / e_TG) - log(e_UM / e_UG)`` (how much of the remaining error search
removes, for each policy) and the logit interaction; and once more on the levels where
trained greedy accuracy is below the ceiling (0.95), since near 1 the raw scale forces a
negative interaction (:func:`scale_effects`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from rljax import io
from rljax.config import param
from rljax.envs.equation import NUM_LEVELS, EquationEnv, EquationParams, sample_split_equation
from rljax.report import (
    Figure,
    figures_table,
    finite_or_none,
    format_interval,
    format_number,
    pyplot,
)
from rljax.search.equation import heuristic_value, solve
from rljax.stats.reported import reported_interval
from rljax.sweep import Sweep
from rljax.training.equation import (
    EquationTrainConfig,
    init_params,
    make_equation_grpo_train,
    make_network,
    start_state,
)

NAME = "rl-then-search"
DESCRIPTION = "GRPO-trained vs untrained policy, with and without MCTS, on 'solve for x'"
CONDITIONS = ("untrained_greedy", "untrained_mcts", "trained_greedy", "trained_mcts")
CEILING = 0.95  # trained greedy accuracy at or above this leaves search no room to add
#: Per-seed values are counts of solved problems: intervals are held to the coverage
#: measured on count data (rljax.stats.coverage.DATA_KINDS; the note gives the worst case).
DATA_KIND = "counts"


@dataclass(frozen=True)
class Config(EquationTrainConfig):
    """The trainer's :class:`EquationTrainConfig` (its fields and defaults) and the
    study's: each seed trains its own policy and evaluates it on its own held-out
    problems.

    16 seeds (was 8): the intervals' measured coverage needs n >= 16 (see the report's
    procedure and rljax.stats.reported).
    """

    seeds: int = param(16, "seeds: each trains one policy", sweep=False, low=1)
    block_size: int = param(8, "seeds per compiled block", sweep=False, low=1)
    base_seed: int = param(0, "the sweep's base seed (32-bit keys, + small offsets)",
                           sweep=False, low=0, high=2**31 - 1)
    problems_per_level: int = param(64, "held-out evaluation equations per level and seed",
                                    sweep=False, low=1)
    mcts_budget: int = param(64, "MCTS evaluations per problem", sweep=False, low=1)
    bootstrap_reps: int = param(2000, "bootstrap resamples", sweep=False, low=1)



def evaluation_problems(key, config: Config) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One seed's evaluation problems: ``(levels [L P], coeffs [L P, 4], solutions [L P])``,
    ``P = problems_per_level`` at each level, every one from the held-out side of the split
    (training draws only the other side:
    :func:`rljax.training.equation.training_problems`)."""
    modulus = config.train_config().holdout_modulus
    levels = jnp.repeat(jnp.arange(NUM_LEVELS, dtype=jnp.int32), config.problems_per_level)
    coeffs, solution = jax.vmap(lambda k, lv: sample_split_equation(k, lv, modulus, True))(
        jax.random.split(key, levels.shape[0]), levels)
    return levels, coeffs, solution


def make_train(config: Config):
    """``train(key) -> {condition: float [L, P]}`` correctness on held-out problems."""
    train_config = config.train_config()
    grpo_train = make_equation_grpo_train(train_config)
    net = make_network(train_config)
    env = EquationEnv()
    env_params = EquationParams(max_steps=train_config.max_steps)

    def policy_apply(params, obs):
        return net.actor.apply(params["actor"], obs)

    def train(key):
        key_train, key_problems, key_search = jax.random.split(key, 3)
        trained, _ = grpo_train(key_train)
        untrained = init_params(train_config, key_train)
        _, coeffs, solution = evaluation_problems(key_problems, config)
        state = jax.vmap(start_state)(coeffs, solution)
        obs = jax.vmap(lambda s: env.observation(s, env_params))(state)
        out = {}
        for name, params in (("untrained", untrained), ("trained", trained)):
            for method, budget, tag in (("greedy", env_params.max_steps, "greedy"),
                                        ("mcts_gumbel", config.mcts_budget, "mcts")):
                correct = solve(method, key_search, env, env_params, policy_apply,
                                heuristic_value, params, obs, state, budget=budget)
                out[f"{name}_{tag}"] = correct.reshape(NUM_LEVELS, config.problems_per_level)
        return out

    return train


SCALES = ("accuracy", "error_ratio", "logit")


def scale_effects(correct: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per-seed search gains and the 2 x 2 interaction on three scales.

    ``correct[c]``: ``[S, n]`` 0/1 correctness of condition ``c`` (``CONDITIONS``) on each
    seed's ``n`` evaluation problems. With ``k`` the seed's count of correct answers:

    * accuracy: ``p = k / n``; gain ``p_M - p_G``; interaction
      ``(p_TM - p_TG) - (p_UM - p_UG)``;
    * error ratio: ``e = (n - k + 1/2) / (n + 1)`` (error rate with the 1/2 continuity
      correction, so a seed without errors stays finite); gain ``log(e_M / e_G)`` (search
      leaves ``exp`` of it of the policy's errors, and removes ``1 - exp``); interaction
      ``log(e_TM / e_TG) - log(e_UM / e_UG)`` (< 0: search removes a larger share of the
      trained policy's errors);
    * logit: Cox's empirical logit ``l = log((k + 1/2) / (n - k + 1/2))``; gain
      ``l_M - l_G``; interaction ``(l_TM - l_TG) - (l_UM - l_UG)``.

    Returns:
      ``{f"{scale}_gain_untrained", f"{scale}_gain_trained", f"{scale}_interaction"}``
      for ``scale`` in ``SCALES``: float64 ``[S]`` each.

    Source: Cox, "The Analysis of Binary Data", 1970, §3.2 (empirical logit); the
    continuity correction of Haldane, Ann. Hum. Genet. 1956.
    """
    k = {c: np.asarray(correct[c], np.float64).sum(axis=1) for c in CONDITIONS}
    n = float(np.asarray(correct[CONDITIONS[0]]).shape[1])
    transforms = {
        "accuracy": lambda kc: kc / n,
        "error_ratio": lambda kc: np.log((n - kc + 0.5) / (n + 1.0)),
        "logit": lambda kc: np.log((kc + 0.5) / (n - kc + 0.5)),
    }
    out = {}
    for scale, f in transforms.items():
        ug, um, tg, tm = (f(k[c]) for c in CONDITIONS)
        out[f"{scale}_gain_untrained"] = um - ug
        out[f"{scale}_gain_trained"] = tm - tg
        out[f"{scale}_interaction"] = (tm - tg) - (um - ug)
    return out


def _interval(values: np.ndarray, key, reps: int) -> dict[str, Any]:
    # per-seed values are counts of solved problems over n (or transforms and differences
    # of them): the coverage that applies is the "counts" kind's
    iv = reported_interval("mean", np.asarray(values, np.float64), key=key, reps=reps,
                           data=DATA_KIND)
    return {"point": float(np.mean(values)), "low": finite_or_none(iv.low),
            "high": finite_or_none(iv.high), "note": iv.note}


def effects_table(correct: dict[str, np.ndarray], key, reps: int) -> dict[str, Any]:
    """:func:`scale_effects` with an interval over seeds for each entry
    (``reported_interval("mean", ...)`` of the per-seed values), plus, on the error-ratio
    scale, the share of errors search removes, ``1 - exp(mean log(e_M / e_G))``."""
    effects = scale_effects(correct)
    keys = iter(jax.random.split(key, len(effects)))
    table = {name: _interval(v, next(keys), reps) for name, v in effects.items()}
    for policy in ("untrained", "trained"):
        g = table[f"error_ratio_gain_{policy}"]
        table[f"errors_removed_{policy}"] = {
            "point": 1.0 - float(np.exp(g["point"])),
            "low": None if g["high"] is None else 1.0 - float(np.exp(g["high"])),
            "high": None if g["low"] is None else 1.0 - float(np.exp(g["low"])),
            "note": "1 - exp of error_ratio_gain (geometric mean over seeds)"}
    return table


def run(config: Config, out_dir: Path, options: Any = None) -> dict[str, Any]:
    """Run the study; writes results.parquet, summary.json, report.md, accuracy_2x2.png."""
    result = Sweep(make_train(config), base_seed=config.base_seed,
                   block_size=config.block_size).run(config.seeds, desc=NAME,
                                                  options=options)
    out = {c: np.asarray(result.outputs[c], np.float64) for c in CONDITIONS}  # [S, L, P]
    summary = analyse(out, config)
    summary["compile_seconds"] = result.compile_seconds
    summary["run_seconds"] = result.run_seconds

    rows = []
    for c in CONDITIONS:
        s, levels, p = out[c].shape
        rows.append(pd.DataFrame({
            "seed": np.repeat(np.arange(s, dtype=np.int32), levels * p),
            "condition": c,
            "level": np.tile(np.repeat(np.arange(levels, dtype=np.int32), p), s),
            "correct": out[c].reshape(-1),
        }))
    io.write_parquet(out_dir / "results.parquet", pd.concat(rows, ignore_index=True))
    io.write_json(out_dir / "summary.json", summary)
    _plot(summary, out_dir)
    io.atomic_write_text(out_dir / "report.md", report_markdown(summary, config))
    return summary


def analyse(out: dict[str, np.ndarray], config: Config) -> dict[str, Any]:
    """The summary from correctness ``out[condition]``: float ``[S, L, P]``."""
    keys = iter(jax.random.split(jax.random.key(config.base_seed + 1), 64))
    reps = config.bootstrap_reps
    seeds = next(iter(out.values())).shape[0]
    per_seed = {c: out[c].mean(axis=(1, 2)) for c in CONDITIONS}
    summary: dict[str, Any] = {"experiment": NAME, "seeds": seeds,
                               "mcts_budget": config.mcts_budget,
                               "problems_per_level": config.problems_per_level,
                               "training_updates": config.updates,
                               "problems": "held-out split, drawn per seed; training draws "
                                           "only the other side",
                               "accuracy": {}, "accuracy_ci": {}, "accuracy_by_level": {},
                               "accuracy_by_level_ci": {}}
    note = ""
    for c in CONDITIONS:
        iv = _interval(per_seed[c], next(keys), reps)
        note = iv["note"]
        summary["accuracy"][c] = iv["point"]
        summary["accuracy_ci"][c] = [iv["low"], iv["high"]]
        levels, level_cis = [], []
        for lv in range(NUM_LEVELS):
            liv = _interval(out[c][:, lv, :].mean(axis=1), next(keys), reps)
            levels.append(liv["point"])
            level_cis.append([liv["low"], liv["high"]])
        summary["accuracy_by_level"][c] = levels
        summary["accuracy_by_level_ci"][c] = level_cis
    summary["interval_note"] = note
    ceiling = [lv for lv in range(NUM_LEVELS)
               if summary["accuracy_by_level"]["trained_greedy"][lv] >= CEILING]
    below = [lv for lv in range(NUM_LEVELS) if lv not in ceiling]
    summary["ceiling_threshold"] = CEILING
    summary["ceiling_levels"] = ceiling
    summary["below_ceiling_levels"] = below
    flat = lambda c, lvs: out[c][:, lvs, :].reshape(seeds, -1)  # noqa: E731
    all_levels = list(range(NUM_LEVELS))
    summary["effects"] = {"all_levels": effects_table(
        {c: flat(c, all_levels) for c in CONDITIONS}, next(keys), reps)}
    summary["effects"]["below_ceiling"] = (effects_table(
        {c: flat(c, below) for c in CONDITIONS}, next(keys), reps) if below else None)
    for lv in all_levels:
        summary["effects"][f"level_{lv}"] = effects_table(
            {c: out[c][:, lv, :] for c in CONDITIONS}, next(keys), reps)
    e = summary["effects"]["all_levels"]
    # The raw-scale figures under their old names.
    summary["interaction"] = e["accuracy_interaction"]["point"]
    summary["interaction_ci"] = [e["accuracy_interaction"]["low"],
                                 e["accuracy_interaction"]["high"]]
    for name, key in (("mcts_gain_untrained", "accuracy_gain_untrained"),
                      ("mcts_gain_trained", "accuracy_gain_trained")):
        summary[name] = e[key]["point"]
        summary[f"{name}_ci"] = [e[key]["low"], e[key]["high"]]
    gain = _interval(per_seed["trained_greedy"] - per_seed["untrained_greedy"], next(keys), reps)
    summary["training_gain_greedy"] = gain["point"]
    summary["training_gain_greedy_ci"] = [gain["low"], gain["high"]]
    return summary


def _plot(summary, out_dir: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.2
    x = np.arange(NUM_LEVELS)
    for i, c in enumerate(CONDITIONS):
        point = np.asarray(summary["accuracy_by_level"][c], np.float64)
        ci = np.asarray(summary["accuracy_by_level_ci"][c], np.float64)  # None -> NaN
        ax.bar(x + (i - 1.5) * width, point, width, label=c,
               yerr=[point - ci[:, 0], ci[:, 1] - point], capsize=2)
    ax.set_xticks(x, [f"level {lv}" for lv in range(NUM_LEVELS)])
    ax.set_ylabel("accuracy (held-out)")
    ax.legend(fontsize=8)
    io.write_figure(out_dir / "accuracy_2x2.png", fig)


def _verdict(effect: dict[str, Any]) -> str:
    """"< 0", "> 0" or "~ 0" from an interval (None bounds: "~ 0")."""
    if effect["high"] is not None and effect["high"] < 0:
        return "< 0"
    if effect["low"] is not None and effect["low"] > 0:
        return "> 0"
    return "~ 0"


_SCALE_WORDS = {
    "accuracy": ("accuracy", "search adds {} less accuracy on top of training than on top "
                 "of the untrained policy", "search adds more accuracy on top of training"),
    "error_ratio": ("error ratio", "search removes a larger share of the trained policy's "
                    "errors", "search removes a smaller share of the trained policy's errors"),
    "logit": ("logit", "search moves the trained policy less on the log-odds scale",
              "search moves the trained policy more on the log-odds scale"),
}


def _scale_sentence(table: dict[str, Any], scale: str) -> str:
    inter = table[f"{scale}_interaction"]
    name, less, more = _SCALE_WORDS[scale]
    verdict = _verdict(inter)
    if verdict == "< 0":
        reading = less.format(format_number(-inter["point"]))
    elif verdict == "> 0":
        reading = more
    else:
        reading = "consistent with additive (the interval contains 0)"
    return (f"{name}: {format_interval(inter['point'], inter['low'], inter['high'])}, "
            f"{reading}")


def report_markdown(summary: dict[str, Any], config: Config) -> str:
    """The study's report.md: the 2 x 2 table, gains and interactions on three scales, all
    levels and below the ceiling, a reading derived from the intervals, the procedure."""
    s = summary
    e = s["effects"]["all_levels"]
    figures = [Figure(c, s["accuracy"][c], *s["accuracy_ci"][c],
                      "by level: " + " / ".join(format_number(v)
                                                for v in s["accuracy_by_level"][c]))
               for c in CONDITIONS]
    figures.append(Figure("training gain, greedy", s["training_gain_greedy"],
                          *s["training_gain_greedy_ci"]))

    def block(table, label):
        rows = []
        for policy in ("untrained", "trained"):
            g = table[f"accuracy_gain_{policy}"]
            rows.append(Figure(f"{label}: MCTS gain, {policy} (accuracy)", g["point"],
                               g["low"], g["high"]))
            r = table[f"errors_removed_{policy}"]
            rows.append(Figure(f"{label}: share of errors MCTS removes, {policy}", r["point"],
                               r["low"], r["high"], "1 - e_M / e_G (geometric mean)"))
            lg = table[f"logit_gain_{policy}"]
            rows.append(Figure(f"{label}: MCTS gain, {policy} (logit)", lg["point"],
                               lg["low"], lg["high"]))
        for scale, note in (("accuracy", "(TM - TG) - (UM - UG)"),
                            ("error_ratio", "log(e_TM/e_TG) - log(e_UM/e_UG)"),
                            ("logit", "logit differences")):
            it = table[f"{scale}_interaction"]
            rows.append(Figure(f"{label}: interaction, {_SCALE_WORDS[scale][0]} scale",
                               it["point"], it["low"], it["high"], note))
        return rows

    figures += block(e, "all levels")
    below = s["effects"]["below_ceiling"]
    if below is not None:
        lvs = s["below_ceiling_levels"]
        figures += block(below, ("level " if len(lvs) == 1 else "levels ")
                         + ", ".join(map(str, lvs)))
    level_lines = ["| level | trained greedy | interaction: accuracy | error ratio | logit |",
                   "|---|---|---|---|---|"]
    for lv in range(NUM_LEVELS):
        t = s["effects"][f"level_{lv}"]
        cells = [format_interval(*(t[f"{sc}_interaction"][k] for k in ("point", "low", "high")))
                 for sc in SCALES]
        flag = " (ceiling)" if lv in s["ceiling_levels"] else ""
        level_lines.append(f"| {lv} | {format_number(s['accuracy_by_level']['trained_greedy'][lv])}"
                           f"{flag} | " + " | ".join(cells) + " |")

    tg = s["accuracy"]["trained_greedy"]
    um_gain = e["accuracy_gain_untrained"]["point"]
    verdicts = {sc: _verdict(e[f"{sc}_interaction"]) for sc in SCALES}
    forced = 1.0 - tg < um_gain
    ceiling_text = (
        f"Trained greedy accuracy is {format_number(tg)}, so on the accuracy scale search can "
        f"add at most {format_number(1.0 - tg)} to the trained policy, less than the "
        f"{format_number(um_gain)} it adds to the untrained one: a negative raw interaction "
        "is forced by the ceiling and says nothing about whether the gains combine."
        if forced else
        f"Trained greedy accuracy is {format_number(tg)}; the ceiling leaves search up to "
        f"{format_number(1.0 - tg)} to add, more than the {format_number(um_gain)} it adds "
        "to the untrained policy, so the raw scale is not forced by the ceiling alone.")
    if len(set(verdicts.values())) > 1:
        overall = ("Whether the gains add up depends on the scale it is asked on, so this "
                   "toy does not answer it without choosing a scale first.")
    elif verdicts["accuracy"] == "~ 0":
        overall = "On all three scales the interaction is consistent with additive gains."
    else:
        overall = ("All three scales agree on the sign of the interaction: "
                   + ("search adds less on top of training." if verdicts["accuracy"] == "< 0"
                      else "search adds more on top of training."))
    below_text = ""
    if below is not None:
        below_text = (
            f" On the levels below the ceiling ({', '.join(map(str, s['below_ceiling_levels']))}"
            "; trained greedy < " f"{CEILING:g}): "
            + "; ".join(_scale_sentence(below, sc) for sc in SCALES) + ".")
    else:
        below_text = (f" Every level is at the ceiling (trained greedy >= {CEILING:g}); no "
                      "below-ceiling reading is possible.")
    ceiling_list = (", ".join(map(str, s["ceiling_levels"])) or "none")
    return "\n".join([
        f"# {NAME}", "", DESCRIPTION + ".", "",
        f"{s['seeds']} seeds, each training its own policy with GRPO ({config.updates} "
        f"updates, outcome reward) and evaluating on {config.problems_per_level} equations per "
        "level drawn per seed from the held-out split (training draws only the other side); "
        f"MCTS = Gumbel MuZero at {config.mcts_budget} evaluations per problem with the "
        "heuristic value.", "",
        figures_table(figures), "",
        "Per level (interaction, mean over seeds, interval in brackets):", "",
        "\n".join(level_lines), "",
        "## Reading", "",
        f"Training moves greedy accuracy by {format_number(s['training_gain_greedy'])}. "
        + ceiling_text + " All levels: "
        + "; ".join(_scale_sentence(e, sc) for sc in SCALES) + "." + below_text + " "
        + overall + f" Levels at the ceiling (trained greedy >= {CEILING:g}): {ceiling_list}; "
        "the threshold is applied to the same data the interactions come from. This is "
        "this implementation on this toy, not a test of the papers' claim.", "",
        "## Procedure", "",
        f"Intervals over seeds: {s['interval_note'].rstrip('.')}; every gain and "
        "interaction is the mean over seeds of a per-seed value computed from the four "
        "conditions of that seed, so "
        "the comparison is paired. Error rates carry a 1/2 continuity correction, "
        "e = (errors + 1/2) / (n + 1), and logits are Cox's empirical logit "
        "log((k + 1/2) / (n - k + 1/2)), so seeds without errors stay finite. The share of "
        "errors removed is 1 - exp(mean log(e_M / e_G)) with the interval mapped through "
        "the same transform. Where the trained policy makes no errors in either condition "
        "(ceiling levels) the error ratio is 0/0 and the correction reads it as 'removes "
        "none', so the error-ratio column is meaningful only below the ceiling.", "",
    ])
