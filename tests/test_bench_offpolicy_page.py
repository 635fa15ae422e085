"""The `rljax bench offpolicy` page quotes its committed run: the tables on
docs/offpolicy_bench.md are ``experiments.benchmarks.offpolicy.table`` of
docs/figures/bench_offpolicy.json, verbatim (a number typed in by hand, or left behind by
a re-run, fails)."""

import json
from pathlib import Path

from experiments.benchmarks import offpolicy

ROOT = Path(__file__).resolve().parents[1]


def test_page_tables_are_the_committed_runs():
    record = json.loads((ROOT / "docs" / "figures" / "bench_offpolicy.json").read_text())
    assert set(record["algorithms"]) == {"dqn", "pqn", "sac"}
    page = (ROOT / "docs" / "offpolicy_bench.md").read_text()
    assert offpolicy.table(record).strip() in page
