"""Measure how much the sweep's block size moves the orm-vs-prm numbers.

XLA compiles one program per block shape; on CPU the vectorised code differs between
shapes in the last bits, a sampled action can flip, and from then on that seed's run
differs. This script runs the same seeds at several block sizes and reports, per pair:
the fraction of seeds whose success sequence differs at all, and the shift in the study's
headline figures (which should be within Monte Carlo noise).

    python scripts/block_size_effect.py [--seeds 4096] [--blocks 1024,256,4096]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from experiments.orm_vs_prm import episodes_to_threshold
from rljax.sweep import Sweep
from rljax.training.chain import make_chain_train


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=4096)
    parser.add_argument("--blocks", default="1024,256,4096")
    args = parser.parse_args()
    blocks = [int(b) for b in args.blocks.split(",")]
    report = {}
    for mode in ("orm", "prm"):
        train = make_chain_train(mode=mode)
        outs = {b: Sweep(train, block_size=b).run(args.seeds, progress=False).outputs
                for b in blocks}
        runs = {b: o["success"] for b, o in outs.items()}
        logits = {b: o["final_logits"] for b, o in outs.items()}
        ref = blocks[0]
        for b in blocks[1:]:
            differ = np.any(runs[ref] != runs[b], axis=1)
            e_ref = episodes_to_threshold(runs[ref], 30, 0.5, True)
            e_b = episodes_to_threshold(runs[b], 30, 0.5, True)
            logit_diff = np.abs(logits[ref] - logits[b]).reshape(args.seeds, -1).max(axis=1)
            report[f"{mode} block {ref} vs {b}"] = {
                "seeds_differing_fraction": float(differ.mean()),
                "seeds_with_different_logit_bits": float(np.mean(logit_diff > 0)),
                "max_abs_logit_difference": float(logit_diff.max()),
                "ep50_median": [float(np.median(e_ref)), float(np.median(e_b))],
                "final_success": [float(runs[ref][:, -30:].mean()),
                                  float(runs[b][:, -30:].mean())],
            }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
