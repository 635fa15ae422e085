"""The figures of the `ppo` and `recurrent-ppo` study pages and of `bench ppo` and `bench lm`
are the committed summaries' (``docs/figures/*.json``) at the pages' rounding: a figure
typed in by hand, or left behind by a re-run, fails.

Each group of figures in ``EXPECTED`` names the page that quotes it: a study's page
``docs/studies/NAME.md`` (``ppo``, ``recurrent-ppo``, ``ppo-cartpole`` for its CartPole
bench, ``lm-grpo`` for ``rljax bench lm``), or :data:`ANY_PAGE` for a figure of the prose
outside the studies (it must be on some page: ``README.md`` or one under ``docs/``). A
figure of the studies table (:class:`InIndex`) must also be in the study's row of
``docs/studies/index.md``. Text is compared with runs of whitespace read as one space, so
re-wrapping a paragraph does not break a pin. The studies with a committed record in
``experiments/figures/`` are checked by ``tests/test_study_figures.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.study_pages import InIndex, flat, index_row, page

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "figures"
ANY_PAGE = "any page"


def _page(name: str) -> str:
    """The text (whitespace flattened) of study ``name``'s page, or of every page for
    :data:`ANY_PAGE`."""
    if name == ANY_PAGE:
        paths = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
        return flat("\n".join(p.read_text() for p in paths if "_build" not in p.parts))
    return page(name)


def _load(name: str) -> dict:
    return json.loads((FIGURES / name).read_text())


def _num(x: float, digits: int, sign: bool = False) -> str:
    text = f"{x:{'+' if sign else ''}.{digits}f}"
    return text.replace("-", "\N{MINUS SIGN}")


def _ci(point: float, low: float, high: float, digits: int, sign: bool = False) -> str:
    return f"{_num(point, digits, sign)} [{_num(low, digits)}, {_num(high, digits)}]"


def _study(name: str, digits: int) -> str:
    s = _load(name)
    return _ci(s["final_return_iqm"], *s["final_return_ci"], digits)


def _eval(name: str, digits: int) -> list[str]:
    """The test-rollout figures (sampled, greedy) of a study run with ``eval_episodes``."""
    s = _load(name)
    return [_ci(s[f"eval_return_{m}_iqm"], *s[f"eval_return_{m}_ci"], digits)
            for m in ("sampled", "mode")]


def _blines() -> list[str]:
    """gymnax-blines' own code re-run (IQM) and its comparison with rljax's Pendulum run."""
    b = _load("blines_ppo_Pendulum-v1.json")
    c = _load("blines_vs_rljax_Pendulum-v1.json")
    p = c["probability_of_improvement"]
    return [InIndex(_ci(b["final_iqm"], *b["final_ci"], 0)),
            InIndex(f"{p['point']:.2f} [{p['low']:.2f}, {p['high']:.2f}]"),
            f"p = {c['mann_whitney_p']:.2f}"]


def _bench(name: str) -> list[str]:
    """A bench row: the like-for-like ratios (median of the rounds' ratios with its interval,
    rljax with rejax's semantics), rljax's defaults' ratios of median times, the returns."""
    s = _load(name)
    matched = " / ".join(
        f"{m['median']:.2f} [{m['ci'][0]:.2f}, {m['ci'][1]:.2f}]"
        for m in (size["ratio_matched_rounds_median"] for size in s["sizes"]))
    ratios = " / ".join(f"{size['ratio']:.2f}" for size in s["sizes"])
    rl, rj = s["returns"]["rljax"], s["returns"]["rejax"]
    digits = 0 if abs(rl["iqm"]) > 100 else 2
    returns = (f"{_ci(rl['iqm'], *rl['ci'], digits)} vs {_ci(rj['iqm'], *rj['ci'], digits)}")
    return [f"| {matched} | {ratios} |", returns]


def _bench_cartpole() -> list[str]:
    """The ppo-cartpole bench: defaults' ratios, same-arithmetic per-round medians [CI],
    and the defaults' 128-seed per-round median [CI]."""
    sizes = _load("bench_ppo_CartPole-v1.json")["sizes"]
    fmt = lambda m: f"{m['median']:.2f} [{m['ci'][0]:.2f}, {m['ci'][1]:.2f}]"  # noqa: E731
    return [" / ".join(f"{s['ratio']:.2f}" for s in sizes),
            " / ".join(fmt(s["ratio_matched_rounds_median"]) for s in sizes),
            f"{fmt(sizes[-1]['ratio_rounds_median'])} per round"]


def _init_threads() -> list[str]:
    """rljax's initialisation at 128 Breakout seeds with one OpenBLAS thread per core and
    with one (``rljax.cpu_threads``), as the bench measured it."""
    init = _load("bench_ppo_Breakout-MinAtar.json")["rljax_init_seconds"]
    per_core, one = f"{init['one_per_core']:.2f}", f"{init['one_thread']:.2f}"
    return [f"took {per_core} s with one OpenBLAS thread per",
            f"core and {one} s with one",
            f"{per_core} s for 128 Breakout seeds, {one} s with one BLAS thread"]


def _bench_lm() -> list[str]:
    """The decoder rows of `rljax bench lm`: parameters, tokens/s, speed-up, memory."""
    out = []
    for size in _load("bench_lm.json")["decoder"]:
        gen, step, mem = size["generation"], size["grpo_step"], size["memory"]
        seconds = step["median_step_seconds"]
        out += [f"{size['num_parameters']:,} params",
                f"{gen['cached']['tokens_per_second']:,.0f} / "
                f"{gen['uncached']['tokens_per_second']:,.0f} ({gen['cache_speedup']:.1f}×)",
                f"{seconds:.{3 if seconds < 1 else 2}f} s, "
                f"{step['tokens_per_second']:,.0f} tokens/s",
                f"= **{mem['ratio']:.2f}**"]
    return out


def _bench_lm_scale() -> list[str]:
    """docs/lm_scale.md's figures of `rljax bench lm-scale`: the memory table's rows, the
    sampler's and the sharding check's."""
    s = _load("bench_lm_scale.json")
    gb = lambda b: f"{b / 1e9:.2f} GB"  # noqa: E731
    out = [f"{s['wall_seconds']:.0f} s, load average {s['load_average_start']:.1f} → "
           f"{s['load_average_end']:.1f}"]
    for row in s["lora"]:
        out.append(f"| {row['num_parameters']:,} | {row['adapter_parameters']:,} | "
                   f"{gb(row['full']['total_bytes'])} | {gb(row['lora']['total_bytes'])} | "
                   f"{row['ratio']:.3f} | {row['state_ratio']:.4f} |")
    big = s["lora"][-1]
    out += [f"({big['full']['argument_bytes'] / 1e9:.2f} GB of arguments at 7 B)",
            f"({big['lora']['argument_bytes'] / 1e9:.2f} GB at 7 B)",
            f"({big['full']['temp_bytes'] / 1e9:.2f} vs {big['lora']['temp_bytes'] / 1e9:.2f}"
            f" GB at 7 B"]
    g = s["sampler"]
    out += [f"(lengths {', '.join(map(str, g['prompt_lengths']))})",
            f"{g['padded']['tokens_per_second']:,.0f} tokens/s",
            f"{g['unpadded']['tokens_per_second']:,.0f} tokens/s, "
            f"{g['padded_speedup']:.1f}× slower",
            f"(same tokens {g['same_tokens_fraction']:.3f})"]
    h = s["sharding"]
    out += [f"within {h['sharded_vs_single_max_abs_diff']:.2e} of its parameters",
            f"within {h['adam_max_abs_diff']:.1e};",
            f"are {h['fsdp_memory_per_device_ratio']:.3f} of the replicated figure "
            f"({h['sharded_bytes_per_device']:,} of {h['replicated_bytes']:,} bytes)",
            f"({h['xla_temp_bytes_per_device']:,} of {h['xla_temp_bytes_single']:,} bytes"]
    return out


def _lm_grpo_word() -> list[str]:
    """The word-problem run's figures on the lm-grpo page (its recorded summary)."""
    s = json.loads((FIGURES / "lm_grpo_word" / "summary.json").read_text())["summary"]

    def iv(key: str, sign: bool = False) -> str:
        low, high = s[f"{key}_ci"]
        return (f"{_num(s[key], 3, sign)} [{_num(low, 3, sign)}, {_num(high, 3, sign)}]")

    gap = s["signal"]["delta_p_low_minus_mid"]
    return [f"| {iv('heldout_greedy_start')} |", f"| {iv('heldout_greedy_grpo')} |",
            f"**{iv('heldout_gain', True)}**", f"| {iv('sampled_gain', True)} |",
            f"| {iv('pass_at_max_k_change', True)} |", f"| {iv('sft_control_heldout')} |",
            f"| {iv('sft_control_minus_grpo', True)} |",
            f"is {_num(gap['point'], 3, True)} [{_num(gap['ci'][0], 3, True)}, "
            f"{_num(gap['ci'][1], 3, True)}] (paired t over "
            f"{gap['seeds']} seeds", f"GRPO / PPO: {s['memory_ratio']:.3f}"]


def _recurrent() -> list[str]:
    s = _load("recurrent_ppo.json")
    gru, ff, diff = s["gru_final_iqm"], s["ff_final_iqm"], s["paired_difference"]
    return [InIndex(_ci(gru["point"], gru["low"], gru["high"], 0)),
            InIndex(_ci(ff["point"], ff["low"], ff["high"], 1)),
            InIndex(_ci(diff["point"], diff["low"], diff["high"], 0, sign=True)),
            f"all {diff['gru_wins']} seeds" if diff["gru_wins"] == s["seeds"] else "never",
            # the page's two tables, row by row
            f"| GRU, width 64 | {_ci(gru['point'], gru['low'], gru['high'], 0)} "
            f"({s['seeds_at_cap']['gru']} of {s['seeds']} seeds at the 500 cap",
            f"| feed-forward MLP 64×64 | {_ci(ff['point'], ff['low'], ff['high'], 1)} |",
            f"| **paired GRU − FF** | "
            f"**{_ci(diff['point'], diff['low'], diff['high'], 0, sign=True)}** (paired t",
            *(f"| {label} | {_num(v['point'], digits)} | "
              f"[{_num(v['low'], digits)}, {_num(v['high'], digits)}] |"
              for label, v, digits in (
                  ("GRU final return, IQM", gru, 0), ("GRU final return, mean",
                                                      s["gru_final_mean"], 0),
                  ("FF final return, IQM", ff, 1), ("FF final return, mean", s["ff_final_mean"], 1),
                  ("paired difference GRU − FF (mean)", diff, 0)))]


def _compare_pendulum() -> list[str]:
    """offpolicy-compare on Pendulum-v1 (SAC vs PPO at 20,000 steps): each method's test
    return IQM and the paired difference."""
    s = _load("offpolicy_compare_Pendulum-v1.json")
    rep = s["report"]
    (pair,) = s["pairs"]
    return [f"SAC {_ci(rep['sac']['iqm'], *rep['sac']['ci'], 0)}",
            f"PPO {_ci(rep['ppo']['iqm'], *rep['ppo']['ci'], 0)}",
            f"{_ci(pair['difference'], *pair['ci'], 0)}"]


def _compare_breakout() -> list:
    """offpolicy-compare on Breakout-MinAtar (PPO, DQN, PQN at 250,000 steps): each
    method's tuning IQMs, test return IQM (in the index row too) and the paired
    differences."""
    s = _load("offpolicy_compare_Breakout-MinAtar.json")
    rep = s["report"]
    digits = {"ppo": 1, "dqn": 1, "pqn": (1, 2)}
    out: list = [" / ".join(f"{x:.1f}" for x in s["tuning"][m]["iqm"])
                 for m in ("ppo", "dqn", "pqn")]  # the tuning table's cells
    for method, label in (("ppo", "PPO"), ("dqn", "DQN"), ("pqn", "PQN")):
        d = digits[method]
        point, low, high = rep[method]["iqm"], *rep[method]["ci"]
        text = (f"{_num(point, d[0])} [{_num(low, d[1])}, {_num(high, d[0])}]"
                if isinstance(d, tuple) else _ci(point, low, high, d))
        out.append(InIndex(f"{label} {text}"))
    pairs = {(p["a"], p["b"]): p for p in s["pairs"]}
    dqn_pqn = pairs[("dqn", "pqn")]
    ppo_pqn = pairs[("ppo", "pqn")]
    ppo_dqn = pairs[("ppo", "dqn")]
    def signed(p, d_point, d_low, d_high):
        return (f"{_num(p['difference'], d_point, True)} [{_num(p['ci'][0], d_low, True)}, "
                f"{_num(p['ci'][1], d_high, True)}]")

    out += [f"DQN − PQN {signed(dqn_pqn, 1, 1, 1)}", f"PPO − PQN {signed(ppo_pqn, 2, 2, 2)}",
            f"PPO − DQN {signed(ppo_dqn, 2, 1, 2)}",
            f"P(DQN > PQN) {dqn_pqn['p_a_better']:.2f}",
            f"P(PPO > PQN) {ppo_pqn['p_a_better']:.2f}",
            f"P(PPO > DQN) {ppo_dqn['p_a_better']:.2f}"]
    return out


def _sac_normalized() -> list[str]:
    """sac on Pendulum-v1 with the env-side observation normaliser, on the default run's
    16 seeds: its test return IQM, the seeds below -500, and the paired difference against
    the committed default run (experiments/figures/sac.json)."""
    import jax

    from rljax.stats.reported import reported_interval

    record = _load("sac_env_Pendulum-v1_normalized.json")
    raw = json.loads((ROOT / "experiments" / "figures" / "sac.json").read_text())
    s, r = record["summary"], raw["summary"]
    x, y = s["test_returns"], r["test_returns"]
    diff = reported_interval("paired_difference", x, y, key=jax.random.key(0))
    below = sum(v < -500 for v in x)
    return [_ci(s["test_return_iqm"], *s["test_return_ci"], 0),
            f"{below} of {len(x)} seeds below −500",
            _ci(r["test_return_iqm"], *r["test_return_ci"], 0),
            f"normalised − raw is {_ci(diff.point, diff.low, diff.high, 0)}"]


EXPECTED = {  # name: (the page that quotes them, the figures)
    "ppo Pendulum-v1 (gymnax-blines)": ("ppo", [_study("ppo_env_Pendulum-v1.json", 0),
                                                *_eval("ppo_env_Pendulum-v1.json", 0)]),
    "ppo Pendulum-v1, 32 seeds": ("ppo", [_study("ppo_env_Pendulum-v1_32_seeds.json", 0),
                                          InIndex(_eval("ppo_env_Pendulum-v1_32_seeds.json",
                                                        0)[0])]),
    "ppo Pendulum-v1 (gaussian_scale=parameter)": ("ppo", [
        _study("ppo_env_Pendulum-v1_parameter_scale.json", 0),
        _eval("ppo_env_Pendulum-v1_parameter_scale.json", 0)[0]]),
    "ppo Pendulum-v1 (normalize_rewards)": ("ppo", [
        InIndex(_study("ppo_env_Pendulum-v1_normalize_rewards.json", 0)),
        *_eval("ppo_env_Pendulum-v1_normalize_rewards.json", 0)]),
    "ppo Breakout-MinAtar (rejax)": ("ppo", [_study("ppo_env_Breakout-MinAtar.json", 2)]),
    "ppo Breakout-MinAtar (gymnax-blines)": ("ppo", [
        InIndex(_study("ppo_env_Breakout-MinAtar_blines.json", 1)),
        *_eval("ppo_env_Breakout-MinAtar_blines.json", 1)]),
    "gymnax-blines' own code on Pendulum-v1": ("ppo", _blines()),
    "bench ppo CartPole-v1 (ppo-cartpole)": ("ppo-cartpole", _bench_cartpole()),
    "bench ppo Pendulum-v1": ("ppo", _bench("bench_ppo_Pendulum-v1.json")),
    "bench ppo Breakout-MinAtar": ("ppo", _bench("bench_ppo_Breakout-MinAtar.json")),
    "bench ppo brax:inverted_pendulum": ("ppo", _bench("bench_ppo_brax_inverted_pendulum.json")),
    "recurrent-ppo": ("recurrent-ppo", _recurrent()),
    "one BLAS thread (rljax.cpu_threads), ppo page": ("ppo", _init_threads()[2:]),
    "one BLAS thread (rljax.cpu_threads), seeds prose": (ANY_PAGE, _init_threads()[:2]),
    "bench lm (decoder)": ("lm-grpo", _bench_lm()),
    "bench lm-scale": (ANY_PAGE, _bench_lm_scale()),
    "offpolicy-compare Pendulum-v1 (SAC vs PPO)": ("offpolicy-compare", _compare_pendulum()),
    "sac Pendulum-v1 with the observation normaliser": ("sac", _sac_normalized()),
    "offpolicy-compare Breakout-MinAtar (PPO, DQN, PQN)": ("offpolicy-compare",
                                                           _compare_breakout()),
    "lm-grpo on word problems (BPE, LoRA)": ("lm-grpo", _lm_grpo_word()),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_page_quotes_the_committed_figure(name):
    where, texts = EXPECTED[name]
    page = _page(where)
    for text in texts:
        assert flat(text) in page, (
            f"{name}: no page quotes {text!r}" if where == ANY_PAGE
            else f"{name}: docs/studies/{where}.md does not quote {text!r}")
        if isinstance(text, InIndex):
            assert flat(text) in index_row(where), (
                f"{name}: docs/studies/index.md's row of {where} does not quote {text!r}")


def test_the_pages_pin_figures_of_the_index():
    assert any(isinstance(t, InIndex) for _, texts in EXPECTED.values() for t in texts)


def test_the_normalize_rewards_run_used_the_wrapper_and_the_published_preset():
    s = _load("ppo_env_Pendulum-v1_normalize_rewards.json")
    assert "NormalizeReward" in s["wrappers"] and s["preset"] == "gymnax-blines"
    blines = _load("ppo_env_Pendulum-v1.json")
    assert "NormalizeReward" not in blines["wrappers"] and blines["seeds"] == s["seeds"] == 16


def test_the_blines_comparison_is_of_the_committed_runs():
    """The comparison file was made from the committed 32-seed Pendulum run and re-run:
    same per-seed values, same config, and the published values are the logs'. The 32-seed
    run's first 16 seeds are the table's 16-seed run, bit for bit (fixed seed blocks of 16:
    seed i's result does not depend on how many seeds share the run)."""
    rljax = _load("ppo_env_Pendulum-v1_32_seeds.json")
    blines = _load("blines_ppo_Pendulum-v1.json")
    c = _load("blines_vs_rljax_Pendulum-v1.json")
    assert c["rljax"]["iqm"] == rljax["eval_return_sampled_iqm"]
    assert c["rljax"]["seeds"] == len(rljax["eval_returns_sampled"]) == rljax["seeds"] == 32
    assert c["blines"]["iqm"] == blines["final_iqm"] and c["blines"]["seeds"] == 32
    assert blines["seeds"] == list(range(32))
    sixteen = _load("ppo_env_Pendulum-v1.json")
    assert rljax["block_size"] == sixteen["block_size"] == 16
    for key in ("final_returns", "eval_returns_sampled", "eval_returns_mode"):
        assert rljax[key][:16] == sixteen[key], key
    assert rljax["hyperparameters"] == sixteen["hyperparameters"]
    coverage = c["probability_of_improvement"]["coverage"]
    assert coverage["trials"] >= 1000 and min(coverage["observed"], coverage["normal"]) > 0.9
    assert c["rljax_hyperparameters"] == rljax["hyperparameters"]
    config = blines["train_config"]
    hp = rljax["hyperparameters"]
    assert (config["num_train_envs"], config["n_steps"], float(config["lr_begin"]),
            config["num_train_steps"]) == (hp["num_envs"], hp["num_steps"],
                                           hp["learning_rate"], hp["total_steps"])
    assert hp["gaussian_scale"] == "softplus"
    assert rljax["published_return"] == -200.6


def test_the_sac_normaliser_run_is_paired_with_the_default_run():
    """The normaliser run differs from the committed default sac run only in
    normalize_observations (same seeds, keys and trainer fields), so the page's paired
    difference pairs like with like."""
    record = _load("sac_env_Pendulum-v1_normalized.json")
    raw = json.loads((ROOT / "experiments" / "figures" / "sac.json").read_text())
    assert record["config"]["normalize_observations"] is True
    assert raw["config"]["normalize_observations"] is False
    differ = {k for k in record["config"] if record["config"][k] != raw["config"].get(k)}
    assert differ == {"normalize_observations"}, differ
