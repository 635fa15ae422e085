"""Text tasks: problems as text, a verifier on the decoded completion, any tokenizer.

A **text task** is a bank of :class:`TextProblem` (the question, a reference solution,
the integer answer, a level) and a :class:`Verifier` that scores a completion's *decoded
text*, so the task does not care how text becomes tokens. :class:`TokenizedTask` is the
adapter the LM trainer trains on (the :class:`~rljax.training.lm_config.LMTask`
protocol): it tokenizes the bank once, on the host, with any
:class:`~rljax.text_tokenizer.HFTokenizer` (the shipped BPE, or the ``tokenizer.json`` of a
user's checkpoint), draws problems inside ``jit`` and decodes completions on the host
(``jax.pure_callback``) to run the verifier. :mod:`rljax.envs.text_problems` has the two
tasks built on it: GSM8K-style word problems and the arithmetic levels as text.

**The numeric verifier** (:func:`numeric_verifier`, GSM8K's convention): a completion's
final answer is the integer after its last ``####``, which must end the text (trailing
whitespace aside; commas between digits are dropped, as GSM8K's graders do):
``format = 1[such an answer]``, ``accuracy = 1[format and the integer == answer]``,
``process = accuracy`` (one step). A completion that did not end with EOS scores 0
everywhere, as in :mod:`rljax.envs.arithmetic`.

**Held out means disjoint.** Each problem goes to the training or the eval side by a
fixed 64-bit hash of its question text (:func:`is_eval_text`: BLAKE2b), so a question
is on the same side in every bank, seed and run, and no eval question appears among the
training ones. ``sample(..., split="train")`` draws only training rows,
``split="eval"`` only eval rows, ``"all"`` both.

**Layout** (as everywhere in rljax): a prompt is ``[BOS, tokens]`` left-padded with PAD to
``prompt_length`` (no BOS if the tokenizer has none, or if a chat template already put
it first); a solution is ``[tokens, EOS]`` right-padded. A tokenizer without a PAD token
pads with its EOS (masks tell them apart). With ``chat=True`` and a tokenizer that has a
chat template, the prompt text is the template applied to
``[{"role": "user", "content": question}]`` with ``add_generation_prompt=True``.

**Rewards.** A completion is read as the arithmetic task reads it: up to the first EOS
(terminated) or the first position whose mask is 0 (not terminated); its tokens are
decoded with the special tokens kept as text (so a stray ``<|pad|>`` is in the text the
verifier reads). A completion holding an id outside the tokenizer's ``[0, vocab_size)``
(a model whose embedding is padded beyond the tokenizer, as Qwen2.5's) scores 0.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import chex
import jax
import jax.numpy as jnp
import numpy as np

from rljax.envs.arithmetic import (
    SPLITS,
    Problems,
    Rewards,
    check_eval_fraction,
    weighted_reward,
)
from rljax.text_tokenizer import HFTokenizer
from rljax.types import Array, PRNGKey

_ANSWER_RE = re.compile(r"####[ \t]*(-?[0-9](?:,?[0-9])*)\s*\Z")


@dataclass(frozen=True)
class TextProblem:
    """One problem of a text task: Python scalars and strings (no arrays).

    Attributes:
      question: the prompt text (before any chat template), e.g. ``"Ava has 7 apples. ..."``.
      solution: a correct completion (without EOS), e.g. ``"7+5=12. #### 12"``.
      answer: the integer answer.
      level: the difficulty level (an int; the word problems' number of steps).
      data: integers a verifier may need beyond the answer (the arithmetic levels'
        operands ``(a, b, op)``), ``()`` otherwise.
    """

    question: str
    solution: str
    answer: int
    level: int
    data: tuple[int, ...] = ()


class Verifier(Protocol):
    """Scores one decoded completion of one problem (host side, Python scalars).

    Called as ``verifier(problem, text, terminated, max_steps)``: ``text`` is the decoded
    completion before its EOS, ``terminated`` whether an EOS ended it, ``max_steps`` the
    ``S`` of :class:`~rljax.envs.arithmetic.Rewards`' ``step_correct``. Returns
    ``{"accuracy", "format", "process": float, "step_correct": list of S floats,
    "num_steps": int}`` (:func:`~rljax.envs.arithmetic.reference_rewards`' form).
    """

    def __call__(self, problem: TextProblem, text: str, terminated: bool,
                 max_steps: int) -> dict:
        """The verdict on one completion (class docstring)."""


def gsm8k_answer(text: str) -> int | None:
    """The integer after the last ``####`` of ``text`` when it ends the text (trailing
    whitespace aside), commas between digits dropped; None otherwise (a Python scalar).

    ``"7+5=12. #### 12"`` -> 12, ``"#### 1,234\\n"`` -> 1234, ``"#### 12 apples"`` -> None.
    """
    match = _ANSWER_RE.search(text)
    return None if match is None else int(match.group(1).replace(",", ""))


def numeric_verifier(problem: TextProblem, text: str, terminated: bool,
                     max_steps: int = 1) -> dict:
    """GSM8K's numeric check (module docstring): ``format = 1[terminated and`` a
    :func:`gsm8k_answer` ``]``, ``accuracy = 1[format and it == problem.answer]``,
    ``process = accuracy``, one step (``step_correct = [accuracy, 0, ...]`` of length
    ``max_steps``)."""
    value = gsm8k_answer(text) if terminated else None
    form = value is not None
    accuracy = float(form and value == problem.answer)
    return {"accuracy": accuracy, "format": float(form), "process": accuracy,
            "step_correct": [accuracy] + [0.0] * (max_steps - 1), "num_steps": 1}


def text_hash(text: str) -> int:
    """A fixed 64-bit hash of ``text`` (BLAKE2b of its UTF-8 bytes, first 8 bytes, big
    endian), a Python scalar int: the same in every process and on every machine."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def is_eval_text(text: str, eval_fraction: float) -> bool:
    """Whether a question is on the eval side: ``text_hash(text) < eval_fraction 2^64``
    (a Python scalar bool)."""
    return text_hash(text) < int(eval_fraction * 2.0**64)


def _zero_verdict(max_steps: int) -> dict:
    return {"accuracy": 0.0, "format": 0.0, "process": 0.0,
            "step_correct": [0.0] * max_steps, "num_steps": 0}


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


@dataclass(frozen=True, eq=False)
class TokenizedTask:
    """A text task tokenized for the LM trainer (module docstring), built on the host.

    Shapes: :meth:`sample` gives :class:`~rljax.envs.arithmetic.Problems` with int32
    prompts ``[N, prompt_length]`` and solutions ``[N, solution_length]``, ``level [N]``,
    ``answer [N]`` and ``operands [N, 3] = (bank row, 0, 0)``; :meth:`rewards` scores
    completions ``[N, T]`` into :class:`~rljax.envs.arithmetic.Rewards` of float32 ``[N]``
    (``step_correct [N, max_steps]``). Compared and hashed by identity (the trainer's
    compiled programs are cached on it); its ``repr`` names its content (sizes, a hash of
    the bank, the tokenizer's fingerprint), so a cache keyed on it is safe across runs.

    Attributes:
      name: what the task is (e.g. ``"word-problems"``).
      problems: the bank, every problem of every level (distinct questions).
      verifier: the :class:`Verifier` of a decoded completion.
      tokenizer: the :class:`~rljax.text_tokenizer.HFTokenizer` of prompts and
        completions (it must have an EOS token).
      levels: the levels to draw from, uniformly over the tuple's entries; each must have
        problems on both sides of the split.
      prompt_length: ``Lp``, prompt columns with BOS; ``None``: the widest prompt of the
        bank's levels in ``levels``.
      solution_length: ``Ls``, solution columns with EOS; ``None``: the widest solution.
      eval_fraction: the share of questions held out (:func:`is_eval_text`), in
        [0.01, 0.99].
      max_steps: ``S``, the width of ``Rewards.step_correct`` (the verifier's steps).
      chat: apply the tokenizer's chat template, if it has one, to each question.
    """

    name: str
    problems: tuple[TextProblem, ...]
    verifier: Verifier
    tokenizer: HFTokenizer
    levels: tuple[int, ...]
    prompt_length: int | None = None
    solution_length: int | None = None
    eval_fraction: float = 0.2
    max_steps: int = 1
    chat: bool = True
    _bank: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self):
        tokenizer = self.tokenizer
        if not isinstance(tokenizer, HFTokenizer):
            raise ValueError(f"tokenizer: must be an HFTokenizer (load_hf_tokenizer(dir) or "
                             f"load_bpe_tokenizer()), got {type(tokenizer).__name__}")
        if tokenizer.eos_id is None:
            raise ValueError("tokenizer: has no eos_token (name one in tokenizer_config.json); "
                             "completions end at EOS")
        if not self.problems or not all(isinstance(p, TextProblem) for p in self.problems):
            raise ValueError("problems: must be a non-empty tuple of TextProblem")
        self._check_settings()
        chosen = [p for p in self.problems if p.level in self.levels]
        prompts, solutions = self._encode(chosen)
        widest_prompt = max(len(ids) for ids in prompts)
        widest_solution = max(len(ids) for ids in solutions)
        for name, widest, ids_list, texts in (
                ("prompt_length", widest_prompt, prompts, [p.question for p in chosen]),
                ("solution_length", widest_solution, solutions, [p.solution for p in chosen])):
            value = getattr(self, name)
            if value is None:
                object.__setattr__(self, name, widest)
            elif not _is_int(value) or value < widest:
                longest = texts[int(np.argmax([len(ids) for ids in ids_list]))]
                raise ValueError(f"{name}: must be an integer >= {widest} (the bank's widest, "
                                 f"{longest!r}), got {value!r}")
        self._bank.update(self._arrays(chosen, prompts, solutions))
        self.validate()

    # -- building (host) -----------------------------------------------------------------
    def _check_settings(self) -> None:
        levels = self.levels
        if not isinstance(levels, tuple) or not levels or not all(map(_is_int, levels)):
            raise ValueError(f"levels: must be a non-empty tuple of integers, got {levels!r}")
        present = sorted({p.level for p in self.problems})
        for level in levels:
            if level not in present:
                raise ValueError(f"levels: {level!r} has no problems in the bank (levels "
                                 f"{present})")
        check_eval_fraction(self.eval_fraction)
        if not _is_int(self.max_steps) or self.max_steps < 1:
            raise ValueError(f"max_steps: must be an integer >= 1, got {self.max_steps!r}")

    def prompt_text(self, question: str) -> str:
        """The text a question is tokenized from: the chat template applied to it (``chat``
        and a tokenizer with a template), else the question itself."""
        if self.chat and self.tokenizer.chat_template is not None:
            return self.tokenizer.apply_chat_template(
                [{"role": "user", "content": question}], add_generation_prompt=True)
        return question

    def _encode(self, chosen: Sequence[TextProblem]) -> tuple[list[list[int]], list[list[int]]]:
        """Token ids of each prompt (``[BOS, ...]``) and solution (``[..., EOS]``)."""
        tok = self.tokenizer
        encode = functools.partial(tok.tokenizer.encode_batch, add_special_tokens=False)
        prompts = [list(e.ids) for e in encode([self.prompt_text(p.question) for p in chosen])]
        if tok.bos_id is not None:
            prompts = [ids if ids[:1] == [tok.bos_id] else [tok.bos_id, *ids] for ids in prompts]
        solutions = [[*e.ids, tok.eos_id] for e in encode([p.solution for p in chosen])]
        if min(map(len, prompts)) == 0:
            raise ValueError("problems: a question encodes to no tokens")
        return prompts, solutions

    def _arrays(self, chosen, prompts, solutions) -> dict[str, np.ndarray]:
        """The bank as numpy arrays, rows sorted by (level, side) so that each (level,
        side) is one contiguous range ``[start, start + count)``."""
        pad = self.pad_id
        eval_side = np.asarray([is_eval_text(p.question, self.eval_fraction) for p in chosen])
        level = np.asarray([p.level for p in chosen], np.int32)
        order = np.lexsort((np.arange(len(chosen)), eval_side, level))
        n, lp, ls = len(chosen), self.prompt_length, self.solution_length
        arrays = {"prompt": np.full((n, lp), pad, np.int32),
                  "prompt_mask": np.zeros((n, lp), np.int32),
                  "solution": np.full((n, ls), pad, np.int32),
                  "solution_mask": np.zeros((n, ls), np.int32)}
        for row, index in enumerate(order):
            p, s = prompts[index], solutions[index]
            arrays["prompt"][row, lp - len(p):] = p
            arrays["prompt_mask"][row, lp - len(p):] = 1
            arrays["solution"][row, :len(s)] = s
            arrays["solution_mask"][row, :len(s)] = 1
        arrays["level"] = level[order]
        arrays["answer"] = np.asarray([chosen[i].answer for i in order], np.int32)
        arrays["held_out"] = eval_side[order]
        arrays["index"] = order  # bank row -> position in `chosen`
        ranges = np.zeros((3, len(self.levels), 2), np.int32)  # [split, level, (start, n)]
        for j, lv in enumerate(self.levels):
            for s, side in enumerate(SPLITS):
                rows = np.flatnonzero((arrays["level"] == lv) & (
                    True if side == "all" else arrays["held_out"] == (side == "eval")))
                if rows.size == 0:
                    raise ValueError(f"eval_fraction: {self.eval_fraction!r} leaves the "
                                     f"{side} side of level {lv} empty")
                ranges[s, j] = rows[0], rows.size
        arrays["ranges"] = ranges
        arrays["chosen"] = chosen
        return arrays

    # -- the LMTask protocol -------------------------------------------------------------
    def __repr__(self) -> str:
        bank = self._bank
        digest = hashlib.sha256()
        for name in ("prompt", "solution", "answer", "level", "held_out"):
            digest.update(np.ascontiguousarray(bank[name]).tobytes())
        verifier = getattr(self.verifier, "__qualname__", type(self.verifier).__qualname__)
        module = getattr(self.verifier, "__module__", "")
        return (f"TokenizedTask(name={self.name!r}, levels={self.levels}, "
                f"prompt_length={self.prompt_length}, solution_length={self.solution_length}, "
                f"eval_fraction={self.eval_fraction}, max_steps={self.max_steps}, "
                f"chat={self.chat}, problems={len(bank['level'])} "
                f"sha256={digest.hexdigest()[:16]}, tokenizer={self.tokenizer!r}, "
                f"verifier={module}.{verifier})")

    @property
    def eos_id(self) -> int:
        """The tokenizer's EOS id (completions end there)."""
        return self.tokenizer.eos_id

    @property
    def pad_id(self) -> int:
        """The tokenizer's PAD id, or its EOS id when it names no PAD token."""
        tok = self.tokenizer
        return tok.eos_id if tok.pad_id is None else tok.pad_id

    @property
    def held_out_levels(self) -> tuple[int, ...]:
        """The entries of ``levels`` with a held-out side: all of them."""
        return tuple(self.levels)

    @property
    def training_only_levels(self) -> tuple[int, ...]:
        """The entries of ``levels`` without one: none."""
        return ()

    def validate(self) -> None:
        """Raise a one-line ``ValueError`` naming the first bad field (scalars only; the
        bank was checked when the task was built)."""
        self._check_settings()
        for name in ("prompt_length", "solution_length"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")

    def split_problems(self, split: str, level: int | None = None) -> list[TextProblem]:
        """The problems ``sample(..., split=split)`` can return (of ``level``, or of every
        level in ``levels``), in bank-row order (host side)."""
        if split not in SPLITS:
            raise ValueError(f"split: must be one of {SPLITS}, got {split!r}")
        bank = self._bank
        keep = np.ones(len(bank["level"]), bool) if split == "all" else (
            bank["held_out"] == (split == "eval"))
        if level is not None:
            keep &= bank["level"] == level
        return [bank["chosen"][bank["index"][row]] for row in np.flatnonzero(keep)]

    def problem(self, row: int) -> TextProblem:
        """The problem of one bank row (``Problems.operands[n, 0]``)."""
        return self._bank["chosen"][self._bank["index"][int(row)]]

    def sample(self, key: PRNGKey, num: int, level: Array | None = None,
               split: str = "train") -> Problems:
        """Draw ``num`` problems uniformly from the bank rows of one side of the split.

        One ``jax.random.bits`` call of shape ``[num, 2]``: a level word (when ``level``
        is None: an entry of ``levels``, uniformly) and a row word, reduced modulo the
        level's row count on that side (bias below ``count / 2^32``).

        Args:
          key: a typed PRNG key.
          num: N (static).
          level: None, or int32 ``[N]`` level values; a value not in ``levels`` draws
            from ``levels[0]`` (the returned ``level`` is always the row's own).
          split: ``"train"``, ``"eval"`` or ``"all"``.

        Returns:
          :class:`~rljax.envs.arithmetic.Problems` with leading axis N; ``operands[:, 0]``
          is the bank row.
        """
        if not _is_int(num) or num < 1:
            raise ValueError(f"num: must be an integer >= 1, got {num!r}")
        if split not in SPLITS:
            raise ValueError(f"split: must be one of {SPLITS}, got {split!r}")
        bank = self._bank
        words = jax.random.bits(key, (num, 2), jnp.uint32)
        if level is None:
            group = (words[:, 0] % len(self.levels)).astype(jnp.int32)
        else:
            level = jnp.asarray(level, jnp.int32)
            chex.assert_shape(level, (num,))
            table = np.zeros(max(self.levels) + 1, np.int32)
            for j, lv in reversed(list(enumerate(self.levels))):
                table[lv] = j  # the first entry of a repeated level
            group = jnp.asarray(table)[jnp.clip(level, 0, table.shape[0] - 1)]
            known = jnp.isin(level, jnp.asarray(self.levels, jnp.int32))
            group = jnp.where(known, group, 0)
        start, count = jnp.asarray(bank["ranges"][SPLITS.index(split)])[group].T
        row = start + (words[:, 1] % count.astype(jnp.uint32)).astype(jnp.int32)
        take = lambda name: jnp.asarray(bank[name])[row]  # noqa: E731
        zeros = jnp.zeros_like(row)
        return Problems(prompt=take("prompt"), prompt_mask=take("prompt_mask"),
                        level=take("level"), operands=jnp.stack([row, zeros, zeros], axis=1),
                        answer=take("answer"), solution=take("solution"),
                        solution_mask=take("solution_mask"))

    def is_held_out(self, problems: Problems) -> Array:
        """bool ``[N]``: the problem's question is on the eval side (traceable)."""
        rows = jnp.clip(problems.operands[:, 0], 0, len(self._bank["level"]) - 1)
        return jnp.asarray(self._bank["held_out"])[rows]

    def decode_completions(self, tokens: np.ndarray, mask: np.ndarray
                           ) -> list[tuple[str, bool] | None]:
        """Host side: each completion ``[N, T]`` (numpy) as ``(text, terminated)`` read as
        the rewards read it (module docstring), or None when it holds an id outside the
        tokenizer."""
        tokens, mask = np.asarray(tokens), np.asarray(mask)
        eos, vocab = self.eos_id, self.tokenizer.vocab_size
        pieces, out = [], []
        for row, keep in zip(tokens.tolist(), mask.tolist(), strict=True):
            end, terminated = len(row), False
            for t, (token, kept) in enumerate(zip(row, keep, strict=True)):
                if not kept or token == eos:
                    end, terminated = t, bool(kept)
                    break
            ids = row[:end]
            if any(not 0 <= i < vocab for i in ids):
                out.append(None)
                continue
            pieces.append(ids)
            out.append(terminated)
        texts = iter(self.tokenizer.tokenizer.decode_batch(pieces, skip_special_tokens=False)
                     if pieces else [])
        return [None if t is None else (next(texts), t) for t in out]

    def host_rewards(self, tokens: np.ndarray, mask: np.ndarray, rows: np.ndarray
                     ) -> tuple[np.ndarray, ...]:
        """The verifier over completions (host side, numpy): ``tokens, mask [..., N, T]``
        and bank ``rows [..., N]`` with any (broadcastable) leading axes -> ``(accuracy,
        format, process [..., N] float32, step_correct [..., N, S] float32, num_steps
        [..., N] int32)``."""
        tokens, mask, rows = np.asarray(tokens), np.asarray(mask), np.asarray(rows)
        n, t = tokens.shape[-2:]
        lead = np.broadcast_shapes(tokens.shape[:-2], mask.shape[:-2], rows.shape[:-1])
        tokens = np.broadcast_to(tokens, (*lead, n, t)).reshape(-1, t)
        mask = np.broadcast_to(mask, (*lead, n, t)).reshape(-1, t)
        rows = np.broadcast_to(rows, (*lead, n)).reshape(-1)
        s = self.max_steps
        verdicts = []
        for decoded, row in zip(self.decode_completions(tokens, mask), rows.tolist(),
                                strict=True):
            if decoded is None:
                verdicts.append(_zero_verdict(s))
            else:
                verdicts.append(self.verifier(self.problem(row), decoded[0], decoded[1], s))
        column = lambda k, dtype: np.asarray([v[k] for v in verdicts], dtype).reshape(  # noqa: E731
            *lead, n)
        step = np.asarray([v["step_correct"] for v in verdicts], np.float32).reshape(*lead, n, s)
        return (column("accuracy", np.float32), column("format", np.float32),
                column("process", np.float32), step, column("num_steps", np.int32))

    def rewards(self, problems: Problems, completion: Array, completion_mask: Array
                ) -> Rewards:
        """Score completions by decoding them on the host and running the verifier
        (``jax.pure_callback``; works under ``jit`` and ``vmap``, which hands the
        callback the whole batch at once).

        Args:
          problems: the N problems (only ``operands[:, 0]``, the bank row, is read).
          completion: int32 ``[N, T]`` tokens ``[tokens, EOS]``, anything after the EOS.
          completion_mask: ``[N, T]`` (int or bool), 1 on generated tokens; a 0 before
            any EOS ends the completion unterminated.

        Returns:
          :class:`~rljax.envs.arithmetic.Rewards` with leading axis N and
          ``step_correct [N, max_steps]``.
        """
        chex.assert_rank([completion, completion_mask], 2)
        chex.assert_equal_shape([completion, completion_mask])
        n = completion.shape[0]
        chex.assert_shape(problems.operands, (n, 3))
        f32 = jax.ShapeDtypeStruct((n,), jnp.float32)
        shapes = (f32, f32, f32, jax.ShapeDtypeStruct((n, self.max_steps), jnp.float32),
                  jax.ShapeDtypeStruct((n,), jnp.int32))
        accuracy, form, process, step_correct, num_steps = jax.pure_callback(
            self.host_rewards, shapes, jnp.asarray(completion, jnp.int32),
            jnp.asarray(completion_mask, jnp.int32), problems.operands[:, 0],
            vmap_method="expand_dims")
        return Rewards(accuracy=accuracy, format=form, process=process,
                       step_correct=step_correct, num_steps=num_steps)

    def combined_reward(self, rewards: Rewards, weights: dict[str, float | Array]) -> Array:
        """``r = sum_k w_k * rewards.k`` over ``k`` in ``weights`` (keys among
        ``"accuracy"``, ``"format"``, ``"process"``): float32 ``[N]``."""
        return weighted_reward(rewards, weights)


__all__ = [
    "TextProblem",
    "TokenizedTask",
    "Verifier",
    "gsm8k_answer",
    "is_eval_text",
    "numeric_verifier",
    "text_hash",
]
