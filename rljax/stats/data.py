"""Published per-run Atari 100k scores shipped with rljax (``rljax/data/atari100k``).

The files are byte copies of the per-run scores released with Agarwal et al., "Deep RL at
the Edge of the Statistical Precipice" (NeurIPS 2021); see ``PROVENANCE.md`` and
``SHA256SUMS`` beside them. Human-normalised score: ``(score - random) / (human - random)``.
"""

from __future__ import annotations

import json
from importlib import resources

import numpy as np

ATARI100K_ALGORITHMS = ("SPR", "DrQ(eps)", "CURL", "IRIS", "SimPLe")
"""The agents whose published Atari 100k per-run scores ship with rljax
(:func:`atari100k_scores`)."""
_FILES = {"SPR": "SPR.json", "DrQ(eps)": "DrQ(eps).json", "IRIS": "IRIS.json",
          "SimPLe": "SimPLe.json", "CURL": "CURL_10_evals.json"}


def _read(name: str):
    path = resources.files("rljax").joinpath("data").joinpath("atari100k").joinpath(name)
    return json.loads(path.read_text())


def atari100k_games() -> list[str]:
    """The 26 Atari 100k games, sorted by name."""
    return sorted(_read("HUMAN.json"))


def atari100k_reference_scores() -> tuple[np.ndarray, np.ndarray]:
    """``(random [26], human [26])`` reference scores in :func:`atari100k_games` order."""
    games = atari100k_games()
    human, random = _read("HUMAN.json"), _read("RANDOM.json")
    return (np.array([random[g][0] for g in games], np.float64),
            np.array([human[g][0] for g in games], np.float64))


def atari100k_scores(normalize: bool = True,
                     algorithms: tuple[str, ...] = ATARI100K_ALGORITHMS) -> dict[str, np.ndarray]:
    """Per-run final scores ``{algorithm: [num_runs, 26]}`` of published Atari 100k agents.

    SPR and DrQ(eps): 100 runs; CURL: 100 runs (released already human-normalised, key
    ``HNS``); IRIS and SimPLe: 5 runs. Columns follow :func:`atari100k_games`.

    Args:
      normalize: human-normalise raw returns, ``(score - random) / (human - random)``.
        CURL is only available normalised, so it is left out when ``normalize=False``.
      algorithms: which of :data:`ATARI100K_ALGORITHMS` to load.

    Returns:
      ``{algorithm: float64 [num_runs, 26]}``.
    """
    unknown = [a for a in algorithms if a not in _FILES]
    if unknown:
        raise ValueError(f"algorithms must be among {ATARI100K_ALGORITHMS}, got {unknown}")
    games = atari100k_games()
    random, human = atari100k_reference_scores()
    out = {}
    for algo in algorithms:
        data = _read(_FILES[algo])
        if algo == "CURL":
            if not normalize:
                continue
            table = {}
            for row in data:
                table.setdefault(row["game"], {})[int(row["seed"])] = row["HNS"]
            seeds = sorted(table[games[0]])
            out[algo] = np.array([[table[g][s] for g in games] for s in seeds], np.float64)
            continue
        raw = np.array([data[g] for g in games], np.float64).T  # [runs, games]
        out[algo] = (raw - random) / (human - random) if normalize else raw
    return out
