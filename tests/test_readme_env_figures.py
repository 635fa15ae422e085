"""The README's figures for `ppo --env`, `bench ppo --env`, `recurrent-ppo` and `bench lm`
are the committed summaries' (``docs/figures/*.json``) at the README's rounding: a figure
typed in by hand, or left behind by a re-run, fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
FIGURES = ROOT / "docs" / "figures"


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


def _bench(name: str) -> list[str]:
    s = _load(name)
    ratios = " / ".join(f"{size['ratio']:.2f}" for size in s["sizes"])
    rl, rj = s["returns"]["rljax"], s["returns"]["rejax"]
    digits = 0 if abs(rl["iqm"]) > 100 else 2
    returns = (f"{_ci(rl['iqm'], *rl['ci'], digits)} vs {_ci(rj['iqm'], *rj['ci'], digits)}")
    return [ratios, returns]


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


def _recurrent() -> list[str]:
    s = _load("recurrent_ppo.json")
    gru, ff, diff = s["gru_final_iqm"], s["ff_final_iqm"], s["paired_difference"]
    return [_ci(gru["point"], gru["low"], gru["high"], 0),
            _ci(ff["point"], ff["low"], ff["high"], 1),
            _ci(diff["point"], diff["low"], diff["high"], 0, sign=True),
            f"all {diff['gru_wins']} seeds" if diff["gru_wins"] == s["seeds"] else "never"]


EXPECTED = {
    "ppo Pendulum-v1 (gymnax-blines)": [_study("ppo_env_Pendulum-v1.json", 0),
                                        *_eval("ppo_env_Pendulum-v1.json", 0)],
    "ppo Pendulum-v1 (normalize_rewards)": [
        _study("ppo_env_Pendulum-v1_normalize_rewards.json", 0),
        *_eval("ppo_env_Pendulum-v1_normalize_rewards.json", 0)],
    "ppo Breakout-MinAtar (rejax)": [_study("ppo_env_Breakout-MinAtar.json", 2)],
    "bench ppo Pendulum-v1": _bench("bench_ppo_Pendulum-v1.json"),
    "bench ppo Breakout-MinAtar": _bench("bench_ppo_Breakout-MinAtar.json"),
    "recurrent-ppo": _recurrent(),
    "bench lm (decoder)": _bench_lm(),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_readme_quotes_the_committed_figure(name):
    for text in EXPECTED[name]:
        assert text in README, f"{name}: README does not quote {text!r}"


def test_the_normalize_rewards_run_used_the_wrapper_and_the_published_preset():
    s = _load("ppo_env_Pendulum-v1_normalize_rewards.json")
    assert "NormalizeReward" in s["wrappers"] and s["preset"] == "gymnax-blines"
    blines = _load("ppo_env_Pendulum-v1.json")
    assert "NormalizeReward" not in blines["wrappers"] and blines["seeds"] == s["seeds"] == 16
