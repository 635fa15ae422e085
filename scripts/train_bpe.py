"""Regenerate the shipped BPE (``rljax/data/bpe/``) from the text tasks' generated text.

Trains :func:`rljax.text_tokenizer.train_bpe` on
:func:`rljax.envs.text_problems.bpe_corpus` and writes ``tokenizer.json`` and
``tokenizer_config.json`` (``<|pad|>``, ``<|bos|>``, ``<|eos|>``: ids 0, 1, 2). Training is
deterministic, so the files come out bitwise the same; ``tests/test_text_tasks.py`` fails
while the shipped files differ from a re-training (after changing a generator, run)::

    python scripts/train_bpe.py
"""

from __future__ import annotations

from rljax.envs.text_problems import bpe_corpus
from rljax.policies.hf_checkpoint import save_hf_tokenizer
from rljax.text_tokenizer import BPE_VOCAB_SIZE, bpe_directory, train_bpe


def main() -> None:
    """Train and write the shipped BPE; print where and its size."""
    tokenizer = train_bpe(bpe_corpus(), BPE_VOCAB_SIZE)
    directory = save_hf_tokenizer(bpe_directory(), tokenizer, overwrite=True)
    print(f"{directory}: {tokenizer.vocab_size} ids")


if __name__ == "__main__":
    main()
