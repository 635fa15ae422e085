"""A character-level tokenizer for arithmetic text.

Ids ``0, 1, 2`` are the special tokens PAD, BOS and EOS; the alphabet's characters follow
in order, so with the default alphabet ``"0123456789+-*=x;"`` digit ``d`` has id ``3 + d``.
The tokenizer lives below ``envs`` and ``policies`` because both need its ids: the
arithmetic tasks write prompts as token arrays inside jit, and the LM reads them.

Layout used throughout rljax: a prompt is ``[BOS, chars...]`` **left**-padded with PAD to
a fixed prompt length (so every prompt ends at the same column and generation starts
there); a completion is ``[chars..., EOS]`` **right**-padded with PAD.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ARITHMETIC_ALPHABET = "0123456789+-*=x;"
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
NUM_SPECIAL = 3


@dataclass(frozen=True)
class CharTokenizer:
    """Characters of ``alphabet`` <-> int ids (``PAD=0, BOS=1, EOS=2``, then the alphabet).

    A string of ``L`` characters encodes to int32 ids ``[L]`` (numpy, on the host); token
    arrays of any shape decode back to text.

    Attributes:
      alphabet: the allowed characters, each once.
    """

    alphabet: str = ARITHMETIC_ALPHABET

    def __post_init__(self):
        if not self.alphabet or len(set(self.alphabet)) != len(self.alphabet):
            raise ValueError(f"alphabet: must be non-empty characters without repeats, got "
                             f"{self.alphabet!r}")

    pad_id = PAD_ID
    bos_id = BOS_ID
    eos_id = EOS_ID

    @property
    def vocab_size(self) -> int:
        """``3 + len(alphabet)``."""
        return NUM_SPECIAL + len(self.alphabet)

    def id_of(self, char: str) -> int:
        """The id of one alphabet character (``ValueError`` naming it otherwise)."""
        index = self.alphabet.find(char) if len(char) == 1 else -1
        if index < 0:
            raise ValueError(f"tokenizer: unknown character {char!r}; allowed: "
                             f"{self.alphabet!r}")
        return NUM_SPECIAL + index

    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> np.ndarray:
        """``text`` -> int32 ids ``[L]``: ``L = len(text)``, plus one for each of BOS and EOS.

        Raises:
          ValueError: one line naming the first unknown character and its position.
        """
        ids = []
        for position, char in enumerate(text):
            index = self.alphabet.find(char)
            if index < 0:
                raise ValueError(f"tokenizer: unknown character {char!r} at position "
                                 f"{position} of {text!r}; allowed: {self.alphabet!r}")
            ids.append(NUM_SPECIAL + index)
        if add_bos:
            ids.insert(0, BOS_ID)
        if add_eos:
            ids.append(EOS_ID)
        return np.asarray(ids, np.int32)

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """Ids -> text: PAD and BOS are skipped, the first EOS ends the text.

        ``ids`` is a sequence or an int array of any shape (read flattened, e.g. ``[L]``).

        Raises:
          ValueError: an id outside ``[0, vocab_size)``.
        """
        chars = []
        for token in np.asarray(ids).reshape(-1).tolist():
            if not 0 <= token < self.vocab_size:
                raise ValueError(f"tokenizer: id {token} outside [0, {self.vocab_size})")
            if token == EOS_ID:
                break
            if token >= NUM_SPECIAL:
                chars.append(self.alphabet[token - NUM_SPECIAL])
        return "".join(chars)

    def encode_prompts(self, texts: Sequence[str], length: int) -> tuple[np.ndarray, np.ndarray]:
        """Prompts -> ``(ids [B, length], mask [B, length])``: ``[BOS, chars]`` left-padded.

        Raises:
          ValueError: a prompt (with its BOS) longer than ``length``, or an unknown character.
        """
        return self._encode_padded(texts, length, "prompt", add_bos=True, add_eos=False,
                                   left=True)

    def encode_completions(self, texts: Sequence[str], length: int
                           ) -> tuple[np.ndarray, np.ndarray]:
        """Completions -> ``(ids [B, length], mask [B, length])``: ``[chars, EOS]``
        right-padded (the mask covers the EOS)."""
        return self._encode_padded(texts, length, "completion", add_bos=False, add_eos=True,
                                   left=False)

    def decode_batch(self, ids: np.ndarray) -> list[str]:
        """``[B, T]`` ids -> ``B`` strings (:meth:`decode` per row)."""
        return [self.decode(row) for row in np.asarray(ids)]

    def _encode_padded(self, texts, length, what, *, add_bos, add_eos, left):
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise ValueError(f"length: must be an integer >= 1, got {length!r}")
        ids = np.full((len(texts), length), PAD_ID, np.int32)
        mask = np.zeros((len(texts), length), np.int32)
        for row, text in enumerate(texts):
            encoded = self.encode(text, add_bos=add_bos, add_eos=add_eos)
            if encoded.shape[0] > length:
                raise ValueError(f"{what}: {text!r} needs {encoded.shape[0]} tokens, more than "
                                 f"the {length} allowed")
            n = encoded.shape[0]
            cols = slice(length - n, length) if left else slice(0, n)
            ids[row, cols] = encoded
            mask[row, cols] = 1
        return ids, mask
