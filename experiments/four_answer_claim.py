"""The four-answer study's verdict on the post's GRPO claim, from a rate x beta sweep.

The post (:data:`CLAIM`): with groups of 8, 60 GRPO steps take p(correct) from 0.20 to
0.99 without a KL penalty and to 0.94 with one, naming no optimizer, rate or beta.

Each swept cell (optimizer, learning rate, clip, beta) is summarised by the **median over
seeds of p(correct) after the last step** with its 95 % interval
(:func:`rljax.stats.reported.reported_interval`, exact order-statistic). A claimed figure
``c`` is compared with a cell by :func:`claim_status`:

* ``"matches"``: the interval meets ``[c - CLAIM_TOLERANCE, c + CLAIM_TOLERANCE]`` and is
  no wider than that window. The
  claim prints two decimals, so "0.99" stands for any value that rounds to it: the
  tolerance is half a unit of the last printed digit, 0.005.
* ``"above"``: the whole interval lies above ``c + CLAIM_TOLERANCE``. Near the ceiling
  (``p -> 1``) this says "at least c", never "= c": a median of 0.9995 [0.9994, 0.9996]
  exceeds 0.99, it does not reproduce it.
* ``"below"``: the whole interval lies below ``c - CLAIM_TOLERANCE``.
* ``"unresolved"``: the interval meets the window but is wider than it (the seeds do not
  pin the median down to the claim's precision); counted as neither.

Between grid points a figure is located by a *bracket*: the adjacent grid points whose
medians straddle it, with a linear interpolation as a point estimate (no interval is
published for it: its coverage is not measured).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

#: The post's claim about GRPO from this policy (steps, group size, p(correct) figures).
CLAIM = {"steps": 60, "group_size": 8, "p_start": 0.20, "p_no_kl": 0.99, "p_kl": 0.94}
CLAIM_TEXT = ("GRPO with groups of 8 takes p(correct) from 0.20 to 0.99 in 60 steps without "
              "a KL penalty, and to 0.94 with one")
#: Half a unit of the claim's last printed digit: a cell reproduces a claimed figure ``c``
#: when its interval meets ``[c - CLAIM_TOLERANCE, c + CLAIM_TOLERANCE]``.
CLAIM_TOLERANCE = 0.005
STATUSES = ("below", "matches", "above", "unresolved", "unknown")


def claim_status(low: float, high: float, claimed: float,
                 tolerance: float = CLAIM_TOLERANCE) -> str:
    """How a measured 95 % interval ``[low, high]`` stands to a claimed figure.

    With the claim's window ``W = [claimed - tolerance, claimed + tolerance]``:
    ``"below"`` if ``high < W.low``; ``"above"`` if ``low > W.high``; otherwise the
    interval is consistent with the claim, and it is ``"matches"`` when the interval is
    no wider than ``W`` (the data resolve the claim's precision) and ``"unresolved"``
    when it is wider (e.g. a bimodal cell whose seeds either converge or collapse). A
    NaN bound (a cell with non-finite seeds) gives ``"unknown"``.
    """
    if math.isnan(low) or math.isnan(high):
        return "unknown"
    if high < claimed - tolerance:
        return "below"
    if low > claimed + tolerance:
        return "above"
    return "matches" if high - low <= 2 * tolerance else "unresolved"


def crossing(xs: Sequence[float], ys: Sequence[float], level: float, *,
             log_x: bool = False, falling: bool = False) -> dict[str, float] | None:
    """The first adjacent pair of grid points whose ``ys`` straddle ``level``.

    Args:
      xs: ``[n]`` increasing grid values.
      ys: ``[n]`` medians at them.
      level: the figure located.
      log_x: interpolate in ``log x`` (a log grid of rates) instead of ``x``.
      falling: look for ``y_a >= level > y_b`` (medians falling with x, e.g. beta);
        default rising, ``y_a < level <= y_b``.

    Returns:
      ``{"low": x_a, "high": x_b, "interpolated": x*}`` with ``x*`` linear in ``x`` (or
      ``log x``) between the pair, or ``None`` when no pair straddles ``level``.
    """
    for i in range(len(xs) - 1):
        a, b = ys[i], ys[i + 1]
        hit = (a >= level > b) if falling else (a < level <= b)
        if not hit or math.isnan(a) or math.isnan(b):
            continue
        xa, xb = xs[i], xs[i + 1]
        t = (level - a) / (b - a)
        if log_x:
            x = math.exp(math.log(xa) + t * (math.log(xb) - math.log(xa)))
        else:
            x = xa + t * (xb - xa)
        return {"low": float(xa), "high": float(xb), "interpolated": float(x)}
    return None


def _setting_key(cell: dict[str, Any]) -> tuple:
    return cell["optimizer"], cell["learning_rate"], cell["clip_epsilon"]


def _label(setting: tuple, show_clip: bool) -> str:
    opt, lr, clip = setting
    return f"{opt} lr {lr:g}" + (f" clip {clip:g}" if show_clip else "")


def p4(x: float) -> str:
    """A probability (scalar) at four decimals; ``>0.9999`` for one below 1 that would
    print as 1.0000 (a ceiling is not 1)."""
    text = f"{x:.4f}"
    return ">0.9999" if text == "1.0000" and x < 1 else text


def verdict(cells: Sequence[dict[str, Any]], *, steps: int, group_size: int,
            seeds: int, paired_gap: Callable[[int, int], list[float]] | None = None,
            ) -> dict[str, Any]:
    """The verdict on :data:`CLAIM` from the swept cells.

    Args:
      cells: one dict per configuration with ``optimizer``, ``learning_rate``,
        ``kl_beta``, ``clip_epsilon`` and the median of the final p(correct) over seeds
        with its 95 % interval: ``median``, ``low``, ``high`` (NaN for a cell with
        non-finite seeds).
      steps, group_size: the GRPO run's setting (the claim's is 60 steps, groups of 8).
      seeds: seeds per cell (for the text).
      paired_gap: optional ``(config a, config b) -> [mean, low, high]``, the mean paired
        difference over seeds of cell ``a`` minus cell ``b`` with its interval (cells
        carry their config id in ``config``); given, each setting reaching 0.99 gets the
        gap between its beta = 0 cell and its cell nearest 0.94 among those matching it.

    Returns:
      ``{"text": str, "same_setting": bool, "tolerance": float, "no_kl": [...],
      "reaches_no_kl": [...], "rate_brackets": [...], "kl_beta_for_0.94": [...],
      "both_figures": [...], "both_figures_between_grid_points": [...],
      "both_figures_at_or_above": [...], "figures_reproduced": bool}``. A *setting* is
      ``(optimizer, learning_rate, clip_epsilon)``; ``no_kl`` lists every setting's
      beta = 0 cell with its :func:`claim_status` against 0.99; ``reaches_no_kl`` those
      matching or above; ``kl_beta_for_0.94`` for each of those the grid betas whose
      cell matches 0.94 and the bracket where the median falls through 0.94;
      ``both_figures`` the settings matching 0.99 at beta = 0 *and* 0.94 at a grid beta;
      ``..._between_grid_points`` those matching 0.99 whose 0.94 lies only between grid
      betas; ``..._at_or_above`` the same with 0.99 exceeded (a ceiling: >= 0.99).
      ``figures_reproduced`` is true when ``both_figures`` or its between-grid-points
      list is non-empty.
    """
    p_no_kl, p_kl = CLAIM["p_no_kl"], CLAIM["p_kl"]
    by_setting: dict[tuple, list[dict[str, Any]]] = {}
    for cell in cells:
        by_setting.setdefault(_setting_key(cell), []).append(cell)
    for group in by_setting.values():
        group.sort(key=lambda c: c["kl_beta"])
    show_clip = len({k[2] for k in by_setting}) > 1
    no_kl, reaching, brackets, betas_for_kl = [], [], [], []
    for setting, group in by_setting.items():
        zero = [c for c in group if c["kl_beta"] == 0]
        if not zero:
            continue
        status = claim_status(zero[0]["low"], zero[0]["high"], p_no_kl)
        entry = {"setting": _label(setting, show_clip), "optimizer": setting[0],
                 "learning_rate": setting[1], "clip_epsilon": setting[2],
                 "median": zero[0]["median"], "ci": [zero[0]["low"], zero[0]["high"]],
                 "status": status}
        no_kl.append(entry)
        if status not in ("matches", "above"):
            continue
        reaching.append(entry)
        matched = [c["kl_beta"] for c in group
                   if c["kl_beta"] > 0 and claim_status(c["low"], c["high"], p_kl) == "matches"]
        bracket = crossing([c["kl_beta"] for c in group], [c["median"] for c in group],
                           p_kl, falling=True)
        ends = {}
        if bracket is not None:
            ends = {side: next(c for c in group if c["kl_beta"] == bracket[side])
                    for side in ("low", "high")}
        found = {
            "setting": entry["setting"], "no_kl_status": status, "matching_betas": matched,
            "bracket": bracket,
            "collapse": bool(ends) and ends["high"]["median"] < CLAIM["p_start"],
            "bracket_cells": {s: {"median": c["median"], "ci": [c["low"], c["high"]]}
                              for s, c in ends.items()}}
        if paired_gap is not None and matched:
            near = min((c for c in group if c["kl_beta"] in matched),
                       key=lambda c: abs(c["median"] - p_kl))
            found["kl_gap"] = {"kl_beta": near["kl_beta"],
                               "mean_ci": list(paired_gap(zero[0]["config"], near["config"]))}
        betas_for_kl.append(found)
    for opt, clip in sorted({(k[0], k[2]) for k in by_setting}):
        zeros = sorted((e for e in no_kl
                        if e["optimizer"] == opt and e["clip_epsilon"] == clip),
                       key=lambda e: e["learning_rate"])
        hit = crossing([e["learning_rate"] for e in zeros], [e["median"] for e in zeros],
                       p_no_kl, log_x=True)
        if hit is not None:
            brackets.append({"optimizer": opt, "clip_epsilon": clip, **hit})
    both = [b["setting"] for b in betas_for_kl
            if b["no_kl_status"] == "matches" and b["matching_betas"]]
    between = [b["setting"] for b in betas_for_kl if b["no_kl_status"] == "matches"
               and not b["matching_betas"] and b["bracket"] is not None and not b["collapse"]]
    ceiling = [b["setting"] for b in betas_for_kl if b["no_kl_status"] == "above"
               and (b["matching_betas"] or (b["bracket"] is not None and not b["collapse"]))]
    same = steps == CLAIM["steps"] and group_size == CLAIM["group_size"]
    details = {
        "same_setting": bool(same), "tolerance": CLAIM_TOLERANCE, "no_kl": no_kl,
        "reaches_no_kl": [e["setting"] for e in reaching], "rate_brackets": brackets,
        "kl_beta_for_0.94": betas_for_kl, "both_figures": both,
        "both_figures_between_grid_points": between, "both_figures_at_or_above": ceiling,
        "figures_reproduced": bool(both or between),
    }
    details["text"] = _verdict_text(details, steps=steps, group_size=group_size, seeds=seeds)
    return details


def _list(items: Sequence[str]) -> str:
    return ", ".join(items) if items else "none"


def _verdict_text(d: dict[str, Any], *, steps: int, group_size: int, seeds: int) -> str:
    setting = (f"{steps} steps, groups of {group_size}"
               + ("" if d["same_setting"] else f" (the claim's setting is {CLAIM['steps']} "
                  f"steps, groups of {CLAIM['group_size']})"))
    tol = d["tolerance"]
    head = (f"Statistic: the median over {seeds} seeds of p(correct) after {steps} steps, "
            f"with its 95 % interval; a figure c is matched when the interval meets the "
            f"window [c - {tol:g}, c + {tol:g}] (the claim's two decimals) and is no wider "
            f"than it, exceeded when it lies above the window (a ceiling: >= c, not = c), "
            f"missed when below. Setting: {setting}.")
    if not d["no_kl"]:
        return head + " The grid has no beta = 0 cell, so the claim's 0.99 is not judged."
    by_status = {s: [f"{e['setting']} ({p4(e['median'])} [{p4(e['ci'][0])}, "
                     f"{p4(e['ci'][1])}])" for e in d["no_kl"] if e["status"] == s]
                 for s in STATUSES}
    def names(status):
        return _list([s.split(" (")[0] for s in by_status[status]])

    one = (f"(1) Without KL, 0.99 is matched by {_list(by_status['matches'])}; exceeded "
           f"(>= 0.99, not = 0.99) by {names('above')}; missed by {names('below')}.")
    if by_status["unresolved"] or by_status["unknown"]:
        one += (f" Unresolved (interval wider than the window): {names('unresolved')}; "
                f"non-finite seeds: {names('unknown')}.")
    for b in d["rate_brackets"]:
        one += (f" For {b['optimizer']} the median crosses 0.99 between lr {b['low']:g} and "
                f"{b['high']:g} (log-interpolated {b['interpolated']:.3g}).")
    two = ("(2) At those settings 0.94 is given by "
           + "; ".join(_where_094(b) for b in d["kl_beta_for_0.94"]) + "."
           if d["kl_beta_for_0.94"] else
           "(2) No setting reaches 0.99 without KL, so (2) does not arise.")
    strict, between = d["both_figures"], d["both_figures_between_grid_points"]
    if strict or between:
        found = ([f"{_list(strict)} (0.94 at a grid beta)"] if strict else []) + (
            [f"{_list(between)} (0.94 between grid betas)"] if between else [])
        three = ("(3) Yes, single settings give both figures (0.99 matched at beta 0, 0.94 "
                 f"with KL): {'; '.join(found)}.")
    else:
        three = "(3) No single setting on the grid matches 0.99 without KL and 0.94 with KL."
    if d["both_figures_at_or_above"]:
        three += (" Read as 'at least 0.99' without KL (a ceiling, not the figure), also "
                  f"{_list(d['both_figures_at_or_above'])}.")
    return " ".join([head, one, two, three])


def _where_094(b: dict[str, Any]) -> str:
    """One setting's answer to (2): matching grid betas, the bracket, or a collapse."""
    out = []
    if b["matching_betas"]:
        text = "beta " + ", ".join(f"{x:g}" for x in b["matching_betas"]) + " matches"
        if "kl_gap" in b:
            mean, low, high = b["kl_gap"]["mean_ci"]
            text += (f" (beta 0 minus beta {b['kl_gap']['kl_beta']:g}: {p4(mean)} "
                     f"[{p4(low)}, {p4(high)}], mean paired difference)")
        out.append(text)
    if b["bracket"] is not None:
        lo, hi = b["bracket"]["low"], b["bracket"]["high"]
        m_lo, m_hi = (b["bracket_cells"][k]["median"] for k in ("low", "high"))
        if b["collapse"]:
            out.append(f"the run collapses between beta {lo:g} ({p4(m_lo)}) and {hi:g} "
                       f"({p4(m_hi)})")
        else:
            out.append(f"the median falls through 0.94 between beta {lo:g} ({p4(m_lo)}) and "
                       f"{hi:g} ({p4(m_hi)}), interpolated {b['bracket']['interpolated']:.3g}")
    if not out:
        out.append("the median stays above 0.94 on the whole grid")
    return f"{b['setting']}: " + ", ".join(out)
